"""Throughput's window rule, steadiness and energy (docs/method.md, "Throughput").

The trial side (trials/common/kittrial.py) is driven by a stepper on a virtual clock: its steps cost
a scripted number of seconds, so the rule's decisions (when the warm-up is steady, how long the
window runs, whether its halves agree) are checked exactly, with no timing in the assertions. The
host side reads the energy counter of the named fake NVML (tests/fake_nvml.py), whose counter is a
known power, beside a real PyTorch trial on the CPU.
"""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import need_module  # noqa: E402

from fake_nvml import FakeDevice, FakeNvmlLib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trials" / "common"))
import kittrial  # noqa: E402

from kitctl.benchmarks.throughput.config import WINDOW_IMAGES, WINDOW_SECONDS, ThroughputConfig  # noqa: E402
from kitctl.benchmarks.throughput.energy import window_energy, window_readings  # noqa: E402
from kitctl.benchmarks.throughput.run import cell_steadiness  # noqa: E402
from kitctl.core.gpu import Telemetry  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


# -- the trial's rule, on a virtual clock ------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def perf_counter(self) -> float:
        return self.t

    def time(self) -> float:
        return 1.7e9 + self.t


class ScriptedStepper(kittrial.Stepper):
    """Each step costs step_s(step index, clock) virtual seconds; the first call costs `first_s` more
    (a compile). The loss is the step index, so the test can tell which step ended a phase."""

    def __init__(self, clock: Clock, step_s, first_s: float = 3.0) -> None:
        self.clock, self.step_s, self.first_s, self.i = clock, step_s, first_s, 0

    def first(self, n: int):
        self.clock.t += self.first_s
        return self.run(n)

    def run(self, n: int):
        for _ in range(n):
            self.clock.t += self.step_s(self.i, self.clock.t)
            self.i += 1
        return float(self.i)

    def sync(self, loss) -> None:
        pass

    def value(self, loss):
        return loss


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(kittrial, "time", SimpleNamespace(perf_counter=c.perf_counter, time=c.time))
    return c


def measure(clock: Clock, step_s, *flags: str, batch: int = 10) -> dict:
    args = kittrial.build_parser(["m"]).parse_args(["--benchmark", "throughput", "--batch", str(batch),
                                                    "--mode", "m", *flags])
    result = kittrial.base_result(args, "e")
    kittrial.measure_throughput(args, result, ScriptedStepper(clock, step_s))
    return result


def test_the_window_is_the_shortest_run_of_whole_chunks_holding_both_minimums(clock):
    r = measure(clock, lambda i, t: 2 ** -10, "--window-images", "5000", "--window-seconds", "2")
    w = r["window"]
    assert r["status"] == "ok" and w["rule"] == "at least 5000 images and at least 2 s and at least 4 chunks"
    assert w["seconds"] >= 2 and w["images"] >= 5000 and len(w["chunk_seconds"]) >= kittrial.MIN_WINDOW_CHUNKS
    assert math.isclose(sum(w["chunk_seconds"]), w["seconds"]) and w["images"] == w["steps"] * 10
    assert w["chunk_steps"] == kittrial.MAX_CHUNK_STEPS  # 50 steps of ~1 ms stay under the chunk target
    last = w["chunk_seconds"][-1]
    assert w["seconds"] - last < 2 or w["images"] - w["chunk_steps"] * 10 < 5000  # one chunk fewer fails a minimum
    assert (r["images"], r["window_seconds"]) == (w["images"], w["seconds"])
    assert r["images_per_second"] == pytest.approx(10 * 1024)
    assert w["end_unix"] - w["start_unix"] == pytest.approx(w["seconds"])
    assert w["steady"] is True and w["halves_change"] == pytest.approx(0, abs=1e-9)
    assert r["warmup"]["converged"] is True and r["warmup"]["seconds"] >= 3  # the first call's compile counts


def start_up(i: int, t: float) -> float:
    """A step that starts 10x slower and settles over a few hundred steps (caches, clocks, queues)."""
    return 0.001 + 0.009 * math.exp(-i / 100)


def test_the_warm_up_lasts_until_the_engine_is_at_speed(clock):
    """The warm-up must outlast the start-up, so that the timed window sees the steady speed; a
    50-step window right after 10 warm-up steps (the old default) timed the start-up instead."""
    r = measure(clock, start_up, "--window-seconds", "1")
    assert r["warmup"]["converged"] is True and r["warmup"]["steps"] > 400
    assert r["images_per_second"] == pytest.approx(10 / 0.001, rel=0.03) and r["window"]["steady"] is True
    old = measure(clock, start_up, "--warmup-steps", "10", "--steps", "50")
    assert old["images_per_second"] < 0.3 * r["images_per_second"]


def test_a_start_up_longer_than_a_flat_warm_up_shows_in_the_windows_halves(clock):
    """A flat slow phase looks steady to the warm-up (two chunks agree); if it ends inside the window,
    the halves disagree and the run is marked not steady rather than trusted."""
    r = measure(clock, lambda i, t: 0.01 if t < 1000 + 3 + 1.0 else 0.001, "--window-seconds", "1")
    assert r["warmup"]["converged"] is True and r["window"]["steady"] is False


def test_a_warm_up_that_never_settles_ends_at_its_bound_and_says_so(clock):
    r = measure(clock, lambda i, t: 0.002 if (i // 50) % 2 else 0.0055, "--window-seconds", "1",
                "--max-warmup-seconds", "4")
    w = r["warmup"]
    assert w["converged"] is False and w["rule"] == "until two successive chunks within 0.02 (at most 4 s)"
    assert 4 <= w["seconds"] - 3 < 5  # the bound, after the first call's 3 s


def test_a_window_whose_speed_drops_halfway_is_not_steady(clock):
    r = measure(clock, lambda i, t: 2 ** -10 if t < 1001 + 3 else 2 ** -9, "--window-seconds", "2")
    w = r["window"]
    assert w["steady"] is False and w["halves_change"] < -0.02
    assert w["second_half_ips"] < w["first_half_ips"]
    assert r["status"] == "ok" and r["images_per_second"] > 0  # the figure is kept


def test_fixed_steps_still_mean_exactly_those_steps(clock):
    r = measure(clock, lambda i, t: 0.001, "--warmup-steps", "3", "--steps", "7")
    w = r["window"]
    assert (w["steps"], w["rule"], r["warmup"]["steps"], r["warmup"]["rule"]) == (7, "fixed: 7 steps", 3,
                                                                                 "fixed: 3 steps")
    assert sum(w.get("chunk_step_counts") or [w["chunk_steps"]] * len(w["chunk_seconds"])) == 7
    assert r["loss_warmup"] == 3.0 and r["loss_final"] == 10.0  # 3 warm-up steps, then steps 4..10


def test_a_host_before_the_rule_gets_the_old_fixed_counts(clock):
    r = measure(clock, lambda i, t: 0.001)
    assert (r["warmup"]["steps"], r["window"]["steps"]) == (kittrial.THROUGHPUT_WARMUP_STEPS, kittrial.THROUGHPUT_STEPS)


def test_maxbatch_keeps_one_warm_up_step_and_one_measured_step(clock):
    args = kittrial.build_parser(["m"]).parse_args(["--benchmark", "maxbatch", "--batch", "4", "--mode", "m"])
    result = kittrial.base_result(args, "e")
    kittrial.measure_throughput(args, result, ScriptedStepper(clock, lambda i, t: 0.5))
    assert (result["loss_warmup"], result["loss_final"], result["step_seconds"]) == (1.0, 2.0, 0.5)
    assert "window" not in result and "warmup" not in result


def test_halves_leave_an_odd_middle_chunk_out():
    assert kittrial.halves([1, 1, 1], [1.0, 5.0, 2.0], 4) == (4.0, 2.0)
    assert kittrial.halves([2], [1.0], 4) == (None, None)


@pytest.mark.parametrize("flag, value", [("--window-seconds", "nan"), ("--window-seconds", "0"),
                                         ("--steady-tolerance", "0"), ("--steady-tolerance", "2"),
                                         ("--window-images", "-5"), ("--image-size", "16"),
                                         ("--max-warmup-seconds", "inf")])
def test_a_bad_rule_flag_is_the_protocols_invalid_arguments_line(capsys, flag, value):
    code = kittrial.run(["--benchmark", "throughput", "--batch", "2", "--mode", "m", flag, value], ["m"],
                        lambda m: "e", lambda a, r: None, lambda e: "error")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(line[len(kittrial.RESULT_PREFIX):])
    assert code == 1 and result["status"] == "error" and result["error"].startswith("invalid arguments")
    assert flag in result["error"]


def test_synthetic_data_at_another_image_size_and_cifar10_only_at_32():
    args = kittrial.build_parser(["m"]).parse_args(["--benchmark", "maxbatch", "--batch", "3", "--mode", "m",
                                                    "--image-size", "224"])
    images, labels, info = kittrial.load_data(args)
    assert images.shape == (3, 224, 224, 3) and info["shape_hwc"] == [224, 224, 3]
    args.dataset, args.data_dir = "cifar10", "/nonexistent"
    with pytest.raises(kittrial.TrialError, match="--image-size 224 needs --dataset synthetic"):
        kittrial.load_data(args)


# -- the host: energy over the window, a cell's steadiness ----------------------------------------------

def series(watts: float, t0: float, n: int, dt: float = 0.05, energy: bool = True) -> list:
    return [(t0 + i * dt, Telemetry(energy_mj=watts * 1000 * (t0 + i * dt) if energy else None,
                                    sm_clock_mhz=1980.0 - i, temperature_c=40.0 + i * 0.1, power_w=watts))
            for i in range(n)]


def test_joules_are_the_counter_interpolated_at_the_windows_ends():
    s = series(400.0, 100.0, 200)  # 100 s .. 109.95 s
    readings = window_readings(s, 101.013, 106.507)
    assert readings["t_unix"][0] <= 101.013 and readings["t_unix"][-1] >= 106.507
    assert len(readings["t_unix"]) == len(readings["energy_mj"]) < 200  # only the window and its neighbours
    e = window_energy(readings, 101.013, 106.507, 54_940)
    assert e["joules"] == pytest.approx(400.0 * (106.507 - 101.013), rel=1e-9)
    assert e["mean_watts"] == pytest.approx(400.0) and e["joules_per_image"] == pytest.approx(e["joules"] / 54_940)
    inside = [1980.0 - i for i in range(200) if 101.013 <= 100 + i * 0.05 <= 106.507]
    assert e["sm_clock_mhz"] == {"mean": pytest.approx(sum(inside) / len(inside)), "min": min(inside),
                                 "max": max(inside)}
    assert e["note"] is None and e["readings"] == len(readings["t_unix"])


def test_energy_says_why_it_is_missing():
    no_counter = window_readings(series(400.0, 0.0, 100, energy=False), 1.0, 2.0)
    assert window_energy(no_counter, 1.0, 2.0, 10)["note"] == "NVML gave no energy counter on this device"
    short = window_readings(series(400.0, 0.0, 10), 0.1, 3.0)  # the readings end at 0.45 s
    e = window_energy(short, 0.1, 3.0, 10)
    assert e["joules"] is None and "do not cover" in e["note"]
    assert window_energy(None, 0.1, 3.0, 10) is None and window_energy(short, None, 3.0, 10) is None


def test_a_cell_is_steady_only_when_every_run_is_and_its_runs_agree():
    runs = [{"run": 1, "steady": True}, {"run": 2, "steady": True}]
    ok = cell_steadiness(runs, {"median": 100.0, "ci_low": 97.0, "ci_high": 104.0}, 0.02)
    assert (ok["steady"], ok["why"], ok["interval_spread"]) == (True, None, pytest.approx(0.07))
    wide = cell_steadiness(runs, {"median": 100.0, "ci_low": 90.0, "ci_high": 111.0}, 0.02)
    assert wide["steady"] is False and "interval spans 21% of the median" in wide["why"]
    edge = cell_steadiness(runs, {"median": 100.0, "ci_low": 95.0, "ci_high": 105.2}, 0.02)  # 10.2 %: over the limit
    assert edge["steady"] is False and "interval spans 10.2% of the median (more than 10%)" in edge["why"]
    one = cell_steadiness([*runs, {"run": 3, "steady": False}], {"median": 100.0, "ci_low": 99.0, "ci_high": 101.0},
                          0.02)
    assert one["steady"] is False and one["runs_not_steady"] == [3] and "1 of 3 runs" in one["why"]
    old = cell_steadiness([{"run": 1}, {"run": 2}], {"median": 100.0, "ci_low": 99.0, "ci_high": 101.0}, 0.02)
    assert old["steady"] is None  # runs from before the rule: not measured


# -- the configuration ---------------------------------------------------------------------------------

def cfg(device="cuda", **kw) -> ThroughputConfig:
    base = dict(engines="pytorch-eager", precision="fp32", device=device, vram_limit=None, reserve=256, batch=128,
                runs=5, warmup_steps=None, steps=None, timeout=None, runtime="local", dataset="synthetic",
                data_dir=None, cudnn_benchmark=False, memory_limit=None, gpu=None)
    return ThroughputConfig.from_flags(**{**base, **kw})


def test_the_default_window_is_two_reference_epochs_and_five_seconds_on_a_gpu():
    c = cfg()
    assert (c.window_images, c.window_seconds, c.warmup_steps, c.steps) == (2 * 390 * 128, 5.0, None, None)
    assert (WINDOW_IMAGES, WINDOW_SECONDS) == (99_840, 5.0)
    req = c.request_fields()
    assert (req["window_images"], req["window_seconds"], req["max_warmup_seconds"]) == (99_840, 5.0, 120.0)
    cpu = cfg(device="cpu")
    assert (cpu.window_images, cpu.window_seconds) == (None, 5.0)  # two epochs on a CPU take about an hour
    fixed = cfg(steps=780, warmup_steps=10)
    assert fixed.request_fields()["window_images"] is None and fixed.request_fields()["max_warmup_seconds"] is None
    assert "780 timed steps" in fixed.to_json()["window_rule"]


def test_a_partial_from_before_the_rule_resumes_with_its_fixed_steps():
    recorded = cfg(steps=50, warmup_steps=10).to_json()
    for k in ("window_images", "window_seconds", "steady_tolerance", "max_warmup_seconds", "window_rule"):
        recorded.pop(k)
    again = ThroughputConfig.from_json(recorded)
    assert (again.steps, again.warmup_steps, again.window_images, again.window_seconds) == (50, 10, None, None)
    assert ThroughputConfig.from_json(cfg().to_json()) == cfg()


def kitctl(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, "run", "throughput", "--results-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))


@pytest.mark.parametrize("args, match", [
    (["--window-seconds", "nan"], "--window-seconds must be a number of seconds > 0"),
    (["--window-seconds", "-1"], "--window-seconds must be a number of seconds > 0"),
    (["--steady-tolerance", "0"], "--steady-tolerance must be a fraction in (0, 1]"),
    (["--window-images", "0"], "--window-images must be > 0"),
    (["--steps", "780", "--window-seconds", "10"], "--steps fixes the timed window"),
    (["--image-size", "16"], "--image-size must be 32 to 512 pixels"),
    (["--image-size", "224", "--dataset", "cifar10", "--data-dir", "/tmp"], "CIFAR-10 is 32×32"),
])
def test_bad_window_flags_are_one_line_exit_2_nothing_written(tmp_path, args, match):
    p = kitctl(tmp_path, "--device", "cpu", "--runtime", "local", *args)
    assert p.returncode == 2, p.stderr + p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0] and "Traceback" not in p.stderr
    assert not list(tmp_path.iterdir())


# -- end to end: a real CPU trial, the real sampler on the fake NVML's energy counter -------------------

def test_a_real_run_records_joules_from_the_counter_and_its_steadiness(tmp_path):
    need_module("torch")
    from kitctl.benchmarks.throughput.run import ThroughputPlan, ThroughputRunner
    from kitctl.core.artifact import ArtifactStore, validate
    from kitctl.core.budget import make_budget
    from kitctl.core.engines import ENGINES
    from kitctl.core.gpu import Nvml
    from kitctl.core.sampler import NvmlSampler
    from kitctl.run.document import new_doc
    from kitctl.run.session import base_request
    from kitctl.runtimes.local import LocalRuntime
    from kitctl.cli.view import PlainView

    watts = 250.0
    dev = FakeDevice("GPU-00000000-1111-2222-3333-444444444444", used_mib=(500.0,),
                     energy_mj=lambda t: watts * 1000 * (t - 1.7e9))
    nvml = Nvml(lib=FakeNvmlLib([dev]))
    handle = nvml.resolve("0")[1]
    c = cfg(device="cpu", batch=2, runs=2, window_seconds=1.0, max_warmup_seconds=2.0)
    rt = LocalRuntime(run_id="energy")
    doc = new_doc("energy", c, None, rt, [ENGINES["pytorch-eager"]])
    plan = ThroughputPlan(engines=[ENGINES["pytorch-eager"]], precisions=["fp32"],
                          base_request=base_request("throughput", c.run, **c.request_fields()), runs=2,
                          timeout_s=300, budget=make_budget(143771.0, None, 256),
                          watcher_factory=lambda b: NvmlSampler(nvml, handle, b, telemetry=True))
    store = ArtifactStore.create(tmp_path, "throughput", "resnet50", "synthetic", stamp="T")
    lines = io.StringIO()
    doc = ThroughputRunner(plan, rt, store, doc, PlainView(lines)).run()
    validate(doc)
    # Each run is one start line and one end line holding its figure and the progress (not a second line
    # repeating the run with its images/s, which read as a run more)
    for i, left in ((1, "1 left, ETA"), (2, "0 left, ETA")):
        mine = [ln for ln in lines.getvalue().splitlines() if f"run {i}/2" in ln]
        assert len(mine) == 2 and mine[0].endswith("…"), mine
        assert "images/s" in mine[1] and f"[{i} done, {left}" in mine[1], mine
    (cell,) = doc["results"]
    assert cell["status"] == "ok", cell.get("reason")
    for r in cell["runs"]:
        w = r["result"]["window"]
        e = r["energy"]
        assert e["joules"] == pytest.approx(watts * w["seconds"], rel=0.01)  # int mJ readings, 50 ms apart
        assert e["mean_watts"] == pytest.approx(watts, rel=0.01)
        assert e["joules_per_image"] == pytest.approx(e["joules"] / r["images"])
        assert e["temperature_c"]["max"] == 45 and e["sm_clock_mhz"]["mean"] == 1980
        assert r["telemetry"]["t_unix"][0] <= w["start_unix"] <= w["end_unix"] <= r["telemetry"]["t_unix"][-1]
        assert isinstance(r["steady"], bool) and r["window_rule"].startswith("at least 1 s")
        assert len(w["chunk_seconds"]) >= 4 and w["seconds"] >= 1.0
    assert cell["energy"]["mean_watts"] == pytest.approx(watts, rel=0.01)
    assert cell["steadiness"]["runs_judged"] == 2


def test_a_refused_opennn_graph_figure_is_shown_with_its_corrected_figures(tmp_path):
    """OpenNN's graph path: the trial refuses the naive figure when graphs ran short, and reports beside it
    the rate of the steps that ran and what OpenNN's own runner would print; the report shows both."""
    from kitctl.reports.report import render
    from kitctl.reports.sources import load_source

    doc = json.loads((ROOT / "tests" / "data" / "throughput-sample.json").read_text())
    figures = [{"naive_ips": 60_000.0, "executed_steps": 432, "executed_ips": 33_000.0 + i, "runner_style_ips": 25_000}
               for i in range(3)]
    doc["results"].append({"engine": "opennn-graph", "precision": "fp32", "state": "done", "status": "failed",
                           "batch": 128, "trials": [], "summary": None,
                           "reason": "run 1/5 failed — error: launched a graph smaller than a full 8-step group",
                           "runs": [{"run": i + 1, "images_per_second": None, "images": None, "window_seconds": None,
                                     "warmup_seconds": None, "result": {"opennn_figures": f}}
                                    for i, f in enumerate(figures)]})
    doc["configuration"]["engines"].append("opennn-graph")
    path = tmp_path / "throughput-resnet50-synthetic-20261202T000000Z.json"
    path.write_text(json.dumps(doc))
    text = render([load_source(path)], [], tmp_path)
    line = next(ln for ln in text.splitlines() if "OpenNN's figures beside the naive one" in ln)
    assert "steps that ran × batch ÷ window: 33,001 images/s" in line
    assert "what OpenNN's own runner would print: 25,000 images/s" in line
