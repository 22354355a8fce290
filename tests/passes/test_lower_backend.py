"""ONNX's backend node cases through the whole graph pipeline: import, layout planning,
lowering (crossbar tiles, lanes), canonicalization (N x F + Blueprint), verification and the
IR interpreter, against the cases' expected outputs at rtol 1e-3. Cases the frontend rejects
are listed (with their reason) in tests/frontend/test_onnx_backend.py."""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import onnx
import pytest
from frontend.test_onnx_backend import UNSUPPORTED
from onnx_cases import OnnxCase, node_cases

from raptor.cli import main
from raptor.driver import ir_inputs
from raptor.frontend import import_onnx
from raptor.ir.interpreter import Interpreter
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import crossbars_needed, lower
from raptor.rewrite.canonicalize import canonicalize
from raptor.target import load_target

SUPPORTED = [c for c in node_cases() if not any(fnmatch(c.name, p) for p in UNSUPPORTED)]


def test_every_supported_case_is_covered() -> None:
    ops = {c.op for c in SUPPORTED}
    assert len(SUPPORTED) >= 190
    for op in ("Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "Resize",
               "Concat", "Split", "Slice", "Softmax", "PRelu", "BatchNormalization"):
        assert op in ops


@pytest.mark.parametrize("case", SUPPORTED, ids=lambda c: c.name)
def test_backend_case_through_graph_ir(case: OnnxCase) -> None:
    target = load_target("default")
    graph = import_onnx(case.model)
    _, layouts = select_layouts(graph)
    low = lower(graph, target, layouts)
    assert verify_module(low.module, allow_assembly=True) == []
    canonicalize(low.module)
    assert verify_module(low.module) == []
    feeds = {k: np.asarray(v) for k, v in case.inputs.items()}
    got = Interpreter(low.module).run(ir_inputs(graph, feeds))
    for v, g in zip(graph.outputs, got, strict=True):
        np.testing.assert_allclose(g, case.outputs[v.name], rtol=1e-3, atol=1e-4)


ONE_PER_OP = list({c.op: c for c in SUPPORTED}.values())


@pytest.mark.parametrize("case", ONE_PER_OP, ids=lambda c: c.name)
def test_interpret_check_cli(case: OnnxCase, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """`raptor interpret MODEL.onnx --inputs X.npz --check` on one case per operator."""
    model = tmp_path / "m.onnx"
    onnx.save(case.model, model)
    np.savez(tmp_path / "x.npz", **{k: np.asarray(v) for k, v in case.inputs.items()})
    code = main(["interpret", str(model), "--inputs", str(tmp_path / "x.npz"), "--check",
                 "--out", str(tmp_path / "y.npz")])
    assert code == 0, capsys.readouterr().err
    with np.load(tmp_path / "y.npz") as y:
        for name, want in case.outputs.items():
            np.testing.assert_allclose(y[name], want, rtol=1e-3, atol=1e-4)


MATRIX = [c for c in SUPPORTED if c.op in ("Conv", "ConvTranspose", "Gemm", "MatMul")]


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: c.name)
def test_crossbars_are_counted_before_lowering(case: OnnxCase) -> None:
    """`lower` refuses a target on `crossbars_needed` before building any tile: the count
    must be the tiles lowering builds, for any crossbar size."""
    graph = import_onnx(case.model)
    for rows, cols in ((128, 128), (5, 3), (1, 2)):
        target = replace(load_target("default"), crossbar_rows=rows, crossbar_cols=cols,
                         crossbars_per_core=65536)
        assert crossbars_needed(graph, target) == lower(graph, target).crossbars
