"""Host-side NVML sampler: the VRAM gate (docs/method.md, "Max batch").

A background thread reads the device's used memory as fast as NVML answers (target ≥ 500
samples/s), keeps the peak of the device delta (used − idle baseline taken just before the
candidate) and kills the candidate's whole process group / container the moment a sample
exceeds the budget B. Per-process usage of the candidate's host PIDs is sampled beside it,
less often, because that NVML call is much slower than the memory read.
"""
from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from .gpu import Nvml, Telemetry
from .outcome import KilledBy, MemoryPeaks
from .watch import CandidateHandle

BASELINE_READS = 5
TELEMETRY_EVERY_S = 0.05  # energy counter, SM clock, temperature, power: for throughput's window
PROCESS_EVERY_S = 0.02  # per-process query cadence (it costs ~ms on big hosts)
PID_REFRESH_S = 0.1  # re-list the candidate's host PIDs (forks, compile workers)
# After a gate kill, how long to wait for the card to give the memory back (and how close to the
# idle baseline counts as back): the next candidate's baseline must not include a dead one's memory.
RELEASE_WAIT_S = 10.0
RELEASE_SLACK_MIB = 64.0


def seconds_until(released: Any, t_kill: float | None, wait_s: float) -> float | None:
    """Seconds from `t_kill` (monotonic; now if None) until `released()` holds, polled every 5 ms;
    None if it does not within `wait_s`. An exception from it is a transient NVML error: ask again."""
    t_kill = t_kill if t_kill is not None else time.monotonic()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if released():
                return round(time.monotonic() - t_kill, 3)
        except Exception:  # noqa: BLE001 - a transient NVML error
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


class NvmlSampler:
    """Implements core.watch.Watcher."""

    def __init__(self, nvml: Nvml, handle: Any, budget_mib: float | None, *,
                 min_interval_s: float = 0.0005, release_wait_s: float = RELEASE_WAIT_S,
                 telemetry: bool = False) -> None:
        self.nvml = nvml
        self.h = handle
        self.budget_mib = budget_mib
        self.min_interval_s = min_interval_s  # cap the rate (~2 kHz) so one core is not pinned
        self.release_wait_s = release_wait_s
        self.baseline_mib: float | None = None
        # (time.time(), reading): the wall clock, which a trial in a container shares with the host,
        # so its window's start and end can be placed on this series.
        self.track_telemetry = telemetry
        self.telemetry: list[tuple[float, Telemetry]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reset()

    def _reset(self) -> None:
        self.peak_delta = 0.0
        self.peak_process: float | None = None
        self.samples = 0
        self.tripped = False
        self.tripped_at_mib: float | None = None
        self._t_tripped: float | None = None
        self._t_start = 0.0
        self._t_end = 0.0
        self.telemetry = []

    # -- Watcher ------------------------------------------------------------------
    def prepare(self) -> None:
        """Idle baseline, just before the candidate starts."""
        self._reset()
        reads = [self.nvml.used_mib(self.h) for _ in range(BASELINE_READS)]
        self.baseline_mib = statistics.median(reads)

    def start(self, handle: CandidateHandle) -> None:
        if self.baseline_mib is None:
            self.prepare()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(handle,), name="kit-nvml-sampler", daemon=True)
        self._t_start = time.monotonic()
        self._thread.start()

    def stop(self) -> MemoryPeaks:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.track_telemetry:  # a last reading after the candidate's end closes its window
            try:
                self._read_telemetry()
            except Exception:  # a transient NVML error: the series ends one reading earlier
                pass
        self._t_end = time.monotonic()
        dur = max(self._t_end - self._t_start, 1e-9)
        return MemoryPeaks(device_delta_mib=round(self.peak_delta, 1),
                           process_mib=None if self.peak_process is None else round(self.peak_process, 1),
                           baseline_mib=None if self.baseline_mib is None else round(self.baseline_mib, 1),
                           samples=self.samples, sample_rate_hz=round(self.samples / dur, 1),
                           release_s=self._wait_released() if self.tripped else None)

    def _wait_released(self) -> float | None:
        """Seconds from the gate's kill until the device is back within RELEASE_SLACK_MIB of the
        idle baseline; None if it is not back within release_wait_s (the artifact says so)."""
        base = self.baseline_mib or 0.0
        return seconds_until(lambda: self.nvml.used_mib(self.h) - base <= RELEASE_SLACK_MIB, self._t_tripped,
                             self.release_wait_s)

    @property
    def over_budget(self) -> bool:
        return self.tripped

    # -- the loop -----------------------------------------------------------------
    def observe(self, used_mib: float, handle: CandidateHandle) -> None:
        """One device sample: update the peak and apply the gate (pure logic, tested alone)."""
        self.samples += 1
        delta = used_mib - (self.baseline_mib or 0.0)
        if delta > self.peak_delta:
            self.peak_delta = delta
        if self.budget_mib is not None and delta > self.budget_mib and not self.tripped:
            self.tripped = True
            self.tripped_at_mib = delta
            self._t_tripped = time.monotonic()
            handle.kill(KilledBy.KIT_VRAM_GATE)

    def observe_processes(self, pids: set[int]) -> None:
        total = 0.0
        matched = False
        for p in self.nvml.processes(self.h):
            if p.pid in pids and p.used_mib is not None:
                total += p.used_mib
                matched = True
        if matched and (self.peak_process is None or total > self.peak_process):
            self.peak_process = total

    def _read_telemetry(self) -> None:
        self.telemetry.append((time.time(), self.nvml.telemetry(self.h)))

    def _loop(self, handle: CandidateHandle) -> None:
        next_proc = next_pids = next_tel = 0.0
        pids: set[int] = set()
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                self.observe(self.nvml.used_mib(self.h), handle)
                if t >= next_pids:
                    pids = handle.pids()
                    next_pids = t + PID_REFRESH_S
                if t >= next_proc:
                    self.observe_processes(pids)
                    next_proc = t + PROCESS_EVERY_S
                if self.track_telemetry and t >= next_tel:
                    self._read_telemetry()
                    next_tel = t + TELEMETRY_EVERY_S
            except Exception:  # a vanished process or a transient NVML error: keep sampling
                pass
            spare = self.min_interval_s - (time.monotonic() - t)
            if spare > 0:
                time.sleep(spare)
