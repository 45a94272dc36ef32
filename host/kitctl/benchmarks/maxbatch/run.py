"""Runs a max-batch benchmark: per engine × precision, calibrate, search, record.

The runner only sees `Runtime`, `Watcher`, a strategy and the artifact store: it never knows
which runtime ran a candidate, nor whether a GPU is behind the watcher. What every benchmark's
runner shares (signals, saving after each unit, the loop over engines × precisions, cleanup) is
`kitctl.runner.UnitRunner`; this module is max batch's cell.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ...core.artifact import utc_iso
from ...core.budget import Budget, BudgetError, framework_budget, overhead_from
from ...core.engines import Engine
from ...core.outcome import SearchStatus, TrialOutcome
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from ...core.search import STRATEGIES, SearchConfig
from ...core.signals import Interrupted  # noqa: F401  (re-exported: SIGINT/SIGTERM/SIGHUP during a run)
from ...runner import UnitRunner, find_cell
from ...runtimes.base import Runtime


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
class Lane:
    """Where cells run: one GPU (its runtime, its sampler, its budget) or the CPU. With
    `--gpus` each listed GPU is a lane and cells run side by side, one per lane at a time; each
    cell calibrates on its lane, and every candidate records the lane's GPU."""

    runtime: Runtime
    budget: Budget | None
    watcher_factory: Callable[[float | None], Watcher] | None
    gpu: dict[str, Any] | None = None  # {"index", "uuid"}: recorded on each candidate


class _Stopped(Exception):
    """A lane's worker was told to stop (another lane failed, or a signal): record nothing more."""


@dataclass
class Runner(UnitRunner):
    """Max batch's cell: calibrate (GPU), then search, one fresh candidate at a time per lane."""

    plan: RunPlan  # type: ignore[assignment]
    lanes: list[Lane] | None = None  # None: one lane, the plan's budget and sampler on `runtime`
    # Lanes share the document: every change to it and every save happen under this lock, so a
    # save never serializes a cell another lane is changing.
    _lock: Any = field(default_factory=threading.RLock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def save(self) -> None:
        with self._lock:
            self.doc["updated_utc"] = utc_iso()
            self.store.save_partial(self.doc)

    def _lanes(self) -> list[Lane]:
        if self.lanes:
            return self.lanes
        return [Lane(self.runtime, self.plan.budget, self.plan.watcher_factory)]

    # -- the run: UnitRunner's, with lanes side by side and every runtime closed --------
    def _run_cells(self, cells: list[tuple[Engine, str]]) -> None:
        # Explicit lanes (--gpus, --cluster) run in worker threads even when there is one:
        # signals then reach the main thread while it only waits, never inside a lane's
        # C extension call (Ray's wait drops an exception raised there).
        if self.lanes is None:
            super()._run_cells(cells)
        else:
            self._run_side_by_side(cells, self._lanes())

    def _close(self) -> None:
        closed: set[int] = set()
        for rt in [self.runtime, *(lane.runtime for lane in self._lanes())]:
            if id(rt) not in closed:
                closed.add(id(rt))
                rt.close()

    def _run_side_by_side(self, cells: list[tuple[Engine, str]], lanes: list[Lane]) -> None:
        """One worker thread per lane takes the next cell until none is left. Signals reach the
        main thread only: it waits here, and on a signal or a lane's failure it stops every
        lane (their running candidates are killed and not recorded) before re-raising."""
        todo = list(cells)
        errors: list[BaseException] = []

        def work(lane: Lane) -> None:
            while not self._stop.is_set():
                with self._lock:
                    if not todo:
                        return
                    engine, precision = todo.pop(0)
                try:
                    self._run_cell(engine, precision, lane)
                except _Stopped:
                    return
                except BaseException as exc:  # re-raised in the main thread
                    with self._lock:
                        errors.append(exc)
                    self._stop.set()
                    return

        threads = [threading.Thread(target=work, args=(lane,), name=f"lane-{i}", daemon=True)
                   for i, lane in enumerate(lanes)]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.1)
                if self._stop.is_set():
                    break
        finally:
            self._stop.set()
            for lane in lanes:
                stop = getattr(lane.runtime, "interrupt", None)
                if stop is not None:
                    stop()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]

    def _watcher(self, lane: Lane | None = None) -> Watcher | None:
        lane = lane or self._lanes()[0]
        if lane.watcher_factory is None or lane.budget is None:
            return None
        return lane.watcher_factory(lane.budget.budget_mib)

    def _candidate(self, lane: Lane, req: TrialRequest) -> TrialOutcome:
        """Run one candidate on the lane; a stopped run records nothing of it."""
        if self._stop.is_set():
            raise _Stopped()
        out = lane.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher(lane))
        if self._stop.is_set():
            raise _Stopped()
        return out

    @staticmethod
    def _trial_json(lane: Lane, out: TrialOutcome) -> dict[str, Any]:
        rec = out.to_json()
        # A cluster lane's runtime knows the node (host, node id, GPU) of its last candidate;
        # a lane of this host is one GPU.
        where = getattr(lane.runtime, "where", None)
        if isinstance(where, dict):
            rec["node"] = dict(where)
        if lane.gpu is not None:
            rec["gpu"] = dict(lane.gpu)
        return rec

    def _calibrate(self, engine: Engine, precision: str, cell: dict[str, Any], lane: Lane) -> int | None:
        """Overhead = device-delta peak − framework peak at a small batch (GPU only)."""
        if lane.budget is None or lane.watcher_factory is None:
            return None
        if cell["calibration"] is not None:
            # Resumed: the overhead follows from the recorded candidate, not from the partial's say-so.
            ov = overhead_from(TrialOutcome.from_json(cell["calibration"]))  # BudgetError if it failed
            with self._lock:
                cell["overhead"] = ov.to_json()
                cell["framework_budget_mib"] = framework_budget(lane.budget, ov)
            return cell["framework_budget_mib"]
        req = self._request(engine, precision, self.plan.calibration_batch, None)
        what = "calibration"
        self.view.candidate_started(engine.name, precision, req.batch, what)
        out = self._candidate(lane, req)
        self.view.candidate_done(engine.name, precision, out, what)
        with self._lock:
            self._record_versions(engine, out)
            cell["calibration"] = self._trial_json(lane, out)
        ov = overhead_from(out)  # BudgetError if it failed
        with self._lock:
            cell["overhead"] = ov.to_json()
            cell["framework_budget_mib"] = framework_budget(lane.budget, ov)
            self.save()
        return cell["framework_budget_mib"]

    def _run_cell(self, engine: Engine, precision: str, lane: Lane | None = None) -> None:
        lane = lane or self._lanes()[0]
        with self._lock:
            cell = find_cell(self.doc, engine.name, precision)
            if cell is None:
                cell = new_cell(engine.name, precision)
                self.doc["results"].append(cell)
            # A resumed cell, even one the partial calls done, is re-derived from its recorded
            # candidates: the search replays them (it is a pure function of them) and decides.
            said = _summary(cell) if cell["state"] == "done" else None
            cell["state"] = "running"
        self._search_cell(engine, precision, cell, lane)
        if said is not None and _summary(cell) != said:
            self.view.note(f"{engine.name} {precision}: the partial said {said}; re-derived from its recorded "
                           f"candidates: {_summary(cell)}")

    def _search_cell(self, engine: Engine, precision: str, cell: dict[str, Any], lane: Lane) -> None:
        try:
            fw_budget = self._calibrate(engine, precision, cell, lane)
        except BudgetError as exc:
            self._finish(cell, SearchStatus.INVALID, None, None, f"calibration: {exc}")
            self.view.note(f"{engine.name} {precision}: {cell['reason']}")
            return
        decide = STRATEGIES[self.plan.strategy]
        if lane.budget is not None and cell.get("search_target_mib") is None:
            with self._lock:
                cell["search_target_mib"] = lane.budget.budget_mib
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
            out = self._candidate(lane, req)
            out.attempt = attempt
            self.view.candidate_done(engine.name, precision, out, what)
            with self._lock:
                self._record_versions(engine, out)
                cell["trials"].append(self._trial_json(lane, out))
                self.save()
            history.append((out.batch, out.status, out.peaks.device_delta_mib))

    def _finish(self, cell: dict[str, Any], status: SearchStatus, max_batch: int | None,
                next_batch: int | None, reason: str) -> None:
        with self._lock:
            cell.update(state="done", search_status=status.value, max_batch=max_batch,
                        next_batch=next_batch, reason=reason)
            at_max = [t for t in cell["trials"] if t["batch"] == max_batch and t["status"] == "ok"]
            cell["peaks_at_max"] = at_max[-1]["peaks"] if at_max else None
            self.save()
