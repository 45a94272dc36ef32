"""A max-batch cell (results.py) as the search reads it: a new one, its recorded candidates as a strategy's history
(with the slot gate's offset), the search configuration it ran under, and the check that a resumed cell is one
the search could have left."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

from ...core.outcome import Status
from ...core.typed import to_json
from .results import MaxbatchCell, MaxbatchTrial, cell_of, trial_of
from .search.protocol import SearchConfig
from .search.speculate import replay
from .search.strategies import STRATEGIES

MIB = 2**20

def replay_problem(trials: Sequence[MaxbatchTrial | dict[str, Any]], search: SearchConfig, strategy: str,
                   offset: float | None = None) -> str | None:
    """Why these recorded candidates are not ones the search could have left, or None.

    Replays the strategy over them (benchmarks/maxbatch/search/speculate.py: it is handed a recorded candidate of each
    batch it asks for): the candidates it uses must be the ones recorded as on its path
    (`on_path`, true when absent: runs before speculation ran every candidate on the path), and
    the others are speculative candidates, measured but outside the answer."""
    typed = [trial_of(t) for t in trials]
    entries = [trial_entry(t, offset) for t in typed]
    r = replay(STRATEGIES[strategy], entries, search)
    for i, (t, used) in enumerate(zip(typed, r.on_path(len(entries))), 1):
        if used == t.on_search_path:
            continue
        if used:
            return f"candidate {i} (batch {t.batch}) is marked speculative, but the search's path uses it"
        if r.decision.done:
            return f"candidate {i} (batch {t.batch}) comes after the search had ended"
        return f"candidate {i} ran batch {t.batch} where the search asks for batch {r.decision.batch}"
    return None


def compiled_peak(t: MaxbatchTrial | dict[str, Any]) -> float | None:
    """A recorded candidate's compiled peak (MiB): what its trial reported as `compiled_peak_mib`
    (the framework's ahead-of-time estimate of the step's peak), or None. A jax-xla candidate
    recorded before the trial reported that field carries the same number as XLA's memory
    analysis (`xla_memory_analysis.peak_memory_bytes`): read from there, so resume and the
    replays see the field whichever trial version wrote the artifact. (`t`: a candidate, or its
    JSON, of which only `result` is read.)"""
    # the trial's own KIT-RESULT object: engine-defined keys, read as recorded
    result = (t.result if isinstance(t, MaxbatchTrial) else t.get("result")) or {}
    v = result.get("compiled_peak_mib")
    if v is None:
        b = (result.get("xla_memory_analysis") or {}).get("peak_memory_bytes")
        v = b / MIB if _number(b) else None
    return float(v) if _number(v) else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def trial_entry(t: MaxbatchTrial | dict[str, Any], offset: float | None = None) -> tuple:
    """A recorded candidate as the search sees it: (batch, status, device-delta peak, compiled peak).
    A candidate of a --slots cell on a GPU has no device delta of its own (the device held the other
    slots' too): with the cell's gate `offset`, its per-process peak + offset stands in, the very sum
    the per-slot gate held against B, so `guided` aims with it as with a device delta."""
    t = trial_of(t)
    peaks = t.measured
    peak = peaks.device_delta_mib
    if peak is None and offset is not None and peaks.process_mib is not None:
        peak = round(peaks.process_mib + offset, 1)
    return (t.batch, Status(t.status), peak, compiled_peak(t))


def slot_offset(cell: MaxbatchCell | dict[str, Any]) -> float | None:
    """The per-slot gate's offset a --slots cell recorded (MiB), or None."""
    gate = cell_of(cell).slot_gate
    off = gate.offset_mib if gate is not None else None
    return float(off) if _number(off) else None


def cell_entries(cell: MaxbatchCell | dict[str, Any]) -> list[tuple]:
    """The cell's recorded candidates as its search sees them."""
    cell = cell_of(cell)
    off = slot_offset(cell)
    return [trial_entry(t, off) for t in cell.trials]


def cell_search(search: SearchConfig, cell: MaxbatchCell | dict[str, Any]) -> SearchConfig:
    """The search of one cell: what `guided` aims at (the gate's budget, recorded in the cell as
    `search_target_mib`; the framework's budget for compiled peaks) and its free data point (the
    calibration candidate's peak)."""
    cell = cell_of(cell)
    cal = cell.calibration
    anchor = None
    if cal is not None and cal.ok:
        peak = cal.measured.device_delta_mib
        if peak is not None:
            anchor = (int(cal.batch), float(peak))
    fw = cell.framework_budget_mib
    return replace(search, target_mib=cell.search_target_mib, anchor=anchor,
                   compiled_target_mib=float(fw) if fw is not None else None)


def summary(cell: MaxbatchCell) -> str:
    """The search's answer in one line (a resumed cell's, against the one re-derived)."""
    return f"{cell.search_status} max_batch {cell.max_batch} next_batch {cell.next_batch}"


def new_cell(engine: str, precision: str) -> dict[str, Any]:
    """A new cell's JSON (MaxbatchCell.new, as written)."""
    return to_json(MaxbatchCell.new(engine, precision))


def side_by_side(cell: MaxbatchCell | dict[str, Any]) -> list[MaxbatchTrial]:
    """--slots: the cell's candidates (trials and cancelled ones) that ran while another of its candidates ran, by
    their recorded slot times."""
    c = cell_of(cell)
    ran = [t for t in c.trials + c.cancelled if t.slot is not None]
    return [t for t in ran if any(o is not t and o.slot.started_unix_s < t.slot.ended_unix_s  # type: ignore[union-attr]
                                  and t.slot.started_unix_s < o.slot.ended_unix_s for o in ran)]  # type: ignore[union-attr]


def shared_device_proof(cell: MaxbatchCell | dict[str, Any]) -> tuple[MaxbatchTrial, MaxbatchTrial] | None:
    """--slots: the first batch whose deadline passed beside other candidates (attempt 1, `timeout`) and whose retry,
    alone on the device, ended inside it (any other status): (that first attempt, its retry), or None. Such a cell's
    candidates are slowed by sharing the device, not by their own size, so the rest of its search runs one
    candidate at a time: side by side its candidates would pass their deadline again, each costing a retry alone.
    Read from the recorded candidates, so a resumed cell goes on as it left off."""
    c = cell_of(cell)
    beside = {id(t) for t in side_by_side(c)}
    for retry in c.trials:
        if retry.attempt < 2 or retry.status == Status.TIMEOUT.value or retry.slot is None or id(retry) in beside:
            continue
        first = next((t for t in c.trials if t.batch == retry.batch and t.attempt == 1), None)
        if first is not None and first.status == Status.TIMEOUT.value and id(first) in beside:
            return first, retry
    return None


def shared_device_reason(cell: MaxbatchCell | dict[str, Any]) -> str | None:
    """Why the cell's candidates run one at a time from now on (shared_device_proof), in a line, or None."""
    proof = shared_device_proof(cell)
    if proof is None:
        return None
    first, retry = proof
    return (f"batch {first.batch:,} timed out after {first.elapsed_s or 0:,.0f} s beside other candidates "
            f"and ended alone in {retry.elapsed_s or 0:,.0f} s ({retry.status})")
