#!/usr/bin/env python3
"""TensorFlow trial for kitctl (trial protocol v1): one candidate in, one KIT-RESULT line out.

    python3 trials/tensorflow/trial.py --benchmark maxbatch --batch 128 --mode xla ...

Mode: xla -> engine tensorflow-xla (the whole training step under tf.function(jit_compile=True)).
TensorFlow is imported only inside the run, so even a broken install yields a result line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Works from any cwd and in images where trials/common sits beside trials/tensorflow.
for _p in (_HERE.parent / "common", _HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402

MODES = ["xla"]
ENGINES = {"xla": "tensorflow-xla"}

# Messages of TensorFlow's and XLA's allocation failures, whatever exception type carries them:
#   "OOM when allocating tensor with shape[…]"                       (TF ops, BFC allocator)
#   "Allocator (GPU_0_bfc) ran out of memory trying to allocate …"     (BFC allocator)
#   "RESOURCE_EXHAUSTED: Out of memory while trying to allocate …"     (XLA compile/run time)
#   "failed to allocate memory", "CUDA_ERROR_OUT_OF_MEMORY"            (stream executor)
TF_OOM_MARKERS = kittrial.OOM_MARKERS + (
    "OOM",
    "Out of memory",
    "RESOURCE_EXHAUSTED",
    "ResourceExhausted",
    "Allocator (",
    "ran out of memory",
    "failed to allocate memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "std::bad_alloc",
)


def _body(args, result: dict) -> None:
    with kittrial.phase(result, "import"):
        import tf_train  # pulls in tensorflow

    tf_train.train(args, result)


def classify(exc: BaseException) -> str:
    """"oom" for an allocation failure (by type or by message, anywhere in the cause chain)."""
    oom_types: tuple = (MemoryError,)
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None) if tf is not None else None
    t = getattr(errors, "ResourceExhaustedError", None)
    if isinstance(t, type):
        oom_types += (t,)
    return "oom" if kittrial.is_oom(exc, oom_types, TF_OOM_MARKERS) else "error"


def main(argv: list[str] | None = None) -> int:
    return kittrial.run(argv, MODES, ENGINES.__getitem__, _body, classify)


if __name__ == "__main__":
    code = main()
    # The result line is written and flushed. Skip the interpreter's teardown: after an
    # allocation failure TensorFlow's C++ destructors can abort ("double free or corruption"),
    # which would turn a reported oom into exit 134.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
