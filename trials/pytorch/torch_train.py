"""The PyTorch side of the trial: device set-up, the training step per mode, timing.

One fixed batch lives on the device for the whole run (no input pipeline), so
the trial measures the training step alone: forward, cross-entropy, backward, Adam.
"""

from __future__ import annotations

import platform
import resource

import torch
import torch.nn.functional as F

import kittrial
from kittrial import TrialError
from resnet50 import count_parameters, resnet50

MIB = 2**20
LR = 1e-3
COMPILE_GRAPHS = "compile-graphs"  # the fair compiled path (engine pytorch-compile-graphs)
COMPILE_GRAPHS_MODE = "reduce-overhead"  # inductor + CUDA-graph trees: no per-kernel host launches
FAIR_MODES = ("cudagraph", COMPILE_GRAPHS)  # throughput on these autotunes cuDNN


def memory_fraction(budget_mib: float, total_bytes: int) -> float:
    """The caching allocator's fraction of the device for the host's framework budget."""
    return min(1.0, kittrial.framework_cap_mib(budget_mib) * MIB / total_bytes)


# ------------------------------------------------------------------------- set-up

def _setup_device(args, settings: dict, versions: dict) -> torch.device:
    if args.mode == "cudagraph" and args.device != "cuda":
        raise TrialError("cudagraph mode needs --device cuda")
    benchmark = bool(args.cudnn_benchmark)
    if args.mode in FAIR_MODES and args.benchmark == "throughput" and args.device == "cuda":
        # The graph engines are the fair speed paths, and those autotune cuDNN. Max-batch keeps
        # the flag: the autotuner's trial workspaces would change the memory being measured.
        benchmark = True
        settings["cudnn_benchmark_source"] = f"on: {args.mode} mode, throughput"
    settings["cudnn_benchmark"] = benchmark
    torch.backends.cudnn.benchmark = benchmark
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
        # The host gives us budget minus this engine's calibrated overhead; the caching
        # allocator then raises OutOfMemoryError instead of growing past the fraction, kept
        # kittrial.FRAMEWORK_SLACK_MIB under it (why: there).
        fraction = memory_fraction(args.memory_budget_mib, props.total_memory)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        settings.update(memory_fraction=fraction, budget_slack_mib=kittrial.FRAMEWORK_SLACK_MIB,
                        memory_budget_enforced="yes: torch.cuda.set_per_process_memory_fraction, "
                        f"{kittrial.FRAMEWORK_SLACK_MIB} MiB under the budget")
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


def _make_optimizer(mode: str, params, device: torch.device) -> torch.optim.Optimizer:
    """Adam lr 1e-3 in every mode; only the implementation differs where a graph needs it."""
    params = list(params)
    if mode == "cudagraph":
        # One fused multi-tensor kernel per step instead of foreach Adam's chain of
        # whole-parameter passes; capturable keeps `step` on the device, as capture requires.
        return torch.optim.Adam(params, lr=LR, fused=True, capturable=True)
    if mode == COMPILE_GRAPHS and device.type == "cuda":
        # Inductor compiles the foreach update into its own kernels; capturable (what dynamo
        # would switch on anyway for CUDA params) lets the step's graph be replayed.
        return torch.optim.Adam(params, lr=LR, capturable=True)
    return torch.optim.Adam(params, lr=LR)


def _optimizer_settings(opt: torch.optim.Optimizer, params) -> dict:
    fused = bool(opt.defaults.get("fused"))
    foreach = False if fused else opt.defaults.get("foreach")
    if foreach is None:  # what torch picks by default for these tensors
        try:
            from torch.optim.optimizer import _default_to_fused_or_foreach
            _, foreach = _default_to_fused_or_foreach(list(params), False, False)
        except Exception:  # private helper; only used to describe the run
            foreach = "torch default"
    return {"name": "Adam", "lr": LR, "foreach": foreach, "fused": fused,
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
    """The whole step (forward, loss, backward, fused capturable Adam) in one CUDA graph,
    captured the way PyTorch's docs do whole-network capture."""

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
        # No .grad before capture: backward then allocates the gradients from the graph's
        # private pool (fixed addresses, written, never zeroed or accumulated into), so the
        # graph holds no memset and no grad += new_grad per parameter.
        self.opt.zero_grad(set_to_none=True)
        # Return the warm-up's cached blocks (its grads included) so the graph's private pool
        # can reuse them; otherwise the candidate would hold eager and graph memory at once.
        torch.cuda.empty_cache()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with self.autocast():
                self.static_loss = F.cross_entropy(self.net(self.x), self.y)
            self.static_loss.backward()
            self.opt.step()
        # Capture only records. The first launch of a new graph also uploads it to the
        # device; do that here so the timed window (and max-batch's measured step) holds
        # steady-state replays only.
        self.graph.replay()
        return loss

    def run(self, n: int) -> torch.Tensor:
        for _ in range(n):
            self.graph.replay()
        return self.static_loss.detach()


class CompiledStepRunner(EagerRunner):
    """Forward, loss, backward and Adam's step inside one torch.compile'd function, mode
    reduce-overhead: inductor's CUDA-graph trees replay the compiled graphs (forward,
    backward, optimizer) instead of launching each kernel from the host. On the CPU
    inductor compiles the same function and skips the graphs."""

    # Graph trees run a function's first call plainly, record (and run) it on the next step
    # and replay it from the third: warm-up covers the first two, so the timed window and
    # max-batch's measured step are replays, and the peak includes the graphs' memory pool.
    MIN_WARMUP = 2

    def __init__(self, net, optimizer, x, y, autocast):
        super().__init__(net, optimizer, x, y, autocast)
        self.compiled = torch.compile(self._step_body, mode=COMPILE_GRAPHS_MODE)

    def _step_body(self) -> torch.Tensor:
        with self.autocast():
            loss = F.cross_entropy(self.net(self.x), self.y)
        loss.backward()  # dynamo breaks the graph here; AOTAutograd's compiled backward runs
        self.opt.step()
        return loss.detach()

    def step(self) -> torch.Tensor:
        # zero_grad is dynamo-disabled, so it stays outside; with set_to_none it launches
        # nothing, and backward hands out .grad from the graph pool at fixed addresses.
        self.opt.zero_grad(set_to_none=True)
        torch.compiler.cudagraph_mark_step_begin()  # one training step = one tree generation
        return self.compiled()

    def warmup(self, n: int):
        return self.steps(max(n, self.MIN_WARMUP))


def compile_stats() -> dict:
    """What dynamo/inductor did, from their counters: graphs, breaks, CUDA-graph skips."""
    try:
        from torch._dynamo.utils import counters  # private, but only describes the run
    except Exception:  # noqa: BLE001
        return {"counters": "unavailable"}
    breaks = {" ".join(str(k).split())[:200]: v for k, v in counters["graph_break"].items()}
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": breaks,
            "cudagraph_skips": counters["inductor"].get("cudagraph_skips", 0)}


# -------------------------------------------------------------------------- train

def train(args, result: dict) -> None:
    settings, versions = result["settings"], result["versions"]
    versions.update(framework="torch", torch=torch.__version__, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
    with kittrial.phase(result, "device"):  # on a GPU: the CUDA context and the memory cap
        device = _setup_device(args, settings, versions)
    try:
        _train(args, result, device)
    finally:
        _record_peaks(result, device)


def build_runner(args, result: dict, device: torch.device) -> EagerRunner:
    """Data, model, optimizer and the step of args.mode, set up and described in
    result["settings"]; nothing has run yet. tools/compare_cudagraph.py builds through
    this too, so it measures the step exactly as the trial builds it."""
    settings = result["settings"]
    # Sub-phases of build_s (where a candidate's set-up time goes; not added to the phases' sum).
    with kittrial.phase(result, "build_data"):
        images, labels, settings["data"] = kittrial.load_data(args)
    with kittrial.phase(result, "build_data_to_device"):
        x, y = _to_device(images, labels, device, poison=kittrial.fault_requested("nan"))

    torch.manual_seed(args.seed)
    with kittrial.phase(result, "build_model"):
        model = resnet50(num_classes=kittrial.NUM_CLASSES)
    with kittrial.phase(result, "build_model_to_device"):
        model = model.to(device, memory_format=torch.channels_last).train()
    result["parameters"] = count_parameters(model)
    settings.update(model_impl="trials/pytorch/resnet50.py (ResNet-50 v1.5)",
                    channels_last=True, loss="cross_entropy")

    graphed = args.mode == "cudagraph"
    with kittrial.phase(result, "build_optimizer"):
        opt = _make_optimizer(args.mode, model.parameters(), device)
    settings["optimizer"] = _optimizer_settings(opt, model.parameters())

    bf16 = args.precision == "bf16"
    # Autocast's weight-cast cache must be off while a CUDA graph is captured by hand.
    settings["autocast"] = {"dtype": "bfloat16", "cache_enabled": not graphed} if bf16 else None

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16,
                              cache_enabled=not graphed)

    if args.mode == "compile":
        net = torch.compile(model)  # defaults on purpose: what users get out of the box
        settings["compile"] = {"mode": "default", "backend": "inductor"}
        return EagerRunner(net, opt, x, y, autocast)
    if args.mode == COMPILE_GRAPHS:
        warmup_steps, _ = kittrial.step_counts(args)  # the window rule's adaptive warm-up: 1 first
        settings["compile"] = {
            "mode": COMPILE_GRAPHS_MODE, "backend": "inductor", "fullgraph": False,
            "scope": "forward + cross-entropy + backward + Adam.step in one torch.compile'd "
                     "function; zero_grad(set_to_none=True) outside it (dynamo-disabled)",
            "cudagraphs": ("inductor CUDA-graph trees, one generation per step "
                           "(torch.compiler.cudagraph_mark_step_begin)" if device.type == "cuda"
                           else "none: inductor skips CUDA graphs on the cpu"),
            "warmup_steps_run": max(warmup_steps, CompiledStepRunner.MIN_WARMUP),
        }
        return CompiledStepRunner(model, opt, x, y, autocast)
    if graphed:
        settings["graph"] = {
            "kind": "torch.cuda.CUDAGraph, whole step incl. Adam",
            "capture": "grads set to None before capture (backward allocates them in the "
                       "graph pool); warm-up on a side stream; one replay before timing",
        }
        return CudaGraphRunner(model, opt, x, y, autocast)
    return EagerRunner(model, opt, x, y, autocast)


def _train(args, result: dict, device: torch.device) -> None:
    with kittrial.phase(result, "build"):  # data, model, optimizer (a compiled step compiles in its first steps)
        runner = build_runner(args, result, device)
    try:
        with kittrial.phase(result, "steps"):
            _measure(args, result, device, runner)
    finally:
        if args.mode == COMPILE_GRAPHS:  # on failures too: a skip or break may be the cause
            result["settings"]["compile"].update(compile_stats())


class TorchStepper(kittrial.Stepper):
    """The window's view of a runner: CUDA events mark each chunk on the device's own timeline."""

    def __init__(self, runner: EagerRunner, device: torch.device):
        self.runner, self.cuda = runner, device.type == "cuda"

    def first(self, n: int):
        return self.runner.warmup(n)

    def run(self, n: int):
        return self.runner.run(n)

    def sync(self, loss) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def value(self, loss) -> float | None:
        return None if loss is None else loss.item()

    def device_mark(self):
        if not self.cuda:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def device_seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1000.0


def _measure(args, result: dict, device: torch.device, runner: EagerRunner) -> None:
    kittrial.fault_point()
    # Each chunk of steps ends in one synchronisation: no per-step host round trips.
    kittrial.measure_throughput(args, result, TorchStepper(runner, device))


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
