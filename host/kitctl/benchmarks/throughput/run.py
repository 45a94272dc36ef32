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
from ...runner import UnitRunner, find_cell
from ...core.watch import Watcher
from ...core.stats import median, summarize


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


def new_throughput_cell(engine: str, precision: str, batch: int) -> dict[str, Any]:
    return {"engine": engine, "precision": precision, "batch": batch, "state": "pending",
            "status": None, "reason": "", "runs": [], "summary": None, "warmup_seconds": None,
            "peak_vram": None, "trials": []}


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


def replay_problem(cell: dict[str, Any], batch: int, runs: int) -> str | None:
    """Why a recorded cell is not one this configuration's runs could have left, or None."""
    if cell.get("batch", batch) != batch:
        return f"its batch is {cell.get('batch')}, the configuration's {batch}"
    recorded = cell["runs"]
    if len(recorded) > runs:
        return f"it records {len(recorded)} runs of {runs}"
    for i, r in enumerate(recorded, 1):
        if r["run"] != i or r.get("batch", batch) != batch:
            return f"run {i} is numbered {r['run']} at batch {r.get('batch')}"
        if "status" not in r:
            return f"run {i} has no outcome"
        if r["status"] != "ok" and i < len(recorded):
            return f"run {i} failed, yet more runs follow it"
    return None


def _max(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    return max(vals) if vals else None


class ThroughputRunner(UnitRunner):
    """Throughput's cell: `runs` fresh runs at one batch (signals, saving, cleanup: UnitRunner's)."""

    plan: ThroughputPlan  # type: ignore[assignment]

    def _run_cell(self, engine: Engine, precision: str) -> None:  # type: ignore[override]
        batch = self.plan.base_request.batch
        cell = find_cell(self.doc, engine.name, precision)
        if cell is None:
            cell = new_throughput_cell(engine.name, precision, batch)
            self.doc["results"].append(cell)
        cell["state"] = "running"
        n = self.plan.runs
        # Resumed: every recorded run's figures are recomputed from its outcome, and the cell's
        # status and summary from those (a partial's own summary is not trusted).
        for i, r in enumerate(cell["runs"], 1):
            out = TrialOutcome.from_json(r)
            figs, why = run_figures(out)
            cell["runs"][i - 1] = {"run": i, **figs, **out.to_json()}
            if why is not None:
                self._finish(cell, f"run {i}/{n} failed — {why}")
                return
        while len(cell["runs"]) < n:
            i = len(cell["runs"]) + 1
            what = f"run {i}/{n}"
            req = self._request(engine, precision, batch, None)
            self.view.candidate_started(engine.name, precision, batch, what)
            out = self.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher())
            self.view.candidate_done(engine.name, precision, out, what)
            self._record_versions(engine, out)
            figs, why = run_figures(out)
            cell["runs"].append({"run": i, **figs, **out.to_json()})
            if why is not None:
                self._finish(cell, f"run {i}/{n} failed — {why}")
                self.view.note(f"{engine.name} {precision}: FAILED, {cell['reason']}")
                return
            self.view.note(f"{engine.name} {precision} {what}: {figs['images_per_second']:,.1f} images/s "
                           f"(warm-up {figs['warmup_seconds'] or 0:.1f} s)")
            self.save()
        self._finish(cell, None)

    def _finish(self, cell: dict[str, Any], failure: str | None) -> None:  # type: ignore[override]
        runs = cell["runs"]
        cell["peak_vram"] = {
            "device_delta_mib": _max([(r.get("peaks") or {}).get("device_delta_mib") for r in runs]),
            "framework_mib": _max([(r.get("peaks") or {}).get("framework_mib") for r in runs]),
            "source": "max over the cell's runs (NVML device delta; the framework allocator's peak)",
        }
        if failure is not None:
            # Fail loudly: no summary, no median of the runs that did pass.
            cell.update(state="done", status="failed", reason=failure, summary=None, warmup_seconds=None)
        else:
            ips = [r["images_per_second"] for r in runs]
            warm = [r["warmup_seconds"] for r in runs if r.get("warmup_seconds") is not None]
            cell.update(state="done", status="ok", reason="", summary=summarize(ips, self.plan.ci_level),
                        warmup_seconds=median(warm) if warm else None)
        self.save()
