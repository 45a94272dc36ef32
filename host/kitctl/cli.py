"""The `kitctl` command line (typer).

Exit codes (README "Exit codes"):
  0  the run finished and every engine × precision has a capacity (bounded or censored)
  1  the run finished but some engine × precision has none (no passing batch, or an invalid
     non-memory failure)
     `run throughput`: 0 every engine × precision has a summary, 1 some cell failed (a run not ok)
  2  bad input or an unfit host: one line on stderr, nothing written
  130 interrupted (SIGINT/SIGTERM/SIGHUP): the partial artifact is kept (or nothing was written yet);
      `--resume` continues it
"""
from __future__ import annotations

import enum
import math
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from .core import artifact as art
from .core import signals
from .core.artifact import ArtifactError, ArtifactStore, ArtifactWriteError
from .core.budget import Budget, BudgetError, make_budget
from .core.datasets import DataError, resolve_cifar10
from .core.engines import ENGINES, MODEL_MIN_BATCH, EngineError, parse_engines
from .core.protocol import TrialRequest
from .core.provenance import host_info, image_trial_code, kit_info, trial_code
from .benchmarks.maxbatch.run import Runner, RunPlan, replay_problem
from .runtimes.base import RuntimeUnavailable
from .runtimes.runstate import sweep_local_orphans
from .core.search import STRATEGIES, SearchConfig
from .core.signals import Interrupted
from .benchmarks.maxbatch.table import maxbatch_rows, ratios, throughput_ratio_pairs, throughput_rows

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MAX_BATCH = 1 << 20
# Sane bounds, checked before anything is written (a run's and a resumed partial's alike).
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a candidate that may run longer than a week is a typo
MIN_MEMORY_LIMIT_MIB = 6  # Docker's minimum container memory; no trial starts in less anyway
MAX_COUNT = 2**31 - 1  # batches, runs, steps, MiB: what a trial's 32-bit argument parsing takes
# What may accompany --resume: the rest is the partial's own configuration (README "Resume").
RESUME_ACCEPTS = ("resume", "timeout", "gpu", "require_gpu_idle", "idle_threshold", "gpu_request")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Containerized max-batch and throughput benchmarks for deep-learning engines.")
run_app = typer.Typer(no_args_is_help=True, help="Run a benchmark.")
app.add_typer(run_app, name="run")
from .reports.cli import register as _register_reports  # noqa: E402  (report, compare, results list)
_register_reports(app)
from .runtimes import clean; from . import doctor; from .images import cli as images_cmd  # noqa: E402  (issue 5: images, doctor, clean)
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
    from .core.gpu import GpuError, Nvml, check_idle

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
                  gpu_request: str = "auto", images: dict[str, str] | None = None):
    """The runtime the run uses; `notes` collects what the user should know (fallback, sweep).
    `images` (a resume) pins each engine's Docker image by id."""
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
                                       gpu_request=gpu_request, images=images)
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


def _given_flags(ctx: typer.Context) -> list[tuple[str, str]]:
    """(parameter, flag as typed) of every option given on the command line or from the environment."""
    out = []
    for p in ctx.command.params:
        src = ctx.get_parameter_source(p.name) if p.name else None
        if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append((p.name, max(p.opts, key=len) if p.opts else p.name))
    return out


def _refuse_beside_resume(given: list[tuple[str, str]]) -> None:
    """A resume continues the partial's configuration: a flag that would change it is refused,
    never silently ignored."""
    extra = [flag for name, flag in given if name not in RESUME_ACCEPTS]
    if extra:
        accepted = ", ".join("--" + n.replace("_", "-") for n in RESUME_ACCEPTS if n != "resume")
        raise Fail(f"--resume continues the partial's own configuration: {', '.join(extra)} cannot apply "
                   f"(beside --resume only {accepted})")


def _open_resume(resume: Path, timeout: float | None) -> tuple[ArtifactStore, dict[str, Any], dict[str, Any]]:
    """A partial to continue, locked: its own configuration, except a new --timeout; the resume is recorded."""
    if timeout is not None:
        _check_timeout(timeout)
    store, doc = art.open_for_resume(resume)
    cfg = doc["configuration"]
    doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
    if timeout is not None:
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


# The configuration keys a run writes, with their JSON types; a partial's are checked against these
# and then rebuilt through the very checks its flags went through.
_INT, _NUM, _STR, _BOOL, _LIST = (int,), (int, float), (str,), (bool,), (list,)
_COMMON_KEYS = {"engines": _LIST, "precisions": _LIST, "device": _STR, "gpu": _STR + (type(None),),
                "vram_limit_mib": _INT + (type(None),), "reserve_mib": _INT, "timeout_s": _NUM,
                "runtime": _STR, "model": _STR, "dataset": _STR, "data_dir": _STR + (type(None),),
                "cudnn_benchmark": _BOOL, "memory_limit_mib": _INT + (type(None),)}
_BENCHMARK_KEYS = {"maxbatch": {"start_batch": _INT, "max_batch": _INT, "calibration_batch": _INT, "strategy": _STR},
                   "throughput": {"batch": _INT, "runs": _INT, "warmup_steps": _INT, "steps": _INT}}
_PRECISIONS = {("fp32",): "fp32", ("bf16",): "bf16", ("fp32", "bf16"): "both"}


def _rebuild_configuration(benchmark: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The configuration a run with the partial's settings would write; Fail where no run could."""
    for key, types in {**_COMMON_KEYS, **_BENCHMARK_KEYS[benchmark]}.items():
        v = cfg.get(key, ...)
        if v is ... or not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise Fail(f"{key} is {'missing' if v is ... else repr(v)}")
    precision = _PRECISIONS.get(tuple(cfg["precisions"]))
    for key, allowed in (("device", Device), ("runtime", RuntimeName), ("dataset", Dataset)):
        if cfg[key] not in {m.value for m in allowed}:
            raise Fail(f"{key} is {cfg[key]!r}")
    if precision is None or cfg["model"] != "resnet50" or not all(isinstance(e, str) for e in cfg["engines"]):
        raise Fail(f"precisions {cfg['precisions']!r}, model {cfg['model']!r}, engines {cfg['engines']!r}")
    common = (precision, cfg["device"], cfg["vram_limit_mib"], cfg["reserve_mib"])
    rest = (cfg["timeout_s"], cfg["runtime"], cfg["dataset"], cfg["data_dir"], cfg["cudnn_benchmark"],
            cfg["memory_limit_mib"])
    if benchmark == "maxbatch":
        return _configuration(",".join(cfg["engines"]), *common, cfg["start_batch"], cfg["max_batch"], *rest,
                              cfg["calibration_batch"], cfg["strategy"], cfg["gpu"])
    return _throughput_configuration(",".join(cfg["engines"]), *common, cfg["batch"], cfg["runs"],
                                     cfg["warmup_steps"], cfg["steps"], *rest, cfg["gpu"])


def _check_resumed(benchmark: str, doc: dict[str, Any]) -> None:
    """Refuse a partial that no run of this kitctl could have left: its settings (types and ranges,
    as a new run's flags), and every recorded cell replayed through the search (maxbatch) or the
    run count (throughput). Finished cells are then re-derived by the runner, never trusted."""
    if doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    cfg = doc["configuration"]
    try:
        rebuilt = _rebuild_configuration(benchmark, cfg)
    except (Fail, EngineError) as exc:
        raise Fail(f"--resume: the partial's configuration is not one kitctl runs ({exc}); start a new run") from None
    settings = {**_COMMON_KEYS, **_BENCHMARK_KEYS[benchmark], "seed": _INT, "ci_level": _NUM}
    changed = [k for k in settings if k in rebuilt and k in cfg and cfg[k] != rebuilt[k]]
    if changed:
        raise Fail(f"--resume: the partial's configuration is not one kitctl writes ({', '.join(changed)}); "
                   "start a new run")
    seen: set[tuple[str, str]] = set()
    for cell in doc["results"]:
        key = (cell["engine"], cell["precision"])
        where = f"--resume: the partial's cell {key[0]} {key[1]}"
        if key[0] not in rebuilt["engines"] or key[1] not in rebuilt["precisions"] or key in seen:
            raise Fail(f"{where} is not one its configuration runs (or is there twice); start a new run")
        seen.add(key)
        try:
            if benchmark == "maxbatch":
                why = replay_problem(cell["trials"], SearchConfig(cfg["start_batch"], cfg["max_batch"],
                                                                  min_batch=MODEL_MIN_BATCH[cfg["model"]]),
                                     cfg["strategy"])
            else:
                from .benchmarks.throughput.run import replay_problem as runs_problem
                why = runs_problem(cell, cfg["batch"], cfg["runs"])
        except (KeyError, TypeError, ValueError) as exc:
            why = f"a recorded candidate cannot be read ({type(exc).__name__}: {exc})"
        if why:
            raise Fail(f"{where}: {why}; the partial was edited or damaged — start a new run")


def _resume_stack(doc: dict[str, Any], engines: list) -> tuple[str, dict[str, str] | None, str | None]:
    """The runtime, the images (by id) and the interpreter the partial's run started with: a resume
    continues on exactly that software, or is refused."""
    name = doc["runtime"].get("name")
    prov = {e.name: doc["engines"].get(e.name, {}).get("provenance") or {} for e in engines}
    if name == "docker":
        images = {}
        for e, p in prov.items():
            if not isinstance(p.get("id"), str) or not p["id"]:
                raise Fail(f"--resume: the partial does not record the image engine {e} ran in "
                           f"(engines.{e}.provenance.id); start a new run")
            images[e] = p["id"]
        return name, images, None
    python = None
    for e in engines:
        if not e.native:
            python = prov[e.name].get("interpreter")
            if not isinstance(python, str) or not (os.path.isfile(python) and os.access(python, os.X_OK)):
                raise Fail(f"--resume: the partial ran engine {e.name} with the interpreter {python!r}, which is "
                           "not an executable here; a resume continues with it: start a new run")
    return name, None, python


def _check_same_stack(doc: dict[str, Any], rt: Any, engines: list) -> None:
    """What the runtime would run now is what the partial's provenance records (image id, interpreter,
    trial, compiled trial's build)."""
    keys = ("id",) if rt.name == "docker" else ("interpreter", "trial", "build_info")
    for e in engines:
        old = doc["engines"][e.name].get("provenance") or {}
        new = rt.describe(e.name)
        for k in keys:
            if k in old and old[k] != new.get(k):
                raise Fail(f"--resume: engine {e.name} would now run with {k} {new.get(k)!r}, the partial ran "
                           f"{old[k]!r}; a resume continues on the software it started with: start a new run")


def _prepare(benchmark: str, cfg: dict[str, Any], doc: dict[str, Any] | None, store: ArtifactStore | None,
             results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
             resume_gpu: str | None = None, gpu_request: str = "auto") -> Setup:
    """Engines refused or not, data, GPU, runtime, the artifact and its provenance (both benchmarks).
    Raises Fail and friends: the caller turns them into one line, exit 2. Writes nothing: a new
    run's partial appears at its first save."""
    if doc is not None and doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    plan_engines = parse_engines(",".join(cfg["engines"]))
    for e in plan_engines:
        why = e.refuse(benchmark, cfg["device"])
        if why:
            raise Fail(why)
    if store is None:
        store = ArtifactStore.pending(results_dir, benchmark, cfg["model"], cfg["dataset"])
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
    gpu_uuid = gpuctx.info.uuid if gpuctx else None
    request_kind = _gpu_request_kind(doc, cfg, gpu_request)
    if doc is not None:  # the software the run started on, or a refusal
        name, images, python = _resume_stack(doc, plan_engines)
        rt = _make_runtime(name, plan_engines, cfg["device"], gpu_uuid, run_id, cfg["memory_limit_mib"],
                           cfg.get("data_dir"), python, notes, request_kind, images=images)
        try:
            _check_same_stack(doc, rt, plan_engines)
        except BaseException:
            rt.close()
            raise
        return Setup(store, doc, plan_engines, gpuctx, rt, notes)

    rt = _make_runtime(cfg["runtime"], plan_engines, cfg["device"], gpu_uuid, run_id, cfg["memory_limit_mib"],
                       cfg.get("data_dir"), python, notes, request_kind)
    doc = _new_doc(run_id, cfg, gpuctx, rt, plan_engines, benchmark)
    if rt.name == "docker":
        doc["host"]["docker_version"] = rt.describe(plan_engines[0].name).get("docker_version")
    doc["runtime"] = {"name": rt.name, **{k: v for k, v in rt.describe(plan_engines[0].name).items()
                                          if k != "runtime"}}
    for e in plan_engines:
        doc["engines"][e.name]["provenance"] = {**rt.describe(e.name), "code": _trial_code(rt, e.name)}
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


def _resolve_python(python: str | None) -> str | None:
    """--python as an absolute path to an executable file (a name is looked up on PATH)."""
    if python is None:
        return None
    found = shutil.which(python)
    if found is None:
        raise Fail(f"--python {python}: no such executable file")
    return os.path.abspath(found)


def _setup(benchmark: str, given: list[tuple[str, str]], resume: Path | None, timeout: float | None,
           gpu: str | None, results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
           new_configuration: Callable[[], dict[str, Any]], gpu_request: str = "auto") -> tuple[Setup, dict[str, Any]]:
    """A run command's start, new or resumed; bad input is one line and exit 2, nothing written."""
    store: ArtifactStore | None = None
    ready = False
    try:
        signals.check()
        _check_idle_threshold(idle_threshold)
        if resume is not None:
            _refuse_beside_resume(given)
            store, doc, cfg = _open_resume(resume, timeout)  # holds the partial's lock from here
            _check_resumed(benchmark, doc)
        else:
            python = _resolve_python(python)
            doc, cfg = None, new_configuration()
        s = _prepare(benchmark, cfg, doc, store, results_dir, python, require_gpu_idle, idle_threshold,
                     resume_gpu=gpu, gpu_request=gpu_request)
        ready = True
    except Interrupted as exc:
        signals.stop_interrupting()
        err.print(f"kitctl: interrupted ({exc}) before the run started; nothing written")
        raise typer.Exit(EXIT_INTERRUPTED)
    except (Fail, EngineError, DataError, ArtifactError, BudgetError, ValueError) as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    finally:
        if not ready and store is not None:
            store.release()
    return s, cfg


def _base_request(benchmark: str, cfg: dict[str, Any], **kw: Any) -> TrialRequest:
    """The request every candidate of the run starts from (engine, mode, batch and precision vary)."""
    return TrialRequest(engine="", mode="", benchmark=benchmark, precision="fp32", device=cfg["device"],
                        model=cfg["model"], dataset=cfg["dataset"], data_dir=cfg.get("data_dir"),
                        cudnn_benchmark=cfg["cudnn_benchmark"], seed=cfg["seed"], **kw)


def _watcher_factory(gpuctx: GpuContext | None):
    if gpuctx is None:
        return None
    from .core.sampler import NvmlSampler

    def factory(budget_mib: float | None, _g=gpuctx):
        return NvmlSampler(_g.nvml, _g.handle, budget_mib)
    return factory


def _make_view(console: Console, notes: list[str], doc: dict[str, Any], rt: Any, store: ArtifactStore):
    from .view import make_view

    view = make_view(console)
    for n in notes:
        view.note(n)
    view.note(f"run {doc['run_id']} ({rt.name} runtime)")
    return view


def _kept(store: ArtifactStore, when: str = "") -> str:
    """What is left on disk, for the one line that ends a run early."""
    if store.claimed and store.partial.exists():
        return f"partial artifact kept: {store.partial} (continue with --resume {store.partial}{when})"
    return "nothing written"


def _execute(runner: Runner, store: ArtifactStore) -> tuple[dict[str, Any], Path]:
    """Run it and write the final artifact; interruptions, a full disk and a vanished runtime become
    one line and their exit codes (the partial kept, resumable). The partial's lock is released."""
    view = runner.view
    try:
        doc = runner.run()
        with signals.critical():
            final = store.finalize(doc)
            signals.stop_interrupting()  # the result is whole: a signal now changes nothing
    except Interrupted as exc:
        signals.stop_interrupting()
        view.close()
        err.print(f"kitctl: interrupted ({exc}); {_kept(store)}")
        raise typer.Exit(EXIT_INTERRUPTED)
    except ArtifactWriteError as exc:
        view.close()
        err.print(f"kitctl: {exc}; {_kept(store, ' once it can be written')}")
        raise typer.Exit(EXIT_USAGE)
    except ArtifactError as exc:
        view.close()
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    except RuntimeUnavailable as exc:
        view.close()
        err.print(f"kitctl: {exc}; {_kept(store)}")
        raise typer.Exit(EXIT_USAGE)
    finally:
        store.release()
    view.close()
    return doc, final


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
O_TIMEOUT = typer.Option(None, help=f"Seconds per candidate before the kit kills it (default {DEFAULT_TIMEOUT_S:.0f}, "
                         "at most 7 days).")
O_RUNTIME = typer.Option(RuntimeName.auto, help="auto: docker when the daemon answers and the image exists, else local.")
O_DATASET = typer.Option(Dataset.synthetic, help="synthetic or cifar10.")
O_DATA_DIR = typer.Option(None, help="CIFAR-10 folder (binary or python layout) or its parent.")
O_CUDNN = typer.Option(False, "--cudnn-benchmark", help="Turn cuDNN autotuning on (changes memory use).")
O_REQUIRE_IDLE = typer.Option(False, "--require-gpu-idle", help="Refuse to start when the GPU holds memory.")
O_IDLE_THRESHOLD = typer.Option(1024.0, help="MiB in use above which the GPU is not idle.")
O_MEMORY_LIMIT = typer.Option(None, help="Host memory limit per candidate in MiB (--device cpu; 6 MiB to the "
                              "host's RAM).")
O_PYTHON = typer.Option(None, help="Interpreter for the local runtime (default: this one).")
O_RESULTS_DIR = typer.Option(Path("results"), help="Where artifacts are written.")
O_RESUME = typer.Option(None, help="Continue the run in this .partial.json, with its own configuration, runtime, "
                        "image or interpreter; beside it only --timeout, --gpu, --require-gpu-idle and "
                        "--idle-threshold are accepted (and --gpu-request, checked against the partial's).")
O_GPU_REQUEST = typer.Option(GpuRequestName.auto, help="How Docker attaches the GPU: toolkit (NVIDIA Container "
                             "Toolkit, --gpus style), cdi (nvidia.com/gpu=UUID) or auto (probe once: what works).")


@run_app.command("maxbatch")
def maxbatch(
    ctx: typer.Context,
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
    s, cfg = _setup("maxbatch", _given_flags(ctx), resume, timeout, gpu, results_dir, python, require_gpu_idle,
                    idle_threshold,
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
    doc, final = _execute(runner, store)
    _print_summary(console, doc, final)
    raise typer.Exit(_exit_code(doc))


@run_app.command("throughput")
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
    from .benchmarks.throughput.run import ThroughputPlan, ThroughputRunner

    console = Console(highlight=False)
    s, cfg = _setup("throughput", _given_flags(ctx), resume, timeout, gpu, results_dir, python, require_gpu_idle,
                    idle_threshold,
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
    doc, final = _execute(runner, store)
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
    _check_counts(("--batch", batch), ("--runs", runs), ("--warmup-steps", warmup_steps), ("--steps", steps))
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
    _check_counts(("--start-batch", start_batch), ("--max-batch", max_batch),
                  ("--calibration-batch", calibration_batch))
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
    if timeout is not None:
        _check_timeout(timeout)
    if device == "cpu" and vram_limit is not None:
        raise Fail("--vram-limit applies to --device cuda; on the CPU use --memory-limit")
    if memory_limit is not None and memory_limit <= 0:
        raise Fail(f"--memory-limit must be > 0 MiB (got {memory_limit})")
    if device == "cuda" and memory_limit is not None:
        raise Fail("--memory-limit applies to --device cpu; on a GPU use --vram-limit")
    if memory_limit is not None:
        _check_memory_limit(memory_limit)
    if reserve < 0:
        raise Fail(f"--reserve must be ≥ 0 (got {reserve})")
    if vram_limit is not None and vram_limit <= 0:
        raise Fail(f"--vram-limit must be > 0 (got {vram_limit})")
    _check_counts(("--reserve", reserve), ("--vram-limit", vram_limit or 0))
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


def _check_timeout(timeout: float) -> None:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise Fail(f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:.0f} s (7 days) (got {timeout})")


def _check_idle_threshold(mib: float) -> None:
    if not (math.isfinite(mib) and 0 <= mib <= MAX_COUNT):
        raise Fail(f"--idle-threshold must be a number of MiB ≥ 0 (got {mib})")


def _check_counts(*flags: tuple[str, int]) -> None:
    for flag, value in flags:
        if value > MAX_COUNT:
            raise Fail(f"{flag} must be at most {MAX_COUNT:,} (got {value:,})")


def _host_ram_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError):  # not on this platform
        return None


def _check_memory_limit(mib: int) -> None:
    if mib < MIN_MEMORY_LIMIT_MIB:
        raise Fail(f"--memory-limit must be at least {MIN_MEMORY_LIMIT_MIB} MiB (Docker's minimum; "
                   f"no trial starts in less) (got {mib})")
    ram = _host_ram_mib()
    if ram is not None and mib > ram:
        raise Fail(f"--memory-limit {mib:,} MiB is above this host's {ram:,} MiB of RAM")


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
    """Console entry point: usage errors become one line, exit 2; a signal, exit 130."""
    signals.install()  # already done by kitctl.entry; here for `from kitctl.cli import main`
    try:
        signals.check()
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
    except Interrupted as exc:
        signals.stop_interrupting()
        err.print(f"kitctl: interrupted ({exc})")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
