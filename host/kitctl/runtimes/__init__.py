"""Runtimes start one candidate each: `local` (subprocess) or `docker` (container)."""
from .base import Runtime, RuntimeUnavailable, classify

__all__ = ["Runtime", "RuntimeUnavailable", "classify"]
