"""Builder API: passes create IR through this instead of wiring op fields by hand."""

from __future__ import annotations

from collections.abc import Sequence

from raptor.ir.core import AffineLike, Block, Operation, Value, affines
from raptor.ir.ops import (
    Attr,
    BinaryOp,
    BlueprintEntry,
    BlueprintOp,
    ComputeOp,
    ConcatOp,
    EmptyOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    InsertSliceOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    ReduceOp,
    ReshapeOp,
    ReturnOp,
    TransposeOp,
    UnaryOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import INDEX, TensorType, Type


def _sizes_type(sizes: Sequence[int], dtype: str) -> TensorType:
    return TensorType(tuple(sizes), dtype)


class Builder:
    """Appends ops to `block`; every helper returns the new op's (first) result."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def add(self, op: Operation) -> Operation:
        op.own_results()
        self.block.ops.append(op)
        return op

    # ---- graph level --------------------------------------------------------
    def weight(self, symbol: str, type: TensorType, name: str | None = None) -> Value:
        v = Value(type, name)
        self.add(WeightOp(v, symbol))
        return v

    def graph_batch(self, lanes: int, inputs: Sequence[Value], result_types: Sequence[Type],
                    assembly: bool = False, names: Sequence[str | None] | None = None
                    ) -> tuple[GraphComputeBatchOp, Builder]:
        """A batch op whose body the returned builder fills; block args are
        `(lane, ins..., outs...)` (see `GraphComputeBatchOp.lane/in_args/out_args`)."""
        args = [Value(INDEX, "lane")] + [Value(v.type, "in") for v in inputs] + \
            [Value(t, "out") for t in result_types]
        outs = [Value(t, (names[i] if names else None)) for i, t in enumerate(result_types)]
        op = GraphComputeBatchOp(list(inputs), outs, Block(args), lanes=lanes, assembly=assembly)
        self.add(op)
        return op, Builder(op.body)

    def graph_compute(self, inputs: Sequence[Value], result_types: Sequence[Type],
                      cls: type[ComputeOp] = GraphComputeOp) -> tuple[ComputeOp, Builder]:
        args = [Value(v.type, "in") for v in inputs]
        outs = [Value(t) for t in result_types]
        op = cls(inputs=list(inputs), outs=outs, body=Block(args))
        self.add(op)
        return op, Builder(op.body)

    def blueprint(self, sources: Sequence[Value], result_type: TensorType,
                  entries: Sequence[BlueprintEntry], coverage: str = "complete",
                  conflict: str = "disjoint", name: str | None = None) -> Value:
        v = Value(result_type, name)
        self.add(BlueprintOp(list(sources), v, list(entries), coverage, conflict))
        return v

    def ret(self, values: Sequence[Value]) -> None:
        self.add(ReturnOp(list(values)))

    def yield_(self, values: Sequence[Value]) -> None:
        self.add(YieldOp(list(values)))

    # ---- lane body ------------------------------------------------------------
    def extract(self, src: Value, offsets: Sequence[AffineLike], sizes: Sequence[int],
                strides: Sequence[int] | None = None, type: TensorType | None = None) -> Value:
        st = src.type
        assert isinstance(st, TensorType)
        v = Value(type or _sizes_type(sizes, st.dtype))
        self.add(ExtractSliceOp(src, v, affines(offsets), tuple(sizes),
                                tuple(strides or [1] * len(sizes))))
        return v

    def insert(self, src: Value, dest: Value, offsets: Sequence[AffineLike], sizes: Sequence[int],
               strides: Sequence[int] | None = None) -> Value:
        v = Value(dest.type)
        self.add(InsertSliceOp(src, dest, v, affines(offsets), tuple(sizes),
                               tuple(strides or [1] * len(sizes))))
        return v

    def publish(self, src: Value, dest: Value, offsets: Sequence[AffineLike],
                sizes: Sequence[int], strides: Sequence[int] | None = None) -> None:
        self.add(ParallelInsertSliceOp(src, dest, affines(offsets), tuple(sizes),
                                       tuple(strides or [1] * len(sizes))))

    def mvm(self, weight: Value, vector: Value) -> Value:
        wt, vt = weight.type, vector.type
        assert isinstance(wt, TensorType) and isinstance(vt, TensorType)
        v = Value(TensorType((*vt.shape[:-1], wt.shape[1]), vt.dtype))
        self.add(MvmOp(weight, vector, v))
        return v

    def binary(self, op: str, lhs: Value, rhs: Value, type: TensorType | None = None) -> Value:
        v = Value(type or lhs.type)
        self.add(BinaryOp(op, lhs, rhs, v))
        return v

    def unary(self, op: str, src: Value, attrs: dict[str, Attr] | None = None) -> Value:
        v = Value(src.type)
        self.add(UnaryOp(op, src, v, dict(sorted((attrs or {}).items()))))
        return v

    def reduce(self, op: str, src: Value, dims: Sequence[int], type: TensorType) -> Value:
        v = Value(type)
        self.add(ReduceOp(op, src, v, tuple(dims)))
        return v

    def reshape(self, src: Value, type: TensorType) -> Value:
        if src.type == type:
            return src
        v = Value(type)
        self.add(ReshapeOp(src, v))
        return v

    def transpose(self, src: Value, perm: Sequence[int]) -> Value:
        st = src.type
        assert isinstance(st, TensorType)
        v = Value(TensorType(tuple(st.shape[i] for i in perm), st.dtype))
        self.add(TransposeOp(src, v, tuple(perm)))
        return v

    def concat(self, srcs: Sequence[Value], dim: int) -> Value:
        """Raises ValueError unless the sources are tensors of one rank that has `dim`."""
        ts = [s.type for s in srcs]
        tensors = [t for t in ts if isinstance(t, TensorType)]
        if not ts or len(tensors) != len(ts) or len({t.rank for t in tensors}) != 1 \
                or not 0 <= dim < tensors[0].rank:
            raise ValueError(f"cannot concatenate ({', '.join(map(str, ts))}) along "
                             f"dimension {dim}")
        shape = list(tensors[0].shape)
        shape[dim] = sum(t.shape[dim] or 0 for t in tensors)
        v = Value(TensorType(tuple(shape), tensors[0].dtype))
        self.add(ConcatOp(list(srcs), v, dim))
        return v

    def pad(self, src: Value, low: Sequence[int], high: Sequence[int], value: float = 0.0
            ) -> Value:
        st = src.type
        assert isinstance(st, TensorType)
        shape = tuple((d or 0) + lo + hi for d, lo, hi in zip(st.shape, low, high, strict=True))
        v = Value(TensorType(shape, st.dtype))
        self.add(PadOp(src, v, tuple(low), tuple(high), value))
        return v

    def empty(self, type: TensorType) -> Value:
        v = Value(type)
        self.add(EmptyOp(v))
        return v


def new_func(name: str, arg_types: Sequence[tuple[str, Type]], result_types: Sequence[Type]
             ) -> tuple[FuncOp, Builder]:
    args = [Value(t, n) for n, t in arg_types]
    f = FuncOp(name, Block(args), list(result_types))
    return f, Builder(f.body)
