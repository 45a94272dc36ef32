"""Training throughput: steady-state images/s at one batch, per engine × precision, over fresh runs.

Its `benchmark.py` registers it (the registry imports it: kitctl.benchmarks.BUILTIN); this package
itself imports nothing, so the reports can import its modules (rows, tables) without an import cycle.
"""
