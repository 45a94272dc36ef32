"""Replay a recorded max-batch search under another strategy (no GPU).

The oracle is the artifact's own data: a batch the run tested answers its recorded last
status and device-delta peak; a batch it never tested answers by the recorded boundary
(pass at or below max_batch, memory failure above), with a peak interpolated linearly
between the nearest recorded passes (None outside them). So the comparison uses only
measured figures; interpolated peaks are guidance for `guided`, never a verdict.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from ...core.outcome import Status
from ...core.search import Decision, SearchConfig, run_search


@dataclass(frozen=True)
class Replay:
    engine: str
    precision: str
    recorded_trials: int
    recorded: tuple[int | None, int | None]
    trials: int
    answer: tuple[int | None, int | None]
    batches: tuple[int, ...]

    @property
    def same(self) -> bool:
        return self.answer == self.recorded


def _peak(t: dict[str, Any]) -> float | None:
    return (t.get("peaks") or {}).get("device_delta_mib")


def oracle_of(cell: dict[str, Any]):
    last: dict[int, tuple[Status, float | None]] = {}
    for t in cell["trials"]:
        last[t["batch"]] = (Status(t["status"]), _peak(t))
    passes = sorted((b, p) for b, (s, p) in last.items() if s is Status.OK and p is not None)
    xs = [b for b, _ in passes]
    boundary = cell["max_batch"]

    def interp(b: int) -> float | None:
        i = bisect.bisect_left(xs, b)
        if i == 0 or i == len(xs):
            return None
        (b0, p0), (b1, p1) = passes[i - 1], passes[i]
        return p0 + (p1 - p0) * (b - b0) / (b1 - b0)

    def oracle(b: int) -> tuple[Status, float | None]:
        if b in last:
            return last[b]
        if boundary is not None and b <= boundary:
            return Status.OK, interp(b)
        return Status.OOM, None

    return oracle


def search_config(doc: dict[str, Any], cell: dict[str, Any]) -> SearchConfig:
    conf = doc["configuration"]
    budget = (doc.get("budget") or {}).get("budget_mib")
    cal = cell.get("calibration")
    anchor = (cal["batch"], _peak(cal)) if cal and cal.get("status") == "ok" and _peak(cal) is not None else None
    return SearchConfig(conf["start_batch"], conf["max_batch"], min_batch=conf.get("min_batch", 1),
                        target_mib=budget, anchor=anchor)


def replay(doc: dict[str, Any], strategy: str) -> list[Replay]:
    out = []
    for cell in doc["results"]:
        if cell.get("state") != "done" or cell.get("search_status") != "bounded_by_memory_failure":
            continue
        d: Decision
        d, hist = run_search(oracle_of(cell), search_config(doc, cell), strategy)
        out.append(Replay(cell["engine"], cell["precision"], len(cell["trials"]),
                          (cell["max_batch"], cell["next_batch"]), len(hist), (d.max_batch, d.next_batch),
                          tuple(t[0] for t in hist)))
    return out
