"""The benchmark registry: every benchmark is one folder below this one and one line in BUILTIN.

A benchmark (`kitctl/benchmarks/<name>/`) owns everything that is its own:

- `config.py`  its typed configuration: a frozen dataclass built and checked ONCE from the flags
               (`from_flags(...)`, bad input raises `kitctl.errors.Fail`: one line, exit 2), written
               into the artifact's "configuration" (`to_json()`) and read back for `--resume`
               (`from_json(core.recorded.configuration(doc))`, the same checks again). The artifact's JSON keys
               are the contract; nothing else passes string keys around. Beside it, optional, a
               tolerant read-only view of its own recorded keys for reports (`Benchmark.recorded`,
               e.g. `MaxbatchRecorded`; read by `kitctl.core.recorded.read_view`).
- `command.py` its `kitctl run <name>` typer command: parse the flags into the config, start the
               run through `kitctl.run.session` (new or resumed: GPU, runtime, artifact — shared by
               every benchmark), run it, print the end table, return the exit code.
- `run.py`     its runner: a `kitctl.run.runner.UnitRunner` subclass whose `_run_cell` decides which
               units an engine × precision runs (UnitRunner runs each as one fresh process/container
               through a `Runtime`, saves the artifact after every one, handles signals and cleanup;
               the core's protocol, outcome, search, budget, sampler and artifact store measure).
- `table.py`   its rows, end table and ratios (read from an artifact, also by reports and compare).
- `report.py`  its parts of `kitctl report` and `results list`: the "Result" of one artifact, its
               ratios, rows of "What is measured", caveats, headline (the hooks below).
- `compare.py` its `kitctl compare` rule (`Benchmark.compare`, a `kitctl.reports.compare.Comparer`).
- `plots.py`   its plots for `kitctl report --plots` (`Benchmark.plots_of` per result, `plots` across results).
- `benchmark.py` the `register(Benchmark(...))` call naming all of the above (or `__init__.py`).
- its schema part: for now the benchmark's "configuration"/"results" shapes stay in the one
  `kitctl/schema/artifact.schema.json` (schema_version 1; a split must validate every artifact alike):
  a new benchmark adds its name to the "benchmark" enum and an if/then for its cells and keys.

Only name, title, config, command and the report's result/ratios/units are required; every other
hook has a default that leaves its part out, so a new benchmark starts small. The module that calls
`register` joins BUILTIN below (the ONE registration line). The core (kitctl.core), the runtimes and
the images never import a benchmark; the CLI, reports, compare, results list and plots reach
benchmarks only through `all()` / `get(name)` and the hooks (the reference runner's files are max
batch's: `kitctl.reports.reference.BENCHMARK`, the one name the reports hold).
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The built-in benchmarks, in the order `kitctl run --help` and report overviews list them.
# Each entry is the module that calls `register` (a benchmark's `benchmark.py`, or its package when
# its __init__ registers it).
BUILTIN = (
    "kitctl.benchmarks.maxbatch.benchmark",
    "kitctl.benchmarks.throughput.benchmark",
    "kitctl.benchmarks.datasize",
    "kitctl.benchmarks.dataload",
    "kitctl.benchmarks.train_e2e",
)


def _none(*_: Any) -> list[Any]:
    return []


@dataclass(frozen=True)
class Benchmark:
    """A benchmark as the CLI, reports, compare, results list and plots see it. The first fields are
    required; every hook after them is optional, and its default leaves that part out (a new
    benchmark implements what it has). A "Source" is `kitctl.reports.sources.Source`: one result
    file, read (its rows filled by `load_rows`, its recorded configuration typed by `recorded`)."""

    name: str  # `kitctl run <name>`, the artifact's "benchmark", results/<name>-<model>-<dataset>-<UTC>.json
    title: str  # in headings: "Max batch", "Training throughput"
    config: type  # the frozen configuration dataclass (from_flags / to_json / from_json)
    command: Callable[..., Any]  # the typer command function registered as `kitctl run <name>`
    report_result: Callable[[Any], list[str]]  # Markdown lines of one artifact's "Result" (a reports Source)
    report_ratios: Callable[[list[Any]], list[Any]]  # Sources -> the Ratio list of their "Headline ratios"
    ratio_what: str  # "_Fewer than two engines with a <ratio_what> per precision_": "max batch"
    report_unit: str  # the report overview's side-by-side figure: "max batch", "images/s (median)"
    # (the typer app) -> None: top-level commands of its own beside `kitctl run <name>` (its data tools)
    add_commands: Callable[[Any], None] | None = None
    # -- reading a result -------------------------------------------------------------------------
    # Its own "configuration" keys as an artifact recorded them: a frozen dataclass whose field names are
    # the JSON keys, each with the default a reader prints when an older artifact lacks it (read by
    # kitctl.core.recorded.read_view into `RecordedConfig.own`). None: no keys of its own.
    recorded: type | None = None
    # (source, doc) -> None: fill the Source's rows from the artifact (`rows`/`points`, `tput`, …).
    load_rows: Callable[[Any, dict[str, Any]], None] | None = None
    # Source -> [(engine, precision, text, figure)]: one result's cells, in order, for side-by-side
    # overviews and the engine list; figure = (value, is a lower bound) or None where there is none.
    cells: Callable[[Any], list[tuple[str, str, str, tuple[float, bool] | None]]] = _none
    # The overview's side-by-side key columns (one row per key of `cells`) and the key column of its "Headline
    # ratios": an engine benchmark's (engine, precision); a data benchmark names its own key (loader, data).
    cell_heads: tuple[str, str] = ("Engine", "Precision")
    # "Headline ratios" when there are none: None → "_Fewer than two engines with a <ratio_what> per precision:
    # no ratios._"; "" → the section is left out (a benchmark whose figures have no ratios of that kind).
    no_ratios: str | None = None
    # -- its parts of `kitctl report` ---------------------------------------------------------------
    # Whether its "results" are engine × precision cells with trials/runs: the report's TF32 caveat,
    # calibrated overheads and sampler rates read them (another shape: those lines are left out).
    engine_cells: bool = False
    # doc -> the whole "What is measured" table, instead of the training benchmarks' rows below
    report_measured: Callable[[dict[str, Any]], list[list[str]]] | None = None
    question: str = ""  # "What is measured" → Question
    meta_count: Callable[[Any], str | None] = lambda src: None  # the headline line's "N candidates"/"N runs"
    measured_steps: Callable[[Any], list[list[str]]] = _none  # "What is measured" rows after Loss / optimizer
    # (source, isolation: "a fresh container"/"a fresh subprocess") -> its rules after Precision
    measured_rules: Callable[[Any, str], list[list[str]]] = _none
    caveats_results: Callable[[Any], list[str]] = _none  # caveats of its figures (after partial/resumed)
    # An interrupted result's caveat: what one unit is called, and (source, unfinished cell) -> its progress
    cell_noun: str = "engine × precision cells"  # "2 of 4 <cell_noun> finished"
    unfinished_figure: str = "result"  # "Nothing in an unfinished row is a <unfinished_figure>"
    progress: Callable[[Any, dict[str, Any]], str] = lambda src, cell: ""  # "3 candidates so far, largest pass 64"
    caveats_protocol: Callable[[Any], list[str]] = _none  # caveats of its protocol (after the TF32 one)
    # Source -> an interrupted result's caveat, for results whose cells are not engine × precision ones (the
    # data benchmarks'); None: the engines' (cell_noun, unfinished_figure, progress above)
    partial_caveat: Callable[[Any], str] | None = None
    # Source -> what of this result ran on a GPU ("pytorch-nvjpeg (decode)", "training"), read from its own
    # config and runs, for the report's GPU lines: a GPU recorded in host.gpu but used by nothing is "unused",
    # and a GPU used but not recorded (an older data artifact) is "not recorded", never "CPU". None: the
    # engine benchmarks' rule (host.gpu is the candidates' GPU; none is a CPU run).
    gpu_users: Callable[[Any], list[str]] | None = None
    # Source -> one headline of `kitctl results list` ("pytorch-eager fp32: 1,234; …"); "" → "—"
    headline: Callable[[Any], str] = lambda src: ""
    # -- `kitctl compare` -----------------------------------------------------------------------------
    compare: Any = None  # a kitctl.reports.compare.Comparer (its rows, change rule, units, setup checks)
    # -- `kitctl report --plots` ---------------------------------------------------------------------
    # (its sources among those reported, out_dir) -> PlotFiles across them (called when there is one)
    plots: Callable[[list[Any], Any], list[Any]] | None = None
    # (source, all sources reported, out_dir) -> that one result's PlotFiles, listed before the above
    plots_of: Callable[[Any, list[Any], Any], list[Any]] = lambda src, sources, out_dir: []


_REGISTRY: dict[str, Benchmark] = {}
_MODULE: dict[str, str] = {}  # benchmark name -> the module that registered it (its place in BUILTIN)
_loaded = False


def register(b: Benchmark) -> Benchmark:
    """Called once by each benchmark package's __init__; a second registration of a name is a bug."""
    if b.name in _REGISTRY and _REGISTRY[b.name] is not b:
        raise ValueError(f"benchmark {b.name!r} registered twice")
    _REGISTRY[b.name] = b
    _MODULE.setdefault(b.name, sys._getframe(1).f_globals.get("__name__", ""))
    return b


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in BUILTIN:
            importlib.import_module(mod)


def all() -> list[Benchmark]:  # noqa: A001  (the registry's own vocabulary: benchmarks.all())
    """Every registered benchmark, built-ins first, in BUILTIN's order."""
    _load()
    # Not the order of registration: that is the order of import, which any earlier import of a benchmark's
    # module (a test, a tool) changes, and with it every report that lists the benchmarks.
    def rank(name: str) -> int:
        mod = _MODULE.get(name, "")
        return BUILTIN.index(mod) if mod in BUILTIN else len(BUILTIN)

    return [_REGISTRY[n] for n in sorted(_REGISTRY, key=lambda n: rank(n))]


def get(name: str) -> Benchmark | None:
    """The benchmark of that name (an artifact's "benchmark"), or None."""
    _load()
    return _REGISTRY.get(name)
