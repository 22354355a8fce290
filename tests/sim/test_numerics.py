"""Functional execution: simulated outputs equal numpy on hand-written scheduled programs."""

# ruff: noqa: E501 - the scheduled IR programs keep one op per line
from __future__ import annotations

import numpy as np

from raptor.ir.ops import CoreOp, ScheduledComputeBatchOp
from raptor.sim import SimOptions, simulate
from raptor.solver.costs import block_cost_ns

from .util import TARGET, program, rand, run

PIPELINE = """
func.func @main(%x: tensor<16x4xf32>) -> tensor<16x2xf32> {
  %w = spat.weight @tile0 : tensor<4x2xf32>
  %o = pim.alloc_shared : tensor<16x2xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [16, 4] [1, 1] : tensor<16x4xf32> to tensor<16x4xf32>
    %r = spat.scheduled_compute ins(%a : tensor<16x4xf32>, %w : tensor<4x2xf32>) -> tensor<16x2xf32> {
    ^bb0(%in: tensor<16x4xf32>, %wt: tensor<4x2xf32>):
      %m = pim.mvm %wt, %in : tensor<4x2xf32>, tensor<16x4xf32> -> tensor<16x2xf32>
      %s = pim.sigmoid %m : tensor<16x2xf32>
      spat.yield %s : tensor<16x2xf32>
    }
    %lo = tensor.extract_slice %r[0, 0] [8, 2] [1, 1] : tensor<16x2xf32> to tensor<8x2xf32>
    %hi = tensor.extract_slice %r[8, 0] [8, 2] [1, 1] : tensor<16x2xf32> to tensor<8x2xf32>
    spat.channel_send %lo to core(1) channel(0) : tensor<8x2xf32>
    spat.channel_send %hi to core(2) channel(0) : tensor<8x2xf32>
  }
  pim.core_batch cores [1, 2] {
  ^bb0(%lane: index):
    %b = spat.channel_receive from core(0) channel(0) : tensor<8x2xf32>
    %c = pim.relu %b : tensor<8x2xf32>
    %d = pim.vmul %c, %b : tensor<8x2xf32>
    pim.store %d into %o[8*%lane, 0] [8, 2] [1, 1] : tensor<8x2xf32> into tensor<16x2xf32>
  }
  return %o : tensor<16x2xf32>
}
"""


def test_pipeline_over_core_batch_matches_numpy() -> None:
    x, w = rand(16, 4), rand(4, 2, seed=1)
    res = run(PIPELINE, {"tile0": w}, {"x": x})
    r = 1 / (1 + np.exp(-(x @ w)))
    np.testing.assert_allclose(res.output("o"), np.maximum(r, 0) * r, rtol=1e-5)
    assert res.names == ["o"]
    assert [c.crossbars for c in res.report.cores] == [1, 0, 0]
    assert res.report.messages == 2 and res.report.message_bytes == 128


def test_inputs_by_position_and_int_key_agree() -> None:
    x, w = rand(16, 4), rand(4, 2, seed=1)
    a = run(PIPELINE, {"tile0": w}, {0: x}).outputs[0]
    module = program(PIPELINE, {"tile0": w})
    b = simulate(module, TARGET, [x], SimOptions.ideal()).outputs[0]
    np.testing.assert_array_equal(a, b)


BATCH = """
func.func @main(%x: tensor<4x6xf32>) -> (tensor<5x12xf32>, tensor<5x12xf32>) {
  %w = spat.weight @w : tensor<2x5xf32>
  %o = pim.alloc_shared : tensor<5x12xf32>
  %p = pim.alloc_shared : tensor<5x12xf32>
  pim.core 3 {
    %a = pim.load %x[0, 0] [4, 6] [1, 1] : tensor<4x6xf32> to tensor<4x6xf32>
    %q, %s = spat.scheduled_compute_batch lanes(3) ins(%a : tensor<4x6xf32>, %w : tensor<2x5xf32>) -> (tensor<5x12xf32>, tensor<5x12xf32>) {
    ^bb0(%l: index, %in: tensor<4x6xf32>, %wt: tensor<2x5xf32>, %acc: tensor<5x12xf32>, %acc2: tensor<5x12xf32>):
      %sl = tensor.extract_slice %in[0, 2*%l] [4, 2] [1, 1] : tensor<4x6xf32> to tensor<4x2xf32>
      %m = pim.mvm %wt, %sl : tensor<2x5xf32>, tensor<4x2xf32> -> tensor<4x5xf32>
      %t = tensor.transpose %m [1, 0] : tensor<4x5xf32> to tensor<5x4xf32>
      spat.parallel_insert_slice %t into %acc[0, 4*%l] [5, 4] [1, 1] : tensor<5x4xf32> into tensor<5x12xf32>
      spat.parallel_insert_slice %t into %acc2[0, %l] [5, 4] [1, 3] : tensor<5x4xf32> into tensor<5x12xf32>
    }
    pim.store %q into %o[0, 0] [5, 12] [1, 1] : tensor<5x12xf32> into tensor<5x12xf32>
    pim.store %s into %p[0, 0] [5, 12] [1, 1] : tensor<5x12xf32> into tensor<5x12xf32>
  }
  return %o, %p : tensor<5x12xf32>, tensor<5x12xf32>
}
"""


def test_scheduled_batch_lanes_publish_any_geometry() -> None:
    """Lane l writes a contiguous block of %acc and a stride-3 comb of %acc2: the results
    need not have the lane count as their first dimension."""
    x, w = rand(4, 6), rand(2, 5, seed=2)
    res = run(BATCH, {"w": w}, {"x": x}, SimOptions.ideal())
    blocks = [(x[:, 2 * lane:2 * lane + 2] @ w).T for lane in range(3)]
    np.testing.assert_allclose(res.outputs[0], np.concatenate(blocks, axis=1), rtol=1e-5)
    comb = np.zeros((5, 12), np.float32)
    for lane, b in enumerate(blocks):
        comb[:, lane::3] = b
    np.testing.assert_allclose(res.outputs[1], comb, rtol=1e-5)
    # extract 32 B (1) + 4 MVMs (5220) + transpose 80 B / 20 elems (2 + 4), per lane
    core = program(BATCH).main().body.ops[3]
    assert isinstance(core, CoreOp) and isinstance(core.body.ops[1], ScheduledComputeBatchOp)
    assert block_cost_ns(core.body.ops[1].body, TARGET) == 5227
    load, store = 3 * 40, 8 * 50
    assert res.report.latency_ns == load + 3 * 5227 + 2 * store
    assert res.report.cores[0].body_ops == 3 * 5


def test_shared_buffer_written_on_one_core_is_read_on_another() -> None:
    text = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %buf = pim.alloc_shared : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %e = pim.relu %w : tensor<16xf32>
    pim.store %e into %buf[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %a = pim.load %buf[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
    %n = pim.neg %a : tensor<16xf32>
    pim.store %n into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""
    w = rand(16)
    res = run(text, {"w": w})
    np.testing.assert_array_equal(res.outputs[0], -np.maximum(w, 0))
    # core 1's load waits for core 0's store: relu 4, store 64 B = 100, load 80, neg 4, store 100
    c1 = res.report.cores[1]
    assert (c1.blocked_ns, c1.finish_ns) == (104, 104 + 80 + 4 + 100)
