"""The PyTorch side of the trial: device set-up, the training step per mode, timing.

One fixed batch lives on the device for the whole run (no input pipeline), so
the trial measures the training step alone: forward, cross-entropy, backward, Adam.
"""

from __future__ import annotations

import platform
import resource
import time

import torch
import torch.nn.functional as F

import kittrial
from kittrial import TrialError
from resnet50 import count_parameters, resnet50

MIB = 2**20
LR = 1e-3


# ------------------------------------------------------------------------- set-up

def _setup_device(args, settings: dict, versions: dict) -> torch.device:
    if args.mode == "cudagraph" and args.device != "cuda":
        raise TrialError("cudagraph mode needs --device cuda")
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    if args.device == "cpu":
        versions["device"] = f"cpu {platform.machine()} {platform.processor()}".strip()
        settings.update(tf32="n/a (cpu)", memory_fraction=None,
                        memory_budget_enforced="no: on cpu the host limits memory")
        return torch.device("cpu")

    if not torch.cuda.is_available():
        raise TrialError("--device cuda but torch sees no CUDA device "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    device = torch.device("cuda:0")  # the host exposes exactly one GPU, by UUID
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(0)
    versions["device"] = props.name
    settings["device_total_mib"] = round(props.total_memory / MIB, 1)
    # TF32 is what a user gets by asking for "fp32 speed" on Ampere+; the reference
    # runner allowed it, so we do too and say so.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    settings["tf32"] = True
    if args.memory_budget_mib is not None:
        # The host gives us budget minus this engine's calibrated overhead; the
        # caching allocator then raises OutOfMemoryError instead of growing past it.
        fraction = min(1.0, args.memory_budget_mib * MIB / props.total_memory)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        settings.update(memory_fraction=fraction, memory_budget_enforced="yes: "
                        "torch.cuda.set_per_process_memory_fraction")
    else:
        settings.update(memory_fraction=None, memory_budget_enforced="no budget given")
    return device


def _to_device(images, labels, device: torch.device, poison: bool):
    """uint8 NHWC -> normalised float32 NCHW in channels_last layout, resident on device."""
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(kittrial.CIFAR10_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(kittrial.CIFAR10_STD, device=device).view(1, 3, 1, 1)
    x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
    if poison:  # KIT_TRIAL_FAULT=nan test hook
        x = x * float("nan")
    return x, torch.from_numpy(labels).to(device)


def _optimizer_settings(opt: torch.optim.Optimizer, params) -> dict:
    foreach = opt.defaults.get("foreach")
    if foreach is None:  # what torch picks by default for these tensors
        try:
            from torch.optim.optimizer import _default_to_fused_or_foreach
            _, foreach = _default_to_fused_or_foreach(list(params), False, False)
        except Exception:  # private helper; only used to describe the run
            foreach = "torch default"
    return {"name": "Adam", "lr": LR, "foreach": foreach, "fused": False,
            "capturable": bool(opt.defaults.get("capturable"))}


# ------------------------------------------------------------------------ runners

class EagerRunner:
    """Plain steps through `net` (the model itself, or torch.compile of it)."""

    def __init__(self, net, optimizer, x, y, autocast):
        self.net, self.opt, self.x, self.y, self.autocast = net, optimizer, x, y, autocast

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def steps(self, n: int):
        """n steps, no host synchronisation; the last loss (a device tensor) or None."""
        loss = None
        for _ in range(n):
            loss = self.step()
        return loss

    warmup = run = steps


class CudaGraphRunner(EagerRunner):
    """The whole step (zero_grad, forward, loss, backward, capturable Adam) in one CUDA
    graph, set up the way PyTorch's docs do whole-network capture."""

    def warmup(self, n: int):
        if n < 1:
            raise TrialError("cudagraph mode needs --warmup-steps >= 1 "
                             "(Adam's state must exist before capture)")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the default stream, as the docs do
            loss = self.steps(n)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # Return the warm-up's cached blocks so the graph's private pool can reuse them;
        # otherwise the candidate would hold eager and graph activations at once.
        torch.cuda.empty_cache()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.opt.zero_grad(set_to_none=False)  # grads stay at fixed addresses
            with self.autocast():
                self.static_loss = F.cross_entropy(self.net(self.x), self.y)
            self.static_loss.backward()
            self.opt.step()
        return loss

    def run(self, n: int) -> torch.Tensor:
        for _ in range(n):
            self.graph.replay()
        return self.static_loss.detach()


# -------------------------------------------------------------------------- train

def train(args, result: dict) -> None:
    settings, versions = result["settings"], result["versions"]
    versions.update(framework="torch", torch=torch.__version__, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
    device = _setup_device(args, settings, versions)
    try:
        _train(args, result, device)
    finally:
        _record_peaks(result, device)


def _train(args, result: dict, device: torch.device) -> None:
    settings = result["settings"]
    images, labels, settings["data"] = kittrial.load_data(args)
    x, y = _to_device(images, labels, device, poison=kittrial.fault_requested("nan"))

    torch.manual_seed(args.seed)
    model = resnet50(num_classes=kittrial.NUM_CLASSES)
    model = model.to(device, memory_format=torch.channels_last).train()
    result["parameters"] = count_parameters(model)
    settings.update(model_impl="trials/pytorch/resnet50.py (ResNet-50 v1.5)",
                    channels_last=True, loss="cross_entropy")

    graphed = args.mode == "cudagraph"
    opt = torch.optim.Adam(model.parameters(), lr=LR, capturable=graphed)
    settings["optimizer"] = _optimizer_settings(opt, model.parameters())

    bf16 = args.precision == "bf16"
    # Autocast's weight-cast cache must be off while a CUDA graph is captured.
    settings["autocast"] = {"dtype": "bfloat16", "cache_enabled": not graphed} if bf16 else None

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16,
                              cache_enabled=not graphed)

    net = model
    if args.mode == "compile":
        net = torch.compile(model)  # defaults on purpose: what users get out of the box
        settings["compile"] = {"mode": "default", "backend": "inductor"}
    if graphed:
        settings["graph"] = "torch.cuda.CUDAGraph whole step incl. Adam"
    runner = (CudaGraphRunner if graphed else EagerRunner)(net, opt, x, y, autocast)

    kittrial.fault_point()
    warmup_steps, steps = kittrial.step_counts(args)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    t0 = time.perf_counter()
    loss = runner.warmup(warmup_steps)
    loss_warmup = None if loss is None else loss.item()
    sync()
    warmup_seconds = time.perf_counter() - t0

    # One synchronisation at the end of the window: no per-step host round trips.
    t0 = time.perf_counter()
    loss = runner.run(steps)
    sync()
    window = time.perf_counter() - t0
    loss_final = loss.item()

    kittrial.record_steps(result, args, warmup_seconds, window, steps, loss_warmup, loss_final)


def _record_peaks(result: dict, device: torch.device) -> None:
    """Peaks are reported on every outcome, OOM included; never mask the real error."""
    try:
        # ru_maxrss is KiB on Linux: the trial process's own peak host memory.
        result["host_peak_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        if device.type == "cuda":
            # Reserved is what the caching allocator holds on the device (incl. CUDA
            # graph pools); allocated is what tensors used inside it.
            result["framework_peak_mib"] = round(torch.cuda.max_memory_reserved(device) / MIB, 1)
            result["framework_peak_allocated_mib"] = round(
                torch.cuda.max_memory_allocated(device) / MIB, 1)
    except Exception:  # noqa: BLE001 - a broken CUDA context must not hide the cause
        pass
