"""Which image runs each engine (compose.yaml's, or pinned by id on a resume), checked to be the kit's."""
from __future__ import annotations

import os
from typing import Any

from ..base import RuntimeUnavailable
from .client import _short, docker, requests_exceptions

def compose_images(engines: list[Any], variant: str | None = None,
                   compose_path: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """engine name → image name, from compose.yaml (the engine's service, optionally a build variant)."""
    from ...images.compose import ComposeError, load_compose

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
    from ...core.engines import ENGINES
    from ...images.store import engine_image_problem

    for engine, img in images.items():
        try:
            labels = client.images.get(img).labels
        except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
            raise RuntimeUnavailable(f"cannot inspect image {img}: {_short(exc)}") from None
        service = ENGINES[engine].service if engine in ENGINES else engine
        problem = engine_image_problem(labels, service)
        if problem is not None:
            raise RuntimeUnavailable(f"image {img} (engine {engine}) is not the kit's {service} image: {problem}; "
                                     f"build it with `kitctl images build {service}`")
