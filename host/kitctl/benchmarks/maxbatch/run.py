"""Runs a max-batch benchmark: per engine × precision, calibrate, search, record.

The runner only sees `Runtime`, `Watcher`, a strategy and the artifact store: it never knows
which runtime ran a candidate, nor whether a GPU is behind the watcher. What every benchmark's
runner shares (signals, saving after each unit, the loop over engines × precisions, cleanup) is
`kitctl.run.runner.UnitRunner`; this module is max batch's cell.
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ...core.artifact import utc_iso
from ...core.budget import BudgetError, framework_budget, overhead_from
from ...core.engines import Engine
from ...core.outcome import KilledBy, SearchStatus, Status, TrialOutcome
from ...core.typed import from_json, to_json, updated
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from .search.protocol import SearchConfig, candidates_left
from .search.strategies import STRATEGIES
from ...core.slots import gate_offset
from .search.speculate import candidates, replay, useless
from ...core.signals import Interrupted  # noqa: F401  (re-exported: SIGINT/SIGTERM/SIGHUP during a run)
from ...run.runner import CANCELLED, UnitRunner, find_cell
from ...runtimes.base import Runtime
from .cells import cell_entries, cell_search, shared_device_reason, summary
from .plan import Lane, RunPlan, SlotPlan
from .results import NO_PEAKS, CellOverhead, LaneGpu, MaxbatchCell, MaxbatchTrial, SlotGate, SlotTime


class _Stopped(Exception):
    """A lane's worker was told to stop (another lane failed, or a signal): record nothing more."""


@dataclass(eq=False)
class _Run:
    """A candidate running on a lane; `cancelled` once the search no longer needs it."""

    batch: int
    lane: Lane
    cancelled: str | None = None  # why (recorded with it)


@dataclass
class _Search:
    """A cell being searched, shared by the lanes running its candidates: the lane that calibrated
    it owns it (decides when it is done); other lanes with the same budget may join it."""

    engine: Engine
    precision: str
    cell: MaxbatchCell  # as the document holds it now (replaced, under the runner's lock, on every change)
    lane: Lane
    fw_budget: int | None
    search: SearchConfig
    runs: list[_Run] = field(default_factory=list)  # its candidates running now
    # --slots on a GPU: the per-process threshold each candidate is gated at (B − the cell's offset),
    # None where the cell runs one candidate at a time (device-delta gate). Always None on the CPU.
    slot_threshold: float | None = None
    shares_slots: bool = True  # other slots may run candidates of it
    # --slots: the lane whose retry waits for, then runs, the device alone (no other candidate starts meanwhile)
    alone: Lane | None = None
    one_slot: bool = False  # --slots: the cell runs one candidate at a time since (shared_device_proof)

    @property
    def running(self) -> list[int]:
        """The batches of its candidates running now and not cancelled."""
        return [r.batch for r in self.runs if r.cancelled is None]


@dataclass
class Runner(UnitRunner):
    """Max batch's cell: calibrate (GPU), then search, one fresh candidate at a time per lane."""

    plan: RunPlan  # type: ignore[assignment]
    lanes: list[Lane] | None = None  # None: one lane, the plan's budget and sampler on `runtime`
    # Lanes share the document: every change to it and every save happen under this lock, so a
    # save never serializes a cell another lane is changing.
    _lock: Any = field(default_factory=threading.RLock)
    _stop: threading.Event = field(default_factory=threading.Event)
    # Lanes left without a cell of their own run further candidates of a running cell
    # (benchmarks/maxbatch/search/speculate.py): the answer is the sequential search's, replayed over the trials.
    speculate: bool = True
    _active: list[_Search] = field(default_factory=list)
    _cond: Any = None  # a Condition on _lock: a candidate ended, a cell started or ended
    # Cells calibrating now: (serial, lane, calibration request), so idle lanes can warm their runtimes.
    _calibrating: list[tuple[int, Lane, TrialRequest]] = field(default_factory=list)
    _serial: Any = field(default_factory=itertools.count)
    # --slots: the lanes share one device; cells then run one at a time (each calibrates alone, its
    # search's candidates fill the slots), never two cells side by side.
    slot_plan: SlotPlan | None = None

    def units_left(self) -> tuple[int, bool] | None:
        """At most how many candidates are left (the running ones included): per cell its calibration
        when still to run, and the protocol search's bound from its candidates so far."""
        cal = 1 if self.plan.budget is not None and self.plan.watcher_factory is not None else 0
        left = 0
        with self._lock:
            for e in self.plan.engines:
                for p in self.plan.precisions:
                    cell = self._cell(e.name, p)
                    if cell is None:
                        left += cal + candidates_left([], self.plan.search)
                    elif not cell.done:
                        left += (cal if cell.calibration is None else 0) + candidates_left(
                            cell_entries(cell), cell_search(self.plan.search, cell))
        return left, True

    def _cell(self, engine: str, precision: str) -> MaxbatchCell | None:
        """The document's cell of engine × precision, typed (under the lock), or None."""
        with self._lock:
            found = find_cell(self.doc, engine, precision)
            return None if found is None else from_json(MaxbatchCell, found)

    def _set(self, job: _Search, **changes: Any) -> None:
        """Change the job's cell and write it into the document in its place (under the lock; saved by the
        caller). Every key set is written from then on, in the order first set."""
        with self._lock:
            job.cell = updated(job.cell, **changes)
            found = find_cell(self.doc, job.cell.engine, job.cell.precision)  # the cell's own JSON object
            found.clear()  # type: ignore[union-attr]
            found.update(to_json(job.cell))  # type: ignore[union-attr]

    def _condition(self) -> threading.Condition:
        with self._lock:
            if self._cond is None:
                self._cond = threading.Condition(self._lock)
            return self._cond

    def save(self) -> None:
        with self._lock:
            self.doc["updated_utc"] = utc_iso()
            self.store.save_partial(self.doc)

    def _lanes(self) -> list[Lane]:
        return self.lanes or [Lane(self.runtime, self.plan.budget, self.plan.watcher_factory)]

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
        for rt in {id(r): r for r in [self.runtime, *(lane.runtime for lane in self._lanes())]}.values():
            rt.close()  # each runtime once

    def _run_side_by_side(self, cells: list[tuple[Engine, str]], lanes: list[Lane]) -> None:
        """One worker thread per lane takes the next cell until none is left. Signals reach the
        main thread only: it waits here, and on a signal or a lane's failure it stops every
        lane (their running candidates are killed and not recorded) before re-raising."""
        todo = list(cells)
        errors: list[BaseException] = []
        cond = self._condition()
        started = [0]  # cells taken by a lane and not yet ended (calibrating or searching)

        def work(lane: Lane) -> None:
            # A free lane takes the next cell; with none left it joins a running cell (speculation),
            # and it ends when no cell is left to run or running.
            warmed: set[int] = set()  # the calibrations this lane got ready for
            while not self._stop.is_set():
                job = None
                idle = False
                with cond:
                    if todo and (self.slot_plan is None or not started[0]):
                        engine, precision = todo.pop(0)
                        started[0] += 1
                    elif todo and not self._active:  # a cell of the slots calibrates alone: wait
                        idle = True
                    else:
                        job = self._joinable(lane)
                        if job is None:
                            if not started[0] or not self.speculate:
                                return
                            idle = True
                    if idle:
                        warm = [(n, req) for n, other, req in self._calibrating
                                if other is not lane and other.budget == lane.budget and n not in warmed]
                        if not warm:
                            cond.wait(0.2)
                if idle:
                    # While a cell calibrates alone, the lanes that will join its search get ready for its
                    # candidates (--prestart: a process importing the framework), off the lock.
                    for n, req in warm:
                        warmed.add(n)
                        lane.runtime.warm(req)
                    continue
                try:
                    if job is None:
                        try:
                            self._run_cell(engine, precision, lane)
                        finally:
                            with cond:
                                started[0] -= 1
                                cond.notify_all()
                    elif not self._search_steps(job, lane, owner=False):
                        with cond:
                            cond.wait(0.2)  # nothing to speculate on now: wait for a candidate to end
                except _Stopped:
                    return
                except BaseException as exc:  # re-raised in the main thread
                    with self._lock:
                        errors.append(exc)
                    self._stop.set()
                    with cond:
                        cond.notify_all()
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
                lane.runtime.interrupt()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]

    def _watcher(self, lane: Lane | None = None, job: _Search | None = None) -> Watcher | None:
        lane = lane or self._lanes()[0]
        if job is not None and job.slot_threshold is not None and self.slot_plan is not None \
                and self.slot_plan.slot_watcher is not None:
            return self.slot_plan.slot_watcher(job.slot_threshold)
        if lane.watcher_factory is None or lane.budget is None:
            return None
        return lane.watcher_factory(lane.budget.budget_mib)

    def _candidate(self, lane: Lane, req: TrialRequest, job: _Search | None = None) -> TrialOutcome:
        """Run one candidate on the lane; a stopped run records nothing of it."""
        if self._stop.is_set():
            raise _Stopped()
        out = lane.runtime.run(req, timeout_s=self.plan.timeout_s, watcher=self._watcher(lane, job))
        if self._stop.is_set():
            raise _Stopped()
        return out

    @staticmethod
    def _trial(lane: Lane, out: TrialOutcome, slot: SlotTime | None = None) -> MaxbatchTrial:
        rec = MaxbatchTrial.of_outcome(out)
        # A cluster lane's runtime knows the node (host, node id, GPU) of its last candidate;
        # a lane of this host is one GPU.
        where = getattr(lane.runtime, "where", None)
        if isinstance(where, dict):
            rec = updated(rec, node=dict(where))
        if lane.gpu is not None:
            rec = updated(rec, gpu=from_json(LaneGpu, lane.gpu))
        return rec if slot is None else updated(rec, slot=slot)

    def _calibrate(self, job: _Search, lane: Lane) -> int | None:
        """Overhead = device-delta peak − framework peak at a small batch (GPU only)."""
        if lane.budget is None or lane.watcher_factory is None:
            return None
        engine, precision = job.engine, job.precision
        if job.cell.calibration is not None:
            # Resumed: the overhead follows from the recorded candidate, not from the partial's say-so.
            ov = overhead_from(job.cell.calibration.outcome())  # BudgetError if it failed
            with self._lock:
                self._set(job, overhead=from_json(CellOverhead, ov.to_json()),
                          framework_budget_mib=framework_budget(lane.budget, ov))
            return job.cell.framework_budget_mib
        req = self._request(engine, precision, self.plan.calibration_batch, None)
        what = "calibration"
        self.view.candidate_started(engine.name, precision, req.batch, what)
        mark = (next(self._serial), lane, req)
        with self._condition():
            self._calibrating.append(mark)  # idle lanes warm their runtimes for this cell meanwhile
            self._cond.notify_all()
        try:
            out = self._candidate(lane, req)
        finally:
            with self._lock:
                self._calibrating.remove(mark)
        self.view.candidate_done(engine.name, precision, out, what)
        with self._lock:
            self._record_versions(engine, out)
            self._set(job, calibration=self._trial(lane, out))
        ov = overhead_from(out)  # BudgetError if it failed
        with self._lock:
            self._set(job, overhead=from_json(CellOverhead, ov.to_json()),
                      framework_budget_mib=framework_budget(lane.budget, ov))
            self.save()
        return job.cell.framework_budget_mib

    def _run_cell(self, engine: Engine, precision: str, lane: Lane | None = None) -> None:
        lane = lane or self._lanes()[0]
        with self._lock:
            cell = self._cell(engine.name, precision)
            if cell is None:
                cell = MaxbatchCell.new(engine.name, precision)
                self.doc["results"].append(to_json(cell))
            # A resumed cell, even one the partial calls done, is re-derived from its recorded
            # candidates: the search replays them (it is a pure function of them) and decides.
            said = summary(cell) if cell.done else None
            job = _Search(engine, precision, cell, lane, None, self.plan.search)
            self._set(job, state="running")
        self._search_cell(job, lane)
        if said is not None and summary(job.cell) != said:
            self.view.note(f"{engine.name} {precision}: the partial said {said}; re-derived from its recorded "
                           f"candidates: {summary(job.cell)}")

    def _search_cell(self, job: _Search, lane: Lane) -> None:
        try:
            job.fw_budget = self._calibrate(job, lane)
        except BudgetError as exc:
            self._finish(job, SearchStatus.INVALID, None, None, f"calibration: {exc}")
            self.view.note(f"{job.engine.name} {job.precision}: {job.cell.reason}")
            return
        if lane.budget is not None and job.cell.search_target_mib is None:
            with self._lock:
                self._set(job, search_target_mib=lane.budget.budget_mib)
        job.search = cell_search(self.plan.search, job.cell)
        if self.slot_plan is not None and self.slot_plan.slot_watcher is not None and lane.budget is not None:
            self._slot_gate(job, lane.budget.budget_mib)
        cond = self._condition()
        with cond:
            self._active.append(job)
            cond.notify_all()
        try:
            self._search_steps(job, lane, owner=True)
        finally:
            with cond:
                self._active.remove(job)
                cond.notify_all()

    def _slot_gate(self, job: _Search, budget_mib: float) -> None:
        """The cell's per-slot gate from its calibration candidate, which ran alone on the device:
        offset = its device-delta peak − its per-process peak; each candidate is then killed when its
        own per-process memory goes over B − offset. Without a usable offset the cell runs one
        candidate at a time under the device-delta gate (recorded, and said once)."""
        cal = job.cell.calibration
        peaks = cal.measured if cal is not None else NO_PEAKS
        off, why = gate_offset(peaks.device_delta_mib, peaks.process_mib)
        with self._lock:
            if off is None:
                job.shares_slots = False
                self._set(job, slot_gate=SlotGate(offset_mib=None, threshold_mib=None,
                                                  note=f"one candidate at a time: {why}"))
            else:
                job.slot_threshold = round(budget_mib - off, 1)
                self._set(job, slot_gate=SlotGate(offset_mib=off, threshold_mib=job.slot_threshold,
                                                  note="per-process NVML memory of each candidate against B − offset"))
        if off is None:
            self.view.note(f"{job.engine.name} {job.precision}: --slots: {why}; this cell runs one candidate "
                           "at a time under the device-delta gate")

    def _joinable(self, lane: Lane) -> _Search | None:
        """A running cell this lane may run candidates of (under the lock): only with the same
        budget as the lane that calibrated it, so the cell's calibration (framework budget) holds
        here too (--gpus refuses mixed GPU models; a cluster's lanes may differ)."""
        if not self.speculate:
            return None
        fits = [j for j in self._active if j.lane is not lane and j.lane.budget == lane.budget and j.shares_slots]
        return min(fits, key=lambda j: len(j.running), default=None)

    def _search_steps(self, job: _Search, lane: Lane, owner: bool) -> bool:
        """Run candidates of the cell on this lane. The owner runs until the search is done (and
        no candidate of it still runs), then records the answer and returns True; a joining lane
        runs at most one candidate and returns whether it ran one."""
        decide = STRATEGIES[self.plan.strategy]
        cond = self._condition()
        engine, precision = job.engine, job.precision
        while True:
            with cond:
                if self._stop.is_set():
                    raise _Stopped()
                if job.alone not in (None, lane):  # another lane's retry runs alone: start nothing
                    if not owner:
                        return False
                    cond.wait(0.2)
                    continue
                trials = cell_entries(job.cell)
                r = replay(decide, trials, job.search)
                pick = [] if r.decision.done else candidates(decide, trials, job.search, 1, job.running)
                if not pick:
                    job.alone = None if job.alone is lane else job.alone
                    if not owner:
                        return False
                    if r.decision.done and not job.runs:  # cancelled ones recorded too
                        self._mark_path(job)  # a resumed cell may end without a new candidate
                        d = r.decision
                        self._finish(job, d.status, d.max_batch, d.next_batch, d.reason)
                        return True
                    cond.wait(0.2)  # the next batch runs on another lane: wait for it
                    continue
                batch = pick[0]
                attempt = 1 + sum(1 for t in trials if t[0] == batch) + job.running.count(batch)
                what = "retry" if attempt > 1 else "search" if batch == r.decision.batch else "speculative"
                # --slots: a retry (its first attempt failed for no memory reason, e.g. a deadline passed beside
                # other candidates) runs alone on the device, under the one-slot search's conditions; so does every
                # candidate of a cell whose retry alone proved the sharing slowed it (shared_device_reason).
                # Once found the proof stays (no candidate runs beside another after it): looked for until then.
                if self.slot_plan is not None and not job.one_slot and (why := shared_device_reason(job.cell)):
                    job.one_slot = True
                    self.view.note(f"{engine.name} {precision}: one candidate at a time from now on: {why}")
                job.alone = lane if self.slot_plan is not None and (attempt > 1 or job.one_slot) else None
                if job.alone is lane and job.runs:
                    cond.wait(0.2)  # the others end (or are cancelled) first; none starts meanwhile
                    continue
                run = _Run(batch, lane)
                job.runs.append(run)
            try:
                req = self._request(engine, precision, batch, job.fw_budget)
                self.view.candidate_started(engine.name, precision, batch, what)
                # A cancel before the runtime holds the process kills nothing: the candidate ends as measured.
                t0 = time.time()
                out = self._candidate(lane, req, job)
                out.attempt = attempt
                if job.slot_threshold is not None and out.status is Status.VRAM_CAP_EXCEEDED:
                    # The per-slot gate, not the device delta (classify's words for the one-slot gate).
                    killed = "; killed by the kit" if out.killed_by is KilledBy.KIT_VRAM_GATE else ""
                    out.error = (f"its own per-process memory went over {job.slot_threshold:,.0f} MiB (B − the "
                                 f"cell's offset){killed}")
                # --slots: when it ran, on the wall clock (side by side; the cell's slots_wall_s spans them).
                slot = None if self.slot_plan is None or lane.slot is None else SlotTime(
                    index=lane.slot, started_unix_s=round(t0, 3), ended_unix_s=round(time.time(), 3))
                # Killed because the search no longer needs it (and not done by itself first): its
                # outcome is no measurement. Kept beside the trials, never among them.
                cancelled = run.cancelled is not None and out.killed_by is KilledBy.KIT_INTERRUPT
                self.view.candidate_done(engine.name, precision, out, CANCELLED if cancelled else what)
                with cond:
                    if cancelled:
                        rec = updated(self._trial(lane, out, slot), on_path=False, cancelled_because=run.cancelled)
                        self._set(job, cancelled=job.cell.cancelled + (rec,))
                    else:
                        self._record_versions(engine, out)
                        self._set(job, trials=job.cell.trials + (self._trial(lane, out, slot),))
                        self._mark_path(job)
                    self.save()
            finally:
                with cond:
                    job.runs.remove(run)
                    job.alone = None if job.alone is lane else job.alone
                    if not self._stop.is_set():
                        self._cancel_useless(job)
                    cond.notify_all()
            if not owner:
                return True

    def _cancel_useless(self, job: _Search) -> None:
        """Kill the cell's running candidates the search can no longer use (under the lock), through the lane
        runtime's cancel (the candidate's Ctrl-C path; what the lane keeps ready for its next one is kept); the
        lane records the cancellation and is free at once."""
        live = [r for r in job.runs if r.cancelled is None]
        if not live:
            return
        trials = cell_entries(job.cell)
        gone = useless(STRATEGIES[self.plan.strategy], trials, job.search, [r.batch for r in live])
        for r in live:
            if r.batch in gone:
                r.cancelled = "speculation: the search can no longer use this batch"
                r.lane.runtime.cancel()

    def _mark_path(self, job: _Search) -> None:
        """Record on each trial whether the sequential search's path uses it (under the lock)."""
        trials = job.cell.trials
        r = replay(STRATEGIES[self.plan.strategy], cell_entries(job.cell), job.search)
        marked = tuple(updated(t, on_path=used) for t, used in zip(trials, r.on_path(len(trials))))
        self._set(job, trials=marked + trials[len(marked):])

    def _finish(self, job: _Search, status: SearchStatus, max_batch: int | None,
                next_batch: int | None, reason: str) -> None:
        trials = job.cell.trials
        if status is SearchStatus.INVALID and trials:
            # The cause beside the verdict: "crash then crash" alone sent users to stderr_tail.
            try:
                cause = trials[-1].outcome().cause
            except (KeyError, TypeError, ValueError):  # a hand-edited partial: the verdict stands alone
                cause = None
            if cause and cause not in reason:
                reason = f"{reason} — {cause}"
        with self._lock:
            self._set(job, state="done", search_status=status.value, max_batch=max_batch,
                      next_batch=next_batch, reason=reason)
            at_max = [t for t in job.cell.trials if t.batch == max_batch and t.ok and t.on_search_path]
            self._set(job, peaks_at_max=at_max[-1].peaks if at_max else None)
            if self.slot_plan is not None:
                ran = [t.slot for t in job.cell.trials + job.cell.cancelled if t.slot is not None]
                # From the search's first candidate to its last one's end: the answer's wall time
                # (this session's candidates; a resumed search adds the earlier ones' times too).
                self._set(job, slots_wall_s=(round(max(r.ended_unix_s for r in ran)
                                                   - min(r.started_unix_s for r in ran), 3) if ran else None))
            self.save()
