"""The live view of a run, on stderr (stdout holds only the end table or --json): a rich table with a
progress bar (candidates done, left, ETA) on a terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core.outcome import TrialOutcome
from ..run.runner import CANCELLED


MAX_ROWS = 30  # the live table keeps the latest candidates; the artifact keeps them all


def _peak_text(o: TrialOutcome) -> str:
    p = o.peaks
    if p.device_delta_mib is not None:
        return f"{p.device_delta_mib:,.0f}"
    if p.process_mib is not None:  # --slots on a GPU: the candidate's own per-process memory
        return f"{p.process_mib:,.0f} (proc)"
    if p.framework_mib is not None:
        return f"{p.framework_mib:,.0f} (fw)"
    if getattr(p, "host_rss_mib", None) is not None:  # --device cpu: the trial's host memory
        return f"{p.host_rss_mib:,.0f} (RSS)"
    return "—"


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


# () -> (units left, including a running one; whether that is only an upper bound), or None: unknown.
LeftFn = Callable[[], "tuple[int, bool] | None"]


class Pace:
    """Candidates done and left, and the time left at the mean pace so far (what both views show).
    The runner tells how many are left (`attach`); a max-batch search knows only an upper bound."""

    def __init__(self) -> None:
        self.left_fn: LeftFn | None = None
        self.done = 0
        self.left: int | None = None
        self.bound = False
        self.busy_s = 0.0  # seconds of the candidates done (their own wall time, as the view saw it)
        self._t0: float | None = None

    def started(self) -> None:
        self._t0 = time.monotonic()
        got = None
        if self.left_fn is not None:
            try:
                got = self.left_fn()
            except Exception:  # a progress figure is never worth a run: show none
                got = None
        self.left, self.bound = (got if got is not None else (None, False))

    def finished(self) -> None:
        self.done += 1
        if self._t0 is not None:
            self.busy_s += time.monotonic() - self._t0
            self._t0 = None
        if self.left is not None:
            self.left = max(self.left - 1, 0)

    def eta_s(self) -> float | None:
        if self.left is None or not self.done:
            return None
        return self.busy_s / self.done * self.left

    def text(self) -> str:
        """"3 done, ≤ 9 left, ETA ≤ 4 min" (the max-batch bound) or "3 done, 7 left, ETA 2 min"."""
        if self.left is None:
            return f"{self.done} done"
        le = "≤ " if self.bound else ""
        eta = self.eta_s()
        eta_text = "ETA —" if eta is None else f"ETA {le}{_duration(eta)}"
        return f"{self.done} done, {le}{self.left} left, {eta_text}"


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class PlainView:
    """One line per event, for logs and pipes (stderr: stdout holds only the result)."""

    def __init__(self, out: TextIO | None = None, title: str = "kitctl") -> None:
        self.out = out or sys.stderr
        self.title = title
        self.progress = Pace()

    def attach(self, left: LeftFn) -> None:
        self.progress.left_fn = left

    def _p(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def candidate_started(self, engine: str, precision: str, batch: int, what: str) -> None:
        self.progress.started()
        self._p(f"[{time.strftime('%H:%M:%S')}] {engine} {precision} batch {batch} ({what}) …")

    def candidate_done(self, engine: str, precision: str, o: TrialOutcome, what: str, detail: str = "") -> None:
        self.progress.finished()
        figure = f", {detail}" if detail else ""
        self._p(f"[{time.strftime('%H:%M:%S')}] {engine} {precision} batch {o.batch} ({what}): "
                f"{_done_text(o, what)}{figure}, peak {_peak_text(o)} MiB, {o.elapsed_s:.1f} s{_cause_text(o, what)} "
                f"[{self.progress.text()}]")

    def note(self, text: str) -> None:
        self._p(text)

    def close(self) -> None:
        pass


class LiveView:
    """A rich table that updates in place (engine, precision, batch, state, peak MiB, seconds) above a
    progress bar: candidates done of done + left, elapsed, ETA (rich.progress)."""

    def __init__(self, console: Console, title: str = "kitctl") -> None:
        self.console = console
        self.title = title
        self.rows: list[list[Any]] = []
        self.started: float | None = None
        self.progress = Pace()
        # The ETA is the Pace's (the mean time of the candidates done × those left), the same figure the
        # plain lines print: rich's own estimate needs two completed steps within its window.
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[left]}"), TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                            console=console)
        self.task = self.bar.add_task("candidates done", total=None, left="", eta="ETA —")
        # get_renderable: the running row's seconds tick on every refresh.
        self.live = Live(console=console, refresh_per_second=4, get_renderable=self._render)
        self.live.start()

    def attach(self, left: LeftFn) -> None:
        self.progress.left_fn = left

    def _render(self) -> Group:
        return Group(self._table(), self.bar)

    def _update_bar(self) -> None:
        p = self.progress
        le = "≤ " if p.bound else ""
        left = "" if p.left is None else f"({le}{p.left} left)"
        eta = p.eta_s()
        self.bar.update(self.task, completed=p.done, total=None if p.left is None else p.done + p.left, left=left,
                        eta="ETA —" if eta is None else f"ETA {le}{_duration(eta)}")

    def _table(self) -> Table:
        t = Table(title=self.title, expand=False)
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
        self.progress.started()
        self._update_bar()
        self.rows.append([engine, precision, f"{batch:,}", what, "running…", "", "0"])
        self.live.refresh()

    def candidate_done(self, engine: str, precision: str, o: TrialOutcome, what: str, detail: str = "") -> None:
        style = "dim" if what == CANCELLED else "green" if o.passed else (
            "yellow" if o.status.is_memory_failure else "red")
        state = _done_text(o, what) + (f", {detail}" if detail else "") + _cause_text(o, what)
        self.rows[-1] = [engine, precision, f"{o.batch:,}", what, f"[{style}]{escape(state)}[/{style}]",
                         _peak_text(o), f"{o.elapsed_s:.1f}"]
        self.started = None
        self.progress.finished()
        self._update_bar()
        self.live.refresh()

    def note(self, text: str) -> None:
        self.live.console.print(text)

    def close(self) -> None:
        self.live.stop()


def make_view(console: Console, title: str = "kitctl") -> PlainView | LiveView:
    """`console`: stderr's (the view never writes to stdout). `title`: the benchmark, e.g. "Max batch"."""
    return LiveView(console, title) if console.is_terminal else PlainView(title=title)


def run_view(console: Console | None, s: Any) -> PlainView | LiveView:
    """The live view, on stderr (`console`: a stderr console, default the process's), titled with the
    benchmark (`s`: the run's kitctl.run.session.Setup)."""
    from ..output import stderr_console

    view = make_view(console or stderr_console(), f"{s.config.TITLE} — candidates")
    for n in s.notes:
        view.note(n)
    view.note(f"run {s.doc['run_id']} ({s.rt.name} runtime)")
    return view
