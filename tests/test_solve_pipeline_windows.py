"""Convolution windows in pipeline mode (issue #25): `solve` lowers for the mode, and takes
the one-pixel lowering where windows cannot lower the period's bound (`_memory_bound_rival`)."""

from __future__ import annotations

from pathlib import Path

from raptor.driver import Compiled, CompileOptions, compile_model
from raptor.solve import SolveOptions, _memory_bound_rival
from raptor.solver.from_ir import GraphBuild, build_compute_graph
from raptor.solver.pipeline import PipelineProblem, build_problem
from raptor.target import load_target

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TARGET = load_target("default")
OPTS = SolveOptions(mode="pipeline", solver="pipeline")


def _rival(name: str) -> tuple[int, tuple[Compiled, GraphBuild, PipelineProblem] | None]:
    comp = compile_model(EXAMPLES / f"{name}.onnx", TARGET, CompileOptions(pipeline=True))
    assert comp.lowered.windowed
    build = build_compute_graph(comp.module.main(), TARGET)
    problem = build_problem(build.graph, TARGET, build=build)
    return problem.baseline_ns, _memory_bound_rival(EXAMPLES / f"{name}.onnx", TARGET, OPTS,
                                                    comp, problem)


def test_memory_bound_windows_give_way_to_one_pixel() -> None:
    """yolo_neck's period is bound by its outputs' shared-memory service with windows or
    without: the one-pixel lowering, said in a note."""
    floor, rival = _rival("yolo_neck")
    assert rival is not None
    comp, build, problem = rival
    assert comp.pipeline and not comp.lowered.windowed
    assert problem.lower_bound(OPTS.replication) == problem.baseline_ns == floor
    assert build.graph.num_tasks == problem.graph.num_tasks
    assert comp.notes[-1] == ("one output pixel per MVM: the period is bound by "
                              f"shared-memory service ({floor:,} ns) with windows or without")


def test_windows_kept_where_they_lower_the_bound() -> None:
    """The ResNet block's windows reach its shared-memory floor too, but at one pixel the
    pipeline heuristic's period model is over it: no rival."""
    assert _rival("resnet_block")[1] is None
