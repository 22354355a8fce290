"""Verifier: structure (SSA dominance, one definition per value, ownership, terminators)
and each op's own checks everywhere, the graph-batch invariant (GCB-1..10), Blueprint rules
(BP-1..5) and scheduled-IR communication rules (SCH-*), for a module however it was built.

Rule ids are stable; see invariants/GRAPH_COMPUTE_BATCH_INVARIANT.md. Each op's rules are
checked in id order and every violated id is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raptor.ir.core import Affine, Block, Diagnostic, Operation, Value, VerifyError
from raptor.ir.module import Module
from raptor.ir.ops import (
    BLUEPRINT_CONFLICT,
    BLUEPRINT_COVERAGE,
    BlueprintEntry,
    BlueprintOp,
    ChannelReceiveOp,
    ChannelSendOp,
    CoreBatchOp,
    CoreOp,
    DeferredCommunicationOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    LagOp,
    LoadOp,
    ParallelInsertSliceOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    SingleComputeOp,
    StoreOp,
    StreamOp,
    Strided,
    WaitOp,
    YieldOp,
    squeeze,
)
from raptor.ir.types import TensorType

PHYSICAL_CONSUMERS = (BlueprintOp, GraphComputeOp, GraphComputeBatchOp, DeferredCommunicationOp)
"""Ops allowed to consume a physical fragment batch directly (invariant, "Graph consumers")."""


@dataclass
class _Report:
    module: Module
    diagnostics: list[Diagnostic] = field(default_factory=list)
    paths: dict[int, str] = field(default_factory=dict)

    def add(self, op: Operation, rule: str, message: str) -> None:
        if op.loc is None:  # built through the API: say which op, by position
            message = f"{op.name}{self.path(op)}: {message}"
        self.diagnostics.append(Diagnostic(op.loc, rule, message))

    def path(self, op: Operation) -> str:
        """` (@main op 12.3)`: the op's 1-based position in its function, nested regions
        after dots (computed once, on the first diagnostic without a location)."""
        if not self.paths:
            def visit(ops: list[Operation], prefix: str) -> None:
                for i, o in enumerate(ops, 1):
                    self.paths.setdefault(id(o), f"{prefix}{i}")
                    for r in o.regions():
                        visit(r.ops, f"{prefix}{i}.")

            for f in self.module.funcs:
                visit(f.body.ops, f"@{f.sym_name} op ")
        got = self.paths.get(id(op))
        return f" ({got})" if got else ""


def verify_module(module: Module, *, allow_assembly: bool = False) -> list[Diagnostic]:
    """All diagnostics of `module`, in op order. `allow_assembly` accepts the temporary
    logical-assembly batches that lowering emits before canonicalization."""
    rep = _Report(module)
    for func in module.funcs:
        sends, recvs = _verify_func(func, rep, allow_assembly)
        _check_physical_uses(func, rep)
        _check_channels(func, rep, sends, recvs)
    return rep.diagnostics


def _verify_op(op: Operation, rep: _Report, allow_assembly: bool) -> None:
    """The op's own checks, then the graph-batch invariant or the Blueprint rules."""
    try:
        op.verify()
    except VerifyError as e:
        rep.add(op, e.rule, e.message)
    if isinstance(op, GraphComputeBatchOp):
        if op.assembly and not allow_assembly:
            rep.add(op, "ASM-1", "logical-assembly batch must be canonicalized into N x F "
                    "fragments plus spat.blueprint before graph verification")
        elif op.assembly:
            _check_assembly(op, rep)
        else:
            _check_batch(op, rep)
        if op.lanes >= 1:
            _check_lane_slices(op, op.lane, op.lanes, rep)
    elif isinstance(op, ScheduledComputeBatchOp) and op.lanes >= 1 and op.body.args:
        _check_lane_slices(op, op.body.args[0], op.lanes, rep)
    elif isinstance(op, CoreBatchOp) and len(op.body.args) == 1:
        _check_lane_slices(op, op.body.args[0], len(op.cores), rep)
    elif isinstance(op, BlueprintOp):
        _check_blueprint(op, rep)
    elif isinstance(op, StreamOp):
        _check_stream_slices(op, rep)


def _name(v: Value) -> str:
    if v.name:
        return f"%{v.name}"
    return f"the result of {v.owner.name}" if isinstance(v.owner, Operation) else "a value"


Lags = tuple[dict[Value, int], int] | None
"""Inside a `pim.stream` body: the lag of every value the body defines, and the lag of the
ops being verified."""

Channels = dict[tuple[int, int, int], list[Any]]
"""(source core, destination core, channel) → its sends (or receives) in program order."""


def _verify_func(func: FuncOp, rep: _Report, allow_assembly: bool) -> tuple[Channels, Channels]:
    """Every op of `func` in order (`_verify_op`) and the structure: SSA-1, every use
    (operands and affine offset variables) is dominated by its definition, i.e. defined
    earlier in the same block or in an enclosing one (regions are single blocks), and SCH-3
    when the definition is another core's; SSA-2, every value is defined once; REGION-3,
    every op sits in one block and every value's `owner` is its definer; REGION-4, `return`
    ends a function body and `spat.yield` a single-compute body, nowhere else. Returns the
    channel ends of the `pim.core` programs."""
    defined: set[Value] = set()
    visible: set[Value] = set()
    placed: set[int] = {id(func)}
    sends: Channels = {}
    recvs: Channels = {}

    def define(v: Value, owner: object, at: Operation) -> None:
        if v in defined:
            rep.add(at, "SSA-2", f"{_name(v)} is defined twice")
        elif v.owner is not owner:
            rep.add(at, "REGION-3", f"{_name(v)} is defined here but owned by another op or block")
        defined.add(v)
        visible.add(v)

    def undefined(op: Operation, v: Value, core: int | None) -> None:
        home = next((c.core for c in func.body.ops if isinstance(c, CoreOp) and any(
            v in o.results() for o in c.body.walk())), None)
        if core is not None and home is not None and home != core:
            rep.add(op, "SCH-3", f"%{v.name} is defined on core {home} but used on core "
                    f"{core}; cross-core values need spat.channel_send/receive")
            return
        later = any(v in o.results() for o in func.walk()) and v not in defined
        rep.add(op, "SSA-1", f"uses {_name(v)} " + ("before its definition" if later else
                "but it is not defined in this function or an enclosing region"))

    def use(op: Operation, v: Value, core: int | None, lags: Lags) -> None:
        """STREAM-4 for a use inside a stream body, SSA-1 / SCH-3 for one not visible."""
        if lags is not None and v in lags[0]:
            if lags[0][v] > lags[1]:
                rep.add(op, "STREAM-4", f"at lag {lags[1]} uses {_name(v)} of lag "
                        f"{lags[0][v]}, an inference it has not reached yet; a lag must not "
                        "decrease along a dependency")
                return
            if lags[0][v] < lags[1]:
                return  # carried: defined in an earlier iteration, wherever it stands
        if v not in visible:
            undefined(op, v, core)

    def block(b: Block, owner: Operation, terminator: type[Operation] | None,
              core: int | None, lags: Lags) -> list[Value]:
        """Verify block `b`; returns what stays visible after it (a `pim.lag` region's
        definitions: it orders ops, it does not scope values)."""
        scope = list(b.args)
        for a in b.args:
            define(a, b, owner)
        last = len(b.ops) - 1
        for i, op in enumerate(b.ops):  # hot: a scheduled ResNet-18 has 300,000 ops
            if id(op) in placed:
                rep.add(op, "REGION-3", "this op appears in more than one place")
                continue
            placed.add(id(op))
            for v in op.operands():
                if v not in visible or lags is not None:
                    use(op, v, core, lags)
            affines = op.offsets if isinstance(op, Strided) else \
                op.threshold if isinstance(op, WaitOp) else ()
            for off in affines:  # offset and threshold variables are uses too
                for _, v in off.terms:
                    if v not in visible:
                        undefined(op, v, core)
            if core is not None and isinstance(op, ChannelSendOp):
                sends.setdefault((core, op.core, op.channel), []).append(op)
            elif core is not None and isinstance(op, ChannelReceiveOp):
                recvs.setdefault((op.core, core, op.channel), []).append(op)
            elif isinstance(op, StreamOp) and not isinstance(owner, CoreOp | CoreBatchOp):
                rep.add(op, "STREAM-2", "pim.stream must stand directly in a pim.core or "
                        "pim.core_batch program")
            elif isinstance(op, LagOp) and not isinstance(owner, StreamOp):
                rep.add(op, "STREAM-3", "pim.lag must stand directly in a pim.stream body")
            if isinstance(op, ReturnOp | YieldOp) and (i != last or type(op) is not terminator):
                where = f"inside {owner.name}" if type(op) is not terminator else \
                    "before the end of its block"
                rep.add(op, "REGION-4", f"{op.name} {where}")
            _verify_op(op, rep, allow_assembly)
            inner = lags
            if isinstance(op, StreamOp):
                inner = ({v: lag for lag, o in op.staged() for v in o.results()}, 0)
            elif isinstance(op, LagOp) and lags is not None:
                inner = (lags[0], op.lag)
            for r in op.regions():
                scope += block(r, op, YieldOp if isinstance(op, SingleComputeOp) else None,
                               op.core if isinstance(op, CoreOp) else core, inner)
            for v in op.results():
                if v in defined or v.owner is not op:
                    define(v, op, op)
                defined.add(v)
                visible.add(v)
                scope.append(v)
        if isinstance(owner, LagOp):
            return scope
        visible.difference_update(scope)
        return []

    block(func.body, func, ReturnOp, None, None)
    return sends, recvs


# ------------------------------------------------------------------ graph batch invariant
def _is_lane_bijection(a: Affine, lane: Value, n: int) -> bool:
    """`c + k*lane` maps 0..n-1 onto 0..n-1: the identity or the reversal (n distinct
    values in an arithmetic progression fill 0..n-1 only with step ±1), or any map for
    one lane. Constant time: a batch may claim 10^8 lanes."""
    if any(v is not lane for v in a.vars()):
        return False
    k, c = a.coef(lane), a.const
    return (n == 1 and c == 0) or (k == 1 and c == 0) or (k == -1 and c == n - 1)


def _check_batch(op: GraphComputeBatchOp, rep: _Report) -> None:
    outs = op.out_args
    pubs: dict[Value, list[ParallelInsertSliceOp]] = {o: [] for o in outs}
    for inner in op.body.ops:
        if isinstance(inner, ParallelInsertSliceOp):
            if inner.dest in pubs:
                pubs[inner.dest].append(inner)
            else:
                rep.add(inner, "GCB-5", "publication must target a result block argument of "
                        "its graph batch")
    for r, (res, out) in enumerate(zip(op.outs, outs, strict=False)):
        _check_result(op, r, res.type, pubs[out], op.lane, rep)


def _check_result(op: GraphComputeBatchOp, r: int, rt: object,
                  pubs: list[ParallelInsertSliceOp], lane: Value, rep: _Report) -> None:
    n = op.lanes
    if not isinstance(rt, TensorType) or not rt.is_static or rt.rank < 1:
        rep.add(op, "GCB-1", f"result {r} must be a static ranked tensor, got {rt}")
        return
    pub = pubs[0] if pubs else None
    frag = pub.source.type if pub is not None else None
    if isinstance(frag, TensorType) and rt.rank != frag.rank + 1:
        rep.add(op, "GCB-2", f"result {r} {rt} has rank {rt.rank} but must have rank "
                f"{frag.rank + 1}: a graph batch result is N x fragment and the fragment is {frag}")
    if rt.shape[0] != n:
        rep.add(op, "GCB-3", f"result {r} dimension 0 is {rt.shape[0]} but the batch has {n} lanes")
    want = TensorType(rt.shape[1:], rt.dtype)
    for p in pubs:
        if p.source.type != want and isinstance(p.source.type, TensorType) and \
                p.source.type.rank + 1 == rt.rank:
            rep.add(p, "GCB-4", f"result {r} publishes a {p.source.type} fragment but the "
                    f"result {rt} holds {want} fragments")
    if pub is not None:
        _check_publication(pub, r, want, lane, n, rep)
    if len(pubs) != 1:
        rep.add(op, "GCB-10", f"result {r} has {len(pubs)} publications in the lane body; "
                "exactly one is required")


def _check_publication(pub: ParallelInsertSliceOp, r: int, frag: TensorType, lane: Value,
                       n: int, rep: _Report) -> None:
    offs = pub.offsets
    if not offs or not _is_lane_bijection(offs[0], lane, n):
        first = offs[0].render({lane: lane.name or "lane"}) if offs and all(
            v is lane for v in offs[0].vars()) else "?"
        rep.add(pub, "GCB-6", f"result {r} publication offset 0 must be the fragment slot (the "
                f"lane or a permutation of it), got {first}")
    rest = offs[1:]
    if any(not (o.is_const and o.const == 0) for o in rest):
        shown = [o.const if o.is_const else "lane-dependent" for o in rest]
        rep.add(pub, "GCB-7", f"result {r} publication offsets after the slot must be zero, "
                f"got {shown}")
    want_sizes = [1, *frag.shape]
    if list(pub.sizes) != want_sizes:
        rep.add(pub, "GCB-8", f"result {r} publication sizes must be {want_sizes}, got "
                f"{list(pub.sizes)}")
    if any(s != 1 for s in pub.strides):
        rep.add(pub, "GCB-9", f"publication strides must be unit, got {list(pub.strides)}")


def _lane_extremes(a: Affine, lane: Value, n: int) -> tuple[int, int] | None:
    if any(v is not lane for v in a.vars()):
        return None
    lo, hi = a.substitute(lane, 0).const, a.substitute(lane, n - 1).const
    return min(lo, hi), max(lo, hi)


def _slice_in_bounds(offsets: Iterable[Affine], sizes: Iterable[int], strides: Iterable[int],
                     shape: tuple[int, ...], lane: Value, n: int) -> str | None:
    offsets, sizes, strides = list(offsets), list(sizes), list(strides)
    if not len(offsets) == len(sizes) == len(strides) == len(shape):
        return None  # a geometry error, reported as SLICE-1 by the op itself
    for d, (o, sz, st) in enumerate(zip(offsets, sizes, strides, strict=True)):
        ext = _lane_extremes(o, lane, n)
        if ext is None or sz == 0:
            continue
        lo, hi = ext
        if lo < 0 or hi + (sz - 1) * st >= shape[d]:
            return f"dimension {d} reaches [{lo}, {hi + (sz - 1) * st}] outside 0..{shape[d] - 1}"
    return None


def _check_lane_slices(op: GraphComputeBatchOp | ScheduledComputeBatchOp | CoreBatchOp,
                       lane: Value, lanes: int, rep: _Report) -> None:
    """Lane-dependent slices must stay in bounds for every lane (affine: check both ends):
    extract slices of any batch, the insertions of a scheduled batch (a graph batch's are
    checked with its publication), and the loads and stores of a core batch."""
    for inner in op.body.ops:
        if isinstance(inner, ExtractSliceOp):
            what, t = "slice", inner.source.type
        elif isinstance(inner, ParallelInsertSliceOp) and isinstance(op, ScheduledComputeBatchOp):
            what, t = "insertion", inner.dest.type
        elif isinstance(inner, LoadOp | StoreOp) and isinstance(op, CoreBatchOp):
            what, t = "access", inner.buffer.type
        else:
            continue
        if isinstance(t, TensorType) and t.is_static:
            bad = _slice_in_bounds(inner.offsets, inner.sizes, inner.strides, t.static_shape,
                                   lane, lanes)
            if bad:
                rep.add(inner, "SLICE-3", f"{what} out of bounds for some lane: {bad}")


def _stream_extremes(a: Affine, ranges: dict[Value, int]) -> tuple[int, int] | None:
    """Least and largest value of `a` over the stream variables (each in 0..range-1);
    None when it uses any other variable (a lane, checked where the lane is known)."""
    lo = hi = a.const
    for c, v in a.terms:
        n = ranges.get(v)
        if n is None:
            return None
        lo += min(0, c * (n - 1))
        hi += max(0, c * (n - 1))
    return lo, hi


def _check_stream_slices(op: StreamOp, rep: _Report) -> None:
    """SLICE-3 for every shared-memory access of the stream body whose offsets use `%n` or
    `%s`: in bounds for every inference (affine: the extremes are at the ends)."""
    if len(op.body.args) != 2:
        return  # REGION-1, reported by the op
    ranges = {op.inference: op.count, op.slot: op.ring}
    for inner in op.body.walk():
        if not isinstance(inner, LoadOp | StoreOp) or not isinstance(inner.buffer.type,
                                                                     TensorType):
            continue
        t = inner.buffer.type
        if not t.is_static or len(inner.offsets) != t.rank or len(inner.sizes) != t.rank:
            continue
        for d, (o, sz, st) in enumerate(zip(inner.offsets, inner.sizes, inner.strides,
                                            strict=False)):
            ext = _stream_extremes(o, ranges) if o.terms else None
            if ext is None or sz == 0:
                continue
            lo, hi = ext[0], ext[1] + (sz - 1) * st
            if lo < 0 or hi >= t.static_shape[d]:
                rep.add(inner, "SLICE-3", f"access out of bounds for some inference: dimension "
                        f"{d} reaches [{lo}, {hi}] outside 0..{t.static_shape[d] - 1}")
                break


def _check_assembly(op: GraphComputeBatchOp, rep: _Report) -> None:
    for r, out in enumerate(op.out_args):
        pubs = [p for p in op.body.ops if isinstance(p, ParallelInsertSliceOp) and p.dest is out]
        static = isinstance(out.type, TensorType) and out.type.is_static
        if not static:
            rep.add(op, "GCB-1", f"result {r} must be a static ranked tensor, got {out.type}")
        if len(pubs) != 1:
            rep.add(op, "GCB-10", f"result {r} has {len(pubs)} publications in the lane body; "
                    "exactly one is required")
        for p in pubs if static else ():
            bad = _slice_in_bounds(p.offsets, p.sizes, p.strides, out.shape, op.lane, op.lanes)
            if bad:
                rep.add(p, "SLICE-3", f"assembly insertion out of bounds: {bad}")


# ------------------------------------------------------------------ blueprint
def _check_blueprint(op: BlueprintOp, rep: _Report) -> None:
    """BP-1..5 in order; each later rule presumes the earlier ones, so the first failure ends."""
    res = op.result.type
    if not isinstance(res, TensorType) or not res.is_static:
        rep.add(op, "BP-4", f"blueprint result must be a static tensor, got {res}")
        return
    for rule, check in (("BP-1", _bp_operands), ("BP-2", _bp_slots), ("BP-3", _bp_fragments),
                        ("BP-4", _bp_bounds), ("BP-5", _bp_policy)):
        msg = check(op)
        if msg:
            rep.add(op, rule, msg)
            return


def _bp_operands(op: BlueprintOp) -> str | None:
    for i, s in enumerate(op.sources):
        t = s.type
        if not isinstance(t, TensorType) or not t.is_static or t.rank < 1:
            return f"operand {i} must be a static physical batch (N x fragment), got {t}"
    for e in op.entries:
        if not 0 <= e.source < len(op.sources):
            return "entry names a physical batch that is not an operand of the blueprint"
    return None


def _bp_slots(op: BlueprintOp) -> str | None:
    for e in op.entries:
        n = op.sources[e.source].tensor.static_shape[0]
        slots = e.slots()
        if len(slots) == 0 or slots.start < 0 or slots.stop > n:
            slot = f"{e.slot}..{e.hi}" if e.var is not None else e.slot
            return f"slot {slot} is not a valid slot of a {n}-slot batch"
    return None


def _bp_fragments(op: BlueprintOp) -> str | None:
    res = op.result.tensor
    for e in op.entries:
        st = op.sources[e.source].tensor
        frag = st.static_shape[1:]
        if not len(e.offsets) == len(e.sizes) == len(e.strides) == res.rank:
            return f"entry for slot {e.slot} has {len(e.offsets)} offsets, {len(e.sizes)} sizes " \
                   f"and {len(e.strides)} strides for a rank-{res.rank} result"
        if squeeze(frag) != squeeze(e.sizes) or st.dtype != res.dtype:
            return f"fragment {list(frag)} of slot {e.slot} does not fit the logical slice " \
                   f"sizes {list(e.sizes)}"
        if any(s < 1 for s in e.strides):
            return f"strides must be positive, got {list(e.strides)}"
    return None


def _bp_bounds(op: BlueprintOp) -> str | None:
    shape = op.result.shape
    for e in op.entries:
        for off in e.offsets:
            free = [v for v in off.vars() if v is not e.var]
            if free:
                return f"slot {e.slot} offsets depend on %{free[0].name}, which is not the " \
                       "entry's slot variable"
        for s in (e.slot, e.hi - 1) if e.var is not None else (e.slot,):
            offs = e.offsets_at(s)
            for d, (o, sz, st) in enumerate(zip(offs, e.sizes, e.strides, strict=True)):
                if sz and (o < 0 or o + (sz - 1) * st >= shape[d]):
                    return f"slot {s} maps to dimension {d} [{o}, {o + (sz - 1) * st}] outside " \
                           f"the logical {op.result.type} (0..{shape[d] - 1})"
    return None


def _bp_policy(op: BlueprintOp) -> str | None:
    if op.conflict not in BLUEPRINT_CONFLICT:
        return f"conflict policy '{op.conflict}' is not placement (allowed: " \
               f"{', '.join(BLUEPRINT_CONFLICT)}); a Blueprint must not perform arithmetic — " \
               "use a following graph compute"
    if op.coverage not in BLUEPRINT_COVERAGE:
        return f"coverage policy '{op.coverage}' is unknown (allowed: " \
               f"{', '.join(BLUEPRINT_COVERAGE)})"
    shape = op.result.shape
    writes = sum(len(e.slots()) * math.prod(e.sizes) for e in op.entries)
    if writes > MAX_WRITES:
        return f"the entries write {writes} elements, more than the {MAX_WRITES} the verifier " \
               "checks"
    count = np.zeros(math.prod(shape), dtype=np.int64)
    grid = count.reshape(shape)
    for e in op.entries:
        if len(e.slots()) > 64:  # many slots: all at once (a batch may have 10^6 lanes)
            count += np.bincount(_written(e, shape), minlength=count.size)
            continue
        for s in e.slots():
            grid[tuple(slice(o, o + (sz - 1) * st + 1, st) if sz else slice(0, 0) for o, sz, st
                       in zip(e.offsets_at(s), e.sizes, e.strides, strict=True))] += 1
    if op.conflict == "disjoint" and (count > 1).any():
        where = np.unravel_index(int(np.flatnonzero(count > 1)[0]), shape)
        return f"conflict(disjoint) but logical element {[int(i) for i in where]} is written " \
               f"{int(count[np.ravel_multi_index(where, shape)])} times"
    if op.coverage == "complete" and (count == 0).any():
        where = np.unravel_index(int(np.flatnonzero(count == 0)[0]), shape)
        return f"coverage(complete) but logical element {[int(i) for i in where]} is not " \
               f"covered ({int((count == 0).sum())} uncovered)"
    return None


MAX_WRITES = 1 << 28
"""The most element writes BP-5 enumerates (a bound so a small file cannot take minutes)."""


def _written(e: BlueprintEntry, shape: tuple[int, ...]) -> np.ndarray:
    """Flat indices of the logical elements an entry writes, over all its slots at once
    (its offsets are affine in the slot, checked in bounds at both ends by BP-4)."""
    slots = np.arange(e.slot, e.hi) if e.var is not None else np.array([e.slot])
    rank = len(shape)
    flat = np.zeros((len(slots),) + (1,) * rank, dtype=np.int64)
    step = 1
    for d in reversed(range(rank)):
        o = e.offsets[d]
        first = o.const + (o.coef(e.var) * slots if e.var is not None else 0 * slots)
        idx = first[:, None] + np.arange(e.sizes[d]) * e.strides[d]
        flat = flat + (idx * step).reshape((len(slots),) + (1,) * d + (e.sizes[d],)
                                           + (1,) * (rank - d - 1))
        step *= shape[d]
    return flat.ravel()


# ------------------------------------------------------------------ uses of physical batches
def _check_physical_uses(func: FuncOp, rep: _Report) -> None:
    physical = {r for op in func.body.ops if isinstance(op, GraphComputeBatchOp)
                and not op.assembly and op.lanes > 1 for r in op.outs}
    for op in func.body.ops:
        if isinstance(op, PHYSICAL_CONSUMERS):
            continue
        for v in op.operands():
            if v in physical:
                what = "returned" if isinstance(op, ReturnOp) else f"used by {op.NAME}"
                rep.add(op, "PHYS-1", f"physical fragment batch %{v.name} is {what} as a logical "
                        "tensor; slot i is not logical position i — describe the reconstruction "
                        "with spat.blueprint")


# ------------------------------------------------------------------ scheduled communication
def _check_channels(func: FuncOp, rep: _Report, sends: Channels, recvs: Channels) -> None:
    """SCH-4 (one program per core), then SCH-1/2 (each channel one send, one receive, of
    one type, between cores that have programs)."""
    cores: dict[int, CoreOp | CoreBatchOp] = {}
    for op in func.body.ops:
        if isinstance(op, CoreOp):
            if op.core in cores:
                rep.add(op, "SCH-4", f"core {op.core} has two programs")
            cores[op.core] = op
        elif isinstance(op, CoreBatchOp):
            for c in op.cores:
                cores.setdefault(c, op)
    for key, ss in sorted(sends.items()):
        src, dst, ch = key
        if dst not in cores:
            rep.add(ss[0], "SCH-2", f"send to core {dst}, which has no program")
        rr = recvs.get(key, [])
        if len(ss) != 1 or len(rr) != 1:
            rep.add(ss[0], "SCH-1", f"channel {ch} from core {src} to core {dst} has {len(ss)} "
                    f"sends and {len(rr)} receives; exactly one of each is required")
        elif ss[0].message_type != rr[0].result.type:
            rep.add(rr[0], "SCH-1", f"channel {ch} sends {ss[0].message_type} but receives "
                    f"{rr[0].result.type}")
    for key, rr in sorted(recvs.items()):
        if key not in sends:
            src, dst, ch = key
            what = "has no program" if src not in cores else "never sends on it"
            rep.add(rr[0], "SCH-2" if src not in cores else "SCH-1",
                    f"receive on channel {ch} from core {src}, which {what}")
