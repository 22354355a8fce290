"""Reference interpreter of graph-level Spatial IR on numpy arrays.

Runs graph computes, every lane of a graph batch (canonical or logical-assembly form),
publications and Blueprint reconstruction, so each pass can be checked numerically
before any scheduling. Lane-body op semantics (`eval_op`) are shared with the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from raptor.ir.core import Affine, Block, Diagnostic, IRError, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    BinaryOp,
    BlueprintOp,
    ComputeOp,
    ConcatOp,
    EmptyOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    InsertSliceOp,
    LaneResultOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    PlanOp,
    ReduceOp,
    ReshapeOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    TransposeOp,
    UnaryOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import TensorType

Env = dict[Value, object]
PlanSemantics = Callable[[PlanOp, list[np.ndarray]], list[np.ndarray]]

PLAN_SEMANTICS: dict[str, PlanSemantics] = {}
"""Executors for `spat.plan.<kind>`, registered by the frontend (the IR does not know ONNX)."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=x.dtype)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.asarray(e / e.sum(axis=axis, keepdims=True), dtype=x.dtype)


def _num(op: UnaryOp, key: str) -> float:
    v = op.attrs[key]
    assert isinstance(v, int | float)
    return float(v)


def _unary(op: UnaryOp, x: np.ndarray) -> np.ndarray:
    f: dict[str, Callable[[], np.ndarray]] = {
        "relu": lambda: np.maximum(x, 0),
        "sigmoid": lambda: _sigmoid(x),
        "silu": lambda: x * _sigmoid(x),
        "tanh": lambda: np.tanh(x),
        "exp": lambda: np.exp(x),
        "neg": lambda: -x,
        "hard_swish": lambda: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
        "leaky_relu": lambda: np.where(x >= 0, x, x * _num(op, "alpha")),
        "clip": lambda: np.clip(x, _num(op, "min"), _num(op, "max")),
        "hard_sigmoid": lambda: np.clip(_num(op, "alpha") * x + _num(op, "beta"), 0.0, 1.0),
        "vscale": lambda: x * _num(op, "factor"),
        "softmax": lambda: _softmax(x, int(_num(op, "axis"))),
    }
    return np.asarray(f[op.op](), dtype=x.dtype)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "vadd": np.add, "vsub": np.subtract, "vmul": np.multiply, "vdiv": np.divide,
    "vmax": np.maximum, "vmin": np.minimum,
}


def slices(offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]
           ) -> tuple[slice, ...]:
    return tuple(slice(o, o + (n - 1) * s + 1 if n else o, s)
                 for o, n, s in zip(offsets, sizes, strides, strict=True))


def _ev(offsets: Sequence[Affine], idx: Mapping[Value, int]) -> list[int]:
    return [a.const if not a.terms else a.evaluate(dict(idx)) for a in offsets]


def _shape(v: Value) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return t.static_shape


def _arr(x: object) -> np.ndarray:
    assert isinstance(x, np.ndarray)
    return x


def eval_op(op: Operation, env: Env, idx: Mapping[Value, int]) -> bool:
    """Execute one value-producing lane-body op in `env`; False if the op is not one."""
    if isinstance(op, ExtractSliceOp):
        src = _arr(env[op.source])
        part = src[slices(_ev(op.offsets, idx), op.sizes, op.strides)]
        env[op.result] = part.reshape(_shape(op.result))
    elif isinstance(op, InsertSliceOp):
        dst = _arr(env[op.dest]).copy()
        dst[slices(_ev(op.offsets, idx), op.sizes, op.strides)] = \
            _arr(env[op.source]).reshape(op.sizes)
        env[op.result] = dst
    elif isinstance(op, MvmOp):
        w, v = _arr(env[op.weight]), _arr(env[op.vector])
        env[op.result] = np.asarray(v @ w, dtype=np.float32)
    elif isinstance(op, BinaryOp):
        r = _BINARY[op.op](_arr(env[op.lhs]), _arr(env[op.rhs]))
        env[op.result] = np.asarray(r, dtype=np.float32).reshape(_shape(op.result))
    elif isinstance(op, UnaryOp):
        env[op.result] = _unary(op, _arr(env[op.source]))
    elif isinstance(op, ReduceOp):
        x = _arr(env[op.source])
        red = x.sum(axis=op.dims) if op.op == "vreduce_sum" else x.max(axis=op.dims)
        env[op.result] = np.asarray(red, dtype=x.dtype).reshape(_shape(op.result))
    elif isinstance(op, ReshapeOp):
        env[op.result] = _arr(env[op.source]).reshape(_shape(op.result))
    elif isinstance(op, TransposeOp):
        env[op.result] = np.ascontiguousarray(np.transpose(_arr(env[op.source]), op.perm))
    elif isinstance(op, ConcatOp):
        env[op.result] = np.concatenate([_arr(env[s]) for s in op.sources], axis=op.dim)
    elif isinstance(op, PadOp):
        x = _arr(env[op.source])
        env[op.result] = np.pad(x, list(zip(op.low, op.high, strict=True)),
                                constant_values=op.value).astype(x.dtype)
    elif isinstance(op, EmptyOp):
        t = op.result.type
        assert isinstance(t, TensorType)
        env[op.result] = np.zeros(t.static_shape, dtype=t.np_dtype)
    elif isinstance(op, MaterializeLayoutOp):
        env[op.result] = env[op.source]
    elif isinstance(op, LaneResultOp):
        env[op.result] = _arr(env[op.source])[op.lane]
    else:
        return False
    return True


class Interpreter:
    """Executes functions of a module; weights come from `module.constants`."""

    def __init__(self, module: Module) -> None:
        self.module = module

    def error(self, op: Operation, rule: str, msg: str) -> IRError:
        return IRError([Diagnostic(op.loc, rule, msg)])

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
            func: FuncOp | None = None) -> list[np.ndarray]:
        f = func or self.module.main()
        args = bind_inputs(f, inputs)
        env: Env = dict(zip(f.args, args, strict=True))
        return self.run_block(f.body, env, {})

    def run_block(self, block: Block, env: Env, idx: Mapping[Value, int]) -> list[np.ndarray]:
        for op in block.ops:
            if isinstance(op, ReturnOp | YieldOp):
                return [_arr(env[v]) for v in op.values]
            self.step(op, env, idx)
        return []

    def step(self, op: Operation, env: Env, idx: Mapping[Value, int]) -> None:
        if eval_op(op, env, idx):
            return
        if isinstance(op, WeightOp):
            env[op.result] = self.weight(op)
        elif isinstance(op, GraphComputeBatchOp | ScheduledComputeBatchOp):
            for r, v in zip(op.outs, self.run_batch(op, [_arr(env[i]) for i in op.inputs]),
                            strict=True):
                env[r] = v
        elif isinstance(op, ComputeOp):
            inner: Env = dict(zip(op.body.args, [env[i] for i in op.inputs], strict=True))
            for r, v in zip(op.outs, self.run_block(op.body, inner, idx), strict=True):
                env[r] = v
        elif isinstance(op, BlueprintOp):
            env[op.result] = reconstruct(op, [_arr(env[s]) for s in op.sources])
        elif isinstance(op, PlanOp):
            sem = PLAN_SEMANTICS.get(op.kind)
            if sem is None:
                raise self.error(op, "INTERP-1", f"spat.plan.{op.kind} has no executable "
                                 "semantics here; lower the plans first")
            for r, v in zip(op.outs, sem(op, [_arr(env[i]) for i in op.inputs]), strict=True):
                env[r] = v
        else:
            raise self.error(op, "INTERP-1", f"{op.NAME} is not executable by the graph "
                             "interpreter (scheduled IR runs in the simulator)")

    def weight(self, op: WeightOp) -> np.ndarray:
        data = self.module.constants.get(op.symbol)
        t = op.result.type
        assert isinstance(t, TensorType)
        if data is None:
            raise self.error(op, "INTERP-2", f"weight @{op.symbol} has no data (pass --weights "
                             "FILE.npz or compile from ONNX)")
        if data.size != t.numel:
            raise self.error(op, "INTERP-2", f"weight @{op.symbol} holds {data.size} elements "
                             f"but is typed {t}")
        return data.reshape(t.static_shape).astype(t.np_dtype)

    def run_batch(self, op: ComputeOp, ins: list[np.ndarray]) -> list[np.ndarray]:
        lanes = op.lanes  # type: ignore[attr-defined]
        outs = []
        for r in op.outs:
            t = r.type
            assert isinstance(t, TensorType)
            outs.append(np.zeros(t.static_shape, dtype=t.np_dtype))
        lane_arg = op.body.args[0]
        out_args = op.body.args[1 + len(ins):]
        for lane in range(lanes):
            env: Env = dict(zip(op.body.args[1:], ins + outs, strict=True))
            idx = {lane_arg: lane}
            for inner in op.body.ops:
                if isinstance(inner, ParallelInsertSliceOp):
                    k = out_args.index(inner.dest)
                    region = slices(_ev(inner.offsets, idx), inner.sizes, inner.strides)
                    outs[k][region] = _arr(env[inner.source]).reshape(outs[k][region].shape)
                else:
                    self.step(inner, env, idx)
        return outs


def reconstruct(op: BlueprintOp, sources: list[np.ndarray]) -> np.ndarray:
    """Place every mapped fragment into the logical tensor (no arithmetic)."""
    t = op.result.type
    assert isinstance(t, TensorType)
    out = np.zeros(t.static_shape, dtype=t.np_dtype)
    for e in op.entries:
        src = sources[e.source]
        for s in e.slots():
            region = slices(e.offsets_at(s), e.sizes, e.strides)
            out[region] = src[s].reshape(out[region].shape)
    return out


def bind_inputs(f: FuncOp, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
                ) -> list[np.ndarray]:
    """Match inputs to arguments by name (`x` or `%x`) or position; check shapes."""
    if isinstance(inputs, Mapping):
        by_name = {k.lstrip("%"): v for k, v in inputs.items()}
        args = []
        for i, a in enumerate(f.args):
            if a.name in by_name:
                args.append(by_name[a.name])
            elif f"arg{i}" in by_name:
                args.append(by_name[f"arg{i}"])
            elif str(i) in by_name:
                args.append(by_name[str(i)])
            else:
                raise ValueError(f"no input for argument %{a.name} of @{f.sym_name} (given: "
                                 f"{', '.join(sorted(by_name)) or 'nothing'})")
    else:
        args = list(inputs)
        if len(args) != len(f.args):
            raise ValueError(f"@{f.sym_name} takes {len(f.args)} inputs, got {len(args)}")
    out = []
    for a, x in zip(f.args, args, strict=True):
        t = a.type
        assert isinstance(t, TensorType)
        arr = np.asarray(x)
        if t.is_static and arr.shape != t.static_shape:
            raise ValueError(f"input %{a.name} has shape {list(arr.shape)} but @{f.sym_name} "
                             f"expects {t}")
        out.append(arr.astype(t.np_dtype))
    return out
