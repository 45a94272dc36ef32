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
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.outcome import KilledBy, MemoryPeaks, TrialOutcome
from ..core.protocol import TrialRequest
from ..core.watch import Watcher
from .base import RawRun, Runtime, RuntimeUnavailable, Stopwatch, classify
from .processes import pid_alive as _pid_alive, process_start as _process_start

try:  # the SDK is a dependency of kitctl, but `--runtime local` must work without it
    import docker
    import docker.errors
    import docker.types
    import requests.exceptions
except ImportError:  # pragma: no cover - exercised only on hosts without the SDK
    docker = None  # type: ignore[assignment]

# Labels every kit container carries (results/README.md).
LABEL_RUN_ID = "kit.run-id"
LABEL_OWNER_PID = "kit.owner-pid"
LABEL_OWNER_START = "kit.owner-start"  # the owner's start time: a reused PID is not the owner
LABEL_HOST = "kit.host"
LABEL_ENGINE = "kit.engine"
LABEL_BATCH = "kit.batch"
LABEL_PRECISION = "kit.precision"

DATA_MOUNT = "/data"
DEFAULT_SHM = "1g"  # torch's DataLoader/shared tensors outgrow Docker's 64 MiB /dev/shm
KILL_WAIT_S = 30.0  # how long to wait for a killed container to be reported exited

# The two ways a Docker daemon hands out an NVIDIA GPU (`--gpu-request`), and how to enable each.
GPU_REQUEST_KINDS = ("toolkit", "cdi")
CDI_GPU_KIND = "nvidia.com/gpu"  # the CDI device kind `nvidia-ctk cdi generate` writes
FIX_TOOLKIT = ("install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker` "
               "and restart Docker")
FIX_CDI = ("generate a CDI spec with `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (Docker < 28.2 also "
           "needs the cdi feature: daemon.json {\"features\": {\"cdi\": true}}) and restart Docker")
NO_NVIDIA_RUNTIME = (
    f"the Docker daemon cannot attach a GPU: {FIX_TOOLKIT}; or {FIX_CDI}; or use --runtime local / --device cpu"
)
# Daemon errors that mean "this GPU request is not supported here", not "the trial failed".
_NO_DRIVER_MARKERS = ("could not select device driver", "nvidia-container-cli", "unknown or invalid runtime name: nvidia",
                      "CDI device", "unresolvable CDI", "CDI spec")

ImageSpec = str | Mapping[str, str] | Callable[[str], str]


# ---- the daemon ------------------------------------------------------------------------------

def _require_sdk() -> None:
    if docker is None:
        raise RuntimeUnavailable("the Docker SDK for Python is not installed (pip install docker), "
                                 "or use --runtime local")


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return " ".join(str(text).split())


def _daemon_down(exc: BaseException) -> RuntimeUnavailable:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    text = _one_line(exc)
    # requests' connection errors nest the useful part deep inside: keep just that.
    m = re.search(r"(Connection refused|No such file or directory|Permission denied|timed out)", text)
    reason = m.group(1) if m else _short(exc, 120)
    return RuntimeUnavailable(
        f"the Docker daemon does not answer at {host} ({reason}): start it "
        f"(e.g. sudo systemctl start docker) or use --runtime local")


def _short(exc: BaseException, limit: int = 300) -> str:
    text = _one_line(exc)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- how a container gets the GPU ------------------------------------------------------------

@dataclass(frozen=True)
class GpuRequest:
    """One way of asking the daemon for the GPU (docs/method.md, "Runtimes").

    `toolkit`: `DeviceRequest(device_ids=[UUID], capabilities=[["gpu"]])`, what `docker run --gpus`
    sends; the NVIDIA Container Toolkit's hook serves it. `cdi`: `DeviceRequest(driver="cdi",
    device_ids=["nvidia.com/gpu=UUID"])`, served by the daemon itself from a CDI spec (Docker >= 25
    with the cdi feature, on by default from 28.2; Podman >= 5.4). Without a UUID: any one GPU
    (toolkit, count=1) or every GPU the spec names (CDI, `=all`); kitctl run always names one.
    """

    kind: str  # one of GPU_REQUEST_KINDS
    gpu_uuid: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in GPU_REQUEST_KINDS:
            raise ValueError(f"GPU request kind must be one of {', '.join(GPU_REQUEST_KINDS)}, not {self.kind!r}")

    @property
    def device_id(self) -> str | None:
        if self.kind == "cdi":
            return f"{CDI_GPU_KIND}={self.gpu_uuid or 'all'}"
        return self.gpu_uuid

    def device_request(self) -> Any:
        if self.kind == "cdi":
            return docker.types.DeviceRequest(driver="cdi", device_ids=[self.device_id])
        if self.gpu_uuid:
            return docker.types.DeviceRequest(device_ids=[self.gpu_uuid], capabilities=[["gpu"]])
        return docker.types.DeviceRequest(count=1, capabilities=[["gpu"]])

    def describe(self) -> str:
        how = "the NVIDIA Container Toolkit" if self.kind == "toolkit" else "CDI"
        return f"{how} ({self.device_id or 'any one GPU'})"

    def refused(self, daemon_error: str) -> str:
        """One line: the daemon's own error for this request, and how to make this kind work."""
        fix = FIX_TOOLKIT if self.kind == "toolkit" else FIX_CDI
        other = "cdi" if self.kind == "toolkit" else "toolkit"
        return (f"the Docker daemon cannot attach the GPU through {self.describe()}: {daemon_error}; "
                f"to fix: {fix}; or try --gpu-request {other}, or use --runtime local")

    def to_json(self) -> dict[str, Any]:
        return {"gpu_request": self.kind, "gpu_device_id": self.device_id}


@dataclass(frozen=True)
class GpuProbe:
    """What the throw-away probe containers said: the request that works (or None) and every try."""

    request: GpuRequest | None
    tried: tuple[tuple[GpuRequest, str | None], ...]  # (request, None when it worked else the daemon's line)

    @property
    def ok(self) -> bool:
        return self.request is not None

    def refusal(self) -> str:
        """One line for a daemon that attached the GPU by none of the requests tried."""
        failed = [(r, why) for r, why in self.tried if why is not None]
        if len(failed) == 1:
            return failed[0][0].refused(failed[0][1] or "")
        tried = "; ".join(f"{r.describe()}: {why}" for r, why in failed)
        return (f"the Docker daemon cannot attach a GPU — {tried}; to fix: {FIX_TOOLKIT}; or {FIX_CDI}; "
                f"or use --runtime local / --device cpu")


def gpu_request_order(client: Any) -> tuple[str, ...]:
    """The kinds `--gpu-request auto` tries, most likely first, from `docker info`.

    CDI first only where the daemon lists CDI spec dirs (Docker >= 25 with the cdi feature on)
    and no `nvidia` runtime (the toolkit's `runtime configure`); else the toolkit first, as
    kitctl always did. Both are tried either way: info only orders them.
    """
    try:
        info = client.info() or {}
    except Exception:  # noqa: BLE001  a daemon that answers ping but not info: both, in the old order
        info = {}
    has_toolkit = "nvidia" in (info.get("Runtimes") or {})
    has_cdi = bool(info.get("CDISpecDirs"))
    return ("cdi", "toolkit") if has_cdi and not has_toolkit else ("toolkit", "cdi")


def docker_client(timeout: float = 60.0) -> Any:
    """A client for the daemon in the environment (DOCKER_HOST…); RuntimeUnavailable if it does not answer."""
    _require_sdk()
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:  # DockerException, requests errors, OSError
        raise _daemon_down(exc) from None
    return client


def daemon_available(client: Any = None) -> bool:
    """Does a Docker daemon answer? (`--runtime auto`, `kitctl doctor`)."""
    if docker is None:
        return False
    try:
        if client is None:
            client = docker.from_env(timeout=5)
        return bool(client.ping())
    except Exception:
        return False


def image_exists(image: str, client: Any = None) -> bool:
    """Is the image present in the daemon's store? False when no daemon answers."""
    if docker is None:
        return False
    try:
        if client is None:
            client = docker.from_env(timeout=10)
        client.images.get(image)
        return True
    except Exception:
        return False


def image_provenance(client: Any, image: str) -> dict[str, Any]:
    """What the artifact records about an engine image: id, repo digests, labels, created."""
    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise RuntimeUnavailable(f"image {image} is not present: build it with `kitctl images build` "
                                 f"or `docker compose build`") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise _daemon_down(exc) from None
    attrs = img.attrs or {}
    labels = dict((attrs.get("Config") or {}).get("Labels") or {})
    return {
        "image": image,
        "id": img.id,
        "repo_digests": list(attrs.get("RepoDigests") or []),
        "repo_tags": list(attrs.get("RepoTags") or []),
        "created": attrs.get("Created"),
        "size_bytes": attrs.get("Size"),
        "architecture": attrs.get("Architecture"),
        "labels": labels,
        "framework_version": labels.get("kit.framework.version"),
        "cuda_version": labels.get("kit.cuda.version"),
        "trial_protocol": labels.get("kit.trial-protocol"),
        # What the image is built on: e.g. "host-userland" (the GPU machine's own /usr and venv,
        # not the pinned CUDA image), with a sentence saying so; None for images without the label.
        "base": labels.get("kit.base"),
        "base_note": labels.get("kit.base.note"),
    }


class ImageBuildError(RuntimeError):
    """A build failed: one line in the message, the build log's tail in `log_tail`."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def build_image(client: Any, spec: Any, *, on_line: Callable[[str], None] | None = None,
                network_mode: str | None = None, nocache: bool = False, pull: bool = False,
                log_lines: int = 60) -> str:
    """Build one compose.yaml service (a `compose.BuildSpec`) through the SDK; return the image id.

    `on_line` gets each line of build output (a progress display); on failure an ImageBuildError
    carries the last `log_lines` lines. The classic builder is used (what the SDK speaks).
    """
    tail: list[str] = []
    image_id: str | None = None
    kwargs: dict[str, Any] = dict(buildargs=dict(spec.args),
                                  tag=spec.image, rm=True, forcerm=True, decode=True, nocache=nocache,
                                  pull=pull)
    if network_mode:
        kwargs["network_mode"] = network_mode
    try:
        context = _build_context(spec)
    except OSError as exc:
        raise ImageBuildError(f"building {spec.image} failed: its build context could not be read ({exc})", "")
    try:
        for chunk in client.api.build(fileobj=context, custom_context=True, dockerfile=spec.dockerfile, **kwargs):
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    tail.append(line)
                    del tail[:-log_lines]
                    if on_line is not None:
                        on_line(line)
            if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                msg = _build_failure(" ".join(str(chunk["error"]).split()), tail)
                raise ImageBuildError(f"building {spec.image} failed: {msg[:300]}", "\n".join(tail))
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if isinstance(exc, docker.errors.APIError):
            raise ImageBuildError(f"building {spec.image} failed: {_short(exc, 300)}", "\n".join(tail)) from None
        raise _daemon_down(exc) from None
    finally:
        context.close()
    if image_id is None:
        image_id = client.images.get(spec.image).id
    return image_id


def _build_context(spec: Any) -> Any:
    """The context tar the SDK would send for `path=`, less the other images' wheels/ folders.

    Every engine image's context is the repository root, and each Dockerfile copies only its own
    `images/<engine>/wheel[s]`. The other folders can hold several GB (a CUDA lock's wheels), which
    the daemon would receive and unpack for nothing; leaving them out changes no layer.
    """
    from docker.utils import build as sdk_build

    root = Path(spec.context)
    exclude: list[str] = []
    ignore = root / ".dockerignore"
    if ignore.is_file():  # as the SDK reads it (docker/api/build.py)
        exclude = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    own = spec.dockerfile_path.parent
    for wheels in sorted(root.glob("images/*/wheels")):
        if wheels.parent.resolve() != own:
            exclude.append(wheels.relative_to(root).as_posix())
    return sdk_build.tar(str(root), exclude=exclude, dockerfile=(spec.dockerfile, None), gzip=False)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BUILDER_LINE = re.compile(r"^(Step \d+/\d+ :| ---> |Removing intermediate container|Successfully )")


def _build_failure(msg: str, tail: list[str]) -> str:
    """A failed RUN's headline is its whole command; say instead what the step itself printed last
    (e.g. the Dockerfile's one-line check), and its exit code."""
    m = re.match(r"The command '.*' returned a non-zero code: (\d+)$", msg)
    if not m:
        return msg
    step: list[str] = []
    for line in tail:  # the failed step's output only
        step = [] if line.startswith("Step ") else [*step, line]
    # The classic builder wraps the step's stderr in ESC[91m … ESC[0m: its last line first.
    last_err = last_out = None
    in_err = False
    for line in step:
        if "\x1b[91m" in line:
            in_err = True
        text = " ".join(_ANSI.sub("", line).split())
        if text and not _BUILDER_LINE.match(text):
            if in_err:
                last_err = text
            else:
                last_out = text
        if "\x1b[0m" in line:
            in_err = False
    text = last_err or last_out
    return f"{text} (a RUN step exited {m.group(1)})" if text else msg


# ---- owners and orphans ----------------------------------------------------------------------

def _hostname() -> str:
    return socket.gethostname()


def owner_labels() -> dict[str, str]:
    pid = os.getpid()
    labels = {LABEL_OWNER_PID: str(pid), LABEL_HOST: _hostname()}
    start = _process_start(pid)
    if start:
        labels[LABEL_OWNER_START] = start
    return labels


def _remove(container: Any) -> bool:
    try:
        container.remove(force=True, v=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "already in progress" in _one_line(exc):
            return True
        raise


def _describe(container: Any) -> str:
    name = getattr(container, "name", None) or ""
    return f"{name} ({container.short_id})" if name else container.short_id


def sweep_orphans(client: Any, *, dry_run: bool = False) -> list[str]:
    """Remove kit containers of this host whose owner process is gone; return what was removed.

    Containers of other hosts (a shared daemon) are left alone: their owners cannot be checked here.
    `dry_run` removes nothing and returns what would be removed (`kitctl clean --dry-run`, doctor).
    """
    removed: list[str] = []
    me = _hostname()
    for c in client.containers.list(all=True, filters={"label": LABEL_OWNER_PID}):
        labels = c.labels or {}
        if labels.get(LABEL_HOST) != me:
            continue
        try:
            pid = int(labels.get(LABEL_OWNER_PID, ""))
        except ValueError:
            pid = -1
        if _pid_alive(pid, labels.get(LABEL_OWNER_START)):
            continue
        if dry_run:
            removed.append(_describe(c))
        elif _remove(c):
            removed.append(_describe(c))
    return removed


def remove_run_containers(client: Any, run_id: str) -> list[str]:
    """Remove every container of one run (SIGINT/SIGTERM cleanup); return what was removed."""
    removed: list[str] = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}):
        if _remove(c):
            removed.append(_describe(c))
    return removed


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
        if self._gpu_request is None:
            probe = probe_gpu_request(self.client, self.image_for(engine), self.gpu_uuid, "auto")
            if probe.request is None:
                raise RuntimeUnavailable(probe.refusal())
            self._gpu_request = probe.request
        return self._gpu_request

    def labels(self, request: TrialRequest) -> dict[str, str]:
        return {
            LABEL_RUN_ID: self.run_id,
            **owner_labels(),
            LABEL_ENGINE: request.engine,
            LABEL_BATCH: str(request.batch),
            LABEL_PRECISION: request.precision,
        }

    def create_kwargs(self, request: TrialRequest) -> dict[str, Any]:
        """Everything `containers.create` gets for one candidate (tests inspect it)."""
        data_src = self.data_dir or (str(Path(request.data_dir).resolve()) if request.data_dir else None)
        if data_src and not Path(data_src).is_dir():
            raise RuntimeUnavailable(f"data directory {data_src} does not exist (it is mounted read-only at {DATA_MOUNT})")
        env = {"PYTHONUNBUFFERED": "1"}
        if request.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU candidate never touches a GPU
        env.update(self.extra_env)
        kw: dict[str, Any] = dict(
            image=self.image_for(request.engine),
            command=request.argv(data_dir=DATA_MOUNT if data_src else None),
            name=_container_name(self.run_id, request),
            labels=self.labels(request),
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
        if data_src:
            # A Mount, not a -v bind: a missing source is an error, never a new root-owned folder.
            kw["mounts"] = [docker.types.Mount(target=DATA_MOUNT, source=data_src, type="bind", read_only=True)]
        if self.memory_limit_mib is not None:
            limit = f"{int(self.memory_limit_mib)}m"
            kw["mem_limit"] = limit
            kw["memswap_limit"] = limit  # equal: no swap, the limit is the limit
        if request.device == "cuda":  # the GPU NVML resolved, by UUID, the way this daemon takes it
            kw["device_requests"] = [self.gpu_request(request.engine).device_request()]
        return kw

    # -- one candidate --------------------------------------------------------------------------

    def _create(self, request: TrialRequest) -> Any:
        kw = self.create_kwargs(request)
        try:
            return self.client.containers.create(**kw)
        except docker.errors.ImageNotFound:
            raise RuntimeUnavailable(
                f"image {kw['image']} is not present: build it with `kitctl images build {request.engine}` "
                f"(or `docker compose build`)") from None
        except docker.errors.APIError as exc:
            if request.device == "cuda" and _is_gpu_refusal(exc):
                raise RuntimeUnavailable(self.gpu_request(request.engine).refused(_short(exc, 300))) from None
            raise RuntimeUnavailable(f"the Docker daemon refused to create the container: {_short(exc, 300)}") from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise _daemon_down(exc) from None

    def _start(self, container: Any, request: TrialRequest) -> None:
        try:
            container.start()
        except docker.errors.APIError as exc:
            if request.device == "cuda" and _is_gpu_refusal(exc):
                # The daemon's own words, one line, and the fix for the kind of request it refused.
                raise RuntimeUnavailable(self.gpu_request(request.engine).refused(_short(exc, 300))) from None
            raise RuntimeUnavailable(f"the Docker daemon could not start the container: {_short(exc, 300)}") from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
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
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
                if clock.elapsed < timeout_s - 0.05 and not _is_read_timeout(exc):
                    raise _daemon_down(exc) from None
                # a read timeout: loop, and the deadline check above kills it
        try:
            container.wait(timeout=KILL_WAIT_S)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            raise RuntimeUnavailable(f"the container did not exit {KILL_WAIT_S:.0f} s after SIGKILL "
                                     f"({_short(exc)})") from None

    def run(self, request: TrialRequest, *, timeout_s: float, watcher: Watcher | None = None) -> TrialOutcome:
        container = self._create(request)
        handle = _ContainerHandle(container)
        self.current = handle
        peaks: MemoryPeaks | None = None
        watcher_started = False
        try:
            if watcher is not None:
                watcher.prepare()
            clock = Stopwatch()
            self._start(container, request)
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
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
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
        raw = RawRun(stdout=stdout, stderr=stderr, exit_code=exit_code, signal=sig,
                     killed_by=killed_by, elapsed_s=elapsed, container_id=container.id)
        return classify(request, raw, peaks or MemoryPeaks(),
                        over_budget=bool(watcher is not None and watcher.over_budget), runtime=self.name)

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


def _is_gpu_refusal(exc: BaseException) -> bool:
    text = _one_line(exc)
    return any(m in text for m in _NO_DRIVER_MARKERS)


def _is_read_timeout(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return True
    text = _one_line(exc)
    return "Read timed out" in text or "timed out" in text


# ---- GPU probe and the CLI's entry point ----------------------------------------------------------

def _probe_one(client: Any, image: str, req: GpuRequest, timeout_s: float) -> str | None:
    """Start a throw-away container of `image` (`/bin/true`) with `req`; None if it ran, else one line."""
    labels = {LABEL_RUN_ID: "gpu-probe", **owner_labels()}
    try:
        c = client.containers.create(image, entrypoint=["/bin/true"], command=[], labels=labels,
                                     network_mode="none", device_requests=[req.device_request()], detach=True)
    except docker.errors.ImageNotFound:
        return f"image {image} is not present"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return _short(exc, 300)
    try:
        c.start()
        res = c.wait(timeout=timeout_s)
        code = res.get("StatusCode")
        return None if code == 0 else f"the GPU probe container exited with code {code}"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return _short(exc, 300)  # the daemon's own error (e.g. could not select device driver …)
    finally:
        try:
            _remove(c)
        except Exception:
            pass


def probe_gpu_request(client: Any, image: str, gpu_uuid: str | None, want: str = "auto", *,
                      timeout_s: float = 120.0, every: bool = False) -> GpuProbe:
    """Which GPU request does this daemon honour? Throw-away containers (`/bin/true`, network off,
    labelled as the kit's, removed) of `image`: `want` alone, or for "auto" both kinds in
    `gpu_request_order`, stopping at the first that works (`every`: try all, for `kitctl doctor`).
    """
    if want != "auto" and want not in GPU_REQUEST_KINDS:
        raise ValueError(f"GPU request must be auto, {' or '.join(GPU_REQUEST_KINDS)}, not {want!r}")
    kinds = gpu_request_order(client) if want == "auto" else (want,)
    tried: list[tuple[GpuRequest, str | None]] = []
    found: GpuRequest | None = None
    for kind in kinds:
        req = GpuRequest(kind, gpu_uuid)
        why = _probe_one(client, image, req, timeout_s)
        tried.append((req, why))
        if why is None and found is None:
            found = req
            if not every:
                break
    return GpuProbe(found, tuple(tried))


def probe_gpu(client: Any, image: str, gpu_uuid: str | None, *, timeout_s: float = 120.0,
              want: str = "auto") -> str | None:
    """Can this daemon start a container of `image` with the GPU attached? None if yes, else one line."""
    probe = probe_gpu_request(client, image, gpu_uuid, want, timeout_s=timeout_s)
    return None if probe.ok else probe.refusal()


def compose_images(engines: list[Any], variant: str | None = None,
                   compose_path: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """engine name → image name, from compose.yaml (the engine's service, optionally a build variant)."""
    from ..images.compose import ComposeError, load_compose

    try:
        c = load_compose(compose_path)
        out: dict[str, str] = {}
        # A variant some services lack (opennn has no CPU build for cpu-ci) leaves those on their
        # default image; a variant no service has is still refused (a typo).
        known = any(variant in s.variants for s in c.services.values())
        for e in engines:
            name = getattr(e, "name", e)
            svc = c.service_for_engine(name)
            out[name] = c.image(svc.name, None if known and variant not in svc.variants else variant)
        return out
    except ComposeError as exc:
        raise RuntimeUnavailable(str(exc)) from None


def _check_kit_labels(client: Any, images: dict[str, str]) -> None:
    """An image counts as the engine's only with the kit's labels (imagestore.engine_image_problem)."""
    from ..core.engines import ENGINES
    from ..images.store import engine_image_problem

    for engine, img in images.items():
        try:
            labels = client.images.get(img).labels
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise RuntimeUnavailable(f"cannot inspect image {img}: {_short(exc)}") from None
        service = ENGINES[engine].service if engine in ENGINES else engine
        problem = engine_image_problem(labels, service)
        if problem is not None:
            raise RuntimeUnavailable(f"image {img} (engine {engine}) is not the kit's {service} image: {problem}; "
                                     f"build it with `kitctl images build {service}`")


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
