"""Runs a max-batch benchmark: per engine × precision, calibrate, search, record.

The runner only sees `Runtime`, `Watcher`, a strategy and the artifact store: it never knows
which runtime ran a candidate, nor whether a GPU is behind the watcher.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from .artifact import ArtifactStore, utc_iso
from .budget import Budget, BudgetError, framework_budget, overhead_from
from .engines import Engine
from .outcome import SearchStatus, TrialOutcome
from .protocol import TrialRequest
from .runtimes.base import Runtime, RuntimeUnavailable, Watcher
from .search import STRATEGIES, SearchConfig


class Interrupted(Exception):
    """SIGINT/SIGTERM during a run: the partial artifact is kept and resumable."""


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

    # -- signals: turn SIGTERM into the same path as Ctrl-C -----------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    def _install_signals(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._installed[s] = signal.signal(s, self._on_signal)

    def _restore_signals(self) -> None:
        for s, h in self._installed.items():
            signal.signal(s, h)

    def save(self) -> None:
        self.doc["updated_utc"] = utc_iso()
        self.store.save_partial(self.doc)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self._install_signals()
        try:
            self.doc["state"] = "running"
            self.save()
            for engine in self.plan.engines:
                for precision in self.plan.precisions:
                    self._run_cell(engine, precision)
            self.doc["state"] = "complete"
            self.doc["finished_utc"] = utc_iso()
            return self.doc
        except (Interrupted, KeyboardInterrupt) as exc:
            self.doc["state"] = "interrupted"
            self.doc["interrupted_by"] = str(exc) or "SIGINT"
            # A second Ctrl-C must not lose the partial: ignore signals while saving.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.save()
            raise Interrupted(self.doc["interrupted_by"]) from None
        except RuntimeUnavailable as exc:
            # The runtime went away mid-run (daemon stopped, GPU runtime missing): keep the
            # partial resumable and let the CLI say it in one line.
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
        if cell["overhead"] is not None:
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
        if cell["state"] == "done":
            return
        cell["state"] = "running"
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
        if max_batch is not None:
            at_max = [t for t in cell["trials"] if t["batch"] == max_batch and t["status"] == "ok"]
            cell["peaks_at_max"] = at_max[-1]["peaks"] if at_max else None
        self.save()
