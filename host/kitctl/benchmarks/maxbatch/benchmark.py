"""Registers the maxbatch benchmark: its name, configuration, command and hooks (see kitctl.benchmarks)."""
from .. import Benchmark, register
from . import compare, plots, report
from .command import maxbatch
from .config import MaxbatchConfig, MaxbatchRecorded

register(Benchmark(name=MaxbatchConfig.BENCHMARK, title=MaxbatchConfig.TITLE, config=MaxbatchConfig, command=maxbatch,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="max batch",
                   report_unit="max batch", recorded=MaxbatchRecorded, load_rows=report.load_rows,
                   cells=report.cells, question=report.QUESTION, meta_count=report.meta_count,
                   measured_steps=report.measured_steps, measured_rules=report.measured_rules,
                   caveats_results=report.caveats_results, caveats_protocol=report.caveats_protocol,
                   progress=report.progress, cell_noun="engine × precision searches", unfinished_figure="capacity",
                   headline=report.headline, compare=compare.COMPARER, plots_of=plots.plots_of,
                   plots=plots.plots_overview, engine_cells=True))
