"""The Docker daemon through the SDK: the client, the labels every kit container carries (its owner, so that
`kitctl clean` finds leftovers), an image's provenance and trial code, orphans swept."""
from __future__ import annotations

import io
import os
import re
import socket
import tarfile
from typing import Any

from ...core.provenance import CodeHash, _digest, trial_paths
from ..base import RuntimeUnavailable
from ..processes import pid_alive as _pid_alive, process_start as _process_start  # noqa: F401  (_pid_alive: the runtime's)

try:  # the SDK is a dependency of kitctl, but `--runtime local` must work without it
    import docker
    import docker.errors
    import docker.types
    import requests.exceptions
    requests_exceptions = requests.exceptions  # what the other docker modules catch (a read timeout)
except ImportError:  # pragma: no cover - exercised only on hosts without the SDK
    docker = None  # type: ignore[assignment]
    requests_exceptions = None  # type: ignore[assignment]

# Labels every kit container carries (results/README.md).
LABEL_RUN_ID = "kit.run-id"
LABEL_OWNER_PID = "kit.owner-pid"
LABEL_OWNER_START = "kit.owner-start"  # the owner's start time: a reused PID is not the owner
LABEL_HOST = "kit.host"
LABEL_ENGINE = "kit.engine"
LABEL_BATCH = "kit.batch"
LABEL_PRECISION = "kit.precision"


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


def image_trial_code(client: Any, image: str, engine: str, image_root: str = "/opt/kit") -> CodeHash | None:
    """The same hash over the trial as the engine image holds it (the kit's Dockerfiles copy
    trials/<x> and trials/common to /opt/kit/trials): what the Docker runtime runs. Read from a
    created, never started container; None when the image has no such folder (a compiled trial).
    """
    rels = trial_paths(engine)
    files: list[tuple[str, bytes]] = []
    container = client.containers.create(image, command=["true"], labels=owner_labels(), network_disabled=True)
    try:
        for rel in rels:
            try:
                stream, _ = container.get_archive(f"{image_root}/{rel}")
            except Exception as exc:  # docker.errors.NotFound: the image lacks it
                if getattr(exc, "status_code", None) == 404:
                    return None
                raise
            parent = rel.rsplit("/", 1)[0]  # the archive's names start at the folder's own name
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                for m in tar:
                    if m.isfile():
                        data = tar.extractfile(m)
                        files.append((f"{parent}/{m.name}", data.read() if data else b""))
    finally:
        container.remove(force=True)
    return _digest(rels, files)
