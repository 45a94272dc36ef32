#!/usr/bin/env python3
"""The batch finders people already use, on the kit's question: the largest ResNet-50 training batch (forward,
cross-entropy, backward, Adam lr 1e-3) under an allocator cap, answered by

* PyTorch Lightning's `Tuner.scale_batch_size` (binsearch by default: doubles from `init_val` until a failure,
  then bisects; takes `margin` off its answer and stops at `max_val`), and
* accelerate's `find_executable_batch_size` (from a start, × 0.9 on every failure),

each in a fresh process of its own, with its answer and the wall time of that process (imports included, as a
kitctl search's wall time includes its candidates'), written as JSON beside a kitctl max-batch artifact. Not a
dependency of the kit: it needs `pytorch_lightning` and/or `accelerate` where it runs (both are on the lent H200).

The model is the kit's own network (trials/pytorch/resnet50.py, layer for layer torchvision's), 10 classes, on
synthetic N×N×3 images; fp32 with TF32 allowed as the kit's PyTorch trial does, bf16 by autocast as it does. The cap:

* on a GPU, the caching allocator's fraction of the device, `--memory-fraction F` or `--like ARTIFACT` (the
  fraction a kitctl max-batch artifact's PyTorch cell gave its candidates: the very same cap);
* on the CPU (`--device cpu`), `--cap-mib N`: the process's data segment (RLIMIT_DATA, as kitctl's local runtime
  caps a CPU candidate), so an allocation past it fails inside PyTorch ("DefaultCPUAllocator: can't allocate
  memory"), which both finders take for an out-of-memory error.

  python3 tools/peer_batch_finders.py --like results/reference/maxbatch-…json --engine pytorch-eager \\
      --precision fp32 --lightning-max-val 65536 --lightning-margin 0 --out results/peer-….json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINDERS = ("lightning", "accelerate")
LR = 1e-3
NUM_CLASSES = 10


class Refusal(Exception):
    """Bad input or an unfit host: one line, exit 2."""


def fraction_of(artifact: Path, engine: str, precision: str) -> float:
    """The allocator fraction a kitctl max-batch artifact's cell gave its candidates (its first candidate that
    recorded one)."""
    try:
        doc = json.loads(artifact.read_text())
    except (OSError, ValueError) as exc:
        raise Refusal(f"--like {artifact}: cannot read it as JSON ({exc})") from None
    if doc.get("benchmark") != "maxbatch":
        raise Refusal(f"--like {artifact}: a {doc.get('benchmark')!r} artifact, not maxbatch")
    for cell in doc.get("results") or []:
        if (cell.get("engine"), cell.get("precision")) != (engine, precision):
            continue
        for t in cell.get("trials") or []:
            f = ((t.get("result") or {}).get("settings") or {}).get("memory_fraction")
            if isinstance(f, (int, float)) and 0 < f <= 1:
                return float(f)
        raise Refusal(f"--like {artifact}: its {engine} {precision} cell records no allocator fraction")
    raise Refusal(f"--like {artifact}: no {engine} {precision} cell")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--finders", default=",".join(FINDERS), help="lightning, accelerate or both (comma-separated)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--memory-fraction", type=float, help="cuda: the allocator's fraction of the device (0-1]")
    cap.add_argument("--like", type=Path, help="cuda: the fraction of this kitctl max-batch artifact's cell")
    cap.add_argument("--cap-mib", type=int, help="cpu: the process's data segment, MiB")
    p.add_argument("--engine", default="pytorch-eager", help="with --like: the cell's engine")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lightning-init-val", type=int, default=2)
    p.add_argument("--lightning-max-val", type=int, default=8192, help="Lightning's default 8192")
    p.add_argument("--lightning-margin", type=float, default=0.05, help="Lightning's default 0.05")
    p.add_argument("--lightning-steps", type=int, default=3, help="steps per trial (Lightning's default 3)")
    p.add_argument("--accelerate-start", type=int, default=16384)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per finder before it is killed")
    p.add_argument("--out", type=Path, help="write the JSON here too (it is printed in any case)")
    p.add_argument("--one", choices=FINDERS, help=argparse.SUPPRESS)  # a finder's own process
    a = p.parse_args(argv)
    finders = tuple(dict.fromkeys(x.strip() for x in a.finders.split(",") if x.strip()))
    if not finders or set(finders) - set(FINDERS):
        raise Refusal(f"--finders: {a.finders!r}; choose from {', '.join(FINDERS)}")
    a.finders = finders
    if a.device == "cuda":
        if a.cap_mib is not None:
            raise Refusal("--cap-mib caps a CPU process; on a GPU give --memory-fraction or --like")
        if a.like is not None:
            a.memory_fraction = fraction_of(a.like, a.engine, a.precision)
        if a.memory_fraction is None or not 0 < a.memory_fraction <= 1:
            raise Refusal("a GPU run needs the allocator cap: --memory-fraction in (0, 1] or --like ARTIFACT")
    else:
        if a.memory_fraction is not None or a.like is not None:
            raise Refusal("--memory-fraction and --like cap a GPU's allocator; on the CPU give --cap-mib")
        if a.cap_mib is None or a.cap_mib <= 0:
            raise Refusal("a CPU run needs --cap-mib N (> 0): the data segment the finders run under")
    for flag, v in (("--image-size", a.image_size), ("--lightning-init-val", a.lightning_init_val),
                    ("--lightning-max-val", a.lightning_max_val), ("--lightning-steps", a.lightning_steps),
                    ("--accelerate-start", a.accelerate_start)):
        if v <= 0:
            raise Refusal(f"{flag} must be > 0 (got {v})")
    if not 0 <= a.lightning_margin < 1 or not 0 < a.timeout:
        raise Refusal("--lightning-margin must be in [0, 1) and --timeout > 0")
    return a


# ------------------------------------------------------------------------------------------ one finder's process

def _model(device: str, image_size: int):
    import torch

    sys.path.insert(0, str(ROOT / "trials" / "pytorch"))
    from resnet50 import resnet50

    net = resnet50(NUM_CLASSES).to(device).to(memory_format=torch.channels_last)
    return net


def _batch(n: int, side: int, device: str, seed: int = 0):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, 3, side, side, generator=g).to(device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g).to(device)
    return x, y


def _torch_setup(a: argparse.Namespace) -> None:
    import torch

    if a.device == "cuda":
        if not torch.cuda.is_available():
            raise Refusal("--device cuda: PyTorch sees no CUDA device here (use --device cpu --cap-mib N)")
        torch.backends.cuda.matmul.allow_tf32 = True  # as the kit's PyTorch trial: TF32 allowed in fp32
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = False  # as in kitctl's max-batch
        torch.cuda.set_per_process_memory_fraction(a.memory_fraction, 0)


def run_lightning(a: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    try:
        import pytorch_lightning as pl
        from pytorch_lightning.tuner import Tuner
    except ImportError:
        raise Refusal("the lightning finder needs pytorch_lightning (pip install pytorch-lightning)") from None
    _torch_setup(a)
    side = a.image_size

    class Synthetic(Dataset):
        """Seeded random images, made per index: the finder asks for batches up to max_val."""

        def __len__(self) -> int:
            return a.lightning_max_val * a.lightning_steps

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            return torch.randn(3, side, side, generator=g), int(torch.randint(0, NUM_CLASSES, (1,), generator=g))

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = a.lightning_init_val
            self.net = _model("cpu", side)

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x.contiguous(memory_format=torch.channels_last)), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=LR)

        def train_dataloader(self):
            return DataLoader(Synthetic(), batch_size=self.batch_size, shuffle=False, num_workers=0)

    import tempfile

    # the tuner saves and restores the model around its trials: in a folder of its own, not the caller's
    trainer = pl.Trainer(accelerator="gpu" if a.device == "cuda" else "cpu", devices=1,
                         default_root_dir=tempfile.mkdtemp(prefix="peer-lightning-"),
                         precision="bf16-mixed" if a.precision == "bf16" else "32-true", max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    answer = Tuner(trainer).scale_batch_size(Module(), mode="binsearch", steps_per_trial=a.lightning_steps,
                                             init_val=a.lightning_init_val, max_val=a.lightning_max_val,
                                             margin=a.lightning_margin)
    return {"answer": answer, "versions": {"pytorch_lightning": pl.__version__, "torch": torch.__version__},
            "settings": {"mode": "binsearch", "init_val": a.lightning_init_val, "max_val": a.lightning_max_val,
                         "margin": a.lightning_margin, "steps_per_trial": a.lightning_steps,
                         "precision": "bf16-mixed" if a.precision == "bf16" else "32-true"}}


def run_accelerate(a: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F

    try:
        import accelerate
        from accelerate.utils import find_executable_batch_size
    except ImportError:
        raise Refusal("the accelerate finder needs accelerate (pip install accelerate)") from None
    _torch_setup(a)
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=a.accelerate_start)
    def probe(batch_size: int) -> int:
        tried.append(batch_size)
        net = _model(a.device, a.image_size)
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        x, y = _batch(batch_size, a.image_size, a.device)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        return batch_size

    answer = probe()
    return {"answer": answer, "versions": {"accelerate": accelerate.__version__, "torch": torch.__version__},
            "settings": {"starting_batch_size": a.accelerate_start, "factor_on_failure": 0.9,
                         "precision": "bf16 (autocast)" if a.precision == "bf16"
                         else "fp32, TF32 allowed" if a.device == "cuda" else "fp32"},
            "batches_tried": tried}


def one(a: argparse.Namespace) -> dict:
    return {"lightning": run_lightning, "accelerate": run_accelerate}[a.one](a)


# ---------------------------------------------------------------------------------------------------- the driver

def _cap_data(mib: int):
    def apply() -> None:
        b = mib * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (b, b))
    return apply


def drive(a: argparse.Namespace, argv: list[str]) -> dict:
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise Refusal("--device cuda: PyTorch sees no CUDA device here (use --device cpu --cap-mib N)")
    out = {"tool": "tools/peer_batch_finders.py", "argv": argv, "model": "resnet50 (trials/pytorch/resnet50.py)",
           "image_size": a.image_size, "precision": a.precision, "device": a.device,
           "cap": ({"memory_fraction": a.memory_fraction, "from": str(a.like) if a.like else None}
                   if a.device == "cuda" else {"rlimit_data_mib": a.cap_mib}),
           "host": {"node": platform.node(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
           "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "finders": {}}
    for name in a.finders:
        t0 = time.monotonic()
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--one", name]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, start_new_session=True,
                               preexec_fn=_cap_data(a.cap_mib) if a.device == "cpu" else None)
        except subprocess.TimeoutExpired:
            out["finders"][name] = {"answer": None, "wall_s": round(time.monotonic() - t0, 1),
                                    "error": f"killed after {a.timeout:g} s"}
            continue
        wall = round(time.monotonic() - t0, 1)
        line = next((x for x in reversed(p.stdout.splitlines()) if x.startswith("PEER-RESULT ")), None)
        if p.returncode != 0 or line is None:
            tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1][:300]
            out["finders"][name] = {"answer": None, "wall_s": wall, "error": f"exit {p.returncode}: {tail}"}
        else:
            out["finders"][name] = {**json.loads(line[len("PEER-RESULT "):]), "wall_s": wall}
        print(f"{name}: {out['finders'][name].get('answer')} in {wall} s", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = parse(argv)
        if a.one:
            print("PEER-RESULT " + json.dumps(one(a)), flush=True)
            return 0
        result = drive(a, argv)
    except Refusal as exc:
        print(f"peer_batch_finders: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)
    return 0 if all(f.get("answer") for f in result["finders"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
