"""Programs that cannot run: deadlocks (named per core), capacity, unmatched channels."""

# ruff: noqa: E501 - the scheduled IR programs keep one op per line
from __future__ import annotations

import dataclasses
import re
import time

import numpy as np
import pytest

from raptor.sim import Deadlock, SimError, SimOptions
from raptor.target import Target

from .util import rand, run

CROSSED = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %a = spat.channel_receive from core(1) channel(2) : tensor<16xf32>
    %b = pim.relu %a : tensor<16xf32>
    spat.channel_send %b to core(1) channel(3) : tensor<16xf32>
  }
  pim.core 1 {
    %c = spat.channel_receive from core(0) channel(3) : tensor<16xf32>
    %d = pim.relu %c : tensor<16xf32>
    spat.channel_send %d to core(0) channel(2) : tensor<16xf32>
    pim.store %d into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""


@pytest.mark.parametrize("mode", ["rendezvous", "buffered"])
def test_crossed_receives_are_a_deadlock_naming_both_cores(mode: str) -> None:
    start = time.perf_counter()
    with pytest.raises(Deadlock) as info:
        run(CROSSED, {"w": rand(16)}, options=SimOptions(mode=mode))
    assert time.perf_counter() - start < 1.0
    err = info.value
    assert err.lines == [
        "core 0 blocked at t.spat:7:10 pim.relu waiting for %a from core 1 channel 2: "
        "core 1 has not sent it",
        "core 1 blocked at t.spat:12:10 pim.relu waiting for %c from core 0 channel 3: "
        "core 0 has not sent it",
    ]
    assert str(err).startswith("deadlock at 0 ns: 2 core(s) blocked\n")
    assert [c.ops for c in err.report.cores] == [1, 1]


SEND_FIRST = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    spat.channel_send %w to core(1) channel(0) : tensor<16xf32>
    %a = spat.channel_receive from core(1) channel(1) : tensor<16xf32>
    pim.store %a into %o[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %e = pim.relu %w : tensor<16xf32>
    spat.channel_send %e to core(0) channel(1) : tensor<16xf32>
    %b = spat.channel_receive from core(0) channel(0) : tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""


def test_send_first_exchange_needs_buffering() -> None:
    w = rand(16)
    out = run(SEND_FIRST, {"w": w}, options=SimOptions(mode="buffered")).outputs[0]
    np.testing.assert_array_equal(out, np.maximum(w, 0))
    with pytest.raises(Deadlock) as info:
        run(SEND_FIRST, {"w": w})
    assert info.value.lines == [
        "core 0 blocked at t.spat:6:5 spat.channel_send %w to core 1 channel 0: "
        "core 1 has not posted the matching receive",
        "core 1 blocked at t.spat:12:5 spat.channel_send %e to core 0 channel 1: "
        "core 0 has not posted the matching receive",
    ]
    assert info.value.time_ns == 4


def test_load_waiting_for_a_store_that_depends_on_it() -> None:
    text = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %buf = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    %a = spat.channel_receive from core(1) channel(0) : tensor<16xf32>
    pim.store %a into %buf[0] [16] [1] : tensor<16xf32> into tensor<16xf32>
  }
  pim.core 1 {
    %b = pim.load %buf[0] [16] [1] : tensor<16xf32> to tensor<16xf32>
    spat.channel_send %w to core(0) channel(0) : tensor<16xf32>
  }
  return %buf : tensor<16xf32>
}
"""
    with pytest.raises(Deadlock) as info:
        run(text, {"w": rand(16)})
    assert info.value.lines == [
        "core 0 blocked at t.spat:7:5 pim.store waiting for %a from core 1 channel 0: "
        "core 1 has not sent it",
        "core 1 blocked at t.spat:10:10 pim.load waiting for the pim.store at t.spat:7:5 "
        "on core 0",
    ]


CAPACITY = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w0 = spat.weight @w0 : tensor<4x4xf32>
  %w1 = spat.weight @w1 : tensor<4x4xf32>
  %w2 = spat.weight @w2 : tensor<4x4xf32>
  %o = pim.alloc_shared : tensor<4xf32>
  pim.core 3 {
    %a = pim.load %x[0] [4] [1] : tensor<4xf32> to tensor<4xf32>
    %b = pim.mvm %w0, %a : tensor<4x4xf32>, tensor<4xf32> -> tensor<4xf32>
    %c = spat.scheduled_compute ins(%b : tensor<4xf32>, %w1 : tensor<4x4xf32>, %w0 : tensor<4x4xf32>) -> tensor<4xf32> {
    ^bb0(%v: tensor<4xf32>, %k: tensor<4x4xf32>, %k0: tensor<4x4xf32>):
      %m = pim.mvm %k, %v : tensor<4x4xf32>, tensor<4xf32> -> tensor<4xf32>
      %n = pim.mvm %k0, %m : tensor<4x4xf32>, tensor<4xf32> -> tensor<4xf32>
      spat.yield %n : tensor<4xf32>
    }
    %d = pim.mvm %w2, %c : tensor<4x4xf32>, tensor<4xf32> -> tensor<4xf32>
    pim.store %d into %o[0] [4] [1] : tensor<4xf32> into tensor<4xf32>
  }
  return %o : tensor<4xf32>
}
"""


def test_crossbar_capacity_names_the_core_and_counts() -> None:
    weights = {f"w{i}": rand(4, 4, seed=i) for i in range(3)}
    x = rand(4)
    ok = run(CAPACITY, weights, {"x": x}, target=Target(crossbars_per_core=3))
    assert ok.report.cores[0].crossbars == 3  # @w0 used twice is one tile
    w0, w1, w2 = weights["w0"], weights["w1"], weights["w2"]
    np.testing.assert_allclose(ok.outputs[0], x @ w0 @ w1 @ w0 @ w2, rtol=1e-4)
    with pytest.raises(SimError) as info:
        run(CAPACITY, weights, {"x": x}, target=Target(crossbars_per_core=2))
    assert str(info.value) == ("crossbar capacity exceeded\ncore 3 holds 3 crossbars of "
                               "weights but target default has 2 crossbars per core")
    # 4x2 crossbars: every 4x4 weight is an array group of two
    narrow = Target(crossbar_cols=2, crossbars_per_core=6)
    assert run(CAPACITY, weights, {"x": x}, target=narrow).report.cores[0].crossbars == 6
    with pytest.raises(SimError, match="core 3 holds 6 crossbars"):
        run(CAPACITY, weights, {"x": x}, target=dataclasses.replace(narrow, crossbars_per_core=5))


def test_unmatched_channels_are_listed() -> None:
    text = """
func.func @main() -> tensor<16xf32> {
  %w = spat.weight @w : tensor<16xf32>
  %o = pim.alloc_shared : tensor<16xf32>
  pim.core 0 {
    spat.channel_send %w to core(1) channel(0) : tensor<16xf32>
    spat.channel_send %w to core(5) channel(0) : tensor<16xf32>
  }
  pim.core 1 {
    %a = spat.channel_receive from core(0) channel(1) : tensor<16xf32>
  }
  return %o : tensor<16xf32>
}
"""
    with pytest.raises(SimError) as info:
        run(text, {"w": rand(16)})
    assert info.value.headline == "unmatched channels"
    assert info.value.lines == [
        "channel 0 from core 0 to core 1: 1 send(s), 0 receive(s) (send at t.spat:6:5)",
        "channel 1 from core 0 to core 1: 0 send(s), 1 receive(s) (receive at t.spat:10:10)",
        "channel 0 from core 0 to core 5: destination core 5 has no program",
        "channel 0 from core 0 to core 5: 1 send(s), 0 receive(s) (send at t.spat:7:5)",
    ]


@pytest.mark.parametrize(("body", "message"), [
    ("%b = pim.relu %x : tensor<16xf32>", "pim.relu uses shared buffer %x directly"),
    ("%b = spat.graph_compute ins(%w : tensor<16xf32>) -> tensor<16xf32> {\n"
     "^bb0(%v: tensor<16xf32>):\n spat.yield %v : tensor<16xf32>\n}",
     "spat.graph_compute is not allowed in a core program"),
    ("%b = pim.load %x[8] [16] [1] : tensor<16xf32> to tensor<16xf32>",
     "pim.load dimension 0 [8, +16*1) is outside 0..16 of %x"),
])
def test_invalid_core_programs(body: str, message: str) -> None:
    text = f"""
func.func @main(%x: tensor<16xf32>) -> tensor<16xf32> {{
  %w = spat.weight @w : tensor<16xf32>
  pim.core 2 {{
    {body}
  }}
  return %x : tensor<16xf32>
}}
"""
    with pytest.raises(SimError, match=re.escape("core 2: " + message)):
        run(text, {"w": rand(16)}, {"x": rand(16)})


def test_missing_input_and_bad_options() -> None:
    with pytest.raises(SimError, match="no input for argument %x"):
        run(CAPACITY, {f"w{i}": rand(4, 4) for i in range(3)}, {"y": rand(4)})
    with pytest.raises(SimError, match="unknown send mode"):
        SimOptions(mode="eager")


def test_lane_out_of_bounds_names_the_core_and_op() -> None:
    text = """
func.func @main() -> tensor<4xf32> {
  %w = spat.weight @w : tensor<4xf32>
  %o = pim.alloc_shared : tensor<4xf32>
  pim.core 1 {
    %q = spat.scheduled_compute_batch lanes(3) ins(%w : tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%l: index, %v: tensor<4xf32>, %acc: tensor<4xf32>):
      %e = tensor.extract_slice %v[2*%l] [2] [1] : tensor<4xf32> to tensor<2xf32>
      spat.parallel_insert_slice %e into %acc[0] [2] [1] : tensor<2xf32> into tensor<4xf32>
    }
  }
  return %o : tensor<4xf32>
}
"""
    with pytest.raises(SimError, match=r"^core 1 failed at t.spat:6:10 "
                                       r"spat.scheduled_compute_batch: "):
        run(text, {"w": rand(4)})



def test_a_deadlocked_run_counts_the_messages_that_left() -> None:
    """The report counts a message once its send has run (at the end of the run, from
    the sends executed): here channel 9's, before the cores wait for each other."""
    text = CROSSED.replace("  pim.core 0 {\n", "  pim.core 0 {\n    spat.channel_send %w to "
                           "core(1) channel(9) : tensor<16xf32>\n")
    text = text.replace("  pim.core 1 {\n", "  pim.core 1 {\n    %x = spat.channel_receive "
                        "from core(0) channel(9) : tensor<16xf32>\n")
    for mode in ("rendezvous", "buffered"):
        with pytest.raises(Deadlock) as info:
            run(text, {"w": rand(16)}, options=SimOptions(mode=mode))
        rep = info.value.report
        assert (rep.messages, rep.message_bytes) == (1, 64)
