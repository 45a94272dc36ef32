"""The `kitctl` console script: SIGINT/SIGTERM/SIGHUP are handled before anything heavy is imported.

Importing the CLI (typer, rich, jsonschema) takes a few hundred milliseconds; a signal then used to
end kitctl with a KeyboardInterrupt traceback or silently (rc −15). From here on every handled
signal exits 130 with one line (README "Exit codes").
"""
import _signal  # first, and the interpreter's built-in part of `signal`: nothing to load from disk
import sys

# Before anything else of kitctl is imported (its first imports took milliseconds in which a SIGINT
# was a KeyboardInterrupt traceback): a signal now ends the process with the one line, nothing having
# been written yet. `signals.install()` in `main` replaces this.
_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _while_importing(signum: int, _frame: object) -> None:
    sys.stderr.write(f"kitctl: interrupted ({_NAMES.get(signum, signum)}) while starting; nothing written\n")
    raise SystemExit(130)  # through the imports under way: no traceback, exit 130


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
