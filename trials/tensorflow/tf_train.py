"""The TensorFlow side of the trial: device set-up, the XLA training step, timing.

One fixed batch lives on the device for the whole run (no input pipeline), so the trial
measures the training step alone: forward, cross-entropy, backward, Adam — all of it one
XLA cluster (`tf.function(jit_compile=True)`). The GPU and CPU paths differ only in device
placement and in how the device's memory is configured.
"""

from __future__ import annotations

import os

# Keep TensorFlow's INFO chatter out of the stderr tail the artifact records (warnings stay).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import platform  # noqa: E402
import resource  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kittrial  # noqa: E402
from kittrial import TrialError  # noqa: E402
from resnet50_keras import count_parameters, resnet50  # noqa: E402

MIB = 2**20
LR = 1e-3


# ------------------------------------------------------------------------- set-up

def _build_info() -> dict:
    try:
        return dict(tf.sysconfig.get_build_info())
    except Exception:  # noqa: BLE001 - only describes the run
        return {}


def _setup_device(args, settings: dict, versions: dict) -> str:
    """Configure the device before TensorFlow initialises it; the device string to place on."""
    gpus = tf.config.list_physical_devices("GPU")
    if args.device == "cpu":
        if gpus:
            tf.config.set_visible_devices([], "GPU")  # a CPU candidate never touches the GPU
        versions["device"] = f"cpu {platform.machine()} {platform.processor()}".strip()
        settings.update(memory_growth=None, memory_limit_mib=None,
                        memory_budget_enforced="no: on cpu the host limits memory")
        return "/CPU:0"

    if not gpus:
        build = _build_info()
        raise TrialError("--device cuda but TensorFlow sees no GPU (tensorflow "
                         f"{tf.__version__}, CUDA build: {bool(build.get('is_cuda_build'))}, "
                         f"CUDA {build.get('cuda_version')})")
    gpu = gpus[0]  # the host exposes exactly one GPU, by UUID
    tf.config.set_visible_devices([gpu], "GPU")
    if args.memory_budget_mib is not None:
        # The host gives us budget minus this engine's calibrated overhead. TensorFlow's
        # allocator reserves the whole limit up front and fails past it (ResourceExhausted);
        # the limit stays kittrial.FRAMEWORK_SLACK_MIB under the budget (why: there).
        limit = int(kittrial.framework_cap_mib(args.memory_budget_mib))
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
        settings.update(memory_growth=False, memory_limit_mib=limit,
                        budget_slack_mib=kittrial.FRAMEWORK_SLACK_MIB,
                        memory_budget_enforced="yes: tf.config.set_logical_device_configuration "
                        f"memory_limit (reserved up front), {kittrial.FRAMEWORK_SLACK_MIB} MiB under the budget")
    else:
        # Without a budget, grow on demand so the host's NVML readings mean something.
        tf.config.experimental.set_memory_growth(gpu, True)
        settings.update(memory_growth=True, memory_limit_mib=None,
                        memory_budget_enforced="no budget given (memory growth on)")
    try:
        details = tf.config.experimental.get_device_details(gpu)
        versions["device"] = details.get("device_name", gpu.name)
        cc = details.get("compute_capability")
        if cc:
            versions["compute_capability"] = ".".join(map(str, cc))
    except Exception:  # noqa: BLE001
        versions["device"] = gpu.name
    return "/GPU:0"


def _to_device(images: np.ndarray, labels: np.ndarray, poison: bool):
    """uint8 NHWC -> normalised float32 NHWC, resident on the current device."""
    x = tf.cast(tf.constant(images), tf.float32) / 255.0
    mean = tf.constant(kittrial.CIFAR10_MEAN, dtype=tf.float32)
    std = tf.constant(kittrial.CIFAR10_STD, dtype=tf.float32)
    x = (x - mean) / std
    if poison:  # KIT_TRIAL_FAULT=nan test hook
        x = x * float("nan")
    return x, tf.constant(labels.astype(np.int32))


# -------------------------------------------------------------------------- train

def train(args, result: dict) -> None:
    settings, versions = result["settings"], result["versions"]
    build = _build_info()
    versions.update(framework="tensorflow", tensorflow=tf.__version__, keras=keras.__version__,
                    cuda=build.get("cuda_version"), cudnn=build.get("cudnn_version"),
                    cuda_build=bool(build.get("is_cuda_build")))
    device = _setup_device(args, settings, versions)
    try:
        with tf.device(device):
            _train(args, result)
    finally:
        _record_peaks(result, device)


def _train(args, result: dict) -> None:
    settings = result["settings"]
    images, labels, settings["data"] = kittrial.load_data(args)
    x, y = _to_device(images, labels, poison=kittrial.fault_requested("nan"))

    bf16 = args.precision == "bf16"
    # Before the model is built: layers take the policy in force when they are created.
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if bf16 else "float32")
    settings["dtype_policy"] = keras.mixed_precision.global_policy().name
    settings["logits_dtype"] = "float32"

    keras.utils.set_random_seed(args.seed)
    model = resnet50(num_classes=kittrial.NUM_CLASSES, input_shape=(args.image_size, args.image_size, 3))
    counts = count_parameters(model)
    result["parameters"] = counts["trainable"]  # what PyTorch's parameters() counts
    result["parameters_total"] = counts["total"]  # + BatchNorm moving mean/variance
    settings.update(model_impl="trials/tensorflow/resnet50_keras.py (ResNet-50 v1.5, Keras)",
                    parameter_counts=counts, data_format="channels_last (NHWC)",
                    loss="sparse_softmax_cross_entropy_with_logits (mean)")

    optimizer = keras.optimizers.Adam(learning_rate=LR)
    optimizer.build(model.trainable_variables)  # its slots exist before the step is traced
    settings["optimizer"] = {"name": "Adam", "lr": LR, "beta_1": optimizer.beta_1,
                             "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon,
                             "impl": "keras.optimizers.Adam (Keras defaults apart from lr)"}
    settings["xla"] = {"jit_compile": True, "scope": "whole step: forward, loss, backward, Adam"}
    settings["cudnn_benchmark_effect"] = "none (XLA autotunes convolutions itself)"

    variables = model.trainable_variables

    @tf.function(jit_compile=True)
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=tf.cast(logits, tf.float32)))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    class TfStepper(kittrial.Stepper):
        """The window's view of the XLA step: a chunk ends by fetching its last loss."""

        def run(self, n: int):
            loss = None
            for _ in range(n):
                loss = train_step(x, y)
            return loss

        def sync(self, loss) -> None:
            if loss is not None:
                loss.numpy()

        def value(self, loss) -> float | None:
            return None if loss is None else float(loss.numpy())

    kittrial.fault_point()
    # The first call traces and XLA-compiles the step (inside the warm-up).
    kittrial.measure_throughput(args, result, TfStepper())


def _record_peaks(result: dict, device: str) -> None:
    """Peaks are reported on every outcome, OOM included; never mask the real error."""
    try:
        # ru_maxrss is KiB on Linux: the trial process's own peak host memory.
        result["host_peak_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        if device.startswith("/GPU"):
            # The BFC allocator's own peak (bytes in use, not what it reserved up front).
            info = tf.config.experimental.get_memory_info("GPU:0")
            result["framework_peak_mib"] = round(info["peak"] / MIB, 1)
            result["framework_current_mib"] = round(info["current"] / MIB, 1)
    except Exception:  # noqa: BLE001 - a broken device context must not hide the cause
        pass
