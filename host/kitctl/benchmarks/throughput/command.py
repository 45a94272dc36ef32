"""`kitctl run throughput`: its flags into a ThroughputConfig, the run started through kitctl.session."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ...run import session
from ...core.cards import one_vram_limit
from ...output import ResultOutput
from ...errors import EXIT_INCOMPLETE, EXIT_OK, Exit
from ...cli.options import (O_ALLOW_CODE_CHANGE, O_CSV, O_CUDNN, O_DATASET, O_DATA_DIR, O_DEVICE, O_ENGINES, O_GPU,
                            O_GPU_REQUEST, O_IDLE_THRESHOLD, O_IMAGE_SIZE, O_JSON, O_MEMORY_LIMIT, O_PRECISION,
                            O_PYTHON, O_REQUIRE_IDLE, O_RESERVE, O_RESULTS_DIR, O_RESUME, O_RUNTIME, O_TIMEOUT,
                            O_VRAM_LIMIT, Context, Option, given_flags)
from ...run.config import Dataset, Device, GpuRequestName, Precision, RuntimeName, choose_device
from ...cli.view import run_view
from .config import MAX_WARMUP_SECONDS, STEADY_TOLERANCE, WINDOW_IMAGES, WINDOW_SECONDS, ThroughputConfig
from .table import all_ok, print_table


def throughput(
    ctx: Context,
    engines: str = O_ENGINES,
    precision: Precision = O_PRECISION,
    device: Device = O_DEVICE,
    gpu: Optional[str] = O_GPU,
    vram_limit: Optional[str] = O_VRAM_LIMIT,
    reserve: int = O_RESERVE,
    batch: int = Option(128, help="Training batch of every run."),
    runs: int = Option(5, help="Fresh processes/containers per engine × precision."),
    warmup_steps: Optional[int] = Option(
  None, help="Untimed steps first, exactly this many (default: warm up until two successive chunks of steps "
  "agree within --steady-tolerance, after compilation, autotuning and graph capture)."),
    steps: Optional[int] = Option(
  None, help="Timed steps, exactly this many (default: the window rule, --window-images and --window-seconds). "
  "images/s = batch × steps ÷ the window's wall time."),
    window_images: Optional[int] = Option(
  None, help=f"The timed window holds at least this many images (default {WINDOW_IMAGES:,}: the reference "
  "runner's two epochs of 390 steps at batch 128; on --device cpu none)."),
    window_seconds: Optional[float] = Option(
  None, help=f"The timed window lasts at least this long (default {WINDOW_SECONDS:g} s); the longer of the two "
  "minimums decides."),
    steady_tolerance: float = Option(
  STEADY_TOLERANCE, help="Warm-up ends when two successive chunks' rates agree within this fraction; a run whose "
  "window halves differ by more is marked not steady (its figure kept)."),
    max_warmup_seconds: float = Option(MAX_WARMUP_SECONDS, help="Bound on the warm-up until steady."),
    image_size: int = O_IMAGE_SIZE,
    timeout: Optional[float] = O_TIMEOUT,
    runtime: RuntimeName = O_RUNTIME,
    dataset: Dataset = O_DATASET,
    data_dir: Optional[str] = O_DATA_DIR,
    cudnn_benchmark: bool = O_CUDNN,
    require_gpu_idle: bool = O_REQUIRE_IDLE,
    idle_threshold: float = O_IDLE_THRESHOLD,
    memory_limit: Optional[int] = O_MEMORY_LIMIT,
    python: Optional[str] = O_PYTHON,
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME,
    allow_code_change: bool = O_ALLOW_CODE_CHANGE,
    gpu_request: GpuRequestName = O_GPU_REQUEST,
    as_json: bool = O_JSON,
    csv: Optional[Path] = O_CSV,
) -> None:
    """Steady-state training images/s at one batch, per engine and precision, over fresh runs."""
    from .run import ThroughputPlan, ThroughputRunner

    session.check_output_flags(csv)
    console = ResultOutput(as_json, csv)
    named: list = []  # the card --vram-limit named, recorded in the artifact

    def new_config() -> ThroughputConfig:
        limit = one_vram_limit(vram_limit, "run throughput")
        if limit is not None and limit.card is not None:
            named.append(limit.card)
        choice = choose_device(device.value, memory_limit, runtime.value, python, engines, gpu=gpu,
                               vram_limit=vram_limit)
        cfg = ThroughputConfig.from_flags(engines, precision.value, choice.device, limit and limit.mib, reserve,
                                          batch, runs, warmup_steps, steps, timeout, runtime.value,
                                          dataset.value, data_dir, cudnn_benchmark, choice.memory_limit_mib, gpu,
                                          gpu_request.value, image_size=image_size,
                                          window_images=window_images, window_seconds=window_seconds,
                                          steady_tolerance=steady_tolerance,
                                          max_warmup_seconds=max_warmup_seconds)
        return cfg.with_run(replace(cfg.run, device_choice=choice))

    s = session.start(ThroughputConfig, given_flags(ctx), resume, timeout, gpu, results_dir, python,
                     require_gpu_idle, idle_threshold,
                     new_config,
                     gpu_request=gpu_request.value, allow_code_change=allow_code_change)
    cfg: ThroughputConfig = s.config
    if named:
        s.doc["vram_card"] = named[0].to_json()
    base = session.base_request("throughput", cfg.run, **cfg.request_fields())
    plan = ThroughputPlan(engines=s.engines, precisions=list(cfg.run.precisions), base_request=base, runs=cfg.runs,
                          timeout_s=cfg.run.timeout_s, budget=s.gpuctx.budget if s.gpuctx else None,
                          ci_level=cfg.ci_level, watcher_factory=session.watcher_factory(s.gpuctx, telemetry=True),
                          steady_tolerance=cfg.steady_tolerance)
    runner = ThroughputRunner(plan, s.rt, s.store, s.doc, run_view(None, s))  # type: ignore[arg-type]
    doc, final = session.execute(runner, s.store)
    print_table(console, cfg.run.model, cfg.run.dataset, cfg.batch, doc, final, cfg.run.image_size)
    session.finish_output(console, doc)
    raise Exit(EXIT_OK if all_ok(doc) else EXIT_INCOMPLETE)
