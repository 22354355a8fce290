"""The ops of the Spatial IR: graph level, lane body and scheduled level.

Each op is declared once (`opdef.op_def`): its fields by kind, its `FORMAT` (the spelling
contract of docs/spec/ARCHITECTURE.md §4), what it asks of the machine (`work`) and what
it can check alone (`verify`; the graph-batch invariant, which needs the body, lives in
`verifier.py`). The elementwise families carry their numpy semantics in `UNARY`,
`BINARY` and `REDUCE`, which the interpreter, the simulator and the cost table read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from raptor.ir.core import (
    Affine,
    BareRegion,
    Operand,
    Operands,
    Operation,
    Region,
    Result,
    Results,
    Value,
    VerifyError,
    Work,
)
from raptor.ir.opdef import ParseState, op_def
from raptor.ir.printer import Printer
from raptor.ir.types import IndexType, TensorType, Type

if TYPE_CHECKING:
    from raptor.ir.parser import Parser

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


class Strided(Operation):
    """Ops naming a strided region `%v[offsets] [sizes] [strides]` of a tensor (slices,
    inserts, publications, loads, stores, region sends): what the region must satisfy. The
    three fields are each op's own dataclass fields."""

    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    REGION: ClassVar[tuple[str, str, str]]
    """The field of the whole tensor, the field of the part, and what the part is (for the
    messages): what `verify` checks with `check_region`."""

    def verify(self) -> None:
        whole, part, what = self.REGION
        self.check_region(getattr(self, whole), getattr(self, part).type, what)

    def check_region(self, whole: Value, part: Type, what: str) -> None:
        """The region of `whole` that `part` fills (or is read from): geometry (SLICE-1),
        shape up to unit dims and element type (SLICE-2), bounds of the constant offsets
        (SLICE-3; lane-dependent ones are checked per lane by the verifier)."""
        offsets, sizes, strides = self.offsets, self.sizes, self.strides
        shape = _static(ttype(whole), f"{what} operand")
        if not len(offsets) == len(sizes) == len(strides) == len(shape):
            raise VerifyError("SLICE-1", f"slice has {len(offsets)} offsets, {len(sizes)} sizes "
                              f"and {len(strides)} strides for a rank-{len(shape)} tensor")
        if any(s < 0 for s in sizes) or any(s < 1 for s in strides):
            raise VerifyError("SLICE-1", f"slice sizes must be >= 0 and strides >= 1, got "
                              f"{list(sizes)}, {list(strides)}")
        if not isinstance(part, TensorType) or squeeze(part.shape) != squeeze(sizes) \
                or part.dtype != ttype(whole).dtype:
            raise VerifyError("SLICE-2", f"{what} {part} does not match the region sizes "
                              f"{list(sizes)} of {whole.type}")
        for d, (o, sz, st) in enumerate(zip(offsets, sizes, strides, strict=True)):
            if o.is_const and sz > 0 and (o.const < 0 or o.const + (sz - 1) * st >= shape[d]):
                raise VerifyError("SLICE-3", f"slice dimension {d} [{o.const}, +{sz}*{st}) is "
                                  f"outside 0..{shape[d]}")


# --------------------------------------------------------------------------- graph level
@op_def
class FuncOp(Operation):
    """`func.func @name(args) -> results { ... return }` (the parser reads it as the
    module's top-level construct)."""

    NAME: ClassVar[str] = "func.func"
    sym_name: str
    body: BareRegion
    result_types: list[Type]

    @property
    def args(self) -> list[Value]:
        return self.body.args

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


@op_def
class ReturnOp(Operation):
    NAME: ClassVar[str] = "return"
    FORMAT: ClassVar[str] = "($values^ : type($values))?"
    values: Operands


@op_def
class YieldOp(Operation):
    """Terminator of graph/scheduled compute bodies: the values the instance produces."""

    NAME: ClassVar[str] = "spat.yield"
    FORMAT: ClassVar[str] = "($values^ : type($values))?"
    values: Operands


@op_def
class WeightOp(Operation):
    """A constant weight (a crossbar tile or a small tensor), held by reference to a constant."""

    NAME: ClassVar[str] = "spat.weight"
    FORMAT: ClassVar[str] = "@$symbol : type($result)"
    result: Result
    symbol: str


@op_def
class PlanOp(Operation):
    """`spat.plan.<kind>`: one imported ONNX operation before lowering."""

    NAME: ClassVar[str] = "spat.plan"
    FAMILY: ClassVar[tuple[str, str]] = ("spat.plan.", "kind")
    FORMAT: ClassVar[str] = "$inputs $attrs : (type($inputs)) -> type($outs)"
    kind: str
    inputs: Operands
    outs: Results
    attrs: dict[str, Attr] = field(default_factory=dict)


LAYOUTS = ("DenseNCHW", "NHWCRowStrip", "Fragmented", "NCHWRowStrip")


@op_def
class MaterializeLayoutOp(Operation):
    NAME: ClassVar[str] = "spat.materialize_layout"
    FORMAT: ClassVar[str] = "$source from($from_layout) to($to_layout) : type($source, $result)"
    WORK = (("copy", "result"),)
    source: Operand
    result: Result
    from_layout: str
    to_layout: str

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

    FORMAT: ClassVar[str] = "ins(typed($inputs)) -> type($outs) $body"
    inputs: Operands
    outs: Results
    body: Region

    def verify(self) -> None:
        """A batch's block arguments are (lane, ins..., outs...)."""
        self.check_body_args(lane=True)

    def check_body_args(self, lane: bool) -> None:
        ins = [v.type for v in self.inputs]
        want = [IndexType(), *ins, *(v.type for v in self.outs)] if lane else ins
        got = [a.type for a in self.body.args]
        if got != want:
            raise VerifyError("REGION-1", f"block arguments ({Printer.types(got)}) do not "
                              f"match ({Printer.types(want)})")


@dataclass(eq=False)
class SingleComputeOp(ComputeOp):
    """One instance (no lanes): block args are the ins; the body ends with `spat.yield`."""

    def verify(self) -> None:
        self.check_body_args(lane=False)
        last = self.body.ops[-1] if self.body.ops else None
        if not isinstance(last, YieldOp):
            raise VerifyError("REGION-2", "body must end with spat.yield")
        got, want = [v.type for v in last.values], [v.type for v in self.outs]
        if got != want:
            raise VerifyError("REGION-2", f"spat.yield gives ({Printer.types(got)}) but the op "
                              f"declares ({Printer.types(want)})")


@op_def
class GraphComputeOp(SingleComputeOp):
    """One graph instance."""

    NAME: ClassVar[str] = "spat.graph_compute"


@op_def
class DeferredCommunicationOp(GraphComputeOp):
    """Consumer-side constant shaping of graph values (slot selection, slicing, reshape)."""

    NAME: ClassVar[str] = "spat.deferred_communication"


@op_def
class GraphComputeBatchOp(ComputeOp):
    """N graph lanes; block args are (lane, ins..., outs...). `assembly` marks the temporary
    logical-assembly form that lowering emits before canonicalization."""

    NAME: ClassVar[str] = "spat.graph_compute_batch"
    FORMAT: ClassVar[str] = "lanes($lanes) $assembly ins(typed($inputs)) -> type($outs) $body"
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

    def verify(self) -> None:
        if self.lanes < 1:
            raise VerifyError("GCB-3", f"lane count must be positive, got {self.lanes}")
        super().verify()


@dataclass(eq=False)
class BlueprintEntry:
    """One mapping line: physical `slot` of operand `source` → a logical region. A family
    (`var` set) stands for every slot in `slot..hi`; its offsets may use `var`."""

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
        return tuple(o.const + slot * o.coef(self.var) for o in self.offsets)


BLUEPRINT_COVERAGE = ("complete", "partial")
BLUEPRINT_CONFLICT = ("disjoint", "overwrite")


@op_def
class BlueprintOp(Operation):
    """Logical reconstruction of physical fragment batches (placement, never arithmetic)."""

    NAME: ClassVar[str] = "spat.blueprint"
    FORMAT: ClassVar[str] = ("$sources : type($sources) -> type($result) coverage($coverage) "
                             "conflict($conflict) lines<entries>")
    SYNTAX: ClassVar[dict[str, str]] = {"entries": '"{" bp_entry* "}"'}
    sources: Operands
    result: Result
    entries: list[BlueprintEntry]
    coverage: str = "complete"
    conflict: str = "disjoint"

    def print_entries(self, p: Printer, header: str) -> None:
        p.line(header + " {")
        p.depth += 1
        for e in self.entries:
            of = f" of {p.v(self.sources[e.source])}" if len(self.sources) > 1 \
                and e.source < len(self.sources) else ""
            slot = f"{p.v(e.var)} in {e.slot}..{e.hi}" if e.var is not None else e.slot
            p.line(f"slot {slot}{of} -> {p.affs(e.offsets)} sizes {p.ints(e.sizes)} "
                   f"strides {p.ints(e.strides)}")
        p.depth -= 1
        p.line("}")

    @staticmethod
    def parse_entries(ps: Parser, st: ParseState, entries: list[tuple[Any, ...]]) -> None:
        """`{ slot N [of %v] -> ... }` or `slot %s in LO..HI [of %v] -> ...` per line (the
        parser scopes the family variable to its line). An entry without `of` names the only
        operand (with several, an invalid index the verifier reports as BP-1)."""
        sources: list[Value] = st.values["sources"]
        out = []
        for slot, var, hi, of, offsets, sizes, strides in entries:
            source = 0 if len(sources) == 1 else len(sources)
            if of is not None:
                v, tok = of
                source = next((i for i, s in enumerate(sources) if s is v), -1)
                if source < 0:
                    ps.fail(tok, "BP-1", f"slot {slot} names %{v.name}, which is not an "
                            "operand of this blueprint")
            out.append(BlueprintEntry(source, slot, offsets, sizes, strides, var, hi))
        st.values["entries"] = out


# --------------------------------------------------------------------------- lane body
@op_def
class ExtractSliceOp(Strided):
    """Strided slice; the result may drop unit dimensions (rank-reducing)."""

    NAME: ClassVar[str] = "tensor.extract_slice"
    FORMAT: ClassVar[str] = "$source$offsets $sizes $strides : type($source) to type($result)"
    REGION = ("source", "result", "slice result")
    WORK = (("copy", "result"),)
    source: Operand
    result: Result
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@op_def
class InsertSliceOp(Strided):
    """Functional insert: `dest` with `source` written into a strided region."""

    NAME: ClassVar[str] = "tensor.insert_slice"
    FORMAT: ClassVar[str] = ("$source into $dest$offsets $sizes $strides : type($source) into "
                             "type($dest, $result)")
    WORK = (("copy", "source"),)
    source: Operand
    dest: Operand
    result: Result
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def verify(self) -> None:
        if self.result.type != self.dest.type:
            raise VerifyError("SLICE-2", "insert_slice result type must equal the destination")
        self.check_region(self.dest, self.source.type, "inserted")


@op_def
class ParallelInsertSliceOp(Strided):
    """The one publication per result of a graph batch lane (or a scheduled batch lane)."""

    NAME: ClassVar[str] = "spat.parallel_insert_slice"
    FORMAT: ClassVar[str] = ("$source into $dest$offsets $sizes $strides : type($source) into "
                             "type($dest)")
    REGION = ("dest", "source", "published")
    source: Operand
    dest: Operand
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@op_def
class ReshapeOp(Operation):
    NAME: ClassVar[str] = "tensor.reshape"
    FORMAT: ClassVar[str] = "$source : type($source) to type($result)"
    source: Operand
    result: Result

    def verify(self) -> None:
        a, b = ttype(self.source), ttype(self.result)
        if math.prod(_static(a, "reshape source")) != math.prod(_static(b, "reshape result")):
            raise VerifyError("SHAPE-1", f"reshape {a} to {b} changes the element count")


@op_def
class TransposeOp(Operation):
    NAME: ClassVar[str] = "tensor.transpose"
    FORMAT: ClassVar[str] = "$source $perm : type($source) to type($result)"
    WORK = (("copy", "result"), ("vector", "result"))
    source: Operand
    result: Result
    perm: tuple[int, ...]

    def verify(self) -> None:
        a, b = ttype(self.source), ttype(self.result)
        if sorted(self.perm) != list(range(a.rank)):
            raise VerifyError("SHAPE-2", f"{list(self.perm)} is not a permutation of rank {a.rank}")
        if tuple(a.shape[i] for i in self.perm) != b.shape:
            raise VerifyError("SHAPE-2", f"transpose of {a} by {list(self.perm)} is not {b}")


@op_def
class ConcatOp(Operation):
    NAME: ClassVar[str] = "tensor.concat"
    FORMAT: ClassVar[str] = "dim($dim) $sources : type($sources) to type($result)"
    WORK = (("copy", "result"),)
    sources: Operands
    result: Result
    dim: int

    def verify(self) -> None:
        shapes = [_static(ttype(s), "concat operand") for s in self.sources]
        res = _static(ttype(self.result), "concat result")
        if not 0 <= self.dim < len(res):
            raise VerifyError("SHAPE-3", f"concat dimension {self.dim} out of range")
        total = sum(s[self.dim] if self.dim < len(s) else 0 for s in shapes)
        ok = all(len(s) == len(res) and all(s[d] == res[d] for d in range(len(res))
                                               if d != self.dim) for s in shapes)
        if not ok or total != res[self.dim]:
            raise VerifyError("SHAPE-3", f"concat of {[list(s) for s in shapes]} along "
                              f"{self.dim} is not {list(res)}")


@op_def
class PadOp(Operation):
    NAME: ClassVar[str] = "tensor.pad"
    FORMAT: ClassVar[str] = ("$source low $low high $high value $value : type($source) to "
                             "type($result)")
    WORK = (("copy", "result"),)
    source: Operand
    result: Result
    low: tuple[int, ...]
    high: tuple[int, ...]
    value: float = 0.0

    def verify(self) -> None:
        a = _static(ttype(self.source), "pad source")
        b = _static(ttype(self.result), "pad result")
        want = tuple(x + lo + hi for x, lo, hi in zip(a, self.low, self.high, strict=False))
        if len(self.low) != len(a) or len(self.high) != len(a) or want != b:
            raise VerifyError("SHAPE-4", f"padding {list(a)} by {list(self.low)}/"
                              f"{list(self.high)} is not {list(b)}")


@op_def
class EmptyOp(Operation):
    NAME: ClassVar[str] = "tensor.empty"
    FORMAT: ClassVar[str] = ": type($result)"
    result: Result


@op_def
class MvmOp(Operation):
    """One crossbar tile `w` (K×M) times a vector or row of vectors `v` (...×K)."""

    NAME: ClassVar[str] = "pim.mvm"
    FORMAT: ClassVar[str] = "$weight, $vector : type($weight), type($vector) -> type($result)"
    weight: Operand
    vector: Operand
    result: Result

    @property
    def count(self) -> int:
        """One crossbar MVM per input vector (row) of the operand."""
        return math.prod(ttype(self.vector).static_shape[:-1])

    def work(self) -> tuple[Work, ...]:
        return (Work("mvm", self.count),)

    def verify(self) -> None:
        w = _static(ttype(self.weight), "mvm weight")
        v = _static(ttype(self.vector), "mvm vector")
        r = _static(ttype(self.result), "mvm result")
        if len(w) != 2 or not v or v[-1] != w[0] or r != (*v[:-1], w[1]):
            raise VerifyError("MVM-1", f"mvm of {list(v)} by tile {list(w)} cannot give {list(r)}")


# --------------------------------------------------------------------------- elementwise
Array = np.ndarray


@dataclass(frozen=True)
class Elementwise:
    """One `pim.<kind>` unary op: its attributes (sorted; passed to `fn` as floats), numpy
    semantics and vector passes per element. `fn` gives the same bits on one instance and
    on instances stacked along a new leading axis (how the simulator runs it), unless
    `stacked` is False."""

    fn: Callable[..., Array]
    attrs: tuple[str, ...] = ()
    passes: int = 1
    stacked: bool = True


def _sigmoid(x: Array) -> Array:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=x.dtype)


def _softmax(x: Array, axis: float) -> Array:
    e = np.exp(x - x.max(axis=int(axis), keepdims=True))
    return np.asarray(e / e.sum(axis=int(axis), keepdims=True), dtype=x.dtype)


UNARY: dict[str, Elementwise] = {
    "relu": Elementwise(lambda x: np.maximum(x, 0)),
    "sigmoid": Elementwise(_sigmoid),
    "silu": Elementwise(lambda x: x * _sigmoid(x), passes=2),
    "tanh": Elementwise(np.tanh),
    "exp": Elementwise(np.exp),
    "neg": Elementwise(np.negative),
    "hard_swish": Elementwise(lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), passes=2),
    "leaky_relu": Elementwise(lambda x, alpha: np.where(x >= 0, x, x * alpha), ("alpha",)),
    "clip": Elementwise(lambda x, max, min: np.clip(x, min, max), ("max", "min")),
    "hard_sigmoid": Elementwise(lambda x, alpha, beta: np.clip(alpha * x + beta, 0.0, 1.0),
                                ("alpha", "beta")),
    "vscale": Elementwise(lambda x, factor: x * factor, ("factor",)),
    "elu": Elementwise(lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x)), ("alpha",),
                       passes=2),  # ONNX Elu: x > 0 ? x : alpha * (exp(x) - 1)
    "softmax": Elementwise(_softmax, ("axis",), passes=4, stacked=False),
}
"""The `pim.<kind>` unary ops."""

BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "vadd": np.add, "vsub": np.subtract, "vmul": np.multiply, "vdiv": np.divide,
    "vmax": np.maximum, "vmin": np.minimum,
}
"""The `pim.<kind>` binary ops (numpy broadcasting)."""

REDUCE: dict[str, Callable[[Array, tuple[int, ...]], Array]] = {
    "vreduce_sum": lambda x, dims: x.sum(axis=dims),
    "vreduce_max": lambda x, dims: x.max(axis=dims),
}
"""The `pim.<kind>` reductions over `dims`."""


@op_def
class BinaryOp(Operation):
    """Elementwise `pim.v*`; `rhs` may broadcast (numpy rules) onto `lhs`."""

    NAME: ClassVar[str] = "pim.binary"
    FAMILY: ClassVar[tuple[str, str]] = ("pim.", "op")
    KINDS: ClassVar[dict[str, Any]] = BINARY
    FORMAT: ClassVar[str] = "$lhs, $rhs : custom<signature>"
    SYNTAX: ClassVar[dict[str, str]] = {"signature": 'TYPE ["," TYPE "->" TYPE]'}
    WORK = (("vector", "result"),)
    op: str
    lhs: Operand
    rhs: Operand
    result: Result

    def print_signature(self, p: Printer) -> str:
        """`T` when the three types agree, else `T0, T1 -> T2`."""
        ts = [self.lhs.type, self.rhs.type, self.result.type]
        return str(ts[0]) if ts[0] == ts[1] == ts[2] else f"{ts[0]}, {ts[1]} -> {ts[2]}"

    @staticmethod
    def parse_signature(ps: Parser, st: ParseState, types: list[Type]) -> None:
        """`T` or `T0, T1 -> T2` (lark leaves None for the absent `, T1 -> T2`)."""
        ta, tb, tr = types if types[1] is not None else types[:1] * 3
        for name, t in (("lhs", ta), ("rhs", tb)):
            v, tok = st.uses[name]
            st.values[name] = ps.check(v, t, tok)
        st.result_types["result"] = [tr]

    def verify(self) -> None:
        a = _static(ttype(self.lhs), "operand")
        b = _static(ttype(self.rhs), "operand")
        r = _static(ttype(self.result), "result")
        try:
            out = np.broadcast_shapes(a, b)
        except ValueError:
            raise VerifyError("VEC-1", f"{list(a)} and {list(b)} do not broadcast") from None
        if tuple(out) != r:
            raise VerifyError("VEC-1", f"{self.op} of {list(a)} and {list(b)} gives "
                              f"{list(out)}, not {list(r)}")


@op_def
class UnaryOp(Operation):
    """Elementwise activation or scaling `pim.<op> %a {attrs} : T` (kinds: `UNARY`)."""

    NAME: ClassVar[str] = "pim.unary"
    FAMILY: ClassVar[tuple[str, str]] = ("pim.", "op")
    KINDS: ClassVar[dict[str, Any]] = UNARY
    FORMAT: ClassVar[str] = "$source $attrs : type($source, $result)"
    op: str
    source: Operand
    result: Result
    attrs: dict[str, Attr] = field(default_factory=dict)

    @property
    def spec(self) -> Elementwise:
        return UNARY[self.op]

    def numbers(self) -> dict[str, float]:
        """The attributes as the semantics take them."""
        return {k: float(v) for k, v in self.attrs.items()}  # type: ignore[arg-type]

    def work(self) -> tuple[Work, ...]:
        return (Work("vector", ttype(self.result).numel, self.spec.passes),)

    def verify(self) -> None:
        spec = UNARY.get(self.op)
        if spec is None:
            raise VerifyError("VEC-2", f"unknown elementwise op pim.{self.op}")
        if tuple(sorted(self.attrs)) != spec.attrs:
            raise VerifyError("VEC-2", f"pim.{self.op} needs attributes {list(spec.attrs)}, got "
                              f"{sorted(self.attrs)}")
        if any(not isinstance(v, int | float) or isinstance(v, bool)
               for v in self.attrs.values()):
            raise VerifyError("VEC-2", f"pim.{self.op} attributes must be numbers")
        if self.source.type != self.result.type:
            raise VerifyError("VEC-1", f"pim.{self.op} must keep the type {self.source.type}")


@op_def
class ReduceOp(Operation):
    """`pim.vreduce_sum|max %a dims [..] : T to T2`: reduce, then reshape to the result type."""

    NAME: ClassVar[str] = "pim.reduce"
    FAMILY: ClassVar[tuple[str, str]] = ("pim.", "op")
    KINDS: ClassVar[dict[str, Any]] = REDUCE
    FORMAT: ClassVar[str] = "$source dims $dims : type($source) to type($result)"
    WORK = (("vector", "source"),)
    op: str
    source: Operand
    result: Result
    dims: tuple[int, ...]

    def verify(self) -> None:
        a = _static(ttype(self.source), "reduce source")
        if any(not 0 <= d < len(a) for d in self.dims):
            raise VerifyError("VEC-3", f"reduce dims {list(self.dims)} out of range")
        kept = math.prod(x for i, x in enumerate(a) if i not in self.dims)
        if kept != ttype(self.result).numel:
            raise VerifyError("VEC-3", f"reducing {list(a)} over {list(self.dims)} cannot give "
                              f"{self.result.type}")


# --------------------------------------------------------------------------- scheduled level
@op_def
class ScheduledComputeOp(SingleComputeOp):
    """A graph instance placed on the enclosing core."""

    NAME: ClassVar[str] = "spat.scheduled_compute"


@op_def
class ScheduledComputeBatchOp(ComputeOp):
    """Consecutive compatible instances on one core run as scheduled lanes. The graph
    invariant does not apply: results follow the scheduled contract."""

    NAME: ClassVar[str] = "spat.scheduled_compute_batch"
    FORMAT: ClassVar[str] = "lanes($lanes) ins(typed($inputs)) -> type($outs) $body"
    lanes: int = 1


@op_def
class LaneResultOp(Operation):
    """`%f = spat.lane_result %b[i] : T -> F`: the fragment scheduled lane `i` of a
    `spat.scheduled_compute_batch` published, as a view (no copy, no time): slot `i` of the
    leading dimension of a result whose lanes published `[%lane, 0, ...]` blocks."""

    NAME: ClassVar[str] = "spat.lane_result"
    FORMAT: ClassVar[str] = "$source[$lane] : type($source) -> type($result)"
    result: Result
    source: Operand
    lane: int = 0

    def verify(self) -> None:
        src = _static(ttype(self.source), "lane_result source")
        res = ttype(self.result)
        if res.shape != src[1:] or res.dtype != ttype(self.source).dtype:
            raise VerifyError("SCH-5", f"lane_result of {self.source.type} must be "
                              f"{TensorType(src[1:], res.dtype)}, got {res}")
        if not 0 <= self.lane < src[0]:
            raise VerifyError("SCH-5", f"lane {self.lane} outside 0..{src[0] - 1}")


@op_def
class ChannelSendOp(Strided):
    """Send a value, or a strided region of it (a DMA descriptor: no copy on the sender),
    to another core: `spat.channel_send %v[offs] [sizes] [strides] to core(c) channel(k)
    [yx] : T -> M` where M is the message type (the region's sizes, unit dims dropped
    freely). `yx`: the message takes its YX route, not its XY one (source routing: the
    compiler chose it, `raptor.noc.Network.yx_sooner`; the simulator follows it)."""

    NAME: ClassVar[str] = "spat.channel_send"
    FORMAT: ClassVar[str] = ("$value($offsets^ $sizes $strides)? to core($core) "
                             "channel($channel) $yx : type($value) (-> $message^)?")
    value: Operand
    core: int
    channel: int
    offsets: tuple[Affine, ...] = ()
    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    message: TensorType | None = None
    yx: bool = False

    @property
    def message_type(self) -> Type:
        return self.message if self.message is not None else self.value.type

    def verify(self) -> None:
        if self.message is None:
            if self.offsets or self.sizes or self.strides:
                raise VerifyError("TYPE-0", "a region send needs its message tensor type "
                                  "(`: T -> M`)")
            return
        self.check_region(self.value, self.message, "message")


@op_def
class ChannelReceiveOp(Operation):
    NAME: ClassVar[str] = "spat.channel_receive"
    FORMAT: ClassVar[str] = "from core($core) channel($channel) : type($result)"
    result: Result
    core: int
    channel: int


@op_def
class AllocSharedOp(Operation):
    """A buffer in shared (host) memory, written by `pim.store`, read by `pim.load`."""

    NAME: ClassVar[str] = "pim.alloc_shared"
    FORMAT: ClassVar[str] = ": type($result)"
    result: Result


@op_def
class LoadOp(Strided):
    """Read a strided region of a shared-memory buffer into the core."""

    NAME: ClassVar[str] = "pim.load"
    FORMAT: ClassVar[str] = "$buffer$offsets $sizes $strides : type($buffer) to type($result)"
    REGION = ("buffer", "result", "load result")
    WORK = (("shared_read", "result"),)
    buffer: Operand
    result: Result
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@op_def
class StoreOp(Strided):
    """Write a value into a strided region of a shared-memory buffer."""

    NAME: ClassVar[str] = "pim.store"
    FORMAT: ClassVar[str] = ("$value into $buffer$offsets $sizes $strides : type($value) into "
                             "type($buffer)")
    REGION = ("buffer", "value", "stored")
    WORK = (("shared_write", "value"),)
    value: Operand
    buffer: Operand
    offsets: tuple[Affine, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


# --------------------------------------------------------------------------- streams
@op_def
class StreamOp(Operation):
    """`pim.stream inferences(M) ring(B) { ^bb0(%n: index, %s: index): ... }`: a core's
    program for a stream of M inferences. The body is one inference's program; it runs
    M + L times (L: the largest `pim.lag` in it), iteration k = 0..M+L-1 in order, an op at
    lag l working on inference n = k - l (skipped when that is outside 0..M-1) with `%n` = n
    and `%s` = n mod B, the slot of B-deep ring buffers in shared memory (double buffering:
    B = 2). Every value the body defines is its inference's: an op reads the value of its
    own inference, defined earlier in the same iteration (same lag) or in an earlier one
    (a lower lag: a value carried across the loop's back edge, STREAM-4). Inferences meet
    only through channels (paired in order, one message per iteration) and shared memory."""

    NAME: ClassVar[str] = "pim.stream"
    FORMAT: ClassVar[str] = "inferences($count) ring($ring) $body"
    count: int
    ring: int
    body: Region

    @property
    def inference(self) -> Value:
        """`%n`, the inference index."""
        return self.body.args[0]

    @property
    def slot(self) -> Value:
        """`%s` = n mod ring."""
        return self.body.args[1]

    def staged(self) -> Iterator[tuple[int, Operation]]:
        """(lag, op) of every op of the body in program order, `pim.lag` regions opened."""
        for op in self.body.ops:
            if isinstance(op, LagOp):
                yield from ((op.lag, o) for o in op.body.ops)
            else:
                yield 0, op

    @property
    def lags(self) -> int:
        """L, the largest lag: the loop runs M + L iterations."""
        return max((op.lag for op in self.body.ops if isinstance(op, LagOp)), default=0)

    def verify(self) -> None:
        if [a.type for a in self.body.args] != [IndexType(), IndexType()]:
            raise VerifyError("REGION-1", "pim.stream takes two block arguments (%n: index, "
                              "%s: index)")
        if self.count < 1 or self.ring < 1:
            raise VerifyError("STREAM-1", f"pim.stream needs inferences >= 1 and ring >= 1, "
                              f"got inferences({self.count}) ring({self.ring})")


@op_def
class LagOp(Operation):
    """`pim.lag 1 { ... }`, directly in a `pim.stream` body: ops that work on an earlier
    inference, in iteration k on inference k - lag (the software-pipelined loop body of a
    core whose late tasks serve the inference before the one its early tasks start). What
    they define stays visible to the rest of the body: the region orders ops, it does not
    scope values."""

    NAME: ClassVar[str] = "pim.lag"
    FORMAT: ClassVar[str] = "$lag $body"
    SCOPES: ClassVar[bool] = False
    lag: int
    body: BareRegion

    def verify(self) -> None:
        if self.lag < 1:
            raise VerifyError("STREAM-3", f"pim.lag needs a lag >= 1, got {self.lag}")


class _Counter(Operation):
    """What `pim.signal` and `pim.wait` share: element `index` of a counter array, a rank-1
    i32 `pim.alloc_shared` buffer in shared memory (one word per counter)."""

    counters: Value
    index: int

    def check_counter(self) -> None:
        t = self.counters.type
        if not isinstance(t, TensorType) or t.rank != 1 or t.dtype != "i32" \
                or not t.is_static or not isinstance(self.counters.owner, AllocSharedOp):
            raise VerifyError("SYNC-1", f"counters must be a rank-1 i32 pim.alloc_shared "
                              f"buffer, got {t}")
        if not 0 <= self.index < t.static_shape[0]:
            raise VerifyError("SYNC-2", f"counter {self.index} outside 0..{t.static_shape[0] - 1}")

    def work(self) -> tuple[Work, ...]:
        """One shared-memory access of one counter word."""
        t = self.counters.type
        item = t.itemsize if isinstance(t, TensorType) else 4
        return (Work("shared_write" if isinstance(self, SignalOp) else "shared_read", item),)


@op_def
class SignalOp(_Counter):
    """`pim.signal %c[k] : tensor<Kxi32>`: add one to counter k (an atomic increment at the
    shared memory, one write access). A producer signals READY after its stores for an
    inference, a consumer signals FREE after its loads."""

    NAME: ClassVar[str] = "pim.signal"
    FORMAT: ClassVar[str] = "$counters[$index] : type($counters)"
    counters: Operand
    index: int

    def verify(self) -> None:
        self.check_counter()


@op_def
class WaitOp(_Counter):
    """`pim.wait %c[k] until [%n+1] : tensor<Kxi32>`: block until counter k is at least the
    threshold (affine in the stream's `%n`; a threshold <= 0 holds at once), then read it
    (one read access). Counters only grow, so a wait for a count that was reached stays
    satisfied."""

    NAME: ClassVar[str] = "pim.wait"
    FORMAT: ClassVar[str] = "$counters[$index] until $threshold : type($counters)"
    counters: Operand
    index: int
    threshold: tuple[Affine, ...]

    def verify(self) -> None:
        self.check_counter()
        if len(self.threshold) != 1:
            raise VerifyError("SYNC-3", f"a wait has one threshold, got {len(self.threshold)}")


@op_def
class CoreOp(Operation):
    """`pim.core N { ... }`: the ordered program of one physical core."""

    NAME: ClassVar[str] = "pim.core"
    FORMAT: ClassVar[str] = "$core $body"
    core: int
    body: BareRegion

    @property
    def cores(self) -> tuple[int, ...]:
        return (self.core,)


@op_def
class CoreBatchOp(Operation):
    """`pim.core_batch cores [..] { ^bb0(%lane: index): ... }`: one program on several cores,
    lane i running on cores[i]."""

    NAME: ClassVar[str] = "pim.core_batch"
    FORMAT: ClassVar[str] = "cores $cores $body"
    cores: tuple[int, ...]
    body: Region

    def verify(self) -> None:
        if [a.type for a in self.body.args] != [IndexType()]:
            raise VerifyError("REGION-1", "pim.core_batch takes one block argument (%lane: index)")
        if len(set(self.cores)) != len(self.cores) or not self.cores:
            raise VerifyError("SCH-4", f"pim.core_batch cores {list(self.cores)} must be distinct")
