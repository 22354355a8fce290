"""MergeComputeNodes: a schedule of graph instances becomes scheduled IR.

Each core gets a `pim.core` program. An instance becomes a `spat.scheduled_compute` whose body
first gathers its inputs — `pim.load` of the box it reads from a function argument, or the
received/forwarded fragments inserted into a local buffer of the box it reads — and then runs
the graph lane body with the lane fixed. Fragments that feed function results are stored into
`pim.alloc_shared` buffers. Cross-core fragments travel by `spat.channel_send/receive`, one
message per (fragment, consumer core); same-core fragments are forwarded as SSA values.

Equivalence classes: lanes of one graph batch that run back to back on a core (each starts
when the previous ends, nothing in between, only the last one sends) become one
`spat.scheduled_compute_batch`: their inputs are gathered once into a buffer covering all of
them (shared halo rows are copied once, not per lane), the graph lane body runs per scheduled
lane, and `spat.lane_result` exposes each lane's fragment as a view. Merging never delays a
message or a consumer; it can only remove copies, so a merged program is never slower than
the estimate in the ideal simulation (`merge=False` gives the one-instance-per-compute form
whose ideal simulation equals the estimate exactly).

Communication order. Without a `Flow`, every receive is posted at the start of its core's
program (posting costs nothing and never blocks; the consumer waits for the data), so a
rendezvous send always finds its receive posted and never waits for its partner: blocking
cannot cascade from core to core, and since nothing but a compute waits (for data whose
producer comes earlier in the dependency order) no cycle of waits can form, whatever the
actual timing. Each producer's sends follow it directly, the most urgent first (the
earliest planned start of a reader on the destination core, then the destination) — the
rule of `raptor.solver.comm.send_order`, so the scheduler's communication model predicts
this program. Channel numbers follow the producers' planned ends.

But a posted receive's buffer occupies local memory until its last reader, and a program
that posts everything at the start can need many times a core's memory (ResNet-18: up to
850 KB per core). With a `Flow` (from `raptor.solver.comm.replay` over a graph with a
memory model), each receive is posted, and each send made, at the point between two
computes where the flow-controlled model placed it: receives while they fit, sends held
while the receiver has no room. That model ran the same program to completion, and a
program of blocking sends, non-blocking posts and waiting computes either completes
whatever the timing or never does (each wait is on one partner reaching one place in its
program), so this one cannot deadlock; channel numbers then follow the model's send order.
Under pimsim-nn's protocol the flow may also merge the messages one core sends another at
one point (`Flow.merged`): the sender copies their parts into one flat buffer
(`tensor.concat`) and sends it in the first part's place, and each reader takes its part's
range of the one receive (views), so one handshake carries them all.

The graph invariant is not imposed on scheduled values (spec, "Scheduled IR exclusion"):
fragments and Blueprint metadata are resolved here, from the projection, before the graph
owners are gone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TypeVar

from raptor.ir.core import Affine, Block, Location, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    ConcatOp,
    CoreOp,
    EmptyOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    InsertSliceOp,
    LaneResultOp,
    LoadOp,
    ParallelInsertSliceOp,
    ReshapeOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import INDEX, TensorType, Type
from raptor.passes.projection import Box, InputUse, Instance, Piece, Projection

OpT = TypeVar("OpT", bound=Operation)
CropKey = tuple[tuple[int, ...], tuple[int, ...]]
"""(offsets inside the producer's whole fragment, sizes) of a cropped piece."""
Message = tuple[int, int, int, CropKey | None]
"""(producer instance, result, consumer core, crop): one channel."""
Key = tuple[int, int, int]
"""Where ops go in a core's program: (planned time, phase, instance or sequence)."""
Events = list[tuple[Key, list[Operation]]]


@dataclass
class MergedRun:
    """A run of lanes materialized as one batch (`Materializer.merge_runs`)."""

    lanes: list[int]
    """Its instances, in lane order."""
    compute: list[Operation]
    """The ops that gather the union of the lanes' inputs, then the batch: what runs
    before the first lane's stores (each lane's stores follow, in lane order)."""


def crop_key(p: Piece) -> CropKey | None:
    return None if p.crop is None else (p.crop, p.sizes)


def owned(op: OpT, loc: Location | None = None) -> OpT:
    """`op`, made the owner of its results (at `loc`)."""
    op.loc = loc
    op.own_results()
    return op


def _published(op: GraphComputeBatchOp) -> list[Value]:
    """Per result of a batch, the fragment its lane body publishes."""
    pubs = {p.dest: p.source for p in op.body.ops if isinstance(p, ParallelInsertSliceOp)}
    return [pubs[out] for out in op.out_args]


def _slice(whole: Value, part: Value, offsets: Sequence[int]) -> ExtractSliceOp:
    """The part of a whole local value at `offsets`, as large as `part` (one copy)."""
    sizes = part.tensor.static_shape
    return owned(ExtractSliceOp(whole, part, tuple(map(Affine, offsets)), sizes, (1,) * len(sizes)))


def _insert(ops: list[Operation], src: Value, buf: Value, p: Piece, box: Box) -> Value:
    """Appends to `ops` the insert of piece `p` (its value `src`) into `buf`, a buffer
    spanning `box`; returns the filled buffer."""
    offs = tuple(Affine(o - lo) for o, lo in zip(p.offsets, box.lo, strict=True))
    op = owned(InsertSliceOp(src, buf, Value(buf.type, "buf"), offs, p.sizes, p.strides))
    ops.append(op)
    return op.result


def _cropped(ops: list[Operation], whole: Value, p: Piece | Part | None) -> Value:
    """`whole`, or the part of it piece `p` reads (one copy, appended to `ops`), or the
    range of a merged message `p` is (two views)."""
    if p is None:
        return whole
    if isinstance(p, Part):
        n = p.type.numel
        flat = owned(ExtractSliceOp(whole, Value(TensorType((n,), p.type.dtype), "part"),
                                    (Affine(p.offset),), (n,), (1,)))
        ops.extend((flat, owned(ReshapeOp(flat.result, Value(p.type, "part")))))
        return ops[-1].results()[0]
    assert p.crop is not None
    ops.append(_slice(whole, Value(p.fragment, "part"), p.crop))
    return ops[-1].results()[0]


@dataclass
class Flow:
    """Where each message's receive and send go, as a flow-controlled communication model decided
    (`raptor.solver.comm.replay`). A *point* of a core program follows the compute (and stores) of
    an instance and precedes the next compute; the receives of a point come before its sends."""

    posts: Mapping[Message, int]
    """Message -> the instance after whose compute its receive is posted (-1: at the
    program's start)."""
    sends: Mapping[Message, tuple[int, int]]
    """Message -> (instance after whose compute it is sent, rank): a core sends in rank
    order, and the rank is the message's channel number."""
    tight: frozenset[int] = frozenset()
    """Cores whose memory was planned instance by instance: their lanes are not merged
    into scheduled batches (a batch gathers every lane's inputs at once and keeps every
    lane's result until the last is read)."""
    merged: Mapping[Message, Message] = field(default_factory=dict)
    """Message -> the message it travels in, when that is another's (under pimsim-nn's
    protocol, `raptor.solver.blocking.merge_messages`): the sender packs the parts, in
    rank order, into one flat buffer (`tensor.concat`) and sends it at the first part's
    place and channel; each reader takes its part's range of the one receive (views)."""
    yx: frozenset[Message] = frozenset()
    """Messages that take their YX route (the send's ``yx``), as the communication model
    chose them (`raptor.noc.Network.yx_sooner`)."""


@dataclass(frozen=True)
class Part:
    """Where a message's value lies in the merged message it travels in: from element
    `offset` of the flat buffer, as `type`."""

    offset: int
    type: TensorType


@dataclass
class LaneInputs:
    """The inputs of a run of lanes merged into one batch: the ops that gather them, the
    buffers in input order, the buffer standing for each input index, and the offset of
    each gathered block argument's box (its lanes' indices shift by it)."""

    ops: list[Operation] = field(default_factory=list)
    ins: list[Value] = field(default_factory=list)
    local: dict[int, Value] = field(default_factory=dict)
    shift: dict[Value, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class ScheduleView:
    """What materialization needs of a schedule: placement and estimated times per task."""

    core_of: Sequence[int]
    start: Sequence[int]
    end: Sequence[int]


def _names(op: ComputeOp, index: int) -> bool:
    """Whether the body of `op` names its input `index` (a slice of no elements does: a
    window that reads only padding), so the input needs a local value even when empty."""
    arg = (op.in_args if isinstance(op, GraphComputeBatchOp) else op.body.args)[index]
    return any(arg in inner.operands() for inner in op.body.walk() if inner is not op)


def _box_type(box: Box, like: TensorType) -> TensorType:
    return TensorType(box.sizes, like.dtype)


def _clone(op: Operation, vmap: dict[Value, Value], lane: Value | None, new_lane: Affine,
           shift: dict[Value, tuple[int, ...]]) -> Operation:
    """Copy a lane-body op: remap values, replace the graph lane by `new_lane` (a constant for
    one instance, an affine function of the scheduled lane in a merged batch) and re-base
    slices of gathered inputs (`shift`, keyed by the new values) on their local box."""
    for r in op.results():
        vmap[r] = Value(r.type, r.name)
    cls = type(op)
    kinds, names = _cloned(cls)
    fields = {name: getattr(op, name) for name in names}
    for name, kind in kinds:
        cur = fields[name]
        if kind == "value":
            fields[name] = vmap.get(cur, cur)
        elif kind == "values":
            fields[name] = [vmap.get(x, x) for x in cur]
        elif cur:  # affines
            offs = []
            for a in cur:
                if lane is None or all(v is not lane for _, v in a.terms):
                    offs.append(a)  # the same offset (an Affine is immutable)
                    continue
                k = a.coef(lane)
                rest = tuple((c, v) for c, v in a.terms if v is not lane)
                offs.append(Affine(a.const + k * new_lane.const,
                                   rest + tuple((k * c, v) for c, v in new_lane.terms if k)))
            src = vmap.get(getattr(op, "source", None))  # type: ignore[arg-type]
            if isinstance(op, ExtractSliceOp) and src in shift:
                offs = [Affine(a.const - lo, a.terms) for a, lo in zip(offs, shift[src],
                                                                      strict=True)]
            fields[name] = tuple(offs)
    return owned(cls(**fields), op.loc)


def _cloned(cls: type[Operation]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """`_clone`'s view of an op class: the fields it remaps ("value", "values" or
    "affines"), and every field, in declaration order (its constructor's keywords)."""
    got = _CLONED.get(cls)
    if got is None:
        kinds = cls.DEF.kinds
        got = _CLONED[cls] = (tuple((name, _REMAP[kind]) for name, kind in kinds.items()
                                    if kind in _REMAP), tuple(kinds))
    return got


_REMAP = {"operand": "value", "result": "value", "operands": "values", "results": "values",
          "affines": "affines"}
"""`_cloned`: the field kinds (`raptor.ir.opdef`) that hold values or offsets."""
_CLONED: dict[type[Operation], tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}


class Materializer:
    def __init__(self, module: Module, proj: Projection, outputs: list[list[Piece]],
                 sched: ScheduleView, merge: bool, flow: Flow | None = None) -> None:
        self.merge = merge
        self.flow = flow or Flow({}, {})  # none: every receive posted at the start
        self.anchored: dict[int, tuple[list[ChannelReceiveOp],
                                       list[tuple[int, list[Operation]]]]] = {}
        """Instance -> the receives posted and the (ranked) sends made at the point after
        its compute (a send with the ops that pack a merged message before it)."""
        self.src = module
        self.func = module.main()
        self.proj = proj
        self.s = sched
        args = [Value(self.io_type(a.type), a.name) for a in self.func.args]
        self.argmap = dict(zip(self.func.args, args, strict=True))
        self.new_func = FuncOp(self.func.sym_name, Block(args),
                               [self.io_type(t) for t in self.func.result_types])
        self.top: list[Operation] = []
        self.weights: dict[Value, Value] = {}
        self.programs: dict[int, Events] = {}
        # fragment (producer, result) as seen on a core (whole, or the crop that was sent)
        self.local: dict[tuple[int, int, int, CropKey | None], Value] = {}
        self.buffers: list[Value] = []
        self.stores: dict[int, list[tuple[int, Piece]]] = {}
        for k, pieces in enumerate(outputs):
            for p in pieces:
                self.stores.setdefault(p.producer, []).append((k, p))
        self.events: dict[int, list[Operation]] = {}
        self.parts: dict[Message, Part] = {}
        """Messages that travel inside a merged one: where they lie in it."""
        self.types: dict[Message, TensorType] = {}
        """Per message, the type of what travels."""
        self.merged_runs: list[MergedRun] = []
        """The runs merged into one batch (`merge_runs`)."""

    def weight(self, v: Value) -> Value:
        got = self.weights.get(v)
        if got is None:
            owner = v.owner
            assert isinstance(owner, WeightOp)
            got = Value(v.type, v.name)
            self.top.append(owned(WeightOp(got, owner.symbol)))
            self.weights[v] = got
        return got

    def emit(self, core: int, key: Key, ops: list[Operation]) -> None:
        self.programs.setdefault(core, []).append((key, ops))

    # -------------------------------------------------------------- messages
    def plan_messages(self) -> None:
        """One message per (producer fragment, consumer core), numbered by the producer's
        planned end, then most urgent first (see the module docstring)."""
        urgency: dict[Message, int] = {}
        for inst in self.proj.instances:
            q = self.s.core_of[inst.id]
            start = self.s.start[inst.id]
            for use in inst.uses:
                for p in use.pieces:
                    if self.s.core_of[p.producer] != q and self.by_channel(p, inst.id):
                        m = (p.producer, p.result, q, crop_key(p))
                        urgency[m] = min(urgency.get(m, start), start)
                        self.types[m] = p.fragment if p.crop is None else \
                            TensorType(p.sizes, p.fragment.dtype)
        self.messages = sorted(urgency, key=lambda m: (self.s.end[m[0]], m[0], urgency[m], m[2],
                                                       m[1], m[3] or ((), ())))

    def by_channel(self, p: Piece, consumer: int) -> bool:
        """Whether piece `p`, read by instance `consumer` on another core, travels by
        channel (always here; a stream's stage boundaries go through shared memory)."""
        return True

    def arg_load(self, core: int, arg: Value, result: Value, lo: Sequence[int]) -> LoadOp:
        """Read the box at `lo` of function argument `arg` (its new value) into `result`."""
        t = result.tensor
        return LoadOp(arg, result, tuple(map(Affine, lo)), t.static_shape, (1,) * t.rank)

    def output_stores(self, core: int, inst: Instance, outs: list[Value]) -> list[Operation]:
        """What follows instance `inst` on `core`: the stores of its fragments of the
        function results."""
        return [StoreOp(outs[p.result], self.buffers[k], tuple(map(Affine, p.offsets)), p.sizes,
                        p.strides) for k, p in self.stores.get(inst.id, [])]

    def io_type(self, t: Type) -> Type:
        """The type of the program's input or result buffer for a function input or result
        of type `t`."""
        return t

    def program(self, core: int, ops: list[Operation]) -> list[Operation]:
        """The body of `core`'s `pim.core` from its ordered ops."""
        return ops

    def piece_value(self, p: Piece, core: int) -> tuple[Value, Piece | Part | None]:
        """The value standing for piece `p` on `core`, and the piece again when only a crop
        of that (whole, local) value is wanted, or its part of a merged message."""
        if self.s.core_of[p.producer] == core:
            return self.local[(p.producer, p.result, core, None)], p if p.crop else None
        key = (p.producer, p.result, core, crop_key(p))
        return self.local[key], self.parts.get(key)

    # -------------------------------------------------------------- instances
    def gather(self, inst: Instance, core: int) -> tuple[list[Value], list[Value],
                                                         list[Operation], dict[int, Value]]:
        """ins of the scheduled compute, its block args, the gathering ops inside the body,
        and the local value standing for each original input."""
        ins: list[Value] = []
        args: list[Value] = []
        body: list[Operation] = []
        local: dict[int, Value] = {}
        for use in inst.uses:
            if use.kind == "weight":
                ins.append(self.weight(use.value))
                args.append(Value(ins[-1].type, "w"))
                local[use.index] = args[-1]
                continue
            bt = _box_type(use.box, use.value.tensor)
            if not all(use.box.sizes):  # nothing read, but a body slice may still name it
                if _names(inst.op, use.index):
                    empty = owned(EmptyOp(Value(bt, "none")))
                    body.append(empty)
                    local[use.index] = empty.result
                continue
            if use.kind == "arg":
                local[use.index] = Value(bt, "x")
                body.append(owned(self.arg_load(core, self.argmap[use.value],
                                                local[use.index], use.box.lo)))
                continue
            p0 = use.pieces[0] if len(use.pieces) == 1 else None
            # a local crop that is the whole box becomes the buffer itself (one copy)
            single = p0 is not None and p0.box == use.box and p0.crop is not None \
                and self.s.core_of[p0.producer] == core
            buf = Value(bt, "buf")
            if not single:
                body.append(owned(EmptyOp(buf)))
            for p in use.pieces:
                frag, crop = self.piece_value(p, core)
                ins.append(frag)
                args.append(Value(frag.type, "frag"))
                a = _cropped(body, args[-1], crop)
                buf = a if single else _insert(body, a, buf, p, use.box)
            local[use.index] = buf
        return ins, args, body, local

    def instance(self, inst: Instance) -> None:
        core = self.s.core_of[inst.id]
        op = inst.op
        ins, args, body_ops, local = self.gather(inst, core)
        batch = op if isinstance(op, GraphComputeBatchOp) else None
        in_args = batch.in_args if batch is not None else op.body.args[:len(op.inputs)]
        vmap = {in_args[i]: v for i, v in local.items()}
        shift = {local[u.index]: u.box.lo for u in inst.uses
                 if u.index in local and u.kind != "weight"}
        yields: list[Value] = []
        for inner in op.body.ops:
            if isinstance(inner, ParallelInsertSliceOp):
                continue
            if isinstance(inner, YieldOp):
                yields = [vmap.get(v, v) for v in inner.values]
                continue
            body_ops.append(_clone(inner, vmap, batch.lane if batch is not None else None,
                                   Affine(inst.lane or 0), shift))
        if batch is not None:
            yields += [vmap.get(v, v) for v in _published(batch)]
        body_ops.append(YieldOp(yields))
        outs = [Value(v.type, f"t{inst.id}") for v in yields]
        sc = owned(ScheduledComputeOp(ins, outs, Block(args, body_ops)), op.loc)
        for r, v in enumerate(outs):
            self.local[(inst.id, r, core, None)] = v
        ops: list[Operation] = [sc, *self.output_stores(core, inst, outs)]
        self.emit(core, (self.s.start[inst.id], 1, inst.id), ops)
        self.events[inst.id] = ops

    def place_messages(self, events: Events) -> Events:
        """The receives and sends of the point after an instance's compute (and stores):
        receives first, then sends in rank order."""
        out: Events = []
        for key, ops in events:
            out.append((key, ops))
            got = self.anchored.get(key[2]) if key[1] == 1 else None
            if got is not None:
                recvs, sends = got
                out.append(((key[0], 0, -1), [*recvs, *(op for _, ops in sorted(
                    sends, key=lambda s: s[0]) for op in ops)]))
        return out

    # -------------------------------------------------------------- equivalence classes
    def merge_runs(self, core: int, events: Events, senders: set[int]) -> Events:
        """Replace runs of compatible instances by one scheduled batch each. Compatible:
        consecutive lanes of one graph batch, adjacent in the program (nothing in between),
        back to back in the schedule (each starts when the previous ends), and only the last
        one sends messages — so no consumer elsewhere waits longer than planned."""
        inst_of = {key[2]: self.proj.instances[key[2]] for key, _ in events
                   if key[1] == 1 and key[2] in self.events}
        out: Events = []
        run: list[Instance] = []

        def flush() -> None:  # a merged run takes the place of its first instance
            nonlocal run
            if len(run) >= 2 and self.mergeable(run):
                out.append(((self.s.start[run[0].id], 1, run[0].id), self.merged(core, run)))
            else:
                out.extend(((self.s.start[i.id], 1, i.id), self.events[i.id]) for i in run)
            run = []

        for key, ops in events:
            inst = inst_of.get(key[2]) if key[1] == 1 else None
            if inst is None or inst.lane is None:
                flush()
                out.append((key, ops))
                continue
            prev = run[-1] if run else None
            if prev is not None and not (
                    prev.op is inst.op and inst.lane == (prev.lane or 0) + 1
                    and self.s.start[inst.id] == self.s.end[prev.id]
                    and prev.id not in senders):
                flush()
            run.append(inst)
        flush()
        return out

    def one_local_crop(self, pieces: list[Piece], box: Box, core: int) -> ExtractSliceOp | None:
        """When every piece is a crop of one value computed on this core, placed by one
        translation, and the crops add up to at least the box, one slice of that value fills
        the whole buffer: one copy where crop-then-insert takes two per piece (elements of the
        box no piece covers are read by nothing, so whatever the slice puts there is fine)."""
        if not pieces or any(p.crop is None or any(st != 1 for st in p.strides) for p in pieces):
            return None
        p0 = pieces[0]
        assert p0.crop is not None
        shift = tuple(o - c for o, c in zip(p0.offsets, p0.crop, strict=True))
        if any((p.producer, p.result) != (p0.producer, p0.result) or p.crop is None
               or tuple(o - c for o, c in zip(p.offsets, p.crop, strict=True)) != shift
               for p in pieces) or self.s.core_of[p0.producer] != core:
            return None
        if sum(math.prod(p.sizes) for p in pieces) < math.prod(box.sizes):
            return None
        whole, _ = self.piece_value(p0, core)
        offs = tuple(lo - d for lo, d in zip(box.lo, shift, strict=True))
        shape = whole.shape
        if any(o < 0 or o + n > m for o, n, m in zip(offs, box.sizes, shape, strict=True)):
            return None
        return _slice(whole, Value(_box_type(box, whole.tensor), "buf"), offs)

    @staticmethod
    def mergeable(run: list[Instance]) -> bool:
        first = run[0]
        kinds = [(u.index, u.kind, all(u.box.sizes)) for u in first.uses]
        return all([(u.index, u.kind, all(u.box.sizes)) for u in i.uses] == kinds for i in run[1:])

    def merged(self, core: int, run: list[Instance]) -> list[Operation]:
        """Gather the union of the lanes' inputs once, run the lanes as one batch, expose
        each lane's fragment as a view for its stores, sends and local consumers."""
        op = run[0].op
        assert isinstance(op, GraphComputeBatchOp)
        gathered = self.gather_lanes(core, run, op)
        batch = self.lane_batch(op, run, gathered)
        ops: list[Operation] = [*gathered.ops, batch]
        self.merged_runs.append(MergedRun([inst.id for inst in run], list(ops)))
        for i, inst in enumerate(run):
            first = self.events[inst.id][0]
            assert isinstance(first, ScheduledComputeOp)
            ops.extend(owned(LaneResultOp(old, batch.outs[r], i))
                       for r, old in enumerate(first.outs))
            ops.extend(self.events[inst.id][1:])  # its stores
        return ops

    def gather_lanes(self, core: int, run: list[Instance], op: GraphComputeBatchOp) -> LaneInputs:
        """Per input of a run of lanes, one buffer holding the union of the lanes' boxes
        (a weight as it is)."""
        g = LaneInputs()
        for k, use in enumerate(run[0].uses):
            uses = [i.uses[k] for i in run]
            if use.kind == "weight":
                g.ins.append(self.weight(use.value))
                g.local[use.index] = g.ins[-1]
                continue
            if not all(use.box.sizes):  # nothing read, but a body slice may still name it
                if _names(op, use.index):
                    empty = owned(EmptyOp(Value(_box_type(use.box, use.value.tensor), "none")))
                    g.ops.append(empty)
                    g.ins.append(empty.result)
                    g.local[use.index] = empty.result
                    g.shift[op.in_args[use.index]] = use.box.lo
                continue
            box = reduce(Box.union, (u.box for u in uses))
            buf = Value(_box_type(box, use.value.tensor), "x" if use.kind == "arg" else "buf")
            if use.kind == "arg":
                g.ops.append(owned(self.arg_load(core, self.argmap[use.value], buf, box.lo)))
            else:
                buf = self.union_of_pieces(core, uses, box, buf, g.ops)
            g.ins.append(buf)
            g.local[use.index] = buf
            g.shift[op.in_args[use.index]] = box.lo
        return g

    def union_of_pieces(self, core: int, uses: list[InputUse], box: Box, buf: Value,
                        ops: list[Operation]) -> Value:
        """The lanes' pieces of one input (each piece once) copied into the empty `buf`
        spanning `box`, or one slice of a local value when that covers them; appends the
        copies to `ops` and returns the filled buffer."""
        pieces: dict[tuple[int, int, int, CropKey | None], Piece] = {}
        for u in uses:
            for p in u.pieces:
                pieces.setdefault((p.producer, p.result, p.slot, crop_key(p)), p)
        whole = self.one_local_crop(list(pieces.values()), box, core)
        if whole is not None:  # one copy of the box out of a local value
            ops.append(whole)
            return whole.result
        ops.append(owned(EmptyOp(buf)))
        for p in pieces.values():
            src, crop = self.piece_value(p, core)
            buf = _insert(ops, _cropped(ops, src, crop), buf, p, box)
        return buf

    def lane_batch(self, op: GraphComputeBatchOp, run: list[Instance], gathered: LaneInputs
                   ) -> ScheduledComputeBatchOp:
        """The run's lanes as one batch over the gathered buffers: `op`'s body with the
        lane index offset by the first lane and each lane's fragment published into its
        slot of an N x F result."""
        lane = Value(INDEX, "lane")
        args = [Value(v.type, "in") for v in gathered.ins]
        vmap = {op.in_args[i]: a for i, a in zip(gathered.local, args, strict=True)}
        frag_types = [v.tensor for v in _published(op)]
        outs_t = [TensorType((len(run), *f.static_shape), f.dtype) for f in frag_types]
        out_args = [Value(t, "out") for t in outs_t]
        body: list[Operation] = []
        shift_args = {vmap[a]: lo for a, lo in gathered.shift.items()}
        new_lane = Affine(run[0].lane or 0, ((1, lane),))
        for inner in op.body.ops:
            if isinstance(inner, ParallelInsertSliceOp):
                r = op.out_args.index(inner.dest)
                f = frag_types[r]
                src = vmap.get(inner.source, inner.source)
                body.append(ParallelInsertSliceOp(
                    src, out_args[r], (Affine(0, ((1, lane),)),) + (Affine(0),) * f.rank,
                    (1, *f.static_shape), (1,) * (f.rank + 1)))
                continue
            body.append(_clone(inner, vmap, op.lane, new_lane, shift_args))
        outs = [Value(t, f"b{run[0].id}") for t in outs_t]
        return owned(ScheduledComputeBatchOp(gathered.ins, outs, Block([lane, *args, *out_args],
                                                                       body), lanes=len(run)),
                     op.loc)

    def run(self) -> Module:
        for t in self.func.result_types:
            self.buffers.append(Value(self.io_type(t), "out"))
            self.top.append(owned(AllocSharedOp(self.buffers[-1])))
        self.plan_messages()
        pending: dict[int, list[tuple[int, Message]]] = {}
        for seq, m in enumerate(self.messages):
            pending.setdefault(m[0], []).append((seq, m))
        flow = self.flow
        groups: dict[Message, list[Message]] = {}
        for m, lead in flow.merged.items():
            groups.setdefault(lead, [lead]).append(m)
        for lead, parts in groups.items():  # before any reader is built
            parts.sort(key=lambda m: flow.sends[m][1])
            self.post(lead, self.merged_receive(lead, parts))
        for inst in self.build_order():
            self.instance(inst)
            for seq, m in pending.get(inst.id, []):
                if m in groups or m in flow.merged:
                    continue
                u, r, q, crop = m
                # channels follow the flow's sends
                seq = flow.sends[m][1] if m in flow.sends else len(flow.sends) + seq
                p = self.s.core_of[u]
                frag = self.local[(u, r, p, None)]
                phase = 0 if self.s.end[u] > self.s.start[u] else 2
                key = (self.s.end[u], phase, seq)
                yx = m in flow.yx
                if crop is None:
                    send = ChannelSendOp(frag, q, seq, yx=yx)
                    got = Value(frag.type, f"r{u}")
                else:  # a region of the value travels (DMA), not the whole of it
                    offs, sizes = crop
                    msg = TensorType(sizes, frag.tensor.dtype)
                    send = ChannelSendOp(frag, q, seq, tuple(map(Affine, offs)), sizes,
                                         (1,) * len(sizes), msg, yx)
                    got = Value(msg, f"r{u}")
                recv = owned(ChannelReceiveOp(got, p, seq))
                self.local[(u, r, q, crop)] = got
                at = flow.sends.get(m)
                if at is None:
                    self.emit(p, key, [send])
                else:
                    self.anchored.setdefault(at[0], ([], []))[1].append((at[1], [send]))
                self.post(m, recv)
        for lead, parts in groups.items():  # every part's value exists now
            at = flow.sends[lead]
            self.anchored.setdefault(at[0], ([], []))[1].append(
                (at[1], self.merged_send(parts, at[1])))
        cores = []
        for core in sorted(self.programs):
            events = self.place_messages(sorted(self.programs[core], key=lambda e: e[0]))
            if self.merge and core not in flow.tight:
                events = self.merge_runs(core, events, {m[0] for m in self.messages})
            body = Block([], self.program(core, [op for _, ops in events for op in ops]))
            cores.append(CoreOp(core, body))
        self.new_func.body.ops = [*self.top, *cores, ReturnOp(list(self.buffers))]
        return Module([self.new_func], dict(self.src.constants), filename=self.src.filename)


    def build_order(self) -> list[Instance]:
        """The instances in an order that builds every producer before its consumers (the
        messages of a producer exist once it is built): by planned start."""
        return sorted(self.proj.instances, key=lambda i: (self.s.start[i.id], i.id))

    def post(self, m: Message, recv: ChannelReceiveOp) -> None:
        """Place message `m`'s receive where the flow posts it (the program's start
        without one)."""
        post = self.flow.posts.get(m, -1)
        if post < 0:
            self.emit(m[2], (-1, 0, recv.channel), [recv])
        else:
            self.anchored.setdefault(post, ([], []))[0].append(recv)

    def merged_receive(self, lead: Message, parts: list[Message]) -> ChannelReceiveOp:
        """The one receive of a merged message: its parts flattened one after another,
        each read where it lies (`Part`)."""
        dtype = self.types[lead].dtype
        at = 0
        for m in parts:
            t = self.types[m]
            if t.dtype != dtype:
                raise ValueError(f"cannot merge messages of {dtype} and {t.dtype}")
            self.parts[m] = Part(at, t)
            at += t.numel
        got = Value(TensorType((at,), dtype), f"r{lead[0]}")
        for m in parts:
            self.local[m] = got
        return owned(ChannelReceiveOp(got, self.s.core_of[lead[0]], self.flow.sends[lead][1]))

    def merged_send(self, parts: list[Message], channel: int) -> list[Operation]:
        """The sender's side of a merged message: each part (a crop copied out) flattened
        (a view) and the parts copied into one buffer, then its send."""
        lead = parts[0]
        p = self.s.core_of[lead[0]]
        ops: list[Operation] = []
        flats: list[Value] = []
        for u, r, _, crop in parts:
            v = self.local[(u, r, p, None)]
            if crop is not None:
                ops.append(_slice(v, Value(TensorType(crop[1], v.tensor.dtype), "part"),
                                  crop[0]))
                v = ops[-1].results()[0]
            ops.append(owned(ReshapeOp(v, Value(TensorType((v.tensor.numel,), v.tensor.dtype),
                                                "flat"))))
            flats.append(ops[-1].results()[0])
        total = sum(f.tensor.numel for f in flats)
        cat = owned(ConcatOp(flats, Value(TensorType((total,), flats[0].tensor.dtype), "msg"),
                             0))
        return [*ops, cat, ChannelSendOp(cat.result, lead[2], channel)]


def received_compute(module: Module, proj: Projection, inst: Instance) -> ScheduledComputeOp:
    """The `spat.scheduled_compute` materialization builds for `inst` when every fragment
    it reads arrives from another core (its ins are then receives defined outside it):
    what the instance itself needs of local memory, wherever it runs."""
    n = len(proj.instances)
    core_of = [1] * n
    core_of[inst.id] = 0
    m = Materializer(module, proj, [], ScheduleView(core_of, [0] * n, [0] * n), merge=False)
    for use in inst.uses:
        for p in use.pieces:  # a crop's fragment is the part that travels
            m.local[(p.producer, p.result, 0, crop_key(p))] = Value(p.fragment, "r")
    m.instance(inst)
    sc = m.events[inst.id][0]
    assert isinstance(sc, ScheduledComputeOp)
    return sc


def materialize(module: Module, proj: Projection, outputs: list[list[Piece]],
                schedule: ScheduleView, merge: bool = True, flow: Flow | None = None
                ) -> Module:
    """Scheduled IR for `schedule` (see the module docstring). `merge` runs consecutive
    compatible lanes of one graph batch as one `spat.scheduled_compute_batch`. `flow`
    places receives and sends where a memory-aware communication model decided (see
    `Flow`); without it every receive is posted at the start."""
    return Materializer(module, proj, outputs, schedule, merge, flow).run()
