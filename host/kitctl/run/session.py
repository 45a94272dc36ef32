"""A run's start, new or resumed, shared by every benchmark: the partial to continue (checked), the
engines, the data, the GPU and its budget, the runtime, the artifact and its provenance; then the
run itself and its ending (interrupted, disk full, runtime gone: one line, the partial kept).

A benchmark's command calls `start(...)` with a function building its typed config from the flags,
builds its runner from `Setup`, and hands it to `execute`.
"""
from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol


from ..core import artifact as art
from ..core import signals
from ..core.artifact import ArtifactError, ArtifactStore, ArtifactWriteError
from ..core.budget import BudgetError, make_budget
from ..core.datasets import DataError, resolve_cifar10
from ..core.engines import EngineError, parse_engines
from ..core.paths import kit_root
from ..core.protocol import TrialRequest
from ..core.recorded import configuration
from ..core.signals import Interrupted
from ..errors import EXIT_INTERRUPTED, Fail, fail
from ..runtimes.base import RuntimeUnavailable
from ..runtimes.factory import make_runtime
from ..runtimes.runstate import sweep_local_orphans
from .config import RunConfig, check_idle_threshold, check_timeout
from .document import _trial_code, new_doc
from .gpus import SAME_GPU_KEYS, GpuContext, gpu_list, open_gpu, open_resumed_gpu
from .resume import check_code, check_resumed, check_same_stack, resume_stack


# What may accompany --resume: the rest is the partial's own configuration (README "Resume").
RESUME_ACCEPTS = ("resume", "timeout", "gpu", "require_gpu_idle", "idle_threshold", "gpu_request",
                  "allow_code_change")
# What only changes what the command prints: accepted beside --resume, never named in its refusal.
OUTPUT_FLAGS = ("as_json", "csv")


class BenchmarkConfig(Protocol):
    """What launch needs of a benchmark's typed config (benchmarks/<name>/config.py)."""

    BENCHMARK: str  # its name: `kitctl run <BENCHMARK>`, the artifact's "benchmark"
    TITLE: str  # in headings: "Max batch"
    SETTINGS: tuple[str, ...]

    @property
    def run(self) -> RunConfig: ...

    def to_json(self) -> dict[str, Any]: ...

    def with_run(self, run: RunConfig) -> Any: ...

    def cell_problem(self, cell: dict[str, Any]) -> str | None: ...


@dataclass
class Setup:
    store: ArtifactStore
    doc: dict[str, Any]
    engines: list
    gpuctx: GpuContext | None
    rt: Any
    notes: list[str]
    config: Any  # the benchmark's typed config, as the run uses it (the data folder resolved)
    # --gpus: every listed GPU with its own context and runtime, the run's own (gpuctx, rt) first
    gpus: list[tuple[GpuContext, Any]] | None = None


def refuse_beside_resume(given: list[tuple[str, str]], accepts: tuple[str, ...] = RESUME_ACCEPTS) -> None:
    """A resume continues the partial's configuration: a flag that would change it is refused,
    never silently ignored (`accepts`: the parameters a benchmark's --resume takes beside it; the data
    benchmarks' takes none but the output flags)."""
    extra = [flag for name, flag in given if name not in accepts + OUTPUT_FLAGS]
    if extra:
        accepted = ", ".join("--" + n.replace("_", "-") for n in accepts if n != "resume") or "--json and --csv"
        raise Fail(f"--resume continues the partial's own configuration: {', '.join(extra)} cannot apply "
                   f"(beside --resume only {accepted})")


def open_resume(resume: Path, timeout: float | None) -> tuple[ArtifactStore, dict[str, Any], dict[str, Any]]:
    """A partial to continue, locked, and the configuration it continues with: its own, except a new
    --timeout; the resume is recorded."""
    if timeout is not None:
        check_timeout(timeout)
    store, doc = art.open_for_resume(resume)
    doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
    recorded = configuration(doc)
    return store, doc, recorded if timeout is None else {**recorded, "timeout_s": timeout}


def gpu_request_kind(doc: dict[str, Any] | None, configured: str | None, flag: str) -> str:
    """--gpu-request for a new run; a resumed one keeps the kind its partial recorded (an explicit,
    different flag is refused), so every candidate of a run attaches the GPU the same way."""
    if doc is None:
        return flag
    recorded = (doc.get("runtime") or {}).get("gpu_request")
    if recorded and flag != "auto" and flag != recorded:
        raise Fail(f"--resume: the partial attached its GPU by {recorded}, not --gpu-request {flag}; "
                   f"resume with --gpu-request {recorded} (or auto)")
    return recorded or (flag if flag != "auto" else configured or "auto")


def prepare(benchmark: str, config: Any, doc: dict[str, Any] | None, store: ArtifactStore | None,
            results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
            resume_gpu: str | None = None, gpu_request: str = "auto", allow_code_change: bool = False) -> Setup:
    """Engines refused or not, data, GPU, runtime, the artifact and its provenance (every benchmark).
    Raises Fail and friends: the caller turns them into one line, exit 2. Writes nothing: a new
    run's partial appears at its first save."""
    if doc is not None and doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    run: RunConfig = config.run
    plan_engines = parse_engines(",".join(run.engines))
    for e in plan_engines:
        why = e.refuse(benchmark, run.device)
        if why:
            raise Fail(why)
    if store is None:
        store = ArtifactStore.pending(results_dir, benchmark, run.model, run.dataset)
    if run.dataset == "cifar10":
        run = replace(run, data_dir=str(resolve_cifar10(run.data_dir)))
        config = config.with_run(run)

    # Before the GPU's idle check: an orphaned local trial's memory is not idle.
    notes: list[str] = [f"killed an orphaned local trial: {o}" for o in sweep_local_orphans()]
    gpuctx = None
    if run.device == "cuda" and not getattr(config, "cluster", None):  # a cluster's GPUs are on its nodes
        if doc is None:
            gpuctx = open_gpu(run.gpu, run.vram_limit_mib, run.reserve_mib, require_gpu_idle, idle_threshold)
        else:
            gpuctx = open_resumed_gpu(doc, resume_gpu, run, require_gpu_idle, idle_threshold)
    run_id = doc["run_id"] if doc else uuid.uuid4().hex[:12]
    gpu_uuid = gpuctx.info.uuid if gpuctx else None
    request_kind = gpu_request_kind(doc, run.gpu_request, gpu_request)
    if doc is not None:  # the software the run started on, or a refusal
        doc["configuration"] = run.resumed_json(configuration(doc))
        name, images, python = resume_stack(doc, plan_engines)
        rt = make_runtime(name, plan_engines, run.device, gpu_uuid, run_id, run.memory_limit_mib, run.data_dir,
                          python, notes, request_kind, images=images)
        try:
            check_same_stack(doc, rt, plan_engines)
            for c in check_code(doc, rt, plan_engines, allow_code_change):
                notes.append(f"--allow-code-change: {c.line()}; recorded in the artifact's resume entry")
        except BaseException:
            rt.close()
            raise
        return Setup(store, doc, plan_engines, gpuctx, rt, notes, config)

    rt = make_runtime(run.runtime, plan_engines, run.device, gpu_uuid, run_id, run.memory_limit_mib, run.data_dir,
                      python, notes, request_kind)
    doc = new_doc(run_id, config, gpuctx, rt, plan_engines, benchmark)
    if rt.name == "docker":
        doc["host"]["docker_version"] = rt.describe(plan_engines[0].name).get("docker_version")
    doc["runtime"] = {"name": rt.name, **{k: v for k, v in rt.describe(plan_engines[0].name).items()
                                          if k != "runtime"}}
    for e in plan_engines:
        doc["engines"][e.name]["provenance"] = {**rt.describe(e.name), "code": _trial_code(rt, e.name)}
    return Setup(store, doc, plan_engines, gpuctx, rt, notes, config)


def _resolve_python(python: str | None) -> str | None:
    """--python as an absolute path to an executable file (a name is looked up on PATH)."""
    if python is None:
        return None
    found = shutil.which(python)
    if found is None:
        raise Fail(f"--python {python}: no such executable file")
    return os.path.abspath(found)


def check_kit_home() -> None:
    """KITCTL_HOME must name a kit checkout: elsewhere every trial is missing and the code hash is
    that of an empty tree, which a run recorded as "crash then crash"."""
    home = os.environ.get("KITCTL_HOME")
    # A Docker-only home may hold compose.yaml alone; the local runtime checks each trial's file.
    if home and not ((kit_root() / "trials").is_dir() or (kit_root() / "compose.yaml").is_file()):
        raise Fail(f"KITCTL_HOME={home} is not a kit checkout (neither trials/ nor compose.yaml there); unset "
                   "it or point it at the kit's root")


def start(config_type: Any, given: list[tuple[str, str]], resume: Path | None, timeout: float | None,
          gpu: str | None, results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
          new_config: Callable[[], Any], gpu_request: str = "auto", allow_code_change: bool = False) -> Setup:
    """A run command's start, new or resumed; bad input is one line and exit 2, nothing written.
    `config_type`: the benchmark's config class (its BENCHMARK names the benchmark)."""
    benchmark = config_type.BENCHMARK
    store: ArtifactStore | None = None
    ready = False
    try:
        signals.check()
        check_kit_home()
        check_idle_threshold(idle_threshold)
        if allow_code_change and resume is None:
            raise Fail("--allow-code-change applies only with --resume")
        if resume is not None:
            refuse_beside_resume(given)
            store, doc, recorded = open_resume(resume, timeout)  # holds the partial's lock from here
            config = check_resumed(config_type, doc, recorded)
        else:
            python = _resolve_python(python)
            doc, config = None, new_config()
        s = prepare(benchmark, config, doc, store, results_dir, python, require_gpu_idle, idle_threshold,
                    resume_gpu=gpu, gpu_request=gpu_request, allow_code_change=allow_code_change)
        choice = getattr(s.config.run, "device_choice", None)
        if choice is not None:  # which device, why, and the CPU's cap: the run's first line
            s.notes.insert(0, choice.line())
        try:
            s.gpus = open_gpus(s, getattr(s.config, "gpus", None), require_gpu_idle, idle_threshold)
        except BaseException:
            s.rt.close()
            raise
        ready = True
    except Interrupted as exc:
        signals.stop_interrupting()
        raise fail(f"interrupted ({exc}) before the run started; nothing written", EXIT_INTERRUPTED)
    except (Fail, EngineError, DataError, ArtifactError, BudgetError, ValueError) as exc:
        raise fail(exc)
    finally:
        if not ready and store is not None:
            store.release()
    return s


def open_gpus(s: Setup, spec: str | None, require_idle: bool, idle_threshold: float
              ) -> list[tuple[GpuContext, Any]] | None:
    """One (context, runtime) per GPU of `--gpus`: the run's own first, then each other GPU with its
    own budget, idle check and runtime (same runtime kind, images, interpreter). Every card must be
    the same model, memory and driver as the first: lanes must give the one-GPU answers."""
    from ..core.gpu import check_idle

    if spec is None or s.gpuctx is None:
        return None
    run: RunConfig = s.config.run
    first = s.gpuctx
    out: list[tuple[GpuContext, Any]] = [(first, s.rt)]
    name, images, python = resume_stack(s.doc, s.engines)
    python = getattr(s.rt, "python", None) or python
    kind = s.doc["runtime"].get("gpu_request") or run.gpu_request or "auto"
    try:
        for index, handle in gpu_list(first.nvml, spec):
            uuid_ = first.nvml.uuid(handle)
            if uuid_ == first.info.uuid:
                continue
            info = first.nvml.info(index, handle)
            here, there = info.to_json(), first.info.to_json()
            differ = [f"{k} {there.get(k)!r} vs {here.get(k)!r}" for k in SAME_GPU_KEYS if there.get(k) != here.get(k)]
            if differ:
                raise Fail(f"--gpus: GPU {index} is not the same kind of card as GPU {first.info.index} "
                           f"({', '.join(differ)}); list cards of one model")
            if require_idle:
                busy = check_idle(first.nvml, handle, idle_threshold)
                if busy:
                    raise Fail(busy)
            ctx = GpuContext(first.nvml, handle, info, make_budget(info.total_mib, run.vram_limit_mib,
                                                                   run.reserve_mib))
            notes: list[str] = []
            rt = make_runtime(name, s.engines, run.device, uuid_, s.doc["run_id"], run.memory_limit_mib,
                              run.data_dir, python, notes, kind if kind in ("toolkit", "cdi") else "auto",
                              images=images)
            out.append((ctx, rt))
    except BaseException:
        for _, rt in out[1:]:
            rt.close()
        raise
    if first.info.uuid not in {c.info.uuid for c, _ in out} or len(out) < 2:
        for _, rt in out[1:]:
            rt.close()
        raise Fail(f"--gpus {spec}: list at least two GPUs (for one, use --gpu)")
    s.doc["host"]["gpus"] = [c.info.to_json() for c, _ in out]
    return out


def base_request(benchmark: str, run: RunConfig, **kw: Any) -> TrialRequest:
    """The request every candidate of the run starts from (engine, mode, batch and precision vary)."""
    return TrialRequest(engine="", mode="", benchmark=benchmark, precision="fp32", device=run.device,
                        model=run.model, dataset=run.dataset, data_dir=run.data_dir,
                        cudnn_benchmark=run.cudnn_benchmark, seed=run.seed, image_size=run.image_size, **kw)


def watcher_factory(gpuctx: GpuContext | None, telemetry: bool = False):
    """`telemetry`: the watcher also reads the energy counter, SM clock and temperature (throughput)."""
    if gpuctx is None:
        return None
    from ..core.sampler import NvmlSampler

    def factory(budget_mib: float | None, _g=gpuctx):
        return NvmlSampler(_g.nvml, _g.handle, budget_mib, telemetry=telemetry)
    return factory


def check_output_flags(csv: Path | None) -> None:
    """--csv's file must be writable where it is named: refused before the run, in one line."""
    from ..output import check_csv_path

    try:
        check_csv_path(csv)
    except Fail as exc:
        raise fail(exc) from None


def finish_output(out: Any, doc: dict[str, Any]) -> None:
    """The CSV and the --json document, after the end table (the artifact is already written)."""
    try:
        out.finish(doc)
    except Fail as exc:
        raise fail(f"{exc} (the artifact is written)") from None


def _kept(store: ArtifactStore, when: str = "") -> str:
    """What is left on disk, for the one line that ends a run early."""
    if store.claimed and store.partial.exists():
        return f"partial artifact kept: {store.partial} (continue with --resume {store.partial}{when})"
    return "nothing written"


def execute(runner: Any, store: ArtifactStore) -> tuple[dict[str, Any], Path]:
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
        raise fail(f"interrupted ({exc}); {_kept(store)}", EXIT_INTERRUPTED)
    except ArtifactWriteError as exc:
        view.close()
        raise fail(f"{exc}; {_kept(store, ' once it can be written')}")
    except ArtifactError as exc:
        view.close()
        raise fail(exc)
    except RuntimeUnavailable as exc:
        view.close()
        raise fail(f"{exc}; {_kept(store)}")
    finally:
        store.release()
    view.close()
    return doc, final
