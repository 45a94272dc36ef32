"""The typed view of an artifact's recorded configuration, and the shape issue 17 asks of the host
package: reports reach benchmarks only through the registry's hooks; no string-key configuration reads."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from kitctl import benchmarks
from kitctl.benchmarks.maxbatch.config import MaxbatchRecorded
from kitctl.benchmarks.throughput.config import ThroughputRecorded
from kitctl.core.recorded import RecordedConfig, read_view
from kitctl.reports import reference
from kitctl.reports.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "host" / "kitctl"
DATA = Path(__file__).resolve().parent / "data"


def _kitctl_artifacts() -> list[Path]:
    out = []
    for p in sorted([*(ROOT / "results" / "reference").glob("*.json"), *DATA.glob("*.json")]):
        doc = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("kind") == "kitctl-artifact":
            out.append(p)
    return out


@pytest.mark.parametrize("path", _kitctl_artifacts(), ids=lambda p: p.name)
def test_every_committed_artifact_reads_through_the_view(path):
    raw = json.loads(path.read_text(encoding="utf-8"))["configuration"]
    src = load_source(path)
    view = src.config
    own_type = benchmarks.get(src.benchmark).recorded
    if own_type is None:  # a data benchmark (datasize, dataload): no own view, none of the training keys
        assert view.own is None and not view.engines and view.model is None
        assert all(getattr(view, f.name) == raw[f.name] for f in dataclasses.fields(view) if f.name in raw)
        return
    assert isinstance(view.own, own_type)
    for obj in (view, view.own):
        for f in dataclasses.fields(obj):
            if f.metadata.get("recorded", True):
                # each key exactly as recorded; a missing one its default
                expected = raw[f.name] if f.name in raw else f.default
                assert getattr(obj, f.name) == expected, (path.name, f.name)
    assert view.engines and view.precisions and view.dataset and view.timeout_s  # the schema's required keys


def test_an_older_artifact_lacking_keys_gets_the_defaults():
    view = RecordedConfig.of({"engines": ["pytorch-eager"], "precisions": ["fp32"], "device": "cuda",
                              "model": "resnet50", "dataset": "synthetic", "timeout_s": 900.0}, MaxbatchRecorded)
    assert (view.seed, view.input, view.loss, view.cudnn_benchmark, view.data_dir) == (0, "?", "?", None, None)
    assert (view.own.steps, view.own.strategy, view.own.start_batch) == ("?", None, None)
    assert read_view(ThroughputRecorded, None) == ThroughputRecorded()  # no configuration at all
    # values are kept as written, never checked or converted (the renderers decide)
    assert read_view(ThroughputRecorded, {"batch": "odd", "runs": [1]}).runs == [1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.device = "cpu"  # type: ignore[misc]


def test_reference_configuration_view():
    doc = json.loads((DATA / "reference-maxbatch.json").read_text(encoding="utf-8"))
    cfg = reference.config(doc)
    raw = doc.get("configuration") or {}
    for f in dataclasses.fields(cfg):
        assert getattr(cfg, f.name) == raw.get(f.name, f.default)


def test_a_benchmark_needs_only_the_required_fields():
    """The optional hooks default to leaving their part out (a new benchmark starts small)."""
    b = benchmarks.Benchmark(name="x", title="X", config=object, command=lambda: None,
                             report_result=lambda s: [], report_ratios=lambda ss: [], ratio_what="x",
                             report_unit="x")
    assert b.recorded is None and b.load_rows is None and b.compare is None
    assert b.cells(None) == [] and b.measured_rules(None, "") == [] and b.caveats_results(None) == []
    assert b.meta_count(None) is None and b.headline(None) == "" and b.plots_of(None, [], None) == []
    assert b.plots is None and b.report_measured is None and b.engine_cells is False and b.add_commands is None


def _py_files() -> list[Path]:
    return sorted(HOST.rglob("*.py"))


def test_no_string_key_configuration_reads_in_the_host_package():
    pat = re.compile(r"\bcfg\[|\bcfg\.get\(|\bconfig\.get\(")
    hits = [f"{p.relative_to(HOST)}:{n}" for p in _py_files()
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert hits == []


def test_only_core_recorded_reads_the_recorded_configuration():
    """Every reader goes through core/recorded's views (`view`, `RecordedConfig.of_doc`), the strict resume
    rebuild through its `configuration`; writing the key (a new document, a resume's update) is allowed."""
    pat = re.compile(r"\[\s*[\"']configuration[\"']\s*\](?!\s*=[^=])|\.get\(\s*[\"']configuration[\"']")
    hits = [f"{p.relative_to(HOST)}:{n}: {line.strip()}" for p in _py_files() if p.relative_to(HOST).as_posix() != "core/recorded.py"
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert hits == []
    assert pat.search('x = doc["configuration"]["batch"]') and pat.search("doc.get('configuration')")
    assert not pat.search('doc["configuration"] = new')


def test_outside_the_benchmarks_no_module_names_a_benchmark():
    # core/engines.py says which benchmarks an engine runs; reports/reference.py which benchmark the
    # reference runner's files hold. Everything else reaches benchmarks through the registry.
    allowed = {"core/engines.py", "reports/reference.py"}
    pat = re.compile(r"\"(maxbatch|throughput)\"")
    hits = [f"{p.relative_to(HOST)}:{n}" for p in _py_files()
            if not p.relative_to(HOST).as_posix().startswith("benchmarks/")
            and p.relative_to(HOST).as_posix() not in allowed
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert hits == []


def test_no_benchmark_imports_another_and_the_core_imports_none():
    names = [b.name for b in benchmarks.all()]
    for p in _py_files():
        rel = p.relative_to(HOST).as_posix()
        text = p.read_text(encoding="utf-8")
        mine = rel.split("/")[1] if rel.startswith("benchmarks/") and rel.count("/") >= 2 else None
        for other in names:
            if other == mine:
                continue
            imports = re.search(rf"from \.\.(\.)?(benchmarks\.)?{other}\b|benchmarks\.{other}\b", text)
            if rel.startswith(("core/", "runtimes/", "images/")) or mine is not None:
                assert not imports, f"{rel} imports the {other} benchmark"


def test_a_minimal_benchmark_renders_through_the_defaults(tmp_path):
    """A benchmark with only the required fields and `report_measured` (the shape a data benchmark
    starts with): report, results list and plots leave out what it does not implement, no traceback."""
    from kitctl.core.recorded import RecordedConfig
    from kitctl.reports.plots import make_plots
    from kitctl.reports.report import render
    from kitctl.reports.results_list import headline
    from kitctl.reports.sources import KITCTL, Source

    toy = benchmarks.Benchmark(
        name="toy", title="Toy", config=object, command=lambda: None,
        report_result=lambda src: [f"{len(src.doc['results'])} items"], report_ratios=lambda ss: [],
        ratio_what="figure", report_unit="figure",
        report_measured=lambda doc: [["Question", f"how many items ({doc['configuration']['items']})"]])
    doc = json.loads((DATA / "throughput-sample.json").read_text(encoding="utf-8"))
    doc.update(benchmark="toy", configuration={"items": 3}, results=[{"item": 1}, {"item": 2}])
    benchmarks.all()
    benchmarks._REGISTRY["toy"] = toy
    try:
        src = Source(path=tmp_path / "toy.json", kind=KITCTL, doc=doc, benchmark="toy", state="complete",
                     created=doc["created_utc"], gpu_name=None, card_total_mib=None, limit_mib=None,
                     budget_mib=None, emulated=False, config=RecordedConfig.of(doc["configuration"]))
        md = render([src, src])
        assert "## [1] Toy" in md and "2 items" in md and "how many items (3)" in md
        assert "_Fewer than two engines with a figure per precision: no ratios._" in md
        assert "TF32" not in md and "One search" not in md  # engine cells only (engine_cells=False)
        assert headline(src) == "—"
        assert make_plots([src], tmp_path / "plots") == []
    finally:
        del benchmarks._REGISTRY["toy"]
