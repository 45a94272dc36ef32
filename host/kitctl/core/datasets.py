"""Host-side checks of `--data-dir` (the trial reads the data; the host only validates).

The batch files a trial may read (data_batch_1 … 5, in order, while they exist) are checked
before anything is written: a binary batch is whole 3,073-byte records (a label byte 0–9, then
3,072 pixels); a python-layout batch is a complete pickle of a dict with `data` and `labels`,
checked by walking its opcodes (pickletools) — nothing is unpickled, and the host never imports
numpy. The official files hold 10,000 records each; fewer are accepted (the trial wraps around),
so a small extract works as well.
"""
from __future__ import annotations

import os
import pickletools
from pathlib import Path

LAYOUTS = {"cifar-10-batches-bin": "data_batch_1.bin", "cifar-10-batches-py": "data_batch_1"}
RECORD_BYTES = 1 + 32 * 32 * 3
NUM_CLASSES = 10
BATCHES = range(1, 6)  # what the trials read (trials/common/kittrial.py, trials/opennn/core/kit_data.cpp)


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
                check_batches(c.resolve(), "bin" if f.suffix == ".bin" else "py")
                return c.resolve()
    raise DataError(f"--data-dir {data_dir}: no CIFAR-10 batches found "
                    f"(expected {' or '.join(LAYOUTS)} with data_batch_1[.bin])")


def check_batches(folder: Path, layout: str) -> None:
    """Every batch file a trial may read is whole and well-formed; DataError (one line) if not."""
    suffix = ".bin" if layout == "bin" else ""
    for i in BATCHES:
        path = folder / f"data_batch_{i}{suffix}"
        if not path.is_file():
            break
        try:
            (_check_bin if layout == "bin" else _check_pickle)(path)
        except OSError as exc:
            raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _check_bin(path: Path) -> None:
    size = path.stat().st_size
    if size == 0 or size % RECORD_BYTES:
        raise DataError(f"{path}: {size:,} bytes is not whole CIFAR-10 records of {RECORD_BYTES:,} bytes "
                        f"(an official batch is {10000 * RECORD_BYTES:,})")
    labels = path.read_bytes()[::RECORD_BYTES]
    if max(labels) >= NUM_CLASSES:
        bad = next(i for i, b in enumerate(labels) if b >= NUM_CLASSES)
        raise DataError(f"{path}: record {bad} has label {labels[bad]}, outside 0–{NUM_CLASSES - 1}: "
                        "not a CIFAR-10 binary batch")


def _check_pickle(path: Path) -> None:
    keys: set[str] = set()
    try:
        with open(path, "rb") as f:
            for op, arg, _pos in pickletools.genops(f):
                if isinstance(arg, (str, bytes)) and len(arg) <= 16:
                    keys.add(arg.decode("latin-1") if isinstance(arg, bytes) else arg)
                if op.name == "STOP":
                    break
            else:
                raise ValueError("it ends before the pickle does")
    except (ValueError, EOFError) as exc:  # genops: unknown opcode, truncated argument
        raise DataError(f"{path}: not a complete pickle ({str(exc)[:120]}): not a CIFAR-10 python batch") from None
    if not {"data", "labels"} <= keys:
        raise DataError(f"{path}: a pickle without data/labels: not a CIFAR-10 python batch")
