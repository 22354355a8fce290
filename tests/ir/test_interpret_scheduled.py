"""The scheduled IR `raptor solve` writes is runnable: `raptor interpret` of it (core programs,
channels, shared memory) reproduces the simulator's outputs bit for bit on every example."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raptor.driver import InputOptions, import_with_inputs
from raptor.ir.interpreter import Interpreter

from .spat_util import ROOT, parse_checked, run_cli

EXAMPLES = sorted((ROOT / "examples").glob("*.onnx"))


@pytest.mark.parametrize("model", EXAMPLES, ids=lambda p: p.stem)
def test_interpret_of_the_written_scheduled_ir_equals_the_simulation(
        model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = import_with_inputs(model, InputOptions())[1].data
    np.savez(tmp_path / "x.npz", **inputs)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "solve", str(model), "--solver", "peft", "--inputs",
                           str(tmp_path / "x.npz"), "--out", str(out))
    assert code == 0, err
    code, _, err = run_cli(capsys, "interpret", str(out / "scheduled.peft.spat"), "--inputs",
                           str(tmp_path / "x.npz"), "--out", str(tmp_path / "y.npz"))
    assert (code, err) == (0, "")
    with np.load(tmp_path / "y.npz") as got, np.load(out / "outputs.peft.npz") as want:
        assert len(got.files) == len(want.files) >= 1
        for i, name in enumerate(want.files):
            a, b = got[f"result{i}"], want[name]
            assert a.shape == b.shape and a.dtype == b.dtype
            assert a.tobytes() == b.tobytes(), f"{name}: max diff {np.abs(a - b).max()}"


T, C = "tensor<16x4xf32>", "tensor<16x1xf32>"
PROGRAM = f"""func.func @main(%x: {T}) -> {T} {{
  %res = pim.alloc_shared : {T}
  pim.core 4 {{
    %back = pim.load %res[0, 1] [16, 1] [1, 1] : {T} to {C}
    pim.store %back into %res[0, 3] [16, 1] [1, 1] : {C} into {T}
  }}
  pim.core 1 {{
    %t = spat.channel_receive from core(0) channel(0) : {C}
    pim.store %t into %res[0, 0] [16, 1] [1, 1] : {C} into {T}
  }}
  pim.core 0 {{
    %a = pim.load %x[0, 0] [16, 2] [1, 1] : {T} to tensor<16x2xf32>
    %s = spat.scheduled_compute ins(%a : tensor<16x2xf32>) -> {C} {{
    ^bb0(%in: tensor<16x2xf32>):
      %l = tensor.extract_slice %in[0, 0] [16, 1] [1, 1] : tensor<16x2xf32> to {C}
      %r = tensor.extract_slice %in[0, 1] [16, 1] [1, 1] : tensor<16x2xf32> to {C}
      %v = pim.vadd %l, %r : {C}
      spat.yield %v : {C}
    }}
    spat.channel_send %s to core(1) channel(0) : {C}
  }}
  pim.core_batch cores [2, 3] {{
  ^bb0(%lane: index):
    %z = pim.load %x[0, %lane+2] [16, 1] [1, 1] : {T} to {C}
    pim.store %z into %res[0, %lane+1] [16, 1] [1, 1] : {C} into {T}
  }}
  return %res : {T}
}}
"""


def test_core_programs_run_in_the_order_their_data_allows() -> None:
    """Core 4 reads back what the core batch stores (it waits for the store), core 1
    receives the sum core 0 computes (it waits for the send)."""
    module = parse_checked(PROGRAM)
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    (y,) = Interpreter(module).run([x])
    np.testing.assert_array_equal(y, np.stack([x[:, 0] + x[:, 1], x[:, 2], x[:, 3], x[:, 2]],
                                              axis=1))


def test_cores_waiting_on_each_other_are_a_deadlock(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "dead.spat"
    p.write_text(f"""func.func @main(%x: {C}) -> {C} {{
  pim.core 0 {{
    %r = spat.channel_receive from core(1) channel(0) : {C}
    spat.channel_send %r to core(1) channel(1) : {C}
  }}
  pim.core 1 {{
    %q = spat.channel_receive from core(0) channel(1) : {C}
    spat.channel_send %q to core(0) channel(0) : {C}
  }}
  return %x : {C}
}}
""")
    np.savez(tmp_path / "x.npz", x=np.zeros((16, 1), np.float32))
    code, _, err = run_cli(capsys, "interpret", str(p), "--inputs", str(tmp_path / "x.npz"))
    assert code == 1
    assert err.startswith(f"{p}:2:3: error: [INTERP-3] the core programs deadlock: core 0 at "
                          f"{p}:4:5 (spat.channel_send) waits for %r from core 1 channel 0; "
                          f"core 1 at {p}:8:5 (spat.channel_send) waits for %q from core 0 "
                          "channel 1")
