"""Exit codes and the one-line error: the only place that defines them (README "Exit codes").

  0   the run finished and every engine × precision has a capacity (bounded or censored);
      `run throughput` and the data benchmarks: every cell has its figure; `doctor`: a GPU run can start;
      `compare`: no regression
  1   the run finished but some cell has none (no passing batch, an invalid non-memory failure, a failed
      run); `doctor`: a GPU run cannot start; `compare`: a regression beyond the threshold
  2   bad input or an unfit host: one line on stderr, nothing written
  3   `compare`: the results are not comparable (other setups)
  130 interrupted (SIGINT/SIGTERM/SIGHUP): the partial artifact is kept (or nothing was written yet);
      `--resume` continues it

Below the CLI a command ends by raising `Exit(code)` (what it had to say already said, `fail` says the
one line); the CLI (kitctl.cli) turns it into the process's exit status. Nothing else raises typer's.
"""
from __future__ import annotations

from rich.console import Console

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_REGRESSION, EXIT_NOT_COMPARABLE = 1, 3  # `kitctl compare`
EXIT_READY, EXIT_NOT_READY = 0, 1  # `kitctl doctor`: a GPU run can start here, or cannot
EXIT_DIFFERS = 1  # `kitctl images build --check-reproducible`: two builds of an image differ

err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)  # messages carry [brackets] (daemon errors)


class Fail(Exception):
    """Bad input or an unfit host: one line, exit 2."""


class Exit(Exception):
    """The command is over with this exit status; whatever it had to say is said."""

    def __init__(self, code: int = EXIT_OK) -> None:
        super().__init__(code)
        self.code = code


def fail(message: object, code: int = EXIT_USAGE) -> Exit:
    """Say the one line `kitctl: <message>` on stderr; returns the Exit to raise (`raise fail(exc)`)."""
    err.print(f"kitctl: {message}")
    return Exit(code)
