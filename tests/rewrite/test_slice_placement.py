"""Split/Slice as placement (rules/canonicalize.egg, "slice as slot selection"): a slice that
covers whole fragments becomes a Blueprint selecting exactly the slots it reads; one that cuts
through a fragment stays a graph compute. Meaning is preserved, and the rules decide."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from raptor.frontend import import_onnx
from raptor.frontend.oracle import run_reference
from raptor.ir.core import Value
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import BlueprintOp, ExtractSliceOp, GraphComputeBatchOp, GraphComputeOp
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import lower
from raptor.rewrite.canonicalize import CanonStats, canonicalize
from raptor.rewrite.eggfile import resolve_rules_dir
from raptor.solver.from_ir import build_compute_graph
from raptor.target import load_target

# Crossbars of 4 columns, each its own array group: an 8-channel conv publishes two channel
# tiles (c0, c1) per row.
TARGET = dataclasses.replace(load_target("default"), crossbar_cols=4, array_group_max=1)
C, H, W = 8, 4, 4


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(kind: str, axis: int = 1, parts: tuple[int, ...] = (4, 4),
           start: int = 0, end: int = 2) -> onnx.ModelProto:
    """conv (8 channels) → Split(axis, parts) or Slice(start:end on axis) → relu/sigmoid."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal((C, C, 3, 3)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    outs = []
    if kind == "split":
        names = [f"p{i}" for i in range(len(parts))]
        inits.append(_i64("sp", list(parts)))
        nodes.append(helper.make_node("Split", ["c", "sp"], names, axis=axis))
        for i, (n, part) in enumerate(zip(names, parts, strict=True)):
            nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Sigmoid", [n], [f"y{i}"]))
            shape = [1, C, H, W]
            shape[axis] = part
            outs.append((f"y{i}", shape))
    else:
        inits += [_i64("st", [start]), _i64("en", [end]), _i64("ax", [axis])]
        nodes += [helper.make_node("Slice", ["c", "st", "en", "ax"], ["p0"]),
                  helper.make_node("Relu", ["p0"], ["y0"])]
        shape = [1, C, H, W]
        shape[axis] = end - start
        outs.append(("y0", shape))
    graph = helper.make_graph(
        nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _slice_computes(module: Module) -> int:
    """Graph computes that move data with `tensor.extract_slice` at function level."""
    return sum(1 for op in module.main().body.ops if type(op) is GraphComputeOp
               and any(isinstance(o, ExtractSliceOp) for o in op.body.ops))


def _run(model: onnx.ModelProto, rules: Path | None = None
         ) -> tuple[Module, CanonStats, list[np.ndarray]]:
    """Lower, canonicalize with `rules`; check verification and meaning; return the module."""
    graph = import_onnx(model)
    _, layouts = select_layouts(graph, "exact")
    low = lower(graph, TARGET, layouts)
    x = np.random.default_rng(3).standard_normal((1, C, H, W)).astype(np.float32)
    before = Interpreter(low.module).run([x])
    assert _slice_computes(low.module) == 1
    stats = canonicalize(low.module, rules)
    assert verify_module(low.module) == []
    after = Interpreter(low.module).run([x])
    want = run_reference(model, {"x": x})
    for b, a, w in zip(before, after, want.values(), strict=True):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-4)
    return low.module, stats, after


def _blueprint_of(module: Module, name: str) -> BlueprintOp:
    return next(op for op in module.main().body.ops if isinstance(op, BlueprintOp)
                and op.result.name == name)


@pytest.mark.parametrize(("axis", "parts"), [(1, (4, 4)), (2, (2, 2)), (2, (1, 3)),
                                             (2, (1, 1, 2)), (2, (1, 2, 1))])
def test_split_of_whole_fragments_is_placement(axis: int, parts: tuple[int, ...]) -> None:
    module, stats, _ = _run(_model("split", axis, parts))
    assert _slice_computes(module) == 0
    assert stats.placed_slices == len(parts)
    assert stats.fired["slice-selects-inside-slots"] > 0


def test_slice_of_whole_rows_selects_slots() -> None:
    module, stats, _ = _run(_model("slice", axis=2, start=1, end=3))
    assert _slice_computes(module) == 0 and stats.placed_slices == 1
    bp = _blueprint_of(module, "p0")
    # rows 1..2 of each channel tile: slots 0..2 of the two 2-lane middle batches
    assert [(e.slot, e.hi) for e in bp.entries] == [(0, 2), (0, 2)]
    assert all(s.type.static_shape[0] == 2 for s in bp.sources)  # type: ignore[attr-defined]


def test_slice_selecting_inside_a_family_keeps_it_contiguous() -> None:
    module, _, _ = _run(_model("split", 2, (3, 1)))
    bp = _blueprint_of(module, "p0")
    # the 2-lane middle row batch of each tile is wholly inside rows 0..2 → one family each
    fams = [(e.slot, e.hi) for e in bp.entries if e.var is not None and e.hi - e.slot > 1]
    assert fams == [(0, 2), (0, 2)]
    second = _blueprint_of(module, "p1")
    assert len(second.entries) == 2 and len(second.sources) == 2


@pytest.mark.parametrize(("kind", "axis", "parts", "start", "end"), [
    ("split", 1, (2, 6), 0, 0),     # cuts through the channel tile c0 (channels 0..3)
    ("slice", 1, (), 1, 5),         # channels 1..4: partly in both tiles
    ("slice", 3, (), 0, 2),         # half of every row fragment's width
])
def test_slice_through_fragments_stays_compute(kind: str, axis: int, parts: tuple[int, ...],
                                              start: int, end: int) -> None:
    module, stats, _ = _run(_model(kind, axis, parts or (4, 4), start, end))
    assert _slice_computes(module) == 1
    assert stats.placed_slices == 0
    assert stats.fired["slice-partial-slot-blocks"] > 0


def test_split_consumers_depend_only_on_their_tile() -> None:
    """A lane of the consumer of split half 0 (channels 0..3 = tile c0) reads only c0
    producers; without placement it depended on the split compute (all tiles)."""
    module, _, _ = _run(_model("split", 1, (4, 4)))
    build = build_compute_graph(module.main(), TARGET)
    insts = build.projection.instances
    a, b = _blueprint_of(module, "p0"), _blueprint_of(module, "p1")
    producers: dict[Value, int] = {}
    for op in module.main().body.ops:
        if isinstance(op, GraphComputeBatchOp):
            for out in op.outs:
                producers[out] = id(op)
    own_a = {producers[s] for s in a.sources}
    own_b = {producers[s] for s in b.sources}
    assert own_a and own_b and not own_a & own_b
    consumer = next(op for op in module.main().body.ops
                    if isinstance(op, GraphComputeBatchOp) and a.result in op.inputs)
    lanes = {i.id for i in insts if i.op is consumer}
    preds = {id(insts[e.src].op) for e in build.graph.edges if e.dst in lanes}
    assert preds and preds <= own_a, "a consumer lane of one half reads the other half"


def test_concat_of_split_halves_composes() -> None:
    """concat(split(conv)) swapped: Blueprint-of-Blueprint through Sel and Via identities."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal((C, C, 3, 3)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b"),
             _i64("sp", [4, 4]), _i64("st", [1]), _i64("en", [3]), _i64("ax", [2])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["c", "sp"], ["a", "bb"], axis=1),
             helper.make_node("Concat", ["bb", "a"], ["s"], axis=1),
             helper.make_node("Slice", ["s", "st", "en", "ax"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(
        nodes, "swap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 2, W])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    graph_ir = import_onnx(model)
    _, layouts = select_layouts(graph_ir, "exact")
    low = lower(graph_ir, TARGET, layouts)
    x = np.random.default_rng(3).standard_normal((1, C, H, W)).astype(np.float32)
    before = Interpreter(low.module).run([x])
    stats = canonicalize(low.module)
    assert verify_module(low.module) == []
    after = Interpreter(low.module).run([x])
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_allclose(after[0], run_reference(model, {"x": x})["y"],
                               rtol=1e-4, atol=1e-4)
    assert _slice_computes(low.module) == 0
    assert stats.placed_slices == 3 and stats.placed_concats >= 1
    t = _blueprint_of(low.module, "t")
    assert len(t.entries) == 2 and all(e.hi - e.slot == 2 for e in t.entries)


def _without_slice_rules(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(resolve_rules_dir(), rules)
    egg = rules / "canonicalize.egg"
    text = egg.read_text()
    start = text.index("; ---------------------------------------------------------------- slice")
    egg.write_text(text[:start])
    return rules


def test_removing_slice_rules_keeps_slices_as_computes(tmp_path: Path) -> None:
    rules = _without_slice_rules(tmp_path)
    for model in (_model("split", 1, (4, 4)), _model("slice", 2, start=1, end=3)):
        module, stats, _ = _run(model, rules)
        assert _slice_computes(module) == 1
        assert stats.placed_slices == 0


def test_without_slice_rules_consumers_read_the_split_compute(tmp_path: Path) -> None:
    """The dependency shrink above is the rules' doing: without them a consumer lane of one
    half depends on the split compute, which reads every channel tile."""
    module, _, _ = _run(_model("split", 1, (4, 4)), _without_slice_rules(tmp_path))
    build = build_compute_graph(module.main(), TARGET)
    insts = build.projection.instances
    split = next(op for op in module.main().body.ops if type(op) is GraphComputeOp
                 and any(isinstance(o, ExtractSliceOp) for o in op.body.ops))
    consumer = next(op for op in module.main().body.ops
                    if isinstance(op, GraphComputeBatchOp) and split.outs[0] in op.inputs)
    lanes = {i.id for i in insts if i.op is consumer}
    assert {id(insts[e.src].op) for e in build.graph.edges if e.dst in lanes} == {id(split)}


def test_dense_reassembly_is_not_placement() -> None:
    """A compute that yields its whole argument is DenseNCHW reassembly (lowering's
    dense storage): it moves data into one place on purpose, so the rules leave it a compute
    and dense layouts keep their cost in the scheduled graph."""
    inits = [_i64("sp", [2, 2])]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Split", ["r", "sp"], ["a", "b"], axis=2),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=2)]
    g = helper.make_graph(
        nodes, "fwd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = import_onnx(model)
    _, layouts = select_layouts(graph, "disabled")
    low = lower(graph, load_target("default"), layouts)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    before = Interpreter(low.module).run([x])
    canonicalize(low.module)
    assert verify_module(low.module) == []
    after = Interpreter(low.module).run([x])
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_allclose(after[0], run_reference(model, {"x": x})["y"], rtol=1e-5)
    forwarding = [op for op in low.module.main().body.ops if type(op) is GraphComputeOp
                  and len(op.body.ops) == 1]
    assert forwarding, "dense reassembly stays a graph compute"
