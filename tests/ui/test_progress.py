"""The live progress line: shown on a terminal (phase, time against the limit, incumbent and
bound when a solver reports them), silent when output is piped or with --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from raptor.cli import main
from raptor.ui.progress import LiveProgress

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_live_line_on_a_terminal_shows_phase_limit_incumbent_and_bound() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with LiveProgress(console) as progress:
        assert progress.live is not None
        progress("compiling")
        assert progress.line().startswith("compiling · 0.")
        progress("CP-SAT: 128 tasks on 64 cores, 2 workers", limit_s=10)
        progress("CP-SAT: 128 tasks on 64 cores, 2 workers", incumbent_ns=51_514,
                 bound_ns=50_958)
        line = progress.line()
        assert " s of 10 s · best 51,514 ns · bound 50,958 ns   (total " in line
        progress.live.refresh()
        progress("simulating the peft schedule")
        assert "of 10 s" not in progress.line() and "best" not in progress.line()
    assert "best 51,514 ns" in buf.getvalue()
    assert progress.live is None


def test_silent_when_not_a_terminal() -> None:
    buf = io.StringIO()
    with LiveProgress(Console(file=buf)) as progress:
        progress("compiling", limit_s=3)
        assert progress.live is None
    assert buf.getvalue() == ""


def test_solve_json_prints_the_report_and_nothing_else(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["solve", str(EXAMPLES / "mlp.onnx"), "--solver", "peft", "--json",
                 "--out", str(tmp_path)])
    cap = capsys.readouterr()
    assert code == 0 and cap.err == ""
    rep = json.loads(cap.out)
    assert rep == json.loads((tmp_path / "report.json").read_text())
    assert rep["seconds"]["outputs"] > 0


@pytest.mark.parametrize("mode", ["latency", "pipeline"])
def test_cpsat_reports_incumbent_and_bound_while_it_searches(mode: str) -> None:
    from raptor.solve import SolveOptions, solve
    from raptor.target import load_target

    calls: list[tuple[str, int | None, int | None]] = []

    def progress(msg: str, /, *, limit_s: float | None = None, incumbent_ns: int | None = None,
                 bound_ns: int | None = None) -> None:
        calls.append((msg, incumbent_ns, bound_ns))

    target = load_target("default")
    opts = SolveOptions(solver="cpsat", mode=mode, time_limit=2.0, simulate=False)
    watched = solve(EXAMPLES / "lenet.onnx", target, opts, progress).runs[0].result
    reports = [c for c in calls if c[0].startswith("CP-SAT") and (c[1] or c[2]) is not None]
    assert reports, calls
    incumbents = [inc for _, inc, _ in reports if inc is not None]
    bounds = [b for _, _, b in reports if b is not None]
    assert incumbents and incumbents == sorted(incumbents, reverse=True)  # improving
    assert max(bounds) <= min(incumbents)
    # observing the search does not change it
    quiet = solve(EXAMPLES / "lenet.onnx", target, opts).runs[0].result
    assert (watched.core_of, watched.core_tasks) == (quiet.core_of, quiet.core_tasks)
