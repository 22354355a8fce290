"""Three further CNNs for the scheduling benchmarks, built with the examples' NetBuilder (fixed
seeds, no downloads): an MTCNN-style O-net, a pre-activation ResNet-8 and a MobileNet-style
depthwise-separable net. Shapes follow the published architectures at small input sizes.

    python benchmarks/cnns.py OUT_DIR      # writes OUT_DIR/<name>.onnx for each
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.build_examples import NetBuilder


def onet(seed: int = 7) -> onnx.ModelProto:
    """MTCNN O-net on a 48×48 face crop: four conv/PReLU stages with max pools, a 256-wide
    dense layer, and the three heads (face score, box, landmarks) concatenated."""
    net = NetBuilder(seed)

    def prelu(x: str, c: int) -> str:
        slope = net.const(net.fresh("slope"), np.full((c, 1, 1), 0.25, np.float32))
        return net.node("PRelu", [x, slope])

    x = "input"
    c = 3
    for cout, k, pool in ((32, 3, (3, 2)), (64, 3, (3, 2)), (64, 3, (2, 2)), (128, 2, None)):
        w = net.rng.standard_normal((cout, c, k, k)) * np.sqrt(2.0 / (c * k * k))
        x = net.node("Conv", [x, net.const(net.fresh("w"), w.astype(np.float32)),
                              net.const(net.fresh("b"), net.vector(cout, 0.1))],
                     kernel_shape=[k, k])
        x = prelu(x, cout)
        if pool is not None:
            x = net.node("MaxPool", [x], kernel_shape=[pool[0]] * 2, strides=[pool[1]] * 2)
        c = cout
    x = net.node("Flatten", [x])
    x = net.node("Relu", [net.gemm(x, 128 * 2 * 2, 256)])
    heads = [net.gemm(x, 256, n) for n in (2, 4, 10)]
    return net.model("onet", {"input": [1, 3, 48, 48]},
                     net.node("Concat", heads, out="heads", axis=1))


def preact_resnet8(size: int = 32, seed: int = 8) -> onnx.ModelProto:
    """Pre-activation ResNet-8: a 3×3 stem, three stages of one pre-activation basic block
    (BN-ReLU-conv-BN-ReLU-conv, 1×1 projection when the shape changes), BN-ReLU, global
    average pool and a 10-way classifier."""
    net = NetBuilder(seed)
    x = net.conv("input", 3, 16, 3, bias=False)
    c = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        pre = net.node("Relu", [net.batch_norm(x, c)])
        y = net.conv(pre, c, cout, 3, stride, bias=False)
        y = net.conv(net.node("Relu", [net.batch_norm(y, cout)]), cout, cout, 3, bias=False)
        skip = x if stride == 1 and c == cout else net.conv(pre, c, cout, 1, stride, bias=False)
        x = net.node("Add", [y, skip])
        c = cout
    x = net.node("Relu", [net.batch_norm(x, c)])
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x])])
    return net.model("preact_resnet8", {"input": [1, 3, size, size]},
                     net.node("Identity", [net.gemm(x, c, 10)], out="logits"))


def mobilenet(size: int = 32, seed: int = 9) -> onnx.ModelProto:
    """MobileNet-style: a strided 3×3 stem, four depthwise-separable blocks (3×3 depthwise,
    1×1 pointwise, ReLU6 after each), global average pool, a 10-way classifier."""
    net = NetBuilder(seed)
    zero = net.const("zero", np.array(0.0, np.float32))
    six = net.const("six", np.array(6.0, np.float32))

    def relu6(x: str) -> str:
        return net.node("Clip", [x, zero, six])

    x = relu6(net.batch_norm(net.conv("input", 3, 16, 3, 2, bias=False), 16))
    c = 16
    for cout, stride in ((32, 1), (64, 2), (64, 1), (128, 2)):
        x = relu6(net.batch_norm(net.conv(x, c, c, 3, stride, group=c, bias=False), c))
        x = relu6(net.batch_norm(net.conv(x, c, cout, 1, bias=False), cout))
        c = cout
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x])])
    return net.model("mobilenet", {"input": [1, 3, size, size]},
                     net.node("Identity", [net.gemm(x, c, 10)], out="logits"))


CNNS: dict[str, Callable[[], onnx.ModelProto]] = {
    "onet": onet,
    "preact_resnet8": preact_resnet8,
    "mobilenet": mobilenet,
}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    for name, build in CNNS.items():
        onnx.save(build(), out / f"{name}.onnx")
        print(f"wrote {out / name}.onnx")


if __name__ == "__main__":
    main()
