"""`kitctl images`, `kitctl doctor` and `kitctl clean` against a real Docker daemon (issue 5).

The registry is Debian's `docker-registry` (distribution 2.8) serving on 127.0.0.1:<free port>
from a temporary directory, started and stopped by the module fixture; the daemon treats
loopback registries as insecure by default, so no daemon configuration is needed.

The push/pull round trip works on its own image name: a temporary KITCTL_HOME holds a copy of
compose.yaml whose `cpu-ci` variant is named kitctl/pytorch:regtest-<pid> (build context: this
checkout), so removing it for the "clean daemon" pull never touches kitctl/pytorch:ci, which
other tests use. Its layers are shared with kitctl/pytorch:ci, so the build is cached.

Without a daemon (or without docker-registry) these tests skip with the reason; under CI=true
they fail instead.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker  # a dependency of kitctl itself
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.docker

from kitctl.core.artifact import load  # noqa: E402
from kitctl.runtimes.docker import LABEL_HOST, LABEL_OWNER_PID, LABEL_RUN_ID  # noqa: E402

from conftest import BASE_IMAGE, VARIANT, host_lacks, remove_containers, unavailable  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
REGTEST_IMAGE = f"kitctl/pytorch:regtest-{os.getpid()}"


def run_kitctl(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    for k, v in list(full_env.items()):
        if v is None:
            del full_env[k]
    p = subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout, env=full_env)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    return p


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: "), p.stderr
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A throw-away registry on loopback: HOST:PORT; stopped (and its storage dropped) at the end."""
    exe = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not os.access(exe, os.X_OK):
        unavailable("docker-registry is not installed (apt-get install docker-registry; .ci/docker-up.sh does)")
    d = tmp_path_factory.mktemp("registry")
    port = _free_port()
    cfg = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(d / "storage")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "kitctl-test"},
    }
    (d / "config.yml").write_text(yaml.safe_dump(cfg))
    log = open(d / "registry.log", "wb")
    proc = subprocess.Popen([exe, "serve", str(d / "config.yml")], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"docker-registry did not answer on 127.0.0.1:{port}: "
                        f"{(d / 'registry.log').read_text()[-2000:]}", pytrace=False)
        time.sleep(0.2)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A KITCTL_HOME whose compose.yaml is the repo's, with the cpu-ci image renamed for this test."""
    d = tmp_path_factory.mktemp("kithome")
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for svc in doc["services"].values():
        svc["build"]["context"] = str(ROOT)
    doc["services"]["pytorch"]["x-kitctl"]["variants"][VARIANT]["image"] = REGTEST_IMAGE
    (d / "compose.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


@pytest.fixture(scope="module")
def regtest(client, image, home, registry):
    """Environment for the round trip; removes the test image and its registry tag at the end."""
    env = {"KITCTL_HOME": str(home), "KITCTL_IMAGE_VARIANT": VARIANT, "KITCTL_REGISTRY": registry}
    yield env
    repo, tag = REGTEST_IMAGE.split(":")
    try:
        ids = {client.images.get(REGTEST_IMAGE).id}
    except docker.errors.APIError:
        ids = set()
    for ref in (REGTEST_IMAGE, f"{registry}/{repo}:{tag}", *ids):  # tags, then the digest reference
        try:
            client.images.remove(ref, force=ref in ids)
        except docker.errors.APIError:
            pass


# ---- build, list, push, pull, run -------------------------------------------------------------
# Each test asks for what it needs (the image built, the image pushed) through these fixtures, so any
# one of them runs alone and in any order; the pull test leaves the image as it found it (same id).

@pytest.fixture(scope="module")
def built(client, regtest):
    """`kitctl images build` of the test's image: (the CLI's answer, the image id)."""
    t0 = time.monotonic()
    p = run_kitctl("images", "build", "pytorch-eager", env=regtest)
    print(f"\n[images] build (cached layers): {time.monotonic() - t0:.1f} s")
    assert p.returncode == 0, p.stderr + p.stdout
    return p, client.images.get(REGTEST_IMAGE).id


@pytest.fixture(scope="module")
def pushed(client, regtest, registry, built):
    """`kitctl images push` of the built image to the test registry: (the CLI's answer, its JSON record)."""
    t0 = time.monotonic()
    p = run_kitctl("images", "push", "pytorch", "--json", env=regtest)
    print(f"\n[images] push to {registry}: {time.monotonic() - t0:.1f} s")
    assert p.returncode == 0, p.stderr
    (rec,) = json.loads(p.stdout)
    return p, rec


def test_images_build_through_the_sdk(client, built):
    p, image_id = built
    assert f"built {REGTEST_IMAGE}" in p.stdout and "2.13.0+cpu" in p.stdout
    img = client.images.get(REGTEST_IMAGE)
    assert img.id == image_id
    labels = img.labels
    assert labels["kit.engine"] == "pytorch" and labels["kit.cuda.version"] == "none"
    assert labels["org.opencontainers.image.created"].endswith("Z")  # provenance args filled
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"].startswith(head or "unknown")


def test_images_list_shows_it_with_labels(regtest, built):
    _, image_id = built
    p = run_kitctl("images", "list", "--json", env=regtest)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    (row,) = [r for r in rows if r["image"] == REGTEST_IMAGE]
    assert row["present"] and row["service"] == "pytorch" and row["variant"] == VARIANT
    assert row["id"] == image_id and row["short_id"] == image_id[7:19]
    assert row["framework_version"] == "2.13.0+cpu" and row["cuda_version"] == "none"
    assert row["labels"]["kit.engine"] == "pytorch" and row["labels"]["kit.trial-protocol"] == "1"
    assert row["size_bytes"] > 10**8 and 0 <= row["age_s"] < 3600
    assert "pytorch-eager" in row["engines"]
    (cuda,) = [r for r in rows if r["service"] == "pytorch" and r["variant"] is None]  # CUDA image: not built here
    assert cuda["expected_cuda_version"] == "13.0"

    p = run_kitctl("images", "list", env=regtest)  # the table
    assert p.returncode == 0, p.stderr
    assert REGTEST_IMAGE in p.stdout and image_id[7:19] in p.stdout and "2.13.0+cpu" in p.stdout


def test_push_records_the_digest(client, registry, built, pushed):
    p, rec = pushed
    repo = f"{registry}/{REGTEST_IMAGE.split(':')[0]}"
    assert rec["remote"] == f"{repo}:{REGTEST_IMAGE.split(':')[1]}"
    assert rec["digest"].startswith("sha256:") and rec["repo_digest"] == f"{repo}@{rec['digest']}"
    assert rec["id"] == built[1]
    assert rec["repo_digest"] in client.images.get(REGTEST_IMAGE).attrs["RepoDigests"]
    assert rec["digest"] in p.stderr  # the human lines go to stderr under --json


def test_push_to_a_registry_that_does_not_answer_is_one_line(client, regtest, built):
    dead = f"127.0.0.1:{_free_port()}"
    msg = one_line_error(run_kitctl("images", "push", "pytorch", "--registry", dead, env=regtest))
    assert "pushing" in msg and "connection refused" in msg
    assert not [t for t in client.images.get(REGTEST_IMAGE).tags if t.startswith(dead)]  # its tag undone
    msg = one_line_error(run_kitctl("images", "push", "pytorch", env={**regtest, "KITCTL_REGISTRY": None}))
    assert "--registry" in msg and "KITCTL_REGISTRY" in msg


def test_pull_into_a_clean_state_and_the_artifact_records_the_digest(client, regtest, pushed, tmp_path):
    _, rec = pushed
    for ref in (REGTEST_IMAGE, rec["remote"]):  # the compose name and the registry tag
        client.images.remove(ref)
    try:
        client.images.remove(rec["id"], force=True)  # a digest reference left: the image itself
    except docker.errors.ImageNotFound:
        pass  # the daemon dropped the digest reference with the last tag of its repository
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(rec["id"])  # gone from the daemon, not just untagged

    t0 = time.monotonic()
    p = run_kitctl("images", "pull", "pytorch-eager", "--digest", rec["digest"], "--json", env=regtest)
    print(f"\n[images] pull by digest: {time.monotonic() - t0:.1f} s")
    assert p.returncode == 0, p.stderr
    (got,) = json.loads(p.stdout)
    assert got["digest"] == rec["digest"] and got["id"] == rec["id"]  # byte-identical
    img = client.images.get(REGTEST_IMAGE)  # tagged back to the compose name
    assert img.id == rec["id"] and rec["repo_digest"] in img.attrs["RepoDigests"]

    p = run_kitctl("images", "pull", "pytorch", "--json", env=regtest)  # by tag: the same image
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["id"] == rec["id"]

    t0 = time.monotonic()
    p = run_kitctl("run", "maxbatch", "--runtime", "docker", "--device", "cpu", "--start-batch", "2",
               "--max-batch", "2", "--results-dir", str(tmp_path), env=regtest)
    print(f"\n[images] one-candidate docker run: {time.monotonic() - t0:.1f} s")
    assert p.returncode == 0, p.stderr + p.stdout
    (final,) = [f for f in tmp_path.glob("*.json") if not f.name.endswith(".partial.json")]
    prov = load(final)["engines"]["pytorch-eager"]["provenance"]
    assert prov["image"] == REGTEST_IMAGE and prov["id"] == rec["id"]
    assert rec["repo_digest"] in prov["repo_digests"]


def test_pull_of_an_unknown_digest_is_one_line(regtest):
    msg = one_line_error(run_kitctl("images", "pull", "pytorch", "--digest", "sha256:" + "0" * 64, env=regtest))
    assert "pulling" in msg
    msg = one_line_error(run_kitctl("images", "pull", "pytorch", "--digest", "latest", env=regtest))
    assert "--digest" in msg


def test_a_failing_build_is_one_line_and_the_log_tail(client, regtest, built):
    p = run_kitctl("images", "build", "pytorch", "--build-arg", "TORCH_LOCK=requirements-missing.lock", env=regtest)
    assert p.returncode == 2, p.stdout + p.stderr
    first, *rest = p.stderr.splitlines()
    assert first.startswith(f"kitctl: building {REGTEST_IMAGE} failed:")
    assert rest and rest[0].startswith("last ") and "requirements-missing.lock" in "\n".join(rest)
    assert client.images.get(REGTEST_IMAGE).id == built[1]  # the tag was not moved


# ---- bad input ---------------------------------------------------------------------------------

def test_a_malformed_compose_file_is_one_line(tmp_path):
    (tmp_path / "compose.yaml").write_text("services:\n  pytorch: [unclosed\n")
    env = {"KITCTL_HOME": str(tmp_path)}
    for args in (("images", "list"), ("images", "build"), ("images", "push", "--registry", "127.0.0.1:1")):
        msg = one_line_error(run_kitctl(*args, env=env))
        assert str(tmp_path / "compose.yaml") in msg and "not valid YAML at line" in msg
    p = run_kitctl("doctor", "--json", env=env)  # doctor reports it and carries on
    assert p.returncode == 1
    (check,) = [c for c in json.loads(p.stdout)["checks"] if c["name"] == "compose"]
    assert check["level"] == "error" and "not valid YAML" in check["detail"] and check["fix"]


def test_unknown_names_and_variants_are_one_line(regtest):
    msg = one_line_error(run_kitctl("images", "build", "mxnet", env=regtest))
    assert "'mxnet'" in msg and "pytorch-eager" in msg and "services: pytorch" in msg
    msg = one_line_error(run_kitctl("images", "build", "pytorch", "--variant", "nightly", env=regtest))
    assert "no build variant 'nightly'" in msg
    msg = one_line_error(run_kitctl("images", "build", "pytorch", "--build-arg", "NOEQUALS", env=regtest))
    assert "KEY=VALUE" in msg


# ---- doctor -----------------------------------------------------------------------------------

def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:  # noqa: BLE001
        return False


def test_doctor_on_this_host(client, image):
    if _nvml_works():
        host_lacks("no-gpu", "this host has an NVIDIA GPU: the GPU-less verdict cannot be shown here")
    t0 = time.monotonic()
    p = run_kitctl("doctor", "--json", env={"KITCTL_IMAGE_VARIANT": VARIANT})
    print(f"\n[doctor] {time.monotonic() - t0:.1f} s")
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is False and doc["exit_code"] == 1 and doc["gpu_run"] is False
    for c in doc["checks"]:
        assert set(c) == {"name", "ok", "level", "detail", "fix"}
        assert c["level"] in ("ok", "warn", "error", "skip")
        if c["level"] == "error":
            assert c["fix"], c
    assert checks["docker"]["ok"] and checks["docker"]["detail"].startswith("Docker ")
    assert client.version()["Version"] in checks["docker"]["detail"]
    assert checks["nvml"]["level"] == "error" and "no NVIDIA driver" in checks["nvml"]["detail"]
    assert "driver" in checks["nvml"]["fix"]
    assert checks["nvidia-runtime"]["level"] == "error" and "NVIDIA Container Toolkit" in checks["nvidia-runtime"]["fix"]
    assert checks["image:pytorch"]["ok"] and image in checks["image:pytorch"]["detail"]
    assert checks[f"cuda:{image}"]["ok"] and "runs anywhere" in checks[f"cuda:{image}"]["detail"]
    assert checks["cuda:kitctl/pytorch:2.11.0-cu130"]["level"] == "error"
    assert "≥ 580" in checks["cuda:kitctl/pytorch:2.11.0-cu130"]["detail"]
    assert checks["disk"]["level"] in ("ok", "warn") and "GiB free" in checks["disk"]["detail"]
    assert checks["gpu-run"]["level"] == "error" and image in doc["cpu_only_images"]
    assert client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}=gpu-probe"}) == []

    p = run_kitctl("doctor", env={"KITCTL_IMAGE_VARIANT": VARIANT})  # the human form
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert any(ln.startswith("✓ docker") for ln in lines) and any(ln.startswith("✗ nvml") for ln in lines)
    assert any(ln.strip().startswith("fix: ") for ln in lines)


def test_doctor_without_a_daemon_never_tracebacks(tmp_path):
    p = run_kitctl("doctor", "--json", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert p.returncode == 1
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert checks["docker"]["level"] == "error" and "does not answer" in checks["docker"]["detail"]
    assert checks["docker"]["fix"] and checks["nvidia-runtime"]["level"] == "skip"
    msg = one_line_error(run_kitctl("images", "list", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}))
    assert "does not answer" in msg


def test_doctor_driver_against_image_cuda_with_a_gpu(client, tmp_path):
    """The driver table on a (stand-in) GPU host: NVML replaced by tests/fake_nvml.py."""
    from fake_nvml import FakeDevice, FakeNvmlLib, FakeProcess
    from kitctl.doctor import run_checks
    from kitctl.core.gpu import Nvml

    doc = {"services": {}}
    for name, cuda in (("cu13", "13.0"), ("cu12", "12.4"), ("cpu", "none")):
        doc["services"][name] = {"image": f"kitctl/doctor-test-{name}:never", "build": {
            "context": str(ROOT), "dockerfile": "images/pytorch/Dockerfile", "args": {"CUDA_VERSION": cuda}}}
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(doc))
    busy = FakeDevice(uuid="GPU-11111111-2222-3333-4444-555555555555", used_mib=(30000.0,),
                      compute_processes=[FakeProcess(pid=4242, used_mib=29000.0, name="python3")])
    nvml = Nvml(lib=FakeNvmlLib([busy], driver="550.54.15"))
    rep = run_checks(client=client, nvml=nvml, compose_path=tmp_path / "compose.yaml", probe=False)
    checks = {c.name: c for c in rep.checks}
    assert checks["nvml"].ok and "550.54.15" in checks["nvml"].detail
    c13, c12 = checks["cuda:kitctl/doctor-test-cu13:never"], checks["cuda:kitctl/doctor-test-cu12:never"]
    assert c13.level == "error" and "≥ 580" in c13.detail and "550.54.15" in c13.detail and "580" in c13.fix
    assert c12.ok and "≥ 525" in c12.detail
    assert checks["cuda:kitctl/doctor-test-cpu:never"].ok
    assert checks["gpu-idle:0"].level == "warn" and "pid 4242" in checks["gpu-idle:0"].detail
    assert checks["image:cu12"].level == "warn" and "kitctl images build cu12" in checks["image:cu12"].fix
    assert not rep.gpu_run and "no present engine image" in checks["gpu-run"].detail

    nvml = Nvml(lib=FakeNvmlLib([FakeDevice(uuid="GPU-x", used_mib=(300.0,))], driver="580.65.06"))
    rep = run_checks(client=client, nvml=nvml, compose_path=tmp_path / "compose.yaml", probe=False)
    checks = {c.name: c for c in rep.checks}
    assert checks["cuda:kitctl/doctor-test-cu13:never"].ok and checks["gpu-idle:0"].ok


# ---- clean ------------------------------------------------------------------------------------

def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _build_labelled(client, tag: str, nonce: str) -> str:
    dockerfile = f"FROM {BASE_IMAGE}\nLABEL kit.engine=clean-test kit.test-nonce={nonce}\n"
    img, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return img.id


def test_clean_removes_a_planted_orphan_and_nothing_else(client, image):
    host = socket.gethostname()
    dead = _dead_pid()

    def plant(labels):
        return client.containers.create(BASE_IMAGE, command=["true"], labels=labels, network_mode="none")

    orphan = plant({LABEL_RUN_ID: "clean-test", LABEL_OWNER_PID: str(dead), LABEL_HOST: host})
    live = plant({LABEL_RUN_ID: "clean-test", LABEL_OWNER_PID: str(os.getpid()), LABEL_HOST: host})
    try:
        p = run_kitctl("clean", "--dry-run")
        assert p.returncode == 0, p.stderr
        assert "would remove orphaned container" in p.stdout and orphan.short_id in p.stdout
        assert live.short_id not in p.stdout
        left = {c.id for c in client.containers.list(all=True)}
        assert orphan.id in left  # a dry run removes nothing

        p = run_kitctl("clean", "--json")
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        assert any(orphan.short_id in c for c in res["containers"]) and res["images"] == []
        left = {c.id for c in client.containers.list(all=True)}
        assert orphan.id not in left and live.id in left

        p = run_kitctl("clean")
        assert p.returncode == 0 and live.short_id not in p.stdout
    finally:
        remove_containers((orphan, live))


def test_clean_images_removes_dangling_kit_images_only(client, image):
    tag = f"kitctl/clean-test:{os.getpid()}"
    old = _build_labelled(client, tag, "1")
    new = _build_labelled(client, tag, "2")  # re-tags the name: the first is now dangling
    assert old != new
    try:
        p = run_kitctl("clean", "--images", "--dry-run")
        assert p.returncode == 0, p.stderr
        assert f"would remove dangling image {old[7:19]}" in p.stdout
        client.images.get(old)

        p = run_kitctl("clean", "--images")
        assert p.returncode == 0, p.stderr
        assert f"removed dangling image {old[7:19]} (kit.engine=clean-test" in p.stdout
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(old)
        assert client.images.get(tag).id == new  # tagged kit images stay
        client.images.get(image)
        client.images.get(BASE_IMAGE)  # not a kit image
    finally:
        for ref in (tag, old):
            try:
                client.images.remove(ref)
            except docker.errors.APIError:
                pass


# ---- the overhead benchmark ---------------------------------------------------------------------

def test_bench_runtime_overhead_runs_and_writes_its_json(image, tmp_path):
    """A smoke run of tools/bench_runtime_overhead.py (one candidate each; results/reports/measurements-overview.md has a real run)."""
    p = subprocess.run([sys.executable, str(ROOT / "tools/bench_runtime_overhead.py"), "-n", "1", "--warmup", "0",
                        "--floor", "1", "--image", image, "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stdout + p.stderr
    (out,) = tmp_path.glob("bench-runtime-overhead-*.json")
    doc = json.loads(out.read_text())
    assert doc["kind"] == "kitctl-bench-runtime-overhead"
    s = doc["summary"]
    assert s["docker"]["n"] == s["local"]["n"] == 1 and s["ratio"] > 0
    assert s["added_s"] == pytest.approx(s["docker"]["median_wall_s"] - s["local"]["median_wall_s"])
    assert s["floor"]["docker_median_s"] > 0 and doc["docker"]["image"] == image
    assert {c["status"] for c in doc["candidates"]} == {"ok"}
    assert "docker − local" in p.stdout
