"""Registers the throughput benchmark: its name, configuration, command and hooks (see kitctl.benchmarks)."""
from .. import Benchmark, register
from . import compare, plots, report
from .command import throughput
from .config import ThroughputConfig, ThroughputRecorded

register(Benchmark(name=ThroughputConfig.BENCHMARK, title=ThroughputConfig.TITLE, config=ThroughputConfig,
                   command=throughput,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="median images/s",
                   report_unit="images/s (median)", recorded=ThroughputRecorded, load_rows=report.load_rows,
                   cells=report.cells, question=report.QUESTION, meta_count=report.meta_count,
                   measured_rules=report.measured_rules, caveats_protocol=report.caveats_protocol,
                   progress=report.progress, unfinished_figure="throughput figure",
                   headline=report.headline, compare=compare.COMPARER, plots_of=plots.plots_of,
                   engine_cells=True))
