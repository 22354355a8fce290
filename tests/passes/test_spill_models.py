"""Spilling on a real ONNX model: examples/mobilenet_block.onnx on a 2×2 mesh with 10 KiB
of local memory per core holds more live rows on some cores than the memory does; the flow
control cannot fit them by placing receives, so values are spilled to shared memory. The
program verifies, fits at every instant (the simulator's capacity check), computes
onnxruntime's numbers, and the estimate prices the spills in the flow the program was built
with (-0.2 % of the simulation; 5.8 % above when the replay decided its flow again);
pimsim-nn (PIMSIM_NN) runs its export unpatched."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor.export import export_pimsim, write_export
from raptor.export.runner import chiptest, run_chiptest
from raptor.ir.verifier import verify_module
from raptor.passes.memory import plan_memory
from raptor.solve import ScheduleRun, SolveOptions, solve
from raptor.target import Target
from tests.export.test_export import mirror

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = EXAMPLES / "mobilenet_block.onnx"
SMALL = Target(name="2x2-10KiB", mesh_rows=2, mesh_cols=2, local_memory_bytes=10 * 1024)
PIMSIM = chiptest()


@pytest.fixture(scope="module")
def spilled() -> ScheduleRun:
    s = solve(MODEL, SMALL, SolveOptions(solver="peft"))
    assert s.oracle == "onnxruntime"
    return s.runs[0]


def test_a_real_model_spills_fits_and_computes_onnxruntimes_numbers(spilled: ScheduleRun
                                                                     ) -> None:
    run = spilled
    assert run.ok and run.numerics and all(ok for *_, ok in run.numerics.values())
    assert run.spill is not None and run.spill.bytes > 0 and not run.spill.unfit
    assert not verify_module(run.scheduled)
    plan = plan_memory(run.scheduled, SMALL)
    assert not plan.over_capacity()
    assert max(c.peak_bytes for c in plan.cores.values()) <= SMALL.local_memory_bytes
    assert sum(run.spill_ns.values()) > 0
    assert run.sim is not None
    sim_ns = run.sim.report.latency_ns
    assert abs(run.estimate_ns - sim_ns) <= 0.02 * sim_ns


@pytest.mark.skipif(PIMSIM is None, reason="set PIMSIM_NN=/path/to/ChipTest")
def test_pimsim_runs_the_spilling_program(spilled: ScheduleRun, tmp_path: Path) -> None:
    """The export carries the spills as `st`/`ld`; pimsim-nn runs it to the end, and
    Raptor's simulator under pimsim-nn's model is within 0.2 % of it."""
    assert PIMSIM is not None
    m = spilled.scheduled
    ex = export_pimsim(m, SMALL)
    got = run_chiptest(PIMSIM, write_export(ex, tmp_path), timeout_s=600)
    assert set(got.finish_ns) >= {c for c, p in ex.cores.items() if p.instructions}
    assert abs(mirror(m, ex) - got.latency_ns) <= 2e-3 * got.latency_ns


def test_its_stream_spills_within_each_inference() -> None:
    """Pipeline mode on the same target: the stream program spills inside its loop body,
    fits at every instant and computes every inference's outputs; the period estimate
    carries the spills."""
    s = solve(MODEL, SMALL,
              SolveOptions(mode="pipeline", solver="pipeline", stream=2))
    run = s.runs[0]
    assert run.ok and run.inference_numerics
    assert all(ok for inf in run.inference_numerics for *_, ok in inf.values())
    assert run.spill is not None and run.spill.bytes > 0 and not run.spill.unfit
    assert not plan_memory(run.scheduled, SMALL).over_capacity()
    assert sum(run.spill_ns.values()) > 0
