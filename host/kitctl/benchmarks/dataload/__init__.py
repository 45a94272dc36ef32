"""Data loading: images/s of each loader's pipeline (decode → RandomResizedCrop 224 → flip), from RAM or cold."""
from .. import Benchmark, register
from . import plots, report
from .command import dataload
from .config import DataloadConfig

register(Benchmark(name="dataload", title="Data loading", config=DataloadConfig, command=dataload,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="images/s",
                   report_unit="images/s (median)", plots=plots.plots, report_measured=report.measured))
