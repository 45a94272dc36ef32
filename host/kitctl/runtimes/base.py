"""The runtime interface: start one candidate, watch it, turn what happened into a TrialOutcome.

Two implementations (docs/method.md, "Runtimes"): `local` (a fresh subprocess) and `docker`
(a fresh container). Classification lives here, once, so both say the same thing.
"""
from __future__ import annotations

import abc
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.outcome import KilledBy, MemoryPeaks, Status, TRIAL_STATUSES, TrialOutcome
from ..core.protocol import ResultParseError, TrialRequest, parse_result
from ..core.watch import Watcher
from .spec import TrialSpec

STDERR_TAIL_CHARS = 4000


class RuntimeUnavailable(RuntimeError):
    """The runtime cannot start candidates on this host (one line for the user, exit 2)."""


@dataclass
class RawRun:
    """What a runtime observed of one trial (`execute`), before anyone read its result."""

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    killed_by: KilledBy
    elapsed_s: float
    container_id: str | None = None
    host_rss_mib: float | None = None
    peaks: MemoryPeaks = field(default_factory=MemoryPeaks)  # what the watcher saw (none: empty)
    over_budget: bool = False  # the watcher saw the device delta over the budget


class Runtime(abc.ABC):
    """Starts units of work. `execute` runs any `TrialSpec` (every benchmark's trials go through it); `run` is an
    engine candidate: its spec from the `TrialRequest`, then the outcome classified by the one rule below."""
    name: str = ""

    def execute(self, spec: TrialSpec, *, timeout_s: float, watcher: Watcher | None = None) -> RawRun:
        """Start `spec` fresh, hand it to `watcher`, wait for its end (killing it whole at `timeout_s` or on a
        signal, which is re-raised) and return what was seen; nothing of it is left running. (A runtime that
        only replays or forwards engine candidates — a test's scripted one, Ray's — has none.)"""
        raise RuntimeUnavailable(f"the {self.name or 'this'} runtime starts no trial of its own here")

    def spec(self, request: TrialRequest) -> TrialSpec:
        """The unit of work an engine candidate is."""
        raise RuntimeUnavailable(f"the {self.name or 'this'} runtime has no engine trials")

    def run(self, request: TrialRequest, *, timeout_s: float, watcher: Watcher | None = None) -> TrialOutcome:
        raw = self.execute(self.spec(request), timeout_s=timeout_s, watcher=watcher)
        return classify(request, raw, raw.peaks, over_budget=raw.over_budget, runtime=self.name)

    def describe(self, engine: str) -> dict[str, Any]:
        """Provenance for the artifact: image id/digest, or interpreter and versions."""
        return {"runtime": self.name}

    def interrupt(self) -> None:
        """Kill the candidate running now, if any, and whatever the runtime keeps ready for the next (from
        another thread: a signal, a lane's failure); its `run` returns it as killed by kit_interrupt.
        A runtime with nothing to kill does nothing."""

    def cancel(self) -> None:
        """Kill the candidate running now only (from another thread: a speculation the search no longer
        needs); the run goes on, so what is kept ready for the next candidate stays."""
        self.interrupt()

    def warm(self, request: TrialRequest) -> None:
        """Get ready, on the calling thread, for candidates like `request` before the first one is asked
        for (--prestart: a spare process importing its framework); by default there is nothing to do."""

    def slot_copy(self) -> "Runtime":
        """Another runtime like this one for a second slot on the same device (`--slots`): same
        configuration, its own running candidate (so `interrupt` kills only that slot's)."""
        raise RuntimeUnavailable(f"--slots: the {self.name or 'this'} runtime runs one candidate at a time")

    def close(self) -> None:
        pass


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def tail(text: str, n: int = STDERR_TAIL_CHARS) -> str:
    return text[-n:]


def classify(request: TrialRequest, raw: RawRun, peaks: MemoryPeaks, *, over_budget: bool,
             runtime: str) -> TrialOutcome:
    """One rule for every runtime (docs/method.md, "Max batch": outcome statuses, the VRAM rule).

    Order matters: the kit's own kills first (so they are never read as OOM-kills or
    crashes), then the kernel's OOM-kill, then what the trial said about itself.
    """
    out = TrialOutcome(batch=request.batch, status=Status.CRASH, killed_by=raw.killed_by,
                       exit_code=raw.exit_code, signal=raw.signal, elapsed_s=raw.elapsed_s,
                       stderr_tail=tail(raw.stderr), peaks=peaks, runtime=runtime,
                       container_id=raw.container_id)
    if raw.host_rss_mib is not None:
        peaks.host_rss_mib = raw.host_rss_mib
    try:
        out.result = parse_result(raw.stdout)
    except ResultParseError as exc:
        out.error = str(exc)
    if out.result is not None:
        fw = out.result.get("framework_peak_mib")
        peaks.framework_mib = fw if _finite(fw) else None
        rss = out.result.get("host_peak_rss_mib")
        if peaks.host_rss_mib is None and _finite(rss):
            peaks.host_rss_mib = rss

    if raw.killed_by is KilledBy.KIT_VRAM_GATE:
        out.status = Status.VRAM_CAP_EXCEEDED
        out.error = "device delta went over the budget; killed by the kit"
        return out
    if raw.killed_by is KilledBy.KIT_DEADLINE:
        out.status = Status.TIMEOUT
        out.error = f"deadline passed after {raw.elapsed_s:.0f} s; killed by the kit"
        return out
    if raw.killed_by is KilledBy.KERNEL_OOM:
        out.status = Status.HOST_OOM_KILLED
        out.error = "the container's memory limit was hit (kernel OOM-kill)"
        return out
    if out.result is None:
        how = f"signal {raw.signal}" if raw.signal else f"exit code {raw.exit_code}"
        out.error = f"{out.error} ({how})"
        return out  # crash

    reported = out.result.get("status")
    try:
        status = Status(reported)
    except ValueError:
        status = None
    if status not in TRIAL_STATUSES:
        out.error = f"trial reported an unknown status {reported!r}"
        return out  # crash: the trial broke the protocol
    out.status = status
    out.error = out.result.get("error") or out.error
    if status is Status.OK:
        if raw.exit_code != 0:
            out.status = Status.CRASH
            out.error = f"trial said ok but exited with code {raw.exit_code}"
        elif not (_finite(out.result.get("loss_warmup")) and _finite(out.result.get("loss_final"))):
            out.status = Status.NONFINITE
            out.error = "a loss is not finite"
        elif over_budget:
            # The sampler saw the delta over B after the fact (the kill came too late).
            out.status = Status.VRAM_CAP_EXCEEDED
            out.error = "device delta went over the budget"
    return out


class Stopwatch:
    """Monotonic elapsed seconds; explicit so deadlines are not scattered sleeps."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0
