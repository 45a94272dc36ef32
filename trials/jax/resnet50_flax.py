"""ResNet-50 v1.5 in Flax (linen), layer for layer the network of trials/pytorch/resnet50.py.

NHWC. torchvision's ``resnet50`` geometry: the ImageNet stem (7×7/2 conv without bias, BatchNorm,
ReLU, 3×3/2 max-pool), bottleneck stages [3, 4, 6, 3] of widths [64, 128, 256, 512] with
expansion 4, the stride on each bottleneck's 3×3 conv (v1.5), a 1×1 conv + BatchNorm projection
shortcut on each stage's first block, global average pool and a dense layer. For 10 classes:
23,528,522 parameters, as the PyTorch trial; BatchNorm's running mean/variance live in the
`batch_stats` collection (53,120 values), like PyTorch buffers.

Module names follow PyTorch's (conv1, bn1, layer1_0.conv2, layer1_0.downsample_conv, fc), so a
test can compare every tensor's shape with the PyTorch model's (kernels are HWIO, dense
weights in×out: the transposes of PyTorch's OIHW and out×in).

Padding is PyTorch's: symmetric and explicit (Flax's 'SAME' pads asymmetrically at stride 2);
the max-pool pads with -inf like PyTorch. BatchNorm takes PyTorch's defaults (eps 1e-5, momentum
0.1 == Flax momentum 0.9); one known difference: Flax updates the running variance with the
biased batch variance, PyTorch with the unbiased one (same cost, slightly different statistic).
Initialisers are PyTorch's: Kaiming-normal fan-out convs, the default Linear init.

Mixed precision (`dtype=bfloat16`): parameters stay float32 (param_dtype), convolutions and
BatchNorm outputs are bfloat16 (BatchNorm's statistics are reduced in float32), and the
classifier runs in float32 so the logits are float32.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

EXPANSION = 4
STAGE_BLOCKS = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9  # Flax: ra = m * ra + (1 - m) * batch; PyTorch's momentum 0.1

# torch.nn.init.kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out).
_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")  # JAX: untruncated


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)
    return init


class Bottleneck(nn.Module):
    width: int
    stride: int
    project: bool  # a 1×1 conv + BN shortcut (first block of a stage)
    dtype: Any = jnp.float32

    def _conv(self, features: int, kernel: int, stride: int, name: str):
        pad = (kernel - 1) // 2
        return nn.Conv(features, (kernel, kernel), strides=(stride, stride),
                       padding=((pad, pad), (pad, pad)), use_bias=False, kernel_init=_CONV_INIT,
                       dtype=self.dtype, param_dtype=jnp.float32, name=name)

    def _bn(self, train: bool, name: str):
        return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM,
                            epsilon=BN_EPSILON, dtype=self.dtype, param_dtype=jnp.float32,
                            name=name)

    @nn.compact
    def __call__(self, x, train: bool):
        out_ch = self.width * EXPANSION
        identity = x
        if self.project:
            identity = self._bn(train, "downsample_bn")(
                self._conv(out_ch, 1, self.stride, "downsample_conv")(x))
        out = nn.relu(self._bn(train, "bn1")(self._conv(self.width, 1, 1, "conv1")(x)))
        out = nn.relu(self._bn(train, "bn2")(
            self._conv(self.width, 3, self.stride, "conv2")(out)))  # v1.5: stride here
        out = self._bn(train, "bn3")(self._conv(out_ch, 1, 1, "conv3")(out))
        return nn.relu(out + identity)


class ResNet50(nn.Module):
    num_classes: int = 10
    dtype: Any = jnp.float32  # compute dtype; parameters are always float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = x.astype(self.dtype)
        # ImageNet stem, kept for 32×32 inputs: the benchmark is ResNet-50 as published.
        x = nn.Conv(64, (7, 7), strides=(2, 2), padding=((3, 3), (3, 3)), use_bias=False,
                    kernel_init=_CONV_INIT, dtype=self.dtype, param_dtype=jnp.float32,
                    name="conv1")(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                         dtype=self.dtype, param_dtype=jnp.float32, name="bn1")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        in_ch = 64
        for i, (blocks, width) in enumerate(zip(STAGE_BLOCKS, STAGE_WIDTHS)):
            for b in range(blocks):
                stride = 2 if (i > 0 and b == 0) else 1
                x = Bottleneck(width, stride, project=(stride != 1 or in_ch != width * EXPANSION),
                               dtype=self.dtype, name=f"layer{i + 1}_{b}")(x, train)
                in_ch = width * EXPANSION
        x = jnp.mean(x, axis=(1, 2))
        # torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and
        # bias. float32 compute: the logits (and the loss) are float32 under bf16 too.
        bound = 1.0 / math.sqrt(in_ch)
        return nn.Dense(self.num_classes, dtype=jnp.float32, param_dtype=jnp.float32,
                        kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"),
                        bias_init=_uniform(bound), name="fc")(x.astype(jnp.float32))


def resnet50(num_classes: int = 10, dtype=jnp.float32) -> ResNet50:
    return ResNet50(num_classes=num_classes, dtype=dtype)


def init_variables(model: ResNet50, seed: int, input_shape=(2, 32, 32, 3)) -> dict:
    """The model's variables drawn on the host with numpy, from the distributions the modules'
    initialisers use (as `model.init` would, but not its values).

    `model.init` traces the forward pass and has XLA compile it with ~160 random-number
    generators: ~40 s of CPU on a small machine, longer than compiling some training steps.
    Here jax only traces the shapes (`eval_shape`, no compile); numpy fills them in ~1 s.
    """
    shapes = jax.eval_shape(lambda key: model.init(key, jnp.zeros(input_shape, jnp.float32),
                                                   train=False), jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        names = [getattr(p, "key", str(p)) for p in path]
        collection, module, name = names[0], names[-2], names[-1]
        shape = leaf.shape
        if collection == "batch_stats":  # running mean 0, running variance 1
            return np.zeros(shape, np.float32) if name == "mean" else np.ones(shape, np.float32)
        if name == "scale":
            return np.ones(shape, np.float32)
        if module == "fc":  # torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            bound = 1.0 / math.sqrt(shapes["params"]["fc"]["kernel"].shape[0])
            return rng.uniform(-bound, bound, shape).astype(np.float32)
        if name == "bias":
            return np.zeros(shape, np.float32)
        if name == "kernel" and len(shape) == 4:  # HWIO; Kaiming-normal, fan_out = H*W*O
            std = math.sqrt(2.0 / (shape[0] * shape[1] * shape[3]))
            return (rng.standard_normal(shape, np.float32) * std).astype(np.float32)
        raise ValueError(f"no initialiser for {'/'.join(names)} {shape}")

    return jax.tree_util.tree_map_with_path(draw, shapes)


def count_parameters(variables) -> dict[str, int]:
    """{"trainable": params, "non_trainable": batch_stats, "total": both} element counts."""
    def size(tree) -> int:
        return int(sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(tree)))

    trainable = size(variables.get("params", {}))
    non_trainable = size(variables.get("batch_stats", {}))
    return {"trainable": trainable, "non_trainable": non_trainable,
            "total": trainable + non_trainable}
