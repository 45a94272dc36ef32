"""The `kitctl` command line: the typer app and its commands (application.py), the shared run flags
(options.py), the live progress view (view.py); the only package that imports typer. Exit codes and the
one-line error: kitctl.errors.

Importing this package loads nothing else: a benchmark's command imports `cli.options` for its flags, and
the app (which loads every benchmark through the registry) is loaded only when `app`, `main`, `command` or
`version_text` is first asked for here.
"""
from __future__ import annotations

from typing import Any

_LAZY = ("app", "command", "main", "version_text")
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import application

        return getattr(application, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
