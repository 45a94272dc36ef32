"""`kitctl run maxbatch`: its flags into a MaxbatchConfig, the run started through kitctl.session."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from pathlib import Path
from typing import Optional

from ...run import session
from ...core.cards import VramLimit, parse_vram_limits
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
from .plan import Lane, RunPlan, SlotPlan
from .run import Runner
from .catalogue import print_catalogue, sizes
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
    vram_limit: Optional[str] = O_VRAM_LIMIT,
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
    prestart: bool = Option(False, "--prestart/--no-prestart",
                            help="Local runtime, PyTorch engines: the framework is imported ahead of the candidates "
                            "(see --prestart-by), each still a fresh process that touches the device first; saves "
                            "the import per candidate."),
    prestart_by: str = Option("fork", "--prestart-by",
                              help="With --prestart: fork (one process per slot imports the framework once, then "
                              "forks each candidate before any device call; spares where a memory cap applies) "
                              "or spares (whole processes started ahead, each importing)."),
) -> None:
    """Largest training batch that completes one ResNet-50 step, per engine and precision."""
    flags = dict(locals())  # the parameters, for each run of a catalogue
    session.check_output_flags(csv)
    console = ResultOutput(as_json, csv)
    try:
        limits = parse_vram_limits(vram_limit) if vram_limit is not None else (None,)
    except Fail as exc:
        raise fail(exc)
    if len(limits) == 1:
        doc, _ = _one_run(ctx, console, limits[0], (), flags)
        session.finish_output(console, doc)
        raise Exit(EXIT_OK if all_have_capacity(doc) else EXIT_INCOMPLETE)
    # A catalogue: one run per card size, in the order given, each its own artifact (an interrupted one keeps
    # its partial; the finished ones stay); the table of every size at the end.
    docs: list[tuple[str, dict]] = []
    for limit in limits:
        doc, final = _one_run(ctx, console, limit, limits, flags)
        docs.append((final.name, doc))
    print_catalogue(console, sizes(docs))
    session.finish_output(console, [d for _, d in docs])
    raise Exit(EXIT_OK if all(all_have_capacity(d) for _, d in docs) else EXIT_INCOMPLETE)


def _one_run(ctx: Context, console: ResultOutput, limit: VramLimit | None, catalogue: tuple[VramLimit, ...],
             flags: dict) -> tuple[dict, Path]:
    """One max-batch run under one --vram-limit (None: the card's total): its artifact and table. `flags`: the
    command's parameters. In a catalogue every limit is checked against the card (and --slots) before the
    first runs, so a size that cannot run refuses the whole list with nothing written."""
    f = SimpleNamespace(**flags)
    engines, precision, device, gpu, vram_limit = f.engines, f.precision, f.device, f.gpu, f.vram_limit
    memory_limit, runtime, python, gpus, cluster, gpu_model = (f.memory_limit, f.runtime, f.python, f.gpus,
                                                                f.cluster, f.gpu_model)
    left_out: list[str] = []  # what --engines auto left out on this device, said at the start and the end

    def new_config() -> MaxbatchConfig:
        # auto's probe of the local torch is the same for either default list (both are PyTorch's)
        probe = ",".join(GPU_DEFAULT_ENGINES) if engines.strip() == AUTO_ENGINES else engines
        choice = choose_device(device.value, memory_limit, runtime.value, python, probe, gpu=gpu, gpus=gpus,
                               cluster=cluster, vram_limit=vram_limit, gpu_model=gpu_model)
        picked = engines_for(engines, choice.device)
        if picked.note:
            left_out.append(picked.note)
        top = f.max_batch
        if choice.device == "cpu" and ctx.get_parameter_source("max_batch").name in ("DEFAULT", "DEFAULT_MAP"):
            top = default_cpu_max_batch(choice.memory_limit_mib or 0, f.start_batch)  # one the cap bounds
        cfg = MaxbatchConfig.from_flags(picked.engines, precision.value, choice.device, limit and limit.mib,
                                        f.reserve, f.start_batch, top, f.timeout, runtime.value, f.dataset.value,
                                        f.data_dir, f.cudnn_benchmark, choice.memory_limit_mib,
                                        f.calibration_batch, f.strategy, gpu, f.gpu_request.value, gpus, cluster,
                                        gpu_model, f.speculate, image_size=f.image_size, slots=f.slots,
                                        prestart=f.prestart, prestart_by=f.prestart_by)
        return cfg.with_run(replace(cfg.run, device_choice=choice))

    s = session.start(MaxbatchConfig, given_flags(ctx), f.resume, f.timeout, gpu, f.results_dir, python,
                     f.require_gpu_idle, f.idle_threshold,
                     new_config,
                     gpu_request=f.gpu_request.value, allow_code_change=f.allow_code_change)
    s.notes[1:1] = left_out  # after the device line
    cfg: MaxbatchConfig = s.config
    if catalogue and catalogue[0] is limit:
        try:
            check_catalogue(catalogue, s, cfg)
        except Fail as exc:
            s.rt.close()
            s.store.release()
            raise fail(exc)
    if cfg.prestart:
        from ...runtimes.local import LocalRuntime

        rts = [rt for _, rt in s.gpus] if s.gpus else [s.rt]  # --gpus: the run's own runtime is the first
        if cfg.cluster or not all(isinstance(rt, LocalRuntime) for rt in rts):
            s.rt.close()
            s.store.release()
            raise fail(Fail(f"--prestart starts the next candidate's process early on the local runtime; this "
                            f"run uses {'a Ray cluster' if cfg.cluster else s.rt.name} (use --runtime local)"))
        for rt in rts:
            rt.prestart, rt.prestart_by = True, cfg.prestart_by
    if limit is not None and limit.card is not None:
        s.doc["vram_card"] = limit.card.to_json()
    if catalogue:
        this = catalogue.index(limit) + 1
        s.doc["vram_catalogue"] = {"limits_mib": [v.mib for v in catalogue], "this": this}
        s.notes.insert(1, f"card size {this}/{len(catalogue)}: --vram-limit {limit.label}")
    plan = RunPlan(engines=s.engines, precisions=list(cfg.run.precisions),
                   base_request=session.base_request("maxbatch", cfg.run, batch=1), search=cfg.search,
                   strategy=cfg.strategy, timeout_s=cfg.run.timeout_s, budget=s.gpuctx.budget if s.gpuctx else None,
                   calibration_batch=cfg.calibration_batch, watcher_factory=session.watcher_factory(s.gpuctx))
    lanes = None
    slot_plan = None
    if cfg.slots != "1":
        try:
            lanes, slot_plan = slot_lanes(cfg, s, plan, f.idle_threshold)
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
    return doc, final


def check_catalogue(limits: tuple[VramLimit, ...], s: session.Setup, cfg: MaxbatchConfig) -> None:
    """Every size of a catalogue fits the card, and --slots N fits at each (Fail naming the first that does
    not), checked once the first run has opened the GPU."""
    from ...core.slots import GPU_CONTEXT_ALLOWANCE_MIB, SlotsError, fit, parse_slots

    if s.gpuctx is None:
        return
    total = s.gpuctx.info.total_mib
    for v in limits:
        if v.mib > total:
            raise Fail(f"--vram-limit {v.label} is above this card's {total:,.0f} MiB; nothing run")
        if v.mib - cfg.run.reserve_mib <= 0:
            raise Fail(f"--reserve {cfg.run.reserve_mib} MiB leaves no budget under --vram-limit {v.label}")
        if cfg.slots != "1":
            try:
                fit(parse_slots(cfg.slots), v.mib, GPU_CONTEXT_ALLOWANCE_MIB, total, "GPU total (NVML)")
            except SlotsError as exc:
                raise Fail(f"{exc} (at --vram-limit {v.label}); nothing run") from None


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
