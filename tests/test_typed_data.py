"""dataload's and train-e2e's typed results (dataload/results.py, train_e2e/results.py, data/results.py): every
committed artifact of theirs reads into its records and writes back unchanged, key order included; the records
agree with the JSON Schema; what the runner builds is written as the dicts it used to write; the typed views of
the recorded configuration hold every key the run records, and are the only readers of it."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kitctl.benchmarks.data.recorded import kept_runs, measured
from kitctl.benchmarks.data.results import DataRun, Epoch, Window
from kitctl.benchmarks.data.trial import TrialRun
from kitctl.benchmarks.dataload import results as dl
from kitctl.benchmarks.dataload.config import DataloadConfig, DataloadRecorded
from kitctl.benchmarks.train_e2e import results as e2e
from kitctl.benchmarks.train_e2e.config import TrainE2EConfig, TrainE2ERecorded
from kitctl.core.loader_window import LoaderWindow
from kitctl.core.stats import Summary
from kitctl.core.steadiness import Steadiness
from kitctl.core.typed import from_json, record_fields, to_json, updated
from conftest import committed_artifacts

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "host" / "kitctl"
SCHEMA = json.loads((HOST / "schema" / "artifact.schema.json").read_text())
CELLS = {"dataload": dl.cells, "train-e2e": e2e.cells}


def _committed() -> list[tuple[Path, dict]]:
    return committed_artifacts(*CELLS)


def fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in record_fields(cls)}


def required(cls) -> set[str]:
    return {n for n, f in fields(cls).items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def agrees(cls, schema: dict) -> None:
    """Every property the schema names is a field; every field without a default is required by the schema."""
    assert set(schema["properties"]) <= set(fields(cls)), (cls.__name__, set(schema["properties"]) - set(fields(cls)))
    assert required(cls) <= set(schema.get("required", ())), (cls.__name__, required(cls) - set(schema["required"]))


def _object(schema: dict) -> dict:
    (obj,) = [s for s in schema["oneOf"] if s.get("type") == "object"]
    return obj


def test_every_committed_dataload_and_train_e2e_cell_reads_and_writes_back_unchanged():
    committed = _committed()
    assert {doc["benchmark"] for _, doc in committed} == set(CELLS), "both benchmarks have committed artifacts"
    for path, doc in committed:
        typed = CELLS[doc["benchmark"]](doc)
        assert [to_json(c) for c in typed] == doc["results"], path.name
        # the same bytes: every key in its recorded order, at every depth
        assert json.dumps([to_json(c) for c in typed]) == json.dumps(doc["results"]), path.name
        for c in typed:
            assert all(isinstance(r, DataRun) for r in c.runs)
            assert c.summary is None or not c.ok or isinstance(c.summary, (Summary, e2e.TrainE2ESummary))
            if doc["benchmark"] == "dataload":
                assert all(isinstance(e, Epoch) for r in c.runs for e in r.epochs or ())
                assert all(isinstance(r.window, Window) for r in c.runs if r.window_rule)
                assert c.steadiness is None or isinstance(c.steadiness, Steadiness)


def test_the_records_agree_with_the_json_schema():
    defs = SCHEMA["$defs"]
    agrees(dl.DataloadCell, defs["dataload_cell"])
    agrees(dl.DataloadRun, defs["dataload_run"])
    agrees(e2e.TrainE2ECell, defs["train_e2e_cell"])
    agrees(e2e.TrainE2ERun, defs["train_e2e_run"])
    agrees(Summary, defs["throughput_summary"])
    agrees(e2e.TrainE2ESummary, _object(defs["train_e2e_cell"]["properties"]["summary"]))
    run = defs["train_e2e_run"]["properties"]
    agrees(e2e.StepLosses, _object(run["step_losses"]))
    agrees(e2e.NonfiniteLoss, _object(run["first_nonfinite_loss"]))
    # a summary as core/stats.py writes it, in its order
    assert list(to_json(Summary.of([3.0, 1.0, 2.0], 0.95))) == list(fields(Summary))


def test_a_run_is_written_as_the_trial_s_outcome_then_its_figures():
    """DataloadRun.of_trial and TrainE2ERun.of_trial write what the runners wrote as dicts: the run, the trial's
    outcome, then the figures (a dataload trial without a window adds no window keys; a failed one no figure)."""
    windowed = {"images_per_second": 100.0, "images": 400, "window_seconds": 4.0, "warmup_seconds": 1.0,
                "epochs": [{"images": 200, "seconds": 2.0}], "impl": "x", "batch_shape": [8, 224, 224, 3],
                "cpu_count": 4, "versions": {"torch": "2"}, "startup_seconds": 0.5, "build_seconds": 0.1,
                "warmup_epoch": {"images": 200, "seconds": 1.0}, "figures": {"images_per_second": "the rate"},
                "window": {"rule": "the rule", "halves_change": 0.01, "steady": True}}
    ok = TrialRun("ok", windowed, 0, 9.5, None, "")
    r = dl.DataloadRun.of_trial(2, ok)
    assert list(to_json(r)) == ["run", "status", "exit_code", "elapsed_s", "error", "stderr_tail",
                                "images_per_second", "images", "window_seconds", "warmup_seconds", "epochs", "impl",
                                "batch_shape", "cpu_count", "affinity_cores", "versions", "startup_seconds", "build_seconds",
                                "warmup_epoch", "window", "figures", "window_rule", "steady", "halves_change"]
    assert r.window.rule == r.window_rule == "the rule" and r.steady is True and r.epochs[0].images == 200
    failed = dl.DataloadRun.of_trial(1, TrialRun("crash", None, 1, 2.0, "no result line", "tail"))
    assert to_json(failed) == {"run": 1, "status": "crash", "exit_code": 1, "elapsed_s": 2.0, "error": "no result line",
                               "stderr_tail": "tail", "images_per_second": None, "images": None,
                               "window_seconds": None, "warmup_seconds": None, "epochs": None, "impl": None,
                               "batch_shape": None, "cpu_count": None, "affinity_cores": None, "versions": None}
    capped = updated(updated(r, payload_mb_per_s=9.0), status="error", error="cap", images_per_second=None)
    assert list(to_json(capped))[-1] == "payload_mb_per_s" and to_json(capped)["status"] == "error"
    assert to_json(capped)["images_per_second"] is None and list(to_json(capped))[:7] == list(to_json(r))[:7]

    e = e2e.TrainE2ERun.of_trial(1, TrialRun("error", {"train_images_per_second": 5.0, "device": "cpu"}, 1, 3.0,
                                                      "died", ""))
    assert list(to_json(e)) == ["run", "status", "exit_code", "elapsed_s", "error", "stderr_tail", *e2e.FIGURES]
    assert e.train_images_per_second is None and e.device == "cpu"  # a failed run keeps no figure


def test_train_e2e_figures_are_the_run_s_fields_in_the_recorded_order():
    assert e2e.FIGURES == (
        "train_images_per_second", "loader_images_per_second", "busy_fraction", "data_wait_fraction",
        "window_seconds", "warmup_seconds", "images", "steps", "data_wait_seconds", "loader_images",
        "loader_seconds", "final_loss", "loss_after_warmup", "precision", "device", "parameters", "impl",
        "layout", "busy_basis", "resident_before", "drained_batches", "epoch_starts_in_window",
        "loader_epoch_starts", "cpu_count", "versions", "step_losses", "first_nonfinite_loss", "decode_check",
        "loader_alone", "loader_startup_seconds")


def test_a_cell_is_written_as_the_runner_wrote_it():
    """A new cell has the keys a new cell always had; a finished one adds its keys after them, as dict.update did,
    even a null start-up; a train-e2e summary has loader_startup only where a run recorded one."""
    cell = dl.DataloadCell.pending("ffcv", "jpeg90", 256, "ram", 4)
    assert to_json(cell) == {"loader": "ffcv", "encoding": "jpeg90", "side": 256, "source": "ram", "workers": 4,
                             "status": "pending", "reason": "", "runs": [], "summary": None}
    done = updated(cell, status="ok", startup=None, steadiness=from_json(Steadiness, {"steady": None}))
    assert list(to_json(done))[-2:] == ["startup", "steadiness"] and to_json(done)["startup"] is None
    t = e2e.TrainE2ECell.pending("resnet50", "synthetic")
    assert list(to_json(t)) == list(e2e.PENDING_KEYS)
    s = Summary.of([1.0], 0.95)
    plain = e2e.TrainE2ESummary(train=s, busy=s, loader=None, recorded_keys=("train", "busy", "loader"))
    assert list(to_json(plain)) == ["train", "busy", "loader"]
    assert list(to_json(dataclasses.replace(plain, loader_startup=s))) == ["train", "busy", "loader", "loader_startup"]


def test_a_resumed_cell_keeps_its_consistent_runs_renumbered():
    def run(i, ips, images=100, seconds=1.0, status="ok"):
        return from_json(dl.DataloadRun, {"run": i, "status": status, "images_per_second": ips, "images": images,
                                          "window_seconds": seconds})

    runs = (run(1, 100.0), run(2, 99_999.0), run(3, None, status="crash"), run(4, 50.0, 50))
    kept = kept_runs(runs)
    assert [r.run for r in kept] == [1, 2] and [r.images_per_second for r in kept] == [100.0, 50.0]
    assert [list(to_json(r)) for r in kept] == [list(to_json(runs[0]))] * 2  # the keys in their recorded places
    assert measured(kept, 2) and not measured(kept, 3)


def test_the_configuration_views_hold_every_recorded_key():
    window = LoaderWindow.of(1000, 5.0, 0.02)
    load = DataloadConfig("c", "d", ("ffcv",), (1,), ("ram",), ("jpeg90",), (256,), 1, None, 8, None, 60.0, "py",
                          window=window)
    assert set(load.to_json()) == {f.name for f in dataclasses.fields(DataloadRecorded)}
    train = TrainE2EConfig("c", "d", ("synthetic",), ("resnet18",), "auto", "cpu", 1, "jpeg90", 256, 8, 1, 1, 1,
                           None, 60.0, "py", window=window)
    assert set(train.to_json()) == {f.name for f in dataclasses.fields(TrainE2ERecorded)}
