"""Data loading: images/s of each loader's pipeline (decode → RandomResizedCrop 224 → flip), from RAM or cold."""
from .. import Benchmark, register
from . import compare, plots, report
from .command import dataload
from .config import DataloadConfig


def _add_data_commands(app) -> None:
    """`kitctl data …` (make a corpus): the data benchmarks' own tool beside `kitctl run dataload`."""
    from ...cli.data import data_app

    app.add_typer(data_app, name="data")


register(Benchmark(name="dataload", title="Data loading", config=DataloadConfig, command=dataload,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="images/s",
                   report_unit="images/s (median)", plots=plots.plots, report_measured=report.measured,
                   caveats_protocol=report.caveats_protocol,
                   add_commands=_add_data_commands, gpu_users=report.gpu_users, cells=report.cells,
                   cell_heads=("Loader", "Data · source · workers"), no_ratios=report.NO_RATIOS,
                   caveats_results=report.caveats, partial_caveat=report.interrupted,
                   headline=report.headline, compare=compare.COMPARER))
