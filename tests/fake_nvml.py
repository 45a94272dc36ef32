"""FakeNvmlLib: a small stand-in for `pynvml` (nvidia-ml-py) on hosts without a GPU.

It is the only fake in these tests and it replaces NVML itself, never kitctl code:
pass it as `kitctl.core.gpu.Nvml(lib=FakeNvmlLib(...))` and the real `Nvml` adapter, the
real `NvmlSampler` and the real `check_idle` run against it.

It mirrors the pynvml calls the kit makes, with pynvml's shapes:

* `nvmlInit`, `nvmlShutdown`, `nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex`
  (an out-of-range index raises `NVMLError`, as NVML_ERROR_INVALID_ARGUMENT does),
  `nvmlDeviceGetUUID`, `nvmlDeviceGetName`, `nvmlSystemGetDriverVersion`,
  `nvmlSystemGetCudaDriverVersion` (an int such as 12040), `nvmlDeviceGetMigMode`
  (`[current, pending]`), `nvmlDeviceGetClockInfo` / `nvmlDeviceGetMaxClockInfo` with the
  `NVML_CLOCK_*` constants, `nvmlDeviceGetPciInfo` (`.busId`),
  `nvmlDeviceGetEnforcedPowerLimit` (milliwatts), `nvmlDeviceGetPersistenceMode`,
  `nvmlDeviceGetComputeMode`.
* `nvmlDeviceGetMemoryInfo(handle, version=None)`: without `version` it answers the v1
  struct (`total`, `free`, `used`, bytes; `used` includes the driver's reserved memory);
  with `version=nvmlMemory_v2` the v2 struct (`version`, `total`, `reserved`, `free`, `used`;
  `used` excludes the reserved memory), as NVML does. `v2=False` removes the
  `nvmlMemory_v2` attribute (an old pynvml); `v2_raises=True` keeps it but makes the v2 call
  fail (an old driver), so the adapter must fall back to v1.
* `nvmlDeviceGetComputeRunningProcesses` / `nvmlDeviceGetGraphicsRunningProcesses`: objects
  with `pid` and `usedGpuMemory` (bytes, or None when NVML cannot tell), and
  `nvmlSystemGetProcessName(pid)`. A device's process list may be a callable (asked anew
  at each call).
* Throughput's telemetry: `nvmlDeviceGetTotalEnergyConsumption` (mJ), `nvmlDeviceGetPowerUsage`
  (mW), `nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)` (°C). Each device's `energy_mj`
  is a callable `f(time.time()) -> mJ` (None: the call raises Not Supported, as before Volta), so
  a test can give the counter a known power and check the joules the kit derives from it.

Scripting used memory: each device has a `used_mib` script, either a sequence of MiB values
(each memory-info call consumes the next one; after the end the last value repeats) or a
callable `f(call_number) -> MiB`. A value may be an Exception instance, which that call
raises (a transient NVML error). Strings can be answered as bytes (`as_bytes=True`), as
pynvml < 11.5 did.

Memory that rises with a real process: `CandidateMemory` answers `used` as an idle value plus
the resident memory (RSS, read from /proc) of the processes a real `kitctl` started for its
candidate, and lists them as compute processes; `tests/nvml_stand_in/pynvml.py` puts it behind
the `pynvml` a `kitctl` subprocess imports. A trial that allocates host memory (the trial
fault `KIT_TRIAL_FAULT=grow`) then "allocates device memory", and gives it back only when it
is gone: the VRAM gate's real kill can be seen on a host without a GPU.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

MIB = 2**20


class NVMLError(Exception):
    """pynvml.NVMLError stand-in."""


@dataclass
class FakeProcess:
    pid: int
    used_mib: float | None  # None: NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
    name: str = "python3"


@dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H200"
    total_mib: float = 143771.0
    used_mib: Sequence[Any] | Callable[[int], Any] = (500.0,)
    reserved_mib: float = 0.0
    compute_processes: list[FakeProcess] | Callable[[], list[FakeProcess]] = field(default_factory=list)
    graphics_processes: list[FakeProcess] = field(default_factory=list)
    mig_mode: tuple[int, int] | None = (0, 0)
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {0: 1980, 1: 1980, 2: 3201})
    max_clocks_mhz: dict[int, int] = field(default_factory=lambda: {0: 1980, 1: 1980, 2: 3201})
    pci_bus_id: str = "00000000:18:00.0"
    power_limit_mw: int | None = 700000
    persistence_mode: int | None = 1
    compute_mode: int | None = 0
    energy_mj: Callable[[float], float] | None = None
    power_mw: int | None = 350000
    temperature_c: int | None = 45
    # bookkeeping
    memory_calls: int = 0


class FakeNvmlLib:
    """A stand-in for the `pynvml` module (see the module docstring)."""

    NVMLError = NVMLError
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices: Sequence[FakeDevice] | None = None, *, driver: str = "550.54.15",
                 cuda_driver_version: int | None = 12040, v2: bool = True, v2_raises: bool = False,
                 init_error: Exception | None = None, as_bytes: bool = False) -> None:
        self.devices = list(devices) if devices is not None else [FakeDevice("GPU-00000000-1111-2222-3333-444444444444")]
        self.driver = driver
        self.cuda_driver_version = cuda_driver_version
        self.v2_raises = v2_raises
        self.init_error = init_error
        self.as_bytes = as_bytes
        self.init_calls = 0
        self._lock = threading.Lock()
        if v2:
            # pynvml: nvmlMemory_v2 = ctypes.sizeof(c_nvmlMemory_v2_t) | (2 << 24)
            self.nvmlMemory_v2 = 0x2000028

    # -- helpers ------------------------------------------------------------------------
    def _str(self, s: str) -> str | bytes:
        return s.encode() if self.as_bytes else s

    def _dev(self, h: Any) -> FakeDevice:
        if not isinstance(h, FakeDevice):
            raise NVMLError("Invalid Argument")
        return h

    def _next_used(self, d: FakeDevice) -> float:
        with self._lock:
            n = d.memory_calls
            d.memory_calls += 1
        if callable(d.used_mib):
            v = d.used_mib(n)
        else:
            seq = d.used_mib
            v = seq[min(n, len(seq) - 1)]
        if isinstance(v, BaseException):
            raise v
        return float(v)

    # -- init ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        pass

    # -- devices ------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        if not 0 <= index < len(self.devices):
            raise NVMLError("Invalid Argument")
        return self.devices[index]

    def nvmlDeviceGetUUID(self, h: Any) -> str | bytes:
        return self._str(self._dev(h).uuid)

    def nvmlDeviceGetName(self, h: Any) -> str | bytes:
        return self._str(self._dev(h).name)

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self._str(self.driver)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda_driver_version is None:
            raise NVMLError("Not Supported")
        return self.cuda_driver_version

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        d = self._dev(h)
        if d.mig_mode is None:
            raise NVMLError("Not Supported")
        return list(d.mig_mode)

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        return self._dev(h).clocks_mhz[clock]

    def nvmlDeviceGetMaxClockInfo(self, h: Any, clock: int) -> int:
        return self._dev(h).max_clocks_mhz[clock]

    def nvmlDeviceGetPciInfo(self, h: Any) -> SimpleNamespace:
        return SimpleNamespace(busId=self._str(self._dev(h).pci_bus_id))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        d = self._dev(h)
        if d.power_limit_mw is None:
            raise NVMLError("Not Supported")
        return d.power_limit_mw

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        d = self._dev(h)
        if d.persistence_mode is None:
            raise NVMLError("Not Supported")
        return d.persistence_mode

    def nvmlDeviceGetComputeMode(self, h: Any) -> int:
        d = self._dev(h)
        if d.compute_mode is None:
            raise NVMLError("Not Supported")
        return d.compute_mode

    # -- energy, power, temperature -------------------------------------------------------
    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        d = self._dev(h)
        if d.energy_mj is None:
            raise NVMLError("Not Supported")
        return int(d.energy_mj(time.time()))

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        d = self._dev(h)
        if d.power_mw is None:
            raise NVMLError("Not Supported")
        return d.power_mw

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        d = self._dev(h)
        if d.temperature_c is None or sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError("Not Supported")
        return d.temperature_c

    # -- memory -------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> SimpleNamespace:
        d = self._dev(h)
        if version is not None:
            if not hasattr(self, "nvmlMemory_v2") or version != self.nvmlMemory_v2:
                raise NVMLError("Invalid Argument")
            if self.v2_raises:
                raise NVMLError("Function Not Found")
            used = self._next_used(d)
            total, reserved = d.total_mib * MIB, d.reserved_mib * MIB
            return SimpleNamespace(version=version, total=int(total), reserved=int(reserved),
                                   used=int(used * MIB), free=int(total - reserved - used * MIB))
        used = self._next_used(d) + d.reserved_mib  # v1 folds the reserved memory into used
        total = d.total_mib * MIB
        return SimpleNamespace(total=int(total), used=int(used * MIB), free=int(total - used * MIB))

    # -- processes ----------------------------------------------------------------------
    @staticmethod
    def _procs(procs: list[FakeProcess] | Callable[[], list[FakeProcess]]) -> list[SimpleNamespace]:
        if callable(procs):
            procs = procs()
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=None if p.used_mib is None else int(p.used_mib * MIB),
                                gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF) for p in procs]

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[SimpleNamespace]:
        return self._procs(self._dev(h).compute_processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[SimpleNamespace]:
        return self._procs(self._dev(h).graphics_processes)

    def nvmlSystemGetProcessName(self, pid: int) -> str | bytes:
        for d in self.devices:
            compute = d.compute_processes() if callable(d.compute_processes) else d.compute_processes
            for p in compute + d.graphics_processes:
                if p.pid == pid:
                    return self._str(p.name)
        raise NVMLError("Not Found")


# -- memory that rises with a real process ---------------------------------------------------

OWNER_LABEL = "kit.owner-pid"  # the label kitctl puts on its containers (results/README.md)
PAGE = os.sysconf("SC_PAGE_SIZE")


def _parents() -> dict[int, int]:
    """pid → parent pid of every process in /proc."""
    out: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        out[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ..."
    return out


def rss_mib(pid: int) -> float:
    """Resident memory of a live process, MiB; 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class CandidateMemory:
    """`used` = idle + RSS of the candidate's processes: every process below `owner_pid` (the
    local runtime's trial, in its own session, is a child of kitctl) and every process of a
    running container labelled kit.owner-pid=<owner_pid> (the Docker runtime's; needs
    `docker_client`). The set of processes is looked up every `refresh_s`, their RSS at every
    call. With `log_path`, each reading of `used` appends one JSON line {t, pids, rss_mib} (wall time),
    so a test can tell when the memory rose and when the processes were gone."""

    def __init__(self, owner_pid: int, idle_mib: float, *, docker_client: Any = None,
                 refresh_s: float = 0.05, log_path: str | os.PathLike[str] | None = None) -> None:
        self.owner_pid = owner_pid
        self.idle_mib = idle_mib
        self.docker = docker_client
        self.refresh_s = refresh_s
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self._pids: set[int] = set()
        self._container_pids: dict[str, int] = {}  # container id → its first process
        self._next = 0.0

    def _roots(self) -> set[int]:
        roots = {self.owner_pid}
        if self.docker is not None:
            try:
                running = self.docker.containers.list(filters={"label": f"{OWNER_LABEL}={self.owner_pid}"})
            except Exception:  # noqa: BLE001 - a daemon hiccup: keep the last answer
                return roots | set(self._container_pids.values())
            for c in running:
                if c.id not in self._container_pids:
                    try:
                        self._container_pids[c.id] = int(self.docker.api.inspect_container(c.id)["State"]["Pid"])
                    except Exception:  # noqa: BLE001 - gone meanwhile
                        continue
            ids = {c.id for c in running}
            self._container_pids = {k: v for k, v in self._container_pids.items() if k in ids}
            roots |= {p for p in self._container_pids.values() if p > 0}
        return roots

    def _refresh(self) -> set[int]:
        parents = _parents()
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        roots = self._roots()
        found: set[int] = set()
        todo = [r for r in roots if r != self.owner_pid and r in parents] + children.get(self.owner_pid, [])
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, []))
        return {p for p in found if alive(p)}

    def pids(self) -> set[int]:
        with self._lock:
            now = time.monotonic()
            if now >= self._next:
                self._pids = self._refresh()
                self._next = now + self.refresh_s
            return set(self._pids)

    def used_mib(self, _call: int = 0) -> float:
        pids = self.pids()
        rss = sum(rss_mib(p) for p in pids)
        if self.log_path is not None:  # the very value answered: the kit's reading and the log agree
            line = {"t": time.time(), "pids": sorted(pids), "rss_mib": round(rss, 1)}
            with self._lock, self.log_path.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return self.idle_mib + rss

    def processes(self) -> list[FakeProcess]:
        return [FakeProcess(p, rss_mib(p)) for p in sorted(self.pids())]
