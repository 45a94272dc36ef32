"""Slots: several candidates of one search at the same time on one device (`--slots N|auto`).

What fits. A slot holds one candidate, and a candidate may use up to its limit: on a GPU the
emulated card's L (the gate kills it above its budget B = L − R, plus what the sampler's lag lets
through), on the CPU the memory cap every candidate already runs under. Every slot also gets a
stated allowance for what the candidate holds outside that limit (`GPU_CONTEXT_ALLOWANCE_MIB`:
driver bookkeeping and the sampling lag of the gate; `CPU_PROCESS_ALLOWANCE_MIB`: the interpreter
and shared libraries, which the cap on private data does not count). N slots fit when
N × (limit + allowance) is at most the device's total memory (GPU, NVML) or the available RAM
(CPU, MemAvailable). `auto` is as many as fit, at most one per core of the host, and at least one.

The gate per slot (GPU). With several candidates on one card the device's used memory is the sum of
all of them, so the one-candidate gate (device delta over the idle baseline) cannot tell whose
memory it is. Each candidate is instead gated by its own per-process NVML usage, summed over its
PIDs (process group or container), against B minus the cell's calibrated offset (what the device
delta showed beyond the per-process usage when the calibration candidate ran alone: memory NVML
does not attribute to the process). One `SlotSampler` thread reads NVML's process list for every
running slot; each slot's `SlotWatcher` is the candidate's `Watcher`.
Pure arithmetic above, NVML through core.gpu.Nvml below: tested with tests/fake_nvml.py.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from .gpu import Nvml
from .outcome import KilledBy, MemoryPeaks
from .sampler import seconds_until
from .watch import CandidateHandle

GPU_CONTEXT_ALLOWANCE_MIB = 512
CPU_PROCESS_ALLOWANCE_MIB = 256
# Re-list a candidate's PIDs (forks, compile workers) this often, in a thread of the slot's own: on
# Docker that is an API call (`docker top`) of tens of ms, which must not slow the one NVML loop
# that gates every slot.
PID_REFRESH_S = 0.1
MIN_INTERVAL_S = 0.002  # the process list costs ~ms on a big host: ~500 reads/s at most
RELEASE_WAIT_S = 10.0  # after a gate kill: how long to wait for NVML to stop listing its processes
# Per-process usage may read above the device delta by NVML's rounding and timing; more than this
# and the offset is not a calibration of this engine's per-process usage.
OFFSET_SLACK_MIB = 64.0


class SlotsError(ValueError):
    """One line for the user (exit 2)."""


@dataclass(frozen=True)
class SlotFit:
    """How many slots a device holds and why (recorded in the artifact's configuration)."""

    slots: int
    requested: str  # "auto" or the number given
    limit_mib: int  # per candidate: L on a GPU, the memory cap on the CPU
    allowance_mib: int  # per candidate, beside the limit
    device_mib: int  # the GPU's total memory, or the RAM available when the run starts
    device_source: str  # "GPU total (NVML)" | "available RAM (MemAvailable)"
    cores: int

    def to_json(self) -> dict[str, Any]:
        return {"slots": self.slots, "requested": self.requested, "limit_mib": self.limit_mib,
                "allowance_mib": self.allowance_mib, "device_mib": self.device_mib,
                "device_source": self.device_source, "cores": self.cores}


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def parse_slots(text: str) -> int | None:
    """`--slots N|auto` → N, or None for auto; SlotsError otherwise."""
    t = str(text).strip().lower()
    if t == "auto":
        return None
    if not t.isdigit() or int(t) < 1:
        raise SlotsError(f"--slots takes a number ≥ 1 or auto (got {text!r})")
    return int(t)


def fit(requested: int | None, limit_mib: int, allowance_mib: int, device_mib: float, device_source: str,
        cores: int | None = None) -> SlotFit:
    """The slots the run gets: `requested` (None: auto) if N × (limit + allowance) fits the device,
    else SlotsError naming the arithmetic."""
    cores = host_cores() if cores is None else cores
    per = limit_mib + allowance_mib
    holds = int(math.floor(device_mib / per)) if per > 0 else 0
    if requested is None:
        n = max(1, min(holds, cores))
        return SlotFit(n, "auto", limit_mib, allowance_mib, int(device_mib), device_source, cores)
    if requested > 1 and requested * per > device_mib:
        raise SlotsError(f"--slots {requested}: {requested} × ({limit_mib:,} MiB limit + {allowance_mib} MiB "
                         f"allowance) = {requested * per:,} MiB does not fit the {device_mib:,.0f} MiB of the "
                         f"{device_source}; at most {max(holds, 1)} fit (or --slots auto)")
    return SlotFit(requested, str(requested), limit_mib, allowance_mib, int(device_mib), device_source, cores)


def gate_offset(device_delta_mib: float | None, process_mib: float | None) -> tuple[float | None, str]:
    """The per-slot gate's offset from a calibration candidate that ran alone: (offset MiB, "") or
    (None, why the per-process gate cannot be used for this cell)."""
    if device_delta_mib is None:
        return None, "the calibration has no device delta"
    if process_mib is None:
        return None, "NVML gave no per-process memory for the calibration candidate"
    off = device_delta_mib - process_mib
    if off < -OFFSET_SLACK_MIB:
        return None, (f"per-process memory ({process_mib:.0f} MiB) exceeds the device delta ({device_delta_mib:.0f} "
                      f"MiB) by more than {OFFSET_SLACK_MIB:.0f} MiB")
    return round(max(0.0, off), 1), ""


class _Slot:
    """One running candidate in the shared loop."""

    def __init__(self, handle: CandidateHandle, threshold_mib: float | None) -> None:
        self.handle = handle
        self.threshold_mib = threshold_mib
        self.pids: set[int] = set()  # replaced whole by the refresher (the loop reads a consistent set)
        self.done = threading.Event()
        self.peak: float | None = None
        self.samples = 0
        self.tripped = False
        self.tripped_at_mib: float | None = None
        self.t_tripped: float | None = None

    def refresh_pids(self) -> None:
        try:
            self.pids = set(self.handle.pids())
        except Exception:  # gone meanwhile: keep the last list
            pass

    def refresher(self) -> None:
        while not self.done.wait(PID_REFRESH_S):
            self.refresh_pids()


class SlotSampler:
    """One NVML loop for every slot of one device: reads the process list, sums each running
    candidate's usage over its PIDs, keeps its peak and kills it the moment its sum is over its
    threshold. The thread runs while at least one slot is registered."""

    def __init__(self, nvml: Nvml, handle: Any, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.nvml = nvml
        self.h = handle
        self.min_interval_s = min_interval_s
        self._slots: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.reads = 0  # process-list reads by the loop (one per pass for all slots)

    def watcher(self, threshold_mib: float | None) -> "SlotWatcher":
        return SlotWatcher(self, threshold_mib)

    def _add(self, slot: _Slot) -> None:
        with self._lock:
            self._slots[id(slot)] = slot
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="kit-nvml-slots", daemon=True)
                self._thread.start()

    def _remove(self, slot: _Slot) -> None:
        with self._lock:
            self._slots.pop(id(slot), None)

    def observe(self, usage: dict[int, float]) -> None:
        """One reading of the process list (pid → MiB) for every slot: peaks and the gate."""
        with self._lock:
            slots = list(self._slots.values())
        for s in slots:
            s.samples += 1
            mine = [usage[p] for p in s.pids if p in usage]
            if not mine:
                continue
            total = sum(mine)
            if s.peak is None or total > s.peak:
                s.peak = total
            if s.threshold_mib is not None and total > s.threshold_mib and not s.tripped:
                s.tripped, s.tripped_at_mib, s.t_tripped = True, total, time.monotonic()
                s.handle.kill(KilledBy.KIT_VRAM_GATE)

    def usage(self) -> dict[int, float]:
        return {p.pid: p.used_mib for p in self.nvml.processes(self.h) if p.used_mib is not None}

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._slots:
                    self._thread = None
                    return
            t = time.monotonic()
            try:
                self.observe(self.usage())
                self.reads += 1
            except Exception:  # a transient NVML error: read again
                pass
            spare = self.min_interval_s - (time.monotonic() - t)
            if spare > 0:
                time.sleep(spare)


class SlotWatcher:
    """Implements core.watch.Watcher for one slot's candidate: its own per-process memory against
    `threshold_mib` (B − the cell's offset), through the device's shared SlotSampler."""

    def __init__(self, sampler: SlotSampler, threshold_mib: float | None,
                 release_wait_s: float = RELEASE_WAIT_S) -> None:
        self.sampler = sampler
        self.threshold_mib = threshold_mib
        self.budget_mib = threshold_mib
        self.release_wait_s = release_wait_s
        self._slot: _Slot | None = None
        self._pids: threading.Thread | None = None
        self._t0 = 0.0

    def prepare(self) -> None:
        self._slot = None

    def start(self, handle: CandidateHandle) -> None:
        self._slot = _Slot(handle, self.threshold_mib)
        self._slot.refresh_pids()
        self._t0 = time.monotonic()
        self._pids = threading.Thread(target=self._slot.refresher, name="kit-slot-pids", daemon=True)
        self._pids.start()
        self.sampler._add(self._slot)

    def stop(self) -> MemoryPeaks:
        s = self._slot
        if s is None:
            return MemoryPeaks()
        self.sampler._remove(s)
        s.done.set()
        if self._pids is not None:
            self._pids.join(timeout=5)
        dur = max(time.monotonic() - self._t0, 1e-9)
        return MemoryPeaks(process_mib=None if s.peak is None else round(s.peak, 1), samples=s.samples,
                           sample_rate_hz=round(s.samples / dur, 1),
                           release_s=self._wait_released(s) if s.tripped else None)

    def _wait_released(self, s: _Slot) -> float | None:
        """Seconds from the gate's kill until NVML lists none of the candidate's processes; None if
        they are still listed after release_wait_s (the artifact says so)."""
        return seconds_until(lambda: not (set(self.sampler.usage()) & s.pids), s.t_tripped, self.release_wait_s)

    @property
    def over_budget(self) -> bool:
        return self._slot is not None and self._slot.tripped
