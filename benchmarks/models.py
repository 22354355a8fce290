"""Real network shapes built with onnx.helper and fixed seeds (no downloads): ResNet-18."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Net:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, arr: np.ndarray, kind: str) -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        scale = np.sqrt(2.0 / (cin * k * k))
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) * scale, "w")
        y = self.name("conv")
        self.nodes.append(helper.make_node("Conv", [x, w], [y], kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[k // 2] * 4,
                                           name=y))
        bn = [self.const(self.rng.uniform(0.5, 1.5, cout), "g"),
              self.const(self.rng.standard_normal(cout) * 0.1, "b"),
              self.const(self.rng.standard_normal(cout) * 0.1, "m"),
              self.const(self.rng.uniform(0.5, 1.5, cout), "v")]
        z = self.name("bn")
        self.nodes.append(helper.make_node("BatchNormalization", [y, *bn], [z], name=z))
        if not relu:
            return z
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [z], [r], name=r))
        return r

    def block(self, x: str, cin: int, cout: int, stride: int) -> str:
        y = self.conv_bn(x, cin, cout, 3, stride, relu=True)
        y = self.conv_bn(y, cout, cout, 3, 1, relu=False)
        skip = x if stride == 1 and cin == cout else self.conv_bn(x, cin, cout, 1, stride, False)
        s = self.name("add")
        self.nodes.append(helper.make_node("Add", [y, skip], [s], name=s))
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [s], [r], name=r))
        return r


def resnet18(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (BatchNorm after every conv, as torch exports it in training layout)."""
    net = _Net(seed)
    x = net.conv_bn("input", 3, 64, 7, 2, relu=True)
    p = net.name("maxpool")
    net.nodes.append(helper.make_node("MaxPool", [x], [p], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1], name=p))
    x, c = p, 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                         (512, 1)):
        x = net.block(x, c, cout, stride)
        c = cout
    g = net.name("gap")
    net.nodes.append(helper.make_node("GlobalAveragePool", [x], [g], name=g))
    f = net.name("flatten")
    net.nodes.append(helper.make_node("Flatten", [g], [f], name=f))
    w = net.const(net.rng.standard_normal((classes, c)) * 0.02, "fc_w")
    b = net.const(np.zeros(classes), "fc_b")
    net.nodes.append(helper.make_node("Gemm", [f, w, b], ["logits"], transB=1, name="fc"))
    graph = helper.make_graph(
        net.nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model
