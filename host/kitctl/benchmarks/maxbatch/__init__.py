"""Max batch: the largest training batch that completes one ResNet-50 step, per engine × precision.

Its `benchmark.py` registers it (the registry imports it: kitctl.benchmarks.BUILTIN); this package
itself imports nothing, so the reports can import its modules (rows, tables) without an import cycle.
"""
