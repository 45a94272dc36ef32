"""The loader images (compose.yaml's loader-<name> services): which build `--image-tag` runs, which loaders it
serves, the artifact's runtime record of a docker run, and how a GPU loader's container gets the GPU."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ...core.gpu import detect_gpu
from ...errors import Fail
from .loaders import FORMAT_IMAGE, GPU_LOADERS, LOADER_FORMAT


@dataclass(frozen=True)
class LoaderBuild:
    """The build of one loader image (compose service loader-<name>) that `--image-tag` picks: its variant (None:
    the default build), image name and the loaders it serves (None: a tag compose.yaml does not name, whose image's
    kit.loaders label is all that says what it serves; docker_runtime checks it)."""
    name: str
    service: str
    variant: str | None
    image: str
    loaders: tuple[str, ...] | None

    def describe(self) -> str:
        which = "the default (CUDA) build" if self.variant is None else f"the {self.variant} build"
        return f"{self.image}, {which} of {self.service}"


def _compose(compose: Any = None) -> Any:
    return compose if compose is not None else _default_compose()


@functools.lru_cache(maxsize=1)
def _default_compose() -> Any:
    """compose.yaml, read once per process: every trial run asks which image it runs in."""
    from ...images.compose import ComposeError, load_compose

    try:
        return load_compose()
    except ComposeError as exc:
        raise Fail(str(exc)) from None


def _tag(image: str) -> str:
    from ...images.store import split_tag

    return split_tag(image)[1]


def loader_builds(tag: str, compose: Any = None) -> dict[str, LoaderBuild]:
    """Per loader image (torch, ffcv, dali) the build `--image-tag tag` runs: the build (default or variant) of its
    compose service whose image has that tag; a service without one, when other loader images have it (loader-ffcv
    has no CUDA build), its default build; a tag no build has, kitctl/loader-<name>:<tag> (a retagged image)."""
    c = _compose(compose)
    services = {n[len("loader-"):]: s for n, s in c.services.items() if n.startswith("loader-") and s.loaders}
    builds = {name: [None, *s.variants] for name, s in services.items()}
    known = any(_tag(c.image(s.name, v)) == tag for name, s in services.items() for v in builds[name])
    out = {}
    for name, s in services.items():
        match = [v for v in builds[name] if _tag(c.image(s.name, v)) == tag]
        if match or known:
            v = match[0] if match else None
            out[name] = LoaderBuild(name, s.name, v, c.image(s.name, v), c.loaders(s.name, v))
        else:
            out[name] = LoaderBuild(name, s.name, None, f"kitctl/loader-{name}:{tag}", None)
    return out


def loader_image(name: str, tag: str) -> str:
    """The image of loader image `name` (torch, ffcv, dali) that `--image-tag tag` runs."""
    try:
        return loader_builds(tag)[name].image
    except KeyError:
        raise Fail(f"compose.yaml has no service loader-{name}") from None


def serving_builds(loaders: tuple[str, ...] | list[str], tag: str, compose: Any = None) -> dict[str, LoaderBuild]:
    """loader → the build that runs it under `--image-tag tag`; a loader that build does not serve (a GPU loader
    and a CPU build) is refused here, in one line naming the build that would serve it, before anything runs."""
    c = _compose(compose)
    picked = loader_builds(tag, c)
    out, refused = {}, []
    for ld in loaders:
        owner = next((b for b in picked.values()
                      if any(ld in c.loaders(b.service, v) for v in [None, *c.service(b.service).variants])), None)
        if owner is None:
            refused.append(f"{ld}: no loader image serves it")
            continue
        if owner.loaders is None or ld in owner.loaders:
            out[ld] = owner
            continue
        svc = c.service(owner.service)
        others = [v for v in [None, *svc.variants] if ld in c.loaders(svc.name, v)]
        alt = " or ".join(f"--image-tag {_tag(c.image(svc.name, v))}" for v in others)
        gpu = " (it decodes on the GPU)" if ld in GPU_LOADERS else ""
        refused.append(f"{ld}{gpu} is not in {owner.describe()}, which serves {', '.join(owner.loaders)}; "
                       f"use {alt}")
    if refused:
        raise Fail("--runtime docker: " + "; ".join(refused) + "; or --runtime local")
    return out


def docker_runtime(images: dict[str, str], writers: dict[str, str] | None = None) -> dict[str, Any]:
    """The artifact's runtime record for a docker run: which image ran each loader (and wrote each format),
    and each image's id and repo digests; an absent image or a silent daemon is refused here, before any run."""
    from ...runtimes.docker import RuntimeUnavailable, docker_client, image_provenance

    try:
        client = docker_client(timeout=30)
        try:
            prov = {im: image_provenance(client, im) for im in dict.fromkeys([*images.values(),
                                                                              *(writers or {}).values()])}
        finally:
            client.close()
    except RuntimeUnavailable as exc:
        raise Fail(f"--runtime docker: {exc}") from None
    for ld, im in images.items():  # the image itself says what it serves (kit.loaders, compose's list at its build)
        served = (prov[im].get("labels") or {}).get("kit.loaders")
        if ld in LOADER_FORMAT and served is not None and ld not in served.split(","):
            raise Fail(f"--runtime docker: image {im} does not serve {ld}: its kit.loaders label says {served}")
    out: dict[str, Any] = {"name": "docker", "images": images}
    if writers is not None:
        out["writers"] = writers
    out["image_ids"] = {im: {"id": p["id"], "repo_digests": p["repo_digests"]} for im, p in prov.items()}
    return out


def loader_runtime(cfg: Any) -> dict[str, Any]:
    """The runtime record of a loader benchmark's config (dataload, train-e2e: `runtime`, `python`, `loaders`,
    `image(loader)`, `datasets()`, `image_tag`): the interpreter, or each loader's and each format writer's image."""
    if cfg.runtime != "docker":
        return {"name": "local", "interpreter": cfg.python}
    rec = docker_runtime({ld: cfg.image(ld) for ld in cfg.loaders},
                         {f: loader_image(FORMAT_IMAGE[f], cfg.image_tag) for f, _, _ in cfg.datasets()})
    gpu_loaders = [ld for ld in cfg.loaders if ld in GPU_LOADERS]
    if gpu_loaders:
        rec.update(gpu_attach(cfg.image(gpu_loaders[0]), gpu_loaders))
    return rec


def gpu_attach(image: str, loaders: list[str], gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """How a GPU loader's container gets the GPU (runtime.gpu_request, as the engines' Docker runtime records it):
    the request the daemon honours, probed once with a throw-away container of the loader's image on the GPU the
    trials use (`gpu`: detect_gpu's). No GPU, or a daemon that attaches none: one line, before anything runs."""
    from ...runtimes.docker import RuntimeUnavailable, docker_client, probe_gpu_request

    gpu = gpu if gpu is not None else detect_gpu()
    if gpu is None:
        raise Fail(f"--runtime docker: {', '.join(loaders)} decode on the GPU, and NVML finds no GPU on this host; "
                   "leave them out, or run where there is one")
    try:
        client = docker_client(timeout=30)
        try:
            probe = probe_gpu_request(client, image, gpu["uuid"])
        finally:
            client.close()
    except RuntimeUnavailable as exc:
        raise Fail(f"--runtime docker: {exc}") from None
    if not probe.ok:
        raise Fail(f"--runtime docker: {', '.join(loaders)}: {probe.refusal()}")
    return {"gpu_request": probe.request.kind, "gpu_device_id": probe.request.device_id}
