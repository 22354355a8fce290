"""`benchmarks/sim_identity.py`, the check that a simulator change keeps every result: it
must see equal runs as equal and name the field that differs."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_sim import build
from benchmarks.sim_identity import differences, dump


def _dumped(programs: Path, out: Path) -> dict[str, Any]:
    dump(programs, out)
    with open(out, "rb") as f:
        got: dict[str, Any] = pickle.load(f)
    return got


def test_equal_runs_are_identical_and_a_changed_output_is_named(tmp_path: Path) -> None:
    module = build(2, 1)
    (tmp_path / "syn.lat.spat").write_text(module.print())
    np.savez(tmp_path / "syn.lat.weights.npz", **module.constants)  # type: ignore[arg-type]
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    np.savez(tmp_path / "syn.lat.inputs.npz", x=x)
    a = _dumped(tmp_path, tmp_path / "a.pkl")
    b = _dumped(tmp_path, tmp_path / "b.pkl")
    assert set(a["syn.lat"]) == {"default", "ideal", "buffered", "free", "pimsim",
                                 "pimsim-export"}
    assert differences(a, b) == []
    rep, timing, outs, *rest = b["syn.lat"]["ideal"]
    b["syn.lat"]["ideal"] = (rep, timing, [outs[0][:-1] + bytes([outs[0][-1] ^ 1])], *rest)
    assert differences(a, b) == ["syn.lat ideal: outputs differ"]
    # the exchange deadlocks under pimsim-nn's blocking receives: the export refuses it,
    # and a different refusal is a difference too
    assert b["syn.lat"]["pimsim-export"][0] == "error"
    b["syn.lat"]["pimsim-export"] = ("error", "another reason")
    assert differences(a, b)[1].startswith("syn.lat pimsim-export: ")
