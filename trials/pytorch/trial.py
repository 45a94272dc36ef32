#!/usr/bin/env python3
"""PyTorch trial for kitctl (trial protocol v1): one candidate in, one KIT-RESULT line out.

    python3 trials/pytorch/trial.py --benchmark maxbatch --batch 128 --mode eager ...

Modes: eager -> engine pytorch-eager, compile -> pytorch-compile (torch.compile, default
mode), cudagraph -> pytorch-cudagraph (whole training step in one CUDA graph, GPU only),
compile-graphs -> pytorch-compile-graphs (the fair compiled path: forward, backward and Adam
in one torch.compile'd function, mode reduce-overhead, i.e. CUDA-graph trees on the GPU).
torch is imported only inside the run, so even a broken install yields a result line.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Works from any cwd and in images where trials/common sits beside trials/pytorch.
for _p in (_HERE.parent / "common", _HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402

MODES = ["eager", "compile", "cudagraph", "compile-graphs"]
ENGINES = {mode: f"pytorch-{mode}" for mode in MODES}


def _body(args, result: dict) -> None:
    with kittrial.phase(result, "import"):
        import torch_train  # pulls in torch

    torch_train.train(args, result)


def _classify(exc: BaseException) -> str:
    oom_types: tuple = (MemoryError,)
    torch = sys.modules.get("torch")
    if torch is not None:
        for t in (getattr(torch, "OutOfMemoryError", None),
                  getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)):
            if isinstance(t, type):
                oom_types += (t,)
    return "oom" if kittrial.is_oom(exc, oom_types) else "error"


def _preload() -> None:
    """What a prestarted trial imports before its candidate is known; nothing here touches the device."""
    import torch_train  # noqa: F401 - torch and the model code; no CUDA call at import
    # torch.optim.Adam imports torch._dynamo on first construction (0.6 s on a fast CPU, more on a VM):
    # otherwise inside every candidate's build.
    import torch._dynamo  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    return kittrial.run(argv, MODES, ENGINES.__getitem__, _body, _classify, preload=_preload)


if __name__ == "__main__":
    sys.exit(main())
