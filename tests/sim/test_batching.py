"""Numerics run after timing, instances of one body stacked: the values must be exactly
those of running each instance alone, whatever the grouping (shared or per-instance
weights, lower-rank operands, vectors), and shared memory keeps the timed run's order.
A `Simulator` compiles once and runs any number of inputs and options."""

# ruff: noqa: E501 - the scheduled IR programs keep one op per line
from __future__ import annotations

import numpy as np
import pytest

from raptor.sim import SimOptions, Simulator, simulate
from raptor.sim.engine import Engine
from raptor.sim.kernels import Template
from raptor.sim.numerics import levels
from raptor.sim.program import Instr, Program, compile_program

from .util import TARGET, program, rand, run


def _instance(i: int, weight: str, extra: str = "") -> str:
    """One instance of a body shared by every `i`: mvm, a bias of lower rank, silu."""
    return f"""
    %r{i} = spat.scheduled_compute ins(%a{i} : tensor<4x8xf32>, {weight} : tensor<8x6xf32>, %b : tensor<6xf32>) -> tensor<4x6xf32> {{
    ^bb0(%in: tensor<4x8xf32>, %wt: tensor<8x6xf32>, %bias: tensor<6xf32>):
      %m = pim.mvm %wt, %in : tensor<8x6xf32>, tensor<4x8xf32> -> tensor<4x6xf32>{extra}
      %s = pim.vadd %m, %bias : tensor<4x6xf32>, tensor<6xf32> -> tensor<4x6xf32>
      %y = pim.silu %s : tensor<4x6xf32>
      spat.yield %y : tensor<4x6xf32>
    }}
    pim.store %r{i} into %o[{i}, 0, 0] [1, 4, 6] [1, 1, 1] : tensor<4x6xf32> into tensor<4x4x6xf32>"""


def _grouped(extra: str = "") -> str:
    """Four instances on two cores, two weights: groups split by the weight they share."""
    loads = [f"    %a{i} = pim.load %x[{i}, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<4x4x8xf32> to tensor<4x8xf32>"
             for i in range(4)]
    core0 = "\n".join([*loads[:2], _instance(0, "%w0", extra), _instance(1, "%w1", extra)])
    core1 = "\n".join([*loads[2:], _instance(2, "%w0", extra), _instance(3, "%w1", extra)])
    return f"""
func.func @main(%x: tensor<4x4x8xf32>) -> tensor<4x4x6xf32> {{
  %w0 = spat.weight @w0 : tensor<8x6xf32>
  %w1 = spat.weight @w1 : tensor<8x6xf32>
  %b = spat.weight @b : tensor<6xf32>
  %o = pim.alloc_shared : tensor<4x4x6xf32>
  pim.core 0 {{
{core0}
  }}
  pim.core 5 {{
{core1}
  }}
  return %o : tensor<4x4x6xf32>
}}
"""


def _reference(x: np.ndarray, ws: list[np.ndarray], b: np.ndarray) -> np.ndarray:
    out = []
    for i in range(4):
        s = x[i] @ ws[i % 2] + b
        out.append(s * (1.0 / (1.0 + np.exp(-s))))
    return np.stack(out)


@pytest.mark.parametrize("extra", [
    "",  # the weight is used only by the MVM: one array shared by the group
    # the weight is also read by another op: stacked per instance like any other value
    "\n      %unused = tensor.extract_slice %wt[0, 0] [1, 6] [1, 1] : tensor<8x6xf32> to tensor<6xf32>",
])
def test_instances_with_different_weights_get_their_own(extra: str) -> None:
    x = rand(4, 4, 8)
    weights = {"w0": rand(8, 6, seed=1), "w1": rand(8, 6, seed=2), "b": rand(6, seed=3)}
    res = run(_grouped(extra), weights, {"x": x})
    want = _reference(x, [weights["w0"], weights["w1"]], weights["b"])
    np.testing.assert_allclose(res.outputs[0], want, rtol=1e-5, atol=1e-6)


def _only_level(prog: Program, inputs: dict[str, np.ndarray]) -> dict[Template, list[Instr]]:
    """The computes, by template, of the one level of a timed run of `prog` that has any."""
    prog.bind(inputs)
    engine = Engine(prog, TARGET, SimOptions(trace=False))
    engine.run()
    (level,) = [groups for groups, _, _ in levels(prog, engine.order) if groups]
    return level


def test_products_of_one_weight_run_together_each_into_its_own_row() -> None:
    """Three instances on one core use weights w0, w1, w0: one group, whose products run
    by weight (`kernels._k_mvm`), out of the instances' order; each is still its own."""
    body = """
    %r{i} = spat.scheduled_compute ins(%a{i} : tensor<4x8xf32>, %w{w} : tensor<8x6xf32>) -> tensor<4x6xf32> {{
    ^bb0(%in: tensor<4x8xf32>, %wt: tensor<8x6xf32>):
      %m = pim.mvm %wt, %in : tensor<8x6xf32>, tensor<4x8xf32> -> tensor<4x6xf32>
      spat.yield %m : tensor<4x6xf32>
    }}
    pim.store %r{i} into %o[{i}, 0, 0] [1, 4, 6] [1, 1, 1] : tensor<4x6xf32> into tensor<3x4x6xf32>"""
    loads = "\n".join(f"    %a{i} = pim.load %x[{i}, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<3x4x8xf32> to tensor<4x8xf32>"
                      for i in range(3))
    computes = "".join(body.format(i=i, w=w) for i, w in enumerate((0, 1, 0)))
    text = f"""
func.func @main(%x: tensor<3x4x8xf32>) -> tensor<3x4x6xf32> {{
  %w0 = spat.weight @w0 : tensor<8x6xf32>
  %w1 = spat.weight @w1 : tensor<8x6xf32>
  %o = pim.alloc_shared : tensor<3x4x6xf32>
  pim.core 0 {{
{loads}{computes}
  }}
  return %o : tensor<3x4x6xf32>
}}
"""
    x, ws = rand(3, 4, 8), [rand(8, 6, seed=1), rand(8, 6, seed=2)]
    module = program(text, {"w0": ws[0], "w1": ws[1]})
    level = _only_level(compile_program(module, TARGET), {"x": x})
    assert [len(g) for g in level.values()] == [3]
    out = simulate(module, TARGET, {"x": x}).outputs[0]
    np.testing.assert_array_equal(out, np.stack([x[i] @ ws[w] for i, w in enumerate((0, 1, 0))]))


def test_one_level_runs_as_one_group_whatever_the_weights() -> None:
    module = program(_grouped(), {"w0": rand(8, 6), "w1": rand(8, 6), "b": rand(6)})
    (group,) = _only_level(compile_program(module, TARGET), {"x": rand(4, 4, 8)}).values()
    assert len(group) == 4 and len({id(i.template) for i in group}) == 1


def test_a_whole_value_sent_is_the_senders_own() -> None:
    """Forwarded over two hops, the loaded fragment reaches core 9 with no copy and no
    view: its compute reads the slot core 0 loaded into, so it runs in the same level and
    group as core 0's."""
    load = "%a0 = pim.load %x[0, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<4x4x8xf32> to tensor<4x8xf32>"
    text = _grouped().split("  pim.core 0")[0] + f"""  pim.core 0 {{
    {load}
    spat.channel_send %a0 to core(5) channel(0) : tensor<4x8xf32>
{_instance(0, "%w0")}
  }}
  pim.core 5 {{
    %c = spat.channel_receive from core(0) channel(0) : tensor<4x8xf32>
    spat.channel_send %c to core(9) channel(0) : tensor<4x8xf32>
  }}
  pim.core 9 {{
    %a1 = spat.channel_receive from core(5) channel(0) : tensor<4x8xf32>
{_instance(1, "%w1")}
  }}
  return %o : tensor<4x4x6xf32>
}}
"""
    ws = [rand(8, 6), rand(8, 6)]
    b, x = rand(6), rand(4, 4, 8)
    module = program(text, {"w0": ws[0], "w1": ws[1], "b": b})
    prog = compile_program(module, TARGET)
    computes = [i for c in (0, 9) for i in prog.cores[c] if i.template is not None]
    assert computes[0].slots_in[0] == computes[1].slots_in[0]
    assert all(i.move is None for c in (0, 5) for i in prog.cores[c] if i.partner is not None)
    level = _only_level(prog, {"x": x})
    assert [len(g) for g in level.values()] == [2]
    out = simulate(module, TARGET, {"x": x}).outputs[0]
    want = _reference(np.stack([x[0]] * 4), ws, b)[:2]
    np.testing.assert_allclose(out[:2], want, rtol=1e-5, atol=1e-6)


def _vector_instance(i: int) -> str:
    """A rank-1 vector times the instance's own tile, minus the tile's first row (which
    reads the weight outside the MVM too, so the weights are stacked per instance)."""
    return f"""
    %r{i} = spat.scheduled_compute ins(%v : tensor<8xf32>, %w{i} : tensor<8x6xf32>) -> tensor<6xf32> {{
    ^bb0(%in: tensor<8xf32>, %wt: tensor<8x6xf32>):
      %first = tensor.extract_slice %wt[0, 0] [1, 6] [1, 1] : tensor<8x6xf32> to tensor<6xf32>
      %m = pim.mvm %wt, %in : tensor<8x6xf32>, tensor<8xf32> -> tensor<6xf32>
      %y = pim.vsub %m, %first : tensor<6xf32>
      spat.yield %y : tensor<6xf32>
    }}"""


VECTORS = f"""
func.func @main() -> tensor<2x6xf32> {{
  %v = spat.weight @v : tensor<8xf32>
  %w0 = spat.weight @w0 : tensor<8x6xf32>
  %w1 = spat.weight @w1 : tensor<8x6xf32>
  %o = pim.alloc_shared : tensor<2x6xf32>
  pim.core 0 {{{_vector_instance(0)}{_vector_instance(1)}
    %s = pim.vadd %r0, %r1 : tensor<6xf32>
    pim.store %r0 into %o[0, 0] [1, 6] [1, 1] : tensor<6xf32> into tensor<2x6xf32>
    pim.store %s into %o[1, 0] [1, 6] [1, 1] : tensor<6xf32> into tensor<2x6xf32>
  }}
  return %o : tensor<2x6xf32>
}}
"""


def test_vectors_times_per_instance_weights() -> None:
    v, w0, w1 = rand(8), rand(8, 6, seed=1), rand(8, 6, seed=2)
    out = run(VECTORS, {"v": v, "w0": w0, "w1": w1}).outputs[0]
    r0, r1 = v @ w0 - w0[0], v @ w1 - w1[0]
    np.testing.assert_allclose(out, np.stack([r0, r0 + r1]), rtol=1e-5, atol=1e-6)


# Core 0 loads what core 1 stores, then overwrites the same region with a value it can
# compute at once. In dataflow terms that store is ready first; the load must still read
# core 1's value, because the timed run performed the accesses in that order.
WAR = """
func.func @main() -> tensor<8xf32> {
  %w = spat.weight @w : tensor<4xf32>
  %o = pim.alloc_shared : tensor<8xf32>
  pim.core 1 {
    %e = pim.tanh %w : tensor<4xf32>
    pim.store %e into %o[0] [4] [1] : tensor<4xf32> into tensor<8xf32>
  }
  pim.core 0 {
    %z = pim.neg %w : tensor<4xf32>
    %a = pim.load %o[0] [4] [1] : tensor<8xf32> to tensor<4xf32>
    pim.store %z into %o[0] [4] [1] : tensor<4xf32> into tensor<8xf32>
    %d = pim.exp %a : tensor<4xf32>
    pim.store %d into %o[4] [4] [1] : tensor<4xf32> into tensor<8xf32>
  }
  return %o : tensor<8xf32>
}
"""


@pytest.mark.parametrize("options", [SimOptions(), SimOptions.ideal()])
def test_shared_memory_keeps_the_timed_order(options: SimOptions) -> None:
    w = rand(4)
    out = run(WAR, {"w": w}, options=options).outputs[0]
    np.testing.assert_allclose(out, np.concatenate([-w, np.exp(np.tanh(w))]), rtol=1e-6)


def test_simulator_runs_many_inputs_and_options_on_one_compilation() -> None:
    weights = {"w0": rand(8, 6, seed=1), "w1": rand(8, 6, seed=2), "b": rand(6, seed=3)}
    module = program(_grouped(), weights)
    sim = Simulator(module, TARGET)
    assert sim.compile_time_s > 0
    for seed, options in ((4, SimOptions()), (5, SimOptions.ideal()), (4, SimOptions.ideal())):
        x = rand(4, 4, 8, seed=seed)
        got = sim.run({"x": x}, options)
        alone = simulate(module, TARGET, {"x": x}, options)
        np.testing.assert_array_equal(got.outputs[0], alone.outputs[0])
        assert got.report.latency_ns == alone.report.latency_ns
        assert got.report.compile_time_s == 0 < alone.report.compile_time_s
        assert sim.timing(options).latency_ns == got.report.latency_ns  # no values needed


def test_a_run_of_the_same_order_reuses_the_plan_and_another_order_replans() -> None:
    """The numerics' plan (levels, gathers) is kept on the program for the next run of the
    same event-loop order, whatever its inputs, and made again for another order."""
    weights = {"w0": rand(8, 6, seed=1), "w1": rand(8, 6, seed=2), "b": rand(6, seed=3)}
    module = program(_grouped(), weights)
    sim = Simulator(module, TARGET)
    plans = []
    for seed, options in ((4, SimOptions()), (5, SimOptions()), (6, SimOptions.ideal()),
                          (7, SimOptions.ideal())):
        x = rand(4, 4, 8, seed=seed)
        got = sim.run({"x": x}, options).outputs[0]
        np.testing.assert_array_equal(got, simulate(module, TARGET, {"x": x}, options).outputs[0])
        assert sim.program.plan is not None
        plans.append(sim.program.plan)
    assert plans[1] is plans[0] and plans[3] is plans[2]
    assert plans[2] is not plans[0] and plans[2][0] != plans[0][0]  # the orders differ


def test_buffers_start_empty_on_every_run() -> None:
    text = """
func.func @main(%x: tensor<4xf32>) -> tensor<8xf32> {
  %o = pim.alloc_shared : tensor<8xf32>
  pim.core 0 {
    %a = pim.load %x[0] [4] [1] : tensor<4xf32> to tensor<4xf32>
    %p = pim.relu %a : tensor<4xf32>
    pim.store %p into %o[0] [4] [1] : tensor<4xf32> into tensor<8xf32>
  }
  return %o : tensor<8xf32>
}
"""
    sim = Simulator(program(text), TARGET)
    x = rand(4)
    first = sim.run({"x": x}).outputs[0]
    second = sim.run({"x": -x}).outputs[0]
    np.testing.assert_array_equal(first, np.concatenate([np.maximum(x, 0), np.zeros(4)]))
    np.testing.assert_array_equal(second, np.concatenate([np.maximum(-x, 0), np.zeros(4)]))


def test_loads_of_inputs_inside_bodies_are_counted_apart() -> None:
    """Two instances each gather their row of the input inside the body: the report counts
    those reads apart from the queued shared-memory traffic."""
    body = """
    %r{i} = spat.scheduled_compute ins() -> tensor<8xf32> {{
      %a = pim.load %x[{i}, 0] [1, 8] [1, 1] : tensor<2x8xf32> to tensor<8xf32>
      %t = pim.tanh %a : tensor<8xf32>
      spat.yield %t : tensor<8xf32>
    }}
    pim.store %r{i} into %o[{i}, 0] [1, 8] [1, 1] : tensor<8xf32> into tensor<2x8xf32>"""
    text = f"""
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {{
  %o = pim.alloc_shared : tensor<2x8xf32>
  pim.core 0 {{{body.format(i=0)}{body.format(i=1)}
  }}
  return %o : tensor<2x8xf32>
}}
"""
    x = rand(2, 8)
    res = run(text, {}, {"x": x})
    np.testing.assert_allclose(res.outputs[0], np.tanh(x), rtol=1e-6)
    rep = res.report
    assert (rep.input_reads, rep.input_read_bytes) == (2, 64)
    assert (rep.shared_reads, rep.shared_writes) == (0, 2)


def _partial_sums(i: int) -> str:
    """Partial sums of two MVMs and a bias: the first adds overwrite the new arrays they
    read once; `%m2` is read twice, so nothing may write into it."""
    return f"""
    %a{i} = pim.load %x[{i}, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<2x4x8xf32> to tensor<4x8xf32>
    %r{i} = spat.scheduled_compute ins(%a{i} : tensor<4x8xf32>, %wa : tensor<8x6xf32>, %wb : tensor<8x6xf32>, %b : tensor<6xf32>) -> tensor<4x6xf32> {{
    ^bb0(%in: tensor<4x8xf32>, %w1: tensor<8x6xf32>, %w2: tensor<8x6xf32>, %bias: tensor<6xf32>):
      %m1 = pim.mvm %w1, %in : tensor<8x6xf32>, tensor<4x8xf32> -> tensor<4x6xf32>
      %m2 = pim.mvm %w2, %in : tensor<8x6xf32>, tensor<4x8xf32> -> tensor<4x6xf32>
      %s = pim.vadd %m1, %m2 : tensor<4x6xf32>
      %t = pim.vadd %s, %bias : tensor<4x6xf32>, tensor<6xf32> -> tensor<4x6xf32>
      %e = pim.vmul %m2, %t : tensor<4x6xf32>
      %y = pim.vsub %e, %m2 : tensor<4x6xf32>
      spat.yield %y : tensor<4x6xf32>
    }}
    pim.store %r{i} into %o[{i}, 0, 0] [1, 4, 6] [1, 1, 1] : tensor<4x6xf32> into tensor<2x4x6xf32>"""


PARTIAL_SUMS = "\n".join([
    "func.func @main(%x: tensor<2x4x8xf32>) -> tensor<2x4x6xf32> {",
    *[f"  %{w} = spat.weight @{w} : tensor<{t}xf32>" for w, t in
      (("wa", "8x6"), ("wb", "8x6"), ("b", "6"))],
    "  %o = pim.alloc_shared : tensor<2x4x6xf32>",
    "  pim.core 0 {", _partial_sums(0), _partial_sums(1), "  }",
    "  return %o : tensor<2x4x6xf32>", "}", ""])


def test_partial_sums_overwrite_only_what_nothing_else_reads() -> None:
    x = rand(2, 4, 8)
    ws = {"wa": rand(8, 6, seed=1), "wb": rand(8, 6, seed=2), "b": rand(6, seed=3)}
    m1, m2 = x @ ws["wa"], x @ ws["wb"]
    want = m2 * (m1 + m2 + ws["b"]) - m2
    np.testing.assert_allclose(run(PARTIAL_SUMS, ws, {"x": x}).outputs[0], want,
                               rtol=1e-5, atol=1e-5)


def _sum_of_reads(n: int, width: int) -> str:
    """`n` instances adding two loaded rows (the first read only by the add), then the
    rows themselves stored: a group of several instances adds into its stacked copy of
    the first read (and, from `kernels._LISTED_MIN` elements, reads the second unstacked),
    never into the loaded values."""
    row, rows = f"tensor<{width}xf32>", f"tensor<2x{width}xf32>"
    out = f"tensor<4x{width}xf32>"
    lines = [f"func.func @main(%x: {rows}) -> {out} {{",
             f"  %o = pim.alloc_shared : {out}", "  pim.core 0 {"]
    lines += [f"    %a{i} = pim.load %x[{i}, 0] [1, {width}] [1, 1] : {rows} to {row}"
              for i in range(2)]
    for i in range(n):
        lines += [
            f"    %s{i} = spat.scheduled_compute ins(%a{i} : {row}, %a{1 - i} : {row}) -> {row} {{",
            f"    ^bb0(%u: {row}, %v: {row}):",
            f"      %t = pim.vadd %u, %v : {row}",
            f"      spat.yield %t : {row}",
            "    }",
            f"    pim.store %s{i} into %o[{i}, 0] [1, {width}] [1, 1] : {row} into {out}"]
    lines += [f"    pim.store %a{i} into %o[{2 + i}, 0] [1, {width}] [1, 1] : {row} into {out}"
              for i in range(2)]
    lines += ["  }", f"  return %o : {out}", "}", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("width", [8, 4096])
@pytest.mark.parametrize("n", [1, 2])
def test_adds_write_into_group_copies_not_into_reads(n: int, width: int) -> None:
    x = rand(2, width)
    out = run(_sum_of_reads(n, width), {}, {"x": x}).outputs[0]
    np.testing.assert_array_equal(out[:n], (x[0] + x[1])[None].repeat(n, axis=0))
    np.testing.assert_array_equal(out[2:], x)
