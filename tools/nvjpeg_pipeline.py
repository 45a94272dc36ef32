#!/usr/bin/env python3
"""A plain batched nvJPEG pipeline, timed the way the kit times its loaders, as a yardstick for pytorch-nvjpeg.

    python3 tools/nvjpeg_pipeline.py --dataset DATA/folder-jpeg90-256-n10000 [--batch 256]
        [--window-images 50000] [--window-seconds 30] [--epochs N] [--crop per-image|none]
        [--loader-result dataload.out]                                   # on a GPU machine

The pipeline is what a user writes without the kit: every JPEG of the folder dataset (the files the
pytorch-nvjpeg loader reads) held in memory as bytes (read once, untimed: no file reads and no worker processes
inside the figure), shuffled each epoch, batches of --batch decoded by one `torchvision.io.decode_jpeg(list,
device="cuda")` call on the current stream, then (`--crop per-image`, the default) torchvision's
RandomResizedCrop(224, antialias) + RandomHorizontalFlip applied image by image on the GPU and stacked; `none`
stops after the decode. It is timed by the kit's own measurement (trials/dataload/measure.py: a warm-up epoch,
then whole epochs until the window rule holds, or --epochs N), so its images/s and a dataload run's compare like
with like. Its figure is an upper bound for the loader's in one respect: no file is read during it.

With --loader-result (a file whose last `KIT-RESULT ` line, or whole content, is a pytorch-nvjpeg dataload
result on the same dataset), the output adds the loader's images/s as a fraction of this pipeline's.

One JSON line on stdout. A GPU only: without CUDA or torchvision it says so in one line and exits 1; bad flags
or a dataset it cannot use: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "trials" / "common", ROOT / "trials" / "dataload"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402
import measure  # noqa: E402

RESULT_PREFIX = "KIT-RESULT "


class Refused(Exception):
    """A one-line reason this run cannot go, with its exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise Refused(f"invalid arguments: {message}", 2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(description="a plain batched decode_jpeg(device='cuda') pipeline, timed as the kit times loaders")
    p.add_argument("--dataset", required=True, type=Path)
    p.add_argument("--batch", type=kittrial._positive_int, default=256)
    p.add_argument("--window-images", type=kittrial._positive_int, default=None)
    p.add_argument("--window-seconds", type=kittrial._float_in(0.0, 86400.0, low_open=True), default=None)
    p.add_argument("--steady-tolerance", type=kittrial._float_in(0.0, 1.0, low_open=True),
                   default=kittrial.DEFAULT_STEADY_TOLERANCE)
    p.add_argument("--epochs", type=kittrial._positive_int, default=None)
    p.add_argument("--crop", choices=["per-image", "none"], default="per-image")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loader-result", type=Path, default=None)
    return p


def jpeg_files(dataset: Path) -> tuple[list[str], dict]:
    """The folder dataset's JPEG files (what pytorch-nvjpeg reads) and its dataset.json, refusing what is not one."""
    import loaders

    try:
        info = measure.dataset_info(dataset)
    except kittrial.TrialError as exc:
        raise Refused(str(exc), 2) from None
    if info.get("format") != "folder":
        raise Refused(f"{dataset} is a {info.get('format')} dataset; the pipeline reads folder datasets "
                      "(what pytorch-nvjpeg reads)", 2)
    files = [p for p, _ in loaders.folder_samples(dataset)]
    jpegs = [p for p in files if p.endswith(".jpg")]
    if len(jpegs) != len(files):
        raise Refused(f"{dataset}: {len(files) - len(jpegs)} of its {len(files)} images are raw (.npy); the "
                      "pipeline decodes JPEG datasets only", 2)
    return jpegs, info


# What must match for the loader's figure to be a fraction of this pipeline's (the rest is recorded).
SAME_DATASET_KEYS = ("format", "encoding", "side", "images")


def loader_figure(path: Path, info: dict, batch: int) -> dict:
    """The dataload result in `path` (its last KIT-RESULT line, or the whole file as JSON), refused unless it ran
    on this dataset at this batch."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise Refused(f"--loader-result {path}: {exc.strerror}", 2) from None
    lines = [ln for ln in text.splitlines() if ln.startswith(RESULT_PREFIX)]
    try:
        doc = json.loads(lines[-1][len(RESULT_PREFIX):] if lines else text)
    except ValueError:
        raise Refused(f"--loader-result {path}: no KIT-RESULT line and not a JSON result", 2) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("images_per_second"), (int, float)):
        raise Refused(f"--loader-result {path}: no images_per_second in the result", 2)
    theirs = doc.get("dataset") or {}
    differ = [f"{k} {theirs.get(k)} vs {info.get(k)}" for k in SAME_DATASET_KEYS if theirs.get(k) != info.get(k)]
    if doc.get("batch") != batch:
        differ.append(f"batch {doc.get('batch')} vs {batch}")
    if differ:
        raise Refused(f"--loader-result {path} ran on other data or batch ({'; '.join(differ)}): no fraction", 2)
    return doc


def pipeline(jpegs: list[str], batch: int, crop: str, seed: int):
    """A loaders.Built-like object (epoch() yields uint8 NCHW batches on the GPU) for measure.measure."""
    import numpy as np
    import torch
    import torchvision
    from torchvision import transforms as T
    from torchvision.io import ImageReadMode, decode_jpeg

    data = [torch.from_numpy(np.fromfile(p, dtype=np.uint8)) for p in jpegs]  # untimed: bytes in memory
    order = random.Random(seed)
    torch.manual_seed(seed)
    tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()])
    dev = torch.device("cuda")

    def epoch():
        idx = list(range(len(data)))
        order.shuffle(idx)
        for i in range(0, len(idx), batch):
            images = decode_jpeg([data[j] for j in idx[i:i + batch]], device=dev, mode=ImageReadMode.RGB)
            if crop == "none":
                yield _Decoded(len(images))
            else:
                yield torch.stack([tf(img) for img in images])
        torch.cuda.synchronize()  # the epoch's GPU work inside its time

    class Built:
        reset = None
        check = None
        impl = (f"torchvision {torchvision.__version__}: decode_jpeg(list, device=cuda, mode=RGB) on the current "
                "stream" + ("; per image RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip on the GPU, "
                            "torch.stack" if crop == "per-image" else "; no crop"))

    Built.epoch = staticmethod(epoch)
    return Built


class _Decoded:
    """What the measurement checks of a decode-only batch (the images keep their own sizes)."""

    def __init__(self, n: int):
        self.shape, self.dtype = (n, 3, 224, 224), "uint8"


def run(argv: list[str]) -> dict:
    a = parser().parse_args(argv)
    jpegs, info = jpeg_files(a.dataset)
    loader = loader_figure(a.loader_result, info, a.batch) if a.loader_result is not None else None
    try:
        import torch
    except ImportError:
        raise Refused("no torch here: the pipeline needs torch and torchvision with CUDA", 1) from None
    if not torch.cuda.is_available():
        raise Refused(f"the pipeline decodes with nvJPEG on the GPU: torch {torch.__version__} sees no CUDA device", 1)
    try:
        import torchvision  # noqa: F401
    except ImportError:
        raise Refused("no torchvision here: decode_jpeg(device='cuda') is torchvision's", 1) from None
    rule = measure.WindowRule.of(a.window_images, a.window_seconds, a.epochs, a.steady_tolerance)
    built = pipeline(jpegs, a.batch, a.crop, a.seed)
    m = measure.measure(built, lambda: (None, 0.0), rule, "memory", a.batch, len(jpegs), "nvjpeg-pipeline")
    out = {"tool": "nvjpeg_pipeline", "dataset": str(a.dataset), "images_in_dataset": len(jpegs), "batch": a.batch,
           "crop": a.crop, "impl": built.impl, "device": torch.cuda.get_device_name(0),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "torchvision": torchvision.__version__}, **m}
    if loader is not None:
        out["loader"] = {"loader": loader.get("loader"), "workers": loader.get("workers"),
                         "images_per_second": loader["images_per_second"],
                         "window": (loader.get("window") or {}).get("rule"),
                         "fraction_of_pipeline": loader["images_per_second"] / m["images_per_second"]}
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        out = run(sys.argv[1:] if argv is None else argv)
    except Refused as exc:
        print(f"nvjpeg_pipeline: {exc}", file=sys.stderr)
        return exc.code
    except kittrial.TrialError as exc:
        print(f"nvjpeg_pipeline: {kittrial.one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(out, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
