"""Shared fixtures: a real Docker daemon and the pytorch image built the way CI builds it.

Without a daemon the Docker tests skip with the reason; under CI=true they fail instead: CI
must always run them (.ci/docker-up.sh prepares the daemon, base image and wheels).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
try:
    import kitctl  # noqa: F401
except ImportError:  # not installed: use the checkout
    sys.path.insert(0, str(ROOT / "host"))

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BASE_IMAGE = os.environ.get("KITCTL_CI_BASE", "kitctl-ci-base:bookworm")
VARIANT = "cpu-ci"
BUILD_TIMEOUT_S = 900
# Small enough that ResNet-50's weights, gradients and Adam state (~380 MiB) cannot fit, large
# enough that the trial starts (python + numpy + torch import to ~220 MiB) and dies in the step.
OOM_LIMIT_MIB = int(os.environ.get("KITCTL_TEST_OOM_LIMIT_MIB", "400"))


def remove_containers(containers) -> None:
    """Force-remove test containers in a finally block; one already gone is fine."""
    import docker

    for c in containers:
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: the Docker tests must run; see .ci/docker-up.sh)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def client():
    docker = pytest.importorskip("docker")
    try:
        c = docker.from_env(timeout=BUILD_TIMEOUT_S)
        c.ping()
    except Exception as exc:  # noqa: BLE001
        _unavailable(f"no Docker daemon answers ({type(exc).__name__}): run .ci/docker-up.sh as root")
    yield c
    c.close()


def _build_ci_image(client, service: str, wheel_glob: str) -> str:
    """Build compose.yaml's cpu-ci variant of `service` now (the layer cache keeps rebuilds quick)."""
    import docker

    from kitctl.images.compose import load_compose, provenance_build_args
    from kitctl.runtimes.docker import ImageBuildError, build_image

    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        _unavailable(f"base image {BASE_IMAGE} is absent: run .ci/docker-up.sh")
    wheels = ROOT / "images" / service / "wheels"
    if not list(wheels.glob(wheel_glob)):
        _unavailable(f"{wheels.relative_to(ROOT)}/ has no {wheel_glob}: run images/{service}/fetch-cpu-wheels.sh")
    spec = load_compose(ROOT / "compose.yaml").build_spec(
        service, variant=VARIANT, overrides={"BASE_IMAGE": BASE_IMAGE, **provenance_build_args(ROOT)})
    try:
        previous = client.images.get(spec.image).id
    except docker.errors.ImageNotFound:
        previous = None
    t0 = time.monotonic()
    try:
        new_id = build_image(client, spec)
    except ImageBuildError as exc:
        pytest.fail(f"{exc}\n{exc.log_tail}", pytrace=False)
    if previous and previous != new_id:  # BUILD_DATE re-labels it: drop the superseded one
        try:
            client.images.remove(previous)
        except docker.errors.APIError:
            pass
    print(f"\n[docker tests] built {spec.image} in {time.monotonic() - t0:.1f} s")
    return spec.image


@pytest.fixture(scope="session")
def image(client) -> str:
    """kitctl/pytorch:ci: images/pytorch/Dockerfile FROM the local base, torch +cpu from its wheels."""
    return _build_ci_image(client, "pytorch", "torch-*+cpu-*.whl")


@pytest.fixture(scope="session")
def tf_image(client) -> str:
    """kitctl/tensorflow:ci: images/tensorflow/Dockerfile FROM the local base, tensorflow-cpu from its wheels."""
    return _build_ci_image(client, "tensorflow", "tensorflow_cpu-*.whl")


@pytest.fixture(scope="session")
def jax_image(client) -> str:
    """kitctl/jax:ci: images/jax/Dockerfile FROM the local base, jax CPU from its wheels."""
    return _build_ci_image(client, "jax", "jaxlib-*.whl")
