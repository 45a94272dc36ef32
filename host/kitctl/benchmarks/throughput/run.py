"""Runs a throughput benchmark: per engine × precision, `runs` fresh candidates at one batch.

Each run is one `Runtime.run` of the trial with `--benchmark throughput` (a fresh process or
container), watched by the same NVML sampler as max-batch on a GPU (budget B, no
calibration: throughput does not search). images/s of a run = images ÷ timed window, from
the trial's result. A run that is not `ok` fails its cell loudly: the cell's summary stays
null and no figure of it is ever averaged in. The partial artifact is saved after every run;
`--resume` keeps the finished runs and continues.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ...core.budget import Budget
from ...core.engines import Engine
from ...core.outcome import Status, TrialOutcome
from ...core.protocol import TrialRequest
from ...run.runner import UnitRunner
from ...core.watch import Watcher
from ...core.stats import Summary, median, summarize
from ...core.steadiness import Steadiness, cell_steadiness
from ...core.typed import from_json, to_json, updated
from .config import STEADY_TOLERANCE
from .energy import run_steadiness, window_energy, window_readings
from .results import CellEnergy, RunEnergy, ThroughputCell, ThroughputRun, WindowReadings, cells


@dataclass
class ThroughputPlan:
    engines: list[Engine]
    precisions: list[str]
    base_request: TrialRequest  # benchmark/batch/warmup_steps/steps set; engine/mode/precision per run
    runs: int
    timeout_s: float
    budget: Budget | None  # None on --device cpu
    ci_level: float = 0.95
    watcher_factory: Callable[[float | None], Watcher] | None = None
    steady_tolerance: float = STEADY_TOLERANCE


def new_throughput_cell(engine: str, precision: str, batch: int) -> dict[str, Any]:
    """A new cell as the artifact records it, before its first run."""
    return to_json(ThroughputCell.pending(engine, precision, batch))


def _pos(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 else None


def run_figures(out: TrialOutcome) -> tuple[dict[str, Any], str | None]:
    """The run's raw figures from the trial's result, and why they are unusable (or None)."""
    r = out.result or {}
    images, window, warm = r.get("images"), _pos(r.get("window_seconds")), r.get("warmup_seconds")
    figs = {"images": images if isinstance(images, int) else None, "window_seconds": window,
            "warmup_seconds": warm if isinstance(warm, (int, float)) and math.isfinite(warm) else None,
            "loss_final": r.get("loss_final"), "images_per_second": None}
    if out.status is not Status.OK:
        return figs, f"{out.status.value}: {out.error or 'no detail'}"
    if not figs["images"] or figs["images"] <= 0 or window is None:
        return figs, "the trial's result lacks images/window_seconds"
    figs["images_per_second"] = figs["images"] / window
    return figs, None


def run_quality(result: dict[str, Any] | None, readings: dict[str, list] | None) -> dict[str, Any]:
    """What the host adds to a run beside its figure: the window's steadiness (from the trial's
    chunks), the energy and clocks over it (from the watcher's readings, kept with the run)."""
    r = result or {}
    w = r.get("window") if isinstance(r.get("window"), dict) else {}
    energy = window_energy(readings, w.get("start_unix"), w.get("end_unix"), r.get("images"))
    return {**run_steadiness(r), "energy": None if energy is None else from_json(RunEnergy, energy),
            "telemetry": None if readings is None else from_json(WindowReadings, readings)}


def run_record(i: int, out: TrialOutcome, readings: dict[str, list] | None) -> tuple[ThroughputRun, str | None]:
    """Run `i` as recorded: its figures, what the host adds to them, the trial's outcome; and why its figures
    are unusable (or None)."""
    figs, why = run_figures(out)
    return ThroughputRun(run=i, **figs, **run_quality(out.result, readings), **out.to_json()), why


def _medians(runs: tuple[ThroughputRun, ...]) -> CellEnergy | None:
    """The cell's energy: medians over its runs of joules per image and mean watts (None where no
    run measured them)."""
    energies = [r.energy for r in runs if isinstance(r.energy, RunEnergy)]

    def med(xs: list[Any]) -> float | None:
        vals = [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
        return median(vals) if vals else None
    out = CellEnergy(joules_per_image=med([e.joules_per_image for e in energies]),
                     mean_watts=med([e.mean_watts for e in energies]), runs=len(runs))
    return None if out.joules_per_image is None and out.mean_watts is None else out


def _max(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    return max(vals) if vals else None


def _quality_text(run: ThroughputRun) -> str:
    parts = []
    if run.steady is False:
        parts.append(f"not steady: halves {run.halves_change:+.1%}" if run.halves_change is not None
                     else "not steady")
    e = run.energy
    if e is not None and e.joules_per_image is not None:
        parts.append(f"{e.joules_per_image:.3g} J/image, {e.mean_watts:.0f} W")
    return "".join(f"; {p}" for p in parts)


class ThroughputRunner(UnitRunner):
    """Throughput's cell: `runs` fresh runs at one batch (signals, saving, cleanup: UnitRunner's).
    It reads a cell typed and writes it back whole after each change (the artifact's results stay JSON)."""

    plan: ThroughputPlan  # type: ignore[assignment]

    def units_left(self) -> tuple[int, bool] | None:
        """Runs still to start, the running one included (exact: every cell runs `runs`, a failure ends it)."""
        left = 0
        recorded = cells(self.doc)
        for e in self.plan.engines:
            for p in self.plan.precisions:
                cell = next((c for c in recorded if (c.engine, c.precision) == (e.name, p)), None)
                if cell is None:
                    left += self.plan.runs
                elif cell.state != "done":
                    left += max(self.plan.runs - len(cell.runs), 0)
        return left, False

    def _cell_at(self, engine: str, precision: str, batch: int) -> int:
        """Where the engine × precision cell is in the artifact's results (a new one appended where none is)."""
        for at, c in enumerate(cells(self.doc)):
            if (c.engine, c.precision) == (engine, precision):
                return at
        self.doc["results"].append(new_throughput_cell(engine, precision, batch))
        return len(self.doc["results"]) - 1

    def _put(self, at: int, cell: ThroughputCell) -> ThroughputCell:
        self.doc["results"][at] = to_json(cell)
        return cell

    def _run_cell(self, engine: Engine, precision: str) -> None:  # type: ignore[override]
        batch = self.plan.base_request.batch
        at = self._cell_at(engine.name, precision, batch)
        cell = self._put(at, updated(from_json(ThroughputCell, self.doc["results"][at]), state="running"))
        n = self.plan.runs
        # Resumed: every recorded run's figures are recomputed from its outcome, and the cell's
        # status and summary from those (a partial's own summary is not trusted).
        runs = list(cell.runs)
        for i, r in enumerate(cell.runs, 1):
            kept = to_json(r.telemetry) if isinstance(r.telemetry, WindowReadings) else None
            runs[i - 1], why = run_record(i, TrialOutcome.from_json(to_json(r)), kept)
            if why is not None:
                self._finish(at, updated(cell, runs=tuple(runs)), f"run {i}/{n} failed — {why}")
                return
        cell = self._put(at, updated(cell, runs=tuple(runs)))
        while len(cell.runs) < n:
            i = len(cell.runs) + 1
            what = f"run {i}/{n}"
            req = self._request(engine, precision, batch, None)
            self.view.candidate_started(engine.name, precision, batch, what)
            watcher = self._watcher()
            out = self.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=watcher)
            self._record_versions(engine, out)
            run, why = run_record(i, out, self._readings(watcher, out.result))
            # One line (one row) per run, its figure in it: a second line repeating the run read as a second run.
            detail = "" if why is not None else (f"{run.images_per_second:,.1f} images/s (warm-up "
                                                 f"{run.warmup_seconds or 0:.1f} s{_quality_text(run)})")
            self.view.candidate_done(engine.name, precision, out, what, detail)
            cell = self._put(at, updated(cell, runs=(*cell.runs, run)))
            if why is not None:
                cell = self._finish(at, cell, f"run {i}/{n} failed — {why}")
                self.view.note(f"{engine.name} {precision}: FAILED, {cell.reason}")
                return
            self.save()
        self._finish(at, cell, None)

    @staticmethod
    def _readings(watcher: Watcher | None, result: dict[str, Any] | None) -> dict[str, list] | None:
        """The watcher's energy/clock readings around the trial's window (None: no GPU watcher, or a
        trial that stamped no window)."""
        w = (result or {}).get("window")
        series = getattr(watcher, "telemetry", None)
        if not series or not isinstance(w, dict):
            return None
        start, end = w.get("start_unix"), w.get("end_unix")
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            return None
        return window_readings(series, float(start), float(end))

    def _finish(self, at: int, cell: ThroughputCell, failure: str | None) -> ThroughputCell:
        """The cell done (ok, or failed with `failure`), written at `at` and saved."""
        runs = cell.runs
        peak_vram = {
            "device_delta_mib": _max([(r.peaks or {}).get("device_delta_mib") for r in runs]),
            "framework_mib": _max([(r.peaks or {}).get("framework_mib") for r in runs]),
            "source": "max over the cell's runs (NVML device delta; the framework allocator's peak)",
        }
        if failure is not None:
            # Fail loudly: no summary, no median of the runs that did pass.
            cell = updated(cell, peak_vram=peak_vram, state="done", status="failed", reason=failure, summary=None,
                           warmup_seconds=None, energy=None, steadiness=None)
        else:
            warm = [r.warmup_seconds for r in runs if r.warmup_seconds is not None]
            summary = from_json(Summary, summarize([r.images_per_second for r in runs], self.plan.ci_level))
            steadiness = cell_steadiness([to_json(r) for r in runs], to_json(summary), self.plan.steady_tolerance)
            cell = updated(cell, peak_vram=peak_vram, state="done", status="ok", reason="", summary=summary,
                           warmup_seconds=median(warm) if warm else None, energy=_medians(runs),
                           steadiness=from_json(Steadiness, steadiness))
        self._put(at, cell)
        self.save()
        return cell
