"""Canonical graph IR → ComputeGraph: one task per graph instance, edges from the
publication map (`raptor.passes.projection`), costs from `raptor.solver.costs`."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from raptor.ir.core import Value
from raptor.ir.module import Module
from raptor.ir.ops import FuncOp, MvmOp, ReturnOp, WeightOp
from raptor.ir.types import TensorType
from raptor.passes.lower import tile_plan
from raptor.passes.materialize import received_compute
from raptor.passes.memory import activation_bytes, compute_memory
from raptor.passes.projection import Box, Piece, Projection
from raptor.solver.costs import block_cost_ns, block_mvms, shared_read_ns, shared_write_ns
from raptor.solver.graph import ComputeGraph, MemoryDemand
from raptor.target import Target


@dataclass
class GraphBuild:
    """The ComputeGraph with what materialization needs to map tasks back to IR."""

    graph: ComputeGraph
    projection: Projection
    tiles: dict[str, range]
    """The crossbar ids (task weights) of each weight symbol: one per crossbar of its array
    group, so that capacity counts crossbars and a group stays on one core."""
    outputs: list[list[Piece]] = field(default_factory=list)
    mvms: int = 0
    fragment_keys: list[FragmentKey] = field(default_factory=list)
    """Per fragment id of the graph, what travels (see `fragment_key`)."""


FragmentKey = tuple[int, int, int, tuple[tuple[int, ...], tuple[int, ...]] | None]


def fragment_key(p: Piece) -> FragmentKey:
    """What travels as one message: a producer's result slot, or one crop of a whole value."""
    return (p.producer, p.result, p.slot, None if p.crop is None else (p.crop, p.sizes))


def output_pieces(proj: Projection, func: FuncOp) -> list[list[Piece]]:
    """For each function result, the fragments that make it up (whole-tensor box)."""
    ret = func.body.ops[-1]
    assert isinstance(ret, ReturnOp)
    outs = []
    for v in ret.values:
        entries = proj.entries(v)
        if entries is None:
            raise ValueError(f"function result %{v.name} is not produced by a graph instance")
        outs.append(proj.pieces(entries, Box.whole(v.shape)))
    return outs


def build_compute_graph(func: FuncOp, target: Target) -> GraphBuild:
    proj = Projection(func)
    tiles: dict[str, range] = {}
    crossbars = 0
    graph = ComputeGraph()
    outputs = output_pieces(proj, func)
    store_ns: Counter[int] = Counter()
    store_bytes: Counter[int] = Counter()
    for pieces in outputs:
        for p in pieces:
            store_ns[p.producer] += shared_write_ns(target, p.fragment.nbytes)
            store_bytes[p.producer] += p.fragment.nbytes
    mvms = 0
    per_op: dict[int, tuple[int, int, set[Value]]] = {}  # every lane of an op costs the same
    for inst in proj.instances:
        op = inst.op
        known = per_op.get(id(op))
        if known is None:
            known = per_op[id(op)] = (
                block_cost_ns(op.body, target), block_mvms(op.body),
                {o.weight for o in op.body.walk() if isinstance(o, MvmOp)})
        body_cost, body_mvms, mvm_weights = known
        mvms += body_mvms
        cost = body_cost + store_ns[inst.id]
        weights: set[int] = set()
        loaded = 0
        args = op.body.args[1:] if inst.lane is not None else op.body.args
        for use in inst.uses:
            if use.kind == "arg":
                if all(use.box.sizes):
                    nbytes = math.prod(use.box.sizes) * use.value.tensor.itemsize
                    cost += shared_read_ns(target, nbytes)
                    loaded += nbytes
            elif use.kind == "placed":
                cost += sum(target.local_copy_ns(p.fragment.nbytes) for p in use.pieces)
            elif use.kind == "weight" and args[use.index] in mvm_weights:
                owner = use.value.owner
                assert isinstance(owner, WeightOp)
                ids = tiles.get(owner.symbol)
                if ids is None:
                    n = target.crossbars_of(owner.result.tensor.static_shape)
                    ids = tiles[owner.symbol] = range(crossbars, crossbars + n)
                    crossbars += n
                    graph.tile_layer.update(dict.fromkeys(ids, tile_plan(owner.symbol)))
                weights.update(ids)
        graph.add_task(inst.name, cost, weights=frozenset(weights), batch=inst.batch,
                       lane=inst.lane or 0, shared_ns=store_ns[inst.id], load_bytes=loaded,
                       store_bytes=store_bytes[inst.id])
    # One fragment per (producer, result, slot, crop): what materialization sends once per
    # destination core (raptor.passes.materialize keys its messages the same way).
    # Ids follow the keys' order, as materialization orders a producer's equally urgent sends.
    frag_bytes: dict[FragmentKey, int] = {}
    frag_numel: dict[FragmentKey, int] = {}
    for inst in proj.instances:
        for use in inst.uses:
            for p in use.pieces:
                if p.producer != inst.id:
                    frag_bytes[fragment_key(p)] = p.fragment.nbytes
                    frag_numel[fragment_key(p)] = math.prod(p.sizes) if p.crop else p.fragment.numel
                if len(p.offsets) == 4 and p.fragment.rank >= 2:  # an NCHW activation
                    crop = p.crop or (0, 0)
                    graph.position[p.producer] = (p.offsets[2] - crop[-2], p.offsets[3] - crop[-1])
    keys = sorted(frag_bytes, key=lambda k: (*k[:3], k[3] or ((), ())))
    frag_ids = {key: graph.add_fragment(key[0], frag_bytes[key]) for key in keys}
    for inst in proj.instances:
        reads: Counter[int] = Counter()
        for use in inst.uses:
            for p in use.pieces:
                if p.producer == inst.id:
                    continue
                fid = frag_ids[fragment_key(p)]
                # a crop of a local value is copied out, then inserted (materialize.gather)
                twice = p.crop is not None and not (len(use.pieces) == 1 and p.box == use.box)
                reads[fid] += target.local_copy_ns(p.fragment.nbytes) if twice else 0
        per_producer: Counter[int] = Counter()
        for fid, local_ns in reads.items():
            graph.add_read(inst.id, fid, local_ns)
            frag = graph.fragments[fid]
            per_producer[frag.producer] += frag.bytes
        for u, nbytes in sorted(per_producer.items()):
            graph.add_edge(u, inst.id, nbytes)
    graph.memory = memory_demand(func, proj, [frag_numel[k] for k in keys], target)
    graph.freeze()
    return GraphBuild(graph, proj, tiles, outputs, mvms, keys)


def memory_demand(func: FuncOp, proj: Projection, fragment_numel: list[int],
                  target: Target) -> MemoryDemand:
    """Local memory of every instance as materialization builds it
    (`raptor.passes.materialize.received_compute`, measured by the allocator's rules in
    `raptor.passes.memory`), at the target's activation precision. Lanes of one op whose
    input boxes have the same shapes need the same: measured once."""
    eb = activation_bytes(target)
    module = Module([func])
    scratch: list[int] = []
    output: list[int] = []
    constants: list[list[int]] = []
    ids: dict[str, int] = {}
    sizes: list[int] = []
    seen: dict[tuple[object, ...], tuple[int, int, list[int]]] = {}
    for inst in proj.instances:
        key = (id(inst.op), *((u.kind, u.box.sizes, len(u.pieces)) for u in inst.uses))
        got = seen.get(key)
        if got is None:
            sc = received_compute(module, proj, inst)
            peak, consts = compute_memory(sc, eb, target)
            for name, nbytes in consts.items():
                if name not in ids:
                    ids[name] = len(sizes)
                    sizes.append(nbytes)
            got = seen[key] = (peak, sum(r.type.numel for r in sc.outs
                                         if isinstance(r.type, TensorType)) * eb,
                               sorted(ids[name] for name in consts))
        scratch.append(got[0])
        output.append(got[1])
        constants.append(got[2])
    return MemoryDemand(scratch, output, [n * eb for n in fragment_numel], constants, sizes)
