"""Canonicalization bridge: graph IR → egglog facts → `rules/canonicalize.egg` → graph IR.

Python states what the IR is (publication geometry per dimension, which values are concat
computes, which are opaque) and rebuilds IR from what the rules derive (`PhysDim`, `Entry`,
`Blocked`, `Identity`); the decisions — the physical N x F shape, the Blueprint geometry,
which concats are placement — are the rules'.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from raptor.ir.core import Affine, Block, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    LAYOUTS,
    BlueprintEntry,
    BlueprintOp,
    ConcatOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    MaterializeLayoutOp,
    ParallelInsertSliceOp,
    YieldOp,
)
from raptor.ir.rewriting import drop_dead, replace_uses
from raptor.ir.types import INDEX, TensorType
from raptor.rewrite.eggfile import load_program

_Ent = tuple[tuple[int, int], dict[int, tuple[int, int, int, int]]]
"""A derived Blueprint entry: its source batch result (b, r) and per dimension
(offset constant c, slot coefficient k, size, stride)."""


class CanonicalizeError(Exception):
    """The graph cannot be canonicalized (an invalid producer; nothing repairs it)."""


@dataclass
class CanonStats:
    batches: int = 0
    placed_concats: int = 0
    identities: int = 0
    fired: dict[str, int] = field(default_factory=dict)


@dataclass
class _Facts:
    rows: dict[str, list[tuple[int, ...]]] = field(default_factory=lambda: defaultdict(list))
    ids: dict[Value, int] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    batches: list[GraphComputeBatchOp] = field(default_factory=list)
    concats: dict[int, GraphComputeOp] = field(default_factory=dict)
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
        raise CanonicalizeError(
            f"{op.where()}: [GCB-10] assembly result {r} has {len(pubs)} "
            "publications; exactly one is required"
        )
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


def _collect(func: FuncOp) -> _Facts:
    f = _Facts()
    for a in func.args:
        f.rows["Opaque"].append((f.vid(a),))
    for bi, op in enumerate(func.body.ops):
        del bi
        if isinstance(op, GraphComputeBatchOp) and op.assembly:
            b = len(f.batches)
            f.batches.append(op)
            f.rows["Batch"].append((b, op.lanes))
            for r, res in enumerate(op.outs):
                pub = _publication(op, r)
                src = pub.source.type
                assert isinstance(src, TensorType)
                for d, e in enumerate(src.static_shape):
                    f.rows["FragDim"].append((b, r, d, e))
                for d, (o, size, stride) in enumerate(
                    zip(pub.offsets, pub.sizes, pub.strides, strict=True)
                ):
                    if any(v is not op.lane for v in o.vars()):
                        raise CanonicalizeError(
                            f"{pub.where()}: assembly offset {d} must be affine in the lane alone"
                        )
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
                    t = v.type
                    assert isinstance(t, TensorType)
                    start += t.static_shape[dim]
                continue
        if isinstance(op, MaterializeLayoutOp):
            m = f.vid(op.result)
            f.materializations[m] = op
            f.rows["Materialize"].append(
                (m, f.vid(op.source), LAYOUTS.index(op.from_layout), LAYOUTS.index(op.to_layout))
            )
        for res in op.results():
            f.rows["Opaque"].append((f.vid(res),))
    return f


def canonicalize(module: Module, rules_dir: str | os.PathLike[str] | None = None) -> CanonStats:
    """Rewrite every function of `module` in place; returns what was done and rules fired."""
    stats = CanonStats()
    for func in module.funcs:
        _canonicalize_func(func, rules_dir, stats)
    return stats


_TABLES = (
    "Batch",
    "PubDim",
    "FragDim",
    "BatchValue",
    "Concat",
    "ConcatIn",
    "ConcatAt",
    "Opaque",
    "Materialize",
)


def _canonicalize_func(
    func: FuncOp, rules_dir: str | os.PathLike[str] | None, stats: CanonStats
) -> None:
    facts = _collect(func)
    if not facts.batches and not facts.materializations:
        return
    program = load_program("canonicalize", rules_dir)
    with tempfile.TemporaryDirectory(prefix="raptor-canon-") as tmp:
        commands = []
        for name in _TABLES:
            path = Path(tmp) / f"{name}.tsv"
            path.write_text(
                "".join("\t".join(map(str, row)) + "\n" for row in facts.rows.get(name, [])),
                encoding="utf-8",
            )
            commands.append(f'(input {name} "{path.as_posix()}")')
        program.run("\n".join(commands), "<canonicalize facts>")
    for rule, n in program.run_schedule().items():
        stats.fired[rule] = stats.fired.get(rule, 0) + n
    frozen = program.egraph.freeze().functions
    i64 = program.egraph.value_to_i64

    def rows(table: str) -> list[tuple[int, ...]]:
        fn = frozen.get(table)
        return [tuple(i64(c) for c in row.inputs) for row in fn.rows] if fn else []

    phys: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    for b, r, d, e in rows("PhysDim"):
        phys[(b, r)][d] = e
    entries: dict[int, dict[object, _Ent]] = defaultdict(dict)
    fn = frozen.get("Entry")
    for row in fn.rows if fn else []:
        eid = row.inputs[1]
        val, bi, ri, di, ci, ki, size, stride = (i64(c) for i, c in enumerate(row.inputs)
                                                 if i != 1)
        ent = entries[val].setdefault(eid, ((bi, ri), {}))
        ent[1][di] = (ci, ki, size, stride)
    blocked = {x for (x,) in rows("Blocked")}
    physical: dict[tuple[int, int], Value] = {}
    new_ops: list[Operation] = []
    for op in func.body.ops:
        if isinstance(op, GraphComputeBatchOp) and op.assembly:
            b = facts.batches.index(op)
            bps = _make_physical(op, b, phys, entries, facts, physical)
            new_ops.append(op)
            new_ops.extend(bps)
            stats.batches += 1
            continue
        x = facts.ids.get(op.outs[0]) if isinstance(op, GraphComputeOp) and op.outs else None
        if x is not None and x in facts.concats and x not in blocked and entries.get(x):
            assert isinstance(op, GraphComputeOp)
            new_ops.append(_blueprint(op.outs[0], entries[x], physical))
            stats.placed_concats += 1
            continue
        new_ops.append(op)
    func.body.ops = new_ops
    for m, src in rows("Identity"):
        mat = facts.materializations[m]
        replace_uses(func.body, mat.result, facts.values[src])
        stats.identities += 1
    drop_dead(func.body)


def _make_physical(
    op: GraphComputeBatchOp,
    b: int,
    phys: dict[tuple[int, int], dict[int, int]],
    entries: dict[int, dict[object, _Ent]],
    facts: _Facts,
    physical: dict[tuple[int, int], Value],
) -> list[BlueprintOp]:
    """Turn one assembly batch into N x F in place; return the Blueprints of its results."""
    lane = op.lane
    new_outs, new_args, bps = [], [], []
    for r, logical in enumerate(op.outs):
        dims = phys[(b, r)]
        t = logical.type
        assert isinstance(t, TensorType)
        ptype = TensorType(tuple(dims[d] for d in range(len(dims))), t.dtype)
        pval = Value(ptype, (logical.name or "p") + "_frags" if logical.name else None)
        parg = Value(ptype, "out")
        pub = _publication(op, r)
        pub.dest = parg
        frag = pub.source.type
        assert isinstance(frag, TensorType)
        pub.offsets = (Affine(0, ((1, lane),)),) + (Affine(0),) * frag.rank
        pub.sizes = (1, *frag.static_shape)
        pub.strides = (1,) * (frag.rank + 1)
        new_outs.append(pval)
        new_args.append(parg)
        physical[(b, r)] = pval
        v = facts.ids[logical]
        own = {k: e for k, e in entries[v].items() if e[0] == (b, r)}
        bp = _blueprint(logical, own, physical)
        bps.append(bp)
    nin = 1 + len(op.inputs)
    op.body.args[nin:] = new_args
    for a in new_args:
        a.owner = op.body
    op.outs = new_outs
    op.own_results()
    op.assembly = False
    return bps


def _blueprint(result: Value, ent: dict[object, _Ent],
               physical: dict[tuple[int, int], Value]) -> BlueprintOp:
    """One Blueprint whose entries are affine families over the physical sources."""
    sources: list[Value] = []
    entries = []
    for src_key, dims in sorted(ent.values(), key=lambda e: (e[0], sorted(e[1].items()))):
        src = physical[src_key]
        if src not in sources:
            sources.append(src)
        st = src.type
        assert isinstance(st, TensorType)
        n = st.static_shape[0]
        var = Value(INDEX, "s")
        offsets = tuple(Affine(c, ((k, var),) if k else ()) for c, k, _, _ in
                        (dims[d] for d in range(len(dims))))
        family = any(o.terms for o in offsets) or n > 1
        entries.append(BlueprintEntry(
            sources.index(src), 0,
            offsets if family else tuple(Affine(o.const) for o in offsets),
            tuple(dims[d][2] for d in range(len(dims))),
            tuple(dims[d][3] for d in range(len(dims))),
            var if family else None, n))
    op = BlueprintOp(sources, result, entries)
    result.owner = op
    return op


def block_ops(block: Block) -> int:
    return sum(1 for _ in block.walk())
