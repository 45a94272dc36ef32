"""Runtimes start one candidate each: `local` (subprocess) or `docker` (container)."""
from .base import CandidateHandle, Runtime, RuntimeUnavailable, Watcher, classify

__all__ = ["CandidateHandle", "Runtime", "RuntimeUnavailable", "Watcher", "classify"]
