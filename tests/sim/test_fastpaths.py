"""The simulator's shortcuts keep the reference semantics: insert_slice writes in place
only into buffers nobody else can see, pads and concats match `eval_op`, a template's
cost equals `block_cost_ns`, and a run leaves the module and its inputs untouched."""

# ruff: noqa: E501 - the scheduled IR programs keep one op per line
from __future__ import annotations

import numpy as np

from raptor.ir.ops import ScheduledComputeOp
from raptor.sim import SimOptions, simulate
from raptor.sim.program import compile_program
from raptor.solver.costs import block_cost_ns

from .util import TARGET, program, rand

# %b1 is read after %b2 is inserted into it, and %e is the destination of two inserts: both
# must see the buffer as it was, so neither insert may write in place. %c1 -> %c2 may.
ALIASED = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<4x3x3xf32> {
  %o = pim.alloc_shared : tensor<4x3x3xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> to tensor<2x3xf32>
    %r = spat.scheduled_compute ins(%a : tensor<2x3xf32>) -> tensor<4x3x3xf32> {
    ^bb0(%in: tensor<2x3xf32>):
      %e = tensor.empty : tensor<3x3xf32>
      %b1 = tensor.insert_slice %in into %e[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<3x3xf32>
      %b2 = tensor.insert_slice %in into %b1[1, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<3x3xf32>
      %b3 = tensor.insert_slice %in into %e[1, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<3x3xf32>
      %c0 = tensor.empty : tensor<3x3xf32>
      %c1 = tensor.insert_slice %in into %c0[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<3x3xf32>
      %p = tensor.pad %in low [1, 0] high [0, 0] value 2.5 : tensor<2x3xf32> to tensor<3x3xf32>
      %c2 = tensor.insert_slice %p into %c1[0, 0] [3, 3] [1, 1] : tensor<3x3xf32> into tensor<3x3xf32>
      %r1 = tensor.reshape %b1 : tensor<3x3xf32> to tensor<1x3x3xf32>
      %r2 = tensor.reshape %b2 : tensor<3x3xf32> to tensor<1x3x3xf32>
      %r3 = tensor.reshape %b3 : tensor<3x3xf32> to tensor<1x3x3xf32>
      %r4 = tensor.reshape %c2 : tensor<3x3xf32> to tensor<1x3x3xf32>
      %all = tensor.concat dim(0) %r1, %r2, %r3, %r4 : tensor<1x3x3xf32>, tensor<1x3x3xf32>, tensor<1x3x3xf32>, tensor<1x3x3xf32> to tensor<4x3x3xf32>
      spat.yield %all : tensor<4x3x3xf32>
    }
    pim.store %r into %o[0, 0, 0] [4, 3, 3] [1, 1, 1] : tensor<4x3x3xf32> into tensor<4x3x3xf32>
  }
  return %o : tensor<4x3x3xf32>
}
"""


def test_inserts_into_shared_buffers_copy_and_pads_fill() -> None:
    x = rand(2, 3)
    module = program(ALIASED)
    out = simulate(module, TARGET, {"x": x.copy()}, SimOptions(trace=False)).outputs[0]
    b1 = np.zeros((3, 3), np.float32)
    b1[:2] = x
    b2 = b1.copy()
    b2[1:] = x
    b3 = np.zeros((3, 3), np.float32)
    b3[1:] = x
    p = np.pad(x, [(1, 0), (0, 0)], constant_values=2.5).astype(np.float32)
    np.testing.assert_array_equal(out, np.stack([b1, b2, b3, p]))


def test_run_leaves_inputs_and_module_untouched() -> None:
    x = rand(2, 3)
    kept = x.copy()
    module = program(ALIASED)
    first = simulate(module, TARGET, {"x": x}).outputs[0]
    second = simulate(module, TARGET, {"x": x}).outputs[0]
    np.testing.assert_array_equal(x, kept)
    np.testing.assert_array_equal(first, second)


def test_template_costs_equal_the_cost_table() -> None:
    module = program(ALIASED)
    prog = compile_program(module, TARGET)
    (compute,) = [i for i in prog.cores[0] if isinstance(i.op, ScheduledComputeOp)]
    assert isinstance(compute.op, ScheduledComputeOp)
    assert compute.cost == block_cost_ns(compute.op.body, TARGET) > 0
