"""The communication model's flow control of local memory (figures by hand at 1 GHz on a
1 x 4 mesh: a hop 2 ns, an 8-byte flit 2 ns, so 64 bytes to a neighbour take 18 ns), and
the memory-aware refinement of PEFT."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import onnx
import pytest

from examples.build_examples import NetBuilder
from raptor.sim import SimOptions
from raptor.solve import SolveOptions, solve
from raptor.solver import ComputeGraph
from raptor.solver.comm import START, _Replayer, replay
from raptor.solver.evaluate import validate_schedule
from raptor.solver.graph import MemoryDemand
from raptor.solver.peft import _list_schedule_runs, follow_producers, peft_schedule
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LINE = Target(mesh_rows=1, mesh_cols=4, local_memory_bytes=1100)
BUDGET = [1012] * 4
"""Bytes per core the posting policy may fill."""


def _late_reader(scratch_x: int) -> ComputeGraph:
    """a (core 0) sends 64 bytes to y (core 1), which runs after the long x."""
    g = ComputeGraph()
    a, _, y = g.add_task("a", 10), g.add_task("x", 100), g.add_task("y", 10)
    f = g.add_fragment(a, 64)
    g.add_edge(a, y, 64)
    g.add_read(y, f)
    g.memory = MemoryDemand(scratch=[64, scratch_x, 100], output=[64, 0, 0], fragment=[200])
    return g.freeze()


def test_without_a_memory_model_every_receive_is_posted_at_the_start() -> None:
    g = _late_reader(900)
    g.memory = None
    r = replay(g, LINE, [0, 1, 1], [[0], [1, 2], [], []])
    assert r.posts == {(0, 1): START} and r.send_wait_ns == 0
    assert r.arrival[(0, 1)] == 10 + 18 and r.makespan_ns == 110


def test_a_receive_that_does_not_fit_is_posted_when_its_reader_comes() -> None:
    """x's 900 bytes and the 200-byte buffer do not fit 1,012 together: core 1 posts the
    receive after x, and a (with nothing after it to do) waits for that post."""
    r = replay(_late_reader(900), LINE, [0, 1, 1], [[0], [1, 2], [], []], budget=BUDGET)
    assert r.posts == {(0, 1): 1}  # the point after x
    assert r.sends == {(0, 1): (0, 0)}  # a sends at the point after it, first of all
    assert r.send_wait_ns == 100 - 10 and r.arrival[(0, 1)] == 100 + 18
    assert r.makespan_ns == 118 + 10
    assert r.memory_peak_bytes[1] <= r.budget[1] == 1012


def test_a_receive_that_fits_is_posted_at_the_start() -> None:
    r = replay(_late_reader(800), LINE, [0, 1, 1], [[0], [1, 2], [], []], budget=BUDGET)
    assert r.posts == {(0, 1): START} and r.send_wait_ns == 0 and r.makespan_ns == 110
    assert r.tight == set()


def test_a_sender_with_more_work_holds_its_message_instead_of_waiting() -> None:
    """a is followed by b (50 ns) on core 0 and y is planned after x: a keeps the data and
    sends it at the point after b, where x is done and core 1 has room again."""
    g = ComputeGraph()
    a, b, x, y = (g.add_task(n, c) for n, c in (("a", 10), ("b", 150), ("x", 100),
                                                 ("y", 10)))
    f = g.add_fragment(a, 64)
    g.add_edge(a, y, 64)
    g.add_read(y, f)
    g.memory = MemoryDemand(scratch=[64, 64, 900, 100], output=[64, 64, 0, 0],
                            fragment=[200])
    g.freeze()
    r = replay(g, LINE, [0, 0, 1, 1], [[a, b], [x, y], [], []],
               priority=[0, 10, 0, 200], budget=BUDGET)
    assert r.held_sends >= 1 and r.sends[(f, 1)] == (b, 0)  # sent after b
    assert r.send_wait_ns == 0 and r.start[b] == 10  # a did not wait
    assert r.arrival[(f, 1)] == 160 + 18 and r.makespan_ns == 178 + 10


def test_cores_waiting_on_each_other_still_finish() -> None:
    """Each core sends to the other a fragment it must post late (no room), then waits for
    the other's data: the model breaks the cycle instead of stalling."""
    g = ComputeGraph()
    a, b = g.add_task("a", 10), g.add_task("b", 10)
    x, y = g.add_task("x", 10), g.add_task("y", 10)
    fa, fb = g.add_fragment(a, 64), g.add_fragment(b, 64)
    g.add_edge(a, y, 64)
    g.add_read(y, fa)
    g.add_edge(b, x, 64)
    g.add_read(x, fb)
    # core 0 runs a then x (reads b's), core 1 runs b then y (reads a's); a's and b's own
    # buffers leave no room for a receive until they are done
    g.memory = MemoryDemand(scratch=[1000, 1000, 100, 100], output=[64, 64, 0, 0],
                            fragment=[200, 200])
    g.freeze()
    r = replay(g, LINE, [0, 1, 0, 1], [[a, x], [b, y], [], []], budget=BUDGET)
    assert set(r.posts.values()) == {a, b}  # each posted after its core's first task
    assert r.makespan_ns == 10 + 18 + 10 and r.forced_posts == 0


def test_follow_producers_moves_additions_next_to_their_last_producer() -> None:
    """Two crossbar tasks on cores 0 and 1 feed an addition the plan put on core 2: the
    refinement puts it on the core of the producer that ends last, right after it."""
    g = ComputeGraph()
    p = g.add_task("p", 100, weights=[0])
    q = g.add_task("q", 120, weights=[1])
    s = g.add_task("s", 5)
    for u in (p, q):
        f = g.add_fragment(u, 64)
        g.add_edge(u, s, 64)
        g.add_read(s, f)
    g.memory = MemoryDemand(scratch=[100, 100, 50], output=[64, 64, 64],
                            fragment=[64, 64])
    g.freeze()
    plan = MergeScheduleResult.build(g, LINE, [0, 1, 2], [0, 0, 140], solver="peft",
                                     status="HEURISTIC")
    moved = follow_producers(g, LINE, plan, 2)
    assert moved.core_of[s] == 1 and moved.core_tasks[1] == [q, s]
    assert moved.start_ns[s] == 120  # after q; p's data arrived at 100 + 18
    assert not validate_schedule(g, LINE, moved)
    # on core 2 it waited for q's data (120 + 2 hops = 140 - 2); now it needs no message
    assert (plan.estimate_ns, moved.estimate_ns) == (138 + 5, 120 + 5)



def test_follow_producers_apart_moves_only_additions_with_no_input_on_their_core() -> None:
    """pimsim-nn's variant (`peft._list_schedule_runs`): an addition whose two inputs both
    come from other cores costs two blocking meetings, one once it follows its last
    producer; one with an input already on its core (or a single input) stays put."""
    g = ComputeGraph()
    p = g.add_task("p", 100, weights=[0])
    q = g.add_task("q", 120, weights=[1])
    x = g.add_task("x", 90, weights=[2])
    s = g.add_task("s", 5)  # reads p and q, planned on core 2
    t = g.add_task("t", 5)  # reads q and x, planned on x's core 2
    u = g.add_task("u", 5)  # reads p only, planned on core 3
    for a, b in ((p, s), (q, s), (q, t), (x, t), (p, u)):
        f = g.add_fragment(a, 64)
        g.add_edge(a, b, 64)
        g.add_read(b, f)
    g.memory = MemoryDemand(scratch=[100, 100, 100, 50, 50, 50], output=[64] * 6,
                            fragment=[64] * 5)
    g.freeze()
    plan = MergeScheduleResult.build(g, LINE, [0, 1, 2, 2, 2, 3], [0, 0, 0, 140, 145, 120],
                                     solver="peft", status="HEURISTIC")
    moved = follow_producers(g, LINE, plan, 2, apart=True)
    assert [moved.core_of[k] for k in (s, t, u)] == [1, 2, 3]
    assert moved.core_tasks[1] == [q, s] and moved.start_ns[s] == 120
    assert not validate_schedule(g, LINE, moved)
    assert follow_producers(g, LINE, plan, 2).core_of[u] == 0  # what `apart` leaves alone


def test_peft_keeps_a_refinement_only_when_it_replays_faster() -> None:
    g = _late_reader(100)
    base = dataclasses.replace(g, memory=None)
    base.freeze()
    plain = peft_schedule(base, LINE)
    refined = peft_schedule(g, LINE)
    assert refined.estimate_ns <= replay(g, LINE, plain.core_of, plain.core_tasks,
                                         plain.start_ns).makespan_ns


def test_a_built_program_replays_in_its_own_flow_when_costs_change() -> None:
    """A program is materialized from one replay's posts and sends; replaying it with new
    costs (a spilled program's loads and stores) keeps them (`replay(..., built=)`). Here
    the receive was posted
    after x (it did not fit before): with x 60 ns longer, the send still waits for that
    post and the message arrives 60 ns later; with the same costs nothing changes."""
    g = _late_reader(900)
    progs = [[0], [1, 2], [], []]
    first = replay(g, LINE, [0, 1, 1], progs, budget=BUDGET)
    same = replay(g, LINE, [0, 1, 1], progs, built=first)
    assert (same.posts, same.sends, same.makespan_ns) == (first.posts, first.sends,
                                                          first.makespan_ns)
    tasks = list(g.tasks)
    tasks[1] = dataclasses.replace(tasks[1], cost_ns=160)
    longer = dataclasses.replace(g, tasks=tasks)
    again = replay(longer, LINE, [0, 1, 1], progs, built=first)
    assert again.posts == first.posts and again.sends == first.sends
    assert again.arrival[(0, 1)] == first.arrival[(0, 1)] + 60
    assert again.makespan_ns == first.makespan_ns + 60


def test_posts_decided_after_their_point_are_timed_as_the_simulator_runs_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """resnet_block on 2 x 2 cores of 4 KiB, scheduled by PEFT's eager run (PEFT returns
    another run now, whose flow decides every post at its point): the flow control adds
    receives to parked cores' current points at later events, so their sends leave at
    times the event loop has passed and take the links after messages injected later
    (612,427 ns in the order decided). The estimate is the program as built, played in time
    order: what the simulator runs. (One pixel per MVM: the schedule this was found on.)"""
    tight = Target(mesh_rows=2, mesh_cols=2, local_memory_bytes=4096, conv_window_max=1)
    eager = "tasks without crossbars placed as soon as their producers are"
    monkeypatch.setattr("raptor.solve.peft_schedule", lambda graph, target: _list_schedule_runs(
        graph, target, True, True, only=[eager])[0])
    solved = solve(EXAMPLES / "resnet_block.onnx", tight,
                   SolveOptions(solver="peft", sim=SimOptions(trace=False)))
    (run,) = solved.runs
    res, flow = run.result, run.flow
    assert flow is not None
    assert flow.tight == {0, 1, 2, 3}  # no lanes merged: the program replayed is the one run
    assert run.sim is not None and run.sim.report.latency_ns == run.estimate_ns
    decided = _Replayer(solved.build.graph, tight, res.core_of, res.core_tasks, res.start_ns,
                        True, flow.budget)
    assert decided.run().makespan_ns != run.estimate_ns and decided.late


def test_stores_requested_at_one_time_are_served_alike_by_the_estimate_and_the_simulator(
        ) -> None:
    """Two 1 x 1 convolutions on 2 x 2 cores of 1 KiB (a network of
    tests/test_random_networks.py's generator): two cores ask the shared memory for their
    stores at the same nanosecond. Served in the order each event loop happened to run its
    cores, the estimate was 16,006 ns and the simulation 15,956; both now serve them by
    `raptor.noc.memory_rank`."""
    b = NetBuilder(0)
    y = b.node("Identity", [b.conv(b.conv("x", 1, 3, 1), 3, 2, 1)], out="y")
    tight = Target(mesh_rows=2, mesh_cols=2, local_memory_bytes=1024)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.onnx"
        onnx.save(b.model("net", {"x": [1, 1, 7, 3]}, y), path)
        solved = solve(path, tight, SolveOptions(solver="peft", sim=SimOptions(trace=False)))
    (run,) = solved.runs
    assert run.ok and run.sim is not None
    assert run.sim.report.latency_ns == run.estimate_ns
