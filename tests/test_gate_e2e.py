"""The VRAM gate end to end: a real `kitctl run` kills a real candidate whose memory rises.

There is no GPU here, so NVML is the named stand-in: `tests/nvml_stand_in/pynvml.py` (over
tests/fake_nvml.py), first on the kitctl subprocess's PYTHONPATH, answers the device's used
memory as an idle value plus the resident memory of the candidate's real processes. The trial
is the real PyTorch trial with the fault hook KIT_TRIAL_FAULT=grow (trials/common/kittrial.py):
as soon as it starts it allocates host memory in steps and would then sleep forever. Everything
else is kitctl's own, through its CLI: the run, the idle baseline, the real sampler and gate,
the real kill (the process group; the container), the artifact.

The first candidate of a GPU max-batch run is the overhead calibration; the gate kills it, the
artifact records it as `vram_cap_exceeded` by `kit_vram_gate` with its peak device delta, and the
cell ends invalid (a calibration that did not pass). Stated times: the candidate's processes are
gone within GONE_WITHIN_S of the sampled memory going over the budget (the stand-in's own log)
and of the kill (the sampler's `release_s`), far inside the run's --timeout; afterwards no
process or container of the run remains.

Under Docker the GPU is attached the way a CDI host does it: the private CDI daemon of
.ci/cdi-dockerd.sh, whose spec has one nvidia.com/gpu device with no device node. That daemon
gets the kit's CI pytorch image (docker save | load), plus a tag of it whose image config sets
KIT_TRIAL_FAULT=grow (a container gets only the environment the runtime gives it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, VARIANT, cdi_host, cdi_script_value, need_module, unavailable
from fake_nvml import alive

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
STAND_IN = Path(__file__).resolve().parent / "nvml_stand_in"
LIMIT_MIB, RESERVE_MIB = 512, 256
BUDGET_MIB = LIMIT_MIB - RESERVE_MIB
IDLE_MIB = 300.0
TIMEOUT_S = 90  # the run's --timeout: a kill that does not happen ends the candidate as `timeout`
GONE_WITHIN_S = 5.0


def gate_run(tmp_path: Path, runtime: str, env: dict[str, str],
             started: list[int] | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """`kitctl run maxbatch` on the stand-in GPU with a growing trial; (process, final artifact, NVML log).
    `started` gets kitctl's PID (its containers carry it: kit.owner-pid)."""
    results, log = tmp_path / "results", tmp_path / "nvml.jsonl"
    full = {**os.environ, "COLUMNS": "200", "KIT_TRIAL_FAULT": "grow", "KITCTL_RUN_STATE_DIR": str(tmp_path / "state"),
            "KITCTL_TEST_NVML_IDLE_MIB": str(IDLE_MIB), "KITCTL_TEST_NVML_LOG": str(log), **env,
            "PYTHONPATH": os.pathsep.join([str(STAND_IN), str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    args = [*ENTRY, "run", "maxbatch", "--engines", "pytorch-eager", "--precision", "fp32", "--device", "cuda",
            "--runtime", runtime, "--vram-limit", str(LIMIT_MIB), "--reserve", str(RESERVE_MIB), "--start-batch", "2",
            "--max-batch", "2", "--timeout", str(TIMEOUT_S), "--results-dir", str(results),
            *(["--gpu-request", "cdi"] if runtime == "docker" else [])]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full) as proc:
        if started is not None:
            started.append(proc.pid)
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S + 240)
        except subprocess.TimeoutExpired:
            proc.kill()  # its local trial dies with it (parent-death signal); a container is removed by the caller
            out, err = proc.communicate()
            pytest.fail(f"kitctl did not end within {TIMEOUT_S + 240} s:\n{out[-2000:]}\n{err[-2000:]}")
    p = subprocess.CompletedProcess(args, proc.returncode, out, err)
    assert "Traceback" not in p.stderr, p.stderr
    finals = [f for f in results.glob("*.json") if not f.name.endswith(".partial.json")]
    assert len(finals) == 1, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return p, json.loads(finals[0].read_text()), log


def assert_gate_killed(p: subprocess.CompletedProcess, doc: dict, log: Path) -> dict:
    """The artifact, the stand-in's log and the host agree: the gate killed the candidate, promptly."""
    assert p.returncode == 1, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])  # no capacity: exit 1
    assert doc["state"] == "complete" and doc["budget"]["budget_mib"] == BUDGET_MIB
    (cell,) = doc["results"]
    cal = cell["calibration"]
    assert cal["status"] == "vram_cap_exceeded" and cal["killed_by"] == "kit_vram_gate", {
        k: cal[k] for k in ("status", "killed_by", "error", "elapsed_s")}
    peaks = cal["peaks"]
    assert peaks["device_delta_mib"] > BUDGET_MIB and peaks["baseline_mib"] == IDLE_MIB  # the peak, over B
    assert peaks["process_mib"] and peaks["process_mib"] > 0  # NVML's per-process view found the candidate's PIDs
    assert peaks["samples"] > 0
    # The kill's effect, measured by the kit: the device back at its baseline soon after the kill
    # (None would mean: not back within the sampler's wait).
    assert peaks["release_s"] is not None and peaks["release_s"] <= GONE_WITHIN_S, peaks
    assert cal["elapsed_s"] < TIMEOUT_S / 2, cal["elapsed_s"]  # killed, not timed out
    assert cell["search_status"] == "invalid_non_memory_failure" and "vram_cap_exceeded" in cell["reason"]
    assert cell["trials"] == []  # the search never started on a failed calibration
    assert "vram_cap_exceeded [kit_vram_gate]" in p.stderr  # a progress line

    # The stand-in's own record (wall time, every look-up of the candidate's processes).
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    over = next(i for i, x in enumerate(lines) if IDLE_MIB + x["rss_mib"] - peaks["baseline_mib"] > BUDGET_MIB)
    # gone: no process listed, or none of those listed holds memory (the stand-in lists the PIDs it found
    # up to 50 ms ago; a killed one reads 0 MiB, and the kit's sampler may stop reading right then)
    gone = next(x for x in lines[over:] if not x["pids"] or x["rss_mib"] == 0)
    assert gone["t"] - lines[over]["t"] <= GONE_WITHIN_S, (lines[over], gone)
    seen = {pid for x in lines for pid in x["pids"]}
    assert seen and not any(alive(pid) for pid in seen), "a process of the candidate outlived the run"
    return cal


def test_the_gate_kills_a_growing_local_trial(tmp_path):
    need_module("torch", "the local runtime runs the PyTorch trial on this interpreter")
    p, doc, log = gate_run(tmp_path, "local", {})
    cal = assert_gate_killed(p, doc, log)
    assert cal["runtime"] == "local" and cal["signal"] == 9  # SIGKILL to the process group
    state = tmp_path / "state"
    assert not state.exists() or not list(state.glob("*.json"))  # no live trial left on record


# ---- Docker, the GPU attached by CDI ---------------------------------------------------------------

NODELESS_UUID = cdi_script_value("NODELESS_UUID")


@pytest.fixture(scope="module")
def cdi_gate_home(cdi_client, image, tmp_path_factory):
    """A KITCTL_HOME whose cpu-ci pytorch image, on the CDI daemon, is the CI image with KIT_TRIAL_FAULT=grow."""
    docker = need_module("docker")
    shared = docker.from_env(timeout=600)
    try:
        src = shared.images.get(image)
        try:
            cdi_client.images.get(src.id)
        except docker.errors.ImageNotFound:
            t0 = time.monotonic()
            save = subprocess.Popen(["docker", "save", src.id], stdout=subprocess.PIPE)
            load = subprocess.run(["docker", "-H", cdi_host(), "load"], stdin=save.stdout, capture_output=True,
                                  text=True, timeout=900)
            save.stdout.close()
            if save.wait() != 0 or load.returncode != 0:
                unavailable(f"could not copy {image} to the CDI daemon: {load.stderr.strip()[-300:]}")
            print(f"\n[gate] {image} copied to the CDI daemon in {time.monotonic() - t0:.1f} s")
    finally:
        shared.close()
    tag = f"kitctl/pytorch:gate-{os.getpid()}"
    c = cdi_client.containers.create(src.id, command=["/bin/true"], network_disabled=True)
    try:
        c.commit(repository=tag.split(":")[0], tag=tag.split(":")[1], changes=["ENV KIT_TRIAL_FAULT=grow"])
    finally:
        c.remove(force=True)
    home = tmp_path_factory.mktemp("gate-home")
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    doc["services"]["pytorch"]["x-kitctl"]["variants"][VARIANT]["image"] = tag
    (home / "compose.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    yield home
    cdi_client.images.remove(tag)


def test_the_gate_kills_a_growing_trial_in_its_container(cdi_client, cdi_gate_home, tmp_path):
    env = {"DOCKER_HOST": cdi_host(), "KITCTL_HOME": str(cdi_gate_home), "KITCTL_IMAGE_VARIANT": VARIANT,
           "KITCTL_TEST_NVML_DOCKER": "1", "KITCTL_TEST_NVML_UUID": NODELESS_UUID}
    started: list[int] = []
    try:
        p, doc, log = gate_run(tmp_path, "docker", env, started)
        cal = assert_gate_killed(p, doc, log)
        assert cal["runtime"] == "docker" and cal["exit_code"] == 137  # SIGKILL to the container
        assert doc["runtime"]["gpu_request"] == "cdi"
        assert doc["runtime"]["gpu_device_id"] == f"nvidia.com/gpu={NODELESS_UUID}"
        assert cdi_client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"}) == []
    finally:  # whatever happened, nothing of this run stays on the daemon
        for pid in started:
            for c in cdi_client.containers.list(all=True, filters={"label": f"kit.owner-pid={pid}"}):
                c.remove(force=True)
