"""The data trial (trials/dataload/trial.py) as units of work of the one runtime interface (runtimes/): each
dataset write and each loader run is a `TrialSpec` that the run's `LocalRuntime` (a fresh process group of its own,
killed whole on a deadline or a signal, dying with kitctl, recorded in the run-state folder) or `DockerRuntime` (a
fresh container of the loader's or writer's image) executes, as the engine candidates are; its result line read
into a TrialRun."""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.outcome import KilledBy
from ...core.paths import kit_root
from ...core.protocol import result_line
from ...runtimes.base import RawRun, Runtime
from ...runtimes.spec import Mount, ReadLimit, Record, TrialSpec
from .images import loader_image
from .loaders import FORMAT_IMAGE
from .throttle import ReadCap


STDERR_TAIL = 4000


def trial_path() -> Path:
    return kit_root() / "trials" / "dataload" / "trial.py"


@dataclass(frozen=True)
class TrialRun:
    status: str  # the trial's status, or timeout / crash / interrupted (the host's)
    result: dict[str, Any] | None
    exit_code: int | None
    elapsed_s: float
    error: str | None
    stderr_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "exit_code": self.exit_code, "elapsed_s": self.elapsed_s,
                "error": self.error, "stderr_tail": self.stderr_tail}


def _exit_text(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"{rc} ({signal.Signals(-rc).name})"
        except ValueError:
            pass
    return str(rc)


def trial_outcome(out: str, errs: str, rc: int | None, elapsed: float) -> TrialRun:
    """A finished trial process (local or in a container) from its stdout, stderr and exit status."""
    tail = errs[-STDERR_TAIL:]
    line = result_line(out)
    if line is None:
        return TrialRun("crash", None, rc, elapsed, f"no result line (exit {_exit_text(rc)})", tail)
    try:
        result = json.loads(line)
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return TrialRun("crash", None, rc, elapsed, "a malformed result line", tail)
    status = result.get("status") or "error"
    if status != "ok":
        return TrialRun(status, result, rc, elapsed, result.get("error") or f"status {status} (exit {_exit_text(rc)})",
                        tail)
    if rc != 0:  # a figure from a process that then died is not kept: its end may have been part of the run
        last = tail.strip().splitlines()[-1:] or ["(no stderr)"]
        return TrialRun("error", result, rc, elapsed,
                        f"the trial printed its result, then exited {_exit_text(rc)}: {last[0][:200]}", tail)
    return TrialRun("ok", result, rc, elapsed, None, tail)
def run_outcome(raw: RawRun, timeout_s: float) -> TrialRun:
    """What a runtime saw of a data trial, as a TrialRun: the kit's deadline kill is a timeout, else the result."""
    if raw.killed_by is KilledBy.KIT_DEADLINE:
        return TrialRun("timeout", None, None, raw.elapsed_s, f"killed by the kit after {timeout_s:g} s",
                        raw.stderr[-STDERR_TAIL:])
    rc = raw.exit_code if raw.signal is None else -raw.signal
    return trial_outcome(raw.stdout, raw.stderr, rc, raw.elapsed_s)


CONTAINER_DATA, CONTAINER_CORPUS, CONTAINER_OUT = "/data", "/corpus", "/out"


@dataclass(frozen=True)
class Where:
    """Where a data benchmark's trials run: `local` (a fresh process of `python`) or `docker` (a fresh container
    of the loader's or the writer's image, tag `image_tag`), under the run's id (its containers' label)."""
    runtime: str
    python: str
    image_tag: str
    run_id: str
    read_cap: ReadCap | None = None  # docker: the loaders' reads of a dataset capped (dataload --read-mbps)
    gpu_uuid: str | None = None  # the recorded GPU (host.gpu), the only one the trials' CUDA sees
    gpu_request: str | None = None  # docker: how a GPU loader's container gets it (runtime.gpu_request)

    @classmethod
    def of(cls, cfg: Any, doc: dict[str, Any], read_cap: ReadCap | None = None) -> Where:
        """Where a loader benchmark's config runs its trials, on the GPU its artifact recorded (if any)."""
        return cls(cfg.runtime, cfg.python, cfg.image_tag, doc["run_id"], read_cap,
                   ((doc.get("host") or {}).get("gpu") or {}).get("uuid"),
                   (doc.get("runtime") or {}).get("gpu_request"))

    def execute(self, spec: TrialSpec, timeout_s: float) -> TrialRun:
        """One data trial, fresh, through the run's runtime."""
        raw = runtime_of(self).execute(spec, timeout_s=timeout_s)
        return run_outcome(raw, timeout_s)


_RUNTIMES: dict[Where, Runtime] = {}  # one runtime per run and place: one run-state file, one Docker client


def runtime_of(where: Where) -> Runtime:
    """The runtime `where` runs its trials in, made once per run (the local one keeps the run's live trials in
    one run-state file; the Docker one its client)."""
    rt = _RUNTIMES.get(where)
    if rt is None:
        if where.runtime == "docker":
            from ...runtimes.docker import DockerRuntime

            rt = DockerRuntime("", run_id=where.run_id, gpu_uuid=where.gpu_uuid,
                               gpu_request=where.gpu_request or "auto")
        else:
            from ...runtimes.local import LocalRuntime

            rt = LocalRuntime(gpu_uuid=where.gpu_uuid, python=where.python, run_id=where.run_id)
        _RUNTIMES[where] = rt
    return rt


def close_runtimes(run_id: str) -> None:
    """At the end of a run (complete, interrupted or failed): its runtimes closed — the run-state file gone, any
    container of the run removed."""
    for where in [w for w in _RUNTIMES if w.run_id == run_id]:
        _RUNTIMES.pop(where).close()


def _spec(where: Where, image: str, argv: list[str], what: str, *, mounts: tuple[Mount, ...] = (),
          user: str | None = None, gpu: bool = False, read_limit: bool = False, benchmark: str,
          cpus: tuple[int, ...] = ()) -> TrialSpec:
    """A data trial as a unit of work. Locally: `python trial.py argv` with CUDA limited to the recorded GPU (if
    any). In a container of `image`: the mounts, `user`, the GPU attached only for a GPU loader with a recorded
    request, reads capped by `read_cap` when asked."""
    # The local runtime runs `program` and ignores the container's parts (image, mounts, user, read caps).
    if where.runtime == "docker":
        device = "cuda" if gpu and where.gpu_request else None
    else:
        device = "cuda" if where.gpu_uuid else None
    caps = (ReadLimit(where.read_cap.device, where.read_cap.bytes_per_s),) if read_limit and where.read_cap else ()
    return TrialSpec(program=(where.python, str(trial_path())), argv=tuple(argv), image=image, mounts=mounts,
                     device=device, user=user, read_limits=caps, labels=(("kit.benchmark", benchmark),),
                     record=Record(what=what), cpus=cpus)


def _caller() -> str:
    return f"{os.getuid()}:{os.getgid()}"


def write_dataset(where: Where, benchmark: str, corpus: str, out: Path, fmt: str, enc: str, side: int,
                  limit: int | None, timeout_s: float, keep: bool, workers: int | None = None) -> TrialRun:
    """`trial.py datasize`: one dataset written at `out`, in a local process or in the format's writer image (the
    corpus read-only at /corpus, out's folder writable at /out, run as the caller so what it writes is the
    caller's)."""
    flags = ["--format", fmt, "--encoding", enc, "--side", str(side)]
    if limit:
        flags += ["--limit", str(limit)]
    if workers:
        flags += ["--workers", str(workers)]
    if keep:
        flags += ["--keep"]
    mounts: tuple[Mount, ...] = ()
    image = ""
    if where.runtime == "docker":
        out.parent.mkdir(parents=True, exist_ok=True)  # a bind mount's source must exist
        mounts = (Mount(str(Path(corpus).resolve()), CONTAINER_CORPUS),
                  Mount(str(out.parent.resolve()), CONTAINER_OUT, read_only=False))
        image = loader_image(FORMAT_IMAGE[fmt], where.image_tag)
        corpus, out = str(Path(corpus).resolve()), out.parent.resolve() / out.name
    spec = _spec(where, image, ["datasize", "--corpus", corpus, "--out", str(out), *flags],
                 f"{benchmark}: writing {out.name}", mounts=mounts, user=_caller(), benchmark=benchmark)
    return where.execute(spec, timeout_s)


def run_on_dataset(where: Where, benchmark: str, image: str | None, argv: list[str], dataset: Path | None,
                   timeout_s: float, gpu: bool = False, cpus: tuple[int, ...] = ()) -> TrialRun:
    """One trial run reading `dataset` (given as `--dataset`; None: none): a fresh local process, or a fresh
    container of `image` with the dataset mounted read-only at /data (`gpu`: and the run's GPU attached), run as
    the dataset's owner (a cold source needs it: DONTNEED evicts only for the owner), its reads capped by the
    run's read cap; held to `cpus` when given."""
    mounts: tuple[Mount, ...] = ()
    user = None
    if where.runtime == "docker":
        assert image is not None, "a docker run names its image"
        if dataset is not None:
            dataset = dataset.resolve()
            mounts = (Mount(str(dataset), CONTAINER_DATA),)
            st = dataset.stat()
            user = f"{st.st_uid}:{st.st_gid}"
        else:
            user = _caller()
    spec = _spec(where, image or "", [*argv, *(["--dataset", str(dataset)] if dataset else [])],
                 f"{benchmark}: {' '.join(argv[:3])}", mounts=mounts, user=user, gpu=gpu,
                 read_limit=dataset is not None, benchmark=benchmark, cpus=cpus)
    return where.execute(spec, timeout_s)
