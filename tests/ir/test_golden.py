"""Golden programs: parse, verify, print back byte-identical, interpret against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raptor.ir.builder import new_func
from raptor.ir.core import Affine
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import (
    BinaryOp,
    BlueprintEntry,
    GraphComputeBatchOp,
    PlanOp,
    ReduceOp,
    ScheduledComputeBatchOp,
    UnaryOp,
)
from raptor.ir.parser import parse_file, parse_module
from raptor.ir.printer import print_ir
from raptor.ir.types import tensor
from raptor.ir.verifier import verify_module

from .spat_util import EXAMPLE, GOLDEN, parse_checked, program_text, rules_of, run_cli

GOLDEN_FILES = sorted(GOLDEN.glob("*.spat"))
RNG = np.random.default_rng(7)


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-6)


def run(path: Path, *inputs: np.ndarray, func: str = "main",
        constants: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    module = parse_file(str(path))
    module.constants.update(constants or {})
    f = next(f for f in module.funcs if f.sym_name == func)
    return Interpreter(module).run(list(inputs), func=f)


# ------------------------------------------------------------------ the canonical example
def test_canonical_example_parses_verifies_and_prints_identically() -> None:
    text = EXAMPLE.read_text()
    module = parse_file(str(EXAMPLE))
    assert verify_module(module) == []
    assert module.print() == text
    batch = module.funcs[0].body.ops[0]
    assert isinstance(batch, GraphComputeBatchOp)
    assert batch.lanes == 2 and not batch.assembly
    assert [str(r.type) for r in batch.outs] == ["tensor<2x16x1xf32>"]


def test_canonical_example_interprets_via_cli(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    x = RNG.standard_normal((16, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    code, out, err = run_cli(capsys, "interpret", str(EXAMPLE), "--inputs",
                             str(tmp_path / "x.npz"), "--out", str(tmp_path / "y.npz"))
    assert (code, err) == (0, "")
    assert "result0" in out
    with np.load(tmp_path / "y.npz") as data:
        y = data["result0"]
    want = np.stack([x[:, 2 * j] + x[:, 2 * j + 1] for j in range(2)], axis=1)
    close(y, want)


def test_builder_reproduces_the_canonical_example() -> None:
    """The builder and the parser agree on the contract spelling."""
    f, b = new_func("main", [("x", tensor(16, 4))], [tensor(16, 2)])
    batch, body = b.graph_batch(2, f.args, [tensor(2, 16, 1)], names=["p"])
    lane, (inp,), (out,) = batch.lane, batch.in_args, batch.out_args
    a = body.extract(inp, [0, Affine(0, ((2, lane),))], [16, 1])
    c = body.extract(inp, [0, Affine(1, ((2, lane),))], [16, 1])
    s = body.binary("vadd", a, c)
    a.name, c.name, s.name = "a", "b", "s"
    body.publish(s, out, [lane, 0, 0], [1, 16, 1])
    entries = [BlueprintEntry(0, j, (Affine(0), Affine(j)), (16, 1), (1, 1)) for j in range(2)]
    y = b.blueprint(batch.outs, tensor(16, 2), entries, name="y")
    b.ret([y])
    assert print_ir([f]) == EXAMPLE.read_text()
    assert verify_module(Module([f])) == []


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_golden_round_trip(path: Path) -> None:
    text = program_text(path)
    module = parse_checked(text, str(path))
    printed = module.print()
    assert printed == text
    assert parse_module(printed).print() == printed


def test_a_name_defined_in_a_lag_region_is_not_reused_after_it() -> None:
    """`pim.lag` orders ops without scoping values (`Operation.SCOPES`): a later value whose
    name hint is one the region defined is printed under another name, so the text parses
    back (a skewed torch_cnn stream printed `%buf` twice)."""
    lag = "      pim.lag 1 {\n        pim.store %c into"  # the second lag region
    text = program_text(GOLDEN / "stream_skewed.spat").replace(lag, """\
      pim.lag 1 {
        %d = spat.scheduled_compute ins(%c : tensor<16x2xf32>) -> tensor<16x2xf32> {
        ^bb0(%in: tensor<16x2xf32>):
          %w = pim.relu %in : tensor<16x2xf32>
          spat.yield %w : tensor<16x2xf32>
        }
        pim.store %d into""")
    module = parse_checked(text, "lag_names.spat")
    d = next(v for op in module.walk() for v in op.results() if v.name == "d")
    d.name = "c"
    printed = module.print()
    assert printed.count("%c =") == 1
    assert parse_module(printed).print() == printed


def test_golden_set_covers_every_textual_op() -> None:
    """Every op name the printer can produce appears in some golden program."""
    seen: set[str] = set()
    for path in [*GOLDEN_FILES, EXAMPLE]:
        for op in parse_file(str(path)).walk():
            if isinstance(op, BinaryOp | UnaryOp | ReduceOp):
                seen.add(f"pim.{op.op}")
            elif isinstance(op, PlanOp):
                seen.add(f"spat.plan.{op.kind}")
            else:
                seen.add(op.NAME)
    want = {
        "func.func", "return", "spat.yield", "spat.weight", "spat.plan.conv",
        "spat.materialize_layout", "spat.graph_compute", "spat.graph_compute_batch",
        "spat.blueprint", "spat.deferred_communication", "tensor.extract_slice",
        "tensor.insert_slice", "spat.parallel_insert_slice", "tensor.reshape",
        "tensor.transpose", "tensor.concat", "tensor.pad", "tensor.empty", "pim.mvm",
        "pim.vadd", "pim.vsub", "pim.vmul", "pim.vdiv", "pim.vmax", "pim.vmin", "pim.relu",
        "pim.sigmoid", "pim.silu", "pim.tanh", "pim.exp", "pim.neg", "pim.hard_swish",
        "pim.leaky_relu", "pim.clip", "pim.hard_sigmoid", "pim.vscale", "pim.softmax",
        "pim.vreduce_sum", "pim.vreduce_max", "pim.elu", "spat.scheduled_compute",
        "spat.scheduled_compute_batch", "spat.channel_send", "spat.channel_receive",
        "pim.alloc_shared", "pim.load", "pim.store", "pim.core", "pim.core_batch",
    }
    assert want - seen == set()


def test_dynamic_dims_parse_round_trip_and_fail_gcb1() -> None:
    text = EXAMPLE.read_text().replace("tensor<2x16x1xf32>", "tensor<?x16x1xf32>")
    module = parse_module(text, "dyn.spat")
    assert module.print() == text
    batch = module.funcs[0].body.ops[0]
    assert isinstance(batch, GraphComputeBatchOp)
    assert batch.outs[0].type.shape == (None, 16, 1)  # type: ignore[union-attr]
    diags = verify_module(module)
    assert diags[0].rule == "GCB-1"
    assert (diags[0].loc.line, diags[0].loc.col) == (2, 8)  # type: ignore[union-attr]
    assert "tensor<?x16x1xf32>" in diags[0].message


# ------------------------------------------------------------------ numerics
def test_multi_result_numerics() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    y, z = run(GOLDEN / "multi_result.spat", x)
    blocks = [x[:, 4 * k: 4 * k + 4] for k in range(2)]
    close(y, np.concatenate([b.T for b in blocks], axis=0))
    close(z, np.concatenate([blocks[1].sum(1), blocks[0].sum(1)]))


def test_families_numerics() -> None:
    x = RNG.standard_normal((1, 4, 16, 16)).astype(np.float32)
    y, z, both = run(GOLDEN / "families.spat", x)
    relu = np.maximum(x, 0)
    close(y, relu)
    close(z, -x)
    rows = [2 * r for r in range(8)] + [2 * r - 15 for r in range(8, 16)]
    want0 = np.empty((4, 16, 16), np.float32)
    for slot, row in enumerate(rows):
        want0[:, row] = relu[0, :, slot]
    close(both, np.stack([want0, -x[0]]))


def test_permutation_numerics() -> None:
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    (y,) = run(GOLDEN / "permutation.spat", x)
    want = np.zeros((16, 3), np.float32)
    for slot, row in enumerate([13, 4, 10, 0]):
        want[row] = x[slot]
    close(y, want)


def test_shaping_ops_numerics() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    (y,) = run(GOLDEN / "lane_ops.spat", x, func="shaping")
    frags = []
    for lane in range(2):
        a = x[:, 4 * lane: 4 * lane + 4]
        c = np.concatenate([a[0:4:2].T.reshape(8), a[1]])
        e = np.zeros((2, 16), np.float32)
        e[1] = np.pad(c, (2, 2), constant_values=1.5)
        frags.append(e)
    close(y, np.concatenate([frags[1], frags[0]]))


def test_elementwise_ops_numerics() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32) * 3
    z = RNG.uniform(0.5, 2.0, (4, 8)).astype(np.float32)
    (y,) = run(GOLDEN / "lane_ops.spat", x, z, func="elementwise")
    a, b = x.astype(np.float64), z.astype(np.float64)
    sig = 1 / (1 + np.exp(-a))
    soft = np.exp(a - a.max(1, keepdims=True))
    parts = [
        a + b, a - b, a * b, a / b, np.maximum(a, b), np.minimum(a, b), np.maximum(a, 0), sig,
        a * sig, np.tanh(a), np.exp(a), -a, a * np.clip(a + 3, 0, 6) / 6,
        np.where(a < 0, 0.2 * a, a), np.clip(a, -1, 1), np.clip(0.2 * a + 0.5, 0, 1),
        -0.25 * a, soft / soft.sum(1, keepdims=True),
    ]
    np.testing.assert_allclose(y, np.concatenate(parts, axis=1), rtol=1e-5, atol=1e-5)


def test_crossbar_and_reduce_numerics() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    w = RNG.standard_normal((8, 3)).astype(np.float32)
    y, z = run(GOLDEN / "lane_ops.spat", x, func="crossbar", constants={"w0": w})
    mm = [x[2 * k: 2 * k + 2] @ w for k in range(2)]
    cat = [np.concatenate([m.sum(0), m.max(1), x[2 * k + 1] @ w]) for k, m in enumerate(mm)]
    close(y, np.concatenate(mm))
    close(z, np.concatenate([cat[1], cat[0]]))


def test_graph_ops_numerics() -> None:
    x = RNG.standard_normal((16, 4)).astype(np.float32)
    g, d = run(GOLDEN / "graph_ops.spat", x)
    pairs = np.stack([x[:, 0] + x[:, 1], x[:, 2] + x[:, 3]], axis=1)
    close(g, 2 * pairs)
    close(d, pairs[:, 1:2])


# ------------------------------------------------------------------ scheduled IR exclusion
SCHEDULED_BATCH = program_text(GOLDEN / "scheduled_batch_layout.spat")


def test_scheduled_batch_is_not_checked_against_the_graph_invariant() -> None:
    """A scheduled batch whose result does not lead with laneCount verifies and runs; the
    identical body as a graph batch is rejected."""
    module = parse_checked(SCHEDULED_BATCH)
    assert isinstance(module.funcs[0].body.ops[0], ScheduledComputeBatchOp)
    assert module.print() == SCHEDULED_BATCH
    x = RNG.standard_normal((16, 4)).astype(np.float32)
    (y,) = Interpreter(module).run([x])
    close(y, x[:, [0, 2]])
    graph = SCHEDULED_BATCH.replace("spat.scheduled_compute_batch", "spat.graph_compute_batch")
    assert rules_of(verify_module(parse_module(graph)))[0] == "GCB-2"


def test_scheduled_golden_has_no_graph_rule_findings() -> None:
    module = parse_file(str(GOLDEN / "scheduled.spat"))
    kinds = {op.NAME for op in module.walk()}
    assert {"pim.core", "pim.core_batch", "spat.scheduled_compute_batch"} <= kinds
    assert verify_module(module) == []
