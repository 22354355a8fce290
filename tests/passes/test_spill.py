"""Spilling to shared memory (`raptor.passes.spill`): a core that keeps more than its local
memory stores the value used furthest ahead and loads it back before its next use; the
program verifies, fits, and computes what it computed before."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from raptor.cli import main
from raptor.export import export_pimsim
from raptor.export.pimsim import Export, ExportError
from raptor.ir.ops import LoadOp, StoreOp
from raptor.ir.parser import parse_module
from raptor.ir.verifier import verify_module
from raptor.passes.memory import gather_fits, plan_memory
from raptor.passes.spill import spill
from raptor.sim import SimError, Simulator, simulate
from raptor.target import Target
from raptor.ui.table import memory as table_memory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _row(name: str, row: int) -> str:
    return f"""
    %{name} = spat.scheduled_compute ins() -> tensor<1x256xf32> {{
    ^bb0():
      %l{name} = pim.load %x[{row}, 0] [1, 256] [1, 1] : tensor<4x256xf32> to tensor<1x256xf32>
      %r{name} = pim.relu %l{name} : tensor<1x256xf32>
      spat.yield %r{name} : tensor<1x256xf32>
    }}"""


def _add(name: str, a: str, b: str) -> str:
    return f"""
    %{name} = spat.scheduled_compute ins(%{a} : tensor<1x256xf32>, %{b} : tensor<1x256xf32>)
        -> tensor<1x256xf32> {{
    ^bb0(%p{name}: tensor<1x256xf32>, %q{name}: tensor<1x256xf32>):
      %s{name} = pim.vadd %p{name}, %q{name} : tensor<1x256xf32>
      spat.yield %s{name} : tensor<1x256xf32>
    }}"""


KEEPS = f"""
func.func @main(%x: tensor<4x256xf32>) -> tensor<1x256xf32> {{
  %o = pim.alloc_shared : tensor<1x256xf32>
  pim.core 0 {{{_row("a", 0)}{_row("b", 1)}{_row("c", 2)}{_row("d", 3)}
    {_add("e", "c", "d")}{_add("f", "b", "e")}{_add("g", "a", "f")}
    pim.store %g into %o[0, 0] [1, 256] [1, 1] : tensor<1x256xf32> into tensor<1x256xf32>
  }}
  return %o : tensor<1x256xf32>
}}
"""
"""Core 0 keeps four 256-byte rows (8-bit activations) before it sums them: 1,024 bytes."""


def test_spilled_program_verifies_fits_and_computes_the_same() -> None:
    small = Target(local_memory_bytes=800)
    m = parse_module(KEEPS, "t.spat")
    assert plan_memory(m, small).over_capacity()
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    before = simulate(parse_module(KEEPS, "t.spat"), small, {"x": x})
    sp = spill(m, small)
    assert not verify_module(m) and not sp.unfit
    plan = plan_memory(m, small)
    assert not plan.over_capacity() and plan.peak is not None
    assert plan.peak.peak_bytes <= 800
    core = sp.cores[0]
    # %a is read last: Belady evicts it (stored once, loaded back before the last add)
    assert (core.stores, core.loads, core.stored_bytes) == (1, 1, 256)
    ops = m.main().body.ops[-2].body.ops  # core 0's program (before the return)
    kinds = [type(op) for op in ops]
    assert kinds.index(StoreOp) == 1 and kinds.index(LoadOp) == len(ops) - 3
    after = simulate(m, small, {"x": x})
    want = np.maximum(x, 0).sum(axis=0, keepdims=True)
    for res in (before, after):
        np.testing.assert_allclose(res.outputs[0], want, rtol=1e-5)
    assert after.report.shared_writes == before.report.shared_writes + 1
    assert after.report.latency_ns > before.report.latency_ns


def test_spilling_gives_up_when_one_compute_alone_does_not_fit() -> None:
    tiny = Target(local_memory_bytes=300)
    m = parse_module(KEEPS, "t.spat")
    sp = spill(m, tiny)
    assert sp.unfit == [0] and not verify_module(m)
    assert plan_memory(m, tiny).over_capacity()


def test_shared_memory_holds_the_spills() -> None:
    """The spill buffers are laid out in shared memory: too small a shared memory says so."""
    small = Target(local_memory_bytes=800, shared_memory_bytes=1024 + 256)
    m = parse_module(KEEPS, "t.spat")
    spill(m, small)
    lines = plan_memory(m, small).over_capacity()
    assert len(lines) == 1 and lines[0].startswith("shared memory holds 1,536 bytes")


def test_dense_gather_only_when_it_fits() -> None:
    t = Target()
    assert gather_fits((1, 32, 11, 46), t) and not gather_fits((1, 32, 46, 46), t)


def test_simulator_refuses_a_program_over_capacity() -> None:
    """Unspilled, core 0 holds 1,024 bytes at once: the simulator's capacity check says so;
    spilled, the same check passes."""
    small = Target(local_memory_bytes=800)
    m = parse_module(KEEPS, "t.spat")
    with pytest.raises(SimError, match="exceeds the target's memory: core 0 needs 1,024"):
        Simulator(m, small, check_memory=True)
    spill(m, small)
    Simulator(m, small, check_memory=True)


def test_cli_shared_memory_too_small_is_one_line_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "t.toml"
    toml.write_text('name = "tiny-shared"\nshared_memory_bytes = 64\n')
    code = main(["solve", str(EXAMPLES / "mlp.onnx"), "--solver", "peft", "--no-simulate",
                 "--target", str(toml), "--out", str(tmp_path / "out")])
    err = [line for line in capsys.readouterr().err.splitlines() if "memory" in line]
    assert code == 1 and len(err) == 1
    assert "shared memory holds 256 bytes" in err[0] and "tiny-shared has 64" in err[0]


def test_spilled_program_exports_st_and_ld() -> None:
    """The exporter writes the spill store and load as pimsim-nn `st` / `ld` (one each more
    than the unspilled program, which the exporter refuses at this capacity)."""
    small = Target(local_memory_bytes=800)
    m = parse_module(KEEPS, "t.spat")
    with pytest.raises(ExportError):
        export_pimsim(m, small)
    plain = export_pimsim(parse_module(KEEPS, "t.spat"), Target())
    spill(m, small)
    ex = export_pimsim(m, small)

    def ops(e: Export) -> Counter[str]:
        return Counter(i["op"] for i in e.cores[0].instructions)

    assert ops(ex)["st"] == ops(plain)["st"] + 1 and ops(ex)["ld"] == ops(plain)["ld"] + 1


def test_table_shows_spilled_bytes() -> None:
    mem = {"peak_bytes": 60 * 1024, "capacity_bytes": 64 * 1024, "fits": True,
           "spill": {"bytes": 3 * 1024}}
    assert table_memory({"local_memory": mem}) == "60.0/64 KiB +3.0 KiB spilled"
    mem["spill"] = {"bytes": 0}
    assert table_memory({"local_memory": mem}) == "60.0/64 KiB"


def _stream_row(name: str, row: int) -> str:
    return f"""
      %{name} = spat.scheduled_compute ins() -> tensor<1x256xf32> {{
      ^bb0():
        %l{name} = pim.load %x[%n, {row}, 0] [1, 1, 256] [1, 1, 1]
            : tensor<2x4x256xf32> to tensor<1x256xf32>
        %r{name} = pim.relu %l{name} : tensor<1x256xf32>
        spat.yield %r{name} : tensor<1x256xf32>
      }}"""


STREAM_KEEPS = f"""
func.func @main(%x: tensor<2x4x256xf32>) -> tensor<2x1x256xf32> {{
  %o = pim.alloc_shared : tensor<2x1x256xf32>
  pim.core 0 {{
    pim.stream inferences(2) ring(2) {{
    ^bb0(%n: index, %s: index):{"".join(_stream_row(v, i) for i, v in enumerate("abcd"))}
      {_add("e", "c", "d")}{_add("f", "b", "e")}{_add("g", "a", "f")}
      pim.store %g into %o[%n, 0, 0] [1, 1, 256] [1, 1, 1]
          : tensor<1x256xf32> into tensor<2x1x256xf32>
    }}
  }}
  return %o : tensor<2x1x256xf32>
}}
"""
"""`KEEPS` as a stream of two inferences: each iteration keeps four rows at once."""


def test_stream_program_spills_within_each_inference() -> None:
    """A stream program's iteration is spilled like a program: one spill buffer serves
    every inference (stored and loaded back within it), and each inference computes its
    own sum."""
    small = Target(local_memory_bytes=800)
    m = parse_module(STREAM_KEEPS, "t.spat")
    assert plan_memory(m, small).over_capacity()
    sp = spill(m, small)
    assert not verify_module(m) and not sp.unfit
    assert not plan_memory(m, small).over_capacity()
    assert (sp.cores[0].stores, sp.cores[0].loads) == (1, 1)
    x = np.random.default_rng(1).standard_normal((2, 4, 256)).astype(np.float32)
    res = Simulator(m, small, check_memory=True).run({"x": x})
    np.testing.assert_allclose(res.outputs[0], np.maximum(x, 0).sum(axis=1, keepdims=True),
                               rtol=1e-5)


@pytest.mark.parametrize("text", [KEEPS, STREAM_KEEPS])
def test_exact_eviction_model_moves_the_fewest_bytes(text: str) -> None:
    """The exact model (CP-SAT) frees the 224 bytes over the memory while the last two rows
    are added by storing one 256-byte row once and loading it back once, as Belady does;
    the program verifies, fits and computes the same sums."""
    small = Target(local_memory_bytes=800)
    m = parse_module(text, "t.spat")
    sp = spill(m, small, exact=True)
    assert not verify_module(m) and not sp.unfit and not plan_memory(m, small).over_capacity()
    assert (sp.cores[0].stores, sp.cores[0].loads, sp.bytes) == (1, 1, 512)
    shape = (4, 256) if text is KEEPS else (2, 4, 256)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    res = Simulator(m, small, check_memory=True).run({"x": x})
    np.testing.assert_allclose(res.outputs[0], np.maximum(x, 0).sum(axis=-2, keepdims=True),
                               rtol=1e-5)
