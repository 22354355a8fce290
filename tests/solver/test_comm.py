"""The communication model: one message per fragment and destination core, the shared-memory
queue, and the replay (figures computed by hand at 1 GHz: a hop 2 ns, a 8-byte flit 2 ns)."""

from __future__ import annotations

from raptor.solver import ComputeGraph
from raptor.solver.comm import replay, send_order
from raptor.target import Target

LINE = Target(mesh_rows=1, mesh_cols=4)


def _fan_out() -> ComputeGraph:
    """p produces one fragment that b and c (same core) and d (another core) read."""
    g = ComputeGraph()
    p, b, c, d = (g.add_task(n, 10) for n in "pbcd")
    f = g.add_fragment(p, 64)
    for t in (b, c, d):
        g.add_edge(p, t, 64)
        g.add_read(t, f)
    return g.freeze()


def test_one_message_per_fragment_and_destination_core() -> None:
    g = _fan_out()
    core_of = [0, 1, 1, 1]
    r = replay(g, LINE, core_of, [[0], [1, 2, 3], [], []])
    assert (r.messages, r.bytes_moved) == (1, 64)
    assert r.start[1] == 10 + 2 + 16 and r.makespan_ns == 28 + 30


def test_send_order_serves_the_earliest_reader_first() -> None:
    g = _fan_out()
    core_of = [1, 0, 0, 2]
    # the reader on core 2 is planned first: its message leaves first
    assert send_order(g, core_of, [0, 50, 60, 20])[0] == [(0, 2), (0, 0)]
    r = replay(g, LINE, core_of, [[1, 2], [0], [3], []], priority=[0, 50, 60, 20])
    assert r.start[3] == 10 + 2 + 16  # first on the link out of core 1 towards core 2
    assert r.start[1] == 10 + 2 + 16  # the other direction is free


def test_shared_memory_serves_one_store_at_a_time() -> None:
    g = ComputeGraph()
    g.add_task("a", 100, shared_ns=40)
    g.add_task("b", 100, shared_ns=40)
    g.freeze()
    queued = replay(g, LINE, [0, 1], [[0], [1], [], []])
    assert queued.end == [100, 140] and queued.makespan_ns == 140
    free = replay(g, LINE, [0, 1], [[0], [1], [], []], contention=False)
    assert free.makespan_ns == 100


def test_a_local_crop_costs_its_extra_copy_only_on_the_producers_core() -> None:
    g = ComputeGraph()
    p, q = g.add_task("p", 10), g.add_task("q", 10)
    f = g.add_fragment(p, 64)
    g.add_edge(p, q, 64)
    g.add_read(q, f, local_ns=3)
    g.freeze()
    assert g.durations([0, 0]) == [10, 13] and g.durations([0, 1]) == [10, 10]
    assert replay(g, LINE, [0, 0], [[0, 1], [], [], []]).makespan_ns == 23
