"""The simulator's speed in two source trees, measured in alternating pairs (issue #27).

    python benchmarks/sim_pairs.py BASE_TREE NEW_TREE [--runs 20] [--model M.onnx]

On this noisy 2-core machine one `bench_sim.py` process differs from the next by as much as
5 % (the same code gave 870k and 948k ops/s minutes apart), more than a change is worth.
Here each tree gets one worker process that compiles the model's PEFT program once and
keeps it; the driver then has the two run it in turn (ABBA order), so both see the same
machine. Printed per tree: sustained ops/s (ops plus body ops over the runs' wall time, as
`bench_sim.py` counts them, trace on), the median and best run, the median per CPU second,
and the median of the per-pair wall ratio NEW / BASE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

WORKER = r"""
import json, sys, time
from benchmarks.bench_sim import model_module
from raptor.sim import SimOptions, Simulator
from raptor.target import Target

module, feeds = model_module(sys.argv[1])
sim = Simulator(module, Target())
print(json.dumps({"compile_s": sim.compile_time_s}), flush=True)
for _ in sys.stdin:
    c = time.process_time()
    rep = sim.run(feeds, SimOptions(trace=True)).report
    print(json.dumps({"wall": rep.wall_time_s, "cpu": time.process_time() - c,
                      "ops": rep.ops_executed + rep.body_ops_executed}), flush=True)
"""


def start(tree: str, model: str) -> subprocess.Popen[str]:
    """A worker on ``tree``, returned once its program is compiled."""
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen([sys.executable, "-c", WORKER, model], cwd=tree, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            print(f"{tree}: compiled in {json.loads(line)['compile_s']:.3f} s")
            return proc
    raise SystemExit(f"{tree}: the worker stopped before compiling (see its stderr)")


def run_once(proc: subprocess.Popen[str]) -> dict[str, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("run\n")
    proc.stdin.flush()
    out: dict[str, float] = json.loads(proc.stdout.readline())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="source tree measured first in each pair")
    ap.add_argument("new", help="source tree compared with it")
    ap.add_argument("--runs", type=int, default=20, help="runs of each tree (default 20)")
    ap.add_argument("--model", default="/work/snap/r18.onnx",
                    help="ONNX model whose PEFT latency program is run")
    args = ap.parse_args()
    procs = [start(args.base, args.model), start(args.new, args.model)]
    runs: list[list[dict[str, float]]] = [[], []]
    for i in range(args.runs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            runs[k].append(run_once(procs[k]))
    for tree, rs in zip((args.base, args.new), runs, strict=True):
        walls = [r["ops"] / r["wall"] for r in rs]
        cpus = [r["ops"] / r["cpu"] for r in rs]
        sustained = sum(r["ops"] for r in rs) / sum(r["wall"] for r in rs)
        print(f"{tree}: sustained {sustained:,.0f} ops/s over {len(rs)} runs; median run "
              f"{statistics.median(walls):,.0f}, best {max(walls):,.0f}; median per CPU "
              f"second {statistics.median(cpus):,.0f}")
    ratio = statistics.median(n["wall"] / b["wall"] for b, n in zip(*runs, strict=True))
    print(f"wall per run, new / base, median of {args.runs} pairs: {ratio:.3f}")
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()


if __name__ == "__main__":
    main()
