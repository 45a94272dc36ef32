"""One unit of work, as every runtime takes it: a `TrialSpec` says what to start (the local program, or the image),
its arguments, mounts, environment, GPU, limits and labels; `Runtime.execute` starts it fresh, watches it, kills it
on the deadline or a signal and returns what it saw (`RawRun`). The engine benchmarks build theirs from a
`TrialRequest` (the runtime's `spec`), the data benchmarks (datasize, dataload, train-e2e) from their own flags;
both then read the trial's result line the same way (core/protocol.py).

Paths: a spec's arguments hold the host's paths. The local runtime runs them as they are; a container sees each
mount's source at its target, and the Docker runtime rewrites every argument under a mount's source to the same
path under its target (`container_argv`), so one spec serves both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Mount:
    """A host folder (or file) the container sees at `target`; read-only unless the trial writes there."""
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ReadLimit:
    """Reads from a block device capped for the container (Docker's --device-read-bps): slow storage emulated."""
    device: str
    bytes_per_s: int


@dataclass(frozen=True)
class Record:
    """How the run-state file describes the live trial (what `kitctl clean` and the start-up sweep name)."""
    engine: str = ""
    precision: str = ""
    batch: int = 0
    what: str = ""  # a data trial's description: its benchmark and first arguments


@dataclass(frozen=True)
class TrialSpec:
    """A trial to start fresh: `program` (the local runtime: an interpreter and the trial's script, or a compiled
    trial) or `image` (the Docker runtime), with `argv`.

    `device`: "cuda" — the runtime's GPU is the only one the trial sees (locally by CUDA_VISIBLE_DEVICES=<UUID>, in
    a container by a device request for that GPU); "cpu" — no GPU at all; None — the host's view unchanged (local)
    and no GPU attached (docker): a data trial with no GPU recorded.
    `memory_limit_mib`: the trial's memory (the local runtime caps its data segment, a container gets a memory
    limit without swap). `user`: the container's uid:gid (None: the image's). `labels`: the container's labels
    beyond the run's own (run id, owner). `name`: the container's name (None: Docker's). `cpus`: the CPUs it may
    run on (dataload's --cpus; empty: the host's)."""
    program: tuple[str, ...]
    argv: tuple[str, ...]
    image: str = ""
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    device: str | None = None
    memory_limit_mib: int | None = None
    user: str | None = None
    read_limits: tuple[ReadLimit, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    name: str | None = None
    record: Record = field(default_factory=Record)
    cpus: tuple[int, ...] = ()  # the CPUs the trial is held to (locally its affinity, a container's cpuset); (): any
    # The local runtime may start the program before the candidate (--prestart): it imports its framework, then
    # reads `argv` from stdin (trials/common/kittrial.py _prestart). Only trials that preload without the device.
    prestart: bool = False

    def local_command(self) -> list[str]:
        return [*self.program, *self.argv]

    def container_argv(self) -> list[str]:
        """The arguments as the container sees them: a host path under a mount's source becomes the same path
        under its target (the longest source first, so a nested mount wins)."""
        mounts = sorted(self.mounts, key=lambda m: len(m.source), reverse=True)
        return [_inside(a, mounts) for a in self.argv]

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)

    def describe(self) -> dict[str, Any]:
        return {"program": list(self.program), "image": self.image or None, "argv": list(self.argv)}


def _inside(arg: str, mounts: list[Mount]) -> str:
    for m in mounts:
        src = m.source.rstrip("/") or "/"
        if arg == src:
            return m.target
        if arg.startswith(src + "/"):
            return m.target.rstrip("/") + arg[len(src):]
    return arg
