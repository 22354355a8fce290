"""Lowering is a registry of one lowerer per plan kind; windows and malformed plans fail
cleanly and in bounded time."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raptor.frontend import run_plan_graph
from raptor.frontend.plan import KINDS, Plan, PlanGraph, PlanValue
from raptor.ir.interpreter import Interpreter
from raptor.ir.ops import GraphComputeBatchOp, MvmOp
from raptor.passes.lower import LOWERERS, LoweringError, RowRun, Window, lower
from raptor.target import Target


def test_every_plan_kind_has_a_lowerer() -> None:
    assert set(KINDS) <= set(LOWERERS)


def brute_segments(w: Window) -> list[RowRun]:
    """The definition: per output row, the kernel rows whose input row is inside."""
    kh, sh, dh, top = w.kernel[0], w.stride[0], w.dilation[0], w.pads[0]
    runs: list[RowRun] = []
    for r in range(w.out[0]):
        inside = [i for i in range(kh) if 0 <= r * sh - top + i * dh < w.h]
        span = (inside[0], inside[-1] + 1) if inside else (0, 0)
        if runs and runs[-1].hi == r and (runs[-1].first, runs[-1].end) == span:
            runs[-1] = RowRun(runs[-1].lo, r + 1, *span)
        else:
            runs.append(RowRun(r, r + 1, *span))
    return runs


@settings(derandomize=True, max_examples=200, deadline=None)
@given(h=st.integers(1, 12), kh=st.integers(1, 7), sh=st.integers(1, 4), dh=st.integers(1, 3),
       top=st.integers(0, 6), out=st.integers(1, 12))
def test_segments_match_the_definition(h: int, kh: int, sh: int, dh: int, top: int,
                                       out: int) -> None:
    w = Window(h, 4, (kh, 1), (sh, 1), (dh, 1), (top, 0), (out, 4))
    assert w.segments() == brute_segments(w)


def test_segments_of_a_huge_kernel_take_no_time() -> None:
    t0 = time.perf_counter()
    w = Window(8, 8, (10**9, 1), (10**9, 1), (1, 1), (10**9 - 4, 0), (3, 8))
    assert w.segments() == [RowRun(0, 1, 10**9 - 4, 10**9), RowRun(1, 2, 0, 4),
                            RowRun(2, 3, 0, 0)]
    assert time.perf_counter() - t0 < 0.1


@pytest.mark.parametrize("field", ["kernel", "stride", "dilation"])
def test_a_window_without_taps_is_refused(field: str) -> None:
    dims = {"kernel": (3, 3), "stride": (1, 1), "dilation": (1, 1)}
    dims[field] = (0, 1)
    with pytest.raises(ValueError, match="must be positive"):
        Window(8, 8, dims["kernel"], dims["stride"], dims["dilation"], (0, 0), (6, 6))


def graph(plan: Plan, shape_in: tuple[int, ...], shape_out: tuple[int, ...]) -> PlanGraph:
    x, y = PlanValue("x", shape_in), PlanValue("y", shape_out)
    return PlanGraph("g", [x], [y], {"x": x, "y": y}, [plan], 17)


def test_a_pool_with_a_zero_kernel_is_a_lowering_error(target: Target) -> None:
    pool = Plan("maxpool", "pool0", ["x"], ["y"], {
        "kernel": [0, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0],
        "ceil_mode": 0})
    with pytest.raises(LoweringError, match=r"plan 'pool0' \(maxpool\): window kernel \[0, 2\]"):
        lower(graph(pool, (1, 2, 4, 4), (1, 2, 4, 3)), target)


def test_a_concat_of_mismatched_ranks_names_the_plan(target: Target) -> None:
    cat = Plan("concat", "cat0", ["x", "x"], ["y"], {"axis": 3})
    with pytest.raises(LoweringError, match=r"plan 'cat0' \(concat\): cannot concatenate"):
        lower(graph(cat, (2, 3), (2, 6)), target)


def test_a_huge_output_is_refused_before_anything_is_built(target: Target) -> None:
    relu = Plan("relu", "r0", ["x"], ["y"])
    with pytest.raises(LoweringError, match=r"'r0': output y of shape .* is too large"):
        lower(graph(relu, (1, 4), (1 << 20, 1 << 20)), target)


@pytest.mark.parametrize(("kind", "protocol", "channels"), [
    ("maxpool", "raptor", 4), ("avgpool", "raptor", 4), ("maxpool", "pimsim-nn", 8)])
def test_a_wide_pool_runs_channel_groups_per_lane(kind: str, protocol: str, channels: int
                                                  ) -> None:
    """A pooling lane's input window stays within an eighth of a core's memory: on a
    4 KiB target (512 one-byte activations per lane) an 8-channel, 20-wide map pools 4
    channels per lane (3 rows x 22 padded columns each) and still computes the pool.
    Under pimsim-nn's protocol within half (2,048 bytes): all 8 channels, one message
    fewer from every producer row and to every reader."""
    small = Target(local_memory_bytes=4096, protocol=protocol)
    pool = Plan(kind, "p0", ["x"], ["y"], {
        "kernel": [3, 3], "strides": [2, 2], "dilations": [1, 1], "pads": [1, 1, 1, 1],
        "ceil_mode": 0, "count_include_pad": 0})
    g = graph(pool, (1, 8, 6, 20), (1, 8, 3, 10))
    low = lower(g, small)
    batches = [op for op in low.module.walk() if isinstance(op, GraphComputeBatchOp)]
    assert batches and {b.outs[0].type.static_shape[1] for b in batches} == {channels}  # type: ignore[union-attr]
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 20)).astype(np.float32)
    ours = Interpreter(low.module).run([x])[0]
    np.testing.assert_allclose(ours, run_plan_graph(g, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_a_large_global_average_pool_sums_row_blocks_then_adds_them() -> None:
    """A channel chunk's whole map must fit a quarter of a core with its dense copy: on a
    4 KiB target 8 channels of 16x16 (2 KiB, 4 KiB with the copy) are summed in 4-row
    blocks (8 lanes of 2x256 bytes), one batch per block, then added and scaled by one more
    batch; the result is the mean. A small map stays one batch."""
    small = Target(local_memory_bytes=4096)
    gap = Plan("global_avgpool", "g0", ["x"], ["y"])
    for shape, batches_expected in (((1, 8, 16, 16), 5), ((1, 8, 4, 4), 1)):
        g = graph(gap, shape, (*shape[:2], 1, 1))
        low = lower(g, small)
        batches = [op for op in low.module.walk() if isinstance(op, GraphComputeBatchOp)]
        assert len(batches) == batches_expected
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        ours = Interpreter(low.module).run([x])[0]
        np.testing.assert_allclose(ours, run_plan_graph(g, {"x": x})["y"], rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize(("protocol", "tiles_per_lane"), [("raptor", 1), ("pimsim-nn", 2)])
def test_pimsim_bundles_row_tiles_at_equal_mvm_rounds(protocol: str, tiles_per_lane: int
                                                      ) -> None:
    """A 3x3 convolution of 7 channels on 16-row crossbars has 4 row tiles; on 4 cores its
    2 rows of 2 pixels take 2 MVM rounds either in 4 one-tile bundles (8 lanes, 2 rounds
    of 1 MVM) or in 2 bundles of 2 (4 lanes, 1 round of 2). At one MVM unit Raptor's
    protocol keeps one tile per lane; under pimsim-nn's, where each partial sum is one
    more blocking message, 2 tiles per lane: half the partial sums. Both compute the
    convolution."""
    t = Target(mesh_rows=2, mesh_cols=2, crossbar_rows=16, crossbar_cols=16, protocol=protocol,
               conv_window_max=1)  # one pixel per MVM: windows take every row tile per lane
    w = np.random.default_rng(2).standard_normal((8, 7, 3, 3)).astype(np.float32)
    conv = Plan("conv", "c0", ["x"], ["y"], {"strides": [1, 1], "pads": [1, 1, 1, 1],
                                             "dilations": [1, 1], "group": 1}, {"weight": w})
    g = graph(conv, (1, 7, 2, 2), (1, 8, 2, 2))
    low = lower(g, t)
    batches = [op for op in low.module.walk() if isinstance(op, GraphComputeBatchOp)]
    mvms = [sum(isinstance(op, MvmOp) for op in b.walk()) for b in batches]
    assert {m for m in mvms if m} == {tiles_per_lane}  # one mvm op per tile of its bundle
    x = np.random.default_rng(3).standard_normal((1, 7, 2, 2)).astype(np.float32)
    ours = Interpreter(low.module).run([x])[0]
    np.testing.assert_allclose(ours, run_plan_graph(g, {"x": x})["y"], rtol=1e-4, atol=1e-5)
