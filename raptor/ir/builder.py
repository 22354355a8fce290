"""Builder API: passes create IR through this instead of wiring op fields by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class Builder:
    """Appends ops to `block`; every helper returns the new op's (first) result."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def add(self, op: Operation) -> Operation:
        op.own_results()
        self.block.ops.append(op)
        return op

    def _new(self, cls: type[Operation], type: Type, name: str | None = None, **fields: Any
             ) -> Value:
        """A `cls` op whose one result, named `name`, has `type`."""
        v = Value(type, name)
        self.add(cls(result=v, **fields))  # type: ignore[call-arg]
        return v

    # ---- graph level --------------------------------------------------------
    def weight(self, symbol: str, type: TensorType, name: str | None = None) -> Value:
        return self._new(WeightOp, type, name, symbol=symbol)

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
        op = cls(inputs=list(inputs), outs=[Value(t) for t in result_types],
                 body=Block([Value(v.type, "in") for v in inputs]))
        self.add(op)
        return op, Builder(op.body)

    def blueprint(self, sources: Sequence[Value], result_type: TensorType,
                  entries: Sequence[BlueprintEntry], coverage: str = "complete",
                  conflict: str = "disjoint", name: str | None = None) -> Value:
        return self._new(BlueprintOp, result_type, name, sources=list(sources),
                         entries=list(entries), coverage=coverage, conflict=conflict)

    def ret(self, values: Sequence[Value]) -> None:
        self.add(ReturnOp(list(values)))

    def yield_(self, values: Sequence[Value]) -> None:
        self.add(YieldOp(list(values)))

    # ---- lane body ------------------------------------------------------------
    def extract(self, src: Value, offsets: Sequence[AffineLike], sizes: Sequence[int],
                strides: Sequence[int] | None = None, type: TensorType | None = None) -> Value:
        return self._new(ExtractSliceOp, type or TensorType(tuple(sizes), src.tensor.dtype),
                         source=src, **_region(offsets, sizes, strides))

    def insert(self, src: Value, dest: Value, offsets: Sequence[AffineLike], sizes: Sequence[int],
               strides: Sequence[int] | None = None) -> Value:
        return self._new(InsertSliceOp, dest.type, source=src, dest=dest,
                         **_region(offsets, sizes, strides))

    def publish(self, src: Value, dest: Value, offsets: Sequence[AffineLike],
                sizes: Sequence[int], strides: Sequence[int] | None = None) -> None:
        self.add(ParallelInsertSliceOp(src, dest, **_region(offsets, sizes, strides)))

    def mvm(self, weight: Value, vector: Value) -> Value:
        wt, vt = weight.tensor, vector.tensor
        return self._new(MvmOp, TensorType((*vt.shape[:-1], wt.shape[1]), vt.dtype),
                         weight=weight, vector=vector)

    def binary(self, op: str, lhs: Value, rhs: Value, type: TensorType | None = None) -> Value:
        return self._new(BinaryOp, type or lhs.type, op=op, lhs=lhs, rhs=rhs)

    def unary(self, op: str, src: Value, attrs: dict[str, Attr] | None = None) -> Value:
        return self._new(UnaryOp, src.type, op=op, source=src,
                         attrs=dict(sorted((attrs or {}).items())))

    def reduce(self, op: str, src: Value, dims: Sequence[int], type: TensorType) -> Value:
        return self._new(ReduceOp, type, op=op, source=src, dims=tuple(dims))

    def reshape(self, src: Value, type: TensorType) -> Value:
        return src if src.type == type else self._new(ReshapeOp, type, source=src)

    def transpose(self, src: Value, perm: Sequence[int]) -> Value:
        st = src.tensor
        return self._new(TransposeOp, TensorType(tuple(st.shape[i] for i in perm), st.dtype),
                         source=src, perm=tuple(perm))

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
        return self._new(ConcatOp, TensorType(tuple(shape), tensors[0].dtype),
                         sources=list(srcs), dim=dim)

    def pad(self, src: Value, low: Sequence[int], high: Sequence[int], value: float = 0.0
            ) -> Value:
        st = src.tensor
        shape = tuple((d or 0) + lo + hi for d, lo, hi in zip(st.shape, low, high, strict=True))
        return self._new(PadOp, TensorType(shape, st.dtype), source=src, low=tuple(low),
                         high=tuple(high), value=value)

    def empty(self, type: TensorType) -> Value:
        return self._new(EmptyOp, type)


def _region(offsets: Sequence[AffineLike], sizes: Sequence[int],
            strides: Sequence[int] | None) -> dict[str, Any]:
    """The offsets, sizes and strides fields of a strided op (unit strides by default)."""
    return {"offsets": affines(offsets), "sizes": tuple(sizes),
            "strides": tuple(strides or [1] * len(sizes))}


def new_func(name: str, arg_types: Sequence[tuple[str, Type]], result_types: Sequence[Type]
             ) -> tuple[FuncOp, Builder]:
    args = [Value(t, n) for n, t in arg_types]
    f = FuncOp(name, Block(args), list(result_types))
    return f, Builder(f.body)
