"""Exit codes and the one-line error: shared by the CLI, a run's launch and every benchmark's command.

Exit codes (README "Exit codes"):
  0  the run finished and every engine × precision has a capacity (bounded or censored)
  1  the run finished but some engine × precision has none (no passing batch, or an invalid
     non-memory failure)
     `run throughput`: 0 every engine × precision has a summary, 1 some cell failed (a run not ok)
  2  bad input or an unfit host: one line on stderr, nothing written
  130 interrupted (SIGINT/SIGTERM/SIGHUP): the partial artifact is kept (or nothing was written yet);
      `--resume` continues it
"""
from __future__ import annotations

from rich.console import Console

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)  # messages carry [brackets] (daemon errors)


class Fail(Exception):
    """Bad input or an unfit host: one line, exit 2."""
