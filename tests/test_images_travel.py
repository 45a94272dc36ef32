"""`kitctl images save/load` (one compressed file, no registry) and reproducible builds
(`kitctl images build --reproducible/--check-reproducible`, host/kitctl/images/repro.py).

The archive checks run on archives made here in `docker save`'s format (no daemon needed); the
round trips run on the real daemon with images this file makes under its own names
(kitctl-test-travel/...), through a KITCTL_HOME whose compose.yaml names them, so the shared
kitctl/*:ci images are never untagged.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from kitctl.images import repro, travel  # noqa: E402
from kitctl.images.store import ImageError  # noqa: E402

from conftest import BASE_IMAGE, unavailable  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
LABELS = {"kit.engine": "pytorch", "kit.trial-protocol": "1", "kit.framework.version": "0+test"}
TEST_REPO = f"kitctl-test-travel/pytorch-{os.getpid()}"


def kitctl(*args, home: Path | None = None, env=None, timeout=900):
    e = {**os.environ, "PYTHONPATH": str(ROOT / "host"), "KITCTL_COMPOSE": "kitctl"}
    e.pop("KITCTL_IMAGE_VARIANT", None)  # only what a test passes
    e.update(env or {})
    if home is not None:
        e["KITCTL_HOME"] = str(home)
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout, env=e)


# ---- archives in docker save's format, made here ---------------------------------------------------

def _tar_bytes(files: dict[str, bytes], mtime: int = 0) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_archive(path: Path, *, labels=LABELS, manifest_labels=None, manifest_id=None, with_manifest=True,
                 service="pytorch", variant="cpu-ci") -> str:
    layer = _tar_bytes({"f": b"hello"})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    members = {f"{diff_id[7:]}/layer.tar": layer, f"{image_id[7:]}.json": config,
               "manifest.json": json.dumps([{"Config": f"{image_id[7:]}.json", "RepoTags": ["a/b:c"],
                                             "Layers": [f"{diff_id[7:]}/layer.tar"]}]).encode()}
    if with_manifest:
        m = travel.Manifest(images=(travel.SavedImage(service, variant, "a/b:c", manifest_id or image_id,
                                                      dict(manifest_labels if manifest_labels is not None else labels),
                                                      ()),), kitctl_version="test", saved_at="now")
        members = {travel.MANIFEST_NAME: m.to_json(), **members}
    path.write_bytes(gzip.compress(_tar_bytes(members)))
    return image_id


def test_an_intact_archive_is_read_back_with_its_ids_and_labels(tmp_path):
    image_id = make_archive(tmp_path / "a.tar.gz")
    checked = travel.inspect_archive(tmp_path / "a.tar.gz")
    assert checked.configs == {image_id: LABELS}
    assert checked.manifest.images[0].id == image_id and checked.manifest.images[0].variant == "cpu-ci"


@pytest.mark.parametrize("kwargs, message", [
    (dict(manifest_labels={**LABELS, "kit.framework.version": "9"}), "labels inside differ .*kit.framework.version"),
    (dict(manifest_id="sha256:" + "0" * 64), "no image config inside has that digest"),
    (dict(with_manifest=False), "no kitctl-images.json inside"),
])
def test_an_altered_or_foreign_archive_is_refused_in_one_line(tmp_path, kwargs, message):
    make_archive(tmp_path / "a.tar.gz", **kwargs)
    with pytest.raises(ImageError, match=message) as e:
        travel.inspect_archive(tmp_path / "a.tar.gz")
    assert "\n" not in str(e.value)


def test_load_refuses_what_is_not_an_archive_before_any_daemon(tmp_path):
    (tmp_path / "x.tar.gz").write_bytes(b"not gzip at all")
    p = kitctl("images", "load", str(tmp_path / "x.tar.gz"), env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0, p.stderr
    p = kitctl("images", "load", str(tmp_path / "missing.tar.gz"))
    assert p.returncode == 2 and "missing.tar.gz: no such file" in p.stderr and "Traceback" not in p.stderr


def test_a_layer_with_other_mtimes_normalizes_to_the_same_bytes(tmp_path):
    """The core of --reproducible: only the timestamps differ → the same layer digest after the rewrite."""
    outs = []
    for mtime in (1_700_000_000, 1_800_000_000):
        src = io.BytesIO(_tar_bytes({"opt/x/f": b"same bytes", "opt/x/g": b"other"}, mtime=mtime))
        dst = io.BytesIO()
        files = repro._normalize_layer(src, dst, 1_600_000_000)
        outs.append(dst.getvalue())
    assert outs[0] == outs[1]
    assert files["opt/x/f"].startswith(hashlib.sha256(b"same bytes").hexdigest())
    with tarfile.open(fileobj=io.BytesIO(outs[0])) as t:
        assert {m.mtime for m in t.getmembers()} == {1_600_000_000}
    older = io.BytesIO()
    repro._normalize_layer(io.BytesIO(_tar_bytes({"f": b"x"}, mtime=1000)), older, 1_600_000_000)
    with tarfile.open(fileobj=io.BytesIO(older.getvalue())) as t:
        assert t.getmembers()[0].mtime == 1000  # clamped, never moved forward


def test_source_date_epoch_comes_from_the_env_or_the_last_commit(monkeypatch, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234")
    assert repro.source_date_epoch(ROOT) == 1234
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ImageError, match="not a Unix time"):
        repro.source_date_epoch(ROOT)
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    if commit.returncode == 0:
        assert repro.source_date_epoch(ROOT) == int(commit.stdout)
    with pytest.raises(ImageError, match="no SOURCE_DATE_EPOCH"):
        repro.source_date_epoch(tmp_path)
    assert repro.reproducible_build_args(ROOT, 0) == {"SOURCE_DATE_EPOCH": "0", "BUILD_DATE": "1970-01-01T00:00:00Z"}


# ---- on the daemon ----------------------------------------------------------------------------------

def kit_home(tmp_path: Path, image: str) -> Path:
    """A KITCTL_HOME whose compose.yaml names `image` as pytorch's cpu-ci build (trials/ and images/ linked)."""
    home = tmp_path / "home"
    home.mkdir()
    for d in ("trials", "images"):
        (home / d).symlink_to(ROOT / d)
    text = (ROOT / "compose.yaml").read_text()
    assert "image: kitctl/pytorch:ci\n" in text
    (home / "compose.yaml").write_text(text.replace("image: kitctl/pytorch:ci\n", f"image: {image}\n"))
    return home


def _remove(client, ref: str) -> None:
    import docker

    try:
        client.images.remove(ref, force=True)
    except docker.errors.APIError:
        pass


@pytest.fixture
def tiny_image(client, tmp_path):
    """A small image labelled as the kit's pytorch image, under this test's own name."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "f").write_text("payload\n")
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY f /f\nLABEL " +
                                    " ".join(f'{k}="{v}"' for k, v in LABELS.items()) + "\n")
    tag = f"{TEST_REPO}:tiny"
    img, _ = client.images.build(path=str(ctx), tag=tag, rm=True)
    yield tag, img.id
    _remove(client, img.id)


@pytest.mark.docker
def test_save_remove_load_restores_the_name_id_and_labels(client, tiny_image, tmp_path):
    tag, image_id = tiny_image
    home = kit_home(tmp_path, tag)
    out = tmp_path / "kit-images.tar.gz"
    p = kitctl("images", "save", "pytorch", "--variant", "cpu-ci", "-o", str(out), home=home)
    assert p.returncode == 0, p.stderr + p.stdout
    m = travel.inspect_archive(out).manifest
    (saved,) = m.images
    assert (saved.service, saved.variant, saved.image, saved.id) == ("pytorch", "cpu-ci", tag, image_id)
    assert saved.labels == LABELS
    assert [lk.path for lk in saved.locks] == ["images/pytorch/requirements-cpu.lock"]
    assert saved.locks[0].sha256 == hashlib.sha256((ROOT / saved.locks[0].path).read_bytes()).hexdigest()
    again = kitctl("images", "save", "pytorch", "--variant", "cpu-ci", "-o", str(out), home=home)
    assert again.returncode == 2 and "exists" in again.stderr  # never overwritten silently

    client.images.remove(tag)  # the only name: the image is gone
    p = kitctl("images", "load", str(out), home=home)
    assert p.returncode == 0, p.stderr + p.stdout
    assert client.images.get(tag).id == image_id
    assert client.images.get(tag).labels == LABELS

    # Another checkout names the cpu-ci build otherwise: load tags it with that name.
    (tmp_path / "o").mkdir()
    other = kit_home(tmp_path / "o", f"{TEST_REPO}:renamed")
    p = kitctl("images", "load", str(out), home=other)
    assert p.returncode == 0, p.stderr + p.stdout
    assert client.images.get(f"{TEST_REPO}:renamed").id == image_id


@pytest.mark.docker
def test_an_altered_archive_is_refused_and_nothing_is_tagged(client, tiny_image, tmp_path):
    tag, image_id = tiny_image
    home = kit_home(tmp_path, tag)
    out = tmp_path / "a.tar.gz"
    assert kitctl("images", "save", "pytorch", "--variant", "cpu-ci", "-o", str(out), home=home).returncode == 0
    members = {}
    with tarfile.open(out, "r:gz") as t:
        for mem in t.getmembers():
            if mem.isfile():
                members[mem.name] = t.extractfile(mem).read()
    doc = json.loads(members[travel.MANIFEST_NAME])
    doc["images"][0]["labels"]["kit.framework.version"] = "2.99.0"
    members[travel.MANIFEST_NAME] = json.dumps(doc).encode()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(gzip.compress(_tar_bytes(members)))
    client.images.remove(tag)
    p = kitctl("images", "load", str(bad), home=home)
    assert p.returncode == 2 and "labels inside differ" in p.stderr and "Traceback" not in p.stderr
    import docker

    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(tag)


@pytest.mark.docker
def test_a_saved_cpu_image_loads_and_runs(client, image, tmp_path):
    """CI's CPU pytorch image: save → remove the name → load → `kitctl run --runtime docker` uses it."""
    tag = f"{TEST_REPO}:travel"
    source_id = client.images.get(image).id
    client.images.get(image).tag(*tag.rsplit(":", 1))
    try:
        home = kit_home(tmp_path, tag)
        out = tmp_path / "pytorch-ci.tar.gz"
        p = kitctl("images", "save", "pytorch-eager", "--variant", "cpu-ci", "-o", str(out), home=home)
        assert p.returncode == 0, p.stderr + p.stdout
        client.images.remove(tag)  # kitctl/pytorch:ci (the fixture's) keeps the layers
        p = kitctl("images", "load", str(out), home=home)
        assert p.returncode == 0, p.stderr + p.stdout
        assert client.images.get(tag).id == source_id
        res = tmp_path / "r"
        p = kitctl("run", "maxbatch", "--runtime", "docker", "--device", "cpu", "--start-batch", "2",
                   "--max-batch", "2", "--results-dir", str(res), home=home, env={"KITCTL_IMAGE_VARIANT": "cpu-ci"})
        assert p.returncode == 0, p.stderr + p.stdout
        (final,) = [f for f in res.glob("*.json") if not f.name.endswith(".partial.json")]
        prov = json.loads(final.read_text())["engines"]["pytorch-eager"]["provenance"]
        assert prov["image"] == tag and prov["id"] == source_id
    finally:
        _remove(client, tag)


REPRO_DOCKERFILE = """\
FROM {base}
ARG SOURCE_DATE_EPOCH
# The steps of the engine Dockerfiles that stamp times, made small: a venv, bytecode compiled at build
# time (pip compiles with py_compile, as compileall does), a user account (shadow's last-change day).
RUN python3 -m venv --without-pip /opt/venv && mkdir -p /opt/kit && printf 'X = 1\\n' > /opt/kit/mod.py \\
    && python3 -m compileall -q /opt/kit
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/kit --shell /bin/sh kit
LABEL kit.engine="pytorch" kit.trial-protocol="1"
"""


@pytest.mark.docker
@pytest.mark.slow
def test_two_clean_builds_differ_raw_and_match_normalized(client, tmp_path):
    """Two builds from a clean cache: different IDs from the classic builder, one ID after the rewrite;
    without SOURCE_DATE_EPOCH in the RUN steps the bytecode still differs, and `compare` names it.
    ~2 min on 2 cores: three builds, and reading each back means the daemon exports the 486 MB base
    too (~20 s each on Docker 20.10); the real images' check is .ci/check-reproducible.sh."""
    import docker

    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"base image {BASE_IMAGE} is absent: run .ci/docker-up.sh")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(REPRO_DOCKERFILE.format(base=BASE_IMAGE))
    tag = f"{TEST_REPO}:repro"
    epoch = 1_700_000_000

    def build(args):
        img, _ = client.images.build(path=str(ctx), tag=tag, nocache=True, rm=True, forcerm=True, buildargs=args)
        return img.id, repro.normalize(client, tag, epoch, base=BASE_IMAGE)

    try:
        raw_a, a = build({"SOURCE_DATE_EPOCH": str(epoch)})
        raw_b, b = build({"SOURCE_DATE_EPOCH": str(epoch)})
        assert raw_a != raw_b  # the classic builder alone: never the same
        assert a.id == b.id and repro.compare(a, b) == []
        assert client.images.get(tag).id == a.id
        base_layers = client.images.get(BASE_IMAGE).attrs["RootFS"]["Layers"]
        assert client.images.get(tag).attrs["RootFS"]["Layers"][:len(base_layers)] == base_layers  # shared
        _, c = build({})  # no SOURCE_DATE_EPOCH in the RUN steps: timestamp-based .pyc files
        diffs = repro.compare(a, c)
        assert diffs and all(d.index >= len(base_layers) for d in diffs)
        assert any(p.endswith(".pyc") for d in diffs for p in d.paths), diffs
    finally:
        for ref in {tag, getattr(locals().get("a"), "id", None), getattr(locals().get("c"), "id", None)} - {None}:
            _remove(client, ref)

