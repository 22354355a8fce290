"""The publication map is a function of the graph alone: the same graph gives the same
instances and pieces whatever the memory layout of the process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from examples.build_examples import NetBuilder
from raptor.driver import CompileOptions, compile_model
from raptor.passes.projection import Projection
from raptor.target import Target


def _model() -> onnx.ModelProto:
    """Found by the random-network harness (seed 22): a dilated conv beside a relu whose
    squeeze(unsqueeze) joins it again, and a dangling resize; values of rank 4 reach the
    projection both as batch results and as graph compute results."""
    b = NetBuilder(22)
    conv = b.node("Conv", ["x", b.const("w", b.rng.uniform(-.5, .5, (4, 3, 3, 3))
                                         .astype(np.float32))],
                  kernel_shape=[3, 3], pads=[2] * 4, dilations=[2, 2])
    b.node("Relu", [conv])
    r = b.node("Relu", ["x"])
    u = b.node("Unsqueeze", [r, b.const("a0", np.array([2], np.int64))])
    s = b.node("Squeeze", [u, b.const("a1", np.array([2], np.int64))])
    b.node("Resize", ["x", "", b.const("sc", np.array([1, 1, 2, 2], np.float32))],
           mode="nearest")
    return b.model("p22", {"x": [1, 3, 4, 4]}, b.node("Add", [r, s], out="y"))


def test_pieces_of_fresh_entries_are_never_another_entrys(tmp_path: Path, target: Target
                                                          ) -> None:
    """`entries` builds new placement entries on every call for batch results and graph
    computes; the projection once cached their offsets by `id(entry)`, so an entry
    allocated where a collected one of another rank had lived read its dims (IndexError in
    `pieces`, on ~12 % of small random CNNs, differently on every run). Asking again for
    every placed use, interleaved, reuses freed addresses on purpose."""
    path = tmp_path / "p22.onnx"
    onnx.save(_model(), path)
    proj = Projection(compile_model(path, target, CompileOptions()).module.main())
    placed = [u for inst in proj.instances for u in inst.uses if u.kind == "placed"]
    assert placed
    for _ in range(20):
        for use in placed:
            entries = proj.entries(use.value)
            assert entries is not None
            for p in proj.pieces(entries, use.box):
                assert len(p.offsets) == len(use.box.lo)
