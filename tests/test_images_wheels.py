"""`kitctl images build --wheels-from-host` (host/kitctl/images/wheels.py): the host's pip downloads
a hashed lock's wheels for the base image's interpreter, and the build installs them with no index.

The end-to-end tests build a small image from the CI base with a two-package lock made here (wheels
written by this file, served to the host's pip from a local folder), with the build's network off,
through a KITCTL_HOME whose compose.yaml names only that image (kitctl-test-wheels/...). The lock
also lists a wheel for another Python and one for a newer glibc than the base has: the right
choice among them shows that the base's interpreter, not the host's, picked the files.
"""
from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from kitctl.images import wheels  # noqa: E402
from kitctl.images.store import ImageError  # noqa: E402

from conftest import BASE_IMAGE, unavailable  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
TEST_IMAGE = f"kitctl-test-wheels/tiny-{os.getpid()}:1"


# ---- tags -------------------------------------------------------------------------------------------

def test_every_glibc_tag_down_to_manylinux1_is_accepted_and_none_newer():
    tags = wheels.Target("3.13", "x86_64", (2, 41)).platforms()
    assert tags[0] == "manylinux_2_41_x86_64" and "manylinux_2_42_x86_64" not in tags
    # NVIDIA's CUPTI 13.0.85 has only a manylinux_2_25 x86_64 wheel, NVTX 13.0.85 only manylinux1
    for t in ("manylinux_2_28_x86_64", "manylinux_2_25_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"):
        assert t in tags
    assert tags.index("manylinux_2_28_x86_64") < tags.index("manylinux_2_25_x86_64")


def test_the_probe_is_read_or_refused_in_one_line():
    assert wheels.parse_probe("3.13 x86_64 glibc 2.41\n", "b") == wheels.Target("3.13", "x86_64", (2, 41))
    with pytest.raises(ImageError, match="not a glibc CPython"):
        wheels.parse_probe("3.12 x86_64 ? ?", "alpine")  # musl: no manylinux wheel applies


def test_pip_is_told_the_target_interpreter():
    cmd = wheels.pip_command(Path("l.lock"), Path("w"), wheels.Target("3.13", "x86_64", (2, 41)), python="py")
    assert cmd[cmd.index("--python-version") + 1] == "3.13" and cmd[cmd.index("--abi") + 1] == "cp313"
    assert "--require-hashes" in cmd and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert "manylinux_2_25_x86_64" in cmd


# ---- end to end, on the daemon ------------------------------------------------------------------------

def _wheel(folder: Path, name: str, tag: str) -> tuple[Path, str]:
    """A minimal valid wheel of `name` 1.0 with `tag`; returns it and its sha256."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": f"TAG = {tag!r}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: kitctl-test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    record = ""
    for p, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{p},sha256={digest},{len(data)}\n"
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    path = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), data)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


COMPOSE = """\
services:
  tiny:
    image: {image}
    build:
      context: .
      dockerfile: images/tiny/Dockerfile
      args:
        TINY_LOCK: requirements.lock
    x-kitctl:
      engines: [tiny]
"""
DOCKERFILE = """\
ARG BASE_IMAGE={base}
FROM ${{BASE_IMAGE}}
ARG TINY_LOCK
ARG PIP_NO_INDEX
COPY images/tiny/requirements.lock images/tiny/wheel[s] /tmp/kit-image/
RUN python3 -m venv /opt/venv && /opt/venv/bin/python -m pip install --no-cache-dir \\
      --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \\
      --find-links /tmp/kit-image -r /tmp/kit-image/${{TINY_LOCK}} && rm -rf /tmp/kit-image
"""


@pytest.fixture
def project(client, tmp_path):
    """KITCTL_HOME with the tiny service, a local 'index' folder of wheels, and the lock's lines."""
    import docker

    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"base image {BASE_IMAGE} is absent: run .ci/docker-up.sh")
    home, index = tmp_path / "home", tmp_path / "index"
    (home / "images" / "tiny").mkdir(parents=True)
    index.mkdir()
    (home / "compose.yaml").write_text(COMPOSE.format(image=TEST_IMAGE))
    (home / "images" / "tiny" / "Dockerfile").write_text(DOCKERFILE.format(base=BASE_IMAGE))
    # The CI base is Debian 12: CPython 3.11, glibc 2.36.
    made = {tag: _wheel(index, name, tag) for name, tag in [
        ("kitwa", "cp311-cp311-manylinux_2_17_x86_64"),
        ("kitwa", "cp312-cp312-manylinux_2_17_x86_64"),  # another Python
        ("kitwb", "py3-none-manylinux_2_25_x86_64"),
        ("kitwb", "py3-none-manylinux_2_39_x86_64"),  # a newer glibc than the base's
    ]}
    yield home, index, made
    try:
        client.images.remove(TEST_IMAGE, force=True)
    except docker.errors.APIError:
        pass


def _lock(home: Path, made: dict, tamper: bool = False) -> None:
    lines = []
    for name in ("kitwa", "kitwb"):
        hashes = [h for tag, (p, h) in sorted(made.items()) if p.name.startswith(name + "-")]
        if tamper:
            hashes = [h[:-4] + "0000" for h in hashes]
        lines.append(f"{name}==1.0 " + " ".join(f"--hash=sha256:{h}" for h in hashes))
    (home / "images" / "tiny" / "requirements.lock").write_text("\n".join(lines) + "\n")


def _kitctl(home: Path, index: Path, *args: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host"), "KITCTL_COMPOSE": "kitctl", "KITCTL_HOME": str(home),
           # the host's pip, configured only by these: a local folder stands in for the index
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
    env.pop("KITCTL_IMAGE_VARIANT", None)
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.docker
def test_wheels_from_host_builds_offline_with_the_base_interpreters_wheels(client, project, tmp_path):
    home, index, made = project
    _lock(home, made)
    log = tmp_path / "build.log"
    r = _kitctl(home, index, "images", "build", "tiny", "--wheels-from-host", "--network", "none",
                "--log", str(log))
    assert r.returncode == 0, r.stdout + r.stderr
    got = sorted(p.name for p in (home / "images" / "tiny" / "wheels").iterdir())
    assert got == ["kitwa-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "kitwb-1.0-py3-none-manylinux_2_25_x86_64.whl"]
    out = client.containers.run(TEST_IMAGE, ["/opt/venv/bin/python", "-c",
                                             "import kitwa, kitwb; print(kitwa.TAG, kitwb.TAG)"],
                                network_mode="none", remove=True).decode()
    assert out.split() == ["cp311-cp311-manylinux_2_17_x86_64", "py3-none-manylinux_2_25_x86_64"]
    text = log.read_text()
    assert "--python-version 3.11" in text and f"built {TEST_IMAGE}: sha256:" in text


@pytest.mark.docker
def test_a_wheel_that_differs_from_the_lock_stops_before_the_build(client, project):
    import docker

    home, index, made = project
    _lock(home, made, tamper=True)
    r = _kitctl(home, index, "images", "build", "tiny", "--wheels-from-host")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kitctl: pip download of requirements.lock for Python 3.11") and "hash" in last.lower(), \
        r.stderr
    assert "Traceback" not in r.stderr
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(TEST_IMAGE)


def test_a_build_context_leaves_out_the_other_images_wheels(tmp_path):
    """Each Dockerfile copies only its own wheels/: another image's (multi-GB) folder is not sent."""
    import tarfile

    from kitctl.images.compose import load_compose
    from kitctl.runtimes.docker import _build_context

    (tmp_path / "images" / "tiny" / "wheels").mkdir(parents=True)
    (tmp_path / "images" / "other" / "wheels").mkdir(parents=True)
    (tmp_path / "compose.yaml").write_text(COMPOSE.format(image=TEST_IMAGE))
    (tmp_path / "images" / "tiny" / "Dockerfile").write_text(DOCKERFILE.format(base=BASE_IMAGE))
    (tmp_path / "images" / "tiny" / "wheels" / "a.whl").write_bytes(b"a")
    (tmp_path / "images" / "other" / "wheels" / "b.whl").write_bytes(b"b")
    (tmp_path / "images" / "other" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "notes.txt").write_text("ignored\n")
    (tmp_path / ".dockerignore").write_text("*\n!images/\n")
    spec = load_compose(tmp_path / "compose.yaml").build_spec("tiny")
    with _build_context(spec) as f:
        names = set(tarfile.open(fileobj=f).getnames())
    assert {"images/tiny/Dockerfile", "images/tiny/wheels/a.whl", "images/other/Dockerfile"} <= names
    assert not any(n.startswith("images/other/wheels") for n in names) and "notes.txt" not in names
