"""Holding a loader run to some CPUs (dataload's --cpus): what `taskset -c` does for a whole command, per run.

Why: N loader workers on a host with more cores than N use more than N CPUs — the loader's main thread, its epoch
iterator and the copies run on whichever spare CPU the scheduler picks, differently from run to run. On the H200
machine (16 vCPUs) an unpinned 8-worker ffcv cell read 6,103 to 8,694 images/s across three runs, and 6,075 to 6,484
held to 8 CPUs (results/reference/reports/h200-data-steady.md). A worker sweep, and a per-CPU figure, mean something
only when each run is held to the CPUs it is credited with.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import Fail

WORKERS = "workers"  # --cpus workers: each cell's run held to as many CPUs as it has workers


def allowed_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity: a container's cpuset, a taskset around kitctl)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """`0-3,8,10-11` (taskset's and Docker's --cpuset-cpus syntax) → (0, 1, 2, 3, 8, 10, 11); Fail on bad input."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise Fail(f"--cpus takes `workers` or a CPU list such as 0-3,8 (got {text!r})") from None
        if a < 0 or b < a:
            raise Fail(f"--cpus takes `workers` or a CPU list such as 0-3,8 (got {text!r})")
        out.extend(range(a, b + 1))
    if len(set(out)) != len(out):
        raise Fail(f"--cpus lists a CPU twice ({text})")
    return tuple(sorted(out))


@dataclass(frozen=True)
class CpuPin:
    """--cpus as given (`workers` or a list) and the CPUs it may use (this host's, checked when it was made)."""

    given: str
    listed: tuple[int, ...] | None  # a list's CPUs; None for `workers`
    allowed: tuple[int, ...]

    def for_workers(self, workers: int) -> tuple[int, ...]:
        """The CPUs a run with this many workers is held to: the list, or the first `workers` allowed CPUs."""
        return self.listed if self.listed is not None else self.allowed[:workers]


def parse_cpus(text: str | None, workers: tuple[int, ...]) -> CpuPin | None:
    """--cpus for a run whose cells have these worker counts; None when not given. Fail (one line) on a CPU this
    process may not use, or on `workers` with more workers than CPUs."""
    if text is None:
        return None
    allowed = allowed_cpus()
    given = text.strip()
    if given == WORKERS:
        over = [w for w in workers if w > len(allowed)]
        if over:
            raise Fail(f"--cpus workers: --workers {max(over)} needs {max(over)} CPUs and this host lets kitctl use "
                       f"{len(allowed)} ({cpu_ranges(allowed)})")
        return CpuPin(WORKERS, None, allowed)
    listed = parse_cpu_list(given)
    missing = [c for c in listed if c not in allowed]
    if missing:
        raise Fail(f"--cpus {given}: CPU {missing[0]} is not one this host lets kitctl use ({cpu_ranges(allowed)})")
    return CpuPin(given, listed, allowed)


def cpu_ranges(cpus: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) → "0-2,5"."""
    out: list[str] = []
    for c in cpus:
        if out and c == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
