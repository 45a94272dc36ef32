"""Throughput's typed configuration: built and checked once from the flags, written into the
artifact's "configuration", and rebuilt from a partial's for `--resume` through the same checks."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...core.typed import from_json
from ...errors import Fail
from ...run.config import (COMMON_KEYS, DEFAULT_IMAGE_SIZE, INT, NUM, RunConfig, check_counts, check_min_batch,
                          engine_names)
from .results import ThroughputCell

CI_LEVEL = 0.95
# The window rule (docs/method.md, "Throughput"): at least the reference runner's two epochs — 2 × 390
# steps at batch 128, the same images at any batch — and at least 5 s, whichever is longer. On the CPU
# only the seconds apply: ResNet-50 trains tens of images/s there, two epochs would take about an hour.
WINDOW_IMAGES = 2 * 390 * 128
WINDOW_SECONDS = 5.0
STEADY_TOLERANCE = 0.02
MAX_WARMUP_SECONDS = 120.0
NONE = (type(None),)


@dataclass(frozen=True)
class ThroughputConfig:
    run: RunConfig
    batch: int
    runs: int
    warmup_steps: int | None  # None: warm up until steady (the rule); a number: exactly that many steps
    steps: int | None  # None: the window rule; a number: exactly that many timed steps
    ci_level: float = CI_LEVEL
    window_images: int | None = None
    window_seconds: float | None = None
    steady_tolerance: float = STEADY_TOLERANCE
    max_warmup_seconds: float = MAX_WARMUP_SECONDS

    BENCHMARK: ClassVar[str] = "throughput"  # `kitctl run throughput`, the artifact's "benchmark"
    TITLE: ClassVar[str] = "Training throughput"  # in headings
    OWN_KEYS: ClassVar[dict[str, tuple[type, ...]]] = {"batch": INT, "runs": INT, "warmup_steps": INT + NONE,
                                                        "steps": INT + NONE}
    # Keys a run before the window rule did not write: absent means its fixed-steps behaviour.
    RULE_KEYS: ClassVar[dict[str, tuple[type, ...]]] = {"window_images": INT + NONE, "window_seconds": NUM + NONE,
                                                         "steady_tolerance": NUM, "max_warmup_seconds": NUM}
    # The recorded settings a resume must find exactly as a run with them would write them.
    SETTINGS: ClassVar[tuple[str, ...]] = (*COMMON_KEYS, *OWN_KEYS, *RULE_KEYS, "seed", "ci_level", "image_size")

    @classmethod
    def from_flags(cls, engines: str, precision: str, device: str, vram_limit: int | None, reserve: int,
                   batch: int, runs: int, warmup_steps: int | None, steps: int | None, timeout: float | None,
                   runtime: str, dataset: str, data_dir: str | None, cudnn_benchmark: bool,
                   memory_limit: int | None, gpu: str | None, gpu_request: str | None = None,
                   image_size: int = DEFAULT_IMAGE_SIZE, window_images: int | None = None,
                   window_seconds: float | None = None, steady_tolerance: float = STEADY_TOLERANCE,
                   max_warmup_seconds: float = MAX_WARMUP_SECONDS, rule: bool = True) -> ThroughputConfig:
        """`rule`: fill the window rule's defaults for the device where no minimum is given (a new run);
        a partial recorded before the rule resumes without it (`from_json`)."""
        names = engine_names(engines)
        check_min_batch("--batch", batch)
        if runs <= 0:
            raise Fail(f"--runs must be > 0 (got {runs})")
        if warmup_steps is not None and warmup_steps <= 0:
            raise Fail(f"--warmup-steps must be > 0 (got {warmup_steps}): the warm-up loss is checked, and "
                       "compilation/graph capture must happen outside the timed window")
        if steps is not None and steps <= 0:
            raise Fail(f"--steps must be > 0 (got {steps})")
        if window_images is not None and window_images <= 0:
            raise Fail(f"--window-images must be > 0 (got {window_images})")
        for flag, value, low in (("--window-seconds", window_seconds, 0.0), ("--steady-tolerance", steady_tolerance, 0.0),
                                 ("--max-warmup-seconds", max_warmup_seconds, -1.0)):
            if value is not None and not (math.isfinite(value) and low < value <= (1.0 if "tol" in flag else 86400)):
                raise Fail(f"{flag} must be {'a fraction in (0, 1]' if 'tol' in flag else 'a number of seconds'}"
                           f"{' > 0' if low == 0 and 'tol' not in flag else ''} (got {value})")
        if steps is not None and (window_images is not None or window_seconds is not None):
            raise Fail("--steps fixes the timed window: it cannot go with --window-images or --window-seconds")
        check_counts(("--batch", batch), ("--runs", runs), ("--warmup-steps", warmup_steps or 0),
                     ("--steps", steps or 0), ("--window-images", window_images or 0))
        run = RunConfig.from_flags(names, precision, device, gpu, vram_limit, reserve, timeout, runtime, dataset,
                                   data_dir, cudnn_benchmark, memory_limit, gpu_request, image_size=image_size)
        if rule and steps is None:  # a minimum not given keeps its default
            window_images = window_images if window_images is not None else (
                WINDOW_IMAGES if device == "cuda" else None)
            window_seconds = WINDOW_SECONDS if window_seconds is None else window_seconds
        if not rule and steps is None:
            raise Fail("steps is missing: a run recorded without the window rule names its timed steps")
        return cls(run, batch, runs, warmup_steps, steps, window_images=window_images,
                   window_seconds=None if window_seconds is None else float(window_seconds),
                   steady_tolerance=float(steady_tolerance), max_warmup_seconds=float(max_warmup_seconds))

    @property
    def uses_rule(self) -> bool:
        return self.steps is None

    @classmethod
    def from_json(cls, recorded: dict[str, Any]) -> ThroughputConfig:
        """The configuration a run with a partial's settings would have; Fail where no run could."""
        flags = RunConfig.flags_of_json(recorded, cls.OWN_KEYS)
        rule = {k: recorded[k] for k in cls.RULE_KEYS if k in recorded}
        for k, v in rule.items():
            if not isinstance(v, cls.RULE_KEYS[k]) or isinstance(v, bool):
                raise Fail(f"{k} is {v!r}")
        return cls.from_flags(batch=recorded["batch"], runs=recorded["runs"], warmup_steps=recorded["warmup_steps"],
                              steps=recorded["steps"], rule=False if recorded.get("steps") is not None else True,
                              **rule, **flags)

    def to_json(self) -> dict[str, Any]:
        out = {
            **self.run.json_head(),
            "batch": self.batch, "runs": self.runs, "warmup_steps": self.warmup_steps, "steps": self.steps,
            "ci_level": self.ci_level,
            "ci_method": "order-statistic (binomial, distribution-free) interval of the median; the actual level "
                         "is reported (min–max when too few runs reach 95%)",
            "vram_rule": "NVML watcher with budget B = L − R for every run (no calibration); --device cpu: none",
        }
        out.update(window_images=self.window_images, window_seconds=self.window_seconds,
                   steady_tolerance=self.steady_tolerance, max_warmup_seconds=self.max_warmup_seconds,
                   window_rule=self.rule_text())
        return {**out, **self.run.json_tail()}

    def rule_text(self) -> str:
        warm = (f"{self.warmup_steps} warm-up steps" if self.warmup_steps is not None else
                f"warm-up until two successive chunks agree within {self.steady_tolerance:.0%} "
                f"(at most {self.max_warmup_seconds:g} s)")
        if not self.uses_rule:
            return f"{warm}; then {self.steps} timed steps (--steps)"
        parts = [f"at least {self.window_images:,} images"] if self.window_images else []
        parts += [f"at least {self.window_seconds:g} s"] if self.window_seconds else []
        return f"{warm}; then timed whole chunks until the window holds {' and '.join(parts)} (and at least 4 chunks)"

    def with_run(self, run: RunConfig) -> ThroughputConfig:
        return replace(self, run=run)

    def cell_problem(self, cell: dict[str, Any]) -> str | None:
        """Why a partial's recorded cell is not one these runs could have left, or None."""
        return replay_problem(from_json(ThroughputCell, cell), self.batch, self.runs)

    def request_fields(self) -> dict[str, Any]:
        """What every run's trial request carries of this configuration (protocol flags)."""
        rule = self.uses_rule
        return {"batch": self.batch, "warmup_steps": self.warmup_steps, "steps": self.steps,
                "window_images": self.window_images if rule else None,
                "window_seconds": self.window_seconds if rule else None,
                "steady_tolerance": self.steady_tolerance,
                # the trial's adaptive warm-up is on exactly when this is given
                "max_warmup_seconds": self.max_warmup_seconds if self.warmup_steps is None else None}


@dataclass(frozen=True)
class ThroughputRecorded:
    """Throughput's own "configuration" keys as an artifact recorded them, for reports: each value as
    written, a missing key None (see kitctl.core.recorded; `ThroughputConfig` above is the strict side)."""

    batch: Any = None
    runs: Any = None
    warmup_steps: Any = None
    steps: Any = None
    ci_level: Any = None
    window_images: Any = None
    window_seconds: Any = None
    steady_tolerance: Any = None
    window_rule: Any = None
    image_size: Any = None


def replay_problem(cell: ThroughputCell, batch: int, runs: int) -> str | None:
    """Why a recorded cell is not one this configuration's runs could have left, or None."""
    if cell.batch is not None and cell.batch != batch:
        return f"its batch is {cell.batch}, the configuration's {batch}"
    recorded = cell.runs
    if len(recorded) > runs:
        return f"it records {len(recorded)} runs of {runs}"
    for i, r in enumerate(recorded, 1):
        if r.run != i or (r.batch is not None and r.batch != batch):
            return f"run {i} is numbered {r.run} at batch {r.batch}"
        if r.status is None:
            return f"run {i} has no outcome"
        if r.status != "ok" and i < len(recorded):
            return f"run {i} failed, yet more runs follow it"
    return None
