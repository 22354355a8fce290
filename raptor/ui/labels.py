"""Model names for what the schedulers and the simulator place: the ONNX layer (the plan a
graph instance was lowered from) and op of every task, and per core one label per compute
and memory span of a scheduled program, for the charts and the trace.

A scheduled compute names the instance it runs by its result (`%t<task>`, or `%b<first
task>` for a batch of consecutive lanes); that, not the op's position, ties it to a task, so
the labels follow any order materialization chooses. Anything that does not resolve is
labelled by its op alone."""

from __future__ import annotations

import re
from dataclasses import dataclass

from raptor.ir.core import Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    CoreOp,
    LoadOp,
    MvmOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    StreamOp,
    WeightOp,
)
from raptor.ir.types import TensorType
from raptor.passes.lower import Lowered, PlanStats
from raptor.sim.program import op_name
from raptor.sim.report import SpanLabel
from raptor.solver.from_ir import GraphBuild

MEMORY_KEY = "shared memory"
"""The colour key of loads and stores at core level."""


@dataclass(frozen=True)
class Layer:
    """`name`: the ONNX node a plan starts at ("conv2"); `op`: its kind with a fused
    activation ("conv+relu")."""

    name: str
    op: str

    @property
    def title(self) -> str:
        return f"{self.name} ({self.op})"


UNKNOWN = Layer("?", "?")


def _layer(plan: PlanStats) -> Layer:
    return Layer(plan.name, plan.kind + (f"+{plan.fused}" if plan.fused else ""))


def legend(lowered: Lowered) -> dict[str, str]:
    """Layer name → its legend label, in lowering (topological) order."""
    return {s.name: _layer(s).title for s in lowered.stats}


def task_layers(lowered: Lowered, build: GraphBuild) -> list[Layer]:
    """The layer of every task of `build.graph` (tasks are the projection's instances)."""
    return [UNKNOWN if (plan := lowered.layer_of.get(inst.op)) is None else _layer(plan)
            for inst in build.projection.instances]


_TASK = re.compile(r"[tb](\d+)$")


def _tasks_of(op: ComputeOp, ntasks: int) -> list[int]:
    """The tasks a scheduled compute runs, from its result name; [] when it does not say."""
    m = _TASK.match(op.outs[0].name or "") if op.outs else None
    if m is None:
        return []
    first = int(m.group(1))
    lanes = op.lanes if isinstance(op, ScheduledComputeBatchOp) else 1
    ids = list(range(first, first + lanes))
    return ids if ids[-1] < ntasks else []


def _bytes(values: list[Value]) -> int:
    return sum(v.type.nbytes for v in values if isinstance(v.type, TensorType) and v.type.is_static)


def _compute_label(op: ComputeOp, tasks: list[int], layers: list[Layer],
                   lanes: list[int]) -> SpanLabel:
    """Layer, op, tasks and lanes, crossbar tiles (distinct MVM weights) and the bytes it
    produces. Runs once per compute of a large model: kept lean."""
    layer = layers[tasks[0]] if tasks else UNKNOWN
    return SpanLabel(layer.title, layer.name, {
        "layer": layer.name, "op": layer.op, "tasks": tasks,
        "lanes": [lanes[t] for t in tasks],
        "tiles": len({o.weight for o in op.body.ops if type(o) is MvmOp}),
        "bytes": _bytes(op.outs)})


def span_labels(scheduled: Module, layers: list[Layer], lanes: list[int]
                ) -> dict[int, list[SpanLabel]]:
    """Per core, the label of each op that the simulator times as a compute or memory span
    (everything at core level but weights, sends and receives), in program order.

    `layers[t]` and `lanes[t]` describe task t. Gathers, views and copies at core level are
    named by their op and coloured as the compute they serve (the next one, else the last);
    loads and stores name the layer whose value they move.

    A stream program (`pim.stream`, pipeline mode) runs its body once per inference: its
    labels repeat per inference, named `... #n` with the inference in their args, so the
    trace tells inferences apart."""
    out: dict[int, list[SpanLabel]] = {}
    for core_op in scheduled.main().body.ops:
        if not isinstance(core_op, CoreOp):
            continue
        body = core_op.body.ops
        loop = body[0] if len(body) == 1 and isinstance(body[0], StreamOp) else None
        if loop is not None:  # iteration k runs each op on inference k - its lag
            staged = list(loop.staged())
            once = _core_labels([op for _, op in staged], layers, lanes)
            lags = [lag for lag, op in staged if not _untimed(op)]
            out[core_op.core] = [
                SpanLabel(f"{lb.name} #{k - lag}", lb.key, {**lb.args, "inference": k - lag})
                for k in range(loop.count + loop.lags)
                for lb, lag in zip(once, lags, strict=True) if 0 <= k - lag < loop.count]
        else:
            out[core_op.core] = _core_labels(body, layers, lanes)
    return out


def _untimed(op: Operation) -> bool:
    """Ops without a span (and so without a label)."""
    return isinstance(op, WeightOp | ChannelReceiveOp | ChannelSendOp)


def _core_labels(body: list[Operation], layers: list[Layer], lanes: list[int]) -> list[SpanLabel]:
    """The labels of one core's ops (see `span_labels`)."""
    labels: list[SpanLabel] = []
    waiting: list[tuple[int, Operation]] = []  # bare ops since the last compute
    task_of: dict[Value, int] = {}
    last = UNKNOWN
    for op in body:
        if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
            tasks = _tasks_of(op, len(layers))
            layer = layers[tasks[0]] if tasks else UNKNOWN
            if tasks:
                task_of.update(dict.fromkeys(op.outs, tasks[0]))
            if layer is not UNKNOWN:  # a bare op serves the next compute (a gather)...
                for i, bare in waiting:
                    labels[i] = _bare_label(bare, layer)
            waiting = []
            labels.append(_compute_label(op, tasks, layers, lanes))
            last = layer
        elif isinstance(op, LoadOp | StoreOp):
            labels.append(_memory_label(op, task_of, layers))
        elif not _untimed(op):
            waiting.append((len(labels), op))  # ... or else follows the last (a lane view)
            labels.append(_bare_label(op, last))
    return labels


def _bare_label(op: Operation, owner: Layer) -> SpanLabel:
    return SpanLabel(f"{op_name(op)} ({owner.name})", owner.name,
                     {"layer": owner.name, "op": op_name(op), "bytes": _bytes(op.results())})


def _memory_label(op: LoadOp | StoreOp, task_of: dict[Value, int],
                  layers: list[Layer]) -> SpanLabel:
    moved = op.value if isinstance(op, StoreOp) else op.result
    origin = op.value.owner if isinstance(op, StoreOp) else None
    task = task_of.get(op.value) if isinstance(op, StoreOp) else None
    if task is None and isinstance(origin, Operation):
        task = next((task_of[v] for v in origin.operands() if v in task_of), None)
    layer = layers[task] if task is not None else None
    what = op_name(op) + (f" {layer.name}" if layer is not None else "")
    args: dict[str, object] = {"op": op_name(op), "bytes": _bytes([moved])}
    if layer is not None:
        args["layer"] = layer.name
    return SpanLabel(what, MEMORY_KEY, args)
