"""The `kitctl` command line (typer).

Exit codes (README "Exit codes"):
  0  the run finished and every engine × precision has a capacity (bounded or censored)
  1  the run finished but some engine × precision has none (no passing batch, or an invalid
     non-memory failure)
     `run throughput`: 0 every engine × precision has a summary, 1 some cell failed (a run not ok)
  2  bad input or an unfit host: one line on stderr, nothing written
  130 interrupted (SIGINT/SIGTERM): the partial artifact is kept; `--resume` continues it
"""
from __future__ import annotations

import enum
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from . import artifact as art
from .artifact import ArtifactError, ArtifactStore
from .budget import Budget, BudgetError, make_budget
from .datasets import DataError, resolve_cifar10
from .engines import ENGINES, MODEL_MIN_BATCH, EngineError, parse_engines
from .protocol import TrialRequest
from .provenance import host_info, image_trial_code, kit_info, trial_code
from .runner import Interrupted, Runner, RunPlan
from .runtimes.base import RuntimeUnavailable
from .runtimes.runstate import sweep_local_orphans
from .search import STRATEGIES, SearchConfig
from .summary import maxbatch_rows, ratios, throughput_ratio_pairs, throughput_rows

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MAX_BATCH = 1 << 20

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Containerized max-batch and throughput benchmarks for deep-learning engines.")
run_app = typer.Typer(no_args_is_help=True, help="Run a benchmark.")
app.add_typer(run_app, name="run")
from .report_cli import register as _register_reports  # noqa: E402  (report, compare, results list)
_register_reports(app)
from . import clean, doctor, images_cmd  # noqa: E402  (issue 5: images, doctor, clean)
app.add_typer(images_cmd.images_app, name="images"); app.command("doctor")(doctor.doctor); app.command("clean")(clean.clean)  # noqa: E702,E501

err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)  # messages carry [brackets] (daemon errors)


class Fail(Exception):
    """Bad input or an unfit host: one line, exit 2."""


class Precision(str, enum.Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    both = "both"


class Device(str, enum.Enum):
    cuda = "cuda"
    cpu = "cpu"


class RuntimeName(str, enum.Enum):
    auto = "auto"
    local = "local"
    docker = "docker"


class GpuRequestName(str, enum.Enum):
    auto = "auto"
    toolkit = "toolkit"
    cdi = "cdi"


class Dataset(str, enum.Enum):
    synthetic = "synthetic"
    cifar10 = "cifar10"


@dataclass
class GpuContext:
    nvml: Any
    handle: Any
    info: Any
    budget: Budget


def _open_gpu(gpu: str | None, vram_limit: int | None, reserve: int, require_idle: bool,
              idle_threshold: float) -> GpuContext:
    from .gpu import GpuError, Nvml, check_idle

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
_SAME_GPU_KEYS = ("name", "total_mib", "driver")


def _open_resumed_gpu(doc: dict[str, Any], gpu: str | None, cfg: dict[str, Any], require_idle: bool,
                      idle_threshold: float) -> GpuContext:
    """The partial's own GPU; or, with an explicit --gpu, another card of the same model, memory
    and driver (a run moved to a twin machine), recorded in the resume entry."""
    recorded = doc["host"].get("gpu") or {}
    if gpu is None:
        try:
            return _open_gpu(recorded.get("uuid"), cfg["vram_limit_mib"], cfg["reserve_mib"], require_idle,
                             idle_threshold)
        except Fail as exc:
            raise Fail(f"{exc}; the partial ran there — to continue on another {recorded.get('name', 'GPU')} "
                       "with the same memory and driver, pass --gpu") from None
    ctx = _open_gpu(gpu, cfg["vram_limit_mib"], cfg["reserve_mib"], require_idle, idle_threshold)
    here = ctx.info.to_json()
    if here.get("uuid") != recorded.get("uuid"):
        differ = [f"{k} {recorded.get(k)!r} → {here.get(k)!r}" for k in _SAME_GPU_KEYS
                  if recorded.get(k) != here.get(k)]
        if differ:
            raise Fail("--resume --gpu: not the same kind of card as the partial's ("
                       + ", ".join(differ) + "); start a new run instead")
        doc["resumes"][-1]["gpu"] = here
    return ctx


def _make_runtime(name: str, engines: list, device: str, gpu_uuid: str | None, run_id: str,
                  memory_limit: int | None, data_dir: str | None, python: str | None, notes: list[str],
                  gpu_request: str = "auto"):
    """The runtime the run uses; `notes` collects what the user should know (fallback, sweep)."""
    from .runtimes.base import RuntimeUnavailable
    from .runtimes.local import LocalRuntime

    if name in ("auto", "docker"):
        try:
            from .runtimes import docker as dockerrt
        except ImportError as exc:
            if name == "docker":
                raise Fail(f"--runtime docker needs the Docker SDK: pip install docker ({exc})") from None
            dockerrt = None
        if dockerrt is not None:
            fallback: list[str] = []
            try:
                rt = dockerrt.from_cli(engines=engines, device=device, gpu_uuid=gpu_uuid, run_id=run_id,
                                       memory_limit_mib=memory_limit, data_dir=data_dir,
                                       required=(name == "docker"), fallback=fallback,
                                       gpu_request=gpu_request)
            except RuntimeUnavailable as exc:
                raise Fail(str(exc)) from None
            if rt is not None:
                if rt.swept:
                    notes.append(f"removed {len(rt.swept)} orphaned kit container(s): {', '.join(rt.swept)}")
                return rt
            notes.extend(f"--runtime auto: using local ({why})" for why in fallback)
    try:
        LocalRuntime.check(engines)
    except RuntimeUnavailable as exc:
        raise Fail(str(exc)) from None
    return LocalRuntime(gpu_uuid=gpu_uuid, python=python, memory_limit_mib=memory_limit, run_id=run_id)


@dataclass
class Setup:
    store: ArtifactStore
    doc: dict[str, Any]
    engines: list
    gpuctx: GpuContext | None
    rt: Any
    notes: list[str]


def _open_resume(resume: Path, timeout: float | None) -> tuple[ArtifactStore, dict[str, Any], dict[str, Any]]:
    """A partial to continue: its own configuration, except a new --timeout; the resume is recorded."""
    store, doc = art.open_for_resume(resume)
    cfg = doc["configuration"]
    doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
    if timeout is not None:
        if timeout <= 0:
            raise Fail(f"--timeout must be > 0 (got {timeout})")
        cfg["timeout_s"] = timeout
    return store, doc, cfg


def _gpu_request_kind(doc: dict[str, Any] | None, cfg: dict[str, Any], flag: str) -> str:
    """--gpu-request for a new run; a resumed one keeps the kind its partial recorded (an explicit,
    different flag is refused), so every candidate of a run attaches the GPU the same way."""
    if doc is None:
        cfg["gpu_request"] = flag
        return flag
    recorded = (doc.get("runtime") or {}).get("gpu_request")
    if recorded and flag != "auto" and flag != recorded:
        raise Fail(f"--resume: the partial attached its GPU by {recorded}, not --gpu-request {flag}; "
                   f"resume with --gpu-request {recorded} (or auto)")
    return recorded or (flag if flag != "auto" else cfg.get("gpu_request") or "auto")


def _prepare(benchmark: str, cfg: dict[str, Any], doc: dict[str, Any] | None, store: ArtifactStore | None,
             results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
             resume_gpu: str | None = None, gpu_request: str = "auto") -> Setup:
    """Engines refused or not, data, GPU, runtime, the artifact and its provenance (both benchmarks).
    Raises Fail and friends: the caller turns them into one line, exit 2."""
    if doc is not None and doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    plan_engines = parse_engines(",".join(cfg["engines"]))
    for e in plan_engines:
        why = e.refuse(benchmark, cfg["device"])
        if why:
            raise Fail(why)
    if cfg["dataset"] == "cifar10":
        cfg["data_dir"] = str(resolve_cifar10(cfg["data_dir"]))

    # Before the GPU's idle check: an orphaned local trial's memory is not idle.
    notes: list[str] = [f"killed an orphaned local trial: {o}" for o in sweep_local_orphans()]
    gpuctx = None
    if cfg["device"] == "cuda":
        if doc is None:
            gpuctx = _open_gpu(cfg["gpu"], cfg["vram_limit_mib"], cfg["reserve_mib"], require_gpu_idle,
                               idle_threshold)
        else:
            gpuctx = _open_resumed_gpu(doc, resume_gpu, cfg, require_gpu_idle, idle_threshold)
    run_id = doc["run_id"] if doc else uuid.uuid4().hex[:12]
    rt = _make_runtime(cfg["runtime"], plan_engines, cfg["device"], gpuctx.info.uuid if gpuctx else None,
                       run_id, cfg["memory_limit_mib"], cfg.get("data_dir"), python, notes,
                       _gpu_request_kind(doc, cfg, gpu_request))

    if doc is None:
        doc = _new_doc(run_id, cfg, gpuctx, rt, plan_engines, benchmark)
        store = ArtifactStore.create(results_dir, benchmark, cfg["model"], cfg["dataset"])
    if rt.name == "docker":
        doc["host"]["docker_version"] = rt.describe(plan_engines[0].name).get("docker_version")
    doc["runtime"] = {"name": rt.name, **{k: v for k, v in rt.describe(plan_engines[0].name).items()
                                          if k != "runtime"}}
    for e in plan_engines:
        doc["engines"][e.name]["provenance"] = {**rt.describe(e.name), "code": _trial_code(rt, e.name)}
    assert store is not None
    return Setup(store, doc, plan_engines, gpuctx, rt, notes)


def _trial_code(rt: Any, engine: str) -> dict[str, Any] | None:
    """The content hash of the trial that runs: the checkout's (local) or the image's (Docker)."""
    if rt.name != "docker":
        return trial_code(engine).to_json()
    try:
        code = image_trial_code(rt.client, rt.image_for(engine), engine)
    except Exception as exc:  # provenance is recorded, not required: the image id still says it
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        err.print(f"kitctl: note: cannot hash the trial in {rt.image_for(engine)}: {why}")
        return None
    return code.to_json() if code else None


def _setup(benchmark: str, resume: Path | None, timeout: float | None, gpu: str | None, results_dir: Path,
           python: str | None, require_gpu_idle: bool, idle_threshold: float,
           new_configuration: Callable[[], dict[str, Any]], gpu_request: str = "auto") -> tuple[Setup, dict[str, Any]]:
    """A run command's start, new or resumed; bad input is one line and exit 2, nothing written."""
    try:
        if resume is not None:
            store, doc, cfg = _open_resume(resume, timeout)
        else:
            store, doc, cfg = None, None, new_configuration()
        s = _prepare(benchmark, cfg, doc, store, results_dir, python, require_gpu_idle, idle_threshold,
                     resume_gpu=gpu, gpu_request=gpu_request)
    except (Fail, EngineError, DataError, ArtifactError, BudgetError, ValueError) as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    return s, cfg


def _base_request(benchmark: str, cfg: dict[str, Any], **kw: Any) -> TrialRequest:
    """The request every candidate of the run starts from (engine, mode, batch and precision vary)."""
    return TrialRequest(engine="", mode="", benchmark=benchmark, precision="fp32", device=cfg["device"],
                        model=cfg["model"], dataset=cfg["dataset"], data_dir=cfg.get("data_dir"),
                        cudnn_benchmark=cfg["cudnn_benchmark"], seed=cfg["seed"], **kw)


def _watcher_factory(gpuctx: GpuContext | None):
    if gpuctx is None:
        return None
    from .sampler import NvmlSampler

    def factory(budget_mib: float | None, _g=gpuctx):
        return NvmlSampler(_g.nvml, _g.handle, budget_mib)
    return factory


def _make_view(console: Console, notes: list[str], doc: dict[str, Any], rt: Any, store: ArtifactStore):
    from .view import make_view

    view = make_view(console)
    for n in notes:
        view.note(n)
    view.note(f"run {doc['run_id']} ({rt.name} runtime): partial artifact {store.partial}")
    return view


def _execute(runner: Runner, store: ArtifactStore) -> dict[str, Any]:
    """Run it; interruptions and a vanished runtime become their exit codes (partial kept)."""
    view = runner.view
    try:
        doc = runner.run()
    except Interrupted as exc:
        view.close()
        err.print(f"kitctl: interrupted ({exc}); partial artifact kept: {store.partial} "
                  f"(continue with --resume {store.partial})")
        raise typer.Exit(EXIT_INTERRUPTED)
    except ArtifactError as exc:
        view.close()
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    except RuntimeUnavailable as exc:
        view.close()
        err.print(f"kitctl: {exc}; partial artifact kept: {store.partial} (continue with --resume {store.partial})")
        raise typer.Exit(EXIT_USAGE)
    view.close()
    return doc


def _print_summary(console: Console, doc: dict[str, Any], final: Path | None) -> None:
    rows = maxbatch_rows(doc)
    t = Table(title=f"Max batch — {doc['configuration']['model']}, {doc['configuration']['dataset']}")
    for col in ("Engine", "Precision", "Max batch", "Peak VRAM at max", "Next batch", "Result"):
        t.add_column(col, justify="right" if col in ("Max batch", "Peak VRAM at max", "Next batch") else "left")
    for r in rows:
        label = ENGINES[r.engine].label if r.engine in ENGINES else r.engine
        t.add_row(label, r.precision, f"{r.max_batch:,}" if r.max_batch else "—",
                  f"{r.peak_mib:,.0f} MiB" if r.peak_mib is not None else "—",
                  f"{r.next_batch:,}" if r.next_batch else "—", r.result)
    console.print(t)
    for line in ratios(rows):
        console.print(line)
    if final is not None:
        console.print(f"artifact: {final}")


def _exit_code(doc: dict[str, Any]) -> int:
    ok = {"bounded_by_memory_failure", "censored_at_max_batch"}
    return EXIT_OK if all(c.get("search_status") in ok for c in doc["results"]) else EXIT_INCOMPLETE


# Options shared by `run maxbatch` and `run throughput` (typer reads these as defaults).
O_ENGINES = typer.Option("pytorch-eager", help=f"Comma-separated: {', '.join(ENGINES)}.")
O_PRECISION = typer.Option(Precision.fp32, help="fp32, bf16 or both.")
O_DEVICE = typer.Option(Device.cuda, help="cuda (default) or cpu.")
O_GPU = typer.Option(None, help="GPU index (NVML order) or UUID; default 0. With --resume: continue on "
                     "this GPU, which must be the same model, memory and driver as the partial's.")
O_VRAM_LIMIT = typer.Option(None, help="L in MiB (default: the card's total): emulate a smaller card.")
O_RESERVE = typer.Option(256, help="R in MiB; the budget is B = L − R.")
O_TIMEOUT = typer.Option(None, help=f"Seconds per candidate before the kit kills it (default {DEFAULT_TIMEOUT_S:.0f}).")
O_RUNTIME = typer.Option(RuntimeName.auto, help="auto: docker when the daemon answers and the image exists, else local.")
O_DATASET = typer.Option(Dataset.synthetic, help="synthetic or cifar10.")
O_DATA_DIR = typer.Option(None, help="CIFAR-10 folder (binary or python layout) or its parent.")
O_CUDNN = typer.Option(False, "--cudnn-benchmark", help="Turn cuDNN autotuning on (changes memory use).")
O_REQUIRE_IDLE = typer.Option(False, "--require-gpu-idle", help="Refuse to start when the GPU holds memory.")
O_IDLE_THRESHOLD = typer.Option(1024.0, help="MiB in use above which the GPU is not idle.")
O_MEMORY_LIMIT = typer.Option(None, help="Host memory limit per candidate in MiB (--device cpu).")
O_PYTHON = typer.Option(None, help="Interpreter for the local runtime (default: this one).")
O_RESULTS_DIR = typer.Option(Path("results"), help="Where artifacts are written.")
O_RESUME = typer.Option(None, help="Continue the run in this .partial.json.")
O_GPU_REQUEST = typer.Option(GpuRequestName.auto, help="How Docker attaches the GPU: toolkit (NVIDIA Container "
                             "Toolkit, --gpus style), cdi (nvidia.com/gpu=UUID) or auto (probe once: what works).")


@run_app.command("maxbatch")
def maxbatch(
    engines: str = O_ENGINES,
    precision: Precision = O_PRECISION,
    device: Device = O_DEVICE,
    gpu: Optional[str] = O_GPU,
    vram_limit: Optional[int] = O_VRAM_LIMIT,
    reserve: int = O_RESERVE,
    start_batch: int = typer.Option(128, help="First candidate."),
    max_batch: int = typer.Option(DEFAULT_MAX_BATCH, help="Largest batch the search may try."),
    timeout: Optional[float] = O_TIMEOUT,
    runtime: RuntimeName = O_RUNTIME,
    dataset: Dataset = O_DATASET,
    data_dir: Optional[str] = O_DATA_DIR,
    cudnn_benchmark: bool = O_CUDNN,
    require_gpu_idle: bool = O_REQUIRE_IDLE,
    idle_threshold: float = O_IDLE_THRESHOLD,
    memory_limit: Optional[int] = O_MEMORY_LIMIT,
    calibration_batch: int = typer.Option(16, help="Batch of the overhead-calibration candidate (GPU)."),
    strategy: str = typer.Option("protocol", help=f"Search strategy: {', '.join(STRATEGIES)}."),
    python: Optional[str] = O_PYTHON,
    results_dir: Path = O_RESULTS_DIR,
    resume: Optional[Path] = O_RESUME,
    gpu_request: GpuRequestName = O_GPU_REQUEST,
) -> None:
    """Largest training batch that completes one ResNet-50 step, per engine and precision."""
    console = Console(highlight=False)
    s, cfg = _setup("maxbatch", resume, timeout, gpu, results_dir, python, require_gpu_idle, idle_threshold,
                    lambda: _configuration(engines, precision.value, device.value, vram_limit, reserve, start_batch,
                                           max_batch, timeout, runtime.value, dataset.value, data_dir,
                                           cudnn_benchmark, memory_limit, calibration_batch, strategy, gpu),
                    gpu_request=gpu_request.value)
    store, doc, plan_engines, gpuctx, rt, notes = s.store, s.doc, s.engines, s.gpuctx, s.rt, s.notes
    base = _base_request("maxbatch", cfg, batch=1)
    watcher_factory = _watcher_factory(gpuctx)
    plan = RunPlan(engines=plan_engines, precisions=cfg["precisions"], base_request=base,
                   search=SearchConfig(cfg["start_batch"], cfg["max_batch"],
                                       min_batch=MODEL_MIN_BATCH[cfg["model"]]), strategy=cfg["strategy"],
                   timeout_s=cfg["timeout_s"], budget=gpuctx.budget if gpuctx else None,
                   calibration_batch=cfg["calibration_batch"], watcher_factory=watcher_factory)
    runner = Runner(plan, rt, store, doc, _make_view(console, notes, doc, rt, store))
    doc = _execute(runner, store)
    final = store.finalize(doc)
    _print_summary(console, doc, final)
    raise typer.Exit(_exit_code(doc))


@run_app.command("throughput")
def throughput(
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
    from .throughput import ThroughputPlan, ThroughputRunner

    console = Console(highlight=False)
    s, cfg = _setup("throughput", resume, timeout, gpu, results_dir, python, require_gpu_idle, idle_threshold,
                    lambda: _throughput_configuration(engines, precision.value, device.value, vram_limit, reserve,
                                                      batch, runs, warmup_steps, steps, timeout, runtime.value,
                                                      dataset.value, data_dir, cudnn_benchmark, memory_limit, gpu),
                    gpu_request=gpu_request.value)
    store, doc, gpuctx, rt = s.store, s.doc, s.gpuctx, s.rt
    base = _base_request("throughput", cfg, batch=cfg["batch"], warmup_steps=cfg["warmup_steps"],
                         steps=cfg["steps"])
    plan = ThroughputPlan(engines=s.engines, precisions=cfg["precisions"], base_request=base, runs=cfg["runs"],
                          timeout_s=cfg["timeout_s"], budget=gpuctx.budget if gpuctx else None,
                          ci_level=cfg["ci_level"], watcher_factory=_watcher_factory(gpuctx))
    runner = ThroughputRunner(plan, rt, store, doc, _make_view(console, s.notes, doc, rt, store))  # type: ignore[arg-type]
    doc = _execute(runner, store)
    final = store.finalize(doc)
    _print_throughput_summary(console, doc, final)
    raise typer.Exit(EXIT_OK if all(c.get("status") == "ok" for c in doc["results"]) else EXIT_INCOMPLETE)


def _print_throughput_summary(console: Console, doc: dict[str, Any], final: Path | None) -> None:
    cfg = doc["configuration"]
    t = Table(title=f"Training throughput — {cfg['model']}, {cfg['dataset']}, batch {cfg['batch']:,}")
    for col in ("Engine", "Precision", "images/s (median)", "±CI", "runs", "warm-up s"):
        t.add_column(col, justify="left" if col in ("Engine", "Precision") else "right")
    for r, c in zip(throughput_rows(doc), doc["results"]):
        label = ENGINES[r.engine].label if r.engine in ENGINES else r.engine
        if c.get("status") == "failed":
            t.add_row(label, r.precision, "[red]FAILED[/red]", "—", str(len(c["runs"])), "—")
            continue
        ci = "—"
        if r.median is not None and r.ci_low is not None and r.ci_high is not None:
            level = f"{r.ci_level * 100:.2f}".rstrip("0").rstrip(".") + "%: " if r.ci_level else ""
            ci = f"±{(r.ci_high - r.ci_low) / 2:,.1f} ({level}{r.ci_low:,.1f}–{r.ci_high:,.1f})"
        t.add_row(label, r.precision, f"{r.median:,.1f}" if r.median is not None else "—", ci, str(r.runs),
                  f"{r.warmup_s:.1f}" if r.warmup_s is not None else "—")
    console.print(t)
    for c in doc["results"]:
        if c.get("status") == "failed":
            console.print(f"FAILED {c['engine']} {c['precision']}: {c['reason']}")
    for r in throughput_ratio_pairs(throughput_rows(doc)):
        console.print(r.text())
    methods = {(c.get("summary") or {}).get("ci_method") for c in doc["results"]} - {None}
    for m in sorted(methods):
        console.print(f"CI: {m}")
    if final is not None:
        console.print(f"artifact: {final}")


def _throughput_configuration(engines: str, precision: str, device: str, vram_limit: int | None, reserve: int,
                              batch: int, runs: int, warmup_steps: int, steps: int, timeout: float | None,
                              runtime: str, dataset: str, data_dir: str | None, cudnn_benchmark: bool,
                              memory_limit: int | None, gpu: str | None) -> dict[str, Any]:
    names = [e.name for e in parse_engines(engines)]
    if batch <= 0:
        raise Fail(f"--batch must be > 0 (got {batch})")
    if batch < MODEL_MIN_BATCH["resnet50"]:
        raise Fail(f"--batch must be ≥ {MODEL_MIN_BATCH['resnet50']}: ResNet-50 at 32×32 cannot "
                   "train at batch 1 (BatchNorm over 1×1 maps needs 2 samples)")
    if runs <= 0:
        raise Fail(f"--runs must be > 0 (got {runs})")
    if warmup_steps <= 0:
        raise Fail(f"--warmup-steps must be > 0 (got {warmup_steps}): the warm-up loss is checked, and "
                   "compilation/graph capture must happen outside the timed window")
    if steps <= 0:
        raise Fail(f"--steps must be > 0 (got {steps})")
    return {
        **_common_configuration(names, precision, device, gpu, vram_limit, reserve, timeout, runtime, dataset,
                                data_dir, cudnn_benchmark, memory_limit),
        "batch": batch, "runs": runs, "warmup_steps": warmup_steps, "steps": steps, "ci_level": 0.95,
        "ci_method": "order-statistic (binomial, distribution-free) interval of the median; the actual level "
                     "is reported (min–max when too few runs reach 95%)",
        "vram_rule": "NVML watcher with budget B = L − R for every run (no calibration); --device cpu: none",
    }


def _configuration(engines: str, precision: str, device: str, vram_limit: int | None, reserve: int,
                   start_batch: int, max_batch: int, timeout: float | None, runtime: str, dataset: str,
                   data_dir: str | None, cudnn_benchmark: bool, memory_limit: int | None,
                   calibration_batch: int, strategy: str, gpu: str | None) -> dict[str, Any]:
    names = [e.name for e in parse_engines(engines)]
    if start_batch <= 0:
        raise Fail(f"--start-batch must be > 0 (got {start_batch})")
    if start_batch < MODEL_MIN_BATCH["resnet50"]:
        raise Fail(f"--start-batch must be ≥ {MODEL_MIN_BATCH['resnet50']}: ResNet-50 at 32×32 cannot "
                   "train at batch 1 (BatchNorm over 1×1 maps needs 2 samples)")
    if max_batch <= 0:
        raise Fail(f"--max-batch must be > 0 (got {max_batch})")
    if max_batch < start_batch:
        raise Fail(f"--max-batch {max_batch} is below --start-batch {start_batch}")
    if calibration_batch <= 0:
        raise Fail(f"--calibration-batch must be > 0 (got {calibration_batch})")
    if strategy not in STRATEGIES:
        raise Fail(f"unknown --strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    return {
        **_common_configuration(names, precision, device, gpu, vram_limit, reserve, timeout, runtime, dataset,
                                data_dir, cudnn_benchmark, memory_limit),
        "start_batch": start_batch, "max_batch": max_batch, "calibration_batch": calibration_batch,
        "strategy": strategy, "steps": "one warm-up step, one measured step",
    }


def _common_configuration(names: list[str], precision: str, device: str, gpu: str | None, vram_limit: int | None,
                          reserve: int, timeout: float | None, runtime: str, dataset: str, data_dir: str | None,
                          cudnn_benchmark: bool, memory_limit: int | None) -> dict[str, Any]:
    """The checks and the configuration both benchmarks share (the model, data, device and budget)."""
    if timeout is not None and timeout <= 0:
        raise Fail(f"--timeout must be > 0 (got {timeout})")
    if device == "cpu" and vram_limit is not None:
        raise Fail("--vram-limit applies to --device cuda; on the CPU use --memory-limit")
    if memory_limit is not None and memory_limit <= 0:
        raise Fail(f"--memory-limit must be > 0 MiB (got {memory_limit})")
    if device == "cuda" and memory_limit is not None:
        raise Fail("--memory-limit applies to --device cpu; on a GPU use --vram-limit")
    if dataset == "synthetic" and data_dir:
        raise Fail("--data-dir is only read with --dataset cifar10")
    return {
        "engines": names, "precisions": ["fp32", "bf16"] if precision == "both" else [precision],
        "device": device, "gpu": gpu, "vram_limit_mib": vram_limit, "reserve_mib": reserve,
        "timeout_s": DEFAULT_TIMEOUT_S if timeout is None else timeout, "runtime": runtime,
        "model": "resnet50", "dataset": dataset, "data_dir": data_dir, "cudnn_benchmark": cudnn_benchmark,
        "memory_limit_mib": memory_limit, "seed": 0, "optimizer": "Adam lr 0.001", "loss": "cross-entropy",
        "input": "32x32x3 (CIFAR-10 geometry), 10 classes",
    }


def _new_doc(run_id: str, cfg: dict[str, Any], gpuctx: GpuContext | None, rt: Any, engines: list,
             benchmark: str = "maxbatch") -> dict[str, Any]:
    host = host_info()
    if gpuctx is not None:
        host["gpu"] = gpuctx.info.to_json()
    now = art.utc_iso()
    return {
        "schema_version": art.SCHEMA_VERSION, "kind": "kitctl-artifact", "benchmark": benchmark,
        "run_id": run_id, "state": "running", "created_utc": now, "updated_utc": now, "finished_utc": None,
        "kit": kit_info(), "argv": sys.argv, "host": host, "runtime": {"name": rt.name},
        "configuration": cfg, "budget": gpuctx.budget.to_json() if gpuctx else None,
        "engines": {e.name: {"label": e.label, "mode": e.mode, "framework_cap": e.framework_cap,
                             "provenance": {}, "versions": None} for e in engines},
        "results": [],
    }


def _usage_error_types() -> tuple[type, ...]:
    # typer >= 0.29 vendors its own click (and does not install click); older typer re-exports
    # click's classes. Either way the UsageError that typer raises is a base of its BadParameter:
    # find it there rather than importing click, which may not be installed.
    return tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main() -> None:
    """Console entry point: usage errors become one line, exit 2."""
    try:
        rc = app(standalone_mode=False, prog_name="kitctl")
    except _usage_error_types() as exc:
        if not exc.format_message():  # no_args_is_help: the help was the answer
            sys.exit(EXIT_USAGE)
        hint = f" (see: {exc.ctx.command_path} --help)" if getattr(exc, "ctx", None) else ""
        err.print(f"kitctl: {exc.format_message()}{hint}")
        sys.exit(EXIT_USAGE)
    except (typer.Abort, KeyboardInterrupt):  # typer.Abort is click's Abort in older typer
        err.print("kitctl: aborted")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
