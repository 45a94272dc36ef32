"""The local runtime: each candidate is a fresh subprocess of the trial, in its own process group.

Used on hosts without Docker, in CI and on the GPU test machine. `CUDA_VISIBLE_DEVICES` is
set to the GPU's UUID so the trial's `cuda:0` is the GPU NVML resolved.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from ..core.outcome import KilledBy, MemoryPeaks
from ..core.engines import ENGINES
from ..core.paths import native_build_info, native_trial, trial_script
from ..core.protocol import TrialRequest
from ..core.watch import Watcher
from . import forkserver
from .base import RawRun, Runtime, RuntimeUnavailable, Stopwatch
from .processes import group_members, kill_group
from .runstate import RunState
from .spec import Record, TrialSpec


class _Group:
    """A running candidate's process group: what the watcher may see and kill."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pgid = proc.pid  # start_new_session=True: the child leads its own group
        self.killed_by = KilledBy.NONE
        self._lock = threading.Lock()

    def pids(self) -> set[int]:
        return {self.proc.pid} | {m.pid for m in group_members(self.pgid)}

    def kill(self, reason: KilledBy) -> None:
        with self._lock:
            if self.killed_by is KilledBy.NONE:
                self.killed_by = reason
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _load_prctl():
    """libc's prctl, looked up in the parent: the forked child should only call it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


_prctl = _load_prctl()


def _preexec(limit_mib: int | None, cpus: tuple[int, ...] = ()):
    """preexec_fn, run in the forked child before exec.

    * The trial dies with its controller: it is in its own session, so a `kill -9` of kitctl
      would leave it running (on a GPU, holding memory). PR_SET_PDEATHSIG survives exec and
      fires when the *thread* that forked the child exits; `run` forks and then waits for the
      child on the same thread, so that thread outlives the trial unless the whole controller
      dies — which is the point. If the controller died before prctl took effect, the child is
      already re-parented: it checks getppid() and kills itself. The trial's own children do not
      inherit the setting; they share its process group, which the run-state file records and
      the sweep kills (runtimes/runstate.py).
    * With `limit_mib`, cap the trial's private data (RLIMIT_DATA) so an allocation beyond the
      host memory limit fails inside the framework and the trial reports `oom`.
    * With `cpus`, hold the trial (and every thread and process it starts) to those CPUs, as `taskset -c` does.
    """
    parent = os.getpid()

    def apply() -> None:
        if limit_mib is not None:
            b = int(limit_mib) * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (b, b))
        if cpus:
            os.sched_setaffinity(0, cpus)
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    return apply


# What each Python trial imports before it can say anything (its KIT-RESULT line): an interpreter
# that lacks one is refused before the run, not recorded as "crash then crash".
TRIAL_MODULES = {"pytorch": ("numpy", "torch"), "tensorflow": ("numpy", "tensorflow", "keras"),
                 "jax": ("numpy", "jax", "jaxlib", "flax", "optax")}
PROBE_MARK = "kitctl-probe"
# find_spec looks the modules up without importing them (torch's import alone takes seconds).
_PROBE = (f"import importlib.util as u, sys; print({PROBE_MARK!r}, "
          "*[m for m in sys.argv[1:] if u.find_spec(m) is None])")
PROBE_TIMEOUT_S = 60


def _run_probe(argv: list[str]) -> subprocess.CompletedProcess:
    """The probe as a trial is run: its own session and the parent-death signal, and its whole process group
    killed when it ends, times out or a signal interrupts the wait. A `--python` that is a script starting other
    programs (a wrapper that hangs) left them running with PPID 1 when only the probe itself was killed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", start_new_session=True, preexec_fn=_preexec(None))
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what it left behind, if anything (its group is its session's)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.returncode is None:
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def check_python(engines, python: str, given: bool = True) -> None:
    """RuntimeUnavailable (one line) unless `python` runs Python and finds every module the engines'
    trials import."""
    if not engines:
        return
    modules = list(dict.fromkeys(m for e in engines for m in TRIAL_MODULES.get(e.trial, ())))
    who = f"--python {python}" if given else f"the interpreter {python}"
    try:
        r = _run_probe([python, "-c", _PROBE, *modules])
    except OSError as exc:
        raise RuntimeUnavailable(f"{who}: cannot run it ({exc.strerror or exc})") from None
    except subprocess.TimeoutExpired:
        raise RuntimeUnavailable(f"{who}: no answer to a one-line Python probe in {PROBE_TIMEOUT_S} s") from None
    said = next((x.split()[1:] for x in r.stdout.splitlines() if x.split()[:1] == [PROBE_MARK]), None)
    if r.returncode != 0 or said is None:
        first = next((x.strip() for x in r.stderr.splitlines() if x.strip()), None)
        raise RuntimeUnavailable(f"{who} is not a Python interpreter a trial can run with "
                                 f"({first or f'exit code {r.returncode}, no answer to a Python probe'})")
    if said:
        users = ", ".join(e.name for e in engines if set(TRIAL_MODULES.get(e.trial, ())) & set(said))
        raise RuntimeUnavailable(f"{who} lacks the module(s) {', '.join(said)} that {users} import(s); "
                                 "install them there, or pass another --python")


# --prestart: the trial reads its arguments from stdin after importing its framework, or serves candidates by
# forking (trials/common/kittrial.py).
PRESTART_ENV = "KIT_PRESTART"
# The trials whose framework import touches no device (kittrial.run's preload): the JAX and TensorFlow trials set
# their allocator's environment from the candidate's arguments before importing, so they cannot start early.
PRESTART_TRIALS = ("pytorch",)
# Spares kept waiting per runtime (per slot). A PyTorch candidate's own work can take under 2 s while its import
# takes 6-10 s on a busy 16-core host (H100, 4 slots, results/reference/reports/h200-slots.md): one spare started
# at the previous hand-over is still importing when it is needed, so several are started ahead.
PRESTART_DEPTH = 3
# Spares an idle slot starts before its first candidate (LocalRuntime.warm).
WARM_DEPTH = 1


@dataclass
class _Spare:
    """A prestarted trial waiting for its candidate's arguments: started for `key` (program, environment, limits)
    by the thread `thread` (its parent-death signal is tied to that thread)."""
    proc: subprocess.Popen
    key: tuple
    thread: int


class LocalRuntime(Runtime):
    name = "local"

    def __init__(self, *, gpu_uuid: str | None = None, python: str | None = None,
                 memory_limit_mib: int | None = None, env: dict[str, str] | None = None,
                 run_id: str | None = None, prestart: bool = False, prestart_by: str = "fork") -> None:
        self.gpu_uuid = gpu_uuid
        self.python = python or sys.executable
        self.memory_limit_mib = memory_limit_mib
        self.extra_env = dict(env or {})
        self.current: _Group | None = None  # for interrupt cleanup
        self.state = RunState(run_id or uuid.uuid4().hex[:12])  # live trials, for orphan sweeps
        # --prestart: while a candidate runs, the next ones' processes are already started and importing their
        # framework (PRESTART_DEPTH spares per runtime, i.e. per slot, oldest first); one gets its arguments
        # when the search asks.
        self.prestart = prestart
        self.prestart_by = prestart_by  # "fork": a fork server per slot where no memory cap applies; "spares"
        self._spares: list[_Spare] = []
        self._server: forkserver.Server | None = None  # prestart_by "fork": this slot's fork server
        self._halted = False  # interrupted: the run is stopping, a candidate started after it is killed at once

    def _env(self, spec: TrialSpec) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.update(spec.env_dict())
        env["PYTHONUNBUFFERED"] = "1"
        if spec.device == "cuda" and self.gpu_uuid:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_uuid
        elif spec.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU candidate never touches the GPU
        return env

    def command(self, request: TrialRequest) -> list[str]:
        if ENGINES[request.engine].native:
            return [str(native_trial(request.engine)), *request.argv()]
        return [self.python, str(trial_script(request.engine)), *request.argv()]

    @staticmethod
    def check(engines, python: str | None = None) -> None:
        """A compiled trial must be built, a Python trial's file be there and its interpreter hold
        what the trial imports, before a run starts (one line, not a crash per candidate)."""
        for e in engines:
            if not e.native and not trial_script(e.name).is_file():
                home = os.environ.get("KITCTL_HOME")
                raise RuntimeUnavailable(f"engine {e.name}: no trial at {trial_script(e.name)}"
                                         + (f" (KITCTL_HOME={home} is not a kit checkout)" if home else ""))
        check_python([e for e in engines if not e.native], python or sys.executable, given=python is not None)
        for e in engines:
            if e.native and not os.access(native_trial(e.name), os.X_OK):
                raise RuntimeUnavailable(
                    f"engine {e.name}: no trial program at {native_trial(e.name)} — build it with "
                    f"images/{e.trial}/build.sh SRC_DIR {native_trial(e.name).parents[1]} (see README), set "
                    f"KITCTL_{e.trial.upper()}_PREFIX to where it is installed, or use --runtime docker")

    def spec(self, request: TrialRequest) -> TrialSpec:
        engine = ENGINES[request.engine]
        prestart = self.prestart and not engine.native and engine.trial in PRESTART_TRIALS
        command = self.command(request)
        # A prestarted trial's program is the interpreter and its script; the candidate's arguments come later.
        program, argv = (command[:2], command[2:]) if prestart else (command, [])
        return TrialSpec(program=tuple(program), argv=tuple(argv), device=request.device,
                         memory_limit_mib=self.memory_limit_mib if request.device == "cpu" else None,
                         record=Record(engine=request.engine, precision=request.precision, batch=request.batch),
                         prestart=prestart)

    # ------------------------------------------------------------------ prestart

    def _spawn(self, spec: TrialSpec, env: dict[str, str]) -> subprocess.Popen:
        """Start the trial's program (with the candidate's environment `env`) to wait for its arguments on stdin."""
        proc = subprocess.Popen(
            list(spec.program), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE,
            env={**env, PRESTART_ENV: "1"}, start_new_session=True, text=True, errors="replace",
            preexec_fn=_preexec(spec.memory_limit_mib, spec.cpus),
        )
        r = spec.record
        self.state.add(proc.pid, proc.pid, engine=r.engine, precision=r.precision, batch=0,
                       what="prestarted trial, waiting for its candidate")
        return proc

    def _discard(self, spare: _Spare, wait: bool = True) -> None:
        kill_group(spare.proc.pid)
        if wait:
            spare.proc.communicate()
            self.state.remove(spare.proc.pid)

    def _keep(self, spec: TrialSpec) -> tuple[dict[str, str], tuple, int]:
        """The environment and key of `spec`'s candidates on this thread; spares and a fork server started for
        another are killed."""
        env = self._env(spec)
        key = (spec.program, tuple(sorted(env.items())), spec.memory_limit_mib, spec.cpus)
        me = threading.get_ident()
        keep = [x for x in self._spares if x.key == key and x.thread == me]
        for x in self._spares:
            if x not in keep:
                self._discard(x)
        self._spares = keep
        if self._server is not None and (self._server.key != key or self._server.thread != me
                                         or not self._server.alive()):
            self._stop_server()
        return env, key, me

    def _forks(self, spec: TrialSpec) -> bool:
        """A fork server starts this candidate: asked for, and no memory cap (see runtimes/forkserver.py)."""
        return (spec.prestart and self.prestart_by == "fork" and spec.memory_limit_mib is None
                and forkserver.available())

    def _serving(self, spec: TrialSpec, env: dict[str, str], key: tuple, me: int) -> forkserver.Server:
        if self._server is None:
            proc, sock = forkserver.spawn(list(spec.program), {**env, PRESTART_ENV: forkserver.FORK},
                                          _preexec(spec.memory_limit_mib, spec.cpus))
            self._server = forkserver.Server(proc, sock, key, me)
            r = spec.record
            self.state.add(proc.pid, proc.pid, engine=r.engine, precision=r.precision, batch=0,
                           what="fork server: imports the framework once, forks each candidate")
        return self._server

    def _stop_server(self, wait: bool = True) -> None:
        server = self._server
        if server is None:
            return
        if wait:
            self._server = None
        server.stop(wait)
        if wait:
            self.state.remove(server.proc.pid)

    def warm(self, request: TrialRequest) -> None:
        """--prestart: while a cell calibrates alone, an idle slot starts its fork server, or WARM_DEPTH spares for
        its candidates (one each, so 8 slots' imports do not slow the calibration candidate on the critical path)."""
        spec = self.spec(request)
        if not spec.prestart:
            return
        if self._forks(spec):
            self._serving(spec, *self._keep(spec))  # its import starts now
            return
        self._top_up(spec, *self._keep(spec), WARM_DEPTH)

    def _top_up(self, spec: TrialSpec, env: dict[str, str], key: tuple, me: int, depth: int) -> None:
        while len(self._spares) < depth:
            self._spares.append(_Spare(self._spawn(spec, env), key, me))

    def _hand_over(self, spec: TrialSpec, timeout_s: float) -> subprocess.Popen | forkserver.Forked:
        """The candidate's process. By a fork server: forked by this slot's server (started now if it is not
        running). By spares: the oldest waiting spare started for this program, environment and limits on this
        thread that is still alive, else a new one; it gets the arguments, and spares are started up to
        PRESTART_DEPTH at once (they import while this candidate runs)."""
        env, key, me = self._keep(spec)
        line = json.dumps({"argv": list(spec.argv)}) + "\n"
        if self._forks(spec):
            forked = forkserver.fork(self._serving(spec, env, key, me), list(spec.argv), timeout_s)
            if forked is not None:
                return forked
            self._stop_server()  # it could not serve (died, or no answer in the candidate's time)
            return self._given(self._spawn(spec, env), line)  # a fresh process, as a spare without a head start
        proc = None
        while self._spares and proc is None:
            spare = self._spares.pop(0)
            if spare.proc.poll() is None:
                try:
                    spare.proc.stdin.write(line)
                    spare.proc.stdin.close()
                    proc = spare.proc
                    continue
                except OSError:  # it died since the poll
                    pass
            self._discard(spare)
        proc = self._given(proc or self._spawn(spec, env), line)
        self._top_up(spec, env, key, me, PRESTART_DEPTH)
        return proc

    def _given(self, proc: subprocess.Popen, line: str) -> subprocess.Popen:
        """`proc`, a started trial waiting on stdin, given its arguments (a spare taken above already has them)."""
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.write(line)
                proc.stdin.close()
            except OSError:  # it died at once: its exit code and stderr say why
                pass
        proc.stdin = None  # closed: communicate() must not flush it
        self.state.remove(proc.pid)  # recorded again by execute, as the candidate
        return proc

    # ------------------------------------------------------------------ run

    def execute(self, spec: TrialSpec, *, timeout_s: float, watcher: Watcher | None = None) -> RawRun:
        if watcher is not None:
            watcher.prepare()
        clock = Stopwatch()
        if spec.prestart:
            proc = self._hand_over(spec, timeout_s)
            if not isinstance(proc, forkserver.Forked):
                clock = Stopwatch()  # a spare's candidate starts when it has its arguments (an import left: in it)
            # a forked one's, when it was asked for (the first of a slot waits there for the server's import)
        else:
            proc = subprocess.Popen(
                spec.local_command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                env=self._env(spec), start_new_session=True, text=True, errors="replace",
                preexec_fn=_preexec(spec.memory_limit_mib, spec.cpus),
            )
        group = _Group(proc)
        self.current = group
        if self._halted:  # interrupted while it was being started (a fork waits for its server's import)
            group.kill(KilledBy.KIT_INTERRUPT)
        try:
            r = spec.record
            self.state.add(proc.pid, group.pgid, engine=r.engine, precision=r.precision, batch=r.batch, what=r.what)
            if watcher is not None:
                watcher.start(group)
            try:
                stdout, stderr = proc.communicate(timeout=max(0.0, timeout_s - clock.elapsed))
            except subprocess.TimeoutExpired:
                group.kill(KilledBy.KIT_DEADLINE)
                stdout, stderr = proc.communicate()
            except BaseException:
                group.kill(KilledBy.KIT_INTERRUPT)
                proc.communicate()
                raise
        finally:
            # Stragglers (compile workers, loader workers) die with the group, whatever happened.
            try:
                os.killpg(group.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.state.remove(proc.pid)
            self.current = None
            peaks = watcher.stop() if watcher is not None else MemoryPeaks()
        rc = proc.returncode
        return RawRun(stdout=stdout, stderr=stderr, exit_code=rc if rc is not None and rc >= 0 else None,
                      signal=-rc if rc is not None and rc < 0 else None, killed_by=group.killed_by,
                      elapsed_s=clock.elapsed, peaks=peaks, over_budget=bool(watcher and watcher.over_budget))

    def slot_copy(self) -> "LocalRuntime":
        """A second slot: its own running candidate, the same run-state file (one per controller
        process: the copies must not overwrite each other's records)."""
        rt = LocalRuntime(gpu_uuid=self.gpu_uuid, python=self.python, memory_limit_mib=self.memory_limit_mib,
                          env=self.extra_env, run_id=self.state.run_id, prestart=self.prestart,
                          prestart_by=self.prestart_by)
        rt.state = self.state
        return rt

    def cancel(self) -> None:
        if self.current is not None:
            self.current.kill(KilledBy.KIT_INTERRUPT)

    def interrupt(self) -> None:
        self._halted = True
        self.cancel()
        for spare in list(self._spares):  # from any thread: kill only; the next hand-over or close reaps them
            self._discard(spare, wait=False)
        self._stop_server(wait=False)

    def close(self) -> None:
        spares, self._spares = self._spares, []
        for spare in spares:
            self._discard(spare)
        self._stop_server()
        self.state.close()

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
