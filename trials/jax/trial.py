#!/usr/bin/env python3
"""JAX trial for kitctl (trial protocol v1): one candidate in, one KIT-RESULT line out.

    python3 trials/jax/trial.py --benchmark maxbatch --batch 128 --mode xla ...

Mode: xla -> engine jax-xla (Flax ResNet-50; forward, loss, backward and the optax Adam update
in one jax.jit). XLA's client reads its memory settings from the environment when the backend
starts, so they are set here (configure_xla_env) before jax is imported; jax itself is imported
only inside the run, so even a broken install yields a result line.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Works from any cwd and in images where trials/common sits beside trials/jax.
for _p in (_HERE.parent / "common", _HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import kittrial  # noqa: E402
from kittrial import TrialError  # noqa: E402

MODES = ["xla"]
ENGINES = {"xla": "jax-xla"}
MIB = 2**20

# Messages of XLA's allocation failures, whatever exception type carries them (jax raises
# XlaRuntimeError / JaxRuntimeError with the status code in the text):
#   "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3.92GiB."  (BFC allocator)
#   "RESOURCE_EXHAUSTED: Failed to allocate request for 1.2GiB ..."        (platform allocator)
#   "CUDA_ERROR_OUT_OF_MEMORY", "std::bad_alloc"                          (driver / host)
JAX_OOM_MARKERS = kittrial.OOM_MARKERS + (
    "RESOURCE_EXHAUSTED",
    "Out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "failed to allocate memory",
    "std::bad_alloc",
)

# The two spellings of XLA's memory fraction: jaxlib's CUDA plugin refuses to start when both
# are set, so the trial sets the old one (read by jaxlib 0.10 and 0.11) and drops the new one.
FRACTION_ENV, FRACTION_ENV_NEW = "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"
PREALLOCATE_ENV, ALLOCATOR_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_ALLOCATOR"
CACHE_ENV, CACHE_DIR_ENV = "JAX_ENABLE_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR"
# The preallocated pool stays this far under the budget: XLA's memory outside the pool varies by a
# few MiB between candidates and differs from the no-budget calibration's (configure_xla_env).
POOL_SLACK_MIB = kittrial.FRAMEWORK_SLACK_MIB


def cuda_total_bytes() -> int:
    """Total memory of CUDA device 0 (the one GPU the host exposes), read through the driver
    API before jax starts: XLA's limit is a fraction of this total. No context is created."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise TrialError(f"--memory-budget-mib on --device cuda needs the CUDA driver "
                         f"(libcuda.so.1): {exc}") from exc
    dev, total = ctypes.c_int(), ctypes.c_size_t()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), 0)),
                       ("cuDeviceTotalMem_v2", (ctypes.byref(total), dev))):
        rc = getattr(cuda, call)(*args)
        if rc != 0:
            raise TrialError(f"{call} failed with CUresult {rc}: cannot read the GPU's total "
                             "memory to turn --memory-budget-mib into XLA's memory fraction")
    return int(total.value)


def configure_xla_env(args, settings: dict, total_bytes=cuda_total_bytes) -> None:
    """Set XLA's platform and memory environment for this candidate (before jax is imported)
    and record every value in settings.

    maxbatch: no persistent compilation cache (every candidate compiles as a first run does).
    cpu: JAX_PLATFORMS=cpu; the host limits memory. cuda: JAX_PLATFORMS=cuda (no silent CPU
    fallback). With a budget M: the BFC allocator, preallocated, limited to fraction
    (M − POOL_SLACK_MIB) / total of the device, so XLA fails with RESOURCE_EXHAUSTED past it
    (jax_train checks the limit XLA reports). Preallocated because a pool grown on demand fragments:
    on the H200 (2026-12-01, results/reference/logs/h200-call11-jax-maxbatch-nopreallocate.log) it failed at
    batch 6,144 where a preallocated pool a third smaller had passed 8,704. The slack: the host
    calibrates the memory XLA keeps outside its pool without a budget (no preallocation: 649 MiB
    there), and with a preallocated pool that memory was 640–659 MiB over 13 candidates (call 9);
    a pool of exactly M left the candidates 1–4 MiB over the gate (call 10). Without a budget:
    preallocation off, so the host's NVML readings show real use.
    """
    os.environ["JAX_PLATFORMS"] = "cpu" if args.device == "cpu" else "cuda"
    xla = {"JAX_PLATFORMS": os.environ["JAX_PLATFORMS"]}
    if args.benchmark == "maxbatch":
        # No persistent compilation cache, whatever the environment says: a cached executable
        # skips XLA's autotuning and the kernels it loads outside the pool, so a cached
        # calibration under-counts the overhead and fresh candidates then cross the budget (H200,
        # 2026-12-01: overhead 571 MiB warm vs 649–651 cold; every candidate above 26,000 bf16
        # over by 1 MiB). Throughput may use one: compilation is outside its window.
        os.environ.pop(CACHE_DIR_ENV, None)
        os.environ[CACHE_ENV] = xla[CACHE_ENV] = "false"
    if args.device == "cpu":
        settings.update(xla_env=xla, memory_budget_enforced="no: on cpu the host limits memory")
        return
    os.environ.pop(FRACTION_ENV_NEW, None)
    if args.memory_budget_mib is None:
        os.environ[PREALLOCATE_ENV] = "false"
        os.environ.pop(FRACTION_ENV, None)
        xla.update({PREALLOCATE_ENV: "false"})
        settings.update(xla_env=xla, memory_budget_enforced="no budget given (preallocation off)")
        return
    total = total_bytes()
    fraction = min(1.0, kittrial.framework_cap_mib(args.memory_budget_mib) * MIB / total)
    os.environ[PREALLOCATE_ENV] = "true"
    os.environ[ALLOCATOR_ENV] = "bfc"
    os.environ[FRACTION_ENV] = f"{fraction:.6f}"
    xla.update({PREALLOCATE_ENV: "true", ALLOCATOR_ENV: "bfc", FRACTION_ENV: os.environ[FRACTION_ENV]})
    settings.update(xla_env=xla, device_total_mib=round(total / MIB, 1),
                    memory_fraction=float(os.environ[FRACTION_ENV]),
                    pool_slack_mib=POOL_SLACK_MIB,
                    memory_budget_enforced=f"yes: {FRACTION_ENV} (BFC allocator, preallocated, "
                                           f"{POOL_SLACK_MIB} MiB under the budget)")


def _body(args, result: dict) -> None:
    configure_xla_env(args, result["settings"])
    with kittrial.phase(result, "import"):
        import jax_train  # pulls in jax, flax, optax

    jax_train.train(args, result)


def classify(exc: BaseException) -> str:
    """"oom" for an allocation failure (by type or by message, anywhere in the cause chain)."""
    return "oom" if kittrial.is_oom(exc, (MemoryError,), JAX_OOM_MARKERS) else "error"


def main(argv: list[str] | None = None) -> int:
    return kittrial.run(argv, MODES, ENGINES.__getitem__, _body, classify)


if __name__ == "__main__":
    code = main()
    # The result line is written and flushed. Skip the interpreter's teardown, where XLA's
    # C++ destructors run after an allocation failure and could turn a reported oom into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
