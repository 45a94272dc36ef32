"""How a loader's images/s is measured (docs/method.md, "Data loading"): the one function behind `dataload`'s
figure and train-e2e's loader-alone figure, so the two compare like with like.

One run: the loader is built (timed apart), then one warm-up epoch (worker spawn, pipeline build or JIT
compilation, first reads: its time to the first batch is the loader's start-up), then whole timed epochs until
the window rule holds. Before every epoch the source is prepared, untimed: `ram` warms every file into the page
cache, `cold` evicts every file; either is checked with mincore before a timed epoch. Every batch's arrival is
stamped, so the window's per-batch seconds are stored and its first and second half of batches compared (the
halves check of throughput's window).

A batch's seconds run from the previous batch's arrival (the epoch's start, for the first) to its own; the last
batch of an epoch also holds the time until the loader ends the epoch (a GPU loader waits there for its queued
work), so an epoch's batch seconds sum to its seconds.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

_COMMON = Path(__file__).resolve().parent.parent / "common"
if str(_COMMON) not in sys.path:  # imported by train_e2e or a tool, not only by trial.py (which adds it too)
    sys.path.insert(0, str(_COMMON))

import kittrial  # noqa: E402

# A resident fraction this far from the asked-for source makes the run an error, not a mislabelled figure.
RAM_MIN_RESIDENT, COLD_MAX_RESIDENT = 0.98, 0.05
# Timed epochs when the host gives no window rule (hosts before the rule: `--epochs`' old default).
FIXED_EPOCHS = 2
# Stored per-batch seconds are rounded to a microsecond (the clock's useful resolution here); the figures and
# the halves are computed from the unrounded times.
BATCH_SECONDS_DIGITS = 6

# What each figure of a measurement is; the result carries this beside the figures.
FIGURES = {
    "images_per_second": "steady rate: the timed window's images / its seconds (whole epochs after one warm-up "
                         "epoch; the source's preparation between epochs untimed); start-up is not in it",
    "startup_seconds": "the loader's start-up: from the warm-up epoch's start to its first batch (worker spawn, "
                       "pipeline build or compilation, first reads)",
    "warmup_seconds": "the whole warm-up epoch, start-up included; not in images_per_second",
    "build_seconds": "importing the loader's libraries and constructing the loader object, before the warm-up "
                     "epoch; not in images_per_second",
}


@dataclass(frozen=True)
class WindowRule:
    """Which epochs are timed. `fixed_epochs` N: exactly N (hosts before the rule). Otherwise the rule: the fewest
    whole epochs holding at least `min_images` images, lasting at least `min_seconds` and counting at least
    `min_epochs`, decided at each epoch's end."""

    min_images: int = 0
    min_seconds: float = 0.0
    min_epochs: int = 1
    fixed_epochs: int | None = None
    tolerance: float = kittrial.DEFAULT_STEADY_TOLERANCE

    @classmethod
    def of(cls, window_images: int | None, window_seconds: float | None, epochs: int | None,
           tolerance: float) -> "WindowRule":
        """From the flags: either window flag turns the rule on (then --epochs, if given, is a third minimum);
        without them --epochs N timed epochs (FIXED_EPOCHS when not given)."""
        if window_images is None and window_seconds is None:
            return cls(fixed_epochs=epochs or FIXED_EPOCHS, tolerance=tolerance)
        return cls(min_images=window_images or 0, min_seconds=window_seconds or 0.0, min_epochs=epochs or 1,
                   tolerance=tolerance)

    @property
    def by_rule(self) -> bool:
        return self.fixed_epochs is None

    def done(self, epochs: int, images: int, seconds: float) -> bool:
        if not self.by_rule:
            return epochs >= self.fixed_epochs
        return epochs >= self.min_epochs and images >= self.min_images and seconds >= self.min_seconds

    def text(self) -> str:
        if not self.by_rule:
            return f"fixed: {self.fixed_epochs} epoch{'s' if self.fixed_epochs > 1 else ''} after a warm-up epoch"
        parts = ([f"at least {self.min_images} images"] if self.min_images else []) + (
            [f"at least {self.min_seconds:g} s"] if self.min_seconds else []) + (
            [f"at least {self.min_epochs} epochs"] if self.min_epochs > 1 else [])
        return "whole epochs after a warm-up epoch, until " + " and ".join(parts or ["one epoch"])

    def to_json(self) -> dict:
        return {"rule": self.text(), "min_images": self.min_images if self.by_rule else None,
                "min_seconds": self.min_seconds if self.by_rule else None,
                "min_epochs": self.min_epochs if self.by_rule else None, "fixed_epochs": self.fixed_epochs,
                "tolerance": self.tolerance}


def check_batch(loader: str, x) -> list[int]:
    """The batch's shape, once it is known to be uint8 224x224 images (NCHW or NHWC)."""
    shape = [int(s) for s in x.shape]
    dtype = str(x.dtype)
    if "uint8" not in dtype or 224 not in shape[1:]:
        raise kittrial.TrialError(f"{loader}: batch {shape} {dtype}, expected uint8 224x224 images")
    return shape


@dataclass(frozen=True)
class Epoch:
    """One epoch's batches as they arrived: images per batch and seconds per batch (sum: the epoch's seconds)."""

    images: tuple[int, ...]
    seconds: tuple[float, ...]
    shape: tuple[int, ...]

    @property
    def total_images(self) -> int:
        return sum(self.images)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)

    def record(self, batch: int) -> dict:
        """The epoch as stored: per-batch seconds and, for the batches holding fewer than `batch` images, their
        [index, images] (a loader's last batch of an epoch, or of each worker)."""
        n, s = self.total_images, self.total_seconds
        return {"images": n, "seconds": s, "images_per_second": n / s if s > 0 else None,
                "first_batch_seconds": self.seconds[0], "batches": len(self.images),
                "batch_seconds": [round(x, BATCH_SECONDS_DIGITS) for x in self.seconds],
                "short_batches": [[i, k] for i, k in enumerate(self.images) if k != batch]}


def time_epoch(batches: Iterable[Any], loader: str, clock: Callable[[], float] = time.perf_counter) -> Epoch:
    """Iterate one epoch, stamping each batch's arrival; the first batch's shape and dtype are checked."""
    images: list[int] = []
    seconds: list[float] = []
    shape: list[int] = []
    prev = clock()
    for batch in batches:
        now = clock()
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if not shape:
            shape = check_batch(loader, x)
        images.append(int(x.shape[0]))
        seconds.append(now - prev)
        prev = now
    end = clock()
    if not images:
        raise kittrial.TrialError(f"{loader}: an epoch gave no batch")
    seconds[-1] += end - prev  # the epoch's end: what the loader still did after its last batch
    return Epoch(tuple(images), tuple(seconds), tuple(shape))


def halves(epochs: list[Epoch], tolerance: float) -> dict:
    """The window's batches in order, split into a first and a second half of batches (an odd middle batch in
    neither), as throughput's chunks are: each half's images/s, the change and whether it is within tolerance."""
    images = [k for e in epochs for k in e.images]
    seconds = [s for e in epochs for s in e.seconds]
    first, second = kittrial.halves(images, seconds, 1)
    change = (second - first) / first if first and second is not None else None
    return {"first_half_ips": first, "second_half_ips": second, "halves_change": change, "tolerance": tolerance,
            "steady": None if change is None else abs(change) <= tolerance}


# Readies the source before an epoch: (the resident fraction measured, or None where nothing is on a file
# system, its seconds).
Prepare = Callable[[], tuple[float | None, float]]


def measure(built, prepare: Prepare, rule: WindowRule, source: str, batch: int, expected_images: int, loader: str,
            clock: Callable[[], float] = time.perf_counter) -> dict:
    """The measurement of a built loader (loaders.Built): the warm-up epoch, then whole timed epochs until `rule`
    holds. `prepare()` readies the source before each epoch; `source` ram or cold: its resident fraction is checked
    before each timed epoch; `memory` (a pipeline holding its data in the process, tools/nvjpeg_pipeline.py): none."""
    warm_frac, warm_prep_s = prepare()
    warm = time_epoch(built.epoch(), loader, clock)
    if warm.total_images != expected_images:
        raise kittrial.TrialError(f"{loader}: the warm-up epoch gave {warm.total_images} images of {expected_images}")
    timed: list[Epoch] = []
    records: list[dict] = []
    images, seconds = 0, 0.0
    while not rule.done(len(timed), images, seconds):
        frac, prep_s = prepare()
        if source != "memory" and (frac < RAM_MIN_RESIDENT if source == "ram" else frac > COLD_MAX_RESIDENT):
            raise kittrial.TrialError(f"source {source}: {frac:.1%} of the dataset's pages were resident "
                                      "before the epoch (mincore); the asked-for source could not be made"
                                      + ("; posix_fadvise(DONTNEED) evicts only for the files' owner on recent "
                                         "kernels: run as the dataset's owner" if source == "cold" else ""))
        e = time_epoch(built.epoch(), loader, clock)
        timed.append(e)
        records.append({**e.record(batch), "resident_before": frac, "prepare_seconds": prep_s})
        images, seconds = images + e.total_images, seconds + e.total_seconds
    warm_record = {**warm.record(batch), "resident_before": warm_frac, "prepare_seconds": warm_prep_s}
    return {"startup_seconds": warm.seconds[0], "warmup_seconds": warm.total_seconds, "warmup_epoch": warm_record,
            "epochs": records, "images": images, "window_seconds": seconds,
            "images_per_second": images / seconds if seconds > 0 else None,
            "batch_shape": list(warm.shape),
            "window": {**rule.to_json(), "epochs": len(timed), "batches": sum(len(e.images) for e in timed),
                       "images": images, "seconds": seconds, **halves(timed, rule.tolerance)},
            "figures": FIGURES}


def source_preparer(built, files: list[Path], source: str) -> Prepare:
    """Before each epoch: a loader that reads ahead across epochs starts afresh (built.reset), then every file is
    warmed into the page cache (ram) or evicted (cold); returns the resident fraction left and the seconds."""
    import pagecache

    def prepare() -> tuple[float, float]:
        if built.reset is not None:
            built.reset()
        t0 = time.perf_counter()
        frac = pagecache.warm(files) if source == "ram" else pagecache.drop(files)
        return frac, time.perf_counter() - t0

    return prepare


def dataset_info(root: Path) -> dict:
    """The dataset's record, checked against the files there (sizes; docs/data-trust.md): a half-written, truncated
    or changed dataset is one line naming its folder, before any loader reads it."""
    import writers

    path = root / "dataset.json"
    if not path.is_file():
        raise kittrial.TrialError(f"{root}: no dataset.json (write the dataset with datasize --keep)")
    try:
        info = json.loads(path.read_text())
        if not isinstance(info, dict) or not {"format", "images"} <= set(info):
            raise ValueError("not a dataset record")
        writers.check_files(root, info)
    except (ValueError, OSError, KeyError, TypeError) as exc:
        text = " ".join(str(exc).split())
        raise kittrial.TrialError(text if str(root) in text else f"dataset {root}: {text}") from None
    return info


def measure_loader(loader: str, root: Path, batch: int, workers: int, source: str, seed: int,
                   rule: WindowRule) -> tuple[Any, dict]:
    """Build `loader` on the dataset at `root` and measure it (the source prepared before every epoch). Returns
    the built loader (left at an epoch's end, ready for more epochs) and the measurement, with its build time."""
    import loaders

    info = dataset_info(root)
    fmt = loaders.FORMAT_OF[loader]
    if info["format"] != fmt:
        raise kittrial.TrialError(f"{loader} reads {fmt} datasets; {root} is {info['format']}")
    t0 = time.perf_counter()
    built = loaders.build(loader, root, batch, workers, source, seed)
    build_s = time.perf_counter() - t0
    files = loaders.data_files(fmt, root)
    try:
        out = measure(built, source_preparer(built, files, source), rule, source, batch, info["images"], loader)
    except kittrial.TrialError as exc:  # "gave 20 images of 40": which dataset
        raise kittrial.TrialError(f"{exc} (dataset {root})") from None
    out["build_seconds"] = build_s
    return built, out
