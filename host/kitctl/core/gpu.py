"""NVML access: which GPU, what it is, who holds its memory.

Everything that touches NVML goes through `Nvml`, a thin adapter over nvidia-ml-py
(`pynvml`), so the sampler's logic can be tested against a small stand-in (tests/fake_nvml.py)
on hosts with no GPU. `--gpu` takes an index or a UUID; NVML and CUDA number devices
differently, so the kit resolves the UUID here and passes only the UUID on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MIB = 2**20


class GpuError(RuntimeError):
    """One line for the user (exit 2)."""


@dataclass
class GpuProcess:
    pid: int
    used_mib: float | None
    name: str = ""


@dataclass
class GpuInfo:
    index: int
    uuid: str
    name: str
    driver: str
    total_mib: float
    cuda_driver_version: str | None = None
    memory_info_version: int = 1
    mig_mode: str | None = None
    clocks_mhz: dict[str, Any] = field(default_factory=dict)
    max_clocks_mhz: dict[str, Any] = field(default_factory=dict)
    pci_bus_id: str | None = None
    power_limit_w: float | None = None
    persistence_mode: str | None = None
    compute_mode: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class Nvml:
    """The calls the kit makes, over pynvml. Created once per process (nvmlInit is global)."""

    def __init__(self, lib: Any = None) -> None:
        if lib is None:
            try:
                import pynvml as lib  # nvidia-ml-py
            except ImportError as exc:  # pragma: no cover - depends on the host
                raise GpuError("nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py") from exc
        self.lib = lib
        try:
            lib.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded
            raise GpuError(f"no NVIDIA driver found (NVML: {exc}); on a host without a GPU use --device cpu") from None
        self._v2 = hasattr(lib, "nvmlMemory_v2")

    # -- devices ------------------------------------------------------------------
    def count(self) -> int:
        return int(self.lib.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, h: Any) -> str:
        return _s(self.lib.nvmlDeviceGetUUID(h))

    def resolve(self, spec: str | int | None) -> tuple[int, Any]:
        """`--gpu` (index, UUID or UUID prefix) → (NVML index, handle)."""
        n = self.count()
        if n == 0:
            raise GpuError("NVML sees no GPU on this host; use --device cpu")
        spec = "0" if spec is None else str(spec).strip()
        if spec.isdigit():
            i = int(spec)
            if i >= n:
                raise GpuError(f"--gpu {i}: no such GPU (this host has {n}: indices 0..{n - 1})")
            return i, self.handle(i)
        matches = [i for i in range(n) if self.uuid(self.handle(i)).startswith(spec)]
        if len(matches) != 1:
            known = ", ".join(self.uuid(self.handle(i)) for i in range(n))
            raise GpuError(f"--gpu {spec}: {'no' if not matches else 'more than one'} GPU matches (known: {known})")
        return matches[0], self.handle(matches[0])

    # -- memory -------------------------------------------------------------------
    def used_mib(self, h: Any) -> float:
        """Device memory in use, MiB. v2 counts the driver's reserved memory apart, as
        nvidia-smi does; v1 folds it into `used`. Either way the kit works on deltas."""
        if self._v2:
            try:
                m = self.lib.nvmlDeviceGetMemoryInfo(h, version=self.lib.nvmlMemory_v2)
                return m.used / MIB
            except Exception:
                self._v2 = False
        return self.lib.nvmlDeviceGetMemoryInfo(h).used / MIB

    def total_mib(self, h: Any) -> float:
        return self.lib.nvmlDeviceGetMemoryInfo(h).total / MIB

    def processes(self, h: Any) -> list[GpuProcess]:
        out: list[GpuProcess] = []
        seen: set[int] = set()
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = getattr(self.lib, fn)(h)
            except Exception:
                continue
            for p in procs:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                used = getattr(p, "usedGpuMemory", None)
                out.append(GpuProcess(pid=int(p.pid), used_mib=None if used is None else used / MIB))
        for p in out:
            try:
                p.name = _s(self.lib.nvmlSystemGetProcessName(p.pid))
            except Exception:
                p.name = ""
        return out

    # -- energy and clocks (throughput's telemetry) ------------------------------------
    def telemetry(self, h: Any) -> "Telemetry":
        """One reading of the counters throughput reports beside images/s; a field NVML cannot give
        on this device (e.g. the energy counter before Volta) is None."""
        lib = self.lib

        def opt(fn: str, *args: Any) -> Any:
            try:
                return getattr(lib, fn)(*args)
            except Exception:
                return None

        energy = opt("nvmlDeviceGetTotalEnergyConsumption", h)  # mJ since the driver loaded
        sm = getattr(lib, "NVML_CLOCK_SM", None)
        temp = getattr(lib, "NVML_TEMPERATURE_GPU", 0)
        power = opt("nvmlDeviceGetPowerUsage", h)  # mW
        return Telemetry(energy_mj=float(energy) if isinstance(energy, (int, float)) else None,
                         sm_clock_mhz=opt("nvmlDeviceGetClockInfo", h, sm) if sm is not None else None,
                         temperature_c=opt("nvmlDeviceGetTemperature", h, temp),
                         power_w=power / 1000 if isinstance(power, (int, float)) else None)

    # -- description ------------------------------------------------------------------
    def info(self, index: int, h: Any) -> GpuInfo:
        lib = self.lib
        gi = GpuInfo(index=index, uuid=self.uuid(h), name=_s(lib.nvmlDeviceGetName(h)),
                     driver=_s(lib.nvmlSystemGetDriverVersion()), total_mib=self.total_mib(h),
                     memory_info_version=2 if self._v2 else 1)

        def opt(fn: str, *args: Any) -> Any:
            try:
                return getattr(lib, fn)(*args)
            except Exception:
                return None

        cv = opt("nvmlSystemGetCudaDriverVersion")
        gi.cuda_driver_version = f"{cv // 1000}.{cv % 1000 // 10}" if isinstance(cv, int) else None
        mig = opt("nvmlDeviceGetMigMode", h)
        gi.mig_mode = None if mig is None else ("enabled" if mig[0] else "disabled")
        for label, const in (("graphics", "NVML_CLOCK_GRAPHICS"), ("sm", "NVML_CLOCK_SM"),
                             ("memory", "NVML_CLOCK_MEM")):
            c = getattr(lib, const, None)
            if c is not None:
                gi.clocks_mhz[label] = opt("nvmlDeviceGetClockInfo", h, c)
                gi.max_clocks_mhz[label] = opt("nvmlDeviceGetMaxClockInfo", h, c)
        pci = opt("nvmlDeviceGetPciInfo", h)
        gi.pci_bus_id = _s(pci.busId) if pci is not None else None
        pl = opt("nvmlDeviceGetEnforcedPowerLimit", h)
        gi.power_limit_w = pl / 1000 if isinstance(pl, (int, float)) else None
        pm = opt("nvmlDeviceGetPersistenceMode", h)
        gi.persistence_mode = None if pm is None else ("enabled" if pm else "disabled")
        cm = opt("nvmlDeviceGetComputeMode", h)
        gi.compute_mode = None if cm is None else str(cm)
        return gi


@dataclass(frozen=True)
class Telemetry:
    """One reading: the energy counter (mJ), SM clock (MHz), temperature (°C), power draw (W)."""

    energy_mj: float | None
    sm_clock_mhz: float | None
    temperature_c: float | None
    power_w: float | None


def check_idle(nvml: Nvml, h: Any, threshold_mib: float) -> str | None:
    """None when the GPU holds at most `threshold_mib`; else one line naming who holds it."""
    used = nvml.used_mib(h)
    if used <= threshold_mib:
        return None
    procs = nvml.processes(h)
    who = ", ".join(f"pid {p.pid} {p.name or '?'} ({p.used_mib:.0f} MiB)" if p.used_mib is not None
                    else f"pid {p.pid} {p.name or '?'}" for p in procs) or "no process NVML can name"
    return f"GPU is not idle: {used:.0f} MiB in use (threshold {threshold_mib:.0f} MiB), held by {who}"


def detect_gpu(lib: Any = None) -> dict[str, Any] | None:
    """The GPU a data run's GPU loaders (pytorch-nvjpeg, dali-gpu) and GPU training use, described through NVML
    as the engine benchmarks describe theirs (`Nvml.info`, the artifact's host.gpu): NVML's GPU 0, as `--gpu`'s
    default is for the engines. None where there is none: no nvidia-ml-py, no driver, or no device (a CPU host).
    `lib`: pynvml, or the named stand-in the tests pass (tests/fake_nvml.py)."""
    try:
        nvml = Nvml(lib)
        if nvml.count() == 0:
            return None
        index, handle = nvml.resolve(None)
        return nvml.info(index, handle).to_json()
    except GpuError:
        return None
    except Exception:  # noqa: BLE001 - an NVML call failing on a broken driver: described as no GPU, not a crash
        return None
