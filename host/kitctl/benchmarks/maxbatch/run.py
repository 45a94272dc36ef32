"""Runs a max-batch benchmark: per engine × precision, calibrate, search, record.

The runner only sees `Runtime`, `Watcher`, a strategy and the artifact store: it never knows
which runtime ran a candidate, nor whether a GPU is behind the watcher.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

from ...core import signals
from ...core.artifact import ArtifactStore, utc_iso
from ...core.budget import Budget, BudgetError, framework_budget, overhead_from
from ...core.engines import Engine
from ...core.outcome import SearchStatus, TrialOutcome
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from ...runtimes.base import Runtime, RuntimeUnavailable
from ...core.search import STRATEGIES, SearchConfig
from ...core.signals import Interrupted  # noqa: F401  (re-exported: SIGINT/SIGTERM/SIGHUP during a run)


class View(Protocol):
    def candidate_started(self, engine: str, precision: str, batch: int, what: str) -> None: ...

    def candidate_done(self, engine: str, precision: str, outcome: TrialOutcome, what: str) -> None: ...

    def note(self, text: str) -> None: ...


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


def cell_key(engine: str, precision: str) -> str:
    return f"{engine}/{precision}"


def find_cell(doc: dict[str, Any], engine: str, precision: str) -> dict[str, Any] | None:
    for c in doc["results"]:
        if c["engine"] == engine and c["precision"] == precision:
            return c
    return None


def replay_problem(trials: Sequence[dict[str, Any]], search: SearchConfig, strategy: str) -> str | None:
    """Why these recorded candidates are not the ones the search would have run, or None.

    Replays the strategy over them: the i-th candidate must be the batch it asks for after the
    first i − 1, and none may follow its decision to stop."""
    decide = STRATEGIES[strategy]
    history: list[tuple] = []
    for i, t in enumerate(trials, 1):
        d = decide(history, search)
        if d.done:
            return f"candidate {i} (batch {t['batch']}) comes after the search had ended"
        if d.batch != t["batch"]:
            return f"candidate {i} ran batch {t['batch']} where the search asks for batch {d.batch}"
        history.append(trial_entry(t))
    return None


def trial_entry(t: dict[str, Any]) -> tuple:
    """A recorded candidate as the search sees it: (batch, status, device-delta peak)."""
    out = TrialOutcome.from_json(t)
    return (out.batch, out.status, out.peaks.device_delta_mib)


def cell_search(search: SearchConfig, cell: dict[str, Any]) -> SearchConfig:
    """The search of one cell: what `guided` aims at (the gate's budget, recorded in the cell as
    `search_target_mib`) and its free data point (the calibration candidate's peak)."""
    target = cell.get("search_target_mib")
    cal = cell.get("calibration")
    anchor = None
    if cal is not None and cal.get("status") == "ok":
        peak = (cal.get("peaks") or {}).get("device_delta_mib")
        if peak is not None:
            anchor = (int(cal["batch"]), float(peak))
    return replace(search, target_mib=target, anchor=anchor)


def _summary(cell: dict[str, Any]) -> str:
    return f"{cell.get('search_status')} max_batch {cell.get('max_batch')} next_batch {cell.get('next_batch')}"


def new_cell(engine: str, precision: str) -> dict[str, Any]:
    return {"engine": engine, "precision": precision, "state": "pending", "calibration": None,
            "overhead": None, "framework_budget_mib": None, "max_batch": None, "next_batch": None,
            "search_status": None, "reason": "", "peaks_at_max": None, "trials": []}


@dataclass
class Runner:
    plan: RunPlan
    runtime: Runtime
    store: ArtifactStore
    doc: dict[str, Any]
    view: View
    _installed: dict[int, Any] = field(default_factory=dict)

    # -- signals: SIGTERM and SIGHUP take the same path as Ctrl-C ------------------------
    def _install_signals(self) -> None:
        self._installed = signals.install()

    def _restore_signals(self) -> None:
        signals.restore(self._installed)

    def save(self) -> None:
        self.doc["updated_utc"] = utc_iso()
        self.store.save_partial(self.doc)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self._install_signals()
        try:
            self.doc["state"] = "running"
            self.save()  # a new run's first write: its partial appears, whole and locked
            self.view.note(f"partial artifact: {self.store.partial}")
            for engine in self.plan.engines:
                for precision in self.plan.precisions:
                    self._run_cell(engine, precision)
            self.doc["state"] = "complete"
            self.doc["finished_utc"] = utc_iso()
            return self.doc
        except (Interrupted, KeyboardInterrupt) as exc:
            # A second signal must not lose the partial: from here on they are ignored.
            signals.stop_interrupting()
            why = str(exc) or "SIGINT"
            if self.store.claimed:  # else nothing was written, and nothing will be
                self.doc["state"] = "interrupted"
                self.doc["interrupted_by"] = why
                self.save()
            raise Interrupted(why) from None
        except RuntimeUnavailable as exc:
            # The runtime went away mid-run (daemon stopped, GPU runtime missing): keep the
            # partial resumable and let the CLI say it in one line.
            if self.store.claimed:
                self.doc["state"] = "interrupted"
                self.doc["interrupted_by"] = f"runtime unavailable: {exc}"
                self.save()
            raise
        finally:
            self._restore_signals()
            self.runtime.close()

    def _request(self, engine: Engine, precision: str, batch: int, budget_mib: int | None) -> TrialRequest:
        return replace(self.plan.base_request, engine=engine.name, mode=engine.mode, batch=batch,
                       precision=precision, memory_budget_mib=budget_mib)

    def _watcher(self) -> Watcher | None:
        if self.plan.watcher_factory is None or self.plan.budget is None:
            return None
        return self.plan.watcher_factory(self.plan.budget.budget_mib)

    def _record_versions(self, engine: Engine, outcome: TrialOutcome) -> None:
        ent = self.doc["engines"][engine.name]
        if outcome.result and outcome.result.get("versions") and not ent.get("versions"):
            ent["versions"] = outcome.result["versions"]

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
        if self.plan.budget is not None and cell.get("search_target_mib") is None:
            cell["search_target_mib"] = self.plan.budget.budget_mib
        search = cell_search(self.plan.search, cell)
        history = [trial_entry(t) for t in cell["trials"]]
        while True:
            d = decide(history, search)
            if d.done:
                self._finish(cell, d.status, d.max_batch, d.next_batch, d.reason)
                return
            req = self._request(engine, precision, d.batch, fw_budget)
            attempt = 1 + sum(1 for t in history if t[0] == d.batch)
            what = "retry" if attempt > 1 else "search"
            self.view.candidate_started(engine.name, precision, d.batch, what)
            out = self.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher())
            out.attempt = attempt
            self.view.candidate_done(engine.name, precision, out, what)
            self._record_versions(engine, out)
            cell["trials"].append(out.to_json())
            history.append((out.batch, out.status, out.peaks.device_delta_mib))
            self.save()

    def _finish(self, cell: dict[str, Any], status: SearchStatus, max_batch: int | None,
                next_batch: int | None, reason: str) -> None:
        cell.update(state="done", search_status=status.value, max_batch=max_batch,
                    next_batch=next_batch, reason=reason)
        at_max = [t for t in cell["trials"] if t["batch"] == max_batch and t["status"] == "ok"]
        cell["peaks_at_max"] = at_max[-1]["peaks"] if at_max else None
        self.save()
