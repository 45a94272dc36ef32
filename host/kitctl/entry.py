"""The `kitctl` console script: SIGINT/SIGTERM/SIGHUP are handled before anything heavy is imported.

Importing the CLI (typer, rich, jsonschema) takes a few hundred milliseconds; a signal then used to
end kitctl with a KeyboardInterrupt traceback or silently (rc −15). From here on every handled
signal exits 130 with one line (README "Exit codes").
"""
from __future__ import annotations

import _signal  # the interpreter's built-in part of `signal`: no enum module to import first
import os
import sys

# Before anything else of kitctl is imported (its first import, even `typing`, took milliseconds in
# which a SIGINT was a KeyboardInterrupt traceback): a signal now ends the process at once with the
# one line, nothing having been written yet. `signals.install()` in `main` replaces this.
_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _while_importing(signum: int, _frame: object) -> None:
    try:
        sys.stderr.write(f"kitctl: interrupted ({_NAMES.get(signum, signum)}) while starting; nothing written\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


for _s in _NAMES:
    _signal.signal(_s, _while_importing)

from .core import signals  # noqa: E402  (after the handlers above)


def main() -> None:
    signals.install()
    try:
        from .cli import main as cli_main
        signals.check()
    except signals.Interrupted as exc:
        sys.stderr.write(f"kitctl: interrupted ({exc}) while starting; nothing written\n")
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
