"""Build the small example models with onnx.helper (fixed seeds) and their sample inputs.

Run ``python examples/build_examples.py`` to (re)write ``examples/<name>.onnx`` and
``examples/<name>.npz`` (inputs keyed by graph input name). The models are small on purpose
(≤ 64 channels, 16×16 or 32×32 pixels) so that compiling and simulating them stays quick.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 17


class NetBuilder:
    """Accumulates nodes and initializers; every layer helper returns its output name.

    Also the builder of `benchmarks/models.py` (ResNet-18) and of the random networks in
    `tests/test_random_networks.py`: one place that writes ONNX models by hand."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def const(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        """A node named after its op (or `out`, for a graph output's name)."""
        name = out or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)
        inputs = [x, self.const(self.fresh("w"), w.astype(np.float32))]
        if bias:
            inputs.append(self.const(self.fresh("b"), self.vector(cout, 0.1)))
        pad = k // 2
        return self.node(
            "Conv",
            inputs,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def vector(self, n: int, scale: float, offset: float = 0.0) -> np.ndarray:
        return (self.rng.standard_normal(n) * scale + offset).astype(np.float32)

    def batch_norm(self, x: str, c: int) -> str:
        params = [
            self.rng.uniform(0.5, 1.5, c).astype(np.float32),
            self.vector(c, 0.1),
            self.vector(c, 0.1),
            self.rng.uniform(0.5, 1.5, c).astype(np.float32),
        ]
        names = [
            self.const(self.fresh(role), p)
            for role, p in zip(("gamma", "beta", "mean", "var"), params, strict=True)
        ]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def gemm(self, x: str, k: int, n: int) -> str:
        w = (self.rng.standard_normal((n, k)) * np.sqrt(2.0 / k)).astype(np.float32)
        return self.node(
            "Gemm",
            [x, self.const(self.fresh("w"), w), self.const(self.fresh("b"), self.vector(n, 0.1))],
            transB=1,
        )

    def silu(self, x: str, gate_first: bool) -> str:
        gate = self.node("Sigmoid", [x])
        return self.node("Mul", [gate, x] if gate_first else [x, gate])

    def model(
        self, name: str, inputs: dict[str, list[int]], output: str, opset: int = OPSET
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            self.weights,
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        proto.ir_version = 8
        proto.producer_name = "raptor-examples"
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
        onnx.checker.check_model(inferred, full_check=True)
        return inferred


def mlp() -> onnx.ModelProto:
    """196-200-200-10 perceptron: Gemm (transB, as torch exports Linear) + Relu."""
    b = NetBuilder(seed=1)
    h = "x"
    sizes = [196, 200, 200, 10]
    for k, n in itertools.pairwise(sizes):
        h = b.gemm(h, k, n)
        if n != sizes[-1]:
            h = b.node("Relu", [h])
    return b.model("mlp", {"x": [1, 196]}, h)


def lenet() -> onnx.ModelProto:
    """LeNet-5 on a 32×32 image: conv/relu/maxpool twice, flatten, three Gemms."""
    b = NetBuilder(seed=2)
    h = "x"
    for cin, cout in ((1, 6), (6, 16)):
        w = b.rng.standard_normal((cout, cin, 5, 5)) * np.sqrt(2.0 / (cin * 25))
        h = b.node(
            "Conv",
            [
                h,
                b.const(b.fresh("w"), w.astype(np.float32)),
                b.const(b.fresh("b"), b.vector(cout, 0.1)),
            ],
            kernel_shape=[5, 5],
        )
        h = b.node("Relu", [h])
        h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Flatten", [h], axis=1)
    h = b.node("Relu", [b.gemm(h, 400, 120)])
    h = b.node("Relu", [b.gemm(h, 120, 84)])
    return b.model("lenet", {"x": [1, 1, 32, 32]}, b.gemm(h, 84, 10))


def resnet_block() -> onnx.ModelProto:
    """ResNet basic block: conv-BN-relu-conv-BN, identity shortcut add, relu."""
    b = NetBuilder(seed=3)
    c = 16
    h = b.node("Relu", [b.batch_norm(b.conv("x", c, c, 3, bias=False), c)])
    h = b.batch_norm(b.conv(h, c, c, 3, bias=False), c)
    return b.model("resnet_block", {"x": [1, c, 16, 16]}, b.node("Relu", [b.node("Add", [h, "x"])]))


def mobilenet_block() -> onnx.ModelProto:
    """MobileNetV2 inverted residual: 1×1 expand, 3×3 depthwise, 1×1 project, residual add."""
    b = NetBuilder(seed=4)
    c, expanded = 16, 64
    zero, six = (
        b.const("zero", np.array(0.0, np.float32)),
        b.const("six", np.array(6.0, np.float32)),
    )
    h = b.batch_norm(b.conv("x", c, expanded, 1, bias=False), expanded)
    h = b.node("Clip", [h, zero, six])
    h = b.batch_norm(b.conv(h, expanded, expanded, 3, group=expanded, bias=False), expanded)
    h = b.node("Clip", [h, zero, six])
    h = b.batch_norm(b.conv(h, expanded, c, 1, bias=False), c)
    return b.model("mobilenet_block", {"x": [1, c, 16, 16]}, b.node("Add", ["x", h]))


def yolo_neck() -> onnx.ModelProto:
    """YOLO-style neck: conv+SiLU, SPPF max pools, concat, nearest ×2 upsample, skip concat."""
    b = NetBuilder(seed=5)
    h = b.silu(b.batch_norm(b.conv("x", 32, 16, 1, bias=False), 16), gate_first=False)
    pools = [h]
    for _ in range(3):
        pools.append(b.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2, 2, 2, 2]))
    h = b.silu(b.conv(b.node("Concat", pools, axis=1), 64, 32, 1), gate_first=True)
    scales = b.const("scales", np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    h = b.node(
        "Resize",
        [h, "", scales],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    h = b.node("Concat", [h, "skip"], axis=1)
    h = b.silu(b.conv(h, 48, 32, 3), gate_first=False)
    inputs = {"x": [1, 32, 16, 16], "skip": [1, 16, 32, 32]}
    return b.model("yolo_neck", inputs, h, opset=18)


EXAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": mlp,
    "lenet": lenet,
    "resnet_block": resnet_block,
    "mobilenet_block": mobilenet_block,
    "yolo_neck": yolo_neck,
}


def sample_inputs(proto: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """One standard-normal float32 array per graph input."""
    rng = np.random.default_rng(seed)
    return {
        value.name: rng.standard_normal(
            [d.dim_value for d in value.type.tensor_type.shape.dim]
        ).astype(np.float32)
        for value in proto.graph.input
    }


def main() -> None:
    for name, build in EXAMPLES.items():
        proto = build()
        onnx.save(proto, HERE / f"{name}.onnx")
        np.savez(HERE / f"{name}.npz", **sample_inputs(proto))
        print(f"wrote examples/{name}.onnx and examples/{name}.npz")


if __name__ == "__main__":
    main()
