"""Provenance for the artifact: kit version and git commit, host, interpreter."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .paths import kit_root


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def kit_info() -> dict[str, Any]:
    root = kit_root()
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"version": __version__, "git_commit": commit,
            "git_dirty": None if status is None else bool(status)}


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
