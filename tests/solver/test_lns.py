"""The large-neighbourhood search: never worse than its start as the communication model
judges, valid, identical on reruns, and it finds what the list scheduler missed."""

from __future__ import annotations

from raptor.solver import ComputeGraph, peft_schedule, validate_schedule
from raptor.solver.comm import replay
from raptor.solver.evaluate import lower_bounds
from raptor.solver.generate import random_layered_dag
from raptor.solver.lns import critical_chain, lns_schedule
from raptor.target import Target

MESH = Target(mesh_rows=3, mesh_cols=3, crossbars_per_core=6)


def test_search_keeps_only_what_replays_faster_and_reruns_alike() -> None:
    improved = 0
    for seed in range(3):
        g = random_layered_dag(60, seed=seed, width=8, bytes_range=(2000, 20000),
                               tiles_per_batch=(0, 2))
        peft = peft_schedule(g, MESH)
        runs = [lns_schedule(g, MESH, peft, 0.3, seed=0) for _ in range(2)]
        (best, stats), (again, _) = runs
        assert (best.core_of, best.start_ns) == (again.core_of, again.start_ns)
        assert validate_schedule(g, MESH, best) == []
        assert best.estimate_ns <= peft.estimate_ns
        assert best.estimate_ns >= lower_bounds(g, MESH).makespan_ns
        rep = replay(g, MESH, best.core_of, best.core_tasks, best.start_ns)
        assert rep.makespan_ns == best.estimate_ns
        assert stats.windows > 0 and stats.units >= 0.3
        improved += best.estimate_ns < peft.estimate_ns
    assert improved >= 2


def test_critical_chain_ends_at_the_makespan_and_follows_dependencies() -> None:
    g = ComputeGraph()
    a, b, c = g.add_task("a", 100), g.add_task("b", 10), g.add_task("c", 50)
    g.add_edge(a, c, 64)
    g.add_edge(b, c, 64)
    g.freeze()
    target = Target(mesh_rows=1, mesh_cols=2)
    peft = peft_schedule(g, target)
    rep = replay(g, target, peft.core_of, peft.core_tasks, peft.start_ns)
    chain = critical_chain(g, peft.core_tasks, rep)
    assert chain[0] == c and chain[-1] == a
    assert rep.end[chain[0]] == rep.makespan_ns


def test_link_cut_raises_the_fan_in_bound() -> None:
    """Eight producers of 1 KiB each feed one task: whatever the placement, the data that
    does not come from its own core enters through at most four links."""
    g = ComputeGraph()
    srcs = [g.add_task(f"p{i}", 100) for i in range(8)]
    sink = g.add_task("sink", 10)
    for s in srcs:
        g.add_edge(s, sink, 1024)
    g.freeze()
    with_cut, without = lower_bounds(g, MESH), lower_bounds(g, MESH, link_cut=False)
    assert with_cut.fan_in_ns > without.fan_in_ns
    peft = peft_schedule(g, MESH)
    assert with_cut.makespan_ns <= peft.estimate_ns
