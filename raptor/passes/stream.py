"""Materialization for a stream of inferences (pipeline mode): a pipeline schedule becomes
scheduled IR whose core programs process inference after inference.

Each core's program is one loop, `pim.stream inferences(M) ring(B)` (a loop, not M copies:
the program stays the size of one inference whatever M is, as a device's instruction memory
would hold it; M only bounds the simulated stream). Its body is the core's per-inference
program, materialized exactly as in latency mode (`raptor.passes.materialize`, whose
machinery this subclasses): the same per-core order, equivalence classes and gathers;
stage-internal fragments travel by channels, their receives posted and sends made as in
latency mode (with a `Flow` where local memory is tight), per iteration. What changes:

* **Inputs and results** carry a leading inference dimension: the function takes
  `tensor<M x ...>` inputs and returns `tensor<M x ...>` results; inference n reads and
  writes `[%n, ...]`.
* **Stage boundaries go through shared memory.** Every publication a later stage reads has a
  ring buffer `tensor<B x fragment>`; its producer stores the whole fragment into slot `%s`
  (= n mod B) once, right after computing it. A consumer core loads what it reads (the whole
  fragment or the crop its tasks need, one load per (publication, consumer core, crop) —
  the same keys latency mode sends messages by) before the first task that needs data from
  that producer core; the loaded value stands where a received message would.
* **READY/FREE counting.** One READY and one FREE counter per (producer core, consumer core)
  pair with boundary traffic, in two `pim.alloc_shared : tensor<K x i32>` arrays. The producer
  waits until FREE reaches n − B + 1 before its first store the consumer reads and signals
  READY after its last; the consumer waits until READY reaches n + 1 before its loads from
  that producer and signals FREE after them. Each counter has one signalling and one waiting
  core, so counts never mix inferences: a slot is overwritten only after every consumer core
  has loaded it (B = 2: double buffering).

Deadlock-free by construction. Order the work of core c in iteration n by (n, stage of c).
What a core can wait for is (a) a stage-internal fragment of iteration n whose producer comes
earlier in the dependency order (as in latency mode), (b) a rendezvous partner posting its
iteration-n receives, i.e. finishing iteration n − 1 (smaller n), (c) READY from an earlier
stage at iteration n (same n, smaller stage), (d) FREE from a later stage at iteration
n − B (smaller n). Every wait is for work strictly earlier in that well-founded order, or
for a producer earlier in one iteration's dependency order, so no cycle of waits can form
whatever the timing; the simulator's deadlock detector checks it in the tests. With a
`Flow`, (b) becomes a partner reaching the point of iteration n where it posts that receive:
inside an iteration a stage's cores run the channel program the communication model ran to
completion (a program of blocking sends, non-blocking posts and waiting computes completes
whatever the timing, `raptor.passes.materialize`); loads from earlier stages only add waits
of kind (c), stores waits of kind (d), and a channel carries its messages in program order,
so iteration n's sends meet iteration n's receives.

A skewed body (`StreamView.lag`, one stage, no flow control) runs M + L iterations, an op
at lag l working in iteration k on inference k - l (in a `pim.lag` region); each core's
times are those of the iteration that runs each task (`Skew.times`), a message travels at
its producer's lag (its receive posted at the start of the producer's iteration). Still
deadlock-free: order core c's work by (iteration, planned time moved into the iteration:
packing keeps each core's order); a task of inference i runs in iteration i + lag, and
lags never decrease along a dependency, so a data wait is on an earlier iteration or
earlier in the same one; a send of iteration k waits for a receive its receiver posts on
starting iteration k, after finishing k - 1.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from raptor.ir.core import Affine, Block, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import AllocSharedOp, LagOp, LoadOp, SignalOp, StoreOp, StreamOp, WaitOp
from raptor.ir.types import INDEX, TensorType, Type
from raptor.passes.materialize import (
    CropKey,
    Flow,
    Key,
    Materializer,
    MergedRun,
    ScheduleView,
    crop_key,
    owned,
)
from raptor.passes.projection import Instance, Piece, Projection

RING = 2
"""Slots per boundary buffer: double buffering lets a producer store inference n + 1 while
its consumers still read inference n."""

Transfer = tuple[int, int, int, CropKey | None]
"""(producer task, result, consumer core, crop): one boundary load."""


@dataclass
class StreamView(ScheduleView):
    """What stream materialization needs of a pipeline schedule: placement, the estimated times of
    one inference (they fix each core's order, as in latency mode), and the stage of every task;
    for a skewed body each task's lag (empty: none), the times then those of the iteration
    that runs each task (`raptor.solver.pipeline.realize.Skew.times`)."""

    stage_of: Sequence[int]
    lag: Sequence[int] = ()


@dataclass
class LoadGroup:
    """On `consumer` core: wait READY from `producer` core (counter pair `pair`), load
    `loads` ((producer task, result, bytes) each), signal FREE; placed before the
    consumer's first task that needs them. `key` orders it among the core's events as
    materialization did (a task's key is (planned start, 1, task))."""

    consumer: int
    producer: int
    pair: int
    key: tuple[int, int, int]
    loads: list[tuple[int, int, int]]


@dataclass
class StreamInfo:
    """The boundary plan materialization built (for the estimate and the report)."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    """(producer core, consumer core) of each READY/FREE counter pair, by counter index."""
    groups: list[LoadGroup] = field(default_factory=list)
    stores: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Per producer task, its boundary stores: (result, bytes)."""
    free_waits: dict[int, list[int]] = field(default_factory=dict)
    """Per producer task, the pairs whose FREE it waits for before its boundary stores."""
    ready_signals: dict[int, list[int]] = field(default_factory=dict)
    """Per producer task, the pairs whose READY it signals after its boundary stores."""
    merged: list[MergedRun] = field(default_factory=list)
    """The runs of lanes materialized as one batch (it starts once every lane's inputs are
    there, gathers their union once and computes every lane before the first's stores)."""


class _StreamMaterializer(Materializer):
    def __init__(self, module: Module, proj: Projection, outputs: list[list[Piece]],
                 view: StreamView, inferences: int, ring: int, merge: bool,
                 flow: Flow | None) -> None:
        if view.lag and (flow is not None or len(set(view.stage_of)) > 1):
            raise ValueError("a skewed stream body is materialized for one stage, every "
                             "receive posted at the iteration's start")
        self.count = inferences
        self.ring = ring
        self.stage = view.stage_of
        self.lag = view.lag
        self.lag_of: dict[int, int] = {}
        """id(op) -> its lag (a skewed body: its task's; a message's, its producer's)."""
        self.loop: dict[int, tuple[Value, Value]] = {}
        super().__init__(module, proj, outputs, view, merge, flow)
        self.ring_of: dict[tuple[int, int], Value] = {}
        self.rings: dict[int, list[tuple[int, Value]]] = {}
        """Per producer task: (result, ring buffer) of its boundary publications."""
        self.pair_of: dict[tuple[int, int], int] = {}
        self.ready: Value | None = None
        self.free: Value | None = None
        self.plan = StreamInfo()

    def vars(self, core: int) -> tuple[Value, Value]:
        """`%n` and `%s` of `core`'s stream loop."""
        got = self.loop.get(core)
        if got is None:
            got = self.loop[core] = (Value(INDEX, "n"), Value(INDEX, "s"))
        return got

    def io_type(self, t: Type) -> Type:
        assert isinstance(t, TensorType)
        return TensorType((self.count, *t.static_shape), t.dtype)

    def by_channel(self, p: Piece, consumer: int) -> bool:
        return self.stage[p.producer] == self.stage[consumer]

    def arg_load(self, core: int, arg: Value, result: Value, lo: Sequence[int]) -> LoadOp:
        t = result.tensor
        n, _ = self.vars(core)
        return LoadOp(arg, result, (Affine.of(n), *map(Affine, lo)), (1, *t.static_shape),
                      (1,) * (t.rank + 1))

    def output_stores(self, core: int, inst: Instance, outs: list[Value]) -> list[Operation]:
        n, s = self.vars(core)
        ops: list[Operation] = [
            StoreOp(outs[p.result], self.buffers[k], (Affine.of(n), *map(Affine, p.offsets)),
                    (1, *p.sizes), (1, *p.strides)) for k, p in self.stores.get(inst.id, [])]
        stores = self.rings.get(inst.id)
        if not stores:
            return ops
        assert self.ready is not None and self.free is not None
        for k in self.plan.free_waits.get(inst.id, []):
            ops.append(WaitOp(self.free, k, (Affine(1 - self.ring, ((1, n),)),)))
        for r, buf in stores:
            frag = outs[r].tensor
            ops.append(StoreOp(outs[r], buf, (Affine.of(s), *(Affine(0),) * frag.rank),
                               (1, *frag.static_shape), (1,) * (frag.rank + 1)))
        ops.extend(SignalOp(self.ready, k) for k in self.plan.ready_signals.get(inst.id, []))
        return ops

    def emit(self, core: int, key: Key, ops: list[Operation]) -> None:
        super().emit(core, key, ops)
        if self.lag:  # a task's key names it, a message's (end, phase, channel) its channel
            task = key[2] if key[1] == 1 else self.messages[key[2]][0]
            self.lag_of.update((id(op), self.lag[task]) for op in ops)

    def build_order(self) -> list[Instance]:
        """A skewed body's times are those of the iteration that runs each task, packed per
        core (`Skew.times`), so no longer in dependency order: producers first, then by
        lag and time."""
        if not self.lag:
            return super().build_order()
        insts = self.proj.instances
        consumers: dict[int, set[int]] = {}
        for inst in insts:
            for use in inst.uses:
                for p in use.pieces:
                    consumers.setdefault(p.producer, set()).add(inst.id)
        waiting = [0] * len(insts)
        for users in consumers.values():
            for t in users:
                waiting[t] += 1
        ready = [(self.lag[i.id], self.s.start[i.id], i.id) for i in insts if not waiting[i.id]]
        heapq.heapify(ready)
        out: list[Instance] = []
        while ready:
            *_, u = heapq.heappop(ready)
            out.append(insts[u])
            for t in consumers.get(u, ()):
                waiting[t] -= 1
                if not waiting[t]:
                    heapq.heappush(ready, (self.lag[t], self.s.start[t], t))
        return out

    def mergeable(self, run: list[Instance]) -> bool:  # type: ignore[override]
        """Lanes of one lag only (one batch works on one inference)."""
        return super().mergeable(run) and (not self.lag or len({self.lag[i.id] for i in run}) == 1)

    def merged(self, core: int, run: list[Instance]) -> list[Operation]:
        ops = super().merged(core, run)
        if self.lag:
            self.lag_of.update((id(op), self.lag[run[0].id]) for op in ops)
        return ops

    def program(self, core: int, ops: list[Operation]) -> list[Operation]:
        """The stream loop; a skewed body's runs of lagged ops in `pim.lag` regions."""
        body: list[Operation] = []
        for lag, run in itertools.groupby(ops, key=lambda op: self.lag_of.get(id(op), 0)):
            group = list(run)
            body += [LagOp(lag, Block([], group))] if lag else group
        return [StreamOp(self.count, self.ring, Block(list(self.vars(core)), body))]

    # -------------------------------------------------------------- boundaries
    def plan_messages(self) -> None:
        """Channel messages inside stages (as in latency mode), and the boundary buffers,
        counters and loads between stages."""
        super().plan_messages()
        core_of, start = self.s.core_of, self.s.start
        first: dict[Transfer, int] = {}
        for inst in self.proj.instances:
            for use in inst.uses:
                for p in use.pieces:
                    if self.stage[p.producer] != self.stage[inst.id]:
                        key = (p.producer, p.result, core_of[inst.id], crop_key(p))
                        first[key] = min(first.get(key, start[inst.id]), start[inst.id])
        if not first:
            return
        frag_type = {(u, r): self.proj.instances[u].fragment_type(r) for u, r, _, _ in first}
        loads = sorted(first, key=lambda m: (first[m], m[2], m[0], m[1], m[3] or ((), ())))
        plan = self.plan
        plan.pairs = sorted({(core_of[u], q) for u, _, q, _ in loads})
        self.pair_of = {pq: k for k, pq in enumerate(plan.pairs)}
        self.ready = self._alloc(TensorType((len(plan.pairs),), "i32"), "ready")
        self.free = self._alloc(TensorType((len(plan.pairs),), "i32"), "free")
        for u, r in sorted(frag_type):
            f = frag_type[(u, r)]
            buf = self._alloc(TensorType((self.ring, *f.static_shape), f.dtype), f"p{u}")
            self.ring_of[(u, r)] = buf
            self.rings.setdefault(u, []).append((r, buf))
            plan.stores.setdefault(u, []).append((r, f.nbytes))
        # producer side: per pair, the first and last producer task in the core's order
        readers: dict[int, set[int]] = {}
        for u, _, q, _ in loads:
            readers.setdefault(u, set()).add(q)
        by_pair: dict[int, list[int]] = {}
        for u in sorted(readers, key=lambda u: (start[u], u)):
            for q in readers[u]:
                by_pair.setdefault(self.pair_of[(core_of[u], q)], []).append(u)
        for k, tasks in sorted(by_pair.items()):
            plan.free_waits.setdefault(tasks[0], []).append(k)
            plan.ready_signals.setdefault(tasks[-1], []).append(k)
        # consumer side: all loads from one producer core at the first task needing them
        groups: dict[tuple[int, int], list[Transfer]] = {}
        for m in loads:
            groups.setdefault((m[2], core_of[m[0]]), []).append(m)
        for seq, ((q, pc), ms) in enumerate(sorted(groups.items(), key=lambda kv: (
                first[kv[1][0]], kv[0]))):
            ops = self._load_group(q, pc, ms)
            place = (first[ms[0]], 0, -1 - seq)
            self.emit(q, place, ops)
            plan.groups.append(LoadGroup(q, pc, self.pair_of[(pc, q)], place, [
                (u, r, op.results()[0].tensor.nbytes)
                for (u, r, _, _), op in zip(ms, ops[1:-1], strict=True)]))

    def _alloc(self, t: TensorType, name: str) -> Value:
        self.top.append(owned(AllocSharedOp(Value(t, name))))
        return self.top[-1].results()[0]

    def _load_group(self, q: int, pc: int, ms: list[Transfer]) -> list[Operation]:
        """On consumer core q: wait for READY from producer core pc, load every transfer,
        signal FREE."""
        assert self.ready is not None and self.free is not None
        n, s = self.vars(q)
        k = self.pair_of[(pc, q)]
        ops: list[Operation] = [WaitOp(self.ready, k, (Affine(1, ((1, n),)),))]
        for u, r, _, crop in ms:
            buf = self.ring_of[(u, r)]
            bt = buf.tensor
            frag = bt.static_shape[1:]
            offs, sizes = crop if crop is not None else ((0,) * len(frag), frag)
            got = Value(TensorType(sizes, bt.dtype), f"l{u}")
            ops.append(owned(LoadOp(buf, got, (Affine.of(s), *map(Affine, offs)), (1, *sizes),
                                    (1,) * (len(sizes) + 1))))
            self.local[(u, r, q, crop)] = got
        ops.append(SignalOp(self.free, k))
        return ops


def materialize_stream(module: Module, proj: Projection, outputs: list[list[Piece]],
                       view: StreamView, inferences: int, ring: int = RING,
                       merge: bool = True, flow: Flow | None = None
                       ) -> tuple[Module, StreamInfo]:
    """Scheduled IR processing `inferences` inferences of a pipeline schedule (see the
    module docstring), and what its boundaries are."""
    if inferences < 1 or ring < 1:
        raise ValueError(f"a stream needs at least one inference and one ring slot, got "
                         f"{inferences} and {ring}")
    m = _StreamMaterializer(module, proj, outputs, view, inferences, ring, merge, flow)
    scheduled = m.run()
    m.plan.merged = m.merged_runs
    return scheduled, m.plan
