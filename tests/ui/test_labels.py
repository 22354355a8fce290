"""Layer names reach every compute and memory span: the ONNX node each task was lowered
from, and per core one label per span the simulator times, in program order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest

from raptor.driver import compile_model, ir_inputs
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import simulate
from raptor.sim.report import BUSY, MEMORY
from raptor.solver.evaluate import retime
from raptor.solver.from_ir import build_compute_graph
from raptor.target import load_target
from raptor.ui.labels import UNKNOWN, legend, span_labels, task_layers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["lenet", "yolo_neck"])
def test_every_task_is_named_once_by_its_onnx_node(name: str) -> None:
    """All tasks on one core in program order: lanes merge into scheduled batches, so
    labels must resolve batches (several tasks) and single computes alike; every task is
    named exactly once, by a node of the ONNX graph, and labels line up with the spans."""
    target = load_target("default")
    path = EXAMPLES / f"{name}.onnx"
    comp = compile_model(path, target)
    build = build_compute_graph(comp.module.main(), target)
    g = build.graph
    order = list(range(g.num_tasks))
    start = retime(g, target, [0] * g.num_tasks, [order])
    end = [start[t] + g.tasks[t].cost_ns for t in order]
    scheduled = materialize(comp.module, build.projection, build.outputs,
                            ScheduleView([0] * g.num_tasks, start, end))
    layers = task_layers(comp.lowered, build)
    nodes = {n.name for n in onnx.load(str(path)).graph.node}
    assert UNKNOWN not in layers
    assert {layer.name for layer in layers} <= nodes | {f"{v}.dense" for v in
                                                          comp.graph.values}
    assert next(iter(legend(comp.lowered))) in nodes
    labels = span_labels(scheduled, layers, [t.lane for t in g.tasks])
    named = Counter(t for lab in labels[0] for t in lab.args.get("tasks", []))
    assert sorted(named) == order and set(named.values()) == {1}
    batches = [lab for lab in labels[0] if len(lab.args.get("tasks", [])) > 1]
    assert batches, "a one-core program merges lanes"
    for lab in batches:
        lanes = lab.args["lanes"]
        assert lanes == list(range(lanes[0], lanes[0] + len(lanes)))
        assert {layers[t].name for t in lab.args["tasks"]} == {lab.key}
    assert comp.feeds is not None
    inputs = comp.feeds.data
    sim = simulate(scheduled, target, ir_inputs(comp.graph, inputs))
    timed = [s for s in sim.trace.spans if s[4] in (BUSY, MEMORY)]
    assert len(timed) == len(labels[0])
    for (_, _, _, _, cat, _), lab in zip(timed, labels[0], strict=True):
        assert (cat == MEMORY) == lab.name.startswith("pim.")
