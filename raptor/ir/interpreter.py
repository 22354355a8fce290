"""Reference interpreter of Spatial IR on numpy arrays.

Runs graph IR (graph computes, every lane of a graph batch in canonical or logical-assembly
form, publications, Blueprint reconstruction), so each pass can be checked numerically
before any scheduling, and scheduled IR (core programs, channels, shared memory), so a
written `scheduled.*.spat` reproduces the simulator's outputs. The semantics of each
lane-body op are registered in `SEMANTICS` and shared with the simulator
(`eval_op`); the elementwise families take theirs from `ops.UNARY/BINARY/REDUCE`.
"""

from __future__ import annotations

from collections import ChainMap, deque
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from itertools import groupby
from typing import Any

import numpy as np

from raptor.ir.core import Affine, Block, Diagnostic, IRError, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    BINARY,
    REDUCE,
    AllocSharedOp,
    BinaryOp,
    BlueprintOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    ConcatOp,
    CoreBatchOp,
    CoreOp,
    EmptyOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    InsertSliceOp,
    LaneResultOp,
    LoadOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    ReduceOp,
    ReshapeOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    SignalOp,
    StoreOp,
    StreamOp,
    TransposeOp,
    UnaryOp,
    WaitOp,
    WeightOp,
    YieldOp,
)

Env = MutableMapping[Value, Any]
Step = tuple[Operation, dict[Value, int], bool, Env]
"""An op a core executes: the op, its variable values, whether inside a stream loop, the
environment it reads and defines in."""
Index = Mapping[Value, int]
Semantics = Callable[[Any, Env, Index], Any]
"""`fn(op, env, idx)`: the value of the op's result (None for a store, which writes)."""


def slices(offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]
           ) -> tuple[slice, ...]:
    return tuple(slice(o, o + (n - 1) * s + 1 if n else o, s)
                 for o, n, s in zip(offsets, sizes, strides, strict=True))


def _ev(offsets: Sequence[Affine], idx: Index) -> list[int]:
    return [a.const if not a.terms else a.evaluate(dict(idx)) for a in offsets]


def _region(op: Any, idx: Index) -> tuple[slice, ...]:
    return slices(_ev(op.offsets, idx), op.sizes, op.strides)


def _insert(op: InsertSliceOp, env: Env, idx: Index) -> np.ndarray:
    dst = env[op.dest].copy()
    dst[_region(op, idx)] = env[op.source].reshape(op.sizes)
    return dst


def _store(op: StoreOp, env: Env, idx: Index) -> None:
    env[op.buffer][_region(op, idx)] = env[op.value].reshape(op.sizes)


def zeros(v: Value) -> np.ndarray:
    """A zero array of `v`'s static tensor type."""
    return np.zeros(v.shape, dtype=v.tensor.np_dtype)


SEMANTICS: dict[type[Operation], Semantics] = {
    ExtractSliceOp: lambda op, env, idx: env[op.source][_region(op, idx)].reshape(op.result.shape),
    InsertSliceOp: _insert,
    LoadOp: lambda op, env, idx: env[op.buffer][_region(op, idx)].copy().reshape(
        op.result.shape),
    StoreOp: _store,
    MvmOp: lambda op, env, idx: np.asarray(env[op.vector] @ env[op.weight], dtype=np.float32),
    BinaryOp: lambda op, env, idx: np.asarray(BINARY[op.op](env[op.lhs], env[op.rhs]),
                                              dtype=np.float32).reshape(op.result.shape),
    UnaryOp: lambda op, env, idx: np.asarray(op.spec.fn(env[op.source], **op.numbers()),
                                             dtype=env[op.source].dtype),
    ReduceOp: lambda op, env, idx: np.asarray(REDUCE[op.op](env[op.source], op.dims),
                                              dtype=env[op.source].dtype).reshape(op.result.shape),
    ReshapeOp: lambda op, env, idx: env[op.source].reshape(op.result.shape),
    TransposeOp: lambda op, env, idx: np.transpose(env[op.source], op.perm),
    ConcatOp: lambda op, env, idx: np.concatenate([env[s] for s in op.sources], axis=op.dim),
    PadOp: lambda op, env, idx: np.pad(env[op.source], list(zip(op.low, op.high, strict=True)),
                                       constant_values=op.value).astype(env[op.source].dtype),
    EmptyOp: lambda op, env, idx: zeros(op.result),
    AllocSharedOp: lambda op, env, idx: zeros(op.result),
    MaterializeLayoutOp: lambda op, env, idx: env[op.source],
    LaneResultOp: lambda op, env, idx: env[op.source][op.lane],
}
"""Lane-body op class → its numpy semantics (a transpose is a view, as in the simulator,
so that matrix products see the same memory layout and round the same way)."""


def eval_op(op: Operation, env: Env, idx: Index) -> bool:
    """Execute one lane-body op in `env`; False if it has no registered semantics."""
    fn = SEMANTICS.get(op.__class__)
    if fn is None:
        return False
    value = fn(op, env, idx)
    if value is not None:
        env[op.results()[0]] = value
    return True


Box = tuple[tuple[int, int, int], ...]


def _overlap(a: Box, b: Box) -> bool:
    """Whether two strided boxes (first, count, step per dimension) share an element."""
    return all(set(range(o1, o1 + n1 * s1, s1)) & set(range(o2, o2 + n2 * s2, s2))
               for (o1, n1, s1), (o2, n2, s2) in zip(a, b, strict=True))


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

    def run_block(self, block: Block, env: Env, idx: Index) -> list[np.ndarray]:
        for cores, ops in groupby(block.ops, lambda o: isinstance(o, CoreOp | CoreBatchOp)):
            if cores:  # consecutive core programs run together
                self.run_cores(list(ops), env)  # type: ignore[arg-type]
                continue
            for op in ops:
                if isinstance(op, ReturnOp | YieldOp):
                    return [np.asarray(env[v]) for v in op.values]
                self.step(op, env, idx)
        return []

    def step(self, op: Operation, env: Env, idx: Index) -> None:
        if eval_op(op, env, idx):
            return
        if isinstance(op, WeightOp):
            env[op.result] = self.weight(op)
        elif isinstance(op, ComputeOp):
            ins = [env[i] for i in op.inputs]
            outs = self.run_batch(op, ins, env, idx) if isinstance(
                op, GraphComputeBatchOp | ScheduledComputeBatchOp) else self.run_block(
                op.body, ChainMap(dict(zip(op.body.args, ins, strict=True)), env), idx)
            env.update(zip(op.outs, outs, strict=True))
        elif isinstance(op, BlueprintOp):
            env[op.result] = reconstruct(op, [env[s] for s in op.sources])
        else:
            what = "lower the plans first" if op.NAME == "spat.plan" else \
                "it runs only inside pim.core programs"
            raise self.error(op, "INTERP-1", f"{op.name} is not executable here ({what})")

    def weight(self, op: WeightOp) -> np.ndarray:
        data = self.module.constants.get(op.symbol)
        t = op.result.tensor
        if data is None:
            raise self.error(op, "INTERP-2", f"weight @{op.symbol} has no data (pass --weights "
                             "FILE.npz or compile from ONNX)")
        if data.size != t.numel:
            raise self.error(op, "INTERP-2", f"weight @{op.symbol} holds {data.size} elements "
                             f"but is typed {t}")
        return data.reshape(t.static_shape).astype(t.np_dtype)

    def run_batch(self, op: GraphComputeBatchOp | ScheduledComputeBatchOp, ins: list[Any],
                  env: Env, idx: Index) -> list[np.ndarray]:
        """Every lane in order; each publishes into the zero-initialised results."""
        outs = [zeros(r) for r in op.outs]
        out_args = op.body.args[1 + len(ins):]
        for lane in range(op.lanes):
            inner = ChainMap(dict(zip(op.body.args[1:], ins + outs, strict=True)), env)
            at = {**idx, op.body.args[0]: lane}
            for o in op.body.ops:
                if isinstance(o, ParallelInsertSliceOp):
                    k = out_args.index(o.dest)
                    region = _region(o, at)
                    outs[k][region] = inner[o.source].reshape(outs[k][region].shape)
                else:
                    self.step(o, inner, at)
        return outs

    # ---- scheduled IR -------------------------------------------------------------
    def run_cores(self, programs: list[CoreOp | CoreBatchOp], env: Env) -> None:
        """Run core programs as the machine does, in any order the data allows. A receive
        is posted where it stands and never blocks; the first op that reads its value waits
        for the matching send (channels are FIFO per source, destination and channel). A
        core-level `pim.load` waits for every overlapping `pim.store` of another core,
        except inside a `pim.stream` loop, whose iterations (unrolled here, `%n` and `%s`
        bound) synchronize through counters: `pim.wait` blocks until its counter reaches
        the threshold, `pim.signal` adds one."""
        runs: list[tuple[int, list[Step]]] = []
        for prog in programs:
            lanes = [{}] if isinstance(prog, CoreOp) else \
                [{prog.body.args[0]: i} for i in range(len(prog.cores))]
            for core, at in zip(prog.cores, lanes, strict=True):
                runs.append((core, _unrolled(prog.body.ops, at, ChainMap({}, env))))
        stores: dict[Value, list[tuple[int, int, Box]]] = {}
        for r, (_, ops) in enumerate(runs):
            for pos, (op, at, looped, _) in enumerate(ops):
                if isinstance(op, StoreOp) and not looped:
                    stores.setdefault(op.buffer, []).append((r, pos, _box(op, at)))
        done: set[tuple[int, int]] = set()
        Key = tuple[int, int, int]
        queues: dict[Key, deque[np.ndarray]] = {}
        posted: dict[Key, deque[tuple[ChannelReceiveOp, Env]]] = {}
        unfilled: dict[tuple[Value, int], ChannelReceiveOp] = {}
        """Received values (with the id of their inference's environment) whose send has
        not come yet, with their receive."""

        def deliver(key: Key) -> None:
            q, waiting = queues.get(key), posted.get(key)
            while q and waiting:
                recv, renv = waiting.popleft()
                renv[recv.result] = q.popleft().reshape(recv.result.shape)
                unfilled.pop((recv.result, id(renv)), None)

        pcs = [0] * len(runs)
        while True:
            moved = False
            for r, (core, ops) in enumerate(runs):
                while pcs[r] < len(ops):
                    op, at, looped, cenv = ops[pcs[r]]
                    if isinstance(op, ChannelReceiveOp):
                        key = (op.core, core, op.channel)
                        posted.setdefault(key, deque()).append((op, cenv))
                        unfilled[(op.result, id(cenv))] = op
                        deliver(key)
                    elif any((v, id(cenv)) in unfilled for v in op.operands()) or (
                            isinstance(op, LoadOp) and not looped and any(
                                s != r and (s, p) not in done and _overlap(_box(op, at), b)
                                for s, p, b in stores.get(op.buffer, ()))) or (
                            isinstance(op, WaitOp) and int(cenv[op.counters][op.index])
                            < _ev(op.threshold, at)[0]):
                        break  # data not received yet, a store it reads still to come, or
                        # a counter short of its threshold
                    elif isinstance(op, ChannelSendOp):
                        value = cenv[op.value]
                        if op.message is not None:
                            value = value[_region(op, at)]
                        key = (core, op.core, op.channel)
                        queues.setdefault(key, deque()).append(np.array(value))
                        deliver(key)
                    elif isinstance(op, SignalOp):
                        cenv[op.counters][op.index] += 1
                    elif not isinstance(op, WaitOp):
                        self.step(op, cenv, at)
                        if isinstance(op, StoreOp):
                            done.add((r, pcs[r]))
                    pcs[r] += 1
                    moved = True
            if all(pc == len(ops) for pc, (_, ops) in zip(pcs, runs, strict=True)) \
                    and not unfilled:
                return
            if not moved:
                stuck = []
                for r, (core, ops) in enumerate(runs):
                    if pcs[r] < len(ops):
                        op, at, _, cenv = ops[pcs[r]]
                        got = [unfilled[(v, id(cenv))] for v in op.operands()
                               if (v, id(cenv)) in unfilled]
                        why = f" waits for %{got[0].result.name} from core {got[0].core} " \
                            f"channel {got[0].channel}" if got else ""
                        if isinstance(op, WaitOp):
                            why = (f" waits for %{op.counters.name}[{op.index}] to reach "
                                   f"{_ev(op.threshold, at)[0]} (it is "
                                   f"{int(cenv[op.counters][op.index])})")
                        stuck.append(f"core {core} at {op.where()} ({op.name}){why}")
                stuck += [f"the receive at {recv.where()} is never sent"
                          for waiting in posted.values() for recv, _ in waiting
                          if all(pc == len(ops) for pc, (_, ops)
                                 in zip(pcs, runs, strict=True))][:8]
                raise IRError([Diagnostic(programs[0].loc, "INTERP-3", "the core programs "
                                          f"deadlock: {'; '.join(stuck)}")])


def _unrolled(ops: list[Operation], at: dict[Value, int], env: Env) -> list[Step]:
    """A core program as the sequence it executes: (op, variable values, inside a stream
    loop, the environment it reads and defines in), each `pim.stream` body repeated per
    iteration, each op of it on its inference (`StreamOp`) with `%n` and `%s` bound and an
    environment of that inference's values over the core's `env`."""
    out: list[Step] = []
    for op in ops:
        if isinstance(op, StreamOp):
            body = list(op.staged())
            inner = [{**at, op.inference: n, op.slot: n % op.ring} for n in range(op.count)]
            envs = [ChainMap({}, env) for _ in range(op.count)]
            for k in range(op.count + op.lags):
                out.extend((o, inner[k - lag], True, envs[k - lag]) for lag, o in body
                           if 0 <= k - lag < op.count)
        else:
            out.append((op, at, False, env))
    return out


def _box(op: LoadOp | StoreOp, at: Index) -> Box:
    return tuple(zip(_ev(op.offsets, at), op.sizes, op.strides, strict=True))


def reconstruct(op: BlueprintOp, sources: list[np.ndarray]) -> np.ndarray:
    """Place every mapped fragment into the logical tensor (no arithmetic)."""
    out = zeros(op.result)
    for e in op.entries:
        src = sources[e.source]
        for s in e.slots():
            region = slices(e.offsets_at(s), e.sizes, e.strides)
            out[region] = src[s].reshape(out[region].shape)
    return out


class InputBindError(ValueError):
    """Inputs that do not fit the function's arguments: the user's input, not Raptor's bug."""


def bind_inputs(f: FuncOp, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
                ) -> list[np.ndarray]:
    """Match inputs to arguments by name (`x` or `%x`) or position; check shapes."""
    if isinstance(inputs, Mapping):
        by_name = {k.lstrip("%"): v for k, v in inputs.items()}
        args = []
        for i, a in enumerate(f.args):
            key = next((k for k in (a.name, f"arg{i}", str(i)) if k in by_name), None)
            if key is None:
                raise InputBindError(f"no input for argument %{a.name} of @{f.sym_name} (given: "
                                 f"{', '.join(sorted(by_name)) or 'nothing'})")
            args.append(by_name[key])
    else:
        args = list(inputs)
        if len(args) != len(f.args):
            raise InputBindError(f"@{f.sym_name} takes {len(f.args)} inputs, got {len(args)}")
    out = []
    for a, x in zip(f.args, args, strict=True):
        t = a.tensor
        arr = np.asarray(x)
        if t.is_static and arr.shape != t.static_shape:
            raise InputBindError(f"input %{a.name} has shape {list(arr.shape)} but @{f.sym_name} "
                             f"expects {t}")
        out.append(arr.astype(t.np_dtype))
    return out
