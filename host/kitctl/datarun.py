"""What the data benchmarks (`datasize`, `dataload`) share: the data trial (trials/dataload/trial.py) started as a fresh
process group per unit of work (the local runtime's way: its own session, killed whole on a deadline or
a signal), the artifact document and the save/resume loop. The engines' Runtime speaks the engines'
trial protocol (TrialRequest); the data trials take other flags, so they have this small runner."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import typer

from .core import artifact as art
from .core import signals
from .core.fileio import parse_json, read_regular
from .core.paths import kit_root
from .core.provenance import host_info, kit_info
from .core.signals import Interrupted
from .errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Fail, err

RESULT_PREFIX = "KIT-RESULT "
STDERR_TAIL = 4000
# Published by FFCV for ImageNet's 1,281,167 training images (GB), as docs/data.md quotes them; the
# cells it does not quote stay empty rather than guessed.
FFCV_PUBLISHED_GB = {("jpeg90", 256): 22.01, ("jpeg90", 512): 65.47, ("raw", 256): 169.79, ("mix90", 256): 58.36}
FFCV_PUBLISHED_LOAD = {("ffcv", "jpeg90", 512, "ram"): 31_278, ("ffcv", "raw", 256, "ram"): 172_801,
                       ("ffcv", "jpeg90", 512, "cold"): 16_631, ("ffcv", "raw", 512, "cold"): 1_956,
                       ("ffcv", "raw", 256, "cold"): 6_870}
FFCV_MACHINE = "AWS p3dn.24xlarge, 96 vCPU, all cores; cold = EBS"


def trial_path() -> Path:
    return kit_root() / "trials" / "dataload" / "trial.py"


@dataclass(frozen=True)
class TrialRun:
    status: str  # the trial's status, or timeout / crash / interrupted (the host's)
    result: dict[str, Any] | None
    exit_code: int | None
    elapsed_s: float
    error: str | None
    stderr_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "exit_code": self.exit_code, "elapsed_s": self.elapsed_s,
                "error": self.error, "stderr_tail": self.stderr_tail}


def detect_gpu(lib: Any = None) -> dict[str, Any] | None:
    """The GPU a data run's GPU loaders (pytorch-nvjpeg, dali-gpu) and GPU training use, described through NVML
    as the engine benchmarks describe theirs (`Nvml.info`, the artifact's host.gpu): NVML's GPU 0, as `--gpu`'s
    default is for the engines. None where there is none: no nvidia-ml-py, no driver, or no device (a CPU host).
    `lib`: pynvml, or the named stand-in the tests pass (tests/fake_nvml.py)."""
    from .core.gpu import GpuError, Nvml

    try:
        nvml = Nvml(lib)
        if nvml.count() == 0:
            return None
        index, handle = nvml.resolve(None)
        return nvml.info(index, handle).to_json()
    except GpuError:
        return None
    except Exception:  # noqa: BLE001 - an NVML call failing on a broken driver: described as no GPU, not a crash
        return None


def trial_env(gpu_uuid: str | None) -> dict[str, str]:
    """A data trial's environment: with a recorded GPU, CUDA sees that one only (by UUID: NVML and CUDA number
    devices differently), so what ran on a GPU ran on the GPU the artifact names."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu_uuid:
        env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    return env


def run_trial(python: str, argv: list[str], timeout_s: float, gpu_uuid: str | None = None) -> TrialRun:
    """One fresh trial process in its own session; the whole group is killed on timeout or signal, and the trial
    dies with kitctl (the local runtime's parent-death signal: a `kill -9` of kitctl leaves no trial running; its
    pool and loader workers die with it in turn, trials/dataload/lifeline.py)."""
    from .runtimes.local import _preexec

    t0 = time.monotonic()
    env = trial_env(gpu_uuid)
    proc = subprocess.Popen([python, str(trial_path()), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True, env=env,
                            preexec_fn=_preexec(None))
    timed_out = False
    try:
        try:
            out, errs = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, errs = proc.communicate()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    finally:
        try:  # stragglers (loader workers) die with the group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    elapsed = time.monotonic() - t0
    if timed_out:
        return TrialRun("timeout", None, None, elapsed, f"killed by the kit after {timeout_s:g} s", errs[-STDERR_TAIL:])
    return trial_outcome(out, errs, proc.returncode, elapsed)


def _exit_text(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"{rc} ({signal.Signals(-rc).name})"
        except ValueError:
            pass
    return str(rc)


def trial_outcome(out: str, errs: str, rc: int | None, elapsed: float) -> TrialRun:
    """A finished trial process (local or in a container) from its stdout, stderr and exit status."""
    tail = errs[-STDERR_TAIL:]
    lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
    if not lines:
        return TrialRun("crash", None, rc, elapsed, f"no result line (exit {_exit_text(rc)})", tail)
    try:
        result = json.loads(lines[-1][len(RESULT_PREFIX):])
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return TrialRun("crash", None, rc, elapsed, "a malformed result line", tail)
    status = result.get("status") or "error"
    if status != "ok":
        return TrialRun(status, result, rc, elapsed, result.get("error") or f"status {status} (exit {_exit_text(rc)})",
                        tail)
    if rc != 0:  # a figure from a process that then died is not kept: its end may have been part of the run
        last = tail.strip().splitlines()[-1:] or ["(no stderr)"]
        return TrialRun("error", result, rc, elapsed,
                        f"the trial printed its result, then exited {_exit_text(rc)}: {last[0][:200]}", tail)
    return TrialRun("ok", result, rc, elapsed, None, tail)


def parse_names(flag: str, text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in known]
    if not names or bad:
        raise Fail(f"{flag}: unknown {', '.join(bad) or '(empty)'} (known: {', '.join(known)})")
    return names


def parse_ints(flag: str, text: str, low: int, all_value: int | None = None) -> tuple[int, ...]:
    out = []
    for part in (x.strip() for x in str(text).split(",") if x.strip()):
        if part == "all" and all_value is not None:
            out.append(all_value)
            continue
        try:
            v = int(part)
        except ValueError:
            raise Fail(f"{flag}: {part!r} is not an integer{' or all' if all_value else ''}") from None
        if v < low:
            raise Fail(f"{flag}: {v} is below {low}")
        out.append(v)
    if not out:
        raise Fail(f"{flag}: empty")
    return tuple(dict.fromkeys(out))


def check_corpus(corpus: str) -> Path:
    p = Path(corpus).expanduser().resolve()
    if not (p / "manifest.json").is_file():
        raise Fail(f"--corpus {corpus}: not a corpus (no manifest.json); make one with `kitctl data make`")
    read_corpus_manifest(p)  # a truncated or foreign manifest is one line now, not a traceback later
    return p


# --workers above this many per core is refused (the corpus maker's cap too): more processes than that only add
# memory (~100 MB each) and fork cost, never speed, and a typo (100000) would fork until the OOM killer steps in.
MAX_WORKERS_PER_CORE = 4


def check_workers(flag: str, values: tuple[int, ...]) -> tuple[int, ...]:
    cap = MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)
    bad = [w for w in values if w > cap]
    if bad:
        raise Fail(f"{flag} {bad[0]} is more than {cap} ({MAX_WORKERS_PER_CORE} per core of this host's "
                   f"{os.cpu_count()}); more workers add memory, not speed")
    return values


def check_data_dir(data_dir: str, corpus: str | Path, limit: int | None,
                   datasets: list[tuple[str, str, int]], flag: str = "--data-dir") -> None:
    """A dataset still to be written needs a writable data dir: refused now, in one line, rather than after the
    run has started (a data dir holding every dataset already may be read-only)."""
    manifest = read_corpus_manifest(corpus)
    n = min(manifest["images"], limit) if limit else manifest["images"]
    cid = corpus_identity(manifest)
    missing = [d for d in (dataset_dir(data_dir, n, f, e, s, cid) for f, e, s in datasets)
               if not (d / "dataset.json").is_file()]
    if not missing:
        return
    p = Path(data_dir)
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise Fail(f"{flag} {data_dir}: {p} is not a writable folder, and {missing[0].name}{more} must be written "
                   "there first")


MANIFEST_MAX_BYTES = 512 * 2**20  # a corpus of millions of images has a manifest of a few hundred MB at most


def read_corpus_manifest(corpus: str | Path) -> dict[str, Any]:
    """The corpus's manifest.json, checked to be one (Fail, one line naming the file, if not)."""
    path = Path(corpus) / "manifest.json"
    try:
        if not path.is_file():
            raise Fail(f"--corpus {corpus}: not a corpus (no manifest.json); make one with `kitctl data make`")
        if path.stat().st_size > MANIFEST_MAX_BYTES:
            raise Fail(f"{path}: {path.stat().st_size:,} bytes is no corpus manifest")
        m = parse_json(read_regular(path, MANIFEST_MAX_BYTES).decode("utf-8"))
    except (ValueError, OSError) as exc:  # truncated, not UTF-8, nested too deeply, unreadable, not a regular file
        raise Fail(f"{path}: not a readable corpus manifest ({' '.join(str(exc).split())[:120]}); "
                   "make the corpus again with `kitctl data make`") from None
    files = m.get("files") if isinstance(m, dict) else None
    if not (isinstance(m, dict) and m.get("kind") == "kitctl-image-corpus" and isinstance(m.get("images"), int)
            and isinstance(files, list) and len(files) == m["images"]
            and all(isinstance(f, dict) and isinstance(f.get("file"), str) and isinstance(f.get("bytes"), int)
                    for f in files)):
        raise Fail(f"{path}: not a kitctl corpus manifest (kind, images and one file entry per image); "
                   "make the corpus again with `kitctl data make`")
    for f in files:  # a manifest names files inside its corpus only: nothing outside it is opened
        name = f["file"]
        if not name or name.startswith("/") or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
            raise Fail(f"{path}: file {name[:80]!r} is not a path inside the corpus; "
                       "make the corpus again with `kitctl data make`")
    return m


def corpus_identity(manifest: dict[str, Any]) -> str:
    """The corpus's content identity (trials/dataload/corpus.py: identity, the same function): a hash of its
    seed, count, classes, bytes and every file's name, label, size and hash, not of when it was made. A dataset
    is keyed by it and records it, so a dataset is only ever read for the corpus it was written from."""
    files = [[f.get("file"), f.get("label"), f.get("bytes"), *([f["sha256"]] if "sha256" in f else [])]
             for f in manifest.get("files") or []]
    key = {k: manifest.get(k) for k in ("kind", "corpus_version", "seed", "images", "classes", "bytes")}
    text = json.dumps({**key, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def new_doc(benchmark: str, config_json: dict[str, Any], gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new data artifact; `gpu`: the GPU its trials may use (detect_gpu), else host.gpu is null."""
    now = art.utc_iso()
    host = host_info()
    host["gpu"] = gpu
    return {"schema_version": art.SCHEMA_VERSION, "kind": "kitctl-artifact", "benchmark": benchmark,
            "run_id": uuid.uuid4().hex[:12], "state": "running", "created_utc": now, "updated_utc": now,
            "finished_utc": None, "kit": kit_info(), "argv": sys.argv, "host": host,
            "runtime": {"name": "local", "interpreter": None}, "configuration": config_json, "budget": None,
            "engines": {}, "results": []}


def open_store(benchmark: str, results_dir: Path, resume: Path | None,
               new_config: Callable[[], Any], config_of: Callable[[dict[str, Any]], Any], uses_gpu: bool = False):
    """(store, doc, config): a new run's, or a partial's for --resume (its recorded configuration and GPU).
    `uses_gpu`: a benchmark whose trials may run on a GPU records the one they would use (detect_gpu)."""
    try:
        if resume is not None:
            store, doc = art.open_for_resume(resume)
            if doc.get("benchmark") != benchmark:
                store.release()
                raise Fail(f"--resume {resume}: a {doc.get('benchmark')} artifact, not {benchmark}")
            cfg = config_of(doc["configuration"])
            doc.setdefault("resumes", []).append({"argv": sys.argv, "utc": art.utc_iso()})
            doc["state"] = "running"
            return store, doc, cfg
        cfg = new_config()
        store = art.ArtifactStore.pending(results_dir, benchmark, "rrc224", "corpus")
        return store, new_doc(benchmark, cfg.to_json(), detect_gpu() if uses_gpu else None), cfg
    except art.ArtifactError as exc:
        raise Fail(str(exc)) from None


def run_command(benchmark: str, results_dir: Path, resume: Path | None, new_config: Callable[[], Any],
                config_of: Callable[[dict[str, Any]], Any], runtime_of: Callable[[Any], dict[str, Any]],
                body: Callable[[Any, art.ArtifactStore, dict[str, Any], Callable[[str], None]], None],
                print_table: Callable[..., None], all_ok: Callable[[dict[str, Any]], bool],
                uses_gpu: bool = False, as_json: bool = False, csv: Path | None = None) -> None:
    """What every data benchmark's `kitctl run` does after parsing its flags: open the run (new or
    --resume; bad input is one line, exit 2), record its runtime (and, `uses_gpu`, the GPU its trials see),
    run its units (body(cfg, store, doc, note) saves after each), print its end table and exit (0 all ok,
    else incomplete)."""
    from .output import ResultOutput, check_csv_path, stderr_console

    try:
        check_csv_path(csv)
    except Fail as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    console = ResultOutput(as_json, csv)  # the end table (stdout) or --json; progress notes on stderr
    progress = stderr_console()
    try:
        store, doc, cfg = open_store(benchmark, results_dir, resume, new_config, config_of, uses_gpu)
    except Fail as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    try:  # an absent image (docker runtime) is refused before anything runs
        doc["runtime"] = runtime_of(cfg)
    except Fail as exc:
        store.release()
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    final = execute(store, doc, lambda: body(cfg, store, doc, progress.print))
    print_table(console, doc, final)
    try:
        console.finish(doc)
    except Fail as exc:
        err.print(f"kitctl: {exc} (the artifact is written)")
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(EXIT_OK if all_ok(doc) else EXIT_INCOMPLETE)


def save(store: art.ArtifactStore, doc: dict[str, Any]) -> None:
    doc["updated_utc"] = art.utc_iso()
    store.save_partial(doc)


def execute(store: art.ArtifactStore, doc: dict[str, Any], body: Callable[[], None]) -> Path:
    """Run body (which saves after every unit), then write the final artifact; a signal keeps the partial."""
    try:
        body()
        doc["state"] = "complete"
        doc["finished_utc"] = art.utc_iso()
        with signals.critical():
            final = store.finalize(doc)
            signals.stop_interrupting()
        return final
    except Interrupted as exc:
        signals.stop_interrupting()
        doc["state"], doc["interrupted_by"] = "interrupted", str(exc)
        try:
            save(store, doc)
            kept = f"partial artifact kept: {store.partial} (continue with --resume {store.partial})"
        except art.ArtifactError:
            kept = "nothing written"
        err.print(f"kitctl: interrupted ({exc}); {kept}")
        raise typer.Exit(EXIT_INTERRUPTED)
    except art.ArtifactError as exc:
        err.print(f"kitctl: {exc}")
        raise typer.Exit(EXIT_USAGE)
    finally:
        store.release()


# Which image runs which loader through Docker: compose.yaml's loader-<image> services (loader_builds). These are the
# CPU loaders' images, the ones train-e2e trains in through Docker (its containers get no GPU).
LOADER_IMAGE = {"pytorch-dataloader": "torch", "webdataset": "torch", "ffcv": "ffcv", "dali-cpu": "dali"}
# Loaders that decode on the GPU: through Docker their container gets the run's GPU (GpuRequest).
GPU_LOADERS = ("pytorch-nvjpeg", "dali-gpu")
# Which image writes which dataset format (`trial.py datasize`): the format's writer package lives there (ffcv in
# loader-ffcv; webdataset and PIL in loader-torch), so a host without them writes every format through Docker.
FORMAT_IMAGE = {"folder": "torch", "webdataset": "torch", "ffcv": "ffcv"}
# The images with torch (what the training trial imports): loader-dali has none.
TORCH_IMAGES = ("torch", "ffcv")
CONTAINER_DATA, CONTAINER_CORPUS, CONTAINER_OUT = "/data", "/corpus", "/out"


@dataclass(frozen=True)
class LoaderBuild:
    """The build of one loader image (compose service loader-<name>) that `--image-tag` picks: its variant (None:
    the default build), image name and the loaders it serves (None: a tag compose.yaml does not name, whose image's
    kit.loaders label is all that says what it serves; docker_runtime checks it)."""
    name: str
    service: str
    variant: str | None
    image: str
    loaders: tuple[str, ...] | None

    def describe(self) -> str:
        which = "the default (CUDA) build" if self.variant is None else f"the {self.variant} build"
        return f"{self.image}, {which} of {self.service}"


def _compose(compose: Any = None) -> Any:
    return compose if compose is not None else _default_compose()


@functools.lru_cache(maxsize=1)
def _default_compose() -> Any:
    """compose.yaml, read once per process: every trial run asks which image it runs in."""
    from .images.compose import ComposeError, load_compose

    try:
        return load_compose()
    except ComposeError as exc:
        raise Fail(str(exc)) from None


def _tag(image: str) -> str:
    from .images.store import split_tag

    return split_tag(image)[1]


def loader_builds(tag: str, compose: Any = None) -> dict[str, LoaderBuild]:
    """Per loader image (torch, ffcv, dali) the build `--image-tag tag` runs: the build (default or variant) of its
    compose service whose image has that tag; a service without one, when other loader images have it (loader-ffcv
    has no CUDA build), its default build; a tag no build has, kitctl/loader-<name>:<tag> (a retagged image)."""
    c = _compose(compose)
    services = {n[len("loader-"):]: s for n, s in c.services.items() if n.startswith("loader-") and s.loaders}
    builds = {name: [None, *s.variants] for name, s in services.items()}
    known = any(_tag(c.image(s.name, v)) == tag for name, s in services.items() for v in builds[name])
    out = {}
    for name, s in services.items():
        match = [v for v in builds[name] if _tag(c.image(s.name, v)) == tag]
        if match or known:
            v = match[0] if match else None
            out[name] = LoaderBuild(name, s.name, v, c.image(s.name, v), c.loaders(s.name, v))
        else:
            out[name] = LoaderBuild(name, s.name, None, f"kitctl/loader-{name}:{tag}", None)
    return out


def loader_image(name: str, tag: str) -> str:
    """The image of loader image `name` (torch, ffcv, dali) that `--image-tag tag` runs."""
    try:
        return loader_builds(tag)[name].image
    except KeyError:
        raise Fail(f"compose.yaml has no service loader-{name}") from None


def serving_builds(loaders: tuple[str, ...] | list[str], tag: str, compose: Any = None) -> dict[str, LoaderBuild]:
    """loader → the build that runs it under `--image-tag tag`; a loader that build does not serve (a GPU loader
    and a CPU build) is refused here, in one line naming the build that would serve it, before anything runs."""
    c = _compose(compose)
    picked = loader_builds(tag, c)
    out, refused = {}, []
    for ld in loaders:
        owner = next((b for b in picked.values()
                      if any(ld in c.loaders(b.service, v) for v in [None, *c.service(b.service).variants])), None)
        if owner is None:
            refused.append(f"{ld}: no loader image serves it")
            continue
        if owner.loaders is None or ld in owner.loaders:
            out[ld] = owner
            continue
        svc = c.service(owner.service)
        others = [v for v in [None, *svc.variants] if ld in c.loaders(svc.name, v)]
        alt = " or ".join(f"--image-tag {_tag(c.image(svc.name, v))}" for v in others)
        gpu = " (it decodes on the GPU)" if ld in GPU_LOADERS else ""
        refused.append(f"{ld}{gpu} is not in {owner.describe()}, which serves {', '.join(owner.loaders)}; "
                       f"use {alt}")
    if refused:
        raise Fail("--runtime docker: " + "; ".join(refused) + "; or --runtime local")
    return out


def docker_runtime(images: dict[str, str], writers: dict[str, str] | None = None) -> dict[str, Any]:
    """The artifact's runtime record for a docker run: which image ran each loader (and wrote each format),
    and each image's id and repo digests; an absent image or a silent daemon is refused here, before any run."""
    from .runtimes.docker import RuntimeUnavailable, docker_client, image_provenance

    try:
        client = docker_client(timeout=30)
        try:
            prov = {im: image_provenance(client, im) for im in dict.fromkeys([*images.values(),
                                                                              *(writers or {}).values()])}
        finally:
            client.close()
    except RuntimeUnavailable as exc:
        raise Fail(f"--runtime docker: {exc}") from None
    for ld, im in images.items():  # the image itself says what it serves (kit.loaders, compose's list at its build)
        served = (prov[im].get("labels") or {}).get("kit.loaders")
        if ld in LOADER_FORMAT and served is not None and ld not in served.split(","):
            raise Fail(f"--runtime docker: image {im} does not serve {ld}: its kit.loaders label says {served}")
    out: dict[str, Any] = {"name": "docker", "images": images}
    if writers is not None:
        out["writers"] = writers
    out["image_ids"] = {im: {"id": p["id"], "repo_digests": p["repo_digests"]} for im, p in prov.items()}
    return out


def loader_runtime(cfg: Any) -> dict[str, Any]:
    """The runtime record of a loader benchmark's config (dataload, train-e2e: `runtime`, `python`, `loaders`,
    `image(loader)`, `datasets()`, `image_tag`): the interpreter, or each loader's and each format writer's image."""
    if cfg.runtime != "docker":
        return {"name": "local", "interpreter": cfg.python}
    rec = docker_runtime({ld: cfg.image(ld) for ld in cfg.loaders},
                         {f: loader_image(FORMAT_IMAGE[f], cfg.image_tag) for f, _, _ in cfg.datasets()})
    gpu_loaders = [ld for ld in cfg.loaders if ld in GPU_LOADERS]
    if gpu_loaders:
        rec.update(gpu_attach(cfg.image(gpu_loaders[0]), gpu_loaders))
    return rec


def gpu_attach(image: str, loaders: list[str], gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """How a GPU loader's container gets the GPU (runtime.gpu_request, as the engines' Docker runtime records it):
    the request the daemon honours, probed once with a throw-away container of the loader's image on the GPU the
    trials use (`gpu`: detect_gpu's). No GPU, or a daemon that attaches none: one line, before anything runs."""
    from .runtimes.docker import RuntimeUnavailable, docker_client, probe_gpu_request

    gpu = gpu if gpu is not None else detect_gpu()
    if gpu is None:
        raise Fail(f"--runtime docker: {', '.join(loaders)} decode on the GPU, and NVML finds no GPU on this host; "
                   "leave them out, or run where there is one")
    try:
        client = docker_client(timeout=30)
        try:
            probe = probe_gpu_request(client, image, gpu["uuid"])
        finally:
            client.close()
    except RuntimeUnavailable as exc:
        raise Fail(f"--runtime docker: {exc}") from None
    if not probe.ok:
        raise Fail(f"--runtime docker: {', '.join(loaders)}: {probe.refusal()}")
    return {"gpu_request": probe.request.kind, "gpu_device_id": probe.request.device_id}


@dataclass(frozen=True)
class ReadCap:
    """Slow storage emulated the way --vram-limit emulates a smaller card: reads from the block device that holds
    the datasets capped at `mb_per_s` for a loader's container (Docker's --device-read-bps: blkio throttling on
    cgroup v1, io.max on v2). Page-cache hits are not reads from the device: a RAM source is not slowed."""
    mb_per_s: float
    device: str  # /dev/<disk>: the whole disk (throttling applies to a disk's queue, not to a partition)

    @property
    def bytes_per_s(self) -> int:
        return max(1, int(self.mb_per_s * 1_000_000))

    def to_json(self) -> dict[str, Any]:
        return {"mb_per_s": self.mb_per_s, "device": self.device,
                "via": "docker --device-read-bps (blkio throttle on cgroup v1, io.max on v2)"}


def block_device(path: Path, flag: str = "--read-mbps") -> str:
    """/dev/<disk> that holds `path` (or its nearest existing parent); Fail when it is on no block device
    (tmpfs, overlay, btrfs subvolumes, network filesystems: nothing a device cap could slow)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = os.stat(p).st_dev
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        raise Fail(f"{flag}: {path} is on no block device (device {os.major(dev)}:{os.minor(dev)}: tmpfs, overlay "
                   "or a network filesystem), so there is no read path to cap; put --data-dir on a disk")
    real = node.resolve()
    if (real / "partition").exists():
        real = real.parent
    disk = Path("/dev") / real.name
    if not disk.exists():
        raise Fail(f"{flag}: {path} is on {real.name}, which has no {disk} here to cap")
    return str(disk)


def run_trial_docker(image: str, argv: list[str], timeout_s: float, run_id: str, benchmark: str, *,
                     data: Path | None = None, corpus: Path | None = None, out_dir: Path | None = None,
                     read_cap: ReadCap | None = None, gpu: Any = None) -> TrialRun:
    """One fresh container of the loader's image: network off, no capabilities, killed and removed at the end
    (a signal too). `data`: a dataset mounted read-only at /data, run as its owner (a cold source needs it:
    DONTNEED evicts only for the owner), its reads capped by `read_cap` when given. `corpus` + `out_dir`: a
    dataset written in the image, the corpus read-only at /corpus and out_dir writable at /out, run as the
    caller so what it writes is the caller's. `gpu`: a GpuRequest (a GPU loader), the container gets that GPU."""
    import docker

    from .runtimes.docker import LABEL_RUN_ID, owner_labels, remove_run_containers

    volumes: dict[str, dict[str, str]] = {}
    user = f"{os.getuid()}:{os.getgid()}"
    if data is not None:
        st = data.stat()
        user = f"{st.st_uid}:{st.st_gid}"
        volumes[str(data)] = {"bind": CONTAINER_DATA, "mode": "ro"}
    if corpus is not None:
        volumes[str(corpus)] = {"bind": CONTAINER_CORPUS, "mode": "ro"}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)  # else the daemon creates it, root-owned
        volumes[str(out_dir)] = {"bind": CONTAINER_OUT, "mode": "rw"}
    caps = {"device_read_bps": [{"Path": read_cap.device, "Rate": read_cap.bytes_per_s}]} if read_cap else {}
    if gpu is not None:
        caps["device_requests"] = [gpu.device_request()]
    client = docker.from_env()
    t0 = time.monotonic()
    try:
        c = client.containers.run(image, argv, detach=True, network_mode="none", shm_size="1g", cap_drop=["ALL"],
                                  security_opt=["no-new-privileges:true"], user=user, volumes=volumes,
                                  labels={LABEL_RUN_ID: run_id, **owner_labels(), "kit.benchmark": benchmark},
                                  **caps)
    except BaseException:  # a signal between create and start: the run's one container, by its label
        remove_run_containers(client, run_id)
        client.close()
        raise
    timed_out = False
    try:
        try:
            rc = c.wait(timeout=timeout_s)["StatusCode"]
        except Exception:  # noqa: BLE001 - the SDK's read timeout: the deadline passed
            timed_out = True
            c.kill()
            rc = None
        out = c.logs(stdout=True, stderr=False).decode(errors="replace")
        errs = c.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        try:
            c.remove(force=True)
        except docker.errors.APIError:
            pass
        client.close()
    elapsed = time.monotonic() - t0
    if timed_out:
        return TrialRun("timeout", None, None, elapsed, f"killed by the kit after {timeout_s:g} s", errs[-STDERR_TAIL:])
    return trial_outcome(out, errs, rc, elapsed)


@dataclass(frozen=True)
class Where:
    """Where a data benchmark's trials run: `local` (a fresh process of `python`) or `docker` (a fresh container
    of the loader's or the writer's image, tag `image_tag`), under the run's id (its containers' label)."""
    runtime: str
    python: str
    image_tag: str
    run_id: str
    read_cap: ReadCap | None = None  # docker: the loaders' reads of a dataset capped (dataload --read-mbps)
    gpu_uuid: str | None = None  # the recorded GPU (host.gpu), the only one the trials' CUDA sees
    gpu_request: str | None = None  # docker: how a GPU loader's container gets it (runtime.gpu_request)

    @classmethod
    def of(cls, cfg: Any, doc: dict[str, Any], read_cap: ReadCap | None = None) -> Where:
        """Where a loader benchmark's config runs its trials, on the GPU its artifact recorded (if any)."""
        return cls(cfg.runtime, cfg.python, cfg.image_tag, doc["run_id"], read_cap,
                   ((doc.get("host") or {}).get("gpu") or {}).get("uuid"),
                   (doc.get("runtime") or {}).get("gpu_request"))

    def gpu(self) -> Any:
        """The GpuRequest a GPU loader's container is started with (None: no request recorded)."""
        from .runtimes.docker import GpuRequest

        return GpuRequest(self.gpu_request, self.gpu_uuid) if self.gpu_request else None


def write_dataset(where: Where, benchmark: str, corpus: str, out: Path, fmt: str, enc: str, side: int,
                  limit: int | None, timeout_s: float, keep: bool, workers: int | None = None) -> TrialRun:
    """`trial.py datasize`: one dataset written at `out`, in a local process or in the format's writer image."""
    flags = ["--format", fmt, "--encoding", enc, "--side", str(side)]
    if limit:
        flags += ["--limit", str(limit)]
    if workers:
        flags += ["--workers", str(workers)]
    if keep:
        flags += ["--keep"]
    if where.runtime == "docker":
        return run_trial_docker(loader_image(FORMAT_IMAGE[fmt], where.image_tag),
                                ["datasize", "--corpus", CONTAINER_CORPUS, "--out", f"{CONTAINER_OUT}/{out.name}",
                                 *flags], timeout_s, where.run_id, benchmark, corpus=Path(corpus), out_dir=out.parent)
    return run_trial(where.python, ["datasize", "--corpus", corpus, "--out", str(out), *flags], timeout_s)


def run_on_dataset(where: Where, benchmark: str, image: str | None, argv: list[str], dataset: Path | None,
                   timeout_s: float, gpu: bool = False) -> TrialRun:
    """One trial run reading `dataset` (given as `--dataset`; None: none): a fresh local process, or a fresh
    container of `image` with the dataset mounted read-only at /data (`gpu`: and the run's GPU attached)."""
    if where.runtime == "docker":
        assert image is not None, "a docker run names its image"
        return run_trial_docker(image, [*argv, *(["--dataset", CONTAINER_DATA] if dataset else [])], timeout_s,
                                where.run_id, benchmark, data=dataset, read_cap=where.read_cap if dataset else None,
                                gpu=where.gpu() if gpu else None)
    return run_trial(where.python, [*argv, *(["--dataset", str(dataset)] if dataset else [])], timeout_s,
                     where.gpu_uuid)


# -- the datasets a loader run reads (dataload's and train-e2e's) ------------------------------------------------
# Which dataset format each loader reads, the encodings a dataset can have (trials/dataload/writers.py).
LOADER_FORMAT = {"pytorch-dataloader": "folder", "webdataset": "webdataset", "ffcv": "ffcv", "pytorch-nvjpeg": "folder",
                 "dali-cpu": "folder", "dali-gpu": "folder"}
DATA_ENCODINGS = ("jpeg50", "jpeg90", "jpeg100", "mix90", "raw")


def dataset_dir(data_dir: str, images: int, fmt: str, enc: str, side: int, corpus_id: str) -> Path:
    """<data_dir>/<format>-<encoding>-<side>-n<images>-c<corpus identity>: written once from one corpus, reused by
    every data benchmark that reads that corpus (another corpus, even of the same count, gets its own)."""
    return Path(data_dir) / f"{fmt}-{enc}-{side}-n{images}-c{corpus_id}"


def corpus_images(corpus: str, limit: int | None) -> int:
    n = read_corpus_manifest(corpus)["images"]
    return min(n, limit) if limit else n


def corpus_key(corpus: str) -> str:
    return corpus_identity(read_corpus_manifest(corpus))


def verify_dataset(d: Path, corpus_id: str | None, hashes: bool = False) -> str | None:
    """Why the dataset folder `d` cannot be read as the corpus's (None: it can): its dataset.json must be whole,
    name the corpus identity `corpus_id`, and list its files, each there at its recorded size (`hashes`: and
    SHA-256). `corpus_id` None: any corpus's. Every reason names the folder."""
    info_path = d / "dataset.json"
    try:
        info = parse_json(read_regular(info_path).decode("utf-8"))
    except (ValueError, OSError) as exc:  # NotRegularFile (a FIFO would hang a plain read) is an OSError
        return f"{info_path}: not a readable dataset record ({' '.join(str(exc).split())[:300]})"
    if not isinstance(info, dict):
        return f"{info_path}: not a dataset record"
    written_from = (info.get("corpus") or {}).get("identity") if isinstance(info.get("corpus"), dict) else None
    if corpus_id is not None and written_from != corpus_id:
        return (f"{d} was written from another corpus (identity {written_from or 'unrecorded'}, this corpus "
                f"{corpus_id}); remove it to have it written again")
    files = info.get("file_list")
    if not isinstance(files, list) or not files:
        return f"{d}: its dataset.json lists no files to check; remove it to have it written again"
    for f in files:
        path = d / str(f.get("path"))
        try:
            size = path.stat().st_size if path.is_file() else None
        except OSError:
            size = None
        if size != f.get("bytes"):
            return (f"{d}: {f.get('path')} is {'missing' if size is None else f'{size:,} bytes'}, its record says "
                    f"{f.get('bytes')} (a half-written or changed dataset); remove {d} to have it written again")
        if hashes and _sha256(path) != f.get("sha256"):
            return f"{d}: {f.get('path')} does not match its recorded SHA-256 (changed since written)"
    return None


def verify_corpus(corpus: Path) -> str | None:
    """Why the corpus at `corpus` is not what its manifest says (None: it is): every image there at its recorded
    size and SHA-256 (a manifest from before per-file hashes: sizes only)."""
    manifest = read_corpus_manifest(corpus)
    for f in manifest["files"]:
        path = corpus / f["file"]
        size = path.stat().st_size if path.is_file() else None
        if size != f["bytes"]:
            return (f"{corpus}: {f['file']} is {'missing' if size is None else f'{size:,} bytes'}, its manifest "
                    f"says {f['bytes']:,}")
        if f.get("sha256") and _sha256(path) != f["sha256"]:
            return f"{corpus}: {f['file']} does not match its manifest's SHA-256 (changed since the corpus was made)"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare_datasets(where: Where, benchmark: str, corpus: str, data_dir: str, limit: int | None, timeout_s: float,
                     datasets: list[tuple[str, str, int]], doc: dict[str, Any],
                     note: Callable[[str], None]) -> dict[tuple, str | None]:
    """Write the (format, encoding, side) datasets of this corpus not written yet (`trial.py datasize --keep`, in
    the writer's image with the docker runtime); a dataset already there is checked against the corpus's identity
    and its files' sizes before it is reused. Every dataset used is recorded in doc["datasets"] with the corpus
    identity it belongs to; returns why each is unusable, or None."""
    manifest = read_corpus_manifest(corpus)
    corpus_id = corpus_identity(manifest)
    n = min(manifest["images"], limit) if limit else manifest["images"]
    problems: dict[tuple, str | None] = {}
    doc.setdefault("datasets", [])
    recorded = {r.get("path") for r in doc["datasets"]}
    for fmt, enc, side in datasets:
        d = dataset_dir(data_dir, n, fmt, enc, side, corpus_id)
        base = {"path": str(d), "format": fmt, "encoding": enc, "side": side, "corpus_identity": corpus_id,
                "corpus_seed": manifest.get("seed"), "corpus_images": manifest["images"]}
        if (d / "dataset.json").is_file():
            why = verify_dataset(d, corpus_id)
            problems[(fmt, enc, side)] = why
            if str(d) not in recorded:
                doc["datasets"].append({**base, "reused": True, "status": "ok" if why is None else "refused",
                                        "error": why})
            note(f"dataset {d.name}: " + (f"REFUSED ({why})" if why else "reused (corpus identity and file sizes "
                                                                          "checked)"))
            continue
        tr = write_dataset(where, benchmark, corpus, d, fmt, enc, side, limit, timeout_s, keep=True)
        why = None if tr.status == "ok" else f"writing the dataset failed: {tr.error}"
        if why is None:
            why = verify_dataset(d, corpus_id)
        problems[(fmt, enc, side)] = why
        doc["datasets"].append({**base, "reused": False, **tr.to_json(),
                                "size": {k: (tr.result or {}).get(k) for k in ("images", "payload_bytes", "file_bytes",
                                                                               "write_seconds")},
                                "versions": (tr.result or {}).get("versions")})
        note(f"dataset {d.name}: {tr.status}" + (f" ({why})" if why else f" in {tr.elapsed_s:.1f} s"))
    return problems


# -- what the data benchmarks' reports say about their cells (dataload, train-e2e, datasize) ----------------------
def cell_caveats(doc: dict[str, Any], label: Callable[[dict[str, Any]], str], runs_asked: int | None) -> list[str]:
    """A caveat per failed cell (its reason: the row has no figure) and per finished cell whose figure rests on
    fewer passing runs than the run asked for (`runs_asked`; None: one unit per cell, as datasize's)."""
    out = []
    for c in doc["results"]:
        if c.get("status") == "failed" or (c.get("status") not in ("ok", "pending", None) and c.get("error")):
            why = c.get("reason") or c.get("error") or c.get("status")
            out.append(f"**Failed cell** — {label(c)}: {why}. No figure in its row; a run that did not end cleanly "
                       "is never counted, even one that printed a result first.")
        elif c.get("status") == "ok" and runs_asked:
            n = sum(1 for r in c.get("runs") or [] if r.get("status") == "ok")
            if n < runs_asked:
                out.append(f"**Fewer runs than asked** — {label(c)}: its figure is the median of {n} of the "
                           f"{runs_asked} runs asked for.")
    return out


def partial_caveat(src: Any, label: Callable[[dict[str, Any]], str], planned: int, noun: str,
                   runs_asked: int | None) -> str:
    """An interrupted data run's caveat (the engines' one reads engine × precision cells): what finished, what
    did not and how far, and how to continue it."""
    d = src.doc
    by = f" by {d['interrupted_by']}" if d.get("interrupted_by") else ""
    done = [c for c in d["results"] if c.get("status") != "pending"]
    unfinished = []
    for c in d["results"]:
        if c in done:
            continue
        n = sum(1 for r in c.get("runs") or [] if r.get("status") == "ok")
        unfinished.append(label(c) + (f" ({n} of {runs_asked} runs)" if runs_asked else ""))
    run = f"kitctl run {src.benchmark} --resume"
    resume = f"`{run} {src.name}`" if src.name.endswith(".partial.json") else f"`{run}` on its `.partial.json`"
    text = f"**Partial result** — the artifact is `{src.state}`{by}: {len(done)} of {planned} {noun} finished"
    if unfinished:
        text += f"; unfinished: {'; '.join(unfinished)}"
    return text + f". An unfinished cell has no figure; continue with {resume}."
