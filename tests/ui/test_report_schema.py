"""report.json against docs/report.schema.json, and `status` as one word of a documented
set (`raptor.solve.STATUSES`) for what every solver can say, the words in
`status_detail`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from raptor.cli import main
from raptor.solve import STATUSES, schedule_status
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.generate import random_layered_dag
from raptor.solver.peft import peft_schedule
from raptor.solver.pipeline import (
    CpSatPipelineOptions,
    build_problem,
    cpsat_pipeline,
    heuristic_pipeline,
)
from raptor.target import Target

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())


def test_the_schema_is_valid_and_lists_every_status() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$defs"]["status"]["enum"] == list(STATUSES)


@pytest.mark.parametrize("mode", ["latency", "pipeline"])
def test_reports_follow_the_schema(mode: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    # without the spread candidates the heuristic's row returns its partition (HEURISTIC)
    # (8 inferences: a stream of 2 is too short to tell a period)
    extra = ["--stream", "8", "--no-spread"] if mode == "pipeline" else []
    assert main(["solve", str(ROOT / "examples" / "mlp.onnx"), "--mode", mode, "--workers", "1",
                 "--time-limit", "2", "--out", str(tmp_path), *extra]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(rep, SCHEMA)
    words = {s["status"] for s in rep["schedules"].values()}
    assert words <= set(STATUSES) and "HEURISTIC" in words
    stdout = capsys.readouterr().out
    for name, s in rep["schedules"].items():  # the status line keeps the prose
        assert f"{name}: {s['status']}" in stdout


def statuses(graph_seed: int = 7) -> dict[str, tuple[str, str]]:
    """What the latency solvers say in each case, as report.json words (seed 7: a graph
    whose whole model CP-SAT proves optimal within the limit, so no window search runs and
    the whole model's status stands)."""
    g = random_layered_dag(40, seed=graph_seed, width=6)
    mesh = Target(mesh_rows=4, mesh_cols=4)
    peft = peft_schedule(g, mesh)
    cases = {
        "peft": peft,
        "solved": cpsat_schedule(g, mesh, CpSatOptions(time_limit=1, num_workers=1),
                                 initial=peft),
        "no solution": cpsat_schedule(g, mesh, CpSatOptions(time_limit=1e-6), initial=peft),
    }
    return {k: schedule_status(r.status, r.notes) for k, r in cases.items()}


def test_every_solver_outcome_is_one_documented_word() -> None:
    got = statuses()
    assert got["peft"] == ("HEURISTIC", "")
    assert got["solved"][0] in ("OPTIMAL", "FEASIBLE")
    assert "units of deterministic time (time limit 1 s x 0.05 units per second" in \
        got["solved"][1]
    assert got["no solution"][0] == "NO_SOLUTION" and "hint verified" in got["no solution"][1]
    assert got["no solution"][1].startswith("after a search that ended ")  # one verdict
    for word, detail in got.values():
        assert word in STATUSES and " s of search" not in detail


def test_a_schedule_kept_over_a_slower_search_result_is_not_used() -> None:
    text = ("FEASIBLE after 0.10 of its 0.1 units of deterministic time; its best plan "
            "(90 ns) replays at 120 ns under the communication model, the PEFT schedule at "
            "100 ns, which is returned")
    assert schedule_status(text, []) == ("NOT_USED", f"after a search that ended {text}")


def test_a_kept_hint_reads_as_one_verdict_and_how_the_search_ended() -> None:
    # LeNet's pipeline CP-SAT row: an optimal partition that realizes slower than the hint
    note = ("CP-SAT's partition realizes at 32,315 ns after packing, the hint at 26,152 ns: "
            "the hint's realization is kept")
    assert schedule_status("OPTIMAL", ["model: 10 variables", note]) == \
        ("NOT_USED", f"after a search that ended OPTIMAL; {note}")
    # a heuristic's row whose partition another candidate beats: it did not search
    text = ("HEURISTIC (the heuristic's partition simulates at 90 ns, one stage spread over "
            "every core at 80 ns, which is returned)")
    assert schedule_status(text, []) == ("NOT_USED", text[11:-1])


def test_pipeline_model_outcomes() -> None:
    g = random_layered_dag(30, 1, width=4, max_lanes=4, tiles_per_batch=(0, 2))
    pr = build_problem(g, Target(mesh_rows=2, mesh_cols=3), max_groups=10)
    heur = heuristic_pipeline(pr)
    late = cpsat_pipeline(pr, True, CpSatPipelineOptions(time_limit=1e-9, num_workers=1,
                                                         dp_bound=False), initial=heur)
    assert schedule_status(heur.status, heur.notes) == ("HEURISTIC", "")
    assert schedule_status(late.status, late.notes)[0] == "NO_SOLUTION"


def test_an_interrupted_search_says_so_and_what_it_returned() -> None:
    assert schedule_status("FEASIBLE after 0.2 of its 3 units", [], interrupted=True) == \
        ("INTERRUPTED", "Ctrl-C ended the search: after 0.2 of its 3 units")
    word, detail = schedule_status("UNKNOWN: the search registered no solution of its own",
                                   [], interrupted=True)
    assert word == "INTERRUPTED" and detail.startswith("Ctrl-C ended the search; NO_SOLUTION")
