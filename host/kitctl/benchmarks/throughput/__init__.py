"""Training throughput: steady-state images/s at one batch, per engine × precision, over fresh runs."""
from .. import Benchmark, register
from . import report
from .command import throughput
from .config import ThroughputConfig

register(Benchmark(name="throughput", title="Training throughput", config=ThroughputConfig, command=throughput,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="median images/s",
                   report_unit="images/s (median)"))
