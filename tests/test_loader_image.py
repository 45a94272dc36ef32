"""images/loader-torch, loader-ffcv and loader-dali built FROM the local CI base (wheels/, no index) and real
dataload trials in fresh containers: network off, the dataset mounted read-only, cold source (page cache dropped
inside the container and checked with mincore). Slow: an image build."""
from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from conftest import _build_ci_image, remove_containers

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
    pytest.importorskip("skimage")
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
        pytest.skip("no ffcv here to write the .beton")
    image = request.getfixturevalue(image)
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
                        "--workers", "2", "--source", "cold", "--runs", "2", "--epochs", "1", "--batch", "8",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["runtime"] == {"name": "docker", "images": {"pytorch-dataloader": IMAGE}}
    [cell] = doc["results"]
    assert cell["status"] == "ok" and len(cell["runs"]) == 2
    assert all(r["versions"]["torch"] == "2.13.0+cpu" and r["epochs"][0]["resident_before"] <= 0.05
               for r in cell["runs"])
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "pytorch-nvjpeg",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True)
    assert p.returncode == 2 and "no image for pytorch-nvjpeg" in p.stderr


def test_kitctl_dataload_dali_through_docker(client, dali_image, tmp_path):
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
                        "--workers", "2", "--source", "ram,cold", "--runs", "2", "--epochs", "1", "--batch", "8",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["runtime"] == {"name": "docker", "images": {"dali-cpu": "kitctl/loader-dali:ci"}}
    cells = {c["source"]: c for c in doc["results"]}
    assert sorted(cells) == ["cold", "ram"]
    for source, cell in cells.items():
        assert cell["status"] == "ok" and len(cell["runs"]) == 2, cell
        for r in cell["runs"]:
            assert r["versions"]["nvidia-dali-cuda130"] == "2.4.0" and r["versions"]["torch"] is None
            assert "decoders.image_random_crop (cpu)" in r["impl"]
            assert r["batch_shape"] == [8, 224, 224, 3] and r["images"] == 16  # NHWC uint8
            frac = r["epochs"][0]["resident_before"]
            assert frac <= 0.05 if source == "cold" else frac >= 0.98
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    # dali-gpu: the image is CPU-only and a docker run requests no GPU yet: refused up front, not a failed run
    p = subprocess.run([*entry, "run", "dataload", "--corpus", str(corpus_dir), "--loaders", "dali-gpu",
                        "--runtime", "docker", "--results-dir", str(res)], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "no image for dali-gpu" in p.stderr
