"""`--device auto` (the default of the GPU benchmarks) and the CPU's safe memory cap.

auto picks the GPU when one is usable (NVML sees it and, for the local runtime, the interpreter's
PyTorch is a CUDA build), else the CPU. On the CPU a candidate is always capped: without
`--memory-limit` the cap is a fraction of the host's available RAM (at most `CPU_CAP_CEILING_MIB`,
so that a first run ends in minutes), and the search's default `--max-batch` is one the cap
bounds. The choice and its reason are printed and recorded (configuration.device_choice).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .recorded import view

# A quarter of the available RAM leaves the host (and its other users) the rest; the ceiling keeps
# a first CPU search short: ResNet-50 at 32 px needs ~3.4 MiB per sample on the CPU, so 2,048 MiB
# bounds it near batch 500 (about a dozen candidates).
CPU_CAP_FRACTION = 0.25
CPU_CAP_CEILING_MIB = 2048
CPU_CAP_FLOOR_MIB = 256  # below this no ResNet-50 step runs; a host with less is refused by the trial
# Each ResNet-50 training sample takes more than 1 MiB on the CPU (≈3.4 MiB at 32 px, measured), so
# a search capped at M MiB fails before batch M: M as the default --max-batch never censors it.
MIB_PER_SAMPLE_FLOOR = 1


@dataclass(frozen=True)
class DeviceChoice:
    """What ran and why: `device` is cuda or cpu; `requested` what the user asked (auto/cuda/cpu)."""

    requested: str
    device: str
    reason: str
    memory_limit_mib: int | None = None  # the CPU's cap (given or defaulted); None on the GPU
    memory_limit_source: str | None = None  # "--memory-limit" | the default's rule, in words

    def to_json(self) -> dict[str, Any]:
        return {"requested": self.requested, "device": self.device, "reason": self.reason,
                "memory_limit_source": self.memory_limit_source}

    def line(self) -> str:
        """The one line a run prints before it starts."""
        text = f"device {self.device} ({'--device ' + self.requested if self.requested != 'auto' else 'auto'}: " \
               f"{self.reason})"
        if self.device == "cpu" and self.memory_limit_mib is not None:
            text += f"; memory cap {self.memory_limit_mib:,} MiB per candidate ({self.memory_limit_source})"
        return text


def available_ram_mib(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable (what can be allocated without swapping), else the free pages; None if unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") // 2**20
    except (ValueError, OSError):
        return None


def default_cpu_cap(available_mib: int | None) -> tuple[int, str]:
    """(cap MiB, how it was chosen) for a CPU run without --memory-limit."""
    if available_mib is None:
        return CPU_CAP_CEILING_MIB, f"default {CPU_CAP_CEILING_MIB:,} MiB: this host's available RAM is unknown"
    cap = max(CPU_CAP_FLOOR_MIB, min(CPU_CAP_CEILING_MIB, int(available_mib * CPU_CAP_FRACTION)))
    return cap, (f"default: a quarter of the {available_mib:,} MiB available, at most {CPU_CAP_CEILING_MIB:,}; "
                 "set --memory-limit to change it")


def default_cpu_max_batch(cap_mib: int, start_batch: int) -> int:
    """A --max-batch the cap bounds (the search ends at a memory failure, not at the ceiling)."""
    return max(start_batch, cap_mib // MIB_PER_SAMPLE_FLOOR)


def gpu_problem(gpu: str | None, nvml_lib: Any = None) -> str | None:
    """Why no GPU is usable through NVML here, or None (a GPU `--gpu` names, default 0, is seen)."""
    from .gpu import GpuError, Nvml

    try:
        nvml = Nvml(nvml_lib)
        index, handle = nvml.resolve(gpu)
        nvml.info(index, handle)
    except GpuError as exc:
        return str(exc).split("; ")[0].split(" (NVML")[0]
    except Exception as exc:  # noqa: BLE001  a broken NVML is no usable GPU
        return f"NVML failed ({type(exc).__name__})"
    return None


def local_torch_problem(python: str | None, engines: list[str]) -> str | None:
    """For the local runtime's PyTorch engines: why the interpreter's torch cannot use the GPU
    (a CPU wheel, or no torch), or None. Other engines are not probed (their images carry CUDA)."""
    if not any(e.startswith("pytorch") for e in engines):
        return None
    code = "import torch,sys; sys.stdout.write(str(torch.__version__) + ' ' + str(torch.version.cuda))"
    try:
        p = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the local interpreter did not answer ({type(exc).__name__})"
    if p.returncode != 0:
        return "the local interpreter has no torch"
    version, _, cuda = p.stdout.strip().partition(" ")
    if cuda in ("", "None"):
        return f"the local interpreter's torch {version} is a CPU build"
    return None


def choose(requested: str, *, memory_limit: int | None, gpu_flags: list[str], runtime: str, python: str | None,
           engines: list[str], nvml_lib: Any = None) -> DeviceChoice:
    """The device a new run uses, and its CPU cap. `gpu_flags`: GPU-only flags given (--gpu, --gpus,
    --vram-limit, --cluster …): with auto they ask for the GPU, which must then be there."""
    if requested == "auto":
        if gpu_flags and memory_limit is None:
            return DeviceChoice("auto", "cuda", f"{', '.join(gpu_flags)} given")
        if memory_limit is not None and not gpu_flags:
            return _cpu("auto", "--memory-limit given", memory_limit)
        if memory_limit is not None:
            from ..errors import Fail

            raise Fail(f"--memory-limit is for the CPU and {', '.join(gpu_flags)} for the GPU: pick --device")
        why = gpu_problem(None, nvml_lib)
        if why is None and runtime == "local":
            why = local_torch_problem(python, engines)
        if why is None:
            return DeviceChoice("auto", "cuda", "a GPU is usable (NVML)")
        return _cpu("auto", f"no usable GPU: {why}", None)
    if requested == "cpu":
        return _cpu("cpu", "asked for", memory_limit)
    # --memory-limit passes through, for the run's own one-line refusal on the GPU
    return DeviceChoice(requested, "cuda", "asked for", memory_limit, "--memory-limit" if memory_limit else None)


def _cpu(requested: str, reason: str, memory_limit: int | None) -> DeviceChoice:
    if memory_limit is not None:
        return DeviceChoice(requested, "cpu", reason, memory_limit, "--memory-limit")
    cap, how = default_cpu_cap(available_ram_mib())
    return DeviceChoice(requested, "cpu", reason, cap, how)


@dataclass(frozen=True)
class _Ran:
    """What an artifact's configuration says of where it ran."""
    device: Any = "?"
    device_choice: Any = None
    memory_limit_mib: Any = None


def recorded_line(doc: dict[str, Any]) -> str:
    """"ran on: cpu (auto: no usable GPU: …); memory cap 2,048 MiB …" from an artifact, for its table."""
    conf = view(_Ran, doc)
    choice = conf.device_choice or {}
    device = conf.device
    text = f"ran on: {device}"
    if choice.get("reason"):
        asked = choice.get("requested")
        text += f" ({'auto' if asked == 'auto' else f'--device {asked}'}: {choice['reason']})"
    if device == "cpu" and conf.memory_limit_mib is not None:
        text += f"; memory cap {conf.memory_limit_mib:,} MiB per candidate"
        if choice.get("memory_limit_source"):
            text += f" ({choice['memory_limit_source']})"
    elif device == "cuda":
        gpu = (doc.get("host") or {}).get("gpu") or {}
        if gpu.get("name"):
            text += f"; GPU {gpu.get('index', '?')} {gpu['name']}"
    return text
