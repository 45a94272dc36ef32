"""Every process of a data trial dies with its parent: the kernel's parent-death signal (PR_SET_PDEATHSIG),
as the kit's local runtime gives its trials (host/kitctl/runtimes/local.py). A pool worker (corpus making,
dataset writing) or a loader worker calls `die_with_parent(parent_pid)` first thing: when the process that
started it ends (a `kill -9` of kitctl, SIGTERM, an OOM kill), the kernel SIGKILLs it, so nothing is left
running on, writing a corpus nobody waits for. A parent that died before the call is caught by the getppid()
check. Linux only; elsewhere a no-op."""
from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


_PRCTL = _prctl()


def die_with_parent(parent_pid: int | None = None) -> None:
    """SIGKILL this process when its parent ends; `parent_pid`: the parent it was started by (checked, so a
    parent already gone ends it now)."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


class Stop(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread as SIGINT's KeyboardInterrupt is, so `finally` blocks run
    (the pool's workers killed, a half-written folder removed)."""


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP end the process through its finally blocks (the default action would skip them)."""

    def handler(signum, _frame):
        raise Stop(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def worker_signals() -> None:
    """A pool worker's signals: SIGINT ignored (the parent ends the pool; a terminal's Ctrl-C reaches the whole
    group), SIGTERM and SIGHUP back to their default (end now: a forked worker inherits the parent's handlers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def torch_worker(_worker_id: int, parent: int) -> None:
    """A torch DataLoader's worker_init_fn: the worker dies with the process that built the loader."""
    die_with_parent(parent)
