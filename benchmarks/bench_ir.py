"""Spatial IR throughput: build a large module, then time print, parse, verify (and interpret).

    python benchmarks/bench_ir.py [--stages 1430] [--lanes 4] [--repeat 3] [--cpu]
    python benchmarks/bench_ir.py --spat scheduled.peft.spat [--cpu]   # an existing module
    python benchmarks/bench_ir.py --pure-lark ...    # parse with lark alone, not lark-cython

Each stage is one `spat.graph_compute_batch` (extract, relu, vscale, vsub, publication) plus a
reversing `spat.blueprint` family: 7 ops, so the default is ~10,000 ops. Times are the best of
`--repeat` runs, in seconds.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from raptor.ir import parser
from raptor.ir.builder import new_func
from raptor.ir.core import Affine, Value
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import BlueprintEntry
from raptor.ir.parser import parse_module
from raptor.ir.types import INDEX, tensor
from raptor.ir.verifier import verify_module

T = TypeVar("T")


def build(stages: int, lanes: int, rows: int = 16) -> Module:
    """A chain of `stages` graph batches over a rows x lanes tensor."""
    f, b = new_func("main", [("x", tensor(rows, lanes))], [tensor(rows, lanes)])
    cur = f.args[0]
    for _ in range(stages):
        batch, body = b.graph_batch(lanes, [cur], [tensor(lanes, rows, 1)])
        lane = batch.lane
        col = body.extract(batch.in_args[0], [0, lane], [rows, 1])
        act = body.unary("relu", col)
        half = body.unary("vscale", act, {"factor": 0.5})
        frag = body.binary("vsub", half, col)
        body.publish(frag, batch.out_args[0], [lane, 0, 0], [1, rows, 1])
        s = Value(INDEX, "s")
        entry = BlueprintEntry(0, 0, (Affine(0), Affine(lanes - 1, ((-1, s),))), (rows, 1),
                               (1, 1), s, lanes)
        cur = b.blueprint(batch.outs, tensor(rows, lanes), [entry])
    b.ret([cur])
    return Module([f])


CLOCK = time.perf_counter


def best(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    times, result = [], None
    for _ in range(repeat):
        t0 = CLOCK()
        result = fn()
        times.append(CLOCK() - t0)
    assert result is not None
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, default=1430)
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spat", metavar="FILE", help="time print/parse/verify of this module "
                    "instead of the generated chain (no build, no interpretation)")
    ap.add_argument("--cpu", action="store_true", help="CPU seconds (time.process_time) "
                    "instead of wall seconds: steadier on a shared machine")
    ap.add_argument("--pure-lark", action="store_true", help="parse with lark's Python "
                    "lexer and LALR loop even when lark-cython is installed")
    args = ap.parse_args()
    if args.pure_lark:
        pure = parser.build({})
        parser._lark = lambda: pure  # type: ignore[assignment]  # the process's parser
    global CLOCK
    if args.cpu:
        CLOCK = time.process_time
    gc.disable()  # as `raptor` does for a command

    rows: list[tuple[str, float]] = []
    if args.spat:
        with open(args.spat) as fh:
            text = fh.read()
        t_parse, module = best(lambda: parse_module(text, args.spat), args.repeat)
        t_print, printed = best(module.print, args.repeat)
        assert printed == text, "print∘parse must be the identity"
    else:
        t_build, module = best(lambda: build(args.stages, args.lanes), 1)
        t_print, text = best(module.print, args.repeat)
        t_parse, module = best(lambda: parse_module(text, "bench.spat"), args.repeat)
        assert module.print() == text, "print∘parse must be the identity"
        rows.append(("build", t_build))
    t_verify, diags = best(lambda: verify_module(module), args.repeat)
    assert diags == [], diags[:3]
    rows += [("print", t_print), ("parse", t_parse), ("verify", t_verify)]
    if not args.spat:
        x = np.random.default_rng(0).standard_normal((16, args.lanes)).astype(np.float32)
        rows.append(("interpret", best(lambda: Interpreter(module).run([x]), 1)[0]))
    ops = sum(1 for _ in module.walk())
    print(f"module: {args.spat or f'{args.stages} graph batches x {args.lanes} lanes'}, "
          f"{ops} ops, {len(text.splitlines())} lines, {len(text) / 1e6:.2f} MB "
          f"({'CPU' if args.cpu else 'wall'} seconds, best of {args.repeat}; parser: "
          f"{'lark' if args.pure_lark or not parser.PLUGINS else 'lark + lark-cython'})")
    for name, t in rows:
        print(f"{name:<10}{t:8.3f} s   {ops / t:10.0f} ops/s")


if __name__ == "__main__":
    main()
