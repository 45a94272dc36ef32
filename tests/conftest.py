"""Shared fixtures: a real Docker daemon and the engine images built the way CI builds them, the
private CDI daemon, and the rules every test's skips follow.

No quiet skips. A prerequisite this host lacks (a daemon, a package, a tool, a file a setup
script makes) goes through `unavailable(reason)` (or `need_module`): it skips here and FAILS
under CI=true, where .ci/setup.sh has provided everything. The only skips CI may show are the
host-kind ones, through `host_lacks(kind, reason)` / `host_kind_reason`: a test that needs what
CI's kind of host (root, no GPU) is not (a GPU, a non-root user), or a test that needs root or a
GPU-less host, on a host that is not. Any other skip
under CI=true is turned into a failure here, and every run ends with one line counting the skips
and naming their reasons.

One inductor cache for the test run: the local trials' torch.compile writes its compiled kernels
under TORCHINDUCTOR_CACHE_DIR, set here once for every test and its subprocesses (unless the
environment already names one), so only the first compile of a graph is cold. The trials' own
policy is unchanged: a container compiles in its own /tmp.
"""
from __future__ import annotations

import collections
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import NoReturn

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


@pytest.fixture(autouse=True)
def _signal_handlers_as_they_were():
    """Each test starts and ends with the interpreter's own SIGINT/SIGTERM/SIGHUP handlers: a CLI
    test run in-process installs kitctl's (and ends it with further signals ignored), which would
    otherwise swallow a later test's SIGINT."""
    import signal

    from kitctl.core import signals as kit_signals

    before = {s: signal.getsignal(s) for s in kit_signals.HANDLED}
    hook = sys.unraisablehook  # install() wraps it; pytest's own is put back
    yield
    for s, h in before.items():
        if h is not None:
            signal.signal(s, h)
    sys.unraisablehook = hook
    kit_signals._depth, kit_signals._pending = 0, None
    kit_signals._stopped, kit_signals._received = False, None


def remove_containers(containers) -> None:
    """Force-remove test containers in a finally block; one already gone is fine."""
    import docker

    for c in containers:
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass


# ---- the one switch for skips -------------------------------------------------------------------

# The host kinds a test may need and CI's host is not: the only skips allowed under CI=true.
HOST_KINDS = {
    "root": "[host kind: needs root]",
    "gpu": "[host kind: needs an NVIDIA GPU]",
    "no-gpu": "[host kind: needs a host without an NVIDIA GPU]",
    "non-root": "[host kind: needs a non-root user]",
}


def unavailable(reason: str) -> NoReturn:
    """A prerequisite this host lacks: skip here, fail under CI=true (CI must run the test)."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: every prerequisite must be there; see .ci/setup.sh)", pytrace=False)
    pytest.skip(reason)


def need_module(name: str, why: str = "") -> ModuleType:
    """`import name`, or `unavailable` with the reason (pytest.importorskip through the switch)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"{name} is not installed{': ' + why if why else ''} ({exc})")


def host_kind_reason(kind: str, reason: str) -> str:
    """A skip reason tagged with its host kind (for `pytest.mark.skipif(..., reason=...)`)."""
    return f"{HOST_KINDS[kind]} {reason}"


def host_lacks(kind: str, reason: str) -> NoReturn:
    """This host is not of the kind the test needs (see HOST_KINDS): skip, in CI too."""
    pytest.skip(host_kind_reason(kind, reason))


def _skip_reason(rep) -> str:
    lr = rep.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text.removeprefix("Skipped: ")


def _untagged_skip(rep) -> bool:
    return (rep.skipped and not hasattr(rep, "wasxfail")
            and not _skip_reason(rep).startswith(tuple(HOST_KINDS.values())))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true, a skip that is not a host-kind skip is a failure (a quiet skip elsewhere)."""
    outcome = yield
    rep = outcome.get_result()
    if IN_CI and _untagged_skip(rep):
        rep.outcome = "failed"
        rep.longrepr = (f"skipped under CI=true: {_skip_reason(rep)} — CI runs every test; only host-kind "
                        "skips (tests/conftest.py HOST_KINDS) are allowed there")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at collection (a module-level importorskip)."""
    outcome = yield
    rep = outcome.get_result()
    if IN_CI and _untagged_skip(rep):
        rep.outcome = "failed"
        rep.longrepr = (f"module skipped under CI=true: {_skip_reason(rep)} — CI runs every test; only "
                        "host-kind skips (tests/conftest.py HOST_KINDS) are allowed there")


def pytest_terminal_summary(terminalreporter):
    """One line: how many tests were skipped, and why (CI's log shows it is the documented few)."""
    reps = terminalreporter.stats.get("skipped", [])
    reasons = collections.Counter(_skip_reason(r) for r in reps)
    named = "; ".join(f"{n}× {why}" for why, n in reasons.most_common())
    terminalreporter.write_line(f"skipped: {len(reps)}" + (f" ({named})" if named else ""))
    seed = terminalreporter.config.pluginmanager.has_plugin("randomly") and \
        terminalreporter.config.getoption("randomly_seed", None)
    if seed not in (None, False, "default", "last"):  # the order this run's tests ran in, to repeat it
        terminalreporter.write_line(f"test order: shuffled by pytest-randomly, --randomly-seed={seed}")


# ---- one inductor cache for the test run ---------------------------------------------------------

INDUCTOR_CACHE = Path(tempfile.gettempdir()) / f"kitctl-tests-torchinductor-{os.getuid()}"


def pytest_configure(config):
    # Set once, before any test starts a trial: every test and every subprocess (kitctl, its local trials)
    # inherits it, whatever else a test changes in its environment. Kept on the machine between runs, so a
    # graph compiled once (same torch, same shapes) is a cache hit for every later test and run.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))
    # A suite started in the background (`cmd &`, nohup) inherits SIGINT ignored, and so would every kitctl it
    # starts: the tests of what SIGINT does would then test nothing. Python's own handler, as in a terminal.
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- Docker -------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def client():
    docker = need_module("docker")
    try:
        c = docker.from_env(timeout=BUILD_TIMEOUT_S)
        c.ping()
    except Exception as exc:  # noqa: BLE001
        unavailable(f"no Docker daemon answers ({type(exc).__name__}): run .ci/docker-up.sh as root")
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
        unavailable(f"base image {BASE_IMAGE} is absent: run .ci/docker-up.sh")
    wheels = ROOT / "images" / service / "wheels"
    if not list(wheels.glob(wheel_glob)):
        unavailable(f"{wheels.relative_to(ROOT)}/ has no {wheel_glob}: run images/{service}/fetch-cpu-wheels.sh")
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


# ---- the private CDI daemon (.ci/cdi-dockerd.sh) ---------------------------------------------------

CDI_SCRIPT = ROOT / ".ci" / "cdi-dockerd.sh"


def cdi_script_value(name: str) -> str:
    """A name .ci/cdi-dockerd.sh fixes (the stand-in image, the fake GPUs, the missing node)."""
    for line in CDI_SCRIPT.read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].strip('"')
    raise AssertionError(f"{name} not in {CDI_SCRIPT}")


def cdi_host() -> str:
    return subprocess.run(["bash", str(CDI_SCRIPT), "host"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="session")
def cdi_client():
    """The private CDI daemon of .ci/cdi-dockerd.sh: started here when it is not up, stopped after."""
    docker = need_module("docker")
    if os.geteuid() != 0:
        host_lacks("root", "the CDI test daemon is a second dockerd: only root starts one")
    host = cdi_host()
    started = False
    try:
        c = docker.DockerClient(base_url=host, timeout=120)
        c.ping()
    except Exception:  # noqa: BLE001
        t0 = time.monotonic()
        p = subprocess.run(["bash", str(CDI_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            unavailable(f"the CDI test daemon did not start: {(p.stderr or p.stdout).strip()[-400:]}")
        print(f"\n[cdi daemon] started in {time.monotonic() - t0:.1f} s:\n{p.stdout.strip()}")
        started = True
        c = docker.DockerClient(base_url=host, timeout=120)
    else:
        subprocess.run(["bash", str(CDI_SCRIPT), "start"], capture_output=True, text=True, timeout=600)  # spec, image
    yield c
    c.close()
    if started:
        t0 = time.monotonic()
        subprocess.run(["bash", str(CDI_SCRIPT), "stop"], capture_output=True, text=True, timeout=120)
        print(f"\n[cdi daemon] stopped in {time.monotonic() - t0:.1f} s")


def committed_artifacts(*benchmarks: str) -> list[tuple[Path, dict]]:
    """The kitctl artifacts of these benchmarks committed under results/reference/ and tests/data/, read."""
    out = []
    for path in sorted({*(ROOT / "results" / "reference").rglob("*.json"), *(ROOT / "tests" / "data").rglob("*.json")}):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == "kitctl-artifact" and doc.get("benchmark") in benchmarks:
            out.append((path, doc))
    return out
