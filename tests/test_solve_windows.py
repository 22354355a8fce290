"""Convolution windows under a blocking protocol: `solve` schedules the windowed lowering and
the one-pixel one and keeps the faster by PEFT's estimate (issue #25)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from raptor.driver import compile_model
from raptor.solve import SolveOptions, _one_pixel_rival, solve
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.peft import peft_schedule
from raptor.target import Target

LENET = Path(__file__).resolve().parent.parent / "examples" / "lenet.onnx"
BLOCKING = Target(mesh_rows=4, mesh_cols=4, protocol="pimsim-nn")
OPTS = SolveOptions(solver="peft", simulate=False)


def _peft_ns(target: Target) -> int:
    """PEFT's estimate of LeNet lowered for `target`, scheduled under `BLOCKING`."""
    comp = compile_model(LENET, target)
    return peft_schedule(build_compute_graph(comp.module.main(), BLOCKING).graph,
                         BLOCKING).estimate_ns


def test_the_faster_lowering_is_kept_and_said() -> None:
    solved = solve(LENET, BLOCKING, OPTS)
    note = next(n for n in solved.notes if "PEFT under pimsim-nn's protocol" in n)
    found = re.search(r"([\d,]+) ns windowed, ([\d,]+) at one pixel", note)
    assert found is not None
    windowed, one = (int(g.replace(",", "")) for g in found.groups())
    assert windowed == _peft_ns(BLOCKING)
    assert one == _peft_ns(dataclasses.replace(BLOCKING, conv_window_max=1))
    assert solved.compiled.lowered.windowed == (windowed <= one)
    assert note.startswith("convolution windows kept" if windowed <= one
                           else "one output pixel per MVM")


def test_the_one_pixel_lowering_wins_when_faster() -> None:
    comp = compile_model(LENET, BLOCKING)
    build = build_compute_graph(comp.module.main(), BLOCKING)
    slow = dataclasses.replace(peft_schedule(build.graph, BLOCKING), estimate_ns=10**12)
    rival, rival_build, heuristic = _one_pixel_rival(LENET, BLOCKING, OPTS, comp, build, slow)
    assert comp.lowered.windowed and not rival.lowered.windowed
    assert rival.lowered.mvms > comp.lowered.mvms
    assert heuristic.estimate_ns < slow.estimate_ns
    assert rival_build.graph.num_tasks != build.graph.num_tasks
    assert rival.notes[-1].startswith("one output pixel per MVM")


@pytest.mark.parametrize("target", [dataclasses.replace(BLOCKING, protocol="raptor"),
                                    dataclasses.replace(BLOCKING, conv_window_max=1)])
def test_no_rival_without_windows_or_blocking(target: Target) -> None:
    solved = solve(LENET, target, OPTS)
    assert not any("at one pixel" in n for n in solved.notes)
