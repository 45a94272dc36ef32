"""Host processes as /proc shows them: who is alive, since when, in which process group.

Shared by the Docker runtime (is a container's owner alive?) and the local runtime (its trial
groups, and the run-state files that let a later run or `kitctl clean` find orphans). A PID alone
names a process only while it lives; with its start time (/proc/PID/stat field 22, clock ticks
since boot) it names one process for the whole boot, so a reused PID is never taken for it.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the kit uses."""

    pid: int
    state: str  # field 3: R, S, D, Z (zombie: exited, not yet reaped), …
    pgrp: int  # field 5
    session: int  # field 6
    start: str  # field 22: start time in clock ticks since boot


def stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # comm (field 2) may hold spaces and parentheses: split after its last ')'
            fields = f.read().rsplit(b")", 1)[1].split()
        return ProcStat(pid=pid, state=fields[0].decode(), pgrp=int(fields[2]), session=int(fields[3]),
                        start=fields[19].decode())
    except (OSError, IndexError, ValueError):
        return None


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    st = stat(pid)
    return st.start if st is not None else None


def pid_alive(pid: int, start: str | None = None) -> bool:
    """Is `pid` a running process (and, given `start`, the same one that started then)?

    A zombie is not alive: a `kill -9`ed owner stays one until its parent reaps it, and what
    it started is orphaned all the same.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    st = stat(pid)
    if st is None:
        return True  # /proc not readable here: trust kill(0)
    if st.state == "Z":
        return False
    if start and st.start != start:
        return False  # the PID was reused by another process
    return True


def group_members(pgid: int) -> list[ProcStat]:
    """Every process (zombies included) whose process group is `pgid`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = stat(int(entry.name))
            if st is not None and st.pgrp == pgid:
                found.append(st)
    return found


def kill_group(pgid: int) -> None:
    """SIGKILL to a process group; one already gone (or not ours) is nothing to do."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def boot_id() -> str | None:
    """This boot's id: start times count from boot, so a record of another boot names nothing."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None
