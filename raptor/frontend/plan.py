"""The plan graph: an ONNX model reduced to a few canonical, fully static operations.

The importer produces it and the plan lowering consumes it; keeping it independent of the
Spatial IR lets the import be checked numerically (``reference.run_plan_graph``) on its own.

Conventions shared by every kind (NCHW activations, all tensors float32):

- ``pads`` are ``[top, left, bottom, right]``; ``strides``, ``dilations``, ``kernel`` are
  ``[h, w]``. 1-D convolutions and pools are imported as 2-D ones with ``h = 1`` between two
  ``reshape`` plans, so every spatial kind is 2-D.
- Attributes are plain ints, floats, strings and lists of those; weights are float32 numpy
  arrays under fixed role names. Axes are non-negative.

Kinds (inputs → outputs; attributes; weights):

``conv``            x → y; strides, pads, dilations, group; weight (O, I/group, kh, kw) OIHW,
                    optional bias (O,). BatchNormalization is already folded in.
``conv_transpose``  x → y; strides, pads, dilations, group, output_padding [h, w];
                    weight (I, O/group, kh, kw) as ONNX stores it, optional bias (O,).
                    y is the full transposed convolution cropped by ``pads`` and extended at the
                    bottom/right by ``output_padding``.
``gemm``            x (M, K) → y (M, N) = x @ weight + bias; weight (K, N) with transB and alpha
                    applied; optional bias (N,) or (M, N) with beta applied.
``matmul``          a → a @ weight (weight role "weight") or a, b → a @ b; numpy matmul rules.
``relu`` ``sigmoid`` ``tanh`` ``silu`` (x·sigmoid(x)) ``hard_swish`` (x·hard_sigmoid(x, 1/6,
                    1/2)): no attributes. ``leaky_relu``: alpha. ``hard_sigmoid``: alpha, beta
                    (max(0, min(1, alpha·x + beta))). ``clip``: min, max (±inf when absent).
``prelu``           weight slope, broadcastable to x (numpy rules).
``add`` ``sub`` ``mul`` ``div`` ``max`` ``min``
                    a, b → a ∘ b with numpy broadcasting; or x → with weight "operand" and
                    attribute operand_index (0: operand ∘ x, 1: x ∘ operand).
``neg``             -x. ``elu``: alpha (x if x > 0 else alpha·(exp(x) − 1)).
``pad``             pads [begin per axis…, end per axis…] (negative: crop), mode (constant,
                    reflect, edge, wrap), value (the constant mode's fill).
``bias_add``        x (N, C, ...) → x + bias on axis 1; weight bias (C,).
``affine_channel``  x (N, C, ...) → x·scale + shift on axis 1; weights scale (C,), shift (C,).
``maxpool``         kernel, strides, pads, dilations, ceil_mode (0/1). Windows that would start
                    in the bottom/right padding are dropped (ONNX ceil_mode rule).
``avgpool``         as maxpool plus count_include_pad (0/1); cells added by ceil_mode are
                    never counted.
``global_avgpool``  (N, C, H, W) → (N, C, 1, 1).
``resize_nearest``  sizes [oh, ow]; scales [sh, sw] (the factors the coordinate transform uses);
                    coordinate_transformation_mode (half_pixel, half_pixel_symmetric,
                    pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn);
                    nearest_mode (round_prefer_floor, round_prefer_ceil, floor, ceil).
``concat``          inputs… → y; axis.
``split``           x → outputs…; axis, sizes (one per output).
``slice``           starts, ends, steps: one entry per axis, starts clamped into the axis and
                    ends exclusive; an end of -1 with a negative step means "through index 0".
``flatten``         axis (output is 2-D). ``reshape``: shape (static, no 0 or -1).
``transpose``       perm. ``softmax``: axis (opset-13 meaning: one axis). ``identity``: copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["KINDS", "KindSpec", "Plan", "PlanGraph", "PlanValue"]


@dataclass(frozen=True)
class PlanValue:
    """A static-shaped tensor flowing between plans."""

    name: str
    shape: tuple[int, ...]


@dataclass
class Plan:
    """One canonical operation; ``name`` is the ONNX node name or a generated one."""

    kind: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, object] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def ints(self, key: str) -> list[int]:
        """A list-of-ints attribute (validated by `PlanGraph.validate` to be present)."""
        value = self.attrs[key]
        assert isinstance(value, list)
        return [int(v) for v in value]

    def num(self, key: str) -> float:
        """A numeric attribute."""
        value = self.attrs[key]
        assert isinstance(value, int | float)
        return float(value)


@dataclass(frozen=True)
class KindSpec:
    """What ``PlanGraph.validate`` checks for a kind: input counts, attribute and weight names."""

    inputs: tuple[int, ...] | None  # allowed input counts; None: one or more
    attrs: frozenset[str] = frozenset()
    weights: frozenset[str] = frozenset()
    optional_weights: frozenset[str] = frozenset()
    single_output: bool = True
    operand_weight: str | None = None  # present exactly when the plan has one input


def _spec(inputs: tuple[int, ...] | None = (1,), attrs: str = "", weights: str = "",
          optional: str = "", single_output: bool = True, operand_weight: str | None = None
          ) -> KindSpec:
    return KindSpec(inputs, frozenset(attrs.split()), frozenset(weights.split()),
                    frozenset(optional.split()), single_output, operand_weight)


_POOL = "kernel strides pads dilations ceil_mode"

KINDS: dict[str, KindSpec] = {
    **dict.fromkeys(("relu", "sigmoid", "hard_swish", "tanh", "silu", "neg", "global_avgpool",
                     "identity"), _spec()),
    **dict.fromkeys(("add", "sub", "mul", "div", "max", "min"),
                    _spec((1, 2), optional="operand", operand_weight="operand")),
    "conv": _spec(attrs="strides pads dilations group", weights="weight", optional="bias"),
    "conv_transpose": _spec(attrs="strides pads dilations group output_padding",
                            weights="weight", optional="bias"),
    "gemm": _spec(weights="weight", optional="bias"),
    "matmul": _spec((1, 2), optional="weight", operand_weight="weight"),
    "leaky_relu": _spec(attrs="alpha"),
    "elu": _spec(attrs="alpha"),
    "prelu": _spec(weights="slope"),
    "clip": _spec(attrs="min max"),
    "hard_sigmoid": _spec(attrs="alpha beta"),
    "pad": _spec(attrs="pads mode value"),
    "bias_add": _spec(weights="bias"),
    "affine_channel": _spec(weights="scale shift"),
    "maxpool": _spec(attrs=_POOL),
    "avgpool": _spec(attrs=_POOL + " count_include_pad"),
    "resize_nearest": _spec(attrs="sizes scales coordinate_transformation_mode nearest_mode"),
    "concat": _spec(None, attrs="axis"),
    "split": _spec(attrs="axis sizes", single_output=False),
    "slice": _spec(attrs="starts ends steps"),
    "flatten": _spec(attrs="axis"),
    "reshape": _spec(attrs="shape"),
    "transpose": _spec(attrs="perm"),
    "softmax": _spec(attrs="axis"),
}


@dataclass
class PlanGraph:
    """A whole imported model; ``plans`` are in topological order."""

    name: str
    inputs: list[PlanValue]
    outputs: list[PlanValue]
    values: dict[str, PlanValue]
    plans: list[Plan]
    opset: int
    notes: list[str] = field(default_factory=list)

    def producers(self) -> dict[str, Plan]:
        """Map each value to the plan that writes it (graph inputs have none)."""
        return {out: plan for plan in self.plans for out in plan.outputs}

    def consumers(self) -> dict[str, list[Plan]]:
        """Map each value to the plans that read it, in plan order."""
        users: dict[str, list[Plan]] = {name: [] for name in self.values}
        for plan in self.plans:
            for name in plan.inputs:
                users[name].append(plan)
        return users

    def validate(self) -> None:
        """Check SSA, topological order and each plan against its kind; raise ValueError."""
        defined = {value.name for value in self.inputs}
        for plan in self.plans:
            spec = KINDS.get(plan.kind)
            where = f"plan {plan.name!r} ({plan.kind})"
            if spec is None:
                raise ValueError(f"{where}: unknown kind")
            if spec.inputs is not None and len(plan.inputs) not in spec.inputs:
                raise ValueError(f"{where}: {len(plan.inputs)} inputs, expected {spec.inputs}")
            if not plan.inputs or (spec.single_output and len(plan.outputs) != 1):
                raise ValueError(f"{where}: wrong number of inputs or outputs")
            missing_attrs = spec.attrs - plan.attrs.keys()
            missing_weights = spec.weights - plan.weights.keys()
            extra_weights = plan.weights.keys() - spec.weights - spec.optional_weights
            if missing_attrs or missing_weights or extra_weights:
                raise ValueError(
                    f"{where}: missing attrs {sorted(missing_attrs)}, missing weights "
                    f"{sorted(missing_weights)}, unexpected weights {sorted(extra_weights)}")
            operand = spec.operand_weight
            if operand is not None and (len(plan.inputs) == 1) != (operand in plan.weights):
                raise ValueError(f"{where}: weight {operand!r} iff one input")
            for name in plan.inputs:
                if name not in defined:
                    raise ValueError(f"{where}: input {name!r} is not defined before use")
            for name in plan.outputs:
                if name in defined or name not in self.values:
                    raise ValueError(f"{where}: output {name!r} redefined or undeclared")
                defined.add(name)
        for value in self.outputs:
            if value.name not in defined:
                raise ValueError(f"graph output {value.name!r} is never produced")

    def format(self) -> str:
        """A compact human-readable listing, one plan per line."""
        lines = [f"plan graph {self.name} (opset {self.opset})"]
        lines += [f"  note: {note}" for note in self.notes]
        lines += [f"  input {v.name}: {list(v.shape)}" for v in self.inputs]
        for plan in self.plans:
            shapes = ", ".join(f"{o}: {list(self.values[o].shape)}" for o in plan.outputs)
            weights = ", ".join(f"{k}{list(w.shape)}" for k, w in plan.weights.items())
            lines.append(f"  {plan.kind} {plan.name}({', '.join(plan.inputs)}) -> {shapes}"
                         + (f" attrs {plan.attrs}" if plan.attrs else "")
                         + (f" weights {weights}" if weights else ""))
        lines += [f"  output {v.name}: {list(v.shape)}" for v in self.outputs]
        return "\n".join(lines)
