"""Compile scheduled IR into per-core instruction lists for the event loop.

Everything that does not depend on simulated time is done here, once: op costs (from
`raptor.solver.costs`, the scheduler's own table), numpy closures for compute bodies,
which operands are received values (the only ones a core may have to wait for), the
crossbar tiles each core holds, channel pairing checks, and which stores each load must
wait for (a load reads shared memory only after every overlapping store elsewhere is done).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raptor.ir.core import Block, Operation, Value
from raptor.ir.interpreter import bind_inputs, slices
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    CoreBatchOp,
    CoreOp,
    EmptyOp,
    InsertSliceOp,
    LoadOp,
    MvmOp,
    ParallelInsertSliceOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import TensorType
from raptor.sim.errors import SimError
from raptor.sim.kernels import Env, Kernel, KernelError, info, kernel, resolve, type_key
from raptor.solver.costs import block_cost_ns, op_cost_ns
from raptor.target import Target

COMPUTE, SEND, RECV, LOAD, STORE = range(5)

Route = tuple[int, int, tuple[int, ...]]
"""A message's free-link transfer ns, per-link serialisation ns, and directed XY links."""
Box = tuple[tuple[int, int, int], ...]
"""A strided region: per dimension (first index, count, step)."""


@dataclass(eq=False, slots=True)
class Instr:
    """One core-level op, ready to run. Channel fields are used by SEND/RECV, memory
    fields by LOAD/STORE."""

    kind: int
    op: Operation
    label: str
    cost: int = 0
    fn: Kernel | None = None
    waits: tuple[Value, ...] = ()
    body_ops: int = 0
    peer: int = -1
    channel: int = -1
    chan: int = -1
    route: Route = (0, 0, ())
    value: Value | None = None
    nbytes: int = 0
    store_id: int = -1
    deps: tuple[int, ...] = ()
    where: str = ""
    payload: Callable[[Env], Any] | None = None
    """For a send of a region: what the message carries (a view of the value)."""

    def __post_init__(self) -> None:
        self.where = self.op.where()

    @property
    def name(self) -> str:
        return op_name(self.op)


def op_name(op: Operation) -> str:
    """The printed spelling (`pim.relu`, not the class-level `pim.unary`)."""
    kind = getattr(op, "op", None)
    return f"pim.{kind}" if isinstance(kind, str) and op.NAME.startswith("pim.") else op.NAME


@dataclass(eq=False)
class Program:
    """A whole scheduled module compiled for one target and one set of inputs."""

    cores: dict[int, list[Instr]]
    envs: dict[int, Env]
    tiles: dict[int, int]
    shared: dict[Value, np.ndarray]
    outputs: list[Value]
    channels: int
    weights: dict[Value, np.ndarray] = field(default_factory=dict)
    stores: list[tuple[int, Instr]] = field(default_factory=list)
    input_reads: int = 0
    """`pim.load`s of function inputs inside compute bodies (outside the memory queue)."""
    input_read_bytes: int = 0

    def output_data(self) -> list[np.ndarray]:
        """The returned buffers' final contents (copies)."""
        return [np.array(self.shared[v] if v in self.shared else self.weights[v])
                for v in self.outputs]


def value_name(v: Value) -> str:
    return f"%{v.name}" if v.name else "%<value>"


def _free_uses(op: Operation) -> list[Value]:
    """Operands of `op` and of its nested ops that are defined outside it."""
    regions = op.regions()
    if not regions:
        return op.operands()
    defined: set[Value] = set()
    used = op.operands()
    stack = list(regions)
    while stack:
        block = stack.pop()
        defined.update(block.args)
        for inner in block.ops:
            defined.update(inner.results())
            used.extend(inner.operands())
            stack.extend(inner.regions())
    return list(dict.fromkeys(v for v in used if v not in defined))


def xy_route(target: Target, src: int, dst: int, nbytes: int) -> Route:
    """Along the row to the destination column, then along the column; the link from core
    a to core b is keyed a * cores + b."""
    cols, n = target.mesh_cols, target.num_cores
    r, c = divmod(src, cols)
    rd, cd = divmod(dst, cols)
    links = []
    here = src
    while c != cd:
        c += 1 if cd > c else -1
        links.append(here * n + r * cols + c)
        here = r * cols + c
    while r != rd:
        r += 1 if rd > r else -1
        links.append(here * n + r * cols + c)
        here = r * cols + c
    ser = target.ns(-(-nbytes // target.flit_bytes) * target.flit_cycles)
    return target.transfer_ns(nbytes, src, dst), ser, tuple(links)


def _box(offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]) -> Box:
    return tuple(zip(offsets, sizes, strides, strict=True))


def _dim_overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    (o1, n1, s1), (o2, n2, s2) = a, b
    if n1 == 0 or n2 == 0 or o1 + (n1 - 1) * s1 < o2 or o2 + (n2 - 1) * s2 < o1:
        return False
    if n1 > n2:
        (o1, n1, s1), (o2, n2, s2) = (o2, n2, s2), (o1, n1, s1)
    last = o2 + (n2 - 1) * s2
    return any(o2 <= x <= last and (x - o2) % s2 == 0 for x in range(o1, o1 + n1 * s1, s1))


def overlap(a: Box, b: Box) -> bool:
    """Exact intersection of two strided boxes (dimensions are independent)."""
    return all(_dim_overlap(x, y) for x, y in zip(a, b, strict=True))


_SPECIAL_BODY_OPS = frozenset({WeightOp, YieldOp, ParallelInsertSliceOp, LoadOp})
"""Body ops compute() handles itself rather than through kernel()."""


class _Compiler:
    def __init__(self, module: Module, target: Target) -> None:
        self.module = module
        self.target = target
        self.weights: dict[Value, np.ndarray] = {}
        self.symbols: dict[Value, str] = {}
        self.shared: dict[Value, np.ndarray] = {}
        self.inputs: set[Value] = set()
        self.input_reads = 0
        self.input_read_bytes = 0
        self.op_costs: dict[tuple[object, ...], int] = {}
        self.store_boxes: list[tuple[int, int, Value, Box]] = []
        self.load_boxes: list[tuple[Instr, int, int, Value, Box]] = []
        self.stores: list[tuple[int, Instr]] = []
        self.routes: dict[tuple[int, int, int], Route] = {}

    def op_cost(self, op: Operation) -> int:
        """`op_cost_ns`, memoised by what it reads: the op class, its kind (`pim.relu`
        vs `pim.tanh`) and its operand and result types. Programs repeat a few hundred
        signatures hundreds of thousands of times; tests/sim checks the memo against
        `op_cost_ns` for every op of the test programs."""
        try:
            key = (type(op), getattr(op, "op", None),
                   *[(v.type.shape, v.type.dtype) for v in op.operands()], None,  # type: ignore[union-attr]
                   *[(v.type.shape, v.type.dtype) for v in op.results()])  # type: ignore[union-attr]
        except AttributeError:  # an index-typed value
            key = (type(op), getattr(op, "op", None), *map(type_key, op.operands()), None,
                   *map(type_key, op.results()))
        cost = self.op_costs.get(key)
        if cost is None:
            cost = self.op_costs[key] = op_cost_ns(op, self.target)
        return cost

    def route(self, src: int, dst: int, nbytes: int) -> Route:
        key = (src, dst, nbytes)
        if key not in self.routes:
            self.routes[key] = xy_route(self.target, src, dst, nbytes)
        return self.routes[key]

    # ---- func level ----------------------------------------------------------------
    def weight(self, op: WeightOp) -> np.ndarray:
        data = self.module.constants.get(op.symbol)
        t = info(op.result)
        if data is None:
            raise SimError(f"{op.where()}: weight @{op.symbol} has no data in the module")
        if data.size != math.prod(t.shape):
            raise SimError(f"{op.where()}: weight @{op.symbol} holds {data.size} elements but "
                           f"is typed {op.result.type}")
        return np.ascontiguousarray(data.reshape(t.shape), dtype=t.dtype)

    def compile(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> Program:
        func = self.module.main()
        try:
            args = bind_inputs(func, inputs)
        except ValueError as e:
            raise SimError(str(e)) from None
        self.shared.update(zip(func.args, args, strict=True))
        self.inputs.update(func.args)
        jobs: list[tuple[int, Block, dict[Value, int], Operation]] = []
        outputs: list[Value] = []
        for op in func.body.ops:
            if isinstance(op, WeightOp):
                self.weights[op.result] = self.weight(op)
                self.symbols[op.result] = op.symbol
            elif isinstance(op, AllocSharedOp):
                t = info(op.result)
                self.shared[op.result] = np.zeros(t.shape, t.dtype)
            elif isinstance(op, CoreOp):
                jobs.append((op.core, op.body, {}, op))
            elif isinstance(op, CoreBatchOp):
                lane = op.body.args[0]
                jobs.extend((c, op.body, {lane: i}, op) for i, c in enumerate(op.cores))
            elif isinstance(op, ReturnOp):
                outputs = list(op.values)
            else:
                raise SimError(f"{op.where()}: {op.NAME} at function level is not scheduled IR "
                               "(expected spat.weight, pim.alloc_shared, pim.core, "
                               "pim.core_batch, return)")
        for v in outputs:
            if v not in self.shared and v not in self.weights:
                raise SimError(f"returned {value_name(v)} is not a shared buffer, input or "
                               "weight")
        seen: dict[int, Operation] = {}
        for core, _, _, owner in jobs:
            if not 0 <= core < self.target.num_cores:
                raise SimError(f"{owner.where()}: core {core} is outside the "
                               f"{self.target.mesh_rows}x{self.target.mesh_cols} mesh of target "
                               f"{self.target.name}")
            if core in seen:
                raise SimError(f"{owner.where()}: core {core} has two programs (the other at "
                               f"{seen[core].where()})")
            seen[core] = owner
        cores: dict[int, list[Instr]] = {}
        envs: dict[int, Env] = {}
        tiles: dict[int, int] = {}
        for core, body, fixed, _ in sorted(jobs, key=lambda j: j[0]):
            cc = _CoreCompiler(self, core, fixed)
            cores[core] = cc.block(body)
            envs[core] = cc.env
            tiles[core] = len(cc.tiles)
        self.check_capacity(tiles)
        channels = self.check_channels(cores)
        self.link_loads()
        program = Program(cores, envs, tiles, self.shared, outputs, channels, self.weights,
                       self.stores)
        program.input_reads = self.input_reads
        program.input_read_bytes = self.input_read_bytes
        return program

    def check_capacity(self, tiles: dict[int, int]) -> None:
        cap = self.target.crossbars_per_core
        over = [f"core {c} holds {n} weight tiles but target {self.target.name} has {cap} "
                f"crossbars per core" for c, n in tiles.items() if n > cap]
        if over:
            raise SimError("crossbar capacity exceeded", over)

    def check_channels(self, cores: dict[int, list[Instr]]) -> int:
        """Every (source, destination, channel) needs as many sends as receives, paired in
        program order with equal types; anything else would hang or corrupt data. Numbers
        the channels (`Instr.chan`) and returns how many there are."""
        sends: dict[tuple[int, int, int], list[Instr]] = {}
        recvs: dict[tuple[int, int, int], list[Instr]] = {}
        for core, prog in cores.items():
            for ins in prog:
                if ins.kind == SEND:
                    sends.setdefault((core, ins.peer, ins.channel), []).append(ins)
                elif ins.kind == RECV:
                    recvs.setdefault((ins.peer, core, ins.channel), []).append(ins)
        lines = []
        keys = sorted(set(sends) | set(recvs))
        for idx, key in enumerate(keys):
            src, dst, ch = key
            ss, rr = sends.get(key, []), recvs.get(key, [])
            for ins in (*ss, *rr):
                ins.chan = idx
            for who, role in ((src, "source"), (dst, "destination")):
                if who not in cores:
                    lines.append(f"channel {ch} from core {src} to core {dst}: {role} core {who} "
                                 "has no program")
            if len(ss) != len(rr):
                at = ", ".join(f"send at {i.where}" for i in ss)
                at += (", " if at and rr else "") + ", ".join(f"receive at {i.where}" for i in rr)
                lines.append(f"channel {ch} from core {src} to core {dst}: {len(ss)} send(s), "
                             f"{len(rr)} receive(s) ({at})")
            for s, r in zip(ss, rr, strict=False):
                assert s.value is not None and r.value is not None
                sent = s.op.message_type if isinstance(s.op, ChannelSendOp) else s.value.type
                if sent != r.value.type:
                    lines.append(f"channel {ch} from core {src} to core {dst}: {s.where} sends "
                                 f"{sent} but {r.where} receives {r.value.type}")
        if lines:
            raise SimError("unmatched channels", lines)
        return len(keys)

    def link_loads(self) -> None:
        by_buffer: dict[Value, list[tuple[int, int, Box, int]]] = {}
        for sid, (core, pos, buf, box) in enumerate(self.store_boxes):
            by_buffer.setdefault(buf, []).append((core, pos, box, sid))
        for ins, core, pos, buf, box in self.load_boxes:
            ins.deps = tuple(sid for c, p, b, sid in by_buffer.get(buf, [])
                             if not (c == core and p > pos) and overlap(box, b))


class _CoreCompiler:
    """Compiles one core's program (a core-batch body once per core, lane fixed)."""

    def __init__(self, ctx: _Compiler, core: int, fixed: dict[Value, int]) -> None:
        self.ctx = ctx
        self.core = core
        self.fixed = fixed
        self.env: Env = dict(ctx.weights)
        self.received: set[Value] = set()
        self.origin: dict[Value, Value] = {}
        self.tiles: set[object] = set()

    def fail(self, op: Operation, msg: str) -> SimError:
        return SimError(f"{op.where()}: core {self.core}: {msg}")

    def block(self, body: Block) -> list[Instr]:
        out: list[Instr] = []
        for op in body.ops:
            try:
                ins = self.op(op, len(out))
            except KernelError as e:
                raise self.fail(op, str(e)) from None
            if ins is not None:
                out.append(ins)
        return out

    def waits(self, op: Operation, uses: list[Value] | None = None,
              inner_loads: set[Value] | None = None) -> tuple[Value, ...]:
        """The received values `op` reads (its free uses, computed here unless given)."""
        if uses is None:
            uses = _free_uses(op)
        if inner_loads is None:
            inner_loads = {o.buffer for o in op.walk()
                           if o is not op and isinstance(o, LoadOp)}
        for v in uses:
            if v in inner_loads and v in self.ctx.inputs:
                continue  # read-only function input, read by a pim.load inside the body
            if v in self.ctx.shared and not isinstance(op, LoadOp | StoreOp):
                raise self.fail(op, f"{op_name(op)} uses shared buffer {value_name(v)} "
                                "directly; read it with pim.load")
        return tuple(v for v in uses if v in self.received)

    def op(self, op: Operation, pos: int) -> Instr | None:
        tgt = self.ctx.target
        if isinstance(op, WeightOp):
            self.env[op.result] = self.ctx.weight(op)
            self.ctx.symbols[op.result] = op.symbol
            return None
        if isinstance(op, ChannelReceiveOp):
            self.received.add(op.result)
            return Instr(RECV, op, "spat.channel_receive", peer=op.core, channel=op.channel,
                         value=op.result, nbytes=info(op.result).nbytes)
        if isinstance(op, ChannelSendOp):
            msg_t = op.message_type
            assert isinstance(msg_t, TensorType)
            nbytes = msg_t.nbytes
            if not 0 <= op.core < tgt.num_cores:
                raise self.fail(op, f"send to core {op.core}, outside the mesh")
            payload = None
            if op.message is not None:  # a strided region of the value (DMA, no copy)
                offs = resolve(op.offsets, self.fixed)
                sl = slices([a.const for a in offs], op.sizes, op.strides)
                src, shape = op.value, msg_t.static_shape

                def payload(env: Env) -> Any:
                    return env[src][sl].reshape(shape)

            return Instr(SEND, op, "spat.channel_send", waits=self.waits(op), peer=op.core,
                         channel=op.channel, value=op.value, nbytes=nbytes, payload=payload,
                         route=self.ctx.route(self.core, op.core, nbytes))
        if isinstance(op, LoadOp | StoreOp):
            return self.memory(op, pos)
        if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
            return self.compute(op)
        if isinstance(op, ComputeOp | YieldOp | ReturnOp | ParallelInsertSliceOp
                      | AllocSharedOp | CoreOp | CoreBatchOp):
            raise self.fail(op, f"{op.NAME} is not allowed in a core program")
        self.track_tiles(op)
        fn = kernel(op, self.fixed, {})
        return Instr(COMPUTE, op, op_name(op), cost=self.ctx.op_cost(op), fn=fn,
                     waits=self.waits(op))

    def memory(self, op: LoadOp | StoreOp, pos: int) -> Instr:
        buf_v = op.buffer
        buf = self.ctx.shared.get(buf_v)
        if buf is None:
            raise self.fail(op, f"{value_name(buf_v)} is not a shared buffer (a function "
                            "argument or pim.alloc_shared)")
        box, sl = self.buffer_region(op, buf)
        cost = op_cost_ns(op, self.ctx.target)
        if isinstance(op, LoadOp):
            res, shape = op.result, info(op.result).shape

            def load(env: Env) -> None:
                env[res] = buf[sl].copy().reshape(shape)

            ins = Instr(LOAD, op, f"pim.load {value_name(buf_v)}", cost=cost, fn=load,
                        nbytes=info(res).nbytes)
            self.ctx.load_boxes.append((ins, self.core, pos, buf_v, box))
            return ins
        val, sizes = op.value, tuple(op.sizes)

        def store(env: Env) -> None:
            buf[sl] = env[val].reshape(sizes)

        ins = Instr(STORE, op, f"pim.store {value_name(buf_v)}", cost=cost, fn=store,
                    waits=self.waits(op), nbytes=info(val).nbytes,
                    store_id=len(self.ctx.store_boxes))
        self.ctx.store_boxes.append((self.core, pos, buf_v, box))
        self.ctx.stores.append((self.core, ins))
        return ins

    def buffer_region(self, op: LoadOp | StoreOp, buf: np.ndarray
                      ) -> tuple[Box, tuple[slice, ...]]:
        """The constant, in-bounds region of a shared buffer a load or store touches."""
        offs = resolve(op.offsets, self.fixed)
        if any(not a.is_const for a in offs):
            raise self.fail(op, f"{op.NAME} offsets must be constant on a core")
        box = _box([a.const for a in offs], op.sizes, op.strides)
        for d, (o, n, st) in enumerate(box):
            if n and (o < 0 or o + (n - 1) * st >= buf.shape[d]):
                raise self.fail(op, f"{op.NAME} dimension {d} [{o}, +{n}*{st}) is outside "
                                f"0..{buf.shape[d]} of {value_name(op.buffer)}")
        return box, slices([b[0] for b in box], op.sizes, op.strides)

    def input_load(self, op: LoadOp) -> Kernel:
        """A `pim.load` inside a compute body: the instance gathers its box of a function
        input as part of its own work (charged in the body's cost). Inputs are never
        written, so no store can race with it; other buffers must be loaded at core level,
        where loads wait for the stores they overlap."""
        if op.buffer not in self.ctx.inputs:
            raise self.fail(op, "pim.load inside a compute body may only read a function "
                            f"input, not {value_name(op.buffer)}")
        buf = self.ctx.shared[op.buffer]
        _, sl = self.buffer_region(op, buf)
        res, shape = op.result, info(op.result).shape
        self.ctx.input_reads += 1
        self.ctx.input_read_bytes += info(res).nbytes

        def load(env: Env) -> None:
            env[res] = buf[sl].copy().reshape(shape)

        return load

    def track_tiles(self, op: Operation) -> None:
        """A tile is the distinct weight reaching an MVM's weight operand on this core."""
        for inner in op.walk():
            if isinstance(inner, MvmOp):
                w = self.origin.get(inner.weight, inner.weight)
                self.tiles.add(self.ctx.symbols.get(w, w))

    def compute(self, op: ScheduledComputeOp | ScheduledComputeBatchOp) -> Instr:
        batch = isinstance(op, ScheduledComputeBatchOp)
        args = op.body.args[1:] if batch else op.body.args
        for a, v in zip(args, op.inputs, strict=False):
            self.origin[a] = self.origin.get(v, v)
        body = op.body
        # Fresh buffers (tensor.empty and insert_slice results) with their use counts: an
        # insert may write into its destination when that is fresh and used only by it.
        fresh: dict[Value, int] = {}
        if any(inner.regions() for inner in body.ops):  # not scheduled IR: kernel() rejects
            self.track_tiles(op)
            waits = self.waits(op)
            body_cost = block_cost_ns(body, self.ctx.target)
        else:
            # one pass for what track_tiles, _free_uses and block_cost_ns would find
            defined = set(body.args)
            used = list(op.operands())
            inner_loads: set[Value] = set()
            op_cost = self.ctx.op_cost
            body_cost = 0
            for inner in body.ops:
                results = inner.results()
                defined.update(results)
                operands = inner.operands()
                used.extend(operands)
                for v in operands:
                    if v in fresh:
                        fresh[v] += 1
                cls = type(inner)
                if cls is EmptyOp or cls is InsertSliceOp:
                    fresh[results[0]] = 0
                elif cls is MvmOp:
                    assert isinstance(inner, MvmOp)
                    w = self.origin.get(inner.weight, inner.weight)
                    self.tiles.add(self.ctx.symbols.get(w, w))
                elif cls is LoadOp:
                    assert isinstance(inner, LoadOp)
                    inner_loads.add(inner.buffer)
                body_cost += op_cost(inner)
            free = list(dict.fromkeys(v for v in used if v not in defined))
            waits = self.waits(op, free, inner_loads)
        lanes = op.lanes if isinstance(op, ScheduledComputeBatchOp) else 1
        cost = lanes * body_cost
        lane_map = {body.args[0]: lanes} if batch else {}
        kernels: list[Kernel] = []
        yields: list[Value] = []
        fixed = self.fixed
        for inner in body.ops:
            cls = type(inner)
            if cls in _SPECIAL_BODY_OPS:
                if isinstance(inner, WeightOp):
                    self.env[inner.result] = self.ctx.weight(inner)
                    continue
                if isinstance(inner, YieldOp):
                    yields = list(inner.values)
                    continue
                if isinstance(inner, ParallelInsertSliceOp) and not batch:
                    raise self.fail(inner, "spat.parallel_insert_slice outside a batch body")
                if isinstance(inner, LoadOp):
                    kernels.append(self.input_load(inner))
                    continue
            try:
                kernels.append(kernel(inner, fixed, lane_map,
                                      cls is InsertSliceOp and fresh.get(inner.dest) == 1))  # type: ignore[attr-defined]
            except KernelError as e:
                raise self.fail(inner, str(e)) from None
        label = f"{op.NAME} lanes({lanes})" if batch else op.NAME
        if isinstance(op, ScheduledComputeBatchOp):
            if yields:
                raise self.fail(op, "a scheduled batch body publishes with "
                                "spat.parallel_insert_slice, not spat.yield")
            fn = _batch_fn(op, kernels)
        else:
            if len(yields) != len(op.outs):
                raise self.fail(op, f"body yields {len(yields)} values for {len(op.outs)} "
                                "results")
            fn = _single_fn(op, kernels, yields)
        return Instr(COMPUTE, op, label, cost=cost, fn=fn, waits=waits,
                     body_ops=lanes * len(kernels))


class _Local(dict[Value, Any]):
    """A compute body's own values; reads of values defined outside fall back to the
    core's env. Intermediates die with the body instead of living in the core's env for
    the whole run (which kept every array ever computed and made each allocation fresh,
    page-faulting memory)."""

    __slots__ = ("outer",)

    def __init__(self, outer: Env) -> None:
        super().__init__()
        self.outer = outer

    def __missing__(self, key: Value) -> Any:
        return self.outer[key]


def _single_fn(op: ScheduledComputeOp, kernels: list[Kernel], yields: list[Value]) -> Kernel:
    binds = list(zip(op.body.args, op.inputs, strict=True))
    outs = list(zip(op.outs, yields, strict=True))

    def run(env: Env) -> None:
        local = _Local(env)
        for a, v in binds:
            local[a] = env[v]
        for k in kernels:
            k(local)
        for r, y in outs:
            env[r] = local[y]

    return run


def _batch_fn(op: ScheduledComputeBatchOp, kernels: list[Kernel]) -> Kernel:
    """Outs start as zeros; every lane publishes into them with parallel_insert_slice."""
    n = len(op.inputs)
    lane_arg = op.body.args[0]
    binds = list(zip(op.body.args[1:1 + n], op.inputs, strict=True))
    out_args = op.body.args[1 + n:]
    specs = [(a, info(r).shape, info(r).dtype)
             for a, r in zip(out_args, op.outs, strict=True)]
    results = list(zip(op.outs, out_args, strict=True))
    lanes = range(op.lanes)

    def run(env: Env) -> None:
        local = _Local(env)
        for a, v in binds:
            local[a] = env[v]
        for a, shape, dtype in specs:
            local[a] = np.zeros(shape, dtype)
        for lane in lanes:
            local[lane_arg] = lane
            for k in kernels:
                k(local)
        for r, a in results:
            env[r] = local[a]

    return run


def compile_program(module: Module, target: Target,
                    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> Program:
    """Check and compile `module`'s main function for `target` with bound inputs."""
    return _Compiler(module, target).compile(inputs)
