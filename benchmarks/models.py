"""Real network shapes built with onnx.helper and fixed seeds (no downloads): ResNet-18 and
ResNet-50."""

from __future__ import annotations

import numpy as np
import onnx

from examples.build_examples import NetBuilder


def _conv_bn(net: NetBuilder, x: str, cin: int, cout: int, k: int, stride: int,
             relu: bool) -> str:
    """A bias-free convolution, BatchNorm, and ReLU when `relu`."""
    y = net.batch_norm(net.conv(x, cin, cout, k, stride, bias=False), cout)
    return net.node("Relu", [y]) if relu else y


def _stem(net: NetBuilder) -> str:
    """The 7×7 stride-2 convolution and the 3×3 stride-2 max pool."""
    x = _conv_bn(net, "input", 3, 64, 7, 2, relu=True)
    return net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def _classifier(net: NetBuilder, name: str, x: str, c: int, size: int,
                classes: int) -> onnx.ModelProto:
    """Global average pool, flatten and the fully connected layer; the model."""
    f = net.node("Flatten", [net.node("GlobalAveragePool", [x])])
    w = net.const("fc_w", (net.rng.standard_normal((classes, c)) * 0.02).astype(np.float32))
    b = net.const("fc_b", np.zeros(classes, np.float32))
    logits = net.node("Gemm", [f, w, b], out="logits", transB=1)
    return net.model(name, {"input": [1, 3, size, size]}, logits)


def resnet18(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (BatchNorm after every conv, as torch exports it in training layout)."""
    net = NetBuilder(seed)
    x = _stem(net)
    c = 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                         (512, 1)):
        y = _conv_bn(net, x, c, cout, 3, stride, relu=True)
        y = _conv_bn(net, y, cout, cout, 3, 1, relu=False)
        skip = x if stride == 1 and c == cout else _conv_bn(net, x, c, cout, 1, stride, False)
        x = net.node("Relu", [net.node("Add", [y, skip])])
        c = cout
    return _classifier(net, "resnet18", x, c, size, classes)


def resnet50(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 (v1.5: the stride on the 3×3 conv of each bottleneck), built as `resnet18`."""
    net = NetBuilder(seed)
    x = _stem(net)
    c = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = _conv_bn(net, x, c, width, 1, 1, relu=True)
            y = _conv_bn(net, y, width, width, 3, s, relu=True)
            y = _conv_bn(net, y, width, 4 * width, 1, 1, relu=False)
            skip = _conv_bn(net, x, c, 4 * width, 1, s, relu=False) if i == 0 else x
            x = net.node("Relu", [net.node("Add", [y, skip])])
            c = 4 * width
    return _classifier(net, "resnet50", x, c, size, classes)
