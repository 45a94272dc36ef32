"""Max batch: the largest training batch that completes one ResNet-50 step, per engine × precision."""
from .. import Benchmark, register
from . import report
from .command import maxbatch
from .config import MaxbatchConfig

register(Benchmark(name="maxbatch", title="Max batch", config=MaxbatchConfig, command=maxbatch,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="max batch",
                   report_unit="max batch"))
