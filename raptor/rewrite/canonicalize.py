"""Canonicalization bridge: graph IR → egglog facts → `rules/canonicalize.egg` → graph IR.

Python states what the IR is (publication geometry per dimension, which values are concat
or unit-stride slice computes, which are opaque) and rebuilds IR from what the rules derive
(`PhysDim`, `Entry`, `EntrySlots`, `Blocked`, `Identity`); the decisions — the physical
N x F shape, the Blueprint geometry, which concats and slices are placement and which
physical slots a slice selects — are the rules'.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from raptor.ir.core import Affine, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    LAYOUTS,
    BlueprintEntry,
    BlueprintOp,
    ConcatOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    MaterializeLayoutOp,
    ParallelInsertSliceOp,
    YieldOp,
)
from raptor.ir.rewriting import drop_dead, replace_uses
from raptor.ir.types import INDEX, TensorType
from raptor.rewrite.eggfile import RuleError, RuleProgram, load_program

_Ent = tuple[tuple[int, int], dict[int, tuple[int, int, int, int]], tuple[int, int]]
"""A derived Blueprint entry: its source batch result (b, r), per dimension
(offset constant c, slot coefficient k, size, stride), and its physical slots lo..hi."""


class CanonicalizeError(Exception):
    """The graph cannot be canonicalized (an invalid producer; nothing repairs it)."""


class _Undecodable(Exception):
    """A derived row that names something the IR does not have (a user rule's doing)."""


@dataclass
class CanonStats:
    batches: int = 0
    placed_concats: int = 0
    placed_slices: int = 0
    identities: int = 0
    fired: Counter[str] = field(default_factory=Counter)


@dataclass
class _Facts:
    rows: dict[str, list[tuple[int, ...]]] = field(default_factory=lambda: defaultdict(list))
    ids: dict[Value, int] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    batches: list[GraphComputeBatchOp] = field(default_factory=list)
    concats: dict[int, GraphComputeOp] = field(default_factory=dict)
    slices: dict[int, GraphComputeOp] = field(default_factory=dict)
    materializations: dict[int, MaterializeLayoutOp] = field(default_factory=dict)

    def vid(self, v: Value) -> int:
        got = self.ids.get(v)
        if got is None:
            got = self.ids[v] = len(self.values)
            self.values.append(v)
        return got


def _publication(op: GraphComputeBatchOp, r: int) -> ParallelInsertSliceOp:
    out = op.out_args[r]
    pubs = [p for p in op.body.ops if isinstance(p, ParallelInsertSliceOp) and p.dest is out]
    if len(pubs) != 1:
        raise CanonicalizeError(f"{op.where()}: [GCB-10] assembly result {r} has {len(pubs)} "
                                "publications; exactly one is required")
    return pubs[0]


def _concat_dim(op: GraphComputeOp) -> tuple[int, list[Value]] | None:
    """`spat.graph_compute` whose body only concatenates its arguments → (dim, inputs)."""
    ops = op.body.ops
    if len(ops) != 2 or not isinstance(ops[0], ConcatOp) or not isinstance(ops[1], YieldOp):
        return None
    cat, y = ops[0], ops[1]
    if y.values != [cat.result] or not all(s in op.body.args for s in cat.sources):
        return None
    return cat.dim, [op.inputs[op.body.args.index(s)] for s in cat.sources]


def _slice_dims(op: GraphComputeOp) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """`spat.graph_compute` whose body only takes unit-stride, constant, rank-preserving
    `tensor.extract_slice`s of its single argument and yields them, one per result →
    per result (offsets, sizes)."""
    ops = op.body.ops
    if len(op.inputs) != 1 or not ops or not isinstance(ops[-1], YieldOp):
        return None
    arg = op.body.args[0]
    slices = {}
    for s in ops[:-1]:
        if (not isinstance(s, ExtractSliceOp) or s.source is not arg
                or any(st != 1 for st in s.strides) or any(o.terms for o in s.offsets)):
            return None
        t = s.result.type
        if not isinstance(t, TensorType) or t.static_shape != tuple(s.sizes):
            return None
        slices[s.result] = (tuple(o.const for o in s.offsets), tuple(s.sizes))
    got = [slices.get(v) for v in ops[-1].values]
    if len(got) != len(op.outs) or any(g is None for g in got):
        return None
    return [g for g in got if g is not None]


def _collect(func: FuncOp) -> _Facts:
    f = _Facts()
    for a in func.args:
        f.rows["Opaque"].append((f.vid(a),))
    for op in func.body.ops:
        if isinstance(op, GraphComputeBatchOp) and op.assembly:
            b = len(f.batches)
            f.batches.append(op)
            f.rows["Batch"].append((b, op.lanes))
            for r, res in enumerate(op.outs):
                pub = _publication(op, r)
                for d, e in enumerate(pub.source.shape):
                    f.rows["FragDim"].append((b, r, d, e))
                for d, (o, size, stride) in enumerate(zip(pub.offsets, pub.sizes, pub.strides,
                                                          strict=True)):
                    if any(v is not op.lane for v in o.vars()):
                        raise CanonicalizeError(f"{pub.where()}: assembly offset {d} must be "
                                                "affine in the lane alone")
                    f.rows["PubDim"].append((b, r, d, o.const, o.coef(op.lane), size, stride))
                f.rows["BatchValue"].append((f.vid(res), b, r))
            continue
        if isinstance(op, GraphComputeOp) and type(op) is GraphComputeOp:
            cat = _concat_dim(op)
            if cat is not None and len(op.outs) == 1:
                dim, ins = cat
                x = f.vid(op.outs[0])
                f.concats[x] = op
                f.rows["Concat"].append((x, dim))
                start = 0
                for i, v in enumerate(ins):
                    f.rows["ConcatIn"].append((x, i, f.vid(v)))
                    f.rows["ConcatAt"].append((x, i, start))
                    start += v.shape[dim]
                continue
            cuts = _slice_dims(op)
            if cuts is not None:
                vin = f.vid(op.inputs[0])
                for res, (starts, sizes) in zip(op.outs, cuts, strict=True):
                    sx = f.vid(res)
                    f.slices[sx] = op
                    f.rows["Slice"].append((sx, vin, len(sizes)))
                    for d, (o0, n) in enumerate(zip(starts, sizes, strict=True)):
                        f.rows["SliceDim"].append((sx, d, o0, n))
                continue
        if isinstance(op, MaterializeLayoutOp):
            m = f.vid(op.result)
            f.materializations[m] = op
            f.rows["Materialize"].append((m, f.vid(op.source), LAYOUTS.index(op.from_layout),
                                          LAYOUTS.index(op.to_layout)))
        for res in op.results():
            f.rows["Opaque"].append((f.vid(res),))
    return f


def canonicalize(module: Module, rules_dir: str | os.PathLike[str] | None = None) -> CanonStats:
    """Rewrite every function of `module` in place; returns what was done and rules fired."""
    stats = CanonStats()
    for func in module.funcs:
        _canonicalize_func(func, rules_dir, stats)
    return stats


def _canonicalize_func(func: FuncOp, rules_dir: str | os.PathLike[str] | None,
                       stats: CanonStats) -> None:
    facts = _collect(func)
    if not facts.batches and not facts.materializations:
        return
    program = load_program("canonicalize", rules_dir)
    program.load_facts(facts.rows)
    stats.fired.update(program.run_schedule())
    try:
        _rebuild(func, facts, program, stats)
    except _Undecodable as e:
        raise RuleError(f"{program.where}: error: the rules derived {e}; Raptor cannot "
                        "rebuild the IR from it") from None


def _rebuild(func: FuncOp, facts: _Facts, program: RuleProgram, stats: CanonStats) -> None:
    """Rebuild `func` from the derived tables; rows naming what the IR does not have raise
    `_Undecodable`."""
    phys: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    for b, r, d, e in program.rows("PhysDim"):
        phys[(b, r)][d] = e
    entries: dict[int, dict[object, _Ent]] = defaultdict(dict)
    for val, eid, bi, ri, di, ci, ki, size, stride in program.rows("Entry"):
        ent = entries[val].setdefault(eid, ((bi, ri), {}, (0, 0)))
        ent[1][di] = (ci, ki, size, stride)
    for val, eid, lo, hi in program.rows("EntrySlots"):
        if eid not in entries.get(val, {}):
            raise _Undecodable(f"EntrySlots for value {val} without an Entry")
        key, dims, _ = entries[val][eid]
        entries[val][eid] = (key, dims, (lo, hi))
    blocked = {x for (x,) in program.rows("Blocked")}
    physical: dict[tuple[int, int], Value] = {}
    new_ops: list[Operation] = []
    for op in func.body.ops:
        if isinstance(op, GraphComputeBatchOp) and op.assembly:
            b = facts.batches.index(op)
            new_ops += [op, *_make_physical(op, b, phys, entries, facts, physical)]
            stats.batches += 1
            continue
        x = facts.ids.get(op.outs[0]) if isinstance(op, GraphComputeOp) and op.outs else None
        if x is not None and x in facts.concats and x not in blocked and entries.get(x):
            assert isinstance(op, GraphComputeOp)
            new_ops.append(_blueprint(op.outs[0], entries[x], physical))
            stats.placed_concats += 1
            continue
        if isinstance(op, GraphComputeOp) and x is not None and x in facts.slices:
            placed = [res for res in op.outs if facts.ids[res] not in blocked
                      and entries.get(facts.ids[res])]
            new_ops.extend(_drop_results(op, placed))
            new_ops += [_blueprint(res, entries[facts.ids[res]], physical) for res in placed]
            stats.placed_slices += len(placed)
            continue
        new_ops.append(op)
    func.body.ops = new_ops
    for m, src in program.rows("Identity"):
        mat = facts.materializations.get(m)
        if mat is None:
            raise _Undecodable(f"Identity {m} {src}, but value {m} is not a materialize_layout")
        if not 0 <= src < len(facts.values):
            raise _Undecodable(f"Identity {m} {src}, but there is no value {src}")
        replace_uses(func.body, mat.result, facts.values[src])
        stats.identities += 1
    drop_dead(func.body)


def _make_physical(op: GraphComputeBatchOp, b: int, phys: dict[tuple[int, int], dict[int, int]],
                   entries: dict[int, dict[object, _Ent]], facts: _Facts,
                   physical: dict[tuple[int, int], Value]) -> list[BlueprintOp]:
    """Turn one assembly batch into N x F in place; return the Blueprints of its results."""
    lane = op.lane
    new_outs, new_args, bps = [], [], []
    for r, logical in enumerate(op.outs):
        dims = phys.get((b, r), {})
        pub = _publication(op, r)
        frag = pub.source.type
        assert isinstance(frag, TensorType)
        if sorted(dims) != list(range(frag.rank + 1)):
            raise _Undecodable(f"PhysDim dims {sorted(dims)} for batch {b} result {r}; its "
                               f"physical result has dims 0..{frag.rank}")
        ptype = TensorType(tuple(dims[d] for d in range(len(dims))), logical.tensor.dtype)
        pval = Value(ptype, (logical.name or "p") + "_frags" if logical.name else None)
        parg = Value(ptype, "out")
        pub.dest = parg
        pub.offsets = (Affine(0, ((1, lane),)),) + (Affine(0),) * frag.rank
        pub.sizes = (1, *frag.static_shape)
        pub.strides = (1,) * (frag.rank + 1)
        new_outs.append(pval)
        new_args.append(parg)
        physical[(b, r)] = pval
        own = {k: e for k, e in entries[facts.ids[logical]].items() if e[0] == (b, r)}
        bps.append(_blueprint(logical, own, physical))
    nin = 1 + len(op.inputs)
    op.body.args[nin:] = new_args
    for a in new_args:
        a.owner = op.body
    op.outs = new_outs
    op.own_results()
    op.assembly = False
    return bps


def _drop_results(op: GraphComputeOp, gone: list[Value]) -> list[Operation]:
    """The slice compute without the results in `gone` (no op at all if none remains)."""
    if not gone:
        return [op]
    keep = [i for i, res in enumerate(op.outs) if res not in gone]
    if not keep:
        return []
    y = op.body.ops[-1]
    assert isinstance(y, YieldOp)
    y.values = [y.values[i] for i in keep]
    live = set(y.values)
    op.body.ops = [o for o in op.body.ops[:-1] if any(r in live for r in o.results())] + [y]
    op.outs = [op.outs[i] for i in keep]
    op.own_results()
    return [op]


def _blueprint(result: Value, ent: dict[object, _Ent],
               physical: dict[tuple[int, int], Value]) -> BlueprintOp:
    """One Blueprint whose entries are affine families over the physical sources."""
    sources: list[Value] = []
    entries = []
    for src_key, dims, (lo, hi) in sorted(
            ent.values(), key=lambda e: (e[0], e[2], sorted(e[1].items()))):
        src = physical.get(src_key)
        if src is None:
            raise _Undecodable(f"an Entry of a value from batch {src_key[0]} result "
                               f"{src_key[1]}, which is not a physical batch result before it")
        if sorted(dims) != list(range(len(dims))):
            raise _Undecodable(f"an Entry from batch {src_key[0]} result {src_key[1]} with "
                               f"dims {sorted(dims)}")
        if src not in sources:
            sources.append(src)
        var = Value(INDEX, "s")
        geom = [dims[d] for d in range(len(dims))]
        family = hi - lo > 1 or any(k for _, k, _, _ in geom)
        offsets = tuple(Affine(c, ((k, var),) if k else ()) if family else Affine(c + k * lo)
                        for c, k, _, _ in geom)
        entries.append(BlueprintEntry(
            sources.index(src), lo, offsets,
            tuple(g[2] for g in geom), tuple(g[3] for g in geom),
            var if family else None, hi if family else 0))
    op = BlueprintOp(sources, result, entries)
    result.owner = op
    return op
