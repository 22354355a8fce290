"""Schedule evaluation, lower bounds and an independent validator.

The validator deliberately re-derives everything from the graph and target (nothing from the
scheduler's bookkeeping), so that PEFT, CP-SAT and any hand-written schedule are checked by
the same rules: placement, precedence with transfer delay, no overlap, crossbar capacity.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from raptor.jit import kernel
from raptor.noc import hold_cycles, message_cycles, shared_network
from raptor.solver.blocking import pimsim_shared_ns
from raptor.solver.graph import ComputeGraph
from raptor.solver.mesh import IntArray, transfer_ns
from raptor.target import Target


class Placement(Protocol):
    """What evaluation needs from a schedule (MergeScheduleResult satisfies it)."""

    core_of: list[int]
    core_tasks: list[list[int]]
    start_ns: list[int]


@dataclass(frozen=True)
class ScheduleEvaluation:
    """Figures of one schedule. ``critical_path_ns`` excludes transfers and core order;
    ``completion_ns`` includes both (ASAP retiming of the given per-core order)."""

    serial_work_ns: int
    per_core_work_ns: list[int]
    critical_path_ns: int
    transfer_work_ns: int
    completion_ns: int
    cores_used: int
    crossbars_used: int

    @property
    def max_core_work_ns(self) -> int:
        return max(self.per_core_work_ns, default=0)


@dataclass(frozen=True)
class LowerBounds:
    """Bounds on the single-inference latency of any schedule (a schedule's contention-free
    estimate included, so also its communication-aware estimate)."""

    critical_path_ns: int
    """Longest path of pure work."""
    work_per_core_ns: int
    """ceil(total work / cores)."""
    min_cores: int
    """Cores the distinct weight tiles need."""
    fan_in_ns: int = 0
    """Critical path where each task waits for its predecessors: those on its own core run
    one after another, the others' data arrives at least one hop after they end."""
    shared_memory_ns: int = 0
    """The graph outputs' shared-memory stores, served one at a time, each no earlier than
    its task's compute can end; priced as the target's protocol serves them (pimsim-nn's
    at its activation precision, `raptor.solver.blocking.pimsim_shared_ns`)."""
    layer_load_ns: int = 0
    """Per graph batch (a layer's lanes): the earliest any lane can start, plus the lanes'
    work spread over the cores that can run them, plus the shortest work that must follow
    one of them (see :func:`layer_load`)."""

    @property
    def makespan_ns(self) -> int:
        return max(self.critical_path_ns, self.work_per_core_ns, self.fan_in_ns,
                   self.shared_memory_ns, self.layer_load_ns)


def lower_bounds(graph: ComputeGraph, target: Target, link_cut: bool = True) -> LowerBounds:
    """Every bound of :class:`LowerBounds`. ``link_cut=False`` leaves out the links' capacity
    (see :func:`fan_in_heads`): then they also bound CP-SAT's free-link model."""
    graph.freeze()
    costs = graph.costs()
    tail = graph.bottom_levels()
    head = fan_in_heads(graph, target, link_cut)
    pimsim = target.protocol == "pimsim-nn"
    stores = sorted((head[t] + costs[t] - task.shared_ns,
                     pimsim_shared_ns(target, task)[1] if pimsim else task.shared_ns)
                    for t, task in enumerate(graph.tasks) if task.shared_ns)
    memory, after = 0, 0
    for release, service in reversed(stores):  # latest release first: suffix sums
        after += service
        memory = max(memory, release + after)
    n_w = len(graph.distinct_weights())
    return LowerBounds(
        critical_path_ns=max(tail, default=0), work_per_core_ns=-(-sum(costs) // target.num_cores),
        min_cores=-(-n_w // target.crossbars_per_core),
        fan_in_ns=max((h + t for h, t in zip(head, tail, strict=True)), default=0),
        shared_memory_ns=memory, layer_load_ns=layer_load(graph, target, head, tail))


def layer_load(graph: ComputeGraph, target: Target, head: Sequence[int],
               tail: Sequence[int]) -> int:
    """Largest over graph batches S of min head + ⌈work(S) / k⌉ + min (tail − cost): the
    lanes run on at most k cores, none starts before the earliest head, and after the last
    one ends its own successors' work remains. k ≤ the cores and the lanes; when every lane
    multiplies on crossbars, also ≤ the copies its tiles can have: a core runs one of them
    only if it holds one of their tiles, and beyond one copy of each distinct tile only the
    chip's spare crossbars hold more (resident weights pin the MVMs)."""
    costs = np.array(graph.costs(), dtype=np.int64)
    spare = target.crossbar_capacity - len(graph.distinct_weights())
    batch = np.array([task.batch for task in graph.tasks], dtype=np.int64)
    # the tasks of each batch side by side (by batch, then id), and where each batch begins
    lanes = np.nonzero(batch >= 0)[0]
    if not len(lanes):
        return 0
    lanes = lanes[np.argsort(batch[lanes], kind="stable")]
    begin = np.flatnonzero(np.diff(batch[lanes], prepend=-1))
    count = np.diff(np.append(begin, len(lanes)))
    k = np.minimum(target.num_cores, count)
    weighted = np.array([bool(task.weights) for task in graph.tasks])[lanes]
    for i in np.flatnonzero(np.logical_and.reduceat(weighted, begin)).tolist():
        ts = lanes[begin[i]:begin[i] + count[i]].tolist()
        tiles = frozenset[int]().union(*(graph.tasks[t].weights for t in ts))
        k[i] = min(int(k[i]), len(tiles) + spare)
    load = (np.minimum.reduceat(np.array(head, dtype=np.int64)[lanes], begin)
            - (-np.add.reduceat(costs[lanes], begin) // np.maximum(k, 1))
            + np.minimum.reduceat((np.array(tail, dtype=np.int64) - costs)[lanes], begin))
    return max(0, int(load.max()))


def fan_in_heads(graph: ComputeGraph, target: Target, link_cut: bool = True) -> list[int]:
    """Earliest start of each task under the fan-in argument (NOTES, CP-SAT): whichever
    predecessors share the task's core run one after another before it; the others' data
    arrives a one-hop message's latency after they end at the earliest (under the target's
    protocol, :func:`raptor.noc.message_cycles`), and all of it enters the
    task's core through its at most four incoming mesh links, each carrying one
    message at a time (a link cut): the last arrives no earlier than the earliest of them
    ends, plus their serialisation times shared over those links, plus a hop. For a given
    set of remote predecessors the latest arrival counts, so the best split keeps a prefix
    of the predecessors sorted by arrival (latest first) local: O(k²) per task.
    ``link_cut=False``: without the link cut (a bound of the free-link model too); pimsim-nn's
    protocol has no link cut either (its messages hold the sender's switch)."""
    graph.freeze()
    costs = graph.costs()
    protocol = target.protocol
    n = graph.num_tasks
    # per edge (`edges` order: by producer, then reader), its largest message over one hop
    # in ns and its fragments' holds over one hop summed; then in the order of `preds`
    # (by reader, then producer), as flat lists beside the predecessors
    src, dst, _, sizes = graph.edge_arrays()
    hop = target.ns(message_cycles(target, np.ones_like(sizes), sizes, protocol))
    reader, read, frag_producer, frag_bytes = graph.read_arrays()
    cycles = np.zeros(len(src), dtype=np.int64)
    if len(read):
        edge = np.searchsorted(src * n + dst, frag_producer[read] * n + reader)
        np.add.at(cycles, edge, hold_cycles(target, np.ones_like(read), frag_bytes[read],
                                            protocol))
    by_reader = np.argsort(dst, kind="stable")
    bounds = np.searchsorted(dst, np.arange(n + 1), sorter=by_reader)  # each task's preds
    rows, cols = target.mesh_rows, target.mesh_cols
    # the most links into one core; without the cut (or under pimsim-nn's protocol, whose
    # messages hold their sender's switch, not the reader's links), as many as messages
    cut = link_cut and not shared_network(target).switched
    links = max(1, min(rows - 1, 2) + min(cols - 1, 2)) if cut else 1 << 62
    # a hop plus so many serialisation cycles shared over the links, for every sum of a
    # task's holds
    summed = np.concatenate(([0], np.cumsum(cycles[by_reader])))
    most = int((summed[bounds[1:]] - summed[bounds[:-1]]).max(initial=0))
    cut_ns = target.ns(target.hop_cycles + -(-np.arange(most + 1, dtype=np.int64) // links))
    head = np.zeros(n, dtype=np.int64)
    _fan_in(np.array(graph.topo_order, dtype=np.int64), np.array(costs, dtype=np.int64),
            bounds, src[by_reader], hop[by_reader], cycles[by_reader], target.num_cores > 1,
            cut_ns, head)
    out: list[int] = head.tolist()
    return out


@kernel
def _fan_in(topo: IntArray, costs: IntArray, bounds: IntArray, pred_of: IntArray,
            hop_of: IntArray, cyc_of: IntArray, one_hop: bool, cut_ns: IntArray,
            head: IntArray) -> None:
    """`fan_in_heads` into ``head``, given per task (``bounds``) its predecessors, each
    edge's one-hop latency and holds, and ``cut_ns`` by the sum of holds. A kernel: in
    Python, 0.45 s of PEFT's 10 s at 100,000 tasks on 16x16."""
    never = 1 << 62
    for v in topo:
        a, b = bounds[v], bounds[v + 1]
        if b - a == 1:  # its one predecessor local is never later than its data remote
            u = pred_of[a]
            head[v] = head[u] + costs[u]
            continue
        k_all = b - a
        if not k_all:
            continue
        preds = np.empty((k_all, 4), dtype=np.int64)  # arrival, release, cost, holds
        for i in range(k_all):
            u = pred_of[a + i]
            preds[i, 0] = head[u] + costs[u] + hop_of[a + i] if one_hop else never
            preds[i, 1], preds[i, 2], preds[i, 3] = head[u], costs[u], cyc_of[a + i]
        for i in range(1, k_all):  # latest arrival first (then release, cost, holds)
            j = i
            while j and _before(preds[j], preds[j - 1]):
                for c in range(4):
                    preds[j, c], preds[j - 1, c] = preds[j - 1, c], preds[j, c]
                j -= 1
        # when the data of preds[k:] has arrived at the earliest: after the latest of them,
        # and after the earliest end among them plus their serialisation over the links
        remote = np.zeros(k_all + 1, dtype=np.int64)
        first, ser = never, 0
        for k in range(k_all - 1, -1, -1):
            first = min(first, preds[k, 1] + preds[k, 2])
            ser += preds[k, 3]
            remote[k] = max(preds[k, 0], cut_ns[ser] + first) if one_hop else never
        best = remote[0]  # everything remote
        # preds[:k] local, run one after another by release (then cost)
        local = np.empty((k_all, 2), dtype=np.int64)
        for k in range(1, k_all + 1):
            j = k - 1
            local[j, 0], local[j, 1] = preds[k - 1, 1], preds[k - 1, 2]
            while j and (local[j, 0] < local[j - 1, 0] or (
                    local[j, 0] == local[j - 1, 0] and local[j, 1] < local[j - 1, 1])):
                for c in range(2):
                    local[j, c], local[j - 1, c] = local[j - 1, c], local[j, c]
                j -= 1
            done = 0
            for i in range(k):
                done = max(done, local[i, 0]) + local[i, 1]
            best = min(best, max(done, remote[k]))
        head[v] = best


@kernel
def _before(x: IntArray, y: IntArray) -> bool:
    """Whether row ``x`` sorts before row ``y`` in descending lexicographic order."""
    for c in range(len(x)):
        if x[c] != y[c]:
            return bool(x[c] > y[c])
    return False


def retime(graph: ComputeGraph, target: Target, core_of: Sequence[int],
           core_tasks: Sequence[Sequence[int]], earliest: Sequence[int] | None = None
           ) -> list[int]:
    """Earliest starts that respect dependencies, transfer delays and the per-core order,
    without contention: every fragment a task reads from another core arrives
    ``Target.transfer_ns`` after its producer ends (the simulator's ideal run); no task
    before its ``earliest`` (a plan made under other prices) when given."""
    graph.freeze()
    n = graph.num_tasks
    dur = graph.durations(core_of)
    # Core order plus dependencies form a DAG for any valid schedule; a cycle means the
    # order contradicts the dependencies.
    indeg = list(map(len, graph.preds))
    nxt = [-1] * n
    for tasks in core_tasks:
        for a, b in itertools.pairwise(tasks):
            nxt[a] = b
            indeg[b] += 1
    # per edge, in edges order (the succs lists end to end): its reader and delay
    reader = graph.edge_arrays()[1].tolist()
    delay = _delays(graph, target, core_of)
    first = np.cumsum([0, *map(len, graph.succs)]).tolist()
    start = [0] * n if earliest is None else list(earliest)
    stack = [t for t in range(n) if indeg[t] == 0]
    done = 0
    while stack:  # the order of the pops does not matter: each start is a maximum
        t = stack.pop()
        done += 1
        end = start[t] + dur[t]
        for i in range(first[t], first[t + 1]):
            s = reader[i]
            ready = end + delay[i]
            if ready > start[s]:
                start[s] = ready
            indeg[s] -= 1
            if not indeg[s]:
                stack.append(s)
        s = nxt[t]
        if s >= 0:
            if end > start[s]:
                start[s] = end
            indeg[s] -= 1
            if not indeg[s]:
                stack.append(s)
    if done != n:
        raise ValueError("per-core order contradicts the dependencies (cycle)")
    return start


def _delays(graph: ComputeGraph, target: Target, core_of: Sequence[int]) -> list[int]:
    """Per edge (`ComputeGraph.edges` order), the contention-free delay from the producer's
    end to the consumer's start (under the target's protocol, `raptor.noc`)."""
    src, dst, _, largest = graph.edge_arrays()
    core = np.asarray(core_of, dtype=np.int64)
    delays: list[int] = transfer_ns(target, core[src], core[dst], largest).tolist()
    return delays


def evaluate_schedule(graph: ComputeGraph, target: Target, schedule: Placement
                      ) -> ScheduleEvaluation:
    graph.freeze()
    costs = graph.costs()
    per_core = [sum(map(costs.__getitem__, tasks)) for tasks in schedule.core_tasks]
    # `Target.transfer_ns` of each edge under Raptor's protocol: its free-link latency
    src, dst, nbytes, _ = graph.edge_arrays()
    core = np.asarray(schedule.core_of, dtype=np.int64)
    raptor = target if target.protocol == "raptor" else replace(target, protocol="raptor")
    transfer = int(transfer_ns(raptor, core[src], core[dst], nbytes).sum())
    start = retime(graph, target, schedule.core_of, schedule.core_tasks)
    dur = graph.durations(schedule.core_of)
    completion = max(map(operator.add, start, dur), default=0)
    # each core's distinct tiles: the distinct (core, tile) pairs
    xbars = 0
    if graph.distinct_weights():
        weights = [task.weights for task in graph.tasks]
        xbars = len({(core, w) for core, tasks in enumerate(schedule.core_tasks)
                     for t in filter(weights.__getitem__, tasks) for w in weights[t]})
    return ScheduleEvaluation(
        serial_work_ns=sum(costs), per_core_work_ns=per_core,
        critical_path_ns=max(graph.bottom_levels(), default=0), transfer_work_ns=transfer,
        completion_ns=completion, cores_used=sum(1 for tasks in schedule.core_tasks if tasks),
        crossbars_used=xbars)


def validate_schedule(graph: ComputeGraph, target: Target, schedule: Placement) -> list[str]:
    """All violations found (empty list: valid)."""
    graph.freeze()
    n = graph.num_tasks
    errors: list[str] = []
    if len(schedule.core_of) != n or len(schedule.start_ns) != n:
        return [f"schedule covers {len(schedule.core_of)} tasks, graph has {n}"]
    if len(schedule.core_tasks) > target.num_cores:
        errors.append(f"{len(schedule.core_tasks)} core lists but target has {target.num_cores}")
    seen = [0] * n
    for core, tasks in enumerate(schedule.core_tasks):
        for t in tasks:
            if not 0 <= t < n:
                errors.append(f"core {core} lists unknown task {t}")
                continue
            seen[t] += 1
            if schedule.core_of[t] != core:
                errors.append(f"task {t} listed on core {core} but assigned core "
                              f"{schedule.core_of[t]}")
    for t in range(n):
        c = schedule.core_of[t]
        if not 0 <= c < target.num_cores:
            errors.append(f"task {t} on core {c} outside 0..{target.num_cores - 1}")
        if seen[t] != 1:
            errors.append(f"task {t} placed {seen[t]} times")
        if schedule.start_ns[t] < 0:
            errors.append(f"task {t} starts at {schedule.start_ns[t]} < 0")
    if errors:
        return errors
    start = schedule.start_ns
    dur = graph.durations(schedule.core_of)
    end = [start[t] + dur[t] for t in range(n)]
    for e, delay in zip(graph.edges, _delays(graph, target, schedule.core_of), strict=True):
        if start[e.dst] < end[e.src] + delay:
            errors.append(f"edge {e.src} -> {e.dst}: start {start[e.dst]} < end {end[e.src]} + "
                          f"transfer {delay}")
    for core, tasks in enumerate(schedule.core_tasks):
        for a, b in itertools.pairwise(tasks):
            if start[b] < end[a]:
                errors.append(f"core {core}: task {b} starts at {start[b]} before task {a} "
                              f"ends at {end[a]}")
        tiles = frozenset().union(*(graph.tasks[t].weights for t in tasks)) if tasks else ()
        if len(tiles) > target.crossbars_per_core:
            errors.append(f"core {core}: {len(tiles)} distinct crossbar tiles > capacity "
                          f"{target.crossbars_per_core}")
    return errors
