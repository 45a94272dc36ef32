"""Typed records (core/typed.py) and the first benchmark whose results are typed (datasize): every committed
datasize artifact reads into its records and writes back unchanged; the records agree with the JSON Schema; a
recorded object is read tolerantly (unknown keys kept, a missing required field one clear error)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kitctl.benchmarks.datasize.results import SIZE_KEYS, DatasetSize, DatasizeCell, cells
from kitctl.core.typed import RecordError, from_json, record_fields, to_json

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results" / "reference").glob("datasize-*.json"))
SCHEMA = json.loads((ROOT / "host" / "kitctl" / "schema" / "artifact.schema.json").read_text())


def fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in record_fields(cls)}


def test_every_committed_datasize_cell_reads_and_writes_back_unchanged():
    assert COMMITTED, "a datasize artifact is committed"
    for path in COMMITTED:
        doc = json.loads(path.read_text())
        typed = cells(doc)
        assert [to_json(c) for c in typed] == doc["results"], path.name
        # and in the artifact's key order
        assert [list(to_json(c)) for c in typed] == [list(c) for c in doc["results"]], path.name
        assert all(isinstance(c.size, DatasetSize) for c in typed if c.ok)


def test_the_records_agree_with_the_json_schema():
    cell = SCHEMA["$defs"]["datasize_cell"]
    assert set(cell["properties"]) <= set(fields(DatasizeCell)), set(cell["properties"]) - set(fields(DatasizeCell))
    required = {n for n, f in fields(DatasizeCell).items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required <= set(cell["required"]), required - set(cell["required"])
    (size,) = [s for s in cell["properties"]["size"]["oneOf"] if s.get("type") == "object"]
    assert set(size["required"]) | set(size["properties"]) <= set(fields(DatasetSize))
    assert tuple(fields(DatasetSize)) == SIZE_KEYS  # what the run records, in its order


def test_a_recorded_object_is_read_tolerantly_and_refused_clearly():
    raw = {"format": "ffcv", "encoding": "jpeg90", "side": 256, "status": "ok", "size": {"images": 10, "new": 1},
           "added_later": [1, 2]}
    c = from_json(DatasizeCell, raw)
    assert c.size.images == 10 and c.size.extra == {"new": 1} and c.extra == {"added_later": [1, 2]}
    assert c.exit_code is None and c.stderr_tail == ""  # absent in an older record: the default
    again = to_json(c)
    assert again["added_later"] == [1, 2] and again["size"]["new"] == 1
    with pytest.raises(RecordError, match="DatasizeCell: side is missing"):
        from_json(DatasizeCell, {"format": "ffcv", "encoding": "jpeg90", "status": "ok"})
    with pytest.raises(RecordError, match="expected an object"):
        from_json(DatasizeCell, [1])


def test_an_older_record_writes_back_as_it_was_recorded():
    """A key the older kitctl did not write stays absent, the recorded order is kept, and a field set after reading
    is written even where it was absent."""
    raw = {"status": "ok", "side": 256, "format": "ffcv", "encoding": "raw"}  # another order, most fields absent
    c = from_json(DatasizeCell, raw)
    assert c.stderr_tail == "" and to_json(c) == raw and list(to_json(c)) == list(raw)
    changed = dataclasses.replace(c, error="late")
    assert to_json(changed) == {**raw, "error": "late"}
    made = DatasizeCell(format="ffcv", encoding="raw", side=256, status="ok")  # made here: every field, declared order
    assert list(to_json(made))[:5] == ["format", "encoding", "side", "status", "exit_code"]
    assert made == c  # what was recorded is not part of a record's value
