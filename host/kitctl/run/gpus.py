"""A run's GPUs through NVML: the one it measures on (its budget, its idle check), a resumed run's own card or a twin
of it, and the list that `--gpus` names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.budget import Budget, BudgetError, make_budget
from ..errors import Fail
from .config import RunConfig


@dataclass
class GpuContext:
    nvml: Any
    handle: Any
    info: Any
    budget: Budget


def open_gpu(gpu: str | None, vram_limit: int | None, reserve: int, require_idle: bool,
             idle_threshold: float) -> GpuContext:
    from ..core.gpu import GpuError, Nvml, check_idle

    try:
        nvml = Nvml()
        index, handle = nvml.resolve(gpu)
        info = nvml.info(index, handle)
        budget = make_budget(info.total_mib, vram_limit, reserve)
        if require_idle:
            busy = check_idle(nvml, handle, idle_threshold)
            if busy:
                raise Fail(busy)
    except (GpuError, BudgetError) as exc:
        raise Fail(str(exc)) from None
    return GpuContext(nvml, handle, info, budget)


# What must match for a partial to continue on another GPU: the overheads calibrated on the first
# card, and the search's verdicts so far, hold for a card of the same model, memory and driver.
SAME_GPU_KEYS = ("name", "total_mib", "driver")


def open_resumed_gpu(doc: dict[str, Any], gpu: str | None, run: RunConfig, require_idle: bool,
                     idle_threshold: float) -> GpuContext:
    """The partial's own GPU; or, with an explicit --gpu, another card of the same model, memory
    and driver (a run moved to a twin machine), recorded in the resume entry."""
    recorded = doc["host"].get("gpu") or {}
    if gpu is None:
        try:
            return open_gpu(recorded.get("uuid"), run.vram_limit_mib, run.reserve_mib, require_idle, idle_threshold)
        except Fail as exc:
            raise Fail(f"{exc}; the partial ran there — to continue on another {recorded.get('name', 'GPU')} "
                       "with the same memory and driver, pass --gpu") from None
    ctx = open_gpu(gpu, run.vram_limit_mib, run.reserve_mib, require_idle, idle_threshold)
    here = ctx.info.to_json()
    if here.get("uuid") != recorded.get("uuid"):
        differ = [f"{k} {recorded.get(k)!r} → {here.get(k)!r}" for k in SAME_GPU_KEYS
                  if recorded.get(k) != here.get(k)]
        if differ:
            raise Fail("--resume --gpu: not the same kind of card as the partial's ("
                       + ", ".join(differ) + "); start a new run instead")
        doc["resumes"][-1]["gpu"] = here
    return ctx


def gpu_list(nvml: Any, spec: str) -> list[tuple[int, Any]]:
    """`--gpus 0,1|all|UUID,…` → [(NVML index, handle)], each GPU once, in the order given."""
    from ..core.gpu import GpuError

    tokens = [str(i) for i in range(nvml.count())] if spec.strip() == "all" else spec.split(",")
    out: list[tuple[int, Any]] = []
    for tok in tokens:
        try:
            index, handle = nvml.resolve(tok.strip())
        except GpuError as exc:
            raise Fail(str(exc).replace("--gpu ", "--gpus: ", 1)) from None
        if any(index == i for i, _ in out):
            raise Fail(f"--gpus {spec}: GPU {index} is listed twice")
        out.append((index, handle))
    return out
