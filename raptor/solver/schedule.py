"""MergeScheduleResult: the one schedule format every scheduler returns and materialization reads.

Per-core task lists are the execution order (contiguous slots 0..k-1). Equivalence classes
are the maximal runs of consecutive tasks on one core that belong to the same graph batch;
materialization merges each run into one ``spat.scheduled_compute_batch``. Lane identity in a
batch implies neither core identity nor order, so runs are computed from the schedule only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from raptor.solver.comm import Replay, replay
from raptor.solver.evaluate import evaluate_schedule
from raptor.solver.flowplan import split
from raptor.solver.graph import ComputeGraph, IntArray
from raptor.target import Target


def core_order(graph: ComputeGraph, target: Target, core_of: Sequence[int],
               start_ns: Sequence[int]) -> list[list[int]]:
    """Per-core execution order of a placement with start times. Ties (zero-cost tasks) are
    broken by topological position to keep the order legal."""
    order, counts = _in_core_order(graph, target, core_of, start_ns)
    return split(order.tolist(), counts)


def _in_core_order(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                   start_ns: Sequence[int]) -> tuple[IntArray, IntArray]:
    """The tasks of :func:`core_order`, core after core, and how many each core runs."""
    graph.freeze()
    n = graph.num_tasks
    topo_pos = np.empty(n, dtype=np.int64)
    topo_pos[graph.topo_order] = np.arange(n)
    start = np.asarray(start_ns, dtype=np.int64)
    order = np.lexsort((topo_pos, start + np.asarray(graph.costs(), dtype=np.int64), start))
    core = np.asarray(core_of, dtype=np.int64)[order]
    by_core = np.argsort(core, kind="stable")
    return order[by_core], np.bincount(core, minlength=target.num_cores)


@dataclass(frozen=True)
class EquivalenceClass:
    """A run of consecutive slots on ``core`` whose tasks share graph batch ``batch``."""

    core: int
    batch: int
    tasks: list[int]


@dataclass
class MergeScheduleResult:
    solver: str
    status: str
    core_of: list[int]
    start_ns: list[int]
    end_ns: list[int]
    core_tasks: list[list[int]]
    makespan_ns: int
    last_task: list[int]
    equivalence_classes: list[EquivalenceClass]
    summary: dict[str, int]
    bound_ns: int | None = None
    objective_ns: int | None = None
    solve_seconds: float = 0.0
    model: str = ""
    notes: list[str] = field(default_factory=list)
    stage_of_core: list[int] | None = None
    """Pipeline results only: the stage each core runs (-1: unused); None in latency mode."""
    estimate_ns: int = 0
    """Single-inference latency of the materialized program under the communication model
    (:func:`raptor.solver.comm.replay`: link contention, rendezvous, shared-memory queue):
    the figure the simulator's default run should show. ``makespan_ns`` is the plan's own
    (the scheduler's times, exact without contention)."""
    comm: Replay | None = field(default=None, repr=False, compare=False)
    """The communication model's run that gave ``estimate_ns`` (not serialized):
    materializing the schedule starts from it (`raptor.solve._fit_memory`), where it would
    replay the same (under pimsim-nn's protocol its blocking runs are most of a replay)."""

    @classmethod
    def build(cls, graph: ComputeGraph, target: Target, core_of: Sequence[int],
              start_ns: Sequence[int], *, solver: str, status: str, bound_ns: int | None = None,
              objective_ns: int | None = None, solve_seconds: float = 0.0, model: str = "",
              notes: Sequence[str] = (), communication: bool = True) -> MergeScheduleResult:
        """Derive order, markers, classes and costs from a placement and start times.
        ``communication=False`` skips the communication model (``estimate_ns`` is then the
        plan's makespan and the summary has no message figures): pipeline results, whose
        stream program is estimated by its own model and replayed once when materialized."""
        graph.freeze()
        n = graph.num_tasks
        order, counts = _in_core_order(graph, target, core_of, start_ns)
        flat = order.tolist()
        core_tasks = split(flat, counts)
        last = [tasks[-1] if tasks else -1 for tasks in core_tasks]
        # the runs: a run shares one batch and one core; a task without a batch (-1) is a
        # run of its own (key ~t)
        batch = np.fromiter((task.batch for task in graph.tasks), np.int64, n)
        key = np.where(batch >= 0, batch, ~np.arange(n))[order]
        core = np.repeat(np.arange(len(counts)), counts)
        bounds = np.flatnonzero((key[1:] != key[:-1]) | (core[1:] != core[:-1])) + 1
        begin = [0, *bounds.tolist()]
        classes = [EquivalenceClass(c, b, flat[i:j]) for c, b, i, j in zip(
            core[begin].tolist(), batch[order[begin]].tolist(), begin, [*begin[1:], n],
            strict=True)] if n else []
        dur = graph.durations(core_of)
        end = [start_ns[t] + dur[t] for t in range(n)]
        result = cls(solver=solver, status=status, core_of=list(core_of),
                     start_ns=list(start_ns), end_ns=end, core_tasks=core_tasks,
                     makespan_ns=max(end, default=0), last_task=last,
                     equivalence_classes=classes, summary={}, bound_ns=bound_ns,
                     objective_ns=objective_ns, solve_seconds=solve_seconds, model=model,
                     notes=list(notes))
        ev = evaluate_schedule(graph, target, result)
        summary: dict[str, int] = {"makespan_ns": result.makespan_ns}
        result.estimate_ns = result.makespan_ns
        if communication:
            comm = replay(graph, target, result.core_of, result.core_tasks, result.start_ns)
            result.estimate_ns, result.comm = comm.makespan_ns, comm
            util_max, util_mean = comm.link_utilization()
            summary.update(estimate_ns=comm.makespan_ns, bytes_moved=comm.bytes_moved,
                           messages=comm.messages,
                           link_busy_max_ns=max(comm.link_busy_ns, default=0),
                           link_util_max_permille=round(1000 * util_max),
                           link_util_mean_permille=round(1000 * util_mean))
        summary.update({k: getattr(ev, k) for k in (
            "completion_ns", "serial_work_ns", "max_core_work_ns", "critical_path_ns",
            "transfer_work_ns", "cores_used", "crossbars_used")})
        result.summary = summary
        return result

    def to_json(self) -> str:
        data = asdict(dataclasses.replace(self, comm=None))
        del data["comm"]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MergeScheduleResult:
        data: dict[str, Any] = json.loads(text)
        data["equivalence_classes"] = [EquivalenceClass(**c) for c in data["equivalence_classes"]]
        return cls(**data)
