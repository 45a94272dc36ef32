"""images/loader-torch, loader-ffcv and loader-dali built FROM the local CI base (wheels/, no index) and real
dataload trials in fresh containers: network off, the dataset mounted read-only, cold source (page cache dropped
inside the container and checked with mincore). Slow: an image build."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import _build_ci_image, need_module, remove_containers, unavailable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "trials" / "dataload"))
IMAGE = "kitctl/loader-torch:ci"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def loader_image(client) -> str:
    """compose.yaml's loader-torch service, cpu-ci variant, built the way CI builds the engine images."""
    return _build_ci_image(client, "loader-torch", "torch-*.whl")


@pytest.fixture(scope="module")
def ffcv_image(client) -> str:
    """loader-ffcv: ffcv built from its sdist against Debian's OpenCV/libturbojpeg, in an image of its own."""
    return _build_ci_image(client, "loader-ffcv", "ffcv-*.whl")


@pytest.fixture(scope="module")
def dali_image(client) -> str:
    """loader-dali: DALI 2.4.0 + nvImageCodec's CPU path (no GPU codecs, no torch), from hash-locked wheels."""
    return _build_ci_image(client, "loader-dali", "nvidia_dali_cuda130-*.whl")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    need_module("skimage", "the corpus's photographs ship in scikit-image")
    import corpus
    import writers

    base = tmp_path_factory.mktemp("loader-image")
    corpus.make(base / "corpus", 32, classes=4, seed=1, workers=2)
    m = corpus.read_manifest(base / "corpus")
    out = {}
    formats = ["folder", "webdataset"]
    try:
        import ffcv  # noqa: F401  (the .beton writer)

        formats.append("ffcv")
    except ImportError:
        pass
    for fmt in formats:
        writers.write(base / "corpus", m, base / fmt, fmt, "jpeg90", 256, workers=2)
        out[fmt] = base / fmt
    for p in base.rglob("*"):  # the container's user (uid 10001) reads them
        p.chmod(0o755 if p.is_dir() else 0o644)
    base.chmod(0o755)
    return out


@pytest.mark.parametrize("loader,fmt,image", [("pytorch-dataloader", "folder", "loader_image"),
                                            ("webdataset", "webdataset", "loader_image"),
                                            ("ffcv", "ffcv", "ffcv_image"),
                                            ("dali-cpu", "folder", "dali_image")])
def test_a_loader_runs_in_its_image(client, request, datasets, loader, fmt, image):
    if fmt not in datasets:
        unavailable("ffcv is not installed here to write the .beton (.ci/setup-dataload.sh builds it)")
    fixture, image = image, request.getfixturevalue(image)
    run_id = uuid.uuid4().hex[:12]
    c = client.containers.run(
        image, ["dataload", "--loader", loader, "--dataset", "/data", "--workers", "2", "--source", "cold",
                       "--batch", "8", "--epochs", "1"],
        volumes={str(datasets[fmt]): {"bind": "/data", "mode": "ro"}}, network_mode="none", detach=True,
        # posix_fadvise(DONTNEED) evicts only for the files' owner (recent kernels): run as the dataset's owner.
        user=f"{datasets[fmt].stat().st_uid}:{datasets[fmt].stat().st_gid}",
        shm_size="256m", labels={"kit.run-id": run_id, "kit.owner-pid": str(os.getpid()), "kit.host": "test"})
    try:
        rc = c.wait(timeout=300)["StatusCode"]
        out = c.logs(stdout=True, stderr=False).decode()
        err = c.logs(stdout=False, stderr=True).decode()
    finally:
        remove_containers([c])
    lines = out.strip().splitlines()
    assert lines and lines[-1].startswith("KIT-RESULT "), (out, err[-2000:])
    r = json.loads(lines[-1][len("KIT-RESULT "):])
    assert rc == 0 and r["status"] == "ok", (r.get("error"), err[-2000:])
    assert r["images"] == 32 and sorted(r["batch_shape"][1:]) == [3, 224, 224]  # NCHW (torch) or NHWC (ffcv)
    assert r["epochs"][0]["resident_before"] <= 0.05  # dropped inside the container, checked with mincore
    assert r["versions"]["torch"] == (None if loader == "dali-cpu" else "2.13.0+cpu")
    labels = client.images.get(image).labels  # what kitctl checks: the cpu-ci builds serve no GPU loader
    assert labels["kit.loaders"] == {"loader_image": "pytorch-dataloader,webdataset", "ffcv_image": "ffcv",
                                     "dali_image": "dali-cpu"}[fixture]
    assert (r["versions"]["ffcv"] == "1.0.2") == (loader == "ffcv")  # each loader in its own image
    assert (r["versions"]["nvidia-dali-cuda130"] == "2.4.0") == (loader == "dali-cpu")
    if loader == "dali-cpu":  # CPU codecs only (NVIMGCODEC_EXTENSIONS_PATH): no GPU codec's load failure printed
        assert "decoders.image_random_crop (cpu)" in r["impl"] and "Failed to load" not in err, err[-2000:]


def test_kitctl_dataload_through_docker(client, loader_image, tmp_path):
    """`kitctl run dataload --runtime docker`: one fresh container per run, the artifact says so, none left."""
    import subprocess

    from kitctl.core.artifact import load

    entry = [sys.executable, "-c", "from kitctl.cli import main; main()"]
    corpus_dir = tmp_path / "corpus"
    assert subprocess.run([*entry, "data", "make", "--out", str(corpus_dir), "--images", "16", "--classes", "2",
                           "--workers", "2"], capture_output=True).returncode == 0
    res = tmp_path / "results"
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "pytorch-dataloader",
                        "--workers", "2", "--source", "cold", "--runs", "2", "--epochs", "1", "--window-images", "1",
                        "--window-seconds", "0.01", "--batch", "8",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["runtime"]["name"] == "docker" and doc["runtime"]["images"] == {"pytorch-dataloader": IMAGE}
    assert doc["runtime"]["image_ids"][IMAGE]["id"] == client.images.get(IMAGE).id
    [cell] = doc["results"]
    assert cell["status"] == "ok" and len(cell["runs"]) == 2
    assert all(r["versions"]["torch"] == "2.13.0+cpu" and r["epochs"][0]["resident_before"] <= 0.05
               for r in cell["runs"])
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    # pytorch-nvjpeg: the cpu-ci build (tag ci) does not serve it, the CUDA build does: refused up front, one line
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "pytorch-nvjpeg",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "pytorch-nvjpeg (it decodes on the GPU) is not in kitctl/loader-torch:ci" in p.stderr, p.stderr
    # the same CPU image under a tag compose.yaml does not name: its own kit.loaders label refuses it
    tag = f"kit-test-{uuid.uuid4().hex[:8]}"
    client.images.get(IMAGE).tag("kitctl/loader-torch", tag)
    try:
        p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "pytorch-nvjpeg",
                            "--runtime", "docker", "--image-tag", tag, "--batch", "4", "--results-dir", str(res)],
                           capture_output=True, text=True)
    finally:
        client.images.remove(f"kitctl/loader-torch:{tag}")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (f"image kitctl/loader-torch:{tag} does not serve pytorch-nvjpeg: its kit.loaders label says "
            "pytorch-dataloader,webdataset") in p.stderr, p.stderr
    assert not list(res.glob("*.partial.json"))


def test_kitctl_dataload_dali_through_docker(client, dali_image, loader_image, tmp_path):
    """dali-cpu (device_id=None) in its own image through `kitctl run dataload --runtime docker`: RAM and cold, real
    JPEG decodes by nvImageCodec's CPU path, one fresh container per run, none left."""
    import subprocess

    from kitctl.core.artifact import load

    entry = [sys.executable, "-c", "from kitctl.cli import main; main()"]
    # this checkout's kitctl, whatever the installed entry point points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    corpus_dir = tmp_path / "corpus"
    assert subprocess.run([*entry, "data", "make", "--out", str(corpus_dir), "--images", "16", "--classes", "2",
                           "--workers", "2"], capture_output=True, env=env).returncode == 0
    res = tmp_path / "results"
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "dali-cpu",
                        "--workers", "2", "--source", "ram,cold", "--runs", "2", "--epochs", "1", "--window-images", "1",
                        "--window-seconds", "0.01", "--batch", "8",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["runtime"]["images"] == {"dali-cpu": "kitctl/loader-dali:ci"}
    assert doc["runtime"]["writers"] == {"folder": IMAGE}  # the JPEG folder written in loader-torch
    cells = {c["source"]: c for c in doc["results"]}
    assert sorted(cells) == ["cold", "ram"]
    for source, cell in cells.items():
        assert cell["status"] == "ok" and len(cell["runs"]) == 2, cell
        for r in cell["runs"]:
            assert r["versions"]["nvidia-dali-cuda130"] == "2.4.0" and r["versions"]["torch"] is None
            assert "decoders.image_random_crop (cpu)" in r["impl"]
            # NHWC uint8; whole 16-image epochs until the window holds >= 0.01 s (one, or more where one epoch
            # reads faster than that here)
            assert r["batch_shape"] == [8, 224, 224, 3] and r["images"] >= 16 and r["images"] % 16 == 0
            frac = r["epochs"][0]["resident_before"]
            assert frac <= 0.05 if source == "cold" else frac >= 0.98
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    # dali-gpu: the cpu-ci build has no GPU codecs; the CUDA build (tag cu130) serves it: refused up front, one line
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "dali-gpu",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "dali-gpu (it decodes on the GPU) is not in kitctl/loader-dali:ci" in p.stderr
    assert "use --image-tag cu130" in p.stderr


def test_a_gpu_loader_on_a_daemon_that_attaches_no_gpu_is_one_line(client, loader_image):
    """gpu_attach probes the daemon with throw-away containers of the loader's image, as the engines' runtime does;
    this daemon has no GPU to give (the UUID is a stand-in: NVML has no GPU here), so both requests are refused and
    the run would stop before its first container, in one line naming the fixes."""
    from kitctl.benchmarks.data.images import gpu_attach
    from kitctl.errors import Fail

    mine = {"label": [f"kit.owner-pid={os.getpid()}", "kit.run-id=gpu-probe"]}  # this process's probes only
    with pytest.raises(Fail) as exc:
        gpu_attach(loader_image, ["pytorch-nvjpeg"], gpu={"uuid": "GPU-00000000-0000-0000-0000-000000000000"})
    msg = str(exc.value)
    assert msg.startswith("--runtime docker: pytorch-nvjpeg: ") and "\n" not in msg, msg
    assert "cannot attach" in msg and "GPU-00000000" in msg, msg
    assert not client.containers.list(all=True, filters=mine)  # the probes' containers are gone


# -- train-e2e and the datasets through Docker (the host needs no ffcv or webdataset) -------------------------------
E2E = ("--model", "resnet18", "--workers", "1", "--side", "64", "--batch", "4", "--warmup", "1", "--runs", "1",
       "--window-images", "1", "--window-seconds", "0.01")


def _kitctl(*args, timeout=900):
    """This checkout's kitctl in a fresh process, whatever the installed entry point points at."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", "from kitctl.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("e2e-docker") / "corpus"
    p = _kitctl("data", "make", "--out", out, "--images", 12, "--classes", 3, "--workers", 2)
    assert p.returncode == 0, p.stderr
    return out


def _final(res: Path, benchmark: str) -> dict:
    from kitctl.core.artifact import load

    [final] = [f for f in res.glob(f"{benchmark}-*.json") if not f.name.endswith(".partial.json")]
    return load(final)  # schema-checked


def _left(client, doc: dict) -> list:
    return client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})


def _host_owned(folder: Path) -> None:
    """Everything a container wrote is the caller's (not the image's user 10001): a later local run or rm works."""
    paths = [folder, *folder.rglob("*")]
    assert len(paths) > 2 and all(p.stat().st_uid == os.getuid() and p.stat().st_gid == os.getgid() for p in paths)


def test_kitctl_train_e2e_through_docker(client, loader_image, small_corpus, tmp_path):
    """train-e2e --runtime docker: the folder dataset written inside loader-torch (as the caller), then synthetic and
    pytorch-dataloader each in a fresh container of it training a real ResNet-18 on CPU; the artifact names the
    image and its id; no container left."""
    res, ds = tmp_path / "results", tmp_path / "datasets"
    p = _kitctl("run", "train-e2e", "--corpus", small_corpus, "--data-dir", ds, "--loaders", "pytorch-dataloader",
                *E2E, "--steps", 2, "--runtime", "docker", "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    doc = _final(res, "train-e2e")
    rt = doc["runtime"]
    assert rt["name"] == "docker" and rt["images"] == {"synthetic": IMAGE, "pytorch-dataloader": IMAGE}
    assert rt["writers"] == {"folder": IMAGE} and rt["image_ids"][IMAGE]["id"] == client.images.get(IMAGE).id
    [written] = doc["datasets"]
    # written by the image's trial: its webdataset, no ffcv (this host's Python has ffcv: it did not write it)
    assert written["status"] == "ok" and written["size"]["images"] == 12
    assert written["versions"]["webdataset"] == "1.0.2" and written["versions"]["ffcv"] is None
    _host_owned(Path(written["path"]))
    assert [(c["loader"], c["status"]) for c in doc["results"]] == [("synthetic", "ok"), ("pytorch-dataloader", "ok")]
    for c in doc["results"]:
        [r] = c["runs"]
        assert r["versions"]["torch"] == "2.13.0+cpu" and r["versions"]["ffcv"] is None and r["device"] == "cpu"
        assert r["images"] == 8 and r["train_images_per_second"] > 0 and r["parameters"] == 11_689_512
    assert doc["results"][1]["runs"][0]["resident_before"] >= 0.98  # the mounted dataset, page cache warm
    assert not _left(client, doc)
    [final] = [f for f in res.glob("train-e2e-*.json") if not f.name.endswith(".partial.json")]
    p = _kitctl("report", final, "--out", tmp_path / "report.md")
    assert p.returncode == 0, p.stderr
    assert f"`{IMAGE}` ({client.images.get(IMAGE).id[:19]}): synthetic, pytorch-dataloader, folder" in \
        (tmp_path / "report.md").read_text()
    # a later local dataload reuses the dataset the container wrote (host-owned, dataset.json read)
    p = _kitctl("run", "dataload", "--corpus", small_corpus, "--data-dir", ds, "--loaders", "pytorch-dataloader",
                "--side", 64, "--workers", 1, "--runs", 1, "--epochs", 1, "--window-images", 1,
                "--window-seconds", 0.01, "--batch", 4, "--results-dir", res)
    assert p.returncode == 0 and "dataset folder" not in p.stdout, p.stderr + p.stdout


def test_train_e2e_docker_bad_input_is_one_line_exit_2(client, small_corpus, tmp_path):
    """Refused before anything runs: no artifact, no container."""
    for flags, says in ((["--loaders", "dali-cpu"], "dali-cpu: its image (loader-dali) has no torch"),
                        (["--loaders", "pytorch-nvjpeg"], "pytorch-nvjpeg: it decodes on the GPU, and train-e2e's containers"),
                        (["--device", "cuda"], "--runtime docker --device cuda"),
                        (["--image-tag", "no-such-tag", "--batch", "4", "--steps", "2"],
                         "image kitctl/loader-torch:no-such-tag is not present"),
                        (["--runtime", "podman"], "--runtime must be local or docker")):
        args = ["--runtime", "docker", *flags] if "--runtime" not in flags else flags
        p = _kitctl("run", "train-e2e", "--corpus", small_corpus, "--data-dir", tmp_path / "ds", *args,
                    "--results-dir", tmp_path)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, (flags, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = _kitctl("run", "datasize", "--corpus", small_corpus, "--runtime", "docker", "--image-tag", "no-such-tag",
                "--results-dir", tmp_path)
    assert p.returncode == 2 and "is not present" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not list(tmp_path.glob("*.json")) and not (tmp_path / "ds").exists()


def test_train_e2e_docker_sigterm_keeps_the_partial_and_no_container(client, loader_image, small_corpus, tmp_path):
    """SIGTERM while a training container runs: exit 130, the partial kept (resumable), the container gone."""
    import signal
    import subprocess
    import time

    res = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", "from kitctl.cli import main; main()", "run", "train-e2e",
                             "--corpus", str(small_corpus), "--data-dir", str(tmp_path / "ds"), "--loaders",
                             "pytorch-dataloader", *E2E, "--warmup", "500", "--steps", "2", "--runtime", "docker",
                             "--results-dir",
                             str(res)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    mine = {"label": f"kit.owner-pid={proc.pid}"}
    try:
        deadline = time.monotonic() + 300
        seen = []
        while time.monotonic() < deadline and proc.poll() is None:
            seen = [c for c in client.containers.list(filters=mine) if c.labels.get("kit.benchmark") == "train-e2e"]
            # Args: trial.py's path, then its subcommand: `train`, not the dataset's writer (`datasize`)
            if any((c.attrs.get("Args") or ["", ""])[1:2] == ["train"] for c in seen):
                break
            time.sleep(0.5)
        assert seen and proc.poll() is None, "no training container seen"
        time.sleep(3)  # inside the run: the container is training
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        remove_containers(client.containers.list(all=True, filters=mine))  # only if the test fails
    assert proc.returncode == 130 and "partial artifact kept" in err, err
    assert not client.containers.list(all=True, filters=mine)
    [partial] = res.glob("train-e2e-*.partial.json")
    doc = json.loads(partial.read_text())
    assert doc["state"] == "interrupted" and doc["interrupted_by"] == "SIGTERM" and doc["runtime"]["name"] == "docker"
    assert doc["datasets"][0]["status"] == "ok"  # kept: a --resume reuses it
    assert not any(c["runs"] for c in doc["results"])  # the 500-step warm-up was cut, not recorded as a result


def test_ffcv_datasets_and_training_through_docker(client, loader_image, ffcv_image, small_corpus, tmp_path):
    """The .beton written inside loader-ffcv (the host's ffcv is not used: the record says the image's), then ffcv
    feeding ResNet-18 in a fresh loader-ffcv container; `kitctl run datasize --runtime docker` measures every
    format in its writer's image. (The ffcv image build is most of this test's time.)"""
    res, ds = tmp_path / "results", tmp_path / "datasets"
    p = _kitctl("run", "train-e2e", "--corpus", small_corpus, "--data-dir", ds, "--loaders", "ffcv", *E2E,
                "--steps", 2, "--runtime", "docker", "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    doc = _final(res, "train-e2e")
    ffcv = "kitctl/loader-ffcv:ci"
    assert doc["runtime"]["images"] == {"synthetic": IMAGE, "ffcv": ffcv}
    assert doc["runtime"]["writers"] == {"ffcv": ffcv}
    [written] = doc["datasets"]
    assert written["status"] == "ok" and written["versions"]["ffcv"] == "1.0.2"
    assert written["versions"]["webdataset"] is None  # loader-ffcv has no webdataset: not the host's interpreter
    _host_owned(Path(written["path"]))
    [synth, cell] = doc["results"]
    assert synth["status"] == "ok" and cell["status"] == "ok", cell["reason"]
    [r] = cell["runs"]
    assert r["versions"]["ffcv"] == "1.0.2" and r["layout"] == "NHWC" and r["images"] == 8
    assert not _left(client, doc)
    p = _kitctl("run", "datasize", "--corpus", small_corpus, "--formats", "ffcv,webdataset,folder", "--encodings",
                "jpeg90", "--sides", 64, "--workers", 1, "--runtime", "docker", "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    doc = _final(res, "datasize")
    assert doc["runtime"]["images"] == {"ffcv": ffcv, "webdataset": IMAGE, "folder": IMAGE}
    cells = {c["format"]: c for c in doc["results"]}
    assert all(c["status"] == "ok" and c["size"]["images"] == 12 for c in cells.values()), cells
    assert cells["ffcv"]["versions"]["ffcv"] == "1.0.2" and cells["webdataset"]["versions"]["ffcv"] is None
    assert cells["ffcv"]["size"]["file_bytes"] > cells["ffcv"]["size"]["payload_bytes"]  # 8 MiB pages
    assert not _left(client, doc)


def _on_a_block_device(d: Path) -> bool:
    dev = os.stat(d).st_dev
    return Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").exists()


def test_kitctl_dataload_cold_through_a_capped_read_path(client, loader_image, tmp_path, request):
    """`--read-mbps`: the loader's container reads the dataset through Docker's --device-read-bps on the disk that
    holds it (slow storage emulated); the kit checks the payload did not come faster than the cap (else the cell
    fails: the cap did not hold) and labels the source."""
    import subprocess

    from kitctl.core.artifact import load
    from kitctl.benchmarks.data.throttle import block_device

    # The data go where a disk holds them: tmp_path, or (a host whose /tmp is in RAM) beside the checkout. Which
    # is decided here, from /sys, not by kitctl: kitctl's own answer (block_device) is what is under test.
    base = next((d for d in (tmp_path, ROOT) if _on_a_block_device(d)), None)
    if base is None:
        unavailable(f"neither {tmp_path} nor {ROOT} is on a block device: no read path to cap here")
    if base is ROOT:
        (ROOT / ".cache").mkdir(exist_ok=True)  # git-ignored
        base = Path(tempfile.mkdtemp(prefix="test-read-cap-", dir=ROOT / ".cache"))
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    disk = block_device(base)  # a Fail here is a failure: that folder is on a disk
    entry = [sys.executable, "-c", "from kitctl.cli import main; main()"]
    corpus_dir = base / "corpus"
    # 48 JPEGs at q90 / 256 px: ~0.8 MB of payload, ~1.5 s per epoch at 0.5 MB/s
    t0 = time.monotonic()
    assert subprocess.run([*entry, "data", "make", "--out", str(corpus_dir), "--images", "48", "--classes", "2",
                           "--workers", "2"], capture_output=True).returncode == 0
    res = base / "results"
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "pytorch-dataloader",
                        "--workers", "2", "--source", "cold", "--read-mbps", "0.5", "--runs", "1", "--epochs", "1",
                        "--window-images", "1", "--window-seconds", "0.01", "--batch", "8", "--runtime", "docker",
                        "--results-dir", str(res)],
                       capture_output=True, text=True, timeout=600)
    print(f"corpus + dataload: {time.monotonic() - t0:.0f} s")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "cold @ 0.5 MB/s w=2 run 1/1" in p.stderr  # a progress line
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["configuration"]["read_cap"] == {"mb_per_s": 0.5, "device": disk,
                                                "via": "docker --device-read-bps (blkio throttle on cgroup v1, "
                                                       "io.max on v2)"}
    assert "capped at 0.5 MB/s" in doc["configuration"]["sources_meaning"]["cold"]
    [cell] = doc["results"]
    [run] = cell["runs"]
    assert cell["status"] == "ok", cell["reason"]
    assert run["epochs"][0]["resident_before"] <= 0.05
    payload = run["payload_mb_per_s"]
    assert 0 < payload <= 0.55  # what the kit checks: no faster than the device was allowed to deliver
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
