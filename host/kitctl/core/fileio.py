"""Writing a file so that a full disk or an interruption leaves the old file or none, never a torn one;
reading a result file only when it is a regular file of a sane size (never a FIFO, device or huge file)."""
from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a temporary file beside `path`, which is then renamed into place. Only a regular file (or a
    symlink, which the rename replaces, not its target) is ever replaced: `--out /dev/null` run as root would
    otherwise swap the device for a regular file (and a FIFO or a folder there is not the user's report either)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise OSError(errno.EEXIST, f"{_kind(st.st_mode)} is there, not a regular file: not replaced")
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


# Far above any artifact (the largest committed one is under 1 MiB): what is bigger is not a result,
# and reading it whole could exhaust memory.
MAX_RESULT_BYTES = 64 << 20


class NotRegularFile(OSError):
    """The path opens to a FIFO, a device, a socket or a folder, or is larger than the cap: one line
    (its str) for the caller to show; nothing was read."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "of another kind"


def read_regular(path: Path, cap: int = MAX_RESULT_BYTES) -> bytes:
    """The bytes of a regular file of at most `cap` bytes. Opened without blocking (a FIFO with no
    writer would hang a plain open) and checked on the open descriptor, so a file swapped for a FIFO
    or a device after a check is still refused; at most cap + 1 bytes are ever read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"cannot read {path}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise NotRegularFile(f"cannot read {path}: {st.st_size:,} bytes, above the {cap >> 20} MiB a result "
                                 "file may be")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:  # grew while read
            raise NotRegularFile(f"cannot read {path}: above the {cap >> 20} MiB a result file may be")
        return data
    finally:
        os.close(fd)


def escapes(path: Path, folder: Path) -> bool:
    """A symlink under `folder` whose target lies outside it (or dangles): a listing does not follow it."""
    if not path.is_symlink():
        return False
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling or a loop
        return True
    return not target.is_relative_to(folder.resolve())


def parse_json(text: str | bytes):
    """json.loads, with input nested too deeply for the parser (`[[[[...` a hostile or broken file can hold)
    raised as the ValueError a malformed file raises, not as a RecursionError no caller expects."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
