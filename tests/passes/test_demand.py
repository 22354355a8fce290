"""Demand analysis: a convolution lane gathers (and its producers send) only the channels its
crossbar tile reads; the reshape rule never drops an element."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from raptor.ir.ops import MvmOp
from raptor.passes.demand import flat_box
from raptor.passes.projection import Projection
from raptor.target import Target

from .conftest import compiled


@st.composite
def reshapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, int],
                                                                             ...]]:
    """A shape, another shape with as many elements, and a box in the first."""
    factors = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=5))
    src = tuple(factors)
    perm = draw(st.permutations(factors))
    cut = draw(st.integers(0, len(perm)))
    dst = tuple(x for x in (math.prod(perm[:cut]), *perm[cut:]) if x > 0) or (1,)
    box = []
    for n in src:
        lo = draw(st.integers(0, n - 1))
        box.append((lo, draw(st.integers(lo + 1, n))))
    return src, dst, tuple(box)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(reshapes())
def test_reshape_box_keeps_every_element(case: tuple[tuple[int, ...], tuple[int, ...],
                                                     tuple[tuple[int, int], ...]]) -> None:
    src, dst, box = case
    got = flat_box(box, src, dst)
    for idx in itertools.product(*(range(a, b) for a, b in box)):
        flat = int(np.ravel_multi_index(idx, src))
        out = np.unravel_index(flat, dst)
        assert all(a <= int(i) < b for i, (a, b) in zip(out, got, strict=True)), (idx, got)


def test_row_tile_lanes_gather_only_their_channels(target: Target) -> None:
    """ResNet block, second conv: K = 16 channels x 9 taps = 144 rows, cut into crossbar
    tiles of 128 and 16 rows. A lane of the first tile uses channels 0..14 of its three
    input rows, one of the second tile channels 14..15; each input row arrives cropped, and
    the lane's input buffer holds only its channels. (One crossbar per core, so that a lane
    takes one tile: with more, `_lanes` gives each lane both, with no partial sums; and
    one pixel per MVM, whose im2col rows are these.)"""
    one = dataclasses.replace(target, crossbars_per_core=1, conv_window_max=1)  # as above
    proj = Projection(compiled("resnet_block", one).module.main())
    seen = set()
    for inst in proj.instances:
        mvm = next((o for o in inst.op.body.walk() if isinstance(o, MvmOp)), None)
        placed = [u for u in inst.uses if u.kind == "placed"]
        if mvm is None or not placed:
            continue
        rows = mvm.weight.type.static_shape[0]  # type: ignore[attr-defined]
        want = (0, 15) if rows == 128 else (14, 16)
        for p in placed[0].pieces:
            assert p.crop is not None and (p.offsets[1], p.offsets[1] + p.sizes[1]) == want
        box = placed[0].box  # and its buffer holds only those channels
        assert (box.lo[1], box.hi[1]) == want
        seen.add(rows)
    assert seen == {128, 16}
