"""The data trial (trials/dataload/trial.py) started as one fresh unit of work: a process group of its own (the
local runtime's way: its own session, killed whole on a deadline or a signal, dying with kitctl) or a fresh
container of the loader's or writer's image; its result line read into a TrialRun. The engines' Runtime speaks
the engines' trial protocol (TrialRequest); the data trials take other flags, so they have this small runner."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.paths import kit_root
from ...core.protocol import result_line
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


def trial_env(gpu_uuid: str | None) -> dict[str, str]:
    """A data trial's environment: with a recorded GPU, CUDA sees that one only (by UUID: NVML and CUDA number
    devices differently), so what ran on a GPU ran on the GPU the artifact names."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu_uuid:
        env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    return env


_STATES: dict[str, Any] = {}  # run id -> its RunState: one run-state file per run and controller process


def _run_state(run_id: str) -> Any:
    from ...runtimes.runstate import RunState

    return _STATES.setdefault(run_id, RunState(run_id))


def run_trial(python: str, argv: list[str], timeout_s: float, gpu_uuid: str | None = None,
              run_id: str | None = None, what: str = "") -> TrialRun:
    """One fresh trial process in its own session; the whole group is killed on timeout or signal, and the trial
    dies with kitctl (the local runtime's parent-death signal: a `kill -9` of kitctl leaves no trial running; its
    pool and loader workers die with it in turn, trials/dataload/lifeline.py). With `run_id`, the live trial is
    recorded in the run-state folder as the engine runtimes' are, so the next run's sweep and `kitctl clean` find
    its group should anything of it outlive kitctl."""
    from ...runtimes.local import _preexec

    t0 = time.monotonic()
    env = trial_env(gpu_uuid)
    proc = subprocess.Popen([python, str(trial_path()), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True, env=env,
                            preexec_fn=_preexec(None))
    state = _run_state(run_id) if run_id else None
    timed_out = False
    try:
        if state is not None:
            state.add(proc.pid, proc.pid, engine="", precision="", batch=0, what=what or " ".join(argv[:1]))
        try:
            out, errs = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, errs = proc.communicate()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    finally:
        try:  # stragglers (loader workers) die with the group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if state is not None:
            state.remove(proc.pid)
    elapsed = time.monotonic() - t0
    if timed_out:
        return TrialRun("timeout", None, None, elapsed, f"killed by the kit after {timeout_s:g} s", errs[-STDERR_TAIL:])
    return trial_outcome(out, errs, proc.returncode, elapsed)


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
CONTAINER_DATA, CONTAINER_CORPUS, CONTAINER_OUT = "/data", "/corpus", "/out"


def run_trial_docker(image: str, argv: list[str], timeout_s: float, run_id: str, benchmark: str, *,
                     data: Path | None = None, corpus: Path | None = None, out_dir: Path | None = None,
                     read_cap: ReadCap | None = None, gpu: Any = None) -> TrialRun:
    """One fresh container of the loader's image: network off, no capabilities, killed and removed at the end
    (a signal too). `data`: a dataset mounted read-only at /data, run as its owner (a cold source needs it:
    DONTNEED evicts only for the owner), its reads capped by `read_cap` when given. `corpus` + `out_dir`: a
    dataset written in the image, the corpus read-only at /corpus and out_dir writable at /out, run as the
    caller so what it writes is the caller's. `gpu`: a GpuRequest (a GPU loader), the container gets that GPU."""
    import docker

    from ...runtimes.docker import LABEL_RUN_ID, owner_labels, remove_run_containers

    volumes: dict[str, dict[str, str]] = {}
    user = f"{os.getuid()}:{os.getgid()}"
    if data is not None:
        st = data.stat()
        user = f"{st.st_uid}:{st.st_gid}"
        volumes[str(data)] = {"bind": CONTAINER_DATA, "mode": "ro"}
    if corpus is not None:
        volumes[str(corpus)] = {"bind": CONTAINER_CORPUS, "mode": "ro"}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)  # else the daemon creates it, root-owned
        volumes[str(out_dir)] = {"bind": CONTAINER_OUT, "mode": "rw"}
    caps = {"device_read_bps": [{"Path": read_cap.device, "Rate": read_cap.bytes_per_s}]} if read_cap else {}
    if gpu is not None:
        caps["device_requests"] = [gpu.device_request()]
    client = docker.from_env()
    t0 = time.monotonic()
    try:
        c = client.containers.run(image, argv, detach=True, network_mode="none", shm_size="1g", cap_drop=["ALL"],
                                  security_opt=["no-new-privileges:true"], user=user, volumes=volumes,
                                  labels={LABEL_RUN_ID: run_id, **owner_labels(), "kit.benchmark": benchmark},
                                  **caps)
    except BaseException:  # a signal between create and start: the run's one container, by its label
        remove_run_containers(client, run_id)
        client.close()
        raise
    timed_out = False
    try:
        try:
            rc = c.wait(timeout=timeout_s)["StatusCode"]
        except Exception:  # noqa: BLE001 - the SDK's read timeout: the deadline passed
            timed_out = True
            c.kill()
            rc = None
        out = c.logs(stdout=True, stderr=False).decode(errors="replace")
        errs = c.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        try:
            c.remove(force=True)
        except docker.errors.APIError:
            pass
        client.close()
    elapsed = time.monotonic() - t0
    if timed_out:
        return TrialRun("timeout", None, None, elapsed, f"killed by the kit after {timeout_s:g} s", errs[-STDERR_TAIL:])
    return trial_outcome(out, errs, rc, elapsed)


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

    def gpu(self) -> Any:
        """The GpuRequest a GPU loader's container is started with (None: no request recorded)."""
        from ...runtimes.docker import GpuRequest

        return GpuRequest(self.gpu_request, self.gpu_uuid) if self.gpu_request else None


def write_dataset(where: Where, benchmark: str, corpus: str, out: Path, fmt: str, enc: str, side: int,
                  limit: int | None, timeout_s: float, keep: bool, workers: int | None = None) -> TrialRun:
    """`trial.py datasize`: one dataset written at `out`, in a local process or in the format's writer image."""
    flags = ["--format", fmt, "--encoding", enc, "--side", str(side)]
    if limit:
        flags += ["--limit", str(limit)]
    if workers:
        flags += ["--workers", str(workers)]
    if keep:
        flags += ["--keep"]
    if where.runtime == "docker":
        return run_trial_docker(loader_image(FORMAT_IMAGE[fmt], where.image_tag),
                                ["datasize", "--corpus", CONTAINER_CORPUS, "--out", f"{CONTAINER_OUT}/{out.name}",
                                 *flags], timeout_s, where.run_id, benchmark, corpus=Path(corpus), out_dir=out.parent)
    return run_trial(where.python, ["datasize", "--corpus", corpus, "--out", str(out), *flags], timeout_s,
                     run_id=where.run_id, what=f"{benchmark}: writing {out.name}")


def run_on_dataset(where: Where, benchmark: str, image: str | None, argv: list[str], dataset: Path | None,
                   timeout_s: float, gpu: bool = False) -> TrialRun:
    """One trial run reading `dataset` (given as `--dataset`; None: none): a fresh local process, or a fresh
    container of `image` with the dataset mounted read-only at /data (`gpu`: and the run's GPU attached)."""
    if where.runtime == "docker":
        assert image is not None, "a docker run names its image"
        return run_trial_docker(image, [*argv, *(["--dataset", CONTAINER_DATA] if dataset else [])], timeout_s,
                                where.run_id, benchmark, data=dataset, read_cap=where.read_cap if dataset else None,
                                gpu=where.gpu() if gpu else None)
    return run_trial(where.python, [*argv, *(["--dataset", str(dataset)] if dataset else [])], timeout_s,
                     where.gpu_uuid, run_id=where.run_id, what=f"{benchmark}: {' '.join(argv[:3])}")
