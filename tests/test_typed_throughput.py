"""throughput's typed results (benchmarks/throughput/results.py): every committed throughput artifact reads into its
records and writes back unchanged; the records agree with the JSON Schema and declare what the runner writes, in its
order; the runner, driven by a scripted runtime, writes its cells as it always did (a new cell's keys, a finished
one's added after them, a failed one's nulls) and --resume's replay reads them typed."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kitctl.benchmarks.throughput.results import (PENDING_KEYS, CellEnergy, CellSteadiness, RunEnergy, ThroughputCell,
                                                  ThroughputRun, ThroughputSummary, WindowReadings, cells, updated)
from kitctl.core.typed import from_json, record_fields, to_json

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "host" / "kitctl" / "schema" / "artifact.schema.json").read_text())
DEFS = SCHEMA["$defs"]


def committed() -> list[tuple[str, dict]]:
    out = []
    for path in sorted([*(ROOT / "results" / "reference").glob("*.json"), *(ROOT / "tests" / "data").glob("*.json")]):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "kitctl-artifact" and doc.get("benchmark") == "throughput":
            out.append((path.name, doc))
    return out


def names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in record_fields(cls))


def test_every_committed_throughput_cell_reads_and_writes_back_unchanged():
    docs = committed()
    assert len(docs) >= 19, [n for n, _ in docs]  # results/reference and tests/data
    for name, doc in docs:
        typed = cells(doc)
        assert [to_json(c) for c in typed] == doc["results"], name
        # and in the artifact's key order, nested objects too
        assert json.dumps([to_json(c) for c in typed]) == json.dumps(doc["results"]), name
        for c in typed:
            assert all(isinstance(r, ThroughputRun) for r in c.runs)
            assert c.summary is None or isinstance(c.summary, ThroughputSummary)
            assert not c.ok or c.summary is not None
            assert c.energy is None or isinstance(c.energy, CellEnergy)
            assert c.steadiness is None or isinstance(c.steadiness, CellSteadiness)
            assert all(isinstance(r.energy, RunEnergy) and isinstance(r.telemetry, WindowReadings)
                       for r in c.runs if r.window_rule is not None)


def _object(schema: dict) -> dict:
    """The object branch of a `oneOf: [null, object]` (or the schema itself)."""
    return next((s for s in schema.get("oneOf", []) if s.get("type") == "object"), schema)


def test_the_records_agree_with_the_json_schema():
    cell = DEFS["throughput_cell"]
    for cls, schema in ((ThroughputCell, cell), (ThroughputRun, DEFS["throughput_run"]),
                        (ThroughputSummary, DEFS["throughput_summary"]), (RunEnergy, DEFS["run_energy"]),
                        (CellEnergy, _object(cell["properties"]["energy"])),
                        (CellSteadiness, _object(cell["properties"]["steadiness"]))):
        fields = {f.name: f for f in record_fields(cls)}
        assert set(schema["properties"]) <= set(fields), (cls.__name__, set(schema["properties"]) - set(fields))
        required = {n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        assert required <= set(schema["required"]), (cls.__name__, required - set(schema["required"]))


def test_a_cell_is_written_back_as_a_dicts_update_writes_it():
    """A new cell has no energy or steadiness; a finished one adds them after its keys, nulls too; a cell
    recorded in another order (with a key this kitctl does not know) keeps its order and adds the new keys last."""
    pending = ThroughputCell.pending("pytorch-eager", "fp32", 2)
    assert list(to_json(pending)) == list(PENDING_KEYS) and to_json(pending)["runs"] == []
    failed = updated(pending, peak_vram={"device_delta_mib": None}, state="done", status="failed", reason="r",
                     summary=None, warmup_seconds=None, energy=None, steadiness=None)
    as_dict = to_json(pending)
    as_dict.update(peak_vram={"device_delta_mib": None}, state="done", status="failed", reason="r", summary=None,
                   warmup_seconds=None, energy=None, steadiness=None)
    assert json.dumps(to_json(failed)) == json.dumps(as_dict) and failed.failed
    older = {"engine": "pytorch-eager", "precision": "fp32", "state": "running", "batch": 2, "trials": [],
             "runs": [], "summary": None, "warmup_seconds": None, "later": 1}
    done = updated(from_json(ThroughputCell, older), peak_vram=None, state="done", status="ok", reason="",
                   energy=CellEnergy(joules_per_image=1.0, mean_watts=2.0, runs=0))
    again = {**older, "peak_vram": None, "state": "done", "status": "ok", "reason": "",
             "energy": {"joules_per_image": 1.0, "mean_watts": 2.0, "runs": 0}}
    assert json.dumps(to_json(done)) == json.dumps(again)
    made = ThroughputCell(engine="e", precision="fp32", state="pending", runs=())  # made here: every field
    assert list(to_json(updated(made, state="done"))) == list(names(ThroughputCell))
