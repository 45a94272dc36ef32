"""A max-batch cell as the artifact records it: a new one, its recorded candidates as a strategy's history
(with the slot gate's offset), the search configuration it ran under, and the check that a resumed cell is one
the search could have left."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

from ...core.outcome import TrialOutcome
from .search.protocol import SearchConfig
from .search.speculate import replay
from .search.strategies import STRATEGIES

MIB = 2**20

def replay_problem(trials: Sequence[dict[str, Any]], search: SearchConfig, strategy: str,
                   offset: float | None = None) -> str | None:
    """Why these recorded candidates are not ones the search could have left, or None.

    Replays the strategy over them (benchmarks/maxbatch/search/speculate.py: it is handed a recorded candidate of each
    batch it asks for): the candidates it uses must be the ones recorded as on its path
    (`on_path`, true when absent: runs before speculation ran every candidate on the path), and
    the others are speculative candidates, measured but outside the answer."""
    entries = [trial_entry(t, offset) for t in trials]
    r = replay(STRATEGIES[strategy], entries, search)
    for i, (t, used) in enumerate(zip(trials, r.on_path(len(entries))), 1):
        marked = t.get("on_path", True)
        if used == marked:
            continue
        if used:
            return f"candidate {i} (batch {t['batch']}) is marked speculative, but the search's path uses it"
        if r.decision.done:
            return f"candidate {i} (batch {t['batch']}) comes after the search had ended"
        return f"candidate {i} ran batch {t['batch']} where the search asks for batch {r.decision.batch}"
    return None


def compiled_peak(t: dict[str, Any]) -> float | None:
    """A recorded candidate's compiled peak (MiB): what its trial reported as `compiled_peak_mib`
    (the framework's ahead-of-time estimate of the step's peak), or None. A jax-xla candidate
    recorded before the trial reported that field carries the same number as XLA's memory
    analysis (`xla_memory_analysis.peak_memory_bytes`): read from there, so resume and the
    replays see the field whichever trial version wrote the artifact."""
    result = t.get("result") or {}
    v = result.get("compiled_peak_mib")
    if v is None:
        b = (result.get("xla_memory_analysis") or {}).get("peak_memory_bytes")
        v = b / MIB if _number(b) else None
    return float(v) if _number(v) else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def trial_entry(t: dict[str, Any], offset: float | None = None) -> tuple:
    """A recorded candidate as the search sees it: (batch, status, device-delta peak, compiled peak).
    A candidate of a --slots cell on a GPU has no device delta of its own (the device held the other
    slots' too): with the cell's gate `offset`, its per-process peak + offset stands in, the very sum
    the per-slot gate held against B, so `guided` aims with it as with a device delta."""
    out = TrialOutcome.from_json(t)
    peak = out.peaks.device_delta_mib
    if peak is None and offset is not None and out.peaks.process_mib is not None:
        peak = round(out.peaks.process_mib + offset, 1)
    return (out.batch, out.status, peak, compiled_peak(t))


def slot_offset(cell: dict[str, Any]) -> float | None:
    """The per-slot gate's offset a --slots cell recorded (MiB), or None."""
    off = (cell.get("slot_gate") or {}).get("offset_mib")
    return float(off) if _number(off) else None


def cell_entries(cell: dict[str, Any]) -> list[tuple]:
    """The cell's recorded candidates as its search sees them."""
    off = slot_offset(cell)
    return [trial_entry(t, off) for t in cell["trials"]]


def cell_search(search: SearchConfig, cell: dict[str, Any]) -> SearchConfig:
    """The search of one cell: what `guided` aims at (the gate's budget, recorded in the cell as
    `search_target_mib`; the framework's budget for compiled peaks) and its free data point (the
    calibration candidate's peak)."""
    target = cell.get("search_target_mib")
    cal = cell.get("calibration")
    anchor = None
    if cal is not None and cal.get("status") == "ok":
        peak = (cal.get("peaks") or {}).get("device_delta_mib")
        if peak is not None:
            anchor = (int(cal["batch"]), float(peak))
    fw = cell.get("framework_budget_mib")
    return replace(search, target_mib=target, anchor=anchor,
                   compiled_target_mib=float(fw) if fw is not None else None)


def _summary(cell: dict[str, Any]) -> str:
    return f"{cell.get('search_status')} max_batch {cell.get('max_batch')} next_batch {cell.get('next_batch')}"


def new_cell(engine: str, precision: str) -> dict[str, Any]:
    return {"engine": engine, "precision": precision, "state": "pending", "calibration": None,
            "overhead": None, "framework_budget_mib": None, "max_batch": None, "next_batch": None,
            "search_status": None, "reason": "", "peaks_at_max": None, "trials": []}
