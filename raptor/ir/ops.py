"""The ops of the Spatial IR: graph level, lane body and scheduled level.

Each op is a small dataclass; `print` writes the spelling contract of
ARCHITECTURE.md §4 and `verify` checks what the op can check alone (the
graph-batch invariant, which needs the body, lives in `verifier.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from raptor.ir.core import Affine, Block, Operation, Value, VerifyError
from raptor.ir.printer import Printer, fmt_attr
from raptor.ir.types import IndexType, TensorType, Type

Attr = int | float | str | bool | list[int] | list[float] | list[str]


def ttype(v: Value) -> TensorType:
    """The tensor type of `v`; raises a verify error when it is `index`."""
    if not isinstance(v.type, TensorType):
        raise VerifyError("TYPE-1", f"expected a tensor, got {v.type}")
    return v.type


def squeeze(shape: Sequence[int | None]) -> tuple[int | None, ...]:
    return tuple(d for d in shape if d != 1)


def _static(t: TensorType, what: str) -> tuple[int, ...]:
    if not t.is_static:
        raise VerifyError("TYPE-2", f"{what} {t} must be static")
    return t.static_shape


def _check_slice_geometry(
    rank: int, offsets: Sequence[Affine], sizes: Sequence[int], strides: Sequence[int], rule: str
) -> None:
    if not len(offsets) == len(sizes) == len(strides) == rank:
        raise VerifyError(
            rule,
            f"slice has {len(offsets)} offsets, {len(sizes)} sizes and {len(strides)} strides "
            f"for a rank-{rank} tensor",
        )
    if any(s < 0 for s in sizes) or any(s < 1 for s in strides):
        raise VerifyError(rule, f"slice sizes must be >= 0 and strides >= 1, got {list(sizes)}, "
                          f"{list(strides)}")


def _const_bounds(src: tuple[int, ...], offsets: Sequence[Affine], sizes: Sequence[int],
                  strides: Sequence[int], rule: str) -> None:
    """Bounds of a slice whose offsets are constant (lane-dependent ones are checked per lane)."""
    for d, (o, sz, st) in enumerate(zip(offsets, sizes, strides, strict=True)):
        if o.is_const and sz > 0 and (o.const < 0 or o.const + (sz - 1) * st >= src[d]):
            raise VerifyError(rule, f"slice dimension {d} [{o.const}, +{sz}*{st}) is outside "
                              f"0..{src[d]}")


class Strided(Operation):
    """Ops naming a strided region `%v[offsets] [sizes] [strides]` of a tensor (slices,
    inserts, publications, loads, stores, region sends): how the region prints and what
    it must satisfy. The three fields are each op's own dataclass fields."""

    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def region(self, p: Printer) -> str:
        return f"{p.affs(self.offsets)} {p.ints(self.sizes)} {p.ints(self.strides)}"

    def check_region(self, whole: Value, part: Type, what: str) -> None:
        """The region of `whole` that `part` fills (or is read from): geometry (SLICE-1),
        shape up to unit dims and element type (SLICE-2), constant bounds (SLICE-3)."""
        offsets, sizes, strides = self.offsets, self.sizes, self.strides
        shape = _static(ttype(whole), f"{what} operand")
        _check_slice_geometry(len(shape), offsets, sizes, strides, "SLICE-1")
        if not isinstance(part, TensorType) or squeeze(part.shape) != squeeze(sizes) \
                or part.dtype != ttype(whole).dtype:
            raise VerifyError("SLICE-2", f"{what} {part} does not match the region sizes "
                              f"{list(sizes)} of {whole.type}")
        _const_bounds(shape, offsets, sizes, strides, "SLICE-3")


class OneResult(Operation):
    """Ops with a single `result` field (most of them)."""

    result: Value

    def results(self) -> list[Value]:
        return [self.result]


# --------------------------------------------------------------------------- graph level
@dataclass(eq=False)
class FuncOp(Operation):
    """`func.func @name(args) -> results { ... return }`."""

    NAME: ClassVar[str] = "func.func"
    sym_name: str
    body: Block
    result_types: list[Type]

    def __post_init__(self) -> None:
        for a in self.body.args:
            a.owner = self.body

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def regions(self) -> list[Block]:
        return [self.body]

    def print(self, p: Printer) -> None:
        args = ", ".join(f"{p.v(a)}: {a.type}" for a in self.body.args)
        res = f" -> {p.result_types(self.result_types)}" if self.result_types else ""
        p.region(f"func.func @{self.sym_name}({args}){res}", self.body, show_args=False)

    def verify(self) -> None:
        ret = self.body.ops[-1] if self.body.ops else None
        if not isinstance(ret, ReturnOp):
            raise VerifyError("FUNC-1", f"@{self.sym_name} must end with return")
        got = [v.type for v in ret.values]
        if got != list(self.result_types):
            raise VerifyError("FUNC-2", f"@{self.sym_name} returns ({Printer.types(got)}) but "
                              f"declares ({Printer.types(self.result_types)})")


@dataclass(eq=False)
class ReturnOp(Operation):
    NAME: ClassVar[str] = "return"
    values: list[Value]

    def operands(self) -> list[Value]:
        return list(self.values)

    def print(self, p: Printer) -> None:
        if self.values:
            p.line(f"return {p.vs(self.values)} : {p.types([v.type for v in self.values])}")
        else:
            p.line("return")


@dataclass(eq=False)
class YieldOp(Operation):
    """Terminator of graph/scheduled compute bodies: the values the instance produces."""

    NAME: ClassVar[str] = "spat.yield"
    values: list[Value]

    def operands(self) -> list[Value]:
        return list(self.values)

    def print(self, p: Printer) -> None:
        p.line(f"spat.yield {p.vs(self.values)} : {p.types([v.type for v in self.values])}")


@dataclass(eq=False)
class WeightOp(OneResult):
    """A constant weight (a crossbar tile or a small tensor), held by reference to a constant."""

    NAME: ClassVar[str] = "spat.weight"
    result: Value
    symbol: str

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = spat.weight @{self.symbol} : {self.result.type}")


def print_attrs(attrs: dict[str, Attr]) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k} = {fmt_attr(v)}" for k, v in attrs.items()) + "}"


@dataclass(eq=False)
class PlanOp(Operation):
    """`spat.plan.<kind>`: one imported ONNX operation before lowering."""

    NAME: ClassVar[str] = "spat.plan"
    kind: str
    inputs: list[Value]
    outs: list[Value]
    attrs: dict[str, Attr] = field(default_factory=dict)

    def operands(self) -> list[Value]:
        return list(self.inputs)

    def results(self) -> list[Value]:
        return list(self.outs)

    def print(self, p: Printer) -> None:
        ins = p.types([v.type for v in self.inputs])
        outs = p.result_types([v.type for v in self.outs])
        p.line(f"{p.results_eq(self)}spat.plan.{self.kind} {p.vs(self.inputs)}"
               f"{print_attrs(self.attrs)} : ({ins}) -> {outs}")


LAYOUTS = ("DenseNCHW", "NHWCRowStrip", "Fragmented", "NCHWRowStrip")


@dataclass(eq=False)
class MaterializeLayoutOp(OneResult):
    NAME: ClassVar[str] = "spat.materialize_layout"
    source: Value
    result: Value
    from_layout: str
    to_layout: str

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = spat.materialize_layout {p.v(self.source)} "
               f"from({self.from_layout}) to({self.to_layout}) : {self.result.type}")

    def verify(self) -> None:
        for lay in (self.from_layout, self.to_layout):
            if lay not in LAYOUTS:
                raise VerifyError("LAYOUT-1", f"unknown layout {lay} (known: {', '.join(LAYOUTS)})")
        if self.source.type != self.result.type:
            raise VerifyError("LAYOUT-2", "materialize_layout changes the representation, not "
                              f"the logical type: {self.source.type} vs {self.result.type}")


@dataclass(eq=False)
class ComputeOp(Operation):
    """Shared shape of the region ops: operands `ins`, results, one body block."""

    inputs: list[Value]
    outs: list[Value]
    body: Block

    def operands(self) -> list[Value]:
        return list(self.inputs)

    def results(self) -> list[Value]:
        return list(self.outs)

    def regions(self) -> list[Block]:
        return [self.body]

    def _ins(self, p: Printer) -> str:
        return "ins(" + ", ".join(f"{p.v(v)} : {v.type}" for v in self.inputs) + ")"

    def _header(self, p: Printer, middle: str) -> str:
        res = p.result_types([v.type for v in self.outs]) if self.outs else "()"
        return f"{p.results_eq(self)}{self.NAME}{middle} {self._ins(p)} -> {res}"

    def check_body_args(self, lane: bool) -> None:
        args = self.body.args
        want = ([IndexType()] if lane else []) + [v.type for v in self.inputs]
        if lane:
            want += [v.type for v in self.outs]
        if [a.type for a in args] != want:
            got = Printer.types([a.type for a in args])
            raise VerifyError("REGION-1", f"block arguments ({got}) do not match "
                              f"({Printer.types(want)})")


@dataclass(eq=False)
class SingleComputeOp(ComputeOp):
    """One instance (no lanes): block args are the ins; the body ends with `spat.yield`."""

    def print(self, p: Printer) -> None:
        p.region(self._header(p, ""), self.body, show_args=True)

    def verify(self) -> None:
        self.check_body_args(lane=False)
        check_yield(self.body, self.outs)


@dataclass(eq=False)
class GraphComputeOp(SingleComputeOp):
    """One graph instance."""

    NAME: ClassVar[str] = "spat.graph_compute"


@dataclass(eq=False)
class DeferredCommunicationOp(GraphComputeOp):
    """Consumer-side constant shaping of graph values (slot selection, slicing, reshape)."""

    NAME: ClassVar[str] = "spat.deferred_communication"


def check_yield(body: Block, outs: Sequence[Value]) -> None:
    last = body.ops[-1] if body.ops else None
    if not isinstance(last, YieldOp):
        raise VerifyError("REGION-2", "body must end with spat.yield")
    got = [v.type for v in last.values]
    if got != [v.type for v in outs]:
        raise VerifyError("REGION-2", f"spat.yield gives ({Printer.types(got)}) but the op "
                          f"declares ({Printer.types([v.type for v in outs])})")


@dataclass(eq=False)
class GraphComputeBatchOp(ComputeOp):
    """N graph lanes; block args are (lane, ins..., outs...). `assembly` marks the temporary
    logical-assembly form that lowering emits before canonicalization."""

    NAME: ClassVar[str] = "spat.graph_compute_batch"
    lanes: int = 1
    assembly: bool = False

    @property
    def lane(self) -> Value:
        return self.body.args[0]

    @property
    def out_args(self) -> list[Value]:
        return self.body.args[1 + len(self.inputs):]

    @property
    def in_args(self) -> list[Value]:
        return self.body.args[1: 1 + len(self.inputs)]

    def print(self, p: Printer) -> None:
        mid = f" lanes({self.lanes})" + (" assembly" if self.assembly else "")
        p.region(self._header(p, mid), self.body, show_args=True)

    def verify(self) -> None:
        if self.lanes < 1:
            raise VerifyError("GCB-3", f"lane count must be positive, got {self.lanes}")
        self.check_body_args(lane=True)


@dataclass(eq=False)
class BlueprintEntry:
    """One mapping line: physical `slot` of operand `source` → a logical region.

    A family (`var` set) stands for every slot in `lo..hi`; offsets may use `var`.
    """

    source: int
    slot: int
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    var: Value | None = None
    hi: int = 0

    def slots(self) -> range:
        return range(self.slot, self.hi if self.var is not None else self.slot + 1)

    def offsets_at(self, slot: int) -> tuple[int, ...]:
        if self.var is None:
            return tuple(o.const for o in self.offsets)
        return tuple(o.substitute(self.var, slot).const for o in self.offsets)


BLUEPRINT_COVERAGE = ("complete", "partial")
BLUEPRINT_CONFLICT = ("disjoint", "overwrite")


@dataclass(eq=False)
class BlueprintOp(OneResult):
    """Logical reconstruction of physical fragment batches (placement, never arithmetic)."""

    NAME: ClassVar[str] = "spat.blueprint"
    sources: list[Value]
    result: Value
    entries: list[BlueprintEntry]
    coverage: str = "complete"
    conflict: str = "disjoint"

    def operands(self) -> list[Value]:
        return list(self.sources)

    def print(self, p: Printer) -> None:
        srcs = p.vs(self.sources)
        types = p.types([s.type for s in self.sources])
        p.line(f"{p.v(self.result)} = spat.blueprint {srcs} : {types} -> {self.result.type} "
               f"coverage({self.coverage}) conflict({self.conflict}) {{")
        p.depth += 1
        many = len(self.sources) > 1
        for e in self.entries:
            of = f" of {p.v(self.sources[e.source])}" if many and e.source < len(self.sources) \
                else ""
            if e.var is not None:
                head = f"slot {p.v(e.var)} in {e.slot}..{e.hi}{of}"
            else:
                head = f"slot {e.slot}{of}"
            p.line(f"{head} -> {p.affs(e.offsets)} sizes {p.ints(e.sizes)} "
                   f"strides {p.ints(e.strides)}")
        p.depth -= 1
        p.line("}")


# --------------------------------------------------------------------------- lane body
@dataclass(eq=False)
class ExtractSliceOp(OneResult, Strided):
    """Strided slice; the result may drop unit dimensions (rank-reducing)."""

    NAME: ClassVar[str] = "tensor.extract_slice"
    source: Value
    result: Value
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.extract_slice {p.v(self.source)}"
               f"{self.region(p)} : {self.source.type} to {self.result.type}")

    def verify(self) -> None:
        self.check_region(self.source, self.result.type, "slice result")


@dataclass(eq=False)
class InsertSliceOp(OneResult, Strided):
    """Functional insert: `dest` with `source` written into a strided region."""

    NAME: ClassVar[str] = "tensor.insert_slice"
    source: Value
    dest: Value
    result: Value
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.source, self.dest]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.insert_slice {p.v(self.source)} into "
               f"{p.v(self.dest)}{self.region(p)} : {self.source.type} into {self.dest.type}")

    def verify(self) -> None:
        if self.result.type != self.dest.type:
            raise VerifyError("SLICE-2", "insert_slice result type must equal the destination")
        self.check_region(self.dest, self.source.type, "inserted")


@dataclass(eq=False)
class ParallelInsertSliceOp(Strided):
    """The one publication per result of a graph batch lane (or a scheduled batch lane)."""

    NAME: ClassVar[str] = "spat.parallel_insert_slice"
    source: Value
    dest: Value
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.source, self.dest]

    def print(self, p: Printer) -> None:
        p.line(f"spat.parallel_insert_slice {p.v(self.source)} into {p.v(self.dest)}"
               f"{self.region(p)} : {self.source.type} into {self.dest.type}")


@dataclass(eq=False)
class ReshapeOp(OneResult):
    NAME: ClassVar[str] = "tensor.reshape"
    source: Value
    result: Value

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.reshape {p.v(self.source)} : {self.source.type} to "
               f"{self.result.type}")

    def verify(self) -> None:
        a, b = ttype(self.source), ttype(self.result)
        if math.prod(_static(a, "reshape source")) != math.prod(_static(b, "reshape result")):
            raise VerifyError("SHAPE-1", f"reshape {a} to {b} changes the element count")


@dataclass(eq=False)
class TransposeOp(OneResult):
    NAME: ClassVar[str] = "tensor.transpose"
    source: Value
    result: Value
    perm: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.transpose {p.v(self.source)} {p.ints(self.perm)} : "
               f"{self.source.type} to {self.result.type}")

    def verify(self) -> None:
        a, b = ttype(self.source), ttype(self.result)
        if sorted(self.perm) != list(range(a.rank)):
            raise VerifyError("SHAPE-2", f"{list(self.perm)} is not a permutation of rank {a.rank}")
        if tuple(a.shape[i] for i in self.perm) != b.shape:
            raise VerifyError("SHAPE-2", f"transpose of {a} by {list(self.perm)} is not {b}")


@dataclass(eq=False)
class ConcatOp(OneResult):
    NAME: ClassVar[str] = "tensor.concat"
    sources: list[Value]
    result: Value
    dim: int

    def operands(self) -> list[Value]:
        return list(self.sources)

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.concat dim({self.dim}) {p.vs(self.sources)} : "
               f"{p.types([s.type for s in self.sources])} to {self.result.type}")

    def verify(self) -> None:
        shapes = [_static(ttype(s), "concat operand") for s in self.sources]
        res = _static(ttype(self.result), "concat result")
        if not 0 <= self.dim < len(res):
            raise VerifyError("SHAPE-3", f"concat dimension {self.dim} out of range")
        total = sum(s[self.dim] for s in shapes)
        ok = all(len(s) == len(res) and all(s[d] == res[d] for d in range(len(res))
                                               if d != self.dim) for s in shapes)
        if not ok or total != res[self.dim]:
            raise VerifyError("SHAPE-3", f"concat of {[list(s) for s in shapes]} along "
                              f"{self.dim} is not {list(res)}")


@dataclass(eq=False)
class PadOp(OneResult):
    NAME: ClassVar[str] = "tensor.pad"
    source: Value
    result: Value
    low: tuple[int, ...]
    high: tuple[int, ...]
    value: float = 0.0

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.pad {p.v(self.source)} low {p.ints(self.low)} high "
               f"{p.ints(self.high)} value {fmt_attr(float(self.value))} : {self.source.type} to "
               f"{self.result.type}")

    def verify(self) -> None:
        a = _static(ttype(self.source), "pad source")
        b = _static(ttype(self.result), "pad result")
        want = tuple(x + lo + hi for x, lo, hi in zip(a, self.low, self.high, strict=False))
        if len(self.low) != len(a) or len(self.high) != len(a) or want != b:
            raise VerifyError("SHAPE-4", f"padding {list(a)} by {list(self.low)}/"
                              f"{list(self.high)} is not {list(b)}")


@dataclass(eq=False)
class EmptyOp(OneResult):
    NAME: ClassVar[str] = "tensor.empty"
    result: Value

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = tensor.empty : {self.result.type}")


@dataclass(eq=False)
class MvmOp(OneResult):
    """One crossbar tile `w` (K×M) times a vector or row of vectors `v` (...×K)."""

    NAME: ClassVar[str] = "pim.mvm"
    weight: Value
    vector: Value
    result: Value

    def operands(self) -> list[Value]:
        return [self.weight, self.vector]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = pim.mvm {p.v(self.weight)}, {p.v(self.vector)} : "
               f"{self.weight.type}, {self.vector.type} -> {self.result.type}")

    def verify(self) -> None:
        w = _static(ttype(self.weight), "mvm weight")
        v = _static(ttype(self.vector), "mvm vector")
        r = _static(ttype(self.result), "mvm result")
        if len(w) != 2 or not v or v[-1] != w[0] or r != (*v[:-1], w[1]):
            raise VerifyError("MVM-1", f"mvm of {list(v)} by tile {list(w)} cannot give "
                              f"{list(r)}")


BINARY_OPS = ("vadd", "vsub", "vmul", "vdiv", "vmax", "vmin")
UNARY_OPS: dict[str, tuple[str, ...]] = {
    "relu": (), "sigmoid": (), "silu": (), "tanh": (), "exp": (), "neg": (),
    "hard_swish": (), "leaky_relu": ("alpha",), "clip": ("max", "min"),
    "hard_sigmoid": ("alpha", "beta"), "vscale": ("factor",), "softmax": ("axis",),
}
"""Unary pim ops and their required attributes (the names under which they print)."""


@dataclass(eq=False)
class BinaryOp(OneResult):
    """Elementwise `pim.v*`; `rhs` may broadcast (numpy rules) onto `lhs`."""

    NAME: ClassVar[str] = "pim.binary"
    op: str
    lhs: Value
    rhs: Value
    result: Value

    def operands(self) -> list[Value]:
        return [self.lhs, self.rhs]

    def print(self, p: Printer) -> None:
        ts = [self.lhs.type, self.rhs.type, self.result.type]
        sig = str(ts[0]) if ts[0] == ts[1] == ts[2] else f"{ts[0]}, {ts[1]} -> {ts[2]}"
        p.line(f"{p.v(self.result)} = pim.{self.op} {p.v(self.lhs)}, {p.v(self.rhs)} : {sig}")

    def verify(self) -> None:
        a = _static(ttype(self.lhs), "operand")
        b = _static(ttype(self.rhs), "operand")
        r = _static(ttype(self.result), "result")
        try:
            import numpy as np

            out = np.broadcast_shapes(a, b)
        except ValueError:
            raise VerifyError("VEC-1", f"{list(a)} and {list(b)} do not broadcast") from None
        if tuple(out) != r:
            raise VerifyError("VEC-1", f"{self.op} of {list(a)} and {list(b)} gives "
                              f"{list(out)}, not {list(r)}")


@dataclass(eq=False)
class UnaryOp(OneResult):
    """Elementwise activation or scaling `pim.<op> %a {attrs} : T`."""

    NAME: ClassVar[str] = "pim.unary"
    op: str
    source: Value
    result: Value
    attrs: dict[str, Attr] = field(default_factory=dict)

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = pim.{self.op} {p.v(self.source)}{print_attrs(self.attrs)} : "
               f"{self.result.type}")

    def verify(self) -> None:
        need = UNARY_OPS.get(self.op)
        if need is None:
            raise VerifyError("VEC-2", f"unknown elementwise op pim.{self.op}")
        if tuple(sorted(self.attrs)) != need:
            raise VerifyError("VEC-2", f"pim.{self.op} needs attributes {list(need)}, got "
                              f"{sorted(self.attrs)}")
        if self.source.type != self.result.type:
            raise VerifyError("VEC-1", f"pim.{self.op} must keep the type {self.source.type}")


@dataclass(eq=False)
class ReduceOp(OneResult):
    """`pim.vreduce_sum|max %a dims [..] : T to T2`: reduce, then reshape to the result type."""

    NAME: ClassVar[str] = "pim.reduce"
    op: str
    source: Value
    result: Value
    dims: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = pim.{self.op} {p.v(self.source)} dims {p.ints(self.dims)} : "
               f"{self.source.type} to {self.result.type}")

    def verify(self) -> None:
        a = _static(ttype(self.source), "reduce source")
        if any(not 0 <= d < len(a) for d in self.dims):
            raise VerifyError("VEC-3", f"reduce dims {list(self.dims)} out of range")
        kept = math.prod(x for i, x in enumerate(a) if i not in self.dims)
        if kept != ttype(self.result).numel:
            raise VerifyError("VEC-3", f"reducing {list(a)} over {list(self.dims)} cannot give "
                              f"{self.result.type}")


# --------------------------------------------------------------------------- scheduled level
@dataclass(eq=False)
class ScheduledComputeOp(SingleComputeOp):
    """A graph instance placed on the enclosing core."""

    NAME: ClassVar[str] = "spat.scheduled_compute"


@dataclass(eq=False)
class ScheduledComputeBatchOp(ComputeOp):
    """Consecutive compatible instances on one core run as scheduled lanes. The graph
    invariant does not apply: results follow the scheduled contract."""

    NAME: ClassVar[str] = "spat.scheduled_compute_batch"
    lanes: int = 1

    def print(self, p: Printer) -> None:
        p.region(self._header(p, f" lanes({self.lanes})"), self.body, show_args=True)

    def verify(self) -> None:
        self.check_body_args(lane=True)


@dataclass(eq=False)
class LaneResultOp(OneResult):
    """`%f = spat.lane_result %b[i] : T -> F`: the fragment scheduled lane `i` of a
    `spat.scheduled_compute_batch` published, as a view (no copy, no time): slot `i` of the
    leading dimension of a result whose lanes published `[%lane, 0, ...]` blocks."""

    NAME: ClassVar[str] = "spat.lane_result"
    result: Value
    source: Value
    lane: int = 0

    def operands(self) -> list[Value]:
        return [self.source]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = spat.lane_result {p.v(self.source)}[{self.lane}] : "
               f"{self.source.type} -> {self.result.type}")

    def verify(self) -> None:
        src = _static(ttype(self.source), "lane_result source")
        res = ttype(self.result)
        if res.shape != src[1:] or res.dtype != ttype(self.source).dtype:
            raise VerifyError("SCH-5", f"lane_result of {self.source.type} must be "
                              f"{TensorType(src[1:], res.dtype)}, got {res}")
        if not 0 <= self.lane < src[0]:
            raise VerifyError("SCH-5", f"lane {self.lane} outside 0..{src[0] - 1}")


@dataclass(eq=False)
class ChannelSendOp(Strided):
    """Send a value, or a strided region of it (a DMA descriptor: no copy on the sender),
    to another core: `spat.channel_send %v[offs] [sizes] [strides] to core(c) channel(k) :
    T -> M` where M is the message type (the region's sizes, unit dims dropped freely)."""

    NAME: ClassVar[str] = "spat.channel_send"
    value: Value
    core: int
    channel: int
    offsets: tuple[Affine, ...] = ()
    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    message: TensorType | None = None

    def operands(self) -> list[Value]:
        return [self.value]

    @property
    def message_type(self) -> Type:
        return self.message if self.message is not None else self.value.type

    def print(self, p: Printer) -> None:
        region = self.region(p) if self.message is not None else ""
        types = f"{self.value.type} -> {self.message}" if self.message is not None \
            else str(self.value.type)
        p.line(f"spat.channel_send {p.v(self.value)}{region} to core({self.core}) "
               f"channel({self.channel}) : {types}")

    def verify(self) -> None:
        if self.message is None:
            return
        self.check_region(self.value, self.message, "message")


@dataclass(eq=False)
class ChannelReceiveOp(OneResult):
    NAME: ClassVar[str] = "spat.channel_receive"
    result: Value
    core: int
    channel: int

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = spat.channel_receive from core({self.core}) "
               f"channel({self.channel}) : {self.result.type}")


@dataclass(eq=False)
class AllocSharedOp(OneResult):
    """A buffer in shared (host) memory, written by `pim.store`, read by `pim.load`."""

    NAME: ClassVar[str] = "pim.alloc_shared"
    result: Value

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = pim.alloc_shared : {self.result.type}")


@dataclass(eq=False)
class LoadOp(OneResult, Strided):
    """Read a strided region of a shared-memory buffer into the core."""

    NAME: ClassVar[str] = "pim.load"
    buffer: Value
    result: Value
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.buffer]

    def print(self, p: Printer) -> None:
        p.line(f"{p.v(self.result)} = pim.load {p.v(self.buffer)}{self.region(p)} : "
               f"{self.buffer.type} to {self.result.type}")

    def verify(self) -> None:
        self.check_region(self.buffer, self.result.type, "load result")


@dataclass(eq=False)
class StoreOp(Strided):
    """Write a value into a strided region of a shared-memory buffer."""

    NAME: ClassVar[str] = "pim.store"
    value: Value
    buffer: Value
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def operands(self) -> list[Value]:
        return [self.value, self.buffer]

    def print(self, p: Printer) -> None:
        p.line(f"pim.store {p.v(self.value)} into {p.v(self.buffer)}{self.region(p)} : "
               f"{self.value.type} into {self.buffer.type}")

    def verify(self) -> None:
        self.check_region(self.buffer, self.value.type, "stored")


@dataclass(eq=False)
class CoreOp(Operation):
    """`pim.core N { ... }`: the ordered program of one physical core."""

    NAME: ClassVar[str] = "pim.core"
    core: int
    body: Block

    def regions(self) -> list[Block]:
        return [self.body]

    def print(self, p: Printer) -> None:
        p.region(f"pim.core {self.core}", self.body, show_args=False)


@dataclass(eq=False)
class CoreBatchOp(Operation):
    """`pim.core_batch cores [..] { ^bb0(%lane: index): ... }`: one program on several cores,
    lane i running on cores[i]."""

    NAME: ClassVar[str] = "pim.core_batch"
    cores: tuple[int, ...]
    body: Block

    def regions(self) -> list[Block]:
        return [self.body]

    def print(self, p: Printer) -> None:
        p.region(f"pim.core_batch cores {p.ints(self.cores)}", self.body, show_args=True)

    def verify(self) -> None:
        if [a.type for a in self.body.args] != [IndexType()]:
            raise VerifyError("REGION-1", "pim.core_batch takes one block argument (%lane: index)")
        if len(set(self.cores)) != len(self.cores) or not self.cores:
            raise VerifyError("SCH-4", f"pim.core_batch cores {list(self.cores)} must be distinct")
