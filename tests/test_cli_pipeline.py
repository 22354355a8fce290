"""`raptor solve --mode pipeline` end to end on a small example: report fields, files, the
numerics of every inference, the scheduled stream program verified and interpreted from the
command line; bad input gets one line and the right exit code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from raptor.cli import main
from raptor.solver.pipeline import PipelineCapacityError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_pipeline_solve_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    # --no-spread: the judge returns the heuristic's partition, not a one-stage spread
    # six inferences: mlp has three stages, so the period is the median of three intervals
    # after the fill, which the last (shorter: no inference behind it) does not decide
    code, stdout, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--mode", "pipeline",
                             "--stream", "6", "--workers", "1", "--time-limit", "5",
                             "--no-spread", "--out", str(out)], capsys)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert rep["mode"] == "pipeline" and rep["inferences"] == 6
    assert set(rep["schedules"]) == {"pipeline", "cpsat"}
    for name, s in rep["schedules"].items():
        assert s["valid"] and s["simulation_error"] is None
        assert s["numerics"]["ok"] and s["numerics"]["inferences"] == 6
        assert len(s["numerics"]["per_inference"]) == 6
        assert all(p["ok"] for p in s["numerics"]["per_inference"])
        assert s["period_ns"] >= s["memory_service_ns"]  # the queued play, at least the service
        if s["ideal_simulated_period_ns"] is not None:  # the ideal stream long enough to tell
            assert s["ideal_simulated_period_ns"] == s["ideal_period_ns"]  # = ideal run
            assert s["simulated_period_ns"] >= s["ideal_simulated_period_ns"] > 0
        assert s["throughput_per_s"] == round(1e9 / s["simulated_period_ns"], 3)
        assert len(s["inference_end_ns"]) == 6 and s["latency_in_pipeline_ns"] > 0
        assert s["simulated_ns"] == s["inference_end_ns"][0]
        assert [set(st) >= {"groups", "cores", "span_ns", "crossbars"} for st in s["stages"]]
        assert sum(len(st["cores"]) for st in s["stages"]) == s["cores_used"]
        assert s["crossbars_used"] == sum(st["crossbars"] for st in s["stages"])
        assert isinstance(s["replicated"], list) and s["bound_ns"] is not None
        assert s["solver_period_ns"] >= s["bound_ns"]
        with np.load(out / f"outputs.{name}.npz") as o:  # inference 0, by output name
            assert list(o.files) == ["gemm11"] and o["gemm11"].shape == (1, 10)
    cp = rep["schedules"]["cpsat"]  # its optimum, or the heuristic's partition kept as faster
    assert cp["status"] == "OPTIMAL" or (cp["status"] == "NOT_USED" and
                                         cp["status_detail"].startswith(
                                             "after a search that ended OPTIMAL"))
    assert rep["schedules"]["cpsat"]["solver_period_ns"] <= \
        rep["schedules"]["pipeline"]["solver_period_ns"]
    assert "estimated period" in " ".join(stdout.split()) and "pipeline" in stdout
    trace = json.loads((out / "trace.pipeline.json").read_text())
    named = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert any(n.endswith(" #0") for n in named) and any(n.endswith(" #5") for n in named)
    assert "S1 core" in (out / "gantt.pipeline.svg").read_text()
    spat = str(out / "scheduled.pipeline.spat")
    assert main(["verify", spat, "-q"]) == 0
    assert "pim.stream inferences(6) ring(2)" in Path(spat).read_text()
    # the written stream program interprets to the simulated outputs of every inference
    x = np.load(EXAMPLES / "mlp.npz")
    xs = np.stack([x[k] for k in x.files][:1] * 6)
    np.savez(tmp_path / "x.npz", xs)
    assert main(["interpret", spat, "--inputs", str(tmp_path / "x.npz"), "--out",
                 str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as y, np.load(out / "outputs.pipeline.npz") as o:
        np.testing.assert_array_equal(y["result0"][0], o["gemm11"])
    # the stream exports to pimsim-nn unrolled (tests/export/test_stream.py); at most the
    # inferences it has inputs for
    code, out_text, _ = run(["export", "--pimsim", str(tmp_path / "px"), spat], capsys)
    assert code == 0 and "pimsim-nn instructions" in out_text
    code, _, err = run(["export", "--pimsim", str(tmp_path / "px"), spat, "--inferences", "7"],
                       capsys)
    assert code == 2 and err.strip() == ("--inferences applies to a stream program (pipeline "
                                         "mode) and must be 1..6 (the inferences it has "
                                         "inputs for), got 7")


@pytest.mark.parametrize(("args", "line"), [
    (["--solver", "peft"],
     "--mode pipeline has no solver 'peft'; valid solvers: pipeline, cpsat, both"),
    (["--stream", "0"], "--stream must be at least 1 inference, got 0"),
    (["--stream", "-3"], "--stream must be at least 1 inference, got -3"),
    (["--export-inferences", "2"],
     "--export-inferences applies to --mode pipeline with --export-pimsim"),
    (["--export-pimsim", "px", "--stream", "3", "--export-inferences", "4"],
     "--export-inferences must be 1..3 (the inferences of --stream), got 4"),
    (["--export-order-steps", "1"], "--export-order-steps applies to --export-pimsim"),
])
def test_bad_pipeline_options_one_line_exit_2(args: list[str], line: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--mode", "pipeline", *args,
                        "--out", str(tmp_path)], capsys)
    assert code == 2 and err.strip() == line


def test_latency_mode_refuses_pipeline_options(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    for args, line in ((["--solver", "pipeline"], "--mode latency has no solver 'pipeline'; "
                        "valid solvers: peft, cpsat, both"),
                       (["--stream", "4"], "--stream applies to --mode pipeline (a stream of "
                        "inferences)")):
        code, _, err = run(["solve", str(EXAMPLES / "mlp.onnx"), *args, "--out",
                            str(tmp_path)], capsys)
        assert code == 2 and err.strip() == line


def test_target_too_small_for_the_pipeline_exit_1(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "tiny.toml"
    small.write_text("mesh = [1, 2]\ncrossbars_per_core = 2\n")
    code, _, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--mode", "pipeline",
                        "--target", str(small), "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert err.strip().endswith("model needs 10 crossbars of 128x128 but target 'tiny' has "
                                "2 cores x 2 crossbars = 4")


def test_pipeline_capacity_error_is_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """What the pipeline solvers find unplaceable (e.g. split units holding shared tiles
    twice) is a compile failure with the numbers, not a usage error."""
    message = ("the pipeline needs 12 crossbars but the target has 2 cores x 4 crossbars = 8, "
               "even with every stage on its own cores")

    def refuse(*_: object, **__: object) -> None:
        raise PipelineCapacityError(message)

    monkeypatch.setattr("raptor.solve.build_problem", refuse)
    code, _, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--mode", "pipeline",
                        "--out", str(tmp_path)], capsys)
    assert code == 1 and err.strip() == f"{EXAMPLES / 'mlp.onnx'}: {message}"
