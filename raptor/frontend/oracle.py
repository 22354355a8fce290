"""The ONNX reference the compiled program is checked against.

onnxruntime when installed (it is right where `onnx.reference` is not: BatchNormalization at
opsets 9-14, Softmax below 13), else `onnx.reference.ReferenceEvaluator`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx


def oracle_name() -> str:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnx.reference"
    return "onnxruntime"


def run_reference(model: str | Path | onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                  oracle: str | None = None) -> dict[str, np.ndarray]:
    """Outputs of the ONNX model keyed by graph output name."""
    return run_references(model, [inputs], oracle)[0]


def run_references(model: str | Path | onnx.ModelProto,
                   inputs: list[Mapping[str, np.ndarray]], oracle: str | None = None
                   ) -> list[dict[str, np.ndarray]]:
    """Outputs of the ONNX model for each set of inputs (one session for all of them)."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    which = oracle or oracle_name()
    names = [o.name for o in proto.graph.output]
    if which == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4  # its errors come back as exceptions, said once
        sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        run = sess.run
    else:
        from onnx.reference import ReferenceEvaluator

        run = ReferenceEvaluator(proto).run
    results = (run(names, {k: np.asarray(v) for k, v in feeds.items()}) for feeds in inputs)
    return [{n: np.asarray(o) for n, o in zip(names, outs, strict=True)} for outs in results]


def _first_line(error: BaseException) -> str:
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return lines[0][:200] if lines else type(error).__name__


def reference_outputs(model: str | Path | onnx.ModelProto, inputs: Mapping[str, np.ndarray]
                      ) -> tuple[dict[str, np.ndarray] | None, str | None, str | None]:
    """(outputs, oracle used, note): onnxruntime first, `onnx.reference` for a model it
    cannot run; when neither can, no outputs and a note saying why (not a failure: the
    compiled program still runs, its numerics are just unchecked)."""
    return _first_working(lambda which: run_reference(model, inputs, which))


def reference_stream(model: str | Path | onnx.ModelProto,
                     inputs: list[Mapping[str, np.ndarray]]
                     ) -> tuple[list[dict[str, np.ndarray]] | None, str | None, str | None]:
    """`reference_outputs` for a stream of inferences, one oracle session for all."""
    return _first_working(lambda which: run_references(model, inputs, which))


T = TypeVar("T")


def _first_working(run: Callable[[str], T]) -> tuple[T | None, str | None, str | None]:
    """(result, oracle used, note) of the first oracle that runs: onnxruntime, then
    `onnx.reference`; the note says why neither could."""
    failures = []
    for which in dict.fromkeys((oracle_name(), "onnx.reference")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return run(which), which, None
        except Exception as e:  # any failure of a third-party runtime is reported, not raised
            failures.append(f"{which}: {_first_line(e)}")
    return None, None, "reference unavailable: " + "; ".join(failures)


def compare(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], rtol: float,
            atol: float) -> dict[str, tuple[float, float, bool]]:
    """Per output: (max abs error, max rel error, within tolerance). Elements near zero are
    judged against the output's scale: |got - want| <= max(atol, rtol*max|want|) +
    rtol*|want| (float32 sums in another order drift by ~1e-7 of the range per layer)."""
    res = {}
    for name, w in want.items():
        g = np.asarray(got[name], dtype=np.float64)
        w64 = np.asarray(w, dtype=np.float64)
        if g.shape != w64.shape:
            res[name] = (float("inf"), float("inf"), False)
            continue
        # NaN and Inf (inputs given with --allow-nonfinite) must sit where the reference has
        # them; errors are measured over the finite elements
        finite = np.isfinite(g) & np.isfinite(w64)
        same = bool(np.array_equal(g[~finite], w64[~finite], equal_nan=True))
        diff, magnitude = np.abs(g[finite] - w64[finite]), np.abs(w64[finite])
        abs_err, rel_err, scale = (0.0, 0.0, 0.0) if not diff.size else (
            float(diff.max()), float((diff / np.maximum(magnitude, 1e-12)).max()),
            float(magnitude.max()))
        ok = same and bool(np.allclose(g[finite], w64[finite], rtol=rtol,
                                       atol=max(atol, rtol * scale)))
        res[name] = (abs_err if same else float("inf"), rel_err, ok)
    return res
