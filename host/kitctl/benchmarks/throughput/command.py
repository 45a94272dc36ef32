"""`kitctl run throughput`: its flags into a ThroughputConfig, the run started through kitctl.launch."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ... import launch
from ...errors import EXIT_INCOMPLETE, EXIT_OK
from ...runconfig import (O_CUDNN, O_DATA_DIR, O_DATASET, O_DEVICE, O_ENGINES, O_GPU, O_GPU_REQUEST,
                          O_IDLE_THRESHOLD, O_MEMORY_LIMIT, O_PRECISION, O_PYTHON, O_REQUIRE_IDLE, O_RESERVE,
                          O_RESULTS_DIR, O_RESUME, O_RUNTIME, O_TIMEOUT, O_VRAM_LIMIT, Dataset, Device,
                          GpuRequestName, Precision, RuntimeName)
from .config import ThroughputConfig
from .table import all_ok, print_table


def throughput(
    ctx: typer.Context,
    engines: str = O_ENGINES,
    precision: Precision = O_PRECISION,
    device: Device = O_DEVICE,
    gpu: Optional[str] = O_GPU,
    vram_limit: Optional[int] = O_VRAM_LIMIT,
    reserve: int = O_RESERVE,
    batch: int = typer.Option(128, help="Training batch of every run."),
    runs: int = typer.Option(5, help="Fresh processes/containers per engine × precision."),
    warmup_steps: int = typer.Option(10, help="Untimed steps first (compilation, autotuning, graph capture)."),
    steps: int = typer.Option(50, help="Timed steps: images/s = batch × steps ÷ the window's wall time."),
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
    gpu_request: GpuRequestName = O_GPU_REQUEST,
) -> None:
    """Steady-state training images/s at one batch, per engine and precision, over fresh runs."""
    from .run import ThroughputPlan, ThroughputRunner

    console = Console(highlight=False)
    s = launch.start("throughput", launch.given_flags(ctx), resume, timeout, gpu, results_dir, python,
                     require_gpu_idle, idle_threshold,
                     lambda: ThroughputConfig.from_flags(engines, precision.value, device.value, vram_limit, reserve,
                                                         batch, runs, warmup_steps, steps, timeout, runtime.value,
                                                         dataset.value, data_dir, cudnn_benchmark, memory_limit, gpu,
                                                         gpu_request.value),
                     gpu_request=gpu_request.value)
    cfg: ThroughputConfig = s.config
    base = launch.base_request("throughput", cfg.run, batch=cfg.batch, warmup_steps=cfg.warmup_steps,
                               steps=cfg.steps)
    plan = ThroughputPlan(engines=s.engines, precisions=list(cfg.run.precisions), base_request=base, runs=cfg.runs,
                          timeout_s=cfg.run.timeout_s, budget=s.gpuctx.budget if s.gpuctx else None,
                          ci_level=cfg.ci_level, watcher_factory=launch.watcher_factory(s.gpuctx))
    runner = ThroughputRunner(plan, s.rt, s.store, s.doc, launch.make_view(console, s))  # type: ignore[arg-type]
    doc, final = launch.execute(runner, s.store)
    print_table(console, cfg.run.model, cfg.run.dataset, cfg.batch, doc, final)
    raise typer.Exit(EXIT_OK if all_ok(doc) else EXIT_INCOMPLETE)
