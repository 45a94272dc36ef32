"""The run's JSON artifact: exclusive names, atomic partials, exclusive final, schema checks, resume.

Documents are built by the CLI's own `_configuration` and `_new_doc`, so these tests check
what `kitctl run` actually writes.
"""
from __future__ import annotations

import json
import os
import stat
import threading
import types
from pathlib import Path

import pytest

from kitctl.core import artifact as art
from kitctl.core.artifact import PARTIAL_SUFFIX, ArtifactError, ArtifactStore
from kitctl.benchmarks.maxbatch.config import MaxbatchConfig
from kitctl.run.document import new_doc as _new_doc
from kitctl.core.engines import parse_engines
from kitctl.core.outcome import KilledBy, MemoryPeaks, Status, TrialOutcome
from kitctl.core.protocol import TrialRequest
from kitctl.benchmarks.maxbatch.cells import new_cell
from kitctl.runtimes.base import RawRun, classify

STAMP = "20260101T000000Z"


def make_doc(engines: str = "pytorch-eager", precision: str = "fp32", **over) -> dict:
    """Mirrors `kitctl run maxbatch --device cpu --runtime local` before its first candidate."""
    cfg = MaxbatchConfig.from_flags(engines, precision, "cpu", None, 256, 128, 1 << 20, None, "local", "synthetic",
                         None, False, None, 16, "protocol", None)
    rt = types.SimpleNamespace(name="local")
    doc = _new_doc("run0123abcd", cfg, None, rt, parse_engines(engines))
    doc.update(over)
    return doc


def with_trial(doc: dict, batch: int = 128, status: Status = Status.OK) -> dict:
    cell = new_cell(doc["configuration"]["engines"][0], doc["configuration"]["precisions"][0])
    o = TrialOutcome(batch=batch, status=status, exit_code=0, elapsed_s=1.5, runtime="local",
                     peaks=MemoryPeaks(host_rss_mib=900.0))
    cell["trials"].append(o.to_json())
    doc["results"].append(cell)
    return doc


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


# -- the doc the CLI builds ---------------------------------------------------------------

def test_new_doc_is_valid():
    doc = make_doc()
    art.validate(doc)
    assert doc["kind"] == "kitctl-artifact" and doc["schema_version"] == art.SCHEMA_VERSION
    assert doc["runtime"] == {"name": "local"} and doc["budget"] is None
    assert doc["host"]["gpu"] is None
    art.validate(with_trial(make_doc("pytorch-eager,pytorch-compile", "both")))


# -- create -------------------------------------------------------------------------------

def test_create_claims_the_partial_name(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    assert s.partial == results / f"maxbatch-resnet50-synthetic-{STAMP}{PARTIAL_SUFFIX}"
    assert s.partial.exists()  # claimed on disk, not just named
    assert s.final == results / f"maxbatch-resnet50-synthetic-{STAMP}.json"
    assert not s.final.exists()


def test_two_creates_in_the_same_second_get_different_names(results):
    a = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    b = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    c = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    assert len({a.partial, b.partial, c.partial}) == 3
    assert len({a.final, b.final, c.final}) == 3
    assert b.partial.name == f"maxbatch-resnet50-synthetic-{STAMP}-1{PARTIAL_SUFFIX}"


def test_concurrent_creates_never_share_a_name(results):
    got: list[Path] = []
    lock = threading.Lock()

    def claim():
        s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
        with lock:
            got.append(s.partial)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(set(got)) == 16


def test_create_skips_a_name_whose_final_exists(results):
    results.mkdir()
    (results / f"maxbatch-resnet50-synthetic-{STAMP}.json").write_text("{}")
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    assert s.partial.name == f"maxbatch-resnet50-synthetic-{STAMP}-1{PARTIAL_SUFFIX}"


@pytest.mark.parametrize("sub", ["", "results"])
def test_create_where_no_directory_can_be_made_is_an_artifact_error(tmp_path, sub):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArtifactError) as ei:
        ArtifactStore.create(blocker / sub if sub else blocker, "maxbatch", "resnet50", "synthetic")
    assert "\n" not in str(ei.value)


def test_default_stamp_is_utc(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "cifar10")
    assert s.partial.name.startswith("maxbatch-resnet50-cifar10-")
    stamp = s.partial.name[len("maxbatch-resnet50-cifar10-"):-len(PARTIAL_SUFFIX)]
    assert len(stamp) == 16 and stamp[8] == "T" and stamp.endswith("Z")


# -- save_partial -------------------------------------------------------------------------

def test_save_partial_writes_valid_json_and_leaves_no_temp_files(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = with_trial(make_doc())
    s.save_partial(doc)
    assert json.loads(s.partial.read_text()) == json.loads(json.dumps(doc))
    assert sorted(p.name for p in results.iterdir()) == [s.partial.name]


def test_save_partial_is_atomic_for_a_concurrent_reader(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = make_doc()
    s.save_partial(doc)
    stop = threading.Event()
    bad: list[str] = []
    reads = [0]

    def reader():
        while not stop.is_set():
            text = s.partial.read_text()
            reads[0] += 1
            try:
                json.loads(text)
            except json.JSONDecodeError:
                bad.append(text[:80])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(60):
            with_trial(doc, batch=128 + i)  # the doc grows, so a torn write would show
            s.save_partial(doc)
    finally:
        stop.set()
        t.join()
    assert not bad
    assert reads[0] > 0
    assert len(json.loads(s.partial.read_text())["results"]) == 60


def test_a_failed_save_keeps_the_previous_partial(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    good = with_trial(make_doc())
    s.save_partial(good)
    before = s.partial.read_bytes()
    bad = with_trial(make_doc())
    bad["results"][0]["trials"][0]["status"] = "exploded"
    with pytest.raises(ArtifactError):
        s.save_partial(bad)
    assert s.partial.read_bytes() == before
    assert sorted(p.name for p in results.iterdir()) == [s.partial.name]


def test_an_outcome_from_a_nan_result_line_can_be_saved(results):
    """A trial that prints NaN losses (Python's json does, unless told not to) must not
    break the artifact: its outcome is `nonfinite` and the partial is still written."""
    req = TrialRequest(engine="pytorch-eager", mode="eager", benchmark="maxbatch", batch=256,
                       precision="fp32", device="cpu")
    stdout = ('KIT-RESULT {"protocol": 1, "engine": "pytorch-eager", "mode": "eager", "precision": "fp32", '
              '"batch": 256, "status": "nonfinite", "loss_warmup": 2.3, "loss_final": NaN, "error": "nan loss"}')
    out = classify(req, RawRun(stdout, "", 1, None, KilledBy.NONE, 2.0), MemoryPeaks(), over_budget=False,
                   runtime="local")
    assert out.status is Status.NONFINITE
    doc = make_doc()
    cell = new_cell("pytorch-eager", "fp32")
    cell["trials"].append(out.to_json())
    doc["results"].append(cell)
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(doc)  # must not raise ValueError("Out of range float values ...")
    back = art.load(s.partial)
    assert back["results"][0]["trials"][0]["status"] == "nonfinite"


# -- finalize -----------------------------------------------------------------------------

def test_finalize_creates_the_final_and_removes_the_partial(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = with_trial(make_doc())
    s.save_partial(doc)
    doc["state"] = "complete"
    final = s.finalize(doc)
    assert final == s.final and final.exists()
    assert not s.partial.exists()
    assert art.load(final)["state"] == "complete"
    assert not (final.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))  # read-only
    assert sorted(p.name for p in results.iterdir()) == [final.name]


def test_second_finalize_is_refused(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = make_doc(state="complete")
    first = s.finalize(doc)
    content = first.read_bytes()
    with pytest.raises(ArtifactError, match="never overwritten"):
        s.finalize(make_doc(state="complete", run_id="other"))
    assert first.read_bytes() == content


def test_finalize_over_a_pre_existing_final_is_refused_and_keeps_the_partial(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = make_doc()
    s.save_partial(doc)
    s.final.write_text("someone else's result\n")
    with pytest.raises(ArtifactError) as ei:
        s.finalize(make_doc(state="complete"))
    assert "\n" not in str(ei.value)
    assert s.final.read_text() == "someone else's result\n"
    assert s.partial.exists()  # the run's data is not lost
    assert json.loads(s.partial.read_text())["run_id"] == doc["run_id"]


def test_finalize_validates_first(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(make_doc())
    with pytest.raises(ArtifactError):
        s.finalize(make_doc(state="finished"))  # not in the schema's enum
    assert not s.final.exists()
    assert s.partial.exists()


# -- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("mutate,where", [
    (lambda d: d["results"][0]["trials"][0].__setitem__("status", "exploded"), "results/0/trials/0/status"),
    (lambda d: d["results"][0]["trials"][0].__setitem__("killed_by", "the butler"), "results/0/trials/0/killed_by"),
    (lambda d: d["results"][0].__setitem__("search_status", "great"), "results/0/search_status"),
    (lambda d: d["results"][0]["trials"][0].__setitem__("batch", 0), "results/0/trials/0/batch"),
    (lambda d: d.__setitem__("state", "done"), "state"),
    (lambda d: d.__setitem__("schema_version", 2), "schema_version"),
    (lambda d: d["configuration"].__setitem__("precisions", ["fp64"]), "configuration/precisions/0"),
    (lambda d: d["runtime"].__setitem__("name", "podman"), "runtime/name"),
    (lambda d: d.pop("run_id"), "(top)"),
])
def test_validation_rejects_schema_violations_in_one_line(mutate, where):
    doc = with_trial(make_doc())
    mutate(doc)
    with pytest.raises(ArtifactError) as ei:
        art.validate(doc)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith("artifact does not match its schema at ")
    assert where in msg


def test_a_trial_result_may_carry_a_compiled_peak():
    """`compiled_peak_mib` is an optional extra of the trial's result (absent, null or a number of
    MiB): the schema names it, and a result without it stays valid."""
    doc = with_trial(make_doc())
    trial = doc["results"][0]["trials"][0]
    for value in (15339.62, None):
        trial["result"] = {"protocol": 1, "status": "ok", "compiled_peak_mib": value}
        art.validate(doc)
    trial["result"] = {"protocol": 1, "status": "ok"}
    art.validate(doc)
    trial["result"]["compiled_peak_mib"] = "15 GiB"
    with pytest.raises(ArtifactError) as ei:
        art.validate(doc)
    assert "results/0/trials/0/result/compiled_peak_mib" in str(ei.value)


def test_bounded_cell_needs_integers():
    doc = with_trial(make_doc())
    doc["results"][0].update(search_status="bounded_by_memory_failure", max_batch=None, next_batch=None)
    with pytest.raises(ArtifactError):
        art.validate(doc)


def test_validation_message_is_one_line_even_for_multiline_values():
    doc = with_trial(make_doc())
    doc["results"][0]["trials"][0]["status"] = "line one\nline two\n" * 50
    with pytest.raises(ArtifactError) as ei:
        art.validate(doc)
    assert "\n" not in str(ei.value)


# -- load ---------------------------------------------------------------------------------

def write(p: Path, data: str | bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)
    return p


def assert_one_line_error(path: Path, match: str | None = None) -> ArtifactError:
    with pytest.raises(ArtifactError) as ei:
        art.load(path)
    assert "\n" not in str(ei.value)
    if match:
        assert match in str(ei.value)
    return ei.value


def test_load_round_trip(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = with_trial(make_doc())
    s.save_partial(doc)
    assert art.load(s.partial) == json.loads(json.dumps(doc))


def test_load_not_json(tmp_path):
    e = assert_one_line_error(write(tmp_path / "x.partial.json", "this is not json\n"), "not valid JSON")
    assert "x.partial.json" in str(e)


def test_load_empty_file(tmp_path):
    assert_one_line_error(write(tmp_path / "x.partial.json", ""), "not valid JSON")


def test_load_truncated(tmp_path, results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(with_trial(make_doc()))
    text = s.partial.read_text()
    assert_one_line_error(write(tmp_path / "t.partial.json", text[: len(text) // 2]), "not valid JSON")


def test_load_binary_garbage(tmp_path):
    # Not UTF-8 at all (a core dump, a gzip): still one clear ArtifactError naming the file.
    e = assert_one_line_error(write(tmp_path / "bin.partial.json", b"\xff\xfe\x00\x1f\x8b garbage"))
    assert "bin.partial.json" in str(e)


@pytest.mark.parametrize("payload", ["[]", "42", '"kitctl-artifact"', "null",
                                     '{"kind": "something-else"}', '{"schema_version": 1}'])
def test_load_wrong_kind(tmp_path, payload):
    assert_one_line_error(write(tmp_path / "w.partial.json", payload), "not a kitctl artifact")


def test_load_schema_violation(tmp_path):
    doc = with_trial(make_doc())
    doc["results"][0]["trials"][0]["status"] = "exploded"
    assert_one_line_error(write(tmp_path / "v.partial.json", json.dumps(doc)), "does not match its schema")


def test_load_missing_file(tmp_path):
    assert_one_line_error(tmp_path / "nope.partial.json", "cannot read")


def test_load_a_directory(tmp_path):
    d = tmp_path / "dir.partial.json"
    d.mkdir()
    assert_one_line_error(d, "cannot read")


# -- open_for_resume ----------------------------------------------------------------------

def test_resume_a_running_partial(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    doc = with_trial(make_doc(state="interrupted", interrupted_by="SIGINT"))
    s.save_partial(doc)
    store, got = art.open_for_resume(s.partial)
    assert store.partial == s.partial and store.final == s.final
    assert got["run_id"] == doc["run_id"]
    assert got["results"][0]["trials"][0]["batch"] == 128
    # and the resumed run can keep saving and finish
    got["state"] = "complete"
    store.save_partial(got)
    assert store.finalize(got) == s.final


def test_resume_needs_a_partial_name(tmp_path, results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(make_doc())
    other = tmp_path / "run.json"
    other.write_bytes(s.partial.read_bytes())
    with pytest.raises(ArtifactError, match=r"--resume takes a \.partial\.json"):
        art.open_for_resume(other)


def test_resume_refuses_a_complete_doc(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(make_doc(state="complete"))
    with pytest.raises(ArtifactError, match="already complete"):
        art.open_for_resume(s.partial)


def test_resume_refuses_when_the_final_exists(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(make_doc())
    s.final.write_text("{}")
    with pytest.raises(ArtifactError, match="already exists"):
        art.open_for_resume(s.partial)


def test_resume_of_garbage_or_missing(tmp_path):
    with pytest.raises(ArtifactError):
        art.open_for_resume(write(tmp_path / "g.partial.json", "garbage"))
    with pytest.raises(ArtifactError):
        art.open_for_resume(tmp_path / "missing.partial.json")
    with pytest.raises(ArtifactError):
        art.open_for_resume(write(tmp_path / "k.partial.json", '{"kind": "x"}'))


def test_resume_accepts_str_paths(results):
    s = ArtifactStore.create(results, "maxbatch", "resnet50", "synthetic", stamp=STAMP)
    s.save_partial(make_doc())
    store, _ = art.open_for_resume(str(s.partial))
    assert store.partial == s.partial
    assert os.path.exists(store.partial)
