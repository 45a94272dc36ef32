"""`kitctl run maxbatch`: its flags into a MaxbatchConfig, the run started through kitctl.session."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ...run import session
from ...core.device import default_cpu_max_batch
from ...output import ResultOutput
from .search.strategies import STRATEGIES
from ...errors import EXIT_INCOMPLETE, EXIT_OK, Exit, Fail, err, fail
from ...runtimes.base import RuntimeUnavailable
from ...cli.options import (O_ALLOW_CODE_CHANGE, O_CSV, O_CUDNN, O_DATASET, O_DATA_DIR, O_DEVICE, O_GPU,
                            O_GPU_REQUEST, O_IDLE_THRESHOLD, O_IMAGE_SIZE, O_JSON, O_MEMORY_LIMIT, O_PRECISION,
                            O_PYTHON, O_REQUIRE_IDLE, O_RESERVE, O_RESULTS_DIR, O_RESUME, O_RUNTIME, O_TIMEOUT,
                            O_VRAM_LIMIT, Context, Option, given_flags)
from ...run.config import Dataset, Device, GpuRequestName, Precision, RuntimeName, choose_device
from ...cli.view import run_view
from ...core.engines import ENGINES
from .config import AUTO_ENGINES, DEFAULT_MAX_BATCH, GPU_DEFAULT_ENGINES, MaxbatchConfig, engines_for
from .run import Lane, Runner, RunPlan, SlotPlan
from .table import all_have_capacity, print_table

# Max-batch's own --engines: `auto` picks the list that fits the device (config.engines_for).
O_MAXBATCH_ENGINES = Option(
    AUTO_ENGINES, help=f"Comma-separated: {', '.join(ENGINES)}; or auto (the default): "
    f"{','.join(GPU_DEFAULT_ENGINES)} on a GPU, pytorch-eager on the CPU (where torch.compile compiles "
    "every candidate afresh, 40-60 s each on 2 cores).")


def maxbatch(
    ctx: Context,
    engines: str = O_MAXBATCH_ENGINES,
    precision: Precision = O_PRECISION,
    device: Device = O_DEVICE,
    gpu: Optional[str] = O_GPU,
    vram_limit: Optional[int] = O_VRAM_LIMIT,
    reserve: int = O_RESERVE,
    start_batch: int = Option(128, help="First candidate."),
    max_batch: int = Option(DEFAULT_MAX_BATCH, help="Largest batch the search may try."),
    timeout: Optional[float] = O_TIMEOUT,
    runtime: RuntimeName = O_RUNTIME,
    dataset: Dataset = O_DATASET,
    data_dir: Optional[str] = O_DATA_DIR,
    cudnn_benchmark: bool = O_CUDNN,
    require_gpu_idle: bool = O_REQUIRE_IDLE,
    idle_threshold: float = O_IDLE_THRESHOLD,
    memory_limit: Optional[int] = O_MEMORY_LIMIT,
    calibration_batch: int = Option(16, help="Batch of the overhead-calibration candidate (GPU)."),
    strategy: str = Option("protocol", help=f"Search strategy: {', '.join(STRATEGIES)}."),
    python: Optional[str] = O_PYTHON,
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME,
    allow_code_change: bool = O_ALLOW_CODE_CHANGE,
    gpu_request: GpuRequestName = O_GPU_REQUEST,
    as_json: bool = O_JSON,
    csv: Optional[Path] = O_CSV,
    gpus: Optional[str] = Option(None, help="Several GPUs of this host, e.g. 0,1 or all: cells run side "
                                 "by side, one per GPU, each GPU with its own baseline, sampler, "
                                 "gate and calibration (cards of one model)."),
    cluster: Optional[str] = Option(None, help="ray://HOST:PORT or auto: each cell runs on a node of a Ray "
                                    "cluster (needs the ray extra); one artifact here."),
    gpu_model: Optional[str] = Option(None, help="With --cluster: only nodes offering the custom resource "
                                      "kitctl-gpu-model:<NAME>, e.g. H200."),
    image_size: int = O_IMAGE_SIZE,
    speculate: bool = Option(True, "--speculate/--no-speculate",
                             help="With --gpus: a GPU left without a cell of its own runs "
                             "further candidates of a running cell (the ones its search would ask for "
                             "next under each outcome); the answer is the one-GPU search's either way."),
    slots: str = Option("1", help="N or auto: up to N candidates of a search at the same time on one device, "
                        "each gated by its own memory (GPU: per-process NVML usage; CPU: its memory cap), "
                        "when N × (limit + allowance) fits the device (auto: as many as fit, at most one "
                        "per core); the answer is the one-slot search's."),
) -> None:
    """Largest training batch that completes one ResNet-50 step, per engine and precision."""
    session.check_output_flags(csv)
    console = ResultOutput(as_json, csv)
    left_out: list[str] = []  # what --engines auto left out on this device, said at the start and the end

    def new_config() -> MaxbatchConfig:
        # auto's probe of the local torch is the same for either default list (both are PyTorch's)
        probe = ",".join(GPU_DEFAULT_ENGINES) if engines.strip() == AUTO_ENGINES else engines
        choice = choose_device(device.value, memory_limit, runtime.value, python, probe, gpu=gpu, gpus=gpus,
                               cluster=cluster, vram_limit=vram_limit, gpu_model=gpu_model)
        picked = engines_for(engines, choice.device)
        if picked.note:
            left_out.append(picked.note)
        top = max_batch
        if choice.device == "cpu" and ctx.get_parameter_source("max_batch").name in ("DEFAULT", "DEFAULT_MAP"):
            top = default_cpu_max_batch(choice.memory_limit_mib or 0, start_batch)  # one the cap bounds
        cfg = MaxbatchConfig.from_flags(picked.engines, precision.value, choice.device, vram_limit, reserve,
                                        start_batch, top, timeout, runtime.value, dataset.value,
                                        data_dir, cudnn_benchmark, choice.memory_limit_mib, calibration_batch,
                                        strategy, gpu, gpu_request.value, gpus, cluster,
                                        gpu_model, speculate, image_size=image_size, slots=slots)
        return cfg.with_run(replace(cfg.run, device_choice=choice))

    s = session.start(MaxbatchConfig, given_flags(ctx), resume, timeout, gpu, results_dir, python,
                     require_gpu_idle, idle_threshold,
                     new_config,
                     gpu_request=gpu_request.value, allow_code_change=allow_code_change)
    s.notes[1:1] = left_out  # after the device line
    cfg: MaxbatchConfig = s.config
    plan = RunPlan(engines=s.engines, precisions=list(cfg.run.precisions),
                   base_request=session.base_request("maxbatch", cfg.run, batch=1), search=cfg.search,
                   strategy=cfg.strategy, timeout_s=cfg.run.timeout_s, budget=s.gpuctx.budget if s.gpuctx else None,
                   calibration_batch=cfg.calibration_batch, watcher_factory=session.watcher_factory(s.gpuctx))
    lanes = None
    slot_plan = None
    if cfg.slots != "1":
        try:
            lanes, slot_plan = slot_lanes(cfg, s, plan, idle_threshold)
        except (Fail, RuntimeUnavailable) as exc:
            s.rt.close()
            s.store.release()
            raise fail(exc)
    if s.gpus:
        lanes = [Lane(rt, ctx.budget, session.watcher_factory(ctx), {"index": ctx.info.index, "uuid": ctx.info.uuid})
                 for ctx, rt in s.gpus]
    if cfg.cluster:
        from ...runtimes import ray as ray_cluster

        try:
            rts, budget, gate = ray_cluster.cluster_runtimes(cfg, s)
            lanes = [Lane(rt, budget, gate, None) for rt in rts]
        except (Fail, RuntimeUnavailable) as exc:
            s.rt.close()
            s.store.release()
            ray_cluster.disconnect()
            raise fail(exc)
        plan = replace(plan, budget=lanes[0].budget, watcher_factory=lanes[0].watcher_factory)
    runner = Runner(plan, s.rt, s.store, s.doc, run_view(None, s), lanes=lanes,
                    speculate=cfg.speculate and not cfg.cluster,  # Ray lanes: one cell per node, as before
                    slot_plan=slot_plan)
    try:
        doc, final = session.execute(runner, s.store)
    finally:
        if cfg.cluster:
            from ...runtimes import ray as ray_cluster

            ray_cluster.disconnect()
    print_table(console, cfg.run.model, cfg.run.dataset, doc, final)
    for note in left_out:  # on stderr: stdout holds only the result
        err.print(note)
    session.finish_output(console, doc)
    raise Exit(EXIT_OK if all_have_capacity(doc) else EXIT_INCOMPLETE)


def slot_lanes(cfg: MaxbatchConfig, s: session.Setup, plan: RunPlan,
               idle_threshold: float) -> tuple[list[Lane] | None, SlotPlan | None]:
    """--slots: how many fit the device (recorded as the artifact's "slots"), and one lane per slot,
    each with its own runtime (its own running candidate) on the run's one device. On a GPU one NVML
    loop (SlotSampler) gates every slot's candidate by its own per-process memory, and the card must
    be idle: the slots are sized to its whole memory, so another process (another run's slot) on it
    could make a candidate fail for memory it never used. (None, None) when one slot is all that fits
    (auto) or was asked for."""
    from ...core.gpu import check_idle
    from ...core.device import available_ram_mib
    from ...core.slots import (CPU_PROCESS_ALLOWANCE_MIB, GPU_CONTEXT_ALLOWANCE_MIB, SlotSampler, SlotsError, fit,
                               parse_slots)

    requested = parse_slots(cfg.slots)
    try:
        if s.gpuctx is not None:
            f = fit(requested, s.gpuctx.budget.limit_mib, GPU_CONTEXT_ALLOWANCE_MIB, s.gpuctx.info.total_mib,
                    "GPU total (NVML)")
        else:
            avail = available_ram_mib()
            if avail is None or cfg.run.memory_limit_mib is None:
                raise Fail("--slots on the CPU needs the available RAM (/proc/meminfo) and a per-candidate "
                           "--memory-limit")
            f = fit(requested, cfg.run.memory_limit_mib, CPU_PROCESS_ALLOWANCE_MIB, avail,
                    "available RAM (MemAvailable)")
    except SlotsError as exc:
        raise Fail(str(exc)) from None
    if f.slots == 1:
        s.doc["slots"] = f.to_json()
        return None, None
    if s.gpuctx is not None:
        busy = check_idle(s.gpuctx.nvml, s.gpuctx.handle, idle_threshold)
        if busy:
            raise Fail(f"--slots {f.slots}: {busy}; slots share the whole card with nothing else "
                       "(free it, or run with --slots 1)")
    s.doc["slots"] = f.to_json()
    sampler = SlotSampler(s.gpuctx.nvml, s.gpuctx.handle) if s.gpuctx is not None else None
    runtimes = [s.rt]
    try:
        for _ in range(f.slots - 1):
            runtimes.append(s.rt.slot_copy())
    except BaseException:
        for rt in runtimes[1:]:
            rt.close()
        raise
    lanes = [Lane(rt, plan.budget, plan.watcher_factory, None, slot=i) for i, rt in enumerate(runtimes)]
    return lanes, SlotPlan(f.slots, sampler.watcher if sampler is not None else None)
