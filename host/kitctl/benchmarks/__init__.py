"""The benchmark registry: every benchmark is one folder below this one and one line in BUILTIN.

A benchmark (`kitctl/benchmarks/<name>/`) owns everything that is its own:

- `config.py`  its typed configuration: a frozen dataclass built and checked ONCE from the flags
               (`from_flags(...)`, bad input raises `kitctl.errors.Fail`: one line, exit 2), written
               into the artifact's "configuration" (`to_json()`) and read back for `--resume`
               (`from_json(doc["configuration"])`, the same checks again). The artifact's JSON keys
               are the contract; nothing else passes string keys around.
- `command.py` its `kitctl run <name>` typer command: parse the flags into the config, start the
               run through `kitctl.launch` (new or resumed: GPU, runtime, artifact — shared by
               every benchmark), run it, print the end table, return the exit code.
- `run.py`     its runner: one fresh process/container per unit of work through a `Runtime`,
               the artifact saved after every one (the core's protocol, outcome, search, budget,
               sampler and artifact store do the measuring; the runner decides what to run).
- `table.py`   its rows, end table and ratios (read from an artifact, also by reports and compare).
- `report.py`  its section of `kitctl report` (the "Result" of one artifact) — found through
               `Benchmark.report_result`, never by name.
- `plots.py`   its plots (optional).
- its schema part: for now the benchmark's "configuration"/"results" shapes stay in the one
  `kitctl/schema/artifact.schema.json` (schema_version 1; a split must validate every artifact alike).

`kitctl/benchmarks/<name>/__init__.py` calls `register(Benchmark(...))`; the name joins BUILTIN
below (the ONE registration line). The core (kitctl.core), the runtimes and the images never import
a benchmark; the CLI, reports and compare reach benchmarks only through `all()` / `get(name)`.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The built-in benchmarks, in the order `kitctl run --help` and report overviews list them.
BUILTIN = (
    "kitctl.benchmarks.maxbatch",
    "kitctl.benchmarks.throughput",
    "kitctl.benchmarks.datasize",
    "kitctl.benchmarks.dataload",
)


@dataclass(frozen=True)
class Benchmark:
    name: str  # `kitctl run <name>`, the artifact's "benchmark", results/<name>-<model>-<dataset>-<UTC>.json
    title: str  # in headings: "Max batch", "Training throughput"
    config: type  # the frozen configuration dataclass (from_flags / to_json / from_json)
    command: Callable[..., Any]  # the typer command function registered as `kitctl run <name>`
    report_result: Callable[[Any], list[str]]  # Markdown lines of one artifact's "Result" (a reports Source)
    report_ratios: Callable[[list[Any]], list[Any]]  # Sources -> the Ratio list of their "Headline ratios"
    ratio_what: str  # "_Fewer than two engines with a <ratio_what> per precision_": "max batch"
    report_unit: str  # the report overview's side-by-side figure: "max batch", "images/s (median)"
    plots: Callable[..., list[Any]] | None = None  # (sources, out_dir) -> PlotFiles, for `report --plots`
    # doc -> the [item, value] rows of the report's "What is measured"; None: the engines' table
    report_measured: Callable[[dict[str, Any]], list[list[str]]] | None = None


_REGISTRY: dict[str, Benchmark] = {}
_loaded = False


def register(b: Benchmark) -> Benchmark:
    """Called once by each benchmark package's __init__; a second registration of a name is a bug."""
    if b.name in _REGISTRY and _REGISTRY[b.name] is not b:
        raise ValueError(f"benchmark {b.name!r} registered twice")
    _REGISTRY[b.name] = b
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
    return list(_REGISTRY.values())


def get(name: str) -> Benchmark | None:
    """The benchmark of that name (an artifact's "benchmark"), or None."""
    _load()
    return _REGISTRY.get(name)
