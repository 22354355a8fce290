"""The search's acceptance rule, checked through the replay: a window's solution is timed
from the incumbent's plan (a move that changes nothing replays the same), and a schedule is
kept only when its replay scores better, a plateau move (same makespan, earlier task ends)
included, a slower one never."""

from __future__ import annotations

import random

from raptor.solver import ComputeGraph, peft_schedule, validate_schedule
from raptor.solver.comm import replay
from raptor.solver.generate import random_layered_dag
from raptor.solver.lns import _candidate, _Context, _neighbourhood, _Window, lns_schedule, score
from raptor.target import Target

MESH = Target(mesh_rows=3, mesh_cols=3, crossbars_per_core=6)


def graph(seed: int) -> ComputeGraph:
    return random_layered_dag(60, seed=seed, width=8, bytes_range=(2000, 20000),
                              tiles_per_batch=(0, 2))


def test_a_window_solution_without_a_move_replays_as_the_incumbent() -> None:
    for seed in range(4):
        g = graph(seed)
        ctx = _Context(g, MESH, peft_schedule(g, MESH))
        _, free, cands = _neighbourhood(ctx, random.Random(seed), 12)
        window = _Window(ctx, free, cands)
        cand, rep = _candidate(ctx, window, list(ctx.best.core_of), list(window.hint))
        assert cand is None  # not better: the same
        assert (rep.start, rep.end) == (ctx.rep.start, ctx.rep.end)


def test_only_better_scores_are_kept_plateau_moves_included() -> None:
    plateau = 0
    for seed in range(6):
        g = graph(seed)
        peft = peft_schedule(g, MESH)
        best, stats = lns_schedule(g, MESH, peft, 0.3, seed=seed)
        assert validate_schedule(g, MESH, best) == []
        before = score(replay(g, MESH, peft.core_of, peft.core_tasks, peft.start_ns))
        after = score(replay(g, MESH, best.core_of, best.core_tasks, best.start_ns))
        assert after[0] == best.estimate_ns <= peft.estimate_ns  # never slower
        assert (after < before) if stats.kept else (best is peft)
        plateau += stats.plateau
    assert plateau > 0
