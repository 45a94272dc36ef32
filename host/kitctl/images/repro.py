"""Reproducible images with the classic builder: SOURCE_DATE_EPOCH in, timestamps rewritten out.

The Docker SDK speaks only the classic builder, which stamps every history entry and the config
with the wall clock, records the build container's ID (`container`, `container_config`) and
writes every file with the time it was made. Two builds of the same inputs therefore never share
an image ID, even when every file's bytes are the same. `normalize` does what BuildKit's
`rewrite-timestamp=true` exporter does, after the build: it reads the image back (`docker save`),
clamps every file's mtime in every layer to SOURCE_DATE_EPOCH, drops the build-container fields,
sets every `created` to SOURCE_DATE_EPOCH and loads the result, whose ID is then a function of the
files' contents, modes and owners, the Dockerfile's steps and the labels alone.

What it cannot fix is a file whose *bytes* differ between builds (a log with the date in it, a
bytecode file with a source mtime inside, a random salt): the Dockerfiles avoid those (pip's
bytecode under SOURCE_DATE_EPOCH is hash-based, apt's logs and caches are removed), and
`compare` names, per layer, the files that still differ.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .store import ImageError, one_line
from .travel import CHUNK, _IterReader, _save_stream

# PAX keys that carry access/change times or are re-derived by tarfile; dropped from every entry.
_VOLATILE_PAX = ("atime", "ctime", "mtime")


def source_date_epoch(root: str | os.PathLike[str]) -> int:
    """SOURCE_DATE_EPOCH: the environment's, else the last commit's time (the convention of
    reproducible-builds.org), else refuse: the wall clock would defeat the point."""
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ImageError(f"SOURCE_DATE_EPOCH={env!r} is not a Unix time in seconds") from None
        if value < 0:
            raise ImageError(f"SOURCE_DATE_EPOCH={env!r} is negative")
        return value
    try:
        r = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%ct"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        r = None
    if r is None or r.returncode != 0 or not r.stdout.strip().isdigit():
        raise ImageError(f"no SOURCE_DATE_EPOCH: set it, or build from a git checkout ({root} has no commit to date)")
    return int(r.stdout.strip())


def iso(epoch: int) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def reproducible_build_args(root: str | os.PathLike[str], epoch: int) -> dict[str, str]:
    """The build args of a reproducible build: SOURCE_DATE_EPOCH, and a BUILD_DATE label that is that time,
    not the wall clock (a label is part of the config, so of the image ID)."""
    return {"SOURCE_DATE_EPOCH": str(epoch), "BUILD_DATE": iso(epoch)}


@dataclass(frozen=True)
class Layer:
    diff_id: str  # after normalization
    created_by: str  # the Dockerfile step that made it (history)
    files: dict[str, str] = field(repr=False)  # path → sha256 of content (or link target / type)


@dataclass(frozen=True)
class Normalized:
    image: str
    id: str  # the new image ID
    build_id: str  # the ID the builder gave it
    layers: tuple[Layer, ...]


def _normalize_layer(src: Any, dst: Any, epoch: int) -> dict[str, str]:
    """Copy a layer tar, clamping mtimes to `epoch` and dropping atime/ctime; return path → content digest."""
    files: dict[str, str] = {}
    with tarfile.open(fileobj=src, mode="r|") as tin, \
            tarfile.open(fileobj=dst, mode="w|", format=tarfile.PAX_FORMAT) as tout:
        for m in tin:
            m.mtime = min(int(m.mtime), epoch)
            m.pax_headers = {k: v for k, v in m.pax_headers.items() if k not in _VOLATILE_PAX}
            if m.isfile():
                f = tin.extractfile(m)
                h = hashlib.sha256()
                buf = tempfile.SpooledTemporaryFile(max_size=64 << 20)
                while True:
                    block = f.read(CHUNK)  # type: ignore[union-attr]
                    if not block:
                        break
                    h.update(block)
                    buf.write(block)
                buf.seek(0)
                tout.addfile(m, buf)
                buf.close()
                files[m.name] = f"{h.hexdigest()} {m.mode:o} {m.uid}:{m.gid}"
            else:
                tout.addfile(m)
                files[m.name] = f"{'link ' + m.linkname if m.issym() or m.islnk() else m.type!r} {m.mode:o} {m.uid}:{m.gid}"
    return files


class _HashingWriter(io.RawIOBase):
    def __init__(self, f: Any) -> None:
        self.f, self.h = f, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.h.update(b)
        return self.f.write(b)


def normalize(client: Any, image: str, epoch: int, *, base: str | None = None,
              workdir: str | None = None) -> Normalized:
    """Rewrite `image` (a tag) so that its ID depends on contents only; re-tag it; return the new ID and
    per-layer file digests. The layers of `base` (the FROM image, an input like any other) are kept as they
    are, so the image still shares them. The builder's original image is removed when nothing names it."""
    import docker.errors
    import requests.exceptions

    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ImageError(f"image {image} is not present") from None
    diff_ids = list((img.attrs.get("RootFS") or {}).get("Layers") or [])
    keep: set[str] = set()
    if base:
        try:
            base_layers = list((client.images.get(base).attrs.get("RootFS") or {}).get("Layers") or [])
        except docker.errors.ImageNotFound:
            base_layers = []
        if base_layers == diff_ids[:len(base_layers)]:
            keep = set(base_layers)
    tmp = Path(tempfile.mkdtemp(prefix="kitctl-repro-", dir=workdir))
    try:
        rewritten: dict[str, tuple[str, dict[str, str]]] = {}  # old diff_id → (new diff_id, files)
        config_raw: bytes | None = None
        try:
            src = tarfile.open(fileobj=io.BufferedReader(_IterReader(_save_stream(client, [image])), CHUNK), mode="r|")
            for m in src:
                if not m.isfile():
                    continue
                f = src.extractfile(m)
                spool = tempfile.SpooledTemporaryFile(max_size=8 << 20, dir=tmp)
                h = hashlib.sha256()
                while True:
                    block = f.read(CHUNK)  # type: ignore[union-attr]
                    if not block:
                        break
                    h.update(block)
                    spool.write(block)
                digest = "sha256:" + h.hexdigest()
                spool.seek(0)
                if digest == img.id:
                    config_raw = spool.read()
                elif digest in keep and digest not in rewritten:
                    with open(tmp / f"{digest.split(':', 1)[1]}.tar", "wb") as out:
                        shutil.copyfileobj(spool, out, CHUNK)
                    rewritten[digest] = (digest, {})
                elif digest in diff_ids and digest not in rewritten:
                    n = len(rewritten)
                    with open(tmp / f"{n}.tar", "wb") as out:
                        hw = _HashingWriter(out)
                        files = _normalize_layer(spool, io.BufferedWriter(hw, CHUNK), epoch)
                    rewritten[digest] = ("sha256:" + hw.h.hexdigest(), files)
                    os.rename(tmp / f"{n}.tar", tmp / f"{hw.h.hexdigest()}.tar")
                spool.close()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise ImageError(f"reading {image} back failed: {one_line(exc)}") from None
        except tarfile.TarError as exc:
            raise ImageError(f"reading {image} back failed: not a tar ({one_line(exc)})") from None
        if config_raw is None or any(d not in rewritten for d in diff_ids):
            raise ImageError(f"reading {image} back: the daemon's archive lacks its config or a layer")
        image_config = json.loads(config_raw)
        image_config.pop("container", None)
        image_config.pop("container_config", None)  # the build container's ID and hostname
        if isinstance(image_config.get("config"), dict):
            image_config["config"]["Hostname"] = ""
            image_config["config"]["Image"] = ""  # the builder's previous step's image ID: a timestamp in disguise
        image_config["created"] = iso(epoch)
        for h in image_config.get("history") or []:
            h["created"] = iso(epoch)
        new_diff_ids = [rewritten[d][0] for d in diff_ids]
        image_config["rootfs"] = {"type": "layers", "diff_ids": new_diff_ids}
        body = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
        new_id = "sha256:" + hashlib.sha256(body).hexdigest()
        archive = tmp / "image.tar"
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            def add(name: str, data: bytes | None = None, path: Path | None = None) -> None:
                info = tarfile.TarInfo(name)
                info.mtime, info.mode = epoch, 0o644
                if path is not None:
                    info.size = path.stat().st_size
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    info.size = len(data or b"")
                    tar.addfile(info, io.BytesIO(data or b""))

            layer_names = []
            for d in dict.fromkeys(new_diff_ids):
                hexd = d.split(":", 1)[1]
                add(f"{hexd}/layer.tar", path=tmp / f"{hexd}.tar")
            for d in new_diff_ids:
                layer_names.append(f"{d.split(':', 1)[1]}/layer.tar")
            add(f"{new_id.split(':', 1)[1]}.json", body)
            add("manifest.json", json.dumps([{"Config": f"{new_id.split(':', 1)[1]}.json", "RepoTags": [image],
                                              "Layers": layer_names}]).encode())
        try:
            with open(archive, "rb") as fh:
                for chunk in client.api.load_image(fh, quiet=True):
                    if isinstance(chunk, dict) and (chunk.get("error") or chunk.get("errorDetail")):
                        raise ImageError(f"loading the normalized {image} failed: "
                                         f"{one_line(str(chunk.get('error') or chunk.get('errorDetail')))}")
            got = client.images.get(image).id
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise ImageError(f"loading the normalized {image} failed: {one_line(exc)}") from None
        if got != new_id:
            raise ImageError(f"the daemon gave the normalized {image} the ID {got}, not {new_id}")
        if img.id != new_id:
            try:
                if not (client.images.get(img.id).attrs.get("RepoTags") or []):
                    client.images.remove(img.id, noprune=False)
            except docker.errors.APIError:
                pass  # a container or a child image still uses it: leave it
        history = [h for h in image_config.get("history") or [] if not h.get("empty_layer")]
        layers = tuple(Layer(diff_id=new_diff_ids[i], created_by=(history[i].get("created_by", "?")
                                                                   if i < len(history) else "?"),
                             files=rewritten[d][1]) for i, d in enumerate(diff_ids))
        return Normalized(image=image, id=new_id, build_id=img.id, layers=layers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class LayerDifference:
    index: int
    created_by: str
    paths: tuple[str, ...]  # files whose content, mode or owner differ, or that only one build has


def compare(a: Normalized, b: Normalized) -> list[LayerDifference]:
    """The layers of two builds that differ, each with the files that make it differ."""
    out = []
    for i, (la, lb) in enumerate(zip(a.layers, b.layers)):
        if la.diff_id == lb.diff_id:
            continue
        paths = sorted(p for p in set(la.files) | set(lb.files) if la.files.get(p) != lb.files.get(p))
        out.append(LayerDifference(i, la.created_by, tuple(paths)))
    if len(a.layers) != len(b.layers):
        out.append(LayerDifference(min(len(a.layers), len(b.layers)), "(the builds have different layer counts)", ()))
    return out
