"""ONNX → plan graph: load, check, bind the batch dimension, fold constants, canonicalize ops.

The importer walks the (topologically sorted) ONNX nodes once. A node whose inputs are all
known constants is evaluated with onnx's reference implementation, which folds the shape
arithmetic torch emits (Shape → Gather → Unsqueeze → Concat → Reshape) and Constant nodes.
Every other node must be one of the supported operators and becomes one or more plans with
normalized attributes; BatchNormalization is folded into a single-use Conv/Gemm producer and
``x * Sigmoid(x)`` becomes ``silu``. Every error is a one-line ``FrontendError``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, inliner, numpy_helper

from raptor.frontend.errors import FrontendError
from raptor.frontend.plan import Plan, PlanGraph, PlanValue
from raptor.frontend.shapes import (
    broadcast_shape,
    conv_out,
    conv_transpose_out,
    floor_scaled,
    matmul_shape,
    pool_out,
    same_pads,
)

__all__ = ["SUPPORTED_OPS", "import_onnx"]

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto

_MIN_OPSET = 7
_RANDOM_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
}


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _load(source: ModelSource) -> tuple[onnx.ModelProto, str]:
    """Parse the model; anything that is not a complete ONNX protobuf is a FrontendError."""
    if isinstance(source, onnx.ModelProto):
        model, label = onnx.ModelProto(), "<ModelProto>"
        model.CopyFrom(source)
    else:
        label = "<bytes>" if isinstance(source, bytes) else str(source)
        if not isinstance(source, bytes) and not Path(source).is_file():
            raise FrontendError(f"{label}: no such file")
        try:
            if isinstance(source, bytes):
                model = onnx.load_model_from_string(source)
            else:
                model = onnx.load(os.fspath(source))
        except (DecodeError, ValueError, RuntimeError, OSError) as error:
            raise FrontendError(
                f"{label}: cannot parse as an ONNX model (not ONNX, or truncated): "
                f"{_first_line(error)}"
            ) from error
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise FrontendError(f"{label}: not an ONNX model (no IR version, graph or opset import)")
    return model, label


def _check(model: onnx.ModelProto, label: str) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as error:
        raise FrontendError(
            f"{label}: invalid ONNX model (corrupt or truncated?): {_first_line(error)}"
        ) from error


def _default_opset(model: onnx.ModelProto, label: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise FrontendError(f"{label}: the model imports no version of the default ONNX domain")
    if versions[0] < _MIN_OPSET:
        raise FrontendError(
            f"{label}: opset {versions[0]} is older than {_MIN_OPSET}; re-export with opset 11-21"
        )
    return versions[0]


def _bind_batch(model: onnx.ModelProto, label: str) -> list[str]:
    """Fix a symbolic leading dimension of every graph input to 1; reject other dynamic dims."""
    graph = model.graph
    initialized = {init.name for init in graph.initializer}
    bound: set[str] = set()
    notes = []
    for value in graph.input:
        if value.name in initialized:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise FrontendError(f"{label}: input {value.name!r} is not a tensor")
        if tensor.elem_type != onnx.TensorProto.FLOAT:
            kind = onnx.TensorProto.DataType.Name(tensor.elem_type)
            raise FrontendError(
                f"{label}: input {value.name!r} has element type {kind}; "
                "only float32 tensors are supported"
            )
        if not tensor.HasField("shape"):
            raise FrontendError(f"{label}: input {value.name!r} has no shape; export a fixed shape")
        dims = tensor.shape.dim
        spelled = [
            str(d.dim_value) if d.WhichOneof("value") == "dim_value" else d.dim_param or "?"
            for d in dims
        ]
        for axis, dim in enumerate(dims):
            if dim.WhichOneof("value") == "dim_value":
                if dim.dim_value <= 0:
                    raise FrontendError(
                        f"{label}: input {value.name!r} has a zero-size dimension at axis {axis} "
                        f"(shape [{', '.join(spelled)}])"
                    )
                continue
            if axis != 0:
                raise FrontendError(
                    f"{label}: input {value.name!r} has a dynamic dimension "
                    f"{spelled[axis]!r} at axis {axis} (shape [{', '.join(spelled)}]); only the "
                    "batch dimension (axis 0) may be symbolic: export with a fixed input size"
                )
            name = dim.dim_param or "?"
            bound.add(dim.dim_param)
            dim.dim_value = 1
            notes.append(f"batch dimension {name!r} of input {value.name!r} bound to 1")
    bound.discard("")
    for value in graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if dim.WhichOneof("value") == "dim_param" and dim.dim_param in bound:
                dim.dim_value = 1
    del graph.value_info[:]
    return notes


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Fully static shapes ONNX infers; used to cross-check the importer's own shapes."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError):
        return {}
    shapes = {}
    for value in [*inferred.graph.value_info, *inferred.graph.output]:
        tensor = value.type.tensor_type
        if tensor.HasField("shape") and all(
            d.WhichOneof("value") == "dim_value" for d in tensor.shape.dim
        ):
            shapes[value.name] = tuple(d.dim_value for d in tensor.shape.dim)
    return shapes


class _Node:
    """A NodeProto with its attributes decoded and a name to report."""

    def __init__(self, proto: onnx.NodeProto, index: int) -> None:
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs: dict[str, Any] = {
            a.name: helper.get_attribute_value(a) for a in proto.attribute
        }

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] != ""

    def attr_int(self, key: str, default: int) -> int:
        return int(self.attrs.get(key, default))

    def attr_float(self, key: str, default: float) -> float:
        return float(self.attrs.get(key, default))

    def attr_str(self, key: str, default: str) -> str:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    def attr_ints(self, key: str, default: Sequence[int]) -> list[int]:
        return [int(v) for v in self.attrs.get(key, default)]


class _Importer:
    """Conversion state: constants, activations, aliases and the plans emitted so far."""

    def __init__(self, model: onnx.ModelProto, opset: int, notes: list[str]) -> None:
        self.model = model
        self.opset = opset
        self.notes = notes
        self.inferred = _inferred_shapes(model)
        graph = model.graph
        self.consts: dict[str, np.ndarray] = {
            init.name: numpy_helper.to_array(init) for init in graph.initializer
        }
        self.values: dict[str, PlanValue] = {}
        self.inputs: list[PlanValue] = []
        for value in graph.input:
            if value.name not in self.consts:
                shape = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
                self.inputs.append(PlanValue(value.name, shape))
                self.values[value.name] = self.inputs[-1]
        self.alias: dict[str, str] = {}
        self.plans: list[Plan] = []
        self.producer: dict[str, Plan] = {}
        self.uses: Counter[str] = Counter(i for node in graph.node for i in node.input if i)
        self.uses.update(value.name for value in graph.output)
        self.plan_names: set[str] = set()
        self.value_names = {v.name for v in graph.input} | set(self.consts)
        self.value_names |= {o for node in graph.node for o in node.output}

    # -- values ------------------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def is_const(self, name: str) -> bool:
        return self.resolve(name) in self.consts

    def act(self, node: _Node, index: int) -> PlanValue:
        """The activation feeding input ``index`` (constants here are unsupported)."""
        name = self.resolve(node.inputs[index])
        if name in self.consts:
            raise FrontendError(
                f"{node.op} node {node.name!r}: input {index} ({node.inputs[index]!r}) is a "
                "constant where a computed tensor is expected; this variant is not supported"
            )
        return self.values[name]

    def const(self, node: _Node, index: int, role: str) -> np.ndarray | None:
        """The constant at input ``index`` (None when absent); computed tensors are an error."""
        if not node.has_input(index):
            return None
        name = self.resolve(node.inputs[index])
        if name not in self.consts:
            raise FrontendError(
                f"{node.op} node {node.name!r}: {role} ({node.inputs[index]!r}) must be a "
                "constant (an initializer or a constant subgraph), but it is computed at run time"
            )
        return self.consts[name]

    def weight(self, node: _Node, index: int, role: str) -> np.ndarray | None:
        array = self.const(node, index, role)
        return None if array is None else np.ascontiguousarray(array, dtype=np.float32)

    def make_alias(self, new: str, old: str) -> None:
        """Let ``new`` name the value ``old`` (removed Identity/Dropout); uses move along."""
        target = self.resolve(old)
        self.alias[new] = target
        self.uses[target] += self.uses[new] - 1

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.value_names:
            name, k = f"{base}_{k}", k + 1
        self.value_names.add(name)
        return name

    # -- plans -------------------------------------------------------------------------------

    def emit(
        self,
        kind: str,
        node: _Node,
        inputs: Sequence[str],
        shapes: Sequence[tuple[int, ...]],
        attrs: dict[str, object] | None = None,
        weights: dict[str, np.ndarray] | None = None,
        outputs: Sequence[str] | None = None,
        label: str | None = None,
    ) -> list[str]:
        """Append a plan; ``outputs`` default to fresh names derived from the node's name.

        The plan takes the node's name unless that is taken or a ``label`` marks it as an
        auxiliary plan (``node/label``).
        """
        names = (
            list(outputs)
            if outputs is not None
            else [self.fresh(f"{node.name}/{kind}") for _ in shapes]
        )
        plan_name, k = (node.name if label is None else f"{node.name}/{label}"), 1
        while plan_name in self.plan_names:
            plan_name, k = f"{node.name}/{kind}" + (f"_{k}" if k > 1 else ""), k + 1
        self.plan_names.add(plan_name)
        plan = Plan(
            kind, plan_name, [self.resolve(i) for i in inputs], names, attrs or {}, weights or {}
        )
        self.plans.append(plan)
        for name, shape in zip(names, shapes, strict=True):
            if 0 in shape:
                raise FrontendError(
                    f"{node.op} node {node.name!r}: output {name!r} would be empty "
                    f"(shape {list(shape)}); zero-size tensors are not supported"
                )
            self.values[name] = PlanValue(name, tuple(int(d) for d in shape))
            self.producer[name] = plan
        return names

    def rename(self, old: str, new: str) -> None:
        """Give the activation ``old`` the name ``new`` in every plan that touches it."""
        for plan in self.plans:
            plan.inputs = [new if i == old else i for i in plan.inputs]
            plan.outputs = [new if o == old else o for o in plan.outputs]
        self.values[new] = PlanValue(new, self.values.pop(old).shape)
        self.alias.pop(new, None)
        self.alias[old] = new
        if old in self.producer:
            self.producer[new] = self.producer.pop(old)

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> PlanGraph:
        for index, proto in enumerate(self.model.graph.node):
            node = _Node(proto, index)
            if proto.domain not in ("", "ai.onnx"):
                raise _unsupported(node, self.opset, f" in domain {proto.domain!r}")
            present = [i for i in node.inputs if i]
            if node.op in ("Shape", "Size") and not self.is_const(present[0]):
                self._fold_shape(node)
            elif all(self.is_const(i) for i in present) and node.op not in _RANDOM_OPS:
                self._fold(node)
            elif node.op in _CONVERTERS:
                _CONVERTERS[node.op](self, node)
                self._check_shapes(node)
            else:
                raise _unsupported(node, self.opset, "")
        outputs = self._finish_outputs()
        self._prune(outputs)
        graph = PlanGraph(
            name=self.model.graph.name or "model",
            inputs=self.inputs,
            outputs=outputs,
            values=self.values,
            plans=self.plans,
            opset=self.opset,
            notes=self.notes,
        )
        graph.validate()
        return graph

    def _fold(self, node: _Node) -> None:
        """Evaluate a node whose inputs are all constant with onnx's reference implementation."""
        from onnx.reference import ReferenceEvaluator

        feeds = {i: self.consts[self.resolve(i)] for i in node.inputs if i}
        try:
            evaluator = ReferenceEvaluator(node.proto, opsets={"": self.opset})
            results = evaluator.run(None, feeds)
        except Exception as error:
            raise FrontendError(
                f"{node.op} node {node.name!r}: cannot fold this all-constant node: "
                f"{_first_line(error)}"
            ) from error
        for name, result in zip(node.outputs, results, strict=False):
            if name:
                self.consts[name] = np.asarray(result)

    def _fold_shape(self, node: _Node) -> None:
        """Shape/Size of an activation is known statically; it is not a data use."""
        source = self.resolve(node.inputs[0])
        shape = self.values[source].shape
        self.uses[source] -= 1
        if node.op == "Size":
            self.consts[node.outputs[0]] = np.array(math.prod(shape), dtype=np.int64)
            return
        rank = len(shape)
        start = node.attr_int("start", 0)
        end = node.attr_int("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        self.consts[node.outputs[0]] = np.array(shape[start:end], dtype=np.int64)

    def _check_shapes(self, node: _Node) -> None:
        """Compare with ONNX shape inference, except where that is known to be wrong.

        ONNX infers ceil_mode pools without dropping a last window that would start in the
        padding; onnxruntime and the ONNX reference implementation do drop it.
        """
        if node.op in ("MaxPool", "AveragePool") and node.attr_int("ceil_mode", 0):
            return
        for name in node.outputs:
            if not name or name not in self.inferred:
                continue
            target = self.resolve(name)
            if target in self.values and self.values[target].shape != self.inferred[name]:
                raise FrontendError(
                    f"{node.op} node {node.name!r}: output {name!r} has shape "
                    f"{list(self.values[target].shape)} here but {list(self.inferred[name])} by "
                    "ONNX shape inference"
                )

    def _finish_outputs(self) -> list[PlanValue]:
        """Make every graph output a produced value under its ONNX name."""
        outputs = []
        graph_inputs = {v.name for v in self.inputs}
        claimed: set[str] = set()
        output_names = {o.name for o in self.model.graph.output}
        for value in self.model.graph.output:
            if self.is_const(value.name):
                raise FrontendError(
                    f"graph output {value.name!r} is a constant; nothing computes it on the chip"
                )
            source = self.resolve(value.name)
            if source != value.name:
                if source in graph_inputs or source in claimed or source in output_names:
                    shape = self.values[source].shape
                    fake = _Node(onnx.NodeProto(name=f"{value.name}/identity"), 0)
                    self.emit("identity", fake, [source], [shape], outputs=[value.name])
                else:
                    self.rename(source, value.name)
            claimed.add(value.name)
            outputs.append(self.values[value.name])
        return outputs

    def _prune(self, outputs: list[PlanValue]) -> None:
        """Drop plans none of whose results reach a graph output (e.g. unused Dropout masks)."""
        live = {v.name for v in outputs}
        kept = []
        for plan in reversed(self.plans):
            if live.intersection(plan.outputs):
                kept.append(plan)
                live.update(plan.inputs)
        self.plans = kept[::-1]
        used = {v.name for v in self.inputs} | {n for p in self.plans for n in p.outputs}
        self.values = {name: v for name, v in self.values.items() if name in used}


def _unsupported(node: _Node, opset: int, where: str) -> FrontendError:
    return FrontendError(
        f"unsupported operator {node.op}{where} (node {node.name!r}, opset {opset}); "
        f"supported: {', '.join(SUPPORTED_OPS)}, and any node whose inputs are all constant"
    )


def _variant(node: _Node, what: str, why: str) -> FrontendError:
    return FrontendError(f"{node.op} node {node.name!r}: {what} is not supported: {why}")


# -- helpers shared by converters ------------------------------------------------------------

Converter = Callable[[_Importer, _Node], None]
_CONVERTERS: dict[str, Converter] = {}


def _converts(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            _CONVERTERS[op] = fn
        return fn

    return register


def _norm_axis(node: _Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise FrontendError(
            f"{node.op} node {node.name!r}: axis {axis} out of range for rank {rank}"
        )
    return axis + rank if axis < 0 else axis


def _spatial_rank(node: _Node, x: PlanValue) -> int:
    rank = len(x.shape) - 2
    if rank not in (1, 2):
        raise _variant(
            node,
            f"a {rank}-D spatial input (shape {list(x.shape)})",
            "only 1-D and 2-D (NCHW) convolution and pooling map to the crossbars",
        )
    return rank


def _explicit_pads(
    node: _Node,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[tuple[int, int]]:
    """Per-axis (begin, end) pads with auto_pad resolved."""
    rank = len(sizes)
    auto = node.attr_str("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = node.attr_ints("pads", [0] * 2 * rank)
        return [(pads[i], pads[i + rank]) for i in range(rank)]
    if auto == "VALID":
        return [(0, 0)] * rank
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return [
            same_pads(sizes[i], kernel[i], strides[i], dilations[i], auto == "SAME_UPPER")
            for i in range(rank)
        ]
    raise _variant(node, f"auto_pad={auto!r}", "unknown padding mode")


def _to_2d(b: _Importer, node: _Node, x: PlanValue) -> str:
    """Feed a 1-D (N, C, L) activation to a 2-D plan as (N, C, 1, L)."""
    if len(x.shape) == 4:
        return x.name
    shape = (x.shape[0], x.shape[1], 1, x.shape[2])
    return b.emit("reshape", node, [x.name], [shape], {"shape": list(shape)}, label="to_2d")[0]


def _emit_spatial(
    b: _Importer,
    node: _Node,
    kind: str,
    x: PlanValue,
    shape4: tuple[int, ...],
    attrs: dict[str, object],
    weights: dict[str, np.ndarray] | None = None,
) -> None:
    """Emit a 2-D spatial plan, wrapped in reshapes when the ONNX node was 1-D."""
    source = _to_2d(b, node, x)
    if len(x.shape) == 4:
        b.emit(kind, node, [source], [shape4], attrs, weights, outputs=node.outputs[:1])
        return
    (y,) = b.emit(kind, node, [source], [shape4], attrs, weights)
    out = (shape4[0], shape4[1], shape4[3])
    b.emit("reshape", node, [y], [out], {"shape": list(out)}, outputs=node.outputs[:1])


def _hw(values: Sequence[int], fill: int) -> list[int]:
    """Spatial per-axis values as [h, w], with h = fill for 1-D."""
    return [fill, *values] if len(values) == 1 else list(values)


def _pads_tlbr(pads: Sequence[tuple[int, int]]) -> list[int]:
    pads2 = [(0, 0), *pads] if len(pads) == 1 else list(pads)
    return [pads2[0][0], pads2[1][0], pads2[0][1], pads2[1][1]]


# -- convolution and dense -------------------------------------------------------------------


def _conv_operands(
    b: _Importer, node: _Node
) -> tuple[PlanValue, int, np.ndarray, np.ndarray | None, int, list[int], list[int], list[int]]:
    """What Conv and ConvTranspose share: input, spatial rank, weight W, optional bias B,
    group, kernel size, strides and dilations (defaults filled in)."""
    x = b.act(node, 0)
    rank = _spatial_rank(node, x)
    w = b.weight(node, 1, "weight W")
    bias = b.weight(node, 2, "bias B")
    assert w is not None
    kernel = list(w.shape[2:])
    strides = node.attr_ints("strides", [1] * rank)
    dilations = node.attr_ints("dilations", [1] * rank)
    return x, rank, w, bias, node.attr_int("group", 1), kernel, strides, dilations


@_converts("Conv")
def _conv(b: _Importer, node: _Node) -> None:
    x, rank, w, bias, group, kernel, strides, dilations = _conv_operands(b, node)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise FrontendError(
            f"Conv node {node.name!r}: weight {list(w.shape)} with group {group} does not fit "
            f"input {list(x.shape)}"
        )
    pads = _explicit_pads(node, x.shape[2:], kernel, strides, dilations)
    out = [
        conv_out(x.shape[2 + i], kernel[i], strides[i], sum(pads[i]), dilations[i])
        for i in range(rank)
    ]
    channels = w.shape[0]
    _emit_conv(b, node, "conv", x, channels, out, w, bias,
               _conv_attrs(strides, pads, dilations, group))


@_converts("ConvTranspose")
def _conv_transpose(b: _Importer, node: _Node) -> None:
    x, rank, w, bias, group, kernel, strides, dilations = _conv_operands(b, node)
    extra = node.attr_ints("output_padding", [0] * rank)
    sizes = x.shape[2:]
    auto = node.attr_str("auto_pad", "NOTSET")
    target = node.attr_ints("output_shape", [])[-rank:]
    if not target and auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [sizes[i] * strides[i] for i in range(rank)]
    pads: list[tuple[int, int]]
    if target:
        pads = []
        for i in range(rank):
            total = (
                conv_transpose_out(sizes[i], kernel[i], strides[i], (0, 0), dilations[i], extra[i])
                - target[i]
            )
            if total < 0 and auto in ("SAME_UPPER", "SAME_LOWER"):
                raise _variant(
                    node,
                    f"auto_pad={auto} with a kernel extent smaller than the stride",
                    "the output size is ambiguous (onnxruntime and the ONNX reference disagree)",
                )
            small, large = total // 2, total - total // 2
            begin, end = (small, large) if auto == "SAME_UPPER" else (large, small)
            if begin < 0:
                raise _variant(node, f"output_shape {target}", "it needs negative leading padding")
            # A negative trailing pad is extra output at the end, i.e. output padding.
            extra[i] += max(-end, 0)
            pads.append((begin, max(end, 0)))
    elif auto == "VALID":
        pads = [(0, 0)] * rank
    else:
        pads = _explicit_pads(node, sizes, kernel, strides, dilations)
    out = [
        conv_transpose_out(sizes[i], kernel[i], strides[i], pads[i], dilations[i], extra[i])
        for i in range(rank)
    ]
    attrs = _conv_attrs(strides, pads, dilations, group)
    attrs["output_padding"] = _hw(extra, 0)
    _emit_conv(b, node, "conv_transpose", x, w.shape[1] * group, out, w, bias, attrs)


def _conv_attrs(strides: list[int], pads: Sequence[tuple[int, int]], dilations: list[int],
                group: int) -> dict[str, object]:
    return {"strides": _hw(strides, 1), "pads": _pads_tlbr(pads),
            "dilations": _hw(dilations, 1), "group": group}


def _emit_conv(b: _Importer, node: _Node, kind: str, x: PlanValue, channels: int,
               out: list[int], w: np.ndarray, bias: np.ndarray | None,
               attrs: dict[str, object]) -> None:
    """Emit a (transposed) convolution plan; 1-D kernels become 2-D with height 1."""
    if w.ndim == 3:
        w = w[:, :, None, :]
    weights = {"weight": w} if bias is None else {"weight": w, "bias": bias}
    _emit_spatial(b, node, kind, x, (x.shape[0], channels, *_hw(out, 1)), attrs, weights)


@_converts("Gemm")
def _gemm(b: _Importer, node: _Node) -> None:
    a = b.act(node, 0)
    w = b.weight(node, 1, "B (the weight)")
    assert w is not None
    alpha, beta = node.attr_float("alpha", 1.0), node.attr_float("beta", 1.0)
    if node.attr_int("transB", 0):
        w = w.T
    source = a.name
    rows = a.shape[0]
    if node.attr_int("transA", 0):
        rows = a.shape[1]
        source = b.emit("transpose", node, [a.name], [(rows, a.shape[0])], {"perm": [1, 0]})[0]
    weights = {"weight": np.ascontiguousarray(w * np.float32(alpha), dtype=np.float32)}
    c = b.weight(node, 2, "C (the bias)")
    n = w.shape[1]
    if c is not None:
        c = c * np.float32(beta)
        if c.ndim < 2 or c.shape[0] == 1:
            weights["bias"] = np.broadcast_to(c.reshape(-1) if c.ndim else c, (n,)).copy()
        else:
            weights["bias"] = np.broadcast_to(c, (rows, n)).copy()
    b.emit("gemm", node, [source], [(rows, n)], {}, weights, outputs=node.outputs)


@_converts("MatMul")
def _matmul(b: _Importer, node: _Node) -> None:
    a = b.act(node, 0)
    if b.is_const(node.inputs[1]):
        w = b.weight(node, 1, "B")
        assert w is not None
        shape = matmul_shape(a.shape, w.shape)
        b.emit("matmul", node, [a.name], [shape], {}, {"weight": w}, outputs=node.outputs)
    else:
        other = b.act(node, 1)
        shape = matmul_shape(a.shape, other.shape)
        b.emit("matmul", node, [a.name, other.name], [shape], outputs=node.outputs)


@_converts("BatchNormalization")
def _batch_norm(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if node.attr_int("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise _variant(node, "training mode", "export the model in eval mode")
    scale, shift, mean, var = (
        np.asarray(b.const(node, index, role), dtype=np.float64)
        for index, role in enumerate(("scale", "B", "mean", "var"), start=1)
    )
    factor = scale / np.sqrt(var + node.attr_float("epsilon", 1e-5))
    offset = shift - mean * factor
    producer = b.producer.get(x.name)
    if producer is not None and producer.kind in ("conv", "gemm") and b.uses[x.name] == 1:
        weight = producer.weights["weight"].astype(np.float64)
        if producer.kind == "conv":
            weight = weight * factor[:, None, None, None]
        else:
            weight = weight * factor[None, :]
        bias = producer.weights.get("bias", np.zeros(1, np.float32)).astype(np.float64)
        producer.weights["weight"] = weight.astype(np.float32)
        producer.weights["bias"] = (bias * factor + offset).astype(np.float32)
        b.rename(x.name, node.outputs[0])
        return
    weights = {"scale": factor.astype(np.float32), "shift": offset.astype(np.float32)}
    b.emit("affine_channel", node, [x.name], [x.shape], {}, weights, outputs=node.outputs[:1])


# -- elementwise -----------------------------------------------------------------------------

_SIMPLE_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hard_swish"}


@_converts(*_SIMPLE_UNARY)
def _unary(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    b.emit(_SIMPLE_UNARY[node.op], node, [x.name], [x.shape], outputs=node.outputs)


@_converts("LeakyRelu")
def _leaky_relu(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    attrs: dict[str, object] = {"alpha": node.attr_float("alpha", 0.01)}
    b.emit("leaky_relu", node, [x.name], [x.shape], attrs, outputs=node.outputs)


@_converts("HardSigmoid")
def _hard_sigmoid(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    attrs: dict[str, object] = {
        "alpha": node.attr_float("alpha", 0.2),
        "beta": node.attr_float("beta", 0.5),
    }
    b.emit("hard_sigmoid", node, [x.name], [x.shape], attrs, outputs=node.outputs)


@_converts("Swish")
def _swish(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if node.attr_float("alpha", 1.0) != 1.0:
        raise _variant(node, f"alpha={node.attr_float('alpha', 1.0)}", "only SiLU (alpha = 1) is")
    b.emit("silu", node, [x.name], [x.shape], outputs=node.outputs)


@_converts("PRelu")
def _prelu(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    slope = b.weight(node, 1, "slope")
    assert slope is not None
    b.emit("prelu", node, [x.name], [x.shape], {}, {"slope": slope}, outputs=node.outputs)


@_converts("Clip")
def _clip(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if b.opset < 11:
        low, high = node.attr_float("min", -math.inf), node.attr_float("max", math.inf)
    else:
        bounds = [b.const(node, i, role) for i, role in ((1, "min"), (2, "max"))]
        low = -math.inf if bounds[0] is None else float(bounds[0])
        high = math.inf if bounds[1] is None else float(bounds[1])
    attrs: dict[str, object] = {"min": low, "max": high}
    b.emit("clip", node, [x.name], [x.shape], attrs, outputs=node.outputs)


@_converts("Softmax")
def _softmax(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    axis = _norm_axis(node, node.attr_int("axis", -1 if b.opset >= 13 else 1), rank)
    if b.opset >= 13 or axis == rank - 1:
        attrs: dict[str, object] = {"axis": axis}
        b.emit("softmax", node, [x.name], [x.shape], attrs, outputs=node.outputs)
        return
    # Before opset 13 Softmax normalizes over all axes from `axis` on, as one flattened axis.
    flat = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    (f,) = b.emit("flatten", node, [x.name], [flat], {"axis": axis})
    (s,) = b.emit("softmax", node, [f], [flat], {"axis": 1})
    b.emit("reshape", node, [s], [x.shape], {"shape": list(x.shape)}, outputs=node.outputs)


def _per_channel(c: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """c as a (C,) vector if it broadcasts along axis 1 of ``shape`` only, else None."""
    if len(shape) < 2 or c.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(padded) if i != 1) or padded[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(c.reshape(-1), (shape[1],)).astype(np.float32)


@_converts("Add", "Sub", "Mul")
def _binary(b: _Importer, node: _Node) -> None:
    kind = node.op.lower()
    first, second = node.inputs[:2]
    if not b.is_const(first) and not b.is_const(second):
        x, y = b.act(node, 0), b.act(node, 1)
        if kind == "mul" and (_fuse_silu(b, node, x, y) or _fuse_silu(b, node, y, x)):
            return
        shape = broadcast_shape(x.shape, y.shape)
        b.emit(kind, node, [x.name, y.name], [shape], outputs=node.outputs)
        return
    index = 0 if b.is_const(first) else 1
    x = b.act(node, 1 - index)
    c = b.weight(node, index, "operand")
    assert c is not None
    shape = broadcast_shape(x.shape, c.shape)
    channel = _per_channel(c, x.shape) if shape == x.shape else None
    if channel is not None and (kind == "add" or (kind == "sub" and index == 1)):
        bias = channel if kind == "add" else -channel
        b.emit("bias_add", node, [x.name], [shape], {}, {"bias": bias}, outputs=node.outputs)
        return
    attrs: dict[str, object] = {"operand_index": index}
    b.emit(kind, node, [x.name], [shape], attrs, {"operand": c}, outputs=node.outputs)


def _fuse_silu(b: _Importer, node: _Node, x: PlanValue, gate: PlanValue) -> bool:
    """x * Sigmoid(x) with the sigmoid used only here becomes one silu plan."""
    producer = b.producer.get(gate.name)
    if producer is None or producer.kind != "sigmoid" or producer.inputs != [x.name]:
        return False
    if b.uses[gate.name] != 1:
        return False
    b.plans.remove(producer)
    del b.values[gate.name], b.producer[gate.name]
    b.emit("silu", node, [x.name], [x.shape], outputs=node.outputs)
    return True


# -- pooling and resize ----------------------------------------------------------------------


@_converts("MaxPool", "AveragePool")
def _pool(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = _spatial_rank(node, x)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise _variant(node, "the Indices output", "only pooled values are computed")
    kernel = node.attr_ints("kernel_shape", [])
    strides = node.attr_ints("strides", [1] * rank)
    dilations = node.attr_ints("dilations", [1] * rank)
    ceil_mode = node.attr_int("ceil_mode", 0)
    pads = _explicit_pads(node, x.shape[2:], kernel, strides, dilations)
    out = [
        pool_out(x.shape[2 + i], kernel[i], strides[i], pads[i], dilations[i], bool(ceil_mode))
        for i in range(rank)
    ]
    attrs: dict[str, object] = {
        "kernel": _hw(kernel, 1),
        "strides": _hw(strides, 1),
        "pads": _pads_tlbr(pads),
        "dilations": _hw(dilations, 1),
        "ceil_mode": ceil_mode,
    }
    kind = "maxpool"
    if node.op == "AveragePool":
        kind = "avgpool"
        attrs["count_include_pad"] = node.attr_int("count_include_pad", 0)
    _emit_spatial(b, node, kind, x, (*x.shape[:2], *_hw(out, 1)), attrs)


@_converts("GlobalAveragePool")
def _global_avgpool(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if len(x.shape) != 4:
        raise _variant(node, f"a rank-{len(x.shape)} input", "only NCHW inputs are")
    b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)], outputs=node.outputs)


@_converts("ReduceMean")
def _reduce_mean(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    if b.opset >= 18:
        given = b.const(node, 1, "axes")
        axes = [] if given is None else [int(a) for a in given.reshape(-1)]
    else:
        axes = node.attr_ints("axes", [])
    if not axes and node.attr_int("noop_with_empty_axes", 0):
        b.make_alias(node.outputs[0], x.name)
        return
    axes = sorted(_norm_axis(node, a, rank) for a in axes or range(rank))
    if rank != 4 or axes != [2, 3]:
        raise _variant(
            node,
            f"a mean over axes {axes} of a rank-{rank} tensor",
            "only the spatial mean over H and W (axes 2, 3) of an NCHW tensor is",
        )
    if node.attr_int("keepdims", 1):
        b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)], outputs=node.outputs)
        return
    (y,) = b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)])
    b.emit("reshape", node, [y], [x.shape[:2]], {"shape": list(x.shape[:2])}, outputs=node.outputs)


_COORDINATE_MODES = {
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}


@_converts("Resize", "Upsample")
def _resize(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    mode = node.attr_str("mode", "nearest")
    if mode != "nearest":
        raise _variant(
            node,
            f"attribute mode={mode!r}",
            "only nearest-neighbour resize (pure data movement) is",
        )
    scales_in: np.ndarray | None
    sizes_in: np.ndarray | None = None
    if node.op == "Upsample" or b.opset < 11:
        # Upsample and Resize-10 index the source as floor(out / scale).
        transform, rounding = "asymmetric", "floor"
        if node.op == "Upsample" and b.opset < 9:
            scales_in = np.asarray(node.attrs.get("scales", []), dtype=np.float64)
        else:
            scales_in = b.const(node, 1, "scales")
    else:
        transform = node.attr_str("coordinate_transformation_mode", "half_pixel")
        rounding = node.attr_str("nearest_mode", "round_prefer_floor")
        scales_in, sizes_in = b.const(node, 2, "scales"), b.const(node, 3, "sizes")
    if transform not in _COORDINATE_MODES:
        raise _variant(
            node,
            f"attribute coordinate_transformation_mode={transform!r}",
            "cropping with extrapolation has no PIM mapping",
        )
    if rounding not in _NEAREST_MODES:
        raise _variant(node, f"attribute nearest_mode={rounding!r}", "unknown rounding")
    axes = [_norm_axis(node, a, rank) for a in node.attr_ints("axes", range(rank))]
    scales, sizes = [1.0] * rank, list(x.shape)
    if sizes_in is not None and sizes_in.size:
        wanted = [int(s) for s in np.asarray(sizes_in).reshape(-1)]
        ratios = [wanted[k] / x.shape[a] for k, a in enumerate(axes)]
        policy = node.attr_str("keep_aspect_ratio_policy", "stretch")
        for k, axis in enumerate(axes):
            if policy == "stretch":
                scales[axis], sizes[axis] = ratios[k], wanted[k]
            else:
                common = min(ratios) if policy == "not_larger" else max(ratios)
                scales[axis] = common
                sizes[axis] = math.floor(common * x.shape[axis] + 0.5)
    elif scales_in is not None and len(scales_in):
        for k, axis in enumerate(axes):
            scales[axis] = float(np.asarray(scales_in, dtype=np.float64).reshape(-1)[k])
            sizes[axis] = floor_scaled(x.shape[axis], scales[axis])
    else:
        raise _variant(node, "a resize without scales or sizes", "the output size is unknown")
    if rank != 4 or sizes[:2] != list(x.shape[:2]):
        raise _variant(
            node,
            f"resizing {list(x.shape)} to {sizes}",
            "only the spatial axes of an NCHW tensor may be resized",
        )
    attrs: dict[str, object] = {
        "sizes": sizes[2:],
        "scales": scales[2:],
        "coordinate_transformation_mode": transform,
        "nearest_mode": rounding,
    }
    b.emit("resize_nearest", node, [x.name], [tuple(sizes)], attrs, outputs=node.outputs[:1])


# -- data movement ---------------------------------------------------------------------------


@_converts("Concat")
def _concat(b: _Importer, node: _Node) -> None:
    parts = [b.act(node, i) for i in range(len(node.inputs))]
    rank = len(parts[0].shape)
    axis = _norm_axis(node, node.attr_int("axis", 0), rank)
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    attrs: dict[str, object] = {"axis": axis}
    b.emit("concat", node, [p.name for p in parts], [tuple(shape)], attrs, outputs=node.outputs)


@_converts("Split")
def _split(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    axis = _norm_axis(node, node.attr_int("axis", 0), len(x.shape))
    dim, count = x.shape[axis], len(node.outputs)
    given = b.const(node, 1, "split") if b.opset >= 13 else node.attrs.get("split")
    if given is not None and len(given):
        sizes = [int(s) for s in np.asarray(given).reshape(-1)]
    elif b.opset >= 18:
        part = -(-dim // count)
        sizes = [part] * (count - 1) + [dim - part * (count - 1)]
    else:
        sizes = [dim // count] * count
    if sum(sizes) != dim or len(sizes) != count:
        raise FrontendError(
            f"Split node {node.name!r}: sizes {sizes} do not split axis {axis} of length {dim} "
            f"into {count} outputs"
        )
    shapes = [tuple(s if i == axis else d for i, d in enumerate(x.shape)) for s in sizes]
    attrs: dict[str, object] = {"axis": axis, "sizes": sizes}
    b.emit("split", node, [x.name], shapes, attrs, outputs=node.outputs)


@_converts("Slice")
def _slice(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    if b.opset < 10:
        starts, ends = node.attr_ints("starts", []), node.attr_ints("ends", [])
        axes, steps = node.attr_ints("axes", range(len(starts))), [1] * len(starts)
    else:

        def const_ints(index: int, role: str, default: Sequence[int]) -> list[int]:
            value = b.const(node, index, role)
            return list(default) if value is None else [int(v) for v in value.reshape(-1)]

        starts, ends = const_ints(1, "starts", []), const_ints(2, "ends", [])
        axes = const_ints(3, "axes", range(len(starts)))
        steps = const_ints(4, "steps", [1] * len(starts))
    begin, stop, stride = [0] * rank, list(x.shape), [1] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _norm_axis(node, axis, rank)
        dim = x.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            begin[axis], stop[axis] = min(max(start, 0), dim), min(max(end, 0), dim)
        elif step < 0:
            begin[axis], stop[axis] = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        else:
            raise FrontendError(f"Slice node {node.name!r}: step 0 on axis {axis}")
        stride[axis] = step
    shape = tuple(max(0, -(-(stop[i] - begin[i]) // stride[i])) for i in range(rank))
    attrs: dict[str, object] = {"starts": begin, "ends": stop, "steps": stride}
    b.emit("slice", node, [x.name], [shape], attrs, outputs=node.outputs)


@_converts("Flatten")
def _flatten(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    axis = node.attr_int("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        raise FrontendError(f"Flatten node {node.name!r}: axis {axis} out of range")
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    attrs: dict[str, object] = {"axis": axis}
    b.emit("flatten", node, [x.name], [shape], attrs, outputs=node.outputs)


def _emit_reshape(b: _Importer, node: _Node, x: PlanValue, shape: Sequence[int]) -> None:
    if math.prod(shape) != math.prod(x.shape):
        raise FrontendError(
            f"{node.op} node {node.name!r}: cannot reshape {list(x.shape)} to {list(shape)}"
        )
    attrs: dict[str, object] = {"shape": list(shape)}
    b.emit("reshape", node, [x.name], [tuple(shape)], attrs, outputs=node.outputs)


@_converts("Reshape")
def _reshape(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    target = b.const(node, 1, "shape")
    assert target is not None
    shape = [int(d) for d in target.reshape(-1)]
    if not node.attr_int("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = math.prod(x.shape) // known if known else 0
    _emit_reshape(b, node, x, shape)


@_converts("Squeeze", "Unsqueeze")
def _squeeze(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if b.opset >= 13:
        given = b.const(node, 1, "axes")
        axes = [] if given is None else [int(a) for a in given.reshape(-1)]
    else:
        axes = node.attr_ints("axes", [])
    if node.op == "Unsqueeze":
        rank = len(x.shape) + len(axes)
        inserted = {_norm_axis(node, a, rank) for a in axes}
        rest = iter(x.shape)
        shape = [1 if i in inserted else next(rest) for i in range(rank)]
    else:
        rank = len(x.shape)
        dropped = {_norm_axis(node, a, rank) for a in axes} or {
            i for i, d in enumerate(x.shape) if d == 1
        }
        shape = [d for i, d in enumerate(x.shape) if i not in dropped]
    _emit_reshape(b, node, x, shape)


@_converts("Transpose")
def _transpose(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    perm = node.attr_ints("perm", range(len(x.shape) - 1, -1, -1))
    shape = tuple(x.shape[p] for p in perm)
    attrs: dict[str, object] = {"perm": perm}
    b.emit("transpose", node, [x.name], [shape], attrs, outputs=node.outputs)


@_converts("Identity")
def _identity(b: _Importer, node: _Node) -> None:
    b.make_alias(node.outputs[0], b.act(node, 0).name)


@_converts("Dropout")
def _dropout(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    training = b.const(node, 2, "training_mode")
    if training is not None and bool(training):
        raise _variant(node, "training_mode=true", "dropout is random; export in eval mode")
    if len(node.outputs) > 1 and node.outputs[1] and b.uses[node.outputs[1]]:
        raise _variant(node, "the mask output", "it is a boolean tensor")
    b.make_alias(node.outputs[0], x.name)


@_converts("Cast", "CastLike")
def _cast(b: _Importer, node: _Node) -> None:
    if node.op == "CastLike" and b.is_const(node.inputs[0]):
        # A constant cast to an activation's type: activations are float32.
        source = b.consts[b.resolve(node.inputs[0])]
        b.consts[node.outputs[0]] = np.asarray(source, dtype=np.float32)
        return
    x = b.act(node, 0)
    if node.op == "CastLike":
        like = b.resolve(node.inputs[1])
        target = "FLOAT" if like in b.values else str(b.consts[like].dtype).upper()
    else:
        target = onnx.TensorProto.DataType.Name(node.attr_int("to", 0))
    if target not in ("FLOAT", "FLOAT32"):
        raise _variant(node, f"a cast to {target}", "activations are float32 only")
    b.make_alias(node.outputs[0], x.name)


SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_CONVERTERS))


def import_onnx(model: ModelSource) -> PlanGraph:
    """Import an ONNX model (path, serialized bytes or ModelProto) into a plan graph.

    A symbolic batch dimension is bound to 1 and recorded in ``PlanGraph.notes``; any other
    dynamic dimension, unsupported operator or attribute variant raises ``FrontendError``.
    """
    proto, label = _load(model)
    _check(proto, label)
    if proto.functions:
        proto = inliner.inline_local_functions(proto)
    opset = _default_opset(proto, label)
    notes = _bind_batch(proto, label)
    return _Importer(proto, opset, notes).run()
