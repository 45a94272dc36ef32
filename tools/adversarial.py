#!/usr/bin/env python3
"""An adversarial pass over the kitctl CLI: bad inputs and faults as a hostile or careless user makes
them, on the CPU, with the local runtime and the Docker runtime (the CI image, KITCTL_IMAGE_VARIANT
cpu-ci, and the loader images of tag `ci`).

Each case runs the real console entry point once, alone, and records: the command, the exit code,
whether stderr's error is one `kitctl: ` line (and the last one), whether a traceback was printed,
the processes and containers it left (found by a marker in the environment of everything it started,
and by the kit's owner-pid label on containers; both are killed/removed after being recorded), and
the state of the results folder (final, partial, temporary or lock files). Case-specific checks add
findings (wrong numbers recorded, data lost, code run from data ...), each with a severity:

  high    wrong numbers recorded as measured, data lost, stray processes/containers left running,
          a security hole, or a traceback
  medium  a wrong exit code, an error that is not one `kitctl: ` line, a leftover temporary file
  low     cosmetics: an unclear message, something written before a refusal

Usage (from the repository root, as root for the full-disk cases, Docker running):

    PYTHONPATH=host python3 tools/adversarial.py --work /tmp/kitctl-adv \
        --json results/reference/adversarial/adversarial-cpu.json \
        --md results/reference/reports/adversarial-cpu.md [--only SUBSTRING] [--skip-docker]

Runs take a few minutes each at most (tiny corpora, batch 2, one run); the whole pass ~30-60 min on
2 cores. Everything it creates lives under --work and is removed at the end (unless --keep).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
MARK = "KITCTL_ADV_CASE"
HIGH, MEDIUM, LOW = "high", "medium", "low"


@dataclass
class Finding:
    severity: str
    what: str


@dataclass
class Result:
    id: str
    area: str
    command: str
    expect: str
    rc: int | None
    seconds: float
    one_line_error: bool | None
    error: str | None
    traceback: bool
    stray_processes: list[str]
    stray_containers: list[str]
    artifacts: list[str]
    findings: list[Finding] = field(default_factory=list)
    note: str = ""

    @property
    def outcome(self) -> str:
        if not self.findings:
            return "handled"
        return max((f.severity for f in self.findings), key=[LOW, MEDIUM, HIGH].index)


@dataclass(frozen=True)
class Case:
    id: str
    area: str
    argv: tuple[str, ...]
    expect: str = "refuse"  # refuse: rc != 0 with one kitctl line; ok: rc 0; any: no traceback/strays only
    setup: Callable[["Ctx"], None] | None = None
    check: Callable[["Ctx", subprocess.CompletedProcess | "Proc"], list[Finding]] | None = None
    signal_at: tuple[int, float | str] | None = None  # (signal, seconds after start | "partial" | "trial")
    kill9: bool = False  # kill -9 kitctl mid-run, then `kitctl clean`
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = 300
    needs_docker: bool = False
    refuse_quietly: bool = True  # a refusal writes nothing into the results folder


@dataclass
class Proc:
    returncode: int | None
    stdout: str
    stderr: str


class Ctx:
    """The work folders: W (root), C (a good 40-image corpus, read-only by convention), R (this case's
    results folder), D (this case's data folder), T (scratch for this case)."""

    def __init__(self, work: Path):
        self.W = work
        self.C = work / "corpus40"
        self.case_dir = work / "cases"
        self.R = self.D = self.T = work
        self.pids: set[int] = set()

    def begin(self, cid: str) -> None:
        base = self.case_dir / cid
        if base.exists():
            shutil.rmtree(base, ignore_errors=True)
        self.R, self.D, self.T = base / "results", base / "data", base / "tmp"
        for p in (self.R, self.D, self.T):
            p.mkdir(parents=True)
        self.pids = set()

    def fmt(self, s: str) -> str:
        return s.format(W=self.W, C=self.C, R=self.R, D=self.D, T=self.T)


# ---- the host's view: stray processes and containers ------------------------------------------------

def marked_processes(cid: str) -> list[int]:
    want = f"{MARK}={cid}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            out.append(int(d.name))
    return out


def describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
        ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} ppid {ppid}: {cmd}"


def docker_client():
    try:
        import docker
        c = docker.from_env(timeout=60)
        c.ping()
        return c
    except Exception:  # noqa: BLE001
        return None


def owned_containers(client, pids: set[int], cid: str) -> list:
    if client is None:
        return []
    out = []
    for c in client.containers.list(all=True, filters={"label": "kit.owner-pid"}):
        labels = c.labels or {}
        if labels.get("kit.owner-pid", "").isdigit() and int(labels["kit.owner-pid"]) in pids:
            out.append(c)
        elif labels.get("kitctl.adversarial") == cid:
            out.append(c)
    return out


# ---- running one case ------------------------------------------------------------------------------

def error_lines(stderr: str) -> tuple[bool | None, str | None]:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("kitctl: ")]
    if not errors:
        return None, None
    return (len(errors) == 1 and lines[-1] == errors[-1]), errors[-1][:300]


def artifact_state(results: Path) -> list[str]:
    if not results.exists():
        return []
    out = []
    for f in sorted(results.rglob("*")):
        try:
            st = f.lstat()
        except OSError:
            continue
        kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
        if kind == "dir":
            continue
        out.append(f"{f.relative_to(results)} ({kind}, {st.st_size} B)")
    return out


def wait_for(pred: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def trial_started(cid: str, kit_pid: int) -> bool:
    return any(p != kit_pid for p in marked_processes(cid))


def run_case(ctx: Ctx, case: Case, client) -> Result:
    ctx.begin(case.id)
    if case.setup:
        case.setup(ctx)
    argv = [ctx.fmt(a) for a in case.argv]
    env = {**os.environ, "COLUMNS": "200", MARK: case.id, "PYTHONPATH": str(ROOT / "host"),
           "KITCTL_RUN_STATE_DIR": str(ctx.W / "runstate"), "KITCTL_IMAGE_VARIANT": "cpu-ci",
           **{k: ctx.fmt(v) for k, v in case.env}}
    t0 = time.monotonic()
    proc = subprocess.Popen([*ENTRY, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ctx.T, start_new_session=True)
    ctx.pids.add(proc.pid)
    note = ""
    try:
        if case.signal_at or case.kill9:
            sig, when = case.signal_at or (signal.SIGKILL, "trial")
            if when == "partial":
                wait_for(lambda: proc.poll() is not None or bool(list(ctx.R.glob("*.partial.json"))), case.timeout)
                time.sleep(0.3)
            elif when == "trial":
                wait_for(lambda: proc.poll() is not None or trial_started(case.id, proc.pid)
                         or bool(owned_containers(client, {proc.pid}, case.id)), case.timeout)
                time.sleep(1.0)
            else:
                time.sleep(float(when))
            if proc.poll() is None:
                proc.send_signal(sig)
            else:
                note = "finished before the signal"
        out, err = proc.communicate(timeout=case.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    seconds = time.monotonic() - t0
    findings: list[Finding] = []
    if case.kill9:
        # what kill -9 left, then what `kitctl clean` leaves
        time.sleep(2)
        before = [describe(p) for p in marked_processes(case.id)]
        conts = [c.name for c in owned_containers(client, ctx.pids, case.id)]
        note = f"after kill -9: {len(before)} processes, {len(conts)} containers; "
        cl = clean_mine(ctx, client, case.id)
        note += cl
    one, error = error_lines(err)
    tb = "Traceback (most recent call last)" in out or "Traceback (most recent call last)" in err
    # strays: wait a little for a clean exit's children to go
    wait_for(lambda: not marked_processes(case.id), 8, 0.2)
    strays = [describe(p) for p in marked_processes(case.id)]
    conts = owned_containers(client, ctx.pids, case.id)
    stray_c = [f"{c.name} ({c.status})" for c in conts]
    res = Result(case.id, case.area, "kitctl " + " ".join(_q(a) for a in argv), case.expect, rc, round(seconds, 1),
                 one, error, tb, strays, stray_c, artifact_state(ctx.R), note=note)
    if rc is None:
        findings.append(Finding(HIGH, f"still running after {case.timeout:.0f} s (hang)"))
    if tb:
        findings.append(Finding(HIGH, "traceback printed"))
    if strays:
        findings.append(Finding(HIGH, f"{len(strays)} stray process(es) left: {strays[:3]}"))
    if stray_c:
        findings.append(Finding(HIGH, f"stray container(s) left: {stray_c}"))
    sig_case = case.signal_at is not None and not note.startswith("finished")
    if case.kill9:
        pass
    elif sig_case:
        if rc != 130:
            findings.append(Finding(MEDIUM, f"signal: exit {rc}, not 130"))
        if not one or "interrupted" not in (error or ""):
            findings.append(Finding(MEDIUM, "signal: the error is not one 'kitctl: interrupted' line"))
    elif case.expect == "refuse":
        if rc == 0:
            findings.append(Finding(MEDIUM, "accepted (exit 0) where a refusal was expected"))
        elif rc is not None and not one:
            findings.append(Finding(MEDIUM, "refused, but the error is not one 'kitctl: ' line (last on stderr)"))
        if rc not in (0, None) and case.refuse_quietly and res.artifacts:
            findings.append(Finding(LOW, f"wrote into the results folder before refusing: {res.artifacts[:3]}"))
    elif case.expect == "ok":
        if rc != 0:
            findings.append(Finding(MEDIUM, f"exit {rc} where success was expected: {error or err.strip()[-200:]}"))
    tmps = [a for a in res.artifacts if ".tmp" in a]
    if tmps:
        findings.append(Finding(MEDIUM, f"temporary files left in results: {tmps}"))
    # A partial's lock is an flock: a process killed outright (kill -9, an unhandled signal) leaves the empty
    # file, which the next writer takes over (the kernel released the lock). Only after an orderly exit is it litter.
    locks = [a for a in res.artifacts if a.split(" ")[0].endswith(".lock")]
    if locks and rc is not None and rc >= 0:
        findings.append(Finding(LOW, f"lock file left after an orderly exit: {locks}"))
    if case.check:
        try:
            findings += case.check(ctx, Proc(rc, out, err))
        except Exception as exc:  # noqa: BLE001 - a check that breaks is the script's bug, say so
            findings.append(Finding(LOW, f"(check failed: {type(exc).__name__}: {exc})"))
    res.findings = findings
    # clean up what this case left: processes, containers
    for p in marked_processes(case.id):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for c in conts:
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001
            pass
    if not tb and not (rc in (0, 1, 2, 3, 130, None)):
        res.note += f" exit {rc}"
    res.stderr_tail = err.strip()[-600:]  # type: ignore[attr-defined]
    return res


def clean_mine(ctx: Ctx, client, cid: str) -> str:
    """`kitctl clean` after a kill -9: a dry run first; the real clean only when all it would touch is
    this case's (the machine is shared: others' orphans are theirs to clean)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host"), "KITCTL_RUN_STATE_DIR": str(ctx.W / "runstate")}
    p = subprocess.run([*ENTRY, "clean", "--dry-run", "--json"], capture_output=True, text=True, env=env, timeout=180)
    try:
        plan = json.loads(p.stdout)
    except ValueError:
        return f"clean --dry-run gave no JSON (exit {p.returncode}: {p.stderr.strip()[-200:]})"
    mine = {c.name for c in owned_containers(client, ctx.pids, cid)}
    theirs = [c for c in plan.get("containers", []) if not any(m in json.dumps(c) for m in mine)]
    if theirs:
        for c in owned_containers(client, ctx.pids, cid):
            c.remove(force=True)
        return f"others' orphans present ({len(theirs)}): removed mine by hand, clean not run"
    p = subprocess.run([*ENTRY, "clean", "--json"], capture_output=True, text=True, env=env, timeout=180)
    return f"clean exit {p.returncode}: {p.stdout.strip()[:300]}"


def _q(a: str) -> str:
    return a if a and all(ch.isalnum() or ch in "-_./=,:@%+" for ch in a) else json.dumps(a, ensure_ascii=False)


# ---- fixtures: corpora, artifacts, CIFAR files ------------------------------------------------------

def make_corpus(ctx: Ctx, out: Path, images: int = 40, seed: int = 0) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
    p = subprocess.run([*ENTRY, "data", "make", "--out", str(out), "--images", str(images), "--classes", "2",
                        "--workers", "1", "--seed", str(seed)], capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"could not make a corpus: {p.stderr}")


def copy_corpus(ctx: Ctx) -> Path:
    dst = ctx.T / "corpus"
    shutil.copytree(ctx.C, dst)
    return dst


def mutate_manifest(fn: Callable[[dict], object]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        c = copy_corpus(ctx)
        doc = json.loads((c / "manifest.json").read_text())
        new = fn(doc)
        (c / "manifest.json").write_text(json.dumps(doc if new is None else new))
    return setup


def corpus_files(fn: Callable[[Path, dict], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        c = copy_corpus(ctx)
        fn(c, json.loads((c / "manifest.json").read_text()))
    return setup


def first_image(c: Path, doc: dict) -> Path:
    return c / doc["files"][0]["file"]


def cifar_setup(kind: str) -> Callable[[Ctx], None]:
    """A CIFAR-10 folder in the python layout (or the binary one), made hostile in one way."""
    import numpy as np

    def setup(ctx: Ctx) -> None:
        folder = ctx.T / ("cifar-10-batches-bin" if kind.startswith("bin") else "cifar-10-batches-py")
        folder.mkdir()
        n = 20
        data = np.zeros((n, 3072), dtype=np.uint8)
        labels = [i % 10 for i in range(n)]
        if kind.startswith("bin"):
            rec = np.concatenate([np.array(labels, dtype=np.uint8)[:, None], data], axis=1).tobytes()
            if kind == "bin-truncated":
                rec = rec[:-100]
            if kind == "bin-label-255":
                rec = bytes([255]) + rec[1:]
            if kind == "bin-empty":
                rec = b""
            (folder / "data_batch_1.bin").write_bytes(rec)
            return
        batch: object = {b"batch_label": b"x", b"data": data, b"labels": labels}
        if kind == "py-evil":
            marker = ctx.T / "PWNED"

            class Evil:
                def __reduce__(self):
                    return (os.system, (f"touch {marker}",))
            raw = pickle.dumps({b"data": data, b"labels": labels, b"x": Evil()})
            (folder / "data_batch_1").write_bytes(raw)
            return
        if kind == "py-evil-eval":
            marker = ctx.T / "PWNED"

            class Evil2:
                def __reduce__(self):
                    return (eval, (f"open({str(marker)!r}, 'w')",))
            (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": data, b"labels": labels, b"e": Evil2()}))
            return
        if kind == "py-labels-42":
            batch = {b"data": data, b"labels": [42] * n}
        if kind == "py-labels-neg":
            batch = {b"data": data, b"labels": [-1] * n}
        if kind == "py-data-str":
            batch = {b"data": "hello", b"labels": labels}
        if kind == "py-count":
            batch = {b"data": data, b"labels": labels[:5]}
        if kind == "py-shape":
            batch = {b"data": np.zeros((n, 100), dtype=np.uint8), b"labels": labels}
        if kind == "py-not-dict":
            batch = [1, 2, 3]
        if kind == "py-float":
            batch = {b"data": data.astype(np.float64), b"labels": labels}
        raw = pickle.dumps(batch)
        if kind == "py-truncated":
            raw = raw[: len(raw) // 2]
        if kind == "py-garbage":
            raw = os.urandom(4096)
        (folder / "data_batch_1").write_bytes(raw)
    return setup


def no_marker(ctx: Ctx, p: Proc) -> list[Finding]:
    if (ctx.T / "PWNED").exists():
        return [Finding(HIGH, "SECURITY: the pickle's payload ran (marker file created)")]
    return []


def nothing_written(ctx: Ctx, p: Proc) -> list[Finding]:
    return []


def corpus_unchanged_check(ctx: Ctx, p: Proc) -> list[Finding]:
    return []


def final_artifact(ctx: Ctx) -> Path | None:
    finals = [f for f in ctx.R.glob("*.json") if not f.name.endswith(".partial.json")]
    return finals[0] if finals else None


def real_artifact(bench: str) -> Callable[[Ctx], None]:
    """Copy a real artifact of `bench` (made once per pass, under W/seed-artifacts) into T as a.json."""
    def setup(ctx: Ctx) -> None:
        src = sorted((ctx.W / "seed-artifacts").glob(f"{bench}-*.json"))
        if not src:
            raise RuntimeError(f"no seed artifact for {bench}")
        shutil.copy(src[0], ctx.T / "a.json")
        os.chmod(ctx.T / "a.json", 0o644)
    return setup


def edit_artifact(bench: str, fn: Callable[[dict], object], name: str = "a.json", raw: bool = False) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        real_artifact(bench)(ctx)
        p = ctx.T / "a.json"
        if raw:
            data = fn(p.read_bytes())  # type: ignore[arg-type]
            p.unlink()
            (ctx.T / name).write_bytes(data)  # type: ignore[arg-type]
            return
        doc = json.loads(p.read_text())
        new = fn(doc)
        p.unlink()
        (ctx.T / name).write_text(json.dumps(doc if new is None else new))
    return setup


def partial_of(bench: str, fn: Callable[[dict], object] | None = None) -> Callable[[Ctx], None]:
    """A copy of a real interrupted partial (made once per pass) in R, optionally edited."""
    def setup(ctx: Ctx) -> None:
        src = sorted((ctx.W / "seed-artifacts").glob(f"{bench}-*.partial.json"))
        if not src:
            raise RuntimeError(f"no seed partial for {bench}")
        dst = ctx.R / src[0].name
        shutil.copy(src[0], dst)
        os.chmod(dst, 0o644)
        if fn:
            doc = json.loads(dst.read_text())
            new = fn(doc)
            dst.write_text(json.dumps(doc if new is None else new))
    return setup


def the_partial(ctx: Ctx) -> str:
    return str(next(ctx.R.glob("*.partial.json")))


# ---- mount helpers: a full disk -------------------------------------------------------------------

def tiny_disk(ctx: Ctx, size: str = "64k", leave_pages: int = 3) -> Path:
    d = ctx.T / "tiny"
    d.mkdir(exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs: {r.stderr.strip()}")
    filler = d / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - leave_pages * 4096))
    return d


def unmount_all(work: Path) -> None:
    for line in Path("/proc/mounts").read_text().splitlines():
        mp = line.split()[1]
        if mp.startswith(str(work)):
            subprocess.run(["umount", "-l", mp], capture_output=True)


# ---- the cases ------------------------------------------------------------------------------------

MB = ("run", "maxbatch", "--device", "cpu", "--runtime", "local", "--start-batch", "2", "--max-batch", "2",
      "--memory-limit", "1200", "--timeout", "120", "--results-dir", "{R}")
TP = ("run", "throughput", "--device", "cpu", "--runtime", "local", "--batch", "2", "--runs", "1",
      "--warmup-steps", "1", "--steps", "2", "--memory-limit", "1200", "--timeout", "120", "--results-dir", "{R}")
DS = ("run", "datasize", "--corpus", "{C}", "--formats", "folder", "--encodings", "jpeg90", "--sides", "64",
      "--workers", "1", "--runtime", "local", "--results-dir", "{R}")
DL = ("run", "dataload", "--corpus", "{C}", "--loaders", "pytorch-dataloader", "--workers", "1", "--runs", "1",
      "--window-images", "40", "--window-seconds", "0.1", "--batch", "8", "--side", "64", "--runtime", "local",
      "--data-dir", "{D}", "--results-dir", "{R}")
TE = ("run", "train-e2e", "--corpus", "{C}", "--loaders", "pytorch-dataloader", "--model", "resnet18",
      "--device", "cpu", "--workers", "1", "--batch", "2", "--warmup", "1", "--steps", "2", "--runs", "1",
      "--window-images", "40", "--window-seconds", "0.1", "--runtime", "local", "--data-dir", "{D}",
      "--results-dir", "{R}")


def swap(base: tuple[str, ...], flag: str, value: str | None) -> tuple[str, ...]:
    """base with flag's value replaced (or added); value None removes the flag."""
    out = list(base)
    if flag in out:
        i = out.index(flag)
        del out[i:i + 2]
    if value is not None:
        out += [flag, value]
    return tuple(out)


def with_corpus(path: str) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    return lambda base: swap(base, "--corpus", path)


BAD_NUMBERS = {"nan": "nan", "inf": "inf", "neg": "-1", "zero": "0", "huge": "1" + "0" * 30, "empty": "",
               "unicode": "\uff15", "frac": "2.5", "word": "eight"}


def cases(docker_ok: bool) -> list[Case]:
    cs: list[Case] = []
    add = cs.append

    # -- bad flag values, every benchmark --------------------------------------------------------
    numeric = {
        "maxbatch": (MB, ["--start-batch", "--max-batch", "--timeout", "--memory-limit", "--reserve",
                          "--idle-threshold", "--calibration-batch", "--vram-limit"]),
        "throughput": (TP, ["--batch", "--runs", "--steps", "--warmup-steps", "--window-images",
                            "--window-seconds", "--steady-tolerance", "--max-warmup-seconds", "--image-size",
                            "--timeout"]),
        "datasize": (DS, ["--limit", "--workers", "--timeout", "--sides"]),
        "dataload": (DL, ["--runs", "--window-images", "--window-seconds", "--steady-tolerance", "--epochs",
                          "--batch", "--limit", "--timeout", "--workers", "--side", "--read-mbps"]),
        "train-e2e": (TE, ["--batch", "--warmup", "--steps", "--runs", "--side", "--limit", "--timeout",
                           "--workers", "--window-images", "--window-seconds", "--steady-tolerance"]),
    }
    # which bad values each flag gets: all for the first few, a rotating pair for the rest (breadth
    # over exhaustiveness: the parser's code is shared)
    kinds = list(BAD_NUMBERS)
    k = 0
    for bench, (base, flags) in numeric.items():
        for i, flag in enumerate(flags):
            chosen = ["nan", "neg", "huge", "empty", "unicode"] if i == 0 else [kinds[k % len(kinds)]]
            k += 1
            for kind in chosen:
                value = BAD_NUMBERS[kind]
                if kind == "frac" and flag in ("--timeout", "--window-seconds", "--steady-tolerance",
                                               "--idle-threshold", "--max-warmup-seconds", "--read-mbps"):
                    continue  # a fraction is a valid float here
                if kind == "zero" and flag in ("--limit",) and bench == "datasize":
                    pass
                add(Case(f"{bench}{flag}={kind}", f"flags/{bench}", swap(base, flag, value), timeout=240))
    # flags whose values name things
    for bench, base, flag, values in [
        ("maxbatch", MB, "--engines", {"unknown": "pytorch-nope", "empty": "", "comma": ",", "dup": "pytorch-eager,pytorch-eager",
                                       "unicode": "pytorch\u2011eager", "space": " pytorch-eager "}),
        ("maxbatch", MB, "--precision", {"bad": "fp8", "empty": ""}),
        ("maxbatch", MB, "--strategy", {"bad": "magic", "empty": ""}),
        ("maxbatch", MB, "--gpu", {"neg": "-1", "uuid": "GPU-deadbeef", "huge": "99999999999999999999"}),
        ("maxbatch", MB, "--device", {"bad": "tpu", "cuda": "cuda"}),
        ("maxbatch", MB, "--runtime", {"bad": "podman"}),
        ("maxbatch", MB, "--dataset", {"bad": "imagenet"}),
        ("throughput", TP, "--engines", {"unknown": "jax", "empty": ""}),
        ("throughput", TP, "--image-size", {"small": "8", "big": "100000"}),
        ("datasize", DS, "--formats", {"unknown": "tfrecord", "empty": "", "dup": "folder,folder"}),
        ("datasize", DS, "--encodings", {"unknown": "jpeg101", "empty": "", "unicode": "jp\u00e9g90"}),
        ("datasize", DS, "--sides", {"list-bad": "64,abc", "tiny": "1"}),
        ("datasize", DS, "--runtime", {"bad": "podman"}),
        ("dataload", DL, "--loaders", {"unknown": "tf.data", "empty": "", "gpu-on-cpu": "dali-gpu"}),
        ("dataload", DL, "--source", {"bad": "ssd", "empty": ""}),
        ("dataload", DL, "--encoding", {"bad": "png"}),
        ("dataload", DL, "--workers", {"list-bad": "1,x", "all-neg": "all,-1", "huge": "100000"}),
        ("dataload", DL, "--image-tag", {"slash": "../../etc"}),
        ("train-e2e", TE, "--loaders", {"unknown": "nope", "empty": ""}),
        ("train-e2e", TE, "--model", {"unknown": "vit", "empty": ""}),
        ("train-e2e", TE, "--precision", {"bad": "fp16x"}),
        ("train-e2e", TE, "--device", {"bad": "tpu", "cuda-no-gpu": "cuda"}),
        ("train-e2e", TE, "--encoding", {"list": "jpeg90,raw"}),
        ("train-e2e", TE, "--workers", {"huge": "100000"}),
    ]:
        for kind, value in values.items():
            # a duplicate or padded name means the same engine once; a --image-tag does not apply to the local runtime
            fine = (flag, kind) in (("--engines", "dup"), ("--engines", "space"), ("--formats", "dup"),
                                    ("--image-tag", "slash"))
            add(Case(f"{bench}{flag}={kind}", f"flags/{bench}", swap(base, flag, value), timeout=240,
                     expect="any" if fine else "refuse"))

    # -- paths: interpreters, results folders, corpora, data folders -----------------------------------
    def mk(path_setup: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        return path_setup

    def pyfile(content: str, mode: int = 0o755) -> Callable[[Ctx], None]:
        def s(ctx: Ctx) -> None:
            p = ctx.T / "py"
            p.write_text(content)
            os.chmod(p, mode)
        return s

    pythons = {
        "missing": ("/nonexistent/python", None), "true": ("/bin/true", None), "false": ("/bin/false", None),
        "dir": ("/tmp", None), "no-torch": ("/usr/bin/python3", None),
        "noexec": ("{T}/py", pyfile("#!/bin/sh\nexit 0\n", 0o644)),
        "sleeper": ("{T}/py", pyfile("#!/bin/sh\nsleep 600\n")),
        "spew": ("{T}/py", pyfile("#!/bin/sh\nyes garbage | head -c 5000000\n")),
    }
    for bench, base in [("maxbatch", MB), ("throughput", TP), ("datasize", DS), ("dataload", DL), ("train-e2e", TE)]:
        for kind, (value, setup) in pythons.items():
            if bench != "maxbatch" and kind in ("true", "false", "dir", "noexec", "spew", "sleeper"):
                continue
            add(Case(f"{bench}--python={kind}", f"paths/{bench}", swap(base, "--python", value), setup=setup,
                     timeout=200 if kind != "sleeper" else 400))

    def results_file(ctx: Ctx) -> None:
        (ctx.T / "afile").write_text("x")

    def results_ro(ctx: Ctx) -> None:
        os.chmod(ctx.T, 0o555)

    def results_loop(ctx: Ctx) -> None:
        os.symlink(ctx.T / "loop", ctx.T / "loop")

    for bench, base in [("maxbatch", MB), ("datasize", DS), ("dataload", DL)]:
        add(Case(f"{bench}--results-dir=file", f"paths/{bench}", swap(base, "--results-dir", "{T}/afile"), setup=results_file))
        add(Case(f"{bench}--results-dir=long", f"paths/{bench}", swap(base, "--results-dir", "{T}/" + "x" * 256)))
        add(Case(f"{bench}--results-dir=loop", f"paths/{bench}", swap(base, "--results-dir", "{T}/loop"), setup=results_loop))
        add(Case(f"{bench}--results-dir=/proc", f"paths/{bench}", swap(base, "--results-dir", "/proc/kitctl-results")))
        add(Case(f"{bench}--results-dir=empty", f"paths/{bench}", swap(base, "--results-dir", "")))
    add(Case("maxbatch--results-dir=/dev/null", "paths/maxbatch", swap(MB, "--results-dir", "/dev/null")))
    add(Case("maxbatch--csv=dir", "paths/maxbatch", (*MB, "--csv", "{T}"), expect="any"))
    add(Case("maxbatch--csv=missing-parent", "paths/maxbatch", (*MB, "--csv", "{T}/no/such/x.csv"), refuse_quietly=False))

    # read-only data folder, data folder a file
    def ro_data(ctx: Ctx) -> None:
        os.chmod(ctx.D, 0o555)
    add(Case("dataload--data-dir=read-only", "paths/dataload", DL, setup=ro_data))
    add(Case("dataload--data-dir=file", "paths/dataload", swap(DL, "--data-dir", "{T}/afile"), setup=results_file))
    add(Case("train-e2e--data-dir=read-only", "paths/train-e2e", TE, setup=ro_data))

    # -- corpora: missing, foreign, truncated, edited, hostile -----------------------------------------
    corpus_cases: dict[str, Callable[[Ctx], None] | None] = {
        "missing": None,
        "manifest-truncated": corpus_files(lambda c, d: (c / "manifest.json").write_text((c / "manifest.json").read_text()[:500])),
        "manifest-empty": corpus_files(lambda c, d: (c / "manifest.json").write_text("")),
        "manifest-list": mutate_manifest(lambda d: [d]),
        "manifest-dir": corpus_files(lambda c, d: ((c / "manifest.json").unlink(), (c / "manifest.json").mkdir())),
        "manifest-fifo": corpus_files(lambda c, d: ((c / "manifest.json").unlink(), os.mkfifo(c / "manifest.json"))),
        "manifest-devzero": corpus_files(lambda c, d: ((c / "manifest.json").unlink(), os.symlink("/dev/zero", c / "manifest.json"))),
        "manifest-nan-images": mutate_manifest(lambda d: d.__setitem__("images", float("nan"))),
        "manifest-images-huge": mutate_manifest(lambda d: d.__setitem__("images", 10 ** 12)),
        "manifest-kind-wrong": mutate_manifest(lambda d: d.__setitem__("kind", "something-else")),
        "manifest-traversal": mutate_manifest(lambda d: d["files"][0].__setitem__("file", "../../../../etc/passwd")),
        "manifest-absolute": mutate_manifest(lambda d: d["files"][0].__setitem__("file", "/etc/passwd")),
        "manifest-label-neg": mutate_manifest(lambda d: d["files"][0].__setitem__("label", -5)),
        "manifest-label-str": mutate_manifest(lambda d: d["files"][0].__setitem__("label", "cat")),
        "manifest-bytes-wrong": mutate_manifest(lambda d: d["files"][0].__setitem__("bytes", 1)),
        "manifest-files-dropped": mutate_manifest(lambda d: d.__setitem__("files", d["files"][:10])),
        "manifest-deep": corpus_files(lambda c, d: (c / "manifest.json").write_text("[" * 100000 + "]" * 100000)),
        "image-deleted": corpus_files(lambda c, d: first_image(c, d).unlink()),
        "image-garbage": corpus_files(lambda c, d: first_image(c, d).write_bytes(os.urandom(first_image(c, d).stat().st_size))),
        "image-truncated": corpus_files(lambda c, d: first_image(c, d).write_bytes(first_image(c, d).read_bytes()[:1000])),
        "image-symlink-passwd": corpus_files(lambda c, d: (first_image(c, d).unlink(), os.symlink("/etc/passwd", first_image(c, d)))),
        "image-fifo": corpus_files(lambda c, d: (first_image(c, d).unlink(), os.mkfifo(first_image(c, d)))),
        "image-dir": corpus_files(lambda c, d: (first_image(c, d).unlink(), first_image(c, d).mkdir())),
        "image-unreadable": corpus_files(lambda c, d: os.chmod(first_image(c, d), 0)),
        "extra-file": corpus_files(lambda c, d: (c / "train" / "0000" / "zz-extra.jpg").write_bytes(b"not a jpeg")),
        "is-a-file": None,
    }

    def bomb(c: Path, d: dict) -> None:
        # a JPEG whose header claims 60000 x 60000 px, same byte size as recorded? no: sizes differ, so
        # also patch the manifest's bytes/sha to match (a hostile author controls both)
        import hashlib

        from PIL import Image
        img = Image.new("L", (12000, 12000))
        p = first_image(c, d)
        img.save(p, "JPEG", quality=10)
        raw = p.read_bytes()
        d["files"][0]["bytes"] = len(raw)
        d["files"][0]["sha256"] = hashlib.sha256(raw).hexdigest()
        (c / "manifest.json").write_text(json.dumps(d))
    corpus_cases["image-bomb-consistent-manifest"] = corpus_files(bomb)

    def swapped_same_size(c: Path, d: dict) -> None:
        # another image of the same size at the first file's place: sizes agree, hashes do not
        a, b = first_image(c, d), c / d["files"][1]["file"]
        raw = bytearray(a.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        a.write_bytes(bytes(raw))
    corpus_cases["image-bitflip-same-size"] = corpus_files(swapped_same_size)

    for kind, setup in corpus_cases.items():
        path = "{T}/nope" if kind == "missing" else "/etc/hostname" if kind == "is-a-file" else "{T}/corpus"
        benches = [("dataload", DL)]
        if kind in ("missing", "manifest-truncated", "manifest-fifo", "manifest-devzero", "manifest-traversal",
                    "image-deleted", "image-symlink-passwd", "image-fifo", "image-bomb-consistent-manifest", "is-a-file"):
            benches.append(("datasize", DS))
        if kind in ("missing", "image-garbage", "image-symlink-passwd"):
            benches.append(("train-e2e", TE))
        for bench, base in benches:
            expect = "refuse"
            if kind in ("extra-file",):
                expect = "any"
            if kind == "image-bitflip-same-size":
                expect = "any"  # sizes agree: only --verify/data verify reads the hash
            add(Case(f"{bench}-corpus={kind}", f"corpus/{bench}", swap(base, "--corpus", path), setup=setup,
                     expect=expect, timeout=300))
        add(Case(f"data-verify-corpus={kind}", "corpus/data-verify", ("data", "verify", path), setup=setup,
                 expect="refuse" if kind not in ("extra-file",) else "any", timeout=120))

    # a dataset folder beside the corpus, damaged after it was built
    def built_then(fn: Callable[[Path], None]) -> Callable[[Ctx], None]:
        def s(ctx: Ctx) -> None:
            shutil.copytree(ctx.W / "seed-datasets", ctx.D, dirs_exist_ok=True)
            ds = next(p for p in ctx.D.iterdir() if p.is_dir() and p.name.startswith("folder-"))
            fn(ds)
        return s

    def ds_file(ds: Path) -> Path:
        return sorted(p for p in ds.rglob("*.jpg"))[0]
    dataset_cases = {
        "deleted-file": built_then(lambda ds: ds_file(ds).unlink()),
        "truncated-file": built_then(lambda ds: ds_file(ds).write_bytes(ds_file(ds).read_bytes()[:100])),
        "garbage-same-size": built_then(lambda ds: ds_file(ds).write_bytes(os.urandom(ds_file(ds).stat().st_size))),
        "record-deleted": built_then(lambda ds: (ds / "dataset.json").unlink()),
        "record-truncated": built_then(lambda ds: (ds / "dataset.json").write_text((ds / "dataset.json").read_text()[:40])),
        "record-foreign-identity": built_then(lambda ds: (ds / "dataset.json").write_text(
            (ds / "dataset.json").read_text().replace(json.loads((ds / "dataset.json").read_text()).get("corpus_identity", "zz") or "zz", "0000000000000000"))),
        "symlink-out": built_then(lambda ds: (ds_file(ds).unlink(), os.symlink("/etc/passwd", ds_file_path_cache.setdefault("p", ds_file(ds)) if False else ds / "train" / "0000" / "00000000.jpg"))),
    }
    ds_file_path_cache: dict[str, Path] = {}
    for kind, setup in dataset_cases.items():
        add(Case(f"dataload-dataset={kind}", "dataset/dataload", DL, setup=setup, expect="any",
                 check=dataset_check(kind), timeout=300))
        add(Case(f"data-verify-dataset={kind}", "dataset/data-verify", ("data", "verify", "{D}/DATASET"),
                 setup=setup, expect="refuse", timeout=120))

    # -- CIFAR-10 files: code in pickles, wrong labels and sizes ----------------------------------------
    for kind in ["py-evil", "py-evil-eval", "py-labels-42", "py-data-str", "py-count", "py-shape",
                 "py-not-dict", "py-truncated", "bin-truncated", "bin-label-255", "bin-empty"]:
        for bench, base in [("maxbatch", MB), ("throughput", TP)]:
            if bench == "throughput" and kind not in ("py-evil", "py-labels-42", "bin-truncated"):
                continue
            add(Case(f"{bench}-cifar={kind}", f"cifar/{bench}", (*base, "--dataset", "cifar10", "--data-dir", "{T}"),
                     setup=cifar_setup(kind), check=no_marker, timeout=240))
    add(Case("maxbatch-cifar=missing-dir", "cifar/maxbatch", (*MB, "--dataset", "cifar10", "--data-dir", "{T}/none")))
    add(Case("maxbatch-cifar=no-data-dir", "cifar/maxbatch", (*MB, "--dataset", "cifar10"), env=(("HOME", "{T}"),)))

    # -- data make ------------------------------------------------------------------------------------
    DM = ("data", "make", "--out", "{T}/c", "--images", "10", "--classes", "2", "--workers", "1")
    for flag, vals in {"--images": ["0", "-5", "nan", "1" + "0" * 20, ""], "--classes": ["0", "-1", "11", "1" + "0" * 20],
                       "--seed": ["-1", "1" + "0" * 40, "abc"], "--workers": ["0", "-1", "100000", "all"]}.items():
        for v in vals:
            add(Case(f"data-make{flag}={v[:8] or 'empty'}", "data-make", swap(DM, flag, v), timeout=120,
                     check=data_make_state))
    add(Case("data-make--out=existing-nonempty", "data-make", DM, setup=lambda ctx: ((ctx.T / "c").mkdir(), (ctx.T / "c" / "mine.txt").write_text("keep")),
             check=lambda ctx, p: [] if (ctx.T / "c" / "mine.txt").read_text() == "keep" else [Finding(HIGH, "data make overwrote a user file")]))
    add(Case("data-make--out=existing-corpus", "data-make", swap(DM, "--out", "{C}"), check=corpus_intact))
    add(Case("data-make--out=file", "data-make", swap(DM, "--out", "/etc/hostname")))
    add(Case("data-make--out=ro-parent", "data-make", swap(DM, "--out", "{T}/ro/c"), setup=lambda ctx: ((ctx.T / "ro").mkdir(), os.chmod(ctx.T / "ro", 0o555))))
    add(Case("data-make--out=long", "data-make", swap(DM, "--out", "{T}/" + "y" * 300)))
    add(Case("data-make--out=empty", "data-make", swap(DM, "--out", "")))
    add(Case("data-make--python=missing", "data-make", (*DM, "--python", "/nonexistent/py")))
    add(Case("data-make--python=no-skimage", "data-make", (*DM, "--python", "/usr/bin/python3"), check=data_make_state))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        for when in (0.05, 1.5, "trial"):
            add(Case(f"data-make-{sig.name}@{when}", "signals/data-make", swap(swap(DM, "--images", "400"), "--workers", "2"),
                     signal_at=(sig, when), check=data_make_state, timeout=200))
    add(Case("data-make-kill9", "kill9/data-make", swap(swap(DM, "--images", "400"), "--workers", "2"), kill9=True,
             check=data_make_state, expect="any", timeout=200))

    # -- data verify -----------------------------------------------------------------------------------
    add(Case("data-verify=good-corpus", "data-verify", ("data", "verify", "{C}"), expect="ok"))
    add(Case("data-verify=missing", "data-verify", ("data", "verify", "{T}/nope")))
    add(Case("data-verify=empty-dir", "data-verify", ("data", "verify", "{T}")))
    add(Case("data-verify=/", "data-verify", ("data", "verify", "/"), timeout=60))
    add(Case("data-verify=/dev/zero", "data-verify", ("data", "verify", "/dev/zero"), timeout=60))
    add(Case("data-verify=unicode", "data-verify", ("data", "verify", "{T}/\u00e9\u00e8\U0001f600")))

    # -- report / compare / results list: hostile and foreign artifacts ----------------------------------
    hostile = {
        "truncated": edit_artifact("maxbatch", lambda b: b[: len(b) // 2], raw=True),
        "empty": edit_artifact("maxbatch", lambda b: b"", raw=True),
        "binary": edit_artifact("maxbatch", lambda b: os.urandom(5000), raw=True),
        "utf16": edit_artifact("maxbatch", lambda b: b.decode().encode("utf-16"), raw=True),
        "json-list": edit_artifact("maxbatch", lambda d: [d]),
        "json-null": edit_artifact("maxbatch", lambda d: None if False else "null", raw=False),
        "schema-future": edit_artifact("maxbatch", lambda d: d.__setitem__("schema_version", 999)),
        "benchmark-unknown": edit_artifact("maxbatch", lambda d: d.__setitem__("benchmark", "warp-drive")),
        "results-wrong-type": edit_artifact("maxbatch", lambda d: d.__setitem__("results", "lots")),
        "nan-values": edit_artifact("maxbatch", lambda b: b.replace(b'"max_batch": 4', b'"max_batch": NaN'), raw=True),
        "huge-number": edit_artifact("maxbatch", lambda b: b.replace(b'"max_batch": 4', b'"max_batch": 1' + b"0" * 5000), raw=True),
        "deep-nesting": edit_artifact("maxbatch", lambda b: b"[" * 200000 + b"]" * 200000, raw=True),
        "ansi-escape": edit_artifact("maxbatch", lambda d: d.__setitem__("host", {"hostname": "\x1b]0;pwned\x07\x1b[2J"})),
        "markdown-inject": edit_artifact("throughput", lambda b: b.replace(b'"pytorch-eager"', b'"pytorch-eager|<script>x</script>\\n# H"', 1), raw=True),
        "edited-number": edit_artifact("throughput", lambda d: None),
        "throughput-negative": edit_artifact("throughput", lambda b: _neg_numbers(b), raw=True),
    }

    def fifo(ctx: Ctx) -> None:
        os.mkfifo(ctx.T / "a.json")

    def devzero(ctx: Ctx) -> None:
        os.symlink("/dev/zero", ctx.T / "a.json")

    def symlink_out(ctx: Ctx) -> None:
        os.symlink("/etc/passwd", ctx.T / "a.json")

    def dir_json(ctx: Ctx) -> None:
        (ctx.T / "a.json").mkdir()

    def unreadable(ctx: Ctx) -> None:
        real_artifact("maxbatch")(ctx)
        os.chmod(ctx.T / "a.json", 0)

    def big(ctx: Ctx) -> None:
        with open(ctx.T / "a.json", "wb") as f:
            f.write(b'{"pad": "')
            f.truncate(300 * 1024 * 1024)
    hostile.update({"fifo": fifo, "devzero": devzero, "symlink-passwd": symlink_out, "dir": dir_json,
                    "unreadable": unreadable, "sparse-300MB": big})
    for kind, setup in hostile.items():
        add(Case(f"report-artifact={kind}", "artifacts/report", ("report", "{T}/a.json"), setup=setup,
                 expect="any" if kind in ("ansi-escape", "markdown-inject", "edited-number") else "refuse", timeout=60,
                 check=ansi_check if kind in ("ansi-escape", "markdown-inject") else None))
        add(Case(f"results-list-artifact={kind}", "artifacts/results-list", ("results", "list", "{T}"), setup=setup, expect="any", timeout=60,
                 check=ansi_check if kind == "ansi-escape" else None))
        if kind in ("truncated", "json-list", "schema-future", "fifo", "devzero", "nan-values", "dir", "binary", "deep-nesting", "huge-number"):
            add(Case(f"compare-artifact={kind}", "artifacts/compare", ("compare", "{W}/seed-artifacts/THE_MB", "{T}/a.json"),
                     setup=setup, expect="refuse", timeout=60))
    add(Case("report-ansi-json", "artifacts/report", ("report", "--json", "{T}/a.json"),
             setup=hostile["ansi-escape"], expect="any", timeout=60))
    add(Case("report-no-files-empty-cwd", "artifacts/report", ("report",), expect="refuse", timeout=60))
    add(Case("report--out=dir", "artifacts/report", ("report", "{W}/seed-artifacts/THE_MB", "--out", "{T}"), timeout=60))
    add(Case("report--out=devfull", "artifacts/report", ("report", "{W}/seed-artifacts/THE_MB", "--out", "/dev/full"), timeout=60))
    add(Case("report--plots=file", "artifacts/report", ("report", "{W}/seed-artifacts/THE_MB", "--plots", "/etc/hostname"), timeout=60))
    add(Case("report--csv=devfull", "artifacts/report", ("report", "{W}/seed-artifacts/THE_MB", "--csv", "/dev/full"), timeout=60))
    add(Case("results-list=missing", "artifacts/results-list", ("results", "list", "{T}/none"), timeout=60))
    add(Case("results-list=file", "artifacts/results-list", ("results", "list", "/etc/hostname"), timeout=60))
    add(Case("results-list=/proc", "artifacts/results-list", ("results", "list", "/proc"), expect="any", timeout=60))
    add(Case("results-list=symlink-dir-loop", "artifacts/results-list", ("results", "list", "{T}"),
             setup=lambda ctx: (os.symlink(ctx.T, ctx.T / "self"), real_artifact("maxbatch")(ctx)), expect="any", timeout=60))
    add(Case("compare=same-file", "artifacts/compare", ("compare", "{W}/seed-artifacts/THE_MB", "{W}/seed-artifacts/THE_MB"),
             expect="any", timeout=60))
    add(Case("compare=mb-vs-tp", "artifacts/compare", ("compare", "{W}/seed-artifacts/THE_MB", "{W}/seed-artifacts/THE_TP"),
             timeout=60))
    for v in ("nan", "inf", "-5", "", "1e400"):
        add(Case(f"compare--threshold={v or 'empty'}", "artifacts/compare",
                 ("compare", "--threshold", v, "{W}/seed-artifacts/THE_TP", "{W}/seed-artifacts/THE_TP"), timeout=60))
    add(Case("compare=partial-vs-final", "artifacts/compare", ("compare", "{W}/seed-artifacts/THE_MB_PARTIAL", "{W}/seed-artifacts/THE_MB"),
             expect="any", timeout=60, check=partial_compare_check))
    add(Case("compare=edited-tp-regression", "artifacts/compare", ("compare", "{W}/seed-artifacts/THE_TP", "{T}/a.json"),
             setup=edit_artifact("throughput", _halve_rates), expect="any", timeout=60, check=lambda ctx, p: [] if p.returncode == 1 else
             [Finding(MEDIUM, f"a halved rate is not a regression (exit {p.returncode})")]))

    # -- resume: hostile partials -----------------------------------------------------------------------
    resume_cases = {
        "missing": (None, "{R}/nope.partial.json"),
        "final": (lambda ctx: shutil.copy(ctx.W / "seed-artifacts" / ctx.names["THE_MB"], ctx.R / "x.partial.json"),  # type: ignore[attr-defined]
                  "{R}/x.partial.json"),
        "truncated": (partial_of("maxbatch", None), "TRUNC"),
        "other-benchmark": (partial_of("maxbatch"), "PARTIAL"),
        "edited-config": (partial_of("maxbatch", lambda d: d["config"].__setitem__("max_batch", 10 ** 9) if isinstance(d.get("config"), dict) else None), "PARTIAL"),
        "edited-trials-forged": (partial_of("maxbatch", _forge_trials), "PARTIAL"),
        "python-swapped": (partial_of("maxbatch", _python_to_true), "PARTIAL"),
        "devzero": (lambda ctx: os.symlink("/dev/zero", ctx.R / "z.partial.json"), "{R}/z.partial.json"),
        "fifo": (lambda ctx: os.mkfifo(ctx.R / "f.partial.json"), "{R}/f.partial.json"),
        "readonly": (lambda ctx: (partial_of("maxbatch")(ctx), os.chmod(the_partial(ctx), 0o444)), "PARTIAL"),
    }
    for kind, (setup, target) in resume_cases.items():
        bench = "throughput" if kind == "other-benchmark" else "maxbatch"
        argv: tuple[str, ...] = ("run", bench, "--resume", target)
        add(Case(f"resume-{kind}", "resume", argv, setup=setup, expect="refuse" if kind not in ("readonly",) else "any",
                 refuse_quietly=False, timeout=300, check=forged_check if kind == "edited-trials-forged" else None))
    add(Case("resume-with-extra-flags", "resume", ("run", "maxbatch", "--resume", "PARTIAL", "--max-batch", "64"),
             setup=partial_of("maxbatch"), refuse_quietly=False))
    add(Case("resume-datasize-partial-to-dataload", "resume", ("run", "dataload", "--resume", "PARTIAL"),
             setup=partial_of("maxbatch"), refuse_quietly=False))

    # -- signals at random moments, every benchmark (local) -------------------------------------------
    sig_benches = [("maxbatch", swap(MB, "--max-batch", "4")), ("throughput", TP), ("dataload", DL), ("train-e2e", TE),
                   ("datasize", swap(DS, "--sides", "64,128,256"))]
    for bench, base in sig_benches:
        for sig, when in [(signal.SIGINT, 0.01), (signal.SIGTERM, 1.0), (signal.SIGHUP, "trial"),
                          (signal.SIGINT, "trial")] + ([(signal.SIGUSR1, "trial")] if bench == "maxbatch" else []):
            if bench in ("datasize",) and when == 0.01:
                continue
            add(Case(f"{bench}-{sig.name}@{when}", f"signals/{bench}", base, signal_at=(sig, when), expect="any",
                     refuse_quietly=False, timeout=300, check=partial_or_nothing))
        add(Case(f"{bench}-kill9", f"kill9/{bench}", base, kill9=True, expect="any", refuse_quietly=False,
                 timeout=300))

    # -- disk full -------------------------------------------------------------------------------------
    def full(flag: str, base: tuple[str, ...], pages: int = 3) -> Callable[[Ctx], None]:
        def s(ctx: Ctx) -> None:
            tiny_disk(ctx, leave_pages=pages)
        return s
    add(Case("maxbatch-disk-full-results", "disk-full", swap(MB, "--results-dir", "{T}/tiny"), setup=full("r", MB),
             expect="any", refuse_quietly=False, check=disk_check, timeout=300))
    add(Case("maxbatch-disk-full-0-pages", "disk-full", swap(MB, "--results-dir", "{T}/tiny"), setup=full("r", MB, 0),
             expect="refuse", refuse_quietly=False, timeout=300))
    add(Case("dataload-disk-full-data-dir", "disk-full", swap(DL, "--data-dir", "{T}/tiny"), setup=full("d", DL, 8),
             expect="refuse", refuse_quietly=False, timeout=300))
    add(Case("datasize-disk-full-results", "disk-full", swap(DS, "--results-dir", "{T}/tiny"), setup=full("r", DS, 1),
             expect="refuse", refuse_quietly=False, timeout=300))
    add(Case("data-make-disk-full", "disk-full", swap(DM, "--out", "{T}/tiny/c"), setup=full("o", DM, 20),
             expect="refuse", refuse_quietly=False, timeout=300, check=lambda ctx, p: [] if not (ctx.T / "tiny" / "c" / "manifest.json").exists()
             else [Finding(HIGH, "a manifest written for a corpus the disk could not hold")]))
    add(Case("report-disk-full-out", "disk-full", ("report", "{W}/seed-artifacts/THE_MB", "--out", "{T}/tiny/r.md"),
             setup=full("o", DM, 0), expect="refuse", refuse_quietly=False, timeout=60))

    # -- concurrency: two runs on one results dir / one data dir / one corpus out ----------------------------
    add(Case("concurrent-maxbatch-same-results", "concurrency", MB, expect="ok", check=concurrent_twin(MB), timeout=400))
    add(Case("concurrent-dataload-same-data-dir", "concurrency", DL, expect="ok", check=concurrent_twin(DL), timeout=400))
    add(Case("concurrent-data-make-same-out", "concurrency", swap(DM, "--images", "60"), expect="any",
             check=concurrent_data_make, timeout=400))
    add(Case("dataload-corpus-swapped-same-name", "concurrency", swap(DL, "--corpus", "{T}/corpus"),
             setup=swapped_corpus, expect="ok", check=dataset_not_foreign, timeout=400))

    # -- clean / doctor / images ----------------------------------------------------------------------
    add(Case("clean--dry-run", "clean", ("clean", "--dry-run"), expect="ok", timeout=120))
    add(Case("clean--json--dry-run", "clean", ("clean", "--dry-run", "--json"), expect="ok", timeout=120))
    add(Case("clean-runstate-garbage", "clean", ("clean", "--dry-run"), expect="ok", timeout=120,
             setup=lambda ctx: _garbage_runstate(ctx), env=(("KITCTL_RUN_STATE_DIR", "{T}/rs"),)))
    add(Case("clean-runstate-forged-pid1", "clean", ("clean",), expect="any", timeout=120,
             setup=lambda ctx: _forged_runstate(ctx), env=(("KITCTL_RUN_STATE_DIR", "{T}/rs"),),
             check=lambda ctx, p: [] if _pid1_alive() else [Finding(HIGH, "clean killed PID 1")]))
    add(Case("clean-no-docker", "clean", ("clean", "--dry-run"), expect="ok", timeout=120,
             env=(("DOCKER_HOST", "unix:///nonexistent.sock"),)))
    add(Case("clean--images-no-docker", "clean", ("clean", "--images", "--dry-run"), timeout=120,
             env=(("DOCKER_HOST", "unix:///nonexistent.sock"),)))
    add(Case("doctor", "doctor", ("doctor", "--no-probe"), expect="any", timeout=180))
    add(Case("doctor--json", "doctor", ("doctor", "--no-probe", "--json"), expect="any", timeout=180, check=json_stdout))
    add(Case("doctor-no-docker", "doctor", ("doctor", "--no-probe"), expect="any", timeout=180,
             env=(("DOCKER_HOST", "tcp://127.0.0.1:9"),)))
    add(Case("doctor--variant=bad", "doctor", ("doctor", "--no-probe", "--variant", "../../x"), expect="any", timeout=180))
    add(Case("doctor--min-free-gib=nan", "doctor", ("doctor", "--no-probe", "--min-free-gib", "nan"), timeout=180))
    add(Case("doctor--idle-threshold=-1", "doctor", ("doctor", "--no-probe", "--idle-threshold", "-1"), timeout=180))
    add(Case("doctor-KITCTL_HOME-missing", "doctor", ("doctor", "--no-probe"), expect="any", timeout=180,
             env=(("KITCTL_HOME", "/nonexistent"),)))
    add(Case("images-list", "images", ("images", "list"), expect="any", timeout=180))
    add(Case("images-list-no-docker", "images", ("images", "list"), timeout=120, env=(("DOCKER_HOST", "tcp://127.0.0.1:9"),)))
    add(Case("images-build-bad-service", "images", ("images", "build", "no-such-service"), timeout=120))
    add(Case("images-load-missing", "images", ("images", "load", "{T}/nope.tar.gz"), timeout=120))
    add(Case("images-load-garbage", "images", ("images", "load", "{T}/g.tar.gz"), timeout=120,
             setup=lambda ctx: (ctx.T / "g.tar.gz").write_bytes(os.urandom(10000))))
    add(Case("images-load-empty", "images", ("images", "load", "{T}/g.tar.gz"), timeout=120,
             setup=lambda ctx: (ctx.T / "g.tar.gz").write_bytes(b"")))
    add(Case("images-load-devzero", "images", ("images", "load", "/dev/zero"), timeout=120))
    add(Case("images-save-to-dir", "images", ("images", "save", "--out", "{T}"), expect="any", timeout=120))
    add(Case("images-push-bad-registry", "images", ("images", "push", "--registry", "not a registry"), timeout=120))
    add(Case("maxbatch-KITCTL_HOME=missing", "paths/maxbatch", MB, env=(("KITCTL_HOME", "/nonexistent"),)))
    add(Case("maxbatch-cwd-deleted", "paths/maxbatch", swap(MB, "--results-dir", "{R}"), expect="any",
             setup=lambda ctx: None))

    # -- Docker runtime ------------------------------------------------------------------------------------
    if docker_ok:
        MBD = swap(MB, "--runtime", "docker")
        TPD = swap(TP, "--runtime", "docker")
        DLD = swap(swap(DL, "--runtime", "docker"), "--image-tag", "ci")
        DSD = swap(swap(DS, "--runtime", "docker"), "--image-tag", "ci")
        TED = swap(swap(TE, "--runtime", "docker"), "--image-tag", "ci")
        dk = [("maxbatch", MBD), ("throughput", TPD), ("dataload", DLD), ("datasize", DSD), ("train-e2e", TED)]
        for bench, base in dk:
            add(Case(f"docker-{bench}-ok", f"docker/{bench}", base, expect="ok", needs_docker=True, timeout=500,
                     refuse_quietly=False))
            add(Case(f"docker-{bench}-SIGINT@trial", f"docker/{bench}", base, signal_at=(signal.SIGINT, "trial"),
                     expect="any", needs_docker=True, timeout=300, check=partial_or_nothing))
            add(Case(f"docker-{bench}-SIGTERM@2", f"docker/{bench}", base, signal_at=(signal.SIGTERM, 2.0),
                     expect="any", needs_docker=True, timeout=300, check=partial_or_nothing))
            add(Case(f"docker-{bench}-kill9", f"docker/{bench}", base, kill9=True, expect="any", needs_docker=True,
                     timeout=300))
        add(Case("docker-maxbatch-variant-missing", "docker/maxbatch", MBD, env=(("KITCTL_IMAGE_VARIANT", "nope"),),
                 needs_docker=True, timeout=200))
        add(Case("docker-dataload-tag-missing", "docker/dataload", swap(DLD, "--image-tag", "no-such-tag"),
                 needs_docker=True, timeout=200))
        add(Case("docker-maxbatch-memory-6", "docker/maxbatch", swap(MBD, "--memory-limit", "6"), expect="any",
                 needs_docker=True, timeout=200))
        add(Case("docker-maxbatch-daemon-gone", "docker/maxbatch", MBD, env=(("DOCKER_HOST", "tcp://127.0.0.1:9"),),
                 needs_docker=True, timeout=200))
        add(Case("docker-dataload-read-mbps-ram", "docker/dataload", (*DLD, "--read-mbps", "5"), expect="any",
                 needs_docker=True, timeout=300))
        add(Case("docker-dataload-corpus-symlink-out", "docker/dataload", swap(DLD, "--corpus", "{T}/corpus"),
                 setup=corpus_files(lambda c, d: (first_image(c, d).unlink(), os.symlink("/etc/shadow", first_image(c, d)))),
                 needs_docker=True, timeout=300))
        add(Case("docker-maxbatch-cifar-evil", "docker/maxbatch", (*MBD, "--dataset", "cifar10", "--data-dir", "{T}"),
                 setup=cifar_setup("py-evil"), check=no_marker, needs_docker=True, timeout=300))
        add(Case("docker-maxbatch-gpu-request-cdi", "docker/maxbatch", (*MBD, "--gpu-request", "cdi"), expect="any",
                 needs_docker=True, timeout=300))
    # Permission bits do not bind root: as root these cases can only show that nothing breaks.
    if os.geteuid() == 0:
        root_bypass = ("read-only", "ro-parent", "unreadable")
        cs = [Case(**{**asdict_shallow(c), "expect": "any"}) if any(r in c.id for r in root_bypass) else c for c in cs]
    return cs


# ---- case-specific checks ------------------------------------------------------------------------------

def _neg_numbers(b: bytes) -> bytes:
    return b.replace(b'"images_per_second": ', b'"images_per_second": -')


def _halve_rates(d: dict) -> None:
    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "images_per_second" and isinstance(v, (int, float)):
                    x[k] = v / 2
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(d)


def _forge_trials(d: dict) -> None:
    # a forged "ok" trial at a huge batch: a resume must not report it as measured max batch
    for r in d.get("results", []) if isinstance(d.get("results"), list) else []:
        if isinstance(r, dict) and isinstance(r.get("trials"), list) and r["trials"]:
            t = dict(r["trials"][0])
            t["batch"] = 999999
            t["outcome"] = "ok"
            r["trials"].append(t)


def _python_to_true(d: dict) -> None:
    def walk(x):
        if isinstance(x, dict):
            for k, v in list(x.items()):
                if k in ("python", "interpreter") and isinstance(v, str):
                    x[k] = "/bin/true"
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(d)


def forged_check(ctx: Ctx, p: Proc) -> list[Finding]:
    f = final_artifact(ctx)
    if f and "999999" in f.read_text():
        return [Finding(HIGH, "a forged trial in a partial was carried into the final artifact")]
    return []


def partial_or_nothing(ctx: Ctx, p: Proc) -> list[Finding]:
    out = []
    for f in ctx.R.glob("*.json"):
        if f.stat().st_size == 0:
            out.append(Finding(HIGH, f"empty artifact {f.name} (data lost)"))
            continue
        try:
            doc = json.loads(f.read_text())
        except ValueError:
            out.append(Finding(HIGH, f"unparseable artifact {f.name} after a signal (data lost)"))
            continue
        if f.name.endswith(".partial.json") and doc.get("state") not in ("interrupted", "running"):
            out.append(Finding(LOW, f"partial state {doc.get('state')!r}"))
        if p.returncode == 130 and f.name.endswith(".partial.json") and "--resume" not in p.stderr:
            out.append(Finding(LOW, "a partial kept but the message does not say how to resume"))
    return out


def disk_check(ctx: Ctx, p: Proc) -> list[Finding]:
    out = []
    if p.returncode == 0:
        f = final_artifact(ctx)
        if f is None:
            out.append(Finding(HIGH, "exit 0 on a full disk but no artifact"))
        else:
            try:
                json.loads(f.read_text())
            except ValueError:
                out.append(Finding(HIGH, "exit 0 on a full disk with a broken artifact"))
    for f in (ctx.T / "tiny").glob("*.json"):
        try:
            json.loads(f.read_text())
        except ValueError:
            out.append(Finding(HIGH, f"a broken artifact {f.name} left on the full disk"))
    return out


def data_make_state(ctx: Ctx, p: Proc) -> list[Finding]:
    out_dir = ctx.T / "c"
    out = []
    if p.returncode != 0 and (out_dir / "manifest.json").exists():
        out.append(Finding(HIGH, "a failed/interrupted data make left a manifest (a corpus that looks whole)"))
    if p.returncode == 0:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
        v = subprocess.run([*ENTRY, "data", "verify", str(out_dir)], capture_output=True, text=True, env=env, timeout=120)
        if v.returncode != 0:
            out.append(Finding(HIGH, f"data make exit 0 but data verify fails: {v.stderr.strip()[-200:]}"))
    # temporary folders beside --out
    tmps = [q.name for q in ctx.T.iterdir() if q.name not in ("c",) and ".tmp" in q.name or q.name.startswith(".c")]
    if tmps and p.returncode not in (0,):
        out.append(Finding(LOW, f"temporary folders left beside --out: {tmps}"))
    return out


def corpus_intact(ctx: Ctx, p: Proc) -> list[Finding]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
    v = subprocess.run([*ENTRY, "data", "verify", str(ctx.C)], capture_output=True, text=True, env=env, timeout=120)
    return [] if v.returncode == 0 else [Finding(HIGH, "the existing corpus was damaged by data make into it")]


def dataset_check(kind: str) -> Callable[[Ctx, Proc], list[Finding]]:
    def check(ctx: Ctx, p: Proc) -> list[Finding]:
        f = final_artifact(ctx)
        if p.returncode == 0 and f is not None and kind in ("deleted-file", "truncated-file", "symlink-out"):
            doc = f.read_text()
            if '"rebuilt"' not in doc and "rebuil" not in p.stderr:
                return [Finding(HIGH, f"dataset damaged ({kind}) was measured as if whole (no rebuild, no refusal)")]
        return []
    return check


def ansi_check(ctx: Ctx, p: Proc) -> list[Finding]:
    if "\x1b]0;pwned" in p.stdout or "\x1b[2J" in p.stdout or "\x1b]0;pwned" in p.stderr:
        return [Finding(MEDIUM, "terminal escape sequences from an artifact printed raw")]
    if "<script>" in p.stdout:
        return [Finding(LOW, "HTML from an artifact copied raw into the Markdown")]
    return []


def json_stdout(ctx: Ctx, p: Proc) -> list[Finding]:
    try:
        json.loads(p.stdout)
    except ValueError:
        return [Finding(MEDIUM, "--json printed no JSON document")]
    return []


def partial_compare_check(ctx: Ctx, p: Proc) -> list[Finding]:
    text = p.stdout + p.stderr
    if "partial" not in text.lower() and "interrupted" not in text.lower() and p.returncode in (0, 1):
        return [Finding(MEDIUM, "compare of an interrupted partial vs a complete run says nothing of it")]
    return []


def concurrent_twin(base: tuple[str, ...]) -> Callable[[Ctx, Proc], list[Finding]]:
    """The case ran one process; the check ran nothing. So the twin is started in setup? Simpler: the
    check starts a second run of the same command into the same folders NOW and a third concurrently
    with it, then checks both artifacts are whole and distinct."""
    def check(ctx: Ctx, p: Proc) -> list[Finding]:
        env = {**os.environ, "COLUMNS": "200", MARK: "twin", "PYTHONPATH": str(ROOT / "host"),
               "KITCTL_RUN_STATE_DIR": str(ctx.W / "runstate")}
        argv = [ctx.fmt(a) for a in base]
        a = subprocess.Popen([*ENTRY, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        b = subprocess.Popen([*ENTRY, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        ea = a.communicate(timeout=600)[1]
        eb = b.communicate(timeout=600)[1]
        out = []
        for name, pr, e in (("a", a, ea), ("b", b, eb)):
            if "Traceback" in e:
                out.append(Finding(HIGH, f"concurrent twin {name}: traceback"))
            if pr.returncode not in (0, 2):
                out.append(Finding(MEDIUM, f"concurrent twin {name}: exit {pr.returncode}: {e.strip()[-200:]}"))
        finals = [f for f in ctx.R.glob("*.json") if not f.name.endswith(".partial.json")]
        for f in finals:
            try:
                json.loads(f.read_text())
            except ValueError:
                out.append(Finding(HIGH, f"concurrent runs left a broken artifact {f.name}"))
        want = 1 + sum(pr.returncode == 0 for pr in (a, b))
        if len(finals) < want:
            out.append(Finding(HIGH, f"{want} successful runs but {len(finals)} artifacts (one overwrote another)"))
        for q in marked_processes("twin"):
            out.append(Finding(HIGH, f"twin stray {describe(q)}"))
            os.kill(q, signal.SIGKILL)
        return out
    return check


def concurrent_data_make(ctx: Ctx, p: Proc) -> list[Finding]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "host"), MARK: "twin"}
    out_dir = ctx.T / "c2"
    a = subprocess.Popen([*ENTRY, "data", "make", "--out", str(out_dir), "--images", "300", "--classes", "2", "--workers", "1", "--seed", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(1.5)
    b = subprocess.Popen([*ENTRY, "data", "make", "--out", str(out_dir), "--images", "200", "--classes", "2", "--workers", "1", "--seed", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ea, eb = a.communicate(timeout=600)[1], b.communicate(timeout=600)[1]
    out = []
    if "Traceback" in ea + eb:
        out.append(Finding(HIGH, "concurrent data make: traceback"))
    if a.returncode == 0 and b.returncode == 0:
        out.append(Finding(HIGH, "two data make into one --out both succeeded"))
    v = subprocess.run([*ENTRY, "data", "verify", str(out_dir)], capture_output=True, text=True, env=env, timeout=200)
    if (a.returncode == 0 or b.returncode == 0) and v.returncode != 0:
        out.append(Finding(HIGH, f"after concurrent data make the corpus does not verify: {v.stderr.strip()[-200:]}"))
    return out


def swapped_corpus(ctx: Ctx) -> None:
    """A corpus at T/corpus whose datasets were built in D, then replaced by another seed's corpus of the
    same size at the same path: the next dataload must not measure the first corpus's dataset."""
    shutil.copytree(ctx.W / "corpus40s1", ctx.T / "corpus")
    shutil.copytree(ctx.W / "seed-datasets", ctx.D, dirs_exist_ok=True)


def dataset_not_foreign(ctx: Ctx, p: Proc) -> list[Finding]:
    f = final_artifact(ctx)
    if f is None:
        return []
    doc = json.loads(f.read_text())
    ident = json.loads((ctx.T / "corpus" / "manifest.json").read_text()).get("identity")
    text = json.dumps(doc.get("datasets", doc))
    if ident and ident not in text:
        return [Finding(HIGH, "dataload measured a dataset of another corpus (identity not in the artifact)")]
    return []


def _garbage_runstate(ctx: Ctx) -> None:
    d = ctx.T / "rs"
    d.mkdir()
    (d / "x-1.json").write_text("{garbage")
    (d / "y-2.json").write_text(json.dumps({"format": 1, "trials": "lots"}))
    os.mkfifo(d / "z-3.json")


def _forged_runstate(ctx: Ctx) -> None:
    d = ctx.T / "rs"
    d.mkdir()
    start = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    rec = {"format": 1, "run_id": "forged", "host": socket.gethostname(), "boot_id": boot, "owner_pid": 999999,
           "owner_start": "1", "trials": [{"pid": 1, "start": start, "pgid": 1, "engine": "x", "precision": "fp32", "batch": 1}]}
    (d / "forged-999999.json").write_text(json.dumps(rec))


def _pid1_alive() -> bool:
    return Path("/proc/1").exists()


# ---- the pass ---------------------------------------------------------------------------------------

def prepare(ctx: Ctx, docker_ok: bool) -> None:
    """What many cases share: a good corpus (and another seed's), a built dataset, and real artifacts
    (a final and a partial maxbatch, a throughput) made with the kit itself."""
    ctx.W.mkdir(parents=True, exist_ok=True)
    if not (ctx.C / "manifest.json").exists():
        make_corpus(ctx, ctx.C)
    if not (ctx.W / "corpus40s1" / "manifest.json").exists():
        make_corpus(ctx, ctx.W / "corpus40s1", seed=1)
    seed = ctx.W / "seed-artifacts"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "host"), "KITCTL_RUN_STATE_DIR": str(ctx.W / "runstate")}
    if not list(seed.glob("maxbatch-*[0-9]Z.json")):
        seed.mkdir(exist_ok=True)
        subprocess.run([*ENTRY, *[a.format(R=seed) for a in swap(MB, "--max-batch", "4")]], env=env, capture_output=True, timeout=600)
        subprocess.run([*ENTRY, *[a.format(R=seed) for a in TP]], env=env, capture_output=True, timeout=600)
        # a partial: interrupt a run once its partial is there
        pr = subprocess.Popen([*ENTRY, *[a.format(R=seed / "p") for a in swap(MB, "--max-batch", "8")]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: bool(list((seed / "p").glob("*.partial.json"))), 300)
        time.sleep(20)
        pr.send_signal(signal.SIGINT)
        pr.communicate(timeout=120)
        for f in (seed / "p").glob("*.partial.json"):
            shutil.move(str(f), seed / f.name)
    if not (ctx.W / "seed-datasets").exists():
        d = ctx.W / "seed-datasets"
        args = [a.format(C=ctx.C, D=d, R=ctx.W / "seed-dl") for a in DL]
        subprocess.run([*ENTRY, *args], env=env, capture_output=True, timeout=600)
    names = {"THE_MB": sorted(seed.glob("maxbatch-*[0-9]Z.json"))[0].name,
             "THE_TP": sorted(seed.glob("throughput-*[0-9]Z.json"))[0].name,
             "THE_MB_PARTIAL": sorted(seed.glob("maxbatch-*.partial.json"))[0].name}
    ctx.names = names  # type: ignore[attr-defined]


def resolve(ctx: Ctx, case: Case) -> Case:
    """Fill the seed artifacts' names and the per-case partial/dataset placeholders."""
    names = ctx.names  # type: ignore[attr-defined]

    def sub(a: str) -> str:
        for k, v in names.items():
            a = a.replace(f"/{k}", f"/{v}") if a.endswith(k) else a
        return a
    return Case(**{**asdict_shallow(case), "argv": tuple(sub(a) for a in case.argv)})


def asdict_shallow(c: Case) -> dict:
    return {f: getattr(c, f) for f in c.__dataclass_fields__}


def late_args(ctx: Ctx, case: Case) -> Case:
    """Placeholders known only after setup: PARTIAL, TRUNC, DATASET."""
    argv = list(case.argv)
    for i, a in enumerate(argv):
        if a == "PARTIAL":
            argv[i] = the_partial(ctx)
        elif a == "TRUNC":
            p = Path(the_partial(ctx))
            p.write_bytes(p.read_bytes()[:300])
            argv[i] = str(p)
        elif "DATASET" in a:
            ds = next((p for p in ctx.D.iterdir() if p.is_dir() and p.name.startswith("folder-")), ctx.D)
            argv[i] = a.replace("{D}/DATASET", str(ds)).replace(str(ctx.D) + "/DATASET", str(ds))
    return Case(**{**asdict_shallow(case), "argv": tuple(argv), "setup": None})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kitctl-adv"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--only", action="append", default=[], help="run only cases whose id contains this (repeatable)")
    ap.add_argument("--skip-docker", action="store_true")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--preface", type=Path, help="Markdown put after the counts in --md (the pass's findings in words)")
    ap.add_argument("--md-only", action="store_true", help="only (re)write --md from --json")
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT / "host")
    # A pass started in the background of a non-interactive shell inherits SIGINT ignored, and so would every
    # kitctl it starts (an ignored disposition survives exec): a SIGINT before kitctl installs its handler
    # would then be lost and read as a defect. Cases get the default, as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    client = None if args.skip_docker else docker_client()
    ctx = Ctx(args.work.resolve())
    all_cases = cases(client is not None)
    if args.only:
        all_cases = [c for c in all_cases if any(o in c.id for o in args.only)]
    if args.list:
        for c in all_cases:
            print(c.id)
        print(len(all_cases), "cases")
        return 0
    if args.md_only:
        write_md(args.md, json.loads(args.json.read_text())["cases"], args)
        return 0
    prepare(ctx, client is not None)
    done: list[Result] = []
    previous = {}
    if args.json.exists():
        previous = {r["id"]: r for r in json.loads(args.json.read_text()).get("cases", [])}
    try:
        for n, case in enumerate(all_cases, 1):
            case = resolve(ctx, case)
            t0 = time.monotonic()
            try:
                ctx.begin(case.id)
                if case.setup:
                    case.setup(ctx)
                ready = late_args(ctx, case)
                # run_case calls begin() again: keep what setup made
                res = run_prepared(ctx, ready, client)
            except Exception as exc:  # noqa: BLE001
                res = Result(case.id, case.area, " ".join(case.argv), case.expect, None, 0.0, None, None, False, [], [], [],
                             [Finding(LOW, f"(case setup failed: {type(exc).__name__}: {exc})")])
            finally:
                unmount_all(ctx.case_dir)
                if not args.keep:
                    shutil.rmtree(ctx.case_dir / case.id, ignore_errors=True)
            done.append(res)
            previous[res.id] = to_json(res)
            mark = res.outcome
            print(f"[{n}/{len(all_cases)}] {res.id}: exit {res.rc} {mark} {time.monotonic() - t0:.1f}s"
                  + (f" — {'; '.join(f.what for f in res.findings)[:300]}" if res.findings else ""), flush=True)
            write_json(args.json, previous)
    finally:
        unmount_all(ctx.W)
    if args.md:
        write_md(args.md, list(previous.values()), args)
    return 0


def run_prepared(ctx: Ctx, case: Case, client) -> Result:
    orig_begin = ctx.begin
    ctx.begin = lambda cid: None  # type: ignore[method-assign]
    try:
        return run_case(ctx, case, client)
    finally:
        ctx.begin = orig_begin  # type: ignore[method-assign]


def to_json(r: Result) -> dict:
    d = asdict(r)
    d["outcome"] = r.outcome
    d["stderr_tail"] = getattr(r, "stderr_tail", "")
    return d


def write_json(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cases": list(results.values())}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    tmp.replace(path)


def machine() -> str:
    mem = next((ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")), "")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {mem.split()[1] if mem else '?'} kB RAM, Linux {platform.release()}, Python {platform.python_version()}, no GPU"


# Judgement after reading each flagged case's stderr and artifacts: what the automatic checks cannot know. The first
# matching entry (a substring of the case id) sets the severity the report counts, with the reason.
TRIAGE: list[tuple[str, str, str]] = [
    ("SIGINT@0.01", "env", "the signal lands while the interpreter is still starting (this machine's site-packages "
     ".pth hook imports certifi, ~20-50 ms): KeyboardInterrupt before any kitctl code runs; not kitctl's to fix"),
    ("data-make-SIGINT@0.05", "env", "as SIGINT@0.01: the interpreter's startup, before kitctl's first line"),
    ("doctor--", "low", "the bad value is accepted silently; exit 1 is doctor's 'a GPU run cannot start' verdict"),
    ("--results-dir=empty", "low", "an empty --results-dir means the current folder; accepted"),
    ("-corpus=manifest-label", "low", "labels come from the class folders; the manifest's label is not read"),
    ("data-verify-corpus=manifest-label", "low", "data verify checks files, not labels"),
    ("image-bomb", "low", "a 12,000 x 12,000 px JPEG (144 MP) is decoded and downscaled: slow, not harmful"),
    ("record-foreign-identity", "low", "data verify of a dataset alone cannot know its corpus; runs check the identity"),
    ("data-make--classes", "low", "more classes than images: empty class folders are made"),
    ("data-make--seed=1000", "low", "a seed beyond 2^32 is accepted (reduced by the generator)"),
    ("datasize--limit=huge", "low", "--limit above the corpus means the whole corpus"),
    ("dataload--side=huge", "low", "a side above every image means originals (images are never upscaled)"),
    ("SIGUSR1", "low", "an unhandled signal ends kitctl like kill -9 would: the partial stays resumable"),
    ("-kill9", "low", "kill -9: what is left is the flock's empty lock file and (data make) the half-made folder"),
    ("data-make-SIG", "low", "an empty .c.lock is left beside --out (an flock, harmless, never removed)"),
    ("data-make--seed=-1", "low", "an empty .c.lock is left beside --out"),
    ("gpu-on-cpu", "medium", "a GPU-only loader on a host without CUDA is run and recorded as a failed cell, not refused up front"),
    ("train-e2e--loaders=empty", "medium", "empty --loaders means the default list, which on a CPU host includes "
     "pytorch-nvjpeg (GPU): a failed cell and exit 1 on every default CPU run"),
    ("--python=no-torch", "medium", "data benchmarks: an interpreter without the loader modules is not refused up "
     "front: failed cells 'crash: no result line (exit 1)', the cause not shown"),
    ("-corpus=", "medium", "a damaged corpus is not refused up front: the run records failed cells (cause shown per "
     "cell) and exits 1 instead of one 'kitctl:' line and no artifact"),
    ("corpus-symlink-out", "medium", "as -corpus=: a corpus image symlinked out of the corpus is a failed cell "
     "(its size differs from the manifest's), not a refusal up front"),
    ("disk-full-data-dir", "medium", "a full --data-dir is a failed cell ('No space left on device'), not a refusal"),
    ("throughput-negative", "low", "a hand-edited artifact with negative images/s is reported as is (artifacts are "
     "records, not checked for plausibility)"),
    ("edited-tp-regression", "low", "runs' rates halved by hand but not their recorded summary: compare reads the "
     "summary (exit 0); halving the summary too gives exit 1. An artifact whose summary disagrees with its runs is "
     "not flagged"),
]


def triage(r: dict) -> tuple[str, str]:
    if r["outcome"] == "handled":
        return "handled", ""
    for key, sev, why in TRIAGE:
        # a judgement never lowers a high finding (a traceback, a stray, a hang), except to say it is not kitctl's
        if key in r["id"] and (r["outcome"] != "high" or sev == "env"):
            return sev, why
    return r["outcome"], ""


def write_md(path: Path, results: list[dict], args) -> None:
    from collections import Counter
    for r in results:
        r["triaged"], r["why"] = triage(r)
    counts = Counter(r["triaged"] for r in results)
    areas = Counter(r["area"].split("/")[0] for r in results)
    lines = [f"# Adversarial pass (CPU, local and Docker runtimes)", "",
             f"Machine: {machine()}.", f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             "Re-run (as root, Docker running, from the repository root):", "",
             "```", f"PYTHONPATH=host python3 tools/adversarial.py --work /tmp/kitctl-adv --json {args.json} --md {path}", "```", "",
             f"{len(results)} cases: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("handled", "low", "medium", "high", "env"))
             + " (env: outside kitctl, see the table).",
             "By area: " + ", ".join(f"{k} {v}" for k, v in sorted(areas.items())) + ".", ""]
    if getattr(args, "preface", None):
        lines += [Path(args.preface).read_text().rstrip(), ""]
    bad = [r for r in results if r["findings"]]
    lines += ["## Every flagged case", "",
              "Severity as judged (the automatic check's in brackets when it differs).", "",
              "| case | severity | what the checks saw | judgement | exit |", "|---|---|---|---|---|"]
    order = {"high": 0, "medium": 1, "low": 2, "env": 3}
    for r in sorted(bad, key=lambda r: (order[r["triaged"]], r["id"])):
        what = "; ".join(f"{f['what']}" for f in r["findings"]).replace("|", "\\|").replace("\n", " ")
        sev = r["triaged"] + (f" [{r['outcome']}]" if r["triaged"] != r["outcome"] else "")
        lines.append(f"| `{r['id']}` | {sev} | {what[:300]} | {r['why']} | {r['rc']} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
