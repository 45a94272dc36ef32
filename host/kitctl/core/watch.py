"""What a candidate's watcher and the runtimes share: the runtimes start a candidate and hand its
handle to a `Watcher` (the NVML sampler on a GPU); both sides implement these, so they live below both."""
from __future__ import annotations

from typing import Protocol

from .outcome import KilledBy, MemoryPeaks


class CandidateHandle(Protocol):
    """What a watcher may do with a running candidate."""

    def pids(self) -> set[int]:
        """Host PIDs of the candidate (process group or container)."""

    def kill(self, reason: KilledBy) -> None:
        """Kill the whole candidate now and remember who did it."""


class Watcher(Protocol):
    """Observes one candidate while it runs: the NVML sampler on a GPU, nothing on a CPU.

    `start` is called right after the candidate starts (the idle baseline has been taken
    before, in `prepare`); `stop` after it ended, returning the peaks it saw.
    """

    def prepare(self) -> None: ...

    def start(self, handle: CandidateHandle) -> None: ...

    def stop(self) -> MemoryPeaks: ...

    @property
    def over_budget(self) -> bool: ...
