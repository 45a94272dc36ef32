"""The `kitctl` console script: SIGINT/SIGTERM/SIGHUP are handled before anything heavy is imported.

Importing the CLI (typer, rich, jsonschema) takes a few hundred milliseconds; a signal then used to
end kitctl with a KeyboardInterrupt traceback or silently (rc −15). From here on every handled
signal exits 130 with one line (README "Exit codes").
"""
from __future__ import annotations

import sys

from .core import signals


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
