"""End to end (issue 18 item 4): ResNet-50/18 training images/s fed by each loader against the same training
on synthetic on-device data, the GPU busy fraction and the loader's own images/s: which loader keeps the GPU busy."""
from .. import Benchmark, register
from . import compare, plots, report
from .command import train_e2e
from .config import TrainE2EConfig

register(Benchmark(name="train-e2e", title="Training fed by each loader", config=TrainE2EConfig, command=train_e2e,
                   report_result=report.result_table, report_ratios=report.ratios, ratio_what="training images/s",
                   report_unit="training images/s (median)", plots=plots.plots, report_measured=report.measured, no_ratios="",
                   headline=report.headline, caveats_results=report.caveats,
                   gpu_users=report.gpu_users, partial_caveat=report.interrupted,
                   cell_heads=("Loader", "Model"), compare=compare.COMPARER))
