"""The loaders, one pipeline: decode -> RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) -> random
horizontal flip -> a uint8 batch. Each loader is built once per run and iterated epoch after epoch.

| loader | reads | decode | crop + resize (where they differ) | workers are |
| --- | --- | --- | --- | --- |
| pytorch-dataloader | folder (ImageFolder) | PIL (libjpeg-turbo) | torchvision RandomResizedCrop on PIL: bilinear, antialiased | DataLoader processes |
| webdataset | tar shards | PIL | the same torchvision transform | DataLoader processes (shards split by worker) |
| ffcv | .beton | libturbojpeg (ffcv's C part) | ffcv's RandomResizedCropRGBImageDecoder: cv2 INTER_AREA | ffcv threads (numba, nogil) |
| pytorch-nvjpeg | folder | nvJPEG on the GPU (torchvision.io.decode_jpeg, batched), on a CUDA stream of the loader's own | on the GPU, batched: bilinear antialiased (torch's weights, as matrix products) | DataLoader processes read bytes (raw: parse .npy) |
| dali-cpu | folder (JPEG only) | DALI's CPU decoder, crop fused into the decode (decoders.image_random_crop) | fn.resize (linear, antialiased) | DALI threads |
| dali-gpu | folder (JPEG only) | DALI `mixed` decoder (nvJPEG), crop fused | fn.resize on the GPU | DALI threads + the GPU |

Without torchvision (this CI host has only a CPU torch and no CPU torchvision wheel) the folder and
webdataset loaders use the kit's own copy of torchvision's RandomResizedCrop.get_params and the same
PIL bilinear resize (what torchvision does on a PIL image); results record which one ran.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from PIL import Image

import lifeline

CROP = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CPU_LOADERS = ("pytorch-dataloader", "webdataset", "ffcv", "dali-cpu")
GPU_LOADERS = ("pytorch-nvjpeg", "dali-gpu")
LOADERS = CPU_LOADERS + GPU_LOADERS
# Which dataset format each loader reads.
FORMAT_OF = {"pytorch-dataloader": "folder", "webdataset": "webdataset", "ffcv": "ffcv", "pytorch-nvjpeg": "folder",
             "dali-cpu": "folder", "dali-gpu": "folder"}


def crop_params(rng: random.Random, width: int, height: int) -> tuple[int, int, int, int]:
    """(top, left, h, w): torchvision's RandomResizedCrop.get_params, same algorithm and fallback."""
    area = height * width
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(RATIO):
        w, h = width, int(round(width / min(RATIO)))
    elif in_ratio > max(RATIO):
        h, w = height, int(round(height * max(RATIO)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class KitTransform:
    """torchvision's RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor, without torchvision."""

    impl = "kit (torchvision's RandomResizedCrop algorithm; PIL bilinear resize)"

    def __init__(self) -> None:
        self.rng = random.Random()

    def __call__(self, img: Image.Image):
        import torch

        top, left, h, w = crop_params(self.rng, *img.size)
        img = img.resize((CROP, CROP), Image.BILINEAR, box=(left, top, left + w, top + h))
        if self.rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)


def _worker_seed(worker_id: int, parent: int | None = None) -> None:
    """A torch loader worker's start: it dies with the trial (torch's own watchdog notices a dead parent only
    seconds later), and its Python RNG is seeded from torch's per-worker seed."""
    import torch

    if parent is not None:
        lifeline.die_with_parent(parent)

    random.seed(torch.initial_seed() % (1 << 32))


def transform() -> tuple[Callable[[Image.Image], Any], str]:
    try:
        import torchvision
        from torchvision import transforms as T
    except Exception:  # noqa: BLE001 - no usable torchvision here: the kit's equivalent
        return KitTransform(), KitTransform.impl
    tf = T.Compose([T.RandomResizedCrop(CROP, scale=SCALE, ratio=RATIO, antialias=True), T.RandomHorizontalFlip(),
                    T.PILToTensor()])
    return tf, f"torchvision {torchvision.__version__} transforms"


def open_image(path: str) -> Image.Image:
    if path.endswith(".npy"):
        return Image.fromarray(np.load(path))
    with Image.open(path) as im:
        return im.convert("RGB")


def folder_samples(root: Path) -> list[tuple[str, int]]:
    train = root / "train"
    classes = sorted(d.name for d in train.iterdir() if d.is_dir())
    return [(str(p), k) for k, c in enumerate(classes) for p in sorted((train / c).iterdir())
            if p.suffix in (".jpg", ".npy")]


def data_files(fmt: str, root: Path) -> list[Path]:
    """Every file a loader of this format reads (what the source warms or drops)."""
    if fmt == "folder":
        return [Path(p) for p, _ in folder_samples(root)]
    if fmt == "webdataset":
        return sorted(root.glob("shard-*.tar"))
    return [root / "train.beton"]


class Built:
    """A loader ready to iterate: epoch() yields uint8 batches (B, 224, 224, 3 or B, 3, 224, 224)."""

    def __init__(self, epoch: Callable[[], Iterator[Any]], impl: str, layout: str, notes: str = "",
                 reset: Callable[[], None] | None = None, check: Callable[[], dict] | None = None):
        self.epoch, self.impl, self.layout, self.notes = epoch, impl, layout, notes
        # Called before the source is prepared for an epoch (untimed): a loader that reads ahead across epochs
        # (DALI) starts afresh, so nothing it prefetched survives a cache drop.
        self.reset = reset
        # An untimed self-check after the measurement (pytorch-nvjpeg: its GPU decode against a CPU decode).
        self.check = check


def finish(it: Any, timeout_s: float = 60.0) -> None:
    """Stop an epoch's iterator left before its end, and wait for its threads and worker processes. A thread
    still inside a loader when the interpreter finalises (ffcv's epoch thread in numba code, a prefetch thread in
    torch) aborts the process ("terminate called without an active exception", exit -6) after the result line."""
    shutdown = getattr(it, "_shutdown_workers", None)  # torch DataLoader's multi-process iterator
    if callable(shutdown):
        shutdown()
    terminate = getattr(it, "terminate_event", None)  # ffcv's EpochIterator: it checks the event between batches
    if terminate is not None:
        terminate.set()
    if isinstance(it, threading.Thread):
        # Its put() into a full queue times out every 0.5 s and then sees the event; only the end-of-epoch put
        # blocks for good, so the queue is emptied only when the thread is still there a second later.
        waited = 0.0
        while it.is_alive() and waited < timeout_s:
            it.join(timeout=0.5)
            waited += 0.5
            queue = getattr(it, "output_queue", None)
            if it.is_alive() and waited % 1.0 == 0 and queue is not None:
                with contextlib.suppress(Exception):  # queue.Empty: it took the last one itself
                    while True:
                        queue.get_nowait()
    close = getattr(it, "close", None)  # ffcv releases its memory context; a generator runs its finally blocks
    if callable(close):
        close()


def _folder_dataset(root: Path, tf):
    import torch.utils.data

    try:
        from torchvision.datasets import ImageFolder

        return ImageFolder(str(root / "train"), transform=tf, loader=open_image,
                           is_valid_file=lambda p: p.endswith((".jpg", ".npy"))), "torchvision ImageFolder"
    except Exception:  # noqa: BLE001
        pass
    samples = folder_samples(root)

    class Folder(torch.utils.data.Dataset):
        def __len__(self):
            return len(samples)

        def __getitem__(self, i):
            path, label = samples[i]
            return tf(open_image(path)), label

    return Folder(), "kit ImageFolder equivalent"


def build(loader: str, root: Path, batch: int, workers: int, source: str, seed: int) -> Built:
    if loader == "pytorch-dataloader":
        return _torch_folder(root, batch, workers, seed)
    if loader == "webdataset":
        return _webdataset(root, batch, workers, seed)
    if loader == "ffcv":
        return _ffcv(root, batch, workers, source, seed)
    if loader == "pytorch-nvjpeg":
        return _nvjpeg(root, batch, workers, seed)
    if loader in ("dali-cpu", "dali-gpu"):
        return _dali(root, batch, workers, seed, source, gpu=loader == "dali-gpu")
    raise ValueError(f"unknown loader {loader!r} (known: {', '.join(LOADERS)})")


def _torch_folder(root, batch, workers, seed):
    import torch
    from torch.utils.data import DataLoader

    tf, tf_impl = transform()
    ds, ds_impl = _folder_dataset(root, tf)
    g = torch.Generator().manual_seed(seed)
    dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=workers > 0,
                    worker_init_fn=functools.partial(_worker_seed, parent=os.getpid()), generator=g)
    return Built(lambda: iter(dl), f"{ds_impl}; {tf_impl}; torch.utils.data.DataLoader", "NCHW")


def _webdataset(root, batch, workers, seed):
    import webdataset as wds

    tf, tf_impl = transform()
    urls = [str(p) for p in sorted(root.glob("shard-*.tar"))]
    if workers > len(urls):
        raise ValueError(f"{len(urls)} shards for {workers} workers: webdataset splits shards by worker")

    def to_image(x):
        return x if isinstance(x, Image.Image) else Image.fromarray(x)

    ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, workersplitter=wds.split_by_worker,
                         nodesplitter=wds.single_node_only, empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg;npy", "cls").map_tuple(lambda x: tf(to_image(x)), int)
          .batched(batch, partial=True))
    dl = wds.WebLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0,
                       worker_init_fn=functools.partial(_worker_seed, parent=os.getpid()))
    return Built(lambda: iter(dl), f"webdataset {wds.__version__} WebDataset+WebLoader; {tf_impl}", "NCHW",
                 "batched in each worker (a worker's last batch may be partial); shard shuffle + 1,000-sample buffer")


def _ffcv(root, batch, workers, source, seed):
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip

    # RAM: the whole file mmapped (os_cache=True), fully random order. Cold storage: FFCV's own advice for
    # data that is not in RAM, os_cache=False (its process cache reads pages itself) with QUASI_RANDOM order.
    ram = source == "ram"
    order = OrderOption.RANDOM if ram else OrderOption.QUASI_RANDOM
    ld = Loader(str(root / "train.beton"), batch_size=batch, num_workers=workers, order=order, os_cache=ram,
                drop_last=False, seed=seed,
                pipelines={"image": [RandomResizedCropRGBImageDecoder((CROP, CROP), scale=SCALE, ratio=RATIO),
                                     RandomHorizontalFlip()],
                           "label": [IntDecoder()]})
    return Built(lambda: iter(ld), f"ffcv Loader (order {order.name}, os_cache={ram}); "
                 "RandomResizedCropRGBImageDecoder (cv2 INTER_AREA) + RandomHorizontalFlip", "NHWC")


# How many batches the nvJPEG loader's GPU work may lag behind its host thread before the thread waits (for the
# oldest one's event): a bound on the queued work and on the memory it holds, not a barrier per decode.
NVJPEG_INFLIGHT = 3
# The batched resize pads a group of crops to the largest one; a group holds at most this many padded float
# elements (256 MiB), so a batch of large images is resized in several groups.
RESIZE_BUDGET = 1 << 26


def aa_weights(lengths, out: int, pad: int):
    """(B, out, pad) float32 matrices: row i of image b holds the weights over input pixels 0..pad-1 of output
    pixel i when resizing lengths[b] pixels to `out`, as torch's bilinear antialiased interpolation computes them
    (align_corners False: centre scale*(i+0.5), a triangle filter stretched by the scale when it shrinks,
    weights normalised over the pixels inside the input; pixels at or past lengths[b] weigh nothing)."""
    import torch

    dev = lengths.device
    scale = lengths / out
    support = scale.clamp(min=1.0)
    center = scale[:, None] * (torch.arange(out, device=dev, dtype=torch.float32) + 0.5)
    j = torch.arange(pad, device=dev, dtype=torch.float32)
    w = (1 - ((j + 0.5)[None, None, :] - center[:, :, None]).abs() / support[:, None, None]).clamp_(min=0)
    w = w * (j[None, None, :] < lengths[:, None, None])
    return w / w.sum(-1, keepdim=True)


def resize_groups(boxes: list[tuple[int, int, int, int]], budget: int = RESIZE_BUDGET) -> list[tuple[int, int]]:
    """Consecutive [start, end) ranges of crops whose padded float buffer (n x 3 x max h x max w) fits `budget`
    (always at least one crop): contiguous slices of the output, so no index tensor has to reach the device."""
    groups, start, hmax, wmax = [], 0, 0, 0
    for i, (_, _, h, w) in enumerate(boxes):
        nh, nw = max(hmax, h), max(wmax, w)
        if i > start and (i - start + 1) * 3 * nh * nw > budget:
            groups.append((start, i))
            start, nh, nw = i, h, w
        hmax, wmax = nh, nw
    if boxes:
        groups.append((start, len(boxes)))
    return groups


def resized_crops(images: list, boxes: list[tuple[int, int, int, int]], flips: list[bool], size: int = CROP,
                  budget: int = RESIZE_BUDGET):
    """RandomResizedCrop's crop + bilinear antialiased resize + horizontal flip of a whole batch in a few kernels
    (uint8 CHW images of any sizes, on any device; boxes (top, left, h, w)), instead of ~7 kernels per image: each
    group's crops are copied into one padded buffer, then resized as two batched matrix products (rows, then
    columns: the resize is separable), the flip folded into the column weights. The same weights as
    torch.nn.functional.interpolate(mode="bilinear", antialias=True); pixels may differ by one level where float
    sums round differently (or where the process lets matmuls run in TF32). Nothing here waits for the device:
    the per-image parameters reach it from pinned memory, asynchronously."""
    import torch

    dev = images[0].device
    n = len(images)
    out = torch.empty((n, 3, size, size), dtype=torch.uint8, device=dev)
    params = torch.tensor([[h, w, f] for (_, _, h, w), f in zip(boxes, flips, strict=True)], dtype=torch.float32)
    if dev.type == "cuda":
        params = params.pin_memory()
    params = params.to(dev, non_blocking=True)
    for a, b in resize_groups(boxes, budget):
        hmax = max(h for _, _, h, _ in boxes[a:b])
        wmax = max(w for _, _, _, w in boxes[a:b])
        g = b - a
        buf = torch.empty((g, 3, hmax, wmax), dtype=torch.uint8, device=dev)  # padding: weighed 0, finite
        for k in range(g):
            top, left, h, w = boxes[a + k]
            buf[k, :, :h, :w].copy_(images[a + k][:, top:top + h, left:left + w])
        ry = aa_weights(params[a:b, 0], size, hmax)
        rx = aa_weights(params[a:b, 1], size, wmax)
        rx = torch.where(params[a:b, 2, None, None] > 0, rx.flip(1), rx)  # a flipped image's columns reversed
        t = torch.bmm(buf.float().view(g, 3 * hmax, wmax), rx.transpose(1, 2))  # (g, 3*hmax, size): rows resized
        t = t.view(g, 3, hmax, size).transpose(2, 3).reshape(g, 3 * size, hmax)
        y = torch.bmm(t, ry.transpose(1, 2)).view(g, 3, size, size).transpose(2, 3)  # columns, then back to CHW
        out[a:b] = y.round_().clamp_(0, 255)
    return out


class _NvjpegItems:
    """The nvJPEG loader's dataset: workers read a JPEG's bytes, or parse a raw .npy into its HWC pixels."""

    def __init__(self, samples: list[tuple[str, int]]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        if path.endswith(".npy"):
            return "raw", np.load(path), label
        return "jpeg", np.fromfile(path, dtype=np.uint8), label


def nvjpeg_pack(items: list) -> dict:
    """A worker's batch for the nvJPEG loader: all JPEG bytes in one buffer and all raw pixels in another (one
    pinned copy each, one host-to-device copy for the raw ones), with each item's place in the batch."""
    import torch

    jpeg = [i for i, (kind, _, _) in enumerate(items) if kind == "jpeg"]
    raw = [i for i, (kind, _, _) in enumerate(items) if kind == "raw"]

    def flat(idx):
        return torch.from_numpy(np.concatenate([items[i][1].reshape(-1) for i in idx])) if idx else None

    jlen = [int(items[i][1].size) for i in jpeg]
    rlen = [int(items[i][1].size) for i in raw]
    return {"jpeg": flat(jpeg), "jpeg_index": jpeg, "jpeg_spans": list(zip(np.cumsum([0, *jlen[:-1]]).tolist(), jlen)),
            "raw": flat(raw), "raw_index": raw, "raw_spans": list(zip(np.cumsum([0, *rlen[:-1]]).tolist(), rlen)),
            "raw_shapes": [tuple(int(d) for d in items[i][1].shape) for i in raw],
            "labels": torch.tensor([label for _, _, label in items], dtype=torch.int64)}


def _nvjpeg(root, batch, workers, seed):
    """nvJPEG decode + crop on the GPU, ordered by CUDA events, with no host barrier per decode.

    Why two streams of its own (torchvision 0.26, decode_jpegs_cuda.cpp): decode_jpeg(device="cuda") allocates its
    outputs with torch::empty on the caller's current stream, decodes on a private stream without waiting for the
    caller's stream (nvJPEG's hardware engine writes before work queued ahead of it anyway: pytorch/vision#9606,
    meta-pytorch/torchcodec#1634), synchronises that private stream, and makes the caller's stream wait on it.
    The caching allocator hands a block freed on a stream to the next allocation on that stream at once, so a
    decode on a stream with queued work can be handed memory that work still reads. Here the decode runs on
    `decode_stream`, where nothing else is ever allocated or queued; its outputs are used only on `crop_stream`
    (which waits on the decode stream's event) and are record_stream'ed there, so the allocator gives their blocks
    back to the decoder only once the crops that read them have run: no host wait for it. The crop + resize +
    flip of a batch run batched on `crop_stream` (resized_crops); the consumer's stream waits on an event per
    batch, and the batch is record_stream'ed so its block is not reused before the consumer's work on it has run.
    The host thread waits only when the GPU lags NVJPEG_INFLIGHT batches behind (a bound on queued work and
    memory), and at an epoch's end. The decode itself returns when it is done: torchvision synchronises its own
    stream; what overlaps it is the previous batch's crop on the GPU and the workers' reads."""
    import torch

    if not torch.cuda.is_available():  # said first: a CPU-only host may have no torchvision either
        raise RuntimeError("pytorch-nvjpeg decodes on the GPU: no CUDA device here")
    import collections

    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.io import ImageReadMode, decode_jpeg

    samples = folder_samples(root)
    dl = DataLoader(_NvjpegItems(samples), batch_size=batch, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0, collate_fn=nvjpeg_pack, pin_memory=True,
                    worker_init_fn=functools.partial(lifeline.torch_worker, parent=os.getpid()),
                    generator=torch.Generator().manual_seed(seed))
    rng = random.Random(seed)
    dev = torch.device("cuda")
    decode_stream, crop_stream = torch.cuda.Stream(), torch.cuda.Stream()
    consumer = torch.cuda.current_stream()  # where the batches are used: the thread that builds the loader
    inflight: collections.deque = collections.deque()

    def decode(jpegs: list) -> list:
        """torchvision's batched nvJPEG decode on the decode stream; its outputs are the crop stream's to read."""
        with torch.cuda.stream(decode_stream):
            images = decode_jpeg(jpegs, device=dev, mode=ImageReadMode.RGB)
        crop_stream.wait_stream(decode_stream)
        for img in images:
            img.record_stream(crop_stream)
        return images

    def gpu_batch(packed: dict):
        while len(inflight) >= NVJPEG_INFLIGHT:
            inflight.popleft().synchronize()
        n = len(packed["labels"])
        images: list = [None] * n
        if packed["jpeg_index"]:
            buf = packed["jpeg"]
            for i, img in zip(packed["jpeg_index"], decode([buf[o:o + k] for o, k in packed["jpeg_spans"]]),
                              strict=True):
                images[i] = img
        with torch.cuda.stream(crop_stream):
            if packed["raw_index"]:
                raw = packed["raw"].to(dev, non_blocking=True)  # pinned by the DataLoader: asynchronous
                for i, (o, k), (h, w, c) in zip(packed["raw_index"], packed["raw_spans"], packed["raw_shapes"]):
                    images[i] = raw[o:o + k].view(h, w, c).permute(2, 0, 1)
            boxes, flips = [], []
            for img in images:
                boxes.append(crop_params(rng, img.shape[2], img.shape[1]))
                flips.append(rng.random() < 0.5)
            out = resized_crops(images, boxes, flips)
            done = torch.cuda.Event()
            done.record(crop_stream)
        inflight.append(done)
        consumer.wait_event(done)  # the consumer's later work on the batch runs after the loader's
        out.record_stream(consumer)  # its block stays the consumer's until that work has run
        return out, packed["labels"]

    def epoch():
        for packed in dl:
            yield gpu_batch(packed)
        crop_stream.synchronize()  # the epoch's GPU work is inside its time (dataload), nothing else waits
        inflight.clear()

    def check() -> dict:
        return nvjpeg_check([p for p, _ in samples if p.endswith(".jpg")], decode, dev)

    return Built(epoch, f"torchvision {torchvision.__version__} decode_jpeg(list, device=cuda, mode=RGB) (nvJPEG, "
                 "batched) on a decode stream of the loader's own; crop + bilinear antialiased resize + flip batched "
                 "on the GPU (two matrix products per group of crops) on a crop stream that waits on the decode by "
                 "event; decoded images record_stream'ed to the crop stream, no host barrier per decode; at most "
                 f"{NVJPEG_INFLIGHT} batches of GPU work queued; DataLoader workers read bytes (raw: parse .npy), "
                 "pinned; the consumer's stream waits on an event per batch, record_stream on the batch; labels "
                 "passed on", "NCHW", check=check)


CHECK_IMAGES = 16
PROBE_ITERATIONS = 20
PROBE_SLEEP_CYCLES = 100_000_000  # torch.cuda._sleep: ~50 ms of queued work at ~2 GHz


def nvjpeg_check(jpegs: list[str], decode, dev) -> dict:
    """Untimed, after the timed phases, on the GPU: (1) the loader's GPU decode of a few files against
    libjpeg-turbo on the CPU (nvJPEG and libjpeg-turbo differ by a few levels; a racing write shows as large
    differences); (2) the hazard probe of pytorch/vision#9606: tensors freed while reductions over them are still
    queued on the current stream, then a decode, then the reductions checked. `caller_stream` is a plain
    decode_jpeg on the current stream (what this loader did before), `loader` the loader's own decode path."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    out: dict = {"images": 0, "max_abs_diff": None, "mean_abs_diff": None, "shape_mismatches": 0, "probe": None,
                 "error": None}
    try:
        datas = [torch.from_numpy(np.fromfile(p, dtype=np.uint8)) for p in jpegs[:CHECK_IMAGES]]
        if not datas:
            out["error"] = "no JPEG files in the dataset"
            return out
        gpu = decode(datas)
        torch.cuda.synchronize()  # decoded on the loader's stream, copied on this thread's
        out.update(decode_diff([g.cpu() for g in gpu], [decode_jpeg(d, mode=ImageReadMode.RGB) for d in datas]))
        del gpu
        out["probe"] = {mode: hazard_probe(datas[0], fn, dev) for mode, fn in
                        (("caller_stream", lambda ds: decode_jpeg(ds, device=dev, mode=ImageReadMode.RGB)),
                         ("loader", decode))}
        out["probe"]["iterations"] = PROBE_ITERATIONS
    except Exception as exc:  # noqa: BLE001 - recorded: the check is a diagnosis, the run's figures stand
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def decode_diff(gpu: list, cpu: list) -> dict:
    """Two decodes of the same images (uint8 tensors, CHW) compared pixel by pixel: the largest and the mean
    absolute difference over the images of equal shape, and how many differ in shape."""
    worst, total, n, mismatches = 0, 0.0, 0, 0
    for g, c in zip(gpu, cpu, strict=True):
        if tuple(g.shape) != tuple(c.shape):
            mismatches += 1
            continue
        d = (g.int() - c.int()).abs()
        worst, total, n = max(worst, int(d.max())), total + float(d.double().sum()), n + d.numel()
    return {"images": len(gpu), "max_abs_diff": worst if n else None, "mean_abs_diff": total / n if n else None,
            "shape_mismatches": mismatches}


def hazard_probe(data, decode, dev, tensors: int = 4) -> dict:
    """How often `decode` wrote into memory that work queued on the current stream was still to read."""
    import torch

    c, h, w = decode([data])[0].shape
    n = int(c * h * w)  # the decode's own output size: the allocator's best fit is one of the freed tensors
    sleep = getattr(torch.cuda, "_sleep", None)
    handed, corrupted = 0, 0
    for _ in range(PROBE_ITERATIONS):
        ts = [torch.full((n,), 7, dtype=torch.uint8, device=dev) for _ in range(tensors)]
        torch.cuda.synchronize()
        if sleep is not None:
            sleep(PROBE_SLEEP_CYCLES)  # the reductions below run only after this
        sums = [t.sum(dtype=torch.int64) for t in ts]
        ptrs = {t.data_ptr() for t in ts}
        del ts  # freed while the reductions over them are still queued
        img = decode([data])[0]
        handed += img.data_ptr() in ptrs
        torch.cuda.synchronize()
        corrupted += any(int(s) != 7 * n for s in sums)
        del img
    return {"handed_a_freed_block": handed, "corrupted": corrupted}


class _Shape:
    """What the trial checks of a batch that stays on the GPU (DALI's TensorGPU): its shape and dtype."""

    def __init__(self, shape, dtype: str):
        self.shape, self.dtype = tuple(int(x) for x in shape), dtype


def _dali(root, batch, workers, seed, source, gpu: bool):
    """DALI's canonical ResNet-50 pipeline: file reader -> decode with the random crop fused in -> resize 224 ->
    flip. dali-cpu needs no GPU (device_id=None); dali-gpu decodes with nvJPEG (`mixed`) and resizes on the GPU."""
    from nvidia.dali import fn, pipeline_def, types
    import nvidia.dali as dali

    if any(p.endswith(".npy") for p, _ in folder_samples(root)):
        raise ValueError("DALI's file reader + image decoder read encoded images: raw/mix datasets are not for DALI")
    decode_dev, dev = ("mixed", "gpu") if gpu else ("cpu", "cpu")

    @pipeline_def(batch_size=batch, num_threads=workers, device_id=0 if gpu else None, prefetch_queue_depth=2)
    def pipe():
        # Cold: plain reads (DALI's default mmap keeps the files mapped, and mapped pages cannot be dropped).
        jpegs, labels = fn.readers.file(file_root=str(root / "train"), random_shuffle=True, name="Reader",
                                        dont_use_mmap=source == "cold")
        images = fn.decoders.image_random_crop(jpegs, device=decode_dev, output_type=types.RGB,
                                               random_area=list(SCALE), random_aspect_ratio=list(RATIO),
                                               num_attempts=10)
        images = fn.resize(images, device=dev, resize_x=CROP, resize_y=CROP)
        images = fn.flip(images, device=dev, horizontal=fn.random.coin_flip())
        return images, labels

    state: dict[str, Any] = {"epochs": 0}

    def reset() -> None:  # a new pipeline per epoch, built untimed; it reads nothing before its first run()
        state.pop("pipe", None)
        p = pipe(seed=seed + 1 + state["epochs"])
        p.build()
        state["pipe"], state["epochs"] = p, state["epochs"] + 1

    reset()
    size = int(state["pipe"].epoch_size("Reader"))

    def epoch():
        p = state["pipe"]
        n = 0
        while n < size:  # the reader runs on across epochs: an epoch is `size` samples
            images, _ = p.run()
            t = images.as_tensor()
            take = min(len(images), size - n)
            n += take
            if gpu:
                yield _Shape([take, *t.shape()[1:]], "uint8")
            else:
                yield np.asarray(t)[:take]

    return Built(epoch, f"DALI {dali.__version__} readers.file + decoders.image_random_crop ({decode_dev}) + "
                 f"resize ({dev}) + flip; reader {'read()' if source == 'cold' else 'mmap'}; a new pipeline per epoch, "
                 "built untimed", "NHWC", reset=reset)


def versions() -> dict:
    """Installed versions of the packages a loader may use (metadata only: nothing is imported)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("numpy", "pillow", "torch", "torchvision", "webdataset", "ffcv", "numba", "opencv-python-headless",
                 "opencv-python", "nvidia-dali-cuda130"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out
