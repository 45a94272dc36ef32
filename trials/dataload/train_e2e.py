"""End-to-end training fed by a loader (issue 18 item 4): which loader keeps the GPU busy.

One fresh process per run: a loader (loaders.build, the dataload pipeline: decode -> RandomResizedCrop 224
-> flip -> uint8 batch) feeds a real ResNet training step: the batch is copied to the device, normalised
there (ImageNet mean/std, channels-last), forward, cross-entropy, backward, Adam lr 0.001; on CUDA under
bf16 autocast by default. `synthetic` is the upper bound: one uint8 batch of the same shape resident on
the device, normalised on the device every step the same way (no loader at all).

Phases: (a real loader only) first the loader alone, measured exactly as `dataload` measures it
(measure.measure_loader, source ram: a warm-up epoch whose time to the first batch is the loader's start-up,
then whole epochs under the window rule the trial was given), so that its figure and dataload's compare like with
like; then, on the same loader, `warmup` training steps (cuDNN autotune, allocator), then `steps` timed training
steps. Before the timed window, as many batches as the loader can have read ahead are taken and dropped
(untimed): the window starts on the loader's steady rate. An epoch start inside the window (a small dataset) is
a bubble a real epoch of ImageNet has once per 5,005 steps: recorded (`epoch_starts_in_window`). In training a
real loader's batches come through a prefetch thread (two ahead; on CUDA it pins CPU batches so the copy to the
device is asynchronous), as DataLoader(pin_memory=True); the loader-alone figure has neither (nor has dataload's).

Every step's loss stays a device tensor until its phase has ended (no sync inside a timed window); then the
losses are recorded (`step_losses`) and a NaN/inf anywhere fails the run naming the first one
(`first_nonfinite_loss`: phase and step). A loader with a self-check (pytorch-nvjpeg: its GPU decode against
libjpeg-turbo on the CPU, and the hazard probe of pytorch/vision#9606) runs it untimed at the end, into
`decode_check`; it runs on a failed run too, before the error.

Busy fraction: the share of the timed window in which the device ran training steps. On CUDA from events
on the stream (recorded just before a step's copy + normalisation and just after its optimizer step):
busy = sum of the step spans / (first step's start .. last step's end); the gaps are where the GPU waited
for the host, i.e. for data. On CPU the step is synchronous: busy = 1 - (time in the loader's next()) / window.
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_PYTORCH = Path(__file__).resolve().parent.parent / "pytorch"
if str(_PYTORCH) not in sys.path:
    sys.path.insert(0, str(_PYTORCH))

from resnet50 import ResNet50, count_parameters, init_weights  # noqa: E402  (the throughput trial's ResNet-50 v1.5)

MODELS = ("resnet50", "resnet18")
PRECISIONS = ("auto", "bf16", "fp32")
LR = 1e-3
NUM_CLASSES = 1000  # the ImageNet head: the corpus's labels (< its class count) fit
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision's resnet18 layer for layer (no torchvision needed: the CI host has none); 11,689,512
    parameters with the 1,000-class head."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        layers, in_ch = [], 64
        for i, width in enumerate((64, 128, 256, 512)):
            layers.append(nn.Sequential(BasicBlock(in_ch, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)))
            in_ch = width
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        init_weights(self)

    forward = ResNet50.forward  # the same stem → four stages → pooled head


def make_model(name: str) -> nn.Module:
    if name == "resnet50":
        return ResNet50(num_classes=NUM_CLASSES)
    if name == "resnet18":
        return ResNet18(NUM_CLASSES)
    raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")


def _as_tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


class Prefetch:
    """What a training script's DataLoader(pin_memory=True) does, for every loader alike: a thread takes the
    loader's batches ahead (queue of `depth`) and, on CUDA, copies CPU batches into pinned memory, so the step's
    host-to-device copy is an asynchronous DMA. The main thread's wait on the queue is the data wait."""

    _END = object()

    def __init__(self, source, pin: bool, depth: int = 2):
        import queue
        import threading

        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.depth = depth
        self.stop = threading.Event()
        self.pin = pin
        self.source = source
        self.thread = threading.Thread(target=self._run, args=(source,), daemon=True, name="prefetch")
        self.thread.start()

    def _run(self, source) -> None:
        import queue

        try:
            for x, y, epoch in source:
                if self.pin and x.device.type == "cpu":
                    x = x.pin_memory()
                if self.pin and y is not None and y.device.type == "cpu":  # a GPU loader's labels stay on the host
                    y = y.pin_memory()
                while not self.stop.is_set():
                    try:
                        self.q.put((x, y, epoch), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
            self.q.put(exc)
        self.q.put(self._END)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.q.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"the loader failed: {type(item).__name__}: {item}") from item
        if item is self._END:
            raise StopIteration
        return item

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop the thread, then the source (its finally blocks stop the loader's own threads and workers): a
        thread still inside a loader when the interpreter finalises aborts the process after its result line."""
        import queue

        self.stop.set()
        deadline = time.monotonic() + timeout_s
        while self.thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):  # room for a put() in progress, which then sees the stop
                self.q.get_nowait()
            self.thread.join(timeout=0.1)
        if not self.thread.is_alive() and hasattr(self.source, "close"):
            self.source.close()


def first_nonfinite(losses: list[float]) -> int | None:
    """The index of the first loss that is NaN or infinite, or None."""
    return next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)


def loss_record(warmup: list[float], timed: list[float]) -> tuple[dict, dict | None]:
    """The per-step losses as JSON (a non-finite loss as null) and where the loss first went non-finite
    ({phase, step (1-based), of, value}) or None: the diagnosis a NaN at the end alone does not give."""
    where = None
    for phase, values in (("warmup", warmup), ("timed", timed)):
        i = first_nonfinite(values)
        if i is not None:
            where = {"phase": phase, "step": i + 1, "of": len(values), "value": repr(values[i])}
            break
    as_json = {phase: [v if math.isfinite(v) else None for v in values]
               for phase, values in (("warmup", warmup), ("timed", timed))}
    return as_json, where


def split(batch, layout: str):
    """(uint8 images NCHW or NHWC, labels or None) from what a loader yields."""
    if isinstance(batch, (tuple, list)):
        return _as_tensor(batch[0]), (_as_tensor(batch[1]) if len(batch) > 1 else None)
    return _as_tensor(batch), None


class Trainer:
    """The training step: copy to the device, normalise there, forward, cross-entropy, backward, Adam."""

    def __init__(self, model: str, precision: str, device: torch.device):
        self.device = device
        self.model = make_model(model).to(device).to(memory_format=torch.channels_last)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
        self.autocast = precision == "bf16"
        self.parameters = count_parameters(self.model)

    def step(self, images: torch.Tensor, labels: torch.Tensor | None, nhwc: bool) -> torch.Tensor:
        x = images.to(self.device, non_blocking=True)
        if nhwc:
            x = x.permute(0, 3, 1, 2)
        x = ((x.float() - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        if labels is None:  # a loader that yields no labels (DALI here): class 0, the step's cost is the same
            y = torch.zeros(x.shape[0], dtype=torch.long, device=self.device)
        else:
            y = labels.reshape(-1).to(self.device, non_blocking=True).long()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss


def run(loader: str, dataset: Path | None, workers: int, batch: int, model: str, precision: str, warmup: int,
        steps: int, device_name: str, seed: int, result: dict, rule=None) -> None:
    """`rule` (measure.WindowRule): the loader-alone window; by default whole epochs holding `steps` batches."""
    import loaders
    import measure

    torch.manual_seed(seed)
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"--device cuda but torch {torch.__version__} sees no CUDA device")
    device = torch.device("cuda:0" if device_name == "cuda" else "cpu")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # what a training script sets; autotuned during the warm-up
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if precision == "auto":  # bf16 autocast on CUDA (how ResNet is trained there); CPU autocast is slow, fp32
        precision = "bf16" if cuda else "fp32"
    trainer = Trainer(model, precision, device)
    result.update({"device": torch.cuda.get_device_name(0) if cuda else "cpu", "device_type": device.type,
                   "model": model, "parameters": trainer.parameters, "precision": precision,
                   "autocast": "bf16" if trainer.autocast else None, "tf32": cuda, "lr": LR, "optimizer": "Adam",
                   "normalise": "on the device: (x - ImageNet mean) / std, channels-last", "torch": torch.__version__})

    epoch_now = [0]  # the epoch of the last batch taken (a new one restarts a loader's read-ahead: a bubble)
    if loader == "synthetic":
        g = torch.Generator().manual_seed(seed)
        resident = torch.randint(0, 256, (batch, 3, loaders.CROP, loaders.CROP), dtype=torch.uint8, generator=g)
        resident_labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
        resident, resident_labels = resident.to(device), resident_labels.to(device)

        def batches():
            while True:
                yield resident, resident_labels, 0

        it, nhwc, built = batches(), False, None
        result.update({"impl": "one uint8 batch resident on the device (no loader)", "layout": "NCHW"})
    else:
        if loader == "dali-gpu":
            raise ValueError("dali-gpu's batches stay in DALI's GPU tensors here (no hand-off to torch yet)")
        if rule is None:
            rule = measure.WindowRule(min_images=steps * batch)
        # The loader alone, first, on a fresh loader in this fresh process: dataload's measurement, source ram.
        built, alone = measure.measure_loader(loader, dataset, batch, workers, "ram", seed, rule)
        nhwc = built.layout == "NHWC"
        result.update({"impl": built.impl, "layout": built.layout, "notes": built.notes, "loader_alone": alone,
                       "loader_images": alone["images"], "loader_seconds": alone["window_seconds"],
                       "loader_images_per_second": alone["images_per_second"],
                       "loader_startup_seconds": alone["startup_seconds"]})
        import pagecache

        files = loaders.data_files(loaders.FORMAT_OF[loader], dataset)
        result["resident_before"] = pagecache.warm(files)  # source ram: the page cache warmed for training

        def batches():  # epoch after epoch, as training does (a loader's reader runs on across epochs)
            epoch = 0
            while True:
                epoch += 1
                ep, ended = built.epoch(), False
                try:
                    for b in ep:
                        yield (*split(b, built.layout), epoch)
                    ended = True
                finally:  # an epoch left midway (closed between two batches); a persistent one stays for the next
                    if not ended:
                        loaders.finish(ep)

        it = Prefetch(batches(), pin=cuda)
        result["prefetch"] = ("a thread takes batches 2 ahead" + (" and pins CPU batches (async host-to-device "
                              "copy), as DataLoader(pin_memory=True)" if cuda else ""))

    def timed_steps(n: int, record: bool):
        wait = 0.0
        images = 0
        marks = []
        losses = []  # device tensors, read after the window: no sync inside it
        for _ in range(n):
            t0 = time.perf_counter()
            x, y, epoch_now[0] = next(it)
            wait += time.perf_counter() - t0
            if record and cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            loss = trainer.step(x, y, nhwc)
            if record and cuda:
                end.record()
                marks.append((start, end))
            losses.append(loss.detach())
            images += int(x.shape[0])
        return images, wait, marks, losses

    def values(losses) -> list[float]:
        return [float(v) for v in torch.stack(losses).float().cpu()] if losses else []

    def check_loader() -> None:
        """Untimed, once the prefetch thread is stopped (the check decodes on the loader's stream itself)."""
        if built is not None:
            it.close()
            if built.check is not None:
                result["decode_check"] = built.check()

    t0 = time.perf_counter()
    _, _, _, warm_losses = timed_steps(warmup, False)
    if cuda:
        torch.cuda.synchronize()
    result["warmup_seconds"] = time.perf_counter() - t0
    warm_losses = values(warm_losses)
    result["loss_after_warmup"] = warm_losses[-1] if warm_losses and math.isfinite(warm_losses[-1]) else None

    def drain() -> int:
        """Untimed: take (and drop) as many batches as the loader can have read ahead, so that a window starts on
        the loader's steady rate, not on a buffer filled while something else ran (the warm-up's autotune, the
        training window). The bound: a DataLoader's prefetch_factor 2 per worker (ffcv reads 3 ahead, DALI 2),
        plus this trial's prefetch thread (2 queued, 1 in hand)."""
        if built is None:
            return 0
        n = 2 * workers + 3 + it.depth + 1
        for _ in range(n):
            _, _, epoch_now[0] = next(it)
        return n

    drained = drain()
    epoch0 = epoch_now[0]
    t0 = time.perf_counter()
    images, wait, marks, losses = timed_steps(steps, True)
    if cuda:
        torch.cuda.synchronize()
    window = time.perf_counter() - t0
    losses = values(losses)
    result["step_losses"], where = loss_record(warm_losses, losses)
    result["first_nonfinite_loss"] = where
    if where is not None:
        check_loader()
        raise RuntimeError(f"the loss is not finite ({where['value']}) from {where['phase']} step {where['step']} "
                           f"of {where['of']}")
    final_loss = losses[-1]
    if cuda:
        spans = sum(s.elapsed_time(e) for s, e in marks) / 1000
        total = marks[0][0].elapsed_time(marks[-1][1]) / 1000
        busy, basis = min(1.0, spans / total), "CUDA events: step spans / first start .. last end"
    else:
        busy, basis = max(0.0, 1 - wait / window), "host clock (CPU steps are synchronous): 1 - data wait / window"
    result.update({"steps": steps, "warmup_steps": warmup, "images": images, "window_seconds": window,
                   "train_images_per_second": images / window, "data_wait_seconds": wait,
                   "data_wait_fraction": wait / window, "busy_fraction": busy, "busy_basis": basis,
                   "final_loss": final_loss, "drained_batches": drained,
                   "epoch_starts_in_window": epoch_now[0] - epoch0})

    if built is not None:
        check_loader()
        probe = (result.get("decode_check") or {}).get("probe") or {}
        if (probe.get("loader") or {}).get("corrupted"):
            raise RuntimeError(f"{loader}: its decode wrote into memory queued work still used "
                               f"({probe['loader']['corrupted']} of {probe['iterations']} probe iterations)")
    result["status"] = "ok"
