"""The flags of `kitctl run <benchmark>`: those every training benchmark shares (typer reads these as
defaults; what they become is kitctl.run.config), and what a benchmark's own command declares its own flags
with (`Option`, `Context`): only the CLI knows the command-line framework.
"""
from __future__ import annotations

from pathlib import Path

import typer

from ..core.engines import ENGINES
from ..run.config import (DEFAULT_IMAGE_SIZE, DEFAULT_TIMEOUT_S, MAX_IMAGE_SIZE, MIN_IMAGE_SIZE, Dataset, Device,
                          GpuRequestName, Precision, RuntimeName)

# A benchmark's command (benchmarks/<name>/command.py) declares its flags with these.
Option = typer.Option
Context = typer.Context

# Options shared by the `run` commands (typer reads these as defaults).
O_ENGINES = typer.Option("pytorch-eager", help=f"Comma-separated: {', '.join(ENGINES)}.")
O_PRECISION = typer.Option(Precision.fp32, help="fp32, bf16 or both.")
O_DEVICE = typer.Option(Device.auto, help="auto (default): the GPU when one is usable, else the CPU with a "
                        "memory cap it prints; cuda; or cpu (capped: --memory-limit, else the same default cap).")
O_GPU = typer.Option(None, help="GPU index (NVML order) or UUID; default 0. With --resume: continue on "
                     "this GPU, which must be the same model, memory and driver as the partial's.")
O_VRAM_LIMIT = typer.Option(None, help="L in MiB or a card's name such as rtx4080 or a100-40g (default: this "
                            "card's total): emulate a smaller card. Max batch takes a comma list too: one run per "
                            "card size (a catalogue).")
O_RESERVE = typer.Option(256, help="R in MiB; the budget is B = L − R.")
O_TIMEOUT = typer.Option(None, help=f"Seconds per candidate before the kit kills it (default {DEFAULT_TIMEOUT_S:.0f}, "
                         "at most 7 days).")
O_RUNTIME = typer.Option(RuntimeName.auto, help="auto: docker when the daemon answers and the image exists, else local.")
O_DATASET = typer.Option(Dataset.synthetic, help="synthetic or cifar10.")
O_DATA_DIR = typer.Option(None, help="CIFAR-10 folder (binary or python layout) or its parent.")
O_IMAGE_SIZE = typer.Option(DEFAULT_IMAGE_SIZE, help="Input side in pixels: 32 (CIFAR-10 geometry, the default) "
                            f"or e.g. 224 (ImageNet geometry, synthetic data); {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE}.")
O_CUDNN = typer.Option(False, "--cudnn-benchmark/--no-cudnn-benchmark",
                       help="Turn cuDNN autotuning on (changes memory use).")
O_REQUIRE_IDLE = typer.Option(False, "--require-gpu-idle/--no-require-gpu-idle",
                              help="Refuse to start when the GPU holds memory.")
O_IDLE_THRESHOLD = typer.Option(1024.0, help="MiB in use above which the GPU is not idle.")
O_MEMORY_LIMIT = typer.Option(None, help="Host memory limit per candidate in MiB (--device cpu; 6 MiB to the "
                              "host's RAM). Default on the CPU: a quarter of the available RAM, at most 2,048.")
O_PYTHON = typer.Option(None, help="Interpreter for the local runtime (default: this one).")
O_RESULTS_DIR = typer.Option(Path("results"), help="Where artifacts are written.")
O_RESUME = typer.Option(None, help="Continue the run in this .partial.json, with its own configuration, runtime, "
                        "image or interpreter; beside it only --timeout, --gpu, --require-gpu-idle and "
                        "--idle-threshold are accepted (and --gpu-request, checked against the partial's).")
O_ALLOW_CODE_CHANGE = typer.Option(False, "--allow-code-change",
                                   help="With --resume: continue although the kit's or the trial's code hashes "
                                   "otherwise than the partial recorded (refused without it); the resume entry "
                                   "records the old and new hashes.")
# What a command prints, not what it measures (accepted beside --resume too).
O_JSON = typer.Option(False, "--json", help="Print the artifact's JSON document on stdout at the end (instead of "
                      "the table); progress stays on stderr.")
O_CSV = typer.Option(None, "--csv", help="Also write the end table as CSV to this file.")
# The data benchmarks' --resume: they have no --gpu/--timeout beside it; every setting is the partial's.
O_RESUME_DATA = typer.Option(None, help="Continue the run in this .partial.json with its own configuration "
                             "(its loaders, data, workers, runs and runtime): the other settings are the partial's.")
O_GPU_REQUEST = typer.Option(GpuRequestName.auto, help="How Docker attaches the GPU: toolkit (NVIDIA Container "
                             "Toolkit, --gpus style), cdi (nvidia.com/gpu=UUID) or auto (probe once: what works).")

def given_flags(ctx: typer.Context) -> list[tuple[str, str]]:
    """(parameter, flag as typed) of every option given on the command line or from the environment."""
    out = []
    for p in ctx.command.params:
        src = ctx.get_parameter_source(p.name) if p.name else None
        if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append((p.name, max(p.opts, key=len) if p.opts else p.name))
    return out
