"""How the Docker runtime asks for the GPU: the NVIDIA toolkit's request or CDI (issue 15).

Against REAL daemons, none with a GPU:

* CI's own daemon (Debian 12's docker.io 20.10): no NVIDIA toolkit and no CDI at all, so both
  requests are refused by the daemon itself;
* a second, private daemon with CDI on (Debian trixie's dockerd 26.1, `.ci/cdi-dockerd.sh`,
  started here and stopped after the session), whose CDI spec names `nvidia.com/gpu` devices
  with a device node that does not exist: the daemon resolves the CDI name and refuses to
  inject it, with its own error.

kitctl must turn each refusal into one line (the daemon's words plus the fix), exit 2, and leave
no container behind. NVML is the named stand-in `tests/fake_nvml.py` where a run needs a GPU.
Without the daemons these tests skip; under CI=true they fail.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.docker

from fake_nvml import FakeDevice, FakeNvmlLib  # noqa: E402

import kitctl.core.gpu as gpu_mod  # noqa: E402
from kitctl import cli  # noqa: E402
from kitctl.run import session as launch  # noqa: E402
from kitctl.benchmarks.maxbatch.config import MaxbatchConfig  # noqa: E402
from kitctl.core import artifact  # noqa: E402
from kitctl.errors import Fail  # noqa: E402
from kitctl.doctor import run_checks  # noqa: E402
from kitctl.core.protocol import TrialRequest  # noqa: E402
from kitctl.runtimes.base import RuntimeUnavailable  # noqa: E402
from kitctl.runtimes.docker import (  # noqa: E402
    LABEL_RUN_ID, DockerRuntime, GpuRequest, gpu_request_order, probe_gpu_request, remove_run_containers,
)

from conftest import VARIANT, cdi_host, cdi_script_value, host_lacks  # noqa: E402

STANDIN = cdi_script_value("STANDIN_IMAGE")
FAKE_UUID = cdi_script_value("FAKE_UUID")
MISSING_NODE = cdi_script_value("MISSING_NODE")
TOOLKIT_REFUSAL = 'could not select device driver "" with capabilities: [[gpu]]'


def _request(engine: str = "pytorch-eager") -> TrialRequest:
    return TrialRequest(engine=engine, mode="eager", benchmark="maxbatch", batch=2, precision="fp32",
                        device="cuda", model="resnet50", dataset="synthetic")


def _kit_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": LABEL_RUN_ID})


# ---- the request itself (no daemon) -----------------------------------------------------------

def test_the_two_requests_name_the_gpu_by_uuid():
    t = GpuRequest("toolkit", "GPU-abc").device_request()
    assert t["DeviceIDs"] == ["GPU-abc"] and t["Capabilities"] == [["gpu"]] and not t.get("Driver")
    c = GpuRequest("cdi", "GPU-abc")
    assert c.device_id == "nvidia.com/gpu=GPU-abc"
    assert c.device_request()["Driver"] == "cdi" and c.device_request()["DeviceIDs"] == ["nvidia.com/gpu=GPU-abc"]
    assert c.to_json() == {"gpu_request": "cdi", "gpu_device_id": "nvidia.com/gpu=GPU-abc"}
    assert GpuRequest("toolkit").device_request()["Count"] == 1  # no UUID: any one GPU
    with pytest.raises(ValueError):
        GpuRequest("nvidia")


def test_a_resumed_run_keeps_the_request_kind_of_its_partial():
    cfg = MaxbatchConfig.from_flags("pytorch-eager", "fp32", "cpu", None, 256, 2, 2, None, "local", "synthetic",
                                    None, False, None, 16, "protocol", None, gpu_request="auto")
    assert launch.gpu_request_kind(None, cfg.run.gpu_request, "auto") == "auto" and cfg.to_json()["gpu_request"] == "auto"
    doc = {"runtime": {"name": "docker", "gpu_request": "cdi"}}
    assert launch.gpu_request_kind(doc, "auto", "auto") == "cdi"
    assert launch.gpu_request_kind(doc, "auto", "cdi") == "cdi"
    with pytest.raises(Fail, match="attached its GPU by cdi"):
        launch.gpu_request_kind(doc, "auto", "toolkit")
    local = {"runtime": {"name": "local"}}  # an older or local partial: the flag, else its configuration
    assert launch.gpu_request_kind(local, "toolkit", "auto") == "toolkit"
    assert launch.gpu_request_kind(local, None, "cdi") == "cdi"


# ---- CI's daemon: Docker 20.10, neither toolkit nor CDI ----------------------------------------

@pytest.mark.parametrize("kind, daemon_says", [
    ("toolkit", TOOLKIT_REFUSAL),
    # Docker < 25 knows no CDI: it looks for a device driver named "cdi".
    ("cdi", 'could not select device driver "cdi" with capabilities: []'),
])
def test_each_request_refused_by_docker_20_is_one_line_and_no_container(client, image, kind, daemon_says):
    if client.info().get("CDISpecDirs") or "nvidia" in (client.info().get("Runtimes") or {}):
        host_lacks("no-gpu", "this daemon has CDI or the NVIDIA runtime: the refusal cannot be shown here")
    run_id = f"test-gpureq-{kind}-{os.getpid()}"
    rt = DockerRuntime(image, run_id=run_id, device="cuda", client=client, gpu_uuid=FAKE_UUID, gpu_request=kind)
    try:
        with pytest.raises(RuntimeUnavailable) as err:
            rt.run(_request(), timeout_s=60)
        msg = str(err.value)
        assert "\n" not in msg and daemon_says in msg
        fix = "nvidia-ctk runtime configure" if kind == "toolkit" else "nvidia-ctk cdi generate"
        assert fix in msg and f"--gpu-request {'cdi' if kind == 'toolkit' else 'toolkit'}" in msg
        assert client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}) == []
    finally:
        remove_run_containers(client, run_id)


def test_auto_tries_toolkit_then_cdi_and_names_both_fixes(client, image):
    if client.info().get("CDISpecDirs") or "nvidia" in (client.info().get("Runtimes") or {}):
        host_lacks("no-gpu", "this daemon has CDI or the NVIDIA runtime: the refusal cannot be shown here")
    assert gpu_request_order(client) == ("toolkit", "cdi")
    t0 = time.monotonic()
    probe = probe_gpu_request(client, image, FAKE_UUID, "auto")
    print(f"\n[gpu request] both kinds probed on Docker 20.10 in {time.monotonic() - t0:.2f} s")
    assert not probe.ok and [r.kind for r, _ in probe.tried] == ["toolkit", "cdi"]
    msg = probe.refusal()
    assert "\n" not in msg and TOOLKIT_REFUSAL in msg and 'device driver "cdi"' in msg
    assert "nvidia-ctk runtime configure" in msg and "nvidia-ctk cdi generate" in msg
    assert client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}=gpu-probe"}) == []


def test_the_artifact_records_the_request_and_validates(client, image):
    rt = DockerRuntime({"pytorch-eager": image}, run_id="test-gpureq-describe", device="cuda", client=client,
                       gpu_uuid=FAKE_UUID, gpu_request="cdi")
    desc = rt.describe("pytorch-eager")
    assert desc["gpu_request"] == "cdi" and desc["gpu_device_id"] == f"nvidia.com/gpu={FAKE_UUID}"
    assert desc["base"] == "ci-debian" and "CI base" in desc["base_note"]  # the image's kit.base labels
    cpu = DockerRuntime({"pytorch-eager": image}, run_id="test-gpureq-describe", device="cpu", client=client)
    assert cpu.describe("pytorch-eager")["gpu_request"] is None
    doc = _minimal_doc({"name": "docker", **{k: v for k, v in desc.items() if k != "runtime"}})
    artifact.validate(doc)
    doc["runtime"]["gpu_request"] = "nvidia"
    with pytest.raises(artifact.ArtifactError):
        artifact.validate(doc)


def _minimal_doc(runtime: dict) -> dict:
    return {"schema_version": 1, "kind": "kitctl-artifact", "benchmark": "maxbatch", "run_id": "r", "state": "running",
            "created_utc": "t", "updated_utc": "t", "finished_utc": None,
            "kit": {"version": "0", "git_commit": None, "git_dirty": None}, "argv": [],
            "host": {"hostname": "h", "platform": "p", "python": "3", "gpu": None}, "runtime": runtime,
            "configuration": {"engines": ["pytorch-eager"], "precisions": ["fp32"], "device": "cuda",
                              "model": "resnet50", "dataset": "synthetic", "timeout_s": 1, "strategy": "protocol",
                              "gpu_request": "auto"},
            "budget": None, "engines": {}, "results": []}


def _fake_gpu(monkeypatch, uuid: str = FAKE_UUID) -> None:
    real = gpu_mod.Nvml
    monkeypatch.setattr(gpu_mod, "Nvml", lambda lib=None: real(lib=FakeNvmlLib([FakeDevice(uuid)], driver="580.159.04")))


def _kitctl(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["kitctl", *args])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    return ex.value.code, capsys.readouterr().err


def test_run_maxbatch_on_docker_20_is_exit_2_with_the_daemons_words(client, image, monkeypatch, capsys, tmp_path):
    if client.info().get("CDISpecDirs") or "nvidia" in (client.info().get("Runtimes") or {}):
        host_lacks("no-gpu", "this daemon has CDI or the NVIDIA runtime: the refusal cannot be shown here")
    _fake_gpu(monkeypatch)
    monkeypatch.setenv("KITCTL_IMAGE_VARIANT", VARIANT)
    before = {c.id for c in _kit_containers(client)}
    for kind, words in (("toolkit", TOOLKIT_REFUSAL), ("cdi", 'device driver "cdi"'), ("auto", TOOLKIT_REFUSAL)):
        code, err = _kitctl(monkeypatch, capsys, "run", "maxbatch", "--runtime", "docker", "--gpu-request", kind,
                            "--results-dir", str(tmp_path))
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kitctl: ") and words in lines[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert {c.id for c in _kit_containers(client)} <= before  # no container left


# ---- a daemon with CDI on (Docker 26.1) and a spec whose device does not exist ------------------

def test_the_cdi_daemon_runs_containers_and_lists_its_spec_dir(cdi_client):
    info = cdi_client.info()
    assert info.get("CDISpecDirs") and "nvidia" not in (info.get("Runtimes") or {})
    out = cdi_client.containers.run(STANDIN, remove=True, network_mode="none")  # no GPU: the daemon works
    assert out == b""
    assert gpu_request_order(cdi_client) == ("cdi", "toolkit")  # CDI listed, no toolkit: CDI first


@pytest.mark.parametrize("kind, daemon_says", [
    ("cdi", f'CDI device injection failed: failed to inject devices: failed to stat CDI host device "{MISSING_NODE}"'),
    ("toolkit", TOOLKIT_REFUSAL),
])
def test_each_request_refused_by_the_cdi_daemon_is_one_line_and_no_container(cdi_client, kind, daemon_says):
    run_id = f"test-gpureq-cdi-{kind}-{os.getpid()}"
    rt = DockerRuntime(STANDIN, run_id=run_id, device="cuda", client=cdi_client, gpu_uuid=FAKE_UUID,
                       gpu_request=kind)
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeUnavailable) as err:
            rt.run(_request(), timeout_s=60)
        print(f"\n[cdi daemon] {kind} request refused in {time.monotonic() - t0:.2f} s")
        msg = str(err.value)
        assert "\n" not in msg and daemon_says in msg, msg
        assert ("nvidia-ctk cdi generate" if kind == "cdi" else "nvidia-ctk runtime configure") in msg
        assert cdi_client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}) == []
    finally:
        remove_run_containers(cdi_client, run_id)


def test_an_unknown_cdi_device_is_the_daemons_unresolvable_error(cdi_client):
    probe = probe_gpu_request(cdi_client, STANDIN, "GPU-not-in-the-spec", "cdi")
    assert not probe.ok
    (req, why), = probe.tried
    assert req.device_id == "nvidia.com/gpu=GPU-not-in-the-spec" and "unresolvable CDI devices" in why
    assert cdi_client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}=gpu-probe"}) == []


@pytest.fixture
def standin_home(tmp_path, monkeypatch):
    """KITCTL_HOME with a compose.yaml naming the stand-in image (kit_root is cached: cleared around)."""
    from kitctl.core import paths

    home = _standin_home(tmp_path)
    monkeypatch.setenv("KITCTL_HOME", str(home))
    paths.kit_root.cache_clear()
    yield home
    monkeypatch.delenv("KITCTL_HOME")
    paths.kit_root.cache_clear()


def _standin_home(tmp_path: Path) -> Path:
    """A kit home whose compose.yaml names the stand-in image as the pytorch engine's."""
    home = tmp_path / "kit-home"
    (home / "trials").mkdir(parents=True)
    (home / "compose.yaml").write_text(yaml.safe_dump({"services": {"pytorch": {
        "image": STANDIN, "build": {"context": ".", "dockerfile": "Dockerfile"},
        "x-kitctl": {"engines": ["pytorch-eager"]}}}}))
    return home


def test_run_maxbatch_on_the_cdi_daemon_is_exit_2_with_its_words(cdi_client, standin_home, monkeypatch, capsys,
                                                                   tmp_path):
    _fake_gpu(monkeypatch)
    monkeypatch.setenv("DOCKER_HOST", cdi_host())
    monkeypatch.delenv("KITCTL_IMAGE_VARIANT", raising=False)
    results = tmp_path / "results"
    results.mkdir()
    cases = (("cdi", "failed to stat CDI host device"), ("toolkit", TOOLKIT_REFUSAL),
             ("auto", "failed to stat CDI host device"))
    for kind, words in cases:
        code, err = _kitctl(monkeypatch, capsys, "run", "maxbatch", "--runtime", "docker", "--gpu-request", kind,
                            "--results-dir", str(results))
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], err
        if kind == "auto":  # both tried, CDI first here, and both fixes named
            assert TOOLKIT_REFUSAL in lines[0] and lines[0].index("CDI") < lines[0].index("NVIDIA Container Toolkit")
            assert "nvidia-ctk cdi generate" in lines[0] and "nvidia-ctk runtime configure" in lines[0]
    assert list(results.iterdir()) == []
    assert _kit_containers(cdi_client) == []


def test_doctor_on_the_cdi_daemon_says_neither_path_works_and_both_fixes(cdi_client, tmp_path):
    home = _standin_home(tmp_path)
    nvml = gpu_mod.Nvml(lib=FakeNvmlLib([FakeDevice(FAKE_UUID)], driver="580.159.04"))
    rep = run_checks(client=cdi_client, nvml=nvml, compose_path=home / "compose.yaml")
    c = {x.name: x for x in rep.checks}["nvidia-runtime"]
    assert c.level == "error" and "cdi: refused (CDI device injection failed" in c.detail
    assert f"toolkit: refused ({TOOLKIT_REFUSAL})" in c.detail and "CDI spec dirs" in c.detail
    assert "nvidia-ctk runtime configure" in c.fix and "nvidia-ctk cdi generate" in c.fix
    assert not rep.gpu_run and "neither the NVIDIA Container Toolkit nor CDI" in {x.name: x for x in rep.checks}["gpu-run"].detail
    assert _kit_containers(cdi_client) == []
