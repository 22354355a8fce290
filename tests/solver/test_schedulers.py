"""PEFT, EFT and CP-SAT on random graphs: validity, bounds, optimality, capacity, PEFT effect."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raptor.solver import (
    CapacityError,
    ComputeGraph,
    CpSatOptions,
    MergeScheduleResult,
    cpsat_schedule,
    eft_schedule,
    lower_bounds,
    peft_schedule,
    validate_schedule,
)
from raptor.solver.generate import random_layered_dag
from raptor.solver.mesh import INF, Mesh
from raptor.solver.peft import (
    XY_RUNS,
    _Cores,
    _list_schedule_runs,
    _ListScheduler,
    _NoRoom,
    _RowsFirst,
    _Tiles,
    copy_caps,
    layer_ranks,
    place_by_position,
    share_lone_sets,
    upward_rank,
)
from raptor.target import Target

FAST = CpSatOptions(time_limit=20.0, num_workers=2, seed=1, injection=False)
"""The free-link model the brute force below enumerates."""


@st.composite
def instances(draw: st.DrawFn, max_tasks: int = 7) -> tuple[ComputeGraph, Target]:
    """Random DAG (edges only forward in id order), costs, tile sets and a small mesh."""
    rows, cols = draw(st.sampled_from([(1, 2), (1, 3), (2, 1)]))
    cap = draw(st.integers(1, 3))
    target = Target(mesh_rows=rows, mesh_cols=cols, crossbars_per_core=cap,
                    hop_cycles=draw(st.integers(1, 20)))
    n = draw(st.integers(1, max_tasks))
    g = ComputeGraph()
    n_tiles = rows * cols * cap
    for i in range(n):
        tiles = draw(st.sets(st.integers(0, n_tiles - 1), max_size=min(cap, 2)))
        g.add_task(f"t{i}", draw(st.integers(1, 60)), tiles, batch=draw(st.integers(-1, 1)))
    for v in range(n):
        for u in range(v):
            if draw(st.booleans()):
                g.add_edge(u, v, draw(st.integers(0, 64)))
    return g.freeze(), target


def brute_force(g: ComputeGraph, target: Target) -> int | None:
    """Optimal makespan by enumerating dispatch sequences (any ready task to any core, appended
    at its earliest time): every semi-active schedule arises this way, so the minimum over all
    sequences is the optimum. None when no placement respects the crossbar capacity."""
    n, P, cap = g.num_tasks, target.num_cores, target.crossbars_per_core
    best: list[int | None] = [None]
    core_end = [0] * P
    tiles: list[set[int]] = [set() for _ in range(P)]
    core_of = [-1] * n
    end = [0] * n

    def visit(done: int, span: int) -> None:
        if best[0] is not None and span >= best[0]:
            return
        if done == n:
            best[0] = span
            return
        for t in range(n):
            if core_of[t] >= 0 or any(core_of[u] < 0 for u, _ in g.preds[t]):
                continue
            for p in range(P):
                added = g.tasks[t].weights - tiles[p]
                if len(tiles[p]) + len(added) > cap:
                    continue
                ready = max([core_end[p]] + [end[u] + target.transfer_ns(b, core_of[u], p)
                                             for u, b in g.preds[t]])
                saved = core_end[p]
                core_of[t], end[t] = p, ready + g.tasks[t].cost_ns
                core_end[p] = end[t]
                tiles[p] |= added
                visit(done + 1, max(span, end[t]))
                tiles[p] -= added
                core_end[p] = saved
                core_of[t] = -1

    visit(0, 0)
    return best[0]


def check_capacity_or_skip(g: ComputeGraph, target: Target) -> bool:
    try:
        peft_schedule(g, target)
    except CapacityError:
        return False
    return True


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_heuristics_and_cpsat_valid_and_bounded(inst: tuple[ComputeGraph, Target]) -> None:
    g, target = inst
    if not check_capacity_or_skip(g, target):
        assert brute_force(g, target) is None
        return
    lb = lower_bounds(g, target)
    peft = peft_schedule(g, target)
    eft = eft_schedule(g, target)
    cp = cpsat_schedule(g, target, FAST, initial=peft)
    for r in (peft, eft, cp):
        assert validate_schedule(g, target, r) == []
        assert r.makespan_ns >= lb.critical_path_ns
        assert r.makespan_ns >= lb.work_per_core_ns
        assert r.summary["cores_used"] >= lb.min_cores
    assert cp.estimate_ns <= peft.estimate_ns  # never worse than its hint, as judged
    best = brute_force(g, target)  # the free-link optimum: a bound of the problem
    assert cp.bound_ns is not None and best <= cp.bound_ns <= cp.estimate_ns
    assert lb.makespan_ns <= cp.estimate_ns  # the problem's bound, links included
    assert lower_bounds(g, target, link_cut=False).makespan_ns <= best
    if cp.status.startswith("OPTIMAL"):  # only where the replay confirms the model
        assert cp.objective_ns == cp.estimate_ns == best
    assert cp.bound_ns <= cp.makespan_ns


def test_lane_symmetry_keeps_the_optimum() -> None:
    target = Target(mesh_rows=1, mesh_cols=3, hop_cycles=7)
    g = random_layered_dag(7, seed=4, width=4, max_lanes=3, cost_range=(10, 60),
                           bytes_range=(8, 64), symmetric=True)
    with_sym = cpsat_schedule(g, target, FAST)
    without = cpsat_schedule(g, target, CpSatOptions(time_limit=20, num_workers=2,
                                                     lane_symmetry=False, injection=False))
    assert with_sym.status.startswith("OPTIMAL") and without.status.startswith("OPTIMAL")
    assert with_sym.objective_ns == without.objective_ns == brute_force(g, target)


def test_capacity_error_reports_numbers() -> None:
    target = Target(mesh_rows=1, mesh_cols=2, crossbars_per_core=2)
    g = ComputeGraph()
    for i in range(5):
        g.add_task(f"t{i}", 10, {i})
    with pytest.raises(CapacityError) as info:
        peft_schedule(g.freeze(), target)
    assert str(info.value) == (
        "model needs 5 distinct crossbar tiles but the target has 2 cores x 2 crossbars = 4"
    )
    big = ComputeGraph()
    big.add_task("huge", 10, {0, 1, 2})
    with pytest.raises(CapacityError, match="needs 3 crossbar tiles at once but a core has 2"):
        peft_schedule(big.freeze(), target)


def test_packing_failure_is_diagnosed() -> None:
    # Three 2-tile sets on two 3-slot cores: 6 tiles fit in total but no packing exists.
    target = Target(mesh_rows=1, mesh_cols=2, crossbars_per_core=3)
    g = ComputeGraph()
    for i in range(3):
        g.add_task(f"t{i}", 10, {2 * i, 2 * i + 1})
    with pytest.raises(CapacityError, match=r"could not pack 3 tile sets \(6 distinct"):
        peft_schedule(g.freeze(), target)


@pytest.mark.parametrize("seed", [1, 3])
def test_tight_graphs_schedule_within_the_copy_caps(seed: int) -> None:
    """48 and 42 distinct tiles in 52 slots, all of one layer: greedy placement (seed 1; it
    ran out of room before copies were capped) or the packed fallback (seed 3) gives a valid
    schedule, and no tile set is resident on more cores than its cap."""
    target = Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=13)
    g = random_layered_dag(80, seed=seed, width=8, tiles_per_batch=(1, 3), max_lanes=6)
    g.tile_layer.update(dict.fromkeys(g.distinct_weights(), "all"))  # one layer: capped
    assert len(g.distinct_weights()) == (48 if seed == 1 else 42)
    r = peft_schedule(g, target)
    assert ("packed residency" in " ".join(r.notes)) == (seed == 3)
    assert validate_schedule(g, target, r) == []
    assert validate_schedule(g, target, eft_schedule(g, target)) == []
    tiles = _Tiles(g)
    caps = copy_caps(tiles, target.num_cores, target.crossbar_capacity)
    cores: dict[tuple[int, ...], set[int]] = {}
    for t, k in enumerate(tiles.key):
        if k:
            cores.setdefault(k, set()).add(r.core_of[t])
    assert all(len(c) <= caps[k] for k, c in cores.items())


def test_a_graph_that_does_not_say_its_layers_has_no_copy_caps() -> None:
    """Capping all tile sets of a generated graph as one layer slowed PEFT by up to 63 %
    (random_layered_dag(40, seed=9, width=6) on 4x4: 15,736 ns against 9,676 uncapped)."""
    g = random_layered_dag(40, seed=9, width=6)
    assert copy_caps(_Tiles(g), 16, 16 * Target().crossbars_per_core) == {}


def test_copy_caps_share_a_layers_cores_among_its_tile_sets() -> None:
    """Layer a: one tile set of 8 lanes; layer b: four sets of 2 lanes. On 4 cores, a's set
    may be copied onto all 4, each of b's onto 1 (4 sets already fill them); when the
    copies would not fit the crossbars they shrink, never below one."""
    g = ComputeGraph()
    for i in range(8):
        g.add_task(f"a{i}", 10, weights=[0])
    for i in range(8):
        g.add_task(f"b{i}", 10, weights=[1 + i // 2])
    g.tile_layer.update({0: "a", 1: "b", 2: "b", 3: "b", 4: "b"})
    tiles = _Tiles(g.freeze())
    assert sorted(copy_caps(tiles, 4, 64).values()) == [1, 1, 1, 1, 4]
    assert sorted(copy_caps(tiles, 4, 6).values()) == [1, 1, 1, 1, 2]
    assert sorted(copy_caps(tiles, 4, 4).values()) == [1, 1, 1, 1, 1]


def test_copy_caps_that_do_not_fit_keep_the_copies_that_save_the_most_time() -> None:
    """Two layers of one tile set and 8 lanes each, a's lanes 10x longer: on 4 cores both
    may go on all 4 (8 crossbars); in 6, a keeps its 4 copies and b gets 2 (copies scaled
    by the square root of their work per crossbar, which minimizes the summed time), where
    scaling alike gave 3 and 3: a's lanes, 80 % of the work, on 3 cores."""
    g = ComputeGraph()
    for i in range(8):
        g.add_task(f"a{i}", 100, weights=[0])
        g.add_task(f"b{i}", 10, weights=[1])
    g.tile_layer.update({0: "a", 1: "b"})
    tiles = _Tiles(g.freeze())
    assert copy_caps(tiles, 4, 8) == {(0,): 4, (1,): 4}
    assert copy_caps(tiles, 4, 6) == {(0,): 4, (1,): 2}



def test_summed_copy_caps_minimize_the_summed_time_of_sets_of_unequal_shares() -> None:
    """Layer a: one tile set of 16 lanes (a share of all 16 cores), layer b: one of 4 lanes
    of a quarter of a's work (a share of 4). In 12 crossbars the summed time work / copies
    is least at 8 and 4 copies (20 + 10 ns); scaling each share by the square root of its
    work per crossbar of the share (the default) gives 10 and 2 (16 + 20 ns)."""
    g = ComputeGraph()
    for i in range(16):
        g.add_task(f"a{i}", 10, weights=[0])
    for i in range(4):
        g.add_task(f"b{i}", 10, weights=[1])
    g.tile_layer.update({0: "a", 1: "b"})
    tiles = _Tiles(g.freeze())
    assert copy_caps(tiles, 16, 20, summed=True) == {(0,): 16, (1,): 4}
    assert copy_caps(tiles, 16, 12, summed=True) == {(0,): 8, (1,): 4}
    assert copy_caps(tiles, 16, 12) == {(0,): 10, (1,): 2}

def test_peft_lookahead_keeps_a_child_near_its_other_producer() -> None:
    """x (long) and y (short) both feed c, hops are slow. EFT starts y at once on a free
    core and c then waits for one of the two messages; the lookahead sees that c can only
    start early where x ran, so y follows x there and c needs no message at all."""
    target = Target(mesh_rows=1, mesh_cols=3, hop_cycles=200)
    g = ComputeGraph()
    x, y, c = g.add_task("x", 100), g.add_task("y", 10), g.add_task("c", 10)
    g.add_edge(x, c, 64)
    g.add_edge(y, c, 64)
    peft, eft = peft_schedule(g.freeze(), target), eft_schedule(g, target)
    assert peft.core_of == [0, 0, 0] and peft.estimate_ns == 120
    assert eft.core_of[y] != eft.core_of[x] and eft.estimate_ns > 200


def test_large_graphs_go_to_the_neighbourhood_search() -> None:
    target = Target(mesh_rows=4, mesh_cols=4)
    g = random_layered_dag(120, seed=5, width=12)
    peft = peft_schedule(g, target)
    r = cpsat_schedule(g, target, CpSatOptions(time_limit=3, num_workers=2, max_full_pairs=500),
                       initial=peft)
    assert r.model == "lns" and r.notes and r.status.startswith("FEASIBLE")
    assert r.bound_ns == lower_bounds(g, target).makespan_ns
    assert validate_schedule(g, target, r) == []
    assert r.estimate_ns <= peft.estimate_ns


def test_deterministic() -> None:
    target = Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=12)
    g = random_layered_dag(60, seed=9, width=6)
    a, b = peft_schedule(g, target), peft_schedule(g, target)
    assert (a.core_of, a.start_ns) == (b.core_of, b.start_ns)


def test_brute_force_sanity() -> None:
    # Two independent tasks on two cores run in parallel; a chain pays no transfer locally.
    target = Target(mesh_rows=1, mesh_cols=2)
    g = ComputeGraph()
    g.add_task("a", 10)
    g.add_task("b", 10)
    assert brute_force(g.freeze(), target) == 10
    chain = ComputeGraph()
    for i, (c, _) in enumerate(itertools.product([5, 7], [0])):
        chain.add_task(f"c{i}", c)
    chain.add_edge(0, 1, 800)
    assert brute_force(chain.freeze(), target) == 12


@pytest.mark.parametrize("protocol", ["raptor", "pimsim-nn"])
def test_peft_leaves_no_cyclic_garbage(protocol: str) -> None:
    """PEFT runs with the cyclic collector paused (`raptor.gc_pause`), so what it builds must
    be freed by reference counting alone: no cycle is left for a later collection."""
    import gc

    g = random_layered_dag(80, 3, width=8, tiles_per_batch=(0, 2))
    target = Target(mesh_rows=2, mesh_cols=3, crossbars_per_core=16, protocol=protocol)
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        peft_schedule(g, target)
        assert gc.collect() == 0
    finally:
        if collecting:
            gc.enable()


def test_the_ready_floor_is_a_lower_bound_and_prunes_nothing_that_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`_ListScheduler.ready_floor` is at most the exact data-ready time on every core at
    every task of a congested run, and the schedule is the same without it."""
    from raptor.solver import peft
    from raptor.solver.mesh import Mesh

    g = random_layered_dag(400, 2, width=12, tiles_per_batch=(0, 0))
    target = Target(mesh_rows=4, mesh_cols=4)
    checked = 0

    class Checked(peft._ListScheduler):
        def judge(self, t, *rest):  # type: ignore[no-untyped-def]
            nonlocal checked
            floor = self.ready_floor(t).tolist()
            exact = [self.exact_ready(t, p) for p in range(self.P)]
            assert all(f <= e for f, e in zip(floor, exact, strict=True))
            checked += floor != exact
            return super().judge(t, *rest)

    def run(cls: type[peft._ListScheduler]) -> tuple[list[int], list[int]]:
        return cls(g.freeze(), target, Mesh(target), peft._Tiles(g), True, None).run()

    with_floor = run(Checked)
    assert checked > 0  # the links were busy somewhere
    monkeypatch.setattr(peft, "FLOOR_AFTER", 1 << 30)
    assert run(peft._ListScheduler) == with_floor


@pytest.mark.parametrize(("lookahead", "tiles", "side"),
                         [(True, (0, 0), 4), (True, (0, 2), 3), (False, (0, 0), 4),
                          (True, (0, 0), 1)])
def test_judging_only_the_cores_that_can_win_changes_no_choice(
        monkeypatch: pytest.MonkeyPatch, lookahead: bool, tiles: tuple[int, int],
        side: int) -> None:
    """`_ListScheduler.bounded` prices the lookahead on the cores whose lower bound can
    beat the first judged core; with `NEAR_CORES` at 0 every task takes the full pass over
    every core instead, and the schedule is the same."""
    from raptor.solver import peft

    g = random_layered_dag(300, 4, width=10, tiles_per_batch=tiles).freeze()
    target = Target(mesh_rows=side, mesh_cols=side)

    def run() -> tuple[list[int], list[int]]:
        return peft._ListScheduler(g, target, Mesh(target), peft._Tiles(g), lookahead,
                                   None).run()

    near = run()
    monkeypatch.setattr(peft, "NEAR_CORES", 0)
    assert run() == near


def test_core_gaps_give_the_earliest_idle_stretch_of_a_plain_timeline() -> None:
    """`_Cores` (its gaps in arrays searched and changed by kernels) against a plain list of
    busy intervals: each start is the earliest at or after the ready time where the task
    overlaps none, on every core at once (`finishes`, INF where not feasible) and on one."""
    rng = random.Random(3)
    cores, least = 5, 10
    timeline = _Cores(cores, least)
    busy: list[list[tuple[int, int]]] = [[] for _ in range(cores)]

    def plain(p: int, ready: int, d: int) -> int:
        return min(s for s in [ready, *(e for _, e in busy[p] if e >= ready)]
                   if all(s + d <= a or b <= s for a, b in busy[p]))

    in_gaps = 0
    for _ in range(400):
        d = rng.randint(least, 60)
        ready = np.array([rng.randint(0, 4000) for _ in range(cores)], dtype=np.int64)
        want = [plain(p, int(r), d) for p, r in enumerate(ready.tolist())]
        assert timeline.finishes(ready, d, timeline.everywhere).tolist() == [
            s + d for s in want]
        feasible = np.array([rng.random() < 0.5 for _ in range(cores)])
        assert timeline.finishes(ready, d, feasible).tolist() == [
            s + d if ok else INF for s, ok in zip(want, feasible.tolist(), strict=True)]
        p = rng.randrange(cores)
        s = timeline.earliest_on(p, int(ready[p]), d)
        assert s == want[p]
        in_gaps += s < timeline.last_end[p]
        timeline.occupy(p, s, s + d)
        busy[p].append((s, s + d))
    assert in_gaps > 100  # most tasks went into gaps, not after a core's last task
    assert timeline.gap_start.shape[1] > 16  # the rows grew


def test_peft_without_copies_keeps_every_tile_set_on_one_core() -> None:
    """Pipeline mode without replication takes PEFT's latency schedule as a candidate: it
    must not hold copies (by default this graph's tile sets are copied onto several cores)."""
    target = Target(mesh_rows=4, mesh_cols=4)
    g = random_layered_dag(40, seed=9, width=6)
    tiles = _Tiles(g)

    def homes(r: MergeScheduleResult) -> dict[tuple[int, ...], set[int]]:
        out: dict[tuple[int, ...], set[int]] = {}
        for t, k in enumerate(tiles.key):
            if k:
                out.setdefault(k, set()).add(r.core_of[t])
        return out

    assert max(map(len, homes(peft_schedule(g, target)).values())) > 1
    single = peft_schedule(g, target, copies=False)
    assert validate_schedule(g, target, single) == []
    assert all(len(c) == 1 for c in homes(single).values())


@pytest.mark.parametrize(("seed", "routed_wins"), [(1, True), (5, False)])
def test_xy_yx_plans_xy_only_the_runs_that_did_best_with_routes(seed: int,
                                                                 routed_wins: bool) -> None:
    """Under ``routing = "xy-yx"`` PEFT's candidate runs plan each message's route; only
    the `XY_RUNS` that did best are planned again with every route XY, and the fastest of
    all is returned."""
    target = Target(mesh_rows=4, mesh_cols=4, routing="xy-yx")
    g = random_layered_dag(80, seed=seed, width=12, bytes_range=(2048, 16384))
    g.tile_layer = {w: f"layer{w % 3}" for task in g.tasks for w in task.weights}
    routed, ranked = _list_schedule_runs(g, target, True, True, routes=True)
    assert routed.comm is not None and routed.comm.yx  # some messages take their YX route
    assert len(ranked) > XY_RUNS
    xy, again = _list_schedule_runs(g, target, True, True, only=ranked[:XY_RUNS])
    assert sorted(again) == sorted(ranked[:XY_RUNS])
    assert (routed.estimate_ns < xy.estimate_ns) == routed_wins
    got = peft_schedule(g, target)
    assert got.estimate_ns == min(routed.estimate_ns, xy.estimate_ns)
    assert ("the link planner picked each message's route" in got.notes) == routed_wins
    with pytest.raises(_NoRoom):
        _list_schedule_runs(g, target, True, True, only=["a run that does not exist"])


def _two_layers() -> tuple[ComputeGraph, list[list[int]]]:
    """Two convolution-like layers of 4 rows x 2 column runs each (a lane per run, tiles 0
    and 1; a lane of the second reads the first's lanes of the rows next to its own), then
    an addition per row of the second's two runs (no tiles)."""
    g = ComputeGraph()
    layers: list[list[int]] = []
    for tile in (0, 1):
        lanes = []
        for r, c in itertools.product(range(4), range(2)):
            t = g.add_task(f"l{tile}.{r}.{c}", 100, weights=[tile])
            g.position[t] = (r, 4 * c)
            lanes.append(t)
        layers.append(lanes)
    for r, c in itertools.product(range(4), range(2)):
        for u in layers[0]:
            if abs(g.position[u][0] - r) <= 1:
                f = g.add_fragment(u, 64)
                g.add_edge(u, layers[1][2 * r + c], 64)
                g.add_read(layers[1][2 * r + c], f)
    adds = []
    for r in range(4):
        t = g.add_task(f"add.{r}", 10)
        g.position[t] = (r, 0)
        for u in layers[1][2 * r:2 * r + 2]:
            f = g.add_fragment(u, 64)
            g.add_edge(u, t, 64)
            g.add_read(t, f)
        adds.append(t)
    return g.freeze(), [*layers, adds]


def test_place_by_position_puts_a_layer_in_bands() -> None:
    """Each layer that runs on all four cores of a 2 x 2 mesh: its lanes of rows 0-1 on the
    top cores, 2-3 on the bottom ones, column run c on column c, each core's row by row;
    the additions of a row on the core of one of its runs, the rows of a band spread. A
    layer on three of the cores: in runs of its lanes by position over those three."""
    target = Target(mesh_rows=2, mesh_cols=2, protocol="pimsim-nn")
    g, layers = _two_layers()
    scattered = [0, 1, 2, 3, 3, 2, 1, 0] * 2 + [0] * 4  # two lanes of each layer per core
    start = [100 * (i % 8 // 4) for i in range(8)] + [300 + 100 * (i // 4) for i in range(8)] \
        + [600 + 10 * r for r in range(4)]
    plan = MergeScheduleResult.build(g, target, scattered, start, solver="peft",
                                     status="HEURISTIC")
    placed = place_by_position(g, target, plan)
    assert placed is not None and not validate_schedule(g, target, placed)
    for lanes in layers[:2]:
        for t in lanes:
            r, col = g.position[t]
            assert placed.core_of[t] == r // 2 * 2 + col // 4
    assert [placed.core_of[t] for t in layers[2]] == [0, 1, 2, 3]
    for p in range(4):
        rows = [g.position[t][0] for t in placed.core_tasks[p]]
        assert rows == [p // 2 * 2, p // 2 * 2 + 1] * 2 + [p]  # each layer down its band
    assert placed.summary["messages"] < plan.summary["messages"]
    # a layer on fewer cores than the chip has: its lanes in row-major order, cut into
    # runs of 2, 3 and 3 on its cores 0, 1 and 2
    fewer = place_by_position(g, target, MergeScheduleResult.build(
        g, target, [0, 1, 2, 0, 0, 1, 2, 0] * 2 + [0] * 4, start, solver="peft",
        status="HEURISTIC"))
    assert fewer is not None and not validate_schedule(g, target, fewer)
    for lanes in layers[:2]:
        by_place = sorted(lanes, key=lambda t: g.position[t])
        assert [fewer.core_of[t] for t in by_place] == [0, 0, 1, 1, 1, 2, 2, 2]


def test_share_lone_sets_gives_a_one_core_tile_set_a_second_core() -> None:
    """A layer whose tile set of two crossbars runs its four lanes on core 0 (three
    crossbars a core, all of core 0's taken): core 1, one hop away, makes room by moving
    its one-crossbar set that starts last to the nearest core with a free crossbar (core
    3: core 2 is full), and takes the layer's later two lanes by position."""
    target = Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=3, protocol="pimsim-nn")
    g = ComputeGraph()
    layer = []
    for r in range(4):
        t = g.add_task(f"l.{r}", 100, weights=[0, 1])
        g.position[t] = (r, 0)
        layer.append(t)
    ones = {tile: g.add_task(f"one.{tile}", 50, weights=[tile]) for tile in range(2, 10)}
    g.freeze()
    home = {2: 0, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 8: 3, 9: 3}
    core = [0] * 4 + [home[tile] for tile in ones]
    start = [300, 0, 200, 100] + [400 + 10 * tile for tile in ones]
    plan = MergeScheduleResult.build(g, target, core, start, solver="peft",
                                     status="HEURISTIC")
    shared = share_lone_sets(g, target, plan)
    assert shared is not None and not validate_schedule(g, target, shared)
    assert [shared.core_of[t] for t in layer] == [0, 0, 1, 1]
    assert shared.core_of[ones[4]] == 3 and shared.core_of[ones[3]] == 1
    for p in range(4):
        assert len(set().union(*(g.tasks[t].weights for t in shared.core_tasks[p]))) <= 3
    # no core can make room (every other core full of sets of two): left as it is
    g2 = ComputeGraph()
    for r in range(2):
        g2.position[g2.add_task(f"l.{r}", 100, weights=[0, 1])] = (r, 0)
    for p in range(1, 4):
        g2.add_task(f"two.{p}", 50, weights=[2 * p, 2 * p + 1])
    g2.freeze()
    full = MergeScheduleResult.build(g2, Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=2,
                                                protocol="pimsim-nn"),
                                     [0, 0, 1, 2, 3], [0, 100, 0, 0, 0], solver="peft",
                                     status="HEURISTIC")
    assert share_lone_sets(g2, Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=2,
                                      protocol="pimsim-nn"), full) is None


def _two_sets_one_core() -> tuple[ComputeGraph, list[int], list[int]]:
    """One layer of two tile sets, lanes 0-2 each (set a's lanes 1 ns longer), and the next
    layer, whose row r reads lane r of both sets."""
    g = ComputeGraph()
    a = [g.add_task(f"a.l{r}", 101, weights=[0], batch=0, lane=r) for r in range(3)]
    b = [g.add_task(f"b.l{r}", 100, weights=[1], batch=1, lane=r) for r in range(3)]
    for r in range(3):
        nxt = g.add_task(f"next.l{r}", 10, weights=[2], batch=2, lane=r)
        g.add_edge(a[r], nxt, 64)
        g.add_edge(b[r], nxt, 64)
    g.tile_layer.update({0: "conv", 1: "conv", 2: "conv2"})
    return g.freeze(), a, b


def test_rows_first_runs_a_layers_tile_sets_row_by_row() -> None:
    """On one core, by upward rank set a's three lanes (each 1 ns longer) run before set
    b's first, so the next layer's first row has both its inputs at 403 ns; with the
    layer's lanes at one rank (`layer_ranks`), row by row: at 201."""
    target = Target(mesh_rows=1, mesh_cols=1)
    g, a, b = _two_sets_one_core()
    mesh, tiles = Mesh(target), _Tiles(g)
    rank = upward_rank(g, mesh)
    ranks = layer_ranks(tiles, rank)
    assert len({ranks[t] for t in a + b}) == 1 and ranks[a[0]] == rank[a[0]] > rank[b[0]]
    assert (ranks[6:] == rank[6:]).all()  # the next layer's lanes have one rank already
    by_rank = _ListScheduler(g, target, mesh, tiles, True, None).run()[1]
    rows = _RowsFirst(g, target, mesh, tiles, True, False, True, False).run()[1]
    assert [by_rank[t] for t in a + b] == [0, 101, 202, 303, 403, 503]
    assert [rows[t] for t in (a[0], b[0], a[1], b[1], a[2], b[2])] == [0, 101, 201, 302,
                                                                         402, 503]


def test_layer_ranks_leave_tasks_of_no_known_layer_alone() -> None:
    g = random_layered_dag(40, seed=9, width=6)
    rank = upward_rank(g, Mesh(Target(mesh_rows=2, mesh_cols=2)))
    assert (layer_ranks(_Tiles(g), rank) == rank).all()


@pytest.mark.parametrize(("routing", "protocol"), [("xy", "raptor"), ("xy-yx", "raptor"),
                                                   ("xy", "pimsim-nn")])
def test_exact_ready_walks_each_new_message_on_the_link_table(routing: str,
                                                              protocol: str) -> None:
    """`_ListScheduler.exact_ready` (the kernel `_ready_on`) against a plain walk, before
    every task of a congested run on every core: per read, where the fragment is on the
    core (its producer's or an earlier message's arrival), else its message from the
    producer's core over `raptor.noc.Network.timing`'s route (the YX one where
    `Network.yx_sooner` says so) on the link table, nothing reserved; the latest."""
    from raptor.solver import peft

    g = random_layered_dag(250, 6, width=10, tiles_per_batch=(0, 0)).freeze()
    target = Target(mesh_rows=4, mesh_cols=4, routing=routing, protocol=protocol)
    waited = 0

    def held(hold: np.ndarray, f: int, p: int) -> int | None:
        """Fragment f's arrival on p, if it is there (its producer's entry, then a list)."""
        e = f
        while e >= 0:
            if hold[0, e] == p:
                return int(hold[1, e])
            e = int(hold[2, e])
        return None

    class Checked(peft._ListScheduler):
        def place(self, t: int) -> None:
            nonlocal waited
            net, links = self.net, self.links
            links.commit = False
            for p in range(self.P):
                want = 0
                for f in g.reads[t]:
                    u = g.fragments[f].producer
                    at = held(self.hold, f, p)
                    if at is None:
                        src, end = self.core_of[u], self.end[u]
                        route, ser, transfer = net.timing(src, p, g.fragments[f].bytes)
                        if net.yx_sooner(src, p, ser, end, links):
                            route = net.route(src, p, True)
                        at = net.pass_links(route, ser, transfer, end, links)
                        waited += at > end + transfer
                    want = max(want, at)
                assert self.exact_ready(t, p) == want
            links.commit = True
            super().place(t)

    Checked(g, target, Mesh(target), peft._Tiles(g), True, None,
            routes=routing == "xy-yx").run()
    assert waited > 0  # messages met others on the links


def test_judging_picks_the_least_exact_key_among_the_cores_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`_ListScheduler.judge` (the kernel `_judging`, with its skips, limits and floor)
    against every given core judged in full: its exact key (the score with the exact finish,
    the finish, whether it is not a predecessor's core, whether t's tiles need new slots
    there, the core) from `exact_ready` and the earliest idle stretch; the least wins. (No
    near cores: every task's shortlist is judged from Python.)"""
    from raptor.solver import peft

    monkeypatch.setattr(peft, "NEAR_CORES", 0)

    g = random_layered_dag(300, 8, width=12, tiles_per_batch=(0, 0)).freeze()
    target = Target(mesh_rows=4, mesh_cols=4)
    judged = 0

    class Checked(peft._ListScheduler):
        def judge(self, t, cores, scores, efts, need, fresh, resume=0):  # type: ignore[no-untyped-def]
            nonlocal judged
            keys = []
            if not fresh:  # the best so far competes
                keys.append((tuple(self.state[1:6].tolist()), tuple(self.state[6:8].tolist())))
            d, near = self.cost_of[t], {self.core_of[u] for u, _ in g.preds[t]}
            for p, sc, ef in zip(cores.tolist(), scores.tolist(), efts.tolist(), strict=True):
                if ef < INF:
                    s = self.cores.earliest_on(p, self.exact_ready(t, p), d)
                    keys.append(((sc - ef + s + d, s + d, p not in near, False, p), (p, s)))
            got = super().judge(t, cores, scores, efts, need, fresh, resume)
            if not resume:
                assert got == min(keys)[1]
                judged += len(cores) > 1
            return got

    Checked(g, target, Mesh(target), peft._Tiles(g), True, None).run()
    assert judged > 50
