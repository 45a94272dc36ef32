"""SIGINT, SIGTERM and SIGHUP end kitctl one way: `Interrupted`, exit 130, a resumable partial or nothing.

The handler raises `Interrupted` at the next bytecode. It derives from BaseException, as
KeyboardInterrupt does, so no `except Exception` on the way (the Docker SDK's, ours) swallows it.
C code can still drop an exception raised from a handler (seen: `compile()` while a module is
imported), so the handler also records the signal, and `check()` raises it again: at the start
of every critical block (every artifact write) and at the CLI's milestones.
Inside `critical()` (an artifact write) a signal is held until the block ends, so a file is never
half-written and no temporary is left behind; once `stop_interrupting()` is called (the exit
path has begun, or the final artifact is written) further signals are ignored.

This module imports nothing heavy: the console script installs the handlers before it imports
the CLI (typer, rich), so a signal during start-up is handled too.
"""
from __future__ import annotations

import signal
import sys
from types import TracebackType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A handled signal arrived; args[0] is its name (SIGINT, SIGTERM, SIGHUP)."""


_depth = 0  # open critical() blocks
_pending: str | None = None  # a signal held by critical()
_stopped = False  # the exit path has begun: ignore further signals
_received: str | None = None  # the first signal, until the exit path begins


def _handler(signum: int, _frame: Any) -> None:
    global _pending, _received
    if _stopped:
        return
    name = signal.Signals(signum).name
    _received = _received or name
    if _depth:
        _pending = _pending or name
        return
    raise Interrupted(name)


def _unraisable(hook: Any) -> Any:
    """sys.unraisablehook that stays quiet about an `Interrupted` Python could not raise (the
    handler ran inside a callback whose exceptions are dropped: logging's after-fork hook when a
    trial is spawned, a finalizer). The signal is recorded and `check()` raises it again, so the
    user sees the one interrupted line, not "Exception ignored in …" and a traceback."""
    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Interrupted):
            return
        hook(unraisable)
    quiet.kit_signals = True  # type: ignore[attr-defined]
    return quiet


def install() -> dict[int, Any]:
    """Handle SIGINT/SIGTERM/SIGHUP from now on (main thread only); returns the previous handlers.
    Installing again (the CLI after the console script) keeps a signal already received."""
    global _pending, _stopped, _received
    if not installed():
        _pending, _stopped, _received = None, False, None
    if not getattr(sys.unraisablehook, "kit_signals", False):
        sys.unraisablehook = _unraisable(sys.unraisablehook)
    return {s: signal.signal(s, _handler) for s in HANDLED}


def check() -> None:
    """Raise the signal received earlier whose exception was lost on the way, if any."""
    if _received is not None and not _stopped and not _depth:
        raise Interrupted(_received)


def restore(previous: dict[int, Any]) -> None:
    for s, h in previous.items():
        if h is not None:
            signal.signal(s, h)


def stop_interrupting() -> None:
    """The run is ending (interrupted, or its final artifact is written): ignore further signals."""
    global _pending, _stopped, _received
    _stopped, _pending, _received = True, None, None


def installed() -> bool:
    return signal.getsignal(signal.SIGTERM) is _handler


class critical:
    """Hold handled signals until the block ends; then raise the held one (unless stopped)."""

    def __enter__(self) -> "critical":
        global _depth
        check()
        _depth += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        global _depth, _pending
        _depth -= 1
        if _depth == 0 and _pending is not None and not _stopped:
            name, _pending = _pending, None
            if exc_type is None:
                raise Interrupted(name)
