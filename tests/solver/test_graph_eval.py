"""ComputeGraph construction, evaluation, bounds, the validator, result JSON and Gantt SVG."""

from __future__ import annotations

import numpy as np
import pytest

from raptor.solver import (
    ComputeGraph,
    GraphError,
    MergeScheduleResult,
    evaluate_schedule,
    gantt_svg,
    lower_bounds,
    validate_schedule,
)
from raptor.solver.mesh import INF, Mesh
from raptor.target import Target

LINE = Target(mesh_rows=1, mesh_cols=3, crossbars_per_core=2)


def diamond() -> ComputeGraph:
    g = ComputeGraph()
    a = g.add_task("a", 10, {1})
    b = g.add_task("b", 20, {2}, batch=0, lane=0)
    c = g.add_task("c", 20, {2}, batch=0, lane=1)
    d = g.add_task("d", 5)
    g.add_edge(a, b, 8)
    g.add_edge(a, c, 8)
    g.add_edge(b, d, 16)
    g.add_edge(c, d, 16)
    return g.freeze()


def test_cycle_is_reported_with_names() -> None:
    g = ComputeGraph()
    for name in "xyz":
        g.add_task(name, 1)
    g.add_edge(0, 1)
    g.add_edge(1, 2)
    g.add_edge(2, 1)
    cycle = r"dependency cycle: (1:y -> 2:z -> 1:y|2:z -> 1:y -> 2:z)"
    with pytest.raises(GraphError, match=cycle):
        g.freeze()


def test_bad_edges_and_merging() -> None:
    g = ComputeGraph()
    g.add_task("a", 1)
    g.add_task("b", 1)
    with pytest.raises(GraphError, match="self loop"):
        g.add_edge(0, 0)
    with pytest.raises(GraphError, match="outside"):
        g.add_edge(0, 5)
    g.add_edge(0, 1, 3)
    g.add_edge(0, 1, 4)
    g.freeze()
    assert [(e.src, e.dst, e.bytes) for e in g.edges] == [(0, 1, 7)]
    assert g.topo_order == [0, 1]


def test_evaluation_and_bounds() -> None:
    g = diamond()
    lb = lower_bounds(g, LINE)
    assert (lb.critical_path_ns, lb.work_per_core_ns, lb.min_cores) == (35, 19, 1)
    r = MergeScheduleResult.build(g, LINE, [0, 0, 1, 0], [0, 10, 14, 40], solver="hand",
                                  status="HEURISTIC")
    assert validate_schedule(g, LINE, r) == []
    ev = evaluate_schedule(g, LINE, r)
    # a -> c crosses one hop (2 + 2 ns), c -> d crosses back with 2 flits (2 + 4 ns).
    assert ev.transfer_work_ns == 4 + 6
    assert ev.completion_ns == 45 and r.makespan_ns == 45
    assert ev.per_core_work_ns[:2] == [35, 20] and ev.crossbars_used == 3
    assert r.core_tasks[0] == [0, 1, 3] and r.last_task[:3] == [3, 2, -1]
    assert [c.tasks for c in r.equivalence_classes] == [[0], [1], [3], [2]]


def test_validator_finds_each_violation() -> None:
    g = diamond()
    bad_transfer = MergeScheduleResult.build(g, LINE, [0, 0, 1, 0], [0, 10, 10, 36],
                                             solver="hand", status="x")
    assert any("edge 0 -> 2" in e for e in validate_schedule(g, LINE, bad_transfer))
    overlap = MergeScheduleResult.build(g, LINE, [0, 0, 0, 0], [0, 10, 20, 40], solver="hand",
                                        status="x")
    assert any("before task" in e for e in validate_schedule(g, LINE, overlap))
    tight = Target(mesh_rows=1, mesh_cols=3, crossbars_per_core=1)
    r = MergeScheduleResult.build(g, tight, [0, 0, 0, 0], [0, 10, 30, 50], solver="hand",
                                  status="x")
    assert any("capacity 1" in e for e in validate_schedule(g, tight, r))
    r.core_tasks[1].append(1)
    assert any("placed 2 times" in e for e in validate_schedule(g, tight, r))


def test_json_round_trip_and_batch_runs() -> None:
    g = diamond()
    r = MergeScheduleResult.build(g, LINE, [0, 0, 0, 0], [0, 10, 30, 50], solver="hand",
                                  status="HEURISTIC", bound_ns=35)
    assert [c.tasks for c in r.equivalence_classes] == [[0], [1, 2], [3]]
    back = MergeScheduleResult.from_json(r.to_json())
    assert back == r


def test_gantt_is_standalone_svg() -> None:
    g = diamond()
    r = MergeScheduleResult.build(g, LINE, [0, 0, 1, 0], [0, 10, 14, 40], solver="hand",
                                  status="HEURISTIC")
    svg = gantt_svg(g, r, transfers=True)
    assert svg.startswith("<svg")
    assert svg.count("</title></rect>") == 4 and svg.count("</title></line>") == 2


def test_mesh_distance_transform_matches_dense_minimum() -> None:
    rng = np.random.default_rng(0)
    for rows, cols in ((2, 3), (8, 8), (4, 16)):
        m = Mesh(Target(mesh_rows=rows, mesh_cols=cols, hop_cycles=3))
        f = rng.integers(0, 1000, size=(3, m.P))
        f[0] = INF  # no core at all: INF everywhere, never beyond it
        f[1, ::2] = INF
        dense = (f[:, None, :] + m.hops * m.hop_ns).min(axis=-1)
        got = m.distance_transform(f)
        assert (got == dense).all() and (got[0] == INF).all() and got.max() == INF


def test_mesh_one_row_transform_over_few_cores_matches_dense_minimum() -> None:
    """One row on a mid-sized mesh, where few cores can lower another (an arrival row) or
    few can be lowered (a flat row with a few high cores), or neither (random)."""
    rng = np.random.default_rng(2)
    for rows, cols, hop in ((16, 16, 2), (12, 11, 3), (16, 8, 1)):
        m = Mesh(Target(mesh_rows=rows, mesh_cols=cols, hop_cycles=hop))
        for i in range(60):
            src = int(rng.integers(m.P))
            f = [m.arrival_row(src, int(rng.integers(1, 200)), int(rng.integers(10**6))),
                 np.full(m.P, 500, dtype=np.int64), rng.integers(0, 1000, size=m.P)][i % 3]
            if i % 3 == 1:
                f[rng.integers(0, m.P, size=int(rng.integers(1, 40)))] = rng.integers(0, 5000)
            if i % 4 == 0:
                f[rng.integers(0, m.P, size=3)] = INF
            dense = (f[None, :] + m.hops * m.hop_ns).min(axis=-1)
            assert (m.distance_transform(f) == dense).all()


def test_mesh_hop_ns_rows_are_rows_of_the_hop_matrix() -> None:
    """From the dense matrix up to 256 cores, computed beyond (400 here)."""
    for rows, cols in ((4, 4), (20, 20)):
        m = Mesh(Target(mesh_rows=rows, mesh_cols=cols, hop_cycles=3))
        dense = m.hops * m.hop_ns
        cores = np.array([0, 7, m.P - 1])
        assert (m.hop_ns_rows(5) == dense[5]).all()
        assert (m.hop_ns_rows(cores) == dense[cores]).all()


@pytest.mark.parametrize("target", [
    Target(mesh_rows=4, mesh_cols=4, hop_cycles=3), Target(mesh_rows=16, mesh_cols=16),
    Target(mesh_rows=3, mesh_cols=5, clock_ghz=0.7), Target(mesh_rows=17, mesh_cols=16),
    Target(mesh_rows=2, mesh_cols=3, protocol="pimsim-nn")])
def test_mesh_arrival_row_is_comm_row_plus_send_time(target: Target) -> None:
    """The one-call arrival row (1 GHz Raptor meshes) and the cached general one agree with
    `comm_rows` on every source, message size and send time."""
    m = Mesh(target)
    rng = np.random.default_rng(1)
    for _ in range(40):
        src, nbytes = int(rng.integers(m.P)), int(rng.integers(1, 5000))
        at = int(rng.integers(10**6))
        fl = m.flit_cycles(nbytes)
        want = m.comm_rows(src, np.array([fl], dtype=np.int64))[0] + at
        got = m.arrival_row(src, fl, at)
        assert (got == want).all() and got[src] == at
        got[:] = -1  # a new array each time: the caller may write into it
        assert (m.arrival_row(src, fl, at) == want).all()


def test_edge_arrays_follow_edges_and_succs() -> None:
    g = ComputeGraph()
    for name in "abc":
        g.add_task(name, 1)
    g.add_edge(0, 2, 4)
    g.add_edge(0, 1, 8)
    g.add_edge(0, 2, 4)  # merged: one edge of 8 bytes, which carries two fragments of 4
    g.add_edge(1, 2, 16)
    for reader, producer, nbytes in ((2, 0, 4), (1, 0, 8), (2, 0, 4), (2, 1, 16)):
        g.add_read(reader, g.add_fragment(producer, nbytes))
    g.freeze()
    src, dst, nbytes, largest = g.edge_arrays()
    assert [(int(s), int(d), int(b)) for s, d, b in zip(src, dst, nbytes, strict=True)] == \
        [(e.src, e.dst, e.bytes) for e in g.edges] == [(0, 1, 8), (0, 2, 8), (1, 2, 16)]
    assert largest.tolist() == [g.largest_message()[e.src, e.dst] for e in g.edges] == [8, 4, 16]
    assert [(int(s), int(d)) for s, d in zip(src, dst, strict=True)] == \
        [(u, v) for u, s in enumerate(g.succs) for v, _ in s]  # succs laid end to end
    assert not src.flags.writeable and g.edge_arrays()[0] is src


def test_read_arrays_and_largest_message_of_each_edge() -> None:
    g = ComputeGraph()
    for name in "abcd":
        g.add_task(name, 1)
    g.add_edge(0, 1, 10)
    g.add_edge(0, 2, 3)  # no fragment read over it: its largest message is 0
    g.add_edge(2, 3, 1)
    small, large = g.add_fragment(0, 3), g.add_fragment(0, 7)
    g.add_read(1, large)
    g.add_read(1, small)
    g.add_read(3, g.add_fragment(2, 1))
    g.freeze()
    reader, frag, producer, nbytes = g.read_arrays()
    assert reader.tolist() == [1, 1, 3] and frag.tolist() == [0, 1, 2]  # reads sorted by freeze
    assert producer.tolist() == [0, 0, 2] and nbytes.tolist() == [3, 7, 1]
    assert g.edge_arrays()[3].tolist() == [7, 0, 1]
    assert dict(g.largest_message()) == {(0, 1): 7, (0, 2): 0, (2, 3): 1}
    assert not reader.flags.writeable and g.read_arrays()[0] is reader


@pytest.mark.parametrize("seed", [1, 2])
def test_core_order_and_runs_are_their_definition(seed: int) -> None:
    """Tasks by start, end and topological position on each core; a run is a maximal
    stretch of one batch on a core (a task without a batch alone), zero costs and ties
    included."""
    rng = np.random.default_rng(seed)
    g = ComputeGraph()
    n = 80
    for t in range(n):
        g.add_task(f"t{t}", int(rng.integers(0, 3)), batch=int(rng.integers(-1, 3)))
    for _ in range(120):
        u, v = sorted(rng.choice(n, 2, replace=False).tolist())
        g.add_edge(u, v, 4)
    g.freeze()
    core_of = rng.integers(0, LINE.num_cores, n).tolist()
    start = rng.integers(0, 2, n).tolist()  # after the producers (an order without a cycle)
    for t in g.topo_order:
        start[t] += max((start[u] + g.tasks[u].cost_ns for u, _ in g.preds[t]), default=0)
    r = MergeScheduleResult.build(g, LINE, core_of, start, solver="hand", status="HEURISTIC",
                                  communication=False)
    topo = {t: i for i, t in enumerate(g.topo_order)}
    want = [sorted((t for t in range(n) if core_of[t] == p),
                   key=lambda t: (start[t], start[t] + g.tasks[t].cost_ns, topo[t]))
            for p in range(LINE.num_cores)]
    assert r.core_tasks == want
    runs = []
    for p, tasks in enumerate(want):
        for t in tasks:
            batch = g.tasks[t].batch
            if runs and runs[-1][0] == p and batch >= 0 and runs[-1][1] == batch:
                runs[-1][2].append(t)
            else:
                runs.append((p, batch, [t]))
    assert [(c.core, c.batch, c.tasks) for c in r.equivalence_classes] == runs


def test_costs_and_bottom_levels_are_new_lists() -> None:
    g = diamond()
    tail, costs = g.bottom_levels(), g.costs()
    assert tail == [35, 25, 25, 5] and costs == [10, 20, 20, 5]
    tail[0] = costs[0] = -1  # a caller's change does not reach the graph's copies
    assert g.bottom_levels() == [35, 25, 25, 5] and g.costs() == [10, 20, 20, 5]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_layer_load_is_its_definition(seed: int) -> None:
    """Per batch: its earliest head, plus its work over the cores its lanes can use (no more
    than its tiles and the spare crossbars allow when every lane has tiles), plus its least
    work after a lane; the largest over the batches."""
    from raptor.solver.evaluate import fan_in_heads, layer_load
    from raptor.solver.generate import random_layered_dag

    g = random_layered_dag(300, seed, width=8, tiles_per_batch=(0, 2))
    target = Target(mesh_rows=2, mesh_cols=3, crossbars_per_core=64)
    head, tail, costs = fan_in_heads(g, target), g.bottom_levels(), g.costs()
    spare = target.crossbar_capacity - len(g.distinct_weights())
    want = 0
    for b in {task.batch for task in g.tasks}:
        ts = [t for t, task in enumerate(g.tasks) if task.batch == b]
        k = min(target.num_cores, len(ts))
        if all(g.tasks[t].weights for t in ts):
            k = min(k, len(frozenset().union(*(g.tasks[t].weights for t in ts))) + spare)
        want = max(want, min(head[t] for t in ts) + -(-sum(costs[t] for t in ts) // max(k, 1))
                   + min(tail[t] - costs[t] for t in ts))
    assert layer_load(g, target, head, tail) == want > 0


@pytest.mark.parametrize(("side", "protocol", "cut"), [(3, "raptor", True), (1, "raptor", True),
                                                      (2, "pimsim-nn", True),
                                                      (3, "raptor", False)])
def test_fan_in_heads_take_the_best_split_of_local_and_remote_predecessors(
        side: int, protocol: str, cut: bool) -> None:
    """`fan_in_heads` (its loop a kernel) against its definition, every split tried: per
    task, the least over every set of its predecessors kept local (run one after another
    by release, then cost) of the later of when they are done and when the others' data
    is in (the latest one-hop arrival, and the earliest end among them plus a hop plus
    their holds shared over the core's incoming links, without the cut one link per
    message; never, on one core)."""
    import itertools

    from raptor.noc import hold_cycles, message_cycles
    from raptor.solver.evaluate import fan_in_heads
    from raptor.solver.generate import random_layered_dag

    g = random_layered_dag(160, 5, width=5, tiles_per_batch=(0, 0)).freeze()
    target = Target(mesh_rows=side, mesh_cols=side, protocol=protocol)
    links = min(side - 1, 2) * 2 if cut and protocol == "raptor" else 1 << 62
    links = max(links, 1)
    costs = g.costs()
    holds: dict[tuple[int, int], int] = {}
    for t, reads in enumerate(g.reads):
        for f in reads:
            frag = g.fragments[f]
            key = (frag.producer, t)
            holds[key] = holds.get(key, 0) + int(hold_cycles(target, 1, frag.bytes, protocol))
    head = [0] * g.num_tasks
    never = 1 << 62
    for v in g.topo_order:
        preds = g.preds[v]
        if len(preds) == 1:
            head[v] = head[preds[0][0]] + costs[preds[0][0]]
            continue
        best = never if preds else 0
        for keep in itertools.product((False, True), repeat=len(preds)):
            done = 0
            for u in sorted((u for (u, _), k in zip(preds, keep, strict=True) if k),
                            key=lambda u: (head[u], costs[u])):
                done = max(done, head[u]) + costs[u]
            far = [(u, b) for (u, b), k in zip(preds, keep, strict=True) if not k]
            data = 0
            if far and target.num_cores == 1:
                data = never
            elif far:
                latest = max(head[u] + costs[u] + target.ns(int(message_cycles(
                    target, 1, b, protocol))) for u, b in far)
                ser = sum(holds.get((u, v), 0) for u, _ in far)
                data = max(latest, min(head[u] + costs[u] for u, _ in far)
                           + target.ns(target.hop_cycles + -(-ser // links)))
            best = min(best, max(done, data))
        head[v] = best
    assert fan_in_heads(g, target, link_cut=cut) == head
