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
from conftest import host_kind_reason  # noqa: E402

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
    refuse(work, "run", "maxbatch", "--device", "cpu", "--strategy", "bisect-ish", match="unknown --strategy")


# -- device and GPU -----------------------------------------------------------------------

def test_gpu_that_does_not_exist(work):
    refuse(work, "run", "maxbatch", "--gpu", "99",
           match=("no NVIDIA driver", "no such GPU", "no GPU matches"))


def test_gpu_uuid_that_does_not_exist(work):
    refuse(work, "run", "maxbatch", "--gpu", "GPU-00000000-dead-beef-0000-000000000000",
           match=("no NVIDIA driver", "no GPU matches"))


@pytest.mark.skipif(HAS_GPU, reason=host_kind_reason("no-gpu", "this host has a GPU: the run would start"))
def test_device_cuda_without_a_gpu_refuses(work):
    msg = refuse(work, "run", "maxbatch", "--device", "cuda", match="no NVIDIA driver")
    assert "--device cpu" in msg


def test_vram_limit_with_device_cpu(work):
    refuse(work, "run", "maxbatch", "--device", "cpu", "--vram-limit", "16376",
           match="--vram-limit applies to --device cuda")


def test_memory_limit_on_cuda(work):
    refuse(work, "run", "maxbatch", "--device", "cuda", "--memory-limit", "8192",
           match="--memory-limit applies to --device cpu")


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


@pytest.mark.skipif(os.geteuid() == 0, reason=host_kind_reason("non-root", "root reads any directory"))
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
    refuse(work, "run", "maxbatch", "--resume", str(f), match="--resume takes a .partial.json", results=False)


def test_resume_of_a_missing_partial(work, tmp_path):
    refuse(work, "run", "maxbatch", "--resume", str(tmp_path / "gone.partial.json"), match="cannot read",
           results=False)


def test_resume_of_a_garbage_file(work, tmp_path):
    f = tmp_path / "x.partial.json"
    f.write_text("KIT-RESULT ]]] not json")
    refuse(work, "run", "maxbatch", "--resume", str(f), match="not valid JSON", results=False)


def test_resume_of_a_binary_garbage_file(work, tmp_path):
    f = tmp_path / "core.partial.json"
    f.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00" * 20)
    refuse(work, "run", "maxbatch", "--resume", str(f), results=False)


def test_resume_of_json_that_is_not_an_artifact(work, tmp_path):
    f = tmp_path / "y.partial.json"
    f.write_text(json.dumps({"kind": "something", "results": []}))
    refuse(work, "run", "maxbatch", "--resume", str(f), match="not a kitctl artifact", results=False)


def cpu_partial(folder: Path) -> Path:
    """A valid partial artifact of a `--device cpu --runtime local` run, as the CLI writes it."""
    import types

    from kitctl.core.artifact import ArtifactStore
    from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
    from kitctl.run.document import new_doc as _new_doc
    from kitctl.core.engines import parse_engines

    cfg = MaxbatchConfig.from_flags("pytorch-eager", "fp32", "cpu", None, 256, 2, 2, 5.0, "local", "synthetic", None,
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


# -- issue 14: bad numbers are refused before the first byte is written --------------------

# Small work, should a refusal fail and the run start (as it did before the checks existed).
SMALL = {"maxbatch": ("--start-batch", "2", "--max-batch", "2"),
         "throughput": ("--batch", "2", "--runs", "1", "--warmup-steps", "1", "--steps", "1")}

@pytest.mark.parametrize("bench", ["maxbatch", "throughput"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e12", "604801"])
def test_timeout_not_finite_or_beyond_a_week(work, bench, value):
    refuse(work, "run", bench, "--device", "cpu", "--runtime", "local", *SMALL[bench], "--timeout", value,
           match="--timeout must be > 0 and at most 604800 s")


@pytest.mark.parametrize("bench", ["maxbatch", "throughput"])
def test_memory_limit_above_the_hosts_ram(work, bench):
    refuse(work, "run", bench, "--device", "cpu", "--runtime", "local", *SMALL[bench], "--memory-limit",
           "99999999999999", match="above this host's")


@pytest.mark.parametrize("runtime", ["docker", "local"])
def test_memory_limit_below_dockers_minimum(work, runtime):
    # Docker used to refuse it only at the first candidate, after the partial was written.
    refuse(work, "run", "maxbatch", "--device", "cpu", "--runtime", runtime, *SMALL["maxbatch"], "--timeout", "30",
           "--memory-limit", "1", match="--memory-limit must be at least 6 MiB")


@pytest.mark.parametrize("bench", ["maxbatch", "throughput"])
def test_python_that_does_not_exist(work, bench):
    refuse(work, "run", bench, "--device", "cpu", "--runtime", "local", *SMALL[bench], "--python", "/nonexistent",
           match="--python /nonexistent: no such executable file")


def test_python_that_is_not_executable(work, tmp_path):
    f = tmp_path / "python3"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    refuse(work, "run", "maxbatch", "--device", "cpu", "--runtime", "local", *SMALL["maxbatch"], "--python", str(f),
           match="no such executable file")


@pytest.mark.parametrize("args, match", [
    (("run", "maxbatch", "--start-batch", "2", "--max-batch", "99999999999"), "--max-batch must be at most"),
    (("run", "maxbatch", "--calibration-batch", "99999999999"), "--calibration-batch must be at most"),
    (("run", "maxbatch", "--reserve", "-1"), "--reserve must be ≥ 0"),
    (("run", "maxbatch", "--idle-threshold", "nan"), "--idle-threshold must be"),
    (("run", "throughput", "--runs", "99999999999"), "--runs must be at most"),
    (("run", "throughput", "--steps", "99999999999"), "--steps must be at most"),
    (("run", "throughput", "--batch", "99999999999"), "--batch must be at most"),
])
def test_numbers_out_of_any_sane_range(work, args, match):
    refuse(work, *args, "--device", "cpu", "--runtime", "local", "--timeout", "5", match=match)


# -- issue 14: a corrupt CIFAR-10 is refused up front ---------------------------------------

def _corrupt(layout: str, how: str) -> bytes:
    import pickle
    import random

    if how == "empty":
        return b""
    if how == "random":  # whole records of noise: label bytes ≥ 10 give it away
        return bytes([200]) + random.Random(0).randbytes(3073 * 4 - 1)
    if how == "short":
        return b"\x01" * 100
    if how == "truncated":
        return pickle.dumps({b"data": b"\x00" * 3072 * 3, b"labels": [1, 2, 3]})[:-500]
    return pickle.dumps([1, 2, 3])  # "not-a-batch": a pickle, but no data/labels


@pytest.mark.parametrize("layout, how", [("bin", "empty"), ("bin", "random"), ("bin", "short"),
                                         ("py", "empty"), ("py", "random"), ("py", "truncated"),
                                         ("py", "not-a-batch")])
def test_corrupt_cifar10_is_refused_before_any_candidate(work, tmp_path, layout, how):
    from cifar_files import write_cifar10

    folder = write_cifar10(tmp_path / "data", layout, sizes=(3, 3))
    # The second file is the bad one: the check covers every batch a trial may read.
    (folder / ("data_batch_2" + (".bin" if layout == "bin" else ""))).write_bytes(_corrupt(layout, how))
    refuse(work, "run", "maxbatch", "--device", "cpu", "--runtime", "local", "--dataset", "cifar10",
           "--data-dir", str(tmp_path / "data"), "--start-batch", "2", "--max-batch", "2", "--timeout", "60",
           match=("data_batch_2",))


# -- issue 14: what a resume accepts ---------------------------------------------------------

def local_partial(folder: Path, trials: tuple[tuple[int, str], ...] = (), start: int = 2, max_batch: int = 2,
                  edit=None) -> Path:
    """A partial as `kitctl run maxbatch --device cpu --runtime local` leaves it, with `trials`
    (batch, status) recorded in its one cell; `edit(doc)` may then change it as a user could."""
    from kitctl.core.artifact import ArtifactStore
    from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
    from kitctl.run.document import new_doc as _new_doc
    from kitctl.core.engines import parse_engines
    from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
    from kitctl.benchmarks.maxbatch.cells import new_cell
    from kitctl.runtimes.local import LocalRuntime

    cfg = MaxbatchConfig.from_flags("pytorch-eager", "fp32", "cpu", None, 256, start, max_batch, 60.0, "local", "synthetic",
                         None, False, None, 16, "protocol", None)
    rt = LocalRuntime()
    doc = _new_doc("resumetest02", cfg, None, rt, parse_engines("pytorch-eager"))
    doc["runtime"] = {"name": "local", "interpreter": rt.python}
    doc["engines"]["pytorch-eager"]["provenance"] = rt.describe("pytorch-eager")
    doc["state"] = "interrupted"
    if trials:
        cell = new_cell("pytorch-eager", "fp32")
        for b, st in trials:
            ok = st == "ok"
            result = {"protocol": 1, "engine": "pytorch-eager", "mode": "eager", "precision": "fp32", "batch": b,
                      "status": st, "loss_warmup": 2.3 if ok else None, "loss_final": 2.2 if ok else None}
            cell["trials"].append(TrialOutcome(batch=b, status=Status(st), exit_code=0 if ok else 1, result=result,
                                               elapsed_s=1.0, runtime="local",
                                               peaks=MemoryPeaks(host_rss_mib=700.0 + b)).to_json())
        doc["results"].append(cell)
    store = ArtifactStore.create(folder, "maxbatch", "resnet50", "synthetic")
    store.save_partial(doc)
    if edit is not None:  # written as a text editor would: no schema check on the way
        edit(doc)
        store.partial.write_text(json.dumps(doc, indent=1))
    return store.partial


def refuse_resume(work: Path, partial: Path, *extra: str, match: str | tuple[str, ...]) -> str:
    """A refused resume: one line, exit 2, the partial byte for byte as it was, no lock file left."""
    content = partial.read_bytes()
    before = snapshot(partial.parent)
    p = kitctl(work, "run", "maxbatch", "--resume", str(partial), *extra, results=False)
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kitctl: "), p.stderr
    options = (match,) if isinstance(match, str) else match
    assert any(m in lines[0] for m in options), lines[0]
    assert partial.read_bytes() == content
    assert snapshot(partial.parent) == before  # nor a lock file, nor a final
    return lines[0]


def test_flags_beside_resume_are_refused_not_ignored(work, tmp_path):
    partial = local_partial(tmp_path / "old")
    msg = refuse_resume(work, partial, "--engines", "nope", "--memory-limit", "-5",
                        match="cannot apply")
    assert "--engines" in msg and "--memory-limit" in msg and "--timeout" in msg  # and says what may


@pytest.mark.parametrize("flag", [("--results-dir", "elsewhere"), ("--python", sys.executable),
                                  ("--runtime", "docker"), ("--max-batch", "64"), ("--device", "cpu"),
                                  ("--cudnn-benchmark",)])
def test_each_flag_that_cannot_apply_to_a_resume(work, tmp_path, flag):
    partial = local_partial(tmp_path / "old")
    refuse_resume(work, partial, *flag, match=f"{flag[0]} cannot apply")


def test_a_resume_keeps_its_interpreter_or_refuses(work, tmp_path):
    def gone(doc):
        doc["engines"]["pytorch-eager"]["provenance"]["interpreter"] = "/nonexistent/bin/python3"

    partial = local_partial(tmp_path / "old", edit=gone)
    refuse_resume(work, partial, match="interpreter '/nonexistent/bin/python3'")


@pytest.mark.parametrize("key, value, match", [
    ("max_batch", 1, "--max-batch 1 is below --start-batch 2"),
    ("start_batch", 1, "--start-batch must be ≥ 2"),
    ("timeout_s", 1e12, "--timeout must be > 0 and at most"),
    ("memory_limit_mib", 99999999999999, "above this host's"),
    ("memory_limit_mib", 3, "at least 6 MiB"),
    ("strategy", "bisect-ish", "unknown --strategy"),
    ("max_batch", True, "schema at configuration/max_batch"),
    ("device", "tpu", "schema at configuration/device"),
    ("cudnn_benchmark", 1, "schema at configuration/cudnn_benchmark"),
    ("reserve_mib", -5, "schema at configuration/reserve_mib"),
    ("seed", 7, "seed"),
    ("engines", ["pytorch-eager", "pytorch-eager"], "engines"),
])
def test_a_partial_with_impossible_settings_is_refused(work, tmp_path, key, value, match):
    partial = local_partial(tmp_path / "old", edit=lambda d: d["configuration"].__setitem__(key, value))
    refuse_resume(work, partial, match=match)


def test_a_partial_whose_candidates_the_search_never_ran_is_refused(work, tmp_path):
    # start 2: the search runs 2, then 4; a recorded pass at 5000 cannot have come from it.
    partial = local_partial(tmp_path / "old", trials=((2, "ok"), (5000, "ok")), max_batch=5000)
    refuse_resume(work, partial, match="candidate 2 ran batch 5000 where the search asks for batch 4")


def test_a_partial_with_a_cell_its_configuration_does_not_run_is_refused(work, tmp_path):
    def other(doc):
        doc["results"][0]["engine"] = "tensorflow-xla"

    partial = local_partial(tmp_path / "old", trials=((2, "ok"),), edit=other)
    refuse_resume(work, partial, match="cell tensorflow-xla fp32 is not one its configuration runs")


def test_resume_rederives_a_cell_the_partial_calls_done(work, tmp_path):
    """Edited to claim max_batch 5000 though only batch 2 ran (start = max = 2): the final says 2."""
    def claim(doc):
        doc["results"][0].update(state="done", search_status="bounded_by_memory_failure", max_batch=5000,
                                 next_batch=5001, reason="pass at 5000, memory failure at 5001")

    partial = local_partial(tmp_path / "old", trials=((2, "ok"),), edit=claim)
    # (--timeout and --idle-threshold are among what a resume accepts)
    p = kitctl(work, "run", "maxbatch", "--resume", str(partial), "--timeout", "30", "--idle-threshold", "512",
               results=False)
    assert p.returncode == 0, p.stderr[-2000:]
    from kitctl.core.artifact import load

    final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
    (cell,) = final["results"]
    assert (cell["search_status"], cell["max_batch"], cell["next_batch"]) == ("censored_at_max_batch", 2, None)
    assert [t["batch"] for t in cell["trials"]] == [2]  # re-derived, nothing re-run
    assert final["configuration"]["timeout_s"] == 30
    assert "5,000" not in p.stdout + p.stderr and "the partial said" in p.stderr  # a note: stderr
    assert sorted(x.name for x in partial.parent.iterdir()) == [partial.name.replace(".partial.json", ".json")]


def test_resume_while_another_kitctl_holds_the_partial_is_refused(work, tmp_path):
    from kitctl.core.artifact import ArtifactStore

    partial = local_partial(tmp_path / "old", trials=((2, "ok"),))
    holder = ArtifactStore(partial)
    holder.lock()  # as a running kitctl does, for the whole run
    try:
        content = partial.read_bytes()
        p = kitctl(work, "run", "maxbatch", "--resume", str(partial), results=False)
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "being written by another kitctl" in lines[0], p.stderr
        assert partial.read_bytes() == content and holder.lock_path.exists()
    finally:
        holder.release()
    assert not holder.lock_path.exists()


def throughput_partial(folder: Path, runs: int, recorded: int, edit=None) -> Path:
    """A `run throughput --device cpu --runtime local` partial with `recorded` ok runs of 4 images/s."""
    from kitctl.core.artifact import ArtifactStore
    from kitctl.benchmarks.throughput.config import ThroughputConfig
    from kitctl.run.document import new_doc as _new_doc
    from kitctl.core.engines import parse_engines
    from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
    from kitctl.runtimes.local import LocalRuntime
    from kitctl.benchmarks.throughput.run import new_throughput_cell, run_figures

    cfg = ThroughputConfig.from_flags("pytorch-eager", "fp32", "cpu", None, 256, 2, runs, 1, 1, 60.0, "local",
                                    "synthetic", None, False, None, None)
    rt = LocalRuntime()
    doc = _new_doc("resumetest03", cfg, None, rt, parse_engines("pytorch-eager"), "throughput")
    doc["runtime"] = {"name": "local", "interpreter": rt.python}
    doc["engines"]["pytorch-eager"]["provenance"] = rt.describe("pytorch-eager")
    doc["state"] = "interrupted"
    cell = new_throughput_cell("pytorch-eager", "fp32", 2)
    for i in range(1, recorded + 1):
        result = {"protocol": 1, "engine": "pytorch-eager", "mode": "eager", "precision": "fp32", "batch": 2,
                  "status": "ok", "loss_warmup": 2.3, "loss_final": 2.2, "images": 8, "window_seconds": 2.0,
                  "warmup_seconds": 1.0}
        out = TrialOutcome(batch=2, status=Status.OK, exit_code=0, result=result, elapsed_s=3.0, runtime="local",
                           peaks=MemoryPeaks(host_rss_mib=700.0))
        cell["runs"].append({"run": i, **run_figures(out)[0], **out.to_json()})
    doc["results"].append(cell)
    store = ArtifactStore.create(folder, "throughput", "resnet50", "synthetic")
    store.save_partial(doc)
    if edit is not None:
        edit(doc)
        store.partial.write_text(json.dumps(doc, indent=1))
    return store.partial


def test_throughput_resume_recomputes_a_summary_the_partial_states(work, tmp_path):
    """Edited to claim a median of 1e9 images/s: the final's summary comes from the recorded run (4/s)."""
    def claim(doc):
        doc["results"][0].update(state="done", status="ok", summary={
            "n": 1, "median": 1e9, "min": 1e9, "max": 1e9, "std": None, "ci_low": 1e9, "ci_high": 1e9,
            "ci_level": None})
        doc["results"][0]["runs"][0]["images_per_second"] = 1e9

    partial = throughput_partial(tmp_path / "old", runs=1, recorded=1, edit=claim)
    p = kitctl(work, "run", "throughput", "--resume", str(partial), results=False)
    assert p.returncode == 0, p.stderr[-2000:]
    from kitctl.core.artifact import load

    final = load(partial.with_name(partial.name.replace(".partial.json", ".json")))
    (cell,) = final["results"]
    assert cell["summary"]["median"] == 4.0 and cell["runs"][0]["images_per_second"] == 4.0


def test_throughput_partial_with_more_runs_than_configured_is_refused(work, tmp_path):
    partial = throughput_partial(tmp_path / "old", runs=2, recorded=2,
                                 edit=lambda d: d["configuration"].__setitem__("runs", 1))
    content = partial.read_bytes()
    p = kitctl(work, "run", "throughput", "--resume", str(partial), results=False)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "it records 2 runs of 1" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert partial.read_bytes() == content
