"""Hostile IR text and API misuse end in one clear diagnostic, fast, without a traceback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raptor.ir.builder import new_func
from raptor.ir.types import MAX_ELEMENTS, tensor

from .spat_util import EXAMPLE, run_cli


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "fuzz.spat"
    p.write_text(text)
    return p


def test_a_huge_lane_count_is_rejected_at_once(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, EXAMPLE.read_text().replace("lanes(2)", "lanes(100000000)"))
    assert p.stat().st_size < 1024
    t0 = time.perf_counter()
    code, _, err = run_cli(capsys, "verify", str(p))
    assert time.perf_counter() - t0 < 5
    assert code == 1
    assert f"{p}:2:8: error: [GCB-3] result 0 dimension 0 is 2 but the batch has 100000000 " \
           "lanes" in err


@pytest.mark.parametrize("spelling", ["tensor<100000x100000x16xf32>",
                                      "tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x2xf32>",
                                      "tensor<99999999999999999999x1xf32>"])
def test_a_huge_tensor_type_is_rejected_before_allocation(
        spelling: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, EXAMPLE.read_text().replace("tensor<16x4xf32>", spelling, 1))
    code, _, err = run_cli(capsys, "verify", str(p))
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{p}:1:21: error: [TYPE-0] type '")
    assert "too large" in first or f"more than {MAX_ELEMENTS} elements" in first
    assert "Traceback" not in err


def test_a_slice_of_the_wrong_rank_is_slice1_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = EXAMPLE.read_text().replace("%in[0, 2*%lane] [16, 1] [1, 1]",
                                       "%in[0, 2*%lane, 0] [16, 1, 1] [1, 1, 1]")
    code, _, err = run_cli(capsys, "verify", str(write(tmp_path, text)))
    assert code == 1
    assert "[SLICE-1] slice has 3 offsets, 3 sizes and 3 strides for a rank-2 tensor" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("text", ["9" * 30, "\u00b2", "\x7f"])
def test_odd_numbers_and_characters_are_syntax_errors(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, EXAMPLE.read_text().replace("lanes(2)", f"lanes({text})"))
    code, _, err = run_cli(capsys, "verify", str(p))
    assert code == 2
    assert err.startswith(f"{p}:2:") and "Traceback" not in err


def test_builder_concat_rejects_what_it_cannot_build() -> None:
    f, b = new_func("main", [("x", tensor(2, 3)), ("y", tensor(3))], [tensor(2, 3)])
    with pytest.raises(ValueError, match=r"cannot concatenate \(tensor<2x3xf32>, "
                                         r"tensor<3xf32>\) along dimension 1"):
        b.concat(f.args, 1)
    with pytest.raises(ValueError, match="along dimension 2"):
        b.concat([f.args[0]], 2)
    with pytest.raises(ValueError, match=r"cannot concatenate \(\)"):
        b.concat([], 0)


def test_a_million_lanes_and_slots_verify_in_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = 1_000_000
    x, frags = f"tensor<{n}xf32>", f"tensor<{n}x1xf32>"
    p = write(tmp_path, f"""func.func @main(%x: {x}) -> {x} {{
  %p = spat.graph_compute_batch lanes({n}) ins(%x : {x}) -> {frags} {{
  ^bb0(%lane: index, %in: {x}, %out: {frags}):
    %a = tensor.extract_slice %in[%lane] [1] [1] : {x} to tensor<1xf32>
    spat.parallel_insert_slice %a into %out[%lane, 0] [1, 1] [1, 1] : tensor<1xf32> into {frags}
  }}
  %y = spat.blueprint %p : {frags} -> {x} coverage(complete) conflict(disjoint) {{
    slot %s in 0..{n} -> [-1*%s+{n - 1}] sizes [1] strides [1]
  }}
  return %y : {x}
}}
""")
    t0 = time.perf_counter()
    code, out, err = run_cli(capsys, "verify", str(p))
    assert (code, err) == (0, ""), err
    assert "ok" in out
    assert time.perf_counter() - t0 < 10
