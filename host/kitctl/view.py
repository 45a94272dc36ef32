"""The live view of a run: a rich table on a terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from .core.outcome import TrialOutcome

MAX_ROWS = 30  # the live table keeps the latest candidates; the artifact keeps them all


def _peak_text(o: TrialOutcome) -> str:
    p = o.peaks
    if p.device_delta_mib is not None:
        return f"{p.device_delta_mib:,.0f}"
    if p.framework_mib is not None:
        return f"{p.framework_mib:,.0f} (fw)"
    return "—"


CANCELLED = "cancelled"  # the runner's `what` for a speculative candidate it stopped (core/speculate.py)


def _done_text(o: TrialOutcome, what: str) -> str:
    # A cancelled speculation was killed by the kit (kit_interrupt), not by a crash: say why it ended.
    return "stopped, the search no longer needs it" if what == CANCELLED else _state_text(o)


def _cause_text(o: TrialOutcome, what: str) -> str:
    """ — and why, for a candidate that crashed, erred or timed out (a memory failure is the
    search's expected answer and says enough by its status)."""
    if what == CANCELLED or o.passed or o.status.is_memory_failure:
        return ""
    cause = o.cause
    return f" — {cause}" if cause else ""


def _state_text(o: TrialOutcome) -> str:
    s = o.status.value
    if o.killed_by.value != "none":
        s += f" [{o.killed_by.value}]"
    return s


class PlainView:
    """One line per event, for logs and pipes."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def _p(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def candidate_started(self, engine: str, precision: str, batch: int, what: str) -> None:
        self._p(f"[{time.strftime('%H:%M:%S')}] {engine} {precision} batch {batch} ({what}) …")

    def candidate_done(self, engine: str, precision: str, o: TrialOutcome, what: str) -> None:
        self._p(f"[{time.strftime('%H:%M:%S')}] {engine} {precision} batch {o.batch} ({what}): "
                f"{_done_text(o, what)}, peak {_peak_text(o)} MiB, {o.elapsed_s:.1f} s{_cause_text(o, what)}")

    def note(self, text: str) -> None:
        self._p(text)

    def close(self) -> None:
        pass


class LiveView:
    """A rich table that updates in place: engine, precision, batch, state, peak MiB, seconds."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.rows: list[list[Any]] = []
        self.started: float | None = None
        # get_renderable: the running row's seconds tick on every refresh.
        self.live = Live(console=console, refresh_per_second=4, get_renderable=self._table)
        self.live.start()

    def _table(self) -> Table:
        t = Table(title="kitctl candidates", expand=False)
        for col in ("Engine", "Precision", "Batch", "What", "State", "Peak MiB", "Seconds"):
            t.add_column(col, justify="right" if col in ("Batch", "Peak MiB", "Seconds") else "left")
        for r in self.rows[-MAX_ROWS:]:
            row = list(r)
            if row[4] == "running…" and self.started is not None:
                row[6] = f"{time.monotonic() - self.started:.0f}"
            t.add_row(*[str(x) for x in row])
        return t

    def candidate_started(self, engine: str, precision: str, batch: int, what: str) -> None:
        self.started = time.monotonic()
        self.rows.append([engine, precision, f"{batch:,}", what, "running…", "", "0"])
        self.live.refresh()

    def candidate_done(self, engine: str, precision: str, o: TrialOutcome, what: str) -> None:
        style = "dim" if what == CANCELLED else "green" if o.passed else (
            "yellow" if o.status.is_memory_failure else "red")
        self.rows[-1] = [engine, precision, f"{o.batch:,}", what,
                         f"[{style}]{escape(_done_text(o, what) + _cause_text(o, what))}[/{style}]",
                         _peak_text(o), f"{o.elapsed_s:.1f}"]
        self.started = None
        self.live.refresh()

    def note(self, text: str) -> None:
        self.live.console.print(text)

    def close(self) -> None:
        self.live.stop()


def make_view(console: Console) -> PlainView | LiveView:
    return LiveView(console) if console.is_terminal else PlainView()
