"""Where a latency schedule's time goes: PEFT's returned schedule (`raptor solve --solver
peft`), its replay (`raptor.solver.comm.replay`, the estimate, equal to the simulation)
walked back from the task that ends last. At each task the path goes to whichever came
later, its core's previous task or the message that arrived last, and it splits the span
into compute, shared-memory queueing, core idle (the core free and the data there, but the
task not yet started: its core was sending), and, for a message, the send's wait after its
producer ended, its free-link transfer and its wait for links.

    PYTHONPATH=$PWD python benchmarks/bench_critical.py /work/snap/r18.onnx [--target u4.toml]
                                                        [--window 500000] [--since 0]

Prints the totals (they add up to the makespan), the same split per `--window` ns of the
path (by the time each step starts), and the path's messages by size from `--since` ns on
(count, mean links of their routes, transfer and link wait): ResNet-18's 14,336 B rows
are its layers 2-4's partial sums (7 × 512, 14 × 256 or 28 × 128 f32)."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raptor.noc import shared_network
from raptor.solve import SolveOptions, solve
from raptor.solver.comm import critical_path
from raptor.target import Target, load_target

PARTS = ("compute", "memory wait", "core idle", "send wait", "transfer", "link wait")


Step = tuple[int, Counter[str], tuple[int, int] | None]
"""A step of the path: its start ns, its split into `PARTS`, and for a message its bytes and
route's links (None: the core's previous task)."""


def path_split(model: str, target: Target) -> tuple[int, list[Step]]:
    """The makespan of PEFT's returned schedule and its critical path, latest step first."""
    solved = solve(model, target, SolveOptions(solver="peft", simulate=False))
    graph, res = solved.build.graph, solved.runs[0].result
    rep = res.comm
    assert rep is not None  # PEFT's results carry their replay
    net = shared_network(target)
    cost = graph.durations(res.core_of)
    ends = {b: rep.end[a] for ts in res.core_tasks for a, b in itertools.pairwise(ts)}
    steps: list[Step] = []
    for t, frag in critical_path(graph, res.core_of, res.core_tasks, rep):
        core, start = res.core_of[t], rep.start[t]
        part: Counter[str] = Counter({"compute": cost[t],
                                      "memory wait": rep.end[t] - start - cost[t]})
        msg = None
        if frag >= 0:
            came = rep.arrival[(frag, core)]
            u = graph.fragments[frag].producer
            left = rep.left[(frag, core)]
            nbytes = graph.fragments[frag].bytes
            links, _, transfer = net.timing(res.core_of[u], core, nbytes)
            part.update({"core idle": start - came, "send wait": left - rep.end[u],
                         "transfer": transfer, "link wait": came - left - transfer})
            msg = (nbytes, len(links))
        else:
            part["core idle"] = start - ends.get(t, 0)
        steps.append((start, part, msg))
    return rep.makespan_ns, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--target", help="target TOML (default: the default target)")
    ap.add_argument("--window", type=int, default=500_000, help="ns per row of the split")
    ap.add_argument("--since", type=int, default=0, help="the messages by size from this ns on")
    args = ap.parse_args()
    target = load_target(args.target) if args.target else Target()
    makespan, steps = path_split(args.model, target)
    total: Counter[str] = Counter()
    windows: dict[int, Counter[str]] = {}
    sizes: dict[int, Counter[str]] = {}
    for start, part, msg in steps:
        total.update(part)
        windows.setdefault(start // args.window, Counter()).update(part)
        if msg is not None and start >= args.since:
            size = sizes.setdefault(msg[0], Counter())
            size.update({"messages": 1, "links": msg[1], "transfer": part["transfer"],
                         "link wait": part["link wait"]})
    print(f"makespan {makespan:,} ns, {len(steps)} steps on the path")
    print("| from ns | " + " | ".join(PARTS) + " |")
    print("|---:|" + "---:|" * len(PARTS))
    for w in sorted(windows):
        print(f"| {w * args.window:,} | " + " | ".join(f"{windows[w][k]:,}" for k in PARTS) + " |")
    print("| total | " + " | ".join(f"{total[k]:,}" for k in PARTS) + " |")
    print(f"\nthe path's messages from {args.since:,} ns on, by size")
    print("| bytes | messages | mean links | transfer | link wait |\n|---:|---:|---:|---:|---:|")
    for nbytes, c in sorted(sizes.items(), key=lambda kv: -kv[1]["transfer"] - kv[1]["link wait"]):
        print(f"| {nbytes:,} | {c['messages']} | {c['links'] / c['messages']:.1f} | "
              f"{c['transfer']:,} | {c['link wait']:,} |")


if __name__ == "__main__":
    main()
