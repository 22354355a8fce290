"""Where a latency schedule's time goes: PEFT's returned schedule (`raptor solve --solver
peft`), its replay (`raptor.solver.comm.replay`, the estimate, equal to the simulation)
walked back from the task that ends last. At each task the path goes to whichever came
later, its core's previous task or the message that arrived last, and it splits the span
into compute, shared-memory queueing, core idle (the core free and the data there, but the
task not yet started: its core was sending), and, for a message, the send's wait after its
producer ended, its free-link transfer and its wait for links.

    PYTHONPATH=$PWD python benchmarks/bench_critical.py /work/snap/r18.onnx [--target u4.toml]
                                                        [--window 500000]

Prints the totals (they add up to the makespan) and the same split per `--window` ns of
the path (by the time each step starts)."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raptor.noc import shared_network
from raptor.solve import SolveOptions, solve
from raptor.target import Target, load_target

PARTS = ("compute", "memory wait", "core idle", "send wait", "transfer", "link wait")


def critical_path(model: str, target: Target) -> tuple[int, list[tuple[int, Counter[str]]]]:
    """The makespan of PEFT's returned schedule and its critical path, latest step first:
    (start ns, the step's split into `PARTS`)."""
    solved = solve(model, target, SolveOptions(solver="peft", simulate=False))
    graph, res = solved.build.graph, solved.runs[0].result
    rep = res.comm
    assert rep is not None  # PEFT's results carry their replay
    net = shared_network(target)
    cost = graph.durations(res.core_of)
    before = {b: a for ts in res.core_tasks for a, b in itertools.pairwise(ts)}
    steps: list[tuple[int, Counter[str]]] = []
    t: int | None = max(range(graph.num_tasks), key=lambda x: rep.end[x])
    while t is not None:
        core, start = res.core_of[t], rep.start[t]
        part: Counter[str] = Counter({"compute": cost[t],
                                      "memory wait": rep.end[t] - start - cost[t]})
        free = rep.end[before[t]] if t in before else 0
        came, frag = max(((rep.arrival[(f, core)], f) for f in graph.reads[t]
                          if res.core_of[graph.fragments[f].producer] != core),
                         default=(-1, -1))
        if came > free:
            u = graph.fragments[frag].producer
            left = rep.left[(frag, core)]
            transfer = net.timing(res.core_of[u], core, graph.fragments[frag].bytes)[2]
            part.update({"core idle": start - came, "send wait": left - rep.end[u],
                         "transfer": transfer, "link wait": came - left - transfer})
            t = u
        else:
            part["core idle"] = start - free
            t = before.get(t)
        steps.append((start, part))
    return rep.makespan_ns, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--target", help="target TOML (default: the default target)")
    ap.add_argument("--window", type=int, default=500_000, help="ns per row of the split")
    args = ap.parse_args()
    target = load_target(args.target) if args.target else Target()
    makespan, steps = critical_path(args.model, target)
    total: Counter[str] = Counter()
    windows: dict[int, Counter[str]] = {}
    for start, part in steps:
        total.update(part)
        windows.setdefault(start // args.window, Counter()).update(part)
    print(f"makespan {makespan:,} ns, {len(steps)} steps on the path")
    print("| from ns | " + " | ".join(PARTS) + " |")
    print("|---:|" + "---:|" * len(PARTS))
    for w in sorted(windows):
        print(f"| {w * args.window:,} | " + " | ".join(f"{windows[w][k]:,}" for k in PARTS) + " |")
    print("| total | " + " | ".join(f"{total[k]:,}" for k in PARTS) + " |")


if __name__ == "__main__":
    main()
