"""Dataset size: bytes per image of each loader's native format per encoding × max side (FFCV's table)."""
from .. import Benchmark, register
from . import report
from .command import datasize
from .config import DatasizeConfig

register(Benchmark(name="datasize", title="Dataset size", config=DatasizeConfig, command=datasize,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="size",
                   report_unit="ImageNet-equivalent GB", report_measured=report.measured, no_ratios="",
                   caveats_results=report.caveats, partial_caveat=report.interrupted))
