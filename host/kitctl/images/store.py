"""The engine images as a team shares them: compose.yaml's names, the daemon's store, a registry.

The library behind `kitctl images`, `kitctl doctor` and `kitctl clean` (the commands live in
images/cli.py, doctor/ and runtimes/clean.py). Everything goes through the Docker SDK; every problem is
an `ImageError` whose message is one line.

Names: compose.yaml names each service's image (and each build variant's, e.g. CI's `cpu-ci`:
kitctl/pytorch:ci). A registry copy is REGISTRY/kitctl/<name>:<tag>; pulling tags it back to the
compose name so `kitctl run` uses it, and the daemon keeps the registry's digest in RepoDigests,
which the artifact records (DockerRuntime.describe → image_provenance).
"""
from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .compose import Compose, ComposeError, load_compose
from ..runtimes.base import RuntimeUnavailable

# Label every kit image carries (images/<engine>/Dockerfile) and the ones `list` shows.
LABEL_ENGINE = "kit.engine"
LABEL_TRIAL_PROTOCOL = "kit.trial-protocol"
LABEL_FRAMEWORK_VERSION = "kit.framework.version"
LABEL_CUDA_VERSION = "kit.cuda.version"
REGISTRY_NAMESPACE = "kitctl"
CLIENT_TIMEOUT_S = 3600  # builds and pushes stream for a long time between chunks


class ImageError(RuntimeError):
    """One line for the user (exit 2)."""


def variant_from_env() -> str | None:
    return os.environ.get("KITCTL_IMAGE_VARIANT") or None


def open_compose(path: str | os.PathLike[str] | None = None) -> Compose:
    try:
        return load_compose(path)
    except ComposeError as exc:
        raise ImageError(str(exc)) from None


def open_client(timeout: float = CLIENT_TIMEOUT_S) -> Any:
    """A Docker client that answers, or ImageError (one line)."""
    try:
        from ..runtimes.docker.client import docker_client
    except ImportError as exc:  # pragma: no cover - the SDK is a dependency
        raise ImageError(f"the Docker SDK for Python is not installed (pip install docker): {exc}") from None
    try:
        return docker_client(timeout=timeout)
    except RuntimeUnavailable as exc:
        msg = str(exc).replace(" or use --runtime local", " (see: kitctl doctor)")
        raise ImageError(msg) from None


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    text = exc if isinstance(exc, str) else (getattr(exc, "explanation", None) or str(exc) or type(exc).__name__)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- which services ---------------------------------------------------------------------------

def resolve_services(compose: Compose, names: Iterable[str] | None) -> list[str]:
    """ENGINE-or-SERVICE names → compose service names, in order, once each; none → every service.

    An engine maps to the service whose `x-kitctl.engines` lists it (engines.py's mapping is the
    fallback), so a service added to compose.yaml is usable without touching kitctl.
    """
    names = [n for n in (names or []) if n]
    if not names:
        return list(compose.services)
    out: list[str] = []
    for n in names:
        if n in compose.services:
            svc = n
        else:
            owners = [s.name for s in compose.services.values() if n in s.engines]
            if not owners:
                from ..core.engines import ENGINES

                if n in ENGINES and ENGINES[n].service in compose.services:
                    owners = [ENGINES[n].service]
            if not owners:
                engines = sorted({e for s in compose.services.values() for e in s.engines})
                raise ImageError(
                    f"{n!r} is neither a service nor an engine in {compose.path} "
                    f"(services: {', '.join(compose.services)}; engines: {', '.join(engines) or 'none'})")
            svc = owners[0]
        if svc not in out:
            out.append(svc)
    return out


def has_variant(compose: Compose, service: str, variant: str | None) -> bool:
    return variant is None or variant in compose.service(service).variants


def image_name(compose: Compose, service: str, variant: str | None) -> str:
    try:
        return compose.image(service, variant)
    except ComposeError as exc:
        raise ImageError(str(exc)) from None


# ---- what the daemon holds ----------------------------------------------------------------------

def parse_created(text: str | int | float | None) -> _dt.datetime | None:
    """Docker's RFC 3339 time with nanoseconds (or a Unix time) → an aware datetime, or None."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _dt.datetime.fromtimestamp(text, _dt.timezone.utc)
    if not text or not isinstance(text, str):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$", text.strip())
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    tz = m.group(3) or "Z"
    try:
        return _dt.datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz))
    except ValueError:
        return None


def age_seconds(created: str | int | float | None) -> float | None:
    t = parse_created(created)
    if t is None:
        return None
    return max(0.0, (_dt.datetime.now(_dt.timezone.utc) - t).total_seconds())


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def human_size(n: int | float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):  # decimal, as `docker images`
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def short_id(image_id: str | None) -> str | None:
    if not image_id:
        return None
    return image_id.split(":", 1)[-1][:12]


def image_rows(client: Any, compose: Compose, services: list[str], variant: str | None = None,
               all_variants: bool = True) -> list[dict[str, Any]]:
    """One row per service × image (the default one and each build variant's, or just `variant`).

    A row says whether the image is present and, if so, its id, repo digests, labels, framework
    and CUDA versions (from the labels), size and age; when absent, the versions compose.yaml's
    build args would give it (`expected_*`). Without a client (no daemon) every row is absent.
    """
    try:
        import docker.errors
    except ImportError:  # pragma: no cover - the SDK is a dependency
        client = None
    from ..runtimes.docker.client import image_provenance

    rows: list[dict[str, Any]] = []
    for svc_name in services:
        svc = compose.service(svc_name)
        if variant is not None:
            variants: list[str | None] = [variant] if variant in svc.variants else []
        elif all_variants:
            variants = [None, *svc.variants]
        else:
            variants = [None]
        for v in variants:
            name = compose.image(svc_name, v)
            args = compose.build_args(svc_name, variant=v)
            row: dict[str, Any] = {
                "service": svc_name, "variant": v, "engines": list(svc.engines), "image": name,
                "present": False, "id": None, "short_id": None, "repo_digests": [], "repo_tags": [],
                "framework_version": None, "cuda_version": None, "labels": {}, "size_bytes": None,
                "created": None, "age_s": None,
                "expected_framework_version": args.get("FRAMEWORK_VERSION"),
                "expected_cuda_version": args.get("CUDA_VERSION"),
                "unfit": None,  # why a present image is not the engine's (engine_image_problem)
            }
            if client is None:
                rows.append(row)
                continue
            try:
                client.images.get(name)
            except docker.errors.ImageNotFound:
                rows.append(row)
                continue
            except docker.errors.DockerException as exc:
                raise ImageError(f"the Docker daemon could not look up {name}: {one_line(exc)}") from None
            try:
                prov = image_provenance(client, name)
            except RuntimeUnavailable as exc:
                raise ImageError(str(exc)) from None
            row.update(present=True, id=prov["id"], short_id=short_id(prov["id"]),
                       repo_digests=prov["repo_digests"], repo_tags=prov["repo_tags"],
                       framework_version=prov["framework_version"], cuda_version=prov["cuda_version"],
                       labels=prov["labels"], size_bytes=prov["size_bytes"], created=prov["created"],
                       age_s=age_seconds(prov["created"]), unfit=engine_image_problem(prov["labels"], svc_name))
            rows.append(row)
    return rows


# ---- registries -------------------------------------------------------------------------------

def check_registry(registry: str | None) -> str:
    if not registry:
        raise ImageError("no registry: give --registry HOST:PORT or set KITCTL_REGISTRY")
    registry = registry.strip().rstrip("/")
    if "://" in registry:
        raise ImageError(f"--registry {registry!r}: give HOST[:PORT] without a scheme (e.g. 127.0.0.1:5000)")
    if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+(/[a-z0-9._\-/]+)?", registry):
        raise ImageError(f"--registry {registry!r} is not HOST[:PORT]")
    return registry


def split_tag(name: str) -> tuple[str, str]:
    """'kitctl/pytorch:ci' → ('kitctl/pytorch', 'ci'); no tag → 'latest'. A digest is refused."""
    if "@" in name:
        raise ImageError(f"image {name} is named by digest; compose.yaml should name it by tag")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1:]
    return name, "latest"


def remote_repo(local_name: str, registry: str) -> tuple[str, str]:
    """The registry copy of a compose image: (REGISTRY/kitctl/<name>, tag)."""
    repo, tag = split_tag(local_name)
    parts = repo.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # a registry host of its own: replaced
    if parts[0] != REGISTRY_NAMESPACE:
        parts = [REGISTRY_NAMESPACE, *parts]
    return f"{registry}/{'/'.join(parts)}", tag


def _stream_error(chunk: dict[str, Any]) -> str | None:
    if "error" in chunk or "errorDetail" in chunk:
        detail = chunk.get("errorDetail") or {}
        return one_line(str(chunk.get("error") or detail.get("message") or chunk))
    return None


def _progress_line(chunk: dict[str, Any]) -> str | None:
    status = chunk.get("status")
    if not status:
        return None
    parts = [chunk.get("id") or "", status, chunk.get("progress") or ""]
    return " ".join(p for p in parts if p).strip()


@dataclass
class Transfer:
    """What a push or pull did: the compose image, its id, the registry reference and digest."""

    image: str
    id: str
    remote: str
    digest: str
    repo_digest: str
    replaced_id: str | None = None  # pull: the image the compose name pointed at before

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def push_image(client: Any, local_name: str, registry: str, *,
               on_line: Callable[[str], None] | None = None) -> Transfer:
    """Tag the compose image as REGISTRY/kitctl/<name>:<tag> and push it; return its digest."""
    import docker.errors
    import requests.exceptions

    registry = check_registry(registry)
    repo, tag = remote_repo(local_name, registry)
    try:
        img = client.images.get(local_name)
    except docker.errors.ImageNotFound:
        raise ImageError(f"image {local_name} is not present: build it with `kitctl images build` "
                         f"or pull it with `kitctl images pull`") from None
    digest: str | None = None
    tagged_here = f"{repo}:{tag}" not in (img.attrs.get("RepoTags") or [])

    def untag() -> None:  # a failed push leaves no registry tag behind that it made
        if tagged_here:
            try:
                client.images.remove(f"{repo}:{tag}")
            except Exception:  # noqa: BLE001
                pass

    try:
        img.tag(repo, tag)
        for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
            msg = _stream_error(chunk)
            if msg is not None:
                untag()
                raise ImageError(f"pushing {repo}:{tag} failed: {msg}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = aux["Digest"]
            line = _progress_line(chunk)
            if line and on_line is not None:
                on_line(line)
        img.reload()
    except docker.errors.APIError as exc:
        untag()
        raise ImageError(f"pushing {repo}:{tag} failed: {one_line(exc)}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise ImageError(f"pushing {repo}:{tag} failed: the Docker daemon stopped answering ({one_line(exc, 150)})") from None
    known = [d for d in img.attrs.get("RepoDigests") or [] if d.startswith(repo + "@")]
    if digest is None and known:
        digest = known[-1].split("@", 1)[1]
    if digest is None:
        raise ImageError(f"pushing {repo}:{tag}: the registry reported no digest")
    return Transfer(image=local_name, id=img.id, remote=f"{repo}:{tag}", digest=digest,
                    repo_digest=f"{repo}@{digest}")


def pull_image(client: Any, local_name: str, registry: str, *, digest: str | None = None,
               on_line: Callable[[str], None] | None = None) -> Transfer:
    """Pull REGISTRY/kitctl/<name>:<tag> (or @digest) and tag it back to the compose name."""
    import docker.errors
    import requests.exceptions

    registry = check_registry(registry)
    repo, tag = remote_repo(local_name, registry)
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ImageError(f"--digest {digest!r} is not sha256:<64 hex digits>")
    ref = f"{repo}@{digest}" if digest else f"{repo}:{tag}"
    try:
        before = client.images.get(local_name).id
    except docker.errors.ImageNotFound:
        before = None
    except docker.errors.DockerException as exc:
        raise ImageError(f"the Docker daemon could not look up {local_name}: {one_line(exc)}") from None
    pulled_digest: str | None = None
    try:
        for chunk in client.api.pull(repo, tag=digest or tag, stream=True, decode=True):
            msg = _stream_error(chunk)
            if msg is not None:
                raise ImageError(f"pulling {ref} failed: {msg}")
            status = str(chunk.get("status") or "")
            if status.startswith("Digest: "):
                pulled_digest = status.split(": ", 1)[1].strip()
            line = _progress_line(chunk)
            if line and on_line is not None:
                on_line(line)
        img = client.images.get(ref)
        local_repo, local_tag = split_tag(local_name)
        img.tag(local_repo, local_tag)
        img.reload()
    except docker.errors.APIError as exc:
        raise ImageError(f"pulling {ref} failed: {one_line(exc)}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise ImageError(f"pulling {ref} failed: the Docker daemon stopped answering ({one_line(exc, 150)})") from None
    known = [d for d in img.attrs.get("RepoDigests") or [] if d.startswith(repo + "@")]
    got = digest or pulled_digest or (known[-1].split("@", 1)[1] if known else None)
    if got is None:
        raise ImageError(f"pulling {ref}: the daemon recorded no digest for it")
    if digest is not None and pulled_digest is not None and pulled_digest != digest:
        raise ImageError(f"pulling {ref}: the registry served {pulled_digest}, not {digest}")
    return Transfer(image=local_name, id=img.id, remote=ref, digest=got, repo_digest=f"{repo}@{got}",
                    replaced_id=before if before and before != img.id else None)


# ---- leftovers ----------------------------------------------------------------------------------

LABEL_STAGE = "kit.stage"  # on a Dockerfile's build stage (images/*/Dockerfile): never an engine image


def engine_image_problem(labels: dict[str, str] | None, service: str) -> str | None:
    """Why an image present under a service's name is not that engine's image; None when it is.

    Only an image built from images/<service>/Dockerfile counts: its labels say `kit.engine` =
    the service and `kit.trial-protocol` = the protocol this kitctl speaks. Anything else under
    that name (a stub, another project's image, a build stage) would be run as a trial and fail
    in confusing ways, so `--runtime auto` falls back to local and doctor marks it ✗."""
    from ..core.protocol import PROTOCOL_VERSION

    labels = labels or {}
    if labels.get(LABEL_STAGE):
        return f"it is a build stage ({LABEL_STAGE}={labels[LABEL_STAGE]}), not an engine image"
    engine = labels.get(LABEL_ENGINE)
    if engine is None:
        return (f"it lacks the kit's labels ({LABEL_ENGINE}, {LABEL_TRIAL_PROTOCOL}): it was not built from "
                f"images/{service}/Dockerfile")
    if engine != service:
        return f"its label {LABEL_ENGINE}={engine} is not {service}"
    proto = labels.get(LABEL_TRIAL_PROTOCOL)
    if proto != str(PROTOCOL_VERSION):
        return (f"its label {LABEL_TRIAL_PROTOCOL}={proto} is not {PROTOCOL_VERSION} "
                f"(the trial protocol this kitctl speaks)")
    return None


def dangling_kit_images(client: Any) -> list[Any]:
    """Untagged (`<none>`) images carrying the kit.engine label: superseded builds and pulls, and
    the build stages (label kit.stage) that the Docker SDK's legacy builder leaves untagged."""
    imgs = client.images.list(filters={"dangling": True, "label": LABEL_ENGINE})
    return [i for i in imgs if not (i.attrs.get("RepoTags") or [])
            or all(t == "<none>:<none>" for t in i.attrs.get("RepoTags") or [])]


def describe_image(img: Any) -> str:
    labels = (img.attrs.get("Config") or {}).get("Labels") or {}
    created = img.attrs.get("Created")
    stage = (f", build stage {labels[LABEL_STAGE]!r}: the next build of that image redoes it"
             if labels.get(LABEL_STAGE) else "")
    return (f"{short_id(img.id)} ({LABEL_ENGINE}={labels.get(LABEL_ENGINE, '?')}, "
            f"{human_size(img.attrs.get('Size'))}, built {human_age(age_seconds(created))}{stage})")
