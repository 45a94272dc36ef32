"""Run-state files: the trial process groups a local-runtime run has alive, for finding orphans.

A local trial runs in its own session, so a controller that dies (`kill -9`, OOM-kill, a lost
terminal) leaves it running: on a GPU it holds memory and poisons the next run's idle baseline.
The trial itself is told to die with its controller (PR_SET_PDEATHSIG, runtimes/local.py), but
its own children are not (the signal is not inherited across fork). So every run records, while
a candidate runs, its controller (PID + start time) and each trial's PID, start time and process
group; the start-of-run sweep and `kitctl clean` kill the recorded groups whose controller is gone.
Start times (/proc/PID/stat field 22) make a reused PID harmless: a process whose start time
differs from the record is never killed.

Where: one file per controller process, `<run_id>-<owner pid>.json` (two resumes of one run do
not share a file), in `$KITCTL_RUN_STATE_DIR` if set, else `$XDG_RUNTIME_DIR/kitctl/runs` (the
per-user tmpfs of a login session) or `/tmp/kitctl-<uid>/runs`. Not beside the partial artifact:
`kitctl clean` must find records without being told a results folder, and a results folder may
be shared by hosts whose PIDs mean nothing here. A tmpfs empties at reboot, when every recorded
PID is void anyway; records of another boot (boot id) are dropped without killing anything.
The sweep reads both default folders, since a later shell may lack XDG_RUNTIME_DIR (sudo, cron).
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import stat as stat_mod
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.fileio import parse_json, read_regular
from .processes import ProcStat, boot_id, group_members, pid_alive, process_start, stat

STATE_DIR_ENV = "KITCTL_RUN_STATE_DIR"
FORMAT = 1
KILL_WAIT_S = 5.0  # how long the sweep waits for a killed group to be gone (GPU memory freed)


@dataclass(frozen=True)
class TrialRecord:
    pid: int
    start: str  # /proc/PID/stat field 22 of the trial when it started
    pgid: int  # its process group (the trial leads it: pgid == pid)
    engine: str
    precision: str
    batch: int
    what: str = ""  # a data trial's description (its benchmark and argv); engine/precision/batch are empty there

    def describe(self) -> str:
        return self.what or f"{self.engine} {self.precision} batch {self.batch}"


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    host: str
    boot_id: str | None
    owner_pid: int
    owner_start: str | None
    trials: tuple[TrialRecord, ...]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = FORMAT
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "RunRecord":
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown run-state format {d.get('format')!r}")
        trials = tuple(TrialRecord(pid=int(t["pid"]), start=str(t["start"]), pgid=int(t["pgid"]),
                                   engine=str(t["engine"]), precision=str(t["precision"]), batch=int(t["batch"]),
                                   what=str(t.get("what") or ""))
                       for t in d["trials"])
        return RunRecord(run_id=str(d["run_id"]), host=str(d["host"]), boot_id=d.get("boot_id"),
                         owner_pid=int(d["owner_pid"]), owner_start=d.get("owner_start"), trials=trials)


# ---- where ----------------------------------------------------------------------------------

def state_dirs() -> list[Path]:
    """Where run-state files live: the first is written, all are swept."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return [Path(override)]
    dirs = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        dirs.append(Path(xdg) / "kitctl" / "runs")
    dirs.append(Path("/tmp") / f"kitctl-{os.getuid()}" / "runs")
    return dirs


def _private_dir(d: Path, *, create: bool) -> bool:
    """Is `d` a real folder of this user that others cannot write (and so is the kit's folder
    above it, `kitctl-<uid>` or `kitctl`)? A folder someone else planted in /tmp could otherwise
    feed the sweep PIDs to kill, or take the records."""
    if create:
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return False
    for p in (d,) if os.environ.get(STATE_DIR_ENV) else (d.parent, d):
        try:
            st = os.lstat(p)
        except OSError:
            return False
        if not stat_mod.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
    return True


# ---- the writer: one run's live trials --------------------------------------------------------

_WRITERS = itertools.count()


class RunState:
    """The run-state file of one controller: exists while one of its trials runs.

    Recording is a safety net, not the measurement: if the file cannot be written the run goes on
    (the trial still dies with its controller) and the user is told once.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        # one file per writer: a run with several runtimes in one process (--gpus with the local
        # runtime: one per GPU) must not overwrite another runtime's record of its live trials
        self._n = next(_WRITERS)
        self._trials: dict[int, TrialRecord] = {}
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._failed = False

    @property
    def path(self) -> Path:
        return state_dirs()[0] / f"{self.run_id}-{os.getpid()}-{self._n}.json"

    def add(self, pid: int, pgid: int, *, engine: str, precision: str, batch: int, what: str = "") -> None:
        with self._lock:
            self._trials[pid] = TrialRecord(pid=pid, start=process_start(pid) or "", pgid=pgid,
                                            engine=engine, precision=precision, batch=batch, what=what)
            self._write()

    def remove(self, pid: int) -> None:
        with self._lock:
            if self._trials.pop(pid, None) is not None:
                self._write()

    def close(self) -> None:
        with self._lock:
            self._trials.clear()
            self._write()

    def _write(self) -> None:
        path = self.path
        try:
            if not self._trials:
                path.unlink(missing_ok=True)  # nothing alive: no record
                return
            if not _private_dir(path.parent, create=True):
                raise OSError(f"{path.parent} is not a private folder of this user")
            me = os.getpid()
            rec = RunRecord(run_id=self.run_id, host=socket.gethostname(), boot_id=boot_id(), owner_pid=me,
                            owner_start=process_start(me), trials=tuple(self._trials.values()))
            tmp = path.with_name(f".{path.name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(rec.to_json(), f)
            os.replace(tmp, path)  # a reader sees the old record or the new one, never half
        except OSError as exc:
            if not self._failed:
                self._failed = True
                print(f"kitctl: warning: cannot record this run's trial processes ({exc}); "
                      f"an orphan of this run would not be found by `kitctl clean`", file=sys.stderr)


# ---- the sweep --------------------------------------------------------------------------------

def _living(members: list[ProcStat]) -> list[ProcStat]:
    return [m for m in members if m.state != "Z"]


def _orphan_group(t: TrialRecord) -> list[ProcStat]:
    """The living processes of a recorded trial's group, or [] when they are not that trial's.

    The group's id is the trial's PID. If a process with that PID lives and started at another
    time, the PID (and with it the group id) was reused: not ours. If the leader is gone (it died
    with its controller), its group id cannot be reused while any member lives, so the members
    that remain are the trial's children (same session, started after it)."""
    leader = stat(t.pid)
    if leader is not None and leader.start != t.start:
        return []
    try:
        t0 = int(t.start)
    except ValueError:
        return []
    return [m for m in _living(group_members(t.pgid))
            if m.session == t.pgid and m.start.isdigit() and int(m.start) >= t0]


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and _living(group_members(pgid)):
        time.sleep(0.02)


def sweep_local_orphans(*, dry_run: bool = False) -> list[str]:
    """Kill the recorded trial groups of this host whose controller is gone; return what was killed.

    Records of live controllers are left alone, as are records of other hosts (a shared /tmp).
    `dry_run` kills nothing and returns what would be killed (`kitctl clean --dry-run`).
    """
    out: list[str] = []
    host, boot = socket.gethostname(), boot_id()
    for d in state_dirs():
        if not d.is_dir() or not _private_dir(d, create=False):
            continue
        for path in sorted(d.glob("*.json")):
            try:
                rec = RunRecord.from_json(parse_json(read_regular(path)))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # not a record this kit can read: left alone
            if rec.host != host:
                continue
            stale_boot = bool(rec.boot_id and boot and rec.boot_id != boot)
            if not stale_boot and pid_alive(rec.owner_pid, rec.owner_start):
                continue
            for t in () if stale_boot else rec.trials:
                members = _orphan_group(t)
                if not members:
                    continue
                out.append(f"pid {t.pid} ({t.describe()}, "
                           f"{len(members)} process(es) in its group; run {rec.run_id}, "
                           f"controller pid {rec.owner_pid} gone)")
                if not dry_run:
                    _kill(t.pgid)
            if not dry_run:
                path.unlink(missing_ok=True)
    return out
