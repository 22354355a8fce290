"""ONNX → plan graph: load, check, bind the batch dimension, fold constants, canonicalize ops.

The importer walks the (topologically sorted) ONNX nodes once. A node whose inputs are all
known constants is evaluated with onnx's reference implementation, which folds the shape
arithmetic torch emits (Shape → Gather → Unsqueeze → Concat → Reshape) and Constant nodes.
Every other node must be one of the supported operators and becomes one or more plans with
normalized attributes; BatchNormalization is folded into a single-use Conv/Gemm producer and
``x * Sigmoid(x)`` becomes ``silu``. Every error is a one-line ``FrontendError``.
"""

from __future__ import annotations

import functools
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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
    padding_only_window,
    pool_out,
    same_pads,
)

__all__ = ["SUPPORTED_OPS", "import_loaded", "import_onnx", "load_model"]

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto

_MIN_OPSET = 7
_MAX_OPSET = onnx.defs.onnx_opset_version()
_RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Bernoulli", "Multinomial"}


def _first_line(error: BaseException) -> str:
    """The first sentence of an ONNX error, on one line. onnx.checker breaks a sentence
    around the node it names ("... input 'x' of node:", "name: y OpType: Gemm", "is not
    output of ..."): a line after one ending in ':' or ',', or starting in lower case,
    continues it; further sentences (shape inference lists one problem per line) are left
    out."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    first = lines[0]
    for line in lines[1:]:
        if not (first.endswith((":", ",")) or line[0].islower()):
            break
        first = f"{first} {line}"
    return first


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
            model = (onnx.load_model_from_string(source) if isinstance(source, bytes)
                     else onnx.load(os.fspath(source)))
        except (DecodeError, ValueError, RuntimeError, OSError) as error:
            raise FrontendError(f"{label}: cannot parse as an ONNX model (not ONNX, or "
                                f"truncated): {_first_line(error)}") from error
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise FrontendError(f"{label}: not an ONNX model (no IR version, graph or opset import)")
    return model, label


def _check(model: onnx.ModelProto, label: str) -> None:
    """onnx.checker's full check (with strict shape inference), then Raptor's own checks."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, RuntimeError,
            ValueError, TypeError) as error:
        raise FrontendError(
            f"{label}: invalid ONNX model (onnx.checker): {_first_line(error)}") from error
    _check_graph(model, label)


def _check_graph(model: onnx.ModelProto, label: str) -> None:
    """What the checker lets through but Raptor cannot run: opsets it does not know, empty
    graphs, missing/duplicated/non-float outputs, nodes lacking required inputs."""
    graph = model.graph
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not _MIN_OPSET <= entry.version <= _MAX_OPSET:
            raise FrontendError(f"{label}: opset {entry.version} of the default domain is outside "
                                f"the supported range {_MIN_OPSET}-{_MAX_OPSET}")
    if not graph.node:
        raise FrontendError(f"{label}: the graph is empty (no nodes); nothing to compile")
    if not graph.output:
        raise FrontendError(f"{label}: the graph declares no outputs; nothing to compute")
    seen: set[str] = set()
    for value in graph.output:
        if value.name in seen:
            raise FrontendError(f"{label}: graph output {value.name!r} is listed twice")
        seen.add(value.name)
        if not value.type.HasField("tensor_type"):
            raise FrontendError(f"{label}: graph output {value.name!r} is not a tensor")
        elem = value.type.tensor_type.elem_type
        if elem == onnx.TensorProto.UNDEFINED:  # onnxruntime refuses to load the model
            raise FrontendError(f"{label}: graph output {value.name!r} has no element type "
                                "(UNDEFINED); declare it float32")
        if elem != onnx.TensorProto.FLOAT:
            kind = onnx.TensorProto.DataType.Name(elem)
            raise FrontendError(f"{label}: graph output {value.name!r} has element type {kind}; "
                                "only float32 outputs are computed")
    for init in graph.initializer:
        _check_initializer(init, label)
    opset = {o.domain or "": o.version for o in model.opset_import}
    for index, proto in enumerate(graph.node):
        if proto.domain not in ("", "ai.onnx"):
            continue
        node = _Node(proto, index)
        try:
            schema = onnx.defs.get_schema(proto.op_type, opset.get("", _MAX_OPSET), "")
        except onnx.defs.SchemaError:
            continue  # reported as an unsupported operator by the importer
        single = onnx.defs.OpSchema.FormalParameterOption.Single
        for k, formal in enumerate(schema.inputs):
            if formal.option == single and not node.has_input(k):
                raise FrontendError(
                    f"{label}: {node.op} node {node.name!r} lacks its required input {k} "
                    f"({formal.name}); it has {len(node.inputs)} inputs")
        if len([o for o in node.outputs if o]) < min(schema.min_output, 1):
            raise FrontendError(f"{label}: {node.op} node {node.name!r} has no outputs")


_PACKED = {getattr(onnx.TensorProto, name) for name in (
    "UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128", "UINT4", "INT4", "FLOAT4E2M1", "UINT2",
    "INT2", "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(onnx.TensorProto, name)}
"""Element types whose data is not one stored value (or byte-sized value) per element."""


def _check_initializer(init: onnx.TensorProto, label: str) -> None:
    """The data an initializer holds agrees with its dims (the checker does not look): a
    mismatch would surface as a numpy reshape error, a huge claim as an allocation."""
    if init.data_location == onnx.TensorProto.EXTERNAL or init.data_type in _PACKED:
        return
    count = math.prod(init.dims)
    kind = onnx.TensorProto.DataType.Name(init.data_type)
    if init.HasField("raw_data"):
        size = helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        held, need, unit = len(init.raw_data), count * size, f"bytes ({count:,} x {size})"
    else:
        held = len(getattr(init, helper.tensor_dtype_to_field(init.data_type)))
        need, unit = count, "values"
    if held != need:
        raise FrontendError(f"{label}: initializer {init.name!r} ({kind}, dims "
                            f"{list(init.dims)}) needs {need:,} {unit} but holds {held:,}")


def _default_opset(model: onnx.ModelProto, label: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise FrontendError(f"{label}: the model imports no version of the default ONNX domain")
    if versions[0] < _MIN_OPSET:
        raise FrontendError(f"{label}: opset {versions[0]} is older than {_MIN_OPSET}; "
                            "re-export with opset 11-21")
    return versions[0]


def spell_dim(dim: onnx.TensorShapeProto.Dimension) -> str:
    """A dimension as the user reads it: its size, its symbolic name, or '?' when unnamed."""
    return str(dim.dim_value) if dim.WhichOneof("value") == "dim_value" else dim.dim_param or "?"


def _dynamic(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Symbolic, unnamed, or -1 (how some exporters spell a dynamic size)."""
    return dim.WhichOneof("value") != "dim_value" or dim.dim_value == -1


def _param(dim: onnx.TensorShapeProto.Dimension) -> str:
    """The symbolic name that ties this dimension to others ('' when unnamed; some
    exporters name every dynamic dimension '?', which ties nothing)."""
    named = dim.WhichOneof("value") == "dim_param" and dim.dim_param not in ("", "?")
    return dim.dim_param if named else ""


def _shape_hint(name: str, dims: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    parts = [str(dim.dim_value) if not _dynamic(dim) else "1" if axis == 0 else
             _param(dim) if _param(dim).isidentifier() and len(_param(dim)) <= 8 else f"D{axis}"
             for axis, dim in enumerate(dims)]
    return f"--input-shape {name}={'x'.join(parts)}"


def _declared(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    """The graph inputs without an initializer (the ones given at run time), by name."""
    initialized = {init.name for init in graph.initializer}
    return {value.name: value for value in graph.input if value.name not in initialized}


def _bind_shapes(model: onnx.ModelProto, label: str, fixed: Mapping[str, Sequence[int]]
                 ) -> list[str]:
    """Give every dimension of every graph input a size, before any shape is computed.

    Sizes come from ``fixed`` (``--input-shape`` or the shapes of supplied inputs); a
    symbolic name fixed on one input fixes it everywhere. A dynamic leading (batch)
    dimension left open is bound to 1 with a note; any other open dimension is an error
    that says how to set it.
    """
    graph = model.graph
    declared = _declared(graph)
    for name in fixed:
        if name not in declared:
            raise FrontendError(f"{label}: a shape is given for {name!r}, which is not a graph "
                                f"input (inputs: {', '.join(declared) or 'none'})")
    params: dict[str, int] = {}
    for value in declared.values():
        _fixed_params(value, label, fixed, params)
    notes: list[str] = []
    for value in declared.values():
        _bind_input(value, label, fixed, params, notes)
    for value in graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if _param(dim) in params:
                dim.dim_value = params[_param(dim)]
            elif _dynamic(dim):
                dim.Clear()
    del graph.value_info[:]
    return notes


def _fixed_params(value: onnx.ValueInfoProto, label: str, fixed: Mapping[str, Sequence[int]],
                  params: dict[str, int]) -> None:
    """Check one input's type and given shape; record the sizes its shape gives to symbolic
    dimensions (a shape-less input takes the given shape as declared)."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise FrontendError(f"{label}: input {value.name!r} is not a tensor")
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        kind = onnx.TensorProto.DataType.Name(tensor.elem_type)
        raise FrontendError(
            f"{label}: input {value.name!r} has element type {kind} and no value; only float32 "
            "inputs are computed, other inputs are bound as constants: supply it with --inputs "
            "X.npz or --constants C.npz")
    if not tensor.HasField("shape"):
        if value.name in fixed:
            for size in fixed[value.name]:
                tensor.shape.dim.add().dim_value = int(size)
            return
        raise FrontendError(f"{label}: input {value.name!r} has no declared shape; give it "
                            f"with --input-shape {value.name}=AxBx...")
    dims = tensor.shape.dim
    shape = value.name in fixed and [int(d) for d in fixed[value.name]]
    if shape and len(shape) != len(dims):
        raise FrontendError(
            f"{label}: input {value.name!r} has rank {len(dims)} (shape "
            f"[{', '.join(spell_dim(d) for d in dims)}]) but the given shape "
            f"{'x'.join(map(str, shape))} has rank {len(shape)}")
    for axis, dim in enumerate(dims):
        if shape and _param(dim):
            known = params.setdefault(_param(dim), shape[axis])
            if known != shape[axis]:
                raise FrontendError(
                    f"{label}: dimension {_param(dim)!r} is given as both {known} and "
                    f"{shape[axis]} (input {value.name!r}, axis {axis})")


def _bind_input(value: onnx.ValueInfoProto, label: str, fixed: Mapping[str, Sequence[int]],
                params: dict[str, int], notes: list[str]) -> None:
    """Set every dimension of one input: given, declared, named elsewhere, or a batch of 1
    (with a note); any other open dimension is an error saying how to set it."""
    dims = value.type.tensor_type.shape.dim
    spelled = f"[{', '.join(spell_dim(d) for d in dims)}]"
    shape = value.name in fixed and [int(d) for d in fixed[value.name]]
    for axis, dim in enumerate(dims):
        param = _param(dim)
        if shape:
            size = shape[axis]
            if not _dynamic(dim) and dim.dim_value != size:
                raise FrontendError(
                    f"{label}: input {value.name!r} has size {dim.dim_value} at axis {axis} "
                    f"(shape {spelled}), but the given shape has {size}")
        elif not _dynamic(dim):
            size = dim.dim_value
        elif param in params:
            size = params[param]
        elif axis == 0:
            size = 1
            what = f"{param!r}" if param else spell_dim(dim)
            notes.append(f"batch dimension {what} of input {value.name!r} bound to 1 "
                         "(--input-shape sets another size)")
        else:
            what = "-1 (dynamic)" if dim.WhichOneof("value") == "dim_value" else (
                f"{param!r}" if param else "'?' (unnamed)")
            raise FrontendError(
                f"{label}: input {value.name!r} has a dynamic dimension {what} at axis {axis} "
                f"(shape {spelled}); set it with {_shape_hint(value.name, dims)} or supply the "
                "input with --inputs")
        if size <= 0:
            raise FrontendError(f"{label}: input {value.name!r} would have size {size} at axis "
                                f"{axis} (shape {spelled}); zero-size tensors are not supported")
        if param:
            params[param] = size
        dim.dim_value = size


def _bind_constants(model: onnx.ModelProto, label: str, constants: Mapping[str, np.ndarray]
                    ) -> None:
    """Turn the graph inputs named in ``constants`` into initializers of their declared type."""
    graph = model.graph
    declared = _declared(graph)
    for name, array in constants.items():
        value = declared.get(name)
        if value is None:
            raise FrontendError(f"{label}: {name!r} is not a graph input (inputs: "
                                f"{', '.join(declared) or 'none'})")
        elem = value.type.tensor_type.elem_type
        dtype = helper.tensor_dtype_to_np_dtype(elem) if elem else np.dtype(np.float32)
        given = np.asarray(array)
        if np.issubdtype(dtype, np.integer) and np.issubdtype(given.dtype, np.floating) and (
            not np.all(np.isfinite(given)) or np.any(given != np.round(given))
        ):
            kind = onnx.TensorProto.DataType.Name(elem)
            raise FrontendError(f"{label}: input {name!r} is {kind} but its value has fractions")
        graph.initializer.append(numpy_helper.from_array(given.astype(dtype), name))
    kept = [v for v in graph.input if v.name not in constants]
    del graph.input[:]
    graph.input.extend(kept)


_PARAMETERS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2),
    "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2), "Clip": (1, 2),
    "PRelu": (1,), "Reshape": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "Slice": (1, 2, 3, 4), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "Pad": (1, 2, 3), "ReduceMean": (1,), "Dropout": (1, 2), "Expand": (1,), "Tile": (1,),
}
"""Input positions holding weights, normalization parameters, bounds or shape operands."""


def parameter_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs that a node reads as a parameter (see ``_PARAMETERS``) or that are not
    float32: supplied values of these are bound as constants."""
    graph = model.graph
    names = _declared(graph)
    found = {name for name, v in names.items()
             if v.type.tensor_type.elem_type != onnx.TensorProto.FLOAT}
    return found | {node.input[k] for node in graph.node for k in _PARAMETERS.get(node.op_type, ())
                    if k < len(node.input) and node.input[k] in names}


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Fully static shapes ONNX infers; used to cross-check the importer's own shapes."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError):
        return {}
    return {value.name: tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
            for value in [*inferred.graph.value_info, *inferred.graph.output]
            if value.type.tensor_type.HasField("shape") and all(
                d.WhichOneof("value") == "dim_value" for d in value.type.tensor_type.shape.dim)}


class _Node:
    """A NodeProto with its attributes decoded and a name to report."""

    def __init__(self, proto: onnx.NodeProto, index: int) -> None:
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] != ""

    def error(self, message: str) -> FrontendError:
        """The one-line error about this node: ``<op> node '<name>': <message>``."""
        return FrontendError(f"{self.op} node {self.name!r}: {message}")

    def attr_int(self, key: str, default: int) -> int:
        return int(self.attrs.get(key, default))

    def attr_flag(self, key: str, default: int) -> int:
        """A 0/1 attribute; any other value is refused (onnxruntime rejects it too)."""
        value = self.attr_int(key, default)
        if value not in (0, 1):
            raise self.error(f"attribute {key}={value} must be 0 or 1")
        return value

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
        self.consts = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        self.inputs = [PlanValue(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
                       for v in graph.input if v.name not in self.consts]
        self.values = {value.name: value for value in self.inputs}
        self.input_names = {value.name for value in self.inputs}
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
            raise node.error(f"input {index} ({node.inputs[index]!r}) is a constant where a "
                             "computed tensor is expected; this variant is not supported")
        return self.values[name]

    def const(self, node: _Node, index: int, role: str) -> np.ndarray | None:
        """The constant at input ``index`` (None when absent); computed tensors are an error."""
        if not node.has_input(index):
            return None
        name = self.resolve(node.inputs[index])
        if name in self.input_names:
            raise node.error(f"{role} ({node.inputs[index]!r}) is a graph input with no value; "
                             "supply it with --inputs X.npz or --constants C.npz to bind it as "
                             "a constant")
        if name not in self.consts:
            raise node.error(f"{role} ({node.inputs[index]!r}) must be a constant (an "
                             "initializer or a constant subgraph), but it is computed at run time")
        return self.consts[name]

    def weight(self, node: _Node, index: int, role: str) -> np.ndarray | None:
        array = self.const(node, index, role)
        return None if array is None else np.ascontiguousarray(array, dtype=np.float32)

    def ints(self, node: _Node, index: int, key: str, default: Sequence[int], since: int = 0
             ) -> list[int]:
        """Int list ``key``: an attribute before opset ``since``, from then on the constant at
        input ``index`` (flattened); ``default`` when absent."""
        if self.opset < since:
            return node.attr_ints(key, default)
        value = self.const(node, index, key)
        return list(default) if value is None else [int(v) for v in value.reshape(-1)]

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

    def emit(self, kind: str, node: _Node, inputs: Sequence[str],
             shapes: Sequence[tuple[int, ...]], attrs: Mapping[str, object] | None = None,
             weights: dict[str, np.ndarray] | None = None, outputs: Sequence[str] | None = None,
             label: str | None = None) -> list[str]:
        """Append a plan; ``outputs`` default to fresh names derived from the node's name. The
        plan takes the node's name unless taken or a ``label`` marks it auxiliary (node/label)."""
        names = list(outputs) if outputs is not None else [
            self.fresh(f"{node.name}/{kind}") for _ in shapes]
        plan_name, k = (node.name if label is None else f"{node.name}/{label}"), 1
        while plan_name in self.plan_names:
            plan_name, k = f"{node.name}/{kind}" + (f"_{k}" if k > 1 else ""), k + 1
        self.plan_names.add(plan_name)
        plan = Plan(kind, plan_name, [self.resolve(i) for i in inputs], names, dict(attrs or {}),
                    weights or {})
        self.plans.append(plan)
        for name, shape in zip(names, shapes, strict=True):
            if 0 in shape:
                raise node.error(f"output {name!r} would be empty (shape {list(shape)}); "
                                 "zero-size tensors are not supported")
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
        graph = PlanGraph(self.model.graph.name or "model", self.inputs, outputs, self.values,
                          self.plans, self.opset, self.notes)
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
            # the reference implementation's own checks raise ValueError and friends with
            # a reason; its Python internals (IndexError, KeyError, ...) say nothing useful
            why = (_first_line(error) if not isinstance(error, LookupError | TypeError |
                                                        AttributeError)
                   else "ONNX's reference implementation cannot evaluate it with inputs of "
                   "shapes " + ", ".join(str(list(np.shape(v))) for v in feeds.values()))
            raise node.error(f"cannot fold this all-constant node: {why}") from error
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
        # Python's slice clamps start and end into the rank just as ONNX Shape does.
        window = slice(node.attr_int("start", 0), node.attr_int("end", len(shape)))
        self.consts[node.outputs[0]] = np.array(shape[window], dtype=np.int64)

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
                raise node.error(f"output {name!r} has shape {list(self.values[target].shape)} "
                                 f"here but {list(self.inferred[name])} by ONNX shape inference")

    def _finish_outputs(self) -> list[PlanValue]:
        """Make every graph output a produced value under its ONNX name."""
        outputs = []
        # a value that is an input or another output is copied; any other takes the name
        taken = {v.name for v in self.inputs} | {o.name for o in self.model.graph.output}
        for value in self.model.graph.output:
            if self.is_const(value.name):
                raise FrontendError(f"graph output {value.name!r} is a constant; nothing computes "
                                    "it on the chip")
            source = self.resolve(value.name)
            if source != value.name:
                if source in taken:
                    shape = self.values[source].shape
                    fake = _Node(onnx.NodeProto(name=f"{value.name}/identity"), 0)
                    self.emit("identity", fake, [source], [shape], outputs=[value.name])
                else:
                    self.rename(source, value.name)
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
        f"supported: {', '.join(SUPPORTED_OPS)}, and any node whose inputs are all constant")


def _variant(node: _Node, what: str, why: str) -> FrontendError:
    return node.error(f"{what} is not supported: {why}")


# -- helpers shared by converters ------------------------------------------------------------

Converter = Callable[[_Importer, _Node], None]
_CONVERTERS: dict[str, Converter] = {}


def _converts(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        _CONVERTERS.update(dict.fromkeys(ops, fn))
        return fn

    return register


def _norm_axis(node: _Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.error(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _ranged(node: _Node, key: str, default: Sequence[int], count: int, least: int) -> list[int]:
    """Int-list attribute ``key`` with ``count`` entries, each at least ``least`` (and sane)."""
    values = node.attr_ints(key, default)
    if len(values) != count:
        raise node.error(f"attribute {key} has {len(values)} values ({values}), expected {count}")
    if any(not least <= v <= _MAX_EXTENT for v in values):
        raise node.error(f"attribute {key} = {values} is out of range (each value must be in "
                         f"{least}..{_MAX_EXTENT})")
    return values


_MAX_EXTENT = 1 << 16
"""Largest kernel, stride, dilation or pad accepted (larger is a corrupt attribute)."""


def _spatial_rank(node: _Node, x: PlanValue) -> int:
    rank = len(x.shape) - 2
    if rank not in (1, 2):
        raise _variant(node, f"a {rank}-D spatial input (shape {list(x.shape)})",
                       "only 1-D and 2-D (NCHW) convolution and pooling map to the crossbars")
    return rank


def _explicit_pads(node: _Node, sizes: Sequence[int], kernel: Sequence[int],
                   strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int]]:
    """Per-axis (begin, end) pads with auto_pad resolved."""
    rank = len(sizes)
    auto = node.attr_str("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = _ranged(node, "pads", [0] * 2 * rank, 2 * rank, 0)
        return [(pads[i], pads[i + rank]) for i in range(rank)]
    if auto == "VALID":
        return [(0, 0)] * rank
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return [same_pads(sizes[i], kernel[i], strides[i], dilations[i], auto == "SAME_UPPER")
                for i in range(rank)]
    raise _variant(node, f"auto_pad={auto!r}", "unknown padding mode")


def _emit_spatial(b: _Importer, node: _Node, kind: str, x: PlanValue, shape4: tuple[int, ...],
                  attrs: Mapping[str, object], weights: dict[str, np.ndarray] | None = None
                  ) -> None:
    """Emit a 2-D spatial plan; a 1-D (N, C, L) node's input is fed as (N, C, 1, L) and its
    output reshaped back."""
    if len(x.shape) == 4:
        b.emit(kind, node, [x.name], [shape4], attrs, weights, outputs=node.outputs[:1])
        return
    shape = (x.shape[0], x.shape[1], 1, x.shape[2])
    (x2,) = b.emit("reshape", node, [x.name], [shape], {"shape": list(shape)}, label="to_2d")
    (y,) = b.emit(kind, node, [x2], [shape4], attrs, weights)
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
    if w.ndim != rank + 2:
        raise node.error(f"weight {list(w.shape)} has rank {w.ndim}, expected {rank + 2} for "
                         f"input {list(x.shape)}")
    kernel = list(w.shape[2:])
    given = node.attr_ints("kernel_shape", kernel)
    if given != kernel:
        raise node.error(f"kernel_shape {given} disagrees with the weight {list(w.shape)}")
    _ranged(node, "kernel_shape", kernel, rank, 1)
    strides, dilations = (
        _ranged(node, key, [1] * rank, rank, 1) for key in ("strides", "dilations"))
    group = node.attr_int("group", 1)
    if group < 1:
        raise node.error(f"group {group} must be at least 1")
    return x, rank, w, bias, group, kernel, strides, dilations


@_converts("Conv")
def _conv(b: _Importer, node: _Node) -> None:
    x, rank, w, bias, group, kernel, strides, dilations = _conv_operands(b, node)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise node.error(f"weight {list(w.shape)} with group {group} does not fit input "
                         f"{list(x.shape)}")
    pads = _explicit_pads(node, x.shape[2:], kernel, strides, dilations)
    x, extra = _absorb_pad(b, node, x)
    pads = [(lo + more_lo, hi + more_hi)
            for (lo, hi), (more_lo, more_hi) in zip(pads, extra, strict=False)]
    out = [conv_out(x.shape[2 + i], kernel[i], strides[i], sum(pads[i]), dilations[i])
           for i in range(rank)]
    if min(out) < 1:
        raise node.error(f"kernel {kernel} (dilations {dilations}) is larger than the padded "
                         f"input {list(x.shape)}")
    channels = w.shape[0]
    if bias is not None and bias.shape != (channels,):
        raise node.error(f"bias {list(bias.shape)} does not match {channels} output channels")
    _emit_conv(b, node, "conv", x, channels, out, w, bias, strides, pads, dilations, group)


@_converts("ConvTranspose")
def _conv_transpose(b: _Importer, node: _Node) -> None:
    x, rank, w, bias, group, kernel, strides, dilations = _conv_operands(b, node)
    extra = _ranged(node, "output_padding", [0] * rank, rank, 0)
    if any(e >= max(s, d) for e, s, d in zip(extra, strides, dilations, strict=True)):
        raise node.error(f"output_padding {extra} must be smaller than the stride {strides} or "
                         f"the dilation {dilations}")
    sizes = x.shape[2:]
    auto = node.attr_str("auto_pad", "NOTSET")
    same = auto in ("SAME_UPPER", "SAME_LOWER")
    target = node.attr_ints("output_shape", [])[-rank:]
    if not target and same:
        target = [sizes[i] * strides[i] for i in range(rank)]
    pads = [] if target else _explicit_pads(node, sizes, kernel, strides, dilations)
    for i in range(rank if target else 0):
        total = conv_transpose_out(sizes[i], kernel[i], strides[i], (0, 0), dilations[i],
                                   extra[i]) - target[i]
        if total < 0 and same:
            raise _variant(
                node, f"auto_pad={auto} with a kernel extent smaller than the stride",
                "the output size is ambiguous (onnxruntime and the ONNX reference disagree)")
        small, large = total // 2, total - total // 2
        begin, end = (small, large) if auto == "SAME_UPPER" else (large, small)
        if begin < 0:
            raise _variant(node, f"output_shape {target}", "it needs negative leading padding")
        # A negative trailing pad is extra output at the end, i.e. output padding.
        extra[i] += max(-end, 0)
        pads.append((begin, max(end, 0)))
    out = [conv_transpose_out(sizes[i], kernel[i], strides[i], pads[i], dilations[i], extra[i])
           for i in range(rank)]
    _emit_conv(b, node, "conv_transpose", x, w.shape[1] * group, out, w, bias, strides, pads,
               dilations, group, output_padding=_hw(extra, 0))


def _emit_conv(b: _Importer, node: _Node, kind: str, x: PlanValue, channels: int,
               out: list[int], w: np.ndarray, bias: np.ndarray | None, strides: list[int],
               pads: Sequence[tuple[int, int]], dilations: list[int], group: int,
               **extra: object) -> None:
    """Emit a (transposed) convolution plan; 1-D kernels become 2-D with height 1."""
    attrs = {"strides": _hw(strides, 1), "pads": _pads_tlbr(pads),
             "dilations": _hw(dilations, 1), "group": group, **extra}
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
    trans_a, trans_b = node.attr_int("transA", 0), node.attr_int("transB", 0)
    if trans_a not in (0, 1) or trans_b not in (0, 1):
        raise node.error(f"transA {trans_a} and transB {trans_b} must be 0 or 1")
    if len(a.shape) != 2 or w.ndim != 2:
        raise node.error(f"A {list(a.shape)} and B {list(w.shape)} must be matrices")
    if trans_b:
        w = w.T
    rows, inner = (a.shape[1], a.shape[0]) if trans_a else a.shape
    source = a.name
    if trans_a:
        (source,) = b.emit("transpose", node, [a.name], [(rows, inner)], {"perm": [1, 0]})
    if inner != w.shape[0]:
        raise node.error(f"A {list(a.shape)} (transA {trans_a}) and B "
                         f"{list(w.T.shape if trans_b else w.shape)} (transB {trans_b}) do not "
                         "multiply")
    weights = {"weight": np.ascontiguousarray(w * np.float32(alpha), dtype=np.float32)}
    c = b.weight(node, 2, "C (the bias)")
    n = w.shape[1]
    if c is not None:
        c = c * np.float32(beta)
        if c.ndim > 2 or not all(d in (1, want) for d, want in zip(
                c.shape[::-1], (n, rows), strict=False)):
            raise node.error(f"C {list(c.shape)} does not broadcast to the result {[rows, n]}")
        shape = (n,) if c.ndim < 2 or c.shape[0] == 1 else (rows, n)
        weights["bias"] = np.broadcast_to(c.reshape(-1) if len(shape) == 1 else c, shape).copy()
    b.emit("gemm", node, [source], [(rows, n)], {}, weights, outputs=node.outputs)


@_converts("MatMul")
def _matmul(b: _Importer, node: _Node) -> None:
    a = b.act(node, 0)
    if b.is_const(node.inputs[1]):
        w = b.weight(node, 1, "B")
        assert w is not None
        inputs, other, weights = [a.name], w.shape, {"weight": w}
    else:
        second = b.act(node, 1)
        inputs, other, weights = [a.name, second.name], second.shape, {}
    try:
        shape = matmul_shape(a.shape, other)
    except ValueError as e:
        raise node.error(str(e)) from None
    b.emit("matmul", node, inputs, [shape], {}, weights, outputs=node.outputs)


@_converts("BatchNormalization")
def _batch_norm(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if node.attr_int("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise _variant(node, "training mode", "export the model in eval mode")
    roles = ("scale", "B", "mean", "var")
    scale, shift, mean, var = params = [np.asarray(b.const(node, index, role), dtype=np.float64)
                                        for index, role in enumerate(roles, start=1)]
    channels = x.shape[1] if len(x.shape) > 1 else 0
    for role, value in zip(roles, params, strict=True):
        if value.shape != (channels,):
            raise node.error(f"{role} has shape {list(value.shape)}, expected [{channels}] (the "
                             f"channels of input {list(x.shape)})")
    epsilon = node.attr_float("epsilon", 1e-5)
    if not np.all(var + epsilon > 0):
        raise node.error("var + epsilon must be positive")
    factor = scale / np.sqrt(var + epsilon)
    offset = shift - mean * factor
    producer = b.producer.get(x.name)
    if producer is not None and producer.kind in ("conv", "gemm") and b.uses[x.name] == 1:
        per_output = factor[:, None, None, None] if producer.kind == "conv" else factor[None, :]
        weight = producer.weights["weight"].astype(np.float64) * per_output
        bias = producer.weights.get("bias", np.zeros(1, np.float32)).astype(np.float64)
        producer.weights["weight"] = weight.astype(np.float32)
        producer.weights["bias"] = (bias * factor + offset).astype(np.float32)
        b.rename(x.name, node.outputs[0])
        return
    weights = {"scale": factor.astype(np.float32), "shift": offset.astype(np.float32)}
    b.emit("affine_channel", node, [x.name], [x.shape], {}, weights, outputs=node.outputs[:1])


# -- elementwise -----------------------------------------------------------------------------

_UNARY: dict[str, tuple[str, dict[str, float]]] = {
    "Relu": ("relu", {}), "Sigmoid": ("sigmoid", {}), "Tanh": ("tanh", {}),
    "HardSwish": ("hard_swish", {}), "Neg": ("neg", {}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}), "Elu": ("elu", {"alpha": 1.0}),
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
}
"""One-input ops that are one plan kind: the kind and its float attributes' defaults."""


@_converts(*_UNARY)
def _unary(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    kind, defaults = _UNARY[node.op]
    attrs = {key: node.attr_float(key, default) for key, default in defaults.items()}
    b.emit(kind, node, [x.name], [x.shape], attrs, outputs=node.outputs)


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
        for role, bound in zip(("min", "max"), bounds, strict=True):
            if bound is not None and bound.size != 1:
                raise node.error(f"{role} has shape {list(bound.shape)}; a bound is one number")
        low, high = (unset if bound is None else float(bound.reshape(-1)[0])
                     for bound, unset in zip(bounds, (-math.inf, math.inf), strict=True))
    b.emit("clip", node, [x.name], [x.shape], {"min": low, "max": high}, outputs=node.outputs)


@_converts("Softmax")
def _softmax(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    axis = _norm_axis(node, node.attr_int("axis", -1 if b.opset >= 13 else 1), rank)
    if b.opset >= 13 or axis == rank - 1:
        b.emit("softmax", node, [x.name], [x.shape], {"axis": axis}, outputs=node.outputs)
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


def _broadcast(node: _Node, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return broadcast_shape(*shapes)
    except ValueError:
        raise node.error(f"operand shapes {' and '.join(str(list(s)) for s in shapes)} do not "
                         "broadcast") from None


@_converts("Add", "Sub", "Mul", "Div")
def _binary(b: _Importer, node: _Node) -> None:
    kind = node.op.lower()
    first, second = node.inputs[:2]
    if not b.is_const(first) and not b.is_const(second):
        x, y = b.act(node, 0), b.act(node, 1)
        if kind == "mul" and (_fuse_silu(b, node, x, y) or _fuse_silu(b, node, y, x)):
            return
        shape = _broadcast(node, x.shape, y.shape)
        b.emit(kind, node, [x.name, y.name], [shape], outputs=node.outputs)
        return
    index = 0 if b.is_const(first) else 1
    x = b.act(node, 1 - index)
    c = b.weight(node, index, "operand")
    assert c is not None
    shape = _broadcast(node, x.shape, c.shape)
    channel = _per_channel(c, x.shape) if shape == x.shape else None
    if channel is not None and (kind == "add" or (kind == "sub" and index == 1)):
        bias = channel if kind == "add" else -channel
        b.emit("bias_add", node, [x.name], [shape], {}, {"bias": bias}, outputs=node.outputs)
        return
    b.emit(kind, node, [x.name], [shape], {"operand_index": index}, {"operand": c},
           outputs=node.outputs)


@_converts("Max", "Min")
def _extremum(b: _Importer, node: _Node) -> None:
    """Variadic Max/Min as a chain of binary plans; constant operands fold first."""
    kind = node.op.lower()
    consts = [b.consts[b.resolve(n)] for n in node.inputs if n and b.is_const(n)]
    acts = [b.act(node, k) for k, n in enumerate(node.inputs) if n and not b.is_const(n)]
    current = acts[0]
    steps: list[PlanValue | np.ndarray] = list(acts[1:])
    if consts:
        folded = functools.reduce(np.maximum if kind == "max" else np.minimum, consts)
        steps.append(np.asarray(folded, dtype=np.float32))
    if not steps:
        b.make_alias(node.outputs[0], current.name)
        return
    for k, other in enumerate(steps):
        outputs = node.outputs if k == len(steps) - 1 else None
        shape = _broadcast(node, current.shape, other.shape)
        if isinstance(other, PlanValue):
            (name,) = b.emit(kind, node, [current.name, other.name], [shape], outputs=outputs)
        else:
            (name,) = b.emit(kind, node, [current.name], [shape], {"operand_index": 1},
                             {"operand": other}, outputs=outputs)
        current = b.values[name]


def _fuse_silu(b: _Importer, node: _Node, x: PlanValue, gate: PlanValue) -> bool:
    """x * Sigmoid(x) with the sigmoid used only here becomes one silu plan."""
    producer = b.producer.get(gate.name)
    if (producer is None or producer.kind != "sigmoid" or producer.inputs != [x.name]
            or b.uses[gate.name] != 1):
        return False
    b.plans.remove(producer)
    del b.values[gate.name], b.producer[gate.name]
    b.emit("silu", node, [x.name], [x.shape], outputs=node.outputs)
    return True


# -- pooling and resize ----------------------------------------------------------------------


def _pool_attrs(kernel: list[int], strides: list[int], pads: Sequence[tuple[int, int]],
                dilations: list[int], ceil_mode: int) -> dict[str, object]:
    return {"kernel": _hw(kernel, 1), "strides": _hw(strides, 1), "pads": _pads_tlbr(pads),
            "dilations": _hw(dilations, 1), "ceil_mode": ceil_mode}


@_converts("MaxPool", "AveragePool")
def _pool(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = _spatial_rank(node, x)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise _variant(node, "the Indices output", "only pooled values are computed")
    kernel = _ranged(node, "kernel_shape", [], rank, 1)
    strides, dilations = (
        _ranged(node, key, [1] * rank, rank, 1) for key in ("strides", "dilations"))
    ceil_mode = node.attr_flag("ceil_mode", 0)
    pads = _explicit_pads(node, x.shape[2:], kernel, strides, dilations)
    if any(lo >= k or hi >= k for (lo, hi), k in zip(pads, kernel, strict=True)):
        raise node.error(f"pads {_pads_tlbr(pads)} must be smaller than the kernel {kernel}")
    out = [pool_out(x.shape[2 + i], kernel[i], strides[i], pads[i], dilations[i], bool(ceil_mode))
           for i in range(rank)]
    empty_is_defined = node.op == "AveragePool" and node.attr_flag("count_include_pad", 0)
    for i in range(rank) if not empty_is_defined else ():
        o = padding_only_window(x.shape[2 + i], kernel[i], strides[i], pads[i], dilations[i],
                                out[i])
        if o is not None:  # onnxruntime answers the lowest float (max) or NaN (mean)
            raise _variant(node, f"a window over padding only (output {o} along spatial "
                           f"axis {i} of input {list(x.shape)})",
                           "its " + ("maximum" if node.op == "MaxPool" else "mean")
                           + " is undefined")
    attrs = _pool_attrs(kernel, strides, pads, dilations, ceil_mode)
    kind = "maxpool"
    if node.op == "AveragePool":
        kind = "avgpool"
        attrs["count_include_pad"] = node.attr_flag("count_include_pad", 0)
    _emit_spatial(b, node, kind, x, (*x.shape[:2], *_hw(out, 1)), attrs)


@_converts("GlobalAveragePool")
def _global_avgpool(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    if len(x.shape) != 4:
        raise _variant(node, f"a rank-{len(x.shape)} input", "only NCHW inputs are")
    b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)], outputs=node.outputs)


@_converts("GlobalMaxPool")
def _global_maxpool(b: _Importer, node: _Node) -> None:
    """A max pool whose window is the whole (1-D or 2-D) image."""
    x = b.act(node, 0)
    ones = [1] * _spatial_rank(node, x)
    attrs = _pool_attrs(list(x.shape[2:]), ones, [(0, 0)] * len(ones), ones, 0)
    _emit_spatial(b, node, "maxpool", x, (*x.shape[:2], *_hw(ones, 1)), attrs)


@_converts("ReduceMean")
def _reduce_mean(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    axes = b.ints(node, 1, "axes", [], since=18)
    if not axes and node.attr_flag("noop_with_empty_axes", 0):
        b.make_alias(node.outputs[0], x.name)
        return
    axes = sorted(_norm_axis(node, a, rank) for a in axes or range(rank))
    if rank != 4 or axes != [2, 3]:
        raise _variant(node, f"a mean over axes {axes} of a rank-{rank} tensor",
                       "only the spatial mean over H and W (axes 2, 3) of an NCHW tensor is")
    if node.attr_flag("keepdims", 1):
        b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)], outputs=node.outputs)
        return
    (y,) = b.emit("global_avgpool", node, [x.name], [(*x.shape[:2], 1, 1)])
    b.emit("reshape", node, [y], [x.shape[:2]], {"shape": list(x.shape[:2])}, outputs=node.outputs)


_COORDINATE_MODES = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                     "asymmetric", "tf_half_pixel_for_nn"}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}


@_converts("Resize", "Upsample")
def _resize(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    mode = node.attr_str("mode", "nearest")
    if mode != "nearest":
        raise _variant(node, f"attribute mode={mode!r}",
                       "only nearest-neighbour resize (pure data movement) is")
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
        raise _variant(node, f"attribute coordinate_transformation_mode={transform!r}",
                       "cropping with extrapolation has no PIM mapping")
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
        raise _variant(node, f"resizing {list(x.shape)} to {sizes}",
                       "only the spatial axes of an NCHW tensor may be resized")
    attrs = {"sizes": sizes[2:], "scales": scales[2:],
             "coordinate_transformation_mode": transform, "nearest_mode": rounding}
    b.emit("resize_nearest", node, [x.name], [tuple(sizes)], attrs, outputs=node.outputs[:1])


# -- data movement ---------------------------------------------------------------------------


@_converts("Concat")
def _concat(b: _Importer, node: _Node) -> None:
    parts = [b.act(node, i) for i in range(len(node.inputs))]
    rank = len(parts[0].shape)
    axis = _norm_axis(node, node.attr_int("axis", 0), rank)
    rest = parts[0].shape[:axis] + parts[0].shape[axis + 1:]
    if any(len(p.shape) != rank or p.shape[:axis] + p.shape[axis + 1:] != rest for p in parts):
        raise node.error(f"input shapes {', '.join(str(list(q.shape)) for q in parts)} differ "
                         f"outside axis {axis}")
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    b.emit("concat", node, [p.name for p in parts], [tuple(shape)], {"axis": axis},
           outputs=node.outputs)


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
        raise node.error(f"sizes {sizes} do not split axis {axis} of length {dim} into {count} "
                         "outputs")
    shapes = [tuple(s if i == axis else d for i, d in enumerate(x.shape)) for s in sizes]
    b.emit("split", node, [x.name], shapes, {"axis": axis, "sizes": sizes}, outputs=node.outputs)


@_converts("Slice")
def _slice(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    starts, ends = b.ints(node, 1, "starts", [], since=10), b.ints(node, 2, "ends", [], since=10)
    axes = b.ints(node, 3, "axes", range(len(starts)), since=10)
    steps = b.ints(node, 4, "steps", [1] * len(starts), since=10)  # Slice-1 has no steps attribute
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
            raise node.error(f"step 0 on axis {axis}")
        stride[axis] = step
    shape = tuple(max(0, -(-(stop[i] - begin[i]) // stride[i])) for i in range(rank))
    b.emit("slice", node, [x.name], [shape], {"starts": begin, "ends": stop, "steps": stride},
           outputs=node.outputs)


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


@_converts("Pad")
def _pad(b: _Importer, node: _Node) -> None:
    """Pad as a data-movement plan; a zero padding of a convolution's input folds into the
    convolution (see `_absorb_pad`)."""
    x = b.act(node, 0)
    rank = len(x.shape)
    mode = node.attr_str("mode", "constant")
    if mode not in _PAD_MODES:
        raise _variant(node, f"mode={mode!r}", f"modes are {', '.join(_PAD_MODES)}")
    given = b.ints(node, 1, "pads", [], since=11)
    fill = b.const(node, 2, "constant_value") if b.opset >= 11 else np.asarray(
        node.attr_float("value", 0.0))
    value = 0.0 if fill is None or fill.size == 0 else float(fill.reshape(-1)[0])
    axes = [_norm_axis(node, a, rank) for a in b.ints(node, 3, "axes", range(rank), since=11)]
    if len(given) != 2 * len(axes):
        raise node.error(f"{len(given)} pads for {len(axes)} axes (expected {2 * len(axes)})")
    begin, end = [0] * rank, [0] * rank
    for k, axis in enumerate(axes):
        begin[axis], end[axis] = given[k], given[k + len(axes)]
    shape = tuple(d + lo + hi for d, lo, hi in zip(x.shape, begin, end, strict=True))
    for axis, d in enumerate(x.shape):
        kept = d - max(-begin[axis], 0) - max(-end[axis], 0)
        if kept <= 0 or shape[axis] <= 0:
            raise node.error(f"pads {given} crop axis {axis} of length {d} to nothing")
        limit = {"reflect": kept - 1, "edge": _MAX_EXTENT, "wrap": kept}.get(mode, _MAX_EXTENT)
        if (most := max(begin[axis], end[axis])) > limit:
            raise _variant(node, f"{mode} padding by {most} of axis {axis} (length {kept})",
                           f"{mode} padding reaches at most {limit} cells")
    if not any(begin) and not any(end):
        b.make_alias(node.outputs[0], x.name)
        return
    b.emit("pad", node, [x.name], [shape], {"pads": begin + end, "mode": mode, "value": value},
           outputs=node.outputs)


def _absorb_pad(b: _Importer, node: _Node, x: PlanValue
                ) -> tuple[PlanValue, list[tuple[int, int]]]:
    """A zero, non-negative, spatial-only constant Pad used only by this convolution becomes
    part of the convolution's own padding; returns the input to read and the extra
    (begin, end) pads of each spatial axis."""
    producer = b.producer.get(x.name)
    if (producer is None or producer.kind != "pad" or b.uses[x.name] != 1 or len(x.shape) != 4
            or node.attr_str("auto_pad", "NOTSET") != "NOTSET"):
        return x, [(0, 0), (0, 0)]
    pads = producer.ints("pads")
    if (producer.attrs["mode"] != "constant" or producer.num("value") != 0.0 or min(pads) < 0
            or pads[0] or pads[1] or pads[4] or pads[5]):
        return x, [(0, 0), (0, 0)]
    b.plans.remove(producer)
    del b.values[x.name], b.producer[x.name]
    return b.values[producer.inputs[0]], [(pads[2], pads[6]), (pads[3], pads[7])]


@_converts("Flatten")
def _flatten(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    rank = len(x.shape)
    axis = node.attr_int("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        raise node.error(f"axis {axis} out of range")
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    b.emit("flatten", node, [x.name], [shape], {"axis": axis}, outputs=node.outputs)


def _emit_reshape(b: _Importer, node: _Node, x: PlanValue, shape: Sequence[int]) -> None:
    if math.prod(shape) != math.prod(x.shape):
        raise node.error(f"cannot reshape {list(x.shape)} to {list(shape)}")
    b.emit("reshape", node, [x.name], [tuple(shape)], {"shape": list(shape)}, outputs=node.outputs)


@_converts("Reshape")
def _reshape(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    shape = b.ints(node, 1, "shape", [])
    if not node.attr_int("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = math.prod(x.shape) // known if known else 0
    _emit_reshape(b, node, x, shape)


@_converts("Squeeze", "Unsqueeze")
def _squeeze(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    axes = b.ints(node, 1, "axes", [], since=13)
    if node.op == "Unsqueeze":
        rank = len(x.shape) + len(axes)
        inserted = {_norm_axis(node, a, rank) for a in axes}
        rest = iter(x.shape)
        shape = [1 if i in inserted else next(rest) for i in range(rank)]
    else:
        rank = len(x.shape)
        dropped = {_norm_axis(node, a, rank) for a in axes} or {
            i for i, d in enumerate(x.shape) if d == 1}
        shape = [d for i, d in enumerate(x.shape) if i not in dropped]
    _emit_reshape(b, node, x, shape)


@_converts("Transpose")
def _transpose(b: _Importer, node: _Node) -> None:
    x = b.act(node, 0)
    perm = node.attr_ints("perm", range(len(x.shape) - 1, -1, -1))
    shape = tuple(x.shape[p] for p in perm)
    b.emit("transpose", node, [x.name], [shape], {"perm": perm}, outputs=node.outputs)


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


def load_model(model: ModelSource) -> tuple[onnx.ModelProto, str]:
    """Parse and check a model (onnx.checker's full check and Raptor's own); inline local
    functions. Returns the proto and the label errors name it by."""
    proto, label = _load(model)
    _check(proto, label)
    if proto.functions:
        proto = inliner.inline_local_functions(proto)
    return proto, label


def import_loaded(proto: onnx.ModelProto, label: str,
                  constants: Mapping[str, np.ndarray] | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> PlanGraph:
    """Import a model `load_model` returned (it is modified): bind ``constants`` (graph
    inputs by name) as initializers, fix input ``shapes``, then convert."""
    if constants:
        _bind_constants(proto, label, constants)
    opset = _default_opset(proto, label)
    notes = _bind_shapes(proto, label, shapes or {})
    return _Importer(proto, opset, notes).run()


def import_onnx(model: ModelSource, constants: Mapping[str, np.ndarray] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None) -> PlanGraph:
    """Import an ONNX model (path, serialized bytes or ModelProto) into a plan graph.

    ``constants`` bind graph inputs to values (folded like initializers); ``shapes`` fix
    input dimensions. A dynamic batch dimension left open is bound to 1 and recorded in
    ``PlanGraph.notes``; any other open dimension, unsupported operator or attribute
    variant raises ``FrontendError``.
    """
    proto, label = load_model(model)
    return import_loaded(proto, label, constants, shapes)
