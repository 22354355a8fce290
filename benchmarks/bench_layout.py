"""Layout planning benchmark: egglog rule run + selection on synthetic plan graphs.

    python benchmarks/bench_layout.py [--chain 1000] [--workers 1]

Graphs: a chain of conv/relu/silu/maxpool plans, and a ResNet-18-shaped plan DAG
(stem, eight basic blocks with residual adds and three 1×1 downsample convs, head).
"""

from __future__ import annotations

import argparse
import time

from raptor.rewrite.layout import GATES, LayoutPlan, derive_layout_tables
from raptor.rewrite.select import select_disabled, select_exact, select_iterative

GATED = dict.fromkeys(GATES, True)


def chain(n: int) -> list[LayoutPlan]:
    """`n` plans cycling conv → relu → conv → silu → maxpool; the last one is returned."""
    kinds = ("conv", "relu", "conv", "silu", "maxpool")
    plans = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        data = None if i == 0 else i - 1
        operands = [data, None] if kind == "conv" else [data]
        plans.append(LayoutPlan(i, kind, operands, GATED, i == n - 1))
    return plans


def resnet18() -> list[LayoutPlan]:
    """The plan DAG of ResNet-18 with BatchNorm folded into the convolutions."""
    plans: list[LayoutPlan] = []

    def add(kind: str, *operands: int | None, output: bool = False) -> int:
        weights = [None] if kind in ("conv", "gemm") else []
        plans.append(LayoutPlan(len(plans), kind, [*operands, *weights], GATED, output))
        return len(plans) - 1

    x = add("maxpool", add("relu", add("conv", None)))
    for stage in range(4):
        for block in range(2):
            shortcut = add("conv", x) if stage > 0 and block == 0 else x
            y = add("conv", add("relu", add("conv", x)))
            x = add("relu", add("add", y, shortcut))
    add("gemm", add("flatten", add("global_avgpool", x)), output=True)
    return plans


def bench(name: str, plans: list[LayoutPlan], workers: int) -> None:
    """Print the rule run time, each selector's time and result counts."""
    start = time.perf_counter()
    tables = derive_layout_tables(plans)
    rules = time.perf_counter() - start
    fired = sum(tables.fired.values())
    print(f"{name}: {len(plans)} plans, rules {rules:.3f} s ({fired} rule matches)")
    for selection in (
        select_exact(tables, workers=workers),
        select_iterative(tables),
        select_disabled(tables),
    ):
        print(
            f"  {selection.selector:9s} {selection.select_seconds:7.3f} s  "
            f"{selection.status:22s} {selection.counts}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=1000, help="plans in the chain")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers")
    args = parser.parse_args()
    bench("chain", chain(args.chain), args.workers)
    bench("resnet18", resnet18(), args.workers)


if __name__ == "__main__":
    main()
