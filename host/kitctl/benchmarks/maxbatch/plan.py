"""What a max-batch run is given: the plan (engines, precisions, search, budget), the lanes cells run on, and
--slots' plan of lanes sharing one device."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...core.budget import Budget
from ...core.engines import Engine
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from ...runtimes.base import Runtime
from .search.protocol import SearchConfig


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


@dataclass
class Lane:
    """Where cells run: one GPU (its runtime, its sampler, its budget) or the CPU. With
    `--gpus` each listed GPU is a lane and cells run side by side, one per lane at a time; each
    cell calibrates on its lane, and every candidate records the lane's GPU."""

    runtime: Runtime
    budget: Budget | None
    watcher_factory: Callable[[float | None], Watcher] | None
    gpu: dict[str, Any] | None = None  # {"index", "uuid"}: recorded on each candidate
    slot: int | None = None  # --slots: this lane's slot on the run's one device (recorded per candidate)


@dataclass(frozen=True)
class SlotPlan:
    """--slots on one device: how many lanes share it, and on a GPU the per-slot gate (a watcher of the
    candidate's own per-process memory against a threshold in MiB: core/slots.py). None on the CPU,
    where each candidate runs under its own memory cap already."""

    count: int
    slot_watcher: Callable[[float], Watcher] | None = None
