"""How fast a wrong input file is refused: every example (and every cached pretrained model
of bench_pretrained) with an .npz whose data input has the wrong shape.

Two times per model: ``in-process`` from calling the CLI's ``main`` (imports done) to its
exit, and ``wall`` for a fresh ``python -m raptor.cli solve`` process, interpreter start-up
and imports included. Both end before layout planning or scheduling.

Usage: ``python -m benchmarks.bench_inputs``.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from benchmarks.bench_pretrained import MODELS, default_cache

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def wrong_inputs(model: Path, path: Path) -> None:
    """One array per graph input, the first with one more element on its last axis."""
    proto = onnx.load(str(model), load_external_data=False)
    initialized = {i.name for i in proto.graph.initializer}
    arrays = {}
    for k, value in enumerate(v for v in proto.graph.input if v.name not in initialized):
        dims = [d.dim_value if d.dim_value > 0 else 8 for d in value.type.tensor_type.shape.dim]
        if k == 0:
            dims[-1] += 1
        arrays[value.name] = np.zeros(dims, np.float32)
    np.savez(path, **arrays)  # type: ignore[arg-type]


def main() -> int:
    from raptor.cli import main as cli

    models = sorted(EXAMPLES.glob("*.onnx"))
    models += [p for m in MODELS if (p := default_cache() / f"{m.name}.onnx").exists()]
    print("| model | exit | in-process s | wall s | message |\n|---|---:|---:|---:|---|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            bad = Path(tmp) / "bad.npz"
            wrong_inputs(model, bad)
            args = ["solve", str(model), "--inputs", str(bad), "--out", f"{tmp}/out"]
            err = io.StringIO()
            t0 = time.perf_counter()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = cli(args)
            inproc = time.perf_counter() - t0
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "raptor.cli", *args],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - t0
            worst = max(worst, wall)
            message = err.getvalue().strip().replace(tmp + "/", "").replace("|", "/")
            assert proc.returncode == code == 2 and not Path(f"{tmp}/out").exists(), message
            print(f"| {model.name} | {code} | {inproc:.2f} | {wall:.2f} | {message} |")
    print(f"\nslowest wall time {worst:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
