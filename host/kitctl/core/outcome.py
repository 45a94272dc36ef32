"""Typed outcomes shared by runtimes, search, sampler and artifact.

One list of statuses (docs/method.md, "Max batch"): every runtime returns a
`TrialOutcome`, and nothing downstream knows which runtime produced it.
"""
from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    OK = "ok"
    OOM = "oom"
    VRAM_CAP_EXCEEDED = "vram_cap_exceeded"
    HOST_OOM_KILLED = "host_oom_killed"
    NONFINITE = "nonfinite"
    TIMEOUT = "timeout"
    CRASH = "crash"
    ERROR = "error"

    @property
    def is_memory_failure(self) -> bool:
        return self in MEMORY_FAILURES


MEMORY_FAILURES = frozenset({Status.OOM, Status.VRAM_CAP_EXCEEDED, Status.HOST_OOM_KILLED})
# Statuses the search retries once before giving up on an engine.
RETRYABLE = frozenset({Status.TIMEOUT, Status.CRASH, Status.ERROR})
# Statuses a trial itself may report in its KIT-RESULT line.
TRIAL_STATUSES = frozenset({Status.OK, Status.OOM, Status.NONFINITE, Status.ERROR})


class KilledBy(str, enum.Enum):
    """Who ended a candidate early. The kit's own kills are never read as OOM-kills."""

    NONE = "none"
    KIT_DEADLINE = "kit_deadline"
    KIT_VRAM_GATE = "kit_vram_gate"
    KIT_INTERRUPT = "kit_interrupt"
    KERNEL_OOM = "kernel_oom"  # Docker State.OOMKilled (container RAM limit)
    SIGNAL = "signal"  # died of a signal nobody in the kit sent


class SearchStatus(str, enum.Enum):
    BOUNDED = "bounded_by_memory_failure"
    CENSORED = "censored_at_max_batch"
    NO_PASS = "no_passing_batch"
    INVALID = "invalid_non_memory_failure"


@dataclass
class MemoryPeaks:
    """Peaks of one candidate, MiB. None = not measured (e.g. no NVML on a CPU host)."""

    device_delta_mib: float | None = None  # NVML used − idle baseline, whole device
    process_mib: float | None = None  # sum over the candidate's host PIDs, NVML per-process
    framework_mib: float | None = None  # allocator's own peak, reported by the trial
    host_rss_mib: float | None = None  # candidate's resident memory on the host (CPU runs)
    baseline_mib: float | None = None  # NVML used just before the candidate
    samples: int = 0
    sample_rate_hz: float | None = None
    release_s: float | None = None  # after a VRAM-gate kill: seconds until the card was back at the baseline


# The line a dying Python process ends its traceback with ("ModuleNotFoundError: No module named
# 'torch'"), or a program's own "error: …" line.
_CAUSE_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b|(?:fatal )?error\b|Fatal\b|FATAL\b)",
                         re.IGNORECASE)
CAUSE_CHARS = 240


@dataclass
class TrialOutcome:
    """What one candidate run produced, whichever runtime started it."""

    batch: int
    status: Status
    killed_by: KilledBy = KilledBy.NONE
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: float = 0.0
    result: dict[str, Any] | None = None  # the trial's KIT-RESULT object, if any
    error: str | None = None
    stderr_tail: str = ""
    peaks: MemoryPeaks = field(default_factory=MemoryPeaks)
    runtime: str = ""
    container_id: str | None = None
    attempt: int = 1

    @property
    def passed(self) -> bool:
        return self.status is Status.OK

    @property
    def cause(self) -> str | None:
        """One line saying why a candidate that did not pass failed, for the terminal and the cell's
        reason (the whole stays in error and stderr_tail): what the trial reported, else the
        exception or error line its stderr ends with, else the kit's own finding."""
        if self.passed:
            return None
        reported = (self.result or {}).get("error") if isinstance(self.result, dict) else None
        lines = [x.strip() for x in self.stderr_tail.splitlines() if x.strip()]
        said = next((x for x in reversed(lines) if _CAUSE_LINE.match(x)), None)
        for text in (reported, said, self.error):
            if isinstance(text, str) and text.strip():
                line = text.strip().splitlines()[0]
                return line if len(line) <= CAUSE_CHARS else line[:CAUSE_CHARS - 1] + "…"
        return None

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["killed_by"] = self.killed_by.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TrialOutcome":
        d = dict(d)
        d["status"] = Status(d["status"])
        d["killed_by"] = KilledBy(d.get("killed_by", "none"))
        d["peaks"] = MemoryPeaks(**(d.get("peaks") or {}))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
