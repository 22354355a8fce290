"""Plan lowering: a plan graph becomes graph computes and graph batches (logical-assembly form).

Every plan value becomes one logical tensor. Matrix plans are cut into tiles of the target's
crossbar rows by the columns of an array group (crossbars sharing their input rows, fired by
one MVM; each tile one resident weight, `spat.weight @<plan>.g<g>.r<r>.c<c>`); a batch per
(column group, row tile) has one lane per output row, each pixel one MVM. Partial sums over
row tiles are reduced by following batches in ceil(log2(row tiles)) stages; bias and a
single-use activation fuse into the last stage. Grouped and depthwise convolutions pack several
groups block-diagonally into one crossbar. Elementwise, pooling and resize plans become row-band
batches; placement plans (concat, split, slice, reshape, ...) become single graph computes
whose data movement canonicalization turns into Blueprint placement.

Each plan kind has one lowerer, registered with `@lowers` (as the frontend registers its
converters); it emits through an `Emit`, which counts what it emits into that plan's
`PlanStats`. Batches are emitted in the temporary logical-assembly form (`assembly`: lanes
insert into the logical tensor); canonicalization turns them into N x F fragments plus
`spat.blueprint`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial, reduce
from itertools import accumulate, groupby, pairwise

import numpy as np

from raptor.frontend.plan import Plan, PlanGraph
from raptor.frontend.shapes import nearest_indices
from raptor.ir.builder import Builder, new_func
from raptor.ir.core import Affine, AffineLike, Value
from raptor.ir.module import Module
from raptor.ir.ops import Attr, ComputeOp, ConcatOp, FuncOp, GraphComputeBatchOp, GraphComputeOp
from raptor.ir.types import MAX_ELEMENTS, TensorType
from raptor.passes.layout import LayoutChoice
from raptor.passes.memory import activation_bytes, gather_fits, lane_fits
from raptor.target import Target

ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "relu": (), "sigmoid": (), "tanh": (), "silu": (), "hard_swish": (), "neg": (),
    "leaky_relu": ("alpha",), "hard_sigmoid": ("alpha", "beta"), "clip": ("max", "min"),
    "elu": ("alpha",),
}
"""Plan kinds that are one `pim.<kind>` with these attributes (fusable into a matrix plan)."""

MATRIX_KINDS = ("conv", "gemm", "matmul", "conv_transpose")


class LoweringError(Exception):
    """A plan graph this target cannot run; the message is one line for the user."""


class CapacityExceeded(LoweringError):
    """More distinct crossbar tiles than the whole chip holds."""


@dataclass
class PlanStats:
    """What `raptor inspect` shows per plan."""

    name: str
    kind: str
    inputs: list[tuple[int, ...]]
    output: tuple[int, ...]
    crossbars: int = 0
    groups: int = 0
    """Array groups: crossbars holding column blocks of the same input rows, fired by one
    MVM (a weight of `Target.crossbars_of` crossbars)."""
    lanes: int = 0
    mvms: int = 0
    fused: str = ""
    pixels: int = 1
    """Output pixels per MVM (`conv_windows`)."""


@dataclass
class Lowered:
    module: Module
    stats: list[PlanStats]
    tiles: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Shape of every crossbar weight (one array group), by symbol."""
    layer_of: dict[ComputeOp, PlanStats] = field(default_factory=dict)
    """The plan (ONNX node) each graph compute was lowered from: charts and traces name
    their bars by it."""

    @property
    def crossbars(self) -> int:
        return sum(s.crossbars for s in self.stats)

    @property
    def groups(self) -> int:
        return len(self.tiles)

    @property
    def lanes(self) -> int:
        return sum(s.lanes for s in self.stats)

    @property
    def mvms(self) -> int:
        return sum(s.mvms for s in self.stats)

    @property
    def windowed(self) -> bool:
        """Whether a convolution takes several output pixels per MVM."""
        return any(s.pixels > 1 for s in self.stats)


def sanitize(name: str) -> str:
    """ONNX names → IR names ([A-Za-z0-9_.$-])."""
    clean = re.sub(r"[^A-Za-z0-9_.$]", "_", name)
    return clean or "v"


_TILE_SUFFIX = re.compile(r"(\.[a-z]\d+)+$")


def tile_plan(symbol: str) -> str:
    """The plan a crossbar tile's weight symbol belongs to (`<plan>.g<g>.r<r>.c<c>`)."""
    return _TILE_SUFFIX.sub("", symbol)


def _t(shape: Sequence[int]) -> TensorType:
    return TensorType(tuple(int(d) for d in shape))


def _lane_dim(shape: Sequence[int]) -> int | None:
    """The dimension row-band lanes run over: H for NCHW, else the first dim larger than 1."""
    if len(shape) == 4 and shape[2] > 1:
        return 2
    for d, n in enumerate(shape):
        if n > 1 and d < len(shape) - 1:
            return d
    return None


LaneBody = Callable[[Builder, list[Value]], Value]
"""Builds one lane's fragment from the lane's operand slices."""
BatchBody = Callable[[Builder, Value, list[Value]], tuple[Value, list[AffineLike]]]
"""Builds one lane from (builder, lane, in_args): its fragment and logical offsets."""


# ---------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class RowRun:
    """Output rows [lo, hi) whose windows keep kernel rows [first, end) inside the input."""

    lo: int
    hi: int
    first: int
    end: int


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window over an (N, C, h, w) input: kernel, stride, dilation, the top and
    left padding, and the output size."""

    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int]
    out: tuple[int, int]

    def __post_init__(self) -> None:
        if min(*self.kernel, *self.stride, *self.dilation) < 1:
            raise ValueError(f"window kernel {list(self.kernel)}, strides "
                                f"{list(self.stride)} and dilations {list(self.dilation)} must "
                                "be positive")

    def segments(self) -> list[RowRun]:
        """Runs of output rows reading the same kernel rows; interior rows form one run,
        border rows their own. Each row's kernel rows inside the input are an interval
        found in constant time, whatever the kernel size."""
        kh, sh, dh, top = self.kernel[0], self.stride[0], self.dilation[0], self.pads[0]
        runs: list[RowRun] = []
        for r in range(self.out[0]):
            base = r * sh - top  # input row of kernel row 0
            first = max(0, -(base // dh))  # ceil(-base / dh)
            last = min(kh - 1, (self.h - 1 - base) // dh)
            span = (first, last + 1) if first <= last else (0, 0)
            if runs and runs[-1].hi == r and (runs[-1].first, runs[-1].end) == span:
                runs[-1] = RowRun(runs[-1].lo, r + 1, *span)
            else:
                runs.append(RowRun(r, r + 1, *span))
        return runs


@dataclass(frozen=True)
class Slab:
    """Input channels [first, first + count) of one image."""

    image: int
    first: int
    count: int


@dataclass(frozen=True)
class Tile:
    """One crossbar weight of a column block: rows [row, row + shape[0]) of its matrix."""

    row: int
    weight: Value
    shape: tuple[int, int]


@dataclass(frozen=True)
class ColumnBlock:
    """The output columns one group block's array group computes: its first input channel,
    its bias (if any) and its tiles, one per row tile, in the bundles one lane multiplies,
    and the lanes each output row is cut into (`_lanes`)."""

    first_in: int
    bias: Value | None
    bundles: list[list[Tile]]
    chunks: int
    """Lanes per output row: each multiplies a run of the row's pixels (`_column_windows`)."""


@dataclass(frozen=True)
class GroupBlock:
    """Convolution groups packed block-diagonally into one (K, M) matrix."""

    first_in: int
    first_out: int
    matrix: np.ndarray


# ---------------------------------------------------------------------- state and emission
class Lowering:
    """The state shared by every plan's lowerer: the function being built, where each plan
    value lives and in which layout, the constants and crossbar tiles, the stats."""

    def __init__(self, graph: PlanGraph, target: Target, layouts: LayoutChoice | None,
                 pipeline: bool = False) -> None:
        self.g = graph
        self.target = target
        self.layouts = layouts or LayoutChoice()
        self.values: dict[str, Value] = {}
        self.dense: dict[str, Value] = {}
        self.layout_of: dict[str, str] = {}
        self.index = {id(p): i for i, p in enumerate(graph.plans)}
        self.constants: dict[str, np.ndarray] = {}
        self.tiles: dict[str, tuple[int, int]] = {}
        self.windows = conv_windows(graph, target, pipeline)
        self.stats: list[PlanStats] = []
        self.layer_of: dict[ComputeOp, PlanStats] = {}
        args = [(sanitize(v.name), _t(v.shape)) for v in graph.inputs]
        self.func: FuncOp
        self.func, self.b = new_func("main", args, [_t(v.shape) for v in graph.outputs])
        self.values.update((v.name, a) for v, a in zip(graph.inputs, self.func.args, strict=True))

    def run(self) -> Lowered:
        fused = self.fusion()
        absorbed = {id(a) for a in fused.values()}
        for plan in self.g.plans:
            if id(plan) in absorbed:
                continue
            for o in plan.outputs:
                if math.prod(self.g.values[o].shape) > MAX_ELEMENTS:
                    raise LoweringError(f"plan {plan.name!r}: output {o} of shape "
                                        f"{list(self.g.values[o].shape)} is too large")
            stats = PlanStats(plan.name, plan.kind, [self.values[n].shape for n in plan.inputs],
                              tuple(self.g.values[plan.outputs[0]].shape),
                              pixels=self.windows.get(self.index[id(plan)], 1))
            act = fused.get(plan.outputs[0])
            if act is not None:
                stats.fused = act.kind
                stats.output = tuple(self.g.values[act.outputs[0]].shape)
            lowerer = LOWERERS.get(plan.kind)
            if lowerer is None:
                raise LoweringError(f"plan {plan.name!r}: no lowering for kind {plan.kind!r}")
            try:
                outs = lowerer(Emit(self, stats), plan, act)
            except ValueError as e:  # a malformed plan: a window without taps, an op the
                # builder refused
                raise LoweringError(f"plan {plan.name!r} ({plan.kind}): {e}") from None
            names = act.outputs if act is not None else plan.outputs
            layout = self.layouts.result_of(self.index[id(act if act is not None else plan)])
            for name, v in zip(names, outs, strict=True):
                v.name = v.name or sanitize(name)
                self.values[name] = v
                self.layout_of[name] = layout
            self.stats.append(stats)
        self.b.ret([self.values[v.name] for v in self.g.outputs])
        module = Module([self.func], self.constants, filename=self.g.name)
        return Lowered(module, self.stats, self.tiles, self.layer_of)

    def fusion(self) -> dict[str, Plan]:
        """A matrix plan absorbs a following activation that is its output's only consumer:
        matrix output → activation."""
        users = self.g.consumers()
        outputs = {v.name for v in self.g.outputs}
        fused: dict[str, Plan] = {}
        for plan in self.g.plans:
            out = plan.outputs[0]
            us = users.get(out, [])
            if plan.kind in MATRIX_KINDS and out not in outputs and len(us) == 1 \
                    and us[0].kind in ACTIVATIONS:
                fused[out] = us[0]
        return fused

    def dense_of(self, name: str) -> Value:
        """Dense reassembly: one instance copies every fragment into contiguous storage (the
        lowering of DenseNCHW storage and of materialize_layout R→D), with stats of its own."""
        if name not in self.dense:
            v = self.values[name]
            # a single instance (or a batch of one lane) is already dense; a gather that
            # cannot fit one core's local memory is not made: consumers read the fragments
            # they need (finer lanes)
            if isinstance(v.owner, GraphComputeBatchOp) and v.owner.lanes > 1 \
                    and gather_fits(v.shape, self.target):
                stats = PlanStats(f"{name}.dense", "dense_assembly", [v.shape], v.shape)
                out = Emit(self, stats).compute([v], [v.shape], lambda b, xs: [xs[0]])[0]
                out.name = f"{v.name}_dense"
                self.stats.append(stats)
                v = out
            self.dense[name] = v
        return self.dense[name]


@dataclass
class Emit:
    """Emits IR for one plan and counts it (lanes, MVMs, crossbars) into `stats`."""

    lw: Lowering
    stats: PlanStats

    def input(self, plan: Plan, k: int) -> Value:
        """Operand k as this plan reads it: row fragments directly when producer and consumer
        agree on NHWCRowStrip, else the dense storage of the value."""
        name, lw = plan.inputs[k], self.lw
        produced = lw.layout_of.get(name)  # None: a function argument, dense in shared memory
        if produced is None or produced == lw.layouts.operand_of(lw.index[id(plan)], k) \
                == "NHWCRowStrip":
            return lw.values[name]
        return lw.dense_of(name)

    def out(self, plan: Plan, k: int = 0) -> tuple[int, ...]:
        return tuple(self.lw.g.values[plan.outputs[k]].shape)

    def weight(self, symbol: str, data: np.ndarray, tile: bool = False) -> Value:
        symbol = sanitize(symbol)
        base, n = symbol, 1
        while symbol in self.lw.constants:
            symbol, n = f"{base}.{n}", n + 1
        arr = np.ascontiguousarray(data, dtype=np.float32)
        self.lw.constants[symbol] = arr
        if tile:
            self.lw.tiles[symbol] = (int(arr.shape[0]), int(arr.shape[1]))
            self.stats.crossbars += self.lw.target.crossbars_of(arr.shape)
            self.stats.groups += 1
        return self.lw.b.weight(symbol, _t(arr.shape))

    def batch(self, lanes: int, inputs: Sequence[Value], out_shape: Sequence[int],
              body: BatchBody, mvms_per_lane: int = 0) -> Value:
        """One assembly batch: `body(builder, lane, in_args)` returns the fragment and its
        logical offsets; the fragment's shape (padded to the result rank) is the size."""
        op, lb = self.lw.b.graph_batch(lanes, inputs, [_t(out_shape)], assembly=True)
        frag, offsets = body(lb, op.lane, op.in_args)
        sizes = list(frag.shape)
        if len(sizes) != len(out_shape):
            raise LoweringError(f"plan {self.stats.name!r}: a lane fragment {sizes} does not "
                                f"match the rank of {list(out_shape)}")
        lb.publish(frag, op.out_args[0], offsets, sizes)
        self.lw.layer_of[op] = self.stats
        self.stats.lanes += lanes
        self.stats.mvms += lanes * mvms_per_lane
        return op.outs[0]

    def compute(self, inputs: Sequence[Value], out_shapes: Sequence[Sequence[int]],
                body: Callable[[Builder, list[Value]], list[Value]]) -> list[Value]:
        """One graph compute (a single instance)."""
        op, cb = self.lw.b.graph_compute(inputs, [_t(s) for s in out_shapes])
        cb.yield_(body(cb, op.body.args))
        self.lw.layer_of[op] = self.stats
        self.stats.lanes += 1
        return op.outs

    def rowwise(self, operands: Sequence[Value], out_shape: Sequence[int], body: LaneBody) -> Value:
        """Row-band lanes over `_lane_dim(out_shape)`; operands broadcast numpy-style. A lane
        whose rows do not fit a quarter of a core's memory (`lane_fits`; ResNet-50's
        1,024-channel rows: two operands and the sum, 43 KB, while the partial sums and
        residual rows it waits for fill the rest: 31 of 64 cores over with three quarters)
        is split along the widest other dimension into chunks that do, one batch each,
        placed side by side (finer lanes)."""
        d = _lane_dim(out_shape)
        rank = len(out_shape)
        lanes = out_shape[d] if d is not None else 1
        wide = [e for e in range(rank) if e != d and out_shape[e] > 1]
        c = max(wide, key=lambda e: out_shape[e]) if wide else None

        def dims(x: Value) -> tuple[int, int]:
            """x's lane and chunk dimensions (-1: x has none, it broadcasts)."""
            k = -1 if d is None else d - rank + len(x.shape)
            kc = -1 if c is None else c - rank + len(x.shape)
            rows = d is not None and k >= 0 and x.shape[k] == out_shape[d]
            split = c is not None and kc >= 0 and x.shape[kc] == out_shape[c]
            return (k if rows else -1), (kc if split else -1)

        def lane_bytes(width: int) -> int:
            """A lane's operand slices and fragment with chunks `width` wide."""
            total = 0
            for shape in [*(x.shape for x in operands), tuple(out_shape)]:
                k = -1 if d is None else d - rank + len(shape)
                kc = -1 if c is None else c - rank + len(shape)
                n = math.prod(shape)
                if d is not None and k >= 0 and shape[k] == out_shape[d]:
                    n //= shape[k]
                if c is not None and kc >= 0 and shape[kc] == out_shape[c]:
                    n = n // shape[kc] * width
                total += n
            return total * activation_bytes(self.lw.target)

        full = out_shape[c] if c is not None else 1
        # halving: the chunks of consecutive row-wise ops (an add and its ReLU) line up,
        # so no lane joins parts of two chunks
        halvings = (-(-full // 2 ** i) for i in range(full.bit_length() + 1))
        width = next((w for w in halvings if lane_fits(lane_bytes(w), self.lw.target, 1)), 1)
        parts = []
        for lo in range(0, full, width):
            count = min(width, full - lo)

            def lane_body(b: Builder, lane: Value, ins: list[Value], lo: int = lo,
                          count: int = count) -> tuple[Value, list[AffineLike]]:
                parts = []
                for x in ins:
                    k, kc = dims(x)
                    offs: list[AffineLike] = [0] * len(x.shape)
                    sizes = list(x.shape)
                    if k >= 0:
                        offs[k], sizes[k] = lane, 1
                    if kc >= 0 and count < full:
                        offs[kc], sizes[kc] = lo, count
                    parts.append(b.extract(x, offs, sizes))
                frag = body(b, parts)
                offsets: list[AffineLike] = [0] * rank
                if d is not None:
                    offsets[d] = lane
                return frag, offsets

            shape = list(out_shape)
            if c is not None:
                shape[c] = count
            parts.append(self.batch(lanes, operands, shape, lane_body))
        return parts[0] if len(parts) == 1 else self.concat(parts, out_shape, c or 0)

    def view(self, x: Value, shape: Sequence[int]) -> Value:
        if x.shape == tuple(shape):
            return x
        return self.compute([x], [shape], lambda b, xs: [b.reshape(xs[0], _t(shape))])[0]

    def concat(self, parts: list[Value], out_shape: Sequence[int], axis: int) -> Value:
        """The parts placed along `axis` (one part: itself)."""
        if len(parts) == 1:
            return parts[0]
        return self.compute(parts, [out_shape], lambda b, xs: [b.concat(xs, axis)])[0]

    def per_image(self, out: tuple[int, ...], one: Callable[[int], Value]) -> Value:
        """Spatial plans run one image at a time; images concatenate along dim 0."""
        return self.concat([one(n) for n in range(out[0])], out, 0)


def _activation(b: Builder, v: Value, act: Plan | None) -> Value:
    if act is None:
        return v
    attrs: dict[str, Attr] = {k: float(act.num(k)) for k in ACTIVATIONS[act.kind]}
    return b.unary(act.kind, v, attrs)


def _tail(b: Builder, y: Value, bias: list[Value], act: Plan | None) -> Value:
    """The last stage of a matrix plan: its bias (when given) and fused activation."""
    for c in bias:
        y = b.binary("vadd", y, c, y.tensor)
    return _activation(b, y, act)


Lowerer = Callable[[Emit, Plan, Plan | None], list[Value]]
"""`lower(emit, plan, fused_activation)`: the plan's output values."""
LOWERERS: dict[str, Lowerer] = {}


def lowers(*kinds: str) -> Callable[[Lowerer], Lowerer]:
    def register(fn: Lowerer) -> Lowerer:
        LOWERERS.update(dict.fromkeys(kinds, fn))
        return fn

    return register


# ---------------------------------------------------------------------- matrix plans
def _tiles(target: Target, mat: np.ndarray, rows: int, pixels: int = 0
           ) -> list[list[tuple[int, int, np.ndarray]]]:
    """Row tiles × column groups of a (K, M) matrix: [(k0, m0, tile)] per row tile, each
    group `_group_width` crossbars wide."""
    k, m = mat.shape
    r = target.crossbar_rows
    c = target.crossbar_cols * _group_width(target, k, m, rows, pixels)
    return [[(k0, m0, mat[k0:k0 + r, m0:m0 + c]) for m0 in range(0, m, c)] for k0 in range(0, k, r)]


def _group_width(target: Target, k: int, m: int, rows: int, pixels: int = 0) -> int:
    """Crossbars per column group of a (k, m) matrix: the column blocks of one array group
    (`Target.array_group`), whose crossbars share a tile's input rows and fire as one MVM.
    Unless the matrix's lanes with one crossbar per column block (`rows` per row tile and
    block: its output rows × images) all run at once on the cores anyway: then groups
    would save MVM instructions but no time, and their partial sums would travel as one
    message instead of one per block in parallel (mlp: 4,993 ns with one crossbar per MVM,
    5,276 with groups of 2). With `pixels` (a convolution lane's output row), a group is
    only as wide as lets the lane's results (the MVM's and its transpose) fit an eighth of
    a core's memory (`lane_fits` of twice that in a quarter): ResNet-50's 1,024-wide groups
    left 14 KB results waiting on 15 cores beyond what they hold (ResNet-18's groups all
    fit as they were)."""
    r = target.crossbar_rows
    blocks = -(-m // target.crossbar_cols)
    per = target.array_group(blocks)
    if rows * -(-k // r) * blocks <= target.num_cores:
        per = 1
    groups = -(-blocks // per)
    while pixels and per > 1 and not lane_fits(
            4 * per * target.crossbar_cols * pixels * activation_bytes(target), target, 1):
        groups += 1
        per = -(-blocks // groups)  # as even as before
    return per


def _reduce_partials(em: Emit, partials: list[Value], bias: Value | None,
                     act: Plan | None) -> Value:
    """Pairwise-add partial sums in ceil(log2(n)) stages; bias/activation in the last."""
    while len(partials) > 1:
        last_stage = len(partials) <= 2
        nxt = []
        for i in range(0, len(partials) - 1, 2):
            a, c = partials[i], partials[i + 1]
            ops: list[Value] = [a, c] + ([bias] if (last_stage and bias is not None) else [])

            def body(b: Builder, xs: list[Value], tail: bool = last_stage) -> Value:
                s = b.binary("vadd", xs[0], xs[1])
                return _tail(b, s, xs[2:], act) if tail else s

            nxt.append(em.rowwise(ops, a.shape, body))
        if len(partials) % 2:
            nxt.append(partials[-1])
        partials = nxt
    return partials[0]


@lowers("conv")
def _conv_plan(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    return [_conv(em, plan.name, em.input(plan, 0), plan.weights["weight"],
                  plan.weights.get("bias"), plan.ints("strides"), plan.ints("pads"),
                  plan.ints("dilations"), int(plan.num("group")), em.out(plan), act,
                  em.lw.windows.get(em.lw.index[id(plan)], 1))]


def _taps(kw: int, stride: int, dilation: int, pixels: int) -> int:
    """im2col columns per kernel row of an MVM of `pixels` adjacent output pixels: the
    kernel's kw, or the input columns the pixels span (`_sdk_window`)."""
    return kw if pixels == 1 else stride * (pixels - 1) + dilation * (kw - 1) + 1


def _sdk_window(win: Window, pixels: int) -> Window:
    """The window one MVM of `pixels` adjacent output pixels reads (shifted-and-duplicated
    kernels, SDK: Zhang et al., IEEE TCAD 2020): kh rows by the `_taps` input columns the
    pixels span, one such window every `pixels` output columns. Its im2col is that of a
    dense kernel that wide with stride s × pixels, so lanes, their chunks and their memory
    are those of that window; an output row not a multiple of `pixels` wide pads its last
    window. One pixel: `win` itself."""
    if pixels == 1:
        return win
    (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    return Window(win.h, win.w, (kh, _taps(kw, sw, dw, pixels)), (sh, sw * pixels), (dh, 1),
                  win.pads, (win.out[0], -(-win.out[1] // pixels)))


def _sdk_matrix(w: np.ndarray, stride: int, dilation: int, pixels: int) -> np.ndarray:
    """The (Cin·kh·taps, Cout·pixels) weight of `_sdk_window`: W'[(c, ky, s·j + d·kx), (o, j)]
    = W[o, c, ky, kx], zero elsewhere. Columns (o, j) keep each output channel's pixels in
    one crossbar (`pixels` divides its columns), so a column group holds whole channels."""
    cout, cin, kh, kw = w.shape
    taps = _taps(kw, stride, dilation, pixels)
    mat = np.zeros((cin, kh, taps, cout, pixels), dtype=np.float32)
    for j in range(pixels):
        for kx in range(kw):
            mat[:, :, stride * j + dilation * kx, :, j] = w[:, :, :, kx].transpose(1, 2, 0)
    return mat.reshape(cin * kh * taps, cout * pixels)


def _packing(target: Target, cout: int, cin_g: int, kernel: tuple[int, int], group: int,
             stride: int = 1, dilation: int = 1, pixels: int = 1
             ) -> tuple[int, int, list[range]]:
    """(output columns, im2col rows) per group of a (grouped) convolution and the groups of each
    block: as many as fit packed block-diagonally into one crossbar (one when they do not).
    An ungrouped convolution of `pixels` per MVM: one block of `_sdk_matrix`'s shape."""
    mg = cout // group * pixels
    kg = cin_g * kernel[0] * _taps(kernel[1], stride, dilation, pixels)
    rows, cols = target.crossbar_rows, target.crossbar_cols
    per = min(rows // kg, cols // mg, group) if group > 1 and kg <= rows and mg <= cols else 1
    return mg, kg, [range(g0, min(g0 + per, group)) for g0 in range(0, group, per)]


def _group_blocks(target: Target, w: np.ndarray, group: int, stride: int = 1,
                  dilation: int = 1, pixels: int = 1) -> list[GroupBlock]:
    """Column blocks of a convolution's im2col weight (see `_packing`)."""
    if pixels > 1:
        return [GroupBlock(0, 0, _sdk_matrix(w, stride, dilation, pixels))]
    cout, cin_g, kh, kw = w.shape
    mg, kg, packed = _packing(target, cout, cin_g, (kh, kw), group)
    blocks = []
    for gs in packed:
        mat = np.zeros((len(gs) * kg, len(gs) * mg), dtype=np.float32)
        for j, g in enumerate(gs):
            mat[j * kg:(j + 1) * kg, j * mg:(j + 1) * mg] = w[g * mg:(g + 1) * mg].reshape(mg, kg).T
        blocks.append(GroupBlock(gs.start * cin_g, gs.start * mg, mat))
    return blocks


def _grid_size(target: Target, k: int, m: int) -> int:
    """Tiles `_tiles` cuts a (k, m) matrix into."""
    return -(-k // target.crossbar_rows) * -(-m // target.crossbar_cols)


def _plan_crossbars(graph: PlanGraph, plan: Plan, target: Target, pixels: int = 1) -> int:
    """The crossbar tiles lowering builds for `plan` (a convolution at `pixels` per MVM), by
    the same arithmetic as `_tiles` and `_packing`, without building them (a plan lowering
    refuses counts none)."""
    w = plan.weights.get("weight")
    if plan.kind not in MATRIX_KINDS or w is None:
        return 0
    if plan.kind in ("conv", "conv_transpose") and w.ndim == 4:
        group = int(plan.num("group"))
        cout, cin_g, kh, kw = w.shape
        if plan.kind == "conv_transpose":  # lowered as a conv with swapped weights
            cout, cin_g = w.shape[1] * group, w.shape[0] // max(group, 1)
        if group < 1 or cout % group:
            return 0
        stride, dilation = (plan.ints("strides")[1], plan.ints("dilations")[1]) \
            if pixels > 1 else (1, 1)
        mg, kg, packed = _packing(target, cout, cin_g, (kh, kw), group, stride, dilation,
                                  pixels)
        return sum(_grid_size(target, len(gs) * kg, len(gs) * mg) for gs in packed)
    if plan.kind == "gemm" and w.ndim == 2:
        return _grid_size(target, *w.shape)
    if plan.kind == "matmul" and plan.inputs:
        a = graph.values[plan.inputs[0]].shape
        a2, b2 = (a if len(a) > 1 else (1, *a)), (w.shape if w.ndim > 1 else (*w.shape, 1))
        batch = math.prod(np.broadcast_shapes(a2[:-2], b2[:-2]))
        return batch * _grid_size(target, b2[-2], b2[-1])
    return 0


def crossbars_needed(graph: PlanGraph, target: Target, pipeline: bool = False) -> int:
    """The crossbar tiles lowering will build (`_plan_crossbars` at `conv_windows`)."""
    windows = conv_windows(graph, target, pipeline)
    return sum(_plan_crossbars(graph, p, target, windows.get(i, 1))
               for i, p in enumerate(graph.plans))


WINDOW_SHARE = 4
"""The share of the chip's crossbars a convolution's copies, and the network's crossbars,
may take when `conv_windows` widens windows (ResNet-18 at one unit, before its lane term:
a quarter 2.55 ms simulated, a fifth 2.62, a third or a half 2.90; an eighth is less than
its crossbars at one pixel)."""


@dataclass(frozen=True)
class WindowOption:
    """A convolution at `pixels` output pixels per MVM: its MVMs, its crossbars and the
    MVMs of its shortest lane (`_lanes`: a run of a row in the most chunks, all row tiles
    per lane with windows, one without)."""

    pixels: int
    mvms: int
    crossbars: int
    lane: int


def window_options(graph: PlanGraph, plan: Plan, target: Target) -> list[WindowOption]:
    """The pixels per MVM an ungrouped convolution may take (one pixel first): those up to
    `conv_window_max` dividing a crossbar's columns (a column group holds whole channels,
    `_sdk_matrix`) whose columns fit one array group (`array_group_max`: wider, its blocks
    would fire as several MVMs) and whose lane of one row tile fits local memory
    (`lane_fits`). MVMs: images × output rows × windows per row × row tiles × column
    groups (`_group_width`)."""
    w = plan.weights.get("weight")
    one = WindowOption(1, 0, _plan_crossbars(graph, plan, target), 0)
    if plan.kind != "conv" or w is None or w.ndim != 4 or int(plan.num("group")) != 1:
        return [one]
    cout, cin, kh, kw = w.shape
    (n, _, oh, ow), (_, _, h, wd) = (graph.values[plan.outputs[0]].shape,
                                     graph.values[plan.inputs[0]].shape)
    strides, pads, dil = plan.ints("strides"), plan.ints("pads"), plan.ints("dilations")
    win = Window(h, wd, (kh, kw), (strides[0], strides[1]), (dil[0], dil[1]),
                 (pads[0], pads[1]), (oh, ow))
    most = min(target.array_group_max, target.crossbars_per_core)
    out = []
    for pixels in range(1, min(target.conv_window_max, ow) + 1):
        if target.crossbar_cols % pixels:
            continue
        mg, kg, _ = _packing(target, cout, cin, (kh, kw), 1, strides[1], dil[1], pixels)
        blocks, row_tiles = -(-mg // target.crossbar_cols), -(-kg // target.crossbar_rows)
        sdk = _sdk_window(win, pixels)
        tile = (min(kg, target.crossbar_rows), min(mg, most * target.crossbar_cols))
        if pixels > 1 and (blocks > most or not lane_fits(
                _conv_lane_bytes(target, sdk, tile, row_tiles, 1, 1), target)):
            continue
        groups = -(-blocks // _group_width(target, kg, mg, n * oh, sdk.out[1]))
        bundle = row_tiles if pixels > 1 and _fits_core(target, row_tiles, blocks) else 1
        out.append(WindowOption(pixels, n * oh * sdk.out[1] * row_tiles * groups,
                                row_tiles * blocks,
                                bundle * -(-sdk.out[1] // _most_chunks(sdk.out[1], pixels))))
    return out or [one]


def conv_windows(graph: PlanGraph, target: Target, pipeline: bool = False) -> dict[int, int]:
    """Output pixels per MVM of each convolution that takes more than one (by plan index):
    of its `window_options`, the one of least MVMs per copy its layer can have, or of its
    shortest lane if that is longer (ties: fewer MVMs, then fewer pixels). Wider windows
    cost crossbars (ResNet-18's 3×3 layers of 64 channels: 5 a copy at one pixel, 18 at 4,
    60 at 8), and copies of a layer's tiles on more cores are what spread its lanes over
    them: a layer may have as many copies (at most one per core) as 1/`WINDOW_SHARE` of the
    chip's crossbars hold (ResNet-18 at one unit, layer 1 at 8 pixels, the fewest MVMs:
    3.08 ms simulated; at 4: 2.59 ms). A layer of fewer lanes than cores is as slow as its
    longest lane, which windows lengthen (the ResNet block's 16×16 layers at 8 pixels:
    40,451 ns; at 4: 36,864). The network's crossbars stay within that share too:
    convolutions claim their windows in order of time saved per crossbar added, each its
    best window that still fits. `pipeline` (pipeline mode) ranks by MVMs per copy alone,
    the lane term breaking ties of MVMs only: in a stream the other layers' work fills the
    cores a layer's few lanes leave idle (periods with the lane term and without: onet
    41,598 and 32,078 ns, preact_resnet8 104,227 and 84,723; ties to fewer pixels instead
    cost mobilenet 31,926 against 31,496)."""
    options = {i: window_options(graph, p, target) for i, p in enumerate(graph.plans)}
    total = sum(opts[0].crossbars for opts in options.values())
    budget = target.crossbar_capacity // WINDOW_SHARE

    def spread(o: WindowOption) -> float:
        """MVMs one core does with the layer's copies spread over the cores."""
        return o.mvms / min(target.num_cores, max(1, budget // o.crossbars))

    def lanes(o: WindowOption) -> float:
        """`spread`, or its shortest lane's when the layer has fewer lanes than that."""
        return max(spread(o), o.lane)

    time = spread if pipeline else lanes
    ranked = {i: sorted(opts, key=lambda o: (time(o), o.mvms, lanes(o), o.pixels))
              for i, opts in options.items() if len(opts) > 1}

    def gain(i: int) -> float:
        one, best = options[i][0], ranked[i][0]
        return (time(one) - time(best)) / max(1, best.crossbars - one.crossbars)

    chosen: dict[int, int] = {}
    for i in sorted(ranked, key=gain, reverse=True):
        one = options[i][0]
        for o in ranked[i]:
            if o.pixels == 1:
                break
            if total + o.crossbars - one.crossbars <= budget:
                chosen[i] = o.pixels
                total += o.crossbars - one.crossbars
                break
    return chosen


def _conv(em: Emit, name: str, x: Value, w: np.ndarray, bias: np.ndarray | None,
          strides: list[int], pads: list[int], dil: list[int], group: int,
          out_shape: tuple[int, ...], act: Plan | None, pixels: int = 1) -> Value:
    """`pixels` adjacent output pixels per MVM (`_sdk_window`; 1 for grouped ones)."""
    h, wd = x.shape[2:]
    _, _, kh, kw = w.shape
    window = Window(h, wd, (kh, kw), (strides[0], strides[1]), (dil[0], dil[1]),
                    (pads[0], pads[1]), (out_shape[2], out_shape[3]))
    if group < 1 or w.shape[0] % group:
        raise LoweringError(f"plan {name!r}: group {group} does not divide {w.shape[0]} "
                            "output channels")
    target, sdk = em.lw.target, _sdk_window(window, pixels)
    # weights once, shared by every image
    columns: list[ColumnBlock] = []
    blocks = _group_blocks(target, w, group, strides[1], dil[1], pixels)
    grids = [_tiles(target, blk.matrix, out_shape[0] * out_shape[2], sdk.out[1])
             for blk in blocks]
    lanes = out_shape[0] * out_shape[2] * sum(len(grid[0]) for grid in grids)
    for bi, (blk, grid) in enumerate(zip(blocks, grids, strict=True)):
        for ci in range(len(grid[0])):
            m0, mt = grid[0][ci][1], grid[0][ci][2].shape[1]
            tiles = [Tile(row[ci][0], em.weight(f"{name}.g{bi}.r{ri}.c{ci}", row[ci][2],
                                                tile=True), row[ci][2].shape)
                     for ri, row in enumerate(grid)]
            bundles, chunks = _lanes(target, tiles, lanes, sdk.out[1], partial(
                _conv_lane_bytes, target, sdk, tiles[0].shape, len(tiles)), pixels)
            bvec = None
            if bias is not None:
                # (1, mt) beside the MVM result (windows, mt) of a column's one lane, each
                # channel's bias once per pixel; (1, channels, 1, 1) beside NCHW partials
                o0, mc = blk.first_out + m0 // pixels, mt // pixels
                b = bias[o0:o0 + mc]
                bvec = em.weight(f"{name}.bias.b{bi}.c{ci}", np.repeat(b, pixels).reshape(
                    1, mt) if len(bundles) == 1 else b.reshape(1, mc, 1, 1))
            columns.append(ColumnBlock(blk.first_in, bvec, bundles, chunks))
    taps = kh * sdk.kernel[1]
    images = []
    for n in range(x.shape[0]):
        results = []
        for col in columns:
            single = len(col.bundles) == 1
            partials = []
            for tiles in col.bundles:
                ins = [x, *(t.weight for t in tiles)] + (
                    [col.bias] if single and col.bias is not None else [])
                # the input channels whose im2col rows the tiles multiply: (c, kh, taps) order
                c0 = tiles[0].row // taps
                c1 = -(-(tiles[-1].row + tiles[-1].shape[0]) // taps)
                slab = Slab(n, col.first_in + c0, c1 - c0)
                parts, done = [], 0
                for col0, sub in _column_windows(sdk, col.chunks):
                    count = min(out_shape[3] - done, sub.out[1] * pixels)
                    parts.append(_conv_batch(em, ins, slab, sub, col0, tiles, single, act,
                                             pixels, count))
                    done += count
                mc = tiles[0].shape[1] // pixels
                partials.append(em.concat(parts, (1, mc, *out_shape[2:]), 3))
            results.append(_reduce_partials(em, partials, col.bias, act))
        images.append(em.concat(results, (1, *out_shape[1:]), 1))
    return em.concat(images, out_shape, 0)


def _lanes(target: Target, tiles: list[Tile], lanes: int, width: int = 1,
           lane_bytes: Callable[[int, int], int] | None = None, pixels: int = 1
           ) -> tuple[list[list[Tile]], int]:
    """How a column group's lanes cut its work: its row tiles into bundles (one lane
    multiplies a bundle's tiles, their array groups firing on the core's `mvm_units`, and
    adds their partial sums) and each output row of `width` pixels into chunks (one lane
    each). `lanes`: the plan's lanes per bundle and chunk (output rows × column groups ×
    images), all competing for the cores. `width` counts MVMs (windows of `pixels`).

    A bundle is at most `mvm_units` tiles, or all of them (no partial sums to send and add):
    more would make each copy of it hold more crossbars for no faster MVMs. With windows of
    `pixels` > 1, all of them when they fit a core: the rounds below do not price partial
    sums, and a window's are `pixels` times as wide as a pixel's (ResNet-18, layer 1 at 8
    pixels: 15 one-tile bundles in sevenths of a row, 36,053 tasks, 4.45 ms simulated; all
    15 tiles per lane 3.06 ms). Under the
    `pimsim-nn` protocol any number, since each partial sum is one more blocking message:
    ResNet-18's 7-pixel layers of 36 row tiles in 9 bundles of 4 (63 lanes, one round of
    28 MVMs, as 252 one-tile lanes take 4 rounds of 7), its 14-pixel ones of 18 in 9 of 2
    (9.88 ms on pimsim-nn against 9.98, docs/benchmarks.md "Issue #24, ninth session").
    Among the cuts whose MVM rounds on the cores (lanes / cores rounds of bundle / units ×
    chunk pixels MVMs) are within 3 % of the fewest: the fewest bundles; then, for one
    bundle and up to `MANY_LANES` lanes per core, the shortest lanes (a run of a row is
    ready sooner, so the next layer's windows start sooner: yolo_neck's last layer in
    eighths of a row rather than quarters, 279 against 358 µs), else the fewest lanes
    (with partial sums, finer lanes add messages: ResNet-18's 28- and 14-pixel layers in
    half rows took 3.96 ms against 3.87). ResNet-18 at one unit: its 112-pixel rows (224
    one-tile lanes, 4 rounds of 146 µs on 64 cores) in quarters, both tiles per lane (7
    rounds of 73 µs); its 56-pixel 3×3 layers (280 lanes, 5 rounds of 73 µs) in eighths,
    all 5 tiles per lane (7 rounds of 46 µs). With `lane_bytes(n, k)` (a lane's buffers
    with n tiles and rows in k chunks), only what `lane_fits`."""
    # (bundles, more lanes than MANY_LANES, a lane's MVM rounds (or its lanes), lanes,
    # MVM rounds, chunks)
    options: list[tuple[int, bool, int, int, int, int]] = []
    most = len(tiles) if target.protocol == "pimsim-nn" else min(target.mvm_units, len(tiles))
    whole = _fits_core(target, len(tiles), target.crossbars_of(tiles[0].shape))
    for n in [len(tiles)] if pixels > 1 and whole else sorted({*range(1, most + 1), len(tiles)}):
        count = -(-len(tiles) // n)
        if options and count == options[-1][0]:
            continue  # the same bundles as a smaller n
        size = -(-len(tiles) // count)  # as even as `count` bundles allow
        if not _fits_core(target, size, target.crossbars_of(tiles[0].shape)):
            continue
        for k in range(1, _most_chunks(width, pixels) + 1):
            if (n > 1 or k > 1) and lane_bytes is not None \
                    and not lane_fits(lane_bytes(size, k), target):
                continue
            total = count * k * lanes
            rounds = -(-total // target.num_cores) * -(-size // target.mvm_units) * -(-width // k)
            many = total > MANY_LANES * target.num_cores
            lane = total if many or count > 1 else -(-size // target.mvm_units) * -(-width // k)
            options.append((count, many, lane, total, rounds, k))
    least = min(o[4] for o in options)
    count, *_, k = min(o for o in options if o[4] * 100 <= least * 103)
    cuts = [len(tiles) * i // count for i in range(count + 1)]
    return [tiles[a:b] for a, b in pairwise(cuts)], k


def _fits_core(target: Target, tiles: int, crossbars: int) -> bool:
    """Whether one lane's bundle of `tiles` row tiles of `crossbars` each fits a core."""
    return tiles * crossbars <= target.crossbars_per_core


def _most_chunks(width: int, pixels: int = 1) -> int:
    """The most lanes `_lanes` cuts an output row of `width` MVMs (windows of `pixels`)
    into: each at least `MIN_CHUNK` pixels, at most `MAX_CHUNKS`."""
    return max(1, min(width // -(-MIN_CHUNK // pixels), MAX_CHUNKS))


MAX_CHUNKS = 8
"""The most lanes an output row is cut into (`_lanes`)."""

MIN_CHUNK = 4
"""The fewest pixels of a row a lane takes when rows are cut (`_lanes`): a lane's fixed
work (its window's rows, their copies, its messages) spreads over its pixels."""

MANY_LANES = 8
"""Lanes per core beyond which `_lanes` cuts no finer for shorter lanes."""


def _column_windows(win: Window, chunks: int) -> list[tuple[int, Window]]:
    """`win` cut into `chunks` runs of output columns, as even as can be: per run, its
    first input column and the window over the input columns it reads (its own padding)."""
    ow, (_, kw), (_, sw), (_, dw), (top, left) = win.out[1], win.kernel, win.stride, \
        win.dilation, win.pads
    cuts = [ow * i // chunks for i in range(chunks + 1)]
    out = []
    for w0, w1 in pairwise(cuts):
        lo, hi = w0 * sw - left, (w1 - 1) * sw - left + (kw - 1) * dw + 1
        a, b = max(0, lo), min(win.w, hi)
        out.append((a, Window(win.h, b - a, win.kernel, win.stride, win.dilation,
                              (top, a - lo), (win.out[0], w1 - w0))))
    return out


def _conv_lane_bytes(target: Target, win: Window, tile: tuple[int, int], tiles: int, n: int,
                     chunks: int) -> int:
    """A convolution lane's buffers with `n` of the column's `tiles` row tiles of `tile`'s
    shape and its output row in `chunks` lanes (the widest one): its input rows, their
    im2col matrix and its transpose, the MVM results and their sum."""
    kh, kw = win.kernel
    ow = -(-win.out[1] // chunks)
    rows, mt = min(n, tiles) * tile[0], tile[1]
    channels = -(-rows // (kh * kw)) + 1
    width = min(win.w + win.pads[1] * 2, (ow - 1) * win.stride[1] + (kw - 1) * win.dilation[1] + 1)
    return activation_bytes(target) * (channels * kh * width + 2 * rows * ow + (n + 1) * mt * ow)


def _mvm_sum(b: Builder, weights: Sequence[Value], vectors: Sequence[Value]) -> Value:
    """The partial sums of one lane's row tiles (independent MVMs, one per array group),
    added."""
    return reduce(lambda a, y: b.binary("vadd", a, y),
                  [b.mvm(w, v) for w, v in zip(weights, vectors, strict=True)])


def _conv_batch(em: Emit, ins: list[Value], slab: Slab, win: Window, col0: int,
                tiles: list[Tile], single: bool, act: Plan | None, pixels: int = 1,
                count: int = 0) -> Value:
    """Lanes = output rows. Each lane reads only the input rows its window covers (padding
    is added inside the lane) of only the channels its tiles multiply (`slab`), builds
    those channels' im2col rows, keeps each tile's rows and does one MVM per pixel and tile
    (several tiles: one per MVM unit, added). Building the whole im2col window per tile
    would cost every row tile a copy of all channels, and local memory for two of them (the
    window and its transpose). The `single` lane of its column (all its row tiles) adds the
    bias and activation itself. `win` reads input columns from `col0` on (a run of the output
    row, `_column_windows`). With `pixels` per MVM (`win` a `_sdk_window`), each MVM's
    (windows, channels × pixels) result becomes the lane's `count` pixels per channel:
    reshaped, transposed, the last window's padding pixels dropped."""
    kh, kw = win.kernel
    oh, ow = win.out
    mt = tiles[0].shape[1]
    mc, width = mt // pixels, count or ow
    cn = slab.count
    base = tiles[0].row - tiles[0].row % (kh * kw)  # the slab's first im2col row
    whole = len(tiles) == 1 and single  # one tile holding all of the slab's rows

    def body(b: Builder, rows: Value, args: list[Value]) -> Value:
        cols = []
        for j in range(kw):
            e = b.extract(rows, [0, 0, j * win.dilation[1]], [cn, kh, ow], [1, 1, win.stride[1]])
            cols.append(b.reshape(e, _t((cn, kh, 1, ow))) if kw > 1 else e)
        patch = b.concat(cols, 2) if kw > 1 else cols[0]
        mat = b.reshape(patch, _t((cn * kh * kw, ow)))
        # each tile's rows: contiguous in the (K, ow) matrix
        vecs = [b.transpose(mat if whole else b.extract(mat, [t.row - base, 0], [t.shape[0], ow]),
                            [1, 0]) for t in tiles]
        y = _mvm_sum(b, args[1:1 + len(tiles)], vecs)
        y = _tail(b, y, args[1 + len(tiles):], act) if single else y
        if pixels == 1:
            return b.reshape(b.transpose(y, [1, 0]), _t((1, mt, 1, ow)))
        y = b.transpose(b.reshape(y, _t((ow, mc, pixels))), [1, 0, 2])
        y = b.reshape(y, _t((mc, ow * pixels)))
        if width < ow * pixels:
            y = b.extract(y, [0, 0], [mc, width])
        return b.reshape(y, _t((1, mc, 1, width)))

    return _window_rows(em, ins, slab, win, 0.0, (1, mc, oh, width), body, ow * len(tiles),
                        col0=col0)


WindowBody = Callable[[Builder, Value, list[Value]], Value]
"""Builds one lane's fragment from (builder, its input rows padded to the kernel, in_args)."""


def _window_rows(em: Emit, ins: list[Value], slab: Slab, win: Window, fill: float,
                 out: tuple[int, ...], body: WindowBody, mvms: int = 0,
                 extra: Callable[[Builder, Value, int], Value] | None = None,
                 col0: int = 0) -> Value:
    """Row lanes of a sliding window over ins[0] (N, C, H, W), whose input columns start at
    `col0`. Lanes whose window rows all lie inside the input share one batch; border lanes
    get their own, with the missing rows padded inside the lane. The parts concatenate along
    H (placement)."""
    kh = win.kernel[0]
    sh, dh = win.stride[0], win.dilation[0]
    top, left = win.pads
    need_w = (win.out[1] - 1) * win.stride[1] + (win.kernel[1] - 1) * win.dilation[1] + 1
    right = max(0, need_w - win.w - left)
    parts = []
    for run in win.segments():
        def lane_body(b: Builder, lane: Value, args: list[Value], run: RowRun = run
                      ) -> tuple[Value, list[AffineLike]]:
            first = Affine(run.lo * sh - top + run.first * dh, ((sh, lane),))
            taps = run.end - run.first
            rows = b.extract(args[0], [slab.image, slab.first, first, col0],
                             [1, slab.count, taps, win.w], [1, 1, dh, 1],
                             type=_t((slab.count, taps, win.w)))
            if run.first or run.end < kh or left or right:
                rows = b.pad(rows, [0, run.first, left], [0, kh - run.end, right], fill)
            frag = body(b, rows, args)
            if extra is not None:
                frag = extra(b, frag, run.lo)
            return frag, [0, 0, lane, 0]

        parts.append(em.batch(run.hi - run.lo, ins, (out[0], out[1], run.hi - run.lo, out[3]),
                              lane_body, mvms_per_lane=mvms))
    return em.concat(parts, out, 2)


@lowers("gemm")
def _gemm_plan(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    return [_gemm(em, plan.name, em.input(plan, 0), plan.weights["weight"],
                  plan.weights.get("bias"), act, em.out(plan))]


def _gemm(em: Emit, name: str, x: Value, w: np.ndarray, bias: np.ndarray | None,
          act: Plan | None, out_shape: tuple[int, ...]) -> Value:
    m, _ = x.shape
    n = w.shape[1]
    grid = _tiles(em.lw.target, w, m)
    full_bias = None
    if bias is not None:
        full_bias = np.broadcast_to(bias, (m, n)) if bias.ndim == 2 and bias.shape[0] > 1 \
            else bias.reshape(1, n)
    results = []
    for ci in range(len(grid[0])):
        m0, mt = grid[0][ci][1], grid[0][ci][2].shape[1]
        bvec = None
        if full_bias is not None:
            bvec = em.weight(f"{name}.bias.c{ci}", full_bias[:, m0:m0 + mt])
        tiles = [Tile(row[ci][0], em.weight(f"{name}.r{ri}.c{ci}", row[ci][2], tile=True),
                      row[ci][2].shape) for ri, row in enumerate(grid)]
        bundles, _ = _lanes(em.lw.target, tiles, m * len(grid[0]))
        single = len(bundles) == 1
        partials = [_gemm_batch(em, [x, *(t.weight for t in ts)] + (
            [bvec] if single and bvec is not None else []), m, ts, single, act)
            for ts in bundles]
        results.append(_reduce_partials(em, partials, bvec, act))
    return em.concat(results, out_shape, 1)


def _gemm_batch(em: Emit, ins: list[Value], m: int, tiles: list[Tile], tail: bool,
                act: Plan | None) -> Value:
    mt = tiles[0].shape[1]

    def body(b: Builder, lane: Value, args: list[Value]) -> tuple[Value, list[AffineLike]]:
        vecs = [b.extract(args[0], [lane, t.row], [1, t.shape[0]]) for t in tiles]
        y = _mvm_sum(b, args[1:1 + len(tiles)], vecs)
        if tail:  # a bias of one row per sample: this lane's row
            y = _tail(b, y, [b.extract(c, [lane, 0], [1, mt]) if c.shape[0] > 1 else c
                             for c in args[1 + len(tiles):]], act)
        return y, [lane, 0]

    return em.batch(m, ins, (m, mt), body, mvms_per_lane=len(tiles))


def _bcast_index(idx: tuple[int, ...], dims: Sequence[int]) -> tuple[int, ...]:
    """Index into an operand's batch dims under numpy broadcasting (size-1 dims stay 0)."""
    lead = len(idx) - len(dims)
    return tuple(0 if d == 1 else idx[lead + i] for i, d in enumerate(dims))


@lowers("matmul")
def _matmul(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """numpy matmul semantics: 1-D operands gain a unit dim, batch dims broadcast. A
    constant operand goes onto crossbars (gemm tiles); activation x activation runs on
    the vector unit (row times matrix as multiply + column reduction)."""
    a, w = em.input(plan, 0), plan.weights.get("weight")
    b = None if w is not None else em.input(plan, 1)
    bsh = tuple(w.shape) if w is not None else b.shape  # type: ignore[union-attr]
    a2 = a.shape if len(a.shape) > 1 else (1, *a.shape)
    b2 = bsh if len(bsh) > 1 else (*bsh, 1)
    (m, k), n = a2[-2:], b2[-1]
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    av = em.view(a, a2)
    bv = em.view(b, b2) if b is not None else None
    wmat = w.reshape(b2) if w is not None else None
    results = []
    for idx in np.ndindex(*batch):
        bi = _bcast_index(idx, b2[:-2])
        amat = _slice_matrix(em, av, _bcast_index(idx, a2[:-2]), (m, k))
        if wmat is not None:
            wb = wmat[bi] if bi else wmat
            tag = plan.name + ("." + "_".join(map(str, idx)) if idx else "")
            y = _gemm(em, tag, amat, np.asarray(wb), None, act, (m, n))
        else:
            assert bv is not None
            y = _vector_matmul(em, amat, _slice_matrix(em, bv, bi, (k, n)), act)
        results.append(y)
    if not batch:
        return [em.view(results[0], em.out(plan))]
    stacked = [em.view(r, (1, m, n)) for r in results]
    return [em.view(em.concat(stacked, (len(stacked), m, n), 0), em.out(plan))]


def _slice_matrix(em: Emit, x: Value, idx: tuple[int, ...], shape: tuple[int, int]) -> Value:
    """The (rows, cols) matrix at batch index `idx` of x (a view when there is none)."""
    if not idx:
        return em.view(x, shape)
    rank = len(x.shape)
    offs = [*idx, 0, 0]
    sizes = [1] * (rank - 2) + list(shape)
    return em.compute([x], [shape], lambda b, xs: [
        b.extract(xs[0], offs, sizes, type=_t(shape))])[0]


def _vector_matmul(em: Emit, a: Value, bm: Value, act: Plan | None) -> Value:
    m, k = a.shape
    n = bm.shape[1]

    def body(b: Builder, lane: Value, args: list[Value]) -> tuple[Value, list[AffineLike]]:
        row = b.extract(args[0], [lane, 0], [1, k])
        prod = b.binary("vmul", b.transpose(row, [1, 0]), args[1], _t((k, n)))
        y = b.reduce("vreduce_sum", prod, [0], _t((1, n)))
        return _activation(b, y, act), [lane, 0]

    return em.batch(m, [a, bm], (m, n), body)


@lowers("conv_transpose")
def _conv_transpose(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """A transposed convolution is a convolution over the zero-inserted input with
    flipped, swapped weights."""
    x = em.input(plan, 0)
    w = plan.weights["weight"]
    s = plan.ints("strides")
    dil = plan.ints("dilations")
    t, left, bot, right = plan.ints("pads")
    oph, opw = plan.ints("output_padding")
    group = int(plan.num("group"))
    cin, cout_g, kh, kw = w.shape
    cin_g = cin // group
    wc = np.zeros((cout_g * group, cin_g, kh, kw), dtype=np.float32)
    for g in range(group):
        blk = w[g * cin_g:(g + 1) * cin_g]  # (cin_g, cout_g, kh, kw)
        wc[g * cout_g:(g + 1) * cout_g] = blk.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    ph, pw = dil[0] * (kh - 1), dil[1] * (kw - 1)
    lo_h, lo_w, hi_h, hi_w = ph - t, pw - left, ph - bot + oph, pw - right + opw
    if min(lo_h, lo_w, hi_h, hi_w) < 0:
        raise LoweringError(f"plan {plan.name!r}: ConvTranspose pads larger than "
                            "dilation*(kernel-1) are not supported")
    z = _zero_inserted(em, x, s, (lo_h, hi_h), (lo_w, hi_w))
    return [_conv(em, plan.name, z, wc, plan.weights.get("bias"), [1, 1], [0, 0, 0, 0], dil,
                  group, em.out(plan), act)]


def _zero_inserted(em: Emit, x: Value, s: list[int], pad_h: tuple[int, int],
                   pad_w: tuple[int, int]) -> Value:
    """`x` (N, C, H, W) with `s - 1` zeros between its rows and columns and `pad_*` zeros
    around, as row lanes: each lane writes one input row and the zero rows before it, so
    no compute holds the whole dilated map (ppocr-det's 24×65×65, 101 KB, did not fit one
    core) and the convolution's lanes receive only the rows they read. Bands: the first row
    with the top padding, the middle rows `s - 1` zero rows each, the last with the bottom
    padding; they concatenate along H (placement)."""
    nimg, cin, h, wd = x.shape
    (lo_h, hi_h), (lo_w, hi_w) = pad_h, pad_w
    zw = (wd - 1) * s[1] + 1 + lo_w + hi_w
    # (first input row, lanes, zero rows before each row, zero rows after)
    bands = [(0, 1, lo_h, hi_h if h == 1 else 0)]
    if h > 2:
        bands.append((1, h - 2, s[0] - 1, 0))
    if h > 1:
        bands.append((h - 1, 1, s[0] - 1, hi_h))
    parts = []
    for first, lanes, before, after in bands:
        rows = before + 1 + after

        def lane_body(b: Builder, lane: Value, args: list[Value], first: int = first,
                      before: int = before, rows: int = rows
                      ) -> tuple[Value, list[AffineLike]]:
            row = _along(b, args[0], 2, Affine(first, ((1, lane),)), 1)
            z = b.empty(_t((nimg, cin, rows, zw)))
            z = b.insert(row, z, [0, 0, before, lo_w], [nimg, cin, 1, wd], [1, 1, 1, s[1]])
            return z, [0, 0, Affine(0, ((rows, lane),)), 0]

        parts.append(em.batch(lanes, [x], (nimg, cin, lanes * rows, zw), lane_body))
    zh = sum(lanes * (before + 1 + after) for _, lanes, before, after in bands)
    return em.concat(parts, (nimg, cin, zh, zw), 2)


# ---------------------------------------------------------------------- vector plans
@lowers(*ACTIVATIONS)
def _unary(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    x = em.input(plan, 0)
    return [em.rowwise([x], em.out(plan), lambda b, xs: _activation(b, xs[0], plan))]


@lowers("add", "sub", "mul", "div", "max", "min")
def _binary(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    op = "v" + plan.kind
    operands = [em.input(plan, k) for k in range(len(plan.inputs))]
    if "operand" in plan.weights:
        c = em.weight(f"{plan.name}.operand", plan.weights["operand"])
        at = int(plan.num("operand_index")) if "operand_index" in plan.attrs else 1
        operands.insert(at, c)
    return [em.rowwise(operands, em.out(plan), lambda b, xs: b.binary(
        op, xs[0], xs[1], _t(np.broadcast_shapes(xs[0].shape, xs[1].shape))))]


def _with_weights(em: Emit, plan: Plan, roles: Sequence[str], body: LaneBody,
                  per_channel: bool = True) -> list[Value]:
    """Row-band lanes over operand 0 and the plan's weights `roles` (per channel ones
    shaped (1, C, 1, ...) to broadcast over NCHW)."""
    x, out = em.input(plan, 0), em.out(plan)
    ws = [plan.weights[r] for r in roles]
    if per_channel:
        ws = [w.reshape((1, w.size) + (1,) * (len(out) - 2)) for w in ws]
    return [em.rowwise([x, *(em.weight(f"{plan.name}.{r}", w)
                             for r, w in zip(roles, ws, strict=True))], out, body)]


@lowers("bias_add")
def _bias_add(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    return _with_weights(em, plan, ["bias"],
                         lambda b, xs: b.binary("vadd", xs[0], xs[1], xs[0].tensor))


@lowers("affine_channel")
def _affine_channel(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    return _with_weights(em, plan, ["scale", "shift"], lambda b, xs: b.binary(
        "vadd", b.binary("vmul", xs[0], xs[1], xs[0].tensor), xs[2], xs[0].tensor))


@lowers("prelu")
def _prelu(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    def body(b: Builder, xs: list[Value]) -> Value:
        pos = b.unary("relu", xs[0])
        neg = b.unary("neg", b.unary("relu", b.unary("neg", xs[0])))
        return b.binary("vadd", pos, b.binary("vmul", neg, xs[1], xs[0].tensor))

    return _with_weights(em, plan, ["slope"], body, per_channel=False)


def _single(fn: Callable[[Builder, Value, Plan], Value]) -> Lowerer:
    """The lowerer of a plan that is one graph compute of `fn` over operand 0."""
    return lambda em, plan, act: em.compute([em.input(plan, 0)], [em.out(plan)],
                                            lambda b, a: [fn(b, a[0], plan)])


lowers("softmax")(_single(lambda b, x, p: b.unary("softmax", x, {"axis": int(p.num("axis"))})))
lowers("transpose")(_single(lambda b, x, p: b.transpose(x, p.ints("perm"))))
lowers("identity")(_single(lambda b, x, p: x))


# ---------------------------------------------------------------------- pooling and resize
@lowers("maxpool", "avgpool")
def _pool(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """A row batch per window run, every tap an extract and a vmax or vadd (avgpool then
    scales by 1 / taps counted)."""
    kind = plan.kind[:3]
    x = em.input(plan, 0)
    _, c, h, wd = x.shape
    kh, kw = plan.ints("kernel")
    sh, sw = plan.ints("strides")
    dh, dw = plan.ints("dilations")
    t, left, bot, right = plan.ints("pads")
    out = em.out(plan)
    _, _, oh, ow = out
    win = Window(h, wd, (kh, kw), (sh, sw), (dh, dw), (t, left), (oh, ow))
    ins = [x]
    extra = None
    if kind == "avg":
        ins.append(em.weight(f"{plan.name}.recip", _avg_reciprocals(
            win, (bot, right), bool(plan.attrs["count_include_pad"]))))

        def extra(b: Builder, frag: Value, lo: int) -> Value:
            lane = b.block.args[0]
            r = b.extract(b.block.args[2], [0, 0, Affine(lo, ((1, lane),)), 0],
                          [1, 1, 1, ow], type=_t((1, 1, 1, ow)))
            return b.binary("vmul", frag, r, frag.tensor)

    # channels per lane: the most (dividing c) whose input window stays within an eighth of
    # a core's local memory, so that a wide map's pooling lane does not fill the core; under
    # pimsim-nn's protocol within half, since each channel group is one more blocking
    # message from every producer row and to every reader (ResNet-18's 64-channel pool in
    # one group, not 4: 9.99 ms on pimsim-nn's estimate against 10.25)
    share = 2 if em.lw.target.protocol == "pimsim-nn" else 8
    cap = em.lw.target.local_memory_bytes // share // max(1, -(-em.lw.target.input_bits // 8))
    cg = max((d for d in range(1, c + 1) if c % d == 0 and d * kh * (wd + left + right) <= cap),
             default=1)

    def body(b: Builder, rows: Value, args: list[Value]) -> Value:
        taps = (b.extract(rows, [0, i, j * dw], [cg, 1, ow], [1, 1, sw], type=_t((cg, ow)))
                for i in range(kh) for j in range(kw))  # at least one (Window checks)
        acc = reduce(lambda a, e: b.binary("vmax" if kind == "max" else "vadd", a, e), taps)
        return b.reshape(acc, _t((1, cg, 1, ow)))

    fill = -np.inf if kind == "max" else 0.0

    def image(n: int) -> Value:
        groups = [_window_rows(em, ins, Slab(n, c0, cg), win, fill, (1, cg, oh, ow), body,
                               extra=extra) for c0 in range(0, c, cg)]
        return em.concat(groups, (1, *out[1:]), 1)

    return [em.per_image(out, image)]


def _avg_reciprocals(win: Window, tail: tuple[int, int], include_pad: bool) -> np.ndarray:
    """1 / (taps counted) per output pixel, shaped (1, 1, oh, ow): padding counts only with
    count_include_pad, cells that ceil_mode adds never do."""
    (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    (t, left), (bot, right), (oh, ow) = win.pads, tail, win.out
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    mask = np.zeros((max(need_h, win.h + t), max(need_w, win.w + left)), dtype=np.float64)
    mask[t:t + win.h, left:left + win.w] = 1.0
    if include_pad:
        mask[:min(win.h + t + bot, mask.shape[0]), :min(win.w + left + right, mask.shape[1])] = 1
    counts = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            counts += mask[i * dh:i * dh + (oh - 1) * sh + 1:sh,
                           j * dw:j * dw + (ow - 1) * sw + 1:sw]
    return (1.0 / np.maximum(counts, 1)).reshape(1, 1, oh, ow)


@lowers("global_avgpool")
def _global_avgpool(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """Lanes over channel chunks. A chunk whose whole map does not fit a quarter of a core
    (its received rows and their dense copy: EfficientNet-B0's first squeeze at 64 px, 32
    channels of 32×32, held 67 KB on one core) is summed in row blocks that do, one batch
    per block, and the blocks' partial sums are added and scaled by one more batch."""
    x = em.input(plan, 0)
    _, c, h, wd = x.shape
    target = em.lw.target
    chunk = max(d for d in range(1, min(c, target.vector_lanes) + 1) if c % d == 0)
    per_row = 2 * chunk * wd * activation_bytes(target)
    # halving, as row-wise ops do, so the blocks line up with the row strips feeding them
    halvings = (-(-h // 2 ** i) for i in range(h.bit_length() + 1))
    rows = next((r for r in halvings if lane_fits(r * per_row, target, 1)), 1)
    one = (1, c, 1, 1)

    def image(n: int) -> Value:
        def ch(lane: Value) -> Affine:
            return Affine(0, ((chunk, lane),))

        def block(lo: int, count: int) -> Value:
            def body(b: Builder, lane: Value, args: list[Value]
                     ) -> tuple[Value, list[AffineLike]]:
                e = b.extract(args[0], [n, ch(lane), lo, 0], [1, chunk, count, wd])
                s = b.reduce("vreduce_sum", e, [2, 3], _t((1, chunk, 1, 1)))
                if count == h:
                    s = b.unary("vscale", s, {"factor": 1.0 / (h * wd)})
                return s, [0, ch(lane), 0, 0]

            return em.batch(c // chunk, [x], one, body)

        partials = [block(lo, min(rows, h - lo)) for lo in range(0, h, rows)]
        if len(partials) == 1:
            return partials[0]

        def total(b: Builder, lane: Value, args: list[Value]) -> tuple[Value, list[AffineLike]]:
            parts = [b.extract(a, [0, ch(lane), 0, 0], [1, chunk, 1, 1]) for a in args]
            s = reduce(lambda u, v: b.binary("vadd", u, v), parts)
            return b.unary("vscale", s, {"factor": 1.0 / (h * wd)}), [0, ch(lane), 0, 0]

        return em.batch(c // chunk, partials, one, total)

    return [em.per_image(em.out(plan), image)]


@lowers("resize_nearest")
def _resize_nearest(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    x = em.input(plan, 0)
    _, c, h, wd = x.shape
    out = em.out(plan)
    _, _, oh, ow = out
    scales = plan.attrs["scales"]
    assert isinstance(scales, list)
    mode = str(plan.attrs["coordinate_transformation_mode"])
    rnd = str(plan.attrs["nearest_mode"])
    rows = nearest_indices(h, oh, float(scales[0]), mode, rnd)
    cols = nearest_indices(wd, ow, float(scales[1]), mode, rnd)
    runs = [(col, len(list(g))) for col, g in groupby(cols.tolist())]  # (source column, repeat)

    def gather_row(b: Builder, src: Value, row: AffineLike, n: int) -> Value:
        parts = []
        for col, rep in runs:
            e = b.extract(src, [n, 0, row, col], [1, c, 1, 1], type=_t((c, 1)))
            parts.extend([e] * rep)
        return b.concat(parts, 1) if len(parts) > 1 else parts[0]

    one = (1, *out[1:])
    rep = oh // h if h and oh % h == 0 else 0
    if rep and np.array_equal(rows, np.repeat(np.arange(h), rep)):
        def body(b: Builder, lane: Value, args: list[Value], n: int
                 ) -> tuple[Value, list[AffineLike]]:
            r4 = b.reshape(gather_row(b, args[0], lane, n), _t((1, c, 1, ow)))
            blk = b.concat([r4] * rep, 2) if rep > 1 else r4
            return blk, [0, 0, Affine(0, ((rep, lane),)), 0]

        return [em.per_image(out, lambda n: em.batch(
            h, [x], one, lambda b, lane, args: body(b, lane, args, n)))]

    def whole(b: Builder, xs: list[Value], n: int) -> list[Value]:
        rs = [b.reshape(gather_row(b, xs[0], int(r), n), _t((1, c, 1, ow))) for r in rows]
        return [b.concat(rs, 2) if len(rs) > 1 else rs[0]]

    return [em.per_image(out, lambda n: em.compute([x], [one], lambda b, xs: whole(b, xs, n))[0])]


# ---------------------------------------------------------------------- placement plans
@lowers("concat")
def _concat(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """Concat moves no data when every input is made of fragments: canonicalization
    turns it into one Blueprint. An input that is one opaque tensor (a function argument,
    a single compute) is first staged into row fragments, so that consumers of the
    concat still depend on (and receive) only the rows they read."""
    xs = [_staged(em, em.input(plan, k)) for k in range(len(plan.inputs))]
    axis = int(plan.num("axis"))
    return em.compute(xs, [em.out(plan)], lambda b, a: [b.concat(a, axis) if len(a) > 1 else a[0]])


def _staged(em: Emit, x: Value) -> Value:
    owner = x.owner
    if isinstance(owner, GraphComputeBatchOp) or (
            isinstance(owner, GraphComputeOp) and len(owner.body.ops) == 2
            and isinstance(owner.body.ops[0], ConcatOp)):
        return x
    if _lane_dim(x.shape) is None:
        return x
    return em.rowwise([x], x.shape, lambda b, xs: xs[0])


def _along(b: Builder, v: Value, d: int, first: AffineLike, count: int, step: int = 1) -> Value:
    """`count` entries of `v` along dimension `d` from `first`, `step` apart."""
    offs: list[AffineLike] = [0] * len(v.shape)
    sizes, strides = list(v.shape), [1] * len(v.shape)
    offs[d], sizes[d], strides[d] = first, count, step
    return b.extract(v, offs, sizes, strides)


@lowers("split")
def _split(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    axis, sizes = int(plan.num("axis")), plan.ints("sizes")
    outs = [em.out(plan, k) for k in range(len(plan.outputs))]
    return em.compute([em.input(plan, 0)], outs, lambda b, a: [
        _along(b, a[0], axis, end - n, n) for end, n in zip(accumulate(sizes), sizes, strict=True)])


@lowers("slice")
def _slice(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    x = em.input(plan, 0)
    starts, steps = plan.ints("starts"), plan.ints("steps")
    out = em.out(plan)
    if not any(s < 0 for s in steps):
        return em.compute([x], [out], lambda b, a: [b.extract(a[0], starts, list(out), steps)])

    def rev(b: Builder, a: list[Value]) -> list[Value]:
        v = a[0]
        for d, (st, sp) in enumerate(zip(starts, steps, strict=True)):
            v = _reverse_dim(b, v, d, st, sp, out[d]) if sp < 0 else _along(b, v, d, st, out[d], sp)
        return [v]

    return em.compute([x], [out], rev)


def _reverse_dim(b: Builder, v: Value, d: int, start: int, step: int, n: int) -> Value:
    """Negative steps gather single slices in order (placement, no arithmetic)."""
    parts = [_along(b, v, d, start + i * step, 1) for i in range(n)]
    return b.concat(parts, d) if n > 1 else parts[0]


@lowers("pad")
def _pad(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    """Placement: crop negative pads, then `tensor.pad` (constant) or, per axis, a concat
    of single-row slices (reflect, edge) or of the opposite end (wrap)."""
    x = em.input(plan, 0)
    pads = plan.ints("pads")
    rank = len(x.shape)
    begin, end = pads[:rank], pads[rank:]
    mode = str(plan.attrs["mode"])

    def body(b: Builder, a: list[Value]) -> list[Value]:
        v = a[0]
        if min(pads) < 0:
            offs = [max(-lo, 0) for lo in begin]
            sizes = [d - max(-lo, 0) - max(-hi, 0)
                     for d, lo, hi in zip(v.shape, begin, end, strict=True)]
            v = b.extract(v, offs, sizes)
        lo_pads, hi_pads = [max(p, 0) for p in begin], [max(p, 0) for p in end]
        if mode == "constant":
            return [b.pad(v, lo_pads, hi_pads, plan.num("value"))]
        for d, (lo, hi) in enumerate(zip(lo_pads, hi_pads, strict=True)):
            if not lo and not hi:
                continue
            n, rows = v.shape[d], partial(_along, b, v, d)
            if mode == "wrap":
                before = [rows(n - lo, lo)] if lo else []
                after = [rows(0, hi)] if hi else []
            elif mode == "edge":
                before, after = [rows(0, 1)] * lo, [rows(n - 1, 1)] * hi
            else:  # reflect: the rows next to the edge, mirrored, edge excluded
                before = [rows(i, 1) for i in range(lo, 0, -1)]
                after = [rows(n - 2 - i, 1) for i in range(hi)]
            v = b.concat([*before, v, *after], d)
        return [v]

    return em.compute([x], [em.out(plan)], body)


@lowers("flatten", "reshape")
def _view(em: Emit, plan: Plan, act: Plan | None) -> list[Value]:
    return [em.view(em.input(plan, 0), em.out(plan))]


def lower(graph: PlanGraph, target: Target, layouts: LayoutChoice | None = None,
          pipeline: bool = False) -> Lowered:
    """Lower a plan graph for `target` following `layouts` (all dense when None), its
    convolution windows chosen for pipeline mode with `pipeline` (`conv_windows`); raises
    LoweringError for what the target cannot run."""
    # counted before lowering: with tiny crossbars (1x1) lowering would build one IR tile
    # per weight value, millions of objects, before finding that they do not fit
    needed = crossbars_needed(graph, target, pipeline)
    _check_capacity(needed, target)
    lowered = Lowering(graph, target, layouts, pipeline).run()
    _check_capacity(lowered.crossbars, target)
    return lowered


def _check_capacity(needed: int, target: Target) -> None:
    capacity = target.num_cores * target.crossbars_per_core
    if needed > capacity:
        raise CapacityExceeded(
            f"model needs {needed} crossbars of {target.crossbar_rows}x"
            f"{target.crossbar_cols} but target '{target.name}' has {target.num_cores} cores x "
            f"{target.crossbars_per_core} crossbars = {capacity}")
