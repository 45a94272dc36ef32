#!/usr/bin/env python3
"""Make a Docker base image from this machine's own userland (a GPU machine that cannot pull).

The lent GPU machine reaches no registry, so the pinned `nvidia/cuda` bases cannot be pulled and
the CUDA wheels are too big to carry. What it has is its own Ubuntu userland and the venv that
holds PyTorch. This tool streams a slice of both through GNU tar into `docker import` (Docker
SDK: the machine has no docker CLI) and labels the image for what it is. Nothing of the NVIDIA
driver goes in (/usr/local/nvidia, libcuda*, libnvidia-*): the runtime injects it (CDI spec).

A profile says which slice (sizes matter: every call on that machine starts bare, so the import
runs each time):

  runtime  /usr (minus the CUDA toolkit under /usr/local/cuda*, docs, man pages), /etc, the root
           symlinks of a merged-/usr system, and from the venv only the distributions the
           engine's lock names plus what they require (RECORD files): torch, its nvidia-*
           libraries, triton, numpy … — not the venv's other packages (jax, cupy, …).
           The pytorch image (compose variant host-userland) builds on it.
  devel    runtime + /usr/local/cuda* (nvcc, headers, libraries), /opt/gcc (GCC 13) and the
           venv's cmake and ninja: the OpenNN image's builder and final stage build on it.

  host_userland.py plan   --profile runtime [--venv V] [--lock L] [--root /]     sizes, no daemon
  host_userland.py import --profile runtime --tag kitctl/host-userland:runtime [...]

Every step prints what it did and how long it took; problems are one line and exit 2.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = "/opt/torch/.venv"
DEFAULT_LOCK = ROOT / "images" / "pytorch" / "requirements-cuda.lock"
# Roots the trial's own imports need beyond the lock (the trial imports numpy; torch pulls the rest).
ROOT_DISTS = ("torch", "numpy")
DEVEL_DISTS = ("cmake", "ninja")

# Always left out: the driver (the runtime injects it), caches, docs, and what a container makes itself.
COMMON_EXCLUDES = (
    "usr/local/nvidia", "usr/lib/x86_64-linux-gnu/libcuda.so*", "usr/lib/x86_64-linux-gnu/libcudadebugger.so*",
    "usr/lib/x86_64-linux-gnu/libnvidia-*", "usr/lib/x86_64-linux-gnu/libnvcuvid.so*",
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/help", "usr/src",
    "etc/docker", "etc/cdi", "etc/hostname", "etc/hosts", "etc/resolv.conf",
)
# The CUDA toolkit: torch's wheels bring their CUDA libraries and Triton its ptxas.
RUNTIME_EXCLUDES = ("usr/local/cuda", "usr/local/cuda-*")
EMPTY_DIRS = {"tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700, "home": 0o755, "proc": 0o555, "sys": 0o555,
              "dev": 0o755, "run": 0o755, "mnt": 0o755, "opt": 0o755, "var/log": 0o755, "var/cache": 0o755}


class Fail(Exception):
    """One line, exit 2."""


def log(msg: str) -> None:
    print(f"host-userland: {msg}", flush=True)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_names(lock: Path) -> list[str]:
    """The distributions a pip-compile lock pins (`name==version` lines)."""
    try:
        text = lock.read_text()
    except OSError as exc:
        raise Fail(f"cannot read the lock {lock}: {exc.strerror or exc}") from None
    names = [m.group(1) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", text, re.M)]
    if not names:
        raise Fail(f"{lock} pins no distribution (name==version lines)")
    return names


def site_packages(venv: Path) -> Path:
    found = sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages")))
    if not found:
        raise Fail(f"{venv} is not a venv: no lib/python3*/site-packages (set --venv)")
    return Path(found[0])


@dataclass
class VenvSlice:
    venv: Path
    site: Path
    dists: dict[str, str] = field(default_factory=dict)  # name -> version
    missing: list[str] = field(default_factory=list)  # asked for, not installed
    files: list[str] = field(default_factory=list)  # absolute paths
    bytes: int = 0
    outside: int = 0  # RECORD entries outside the venv, left out
    unreadable: list[str] = field(default_factory=list)


def venv_slice(venv: Path, roots: list[str]) -> VenvSlice:
    """The files of `roots` and everything they require (Requires-Dist without extras), by RECORD."""
    import importlib.metadata as md

    try:
        from packaging.markers import Marker, UndefinedEnvironmentName  # noqa: F401
        from packaging.requirements import Requirement
    except ImportError:  # a bare interpreter: take every requirement that is installed
        Requirement = None  # type: ignore[assignment,misc]

    site = site_packages(venv)
    sl = VenvSlice(venv=venv, site=site)
    installed = {_norm(d.metadata["Name"]): d for d in md.distributions(path=[str(site)]) if d.metadata["Name"]}
    todo = [_norm(n) for n in roots]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = installed.get(name)
        if dist is None:
            sl.missing.append(name)
            continue
        sl.dists[dist.metadata["Name"]] = dist.version
        for req in dist.requires or []:
            if Requirement is not None:
                try:
                    r = Requirement(req)
                except Exception:  # noqa: BLE001
                    continue
                if r.marker is not None:
                    try:
                        if not r.marker.evaluate({"extra": ""}):
                            continue
                    except Exception:  # noqa: BLE001
                        continue
                todo.append(_norm(r.name))
            elif "extra ==" not in req:
                todo.append(_norm(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]))
    # Missing requirements that are not installed are not fatal (optional on this platform); the
    # image build checks the framework itself.
    sl.missing = sorted(set(sl.missing))
    files: set[str] = set()
    venv_real = os.path.realpath(venv)
    for name in sl.dists:
        dist = installed[_norm(name)]
        if not dist.files:
            raise Fail(f"{name} in {site} has no RECORD: cannot tell its files (reinstall it with pip)")
        for f in dist.files:
            p = os.path.normpath(str(dist.locate_file(f)))
            if not (p == venv_real or p.startswith(venv_real + os.sep) or p.startswith(str(venv) + os.sep)):
                sl.outside += 1
                continue
            if os.path.lexists(p):
                files.add(p)
    # Compiled bytecode next to each module taken, also where pip did not record it (compiled at
    # first import): without it every container would recompile torch (PYTHONDONTWRITEBYTECODE).
    by_dir: dict[str, set[str]] = {}
    for p in files:
        if p.endswith(".py"):
            d, base = os.path.split(p)
            by_dir.setdefault(d, set()).add(base[:-3])
    for d, stems in by_dir.items():
        try:
            cached = os.listdir(os.path.join(d, "__pycache__"))
        except OSError:
            continue
        for c in cached:
            if c.endswith(".pyc") and c.split(".", 1)[0] in stems:
                files.add(os.path.join(d, "__pycache__", c))
    # The venv itself: its config and interpreter links, and every .pth at the top of site-packages
    # that belongs to a distribution taken (RECORD lists those, so they are in already).
    for p in [venv / "pyvenv.cfg", *sorted((venv / "bin").glob("python*"))]:
        if os.path.lexists(p):
            files.add(str(p))
    for lib64 in (venv / "lib64",):
        if os.path.islink(lib64):
            files.add(str(lib64))
    sl.files = sorted(files)
    for p in sl.files:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        sl.bytes += st.st_size
        # The trial runs as a non-root user in the container: everything must be world-readable.
        if not os.path.islink(p) and not st.st_mode & 0o004 and len(sl.unreadable) < 5:
            sl.unreadable.append(p)
    return sl


@dataclass(frozen=True)
class Profile:
    name: str
    system: tuple[str, ...]  # paths under / (relative)
    excludes: tuple[str, ...]
    extra_dists: tuple[str, ...]


def profile(name: str, root: Path) -> Profile:
    # Merged-/usr (Ubuntu 24.04): /bin, /sbin, /lib* are symlinks into /usr; older layouts: directories.
    top = [p for p in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") if os.path.lexists(root / p)]
    if name == "runtime":
        return Profile(name, ("usr", "etc", *top), COMMON_EXCLUDES + RUNTIME_EXCLUDES, ())
    if name == "devel":
        extra = tuple(p for p in ("opt/gcc",) if os.path.isdir(root / p))
        return Profile(name, ("usr", "etc", *top, *extra), COMMON_EXCLUDES, DEVEL_DISTS)
    raise Fail(f"unknown profile {name!r} (runtime or devel)")


def skeleton() -> Path:
    """Empty directories a root filesystem needs, with their modes (tar takes the modes from here)."""
    d = Path(tempfile.mkdtemp(prefix="kit-skel-"))
    for rel, mode in EMPTY_DIRS.items():
        p = d / rel
        p.mkdir(parents=True, exist_ok=True)
    for rel, mode in sorted(EMPTY_DIRS.items(), key=lambda kv: -kv[0].count("/")):
        os.chmod(d / rel, mode)
    return d


def tar_command(prof: Profile, root: Path, venv_list: Path, skel: Path, out: str = "-") -> list[str]:
    cmd = ["tar", "--create", "--file", out, "--numeric-owner", "--sparse", "--ignore-failed-read",
           "--warning=no-file-ignored", "--warning=no-file-changed", "--anchored"]
    cmd += [f"--exclude={e}" for e in prof.excludes]
    cmd += ["-C", str(root), *[p for p in prof.system if os.path.lexists(root / p)]]
    cmd += ["-C", "/", "--null", "--verbatim-files-from", f"--files-from={venv_list}"]
    cmd += ["-C", str(skel), *EMPTY_DIRS.keys()]
    return cmd


def write_list(files: list[str]) -> Path:
    fd, name = tempfile.mkstemp(prefix="kit-venv-files-")
    with os.fdopen(fd, "wb") as f:
        for p in files:
            f.write(p.lstrip("/").encode() + b"\0")
    return Path(name)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def torch_facts(venv: Path) -> dict[str, str]:
    """torch/CUDA/cuDNN versions the venv holds, read by its own interpreter (labels, ENV)."""
    py = venv / "bin" / "python"
    code = ("import json, importlib.metadata as m\n"
            "out = {}\n"
            "for k, n in (('torch', 'torch'), ('cudnn', 'nvidia-cudnn-cu13'), ('numpy', 'numpy')):\n"
            "    try: out[k] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))\n")
    try:
        r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
        return json.loads(r.stdout) if r.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


def nvcc_version(root: Path) -> str | None:
    nvcc = root / "usr/local/cuda/bin/nvcc"
    if not nvcc.exists():
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def changes(prof: Profile, venv: Path, sl: VenvSlice, root: Path) -> list[str]:
    """The image's ENV/LABEL/CMD (Dockerfile syntax, `docker import --change`)."""
    facts = torch_facts(venv)
    host = socket.gethostname()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {"LANG": "C.UTF-8",
           # The CDI spec mounts the driver's libcuda there, and the image has no ld.so.cache entry
           # for it: Triton (torch.compile) would not find it through `ldconfig -p`.
           "TRITON_LIBCUDA_PATH": "/usr/lib/x86_64-linux-gnu"}
    labels = {
        "kit.host-userland": "true",
        "kit.host-userland.profile": prof.name,
        "kit.host-userland.host": host,
        "kit.host-userland.created": when,
        "kit.host-userland.venv": str(venv),
        "kit.host-userland.venv-dists": ",".join(f"{n}=={v}" for n, v in sorted(sl.dists.items())),
        "kit.host-userland.excluded": ",".join(prof.excludes),
        "kit.host-userland.torch": facts.get("torch", "?"),
        "org.opencontainers.image.description": (
            f"the userland of {host} ({prof.name} slice: {', '.join('/' + p for p in prof.system)} and "
            f"{venv}'s {len(sl.dists)} distributions), imported {when}; no NVIDIA driver inside "
            "(the runtime injects it); not the pinned CUDA image"),
    }
    if prof.name == "devel":
        path = f"{venv}/bin:/usr/local/cuda/bin:/opt/gcc/bin:{path}"
        nvidia = sl.site / "nvidia"
        env.update({"CUDACXX": "/usr/local/cuda/bin/nvcc", "CUDNN_ROOT": str(nvidia / "cudnn"),
                    "CUDA_EXTRA_LIB_DIRS": str(nvidia / "cu13" / "lib")})
        if (root / "opt/gcc/bin/g++").exists():
            env.update({"CXX": "/opt/gcc/bin/g++", "CC": "/opt/gcc/bin/gcc"})
        # What NVIDIA's images set, so images/opennn/Dockerfile's checks read the same names.
        cuda = nvcc_version(root)
        if cuda:
            env["CUDA_VERSION"] = cuda
        if facts.get("cudnn"):
            env["NV_CUDNN_VERSION"] = facts["cudnn"]
    env["PATH"] = path
    out = [f"ENV {k}={json.dumps(v)}" for k, v in env.items()]
    out += [f"LABEL {k}={json.dumps(v)}" for k, v in labels.items()]
    out.append('CMD ["/bin/bash"]')
    return out


def _prepare(a: argparse.Namespace) -> tuple[Profile, VenvSlice, Path, Path]:
    root = Path(a.root)
    prof = profile(a.profile, root)
    prof = Profile(prof.name, prof.system, prof.excludes + tuple(a.exclude or ()), prof.extra_dists)
    venv = Path(a.venv)
    if not (venv / "bin").is_dir() or not (venv / "pyvenv.cfg").is_file():
        raise Fail(f"no venv at {venv} (no bin/ or pyvenv.cfg; set --venv)")
    # The venv's interpreter is a link to its base Python: that must be inside the slice too.
    real = os.path.realpath(venv / "bin" / "python")
    inside = [str(root / p) for p in prof.system] + [os.path.realpath(venv)]
    if not any(real == d or real.startswith(d.rstrip("/") + "/") for d in inside):
        raise Fail(f"{venv}/bin/python is {real}, outside the slice ({', '.join('/' + p for p in prof.system)}): "
                   "its base interpreter would be missing from the image")
    if shutil.which("tar") is None:
        raise Fail("GNU tar is not on PATH")
    t = time.monotonic()
    roots = [*lock_names(Path(a.lock)), *ROOT_DISTS, *prof.extra_dists]
    sl = venv_slice(venv, roots)
    log(f"venv slice: {len(sl.dists)} distributions of {venv} ({_gib(sl.bytes)} in {len(sl.files)} files) "
        f"in {time.monotonic() - t:.1f} s; not installed there: {', '.join(sl.missing) or 'none'}"
        + (f"; {sl.outside} RECORD entries outside the venv left out" if sl.outside else ""))
    if sl.unreadable:
        raise Fail(f"files of the venv are not world-readable (the trial runs as a non-root user): "
                   f"{', '.join(sl.unreadable)} … (chmod -R a+rX {venv})")
    if "torch" not in {_norm(n) for n in sl.dists}:
        raise Fail(f"{venv} holds no torch: the host-userland base provides the framework from it")
    return prof, sl, write_list(sl.files), skeleton()


def cmd_plan(a: argparse.Namespace) -> int:
    prof, sl, lst, skel = _prepare(a)
    try:
        t = time.monotonic()
        # GNU tar reads no file data when the archive is /dev/null; --totals still counts it.
        r = subprocess.run([*tar_command(prof, Path(a.root), lst, skel, out="/dev/null"), "--totals"],
                           capture_output=True, text=True)
        m = re.search(r"Total bytes written: (\d+)", r.stderr)
        total = int(m.group(1)) if m else None
        log(f"profile {prof.name}: {', '.join('/' + p for p in prof.system)} + the venv slice; excluded "
            f"{', '.join(prof.excludes)}")
        log(f"tar stream would be {_gib(total) if total else '?'} (venv part {_gib(sl.bytes)}), listed in "
            f"{time.monotonic() - t:.1f} s" + ("" if r.returncode == 0 else f"; tar said: {r.stderr.strip()[-300:]}"))
    finally:
        lst.unlink(missing_ok=True)
        shutil.rmtree(skel, ignore_errors=True)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    try:
        import docker
    except ImportError:
        raise Fail("the Docker SDK for Python is not importable (install the .whl/ wheels first)") from None
    prof, sl, lst, skel = _prepare(a)
    client = docker.DockerClient(base_url=a.docker_host, timeout=3600)
    try:
        if not a.force:
            try:
                img = client.images.get(a.tag)
                log(f"{a.tag} present ({img.short_id}, {_gib(img.attrs.get('Size') or 0)}): reused (--force re-imports)")
                return 0
            except docker.errors.ImageNotFound:
                pass
        ch = changes(prof, Path(a.venv), sl, Path(a.root))
        repo, _, tag = a.tag.rpartition(":") if ":" in a.tag.split("/")[-1] else (a.tag, "", "latest")
        t0 = time.monotonic()
        tar = subprocess.Popen(tar_command(prof, Path(a.root), lst, skel), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        sent = 0

        def chunks():
            nonlocal sent
            assert tar.stdout is not None
            while True:
                b = tar.stdout.read(1 << 20)
                if not b:
                    return
                sent += len(b)
                yield b

        try:
            res = client.api.import_image(src=chunks(), stream_src=True, repository=repo, tag=tag, changes=ch)
        except docker.errors.APIError as exc:
            tar.kill()
            raise Fail(f"docker import of {a.tag} failed: {' '.join(str(exc.explanation or exc).split())[:300]}") from None
        err = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
        rc = tar.wait()
        dt = time.monotonic() - t0
        if rc not in (0, 1):  # 1: "some files differ/changed while read" — a live system; fine
            raise Fail(f"tar of the userland failed (exit {rc}): {' '.join(err.split())[-300:]}")
        status = ""
        for line in str(res).splitlines():
            try:
                status = json.loads(line).get("status", status)
            except ValueError:
                continue
        img = client.images.get(a.tag)
        log(f"imported {a.tag} ({img.short_id}) in {dt:.1f} s: {_gib(sent)} streamed "
            f"({sent / 2**20 / max(dt, 1e-6):.0f} MiB/s), venv part {_gib(sl.bytes)}"
            + (f"; tar warnings: {' '.join(err.split())[-200:]}" if err.strip() else ""))
        if status and not status.startswith("sha256:"):
            log(f"daemon said: {status}")
    finally:
        client.close()
        lst.unlink(missing_ok=True)
        shutil.rmtree(skel, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "import"):
        s = sub.add_parser(name)
        s.add_argument("--profile", default="runtime", choices=["runtime", "devel"])
        s.add_argument("--venv", default=os.environ.get("KIT_HOST_VENV", DEFAULT_VENV))
        s.add_argument("--lock", default=str(DEFAULT_LOCK), help="the engine's lock: its names are the venv slice")
        s.add_argument("--root", default="/", help="where the userland is (default /)")
        s.add_argument("--exclude", action="append", help="another path under the root to leave out (tar pattern)")
        if name == "import":
            s.add_argument("--tag", required=True)
            s.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
            s.add_argument("--force", action="store_true", help="import even when the tag exists")
    a = p.parse_args(argv)
    try:
        return cmd_plan(a) if a.cmd == "plan" else cmd_import(a)
    except Fail as exc:
        print(f"host-userland: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
