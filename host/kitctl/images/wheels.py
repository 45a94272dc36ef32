"""A build's hashed lock, downloaded on the host for the image's own interpreter (`--wheels-from-host`).

Some build hosts reach PyPI only through a TLS-intercepting proxy whose CA the host trusts and a
build container does not. The image must not change to suit that network, so its CA is never
passed into the build. Instead the host's pip downloads every wheel of the lock into the image's
`wheels/` folder, checking each file against the lock's hashes. The build then installs with no
index at all (PIP_NO_INDEX=1, as the CI variants do) and pip checks every hash a second time.
The installed files are the lock's files either way, so the image is the same as one whose pip
reached PyPI itself.

pip picks wheels for the host's interpreter unless it is told the target's. The target here is
the base image's `python3` and glibc, read by running the base (no network). pip does not widen
`--platform manylinux_2_28_x86_64` to the older glibc tags it would accept on a real
interpreter (only the legacy `manylinux2014` name is widened, to manylinux2010 and manylinux1),
so every tag the target accepts is passed: NVIDIA's CUPTI 13.0.85, for one, ships only a
`manylinux_2_25_x86_64` wheel for x86_64.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .compose import BuildSpec
from .store import ImageError, one_line

# Runs in the base image: "3.13 x86_64 glibc 2.41".
_PROBE = ("import sys, platform; lib, ver = platform.libc_ver(); "
          "print('%d.%d' % sys.version_info[:2], platform.machine(), lib or '?', ver or '?')")
WHEELS_DIR = "wheels"  # next to the Dockerfile; the Dockerfiles COPY images/<engine>/wheel[s]


@dataclass(frozen=True)
class Target:
    """The interpreter the image's pip installs into."""

    python: str  # "3.13"
    machine: str  # "x86_64"
    glibc: tuple[int, int]  # (2, 41)

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platforms(self) -> list[str]:
        """Every platform tag pip accepts on this interpreter, newest first (packaging's order)."""
        major, minor = self.glibc
        if major != 2 or minor < 5:
            raise ImageError(f"glibc {major}.{minor}: no manylinux tag applies")
        tags = []
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        for m in range(minor, 4, -1):
            tags.append(f"manylinux_2_{m}_{self.machine}")
            if m in legacy and self.machine in ("x86_64", "i686"):
                tags.append(f"{legacy[m]}_{self.machine}")
        tags.append(f"linux_{self.machine}")
        return tags


@dataclass(frozen=True)
class Fetched:
    lock: Path
    wheels: Path  # the folder
    target: Target
    files: tuple[str, ...]  # the wheel files of the lock, by name


def parse_probe(text: str, base: str) -> Target:
    m = re.fullmatch(r"(3\.\d+) (\S+) glibc (\d+)\.(\d+)", text.strip())
    if not m:
        raise ImageError(f"base image {base}: its python3 is not a glibc CPython "
                         f"(it says {one_line(text.strip() or 'nothing', 120)!r}); wheels cannot be chosen for it")
    return Target(m.group(1), m.group(2), (int(m.group(3)), int(m.group(4))))


def base_image(spec: BuildSpec) -> str:
    """BASE_IMAGE as the build resolves it: the build arg, else the Dockerfile's default."""
    if spec.args.get("BASE_IMAGE"):
        return spec.args["BASE_IMAGE"]
    text = spec.dockerfile_path.read_text()
    m = re.search(r"^ARG\s+BASE_IMAGE=(\S+)\s*$", text, re.M)
    if not m:
        raise ImageError(f"{spec.dockerfile}: no BASE_IMAGE build arg to read the target interpreter from")
    return m.group(1)


def probe(client: Any, base: str) -> Target:
    """The base image's python3 version, machine and glibc, from a throw-away container (no network)."""
    import docker

    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(base)
        except docker.errors.APIError as exc:
            raise ImageError(f"base image {base} is not here and could not be pulled ({one_line(exc, 160)}); "
                             f"make it first (e.g. images/debian-base/build.sh) or pick another --variant") from None
    try:
        out = client.containers.run(base, ["python3", "-c", _PROBE], entrypoint=[], network_mode="none",
                                    remove=True, labels={"kit.role": "wheels-probe"})
    except docker.errors.DockerException as exc:
        raise ImageError(f"base image {base}: running its python3 failed ({one_line(exc, 160)})") from None
    return parse_probe(out.decode(errors="replace"), base)


def lock_file(spec: BuildSpec) -> Path:
    """The one lock the build installs: the build arg named *_LOCK, a file next to the Dockerfile."""
    here = spec.dockerfile_path.parent
    locks = [here / v for k, v in sorted(spec.args.items()) if k.endswith("_LOCK") and v]
    locks = [p for p in locks if p.is_file()]
    if len(locks) != 1:
        raise ImageError(f"{spec.service}: --wheels-from-host needs exactly one lock file named by a *_LOCK "
                         f"build arg (found {len(locks)})")
    if "wheel[s]" not in spec.dockerfile_path.read_text():
        raise ImageError(f"{spec.dockerfile}: it does not install from its {WHEELS_DIR}/ folder")
    return locks[0]


def pip_command(lock: Path, dest: Path, target: Target, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
           "--no-deps", "--require-hashes", "--only-binary=:all:",
           "--python-version", target.python, "--implementation", "cp", "--abi", target.abi]
    for p in target.platforms():
        cmd += ["--platform", p]
    return cmd + ["-r", str(lock), "-d", str(dest)]


_SAVED = re.compile(r"^\s*(?:Saved|File was already downloaded) (\S+\.whl)\s*$")


def download(lock: Path, target: Target, on_line: Optional[Callable[[str], None]] = None,
             python: str = sys.executable) -> Fetched:
    """pip download every wheel of `lock` for `target` into wheels/ next to it, hash-checked."""
    dest = lock.parent / WHEELS_DIR
    dest.mkdir(exist_ok=True)
    cmd = pip_command(lock, dest, target, python)
    tail: list[str] = []
    files: list[str] = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ImageError(f"pip could not start ({one_line(exc, 120)})") from None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-20:]
            m = _SAVED.match(line)
            if m:
                files.append(Path(m.group(1)).name)
            if on_line:
                on_line(line)
        rc = proc.wait()
    finally:  # an interrupt leaves no pip behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0:
        errors = [ln for ln in tail if "ERROR" in ln] or tail[-1:] or ["no output"]
        raise ImageError(f"pip download of {lock.name} for Python {target.python} / glibc "
                         f"{target.glibc[0]}.{target.glibc[1]} failed: {one_line(errors[-1].strip(), 240)}")
    return Fetched(lock, dest, target, tuple(sorted(set(files))))
