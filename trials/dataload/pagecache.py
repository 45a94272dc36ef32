"""Page-cache control for the data-loading sources: how much of a file set is in RAM (mincore), warm it
(read every byte), or drop it (posix_fadvise DONTNEED on every file, after a sync so no page stays dirty).

Recent kernels (seen on 6.18) evict with DONTNEED only for the file's owner (or a privileged caller): a
trial that is not the dataset's owner cannot make a cold source, and says so. Containers run as its owner.
Linux only (mincore through libc); every call returns the resident fraction it leaves, measured, so
an artifact says what the source really was rather than what was asked for.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_PROT_READ, _MAP_SHARED = 1, 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: Path) -> tuple[int, int]:
    """(resident pages, total pages) of one file, through mmap + mincore (maps nothing in, reads nothing)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    pages = (size + _PAGE - 1) // _PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths: list[Path]) -> float:
    res = tot = 0
    for p in paths:
        r, t = resident_pages(p)
        res, tot = res + r, tot + t
    return res / tot if tot else 1.0


def warm(paths: list[Path]) -> float:
    """Read every file fully into the page cache; returns the resident fraction afterwards."""
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(8 << 20):
                pass
    return resident_fraction(paths)


def drop(paths: list[Path]) -> float:
    """Evict every file from the page cache; returns the resident fraction afterwards (≈0 when it worked)."""
    os.sync()  # DONTNEED leaves dirty pages alone: a freshly written dataset must reach the disk first
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return resident_fraction(paths)
