"""How a container gets its GPU: a `DeviceRequest` by GPU UUID, NVIDIA-toolkit style or CDI, whichever the daemon
honours (probed once with a throw-away container), and the daemon's refusal in one line."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .client import LABEL_RUN_ID, _one_line, _remove, _short, docker, owner_labels, requests_exceptions

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


def _is_gpu_refusal(exc: BaseException) -> bool:
    text = _one_line(exc)
    return any(m in text for m in _NO_DRIVER_MARKERS)


def _is_read_timeout(exc: BaseException) -> bool:
    if isinstance(exc, requests_exceptions.ReadTimeout):
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
    except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
        return _short(exc, 300)
    try:
        c.start()
        res = c.wait(timeout=timeout_s)
        code = res.get("StatusCode")
        return None if code == 0 else f"the GPU probe container exited with code {code}"
    except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
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
