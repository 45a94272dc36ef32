"""ResNet-50 v1.5 in Keras, layer for layer the network of trials/pytorch/resnet50.py.

NHWC (channels_last). The same geometry as torchvision's ``resnet50``: the ImageNet stem
(7×7/2 conv without bias, BatchNorm, ReLU, 3×3/2 max-pool), bottleneck stages [3, 4, 6, 3] of
widths [64, 128, 256, 512] with expansion 4, the stride on each bottleneck's 3×3 conv (v1.5),
a 1×1 conv + BatchNorm projection shortcut on each stage's first block, global average pool
and a dense layer. For 10 classes: 23,528,522 trainable parameters, as the PyTorch trial
(BatchNorm's gamma/beta are trainable; its moving mean/variance are not, like PyTorch buffers).

PyTorch's padding is reproduced exactly: an explicit ZeroPadding2D before every strided or
3×3 conv and before the max-pool (after a ReLU, zero padding is what -inf padding gives),
because Keras's 'same' pads asymmetrically at stride 2. Under XLA the pad fuses into the conv.
BatchNorm takes PyTorch's defaults (eps 1e-5, momentum 0.1 == Keras momentum 0.9); the
initialisers are PyTorch's (Kaiming-normal fan-out convs; the default Linear init).
"""

from __future__ import annotations

import math

import keras
from keras import layers

EXPANSION = 4
STAGE_BLOCKS = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9  # Keras' moving = m * moving + (1 - m) * batch; torch's momentum 0.1


def _conv_init():
    # torch.nn.init.kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out)
    return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


def _conv(x, filters: int, kernel: int, stride: int, name: str):
    pad = (kernel - 1) // 2
    if pad:
        x = layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
    return layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=False,
                         kernel_initializer=_conv_init(), name=name)(x)


def _bn(x, name: str):
    return layers.BatchNormalization(axis=-1, epsilon=BN_EPSILON, momentum=BN_MOMENTUM,
                                     name=name)(x)


def _bottleneck(x, in_ch: int, width: int, stride: int, name: str):
    out_ch = width * EXPANSION
    identity = x
    if stride != 1 or in_ch != out_ch:
        identity = _bn(_conv(x, out_ch, 1, stride, f"{name}_down_conv"), f"{name}_down_bn")
    out = layers.ReLU(name=f"{name}_relu1")(_bn(_conv(x, width, 1, 1, f"{name}_conv1"), f"{name}_bn1"))
    out = layers.ReLU(name=f"{name}_relu2")(
        _bn(_conv(out, width, 3, stride, f"{name}_conv2"), f"{name}_bn2"))  # v1.5: stride here
    out = _bn(_conv(out, out_ch, 1, 1, f"{name}_conv3"), f"{name}_bn3")
    out = layers.Add(name=f"{name}_add")([out, identity])
    return layers.ReLU(name=f"{name}_out")(out)


def resnet50(num_classes: int = 10, input_shape=(32, 32, 3)) -> keras.Model:
    """Built under the current dtype policy; the logits are always float32 (mixed precision)."""
    inputs = keras.Input(shape=input_shape, name="images")
    x = _conv(inputs, 64, 7, 2, "stem_conv")  # ImageNet stem, kept for 32×32 inputs
    x = layers.ReLU(name="stem_relu")(_bn(x, "stem_bn"))
    x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="valid", name="stem_pool")(x)
    in_ch = 64
    for i, (blocks, width) in enumerate(zip(STAGE_BLOCKS, STAGE_WIDTHS)):
        for b in range(blocks):
            stride = 2 if (i > 0 and b == 0) else 1
            x = _bottleneck(x, in_ch, width, stride, f"layer{i + 1}_{b}")
            in_ch = width * EXPANSION
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    # torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
    bound = 1.0 / math.sqrt(in_ch)
    logits = layers.Dense(
        num_classes, dtype="float32", name="fc",
        kernel_initializer=keras.initializers.VarianceScaling(1.0 / 3.0, mode="fan_in",
                                                              distribution="uniform"),
        bias_initializer=keras.initializers.RandomUniform(-bound, bound))(x)
    return keras.Model(inputs, logits, name="resnet50_v1_5")


def count_parameters(model: keras.Model) -> dict[str, int]:
    """{"trainable": …, "non_trainable": …, "total": …} element counts."""
    def size(variables) -> int:
        return int(sum(math.prod(v.shape) for v in variables))

    trainable = size(model.trainable_weights)
    non_trainable = size(model.non_trainable_weights)
    return {"trainable": trainable, "non_trainable": non_trainable, "total": trainable + non_trainable}
