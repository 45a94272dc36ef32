"""The Docker runtime: each candidate is a fresh container of the engine's image (docs/method.md, "Runtimes").

Through the Docker SDK for Python (never the docker CLI). Per candidate:

* create a container of the engine image with the trial's protocol flags as its command,
  labels `kit.run-id`, `kit.owner-pid`, `kit.owner-start`, `kit.host`, `kit.engine`,
  `kit.batch`, `kit.precision`; networking off; the dataset bind-mounted read-only at /data;
  every capability dropped and no-new-privileges; a RAM limit without swap when asked
  (`--memory-limit`, the memory budget of `--device cpu`); on `--device cuda` the GPU attached
  by a `DeviceRequest` naming its UUID, in whichever of the two ways the daemon supports
  (`GpuRequest`: the NVIDIA Container Toolkit's `--gpus` style, or CDI), probed once per run;
* start it; the watcher (NVML sampler) sees the container's host PIDs through `top()` and may
  kill it; the kit's own deadline kills it (the SDK's wait timeout is only a read timeout);
* read stdout and stderr separately, then inspect `State.OOMKilled`, before removing it;
* classify with the one rule every runtime shares (`base.classify`); remove it in `finally`.

The kit records its own kills, so a container it killed (exit 137) is never read as an
OOM-kill. Orphans (kit containers whose owner process is gone) are swept by `sweep_orphans`.
"""
from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...core.outcome import KilledBy, MemoryPeaks
from ...core.protocol import TrialRequest
from ...core.watch import Watcher
from ..base import RawRun, Runtime, RuntimeUnavailable, Stopwatch
from ..spec import Mount, Record, TrialSpec
from .client import (LABEL_BATCH, LABEL_ENGINE, LABEL_PRECISION, LABEL_RUN_ID, _daemon_down, _one_line, _remove,
                     _require_sdk, _short, docker, docker_client, image_exists, image_provenance, owner_labels,
                     remove_run_containers, requests_exceptions, sweep_orphans)
from .gpu_request import GPU_REQUEST_KINDS, GpuRequest, _is_gpu_refusal, _is_read_timeout, probe_gpu_request
from .images import _check_kit_labels, compose_images

DATA_MOUNT = "/data"
DEFAULT_SHM = "1g"  # torch's DataLoader/shared tensors outgrow Docker's 64 MiB /dev/shm
KILL_WAIT_S = 30.0  # how long to wait for a killed container to be reported exited

ImageSpec = str | Mapping[str, str] | Callable[[str], str]


# ---- one running candidate -------------------------------------------------------------------

class _ContainerHandle:
    """What a watcher may do with a running container: see its host PIDs, kill it."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.killed_by = KilledBy.NONE
        self._lock = threading.Lock()

    def pids(self) -> set[int]:
        try:
            top = self.container.top(ps_args="-eo pid")
            titles = top.get("Titles") or []
            col = titles.index("PID") if "PID" in titles else 0
            return {int(row[col]) for row in top.get("Processes") or [] if str(row[col]).isdigit()}
        except Exception:
            pass
        pids = _cgroup_pids(self.container.id)
        if pids:
            return pids
        try:
            self.container.reload()
            pid = int(self.container.attrs["State"]["Pid"])
            return {pid} if pid > 0 else set()
        except Exception:
            return set()

    def kill(self, reason: KilledBy) -> None:
        with self._lock:
            if self.killed_by is KilledBy.NONE:
                self.killed_by = reason
        try:
            self.container.kill()  # SIGKILL
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: not running (already exited)
                raise


def _cgroup_pids(container_id: str) -> set[int]:
    """Fallback when `top()` fails (no ps on the daemon host): the container's cgroup."""
    candidates = [
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs",  # v2, systemd
        f"/sys/fs/cgroup/docker/{container_id}/cgroup.procs",  # v2, cgroupfs
        f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs",  # v1, cgroupfs
        f"/sys/fs/cgroup/pids/system.slice/docker-{container_id}.scope/cgroup.procs",  # v1, systemd
    ]
    for path in candidates:
        try:
            return {int(x) for x in Path(path).read_text().split()}
        except (OSError, ValueError):
            continue
    return set()


def _decode(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def _removed_while_running(container: Any) -> str:
    return (f"container {container.short_id} was removed by someone else while the candidate ran "
            f"(e.g. `docker rm -f`, `docker container prune`), so it has no result; the Docker daemon "
            f"itself answers")


def _vanished(client: Any, container: Any, exc: BaseException) -> bool:
    """Was the container removed (or is it being removed) rather than the daemon failing?"""
    text = _one_line(exc).lower()
    if any(m in text for m in ("marked for removal", "removal in progress", "no such container")):
        return True
    try:
        state = client.containers.get(container.id).attrs.get("State") or {}
    except docker.errors.NotFound:
        return True
    except Exception:
        return False
    return state.get("Status") in ("removing", "dead") or bool(state.get("Dead"))


def _container_name(run_id: str, request: TrialRequest) -> str:
    run = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:40] or "run"
    return f"kit-{run}-{request.engine}-{request.precision}-b{request.batch}-{uuid.uuid4().hex[:6]}"


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(self, image: ImageSpec, *, run_id: str, device: str = "cuda",
                 gpu_uuid: str | None = None, memory_limit_mib: int | None = None,
                 data_dir: str | None = None, client: Any = None,
                 env: Mapping[str, str] | None = None, shm_size: str = DEFAULT_SHM,
                 gpu_request: str = "auto") -> None:
        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be cuda or cpu, not {device!r}")
        if gpu_request != "auto" and gpu_request not in GPU_REQUEST_KINDS:
            raise ValueError(f"gpu_request must be auto, {' or '.join(GPU_REQUEST_KINDS)}, not {gpu_request!r}")
        self._image = image
        self.run_id = run_id
        self.device = device
        self.gpu_uuid = gpu_uuid
        # "auto": probed once, at the first GPU candidate (from_cli probes before and passes the kind).
        self._gpu_request: GpuRequest | None = (GpuRequest(gpu_request, gpu_uuid) if gpu_request != "auto"
                                                else None)
        self.memory_limit_mib = memory_limit_mib
        self.data_dir = str(Path(data_dir).resolve()) if data_dir else None
        self.extra_env = dict(env or {})
        self.shm_size = shm_size
        self._own_client = client is None
        self.client = client if client is not None else docker_client()
        self.current: _ContainerHandle | None = None  # for interrupt cleanup
        self.swept: list[str] = []  # orphans removed when this runtime was set up (from_cli)

    # -- configuration --------------------------------------------------------------------------

    def image_for(self, engine: str) -> str:
        spec = self._image
        if callable(spec):
            return spec(engine)
        if isinstance(spec, Mapping):
            try:
                return spec[engine]
            except KeyError:
                raise RuntimeUnavailable(f"no image configured for engine {engine}") from None
        return spec

    def gpu_request(self, engine: str) -> GpuRequest:
        """How this run's containers get the GPU; with "auto", probed once (engine's image)."""
        return self._gpu_for(self.image_for(engine))

    def _gpu_for(self, image: str) -> GpuRequest:
        if self._gpu_request is None:
            probe = probe_gpu_request(self.client, image, self.gpu_uuid, "auto")
            if probe.request is None:
                raise RuntimeUnavailable(probe.refusal())
            self._gpu_request = probe.request
        return self._gpu_request

    def spec(self, request: TrialRequest) -> TrialSpec:
        """An engine candidate as a unit of work: the engine's image, the protocol's flags, the dataset (if any)
        mounted read-only at /data, the labels that name the candidate."""
        data_src = self.data_dir or (str(Path(request.data_dir).resolve()) if request.data_dir else None)
        if data_src and not Path(data_src).is_dir():
            raise RuntimeUnavailable(f"data directory {data_src} does not exist (it is mounted read-only at {DATA_MOUNT})")
        return TrialSpec(program=(), argv=tuple(request.argv(data_dir=data_src)), image=self.image_for(request.engine),
                         mounts=(Mount(data_src, DATA_MOUNT),) if data_src else (), device=request.device,
                         memory_limit_mib=self.memory_limit_mib,
                         labels=((LABEL_ENGINE, request.engine), (LABEL_BATCH, str(request.batch)),
                                 (LABEL_PRECISION, request.precision)),
                         name=_container_name(self.run_id, request),
                         record=Record(engine=request.engine, precision=request.precision, batch=request.batch))

    def create_kwargs(self, request: TrialRequest) -> dict[str, Any]:
        """Everything `containers.create` gets for one engine candidate (tests inspect it)."""
        return self.container_kwargs(self.spec(request))

    def container_kwargs(self, spec: TrialSpec) -> dict[str, Any]:
        """Everything `containers.create` gets for one unit of work: networking off, every capability dropped,
        no-new-privileges, the run's labels, the mounts (a Mount, never a -v bind: a missing source is an error,
        not a new root-owned folder), a memory limit without swap, read caps, the GPU by UUID."""
        env = {"PYTHONUNBUFFERED": "1"}
        if spec.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU candidate never touches a GPU
        env.update(self.extra_env)
        env.update(spec.env_dict())
        kw: dict[str, Any] = dict(
            image=spec.image,
            command=spec.container_argv(),
            labels={LABEL_RUN_ID: self.run_id, **owner_labels(), **spec.label_dict()},
            environment=env,
            network_disabled=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            shm_size=self.shm_size,
            stdin_open=False,
            tty=False,
            detach=True,
        )
        if spec.name:
            kw["name"] = spec.name
        if spec.user:
            kw["user"] = spec.user
        if spec.mounts:
            kw["mounts"] = [docker.types.Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                            for m in spec.mounts]
        if spec.memory_limit_mib is not None:
            limit = f"{int(spec.memory_limit_mib)}m"
            kw["mem_limit"] = limit
            kw["memswap_limit"] = limit  # equal: no swap, the limit is the limit
        if spec.cpus:
            kw["cpuset_cpus"] = ",".join(map(str, spec.cpus))
        if spec.read_limits:
            kw["device_read_bps"] = [{"Path": r.device, "Rate": r.bytes_per_s} for r in spec.read_limits]
        if spec.device == "cuda":  # the GPU NVML resolved, by UUID, the way this daemon takes it
            kw["device_requests"] = [self._gpu_for(spec.image).device_request()]
        return kw

    # -- one unit of work -----------------------------------------------------------------------

    def _create(self, spec: TrialSpec) -> Any:
        kw = self.container_kwargs(spec)
        try:
            return self.client.containers.create(**kw)
        except docker.errors.ImageNotFound:
            build = f"kitctl images build {spec.record.engine}" if spec.record.engine else "kitctl images build"
            raise RuntimeUnavailable(
                f"image {kw['image']} is not present: build it with `{build}` (or `docker compose build`)") from None
        except docker.errors.APIError as exc:
            if spec.device == "cuda" and _is_gpu_refusal(exc):
                raise RuntimeUnavailable(self._gpu_for(spec.image).refused(_short(exc, 300))) from None
            raise RuntimeUnavailable(f"the Docker daemon refused to create the container: {_short(exc, 300)}") from None
        except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
            raise _daemon_down(exc) from None

    def _start(self, container: Any, spec: TrialSpec) -> None:
        try:
            container.start()
        except docker.errors.APIError as exc:
            if spec.device == "cuda" and _is_gpu_refusal(exc):
                # The daemon's own words, one line, and the fix for the kind of request it refused.
                raise RuntimeUnavailable(self._gpu_for(spec.image).refused(_short(exc, 300))) from None
            raise RuntimeUnavailable(f"the Docker daemon could not start the container: {_short(exc, 300)}") from None
        except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
            raise _daemon_down(exc) from None

    def _wait(self, handle: _ContainerHandle, clock: Stopwatch, timeout_s: float) -> None:
        """Wait for the container to exit; at the kit's deadline kill it (KIT_DEADLINE)."""
        container = handle.container
        while True:
            remaining = timeout_s - clock.elapsed
            if remaining <= 0:
                handle.kill(KilledBy.KIT_DEADLINE)
                break
            try:
                # The SDK's timeout is only the HTTP read timeout: a timeout kills nothing.
                container.wait(timeout=max(remaining, 0.05))
                return
            except (requests_exceptions.ReadTimeout, requests_exceptions.ConnectionError) as exc:
                if clock.elapsed < timeout_s - 0.05 and not _is_read_timeout(exc):
                    raise _daemon_down(exc) from None
                # a read timeout: loop, and the deadline check above kills it
        try:
            container.wait(timeout=KILL_WAIT_S)
        except (requests_exceptions.ReadTimeout, requests_exceptions.ConnectionError) as exc:
            raise RuntimeUnavailable(f"the container did not exit {KILL_WAIT_S:.0f} s after SIGKILL "
                                     f"({_short(exc)})") from None

    def execute(self, spec: TrialSpec, *, timeout_s: float, watcher: Watcher | None = None) -> RawRun:
        container = self._create(spec)
        handle = _ContainerHandle(container)
        self.current = handle
        peaks: MemoryPeaks | None = None
        watcher_started = False
        try:
            if watcher is not None:
                watcher.prepare()
            clock = Stopwatch()
            self._start(container, spec)
            if watcher is not None:
                watcher.start(handle)
                watcher_started = True
            try:
                self._wait(handle, clock, timeout_s)
            except BaseException:  # KeyboardInterrupt, SystemExit, a daemon gone mid-run
                try:
                    handle.kill(KilledBy.KIT_INTERRUPT)
                except Exception:
                    pass  # the daemon is gone too: the sweep at the next start removes it
                raise
            elapsed = clock.elapsed
            if watcher is not None:
                peaks = watcher.stop()
                watcher_started = False
            # Read everything BEFORE removal: separate streams, then the final state.
            stdout = _decode(container.logs(stdout=True, stderr=False))
            stderr = _decode(container.logs(stdout=False, stderr=True))
            container.reload()
            state = container.attrs.get("State") or {}
        except docker.errors.NotFound:
            raise RuntimeUnavailable(_removed_while_running(container)) from None
        except docker.errors.APIError as exc:
            # The daemon answered, so it is not down: either the container was removed under us
            # (`docker rm -f`: 409 "dead or marked for removal" on logs/inspect) or it refused.
            if _vanished(self.client, container, exc):
                raise RuntimeUnavailable(_removed_while_running(container)) from None
            raise RuntimeUnavailable(f"the Docker daemon refused to read container {container.short_id}: "
                                     f"{_short(exc)}") from None
        except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
            raise _daemon_down(exc) from None
        finally:
            if watcher_started:
                try:
                    watcher.stop()  # type: ignore[union-attr]
                except Exception:
                    pass
            self.current = None
            try:
                _remove(container)
            except Exception:
                pass  # swept as an orphan later; never mask the real outcome/exception

        exit_code = state.get("ExitCode")
        killed_by = handle.killed_by
        sig = None
        if killed_by is KilledBy.NONE and state.get("OOMKilled"):
            killed_by = KilledBy.KERNEL_OOM
        if isinstance(exit_code, int) and exit_code > 128:
            # Docker reports 128+N when the trial (PID 1) died of signal N; 137 is SIGKILL. With
            # no kill of the kit's and no OOM-kill, someone else sent it.
            sig = exit_code - 128
            if killed_by is KilledBy.NONE:
                killed_by = KilledBy.SIGNAL
        return RawRun(stdout=stdout, stderr=stderr, exit_code=exit_code, signal=sig, killed_by=killed_by,
                      elapsed_s=elapsed, container_id=container.id, peaks=peaks or MemoryPeaks(),
                      over_budget=bool(watcher is not None and watcher.over_budget))

    # -- the rest of the interface --------------------------------------------------------------

    def interrupt(self) -> None:
        """Kill the running candidate (SIGINT/SIGTERM); `run` then removes it and re-raises."""
        handle = self.current
        if handle is not None:
            try:
                handle.kill(KilledBy.KIT_INTERRUPT)
            except Exception:
                pass

    def slot_copy(self) -> "DockerRuntime":
        """A second slot: the same images, GPU request and limits, its own client (one HTTP session
        per thread) and its own running container."""
        rt = DockerRuntime(self._image, run_id=self.run_id, device=self.device, gpu_uuid=self.gpu_uuid,
                           memory_limit_mib=self.memory_limit_mib, data_dir=self.data_dir,
                           env=self.extra_env, shm_size=self.shm_size,
                           gpu_request=self._gpu_request.kind if self._gpu_request else "auto")
        return rt

    def cleanup(self) -> list[str]:
        """Remove every container of this run (after an interrupt)."""
        return remove_run_containers(self.client, self.run_id)

    def describe(self, engine: str) -> dict[str, Any]:
        out: dict[str, Any] = {"runtime": self.name, **image_provenance(self.client, self.image_for(engine))}
        try:
            out["docker_version"] = self.client.version().get("Version")
        except Exception:
            out["docker_version"] = None
        out["device"] = self.device
        out["gpu_uuid"] = self.gpu_uuid if self.device == "cuda" else None
        # How the GPU was attached (toolkit or CDI) and the device id the daemon got.
        out.update(self.gpu_request(engine).to_json() if self.device == "cuda"
                   else {"gpu_request": None, "gpu_device_id": None})
        out["memory_limit_mib"] = self.memory_limit_mib
        return out

    def close(self) -> None:
        # A signal between create and the `try` in `run` could leave one behind: check once.
        try:
            remove_run_containers(self.client, self.run_id)
        except Exception:
            pass
        if self._own_client:
            try:
                self.client.close()
            except Exception:
                pass


def from_cli(*, engines: list[Any], device: str, gpu_uuid: str | None, run_id: str,
             memory_limit_mib: int | None = None, data_dir: str | None = None, required: bool,
             variant: str | None = None, client: Any = None, sweep: bool = True,
             probe: bool = True, fallback: list[str] | None = None,
             gpu_request: str = "auto",
             images: Mapping[str, str] | None = None) -> "DockerRuntime | None":
    """The Docker runtime for `kitctl run`, or None where `--runtime auto` should use local.

    required (`--runtime docker`): a daemon that does not answer, an engine image that is absent
    or lacks the kit's labels (`kit.engine`, `kit.trial-protocol`: a stub or foreign image under the
    engine's name is not its image), or (on `--device cuda`) a daemon that attaches the GPU by
    neither request (`gpu_request`: auto tries the toolkit's and CDI's, once for the whole run;
    toolkit|cdi only that one) raise RuntimeUnavailable (one line, exit 2) before the run starts.
    Not required (`auto`): any of those returns None.
    Images come from compose.yaml; `variant` (or env KITCTL_IMAGE_VARIANT, e.g. `cpu-ci`) picks a
    build variant's image. Orphans of earlier runs are swept first (listed in `.swept`).
    When None is returned, `fallback` (if given) gets the one-line reason.
    `images` (engine → image id, a resume) replaces compose.yaml and the variant: a resumed run
    continues in the very images it started in, or is refused.
    """
    if docker is None:
        if required:
            _require_sdk()
        return None
    variant = variant or os.environ.get("KITCTL_IMAGE_VARIANT") or None
    own_client = client is None
    try:
        pinned = images is not None
        images = dict(images) if images is not None else compose_images(engines, variant)
        if client is None:
            client = docker_client()
        missing = [f"{img} (engine {eng})" for eng, img in images.items() if not image_exists(img, client)]
        if missing and pinned:
            raise RuntimeUnavailable(
                f"--resume: the image the run started in is no longer present: {', '.join(missing)}; a resume "
                "runs in that same image (by id): start a new run")
        if missing:
            first = next(iter(images))
            raise RuntimeUnavailable(
                f"engine image not present: {', '.join(missing)}; build it with "
                f"`kitctl images build {first}` or `docker compose build`")
        _check_kit_labels(client, images)
        if device == "cuda" and probe:
            found = probe_gpu_request(client, next(iter(images.values())), gpu_uuid, gpu_request)
            if found.request is None:
                raise RuntimeUnavailable(found.refusal())
            gpu_request = found.request.kind  # every candidate uses what the probe found
    except RuntimeUnavailable as exc:
        if own_client and client is not None:
            client.close()
        if required:
            raise
        if fallback is not None:
            fallback.append(str(exc))
        return None
    swept = sweep_orphans(client) if sweep else []
    rt = DockerRuntime(images, run_id=run_id, device=device, gpu_uuid=gpu_uuid,
                       memory_limit_mib=memory_limit_mib, data_dir=data_dir, client=client,
                       gpu_request=gpu_request)
    rt._own_client = own_client
    rt.swept = swept
    return rt
