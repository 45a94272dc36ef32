"""The JAX side of the trial: device check, the jitted training step, timing, peaks.

One fixed batch lives on the device for the whole run (no input pipeline), so the trial measures
the training step alone: forward, cross-entropy, backward, Adam — all of it one `jax.jit`
(one XLA executable) whose model/optimizer state buffers are donated, so each step updates
them in place. The step is compiled ahead of time (`.lower().compile()`), timed apart as
`compile_seconds` and counted in `warmup_seconds`, as the first step's tracing is in the
other engines' warm-up.
"""

from __future__ import annotations

import importlib.metadata
import platform
import resource
import time

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax

import kittrial
import xla_log
from kittrial import TrialError
from resnet50_flax import count_parameters, init_variables, resnet50

MIB = 2**20
LR = 1e-3


# ------------------------------------------------------------------------- set-up

def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_versions(versions: dict) -> None:
    """CUDA/cuDNN as the jax CUDA plugin reports them (ints like torch's cudnn), when present."""
    try:
        from jax._src.lib import cuda_versions  # private, but what jax.print_environment_info uses
    except ImportError:
        cuda_versions = None
    if cuda_versions is None:
        versions.update(cuda=None, cudnn=None)
        return
    for key, fn in (("cuda_runtime", "cuda_runtime_get_version"),
                    ("cuda_driver", "cuda_driver_get_version"),
                    ("cudnn", "cudnn_get_version")):
        try:
            versions[key] = int(getattr(cuda_versions, fn)())
        except Exception:  # noqa: BLE001 - only describes the run
            versions[key] = None
    rt = versions.get("cuda_runtime")
    versions["cuda"] = f"{rt // 1000}.{rt % 1000 // 10}" if rt else None
    for dist in ("jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt"):
        if (v := _dist_version(dist)) is not None:
            versions[dist] = v


def _device(args, settings: dict, versions: dict):
    """The one device this candidate runs on; JAX_PLATFORMS (trial.configure_xla_env) already
    restricted jax to the requested platform, so a missing GPU fails here, not silently on CPU."""
    try:
        devices = jax.devices()
    except RuntimeError as exc:
        raise TrialError(f"--device {args.device} but jax {jax.__version__} cannot start that "
                         f"backend: {kittrial.one_line(exc)}") from exc
    device = devices[0]  # the host exposes exactly one GPU, by UUID
    want = "cpu" if args.device == "cpu" else "gpu"
    if device.platform != want:
        raise TrialError(f"--device {args.device} but jax's first device is {device} "
                         f"(platform {device.platform})")
    settings["backend"] = jax.default_backend()
    if want == "cpu":
        versions["device"] = f"cpu {platform.machine()} {platform.processor()}".strip()
        return device
    versions["device"] = device.device_kind
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    settings["xla_bytes_limit_mib"] = None if limit is None else round(limit / MIB, 1)
    budget = args.memory_budget_mib
    # XLA's limit is the budget only if it read the fraction: say so rather than run uncapped.
    if budget is not None and limit is not None and limit > (budget + 1) * MIB:
        raise TrialError(f"XLA's allocator limit is {limit / MIB:.0f} MiB, above the budget of "
                         f"{budget} MiB: the memory fraction was not applied")
    return device


def _to_device(images: np.ndarray, labels: np.ndarray, device, poison: bool):
    """uint8 NHWC -> normalised float32 NHWC, resident on the device."""
    x = images.astype(np.float32) / 255.0
    x = (x - np.asarray(kittrial.CIFAR10_MEAN, np.float32)) / np.asarray(kittrial.CIFAR10_STD,
                                                                        np.float32)
    if poison:  # KIT_TRIAL_FAULT=nan test hook
        x = x * np.float32("nan")
    return jax.device_put(x, device), jax.device_put(labels.astype(np.int32), device)


# -------------------------------------------------------------------------- train

def train(args, result: dict) -> None:
    settings, versions = result["settings"], result["versions"]
    versions.update(framework="jax", jax=jax.__version__, jaxlib=jaxlib.__version__,
                    flax=flax.__version__, optax=optax.__version__)
    _cuda_versions(versions)
    device = _device(args, settings, versions)
    try:
        with jax.default_device(device):
            _train(args, result, device)
    finally:
        _record_peaks(result, device)


def _train(args, result: dict, device) -> None:
    settings = result["settings"]
    images, labels, settings["data"] = kittrial.load_data(args)
    x, y = _to_device(images, labels, device, poison=kittrial.fault_requested("nan"))

    bf16 = args.precision == "bf16"
    model = resnet50(num_classes=kittrial.NUM_CLASSES, dtype=jnp.bfloat16 if bf16 else jnp.float32)
    t0 = time.perf_counter()
    variables = jax.device_put(init_variables(model, args.seed, (2, args.image_size, args.image_size, 3)), device)
    result["init_seconds"] = time.perf_counter() - t0
    counts = count_parameters(variables)
    result["parameters"] = counts["trainable"]  # what PyTorch's parameters() counts
    result["parameters_total"] = counts["total"]  # + BatchNorm running mean/variance
    settings.update(model_impl="trials/jax/resnet50_flax.py (ResNet-50 v1.5, flax.linen)",
                    parameter_counts=counts, data_format="NHWC",
                    loss="optax.softmax_cross_entropy_with_integer_labels (mean)",
                    precision_policy=({"params": "float32", "compute": "bfloat16",
                                       "logits": "float32"} if bf16 else
                                      {"params": "float32", "compute": "float32",
                                       "logits": "float32"}),
                    batchnorm="training mode, running statistics updated every step",
                    init="numpy draws from the initialisers' distributions (resnet50_flax.init_variables)")

    tx = optax.adam(LR)
    settings["optimizer"] = {"name": "Adam", "lr": LR, "b1": 0.9, "b2": 0.999, "eps": 1e-8,
                             "impl": "optax.adam (optax defaults apart from lr)"}
    state = (variables["params"], variables["batch_stats"], tx.init(variables["params"]))
    del variables

    def train_step(state, images, labels):
        params, batch_stats, opt_state = state

        def loss_fn(params):
            logits, updates = model.apply({"params": params, "batch_stats": batch_stats},
                                          images, train=True, mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(
                logits.astype(jnp.float32), labels).mean()
            return loss, updates["batch_stats"]

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), new_stats, opt_state), loss

    # The state is donated: XLA writes the new parameters, statistics and Adam moments into
    # the old buffers instead of holding two copies.
    step_jit = jax.jit(train_step, donate_argnums=(0,))
    settings["xla"] = {"jit": "whole step: forward, loss, backward, Adam update, BN statistics",
                       "donate": "model/optimizer state", "compile": "ahead of time (lower/compile)"}
    settings["cudnn_benchmark_effect"] = "none (XLA autotunes convolutions itself)"
    settings["xla_rematerialization_null_means"] = xla_log.NULL_MEANS

    kittrial.fault_point()

    # XLA logs its rematerialisation (recomputing activations to fit its memory limit) on fd 2
    # while it compiles: captured there and recorded, on every outcome (xla_log).
    t0 = time.perf_counter()
    xla_said = xla_log.Captured()
    try:
        with xla_log.capture_fd2(xla_said):
            step = step_jit.lower(state, x, y).compile()
    finally:
        result["xla_rematerialization"] = xla_log.parse_rematerialization(xla_said.text)
    compile_seconds = time.perf_counter() - t0
    result["compile_seconds"] = compile_seconds
    result["xla_memory_analysis"] = xla_log.memory_analysis(step)
    # The generic field the host's guided search reads (before the step runs, so a memory failure
    # carries it too): XLA's compiled peak, MiB; null where this backend reports none.
    result["compiled_peak_mib"] = xla_log.compiled_peak_mib(result["xla_memory_analysis"])

    class JaxStepper(kittrial.Stepper):
        """The window's view of the jitted step: the state threads through; a chunk ends with
        block_until_ready on the state and the last loss (XLA has no host-readable device clock here)."""

        def __init__(self, state):
            self.state = state

        def run(self, n: int):
            loss = None
            for _ in range(n):
                self.state, loss = step(self.state, x, y)
            return loss

        def sync(self, loss) -> None:
            jax.block_until_ready((self.state, loss))

        def value(self, loss) -> float | None:
            return None if loss is None else float(loss)

    # Compilation (ahead of time, above) counts in the warm-up, as the other engines' first step does.
    kittrial.measure_throughput(args, result, JaxStepper(state), extra_warmup_seconds=compile_seconds)


def device_peaks(stats: dict) -> dict:
    """The result's framework fields from XLA's device memory stats.

    framework_peak_mib is what the budget caps, as torch's max_memory_reserved is for PyTorch: the
    BFC allocator's pool (memory it took from the device), not its bytes in use. The host's
    calibration takes overhead = device delta − framework peak, and XLA's fraction caps the pool;
    with in-use bytes the pool's free part counted as overhead (H200, batch 16 without a budget:
    pool 10,238 MiB, in use 4,984, delta 10,887 → 5,903 MiB "overhead" instead of 649), and every
    later candidate got 5 GiB less than its budget. The in-use peak stays recorded beside it."""
    peaks = {}
    for key, out in (("peak_bytes_in_use", "framework_in_use_peak_mib"),
                     ("bytes_in_use", "framework_current_mib"),
                     ("peak_pool_bytes", "framework_pool_peak_mib"),
                     ("bytes_limit", "framework_limit_mib")):
        if stats.get(key) is not None:
            peaks[out] = round(stats[key] / MIB, 1)
    # Some PJRT builds report no pool: then the in-use peak is the best there is.
    peak = peaks.get("framework_pool_peak_mib", peaks.get("framework_in_use_peak_mib"))
    if peak is not None:
        peaks["framework_peak_mib"] = peak
    return peaks


def _record_peaks(result: dict, device) -> None:
    """Peaks are reported on every outcome, OOM included; never mask the real error."""
    try:
        # ru_maxrss is KiB on Linux: the trial process's own peak host memory.
        result["host_peak_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        if device.platform == "gpu":
            result.update(device_peaks(device.memory_stats() or {}))
    except Exception:  # noqa: BLE001 - a broken device context must not hide the cause
        pass
