"""The compiled event loop (`raptor.sim.loop`): which runs take it, and the cases of its
code that the other tests' programs do not reach."""

from __future__ import annotations

import pytest

from raptor.sim import SimOptions

from .util import rand, run

WAKE = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %a = spat.channel_receive from core(1) channel(0) : tensor<16xf32>
    %s = pim.vadd %a, %a : tensor<16xf32>
    pim.store %s into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(0) channel(0) : tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""


@pytest.mark.parametrize("contention", [True, False])
def test_a_message_wakes_the_receiver_parked_on_it(contention: bool) -> None:
    """Core 0 posts its receive and parks on the add; core 1's send finds the receive
    posted and leaves at 4 (through the links, or straight to core 0 without contention):
    one hop and 8 flits, at core 0 by 22, which adds (4) and stores (100)."""
    res = run(WAKE, {"w": rand(16)}, options=SimOptions(link_contention=contention))
    assert res.report.latency_ns == 22 + 4 + 100
    assert res.report.cores[0].blocked_ns == 22
    assert res.trace.spans[1:3] == [
        (0, 0, 22, "blocked", "blocked", "waiting for %a"),
        (0, 22, 4, "pim.vadd", "compute", "t.spat:7:10")]


SEND_FIRST = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(1) channel(0) : tensor<16xf32>
  }
  pim.core 1 {
    %a = spat.channel_receive from core(0) channel(0) : tensor<16xf32>
    %s = pim.vadd %a, %a : tensor<16xf32>
    pim.store %s into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""


@pytest.mark.parametrize("contention", [True, False])
def test_a_buffered_message_sent_before_its_receive_is_delivered_once(contention: bool) -> None:
    """Core 0 sends at 4 before core 1 posts its receive (core 0 runs first at time 0);
    the message is on the links when the receive is posted (contention: it is injected
    at 4), or already arrived (without): either way it is at core 1 by 22, once."""
    res = run(SEND_FIRST, {"w": rand(16)},
              options=SimOptions(mode="buffered", link_contention=contention))
    assert res.report.latency_ns == 22 + 4 + 100
    assert res.report.cores[1].blocked_ns == 22
    assert [m[:2] for m in res.trace.sent] == [(0, 4)]


SHARED = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %buf = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %a = spat.channel_receive from core(3) channel(0) : tensor<16xf32>
    pim.store %a into %buf[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %b = pim.load %buf[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
  }
  pim.core 2 {
    %c = pim.load %buf[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
  }
  pim.core 3 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(0) channel(0) : tensor<16xf32>
  }
  return %buf : tensor<16xf32>
}
"""


def test_loads_parked_on_one_store_are_woken_together_and_queue() -> None:
    """Cores 1 and 2 both load what core 0 stores once its message is in: both wait for
    the store, then ask at once; the memory serves core 1 first (the lowest core), and core
    2 when core 1's load is done (64 B: 80 ns each)."""
    res = run(SHARED, {"w": rand(16)})
    memory = {s[0]: s for s in res.trace.spans if s[4] == "memory"}
    store_end = memory[0][1] + memory[0][2]
    assert memory[1][1:3] == (store_end, 80)
    assert memory[2][1:3] == (store_end + 80, 80)
    queued = [s for s in res.trace.spans if s[0] == 2 and s[4] == "blocked"]
    assert [s[1:3] for s in queued] == [(0, store_end), (store_end, 80)]
    assert (res.report.shared_reads, res.report.shared_writes) == (2, 1)


PIMSIM = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %buf = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(1) channel(0) : tensor<16xf32>
    pim.store %e into %buf[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %f = pim.relu %w : tensor<16xf32>
    %g = pim.relu %f : tensor<16xf32>
    %h = pim.relu %g : tensor<16xf32>
    %a = spat.channel_receive from core(0) channel(0) : tensor<16xf32>
    %s = pim.vadd %a, %h : tensor<16xf32>
  }
  pim.core 2 {
    %c = pim.load %buf[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
  }
  return %buf : tensor<16xf32>
}
"""


def test_pimsim_nn_parked_sender_and_a_store_behind_the_switch() -> None:
    """pimsim-nn's protocol in the loop (`_pim_*`), by hand (one-hop flit 4 ns, 8-byte
    flits, handler 1 ns). Core 0 sends at 4: its request is at core 1 by 8, the switch
    free from 9; no receive is posted, so core 0 parks. Core 1 posts its receive at 12
    (after three relus): its reply reaches core 0 at 16, which reads nothing and hands
    the 8 flits to its switch, at core 1 by 16 + 8 * 4 = 48 (core 1 blocked from 12).
    Core 0's store asks at 16 but leaves through the switch only at 48, and holds the
    memory 100 ns; core 2's load waits for that store (148), then reads 80 ns."""
    res = run(PIMSIM, {"w": rand(16)},
              options=SimOptions(model="pimsim-nn", link_contention=False))
    spans = res.trace.spans
    assert (0, 4, 12, "spat.channel_send", "comm",
            "to core 1 channel 0 (pimsim-nn handshake)") in spans
    assert [s[:3] for s in spans if s[0] == 1 and s[4] != "compute"] == [(1, 12, 36)]
    assert (1, 48, 4) in [s[:3] for s in spans]
    assert [s[1:5] for s in spans if s[0] == 0 and s[1] == 16] == [
        (16, 32, "blocked", "blocked"), (16, 132, "pim.store %buf", "memory")]
    assert [s[1:4] for s in spans if s[0] == 2] == [
        (0, 148, "blocked"), (148, 80, "pim.load %buf")]
    assert res.report.latency_ns == 228
    assert [(c.busy_ns, c.blocked_ns) for c in res.report.cores] == [(104, 44), (16, 36),
                                                                     (80, 148)]
