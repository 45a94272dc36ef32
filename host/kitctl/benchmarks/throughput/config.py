"""Throughput's typed configuration: built and checked once from the flags, written into the
artifact's "configuration", and rebuilt from a partial's for `--resume` through the same checks."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...errors import Fail
from ...runconfig import COMMON_KEYS, INT, RunConfig, check_counts, check_min_batch, engine_names

CI_LEVEL = 0.95


@dataclass(frozen=True)
class ThroughputConfig:
    run: RunConfig
    batch: int
    runs: int
    warmup_steps: int
    steps: int
    ci_level: float = CI_LEVEL

    OWN_KEYS: ClassVar[dict[str, tuple[type, ...]]] = {"batch": INT, "runs": INT, "warmup_steps": INT, "steps": INT}
    # The recorded settings a resume must find exactly as a run with them would write them.
    SETTINGS: ClassVar[tuple[str, ...]] = (*COMMON_KEYS, *OWN_KEYS, "seed", "ci_level")

    @classmethod
    def from_flags(cls, engines: str, precision: str, device: str, vram_limit: int | None, reserve: int,
                   batch: int, runs: int, warmup_steps: int, steps: int, timeout: float | None,
                   runtime: str, dataset: str, data_dir: str | None, cudnn_benchmark: bool,
                   memory_limit: int | None, gpu: str | None, gpu_request: str | None = None) -> ThroughputConfig:
        names = engine_names(engines)
        check_min_batch("--batch", batch)
        if runs <= 0:
            raise Fail(f"--runs must be > 0 (got {runs})")
        if warmup_steps <= 0:
            raise Fail(f"--warmup-steps must be > 0 (got {warmup_steps}): the warm-up loss is checked, and "
                       "compilation/graph capture must happen outside the timed window")
        if steps <= 0:
            raise Fail(f"--steps must be > 0 (got {steps})")
        check_counts(("--batch", batch), ("--runs", runs), ("--warmup-steps", warmup_steps), ("--steps", steps))
        run = RunConfig.from_flags(names, precision, device, gpu, vram_limit, reserve, timeout, runtime, dataset,
                                   data_dir, cudnn_benchmark, memory_limit, gpu_request)
        return cls(run, batch, runs, warmup_steps, steps)

    @classmethod
    def from_json(cls, recorded: dict[str, Any]) -> ThroughputConfig:
        """The configuration a run with a partial's settings would have; Fail where no run could."""
        flags = RunConfig.flags_of_json(recorded, cls.OWN_KEYS)
        return cls.from_flags(batch=recorded["batch"], runs=recorded["runs"], warmup_steps=recorded["warmup_steps"],
                              steps=recorded["steps"], **flags)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.run.json_head(),
            "batch": self.batch, "runs": self.runs, "warmup_steps": self.warmup_steps, "steps": self.steps,
            "ci_level": self.ci_level,
            "ci_method": "order-statistic (binomial, distribution-free) interval of the median; the actual level "
                         "is reported (min–max when too few runs reach 95%)",
            "vram_rule": "NVML watcher with budget B = L − R for every run (no calibration); --device cpu: none",
            **self.run.json_tail(),
        }

    def with_run(self, run: RunConfig) -> ThroughputConfig:
        return replace(self, run=run)

    def cell_problem(self, cell: dict[str, Any]) -> str | None:
        """Why a partial's recorded cell is not one these runs could have left, or None."""
        from .run import replay_problem

        return replay_problem(cell, self.batch, self.runs)


@dataclass(frozen=True)
class ThroughputRecorded:
    """Throughput's own "configuration" keys as an artifact recorded them, for reports: each value as
    written, a missing key None (see kitctl.core.recorded; `ThroughputConfig` above is the strict side)."""

    batch: Any = None
    runs: Any = None
    warmup_steps: Any = None
    steps: Any = None
    ci_level: Any = None
