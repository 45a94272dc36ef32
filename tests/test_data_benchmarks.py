"""`kitctl data make`, `kitctl run datasize` and `kitctl run dataload` end to end through the CLI, local
runtime, real trials on CPU (a tiny corpus): artifacts schema-valid, --resume finishes a partial, bad input
is one line with exit 2, the report renders its sections and the workers plot."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load, validate

from conftest import need_module

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


def kitctl(*args, timeout=600):
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


def _cmdlines() -> dict[str, str]:
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                out[p.name] = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile
                pass
    return out


def finals(results: Path, prefix: str) -> list[Path]:
    return sorted(p for p in results.glob(f"{prefix}-*.json") if not p.name.endswith(".partial.json"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    need_module("skimage", "the corpus's photographs ship in scikit-image")
    out = tmp_path_factory.mktemp("data") / "corpus"
    p = kitctl("data", "make", "--out", out, "--images", 24, "--classes", 3, "--workers", 2)
    assert p.returncode == 0, p.stderr
    assert "24 images in 3 classes" in p.stdout and "licensed photographs" in p.stdout
    return out


def test_data_make_refuses_bad_input_in_one_line(corpus, tmp_path):
    p = kitctl("data", "make", "--out", corpus, "--images", 5)
    assert p.returncode == 2 and "already holds a corpus" in p.stderr and "Traceback" not in p.stderr
    p = kitctl("data", "make", "--out", tmp_path / "x", "--images", 0)
    assert p.returncode == 2 and "must be > 0" in p.stderr


def test_datasize_artifact_and_resume(corpus, tmp_path):
    res = tmp_path / "results"
    p = kitctl("run", "datasize", "--corpus", corpus, "--formats", "folder,webdataset", "--encodings", "jpeg90,raw",
               "--sides", "128", "--workers", 2, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = finals(res, "datasize")
    doc = load(final)
    assert doc["benchmark"] == "datasize" and doc["state"] == "complete"
    cells = {(c["format"], c["encoding"]): c for c in doc["results"]}
    assert set(cells) == {("folder", "jpeg90"), ("folder", "raw"), ("webdataset", "jpeg90"), ("webdataset", "raw")}
    assert all(c["status"] == "ok" and c["size"]["images"] == 24 for c in cells.values())
    # JPEG is smaller than raw; the tar shards cost more on disk than their payload.
    assert cells[("folder", "jpeg90")]["size"]["payload_bytes"] < cells[("folder", "raw")]["size"]["payload_bytes"]
    tar = cells[("webdataset", "jpeg90")]["size"]
    assert tar["file_bytes"] > tar["payload_bytes"]
    # A partial with two units left: --resume runs exactly those, keeps the others as recorded.
    partial = dict(doc, state="interrupted", finished_utc=None, results=doc["results"][:2])
    ppath = res / "datasize-rrc224-corpus-20000101T000000Z.partial.json"
    validate(partial)
    ppath.write_text(json.dumps(partial))
    p = kitctl("run", "datasize", "--resume", ppath)
    assert p.returncode == 0, p.stderr
    resumed = load(res / "datasize-rrc224-corpus-20000101T000000Z.json")
    assert len(resumed["results"]) == 4 and resumed["results"][:2] == doc["results"][:2]
    assert len(resumed["resumes"]) == 1 and not ppath.exists()
    # `kitctl compare` has no rule for dataset sizes yet: one line, exit 2 (it was a bare AttributeError).
    p = kitctl("compare", final, res / "datasize-rrc224-corpus-20000101T000000Z.json")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "does not compare datasize results yet" in p.stderr


def test_datasize_and_dataload_refuse_bad_flags(corpus, tmp_path):
    for args, what in ((("run", "datasize", "--corpus", tmp_path), "not a corpus"),
                       (("run", "datasize", "--corpus", corpus, "--formats", "zip"), "unknown zip"),
                       (("run", "dataload", "--corpus", corpus, "--workers", "0"), "below 1"),
                       (("run", "dataload", "--corpus", corpus, "--loaders", "dali-tpu"), "unknown dali-tpu"),
                       (("run", "dataload", "--corpus", corpus, "--source", "ebs"), "unknown ebs"),
                       (("run", "dataload", "--corpus", corpus, "--source", "cold", "--read-mbps", "50"),
                        "use --runtime docker"),
                       (("run", "dataload", "--corpus", corpus, "--runtime", "docker", "--loaders",
                         "pytorch-dataloader", "--read-mbps", "50"), "add --source cold"),
                       (("run", "dataload", "--corpus", corpus, "--runtime", "docker", "--loaders",
                         "pytorch-dataloader", "--source", "cold", "--read-mbps", "0"), "must be > 0"),
                       (("run", "dataload", "--corpus", corpus, "--runtime", "docker", "--loaders",
                         "pytorch-dataloader", "--source", "cold", "--read-mbps", "50", "--data-dir",
                         "/dev/shm/kit-ds"), "on no block device")):
        p = kitctl(*args, "--results-dir", tmp_path / "r")
        assert p.returncode == 2, (args, p.stderr)
        assert what in p.stderr and "Traceback" not in p.stderr
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_dataload_runs_cells_and_reports_with_a_plot(corpus, tmp_path):
    res = tmp_path / "results"
    p = kitctl("run", "dataload", "--corpus", corpus, "--data-dir", tmp_path / "ds", "--loaders",
               "pytorch-dataloader", "--workers", "1,2", "--source", "ram", "--runs", 2, "--epochs", 1,
               "--window-images", 1, "--window-seconds", 0.01, "--batch", 8, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = finals(res, "dataload")
    doc = load(final)
    assert [c["workers"] for c in doc["results"]] == [1, 2]
    for c in doc["results"]:
        assert c["status"] == "ok" and len(c["runs"]) == 2
        assert c["summary"]["min"] <= c["summary"]["median"] <= c["summary"]["max"]
        for r in c["runs"]:
            # whole 24-image epochs until the window holds >= 0.01 s: one, or more on a fast host
            assert r["images"] >= 24 and r["images"] % 24 == 0 and r["epochs"][0]["resident_before"] >= 0.98
            assert r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"])
            assert all(0 < e["first_batch_seconds"] <= e["seconds"] for e in r["epochs"])
    [ds] = (tmp_path / "ds").glob("folder-jpeg90-256-n24-c*")  # keyed by the corpus identity
    assert (ds / "dataset.json").is_file()  # written once, reused
    out = tmp_path / "report.md"
    p = kitctl("report", final, "--plots", tmp_path / "plots", "--out", out)
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    assert "Data loading" in md and "pytorch-dataloader" in md and "decode -> RandomResizedCrop 224" in md
    assert list((tmp_path / "plots").glob("*-workers.png"))
    # Under the window rule the start-up is the warm-up epoch's, reported apart: no short-epochs caveat.
    assert "Start-up inside short epochs" not in md and "| start-up s |" in md
    # The same runs read as an artifact from before the rule (no window rule recorded): the caveat names the cells
    # whose first batch took >= 20% of a timed epoch (three batches an epoch), and only those.
    old = json.loads(final.read_text())
    for k in ("window_images", "window_seconds", "steady_tolerance", "window_rule"):
        del old["configuration"][k]
    old["configuration"]["epochs"] = 1
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / final.name).write_text(json.dumps(old))
    p = kitctl("report", tmp_path / "old" / final.name, "--out", out)
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    assert "| start-up s |" not in md
    short = {c["workers"] for c in doc["results"]
             if max(e["first_batch_seconds"] / e["seconds"] for r in c["runs"] for e in r["epochs"]) >= 0.2}
    assert ("Start-up inside short epochs" in md) == bool(short)
    for w in (1, 2):
        assert (f"jpeg90@256 ram w={w} (" in md) == (w in short)


def test_an_interrupted_dataload_keeps_its_partial_and_resumes(corpus, tmp_path):
    import signal
    import time

    res = tmp_path / "results"
    args = ["run", "dataload", "--corpus", corpus, "--data-dir", tmp_path / "ds", "--loaders", "pytorch-dataloader",
            "--workers", "1", "--source", "ram", "--runs", 4, "--epochs", 1, "--window-images", 1,
            "--window-seconds", 0.01, "--batch", 8, "--results-dir", res]
    proc = subprocess.Popen([*ENTRY, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    partial = None
    while time.monotonic() < deadline and partial is None:  # the first finished run has saved the partial
        time.sleep(0.5)
        found = list(res.glob("dataload-*.partial.json")) if res.exists() else []
        if found and any(c["runs"] for c in json.loads(found[0].read_text())["results"]):
            partial = found[0]
    assert partial is not None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "partial artifact kept" in err, err
    doc = load(partial)
    assert doc["state"] == "interrupted" and doc["interrupted_by"] == "SIGINT"
    done = len(doc["results"][0]["runs"])
    assert 1 <= done < 4
    # no trial process of this run is left (their argv holds this test's dataset folder); SIGKILL to the trial's
    # group is asynchronous: a killed worker's cmdline stays readable until the kernel has torn it down
    left = [1]
    for _ in range(100):
        left = [pid for pid, cmd in _cmdlines().items() if str(tmp_path / "ds") in cmd]
        if not left:
            break
        time.sleep(0.1)
    assert not left, {pid: _cmdlines().get(pid) for pid in left}
    p = kitctl("run", "dataload", "--resume", partial)
    assert p.returncode == 0, p.stderr
    final = load(Path(str(partial).replace(".partial.json", ".json")))
    assert len(final["results"][0]["runs"]) == 4 and final["resumes"]


def test_a_resumed_partial_derives_its_figures_from_its_runs_and_reruns_an_edited_run(corpus, tmp_path):
    """A partial is a file anyone can edit: a cell recorded `ok` with a summary of 99,999 images/s, one of
    whose runs claims 99,999 against its own window, is not finalised as measured: the edited run is run
    again and the figure is the median of the runs (before: the cell was skipped and its summary kept, and
    `report --plots` then crashed on an interval below its median)."""
    res = tmp_path / "results"
    p = kitctl("run", "dataload", "--corpus", corpus, "--data-dir", tmp_path / "ds", "--loaders",
               "pytorch-dataloader", "--workers", "1", "--source", "ram", "--runs", 2, "--epochs", 1,
               "--window-images", 1, "--window-seconds", 0.01, "--batch", 8, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = finals(res, "dataload")
    doc = json.loads(final.read_text())
    cell = doc["results"][0]
    honest = cell["runs"][0]["images_per_second"]
    cell["runs"][1]["images_per_second"] = 99_999.0
    cell["summary"].update(median=99_999.0, ci_low=99_998.0, ci_high=99_999.5, min=99_998.0, max=99_999.5)
    doc.update(state="interrupted", interrupted_by="SIGINT", finished_utc=None)
    edited = tmp_path / "edited" / final.name.replace(".json", ".partial.json")
    edited.parent.mkdir()
    edited.write_text(json.dumps(doc))

    p = kitctl("run", "dataload", "--resume", edited)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "run 2/2:" in p.stderr  # the edited run, measured again
    out = load(edited.with_name(final.name))
    cell = out["results"][0]
    assert [r["run"] for r in cell["runs"]] == [1, 2] and cell["runs"][0]["images_per_second"] == honest
    assert all(r["images_per_second"] == pytest.approx(r["images"] / r["window_seconds"]) for r in cell["runs"])
    assert cell["summary"]["median"] == pytest.approx(statistics.median(r["images_per_second"] for r in cell["runs"]))
    assert cell["summary"]["median"] < 99_999
    p = kitctl("report", edited.with_name(final.name), "--plots", tmp_path / "plots")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
