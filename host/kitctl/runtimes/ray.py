"""`--cluster ray://HOST:PORT|auto`: cells placed on the nodes of a Ray cluster.

Ray does the placement (no home-made scheduler, no SSH): each cell is a lane whose candidates
run in one Ray actor, `NodeAgent`, created with `num_gpus=1` (plus a custom resource naming the
GPU model, for `--gpu-model`) or, with `--device cpu`, `num_cpus=1`. On its node the agent starts
every candidate through the local or Docker runtime and, on a GPU, samples it with NVML there,
so the capacity rule is the one-host rule. The search stays on the driver (a pure function of
the history, as everywhere): it sends one candidate at a time and records each answer in the
one artifact, partial after every candidate, resumable.

A node lost mid-candidate (actor, worker or node death) is recorded as a `crash` of that
candidate — never a capacity — with the node it ran on; the search's retry rule runs it again,
in a new actor that Ray places on a node still alive. The trial process dies with its agent
(the local runtime's parent-death signal), so nothing is left behind on the dead node's host.

Ray is an optional extra (`pip install "kitctl[ray]"`): imported only here, lazily, and a
missing Ray is one line.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..core.budget import Budget, make_budget
from ..core.outcome import KilledBy, Status, TrialOutcome
from ..core.protocol import TrialRequest
from ..errors import Fail
from .base import Runtime

CONNECT_CHECK_S = 5.0
GPU_MODEL_RESOURCE = "kitctl-gpu-model:"  # + the model, e.g. "kitctl-gpu-model:H200" (1 per GPU)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise Fail('--cluster needs Ray on this host: pip install "kitctl[ray]" (Ray with its default extras)') from None
    return ray


def check_form(address: str) -> None:
    if address == "auto":
        return
    try:
        u = urlparse(address)
        ok = u.scheme == "ray" and bool(u.hostname) and bool(u.port)
    except ValueError:
        ok = False
    if not ok:
        raise Fail(f"--cluster takes ray://HOST:PORT or auto (got {address!r})")


def check_address(address: str) -> None:
    """`ray://HOST:PORT` or `auto`; a ray:// address that does not answer is one line, at once
    (Ray's own client would wait 30 s and print its retries)."""
    check_form(address)
    if address == "auto":
        return
    u = urlparse(address)
    try:
        with socket.create_connection((u.hostname, u.port), timeout=CONNECT_CHECK_S):
            pass
    except OSError as exc:
        raise Fail(f"--cluster {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


def connect(address: str) -> dict[str, Any]:
    """Join the cluster as a driver; what the artifact records of it."""
    check_address(address)
    ray = _ray()
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, ignore_reinit_error=True)
    except Exception as exc:  # ConnectionError and Ray's own: one line
        line = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise Fail(f"--cluster {address}: cannot join the Ray cluster ({line})") from None
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": address, "ray_version": ray.__version__,
            "nodes": [{"node_id": n["NodeID"], "host": n.get("NodeManagerHostname"),
                       "resources": n.get("Resources", {})} for n in nodes]}


def disconnect() -> None:
    try:
        import ray
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()


@dataclass(frozen=True)
class AgentSpec:
    """What every agent needs to start candidates on its node, as the driver's flags say."""

    runtime: str  # auto | local | docker
    device: str
    run_id: str
    engines: tuple[str, ...]
    memory_limit_mib: int | None
    data_dir: str | None
    vram_limit_mib: int | None
    reserve_mib: int
    gpu_request: str = "auto"
    gpu_model: str | None = None


class NodeAgent:
    """Runs on a cluster node (as a Ray actor): one candidate per call, on this node's GPU."""

    def __init__(self, spec: AgentSpec) -> None:
        from ..core.engines import ENGINES
        from .factory import make_runtime

        ray = _ray()
        self.spec = spec
        self.where: dict[str, Any] = {"host": socket.gethostname(),
                                      "node_id": ray.get_runtime_context().get_node_id()}
        self.nvml = self.handle = None
        self.budget: Budget | None = None
        uuid = None
        if spec.device == "cuda":
            from ..core.gpu import Nvml

            # Ray sets CUDA_VISIBLE_DEVICES to the GPU it gave this actor: NVML numbers them
            # its own way, so go through the UUID (docs/method.md, "Runtimes").
            ids = ray.get_gpu_ids()
            self.nvml = Nvml()
            index, self.handle = self.nvml.resolve(str(int(ids[0])) if ids else None)
            info = self.nvml.info(index, self.handle)
            uuid = info.uuid
            self.budget = make_budget(info.total_mib, spec.vram_limit_mib, spec.reserve_mib)
            self.where.update(index=index, uuid=uuid, name=info.name)
        notes: list[str] = []
        self.rt = make_runtime(spec.runtime, [ENGINES[e] for e in spec.engines], spec.device, uuid, spec.run_id,
                               spec.memory_limit_mib, spec.data_dir, None, notes, spec.gpu_request)
        if hasattr(self.rt, "extra_env"):  # marks this run's trials (leftover checks)
            self.rt.extra_env["KITCTL_RUN_ID"] = spec.run_id

    def describe(self) -> dict[str, Any]:
        return {"where": self.where, "budget": self.budget.to_json() if self.budget else None,
                "runtime": {e: self.rt.describe(e) for e in self.spec.engines}}

    def run(self, request: TrialRequest, timeout_s: float, budget_mib: float | None) -> TrialOutcome:
        watcher = None
        if self.handle is not None:
            from ..core.sampler import NvmlSampler

            watcher = NvmlSampler(self.nvml, self.handle, budget_mib)
        return self.rt.run(request, timeout_s=timeout_s, watcher=watcher)

    def close(self) -> None:
        self.rt.close()


class _Stopped(Exception):
    pass


class RemoteGate:
    """The driver's stand-in for a lane's watcher: it only carries the budget to the node, whose
    agent builds the real NVML sampler around the candidate."""

    def __init__(self, budget_mib: float | None) -> None:
        self.budget_mib = budget_mib
        self.over_budget = False

    def prepare(self) -> None: ...

    def start(self, handle: Any) -> None: ...

    def stop(self) -> Any:
        from ..core.outcome import MemoryPeaks

        return MemoryPeaks()


class RayRuntime(Runtime):
    """One lane's runtime on the driver: its candidates go to one NodeAgent actor; a lost
    actor or node becomes a `crash` outcome and the next candidate gets a new actor."""

    def __init__(self, spec: AgentSpec, inner_name: str = "local") -> None:
        self.spec = spec
        self.name = inner_name
        self.actor: Any = None
        self.where: dict[str, Any] | None = None  # the node of the last candidate (recorded)
        self._ref: Any = None
        self._stop = threading.Event()

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"max_restarts": 0, "max_concurrency": 2}
        if self.spec.device == "cuda":
            opts["num_gpus"] = 1
            if self.spec.gpu_model:
                opts["resources"] = {GPU_MODEL_RESOURCE + self.spec.gpu_model: 1}
        else:
            opts["num_cpus"] = 1
        return opts

    def _wait(self, ref: Any) -> Any:
        """ray.get, but a stopped run does not wait on it (an actor Ray cannot place yet waits
        for a free GPU as long as it takes)."""
        ray = _ray()
        while not ray.wait([ref], timeout=0.2)[0]:
            if self._stop.is_set():
                raise _Stopped()
        return ray.get(ref)

    def _agent(self) -> Any:
        ray = _ray()
        if self.actor is None:
            cls = ray.remote(NodeAgent)
            self.actor = cls.options(**self._options()).remote(self.spec)
            self.where = self._wait(self.actor.describe.remote())["where"]
        return self.actor

    def describe_remote(self) -> dict[str, Any]:
        return self._wait(self._agent().describe.remote())

    def run(self, request: TrialRequest, *, timeout_s: float, watcher: Any = None) -> TrialOutcome:
        _ray()
        from ray import exceptions as rex

        lost = (rex.RayActorError, rex.WorkerCrashedError, rex.ObjectLostError, rex.NodeDiedError)
        t0 = time.monotonic()
        where = self.where
        try:
            actor = self._agent()
            where = self.where
            self._ref = actor.run.remote(request, timeout_s, getattr(watcher, "budget_mib", None))
            return self._wait(self._ref)
        except _Stopped:
            # The run is stopping (a signal, another lane failed): the runner records nothing of
            # this; killing the agent kills its trial (parent-death signal).
            self._drop()
            return TrialOutcome(batch=request.batch, status=Status.CRASH, killed_by=KilledBy.KIT_INTERRUPT,
                                error="interrupted", elapsed_s=time.monotonic() - t0, runtime=self.name)
        except lost as exc:
            # The node (or the agent on it) is gone: a crash of this candidate on that node,
            # never a capacity; the retry gets a fresh actor on a live node.
            self._drop()
            text = " ".join(str(exc).split())
            self.where = where
            what = ("the agent could not start on its node (is kitctl installed there?)" if "creation task" in text
                    else "the node running this candidate was lost")
            return TrialOutcome(batch=request.batch, status=Status.CRASH,
                                error=f"ray: {what} ({type(exc).__name__}: {text[:600]})",
                                elapsed_s=time.monotonic() - t0, runtime=self.name)
        finally:
            self._ref = None

    def _drop(self) -> None:
        if self.actor is not None:
            try:
                _ray().kill(self.actor, no_restart=True)
            except Exception:
                pass
        self.actor = None

    def interrupt(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self.actor is not None:
            try:
                _ray().get(self.actor.close.remote(), timeout=30)
            except Exception:
                pass
        self._drop()


def cluster_runtimes(cfg: Any, s: Any) -> tuple[list[RayRuntime], Budget | None, Any]:
    """One RayRuntime per cell (engine × precision): Ray runs as many side by side as the cluster has
    GPUs (or CPUs) for; with the cards' budget and the gate a lane waits on (None on the CPU). The
    artifact records the cluster and, per candidate, the node (and GPU) that ran it."""
    ray = _ray()
    info = connect(cfg.cluster)
    run = cfg.run
    spec = AgentSpec(runtime=s.rt.name, device=run.device, run_id=s.doc["run_id"], engines=tuple(run.engines),
                     memory_limit_mib=run.memory_limit_mib, data_dir=run.data_dir,
                     vram_limit_mib=run.vram_limit_mib, reserve_mib=run.reserve_mib,
                     gpu_request=run.gpu_request or "auto", gpu_model=cfg.gpu_model)
    need = ("GPU" if run.device == "cuda" else "CPU")
    have = ray.cluster_resources()
    if have.get(need, 0) < 1:
        raise Fail(f"--cluster {cfg.cluster}: no node offers a {need} (cluster resources: "
                   f"{', '.join(sorted(have)) or 'none'})")
    if cfg.gpu_model and have.get(GPU_MODEL_RESOURCE + cfg.gpu_model, 0) < 1:
        raise Fail(f"--gpu-model {cfg.gpu_model}: no node offers the resource {GPU_MODEL_RESOURCE + cfg.gpu_model} "
                   f"(start its workers with --resources '{{\"{GPU_MODEL_RESOURCE + cfg.gpu_model}\": N}}')")
    n = len(run.engines) * len(run.precisions)
    runtimes = [RayRuntime(spec, s.rt.name) for _ in range(n)]
    # The first agent says what a node runs: its runtime's provenance per engine (interpreter
    # or image), its GPU and budget — the driver's own runtime only records the configuration.
    first = runtimes[0].describe_remote()
    info["agent"] = first
    budget = None
    if run.device == "cuda":
        # The budget of the cluster's cards, from the first agent's node (--gpu-model keeps them alike).
        b = first["budget"]
        budget = make_budget(b["card_total_mib"], run.vram_limit_mib, run.reserve_mib)
        s.doc["budget"] = budget.to_json()
    s.doc["cluster"] = info
    return runtimes, budget, (lambda mib: RemoteGate(mib)) if budget else None
