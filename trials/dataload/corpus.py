"""A deterministic, offline image corpus with natural-image statistics (no ImageNet here, nothing to download).

Sources: the photographs that ship inside the scikit-image wheel, each with the licence its own
docstring states (public domain or CC0; files without a stated licence are skipped). Every corpus
image is a random crop of one source (random area and aspect ratio), resized to an ImageNet-like
size (long side log-normal around ~450 px with a tail of large images up to 2,400 px, so the 1,600 px
column of the size table means something), with gain/gamma/colour jitter, sensor-like noise and a
random flip, saved as JPEG at quality 92–96 (ImageNet's originals are camera JPEGs). Image i depends
only on (seed, i): a corpus is the same whatever the worker count, and a larger one extends a smaller.

    python3 trials/dataload/corpus.py --out DIR --images 1000 [--classes 10] [--seed 0] [--workers N]

Layout: DIR/train/<class>/<i>.jpg (ImageFolder) and DIR/manifest.json (sources, licences, and per file its
size and SHA-256). The corpus is written into a hidden sibling folder and renamed to DIR once whole, under a
lock (DIR's sibling .DIR.lock): two makes into one DIR cannot mix their files, and an interrupted make leaves
no DIR. Its pool workers die with it (lifeline.py); SIGINT, SIGTERM and SIGHUP end it and them.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import math
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

import lifeline

MANIFEST = "manifest.json"
CORPUS_VERSION = 1
# --workers above this many per core is refused: more processes than that only add memory (~100 MB each) and
# fork cost, never speed, and a typo (100000) would fork until the OOM killer steps in.
MAX_WORKERS_PER_CORE = 4
# --images above this is refused: the maker plans every chunk of images (and the manifest holds one entry per
# image) in memory, so a typo (1e20) grows without bound until the OOM killer steps in. Ten times ImageNet-1k's
# training set.
MAX_IMAGES = 10_000_000
SKIMAGE_PIP = "pip install scikit-image==0.26.0"

# scikit-image's bundled photographs and the licence each one's docstring gives (skimage 0.2x).
# Files whose docstring names no licence (moon, page, logo, text-free test charts) are left out.
SOURCES: dict[str, str] = {
    "astronaut.png": "public domain (NASA; 'No known copyright restrictions, released into the public domain')",
    "brick.png": "CC0 (CC0Textures Bricks25)",
    "camera.png": "CC0 (photographer Lav Varshney)",
    "chelsea.png": "CC0 (photographer Stefan van der Walt)",
    "coffee.png": "CC0 (photographer Rachel Michetti)",
    "coins.png": "no known copyright restrictions (Brooklyn Museum via Flickr Commons)",
    "grass.png": "CC0 (CC0Textures Grass001)",
    "gravel.png": "CC0 (CC0Textures Gravel04)",
    "horse.png": "CC0 (Andreas Preuss)",
    "hubble_deep_field.jpg": "public domain (NASA)",
    "ihc.png": "no known copyright restrictions (immunohistochemistry sample)",
    "microaneurysms.png": "CC0 (Andreas Maier)",
    "retina.jpg": "CC0 1.0 (Häggström, Mikael (2014), WikiJournal of Medicine)",
    "rocket.jpg": "public domain (SpaceX)",
    "clock_motion.png": "public domain (photographer Stefan van der Walt)",
}

# The long side of ImageNet train images has a median near 500 px and a long tail; this log-normal
# (median 450, sigma 0.45) with 4% drawn from a large-image tail (1,000–2,400 px) is the corpus's.
LONG_SIDE_MEDIAN, LONG_SIDE_SIGMA, LONG_SIDE_MIN, LONG_SIDE_MAX = 450.0, 0.45, 96, 2400
TAIL_P, TAIL_LOW, TAIL_HIGH = 0.04, 1000, 2400
NOISE_TILE = 256


SOURCES_ENV = "KITCTL_CORPUS_SOURCES"  # a folder with copies of these files (a machine without scikit-image)


def source_dir() -> Path:
    env = os.environ.get(SOURCES_ENV)
    if env:
        return Path(env)
    try:
        import skimage
    except ImportError:
        raise SystemExit(f"corpus: scikit-image is not installed (its photographs are the corpus's sources): "
                         f"{SKIMAGE_PIP}, or set {SOURCES_ENV} to a folder of copies") from None

    return Path(skimage.__file__).resolve().parent / "data"


def load_sources() -> list[tuple[str, np.ndarray]]:
    """(name, HxWx3 uint8) for every licensed source present in this scikit-image."""
    base = source_dir()
    out = []
    for name in sorted(SOURCES):
        path = base / name
        if not path.is_file():
            continue
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
        if min(arr.shape[:2]) >= 64:
            out.append((name, arr))
    if not out:
        raise SystemExit(f"corpus: no licensed scikit-image photograph in {base} (pip install scikit-image, or set "
                         f"{SOURCES_ENV} to a folder of copies: tools/build-ffcv-wheel.sh makes one)")
    return out


def _size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) of one image: ImageNet-like long side and aspect ratio (mostly landscape 4:3)."""
    if rng.random() < TAIL_P:
        long_side = int(rng.integers(TAIL_LOW, TAIL_HIGH + 1))
    else:
        long_side = int(np.clip(rng.lognormal(math.log(LONG_SIDE_MEDIAN), LONG_SIDE_SIGMA), LONG_SIDE_MIN,
                                LONG_SIDE_MAX))
    aspect = float(np.exp(rng.normal(math.log(4 / 3), 0.2)))  # width / height of a landscape image
    short = max(48, int(round(long_side / max(aspect, 1.0))))
    return (long_side, short) if rng.random() < 0.75 else (short, long_side)


def make_image(sources: list[tuple[str, np.ndarray]], seed: int, index: int) -> tuple[bytes, dict]:
    """JPEG bytes and the manifest entry of image `index`; a pure function of (seed, index)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
    k = int(rng.integers(len(sources)))
    name, src = sources[k]
    h, w = src.shape[:2]
    width, height = _size(rng)
    # A random crop with the output's aspect ratio, 15–100% of the source's area.
    area = rng.uniform(0.15, 1.0) * h * w
    ratio = width / height
    cw = int(min(w, round(math.sqrt(area * ratio))))
    ch = int(min(h, round(cw / ratio)))
    cw = max(16, min(w, int(round(ch * ratio))))
    y0 = int(rng.integers(0, h - ch + 1))
    x0 = int(rng.integers(0, w - cw + 1))
    crop = Image.fromarray(src[y0:y0 + ch, x0:x0 + cw])
    crop = crop.resize((width, height), Image.BICUBIC)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    # Exposure, white balance and gamma as one lookup table per channel (a pointwise map of the pixel value).
    gamma = float(np.exp(rng.normal(0.0, 0.15)))
    gain = rng.uniform(0.75, 1.25) * np.exp(rng.normal(0.0, 0.06, size=3))  # exposure and white balance
    levels = np.power(np.arange(256, dtype=np.float32) / 255.0, gamma)
    lut = np.clip(levels[None, :] * gain[:, None].astype(np.float32) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    pix = np.asarray(crop, dtype=np.uint8)
    pix = np.stack([lut[c][pix[..., c]] for c in range(3)], axis=-1)
    # Sensor-like noise: distinct pixels, real entropy for the codecs. One seeded 256x256 tile, repeated with a
    # random offset (a codec works on 8x8/16x16 blocks and never sees the repeat; drawing a normal per pixel of a
    # 2,400 px image would cost most of the corpus's time).
    sigma = float(rng.uniform(1.0, 7.5))
    tile = np.round(rng.standard_normal((NOISE_TILE, NOISE_TILE, 3), dtype=np.float32) * sigma).astype(np.int16)
    h2, w2 = pix.shape[:2]
    dy, dx = int(rng.integers(NOISE_TILE)), int(rng.integers(NOISE_TILE))
    reps = (-(-(h2 + dy) // NOISE_TILE), -(-(w2 + dx) // NOISE_TILE), 1)
    noise = np.tile(tile, reps)[dy:dy + h2, dx:dx + w2]
    out = Image.fromarray(np.clip(pix.astype(np.int16) + noise, 0, 255).astype(np.uint8))
    quality = int(rng.integers(92, 97))
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=quality)
    data = buf.getvalue()
    return data, {"source": name, "crop": [x0, y0, cw, ch], "width": width, "height": height,
                  "quality": quality, "bytes": len(data)}


_WORKER_SOURCES: list | None = None


def _init(parent: int | None = None) -> None:
    global _WORKER_SOURCES
    if parent is not None:  # a pool worker: it dies with the make, never finishes a corpus nobody waits for
        lifeline.die_with_parent(parent)
        lifeline.worker_signals()
    _WORKER_SOURCES = load_sources()


def _make_range(args: tuple[int, int, int, int, str]) -> list[dict]:
    seed, start, stop, classes, out = args
    entries = []
    for i in range(start, stop):
        data, entry = make_image(_WORKER_SOURCES, seed, i)
        label = i % classes
        rel = f"train/{label:04d}/{i:08d}.jpg"
        path = Path(out) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entries.append({"file": rel, "label": label, **entry, "sha256": hashlib.sha256(data).hexdigest()})
    return entries


def identity(manifest: dict) -> str:
    """The corpus's content identity: a hash of what its images are (kind, version, seed, count, classes, bytes,
    and every file's name, label, size and hash where the manifest has it), not of when or how fast it was made.
    A dataset written from a corpus records it; the host computes the same (kitctl/datarun.py: corpus_identity)
    and reuses a dataset only for the corpus it was written from."""
    files = [[f.get("file"), f.get("label"), f.get("bytes"), *([f["sha256"]] if "sha256" in f else [])]
             for f in manifest.get("files") or []]
    key = {k: manifest.get(k) for k in ("kind", "corpus_version", "seed", "images", "classes", "bytes")}
    text = json.dumps({**key, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def max_workers() -> int:
    return MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)


def _lock(out: Path):
    """The make's lock on `out` (an flock on the sibling .<name>.lock, released when the process ends however it
    ends); SystemExit when another make holds it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    f = open(out.parent / f".{out.name}.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise SystemExit(f"corpus: another `data make` is writing {out}; wait for it or choose another folder") \
            from None
    return f


def make(out: Path, images: int, classes: int = 10, seed: int = 0, workers: int | None = None) -> dict:
    """Write the corpus and its manifest; returns the manifest."""
    if images <= 0 or classes <= 0:
        raise SystemExit("corpus: --images and --classes must be > 0")
    if images > MAX_IMAGES:
        raise SystemExit(f"corpus: --images {images:,} is more than {MAX_IMAGES:,}")
    if workers is not None and not 0 < workers <= max_workers():
        raise SystemExit(f"corpus: --workers {workers} is outside 1..{max_workers()} ({MAX_WORKERS_PER_CORE} per core "
                         f"of this host's {os.cpu_count()})")
    lock = _lock(out)
    try:
        if (out / MANIFEST).exists():
            raise SystemExit(f"corpus: {out} already holds a corpus ({MANIFEST}); choose an empty folder")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise SystemExit(f"corpus: {out} exists and is not an empty folder; choose a new one")
        load_sources()  # a missing scikit-image is one line now, not a broken pool later
        for stale in out.parent.glob(f".{out.name}.making-*"):  # left by a killed make (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        work = out.parent / f".{out.name}.making-{os.getpid()}"
        try:
            manifest = _make(work, images, classes, seed, workers)
            os.rename(work, out)  # replaces an empty `out`; a non-empty one was refused above
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return manifest
    finally:
        lock.close()


def _make(out: Path, images: int, classes: int, seed: int, workers: int | None) -> dict:
    out.mkdir(parents=True)
    workers = max(1, workers or os.cpu_count() or 1)
    t0 = time.perf_counter()
    chunk = max(1, min(500, math.ceil(images / (workers * 4))))
    jobs = [(seed, s, min(images, s + chunk), classes, str(out)) for s in range(0, images, chunk)]
    entries: list[dict] = []
    if workers == 1:
        _init()
        for job in jobs:
            entries += _make_range(job)
    else:
        pool = ProcessPoolExecutor(workers, initializer=_init, initargs=(os.getpid(),))
        try:
            for part in pool.map(_make_range, jobs):
                entries += part
        except BaseException:  # a signal or a failure: the workers end now, not after their queued chunks
            for child in multiprocessing.active_children():
                child.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    seconds = time.perf_counter() - t0
    used = sorted({e["source"] for e in entries})
    sizes = np.array([max(e["width"], e["height"]) for e in entries])
    total = int(sum(e["bytes"] for e in entries))
    manifest = {
        "kind": "kitctl-image-corpus", "corpus_version": CORPUS_VERSION, "seed": seed, "images": images,
        "classes": classes, "layout": "train/<class>/<index>.jpg (ImageFolder)",
        "sources": [{"file": s, "licence": SOURCES[s],
                     "sha256": hashlib.sha256((source_dir() / s).read_bytes()).hexdigest()} for s in used],
        "scikit_image": _skimage_version(),
        "long_side_px": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max()),
                         "share_over_1000": float((sizes > 1000).mean())},
        "bytes": total, "bytes_per_image": total / images,
        "make_seconds": seconds, "make_workers": workers,
        "files": entries,
    }
    manifest["identity"] = identity(manifest)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _skimage_version() -> str:
    if os.environ.get(SOURCES_ENV):  # the copies say which scikit-image they came from
        v = source_dir() / "SKIMAGE_VERSION"
        return (v.read_text().strip() if v.is_file() else "unknown") + f" (copies in ${SOURCES_ENV})"
    import skimage

    return skimage.__version__


def read_manifest(corpus: Path) -> dict:
    path = Path(corpus) / MANIFEST
    if not path.is_file():
        raise SystemExit(f"{corpus}: not a corpus (no {MANIFEST}; make one with `kitctl data make`)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, OSError) as exc:  # truncated, not UTF-8, unreadable: one line naming the file
        raise ValueError(f"{path}: not a readable corpus manifest ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list) \
            or not isinstance(manifest.get("images"), int):
        raise ValueError(f"{path}: not a corpus manifest (no images/files); make the corpus again with `kitctl data make`")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="make a deterministic offline image corpus")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None)
    a = p.parse_args(argv)
    lifeline.stop_on_signals()
    try:
        m = make(a.out, a.images, a.classes, a.seed, a.workers)
    except (KeyboardInterrupt, lifeline.Stop) as exc:
        raise SystemExit(f"corpus: interrupted ({exc or 'SIGINT'}); nothing written at {a.out}") from None
    summary = {k: v for k, v in m.items() if k != "files"}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
