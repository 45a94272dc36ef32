"""Writing a file so that a full disk or an interruption leaves the old file or none, never a torn one."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a temporary file beside `path`, which is then renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
