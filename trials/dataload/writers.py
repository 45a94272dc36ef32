"""Dataset writers: one corpus -> one loader's native format at one encoding and max side.

Formats: `folder` (ImageFolder: <class>/<i>.jpg, RAW as <i>.npy), `webdataset` (tar shards through
webdataset's ShardWriter), `ffcv` (.beton through ffcv's DatasetWriter). Encodings as in FFCV's size
table: jpeg50/jpeg90/jpeg100 (every image JPEG at that quality), raw (uint8 pixels), mix90 (FFCV's
`proportion` write mode: each image JPEG q90 with probability MIX_COMPRESS_PROBABILITY, else raw).

Every format gets the same pixels: the corpus image, downscaled (never upscaled) so its long side is at
most `side`, with area interpolation (PIL BOX; ffcv's own resize is cv2 INTER_AREA and is a no-op on
these pre-resized images). JPEG: PIL (folder, webdataset) and OpenCV (ffcv) both use libjpeg-turbo
with 4:2:0 chroma subsampling.

Sizes: `payload_bytes` = the encoded images alone (JPEG bytes or H*W*3 pixels; for ffcv the sum of
Reader.alloc_table['size']); `file_bytes` = the files on disk (ffcv pads every writer's allocations to
8 MiB pages; tar adds 512-byte headers and padding; .npy a header). ImageNet-equivalent = bytes per
image x 1,281,167.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

import corpus as corpus_mod
import lifeline

IMAGENET_TRAIN_IMAGES = 1_281_167
# Derived from FFCV's published size table (its Mix column matches ~0.75 at every side); not documented
# by FFCV, so every artifact records the value used.
MIX_COMPRESS_PROBABILITY = 0.75
ENCODINGS = {"jpeg50": ("jpg", 50), "jpeg90": ("jpg", 90), "jpeg100": ("jpg", 100), "mix90": ("proportion", 90),
             "raw": ("raw", None)}
FORMATS = ("folder", "webdataset", "ffcv")
SIDES = (256, 384, 512, 1600)
DATASET_INFO = "dataset.json"


def check(fmt: str, encoding: str, side: int) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r} (known: {', '.join(ENCODINGS)})")
    if side < 32:
        raise ValueError(f"max side must be >= 32 px (got {side})")


class UnreadableImage(ValueError):
    """A corpus image that cannot be opened or decoded (truncated, corrupt, not an image); names the file."""


class WriterDied(RuntimeError):
    """A worker process of ffcv's writer ended without finishing (killed, or crashed outside _Prepared)."""


def prepared(corpus: Path, entry: dict, side: int) -> np.ndarray:
    """The corpus image as HxWx3 uint8 with its long side at most `side` (area-downscaled)."""
    try:
        with Image.open(corpus / entry["file"]) as im:
            im = im.convert("RGB")
            w, h = im.size
            scale = side / max(w, h)
            if scale < 1.0:
                im = im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.BOX)
            return np.asarray(im, dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - PIL raises OSError, SyntaxError (broken PNG), ValueError, ...
        # One line naming the file: PIL's own message ("image file is truncated") does not say which.
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise UnreadableImage(f"corpus image {entry['file']} cannot be decoded ({text})") from exc


def compressed(seed: int, index: int, mode: str) -> bool:
    """Whether image `index` is stored as JPEG (mix: a seeded coin with MIX_COMPRESS_PROBABILITY)."""
    if mode == "jpg":
        return True
    if mode == "raw":
        return False
    return bool(np.random.default_rng([seed, index, 0x4D4958]).random() < MIX_COMPRESS_PROBABILITY)


def encode(pixels: np.ndarray, as_jpeg: bool, quality: int | None) -> tuple[bytes, str, int]:
    """(file bytes, extension, payload bytes) of one image for the folder and webdataset formats."""
    if as_jpeg:
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
        return data, "jpg", len(data)
    buf = io.BytesIO()
    np.save(buf, pixels, allow_pickle=False)
    return buf.getvalue(), "npy", pixels.size


_JOB: dict = {}


def _init_job(job: dict, parent: int | None = None) -> None:
    if parent is not None:  # a pool worker: it dies with the writer (a killed trial leaves none encoding on)
        lifeline.die_with_parent(parent)
        lifeline.worker_signals()
    _JOB.clear()
    _JOB.update(job)


def _encode_range(bounds: tuple[int, int]) -> list[tuple[int, int, bytes, str, int]]:
    corpus, files, side, mode, quality, seed = (_JOB[k] for k in ("corpus", "files", "side", "mode", "quality", "seed"))
    out = []
    for i in range(*bounds):
        e = files[i]
        data, ext, payload = encode(prepared(corpus, e, side), compressed(seed, i, mode), quality)
        out.append((i, e["label"], data, ext, payload))
    return out


def _encoded(corpus: Path, files: list[dict], side: int, mode: str, quality: int | None, seed: int, workers: int):
    """Yields (index, label, bytes, ext, payload) in index order, encoded by `workers` processes."""
    job = {"corpus": corpus, "files": files, "side": side, "mode": mode, "quality": quality, "seed": seed}
    n = len(files)
    chunk = max(1, min(256, math.ceil(n / (workers * 4))))
    ranges = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    if workers <= 1:
        _init_job(job)
        for r in ranges:
            yield from _encode_range(r)
        return
    pool = ProcessPoolExecutor(workers, initializer=_init_job, initargs=(job, os.getpid()))
    try:
        for part in pool.map(_encode_range, ranges):
            yield from part
    finally:  # a failure (an image that does not decode) ends the write now, not after every queued range
        pool.shutdown(wait=True, cancel_futures=True)


def shard_count(images: int) -> int:
    """WebDataset shards: at least 64 (so 16+ workers each get several), at most 1,000 images each."""
    return max(min(64, images), math.ceil(images / 1000))


def write(corpus: Path, manifest: dict, out: Path, fmt: str, encoding: str, side: int, limit: int | None = None,
          workers: int = 1, seed: int = 0, verify: bool = False) -> dict:
    """Write one dataset under `out` (must not exist); returns its size record (also saved as dataset.json).

    It is written into a hidden sibling folder and renamed to `out` once complete, so `out` exists only whole: a
    writer killed or failing midway (an interrupted run) leaves no half dataset that a later run would refuse or,
    worse, read. A sibling left by a killed writer is removed by the next write of the same dataset (one writer per
    dataset folder at a time)."""
    check(fmt, encoding, side)
    if out.exists():
        raise ValueError(f"{out} exists; a dataset is written into a new folder")
    files = manifest["files"][:limit] if limit else manifest["files"]
    # Checked up front, for every format alike (an image that exists but does not decode fails the write
    # as it is met: UnreadableImage, naming the file; for ffcv see _Prepared). Sizes always; hashes on `verify`.
    missing = [e["file"] for e in files if not (corpus / e["file"]).is_file()]
    if missing:
        raise ValueError(f"the corpus {corpus} lacks {len(missing)} of its manifest's images, e.g. {missing[0]}")
    for e in files:
        size = (corpus / e["file"]).stat().st_size
        if isinstance(e.get("bytes"), int) and size != e["bytes"]:
            raise ValueError(f"corpus image {corpus / e['file']} is {size:,} bytes, its manifest says {e['bytes']:,} "
                             "(changed or half-written since the corpus was made)")
        if verify and e.get("sha256") and hashlib.sha256((corpus / e["file"]).read_bytes()).hexdigest() != e["sha256"]:
            raise ValueError(f"corpus image {corpus / e['file']} does not match its manifest's SHA-256")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.writing-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = out.parent / f".{out.name}.writing-{os.getpid()}"
    try:
        info = _write(corpus, manifest, work, fmt, encoding, side, limit, workers, seed)
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return info


def _write(corpus: Path, manifest: dict, out: Path, fmt: str, encoding: str, side: int, limit: int | None,
           workers: int, seed: int) -> dict:
    files = manifest["files"][:limit] if limit else manifest["files"]
    mode, quality = ENCODINGS[encoding]
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    jpeg_images = None
    if fmt == "ffcv":
        payload, data_files, jpeg_images = _write_ffcv(corpus, files, out, side, mode, quality, workers)
    else:
        payload, data_files, jpeg_images = _write_files(corpus, files, out, fmt, side, mode, quality, seed, workers)
    seconds = time.perf_counter() - t0
    n = len(files)
    file_bytes = sum(p.stat().st_size for p in data_files)
    info = {
        "format": fmt, "encoding": encoding, "side": side, "images": n, "jpeg_quality": quality,
        "write_mode": mode, "compress_probability": MIX_COMPRESS_PROBABILITY if mode == "proportion" else None,
        "jpeg_images": jpeg_images, "payload_bytes": payload, "file_bytes": file_bytes, "files": len(data_files),
        "payload_bytes_per_image": payload / n, "file_bytes_per_image": file_bytes / n,
        "imagenet_equivalent_gb": {"payload": payload / n * IMAGENET_TRAIN_IMAGES / 1e9,
                                   "file": file_bytes / n * IMAGENET_TRAIN_IMAGES / 1e9},
        "write_seconds": seconds, "write_workers": workers,
        "corpus": {"images": manifest["images"], "seed": manifest["seed"], "bytes": manifest["bytes"],
                   "identity": corpus_mod.identity(manifest)},
        # Every data file with its size and SHA-256 (after the timed write): a reader checks the sizes before it
        # reads (a half-written or changed dataset is refused, naming the folder), `kitctl data verify` the hashes.
        "file_list": [{"path": str(p.relative_to(out)), "bytes": p.stat().st_size, "sha256": _sha256(p)}
                      for p in data_files],
    }
    (out / DATASET_INFO).write_text(json.dumps(info, indent=1))
    return info


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_files(root: Path, info: dict, hashes: bool = False) -> None:
    """The dataset at `root` is the one its dataset.json describes: every listed file there at its size (`hashes`:
    and SHA-256). ValueError naming the folder and the file otherwise. A dataset.json without a file list (written
    before the list) is not checked."""
    for f in info.get("file_list") or []:
        path = root / f["path"]
        size = path.stat().st_size if path.is_file() else None
        if size != f["bytes"]:
            raise ValueError(f"dataset {root}: {f['path']} is {'missing' if size is None else f'{size:,} bytes'}, "
                             f"its dataset.json says {f['bytes']:,} (half-written or changed); write it again")
        if hashes and _sha256(path) != f["sha256"]:
            raise ValueError(f"dataset {root}: {f['path']} does not match its SHA-256 in dataset.json")


def _write_files(corpus, files, out, fmt, side, mode, quality, seed, workers):
    payload, jpegs, data_files = 0, 0, []
    if fmt == "folder":
        for i, label, data, ext, size in _encoded(corpus, files, side, mode, quality, seed, workers):
            path = out / "train" / f"{label:04d}" / f"{i:08d}.{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            data_files.append(path)
            payload += size
            jpegs += ext == "jpg"
        return payload, data_files, jpegs
    import webdataset as wds

    per_shard = math.ceil(len(files) / shard_count(len(files)))
    # Shuffled once at write time (as webdataset's docs advise): a shard then holds every class.
    order = np.random.default_rng([seed, 0x574453]).permutation(len(files))
    reordered = [files[j] for j in order]
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=per_shard, maxsize=1 << 40, verbose=0) as sink:
        for k, label, data, ext, size in _encoded(corpus, reordered, side, mode, quality, seed, workers):
            sink.write({"__key__": f"{int(order[k]):08d}", ext: data, "cls": str(label).encode()})
            payload += size
            jpegs += ext == "jpg"
    data_files = sorted(out.glob("shard-*.tar"))
    return payload, data_files, jpegs


class _Prepared:
    """ffcv's DatasetWriter input: (pixels, label) per index, read in its worker processes.

    ffcv's parent polls a shared count of written samples until it reaches the total and never looks at its workers,
    so a worker that raises (an image that does not decode) dies and the parent waits for ever. So nothing raises
    here: the first failure's message goes into shared memory and from then on every worker gets a 1x1 placeholder
    for each remaining sample, without reading it; the write ends within moments (encoding placeholders costs
    microseconds), its workers exit normally, and `_write_ffcv` raises the message (the file is discarded)."""

    PLACEHOLDER = np.zeros((1, 1, 3), np.uint8)
    MESSAGE_BYTES = 1024

    def __init__(self, corpus: Path, files: list[dict], side: int):
        import ctypes
        import multiprocessing

        self.corpus, self.files, self.side = corpus, files, side
        # The first failure, UTF-8; empty: none. Inherited by ffcv's worker processes (a Process argument).
        self.failure = multiprocessing.Array(ctypes.c_char, self.MESSAGE_BYTES)
        self.kill_at = _fault_kill_at()
        self.parent = os.getpid()  # ffcv's worker processes die with the writer (armed at their first sample)
        self._armed: int | None = None

    def __len__(self) -> int:
        return len(self.files)

    def failed(self) -> str | None:
        return self.failure.value.decode(errors="replace") or None

    def __getitem__(self, i: int):
        if self._armed != os.getpid() and os.getpid() != self.parent:
            lifeline.die_with_parent(self.parent)
            self._armed = os.getpid()
        label = self.files[i]["label"]
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.failure.value:
            return self.PLACEHOLDER, label
        try:
            return prepared(self.corpus, self.files[i], self.side), label
        except Exception as exc:  # noqa: BLE001 - raising here would hang ffcv's parent (see the class)
            message = str(exc) if isinstance(exc, UnreadableImage) else f"{type(exc).__name__}: {exc}"
            with self.failure.get_lock():  # a recursive lock: .value takes it too
                if not self.failure.value:
                    self.failure.value = " ".join(message.split()).encode()[: self.MESSAGE_BYTES - 1]
            return self.PLACEHOLDER, label


class _WorkerGone(Exception):
    """Raised in the main thread by _WorkerWatch's signal: a worker of the write died."""


class _WorkerWatch:
    """ffcv's parent polls its count of written samples and never looks at its workers: one that dies without
    reaching _Prepared's handler (SIGKILL from the OOM killer, a crash inside ffcv's own code) leaves it waiting
    for ever. This thread watches the processes the write starts; the first to end with a non-zero exit code
    stops the wait: it raises _WorkerGone in the main thread, which _write_ffcv turns into WriterDied.

    By a signal of the watch's own (SIGUSR2, its handler installed for the write), not SIGINT: a process started
    with SIGINT ignored (under nohup, or a background job of a shell) has no SIGINT handler to simulate, and
    `interrupt_main()` then does nothing — the write waited for ever."""

    POLL_S = 0.05
    SIGNAL = signal.SIGUSR2

    def __init__(self, before: set) -> None:
        import threading

        self.before, self.seen, self.died = before, set(), None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ffcv-worker-watch", daemon=True)

    def __enter__(self) -> "_WorkerWatch":
        self._previous = signal.signal(self.SIGNAL, self._raise)  # the main thread's: _write_ffcv runs there
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._stop.set()
            self._thread.join()
        finally:
            signal.signal(self.SIGNAL, self._previous)

    @staticmethod
    def _raise(signum, frame) -> None:
        raise _WorkerGone()

    def _run(self) -> None:
        import _thread
        import multiprocessing

        while not self._stop.wait(self.POLL_S):
            # active_children() drops the ones that ended: keep every one seen, to read its exit code after
            self.seen |= set(multiprocessing.active_children()) - self.before
            for p in self.seen:
                if p.exitcode not in (None, 0):
                    self.died = f"pid {p.pid}, exit code {p.exitcode}"
                    if not self._stop.is_set():
                        _thread.interrupt_main(self.SIGNAL)
                    return


def _fault_kill_at() -> int | None:
    """Fault injection for the tests only: KITCTL_FAULT_KILL_WRITER_AT=N makes the ffcv worker that prepares
    sample N SIGKILL itself (a real kill of a real worker, as the OOM killer would)."""
    value = os.environ.get("KITCTL_FAULT_KILL_WRITER_AT")
    return int(value) if value else None


def _write_ffcv(corpus, files, out, side, mode, quality, workers):
    import multiprocessing
    from multiprocessing import shared_memory

    from ffcv.fields import IntField, RGBImageField
    from ffcv.reader import Reader
    from ffcv.writer import DatasetWriter

    path = out / "train.beton"
    image = RGBImageField(write_mode=mode, max_resolution=side, jpeg_quality=quality or 90,
                          compress_probability=MIX_COMPRESS_PROBABILITY)
    writer = DatasetWriter(str(path), {"image": image, "label": IntField()}, num_workers=max(1, workers))
    dataset = _Prepared(corpus, files, side)
    before = set(multiprocessing.active_children())
    watch = _WorkerWatch(before)
    try:
        with watch:
            writer.from_indexed_dataset(dataset, chunksize=64)
    except BaseException as exc:  # a signal, a dead worker (or a bug) midway: stop its workers, free its memory
        for p in set(multiprocessing.active_children()) - before:
            p.terminate()
            p.join(5)
        sm = getattr(writer, "metadata_sm", None)
        if isinstance(sm, shared_memory.SharedMemory):
            sm.close()
            sm.unlink()
        if watch.died and isinstance(exc, _WorkerGone):
            raise WriterDied(f"an ffcv writer worker died before the write finished ({watch.died}); "
                             "no dataset was written") from None
        raise
    # ffcv never joins its workers: reap them (they exit once they have handed over their allocations), so none
    # is left behind, not even as a zombie; one still alive after that is stopped.
    for p in set(multiprocessing.active_children()) - before:
        p.join(30)
        if p.is_alive():
            p.terminate()
            p.join(5)
    failure = dataset.failed()
    if failure:
        raise UnreadableImage(failure)
    reader = Reader(str(path))
    payload = int(reader.alloc_table["size"].sum())
    # ffcv's image metadata: mode 0 = JPEG, 1 = raw.
    jpegs = int((reader.metadata["f0"]["mode"] == 0).sum())
    return payload, [path], jpegs
