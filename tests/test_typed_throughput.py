"""throughput's typed results (benchmarks/throughput/results.py): every committed throughput artifact reads into its
records and writes back unchanged; the records agree with the JSON Schema and declare what the runner writes, in its
order; the runner, driven by a scripted runtime, writes its cells as it always did (a new cell's keys, a finished
one's added after them, a failed one's nulls) and --resume's replay reads them typed."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from kitctl.benchmarks.throughput.config import ThroughputConfig
from kitctl.benchmarks.throughput.energy import FIELDS, window_energy, window_readings
from kitctl.benchmarks.throughput.results import (PENDING_KEYS, CellEnergy, RunEnergy, ThroughputCell, ThroughputRun,
                                                  WindowReadings, cells)
from kitctl.benchmarks.throughput.run import (ThroughputPlan, ThroughputRunner, new_throughput_cell, run_figures,
                                              run_quality, run_record)
from kitctl.core.budget import make_budget
from kitctl.core.engines import ENGINES
from kitctl.core.gpu import Telemetry
from kitctl.core.outcome import MemoryPeaks, Status, TrialOutcome
from kitctl.core.stats import Summary, summarize
from kitctl.core.steadiness import Steadiness, cell_steadiness
from kitctl.core.typed import from_json, record_fields, to_json, updated
from kitctl.run.document import new_doc
from kitctl.run.session import base_request
from conftest import committed_artifacts

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "host" / "kitctl" / "schema" / "artifact.schema.json").read_text())
DEFS = SCHEMA["$defs"]


def committed() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path, doc in committed_artifacts("throughput")]


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
            assert c.summary is None or isinstance(c.summary, Summary)
            assert not c.ok or c.summary is not None
            assert c.energy is None or isinstance(c.energy, CellEnergy)
            assert c.steadiness is None or isinstance(c.steadiness, Steadiness)
            assert all(isinstance(r.energy, RunEnergy) and isinstance(r.telemetry, WindowReadings)
                       for r in c.runs if r.window_rule is not None)


def _object(schema: dict) -> dict:
    """The object branch of a `oneOf: [null, object]` (or the schema itself)."""
    return next((s for s in schema.get("oneOf", []) if s.get("type") == "object"), schema)


def test_the_records_agree_with_the_json_schema():
    cell = DEFS["throughput_cell"]
    for cls, schema in ((ThroughputCell, cell), (ThroughputRun, DEFS["throughput_run"]),
                        (Summary, DEFS["throughput_summary"]), (RunEnergy, DEFS["run_energy"]),
                        (CellEnergy, _object(cell["properties"]["energy"])),
                        (Steadiness, _object(cell["properties"]["steadiness"]))):
        fields = {f.name: f for f in record_fields(cls)}
        assert set(schema["properties"]) <= set(fields), (cls.__name__, set(schema["properties"]) - set(fields))
        required = {n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        assert required <= set(schema["required"]), (cls.__name__, required - set(schema["required"]))


def outcome(n: int = 1, ok: bool = True) -> TrialOutcome:
    result = {"protocol": 1, "status": "ok" if ok else "error", "images": 400 + n, "window_seconds": 2.0,
              "warmup_seconds": 1.5, "loss_final": 2.1,
              "window": {"rule": "at least 1 s", "steady": n % 3 != 0, "halves_change": 0.01 * n,
                         "start_unix": 1000.3, "end_unix": 1002.5}, "opennn_figures": {"executed_ips": 10.0 * n}}
    return TrialOutcome(batch=2, status=Status.OK if ok else Status.ERROR, exit_code=0 if ok else 1, result=result,
                        error=None if ok else "boom", elapsed_s=3.0, runtime="local",
                        peaks=MemoryPeaks(device_delta_mib=100.0 + n, framework_mib=50.0 + n, samples=4))


def series(t0: float = 1000.0, n: int = 80) -> list:
    return [(t0 + i * 0.05, Telemetry(energy_mj=300_000 * (t0 + i * 0.05), sm_clock_mhz=1900.0 + i,
                                      temperature_c=50 + i * 0.1, power_w=300.0)) for i in range(n)]


def test_the_records_declare_what_the_run_writes_in_its_order():
    out = outcome()
    readings = window_readings(series(), 1000.3, 1002.5)
    figs, why = run_figures(out)
    quality = run_quality(out.result, readings)
    assert why is None and isinstance(quality["energy"], RunEnergy) and isinstance(quality["telemetry"], WindowReadings)
    assert names(ThroughputRun) == ("run", *figs, *quality, *out.to_json())
    assert names(WindowReadings) == tuple(readings) == ("t_unix", *FIELDS)
    assert names(RunEnergy) == tuple(window_energy(readings, 1000.3, 1002.5, 401))
    summary = summarize([1.0, 2.0, 3.0])
    assert names(Summary) == tuple(summary)
    assert names(Steadiness) == tuple(cell_steadiness([{"run": 1, "steady": True}], summary, 0.02))
    assert PENDING_KEYS == tuple(new_throughput_cell("pytorch-eager", "fp32", 2))
    assert names(ThroughputCell) == (*PENDING_KEYS, "energy", "steadiness")
    # a run made here writes what the runner wrote as a dict
    run, _ = run_record(1, out, readings)
    as_dict = {"run": 1, **figs, **{k: to_json(v) for k, v in quality.items()}, **out.to_json()}
    assert json.dumps(to_json(run)) == json.dumps(as_dict)
    assert run.energy.joules_per_image == window_energy(readings, 1000.3, 1002.5, 401)["joules_per_image"]


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


# -- the runner, driven by a scripted runtime --------------------------------------------------------------------

class Store:
    partial, claimed = "partial", True

    def __init__(self) -> None:
        self.saved: list[str] = []

    def save_partial(self, doc) -> None:
        self.saved.append(json.dumps(doc["results"]))


class View:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def attach(self, left) -> None:
        self.left = left

    def candidate_started(self, *args) -> None:
        self.lines.append(f"start {self.left()}")

    def candidate_done(self, engine, precision, o, what, detail="") -> None:
        self.lines.append(f"{precision} {what}: {detail} {self.left()}")

    def note(self, text: str) -> None:
        self.lines.append(text)


class Watcher:
    telemetry = series()


class Runtime:
    name = "local"

    def __init__(self, fail: set[int]) -> None:
        self.fail, self.n = fail, 0

    def run(self, req, *, timeout_s, watcher=None) -> TrialOutcome:
        self.n += 1
        return outcome(self.n, ok=self.n not in self.fail)

    def close(self) -> None:
        pass


def run(doc: dict | None, runs: int, fail: set[int] = frozenset(), precisions=("fp32", "bf16")):
    c = ThroughputConfig.from_flags("pytorch-eager", ",".join(precisions), "cpu", None, 256, 2, runs, None, None, None,
                                    "local", "synthetic", None, False, None, None, window_seconds=1.0)
    doc = doc if doc is not None else new_doc("typed", c, None, Runtime(set()), [ENGINES["pytorch-eager"]])
    plan = ThroughputPlan(engines=[ENGINES["pytorch-eager"]], precisions=list(precisions),
                          base_request=base_request("throughput", c.run, **c.request_fields()), runs=runs,
                          timeout_s=60, budget=make_budget(80000.0, None, 256), watcher_factory=lambda b: Watcher())
    store, view = Store(), View()
    runner = ThroughputRunner(plan, Runtime(set(fail)), store, doc, view)  # type: ignore[arg-type]
    runner._install_signals = runner._restore_signals = lambda: None  # type: ignore[method-assign]
    return runner.run(), store, view, c


def test_the_runner_writes_its_cells_as_it_always_did():
    doc, store, view, cfg = run(None, 3, fail={5})  # bf16's second run fails
    ok, failed = doc["results"]
    assert list(ok) == list(failed) == [*PENDING_KEYS, "energy", "steadiness"]
    assert ok["status"] == "ok" and ok["summary"]["n"] == 3 and ok["energy"]["runs"] == 3
    assert ok["steadiness"]["runs_not_steady"] == [3] and ok["peak_vram"]["device_delta_mib"] == 103.0
    assert (failed["status"], failed["summary"], failed["energy"], failed["steadiness"]) == ("failed", None, None, None)
    assert failed["reason"] == "run 2/3 failed — error: boom" and len(failed["runs"]) == 2
    assert all(list(r) == list(names(ThroughputRun)) for c in doc["results"] for r in c["runs"])
    assert [to_json(c) for c in cells(doc)] == doc["results"]
    # every save holds whole cells: a running one with the keys a new cell has, its runs so far
    first = json.loads(store.saved[1])[0]
    assert list(first) == list(PENDING_KEYS) and first["state"] == "running" and len(first["runs"]) == 1
    assert view.lines[1] == "start (6, False)" and "J/image" in view.lines[2] and view.lines[2].endswith("(6, False)")
    assert "not steady: halves +3.0%" in view.lines[6] and view.lines[-1].endswith("FAILED, " + failed["reason"])
    assert all(cfg.cell_problem(c) is None for c in doc["results"])  # what --resume checks


def test_a_resumed_cell_recomputes_its_runs_and_keeps_its_key_order():
    doc, *_ = run(None, 3, precisions=("fp32",))
    older = copy.deepcopy(doc)
    cell = older["results"][0]
    runs = [{k: v for k, v in r.items() if k not in ("energy", "steadiness")} for r in cell["runs"][:2]]
    runs[0]["images_per_second"] = 1e9  # a partial's own figure is never trusted
    older["results"] = [{"engine": "pytorch-eager", "precision": "fp32", "state": "running", "batch": 2, "trials": [],
                         "runs": runs, "summary": None, "warmup_seconds": None, "later": 1}]
    again, *_ = run(older, 3, precisions=("fp32",))
    (cell,) = again["results"]
    assert list(cell) == ["engine", "precision", "state", "batch", "trials", "runs", "summary", "warmup_seconds",
                          "later", "peak_vram", "status", "reason", "energy", "steadiness"]
    assert cell["runs"][0]["images_per_second"] == doc["results"][0]["runs"][0]["images_per_second"]
    assert cell["runs"][0]["energy"] == doc["results"][0]["runs"][0]["energy"]  # from the readings kept with the run
    assert cell["summary"]["n"] == 3 and cell["later"] == 1


def test_resume_replays_a_typed_cell():
    doc, *_ = run(None, 3, precisions=("fp32",))
    cfg = ThroughputConfig.from_flags("pytorch-eager", "fp32", "cpu", None, 256, 2, 3, None, None, None, "local",
                                      "synthetic", None, False, None, None)
    cell = doc["results"][0]

    def edited(**changes):
        c = copy.deepcopy(cell)
        for path, v in changes.items():
            *where, key = path.split("__")
            target = c
            for k in where:
                target = target[int(k)] if k.isdigit() else target[k]
            if v is KeyError:
                target.pop(key)
            else:
                target[key] = v
        return cfg.cell_problem(c)
    assert edited() is None and edited(batch=KeyError) is None
    assert edited(batch=4) == "its batch is 4, the configuration's 2"
    assert edited(runs=cell["runs"] * 2) == "it records 6 runs of 3"
    assert edited(runs__0__run=7) == "run 1 is numbered 7 at batch 2"
    assert edited(runs__1__batch=9) == "run 2 is numbered 2 at batch 9"
    assert edited(runs__0__status=KeyError) == "run 1 has no outcome"
    assert edited(runs__0__status="crash") == "run 1 failed, yet more runs follow it"
