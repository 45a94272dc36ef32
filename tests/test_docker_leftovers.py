"""Docker defects of issue 14's adversarial pass, against a real daemon with tiny stub images.

* a candidate's container removed by someone else (`docker rm -f`) is reported as that, not as
  "the Docker daemon does not answer";
* an image under an engine's name without the kit's labels (a stub) is not the engine's image:
  `--runtime auto` falls back to local with the reason, `--runtime docker` refuses in one line,
  doctor marks it ✗ with a fix;
* `clean --images` finds the untagged build-stage image a multi-stage build leaves (the Dockerfiles
  label their build stages), and never lists an unlabelled image.

The stubs are FROM the local base image (no new layers: a LABEL and an ENTRYPOINT), named per
test process, and removed at the end; nothing here touches another image or container.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker  # a dependency of kitctl itself
import pytest
import yaml

pytestmark = pytest.mark.docker

from kitctl.core.protocol import TrialRequest  # noqa: E402
from kitctl.runtimes.base import RuntimeUnavailable  # noqa: E402
from kitctl.runtimes.docker import LABEL_RUN_ID, DockerRuntime, from_cli, remove_run_containers  # noqa: E402

from conftest import BASE_IMAGE, unavailable  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
NONCE = f"{os.getpid()}-{time.monotonic_ns() % 10**6}"
KIT_STUB = f"kitctl/leftovers-kit-stub:{NONCE}"  # the kit's labels; its "trial" just sleeps
BARE_STUB = f"kitctl/leftovers-bare-stub:{NONCE}"  # same, without any kit label


def _build(client, tag: str | None, dockerfile: str):
    img, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, network_mode="none")
    return img


def _remove_images(client, refs) -> None:
    for ref in refs:
        try:
            client.images.remove(ref, force=True)
        except docker.errors.APIError:
            pass


@pytest.fixture(scope="module")
def stubs(client):
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"base image {BASE_IMAGE} is absent: run .ci/docker-up.sh")
    # `sh -c CMD trial ARGS…` ignores the trial's protocol flags, so the container just runs.
    entry = 'ENTRYPOINT ["sh", "-c", "sleep 120", "trial"]\n'
    _build(client, KIT_STUB, f"FROM {BASE_IMAGE}\nLABEL kit.engine=pytorch kit.trial-protocol=1\n{entry}")
    _build(client, BARE_STUB, f"FROM {BASE_IMAGE}\nLABEL org.example.stub={NONCE}\n{entry}")
    yield
    _remove_images(client, (KIT_STUB, BARE_STUB))


@pytest.fixture
def kit_home(tmp_path, monkeypatch):
    """A KITCTL_HOME whose compose.yaml names BARE_STUB as the pytorch image (kitctl/pytorch:ci and the
    other real names are never touched); kit_root()'s cache is cleared around the test."""
    from kitctl.core.paths import kit_root

    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    doc["services"] = {"pytorch": doc["services"]["pytorch"]}
    svc = doc["services"]["pytorch"]
    svc["image"] = BARE_STUB
    svc["build"]["context"] = str(ROOT)
    svc["x-kitctl"]["variants"] = {}
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "trials").symlink_to(ROOT / "trials")
    monkeypatch.setenv("KITCTL_HOME", str(tmp_path))
    monkeypatch.delenv("KITCTL_IMAGE_VARIANT", raising=False)
    kit_root.cache_clear()
    yield tmp_path
    kit_root.cache_clear()


# ---- a container removed under a running candidate ----------------------------------------------

def test_a_container_removed_mid_run_is_reported_as_removed(client, stubs):
    """issue 14: `docker rm -f` of the running candidate read "the Docker daemon does not answer"
    (the daemon's 409 "dead or marked for removal" on logs). Three rounds: removal races the reads."""
    request = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=2, precision="fp32",
                           device="cpu", model="resnet50", dataset="synthetic")
    for round_ in range(3):
        run_id = f"leftovers-rmf-{NONCE}-{round_}"
        rt = DockerRuntime({"pytorch-eager": KIT_STUB}, run_id=run_id, device="cpu", client=client)
        removed: list[str] = []

        def remove_it() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                running = client.containers.list(filters={"label": f"{LABEL_RUN_ID}={run_id}"})
                if running:
                    time.sleep(0.5 + 0.5 * round_)
                    subprocess.run(["docker", "rm", "-f", running[0].id], capture_output=True, timeout=60)
                    removed.append(running[0].short_id)
                    return
                time.sleep(0.05)

        t = threading.Thread(target=remove_it, daemon=True)
        t.start()
        try:
            with pytest.raises(RuntimeUnavailable) as err:
                rt.run(request, timeout_s=60)
        finally:
            t.join(timeout=60)
            remove_run_containers(client, run_id)
        msg = str(err.value)
        assert removed and f"container {removed[0]} was removed by someone else while the candidate ran" in msg
        assert "does not answer" not in msg and "\n" not in msg


# ---- the kit's labels decide what an engine image is ----------------------------------------------

@pytest.mark.parametrize("labels, problem", [
    ({"kit.engine": "pytorch", "kit.trial-protocol": "1"}, None),
    ({}, "it lacks the kit's labels (kit.engine, kit.trial-protocol)"),
    ({"kit.engine": "tensorflow", "kit.trial-protocol": "1"}, "kit.engine=tensorflow is not pytorch"),
    ({"kit.engine": "pytorch", "kit.trial-protocol": "2"}, "kit.trial-protocol=2 is not 1"),
    ({"kit.engine": "pytorch"}, "kit.trial-protocol=None is not 1"),
    ({"kit.engine": "pytorch", "kit.stage": "venv"}, "it is a build stage (kit.stage=venv)"),
])
def test_engine_image_problem(labels, problem):
    from kitctl.images.store import engine_image_problem

    got = engine_image_problem(labels, "pytorch")
    assert got == problem if problem is None else problem in got


def test_an_unlabelled_image_is_not_the_engines(client, stubs, kit_home):
    """issue 14: a stub under the engine image's name passed `--runtime auto` and doctor as present."""
    from kitctl.doctor import run_checks
    from kitctl.core.engines import ENGINES

    eng = [ENGINES["pytorch-eager"]]
    why: list[str] = []
    assert from_cli(engines=eng, device="cpu", gpu_uuid=None, run_id=f"leftovers-auto-{NONCE}", required=False,
                    client=client, fallback=why, sweep=False) is None  # auto → local, with the reason
    assert len(why) == 1 and f"image {BARE_STUB} (engine pytorch-eager) is not the kit's pytorch image" in why[0]
    assert "lacks the kit's labels" in why[0] and "kitctl images build pytorch" in why[0]
    with pytest.raises(RuntimeUnavailable, match="is not the kit's pytorch image"):
        from_cli(engines=eng, device="cpu", gpu_uuid=None, run_id=f"leftovers-docker-{NONCE}", required=True,
                 client=client, sweep=False)

    rep = run_checks(client=client, compose_path=kit_home / "compose.yaml", probe=False)
    check = next(c for c in rep.checks if c.name == "image:pytorch")
    assert check.level == "error" and check.symbol == "✗", check
    assert "is present but is not the kit's pytorch image: it lacks the kit's labels" in check.detail
    assert check.fix and "kitctl images build pytorch" in check.fix
    assert BARE_STUB not in rep.runnable + rep.cpu_only  # not offered as a usable image either
    assert next(i for i in rep.images if i["image"] == BARE_STUB)["unfit"]

    # the same name with the kit's labels is the engine's image
    client.images.get(KIT_STUB).tag(BARE_STUB)
    try:
        assert from_cli(engines=eng, device="cpu", gpu_uuid=None, run_id=f"leftovers-ok-{NONCE}", required=True,
                        client=client, sweep=False) is not None
        rep = run_checks(client=client, compose_path=kit_home / "compose.yaml", probe=False)
        assert next(c for c in rep.checks if c.name == "image:pytorch").level == "ok"
    finally:
        _build(client, BARE_STUB, f"FROM {BASE_IMAGE}\nLABEL org.example.stub={NONCE}\n"
               'ENTRYPOINT ["sh", "-c", "sleep 120", "trial"]\n')  # back to the bare stub


def test_runtime_docker_refuses_an_unlabelled_image_in_one_line(client, stubs, kit_home, tmp_path):
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--engines", "pytorch-eager", "--device", "cpu", "--runtime",
                        "docker", "--memory-limit", "1024", "--results-dir", str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kitctl: "), p.stderr
    assert f"image {BARE_STUB} (engine pytorch-eager) is not the kit's pytorch image" in lines[0]


# ---- build stages ---------------------------------------------------------------------------------

def _stages(dockerfile: str) -> list[tuple[str | None, str, list[str]]]:
    """(stage name, FROM target, instructions) per stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile)
    out: list[tuple[str | None, str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            out.append((m.group(2), m.group(1), []))
        elif out and line and not line.startswith("#"):
            out[-1][2].append(line)
    return out


@pytest.mark.parametrize("service", ["pytorch", "tensorflow", "opennn"])
def test_build_stages_carry_the_kits_labels(service):
    """A stage no later stage builds FROM is left as an untagged image by the legacy builder: it must be
    labelled so `clean --images` can find it (and only it)."""
    stages = _stages((ROOT / "images" / service / "Dockerfile").read_text())
    bases = {target for _, target, _ in stages}
    leaves = [(name, body) for name, _, body in stages[:-1] if name not in bases]
    assert leaves, "a multi-stage Dockerfile"
    for name, body in leaves:
        labels = " ".join(x for x in body if x.upper().startswith("LABEL"))
        assert f'kit.engine="{service}"' in labels and f'kit.stage="{name}"' in labels, (service, name, labels)
        assert "kit.trial-protocol" not in labels  # never taken for the engine image


def _stage_label(service: str, stage: str) -> str:
    name_body = {n: b for n, _, b in _stages((ROOT / "images" / service / "Dockerfile").read_text())}
    return next(x for x in name_body[stage] if x.upper().startswith("LABEL") and "kit.stage" in x)


def test_clean_images_lists_the_build_stage_and_no_foreign_image(client, stubs):
    """issue 14: `clean --images` missed the untagged build-stage image. A two-stage build with the
    pytorch Dockerfile's own stage label, plus an unlabelled dangling image that must stay unlisted."""
    label = _stage_label("pytorch", "venv")
    tag = f"kitctl/leftovers-stage:{NONCE}"
    dockerfile = (f"FROM {BASE_IMAGE} AS venv\nRUN echo {NONCE} > /stage\n{label} kit.test-nonce={NONCE}\n"
                  f"FROM {BASE_IMAGE}\nCOPY --from=venv /stage /stage\n"
                  f"LABEL kit.engine=pytorch kit.trial-protocol=1 kit.test-nonce={NONCE}\n")
    foreign_tag = f"kitctl/leftovers-foreign:{NONCE}"
    made: list[str] = []
    try:
        before = {i.id for i in client.images.list(filters={"dangling": True})}
        made.append(_build(client, tag, dockerfile).id)
        stage = [i for i in client.images.list(filters={"dangling": True, "label": f"kit.test-nonce={NONCE}"})
                 if i.id not in before]
        assert len(stage) == 1 and stage[0].labels.get("kit.stage") == "venv"
        made.append(stage[0].id)
        # an image that is not the kit's, left dangling by a rebuild of its name
        made.append(_build(client, foreign_tag, f"FROM {BASE_IMAGE}\nLABEL org.example.n=1-{NONCE}\n").id)
        made.append(_build(client, foreign_tag, f"FROM {BASE_IMAGE}\nLABEL org.example.n=2-{NONCE}\n").id)

        p = subprocess.run([*ENTRY, "clean", "--images", "--dry-run"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert (f"would remove dangling image {stage[0].id[7:19]} (kit.engine=pytorch" in p.stdout
                and "build stage 'venv'" in p.stdout), p.stdout
        assert made[2][7:19] not in p.stdout and made[1][7:19] != made[2][7:19]
        client.images.get(stage[0].id)  # a dry run removes nothing
    finally:
        _remove_images(client, [tag, foreign_tag, *made])
