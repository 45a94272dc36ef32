"""`kitctl data make`: the deterministic offline image corpus (trials/dataload/corpus.py) that datasize and
dataload read, made by the trial's interpreter (it needs numpy, pillow, scikit-image; the host does not)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from ..core import signals
from ..core.paths import kit_root
from ..errors import EXIT_INTERRUPTED, Exit, fail

# The corpus maker's own cap (trials/dataload/corpus.py: MAX_WORKERS_PER_CORE), checked here before it starts.
MAX_WORKERS_PER_CORE = 4
# trials/dataload/corpus.py: MAX_IMAGES. The maker plans every image in memory: a typo (1e20) would grow it until
# the OOM killer stepped in, so the count is checked here, with the disk it needs, before anything starts.
MAX_IMAGES = 10_000_000
# A corpus image's average size on disk: ~85 KB measured (40 to 1,000 images, seeds 0 and 1); rounded up, it
# tells whether the corpus can fit on the disk before hours are spent filling it.
BYTES_PER_IMAGE_ESTIMATE = 100_000

data_app = typer.Typer(no_args_is_help=True, help="Datasets for the data-loading benchmarks.")


@data_app.command("make")
def make(
    out: Path = typer.Option(Path("data/corpus"), help="A new folder for the corpus."),
    images: int = typer.Option(1000, help="Number of images (CI: a few hundred; measurements: 50,000 or more)."),
    classes: int = typer.Option(100, help="Class folders (image i is in class i mod classes)."),
    seed: int = typer.Option(0, help="The corpus is a pure function of (seed, image index)."),
    workers: Optional[int] = typer.Option(None, help="Processes (default: all cores)."),
    python: Optional[str] = typer.Option(None, help="Interpreter with numpy, pillow and scikit-image (default: this one)."),
) -> None:
    """Make a seeded image corpus from scikit-image's CC0/public-domain photographs (random crops, ImageNet-like
    sizes with a tail of large images, gain/noise jitter), with a manifest of sources, licences, sizes, bytes."""
    if images <= 0 or classes <= 0 or (workers is not None and workers <= 0):
        raise fail("--images, --classes and --workers must be > 0")
    cap = MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)
    if workers is not None and workers > cap:
        raise fail(f"--workers {workers} is more than {cap} ({MAX_WORKERS_PER_CORE} per core of this host's "
                   f"{os.cpu_count()}); more processes add memory, not speed")
    if images > MAX_IMAGES:
        raise fail(f"--images {images:,} is more than {MAX_IMAGES:,} (ten times ImageNet-1k's training set)")
    try:  # a path the system cannot take (a name over 255 bytes: ENAMETOOLONG) is an OSError from the checks
        if (out / "manifest.json").exists():
            raise fail(f"{out} already holds a corpus; choose a new folder")
        parent = out.expanduser().absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise fail(f"--out {out}: {parent} is not a writable folder")
        free = shutil.disk_usage(parent).free
    except OSError as exc:
        raise fail(f"--out {out}: {exc.strerror or exc}") from None
    need = images * BYTES_PER_IMAGE_ESTIMATE
    if need > free:
        raise fail(f"--images {images:,} needs about {need / 1e9:,.1f} GB (~{BYTES_PER_IMAGE_ESTIMATE // 1000} KB "
                   f"per image) and {parent} has {free / 1e9:,.1f} GB free")
    argv = [python or sys.executable, str(kit_root() / "trials" / "dataload" / "corpus.py"), "--out", str(out),
            "--images", str(images), "--classes", str(classes), "--seed", str(seed)]
    if workers:
        argv += ["--workers", str(workers)]
    from ..runtimes.local import _preexec

    # Its own session (a terminal's Ctrl-C reaches kitctl alone, which ends the make in order) and the trials'
    # parent-death signal: a `kill -9` of kitctl ends the maker, and its pool workers die with it (lifeline.py).
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", start_new_session=True, preexec_fn=_preexec(None))
    except OSError as exc:
        raise fail(f"--python {argv[0]}: cannot start it ({exc.strerror or exc})") from None
    try:
        out_text, err_text = proc.communicate()
    except signals.Interrupted as exc:
        _stop(proc)
        raise fail(f"data make interrupted ({exc}); nothing written at {out}", EXIT_INTERRUPTED) from None
    except BaseException:
        _stop(proc)
        raise
    if proc.returncode != 0:
        last = (err_text.strip().splitlines() or ["no message"])[-1]
        raise fail(f"data make failed: {last}")
    m = json.loads(out_text.strip().splitlines()[-1])
    typer.echo(f"{out}: {m['images']:,} images in {m['classes']} classes from {len(m['sources'])} licensed "
               f"photographs, {m['bytes'] / 1e6:,.1f} MB ({m['bytes_per_image'] / 1e3:,.1f} KB/image), long side "
               f"median {m['long_side_px']['median']:.0f} px, {m['long_side_px']['share_over_1000']:.1%} over 1,000 px; "
               f"{m['make_seconds']:.1f} s on {m['make_workers']} processes")


def _stop(proc: subprocess.Popen) -> None:
    """End the maker's whole session: SIGTERM first (it removes its half-written folder and kills its pool), then
    SIGKILL for whatever is left after 10 s. A second signal meanwhile changes nothing (kitctl is ending)."""
    signals.stop_interrupting()
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@data_app.command("verify")
def verify(
    path: Path = typer.Argument(..., help="A corpus (manifest.json) or a dataset folder (dataset.json)."),
) -> None:
    """Check every file of a corpus or a dataset against its record: present, of its recorded size and SHA-256 (the
    benchmarks check sizes before every read; this reads every byte). Exit 0 when all match, 1 when not."""
    from ..benchmarks.data.corpus import verify_corpus
    from ..benchmarks.data.datasets import verify_dataset
    from ..errors import EXIT_INCOMPLETE, Fail

    try:
        if (path / "manifest.json").is_file():
            what, why = "corpus", verify_corpus(path)
        elif (path / "dataset.json").is_file():
            what, why = "dataset", verify_dataset(path, None, hashes=True)
        else:
            raise Fail(f"{path}: neither a corpus (manifest.json) nor a dataset (dataset.json)")
    except Fail as exc:
        raise fail(exc) from None
    except OSError as exc:
        raise fail(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if why:
        raise fail(why, EXIT_INCOMPLETE)
    typer.echo(f"{path}: the {what}'s every file matches its recorded size and SHA-256")
