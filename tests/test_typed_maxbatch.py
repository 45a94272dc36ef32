"""maxbatch's typed results (benchmarks/maxbatch/results.py): every committed maxbatch artifact reads into its records
and writes back unchanged; the records agree with the JSON Schema ($defs/cell, $defs/trial, $defs/peaks) and with the
core types they are written from (TrialOutcome, MemoryPeaks, Overhead); a cell the run builds is written with the keys,
in the order, a run wrote before the records."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kitctl.benchmarks.maxbatch.cells import new_cell
from kitctl.benchmarks.maxbatch.results import (NEW_CELL_KEYS, CellOverhead, MaxbatchCell, MaxbatchTrial, Peaks,
                                                SlotGate, SlotTime, cells)
from kitctl.core.budget import Overhead
from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
from kitctl.core.typed import RecordError, from_json, record_fields, to_json, updated
from conftest import committed_artifacts

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "host" / "kitctl" / "schema" / "artifact.schema.json").read_text())


COMMITTED = [path for path, _ in committed_artifacts("maxbatch")]


def fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in record_fields(cls)}


def required(cls) -> set[str]:
    return {n for n, f in fields(cls).items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def test_every_committed_maxbatch_cell_reads_and_writes_back_unchanged():
    assert len(COMMITTED) >= 20, "the committed maxbatch artifacts (results/reference, tests/data)"
    for path in COMMITTED:
        doc = json.loads(path.read_text())
        typed = cells(doc)
        assert [to_json(c) for c in typed] == doc["results"], path.name
        # and in the artifact's key order, every nested object too
        assert json.dumps([to_json(c) for c in typed]) == json.dumps(doc["results"]), path.name
        for c in typed:
            assert all(isinstance(t, MaxbatchTrial) and isinstance(t.peaks, Peaks) for t in c.trials), path.name
            assert c.calibration is None or isinstance(c.calibration, MaxbatchTrial)
            assert c.overhead is None or isinstance(c.overhead, CellOverhead)
            assert not c.extra and not any(t.extra for t in c.trials), path.name  # every key is a field


def _props(d: dict) -> set[str]:
    return set(d.get("properties", {}))


def test_the_records_agree_with_the_json_schema():
    defs = SCHEMA["$defs"]
    for cls, schema in ((MaxbatchCell, defs["cell"]), (MaxbatchTrial, defs["trial"]), (Peaks, defs["peaks"])):
        assert _props(schema) <= set(fields(cls)), (cls.__name__, _props(schema) - set(fields(cls)))
        assert required(cls) <= set(schema["required"]), (cls.__name__, required(cls) - set(schema["required"]))
    cell = defs["cell"]["properties"]
    for cls, schema in ((CellOverhead, cell["overhead"]["oneOf"][1]), (SlotGate, cell["slot_gate"]),
                        (SlotTime, defs["trial"]["properties"]["slot"])):
        assert set(schema["required"]) | _props(schema) <= set(fields(cls)), cls.__name__
        assert required(cls) <= set(schema["required"]), cls.__name__
    # the maxbatch artifact's results are these cells
    (branch,) = [b for b in SCHEMA["allOf"] if b["if"]["properties"]["benchmark"].get("const") == "maxbatch"]
    assert branch["then"]["properties"]["results"]["items"] == {"$ref": "#/$defs/cell"}


def test_the_records_follow_the_core_types_they_are_written_from():
    """A candidate is TrialOutcome's JSON (its fields, in its order) and what the run adds; its peaks are
    MemoryPeaks'; the overhead is Overhead's."""
    core = [f.name for f in dataclasses.fields(TrialOutcome)]
    assert list(fields(MaxbatchTrial))[:len(core)] == core
    assert list(fields(Peaks)) == [f.name for f in dataclasses.fields(MemoryPeaks)]
    assert list(fields(CellOverhead)) == [f.name for f in dataclasses.fields(Overhead)]
    out = TrialOutcome(batch=128, status=Status.OOM, exit_code=1, elapsed_s=2.5, runtime="local",
                       peaks=MemoryPeaks(device_delta_mib=900.0, samples=3))
    t = MaxbatchTrial.of_outcome(out)
    assert to_json(t) == out.to_json() and list(to_json(t)) == list(out.to_json())
    assert t.outcome() == out and t.status == "oom" and not t.ok  # the status kept as recorded, a string
    ov = Overhead(16, 1200.0, 1000.0, 200.0)
    assert to_json(from_json(CellOverhead, ov.to_json())) == ov.to_json()


def test_a_new_cell_is_written_as_before_and_later_keys_in_the_order_set():
    assert new_cell("pytorch-eager", "fp32") == {
        "engine": "pytorch-eager", "precision": "fp32", "state": "pending", "calibration": None, "overhead": None,
        "framework_budget_mib": None, "max_batch": None, "next_batch": None, "search_status": None, "reason": "",
        "peaks_at_max": None, "trials": []}
    assert tuple(new_cell("a", "bf16")) == NEW_CELL_KEYS
    c = MaxbatchCell.new("pytorch-eager", "fp32")
    # a key set later is written after the others, in the order set, even at its default (null here)
    c = updated(c, slots_wall_s=None)
    c = updated(c, search_target_mib=16120)
    assert list(to_json(c))[-2:] == ["slots_wall_s", "search_target_mib"] and to_json(c)["slots_wall_s"] is None
    # a trial's on_path is written whichever value it takes
    t = MaxbatchTrial.of_outcome(TrialOutcome(batch=8, status=Status.OK))
    assert to_json(updated(t, on_path=True))["on_path"] is True
    assert "on_path" not in to_json(t) and t.on_search_path  # absent: on the path (runs before speculation)
    assert updated(t, on_path=False).on_search_path is False


def test_a_recorded_cell_is_read_tolerantly_and_refused_clearly():
    raw = {"engine": "jax-xla", "precision": "bf16", "state": "done", "trials": [
        {"batch": 64, "status": "ok", "peaks": {"device_delta_mib": 5.0, "samples": 1, "new": 2}, "added": 1}],
        "added_later": True}
    c = from_json(MaxbatchCell, raw)
    assert c.extra == {"added_later": True} and c.trials[0].extra == {"added": 1}
    assert c.trials[0].peaks.extra == {"new": 2} and c.trials[0].attempt == 1 and c.reason == ""
    assert to_json(c) == raw and json.dumps(to_json(c)) == json.dumps(raw)
    with pytest.raises(RecordError, match="MaxbatchCell: trials is missing"):
        from_json(MaxbatchCell, {"engine": "jax-xla", "precision": "bf16", "state": "done"})
    with pytest.raises(RecordError, match="MaxbatchTrial: status is missing"):
        from_json(MaxbatchCell, {**raw, "trials": [{"batch": 64}]})
