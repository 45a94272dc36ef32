"""The local runtime: each candidate is a fresh subprocess of the trial, in its own process group.

Used on hosts without Docker, in CI and on the GPU test machine. `CUDA_VISIBLE_DEVICES` is
set to the GPU's UUID so the trial's `cuda:0` is the GPU NVML resolved.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from typing import Any

from ..outcome import KilledBy, MemoryPeaks, TrialOutcome
from ..engines import ENGINES
from ..paths import native_build_info, native_trial, trial_script
from ..protocol import TrialRequest
from .base import RawRun, Runtime, RuntimeUnavailable, Stopwatch, Watcher, classify


class _Group:
    """A running candidate's process group: what the watcher may see and kill."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pgid = proc.pid  # start_new_session=True: the child leads its own group
        self.killed_by = KilledBy.NONE
        self._lock = threading.Lock()

    def pids(self) -> set[int]:
        found = {self.proc.pid}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[2]) == self.pgid:  # field 5 of stat: pgrp
                    found.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
        return found

    def kill(self, reason: KilledBy) -> None:
        with self._lock:
            if self.killed_by is KilledBy.NONE:
                self.killed_by = reason
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _limit_data(limit_mib: int | None):
    """preexec_fn: cap the trial's private data (RLIMIT_DATA) so an allocation beyond the
    host memory limit fails inside the framework and the trial reports `oom`."""
    if limit_mib is None:
        return None

    def apply() -> None:
        b = int(limit_mib) * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (b, b))

    return apply


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, *, gpu_uuid: str | None = None, python: str | None = None,
                 memory_limit_mib: int | None = None, env: dict[str, str] | None = None) -> None:
        self.gpu_uuid = gpu_uuid
        self.python = python or sys.executable
        self.memory_limit_mib = memory_limit_mib
        self.extra_env = dict(env or {})
        self.current: _Group | None = None  # for interrupt cleanup

    def _env(self, request: TrialRequest) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        if request.device == "cuda" and self.gpu_uuid:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_uuid
        elif request.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU candidate never touches the GPU
        return env

    def command(self, request: TrialRequest) -> list[str]:
        if ENGINES[request.engine].native:
            return [str(native_trial(request.engine)), *request.argv()]
        return [self.python, str(trial_script(request.engine)), *request.argv()]

    @staticmethod
    def check(engines) -> None:
        """A compiled trial must be built before a run starts (one line, not a crash per candidate)."""
        for e in engines:
            if e.native and not os.access(native_trial(e.name), os.X_OK):
                raise RuntimeUnavailable(
                    f"engine {e.name}: no trial program at {native_trial(e.name)} — build it with "
                    f"images/{e.trial}/build.sh SRC_DIR {native_trial(e.name).parents[1]} (see README), set "
                    f"KITCTL_{e.trial.upper()}_PREFIX to where it is installed, or use --runtime docker")

    def run(self, request: TrialRequest, *, timeout_s: float, watcher: Watcher | None = None) -> TrialOutcome:
        if watcher is not None:
            watcher.prepare()
        clock = Stopwatch()
        proc = subprocess.Popen(
            self.command(request), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env=self._env(request), start_new_session=True, text=True, errors="replace",
            preexec_fn=_limit_data(self.memory_limit_mib if request.device == "cpu" else None),
        )
        group = _Group(proc)
        self.current = group
        if watcher is not None:
            watcher.start(group)
        try:
            try:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                group.kill(KilledBy.KIT_DEADLINE)
                stdout, stderr = proc.communicate()
            except BaseException:
                group.kill(KilledBy.KIT_INTERRUPT)
                proc.communicate()
                raise
        finally:
            # Stragglers (e.g. compile workers) die with the group, whatever happened.
            try:
                os.killpg(group.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.current = None
            peaks = watcher.stop() if watcher is not None else MemoryPeaks()
        rc = proc.returncode
        raw = RawRun(stdout=stdout, stderr=stderr,
                     exit_code=rc if rc is not None and rc >= 0 else None,
                     signal=-rc if rc is not None and rc < 0 else None,
                     killed_by=group.killed_by, elapsed_s=clock.elapsed)
        return classify(request, raw, peaks, over_budget=bool(watcher and watcher.over_budget),
                        runtime=self.name)

    def interrupt(self) -> None:
        if self.current is not None:
            self.current.kill(KilledBy.KIT_INTERRUPT)

    def describe(self, engine: str) -> dict[str, Any]:
        if ENGINES[engine].native:
            out: dict[str, Any] = {"runtime": self.name, "trial": str(native_trial(engine))}
            try:  # how the program was built (commit, compilers, CUDA archs): build.sh writes it
                out["build_info"] = json.loads(native_build_info(engine).read_text())
            except (OSError, ValueError):
                out["build_info"] = None
            return out
        return {"runtime": self.name, "interpreter": self.python,
                "trial": str(trial_script(engine))}
