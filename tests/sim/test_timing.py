"""Exact timing on small programs, computed by hand from the default target at 1 GHz:
MVM 1305 ns per row, vector op 4 ns per 32 elements, local copy 1 ns per 64 B, a flit of
8 B takes 2 ns and a hop 2 ns, shared memory 40 ns per 32 B read and 50 ns per 32 B write."""

# ruff: noqa: E501 - the scheduled IR programs keep one op per line
from __future__ import annotations

import numpy as np
import pytest

from raptor.sim import SimOptions, simulate
from raptor.sim.report import SimReport
from raptor.solver.costs import block_cost_ns, op_cost_ns
from raptor.target import Target

from .util import NO_QUEUE, TARGET, program, rand, run

ONE_CORE = """
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w = spat.weight @w : tensor<8x8xf32>
  %o = pim.alloc_shared : tensor<4x8xf32>
  pim.core 5 {
    %a = pim.load %x[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> to tensor<4x8xf32>
    %r = spat.scheduled_compute ins(%a : tensor<4x8xf32>, %w : tensor<8x8xf32>) -> tensor<4x8xf32> {
    ^bb0(%in: tensor<4x8xf32>, %wt: tensor<8x8xf32>):
      %m = pim.mvm %wt, %in : tensor<8x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
      %s = pim.relu %m : tensor<4x8xf32>
      %t = pim.vadd %s, %in : tensor<4x8xf32>
      spat.yield %t : tensor<4x8xf32>
    }
    %u = pim.softmax %r {axis = 1} : tensor<4x8xf32>
    pim.store %u into %o[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> into tensor<4x8xf32>
  }
  return %o : tensor<4x8xf32>
}
"""


def test_mvm_and_vector_ops_on_one_core() -> None:
    x, w = rand(4, 8), rand(8, 8, seed=1)
    res = run(ONE_CORE, {"w": w}, {"x": x})
    # load 128 B = 4 x 40; body 4 x 1305 + relu 4 + vadd 4; softmax 4 passes x 4; store 4 x 50
    assert res.report.latency_ns == 160 + 5228 + 16 + 200
    core = res.report.cores[0]
    assert (core.core, core.busy_ns, core.blocked_ns, core.idle_ns) == (5, 5604, 0, 0)
    assert (core.ops, core.body_ops, core.crossbars) == (4, 3, 1)
    h = np.maximum(x @ w, 0) + x
    e = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(res.outputs[0], e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_costs_are_the_schedulers_table() -> None:
    """The simulator charges block_cost_ns / op_cost_ns, whatever the target."""
    slow = Target(clock_ghz=0.7, mvm_cycles=1000, vector_op_cycles=3)
    module = program(ONE_CORE, {"w": rand(8, 8)})
    core = module.main().body.ops[2].body.ops  # type: ignore[attr-defined]
    want = sum(block_cost_ns(op.body, slow) if hasattr(op, "body") else op_cost_ns(op, slow)
               for op in core)
    assert simulate(module, slow, {"x": rand(4, 8)}).report.latency_ns == want


UNITS = """
func.func @main(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %w0 = spat.weight @w0 : tensor<8x8xf32>
  %w1 = spat.weight @w1 : tensor<8x8xf32>
  %o = pim.alloc_shared : tensor<3x8xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [3, 8] [1, 1] : tensor<3x8xf32> to tensor<3x8xf32>
    %r = spat.scheduled_compute ins(%a : tensor<3x8xf32>, %w0 : tensor<8x8xf32>, %w1 : tensor<8x8xf32>) -> tensor<3x8xf32> {
    ^bb0(%in: tensor<3x8xf32>, %k0: tensor<8x8xf32>, %k1: tensor<8x8xf32>):
      %m0 = pim.mvm %k0, %in : tensor<8x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
      %m1 = pim.mvm %k1, %SRC : tensor<8x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
      %s = pim.vadd %m0, %m1 : tensor<3x8xf32>
      spat.yield %s : tensor<3x8xf32>
    }
    pim.store %r into %o[0, 0] [3, 8] [1, 1] : tensor<3x8xf32> into tensor<3x8xf32>
  }
  return %o : tensor<3x8xf32>
}
"""


@pytest.mark.parametrize(("units", "src", "mvms"), [
    (1, "in", 6),  # one array group at a time: 3 + 3 MVMs
    (2, "in", 3),  # two groups at once: each fires its 3 in turn, side by side
    (4, "in", 3),  # more units than groups: a group still fires one MVM at a time
    (2, "m0", 6),  # the second reads the first's result: one after the other
])
def test_mvm_units_fire_array_groups_at_once(units: int, src: str, mvms: int) -> None:
    """`mvm_units` groups of a core fire at once (`Target.mvm_group_ns`); the simulator
    charges what the schedulers' table says."""
    target = Target(mvm_units=units)
    text = UNITS.replace("%SRC", f"%{src}")
    x, w0, w1 = rand(3, 8), rand(8, 8, seed=1), rand(8, 8, seed=2)
    res = run(text, {"w0": w0, "w1": w1}, {"x": x}, target=target)
    # load 96 B = 3 accesses x 40; vadd of 24 elements 4; store 3 x 50
    assert res.report.latency_ns == 120 + mvms * 1305 + 4 + 150
    compute = program(text).main().body.ops[3].body.ops[1]  # type: ignore[attr-defined]
    assert block_cost_ns(compute.body, target) == mvms * 1305 + 4
    h = x @ w0
    np.testing.assert_allclose(res.outputs[0], h + (x if src == "in" else h) @ w1, rtol=1e-5)


def _hop_program(dst: int) -> str:
    return f"""
func.func @main(%x: tensor<16xf32>) -> tensor<16xf32> {{
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {{
    %a = pim.load %x[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
    spat.channel_send %a to core({dst}) channel(7) : tensor<16xf32>
  }}
  pim.core {dst} {{
    %b = spat.channel_receive from core(0) channel(7) : tensor<16xf32>
    %c = pim.relu %b : tensor<16xf32>
    pim.store %c into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }}
  return %o : tensor<16xf32>
}}
"""


@pytest.mark.parametrize(("dst", "hops"), [(1, 1), (9, 2), (63, 14)])
def test_transfer_time_grows_with_hops(dst: int, hops: int) -> None:
    x = rand(16)
    res = run(_hop_program(dst), inputs={"x": x})
    arrival = 80 + hops * 2 + 8 * 2  # load 64 B, then hops and 8 flits
    assert arrival - 80 == TARGET.transfer_ns(64, 0, dst)
    receiver = res.report.cores[1]
    assert receiver.blocked_ns == arrival
    assert res.report.latency_ns == arrival + 4 + 100
    np.testing.assert_array_equal(res.outputs[0], np.maximum(x, 0))


TWO_LOADS = """
func.func @main(%x: tensor<2x32xf32>) -> tensor<2x32xf32> {
  %o = pim.alloc_shared : tensor<2x32xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [1, 32] [1, 1] : tensor<2x32xf32> to tensor<32xf32>
    pim.store %a into %o[0, 0] [1, 32] [1, 1] : tensor<32xf32> into tensor<2x32xf32>
  }
  pim.core 1 {
    %a = pim.load %x[1, 0] [1, 32] [1, 1] : tensor<2x32xf32> to tensor<32xf32>
    pim.store %a into %o[1, 0] [1, 32] [1, 1] : tensor<32xf32> into tensor<2x32xf32>
  }
  return %o : tensor<2x32xf32>
}
"""


def test_shared_memory_serves_one_request_at_a_time() -> None:
    x = rand(2, 32)
    queued = run(TWO_LOADS, inputs={"x": x})
    free = run(TWO_LOADS, inputs={"x": x}, options=NO_QUEUE)
    # 128 B: load 160, store 200. Both ask at 0: load0 [0,160) (the lower core first);
    # load1 asks again at 160 with store0, which goes first: [160,360), load1 [360,520),
    # store1 [520,720)
    assert [c.finish_ns for c in queued.report.cores] == [360, 720]
    assert [c.blocked_ns for c in queued.report.cores] == [0, 360]
    assert free.report.latency_ns == 360
    np.testing.assert_array_equal(queued.outputs[0], x)
    np.testing.assert_array_equal(free.outputs[0], x)


CONTENTION = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    spat.channel_send %w to core(2) channel(0) : tensor<16xf32>
  }
  pim.core 1 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(2) channel(1) : tensor<16xf32>
  }
  pim.core 2 {
    %a = spat.channel_receive from core(0) channel(0) : tensor<16xf32>
    %b = spat.channel_receive from core(1) channel(1) : tensor<16xf32>
    %s = pim.vadd %a, %b : tensor<16xf32>
    pim.store %s into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""


def test_link_contention_makes_the_second_message_wait() -> None:
    """0->2 holds link 1->2 from 2 to 18 ns; 1->2, sent at 4, waits for it."""
    w = rand(16)
    busy = run(CONTENTION, {"w": w})
    free = run(CONTENTION, {"w": w}, options=SimOptions(link_contention=False))
    # first message: 2 hops + 8 flits = 20. second: head waits until 18, + hop 2 + 16 = 36
    assert busy.report.cores[2].blocked_ns == 36
    assert busy.report.latency_ns == 36 + 4 + 100
    # without contention the second arrives at 4 + 18 = 22
    assert free.report.cores[2].blocked_ns == 22
    assert free.report.latency_ns == 22 + 4 + 100
    np.testing.assert_array_equal(busy.outputs[0], w + np.maximum(w, 0))


def test_free_links_give_the_no_contention_figure() -> None:
    w = rand(16)
    for dst in (1, 9, 63):
        a = run(_hop_program(dst), inputs={"x": w})
        b = run(_hop_program(dst), inputs={"x": w}, options=SimOptions.ideal())
        assert a.report.latency_ns == b.report.latency_ns


RENDEZVOUS = """
func.func @main() -> (tensor<16xf32>, tensor<16xf32>) {
  %w = spat.weight @w : tensor<16xf32>
  %t = spat.weight @t : tensor<16x16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  %p = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    spat.channel_send %w to core(1) channel(0) : tensor<16xf32>
    %e = pim.relu %w : tensor<16xf32>
    pim.store %e into %p[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %m = pim.mvm %t, %w : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
    %r = spat.channel_receive from core(0) channel(0) : tensor<16xf32>
    %s = pim.vadd %m, %r : tensor<16xf32>
    pim.store %s into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  return %o, %p : tensor<16xf32>, tensor<16xf32>
}
"""


def test_rendezvous_sender_waits_for_the_posted_receive() -> None:
    weights = {"w": rand(16), "t": rand(16, 16, seed=3)}
    buffered = run(RENDEZVOUS, weights, options=SimOptions(mode="buffered",
                                                           shared_queueing=False))
    rdv = run(RENDEZVOUS, weights, options=NO_QUEUE)
    rdv10 = run(RENDEZVOUS, weights, options=SimOptions(shared_queueing=False,
                                                        rendezvous_ns=10))
    # buffered: core 0 never waits (relu 4 + store 100); core 1 posts at 1305, data is there
    assert [c.finish_ns for c in buffered.report.cores] == [104, 1305 + 4 + 100]
    assert buffered.report.cores[0].blocked_ns == 0
    # rendezvous: core 0 waits for the post at 1305; data arrives 18 ns later
    assert rdv.report.cores[0].blocked_ns == 1305
    assert [c.finish_ns for c in rdv.report.cores] == [1305 + 104, 1323 + 104]
    # the handshake cost is paid by the sender before injecting
    assert rdv10.report.cores[0].busy_ns == 10 + 104
    assert [c.finish_ns for c in rdv10.report.cores] == [1315 + 104, 1333 + 104]
    for res in (buffered, rdv, rdv10):
        w, t = weights["w"], weights["t"]
        np.testing.assert_allclose(res.outputs[0], w @ t + w, rtol=1e-5)


def test_core_time_adds_up() -> None:
    res = run(CONTENTION, {"w": rand(16)})
    for c in res.report.cores:
        assert c.busy_ns + c.blocked_ns == c.finish_ns
        assert c.finish_ns + c.idle_ns == res.report.latency_ns


MLP_GAPS = [1953, 1953, 1825, 1953, 1953, 2081] * 4
"""The MLP's layered stream once full: a pattern of six intervals, 1,953 ns on average."""
MLP_ENDS = [6680 + sum(MLP_GAPS[:i]) for i in range(len(MLP_GAPS) + 1)]


@pytest.mark.parametrize(("starts", "ends", "fill", "period"), [
    ([0, 100, 200, 300, 400, 500], [150, 250, 350, 450, 550, 650], 1, 100),  # regular
    # the drain left out: the last inferences end faster once the first cores are done
    # (the second half's mean would be 18)
    ([0, 30, 60, 90, 120, 150, 180, 210], [100, 130, 160, 190, 215, 235, 250, 262], 1, 30),
    # in pairs: one per mean interval over the shared completions (the median: 131)
    ([0, 300, 600, 900, 1200, 1500, 1800, 2100, 2400, 2700],
     [606, 736, 1226, 1343, 1828, 1959, 2449, 2566, 3070, 3190], 1, 306),
    # filling: the first completions (early ones among them) left out
    ([0, 10, 20, 200, 400, 600, 800, 1000, 1200, 1400],
     [100, 130, 500, 700, 900, 1100, 1300, 1500, 1700, 1900], 1, 200),
    ([0, 100, 200, 300, 400, 500, 600], [50, 160, 300, 400, 500, 600, 700], 4, 100),  # 4 stages
    # a repeated pattern: whole repeats (its mean over part of one is off)
    ([e - 4000 for e in MLP_ENDS], MLP_ENDS, 1, 1953),
    ([0, 50], [100, 200], 1, None),  # too short: no completion before the last start
    ([0], [10], 1, None),
])
def test_stream_period_is_the_long_run_mean_interval(starts: list[int], ends: list[int],
                                                     fill: int, period: int | None) -> None:
    """The period a longer stream shows: the mean interval over the completions it shares
    (no later than the last start: no drain), from their middle on (no fill), over whole
    repeats of a pattern they end in. The mean, not the median: a stream whose inferences
    end in bursts delivers one per mean interval."""
    rep = SimReport(latency_ns=0, cores=[], inference_start_ns=starts, inference_end_ns=ends)
    assert rep.period_ns(fill) == period
