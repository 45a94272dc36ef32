"""The engines (`--engines` names) and what each can run: docs/engines.md's table."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    name: str
    label: str  # as the reference report names it
    family: str  # groups engines for "X best" ratios, e.g. "PyTorch"
    trial: str  # folder under trials/
    service: str  # compose.yaml service holding its image
    mode: str  # value of the trial's --mode
    benchmarks: frozenset[str]
    devices: frozenset[str]
    framework_cap: str  # how the framework is told its budget (artifact records it)
    native: bool = False  # trial is a compiled program (paths.native_trial), not trials/<x>/trial.py

    def refuse(self, benchmark: str, device: str) -> str | None:
        """One line saying why this engine cannot run, or None."""
        if benchmark not in self.benchmarks:
            return f"engine {self.name} does not run the {benchmark} benchmark"
        if device not in self.devices:
            return f"engine {self.name} cannot run on --device {device}"
        return None


_BOTH = frozenset({"maxbatch", "throughput"})
_TORCH_CAP = "torch.cuda.set_per_process_memory_fraction"
_OPENNN_CAP = "none: OpenNN has no allocator cap, the host VRAM gate is its budget"

ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine("pytorch-eager", "PyTorch eager", "PyTorch", "pytorch", "pytorch", "eager",
               _BOTH, frozenset({"cuda", "cpu"}), _TORCH_CAP),
        Engine("pytorch-compile", "PyTorch torch.compile", "PyTorch", "pytorch", "pytorch", "compile",
               _BOTH, frozenset({"cuda", "cpu"}), _TORCH_CAP),
        Engine("pytorch-cudagraph", "PyTorch CUDA graph", "PyTorch", "pytorch", "pytorch", "cudagraph",
               _BOTH, frozenset({"cuda"}), _TORCH_CAP),
        # The fair compiled path: the whole step compiled, mode reduce-overhead (CUDA-graph trees
        # on the GPU). On the CPU inductor compiles the same step without graphs.
        Engine("pytorch-compile-graphs", "PyTorch torch.compile + CUDA graphs", "PyTorch", "pytorch",
               "pytorch", "compile-graphs", _BOTH, frozenset({"cuda", "cpu"}), _TORCH_CAP),
        Engine("tensorflow-xla", "TensorFlow XLA", "TensorFlow", "tensorflow", "tensorflow", "xla",
               _BOTH, frozenset({"cuda", "cpu"}), "tf logical device memory_limit"),
        Engine("jax-xla", "JAX XLA", "JAX", "jax", "jax", "xla",
               _BOTH, frozenset({"cuda", "cpu"}),
               "XLA_PYTHON_CLIENT_MEM_FRACTION = (budget - 64 MiB) / device total (BFC allocator, preallocated)"),
        # OpenNN has no allocator cap: the host's VRAM gate is its only budget. Its trial is
        # built for CUDA (images/opennn/build.sh), so it runs on the GPU only.
        Engine("opennn-pool1", "OpenNN (batch pool 1)", "OpenNN", "opennn", "opennn", "pool1",
               _BOTH, frozenset({"cuda"}), _OPENNN_CAP, native=True),
        Engine("opennn-default", "OpenNN (default pool)", "OpenNN", "opennn", "opennn", "default",
               _BOTH, frozenset({"cuda"}), _OPENNN_CAP, native=True),
        # OpenNN's throughput path as its own runner trains (docs/benchmarks/throughput/resnet50):
        # a 50,000-image dataset resident on the GPU, whole epochs, CUDA graphs on; `resident` is
        # the same with graphs off (the control). A dataset of many batches is no max-batch
        # candidate, so both run throughput only.
        Engine("opennn-graph", "OpenNN (GPU-resident, CUDA graph)", "OpenNN", "opennn", "opennn", "graph",
               frozenset({"throughput"}), frozenset({"cuda"}), _OPENNN_CAP, native=True),
        Engine("opennn-resident", "OpenNN (GPU-resident, no graph)", "OpenNN", "opennn", "opennn", "resident",
               frozenset({"throughput"}), frozenset({"cuda"}), _OPENNN_CAP, native=True),
    )
}

# Engines whose trial exists in this tree; the others are named but refused in one line.
IMPLEMENTED = frozenset({"pytorch-eager", "pytorch-compile", "pytorch-cudagraph", "tensorflow-xla",
                         "jax-xla", "opennn-pool1", "opennn-default", "opennn-graph", "opennn-resident",
                         "pytorch-compile-graphs"})


# Smallest batch each model can train at: ResNet-50 on 32×32 inputs ends in 1×1 maps, where
# training-mode BatchNorm needs more than one value per channel (torchvision's model too).
MODEL_MIN_BATCH = {"resnet50": 2}


class EngineError(ValueError):
    pass


def parse_engines(spec: str) -> list[Engine]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise EngineError("--engines is empty")
    out: list[Engine] = []
    for n in names:
        if n not in ENGINES:
            raise EngineError(f"unknown engine {n!r} (known: {', '.join(ENGINES)})")
        if n not in IMPLEMENTED:
            raise EngineError(f"engine {n} is not available in this version of kitctl yet")
        if ENGINES[n] not in out:
            out.append(ENGINES[n])
    return out
