"""Runs a max-batch benchmark: per engine × precision, calibrate, search, record.

The runner only sees `Runtime`, `Watcher`, a strategy and the artifact store: it never knows
which runtime ran a candidate, nor whether a GPU is behind the watcher. What every benchmark's
runner shares (signals, saving after each unit, the loop over engines × precisions, cleanup) is
`kitctl.runner.UnitRunner`; this module is max batch's cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...core.budget import Budget, BudgetError, framework_budget, overhead_from
from ...core.engines import Engine
from ...core.outcome import SearchStatus, TrialOutcome
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from ...core.search import STRATEGIES, SearchConfig
from ...core.signals import Interrupted  # noqa: F401  (re-exported: SIGINT/SIGTERM/SIGHUP during a run)
from ...runner import UnitRunner, find_cell


@dataclass
class RunPlan:
    engines: list[Engine]
    precisions: list[str]
    base_request: TrialRequest  # engine/mode/batch/precision filled per candidate
    search: SearchConfig
    strategy: str
    timeout_s: float
    budget: Budget | None  # None on --device cpu
    calibration_batch: int = 16
    watcher_factory: Callable[[float | None], Watcher] | None = None  # budget → watcher


def replay_problem(trials: Sequence[dict[str, Any]], search: SearchConfig, strategy: str) -> str | None:
    """Why these recorded candidates are not the ones the search would have run, or None.

    Replays the strategy over them: the i-th candidate must be the batch it asks for after the
    first i − 1, and none may follow its decision to stop."""
    decide = STRATEGIES[strategy]
    history: list[tuple[int, Any]] = []
    for i, t in enumerate(trials, 1):
        d = decide(history, search)
        if d.done:
            return f"candidate {i} (batch {t['batch']}) comes after the search had ended"
        if d.batch != t["batch"]:
            return f"candidate {i} ran batch {t['batch']} where the search asks for batch {d.batch}"
        history.append((t["batch"], TrialOutcome.from_json(t).status))
    return None


def _summary(cell: dict[str, Any]) -> str:
    return f"{cell.get('search_status')} max_batch {cell.get('max_batch')} next_batch {cell.get('next_batch')}"


def new_cell(engine: str, precision: str) -> dict[str, Any]:
    return {"engine": engine, "precision": precision, "state": "pending", "calibration": None,
            "overhead": None, "framework_budget_mib": None, "max_batch": None, "next_batch": None,
            "search_status": None, "reason": "", "peaks_at_max": None, "trials": []}


class Runner(UnitRunner):
    """Max batch's cell: calibrate (GPU), then search, one fresh candidate at a time."""

    plan: RunPlan  # type: ignore[assignment]

    def _calibrate(self, engine: Engine, precision: str, cell: dict[str, Any]) -> int | None:
        """Overhead = device-delta peak − framework peak at a small batch (GPU only)."""
        if self.plan.budget is None or self.plan.watcher_factory is None:
            return None
        if cell["calibration"] is not None:
            # Resumed: the overhead follows from the recorded candidate, not from the partial's say-so.
            ov = overhead_from(TrialOutcome.from_json(cell["calibration"]))  # BudgetError if it failed
            cell["overhead"] = ov.to_json()
            cell["framework_budget_mib"] = framework_budget(self.plan.budget, ov)
            return cell["framework_budget_mib"]
        req = self._request(engine, precision, self.plan.calibration_batch, None)
        what = "calibration"
        self.view.candidate_started(engine.name, precision, req.batch, what)
        out = self.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher())
        self.view.candidate_done(engine.name, precision, out, what)
        self._record_versions(engine, out)
        cell["calibration"] = out.to_json()
        ov = overhead_from(out)  # BudgetError if it failed
        cell["overhead"] = ov.to_json()
        cell["framework_budget_mib"] = framework_budget(self.plan.budget, ov)
        self.save()
        return cell["framework_budget_mib"]

    def _run_cell(self, engine: Engine, precision: str) -> None:
        cell = find_cell(self.doc, engine.name, precision)
        if cell is None:
            cell = new_cell(engine.name, precision)
            self.doc["results"].append(cell)
        # A resumed cell, even one the partial calls done, is re-derived from its recorded
        # candidates: the search replays them (it is a pure function of them) and decides.
        said = _summary(cell) if cell["state"] == "done" else None
        cell["state"] = "running"
        self._search_cell(engine, precision, cell)
        if said is not None and _summary(cell) != said:
            self.view.note(f"{engine.name} {precision}: the partial said {said}; re-derived from its recorded "
                           f"candidates: {_summary(cell)}")

    def _search_cell(self, engine: Engine, precision: str, cell: dict[str, Any]) -> None:
        try:
            fw_budget = self._calibrate(engine, precision, cell)
        except BudgetError as exc:
            self._finish(cell, SearchStatus.INVALID, None, None, f"calibration: {exc}")
            self.view.note(f"{engine.name} {precision}: {cell['reason']}")
            return
        decide = STRATEGIES[self.plan.strategy]
        history = [(t["batch"], TrialOutcome.from_json(t).status) for t in cell["trials"]]
        while True:
            d = decide(history, self.plan.search)
            if d.done:
                self._finish(cell, d.status, d.max_batch, d.next_batch, d.reason)
                return
            req = self._request(engine, precision, d.batch, fw_budget)
            attempt = 1 + sum(1 for b, _ in history if b == d.batch)
            what = "retry" if attempt > 1 else "search"
            self.view.candidate_started(engine.name, precision, d.batch, what)
            out = self.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher())
            out.attempt = attempt
            self.view.candidate_done(engine.name, precision, out, what)
            self._record_versions(engine, out)
            cell["trials"].append(out.to_json())
            history.append((out.batch, out.status))
            self.save()

    def _finish(self, cell: dict[str, Any], status: SearchStatus, max_batch: int | None,
                next_batch: int | None, reason: str) -> None:
        cell.update(state="done", search_status=status.value, max_batch=max_batch,
                    next_batch=next_batch, reason=reason)
        at_max = [t for t in cell["trials"] if t["batch"] == max_batch and t["status"] == "ok"]
        cell["peaks_at_max"] = at_max[-1]["peaks"] if at_max else None
        self.save()
