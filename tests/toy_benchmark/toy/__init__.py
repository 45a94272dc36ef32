"""A toy benchmark, as a new one starts: its folder alone (config, command, registration) and one line
naming it in the registry's BUILTIN (tests/test_toy_benchmark.py adds that line in the process it starts)."""
from kitctl.benchmarks import Benchmark, register

from .command import toy
from .config import ToyConfig

register(Benchmark(name=ToyConfig.BENCHMARK, title=ToyConfig.TITLE, config=ToyConfig, command=toy,
                   report_result=lambda src: [], report_ratios=lambda sources: [], ratio_what="count",
                   report_unit="count"))
