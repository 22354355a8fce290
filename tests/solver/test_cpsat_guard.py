"""CP-SAT refuses to build models too large to be useful and says why."""

from __future__ import annotations

from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import validate_schedule
from raptor.solver.generate import random_layered_dag
from raptor.solver.peft import peft_schedule
from raptor.target import load_target


def test_oversized_model_returns_heuristic_with_reason() -> None:
    target = load_target("default")
    graph = random_layered_dag(120, seed=3)
    peft = peft_schedule(graph, target)
    res = cpsat_schedule(graph, target, CpSatOptions(time_limit=1, num_workers=1,
                                                     max_model_pairs=100), initial=peft)
    assert res.status.startswith("NOT RUN") and "max_model_pairs=100" in res.status
    assert res.core_of == peft.core_of and res.makespan_ns == peft.makespan_ns
    assert validate_schedule(graph, target, res) == []
