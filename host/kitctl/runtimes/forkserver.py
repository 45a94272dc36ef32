"""--prestart on the local runtime by a fork server: one process per slot imports the trial's framework once, then
forks a fresh process for each candidate (trials/common/kittrial.py `_serve`).

Why: with spares (a whole interpreter per candidate, started ahead), each candidate still costs one framework
import of CPU time; with several slots on one host those imports compete for the cores and slow the candidates
on the critical path. A fork costs milliseconds. What stays fresh: the server never touches the device (the
preload imports only), so each candidate initialises CUDA itself, in its own process, as a fresh one would.

Not used where a memory cap applies (a CPU candidate's RLIMIT_DATA): a forked process's data segment starts with
the server's imported heap, which a fresh process's does not, so the cap would bind at another batch.

The protocol, over a SOCK_SEQPACKET socket that is the server's stdin: the host sends {"argv": [...]} with the
write ends of two pipes (the candidate's stdout and stderr); the server answers {"pid": N} once forked and
{"exit": N} (Popen's returncode convention) once the candidate has ended.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from .processes import kill_group

# The fork server's PRESTART_ENV value (trials/common/kittrial.py).
FORK = "fork"
_MSG = 1 << 16


def available() -> bool:
    """Fork and file descriptors over a socket: Linux (and other POSIX systems with SCM_RIGHTS)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "SOCK_SEQPACKET")


@dataclass
class Server:
    """A running fork server, started for `key` (program, environment, limits) by the thread `thread` (its
    parent-death signal is tied to that thread); `sock` is the host's end of its socket."""
    proc: subprocess.Popen
    sock: socket.socket
    key: tuple
    thread: int

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, wait: bool = True) -> None:
        """Kill it (its forked candidates follow: their parent-death signal); with `wait`, reap it."""
        kill_group(self.proc.pid)
        if wait:
            self.proc.wait()
            self.sock.close()


def spawn(program: list[str], env: dict[str, str], preexec) -> tuple[subprocess.Popen, socket.socket]:
    """Start the trial's program as a fork server (its stdout and stderr: nothing; each candidate has its own)."""
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(program, stdin=child.fileno(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=preexec)
    except BaseException:
        host.close()
        raise
    finally:
        child.close()
    return proc, host


class Forked:
    """A candidate forked by a server, as the local runtime uses a Popen: `pid` (its process group's too),
    `communicate(timeout)` (its stdout and stderr, TimeoutExpired as Popen's) and `returncode`."""

    def __init__(self, pid: int, stdout: int, stderr: int, server: Server) -> None:
        self.pid = pid
        self.stdin = None
        self.returncode: int | None = None
        self.args = ["fork", str(pid)]
        self._server = server
        self._fds = [stdout, stderr]
        self._bufs = {stdout: bytearray(), stderr: bytearray()}
        self._open = {stdout, stderr}

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read both pipes to their end and the server's word on the exit; resumable after a timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for fd in self._open:
                sel.register(fd, selectors.EVENT_READ)
            if self.returncode is None:
                sel.register(self._server.sock, selectors.EVENT_READ)
            while self._open or self.returncode is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(left):
                    if key.fileobj is self._server.sock:
                        sel.unregister(self._server.sock)
                        self.returncode = _exit_code(self._server.sock)
                        continue
                    chunk = os.read(key.fd, _MSG)
                    if chunk:
                        self._bufs[key.fd].extend(chunk)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
                        self._open.discard(key.fd)
        return tuple(self._bufs[fd].decode("utf-8", "replace") for fd in self._fds)  # type: ignore[return-value]


def _exit_code(sock: socket.socket) -> int:
    """The server's {"exit": N}; a server gone without saying (killed: its candidate followed) reads as SIGKILL."""
    try:
        msg = sock.recv(_MSG)
        return int(json.loads(msg)["exit"]) if msg else -signal.SIGKILL
    except (OSError, ValueError, KeyError, TypeError):
        return -signal.SIGKILL


def fork(server: Server, argv: list[str], timeout_s: float) -> Forked | None:
    """Ask `server` for a candidate with `argv`; None when it cannot serve (it died, or gave no pid within
    `timeout_s`, e.g. stuck in its import): the caller then starts the candidate another way."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        socket.send_fds(server.sock, [json.dumps({"argv": argv}).encode()], [out_w, err_w])
        server.sock.settimeout(timeout_s)  # the first answer waits for the server's import
        try:
            msg = server.sock.recv(_MSG)
        finally:
            server.sock.settimeout(None)
        pid = int(json.loads(msg)["pid"])
    except BaseException as exc:
        for fd in (out_r, err_r):
            os.close(fd)
        if isinstance(exc, (OSError, ValueError, KeyError, TypeError)):
            return None
        raise  # Ctrl-C while waiting: the run stops (its close() stops the server, and so its candidate)
    finally:
        os.close(out_w)
        os.close(err_w)
    return Forked(pid, out_r, err_r, server)
