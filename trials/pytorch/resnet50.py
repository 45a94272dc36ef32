"""ResNet-50 v1.5, defined here so the trial needs no torchvision.

Layer for layer the same network as torchvision's ``resnet50`` (stride on the 3×3
conv of each bottleneck, as in v1.5), with the same initialisation, so parameter
counts and memory use are comparable with the reference figures:
``ResNet50(num_classes=10)`` has 23,528,522 parameters.
"""

from __future__ import annotations

import torch
from torch import nn

EXPANSION = 4
STAGE_BLOCKS = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels)


class Bottleneck(nn.Module):
    def __init__(self, in_ch: int, width: int, stride: int):
        super().__init__()
        out_ch = width * EXPANSION
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = _bn(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), _bn(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        # ImageNet stem, kept even for 32×32 inputs: the benchmark is ResNet-50 as published.
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = _bn(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, in_ch = [], 64
        for i, (blocks, width) in enumerate(zip(STAGE_BLOCKS, STAGE_WIDTHS)):
            layers = []
            for b in range(blocks):
                layers.append(Bottleneck(in_ch, width, stride=2 if (i > 0 and b == 0) else 1))
                in_ch = width * EXPANSION
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)  # default Linear init, as torchvision
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def init_weights(net: nn.Module) -> None:
    """torchvision's ResNet initialisation: He (fan-out) convolutions, BatchNorm at 1/0."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def resnet50(num_classes: int = 10) -> ResNet50:
    return ResNet50(num_classes=num_classes)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
