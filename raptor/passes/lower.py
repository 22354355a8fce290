"""Plan lowering: a plan graph becomes graph computes and graph batches (logical-assembly form).

Every plan value becomes one logical tensor. Matrix plans are cut into crossbar tiles of the
target's size (each tile one resident weight, `spat.weight @<plan>.g<g>.r<r>.c<c>`); a batch
per (column block, row tile) has one lane per output row, each pixel one MVM. Partial sums over
row tiles are reduced by following batches in ceil(log2(row tiles)) stages; bias and a
single-use activation fuse into the last stage. Grouped and depthwise convolutions pack several
groups block-diagonally into one crossbar. Elementwise, pooling and resize plans become row-band
batches; placement plans (concat, split, slice, reshape, ...) become single graph computes
whose data movement canonicalization turns into Blueprint placement.

Batches are emitted in the temporary logical-assembly form (`assembly`: lanes insert into the
logical tensor); canonicalization turns them into N x F fragments plus `spat.blueprint`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from raptor.frontend.plan import Plan, PlanGraph
from raptor.frontend.shapes import nearest_indices
from raptor.ir.builder import Builder, new_func
from raptor.ir.core import Affine, AffineLike, Value
from raptor.ir.module import Module
from raptor.ir.ops import Attr, ComputeOp, ConcatOp, GraphComputeBatchOp, GraphComputeOp
from raptor.ir.types import TensorType
from raptor.passes.layout import LayoutChoice
from raptor.target import Target

ACTIVATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "relu": ("relu", ()), "sigmoid": ("sigmoid", ()), "tanh": ("tanh", ()),
    "silu": ("silu", ()), "hard_swish": ("hard_swish", ()),
    "leaky_relu": ("leaky_relu", ("alpha",)),
    "hard_sigmoid": ("hard_sigmoid", ("alpha", "beta")), "clip": ("clip", ("max", "min")),
    "neg": ("neg", ()),
}
"""Plan kinds that are one `pim.<op>` with the same attributes (fusable into a matrix plan)."""

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
    lanes: int = 0
    mvms: int = 0
    fused: str = ""


@dataclass
class Lowered:
    module: Module
    stats: list[PlanStats]
    tiles: dict[str, tuple[int, int]] = field(default_factory=dict)
    layer_of: dict[ComputeOp, PlanStats] = field(default_factory=dict)
    """The plan (ONNX node) each graph compute was lowered from: charts and traces name
    their bars by it."""

    @property
    def crossbars(self) -> int:
        return len(self.tiles)

    @property
    def lanes(self) -> int:
        return sum(s.lanes for s in self.stats)

    @property
    def mvms(self) -> int:
        return sum(s.mvms for s in self.stats)


def sanitize(name: str) -> str:
    """ONNX names → IR names ([A-Za-z0-9_.$-])."""
    clean = re.sub(r"[^A-Za-z0-9_.$]", "_", name)
    return clean or "v"


def _t(shape: Sequence[int]) -> TensorType:
    return TensorType(tuple(int(d) for d in shape))


def _shape(v: Value) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return t.static_shape


def _lane_dim(shape: Sequence[int]) -> int | None:
    """The dimension row-band lanes run over: H for NCHW, else the first dim larger than 1."""
    if len(shape) == 4 and shape[2] > 1:
        return 2
    for d, n in enumerate(shape):
        if n > 1 and d < len(shape) - 1:
            return d
    return None


LaneBody = Callable[[Builder, list[Value]], Value]


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

    def segments(self) -> list[tuple[int, int, int, int]]:
        """Runs of output rows [lo, hi) whose windows keep kernel rows [i0, i1) inside the
        input; interior rows form one run, border rows their own."""
        kh, sh, dh, top = self.kernel[0], self.stride[0], self.dilation[0], self.pads[0]
        runs: list[tuple[int, int, int, int]] = []
        for r in range(self.out[0]):
            rows = [r * sh - top + i * dh for i in range(kh)]
            inside = [i for i, y in enumerate(rows) if 0 <= y < self.h]
            i0, i1 = (inside[0], inside[-1] + 1) if inside else (0, 0)
            if runs and runs[-1][1] == r and runs[-1][2:] == (i0, i1):
                runs[-1] = (runs[-1][0], r + 1, i0, i1)
            else:
                runs.append((r, r + 1, i0, i1))
        return runs


class _Lowerer:
    def __init__(self, graph: PlanGraph, target: Target, layouts: LayoutChoice | None) -> None:
        self.g = graph
        self.target = target
        self.layouts = layouts or LayoutChoice()
        self.values: dict[str, Value] = {}
        self.dense: dict[str, Value] = {}
        self.layout_of: dict[str, str] = {}
        self.index = {id(p): i for i, p in enumerate(graph.plans)}
        self.assemblies = 0
        self.constants: dict[str, np.ndarray] = {}
        self.tiles: dict[str, tuple[int, int]] = {}
        self.stats: list[PlanStats] = []
        self.cur: PlanStats | None = None
        self.layer_of: dict[ComputeOp, PlanStats] = {}
        self.fused: dict[str, Plan] = {}
        self.skip: set[int] = set()
        args = [(sanitize(v.name), _t(v.shape)) for v in graph.inputs]
        self.func, self.b = new_func("main", args, [_t(v.shape) for v in graph.outputs])
        for v, a in zip(graph.inputs, self.func.args, strict=True):
            self.values[v.name] = a

    # ------------------------------------------------------------------ driver
    def run(self) -> Lowered:
        self._plan_fusion()
        for k, plan in enumerate(self.g.plans):
            if k in self.skip:
                continue
            ins = [_shape(self.values[n]) for n in plan.inputs]
            self.cur = PlanStats(plan.name, plan.kind, ins, self.out_shape(plan))
            act = self.fused.get(plan.outputs[0])
            if act is not None:
                self.cur.fused = act.kind
                self.cur.output = tuple(self.g.values[act.outputs[0]].shape)
            handler = getattr(self, f"_lower_{plan.kind}", None)
            if handler is None:
                raise LoweringError(f"plan {plan.name!r}: no lowering for kind {plan.kind!r}")
            outs = handler(plan, act)
            names = act.outputs if act is not None else plan.outputs
            layout = self.layouts.result_of(self.index[id(act if act is not None else plan)])
            for name, v in zip(names, outs, strict=True):
                v.name = v.name or sanitize(name)
                self.values[name] = v
                self.layout_of[name] = layout
            self.stats.append(self.cur)
        self.b.ret([self.values[v.name] for v in self.g.outputs])
        module = Module([self.func], self.constants, filename=self.g.name)
        return Lowered(module, self.stats, self.tiles, self.layer_of)

    def _plan_fusion(self) -> None:
        """A matrix plan absorbs a following activation that is its output's only consumer."""
        users = self.g.consumers()
        outputs = {v.name for v in self.g.outputs}
        for plan in self.g.plans:
            if plan.kind not in MATRIX_KINDS:
                continue
            out = plan.outputs[0]
            us = users.get(out, [])
            if out in outputs or len(us) != 1 or us[0].kind not in ACTIVATIONS:
                continue
            self.fused[out] = us[0]
            self.skip.add(self.g.plans.index(us[0]))

    # ------------------------------------------------------------------ layouts
    def input(self, plan: Plan, k: int) -> Value:
        """Operand k as this plan reads it: row fragments directly when producer and consumer
        agree on NHWCRowStrip, else the dense storage of the value."""
        name = plan.inputs[k]
        v = self.values[name]
        produced = self.layout_of.get(name)
        if produced is None:  # function argument: already dense in shared memory
            return v
        wants = self.layouts.operand_of(self.index[id(plan)], k)
        if produced == "NHWCRowStrip" and wants == "NHWCRowStrip":
            return v
        return self.dense_of(name)

    def dense_of(self, name: str) -> Value:
        """Dense reassembly: one instance copies every fragment into contiguous storage
        (the lowering of DenseNCHW storage and of materialize_layout R→D)."""
        got = self.dense.get(name)
        if got is not None:
            return got
        v = self.values[name]
        owner = v.owner
        if not isinstance(owner, GraphComputeBatchOp):  # a single instance is already dense
            self.dense[name] = v
            return v
        saved = self.cur
        self.cur = PlanStats(f"{name}.dense", "dense_assembly", [_shape(v)], _shape(v))
        out = self.compute([v], [_shape(v)], lambda b, xs: [xs[0]])[0]
        out.name = f"{v.name}_dense"
        self.stats.append(self.cur)
        self.cur = saved
        self.dense[name] = out
        self.assemblies += 1
        return out

    # ------------------------------------------------------------------ helpers
    def weight(self, symbol: str, data: np.ndarray, tile: bool = False) -> Value:
        symbol = sanitize(symbol)
        base, n = symbol, 1
        while symbol in self.constants:
            symbol, n = f"{base}.{n}", n + 1
        arr = np.ascontiguousarray(data, dtype=np.float32)
        self.constants[symbol] = arr
        if tile:
            self.tiles[symbol] = (int(arr.shape[0]), int(arr.shape[1]))
            assert self.cur is not None
            self.cur.crossbars += 1
        return self.b.weight(symbol, _t(arr.shape))

    def batch(self, lanes: int, inputs: Sequence[Value], out_shape: Sequence[int],
              body: Callable[[Builder, Value, list[Value]], tuple[Value, list[AffineLike]]],
              mvms_per_lane: int = 0) -> Value:
        """One assembly batch: `body(builder, lane, in_args)` returns the fragment and its
        logical offsets; the fragment's shape (padded to the result rank) is the size."""
        op, lb = self.b.graph_batch(lanes, inputs, [_t(out_shape)], assembly=True)
        frag, offsets = body(lb, op.lane, op.in_args)
        fs = _shape(frag)
        rank = len(out_shape)
        sizes = list(fs) if len(fs) == rank else None
        if sizes is None:
            raise AssertionError(f"fragment {fs} does not match result rank {rank}")
        lb.publish(frag, op.out_args[0], offsets, sizes)
        assert self.cur is not None
        self.layer_of[op] = self.cur
        self.cur.lanes += lanes
        self.cur.mvms += lanes * mvms_per_lane
        return op.outs[0]

    def compute(self, inputs: Sequence[Value], out_shapes: Sequence[Sequence[int]],
                body: Callable[[Builder, list[Value]], list[Value]]) -> list[Value]:
        """One graph compute (a single instance)."""
        op, cb = self.b.graph_compute(inputs, [_t(s) for s in out_shapes])
        cb.yield_(body(cb, op.body.args))
        assert self.cur is not None
        self.layer_of[op] = self.cur
        self.cur.lanes += 1
        return op.outs

    def activation(self, b: Builder, v: Value, act: Plan | None) -> Value:
        if act is None:
            return v
        op, keys = ACTIVATIONS[act.kind]
        attrs: dict[str, Attr] = {k: float(act.num(k)) for k in keys}
        return b.unary(op, v, attrs)

    def rowwise(self, plan: Plan, operands: Sequence[Value], out_shape: Sequence[int],
                body: LaneBody) -> Value:
        """Row-band lanes over `_lane_dim(out_shape)`; operands broadcast numpy-style."""
        d = _lane_dim(out_shape)
        rank = len(out_shape)
        lanes = out_shape[d] if d is not None else 1

        def lane_body(b: Builder, lane: Value, ins: list[Value]) -> tuple[Value, list[AffineLike]]:
            parts = []
            for x in ins:
                xs = _shape(x)
                lead = rank - len(xs)
                offs: list[AffineLike] = [0] * len(xs)
                sizes = list(xs)
                if d is not None and d >= lead and xs[d - lead] == out_shape[d]:
                    offs[d - lead] = lane
                    sizes[d - lead] = 1
                parts.append(b.extract(x, offs, sizes))
            frag = body(b, parts)
            offsets: list[AffineLike] = [0] * rank
            if d is not None:
                offsets[d] = lane
            return frag, offsets

        return self.batch(lanes, operands, out_shape, lane_body)

    def out_shape(self, plan: Plan, k: int = 0) -> tuple[int, ...]:
        return tuple(self.g.values[plan.outputs[k]].shape)

    # ------------------------------------------------------------------ matrix plans
    def _tiles(self, mat: np.ndarray) -> list[list[tuple[int, int, np.ndarray]]]:
        """Row tiles × column tiles of a (K, M) matrix: [(k0, m0, tile)] per row tile."""
        r, c = self.target.crossbar_rows, self.target.crossbar_cols
        k, m = mat.shape
        return [[(k0, m0, mat[k0:k0 + r, m0:m0 + c]) for m0 in range(0, m, c)]
                for k0 in range(0, k, r)]

    def reduce_partials(self, partials: list[Value], bias: Value | None, act: Plan | None,
                        final: bool) -> Value:
        """Pairwise-add partial sums in ceil(log2(n)) stages; bias/activation in the last."""
        while len(partials) > 1:
            last_stage = len(partials) <= 2
            nxt = []
            for i in range(0, len(partials) - 1, 2):
                a, c = partials[i], partials[i + 1]
                use_tail = final and last_stage
                ops: list[Value] = [a, c] + ([bias] if (use_tail and bias is not None) else [])

                def body(b: Builder, xs: list[Value], use_tail: bool = use_tail) -> Value:
                    s = b.binary("vadd", xs[0], xs[1])
                    if use_tail:
                        if len(xs) > 2:
                            s = b.binary("vadd", s, xs[2], _shape_t(s))
                        s = self.activation(b, s, act)
                    return s

                nxt.append(self.rowwise_bias(ops, _shape(a), body))
            if len(partials) % 2:
                nxt.append(partials[-1])
            partials = nxt
        return partials[0]

    def rowwise_bias(self, operands: Sequence[Value], out_shape: Sequence[int],
                     body: LaneBody) -> Value:
        dummy = Plan("reduce", "reduce", [], [])
        return self.rowwise(dummy, operands, out_shape, body)

    def _lower_conv(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        w = plan.weights["weight"]
        bias = plan.weights.get("bias")
        return [self.conv(plan.name, x, w, bias, plan.ints("strides"), plan.ints("pads"),
                          plan.ints("dilations"), int(plan.attrs["group"]),  # type: ignore[call-overload]
                          self.out_shape(plan), act)]

    def conv(self, name: str, x: Value, w: np.ndarray, bias: np.ndarray | None,
             strides: list[int], pads: list[int], dil: list[int], group: int,
             out_shape: tuple[int, ...], act: Plan | None) -> Value:
        h, wd = _shape(x)[2:]
        cout, cin_g, kh, kw = w.shape
        sh, sw = strides
        dh, dw = dil
        t, left, _b, _r = pads
        _, _, oh, ow = out_shape
        need_h = (oh - 1) * sh + (kh - 1) * dh + 1
        need_w = (ow - 1) * sw + (kw - 1) * dw + 1
        window = Window(h, wd, (kh, kw), (sh, sw), (dh, dw), (t, left), (oh, ow))
        del need_h, need_w
        mg = cout // group
        kg = cin_g * kh * kw
        R, C = self.target.crossbar_rows, self.target.crossbar_cols
        # column blocks: (first input channel, channels, first output channel, K x M matrix)
        blocks: list[tuple[int, int, int, np.ndarray]] = []
        per = min(R // kg, C // mg, group) if group > 1 and kg <= R and mg <= C else 1
        for g0 in range(0, group, per):
            q = min(per, group - g0)
            mat = np.zeros((q * kg, q * mg), dtype=np.float32)
            for j in range(q):
                gm = w[(g0 + j) * mg:(g0 + j + 1) * mg].reshape(mg, kg).T
                mat[j * kg:(j + 1) * kg, j * mg:(j + 1) * mg] = gm
            blocks.append((g0 * cin_g, q * cin_g, g0 * mg, mat))
        # weights once, shared by every image: (c0, cn, o0+m0, mt, bias, [(k0, tile)])
        units = []
        for bi, (c0, cn, o0, mat) in enumerate(blocks):
            grid = self._tiles(mat)
            for ci in range(len(grid[0])):
                m0, mt = grid[0][ci][1], grid[0][ci][2].shape[1]
                bvec = None
                if bias is not None:
                    # (1, mt) beside the MVM result (ow, mt); (1, mt, 1, 1) beside NCHW partials
                    shape = (1, mt) if len(grid) == 1 else (1, mt, 1, 1)
                    bvec = self.weight(f"{name}.bias.b{bi}.c{ci}",
                                       bias[o0 + m0:o0 + m0 + mt].reshape(shape))
                tiles = [(row[ci][0], self.weight(f"{name}.g{bi}.r{ri}.c{ci}", row[ci][2],
                                                  tile=True), row[ci][2].shape)
                         for ri, row in enumerate(grid)]
                units.append((c0, cn, mt, bvec, tiles))
        images = []
        for n in range(_shape(x)[0]):
            results = []
            for c0, cn, _mt, bvec, tiles in units:
                single = len(tiles) == 1
                partials = []
                for k0, wt, tshape in tiles:
                    ins = [x, wt] + ([bvec] if single and bvec is not None else [])
                    partials.append(self.conv_batch(
                        ins, (n, c0, cn), window, k0, tshape, single, act, not single))
                results.append(self.reduce_partials(partials, bvec, act, final=True))
            one = (1, *out_shape[1:])
            images.append(results[0] if len(results) == 1 else
                          self.compute(results, [one], lambda b, xs: [b.concat(xs, 1)])[0])
        if len(images) == 1:
            return images[0]
        return self.compute(images, [out_shape], lambda b, xs: [b.concat(xs, 0)])[0]

    def conv_batch(self, ins: list[Value], chans: tuple[int, int, int], win: Window, k0: int,
                   tile: tuple[int, ...], tail: bool, act: Plan | None, sliced: bool) -> Value:
        """Lanes = output rows. Each lane reads only the input rows its window covers (padding
        is added inside the lane), builds the im2col row and does one MVM per pixel."""
        image, c0, cn = chans
        kh, kw = win.kernel
        oh, ow = win.out
        kt, mt = tile

        def body(b: Builder, rows: Value, args: list[Value]) -> Value:
            cols = []
            for j in range(kw):
                e = b.extract(rows, [0, 0, j * win.dilation[1]], [cn, kh, ow],
                              [1, 1, win.stride[1]])
                cols.append(b.reshape(e, _t((cn, kh, 1, ow))) if kw > 1 else e)
            patch = b.concat(cols, 2) if kw > 1 else cols[0]
            mat = b.transpose(b.reshape(patch, _t((cn * kh * kw, ow))), [1, 0])
            if sliced:
                mat = b.extract(mat, [0, k0], [ow, kt])
            y = b.mvm(args[1], mat)
            if tail:
                if len(args) > 2:
                    y = b.binary("vadd", y, args[2], _shape_t(y))
                y = self.activation(b, y, act)
            return b.reshape(b.transpose(y, [1, 0]), _t((1, mt, 1, ow)))

        return self.window_rows(ins, image, (c0, cn), win, 0.0, (1, mt, oh, ow), body, ow)

    def window_rows(self, ins: list[Value], image: int, chans: tuple[int, int], win: Window,
                    fill: float, out: tuple[int, ...],
                    body: Callable[[Builder, Value, list[Value]], Value],
                    mvms: int = 0, extra: Callable[[Builder, Value, int], Value] | None = None
                    ) -> Value:
        """Row lanes of a sliding window over ins[0] (N, C, H, W). Lanes whose window rows
        all lie inside the input share one batch; border lanes get their own, with the
        missing rows padded inside the lane. The parts concatenate along H (placement)."""
        c0, cn = chans
        kh = win.kernel[0]
        sh, dh = win.stride[0], win.dilation[0]
        top, left = win.pads
        need_w = (win.out[1] - 1) * win.stride[1] + (win.kernel[1] - 1) * win.dilation[1] + 1
        right = max(0, need_w - win.w - left)
        parts = []
        for lo, hi, i0, i1 in win.segments():
            def lane_body(b: Builder, lane: Value, args: list[Value], lo: int = lo,
                          i0: int = i0, i1: int = i1) -> tuple[Value, list[AffineLike]]:
                first = Affine(lo * sh - top + i0 * dh, ((sh, lane),))
                rows = b.extract(args[0], [image, c0, first, 0], [1, cn, i1 - i0, win.w],
                                 [1, 1, dh, 1], type=_t((cn, i1 - i0, win.w)))
                if i0 or i1 < kh or left or right:
                    rows = b.pad(rows, [0, i0, left], [0, kh - i1, right], fill)
                frag = body(b, rows, args)
                if extra is not None:
                    frag = extra(b, frag, lo)
                return frag, [0, 0, lane, 0]

            parts.append(self.batch(hi - lo, ins, (out[0], out[1], hi - lo, out[3]), lane_body,
                                    mvms_per_lane=mvms))
        if len(parts) == 1:
            return parts[0]
        return self.compute(parts, [out], lambda b, xs: [b.concat(xs, 2)])[0]

    def _lower_gemm(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        return [self.gemm(plan.name, x, plan.weights["weight"], plan.weights.get("bias"), act,
                          self.out_shape(plan))]

    def gemm(self, name: str, x: Value, w: np.ndarray, bias: np.ndarray | None,
             act: Plan | None, out_shape: tuple[int, ...]) -> Value:
        m, _ = _shape(x)
        n = w.shape[1]
        grid = self._tiles(w)
        full_bias = None
        if bias is not None:
            full_bias = np.broadcast_to(bias, (m, n)) if bias.ndim == 2 and bias.shape[0] > 1 \
                else bias.reshape(1, n)
        results = []
        for ci in range(len(grid[0])):
            m0, mt = grid[0][ci][1], grid[0][ci][2].shape[1]
            bvec = None
            if full_bias is not None:
                bvec = self.weight(f"{name}.bias.c{ci}", full_bias[:, m0:m0 + mt])
            partials = []
            for ri, row in enumerate(grid):
                k0, _, tile = row[ci]
                wt = self.weight(f"{name}.r{ri}.c{ci}", tile, tile=True)
                single = len(grid) == 1
                ins = [x, wt] + ([bvec] if single and bvec is not None else [])
                partials.append(self.gemm_batch(ins, m, k0, tile.shape, single, act))
            results.append(self.reduce_partials(partials, bvec, act, final=True))
        if len(results) == 1:
            return results[0]
        return self.compute(results, [out_shape], lambda b, xs: [b.concat(xs, 1)])[0]

    def gemm_batch(self, ins: list[Value], m: int, k0: int, tile: tuple[int, ...], tail: bool,
                   act: Plan | None) -> Value:
        kt, mt = tile

        def body(b: Builder, lane: Value, args: list[Value]) -> tuple[Value, list[AffineLike]]:
            v = b.extract(args[0], [lane, k0], [1, kt])
            y = b.mvm(args[1], v)
            if tail:
                if len(args) > 2:
                    bias = args[2]
                    if _shape(bias)[0] > 1:
                        bias = b.extract(bias, [lane, 0], [1, mt])
                    y = b.binary("vadd", y, bias, _shape_t(y))
                y = self.activation(b, y, act)
            return y, [lane, 0]

        return self.batch(m, ins, (m, mt), body, mvms_per_lane=1)

    def _lower_matmul(self, plan: Plan, act: Plan | None) -> list[Value]:
        """numpy matmul semantics: 1-D operands gain a unit dim, batch dims broadcast. A
        constant operand goes onto crossbars (gemm tiles); activation x activation runs on
        the vector unit (row times matrix as multiply + column reduction)."""
        a = self.input(plan, 0)
        w = plan.weights.get("weight")
        b = None if w is not None else self.input(plan, 1)
        ash = _shape(a)
        bsh = tuple(w.shape) if w is not None else _shape(b)  # type: ignore[arg-type]
        out_shape = self.out_shape(plan)
        a2 = ash if len(ash) > 1 else (1, *ash)
        b2 = bsh if len(bsh) > 1 else (*bsh, 1)
        m, k = a2[-2:]
        n = b2[-1]
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        av = self.view(a, a2)
        bv = self.view(b, b2) if b is not None else None
        wmat = w.reshape(b2) if w is not None else None
        results = []
        for idx in np.ndindex(*batch):
            ai = _bcast_index(idx, a2[:-2])
            bi = _bcast_index(idx, b2[:-2])
            amat = self.slice_matrix(av, ai, (m, k))
            if wmat is not None:
                wb = wmat[bi] if bi else wmat
                tag = plan.name + ("." + "_".join(map(str, idx)) if idx else "")
                y = self.gemm(tag, amat, np.asarray(wb), None, act, (m, n))
            else:
                assert bv is not None
                y = self.vector_matmul(amat, self.slice_matrix(bv, bi, (k, n)), act)
            results.append(y)
        if not batch:
            return [self.view(results[0], out_shape)]
        stacked = [self.view(r, (1, m, n)) for r in results]
        full = self.compute(stacked, [(len(stacked), m, n)], lambda b_, xs: [b_.concat(xs, 0)]
                            )[0] if len(stacked) > 1 else stacked[0]
        return [self.view(full, out_shape)]

    def slice_matrix(self, x: Value, idx: tuple[int, ...], shape: tuple[int, int]) -> Value:
        """The (rows, cols) matrix at batch index `idx` of x (a view when there is none)."""
        if not idx:
            return self.view(x, shape)
        rank = len(_shape(x))
        offs = [*idx, 0, 0]
        sizes = [1] * (rank - 2) + list(shape)
        return self.compute([x], [shape], lambda b, xs: [
            b.extract(xs[0], offs, sizes, type=_t(shape))])[0]

    def vector_matmul(self, a: Value, bm: Value, act: Plan | None) -> Value:
        m, k = _shape(a)
        n = _shape(bm)[1]

        def body(b: Builder, lane: Value, args: list[Value]) -> tuple[Value, list[AffineLike]]:
            row = b.extract(args[0], [lane, 0], [1, k])
            prod = b.binary("vmul", b.transpose(row, [1, 0]), args[1], _t((k, n)))
            y = b.reduce("vreduce_sum", prod, [0], _t((1, n)))
            return self.activation(b, y, act), [lane, 0]

        return self.batch(m, [a, bm], (m, n), body)

    def view(self, x: Value, shape: Sequence[int]) -> Value:
        if _shape(x) == tuple(shape):
            return x
        return self.compute([x], [shape], lambda b, xs: [b.reshape(xs[0], _t(shape))])[0]

    def _lower_conv_transpose(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        w = plan.weights["weight"]
        s = plan.ints("strides")
        dil = plan.ints("dilations")
        t, left, bot, right = plan.ints("pads")
        oph, opw = plan.ints("output_padding")
        group = int(plan.attrs["group"])  # type: ignore[call-overload]
        cin, cout_g, kh, kw = w.shape
        cin_g = cin // group
        # transposed conv = conv over the zero-inserted input with flipped, swapped weights
        wc = np.zeros((cout_g * group, cin_g, kh, kw), dtype=np.float32)
        for g in range(group):
            blk = w[g * cin_g:(g + 1) * cin_g]  # (cin_g, cout_g, kh, kw)
            wc[g * cout_g:(g + 1) * cout_g] = blk.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        ph, pw = dil[0] * (kh - 1), dil[1] * (kw - 1)
        lo_h, lo_w, hi_h, hi_w = ph - t, pw - left, ph - bot + oph, pw - right + opw
        if min(lo_h, lo_w, hi_h, hi_w) < 0:
            raise LoweringError(f"plan {plan.name!r}: ConvTranspose pads larger than "
                                "dilation*(kernel-1) are not supported")
        nimg, _, h, wd = _shape(x)
        zh, zw = (h - 1) * s[0] + 1 + lo_h + hi_h, (wd - 1) * s[1] + 1 + lo_w + hi_w
        zshape = (nimg, cin, zh, zw)

        def dilate(b: Builder, xs: list[Value]) -> list[Value]:
            z = b.empty(_t(zshape))
            return [b.insert(xs[0], z, [0, 0, lo_h, lo_w], [nimg, cin, h, wd],
                             [1, 1, s[0], s[1]])]

        z = self.compute([x], [zshape], dilate)[0]
        y = self.conv(plan.name, z, wc, plan.weights.get("bias"), [1, 1], [0, 0, 0, 0], dil,
                      group, self.out_shape(plan), act)
        return [y]

    # ------------------------------------------------------------------ vector plans
    def _unary_kind(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        op, keys = ACTIVATIONS[plan.kind]
        attrs: dict[str, Attr] = {k: float(plan.num(k)) for k in keys}
        return [self.rowwise(plan, [x], self.out_shape(plan),
                             lambda b, xs: b.unary(op, xs[0], attrs))]

    _lower_relu = _lower_sigmoid = _lower_tanh = _lower_silu = _unary_kind
    _lower_hard_swish = _lower_leaky_relu = _lower_hard_sigmoid = _lower_clip = _unary_kind
    _lower_neg = _unary_kind

    def _lower_elu(self, plan: Plan, act: Plan | None) -> list[Value]:
        """relu(x) + alpha·exp(min(x, 0)) − alpha, with min(x, 0) = −relu(−x)."""
        x = self.input(plan, 0)
        out = self.out_shape(plan)
        alpha = plan.num("alpha")
        shift = self.weight(f"{plan.name}.shift", np.full((1,) * len(out), -alpha, np.float32))

        def body(b: Builder, xs: list[Value]) -> Value:
            low = b.unary("neg", b.unary("relu", b.unary("neg", xs[0])))
            scaled = b.unary("vscale", b.unary("exp", low), {"factor": alpha})
            y = b.binary("vadd", b.unary("relu", xs[0]), scaled)
            return b.binary("vadd", y, xs[1], _shape_t(y))

        return [self.rowwise(plan, [x, shift], out, body)]

    def _binary_kind(self, plan: Plan, act: Plan | None) -> list[Value]:
        op = {"add": "vadd", "sub": "vsub", "mul": "vmul", "div": "vdiv", "max": "vmax",
              "min": "vmin"}[plan.kind]
        operands = [self.input(plan, k) for k in range(len(plan.inputs))]
        if "operand" in plan.weights:
            c = self.weight(f"{plan.name}.operand", plan.weights["operand"])
            idx = int(plan.attrs.get("operand_index", 1))  # type: ignore[call-overload]
            operands.insert(idx, c)
        out = self.out_shape(plan)
        return [self.rowwise(plan, operands, out,
                             lambda b, xs: b.binary(op, xs[0], xs[1], _frag_t(xs)))]

    _lower_add = _lower_sub = _lower_mul = _binary_kind
    _lower_div = _lower_max = _lower_min = _binary_kind

    def channel_const(self, name: str, data: np.ndarray, rank: int) -> Value:
        shape = (1, data.size) + (1,) * (rank - 2)
        return self.weight(name, data.reshape(shape))

    def _lower_bias_add(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        out = self.out_shape(plan)
        c = self.channel_const(f"{plan.name}.bias", plan.weights["bias"], len(out))
        return [self.rowwise(plan, [x, c], out,
                             lambda b, xs: b.binary("vadd", xs[0], xs[1], _shape_t(xs[0])))]

    def _lower_affine_channel(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        out = self.out_shape(plan)
        sc = self.channel_const(f"{plan.name}.scale", plan.weights["scale"], len(out))
        sh = self.channel_const(f"{plan.name}.shift", plan.weights["shift"], len(out))

        def body(b: Builder, xs: list[Value]) -> Value:
            y = b.binary("vmul", xs[0], xs[1], _shape_t(xs[0]))
            return b.binary("vadd", y, xs[2], _shape_t(xs[0]))

        return [self.rowwise(plan, [x, sc, sh], out, body)]

    def _lower_prelu(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        out = self.out_shape(plan)
        slope = self.weight(f"{plan.name}.slope", plan.weights["slope"])

        def body(b: Builder, xs: list[Value]) -> Value:
            pos = b.unary("relu", xs[0])
            neg = b.unary("neg", b.unary("relu", b.unary("neg", xs[0])))
            return b.binary("vadd", pos, b.binary("vmul", neg, xs[1], _shape_t(xs[0])))

        return [self.rowwise(plan, [x, slope], out, body)]

    def _lower_softmax(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        axis = int(plan.attrs["axis"])  # type: ignore[call-overload]
        return self.compute([x], [self.out_shape(plan)],
                            lambda b, xs: [b.unary("softmax", xs[0], {"axis": axis})])

    # ------------------------------------------------------------------ pooling and resize
    def pool(self, plan: Plan, kind: str) -> Value:
        x = self.input(plan, 0)
        _, c, h, wd = _shape(x)
        kh, kw = plan.ints("kernel")
        sh, sw = plan.ints("strides")
        dh, dw = plan.ints("dilations")
        t, left, bot, right = plan.ints("pads")
        out = self.out_shape(plan)
        _, _, oh, ow = out
        win = Window(h, wd, (kh, kw), (sh, sw), (dh, dw), (t, left), (oh, ow))
        ins = [x]
        extra = None
        if kind == "avg":
            include = bool(plan.attrs["count_include_pad"])
            need_h = (oh - 1) * sh + (kh - 1) * dh + 1
            need_w = (ow - 1) * sw + (kw - 1) * dw + 1
            mask = np.zeros((max(need_h, h + t), max(need_w, wd + left)), dtype=np.float64)
            mask[t:t + h, left:left + wd] = 1.0
            if include:
                mask[:min(h + t + bot, mask.shape[0]), :min(wd + left + right, mask.shape[1])] = 1
            counts = np.zeros((oh, ow))
            for i in range(kh):
                for j in range(kw):
                    counts += mask[i * dh:i * dh + (oh - 1) * sh + 1:sh,
                                   j * dw:j * dw + (ow - 1) * sw + 1:sw]
            ins.append(self.weight(f"{plan.name}.recip",
                                   (1.0 / np.maximum(counts, 1)).reshape(1, 1, oh, ow)))

            def extra(b: Builder, frag: Value, lo: int) -> Value:
                lane = b.block.args[0]
                r = b.extract(b.block.args[2], [0, 0, Affine(lo, ((1, lane),)), 0],
                              [1, 1, 1, ow], type=_t((1, 1, 1, ow)))
                return b.binary("vmul", frag, r, _shape_t(frag))

        def body(b: Builder, rows: Value, args: list[Value]) -> Value:
            acc: Value | None = None
            for i in range(kh):
                for j in range(kw):
                    e = b.extract(rows, [0, i, j * dw], [c, 1, ow], [1, 1, sw],
                                  type=_t((c, ow)))
                    acc = e if acc is None else b.binary("vmax" if kind == "max" else "vadd",
                                                         acc, e)
            assert acc is not None
            return b.reshape(acc, _t((1, c, 1, ow)))

        fill = -np.inf if kind == "max" else 0.0
        return self.per_image(out, lambda n: self.window_rows(
            ins, n, (0, c), win, fill, (1, *out[1:]), body, extra=extra))

    def per_image(self, out: tuple[int, ...], one: Callable[[int], Value]) -> Value:
        """Spatial plans run one image at a time; images concatenate along dim 0."""
        images = [one(n) for n in range(out[0])]
        if len(images) == 1:
            return images[0]
        return self.compute(images, [out], lambda b, xs: [b.concat(xs, 0)])[0]

    def _lower_maxpool(self, plan: Plan, act: Plan | None) -> list[Value]:
        return [self.pool(plan, "max")]

    def _lower_avgpool(self, plan: Plan, act: Plan | None) -> list[Value]:
        return [self.pool(plan, "avg")]

    def _lower_global_avgpool(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        _, c, h, wd = _shape(x)
        chunk = max(d for d in range(1, min(c, self.target.vector_lanes) + 1) if c % d == 0)

        def body(b: Builder, lane: Value, args: list[Value], n: int
                 ) -> tuple[Value, list[AffineLike]]:
            ch = Affine(0, ((chunk, lane),))
            e = b.extract(args[0], [n, ch, 0, 0], [1, chunk, h, wd])
            s = b.reduce("vreduce_sum", e, [2, 3], _t((1, chunk, 1, 1)))
            return b.unary("vscale", s, {"factor": 1.0 / (h * wd)}), [0, ch, 0, 0]

        out = self.out_shape(plan)
        return [self.per_image(out, lambda n: self.batch(
            c // chunk, [x], (1, c, 1, 1), lambda b, lane, args: body(b, lane, args, n)))]

    def _lower_resize_nearest(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        _, c, h, wd = _shape(x)
        out = self.out_shape(plan)
        _, _, oh, ow = out
        scales = plan.attrs["scales"]
        assert isinstance(scales, list)
        mode = str(plan.attrs["coordinate_transformation_mode"])
        rnd = str(plan.attrs["nearest_mode"])
        rows = nearest_indices(h, oh, float(scales[0]), mode, rnd)
        cols = nearest_indices(wd, ow, float(scales[1]), mode, rnd)
        # runs of equal source columns: (source column, repeat)
        runs: list[tuple[int, int]] = []
        for col in cols.tolist():
            if runs and runs[-1][0] == col:
                runs[-1] = (col, runs[-1][1] + 1)
            else:
                runs.append((col, 1))

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

            return [self.per_image(out, lambda n: self.batch(
                h, [x], one, lambda b, lane, args: body(b, lane, args, n)))]

        def whole(b: Builder, xs: list[Value], n: int) -> list[Value]:
            rs = [b.reshape(gather_row(b, xs[0], int(r), n), _t((1, c, 1, ow))) for r in rows]
            return [b.concat(rs, 2) if len(rs) > 1 else rs[0]]

        return [self.per_image(out, lambda n: self.compute(
            [x], [one], lambda b, xs: whole(b, xs, n))[0])]

    # ------------------------------------------------------------------ placement plans
    def _lower_concat(self, plan: Plan, act: Plan | None) -> list[Value]:
        """Concat moves no data when every input is made of fragments: canonicalization
        turns it into one Blueprint. An input that is one opaque tensor (a function argument,
        a single compute) is first staged into row fragments, so that consumers of the
        concat still depend on (and receive) only the rows they read."""
        xs = [self.staged(self.input(plan, k), plan) for k in range(len(plan.inputs))]
        axis = int(plan.attrs["axis"])  # type: ignore[call-overload]
        if len(xs) == 1:
            return self.compute(xs, [self.out_shape(plan)], lambda b, a: [a[0]])
        return self.compute(xs, [self.out_shape(plan)], lambda b, a: [b.concat(a, axis)])

    def staged(self, x: Value, plan: Plan) -> Value:
        owner = x.owner
        if isinstance(owner, GraphComputeBatchOp) or (
                isinstance(owner, GraphComputeOp) and len(owner.body.ops) == 2
                and isinstance(owner.body.ops[0], ConcatOp)):
            return x
        if _lane_dim(_shape(x)) is None:
            return x
        return self.rowwise(plan, [x], _shape(x), lambda b, xs: xs[0])

    def _lower_split(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        axis = int(plan.attrs["axis"])  # type: ignore[call-overload]
        sizes = plan.ints("sizes")
        shape = _shape(x)
        outs = [self.out_shape(plan, k) for k in range(len(plan.outputs))]

        def body(b: Builder, a: list[Value]) -> list[Value]:
            res, start = [], 0
            for n in sizes:
                offs = [0] * len(shape)
                offs[axis] = start
                sz = list(shape)
                sz[axis] = n
                res.append(b.extract(a[0], offs, sz))
                start += n
            return res

        return self.compute([x], outs, body)

    def _lower_slice(self, plan: Plan, act: Plan | None) -> list[Value]:
        x = self.input(plan, 0)
        starts, steps = plan.ints("starts"), plan.ints("steps")
        out = self.out_shape(plan)
        if any(s < 0 for s in steps):
            def rev(b: Builder, a: list[Value]) -> list[Value]:
                v = a[0]
                for d, (st, sp) in enumerate(zip(starts, steps, strict=True)):
                    if sp < 0:
                        v = self._reverse_dim(b, v, d, st, sp, out[d])
                    else:
                        offs = [0] * len(out)
                        offs[d] = st
                        sz = list(_shape(v))
                        sz[d] = out[d]
                        stv = [1] * len(out)
                        stv[d] = sp
                        v = b.extract(v, offs, sz, stv)
                return [v]

            return self.compute([x], [out], rev)
        return self.compute([x], [out], lambda b, a: [
            b.extract(a[0], starts, list(out), steps)])

    @staticmethod
    def _reverse_dim(b: Builder, v: Value, d: int, start: int, step: int, n: int) -> Value:
        """Negative steps gather single slices in order (placement, no arithmetic)."""
        shape = list(_shape(v))
        parts = []
        for i in range(n):
            offs = [0] * len(shape)
            offs[d] = start + i * step
            sz = list(shape)
            sz[d] = 1
            parts.append(b.extract(v, offs, sz))
        return b.concat(parts, d) if n > 1 else parts[0]

    def _lower_pad(self, plan: Plan, act: Plan | None) -> list[Value]:
        """Placement: crop negative pads, then `tensor.pad` (constant) or, per axis, a concat
        of single-row slices (reflect, edge) or of the opposite end (wrap)."""
        x = self.input(plan, 0)
        pads = plan.ints("pads")
        rank = len(_shape(x))
        begin, end = pads[:rank], pads[rank:]
        mode = str(plan.attrs["mode"])

        def body(b: Builder, a: list[Value]) -> list[Value]:
            v = a[0]
            shape = list(_shape(v))
            if min(pads) < 0:
                offs = [max(-lo, 0) for lo in begin]
                sizes = [d - max(-lo, 0) - max(-hi, 0)
                         for d, lo, hi in zip(shape, begin, end, strict=True)]
                v = b.extract(v, offs, sizes)
                shape = sizes
            lo_pads, hi_pads = [max(p, 0) for p in begin], [max(p, 0) for p in end]
            if mode == "constant":
                return [b.pad(v, lo_pads, hi_pads, plan.num("value"))]
            for d, (lo, hi) in enumerate(zip(lo_pads, hi_pads, strict=True)):
                if not lo and not hi:
                    continue
                n = shape[d]

                def rows(first: int, count: int, src: Value = v, d: int = d) -> Value:
                    offs = [0] * rank
                    offs[d] = first
                    sizes = list(_shape(src))
                    sizes[d] = count
                    return b.extract(src, offs, sizes)

                if mode == "wrap":
                    before = [rows(n - lo, lo)] if lo else []
                    after = [rows(0, hi)] if hi else []
                elif mode == "edge":
                    before, after = [rows(0, 1)] * lo, [rows(n - 1, 1)] * hi
                else:  # reflect: the rows next to the edge, mirrored, edge excluded
                    before = [rows(i, 1) for i in range(lo, 0, -1)]
                    after = [rows(n - 2 - i, 1) for i in range(hi)]
                v = b.concat([*before, v, *after], d)
                shape[d] = n + lo + hi
            return [v]

        return self.compute([x], [self.out_shape(plan)], body)

    def _lower_flatten(self, plan: Plan, act: Plan | None) -> list[Value]:
        return [self.view(self.input(plan, 0), self.out_shape(plan))]

    _lower_reshape = _lower_flatten

    def _lower_transpose(self, plan: Plan, act: Plan | None) -> list[Value]:
        perm = plan.ints("perm")
        return self.compute([self.input(plan, 0)], [self.out_shape(plan)],
                            lambda b, a: [b.transpose(a[0], perm)])

    def _lower_identity(self, plan: Plan, act: Plan | None) -> list[Value]:
        return self.compute([self.input(plan, 0)], [self.out_shape(plan)],
                            lambda b, a: [a[0]])


def _bcast_index(idx: tuple[int, ...], dims: Sequence[int]) -> tuple[int, ...]:
    """Index into an operand's batch dims under numpy broadcasting (size-1 dims stay 0)."""
    lead = len(idx) - len(dims)
    return tuple(0 if d == 1 else idx[lead + i] for i, d in enumerate(dims))


def _shape_t(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _frag_t(xs: list[Value]) -> TensorType:
    return _t(np.broadcast_shapes(_shape(xs[0]), _shape(xs[1])))


def lower(graph: PlanGraph, target: Target, layouts: LayoutChoice | None = None) -> Lowered:
    """Lower a plan graph for `target` following `layouts` (all dense when None); raises
    LoweringError for what the target cannot run."""
    lowered = _Lowerer(graph, target, layouts).run()
    capacity = target.num_cores * target.crossbars_per_core
    if lowered.crossbars > capacity:
        raise CapacityExceeded(
            f"model needs {lowered.crossbars} crossbars of {target.crossbar_rows}x"
            f"{target.crossbar_cols} but target '{target.name}' has {target.num_cores} cores x "
            f"{target.crossbars_per_core} crossbars = {capacity}")
    return lowered


def batches(module: Module) -> list[GraphComputeBatchOp]:
    return [op for op in module.walk() if isinstance(op, GraphComputeBatchOp)]
