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
are its layers 2-4's partial sums (7 × 512, 14 × 256 or 28 × 128 f32).

Then where the schedule falls short of the work bound: its replay with links free and
with every receive posted at the start (no flow control), the cores' busy share per
`--window` ns on the plan (the list scheduler's times) and on the replay, and per layer
(`ComputeGraph.tile_layer`; a task without crossbars counts with the latest layer it
reads) its span on both, its work against its work over the cores, and its busiest
core's share of it. ResNet-18 at one unit: the plan's idle is in layers 2-4, most of it
in layer 4's tail (docs/benchmarks.md, "Issue #25, seventeenth session")."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raptor.noc import shared_network
from raptor.solve import SolveOptions, solve
from raptor.solver.comm import critical_path, replay
from raptor.solver.graph import ComputeGraph
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target, load_target

PARTS = ("compute", "memory wait", "core idle", "send wait", "transfer", "link wait")


Step = tuple[int, Counter[str], tuple[int, int] | None]
"""A step of the path: its start ns, its split into `PARTS`, and for a message its bytes and
route's links (None: the core's previous task)."""


def path_split(graph: ComputeGraph, res: MergeScheduleResult, target: Target
               ) -> tuple[int, list[Step]]:
    """The makespan of a schedule's replay and its critical path, latest step first."""
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


def busy_shares(graph: ComputeGraph, res: MergeScheduleResult, window: int
                ) -> dict[str, list[float]]:
    """Per `window` ns, the share of the cores' time spent computing, on the plan and on
    the replay."""
    assert res.comm is not None
    cost = graph.durations(res.core_of)
    shares = {}
    for name, starts in (("plan", res.start_ns), ("replay", res.comm.start)):
        busy = [0] * (max(s + d for s, d in zip(starts, cost, strict=True)) // window + 1)
        for s, d in zip(starts, cost, strict=True):
            while d > 0:
                part = min(d, window - s % window)
                busy[s // window] += part
                s, d = s + part, d - part
        shares[name] = [b / (window * len(res.core_tasks)) for b in busy]
    return shares


def layer_rows(graph: ComputeGraph, res: MergeScheduleResult) -> list[str]:
    """Per layer, in the order the graph first reaches them: tasks, span on the plan and
    on the replay, work, work over the cores, cores used, the busiest core's work."""
    assert res.comm is not None
    rep, cost = res.comm, graph.durations(res.core_of)
    rank: dict[str, int] = {}
    layer = [""] * graph.num_tasks
    for t in graph.topo_order:
        w = graph.tasks[t].weights
        name = graph.tile_layer.get(min(w), "") if w else ""
        if not name:  # the latest layer it reads
            name = max((layer[u] for u, _ in graph.preds[t]), key=lambda n: rank.get(n, -1),
                       default="")
        layer[t] = name
        rank.setdefault(name, len(rank))
    rows = []
    for name in rank:
        ts = [t for t in range(graph.num_tasks) if layer[t] == name]
        per_core: Counter[int] = Counter()
        for t in ts:
            per_core[res.core_of[t]] += cost[t]
        work = sum(per_core.values())
        spans = [(min(s[t] for t in ts), max(e[t] for t in ts))
                 for s, e in ((res.start_ns, res.end_ns), (rep.start, rep.end))]
        rows.append(f"| {name or '-'} | {len(ts)} | "
                    + " | ".join(f"{a:,}-{b:,} ({b - a:,})" for a, b in spans)
                    + f" | {work:,} | {work // len(res.core_tasks):,} | {len(per_core)} | "
                    f"{max(per_core.values()):,} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--target", help="target TOML (default: the default target)")
    ap.add_argument("--window", type=int, default=500_000, help="ns per row of the split")
    ap.add_argument("--since", type=int, default=0, help="the messages by size from this ns on")
    args = ap.parse_args()
    target = load_target(args.target) if args.target else Target()
    solved = solve(args.model, target, SolveOptions(solver="peft", simulate=False))
    graph, res = solved.build.graph, solved.runs[0].result
    makespan, steps = path_split(graph, res, target)
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
    shares = busy_shares(graph, res, args.window)
    cores = len(res.core_tasks)
    free = replay(graph, target, res.core_of, res.core_tasks, res.start_ns, contention=False)
    posted = replay(graph, target, res.core_of, res.core_tasks, res.start_ns,
                    budget=[1 << 62] * cores)
    print(f"\nplan {res.makespan_ns:,} ns, replay {makespan:,} (links free {free.makespan_ns:,}; "
          f"every receive posted at the start {posted.makespan_ns:,}), work / {cores} cores "
          f"{sum(graph.durations(res.core_of)) // cores:,}; busy share per {args.window:,} ns")
    for name, row in shares.items():
        print(f"{name}: " + " ".join(f"{i * args.window // 1000}:{100 * b:.0f}"
                                     for i, b in enumerate(row)))
    print("\n| layer | tasks | plan span | replay span | work | work / cores | cores | "
          "busiest core's work |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(layer_rows(graph, res)))


if __name__ == "__main__":
    main()
