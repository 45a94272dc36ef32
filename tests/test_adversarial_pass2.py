"""What the second adversarial pass (tools/adversarial.py) found and what must stay fixed: files nested too
deeply for the JSON parser (a corpus manifest, a partial, a run-state record), a FIFO where a record is read
(a run-state file, a dataset record), and a corpus size that would exhaust memory or the disk.

Each test starts the real console entry point (or calls the reader it exercises) on files made here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import host_lacks
from test_adversarial_cli import tiny_disk  # noqa: F401 - the fixture (a 64 KiB tmpfs, root only)

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON the parser cannot descend: RecursionError, not JSONDecodeError


def kitctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def one_line_refusal(p: subprocess.CompletedProcess, code: int = 2) -> str:
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("kitctl: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], p.stderr
    return errors[0]


def fake_corpus(folder: Path, manifest_text: str) -> Path:
    (folder / "train" / "0000").mkdir(parents=True)
    (folder / "manifest.json").write_text(manifest_text)
    return folder


def reading_corpus(command: str, corpus: Path, results: Path) -> tuple[str, ...]:
    """A command that reads the corpus's manifest first: data verify, run datasize or run dataload."""
    return {"verify": ("data", "verify", str(corpus)),
            "datasize": ("run", "datasize", "--corpus", str(corpus), "--formats", "folder", "--encodings", "jpeg90",
                         "--sides", "64", "--workers", "1", "--runtime", "local", "--results-dir", str(results)),
            "dataload": ("run", "dataload", "--corpus", str(corpus), "--loaders", "pytorch-dataloader", "--workers", "1",
                         "--runs", "1", "--runtime", "local", "--results-dir", str(results))}[command]


# -- deeply nested JSON ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["verify", "datasize", "dataload"])
def test_a_corpus_manifest_nested_too_deeply_is_refused_in_one_line(tmp_path, command):
    corpus = fake_corpus(tmp_path / "c", DEEP)
    line = one_line_refusal(kitctl(*reading_corpus(command, corpus, tmp_path / "r")))
    assert "manifest.json" in line and "nested too deeply" in line, line
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_a_partial_nested_too_deeply_is_refused_in_one_line(tmp_path):
    partial = tmp_path / "maxbatch-resnet50-synthetic-20260101T000000Z.partial.json"
    partial.write_text(DEEP)
    line = one_line_refusal(kitctl("run", "maxbatch", "--resume", str(partial)))
    assert "nested too deeply" in line, line
    assert partial.read_text() == DEEP  # left as it was


# -- the run-state folder: what every run's start sweep and `kitctl clean` read ------------------------------

def test_clean_skips_a_run_state_record_nested_too_deeply_or_a_fifo(tmp_path):
    """Both made every run's start sweep and `kitctl clean` fail: a RecursionError traceback, and a read of a FIFO
    that never returned."""
    rs = tmp_path / "rs"
    rs.mkdir(mode=0o700)
    (rs / "a-1.json").write_text(DEEP)
    os.mkfifo(rs / "b-2.json")
    (rs / "c-3.json").write_text(json.dumps([1, 2]))  # JSON, but not a record (a list)
    p = kitctl("clean", "--dry-run", "--json", env={"KITCTL_RUN_STATE_DIR": str(rs)}, timeout=60)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["dry_run"] is True
    assert sorted(f.name for f in rs.iterdir()) == ["a-1.json", "b-2.json", "c-3.json"]  # foreign files left alone


def test_a_dataset_record_that_is_a_fifo_is_a_reason_not_a_hang(tmp_path):
    """verify_dataset reads dataset.json before every reuse of a dataset folder; a FIFO there hung the run."""
    d = tmp_path / "folder-jpeg90-64-n40-c0000000000000000"
    d.mkdir()
    os.mkfifo(d / "dataset.json")
    code = ("import sys; from pathlib import Path; from kitctl.benchmarks.data.datasets import verify_dataset; "
            f"print(verify_dataset(Path({str(d)!r}), None))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "dataset.json" in p.stdout and "FIFO" in p.stdout, p.stdout


# -- data make: sizes checked before anything starts ------------------------------------------------------

@pytest.mark.parametrize("images", ["100000000000000000000", "10000001"])
def test_data_make_refuses_an_image_count_beyond_its_cap_before_starting(tmp_path, images):
    """--images 1e20 was accepted: the maker planned every chunk in memory and grew past 13 GB in a minute."""
    out = tmp_path / "c"
    line = one_line_refusal(kitctl("data", "make", "--out", str(out), "--images", images, "--workers", "1", timeout=60))
    assert "--images" in line and "10,000,000" in line, line
    assert not list(tmp_path.iterdir())  # no corpus, no lock, no half-made folder


def test_data_make_refuses_a_corpus_the_disk_cannot_hold(tiny_disk):  # noqa: F811
    out = tiny_disk / "c"
    line = one_line_refusal(kitctl("data", "make", "--out", str(out), "--images", "1000", "--workers", "1", timeout=60))
    assert "GB free" in line, line
    assert not out.exists() and not [f for f in tiny_disk.iterdir() if f.name.startswith(".c")]


# -- writing: only a regular file is ever replaced ------------------------------------------------------------

def a_result(folder: Path) -> Path:
    """A real artifact, copied from the committed reference results."""
    src = sorted((Path(__file__).resolve().parents[1] / "results" / "reference").glob("maxbatch-*Z.json"))[0]
    dst = folder / src.name
    dst.write_bytes(src.read_bytes())
    return dst


@pytest.mark.parametrize("flag", ["--out", "--csv"])
def test_report_does_not_replace_a_fifo_or_device_named_as_its_output(tmp_path, flag):
    """`report --out /dev/full` (root) replaced the device with a regular file holding the report: the atomic
    write renamed its temporary over whatever was there. A FIFO stands in for the device here."""
    fifo = tmp_path / "out.md"
    os.mkfifo(fifo)
    line = one_line_refusal(kitctl("report", str(a_result(tmp_path)), flag, str(fifo), timeout=60))
    assert "FIFO" in line and "not replaced" in line, line
    assert os.path.exists(fifo) and os.stat(fifo).st_mode & 0o170000 == 0o010000  # still a FIFO
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


# -- numbers the JSON parser cannot convert ---------------------------------------------------------------------

def _with_huge_integer(src: Path, dst: Path) -> Path:
    text = src.read_text()
    doc = json.loads(text)
    doc["x"] = 0
    dst.write_text(json.dumps(doc).replace('"x": 0', '"x": ' + "1" * 5000))  # past int's 4,300-digit limit
    return dst


@pytest.mark.parametrize("command", ["report", "results list", "resume"])
def test_a_result_with_an_integer_too_long_to_convert_is_one_line_not_a_traceback(tmp_path, command):
    folder = tmp_path / "r"
    folder.mkdir()
    src = a_result(tmp_path)
    if command == "resume":
        bad = _with_huge_integer(src, folder / "maxbatch-resnet50-synthetic-20260101T000000Z.partial.json")
        line = one_line_refusal(kitctl("run", "maxbatch", "--resume", str(bad)))
        assert "too long" in line, line
    elif command == "report":
        bad = _with_huge_integer(src, folder / "x.json")
        line = one_line_refusal(kitctl("report", str(bad)))
        assert "too long" in line, line
    else:
        _with_huge_integer(src, folder / "x.json")
        p = kitctl("results", "list", "--json", str(folder))
        assert "Traceback" not in p.stderr and p.returncode == 0, p.stderr[-2000:]
        (entry,) = json.loads(p.stdout)
        assert entry["state"] == "unreadable", entry


# -- data make: a path the system cannot take ------------------------------------------------------------------

@pytest.mark.parametrize("where", ["leaf", "parent"])
def test_data_make_with_a_name_over_255_bytes_is_one_line(tmp_path, where):
    long = "y" * 300
    out = tmp_path / long if where == "leaf" else tmp_path / long / "c"
    line = one_line_refusal(kitctl("data", "make", "--out", str(out), "--images", "10", "--workers", "1", timeout=60))
    assert "File name too long" in line, line


# -- a signal that ends the first import of jsonschema half-way ----------------------------------------------------

def test_validation_works_after_an_interrupted_first_import_of_jsonschema(tmp_path):
    """A SIGINT during the first save of a dataload partial ended `import jsonschema` half-way; the save in the
    interrupt path then raised AttributeError (module jsonschema has no attribute exceptions): a traceback and no
    resumable partial. Reproduced here as the import system leaves it: the package dropped, its submodule kept."""
    code = """
import sys, json
import jsonschema.exceptions               # the submodule was loaded ...
del sys.modules["jsonschema"]               # ... and the package's import raised, so the package was dropped
from kitctl.core import artifact
doc = json.loads(open(sys.argv[1]).read())
artifact.validate(doc)
print("valid")
"""
    p = subprocess.run([sys.executable, "-c", code, str(a_result(tmp_path))], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "valid", p.stderr[-2000:]


# -- counts checked before work, as the engine benchmarks check theirs --------------------------------------

@pytest.mark.parametrize("bench", ["dataload", "train-e2e"])
def test_a_run_count_beyond_the_ceiling_is_refused_before_anything_runs(tmp_path, bench):
    """`run dataload --runs 1e30` was accepted and ran until stopped."""
    corpus = tmp_path / "no-corpus-needed"  # the count is checked before the corpus
    p = kitctl("run", bench, "--corpus", str(corpus), "--runs", "1" + "0" * 30, "--runtime", "local",
               "--results-dir", str(tmp_path / "r"))
    line = one_line_refusal(p)
    assert "--runs must be at most 2,147,483,647" in line, line
    assert not (tmp_path / "r").exists()


# -- the interpreter probe leaves nothing running ---------------------------------------------------------

def _alive_with(marker: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def test_a_hanging_python_wrapper_leaves_no_process_after_the_probe(tmp_path, monkeypatch):
    """`--python` a script that starts a program and hangs: the probe timed out after 60 s and killed the script
    alone; its child stayed, re-parented to PID 1. Now the probe's whole process group goes."""
    from kitctl.core.engines import parse_engines
    from kitctl.runtimes import local
    from kitctl.runtimes.base import RuntimeUnavailable

    marker = f"kitctl-probe-test-{os.getpid()}"
    py = tmp_path / "py"
    py.write_text(f"#!/bin/bash\n(exec -a {marker} sleep 600) &\nwait\n")  # a child named by the marker
    py.chmod(0o755)
    monkeypatch.setattr(local, "PROBE_TIMEOUT_S", 2)
    try:
        with pytest.raises(RuntimeUnavailable, match="no answer to a one-line Python probe"):
            local.check_python(parse_engines("pytorch-eager"), str(py))
        deadline = time.monotonic() + 5
        while _alive_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive_with(marker), [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive_with(marker)]
    finally:
        for p in _alive_with(marker):
            os.kill(p, 9)


# -- a manifest naming files outside its corpus ------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "train/0000/../../../x.jpg", "train//a.jpg"])
@pytest.mark.parametrize("command", ["verify", "datasize", "dataload"])
def test_a_manifest_path_outside_the_corpus_is_refused_before_anything_is_opened(tmp_path, command, name):
    files = [{"file": "train/0000/0.jpg", "label": 0, "bytes": 10}, {"file": name, "label": 0, "bytes": 10}]
    corpus = fake_corpus(tmp_path / "c", json.dumps({"kind": "kitctl-image-corpus", "images": 2, "files": files}))
    line = one_line_refusal(kitctl(*reading_corpus(command, corpus, tmp_path / "r")))
    assert "manifest.json" in line and "not a path inside the corpus" in line, line
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


# -- a GPU decoder on a host without a GPU -----------------------------------------------------------------

def _manifest(n: int) -> str:
    files = [{"file": f"train/0000/{i}.jpg", "label": 0, "bytes": 10} for i in range(n)]
    return json.dumps({"kind": "kitctl-image-corpus", "images": n, "files": files})


@pytest.mark.parametrize("args", [
    ("dataload", "--loaders", "pytorch-dataloader,dali-gpu"),
    ("dataload", "--loaders", "pytorch-nvjpeg"),
    ("train-e2e", "--loaders", "pytorch-nvjpeg", "--device", "cpu"),
    ("train-e2e", "--loaders", "ffcv,pytorch-nvjpeg"),
])
def test_a_gpu_loader_asked_for_on_a_host_without_a_gpu_is_refused_in_one_line(tmp_path, args):
    """No run of it can succeed here: one line and nothing written, not a failed cell and exit 1."""
    from kitctl.core.gpu import detect_gpu

    if detect_gpu() is not None:
        host_lacks("no-gpu", "this host has a GPU: the loader would run")  # the CPU-host behaviour only
    corpus = fake_corpus(tmp_path / "c", _manifest(64))
    line = one_line_refusal(kitctl("run", args[0], "--corpus", str(corpus), *args[1:], "--runtime", "local",
                                   "--results-dir", str(tmp_path / "r")))
    assert "decode on the GPU" in line and ("no GPU on this host" in line or "--device cpu" in line), line
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_train_e2e_default_loaders_leave_the_gpu_decoder_out_on_the_cpu(tmp_path):
    from kitctl.benchmarks.train_e2e.config import TrainE2EConfig

    corpus = fake_corpus(tmp_path / "c", _manifest(64))
    cfg = TrainE2EConfig.from_flags(str(corpus), str(tmp_path / "ds"), "", "resnet18", "auto", "cpu", "1", "jpeg90",
                                    64, 4, 1, 2, 1, None, None, sys.executable)
    assert cfg.loaders == ("synthetic", "pytorch-dataloader", "webdataset", "ffcv"), cfg.loaders
