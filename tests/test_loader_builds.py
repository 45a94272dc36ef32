"""The loader images' builds (issue 18, "each loader in its own pinned image"): the CUDA locks of loader-torch and
loader-dali are exact and hashed, compose.yaml's loader services say per build which loaders they serve, and that is
what `kitctl run dataload --runtime docker` uses to pick images and to refuse a GPU loader a CPU build lacks. Fast:
no image is built (the CUDA builds are multi-GB and need a registry), no GPU."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.images.compose import load_compose
from conftest import host_lacks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOCKS = [ROOT / "images/loader-torch/requirements-cuda.lock",
         ROOT / "images/loader-torch/requirements-host-userland.txt",
         ROOT / "images/loader-dali/requirements-cuda.lock"]
PINNED_BASE = re.compile(r"^ARG BASE_IMAGE=(nvidia/cuda:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64})$", re.M)


def requirements(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (the requirement as written, its sha256 hashes), each entry joined over its continuation lines."""
    text = re.sub(r"\\\n\s*", " ", lock.read_text())
    out = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        req = line.split(" --hash=")[0].strip()
        name = re.split(r"[=<>!~\[ ;]", req, maxsplit=1)[0].lower()
        assert name not in out, f"{lock.name}: {name} twice"
        out[name] = (req, re.findall(r"--hash=sha256:([0-9a-f]{64})\b", line))
    return out


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_pin_of_a_new_lock_is_exact_and_hashed(lock):
    reqs = requirements(lock)
    assert len(reqs) >= 3
    for name, (req, hashes) in reqs.items():
        assert re.fullmatch(rf"{re.escape(name)}==[0-9][A-Za-z0-9.+!-]*", req, re.I), f"{lock.name}: {req!r} is not =="
        assert hashes, f"{lock.name}: {name} has no --hash"
    # uv wrote it from the .in beside it (./lock.sh): each input is pinned
    src = lock.with_suffix(".in")
    for line in src.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.split(r"[=<>!~\[ ]", line, maxsplit=1)[0].lower()
            assert name in reqs, f"{src.name}'s {name} is not in {lock.name}"


def test_the_loader_locks_pin_what_the_gpu_loaders_need():
    torch = requirements(LOCKS[0])
    assert torch["torch"][0] == "torch==2.11.0" and torch["torchvision"][0] == "torchvision==0.26.0"
    assert {"numpy", "pillow", "webdataset", "braceexpand", "pyyaml"} <= set(torch)
    # the same torch build (and CUDA wheels) as the pytorch engine image: one cu130 stack, one set of hashes
    engine = requirements(ROOT / "images/pytorch/requirements-cuda.lock")
    for name, pin in engine.items():
        assert torch[name] == pin, name
    # the host-userland build adds only what the GPU machine's torch venv lacks, at the CUDA lock's pins
    extra = requirements(LOCKS[1])
    assert set(extra) == {"webdataset", "braceexpand", "pyyaml"}
    assert all(extra[n][0] == torch[n][0] and set(extra[n][1]) <= set(torch[n][1]) for n in extra)
    dali = requirements(LOCKS[2])
    assert dali["nvidia-dali-cuda130"][0] == "nvidia-dali-cuda130==2.4.0"
    # dali-gpu's `mixed` decoder: nvImageCodec with its GPU codecs, nvJPEG of CUDA 13.0, and nvCOMP DALI asks for
    assert {"nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "nvidia-nvjpeg2k-cu13", "nvidia-nvtiff-cu13",
            "nvidia-libnvcomp-cu13"} <= set(dali)
    assert dali["nvidia-nvjpeg"][0].startswith("nvidia-nvjpeg==13.0.")
    assert "torch" not in dali
    # the lock was resolved from pypi.org, where nvidia-dali-cuda130 is published (not pypi.nvidia.com)
    assert "--index-url https://pypi.org/simple" in (ROOT / "images/loader-dali/lock.sh").read_text()


@pytest.mark.parametrize("service", ["loader-torch", "loader-dali"])
def test_the_cuda_builds_start_from_the_engine_images_pinned_base(service):
    """FROM nvidia/cuda pinned by tag and digest: images/pytorch's, so the layers are shared."""
    [mine] = PINNED_BASE.findall((ROOT / f"images/{service}/Dockerfile").read_text())
    [engine] = PINNED_BASE.findall((ROOT / "images/pytorch/Dockerfile").read_text())
    assert mine == engine
    c = load_compose(ROOT / "compose.yaml", env={})
    assert "BASE_IMAGE" not in c.build_args(service)  # the default build takes the Dockerfile's pinned base
    assert c.build_args(service)["LOCK"] == "requirements-cuda.lock"
    ci = c.build_args(service, variant="cpu-ci")
    assert ci["BASE_IMAGE"] == "kitctl-ci-base:bookworm" and ci["PIP_NO_INDEX"] == "1"
    assert (ROOT / f"images/{service}" / ci["LOCK"]).is_file()
    assert "is not built yet" not in (ROOT / f"images/{service}/Dockerfile").read_text()


def test_each_build_of_the_loader_images_serves_its_own_loaders():
    c = load_compose(ROOT / "compose.yaml", env={})
    gpu = ("pytorch-dataloader", "webdataset", "pytorch-nvjpeg")
    assert c.loaders("loader-torch") == gpu and c.image("loader-torch") == "kitctl/loader-torch:cu130"
    assert c.loaders("loader-torch", "cpu-ci") == ("pytorch-dataloader", "webdataset")
    assert c.loaders("loader-torch", "host-userland") == gpu  # webdataset from wheels/ there
    assert c.build_args("loader-torch", variant="host-userland")["FRAMEWORK_FROM_BASE"] == "/opt/torch/.venv"
    assert c.loaders("loader-dali") == ("dali-cpu", "dali-gpu") and c.loaders("loader-dali", "cpu-ci") == ("dali-cpu",)
    assert c.loaders("loader-ffcv") == c.loaders("loader-ffcv", "cpu-ci") == ("ffcv",)
    # the image's kit.loaders label (KIT_LOADERS) says what compose.yaml says, build by build
    for name, svc in c.services.items():
        if not name.startswith("loader-"):
            continue
        for v in [None, *svc.variants]:
            label = c.build_args(name, variant=v).get("KIT_LOADERS")
            if label is not None:
                assert tuple(label.split(",")) == c.loaders(name, v), (name, v)
            else:  # the Dockerfile's default label
                m = re.search(r"^ARG KIT_LOADERS=(\S+)$", svc.dockerfile_path.read_text(), re.M)
                assert m is None or tuple(m.group(1).split(",")) == c.loaders(name, v), (name, v)


def test_a_variant_loader_list_must_be_names(tmp_path):
    from kitctl.images.compose import ComposeError

    (tmp_path / "compose.yaml").write_text(
        "services:\n  loader-x:\n    image: a/b:c\n    build: .\n    x-kitctl:\n      loaders: [a]\n"
        "      variants:\n        v:\n          loaders: a\n")
    with pytest.raises(ComposeError, match="variants.v.loaders must be a list of loader names"):
        load_compose(tmp_path / "compose.yaml", env={})


@pytest.fixture
def corpus(tmp_path) -> Path:
    """What check_corpus looks at: a manifest (no image is read: nothing runs)."""
    (tmp_path / "corpus").mkdir()
    files = [{"file": f"train/0/{i}.jpg", "bytes": 100} for i in range(4)]
    (tmp_path / "corpus" / "manifest.json").write_text(
        json.dumps({"kind": "kitctl-image-corpus", "images": 4, "files": files}))
    return tmp_path / "corpus"


def _config(corpus: Path, loaders: str, tag: str):
    from kitctl.benchmarks.dataload.config import DataloadConfig

    return DataloadConfig.from_flags(str(corpus), None, loaders, "1", "ram", "jpeg90", "64", 1, 1, 4, None, None,
                                     sys.executable, "docker", tag)


def test_dataload_picks_each_loaders_image_from_the_tags_build(corpus):
    """The path `kitctl run dataload --runtime docker` takes: DataloadConfig.image(loader) from compose.yaml."""
    cfg = _config(corpus, "pytorch-dataloader,webdataset,ffcv,pytorch-nvjpeg,dali-cpu,dali-gpu", "cu130")
    assert {ld: cfg.image(ld) for ld in cfg.loaders} == {
        "pytorch-dataloader": "kitctl/loader-torch:cu130", "webdataset": "kitctl/loader-torch:cu130",
        "pytorch-nvjpeg": "kitctl/loader-torch:cu130", "ffcv": "kitctl/loader-ffcv:ci",  # ffcv: CPU build only
        "dali-cpu": "kitctl/loader-dali:cu130", "dali-gpu": "kitctl/loader-dali:cu130"}
    cfg = _config(corpus, "pytorch-dataloader,ffcv,dali-cpu", "ci")
    assert [cfg.image(ld) for ld in cfg.loaders] == ["kitctl/loader-torch:ci", "kitctl/loader-ffcv:ci",
                                                     "kitctl/loader-dali:ci"]
    cfg = _config(corpus, "pytorch-nvjpeg,webdataset", "cu130-host-userland")
    assert {cfg.image(ld) for ld in cfg.loaders} == {"kitctl/loader-torch:cu130-host-userland"}
    # a resumed partial rebuilds the same choice from its record
    from kitctl.benchmarks.dataload.config import DataloadConfig

    again = DataloadConfig.from_json(cfg.to_json())
    assert again.image("pytorch-nvjpeg") == cfg.image("pytorch-nvjpeg") and again.image_tag == "cu130-host-userland"


@pytest.mark.parametrize("loaders, says", [
    ("pytorch-nvjpeg", "pytorch-nvjpeg (it decodes on the GPU) is not in kitctl/loader-torch:ci, the cpu-ci build of "
                       "loader-torch, which serves pytorch-dataloader, webdataset; use --image-tag cu130 or "
                       "--image-tag cu130-host-userland"),
    ("dali-cpu,dali-gpu", "dali-gpu (it decodes on the GPU) is not in kitctl/loader-dali:ci, the cpu-ci build of "
                          "loader-dali, which serves dali-cpu; use --image-tag cu130"),
])
def test_a_gpu_loader_is_refused_for_the_cpu_ci_images_in_one_line(corpus, tmp_path, loaders, says):
    """Through the CLI, before anything runs or the daemon is asked: exit 2, one line, no artifact."""
    env_py = [sys.executable, "-c", "from kitctl.cli import main; main()"]
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([*env_py, "run", "dataload", "--corpus", str(corpus), "--loaders", loaders, "--runtime",
                        "docker", "--image-tag", "ci", "--results-dir", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2, p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith("kitctl: --runtime docker: ") and says in line and "Traceback" not in p.stderr
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").iterdir())


def test_a_tag_compose_does_not_name_leaves_it_to_the_images_label(corpus):
    """A retagged image (kitctl/loader-torch:<tag>): compose.yaml cannot say what it serves, so the config takes any
    loader and docker_runtime reads the image's kit.loaders label (tests/test_loader_image.py runs that refusal)."""
    from kitctl.benchmarks.data.images import loader_builds

    cfg = _config(corpus, "pytorch-nvjpeg,ffcv", "mine")
    assert [cfg.image(ld) for ld in cfg.loaders] == ["kitctl/loader-torch:mine", "kitctl/loader-ffcv:mine"]
    assert all(b.loaders is None for b in loader_builds("mine").values())


def test_a_gpu_loader_through_docker_without_a_gpu_is_one_line():
    """gpu_attach: the GPU a GPU loader's container gets is NVML's; this host has none (skipped where it has)."""
    from kitctl.benchmarks.data.images import gpu_attach
    from kitctl.core.gpu import detect_gpu
    from kitctl.errors import Fail

    if detect_gpu() is not None:
        host_lacks("no-gpu", "this host has a GPU: the probe would run")
    with pytest.raises(Fail, match="dali-gpu decode on the GPU, and NVML finds no GPU on this host"):
        gpu_attach("kitctl/loader-dali:cu130", ["dali-gpu"])


def test_a_gpu_loaders_container_is_started_with_the_recorded_request(monkeypatch):
    """The container a data trial gets from the run's Docker runtime: a GPU loader's (pytorch-nvjpeg, dali-gpu)
    has the request the runtime record names (probed at the run's start) on host.gpu's UUID; a CPU loader's, and
    any where no request was recorded, none. The dataset is mounted read-only at /data and named so in argv."""
    import kitctl.runtimes.docker.runtime as dr
    from kitctl.benchmarks.data import trial

    monkeypatch.setattr(dr, "docker_client", lambda *a, **k: object())  # no daemon is asked: kwargs only
    cfg = type("Cfg", (), {"runtime": "docker", "python": sys.executable, "image_tag": "cu130"})()
    uuid = "GPU-12345678-1234-1234-1234-123456789abc"
    doc = {"run_id": "r1", "host": {"gpu": {"uuid": uuid}}, "runtime": {"name": "docker", "gpu_request": "cdi"}}

    def kwargs(gpu: bool) -> dict:
        where = trial.Where.of(cfg, doc)
        spec = trial._spec(where, "kitctl/loader-torch:cu130", ["dataload", "--dataset", "/srv/ds"], "x",
                           mounts=(trial.Mount("/srv/ds", "/data"),), gpu=gpu, benchmark="dataload")
        return trial.runtime_of(where).container_kwargs(spec)

    try:
        kw = kwargs(gpu=True)
        (req,) = kw["device_requests"]
        assert req["Driver"] == "cdi" and req["DeviceIDs"] == [f"nvidia.com/gpu={uuid}"]
        assert kw["command"] == ["dataload", "--dataset", "/data"] and kw["mounts"][0]["ReadOnly"] is True
        assert kw["labels"]["kit.run-id"] == "r1" and kw["network_mode"] == "none" and kw["cap_drop"] == ["ALL"]
        assert "device_requests" not in kwargs(gpu=False)  # a CPU loader: no GPU
        doc["runtime"]["gpu_request"] = "toolkit"
        (req,) = kwargs(gpu=True)["device_requests"]
        assert req["DeviceIDs"] == [uuid] and req["Capabilities"] == [["gpu"]]
        doc["runtime"].pop("gpu_request")  # a run of CPU loaders probed nothing: no request
        assert "device_requests" not in kwargs(gpu=True)
    finally:
        trial._RUNTIMES.clear()
