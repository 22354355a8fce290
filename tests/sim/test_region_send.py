"""`spat.channel_send` of a strided region: only the region travels (bytes and time), the
receiver gets it with the message type, and the text round-trips."""

from __future__ import annotations

import numpy as np

from raptor.ir.interpreter import slices
from raptor.ir.parser import parse_module
from raptor.ir.verifier import verify_module
from raptor.sim import SimOptions, simulate
from raptor.sim.program import _trimmed
from raptor.target import load_target

SEND = ("spat.channel_send %a[3, 0] [2, 16] [2, 1] to core(9) channel(0) : "
        "tensor<8x16xf32> -> tensor<2x16xf32>")
PROGRAM = """func.func @main(%x: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %o = pim.alloc_shared : tensor<2x16xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [8, 16] [1, 1] : tensor<8x16xf32> to tensor<8x16xf32>
    {send}
  }
  pim.core 9 {
    %b = spat.channel_receive from core(0) channel(0) : tensor<2x16xf32>
    pim.store %b into %o[0, 0] [2, 16] [1, 1] : tensor<2x16xf32> into tensor<2x16xf32>
  }
  return %o : tensor<2x16xf32>
}
""".replace("{send}", SEND)


def test_region_send_moves_only_the_region() -> None:
    module = parse_module(PROGRAM, "region.spat")
    assert module.print() == PROGRAM
    assert verify_module(module) == []
    target = load_target("default")
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    res = simulate(module, target, [x], SimOptions.ideal(trace=False))
    np.testing.assert_array_equal(res.outputs[0], x[3:6:2])
    assert res.report.message_bytes == 2 * 16 * 4
    load = target.ns(-(-x.nbytes // target.shared_access_bytes) * target.shared_read_cycles)
    store = target.ns(-(-128 // target.shared_access_bytes) * target.shared_write_cycles)
    assert res.report.latency_ns == load + target.transfer_ns(128, 0, 9) + store


def test_region_send_type_mismatch_is_sch1() -> None:
    bad = PROGRAM.replace("channel_receive from core(0) channel(0) : tensor<2x16xf32>",
                          "channel_receive from core(0) channel(0) : tensor<8x16xf32>")
    bad = bad.replace("pim.store %b into %o[0, 0] [2, 16] [1, 1] : tensor<2x16xf32>",
                      "pim.store %b into %o[0, 0] [2, 16] [1, 1] : tensor<8x16xf32>")
    rules = {d.rule for d in verify_module(parse_module(bad))}
    assert "SCH-1" in rules


def test_a_forwarded_region_is_a_region_of_the_region_received() -> None:
    """Core 5 sends on a region of the region it received: the numerics take both views when
    the loaded value is made (`Program.views`), the second after the first."""
    text = """func.func @main(%x: tensor<8x16xf32>) -> tensor<1x16xf32> {
  %o = pim.alloc_shared : tensor<1x16xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [8, 16] [1, 1] : tensor<8x16xf32> to tensor<8x16xf32>
    SEND
  }
  pim.core 5 {
    %c = spat.channel_receive from core(0) channel(0) : tensor<2x16xf32>
    FORWARD
  }
  pim.core 9 {
    %b = spat.channel_receive from core(5) channel(0) : tensor<1x16xf32>
    pim.store %b into %o[0, 0] [1, 16] [1, 1] : tensor<1x16xf32> into tensor<1x16xf32>
  }
  return %o : tensor<1x16xf32>
}
""".replace("SEND", SEND.replace("core(9)", "core(5)")).replace(
        "FORWARD", "spat.channel_send %c[1, 0] [1, 16] [1, 1] to core(9) channel(0) : "
        "tensor<2x16xf32> -> tensor<1x16xf32>")
    module = parse_module(text, "forward.spat")
    assert verify_module(module) == []
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    for options in (SimOptions(trace=False), SimOptions.ideal(trace=False)):
        res = simulate(module, load_target("default"), [x], options)
        np.testing.assert_array_equal(res.outputs[0], x[5:6])


def test_a_region_taken_with_its_whole_dimensions_trimmed_is_the_same_view() -> None:
    """A send's region keeps `:` for the dimensions it takes whole and drops trailing ones
    (`_trimmed`): the same view, element for element, stride for stride."""
    x = np.arange(2 * 6 * 1 * 4, dtype=np.float32).reshape(2, 6, 1, 4)
    for offsets, sizes, strides, want in (
            ([0, 0, 0, 0], [2, 6, 1, 4], [1, 1, 1, 1], (slice(None),)),
            ([0, 2, 0, 0], [2, 3, 1, 4], [1, 1, 1, 1], (slice(None), slice(2, 5, 1))),
            ([0, 0, 0, 1], [2, 6, 1, 2], [1, 1, 1, 2], (*[slice(None)] * 3, slice(1, 4, 2))),
            ([1, 0, 0, 0], [1, 3, 1, 4], [1, 2, 1, 1], (slice(1, 2, 1), slice(0, 5, 2)))):
        sl = slices(offsets, sizes, strides)
        got = _trimmed(sl, x.shape)
        assert got == want
        a, b = x[sl], x[got]
        assert (a.shape, a.strides, a.ctypes.data) == (b.shape, b.strides, b.ctypes.data)
