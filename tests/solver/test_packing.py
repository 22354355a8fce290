"""The packing period bound (`raptor.solver.pipeline.packing`): a true lower bound on the
least makespan of tasks on cores (checked against exhaustive search), tight where lumpy
lanes cannot pair up."""

from __future__ import annotations

import itertools
import random

from raptor.solver.pipeline.packing import packing_bound


def _optimum(costs: list[int], cores: int) -> int:
    """Least makespan by trying every assignment (small instances)."""
    best = sum(costs)
    for assign in itertools.product(range(cores), repeat=len(costs)):
        loads = [0] * cores
        for c, k in zip(costs, assign, strict=True):
            loads[k] += c
        best = min(best, max(loads))
    return best


def test_packing_bound_never_exceeds_the_optimal_makespan() -> None:
    rng = random.Random(7)
    for _ in range(60):
        cores = rng.randint(2, 3)
        costs = [rng.choice([rng.randint(1, 40), rng.randint(30, 60)])
                 for _ in range(rng.randint(3, 8))]
        work = -(-sum(costs) // cores)
        b = packing_bound(costs, cores, max(work, max(costs)))
        assert max(work, max(costs)) <= b <= _optimum(costs, cores), (costs, cores)


def test_lumpy_lanes_raise_the_bound_to_what_a_packing_reaches() -> None:
    """LeNet's lanes on 64 cores: three conv1 lanes never share a core and two leave no room
    for a conv2 lane, so work / cores (20,836 ns) cannot be reached; two conv1 lanes and a
    6,598 ns lane (25,612 ns) can, with the 6,836 ns lanes three to a core."""
    costs = [9507] * 112 + [6836] * 20 + [6598] * 20
    work = -(-sum(costs) // 64)
    assert packing_bound(costs, 64, work) == 2 * 9507 + 6598
    assert packing_bound([10] * 64, 64, 10) == 10  # work / cores is reached: unchanged
