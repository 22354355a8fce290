"""Layout planning + lowering + canonicalization (the two egglog rule programs) on a
1,000-plan chain and on ResNet-18 at 224x224.

    python benchmarks/bench_canonicalize.py [--plans 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.models import resnet18
from raptor.frontend import import_onnx
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import lower
from raptor.rewrite.canonicalize import canonicalize
from raptor.target import load_target


def chain(plans: int, channels: int = 4, size: int = 8) -> onnx.ModelProto:
    """conv3x3 → relu → conv3x3 → relu ... (`plans` plans), fixed seed."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(plans):
        y = f"v{i}"
        if i % 2 == 0:
            inits.append(numpy_helper.from_array(
                rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.3,
                f"w{i}"))
            nodes.append(helper.make_node("Conv", [x, f"w{i}"], [y], pads=[1, 1, 1, 1]))
        else:
            nodes.append(helper.make_node("Relu", [x], [y]))
        x = y
    shape = [1, channels, size, size]
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def measure(name: str, model: onnx.ModelProto) -> None:
    target = load_target("default")
    t0 = time.perf_counter()
    graph = import_onnx(model)
    t1 = time.perf_counter()
    sel, layouts = select_layouts(graph, "exact")
    t2 = time.perf_counter()
    low = lower(graph, target, layouts)
    t3 = time.perf_counter()
    stats = canonicalize(low.module)
    t4 = time.perf_counter()
    diags = verify_module(low.module)
    t5 = time.perf_counter()
    ops = sum(1 for _ in low.module.walk())
    print(f"| {name} | {len(graph.plans)} | {stats.batches} | {ops:,} | {t1 - t0:.2f} | "
          f"{t2 - t1:.2f} | {t3 - t2:.2f} | {t4 - t3:.2f} | {t5 - t4:.2f} | "
          f"{sel.counts['NHWCRowStrip']} / {sel.counts['DenseNCHW']} | {len(diags)} |",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--plans", type=int, default=1000)
    args = ap.parse_args()
    print("| graph | plans | batches | IR ops | import s | layout s (egglog + CP-SAT) | lower s "
          "| canonicalize s (egglog) | verify s | row-strip / dense | diagnostics |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    measure("conv/relu chain", chain(args.plans))
    measure("ResNet-18 224x224", resnet18())


if __name__ == "__main__":
    main()
