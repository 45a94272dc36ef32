"""Provenance for the artifact: kit version, the kit's code, git commit, host, interpreter.

The code hash is always there, .git or not: the GPU machine gets a copy of the tree without .git
(tools/device-kitctl.sh). The commit comes from git, else KITCTL_GIT_COMMIT/KITCTL_GIT_DIRTY,
else the stamp file `.kit-commit` that `tools/device-kitctl.sh --stamp` writes before the copy.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .. import __version__
from .engines import ENGINES
from .paths import kit_root


# sha256 over, per file in path order, "<path relative to the kit root>\0<sha256 of its bytes>\n".
CODE_SCHEME = "kitctl-tree-sha256-v1"
HOST_CODE = ("host/kitctl",)
STAMP_FILE = ".kit-commit"
ENV_COMMIT, ENV_DIRTY = "KITCTL_GIT_COMMIT", "KITCTL_GIT_DIRTY"
# Generated beside the sources; never part of the code.
_SKIP_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_SKIP_SUFFIXES = (".pyc", ".pyo")
_COMMIT_RE = re.compile(r"[0-9a-f]{7,64}")


@dataclass(frozen=True)
class CodeHash:
    paths: tuple[str, ...]  # relative to the kit root, as hashed
    sha256: str
    files: int

    def to_json(self) -> dict[str, Any]:
        return {"scheme": CODE_SCHEME, "paths": list(self.paths), "sha256": self.sha256, "files": self.files}


@dataclass(frozen=True)
class GitState:
    commit: str | None
    dirty: bool | None
    source: str | None  # "git", "env" (KITCTL_GIT_COMMIT), "stamp" (.kit-commit) or None


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in _SKIP_DIRS for p in parts[:-1]) or parts[-1].endswith(_SKIP_SUFFIXES)


def _digest(paths: Sequence[str], files: Iterable[tuple[str, bytes]]) -> CodeHash:
    entries = sorted((rel, hashlib.sha256(data).hexdigest()) for rel, data in files if not _skipped(rel))
    h = hashlib.sha256()
    for rel, sha in entries:
        h.update(f"{rel}\0{sha}\n".encode())
    return CodeHash(tuple(paths), h.hexdigest(), len(entries))


def _tree_files(root: Path, rels: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    for rel in rels:
        base = root / rel
        if base.is_file():
            yield rel, base.read_bytes()
            continue
        for d, dirs, names in os.walk(base):
            dirs[:] = [x for x in dirs if x not in _SKIP_DIRS]
            for n in names:
                f = Path(d) / n
                if f.is_file():
                    yield f.relative_to(root).as_posix(), f.read_bytes()


def code_hash(rels: Sequence[str], root: Path | None = None) -> CodeHash:
    """The content hash of these files/folders of the kit (a missing one adds no file)."""
    return _digest(rels, _tree_files(root or kit_root(), rels))


def trial_paths(engine: str) -> tuple[str, ...]:
    return (f"trials/{ENGINES[engine].trial}", "trials/common")


def trial_code(engine: str, root: Path | None = None) -> CodeHash:
    """The trial's code in the checkout: what the local runtime runs (a compiled trial's sources)."""
    return code_hash(trial_paths(engine), root)


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _commit(value: str, where: str) -> str:
    v = value.strip().lower()
    if not _COMMIT_RE.fullmatch(v):
        raise ValueError(f"{where}: {value.strip()[:80]!r} is not a git commit (7 to 64 hex digits)")
    return v


def _flag(value: str, where: str) -> bool | None:
    v = value.strip().lower()
    if v in ("", "unknown"):
        return None
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise ValueError(f"{where}: {value.strip()[:80]!r} is not true, false or unknown")


def _stamp_code(root: Path) -> CodeHash:
    """What a stamp vouches for: the host package and every trial."""
    return code_hash((*HOST_CODE, "trials"), root)


def read_stamp(root: Path) -> GitState | None:
    """`.kit-commit`: the commit on its first line (`git rev-parse HEAD > .kit-commit` is one), then
    optional `dirty=true|false` and `code_sha256=...` lines. When the code no longer hashes as it
    did when stamped, the tree is not that commit's: dirty."""
    try:
        lines = (root / STAMP_FILE).read_text().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{root / STAMP_FILE}: unreadable ({exc})") from None
    lines = [x.strip() for x in lines if x.strip()]
    if not lines:
        raise ValueError(f"{root / STAMP_FILE}: empty (write it with tools/device-kitctl.sh --stamp)")
    where = str(root / STAMP_FILE)
    commit, fields = _commit(lines[0], where), dict(x.partition("=")[::2] for x in lines[1:])
    dirty = _flag(fields.get("dirty", ""), where)
    stamped = fields.get("code_sha256")
    if stamped and stamped.strip() != _stamp_code(root).sha256:
        dirty = True
    return GitState(commit, dirty, "stamp")


def _stamp_has_hash(root: Path) -> bool:
    try:
        return any(x.startswith("code_sha256=") for x in (root / STAMP_FILE).read_text().splitlines())
    except OSError:
        return False


def git_state(root: Path | None = None) -> GitState:
    root = root or kit_root()
    top = _git(root, "rev-parse", "--show-toplevel")
    # Only the kit's own repository counts, not one its copy happens to sit in.
    commit = _git(root, "rev-parse", "HEAD") if top and Path(top).resolve() == root.resolve() else None
    if commit:
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = None if status is None else bool(status)
        # A copy can carry an old .git (the GPU machine's did: the session's first commit) while
        # the tree is newer: a clean stamp whose code hash matches says exactly which commit it is.
        # Git looks clean there too when the newer commits only added files (untracked to the old
        # .git: 2026-12-01's H200 artifacts said 4a2218d, clean, for 833d974): a stamp naming a
        # commit this .git does not hold is newer than it.
        try:
            stamp = read_stamp(root)
        except ValueError:
            stamp = None
        if stamp is not None and stamp.dirty is False and _stamp_has_hash(root):
            unknown = stamp.commit != commit and _git(root, "cat-file", "-e", f"{stamp.commit}^{{commit}}") is None
            if dirty or unknown:
                return stamp
        return GitState(commit, dirty, "git")
    env = os.environ.get(ENV_COMMIT)
    if env and env.strip():
        return GitState(_commit(env, ENV_COMMIT), _flag(os.environ.get(ENV_DIRTY, ""), ENV_DIRTY), "env")
    return read_stamp(root) or GitState(None, None, None)


def changed_files(paths: Sequence[str], since: str | None, root: Path | None = None) -> tuple[str, ...]:
    """The files under `paths` that differ now from commit `since` (committed or not, new or
    deleted): what a changed code hash is made of. Empty where git cannot say (no .git, unknown
    commit); the hashes still say that something changed."""
    root = root or kit_root()
    if not since or not _COMMIT_RE.fullmatch(since):
        return ()
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():
        return ()
    diff = _git(root, "diff", "--name-only", since, "--", *paths)
    new = _git(root, "ls-files", "--others", "--exclude-standard", "--", *paths)
    if diff is None:
        return ()
    names = {*diff.splitlines(), *(new or "").splitlines()}
    return tuple(sorted(n for n in names if n and not _skipped(n)))


def write_stamp(path: Path | None = None, root: Path | None = None) -> Path:
    """Here, where .git is: record the commit, the dirty flag and the code hash for a copy of
    the tree that travels without .git."""
    root = root or kit_root()
    state = git_state(root)
    if state.source != "git":
        raise ValueError(f"{root} is no git checkout: nothing to stamp")
    path = path or root / STAMP_FILE
    dirty = "unknown" if state.dirty is None else str(state.dirty).lower()
    path.write_text(f"{state.commit}\ndirty={dirty}\ncode_sha256={_stamp_code(root).sha256}\n")
    return path


def kit_info() -> dict[str, Any]:
    """Raises ValueError (one line) for a malformed KITCTL_GIT_COMMIT/KITCTL_GIT_DIRTY or stamp."""
    state = git_state()
    return {"version": __version__, "git_commit": state.commit, "git_dirty": state.dirty,
            "git_source": state.source, "code": code_hash(HOST_CODE).to_json()}


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "gpu": None,
        "docker_version": None,
    }


def interpreter_info(python: str) -> dict[str, Any]:
    return {"interpreter": python, "python": sys.version.split()[0] if python == sys.executable else None}


if __name__ == "__main__":  # tools/device-kitctl.sh --stamp
    try:
        print(write_stamp(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
    except ValueError as exc:
        print(f"kitctl: {exc}", file=sys.stderr)
        sys.exit(2)
