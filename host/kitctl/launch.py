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

import typer
from rich.console import Console

from . import benchmarks
from .core import artifact as art
from .core import signals
from .core.artifact import ArtifactError, ArtifactStore, ArtifactWriteError
from .core.budget import Budget, BudgetError, make_budget
from .core.datasets import DataError, resolve_cifar10
from .core.engines import EngineError, parse_engines
from .core.protocol import TrialRequest
from .core.provenance import (HOST_CODE, changed_files, code_hash, host_info, image_trial_code, kit_info,
                              trial_code, trial_paths)
from .core.paths import kit_root
from .core.signals import Interrupted
from .errors import EXIT_INTERRUPTED, EXIT_USAGE, Fail, err
from .runconfig import RunConfig, check_idle_threshold, check_timeout
from .runtimes.base import RuntimeUnavailable
from .runtimes.runstate import sweep_local_orphans

# What may accompany --resume: the rest is the partial's own configuration (README "Resume").
RESUME_ACCEPTS = ("resume", "timeout", "gpu", "require_gpu_idle", "idle_threshold", "gpu_request",
                  "allow_code_change")
# What only changes what the command prints: accepted beside --resume, never named in its refusal.
OUTPUT_FLAGS = ("as_json", "csv")


class BenchmarkConfig(Protocol):
    """What launch needs of a benchmark's typed config (benchmarks/<name>/config.py)."""

    SETTINGS: tuple[str, ...]

    @property
    def run(self) -> RunConfig: ...

    def to_json(self) -> dict[str, Any]: ...

    def with_run(self, run: RunConfig) -> Any: ...

    def cell_problem(self, cell: dict[str, Any]) -> str | None: ...


@dataclass
class GpuContext:
    nvml: Any
    handle: Any
    info: Any
    budget: Budget


def open_gpu(gpu: str | None, vram_limit: int | None, reserve: int, require_idle: bool,
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


def make_runtime(name: str, engines: list, device: str, gpu_uuid: str | None, run_id: str,
                 memory_limit: int | None, data_dir: str | None, python: str | None, notes: list[str],
                 gpu_request: str = "auto", images: dict[str, str] | None = None):
    """The runtime the run uses; `notes` collects what the user should know (fallback, sweep).
    `images` (a resume) pins each engine's Docker image by id."""
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
        LocalRuntime.check(engines, python)
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
    config: Any  # the benchmark's typed config, as the run uses it (the data folder resolved)
    # --gpus: every listed GPU with its own context and runtime, the run's own (gpuctx, rt) first
    gpus: list[tuple[GpuContext, Any]] | None = None


def given_flags(ctx: typer.Context) -> list[tuple[str, str]]:
    """(parameter, flag as typed) of every option given on the command line or from the environment."""
    out = []
    for p in ctx.command.params:
        src = ctx.get_parameter_source(p.name) if p.name else None
        if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append((p.name, max(p.opts, key=len) if p.opts else p.name))
    return out


def refuse_beside_resume(given: list[tuple[str, str]]) -> None:
    """A resume continues the partial's configuration: a flag that would change it is refused,
    never silently ignored."""
    extra = [flag for name, flag in given if name not in RESUME_ACCEPTS + OUTPUT_FLAGS]
    if extra:
        accepted = ", ".join("--" + n.replace("_", "-") for n in RESUME_ACCEPTS if n != "resume")
        raise Fail(f"--resume continues the partial's own configuration: {', '.join(extra)} cannot apply "
                   f"(beside --resume only {accepted})")


def open_resume(resume: Path, timeout: float | None) -> tuple[ArtifactStore, dict[str, Any], dict[str, Any]]:
    """A partial to continue, locked, and the configuration it continues with: its own, except a new
    --timeout; the resume is recorded."""
    if timeout is not None:
        check_timeout(timeout)
    store, doc = art.open_for_resume(resume)
    doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
    recorded = doc["configuration"]
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


def check_resumed(benchmark: str, doc: dict[str, Any], recorded: dict[str, Any] | None = None) -> Any:
    """Refuse a partial that no run of this kitctl could have left: its settings (types and ranges,
    as a new run's flags), and every recorded cell replayed through the benchmark (its search, its
    run count). Finished cells are then re-derived by the runner, never trusted. Returns the typed
    config the resume continues with (`recorded`: the partial's configuration with a new --timeout)."""
    if doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    recorded = doc["configuration"] if recorded is None else recorded
    config_type = benchmarks.get(benchmark).config  # type: ignore[union-attr]  (the command's own)
    try:
        config = config_type.from_json(recorded)
    except (Fail, EngineError) as exc:
        raise Fail(f"--resume: the partial's configuration is not one kitctl runs ({exc}); start a new run") from None
    rebuilt = config.to_json()
    changed = [k for k in config.SETTINGS if k in rebuilt and k in recorded and recorded[k] != rebuilt[k]]
    if changed:
        raise Fail(f"--resume: the partial's configuration is not one kitctl writes ({', '.join(changed)}); "
                   "start a new run")
    seen: set[tuple[str, str]] = set()
    for cell in doc["results"]:
        key = (cell["engine"], cell["precision"])
        where = f"--resume: the partial's cell {key[0]} {key[1]}"
        if key[0] not in config.run.engines or key[1] not in config.run.precisions or key in seen:
            raise Fail(f"{where} is not one its configuration runs (or is there twice); start a new run")
        seen.add(key)
        try:
            why = config.cell_problem(cell)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"a recorded candidate cannot be read ({type(exc).__name__}: {exc})"
        if why:
            raise Fail(f"{where}: {why}; the partial was edited or damaged — start a new run")
    return config


def resume_stack(doc: dict[str, Any], engines: list) -> tuple[str, dict[str, str] | None, str | None]:
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


# What a build records about itself but that does not make it other software: when and how long it
# built, and which kit commit ran the build script (the trial's own sources are kit.trial_code, kept).
_BUILD_CIRCUMSTANCES = ("built_at", "stage_seconds", "total_seconds")
_BUILD_KIT_CIRCUMSTANCES = ("git_commit", "git_dirty", "git_source")


def build_identity(info: Any) -> Any:
    """A compiled trial's build_info without the circumstances of the build: two builds of the same
    sources with the same tools on twin machines are the same software (a resume may continue there)."""
    if not isinstance(info, dict):
        return info
    ident = {k: v for k, v in info.items() if k not in _BUILD_CIRCUMSTANCES}
    if isinstance(ident.get("kit"), dict):
        ident["kit"] = {k: v for k, v in ident["kit"].items() if k not in _BUILD_KIT_CIRCUMSTANCES}
    return ident


def _differences(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return ", ".join(f"{k} {old.get(k)!r} → {new.get(k)!r}" for k in keys)
    return f"{old!r} → {new!r}"


def check_same_stack(doc: dict[str, Any], rt: Any, engines: list) -> None:
    """What the runtime would run now is what the partial's provenance records (image id, interpreter,
    trial, compiled trial's build — the build compared by its identity, not by when it was made)."""
    keys = ("id",) if rt.name == "docker" else ("interpreter", "trial", "build_info")
    for e in engines:
        old = doc["engines"][e.name].get("provenance") or {}
        new = rt.describe(e.name)
        for k in keys:
            if k not in old:
                continue
            was, now = old[k], new.get(k)
            if k == "build_info":
                was, now = build_identity(was), build_identity(now)
            if was != now:
                raise Fail(f"--resume: engine {e.name} would now run with another {k} ({_differences(was, now)}); "
                           "a resume continues on the software it started with: start a new run")


@dataclass(frozen=True)
class CodeChange:
    """Code that hashes otherwise now than when the partial recorded it: the host package (always),
    a Python trial on the local runtime (Docker runs the image pinned by id, whose trial cannot change;
    a compiled trial is compared by its build_info)."""

    what: str                 # "kitctl (host/kitctl)" or "trial of pytorch-eager (trials/pytorch, trials/common)"
    paths: tuple[str, ...]
    old_sha256: str
    new_sha256: str
    files: tuple[str, ...]    # what git says changed under paths since the partial's commit; () unknown

    def line(self) -> str:
        which = ", ".join(self.files[:5]) + (f" and {len(self.files) - 5} more" if len(self.files) > 5 else "")
        return (f"{self.what} changed since the partial was written ({which + '; ' if which else ''}"
                f"sha256 {self.old_sha256[:12]} → {self.new_sha256[:12]})")

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "paths": list(self.paths), "old_sha256": self.old_sha256,
                "new_sha256": self.new_sha256, "files": list(self.files)}


def code_changes(doc: dict[str, Any], rt: Any, engines: list) -> list[CodeChange]:
    """Every code hash the partial recorded that the checkout no longer gives. A partial without a
    recorded hash (an image that holds no trial folder) has nothing to compare."""
    since = (doc.get("kit") or {}).get("git_commit")
    pairs: list[tuple[str, tuple[str, ...], Any, Any]] = []
    recorded = (doc.get("kit") or {}).get("code") or {}
    pairs.append((f"kitctl ({', '.join(HOST_CODE)})", HOST_CODE, recorded, code_hash(HOST_CODE)))
    if rt.name != "docker":
        for e in engines:
            if e.native:
                continue
            old = (doc["engines"].get(e.name, {}).get("provenance") or {}).get("code") or {}
            paths = trial_paths(e.name)
            pairs.append((f"the trial of {e.name} ({', '.join(paths)})", paths, old, trial_code(e.name)))
    out = []
    for what, paths, old, now in pairs:
        was = old.get("sha256") if isinstance(old, dict) else None
        if isinstance(was, str) and was != now.sha256:
            out.append(CodeChange(what, tuple(paths), was, now.sha256, changed_files(paths, since)))
    return out


def check_code(doc: dict[str, Any], rt: Any, engines: list, allow: bool) -> list[CodeChange]:
    """A resume runs the code the partial ran, or says in one line what changed; with
    --allow-code-change it goes on and the resume entry records old and new hashes (and the kit's
    commit now), so the artifact never claims one code for cells measured by two."""
    changes = code_changes(doc, rt, engines)
    if changes and not allow:
        raise Fail("--resume: " + "; ".join(c.line() for c in changes)
                   + "; a resume continues on the code it started with — start a new run, "
                   "or pass --allow-code-change to continue and record the change")
    entry = doc["resumes"][-1]
    now = kit_info()
    entry["kit"] = {k: now[k] for k in ("git_commit", "git_dirty", "git_source")} | {"code": now["code"]}
    if changes:
        entry["code_changed"] = [c.to_json() for c in changes]
    return changes


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
        doc["configuration"] = run.resumed_json(doc["configuration"])
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


def check_kit_home() -> None:
    """KITCTL_HOME must name a kit checkout: elsewhere every trial is missing and the code hash is
    that of an empty tree, which a run recorded as "crash then crash"."""
    home = os.environ.get("KITCTL_HOME")
    # A Docker-only home may hold compose.yaml alone; the local runtime checks each trial's file.
    if home and not ((kit_root() / "trials").is_dir() or (kit_root() / "compose.yaml").is_file()):
        raise Fail(f"KITCTL_HOME={home} is not a kit checkout (neither trials/ nor compose.yaml there); unset "
                   "it or point it at the kit's root")


def start(benchmark: str, given: list[tuple[str, str]], resume: Path | None, timeout: float | None,
          gpu: str | None, results_dir: Path, python: str | None, require_gpu_idle: bool, idle_threshold: float,
          new_config: Callable[[], Any], gpu_request: str = "auto", allow_code_change: bool = False) -> Setup:
    """A run command's start, new or resumed; bad input is one line and exit 2, nothing written."""
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
            config = check_resumed(benchmark, doc, recorded)
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
        err.print(f"kitctl: interrupted ({exc}) before the run started; nothing written")
        raise typer.Exit(EXIT_INTERRUPTED)
    except (Fail, EngineError, DataError, ArtifactError, BudgetError, ValueError) as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    finally:
        if not ready and store is not None:
            store.release()
    return s


def gpu_list(nvml: Any, spec: str) -> list[tuple[int, Any]]:
    """`--gpus 0,1|all|UUID,…` → [(NVML index, handle)], each GPU once, in the order given."""
    from .core.gpu import GpuError

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


def open_gpus(s: Setup, spec: str | None, require_idle: bool, idle_threshold: float
              ) -> list[tuple[GpuContext, Any]] | None:
    """One (context, runtime) per GPU of `--gpus`: the run's own first, then each other GPU with its
    own budget, idle check and runtime (same runtime kind, images, interpreter). Every card must be
    the same model, memory and driver as the first: lanes must give the one-GPU answers."""
    from .core.gpu import check_idle

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
    from .core.sampler import NvmlSampler

    def factory(budget_mib: float | None, _g=gpuctx):
        return NvmlSampler(_g.nvml, _g.handle, budget_mib, telemetry=telemetry)
    return factory


def make_view(console: Console | None, s: Setup):
    """The live view, on stderr (`console`: a stderr console, default the process's), titled with the
    benchmark."""
    from .output import stderr_console
    from .view import make_view as _view

    b = benchmarks.get(s.doc["benchmark"])
    view = _view(console or stderr_console(), f"{b.title if b else s.doc['benchmark']} — candidates")
    for n in s.notes:
        view.note(n)
    view.note(f"run {s.doc['run_id']} ({s.rt.name} runtime)")
    return view


def check_output_flags(csv: Path | None) -> None:
    """--csv's file must be writable where it is named: refused before the run, in one line."""
    from .output import check_csv_path

    try:
        check_csv_path(csv)
    except Fail as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE) from None


def finish_output(out: Any, doc: dict[str, Any]) -> None:
    """The CSV and the --json document, after the end table (the artifact is already written)."""
    try:
        out.finish(doc)
    except Fail as exc:
        err.print(f"kitctl: {exc} (the artifact is written)")
        raise typer.Exit(EXIT_USAGE) from None


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


def new_doc(run_id: str, config: Any, gpuctx: GpuContext | None, rt: Any, engines: list,
            benchmark: str | None = None) -> dict[str, Any]:
    if benchmark is None:  # the benchmark whose configuration this is
        benchmark = next(b.name for b in benchmarks.all() if isinstance(config, b.config))
    host = host_info()
    if gpuctx is not None:
        host["gpu"] = gpuctx.info.to_json()
    now = art.utc_iso()
    return {
        "schema_version": art.SCHEMA_VERSION, "kind": "kitctl-artifact", "benchmark": benchmark,
        "run_id": run_id, "state": "running", "created_utc": now, "updated_utc": now, "finished_utc": None,
        "kit": kit_info(), "argv": sys.argv, "host": host, "runtime": {"name": rt.name},
        "configuration": config.to_json(), "budget": gpuctx.budget.to_json() if gpuctx else None,
        "engines": {e.name: {"label": e.label, "mode": e.mode, "framework_cap": e.framework_cap,
                             "provenance": {}, "versions": None} for e in engines},
        "results": [],
    }
