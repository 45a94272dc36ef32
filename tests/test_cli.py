"""`kitctl run maxbatch` refuses bad input in one line, exit 2, writing nothing.

The real console entry point runs in a subprocess (`kitctl.cli.main`), from a scratch cwd,
with --results-dir under tmp_path; after each refusal neither the results dir nor the cwd
holds anything new.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        return False


HAS_GPU = nvml_works()


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    d = tmp_path / "cwd"
    d.mkdir()
    return d


def kitctl(work: Path, *args: str, results: bool = True) -> subprocess.CompletedProcess:
    argv = [*ENTRY, *args]
    if results:
        argv += ["--results-dir", str(work / "results")]
    env = dict(os.environ)
    env.setdefault("COLUMNS", "200")
    return subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=60, env=env)


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def refuse(work: Path, *args: str, match: str | tuple[str, ...] | None = None, results: bool = True) -> str:
    """Run kitctl and assert the one-line refusal contract; return the message."""
    before = snapshot(work)
    p = kitctl(work, *args, results=results)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("kitctl: "), p.stderr
    assert not (work / "results").exists(), list((work / "results").rglob("*"))
    assert snapshot(work) == before
    if match is not None:
        options = (match,) if isinstance(match, str) else match
        assert any(m in lines[0] for m in options), lines[0]
    return lines[0]


# -- the search bounds --------------------------------------------------------------------

def test_unknown_engine(work):
    msg = refuse(work, "run", "maxbatch", "--engines", "pytorch-eager,mxnet", "--device", "cpu",
                 match="unknown engine 'mxnet'")
    assert "pytorch-eager" in msg  # names the known ones


def test_empty_engines(work):
    refuse(work, "run", "maxbatch", "--engines", " , ", "--device", "cpu", match="--engines is empty")


def test_opennn_is_refused_on_cpu(work):
    # its trial is built for CUDA only (images/opennn/build.sh)
    refuse(work, "run", "maxbatch", "--engines", "opennn-pool1", "--device", "cpu",
           match="opennn-pool1 cannot run on --device cpu")


def test_opennn_throughput_path_is_refused_for_maxbatch(work):
    refuse(work, "run", "maxbatch", "--engines", "pytorch-eager,opennn-graph",
           match="engine opennn-graph does not run the maxbatch benchmark")


def test_engine_that_cannot_run_on_cpu(work):
    refuse(work, "run", "maxbatch", "--engines", "pytorch-cudagraph", "--device", "cpu",
           match="cannot run on --device cpu")


@pytest.mark.parametrize("value", ["0", "-3"])
def test_start_batch_not_positive(work, value):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--start-batch", value,
           match=f"--start-batch must be > 0 (got {value})")


def test_max_batch_below_start_batch(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--start-batch", "256", "--max-batch", "128",
           match="--max-batch 128 is below --start-batch 256")


def test_max_batch_below_the_default_start(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--max-batch", "64", match="below --start-batch 128")


@pytest.mark.parametrize("opt,value", [("--start-batch", "abc"), ("--start-batch", "1.5"),
                                       ("--max-batch", "1e6"), ("--start-batch", "")])
def test_non_integer_batch(work, opt, value):
    refuse(work, "run", "maxbatch", "--device", "cpu", opt, value, match=f"'{opt}'")


@pytest.mark.parametrize("value", ["0", "-5"])
def test_timeout_not_positive(work, value):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--timeout", value, match="--timeout must be > 0")


def test_calibration_batch_zero(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--calibration-batch", "0",
           match="--calibration-batch must be > 0")


def test_unknown_strategy(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--strategy", "guided", match="unknown --strategy")


# -- device and GPU -----------------------------------------------------------------------

def test_gpu_that_does_not_exist(work):
    refuse(work, "run", "maxbatch", "--gpu", "99",
           match=("no NVIDIA driver", "no such GPU", "no GPU matches"))


def test_gpu_uuid_that_does_not_exist(work):
    refuse(work, "run", "maxbatch", "--gpu", "GPU-00000000-dead-beef-0000-000000000000",
           match=("no NVIDIA driver", "no GPU matches"))


@pytest.mark.skipif(HAS_GPU, reason="this host has a GPU: the run would start")
def test_no_gpu_without_device_cpu(work):
    msg = refuse(work, "run", "maxbatch", match="no NVIDIA driver")
    assert "--device cpu" in msg


def test_vram_limit_with_device_cpu(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--vram-limit", "16376",
           match="--vram-limit applies to --device cuda")


def test_memory_limit_on_cuda(work):
    refuse(work, "run", "maxbatch", "--memory-limit", "8192", match="--memory-limit applies to --device cpu")


def test_unknown_device(work):
    refuse(work, "run", "maxbatch", "--device", "tpu", match="'--device'")


def test_unknown_precision(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--precision", "fp16", match="'--precision'")


# -- data ---------------------------------------------------------------------------------

def test_cifar10_without_data_dir(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--dataset", "cifar10", match="needs --data-dir")


def test_data_dir_with_synthetic(work, tmp_path):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--data-dir", str(tmp_path),
           match="only read with --dataset cifar10")


def test_nonexistent_data_dir(work, tmp_path):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--dataset", "cifar10",
           "--data-dir", str(tmp_path / "nope"), match="not a readable directory")


def test_data_dir_is_a_file(work, tmp_path):
    f = tmp_path / "cifar.tar.gz"
    f.write_bytes(b"\x1f\x8b")
    refuse(work, "run", "maxbatch", "--device", "cpu", "--dataset", "cifar10", "--data-dir", str(f),
           match="not a readable directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_unreadable_data_dir(work, tmp_path):
    d = tmp_path / "locked"
    (d / "cifar-10-batches-bin").mkdir(parents=True)
    (d / "cifar-10-batches-bin" / "data_batch_1.bin").write_bytes(b"\0" * 10)
    d.chmod(0)
    try:
        refuse(work, "run", "maxbatch", "--device", "cpu", "--dataset", "cifar10", "--data-dir", str(d),
               match=("permission denied", "not readable"))
    finally:
        d.chmod(0o755)


def test_data_dir_without_cifar_files(work, tmp_path):
    d = tmp_path / "data"
    (d / "cifar-10-batches-bin").mkdir(parents=True)
    (d / "cifar-10-batches-bin" / "readme.html").write_text("hi")
    (d / "data_batch_1.txt").write_text("not it")
    refuse(work, "run", "maxbatch", "--device", "cpu", "--dataset", "cifar10", "--data-dir", str(d),
           match="no CIFAR-10 batches found")


# -- results dir ------------------------------------------------------------------------

@pytest.mark.parametrize("under_a_file", [True, False])
def test_results_dir_that_cannot_be_created(work, tmp_path, under_a_file):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file")
    target = blocker / "results" if under_a_file else blocker
    before = snapshot(work)
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--device", "cpu", "--runtime", "local", "--start-batch", "2",
                        "--max-batch", "2", "--timeout", "5", "--results-dir", str(target)],
                       cwd=work, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: ") and str(target) in lines[0], p.stderr
    assert blocker.read_text() == "a file"
    assert snapshot(work) == before


# -- resume -------------------------------------------------------------------------------

def test_resume_of_a_non_partial_path(work, tmp_path):
    f = tmp_path / "maxbatch-resnet50-synthetic-20260101T000000Z.json"
    f.write_text("{}")
    refuse(work, "run", "maxbatch", "--resume", str(f), match="--resume takes a .partial.json")


def test_resume_of_a_missing_partial(work, tmp_path):
    refuse(work, "run", "maxbatch", "--resume", str(tmp_path / "gone.partial.json"), match="cannot read")


def test_resume_of_a_garbage_file(work, tmp_path):
    f = tmp_path / "x.partial.json"
    f.write_text("KIT-RESULT ]]] not json")
    refuse(work, "run", "maxbatch", "--resume", str(f), match="not valid JSON")


def test_resume_of_a_binary_garbage_file(work, tmp_path):
    f = tmp_path / "core.partial.json"
    f.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00" * 20)
    refuse(work, "run", "maxbatch", "--resume", str(f))


def test_resume_of_json_that_is_not_an_artifact(work, tmp_path):
    f = tmp_path / "y.partial.json"
    f.write_text(json.dumps({"kind": "something", "results": []}))
    refuse(work, "run", "maxbatch", "--resume", str(f), match="not a kitctl artifact")


def cpu_partial(folder: Path) -> Path:
    """A valid partial artifact of a `--device cpu --runtime local` run, as the CLI writes it."""
    import types

    from kitctl.artifact import ArtifactStore
    from kitctl.cli import _configuration, _new_doc
    from kitctl.engines import parse_engines

    cfg = _configuration("pytorch-eager", "fp32", "cpu", None, 256, 2, 2, 5.0, "local", "synthetic", None,
                         False, None, 16, "protocol", None)
    doc = _new_doc("resumetest01", cfg, None, types.SimpleNamespace(name="local"), parse_engines("pytorch-eager"))
    store = ArtifactStore.create(folder, "maxbatch", "resnet50", "synthetic")
    store.save_partial(doc)
    return store.partial


@pytest.mark.parametrize("value", ["0", "-1"])
def test_resume_with_a_bad_timeout(work, tmp_path, value):
    partial = cpu_partial(tmp_path / "old")
    content = partial.read_bytes()
    before = snapshot(tmp_path)
    p = kitctl(work, "run", "maxbatch", "--resume", str(partial), "--timeout", value, results=False)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: "), p.stderr
    assert "--timeout" in lines[0], lines[0]  # names the option, as without --resume
    assert partial.read_bytes() == content
    assert snapshot(tmp_path) == before


# -- the command line itself --------------------------------------------------------------

def test_unknown_option(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--bogus-option", "3", match="No such option")


def test_unknown_command(work):
    refuse(work, "run", "throughput-of-doom", results=False)


def test_missing_option_value(work):
    p = kitctl(work, "run", "maxbatch", "--device", "cpu", "--start-batch", results=False)
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: ") and "Traceback" not in p.stderr
    assert not (work / "results").exists()


def test_help_works(work):
    p = kitctl(work, "run", "maxbatch", "--help", results=False)
    assert p.returncode == 0
    assert "--start-batch" in p.stdout and "--vram-limit" in p.stdout
    assert p.stderr == ""
