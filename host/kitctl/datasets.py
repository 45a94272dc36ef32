"""Host-side checks of `--data-dir` (the trial reads the data; the host only validates)."""
from __future__ import annotations

import os
from pathlib import Path

LAYOUTS = {"cifar-10-batches-bin": "data_batch_1.bin", "cifar-10-batches-py": "data_batch_1"}


class DataError(ValueError):
    pass


def resolve_cifar10(data_dir: str | None) -> Path:
    """The folder holding CIFAR-10's batches, whether given that folder or its parent."""
    if not data_dir:
        raise DataError("--dataset cifar10 needs --data-dir (the official binary or python layout)")
    p = Path(data_dir).expanduser()
    if not p.is_dir():
        raise DataError(f"--data-dir {data_dir}: not a readable directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise DataError(f"--data-dir {data_dir}: permission denied")
    candidates = [p] + [p / name for name in LAYOUTS]
    for c in candidates:
        for layout, first in LAYOUTS.items():
            f = c / first
            if (c.name == layout or c == p) and f.is_file():
                if not os.access(f, os.R_OK):
                    raise DataError(f"--data-dir {data_dir}: {f.name} is not readable")
                return c.resolve()
    raise DataError(f"--data-dir {data_dir}: no CIFAR-10 batches found "
                    f"(expected {' or '.join(LAYOUTS)} with data_batch_1[.bin])")
