"""Engine images as one file: `kitctl images save` / `kitctl images load`, for hosts without a registry.

The archive is a gzip-compressed `docker save` tarball (so a plain `docker load -i FILE` reads it
too) whose first member, `kitctl-images.json`, says for each image: the compose service and
variant it was saved as, its image ID (the sha256 of its image_config), its labels, and the sha256 of
the lock file(s) its build args name. `load` checks every ID and label set against the
configs inside the archive *before* anything reaches the daemon, loads it, checks again on the
daemon's side, and tags each image with the name this checkout's compose.yaml gives it.

Docker itself verifies every layer against the config's diff IDs on load, so an image ID that
matches means the whole image does. Every problem is an `ImageError` (one line).
"""
from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .compose import Compose, ComposeError
from .store import ImageError, engine_image_problem, one_line

MANIFEST_NAME = "kitctl-images.json"
FORMAT = "kitctl-images/1"
SMALL_MEMBER = 8 << 20  # configs and manifests are small; layers are streamed past, never held
CHUNK = 1 << 20


@dataclass(frozen=True)
class LockHash:
    path: str  # relative to the build context, e.g. images/pytorch/requirements-cpu.lock
    sha256: str


@dataclass(frozen=True)
class SavedImage:
    service: str
    variant: str | None
    image: str  # the compose name it had where it was saved
    id: str  # sha256:<config digest>
    labels: dict[str, str]
    locks: tuple[LockHash, ...]


@dataclass(frozen=True)
class Manifest:
    images: tuple[SavedImage, ...]
    kitctl_version: str
    saved_at: str
    format: str = FORMAT

    def to_json(self) -> bytes:
        doc = asdict(self)
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "Manifest":
        try:
            doc = json.loads(raw)
            if doc.get("format") != FORMAT:
                raise ImageError(f"{where}: {MANIFEST_NAME} is format {doc.get('format')!r}, this kitctl reads {FORMAT}")
            images = tuple(
                SavedImage(service=str(i["service"]), variant=i.get("variant"), image=str(i["image"]), id=str(i["id"]),
                           labels={str(k): str(v) for k, v in (i.get("labels") or {}).items()},
                           locks=tuple(LockHash(str(lk["path"]), str(lk["sha256"])) for lk in i.get("locks") or ()))
                for i in doc["images"])
            return cls(images=images, kitctl_version=str(doc.get("kitctl_version", "?")),
                       saved_at=str(doc.get("saved_at", "?")))
        except ImageError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ImageError(f"{where}: {MANIFEST_NAME} is malformed ({type(exc).__name__}: {one_line(exc, 120)})") from None


def lock_hashes(compose: Compose, service: str, variant: str | None) -> tuple[LockHash, ...]:
    """The lock files a build uses: every build arg named *LOCK whose value is a file next to the Dockerfile."""
    svc = compose.service(service)
    args = compose.build_args(service, variant=variant)
    out = []
    for key, value in sorted(args.items()):
        if not key.endswith("LOCK") or not value:
            continue
        f = (svc.context / svc.dockerfile).parent / value  # not resolved: named as the build context names it
        if f.is_file():
            try:
                rel = os.path.normpath(f.relative_to(svc.context))
            except ValueError:
                rel = str(f)
            out.append(LockHash(rel, hashlib.sha256(f.read_bytes()).hexdigest()))
    return tuple(out)


# ---- streams ------------------------------------------------------------------------------------

class _IterReader(io.RawIOBase):
    """A byte iterator (the daemon's `docker save` stream) as a readable file for tarfile."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _save_stream(client: Any, names: list[str]) -> Iterator[bytes]:
    """GET /images/get?names=…: one tarball for several images, shared layers once (the SDK's
    get_image takes a single name)."""
    api = client.api
    res = api._get(api._url("/images/get"), params={"names": names}, stream=True)
    return api._stream_raw_result(res, CHUNK, False)


def _labels_of(image_config: dict[str, Any]) -> dict[str, str]:
    return dict((image_config.get("config") or image_config.get("Config") or {}).get("Labels") or {})


# ---- save -----------------------------------------------------------------------------------------

def save(client: Any, compose: Compose, targets: list[tuple[str, str | None]], out: Path, *,
         level: int = 1, force: bool = False, kitctl_version: str = "?",
         on_progress: Callable[[int], None] | None = None) -> Manifest:
    """Write the images of (service, variant) `targets` to `out` (gzip tar with a manifest first)."""
    import docker.errors
    import requests.exceptions

    out = Path(out)
    if out.exists() and not force:
        raise ImageError(f"{out} exists: give another -o FILE, or --force to replace it")
    if not out.parent.is_dir():
        raise ImageError(f"{out.parent} is not a directory")
    saved: list[SavedImage] = []
    names: list[str] = []
    for service, variant in targets:
        try:
            name = compose.image(service, variant)
        except ComposeError as exc:
            raise ImageError(str(exc)) from None
        try:
            img = client.images.get(name)
        except docker.errors.ImageNotFound:
            raise ImageError(f"image {name} ({service}{', variant ' + variant if variant else ''}) is not present: "
                             f"build it first (kitctl images build {service}"
                             f"{' --variant ' + variant if variant else ''})") from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise ImageError(f"the Docker daemon could not look up {name}: {one_line(exc)}") from None
        labels = dict((img.attrs.get("Config") or {}).get("Labels") or {})
        if not compose.service(service).loaders:  # an engine image: it must be that engine's
            problem = engine_image_problem(labels, service)
            if problem:
                raise ImageError(f"{name} is not the {service} engine image: {problem}")
        saved.append(SavedImage(service=service, variant=variant, image=name, id=img.id, labels=labels,
                                locks=lock_hashes(compose, service, variant)))
        if name not in names:
            names.append(name)
    manifest = Manifest(images=tuple(saved), kitctl_version=kitctl_version,
                        saved_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    tmp = out.with_name(f".{out.name}.partial")
    written = 0
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            body = manifest.to_json()
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
            src = tarfile.open(fileobj=io.BufferedReader(_IterReader(_save_stream(client, names)), CHUNK), mode="r|")
            for member in src:
                tar.addfile(member, src.extractfile(member) if member.isfile() else None)
                written += member.size
                if on_progress is not None:
                    on_progress(written)
        os.replace(tmp, out)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        tmp.unlink(missing_ok=True)
        raise ImageError(f"saving {', '.join(names)} failed: {one_line(exc)}") from None
    except tarfile.TarError as exc:
        tmp.unlink(missing_ok=True)
        raise ImageError(f"saving {', '.join(names)} failed: the daemon's archive is not a tar ({one_line(exc)})") from None
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ImageError(f"writing {out} failed: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


# ---- load -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checked:
    """What the archive holds, as read from it: the manifest and, per image ID found, its labels."""

    manifest: Manifest
    configs: dict[str, dict[str, str]]  # image ID → labels, from the configs inside


def inspect_archive(path: Path, on_progress: Callable[[int], None] | None = None) -> Checked:
    """Read the whole archive once: the manifest, and every image config's digest (= its ID) and labels.

    Refuses (ImageError) when a listed image is missing, its ID is not its config's digest, or its labels
    differ from the manifest's."""
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise ImageError(f"{path}: no such file")
    small: dict[str, bytes] = {}
    manifest: Manifest | None = None
    done = 0
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for member in tar:
                if member.isfile() and member.size <= SMALL_MEMBER:
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    if member.name == MANIFEST_NAME:
                        manifest = Manifest.from_json(data, where)
                    else:
                        small[member.name.lstrip("./")] = data
                done += member.size
                if on_progress is not None:
                    on_progress(done)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, (gzip.BadGzipFile, EOFError)) and exc.errno:
            raise ImageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        raise ImageError(f"{path}: not a kitctl image archive (a gzip-compressed tar): {one_line(exc, 120)}") from None
    if manifest is None:
        raise ImageError(f"{path}: no {MANIFEST_NAME} inside: not written by `kitctl images save` "
                         f"(a plain `docker save` archive loads with `docker load`)")
    try:
        docker_manifest = json.loads(small["manifest.json"])
    except (KeyError, ValueError):
        raise ImageError(f"{path}: no readable manifest.json inside: not a `docker save` archive") from None
    configs: dict[str, dict[str, str]] = {}
    for entry in docker_manifest if isinstance(docker_manifest, list) else []:
        blob = small.get(str(entry.get("Config", "")).lstrip("./"))
        if blob is None:
            raise ImageError(f"{path}: the config {entry.get('Config')!r} that manifest.json names is missing")
        try:
            labels = _labels_of(json.loads(blob))
        except ValueError:
            raise ImageError(f"{path}: the config {entry.get('Config')!r} is not JSON") from None
        configs["sha256:" + hashlib.sha256(blob).hexdigest()] = labels
    for img in manifest.images:
        if img.id not in configs:
            raise ImageError(f"{path}: {img.image} is listed as {img.id[:19]}…, but no image config inside has that "
                             f"digest (the archive was altered or is incomplete)")
        if configs[img.id] != img.labels:
            diff = sorted(k for k in set(configs[img.id]) | set(img.labels)
                          if configs[img.id].get(k) != img.labels.get(k))
            raise ImageError(f"{path}: {img.image}'s labels inside differ from {MANIFEST_NAME}'s ({', '.join(diff)})")
    return Checked(manifest=manifest, configs=configs)


@dataclass(frozen=True)
class Loaded:
    service: str
    variant: str | None
    image: str  # the name this checkout's compose.yaml gives it (now tagged)
    id: str
    replaced_id: str | None  # what that name pointed at before, when something else
    lock_differs: tuple[str, ...]  # lock files whose hash here differs from the image's


def load(client: Any, compose: Compose, path: Path, *,
         on_progress: Callable[[int], None] | None = None) -> list[Loaded]:
    """Verify `path`, load it into the daemon, verify again, tag as compose.yaml names each image."""
    import docker.errors
    import requests.exceptions

    checked = inspect_archive(path, on_progress)
    plan: list[tuple[SavedImage, str, tuple[str, ...]]] = []
    for img in checked.manifest.images:
        try:
            name = compose.image(img.service, img.variant)
        except ComposeError as exc:
            raise ImageError(f"{path}: {img.image} was saved as service {img.service!r}"
                             f"{' variant ' + repr(img.variant) if img.variant else ''}, which this checkout's "
                             f"compose.yaml lacks ({exc})") from None
        if not compose.service(img.service).loaders:
            problem = engine_image_problem(img.labels, img.service)
            if problem:
                raise ImageError(f"{path}: {img.image} is not the {img.service} engine image: {problem}")
        here = {lk.path: lk.sha256 for lk in lock_hashes(compose, img.service, img.variant)}
        differs = tuple(lk.path for lk in img.locks if here.get(lk.path) not in (None, lk.sha256))
        plan.append((img, name, differs))
    before: dict[str, str | None] = {}
    try:
        for _, name, _ in plan:
            try:
                before[name] = client.images.get(name).id
            except docker.errors.ImageNotFound:
                before[name] = None
        with open(path, "rb") as f:
            for chunk in client.api.load_image(f, quiet=True):
                if isinstance(chunk, dict) and (chunk.get("error") or chunk.get("errorDetail")):
                    msg = chunk.get("error") or (chunk.get("errorDetail") or {}).get("message")
                    raise ImageError(f"loading {path} failed: {one_line(str(msg))}")
        out = []
        for img, name, differs in plan:
            got = client.images.get(img.id)
            labels = dict((got.attrs.get("Config") or {}).get("Labels") or {})
            if got.id != img.id or labels != img.labels:
                raise ImageError(f"loading {path}: the daemon holds {got.id[:19]}… with other labels than the archive's "
                                 f"{img.image}")
            repo, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
            got.tag(repo, tag)
            prev = before.get(name)
            out.append(Loaded(service=img.service, variant=img.variant, image=name, id=img.id,
                              replaced_id=prev if prev and prev != img.id else None, lock_differs=differs))
        return out
    except docker.errors.ImageNotFound as exc:
        raise ImageError(f"loading {path}: an image the archive lists is not in the daemon afterwards ({one_line(exc)})") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise ImageError(f"loading {path} failed: {one_line(exc)}") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
