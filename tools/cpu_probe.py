#!/usr/bin/env python3
"""How steady is this machine's CPU capacity? A fixed decode-and-resize workload on every core, timed the way the
kit times a data loader's window, as a yardstick for the steadiness of CPU-bound loaders.

    python3 tools/cpu_probe.py [--processes N] [--seconds 90] [--block-seconds 2] [--side 256]
        [--dataload ARTIFACT ...] [--out FILE]

Each of N processes (default: the CPUs this process may use) decodes the same JPEG (quality 90, longest side
--side, a photograph-like gradient with noise) and resizes it to 224×224 with INTER_AREA, as ffcv's
RandomResizedCrop decoder does, in a loop, single-threaded (OpenCV's own threads off; PIL where OpenCV is missing).
The work per item never changes, so every change in the rate is the machine's: its clocks, its neighbours, its
scheduler. The window is cut into blocks of --block-seconds (about one epoch of a 20,000-image corpus at 10,000
images/s) and, as for a loader's window, the first and the second half are compared (`halves_change`; steady
within 2 %), with the blocks' coefficient of variation and lag-1 autocorrelation (how long slow spells last), the
noise those give the halves were the rate steady (`noise_sd`, the data reports' "Epoch scatter": kitctl's
core/steadiness.py) and the window at which that noise would hold the 2 % (`window_for_tolerance_s`).

With --dataload, the same statistics of each run's epochs in those artifacts, beside the probe's: a loader whose
epochs scatter as much as the fixed workload's blocks scatters because of the machine.

One JSON document on stdout (and in --out). Bad flags: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "host") not in sys.path:
    sys.path.insert(0, str(ROOT / "host"))

from kitctl.core.steadiness import STEADY_NOISE_SDS, halves_noise  # noqa: E402  (the data reports' own noise)

TOLERANCE = 0.02


def _jpeg(side: int) -> bytes:
    import numpy as np
    rng = np.random.default_rng(0)
    h, w = side, side * 3 // 4
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 127 // (h + w))], axis=-1).astype(np.int16)
    img = np.clip(img + rng.integers(-40, 40, img.shape), 0, 255).astype(np.uint8)
    try:
        import cv2
        ok, buf = cv2.imencode(".jpg", img, [int(cv2.IMWRITE_JPEG_QUALITY), 90])
        return bytes(buf)
    except ImportError:
        import io
        from PIL import Image
        out = io.BytesIO()
        Image.fromarray(img).save(out, format="JPEG", quality=90)
        return out.getvalue()


def _work(data: bytes):
    """One item: decode, resize to 224×224 (area), as a loader's decoder does. Returns the function to call."""
    try:
        import cv2
        import numpy as np
        cv2.setNumThreads(1)
        arr = np.frombuffer(data, np.uint8)

        def item() -> None:
            cv2.resize(cv2.imdecode(arr, cv2.IMREAD_COLOR), (224, 224), interpolation=cv2.INTER_AREA)
        return item, f"OpenCV {cv2.__version__} imdecode + resize INTER_AREA"
    except ImportError:
        import io
        from PIL import Image

        def item() -> None:
            Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224), Image.BOX)
        return item, "PIL decode + resize BOX"


def _worker(data: bytes, start: float, end: float, q) -> None:
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = "1"
    item, what = _work(data)
    stamps: list[float] = []
    while time.time() < start:
        time.sleep(0.001)
    now = time.time()
    while now < end:
        item()
        now = time.time()
        stamps.append(now)
    q.put((what, stamps))


def blocks(stamps: list[float], start: float, end: float, block_s: float) -> list[float]:
    """Items per second in each whole block of block_s seconds from start (a last partial block dropped)."""
    n = int((end - start) // block_s)
    counts = [0] * n
    for t in stamps:
        i = int((t - start) // block_s)
        if 0 <= i < n:
            counts[i] += 1
    return [c / block_s for c in counts]


def scatter(rates: list[float], weights: list[float] | None = None) -> dict:
    """Halves change (second vs first, weighted by time when weights are the blocks' seconds), coefficient of
    variation and lag-1 autocorrelation of a sequence of rates."""
    n = len(rates)
    if n < 4:
        return {"blocks": n}
    w = weights or [1.0] * n
    h = n // 2
    a = sum(r * x for r, x in zip(rates[:h], w[:h])) / sum(w[:h])
    b = sum(r * x for r, x in zip(rates[n - h:], w[n - h:])) / sum(w[n - h:])
    mean = statistics.fmean(rates)
    sd = statistics.pstdev(rates)
    dev = [r - mean for r in rates]
    var = sum(d * d for d in dev)
    lag1 = sum(x * y for x, y in zip(dev[:-1], dev[1:])) / var if var > 0 else 0.0
    change = (b - a) / a
    noise = halves_noise(list(rates), list(w))
    return {"blocks": n, "mean": mean, "cv": sd / mean if mean else None, "lag1": lag1,
            "min": min(rates), "max": max(rates), "first_half": a, "second_half": b, "halves_change": change,
            "steady": abs(change) <= TOLERANCE,
            # as the data reports' "Epoch scatter": the halves' noise from the blocks around a line, and the window
            # at which it would hold the tolerance
            "noise_sd": None if noise is None else noise.sd,
            "window_for_tolerance_s": None if noise is None else noise.window_for(TOLERANCE, STEADY_NOISE_SDS)}


def loader_runs(path: Path) -> list[dict]:
    """The epochs' statistics of each run of a dataload artifact (each epoch one block, weighted by its time)."""
    doc = json.loads(path.read_text())
    out = []
    for cell in doc.get("results", []):
        for run in cell.get("runs", []):
            epochs = run.get("epochs") or []
            if not epochs:
                continue
            rates = [e["images_per_second"] for e in epochs]
            out.append({"artifact": path.name, "loader": cell["loader"], "data": f"{cell['encoding']}@{cell['side']}",
                        "source": cell["source"], "workers": cell["workers"], "run": run["run"],
                        "images_per_second": run.get("images_per_second"),
                        "epoch_seconds": statistics.fmean(e["seconds"] for e in epochs),
                        "kit_halves_change": run.get("halves_change"),
                        **scatter(rates, [e["seconds"] for e in epochs])})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    p.add_argument("--processes", type=int, default=cores)
    p.add_argument("--seconds", type=float, default=90.0)
    p.add_argument("--block-seconds", type=float, default=2.0)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--dataload", type=Path, nargs="*", default=[])
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.processes < 1 or a.seconds <= 0 or a.block_seconds <= 0 or a.seconds < 4 * a.block_seconds:
        print("cpu_probe: --processes ≥ 1, and --seconds at least 4 blocks of --block-seconds", file=sys.stderr)
        return 2
    for f in a.dataload:
        if not f.is_file():
            print(f"cpu_probe: no such artifact {f}", file=sys.stderr)
            return 2
    data = _jpeg(a.side)
    ctx = mp.get_context("spawn")  # a clean interpreter per process: no inherited threads
    q = ctx.Queue()
    start = time.time() + 2.0 + 0.05 * a.processes  # every process imported before the clock starts
    end = start + a.seconds
    procs = [ctx.Process(target=_worker, args=(data, start, end, q)) for _ in range(a.processes)]
    for pr in procs:
        pr.start()
    results = [q.get() for _ in procs]
    for pr in procs:
        pr.join()
    stamps = sorted(t for _, s in results for t in s)
    rates = blocks(stamps, start, end, a.block_seconds)
    times = [a.block_seconds] * len(rates)
    per_process = [len(s) / a.seconds for _, s in results]
    doc = {"tool": "cpu_probe", "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
           "host": {"node": platform.node(), "cpus": os.cpu_count(), "usable_cpus": cores,
                    "machine": platform.machine(), "python": platform.python_version()},
           "workload": {"item": results[0][0], "jpeg_bytes": len(data), "side": a.side, "processes": a.processes},
           "window": {"seconds": a.seconds, "block_seconds": a.block_seconds, "items": len(stamps),
                      "items_per_second": len(stamps) / a.seconds, "tolerance": TOLERANCE},
           "probe": {**scatter(rates, times), "block_rates": [round(r, 1) for r in rates]},
           "per_process_items_per_second": {"min": min(per_process), "max": max(per_process),
                                            "median": statistics.median(per_process)},
           "loaders": [r for f in a.dataload for r in loader_runs(f)]}
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
