"""The communication model: one message per fragment and destination core, the shared-memory
queue, and the replay (figures computed by hand at 1 GHz: a hop 2 ns, a 8-byte flit 2 ns)."""

from __future__ import annotations

import dataclasses

import pytest

from raptor.solver import ComputeGraph, blocking
from raptor.solver.blocking import START, blocking_makespan, pulls_receives, respecting_posts
from raptor.solver.comm import (
    DEEPEN_ROUNDS,
    Replay,
    deepen,
    inputs_first,
    lanes_moved,
    replay,
    send_order,
)
from raptor.solver.generate import random_layered_dag
from raptor.solver.peft import peft_schedule
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


PIMSIM_LINE = Target(mesh_rows=1, mesh_cols=4, protocol="pimsim-nn")


def test_pimsim_protocol_estimate_blocks_receives_and_shakes_hands() -> None:
    """p (core 0, 10 ns) sends 64 IR bytes (16 B at 8 bits: 2 flits) to d (core 1, 10 ns).
    Adjacent cores: one flit 2 + 2 = 4 ns. d's receive is posted after its address setup
    (1); p's request leaves at 11 and arrives at 15, the reply at 19; p reads 2 cycles (21),
    the flits arrive at 21 + 2 * 4 = 29, d's core writes 1 cycle and waits 2 (32), d ends
    at 42. Without blocking receives and handshakes the replay's own run is shorter."""
    g = ComputeGraph()
    p, d = g.add_task("p", 10), g.add_task("d", 10)
    f = g.add_fragment(p, 64)
    g.add_edge(p, d, 64)
    g.add_read(d, f)
    g.freeze()
    r = replay(g, PIMSIM_LINE, [0, 1], [[p], [d], [], []])
    assert r.makespan_ns == 42
    assert r.posted_ns < r.makespan_ns
    raptor = replay(g, LINE, [0, 1], [[p], [d], [], []])
    assert raptor.makespan_ns == raptor.posted_ns == 10 + 2 + 16 + 10


def test_pimsim_protocol_estimate_follows_one_message_order() -> None:
    """Core 1 sends m2 (ready at 10) before core 0 sends m1 (ready at 100). In the message
    order m2 comes first, so core 0 receives m2 only after its task a, and core 1 waits in
    its send until then before its long task e: the blocking run ends about 90 ns later
    than the replay's own, whose receives are posted at the start."""
    g = ComputeGraph()
    a, b = g.add_task("a", 100), g.add_task("b", 10)
    c, d, e = g.add_task("c", 10), g.add_task("d", 10), g.add_task("e", 200)
    m1, m2 = g.add_fragment(a, 64), g.add_fragment(b, 64)
    g.add_edge(a, c, 64)
    g.add_read(c, m1)
    g.add_edge(b, d, 64)
    g.add_read(d, m2)
    g.freeze()
    r = replay(g, PIMSIM_LINE, [0, 1, 1, 0, 1], [[a, d], [b, e, c], [], []])
    assert r.left[(m2, 0)] < r.left[(m1, 1)]
    assert r.makespan_ns - r.posted_ns > 80


def test_pimsim_protocol_merges_what_one_core_sends_another_at_one_point() -> None:
    """p (core 0, 10 ns) produces two fragments of 64 IR bytes (16 B each at 8 bits) that
    d1 and d2 (core 3, 10 ns each) read: one message of 32 B instead of two. One flit over
    3 hops costs 3 * 2 + 2 = 8 ns. p packs the parts (`noc.pimsim_pack_cycles`: per part a
    2-cycle copy, its 2-cycle gap and 2 address setups: 12 ns), requests at 23 (arrives
    31), the reply is back at 39, p reads 2 cycles (41), 4 flits of 8 ns arrive at 73; the
    receiver writes 1 and waits 2 (76), then d1 and d2 run: 96 ns, against 98 for two
    messages, each with its own handshake. Next door (core 1) the handshake is cheap and
    two messages let d1 start before the second arrives: nothing is merged."""
    g = ComputeGraph()
    p, d1, d2 = g.add_task("p", 10), g.add_task("d1", 10), g.add_task("d2", 10)
    for d in (d1, d2):
        f = g.add_fragment(p, 64)
        g.add_edge(p, d, 64)
        g.add_read(d, f)
    g.freeze()
    r = replay(g, PIMSIM_LINE, [0, 3, 3], [[p], [], [], [d1, d2]])
    assert r.merged == {(1, 3): (0, 3)}
    assert r.makespan_ns == 96
    two = blocking_makespan(g, PIMSIM_LINE, [0, 3, 3], [[p], [], [], [d1, d2]], r.sends,
                            {k: rank for k, (_, rank) in r.sends.items()}, r.posts)
    assert two == 98
    near = replay(g, PIMSIM_LINE, [0, 1, 1], [[p], [d1, d2], [], []])
    assert near.merged == {} and near.makespan_ns == 70


def test_pimsim_protocol_refines_the_order_from_its_own_blocking_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The message order and receive posts planned from a run whose receives do not block
    are made again from the blocking run itself (`blocking.refine`): on this PEFT schedule
    5 % faster, and the replay's makespan is that of the program it describes."""
    g = random_layered_dag(40, seed=8, width=6, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
    res = peft_schedule(g, target)

    def run() -> Replay:
        return replay(g, target, res.core_of, res.core_tasks, res.start_ns)

    refined = run()
    monkeypatch.setattr(blocking, "REFINE_ROUNDS", 0)
    planned = run()
    assert refined.makespan_ns * 100 < planned.makespan_ns * 96
    order = {k: rank for k, (_, rank) in refined.sends.items()}
    assert blocking_makespan(g, target, res.core_of, res.core_tasks, refined.sends, order,
                             refined.posts, refined.merged) == refined.makespan_ns


def test_an_order_that_pulls_a_receive_before_its_post_is_refused() -> None:
    """`refine` keeps only orders whose blocking program takes no receive before the flow
    control's post: a message ranked first is pulled ahead of its post by any send of
    its core earlier in the program, and the replay's own order pulls none."""
    g = random_layered_dag(40, seed=8, width=6, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
    res = peft_schedule(g, target)
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    order = {k: rank for k, (_, rank) in rep.sends.items()}
    assert not pulls_receives(g, res.core_of, res.core_tasks, rep.sends, order, rep.posts)
    pos = {t: i for prog in res.core_tasks for i, t in enumerate(prog)} | {START: -1}
    sent_before = [(key, point) for key, point in rep.posts.items()
                   if any(res.core_of[g.fragments[k[0]].producer] == key[1]
                          and pos[p] < pos[point] for k, (p, _) in rep.sends.items())]
    assert sent_before
    key, _ = sent_before[0]
    assert pulls_receives(g, res.core_of, res.core_tasks, rep.sends, order | {key: -1},
                          rep.posts)


def test_an_order_that_pulls_receives_is_repaired_to_one_that_pulls_none() -> None:
    """`respecting_posts` keeps an order that pulls no receive as it is, and moves a
    message ranked first (pulled ahead of its post) below every send of its core earlier
    in the program, the others keeping their relative order."""
    g = random_layered_dag(40, seed=8, width=6, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
    res = peft_schedule(g, target)
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    order = {k: rank for k, (_, rank) in rep.sends.items()}
    args = (g, res.core_of, res.core_tasks, rep.sends)
    kept = respecting_posts(*args, order, rep.posts)
    assert kept is not None and sorted(kept, key=kept.__getitem__) == sorted(
        order, key=order.__getitem__)
    pos = {t: i for prog in res.core_tasks for i, t in enumerate(prog)} | {START: -1}
    key = next(key for key, point in rep.posts.items()
               if any(res.core_of[g.fragments[k[0]].producer] == key[1]
                      and pos[p] < pos[point] for k, (p, _) in rep.sends.items()))
    pulling = order | {key: -1}
    assert pulls_receives(*args, pulling, rep.posts)
    fixed = respecting_posts(*args, pulling, rep.posts)
    assert fixed is not None and fixed[key] > 0
    assert not pulls_receives(*args, fixed, rep.posts)
    rest = [k for k in order if k != key]
    assert sorted(rest, key=fixed.__getitem__) == sorted(rest, key=order.__getitem__)


def test_the_program_built_is_refined_further_with_the_meeting_order() -> None:
    """`deepen` refines the replay a program is built from beyond `refine`'s rounds, also
    ranking messages by when they could meet their receives (`blocking.meeting_order`):
    on this PEFT schedule 6 % faster, faster than as many rounds without that order, and
    its makespan is that of the program it describes."""
    g = random_layered_dag(80, seed=0, width=8, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=3, mesh_cols=3, protocol="pimsim-nn")
    res = peft_schedule(g, target)
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    deep = deepen(g, target, res.core_of, res.core_tasks, rep)
    assert deep.makespan_ns * 100 < rep.makespan_ns * 95
    order = {k: rank for k, (_, rank) in deep.sends.items()}
    assert blocking_makespan(g, target, res.core_of, res.core_tasks, deep.sends, order,
                             deep.posts) == deep.makespan_ns
    plain = blocking.refine(g, target, res.core_of, res.core_tasks, rep.sends,
                            {k: rank for k, (_, rank) in rep.sends.items()}, rep.posts,
                            rep.flow, DEEPEN_ROUNDS)
    assert plain is not None and deep.makespan_ns < plain[0]


def test_inputs_first_computes_a_cores_leading_input_lanes_before_its_messages() -> None:
    """`inputs_first` moves the sends and receive posts at the points of a core's leading
    run of tasks reading no fragment (two or more) to the run's end and leaves every other
    one where it was: on this PEFT schedule 8 % faster under the blocking model, its
    makespan that of the program it describes. It keeps the replay where that is slower
    (another seed), and under Raptor's protocol (posted receives never block)."""
    g = random_layered_dag(60, seed=0, width=12, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
    res = peft_schedule(g, target)
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    runs: dict[int, list[int]] = {}
    for c, tasks in enumerate(res.core_tasks):
        k = next((i for i, t in enumerate(tasks) if g.reads[t]), len(tasks))
        if k >= 2:
            runs[c] = tasks[:k]
    assert runs
    got = inputs_first(g, target, res.core_of, res.core_tasks, rep)

    def moved(point: int, core: int) -> int:
        run = runs.get(core)
        return run[-1] if run is not None and (point == START or point in run[:-1]) else point

    sender = [res.core_of[f.producer] for f in g.fragments]
    assert got.sends == {k: (moved(p, sender[k[0]]), r) for k, (p, r) in rep.sends.items()}
    assert got.posts == {k: moved(p, k[1]) for k, p in rep.posts.items()}
    assert got.makespan_ns * 100 < rep.makespan_ns * 93
    order = {k: r for k, (_, r) in got.sends.items()}
    assert blocking_makespan(g, target, res.core_of, res.core_tasks, got.sends, order,
                             got.posts) == got.makespan_ns
    raptor = dataclasses.replace(target, protocol="raptor")
    assert inputs_first(g, raptor, res.core_of, res.core_tasks, rep) is rep
    g = random_layered_dag(60, seed=1, width=12, tiles_per_batch=(0, 0))
    res = peft_schedule(g, target)
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    assert inputs_first(g, target, res.core_of, res.core_tasks, rep) is rep



def test_lanes_moved_gives_a_late_cores_last_input_lane_to_an_early_core() -> None:
    """`lanes_moved` takes, from each core whose last task ends within the shortest leading
    input lane of the replay's end, its last such lane and puts it first on a core that
    ends earlier; every other task stays; the replay's makespan is that of the program so
    built under the blocking model. Under Raptor's protocol it moves nothing."""
    for seed in range(20):
        g = random_layered_dag(60, seed=seed, width=12, tiles_per_batch=(0, 0))
        target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
        res = peft_schedule(g, target)
        rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
        got = lanes_moved(g, target, res.core_of, res.core_tasks, rep)
        if got is not None:
            break
    assert got is not None
    cores, order, moved = got
    changed = [t for t in range(g.num_tasks) if cores[t] != res.core_of[t]]
    assert changed
    last = max(rep.end)
    lane = min(g.tasks[t].cost_ns for ts in res.core_tasks
               for t in ts[:next((i for i, x in enumerate(ts) if g.reads[x]), len(ts))])
    for t in changed:
        src, dst = res.core_of[t], cores[t]
        assert not g.reads[t] and order[dst][0] == t
        assert last - rep.end[res.core_tasks[src][-1]] < lane
        assert last - rep.end[res.core_tasks[dst][-1]] >= lane
        assert order[src] == [x for x in res.core_tasks[src] if x != t]
    assert sorted(x for ts in order for x in ts) == list(range(g.num_tasks))
    ranks = {k: r for k, (_, r) in moved.sends.items()}
    assert blocking_makespan(g, target, cores, order, moved.sends, ranks,
                             moved.posts) == moved.makespan_ns
    assert all(cores[g.fragments[f].producer] != d for f, d in moved.sends)
    raptor = dataclasses.replace(target, protocol="raptor")
    assert lanes_moved(g, raptor, res.core_of, res.core_tasks, rep) is None

def test_the_replay_routes_a_fan_out_over_yx_when_that_arrives_sooner() -> None:
    """p on core 0 of a 3x4 mesh sends its 64-byte fragment to b on core 5 (one hop east,
    one south) and then to c on core 6: XY, the second waits 16 ns on link 0->1 behind the
    first; under ``routing = "xy-yx"`` it leaves south instead and arrives as over free
    links. A replay of the program built follows the routes recorded, whatever its times."""
    grid = Target(mesh_rows=3, mesh_cols=4)
    g = ComputeGraph()
    p, b, c = (g.add_task(n, 10) for n in "pbc")
    f = g.add_fragment(p, 64)
    for t in (b, c):
        g.add_edge(p, t, 64)
        g.add_read(t, f)
    g.freeze()
    core_of, tasks = [0, 5, 6], [[0], [], [], [], [], [1], [2]] + [[]] * 5
    xy = replay(g, grid, core_of, tasks, priority=[0, 1, 2])
    assert xy.yx == set() and xy.start[2] == 10 + 16 + 3 * 2 + 16
    both = dataclasses.replace(grid, routing="xy-yx")
    yx = replay(g, both, core_of, tasks, priority=[0, 1, 2])
    assert yx.yx == {(f, 6)} and yx.start[2] == 10 + 3 * 2 + 16
    assert replay(g, both, core_of, tasks, priority=[0, 1, 2], built=xy).start == xy.start
