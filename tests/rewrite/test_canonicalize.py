"""rules/canonicalize.egg through its bridge: meaning is preserved, the output verifies, and
editing the rules changes what the compiler does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from raptor.frontend import import_onnx
from raptor.frontend.oracle import run_reference
from raptor.ir.interpreter import Interpreter
from raptor.ir.ops import BlueprintOp, GraphComputeOp
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import lower
from raptor.rewrite.canonicalize import canonicalize
from raptor.rewrite.eggfile import RuleError, resolve_rules_dir
from raptor.target import load_target

TARGET = load_target("default")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _random_model(ops: list[str], channels: int, size: int, seed: int) -> onnx.ModelProto:
    """A small CNN from a list of op names; residual adds and concats reach back in the DAG."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    values = [("x", channels)]
    for i, op in enumerate(ops):
        cur, c = values[-1]
        out = f"v{i}"
        if op == "conv":
            w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
            inits += [numpy_helper.from_array(w, f"w{i}"),
                      numpy_helper.from_array(rng.standard_normal(c).astype(np.float32),
                                              f"b{i}")]
            nodes.append(helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [out],
                                          pads=[1, 1, 1, 1]))
        elif op in ("relu", "sigmoid"):
            nodes.append(helper.make_node(op.capitalize(), [cur], [out]))
        elif op == "silu":
            nodes += [helper.make_node("Sigmoid", [cur], [f"s{i}"]),
                      helper.make_node("Mul", [cur, f"s{i}"], [out])]
        elif op == "maxpool":
            nodes.append(helper.make_node("MaxPool", [cur], [out], kernel_shape=[3, 3],
                                          pads=[1, 1, 1, 1]))
        elif op == "add":
            other = next((v for v, vc in reversed(values[:-1]) if vc == c), cur)
            nodes.append(helper.make_node("Add", [cur, other], [out]))
        elif op == "split":  # rows: Split along H, concat the halves back swapped
            h = size // 2
            inits.append(numpy_helper.from_array(np.array([h, size - h], np.int64), f"sp{i}"))
            nodes += [helper.make_node("Split", [cur, f"sp{i}"], [f"a{i}", f"b{i}"], axis=2),
                      helper.make_node("Concat", [f"b{i}", f"a{i}"], [out], axis=2)]
        elif op == "slice":  # channels: rotate by one (slices through channel fragments)
            inits += [numpy_helper.from_array(np.array([v], np.int64), f"{n}{i}")
                      for n, v in (("s0", c - 1), ("e0", c), ("s1", 0), ("e1", c - 1),
                                   ("ax", 1))]
            nodes += [helper.make_node("Slice", [cur, f"s0{i}", f"e0{i}", f"ax{i}"], [f"a{i}"]),
                      helper.make_node("Slice", [cur, f"s1{i}", f"e1{i}", f"ax{i}"], [f"b{i}"]),
                      helper.make_node("Concat", [f"a{i}", f"b{i}"], [out], axis=1)]
        elif op == "concat":
            other, oc = values[len(values) // 2]
            nodes.append(helper.make_node("Concat", [cur, other], [out], axis=1))
            c = c + oc
        values.append((out, c))
    last, c = values[-1]
    graph = helper.make_graph(
        nodes, "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, c, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.sampled_from(["conv", "relu", "silu", "maxpool", "add", "concat",
                                     "sigmoid", "split", "slice"]), min_size=1, max_size=8),
       channels=st.sampled_from([2, 3]), size=st.sampled_from([4, 5]),
       selector=st.sampled_from(["exact", "iterative", "disabled"]))
def test_rewrites_preserve_meaning(ops: list[str], channels: int, size: int,
                                   selector: str) -> None:
    """Interpreting before and after canonicalization gives identical tensors; every layout
    selection computes the ONNX reference."""
    model = _random_model(ops, channels, size, seed=len(ops))
    graph = import_onnx(model)
    _, layouts = select_layouts(graph, selector)
    low = lower(graph, TARGET, layouts)
    x = np.random.default_rng(0).standard_normal((1, channels, size, size)).astype(np.float32)
    before = Interpreter(low.module).run([x])
    canonicalize(low.module)
    assert verify_module(low.module) == []
    after = Interpreter(low.module).run([x])
    np.testing.assert_array_equal(before[0], after[0])
    want = run_reference(model, {"x": x})
    np.testing.assert_allclose(after[0], next(iter(want.values())), rtol=1e-4, atol=1e-4)


def _canonical(rules: Path | None) -> tuple[int, int]:
    """(multi-source Blueprints, concat computes) of yolo_neck canonicalized with `rules`."""
    graph = import_onnx(EXAMPLES / "yolo_neck.onnx")
    _, layouts = select_layouts(graph, "exact", rules)
    low = lower(graph, TARGET, layouts)
    canonicalize(low.module, rules)
    assert verify_module(low.module) == []
    multi = sum(1 for op in low.module.walk() if isinstance(op, BlueprintOp)
                and len(op.sources) > 1)
    concats = sum(1 for op in low.module.walk() if type(op) is GraphComputeOp
                  and any(o.NAME == "tensor.concat" for o in op.body.ops))
    return multi, concats


def test_removing_concat_placement_rules_keeps_concat_as_compute(tmp_path: Path) -> None:
    shipped = _canonical(None)
    assert shipped[0] >= 1
    rules = tmp_path / "rules"
    shutil.copytree(resolve_rules_dir(), rules)
    egg = rules / "canonicalize.egg"
    text = egg.read_text()
    start = text.index("; concat(x_0..x_n; dim): entries of input i shift")
    end = text.index("; A concat with an opaque input moves data")
    egg.write_text(text[:start] + text[end:])
    edited = _canonical(rules)
    assert edited[0] == 0, "without the placement rules no Blueprint spans several batches"
    assert edited[1] > shipped[1]


def test_broken_canonicalize_rules_report_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(resolve_rules_dir(), rules)
    egg = rules / "canonicalize.egg"
    lines = egg.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if line.startswith("(rule ((BatchValue"))
    lines[n] = lines[n].replace("BatchValue", "BatchValu")
    egg.write_text("\n".join(lines) + "\n")
    graph = import_onnx(EXAMPLES / "mlp.onnx")
    low = lower(graph, TARGET)
    with pytest.raises(RuleError, match=rf"canonicalize\.egg:{n + 1}:\d+: error"):
        canonicalize(low.module, rules)
