"""ONNX operator conformance, core tier: `raptor interpret` on onnx's own node test cases.

Each case of onnx's reference generators (``onnx.backend.test.case.node``, seeded) is written
as the model it is, every operand a graph input, with the test's own inputs in an .npz; then
``python -m raptor.cli interpret MODEL.onnx --inputs X.npz --out Y.npz`` runs (in-process,
the same code path) and its outputs are compared with the case's expected outputs (rtol
1e-3, atol 1e-5, the backend suite's tolerance). Weights, shape operands and other
parameters arrive as graph inputs and are bound as constants by ``--inputs``.

Usage: ``python -m benchmarks.bench_conformance [--markdown] [--failures] [OP ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

#: the core tier: operators that map onto crossbars or vector units (issue #17)
CORE_TIER: dict[str, str] = {
    "Conv": "conv", "ConvTranspose": "convtranspose", "Gemm": "gemm", "MatMul": "matmul",
    "BatchNormalization": "batch_normalization", "MaxPool": "maxpool",
    "AveragePool": "averagepool", "GlobalAveragePool": "globalaveragepool",
    "GlobalMaxPool": "globalmaxpool", "Relu": "relu", "LeakyRelu": "leakyrelu",
    "PRelu": "prelu", "Elu": "elu", "HardSigmoid": "hardsigmoid", "HardSwish": "hardswish",
    "Clip": "clip", "Concat": "concat", "Add": "add", "Sub": "sub", "Mul": "mul",
    "Div": "div", "Max": "max", "Min": "min", "Neg": "neg", "Reshape": "reshape",
    "Flatten": "flatten", "Slice": "slice", "Split": "split", "Squeeze": "squeeze",
    "Unsqueeze": "unsqueeze", "Transpose": "transpose", "Resize": "resize", "Pad": "pad",
    "Softmax": "softmax", "Sigmoid": "sigmoid", "Tanh": "tanh", "Identity": "identity",
}


@dataclass
class Case:
    name: str
    op: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]

    @property
    def outside(self) -> str | None:
        """Why the case is outside the tier (None: inside). The chip computes float32 NCHW
        inference: other element types, 3-D convolutions and pools, training-mode outputs and
        zero-size tensors are out of scope (the importer refuses them with a one-line reason,
        which `tests/frontend/test_onnx_backend.py` checks)."""
        graph = self.model.graph
        if any(not v.type.HasField("tensor_type")
               or v.type.tensor_type.elem_type != onnx.TensorProto.FLOAT for v in graph.output):
            return "non-float32 data"
        if any(a.ndim == 5 for a in self.inputs.values() if isinstance(a, np.ndarray)):
            return "3-D spatial"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in graph.node[0].attribute}
        if attrs.get("training_mode"):
            return "training mode"
        arrays = [*self.inputs.values(), *self.outputs.values()]
        if any(isinstance(a, np.ndarray) and a.size == 0 for a in arrays):
            return "zero-size tensor"
        return None


def _is_nearest(model: onnx.ModelProto) -> bool:
    node = model.graph.node[0]
    for a in node.attribute:
        if a.name == "mode":
            return onnx.helper.get_attribute_value(a) in (b"nearest", "nearest")
    return True


def cases(ops: list[str] | None = None) -> list[Case]:
    """The tier's cases (single-node models; expanded function bodies are left out)."""
    node_module = importlib.import_module("onnx.backend.test.case.node")
    wanted = {op: mod for op, mod in CORE_TIER.items() if not ops or op in ops}
    for module in set(wanted.values()):
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    out = []
    for case in node_module._NodeTestCases:
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type not in wanted:
            continue
        op = graph.node[0].op_type
        if op == "Resize" and not _is_nearest(case.model):
            continue
        (inputs, outputs), *_ = case.data_sets
        feeds = {v.name: np.asarray(a) for v, a in zip(graph.input, inputs, strict=True)}
        want = {v.name: np.asarray(a) for v, a in zip(graph.output, outputs, strict=True)}
        out.append(Case(case.name, op, case.model, feeds, want))
    return out


def run_case(case: Case, folder: Path) -> tuple[bool, str]:
    """(passed, why not): the CLI's exit code and its first error line, or the mismatch."""
    from raptor.cli import main

    model, xs, ys = folder / f"{case.name}.onnx", folder / "x.npz", folder / "y.npz"
    onnx.save(case.model, model)
    np.savez(xs, **case.inputs)  # type: ignore[arg-type]
    ys.unlink(missing_ok=True)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(["interpret", str(model), "--inputs", str(xs), "--out", str(ys)])
    if code != 0:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln and not ln.startswith("note")]
        return False, lines[0] if lines else f"exit {code}"
    with np.load(ys) as got:
        for name, want in case.outputs.items():
            g = got[name]
            if g.shape != want.shape:
                return False, f"output {name}: shape {list(g.shape)}, expected {list(want.shape)}"
            if not np.allclose(g, want, rtol=1e-3, atol=1e-5, equal_nan=True):
                err = float(np.abs(g.astype(np.float64) - want).max())
                return False, f"output {name}: max abs error {err:.3g}"
    return True, ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ops", nargs="*", help="operators (default: the whole core tier)")
    p.add_argument("--markdown", action="store_true", help="print the per-op table as markdown")
    p.add_argument("--failures", action="store_true", help="list each failing case and why")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    everything = cases(args.ops)
    selected = [c for c in everything if c.outside is None]
    outside = Counter(c.outside for c in everything if c.outside is not None)
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    why: dict[str, list[tuple[str, str]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for case in selected:
            ok, reason = run_case(case, Path(tmp))
            total[case.op] += 1
            passed[case.op] += ok
            if not ok:
                why[case.op].append((case.name, reason))
    seconds = time.perf_counter() - t0
    rows: list[tuple[Any, ...]] = [
        (op, passed[op], total[op]) for op in CORE_TIER if total[op]
    ]
    if args.markdown:
        print("| operator | pass | cases |\n|---|---:|---:|")
        for op, n, t in rows:
            print(f"| {op} | {n} | {t} |")
    else:
        for op, n, t in rows:
            print(f"{op:20s} {n:4d} / {t:4d}")
    n_pass, n_all = sum(passed.values()), sum(total.values())
    print(f"\ncore tier: {n_pass} of {n_all} cases pass ({n_pass / max(n_all, 1):.1%}), "
          f"{seconds:.0f} s; outside the tier: "
          + ", ".join(f"{n} {what}" for what, n in outside.most_common()))
    if args.failures:
        for op in why:
            for name, reason in why[op]:
                print(f"FAIL {name}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
