"""kitctl: containerized max-batch and throughput benchmarks for deep-learning engines."""
__version__ = "0.1.0"
