"""What the data benchmarks' reports say about their cells (dataload, train-e2e, datasize), and FFCV's published
figures they are set beside."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Protocol, TypeVar, Union


# Published by FFCV for ImageNet's 1,281,167 training images (GB), as docs/data.md quotes them; the
# cells it does not quote stay empty rather than guessed.
FFCV_PUBLISHED_GB = {("jpeg90", 256): 22.01, ("jpeg90", 512): 65.47, ("raw", 256): 169.79, ("mix90", 256): 58.36}
FFCV_PUBLISHED_LOAD = {("ffcv", "jpeg90", 512, "ram"): 31_278, ("ffcv", "raw", 256, "ram"): 172_801,
                       ("ffcv", "jpeg90", 512, "cold"): 16_631, ("ffcv", "raw", 512, "cold"): 1_956,
                       ("ffcv", "raw", 256, "cold"): 6_870}
FFCV_MACHINE = "AWS p3dn.24xlarge, 96 vCPU, all cores; cold = EBS"
C = TypeVar("C")


# -- what the data benchmarks' reports say about their cells (dataload, train-e2e, datasize) ----------------------
class DataCell(Protocol):
    """A data benchmark's typed cell (dataload's DataloadCell, train-e2e's TrainE2ECell) as these caveats read it:
    its status, why it failed (None: it did not) and how many of its runs passed."""
    @property
    def status(self) -> str | None: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def runs_ok(self) -> int: ...


# A cell as datasize's report still passes it: the recorded dict (its record, DatasizeCell, has no `failure`
# or `runs_ok` yet); the two readers below are the only ones of such a dict.
Cell = Union[DataCell, dict[str, Any]]


def _failure(c: Cell) -> str | None:
    if not isinstance(c, dict):
        return c.failure
    failed = c.get("status") == "failed" or (c.get("status") not in ("ok", "pending", None) and c.get("error"))
    return (c.get("reason") or c.get("error") or c.get("status")) if failed else None


def _runs_ok(c: Cell) -> int:
    if not isinstance(c, dict):
        return c.runs_ok
    return sum(1 for r in c.get("runs") or [] if r.get("status") == "ok")


def _status(c: Cell) -> str | None:
    return c.get("status") if isinstance(c, dict) else c.status


def cell_caveats(cells: Sequence[C] | dict[str, Any], label: Callable[[C], str],
                 runs_asked: int | None) -> list[str]:
    """A caveat per failed cell (its reason: the row has no figure) and per finished cell whose figure rests on
    fewer passing runs than the run asked for (`runs_asked`; None: one unit per cell, as datasize's). `cells`: the
    artifact's typed cells (datasize: its document, whose recorded cells are read as dicts)."""
    out = []
    for c in (cells["results"] if isinstance(cells, dict) else cells):
        why = _failure(c)
        if why is not None:
            out.append(f"**Failed cell** — {label(c)}: {why}. No figure in its row; a run that did not end cleanly "
                       "is never counted, even one that printed a result first.")
        elif _status(c) == "ok" and runs_asked:
            n = _runs_ok(c)
            if n < runs_asked:
                out.append(f"**Fewer runs than asked** — {label(c)}: its figure is the median of {n} of the "
                           f"{runs_asked} runs asked for.")
    return out


def partial_caveat(src: Any, label: Callable[[C], str], planned: int, noun: str, runs_asked: int | None,
                   cells: Sequence[C] | None = None) -> str:
    """An interrupted data run's caveat (the engines' one reads engine × precision cells): what finished, what
    did not and how far, and how to continue it. `cells`: the artifact's typed cells (None: datasize's recorded
    ones, as dicts)."""
    d = src.doc
    by = f" by {d['interrupted_by']}" if d.get("interrupted_by") else ""
    every: Sequence[Any] = d["results"] if cells is None else cells
    done = sum(1 for c in every if _status(c) != "pending")
    unfinished = [label(c) + (f" ({_runs_ok(c)} of {runs_asked} runs)" if runs_asked else "")
                  for c in every if _status(c) == "pending"]
    run = f"kitctl run {src.benchmark} --resume"
    resume = f"`{run} {src.name}`" if src.name.endswith(".partial.json") else f"`{run}` on its `.partial.json`"
    text = f"**Partial result** — the artifact is `{src.state}`{by}: {done} of {planned} {noun} finished"
    if unfinished:
        text += f"; unfinished: {'; '.join(unfinished)}"
    return text + f". An unfinished cell has no figure; continue with {resume}."


def scatter_note(label: str, windows: Sequence[tuple[float | None, Sequence[Any] | None]],
                 tolerance: float) -> str | None:
    """For a cell that is not steady: each run's halves change (`windows`: (halves_change, its timed epochs) per run)
    against the noise its own epochs' scatter gives (core/steadiness.py `halves_noise`), and whether the change is a
    trend or that scatter, with the window at which the scatter would keep a steady loader within `tolerance`.
    None where no run has the epochs to tell."""
    from ...core.steadiness import STEADY_NOISE_SDS, halves_noise

    judged = []
    for change, epochs in windows:
        eps = [e for e in (epochs or ()) if e.images_per_second and e.seconds]
        noise = halves_noise([e.images_per_second for e in eps], [e.seconds for e in eps])
        if isinstance(change, (int, float)) and noise is not None:
            judged.append((change, noise))
    if not judged:
        return None

    def span(xs: list[float], fmt: str) -> str:
        lo, hi = min(xs), max(xs)
        return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"

    changes = " / ".join(f"{c:+.1%}" for c, _ in judged)
    sds = span([n.sd for _, n in judged], ".1%")
    trend = [i + 1 for i, (c, n) in enumerate(judged) if abs(c) > STEADY_NOISE_SDS * n.sd]
    head = (f"**Epoch scatter** — {label}: the runs' window halves differ by {changes}; their own epochs scatter "
            f"(CV {span([n.cv for _, n in judged], '.0%')}, lag-1 autocorrelation "
            f"{span([n.lag1 for _, n in judged], '.2f')}) enough to move the halves by ±{sds} (one standard "
            f"deviation) were the loader steady. ")
    if trend:
        return head + (f"In run{'s' if len(trend) > 1 else ''} {', '.join(map(str, trend))} the change is more than "
                       f"two of those: a trend inside the window (a start-up not over, or the machine's capacity "
                       f"changing), not only scatter.")
    need = span([n.window_for(tolerance) for _, n in judged], ",.0f")
    return head + (f"Every change is within two of them: the halves show the epochs' scatter, and a trend smaller "
                   f"than it cannot be told from it in a window this long. At this scatter a "
                   f"window of about {need} s (--window-seconds) keeps a steady loader's halves within "
                   f"{tolerance:.0%} (two standard deviations); tools/cpu_probe.py tells whether the machine's CPUs "
                   f"scatter as much.")
