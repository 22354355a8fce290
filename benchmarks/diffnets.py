"""Differential testing of Raptor on seeded random valid networks against onnxruntime.

    python -m benchmarks.diffnets --nets 1000 [--first 0] [--jobs 2] [--timeout 120]
                                  [--commands latency,pipeline,interpret] [--repeat 2]
                                  [--shrink] [--json FILE] [--compare EARLIER.json]

Network i is `tests.fuzz.random_nets.random_net(first + i)`; each runs under each command
`--repeat` times (the reruns must agree). Prints (markdown) the table of command x class,
the table of operator x class, and the messages of every class but ok; with --shrink, each
failing network shrunk to a minimal reproducer under benchmarks/out/diffnets/; with
--compare, every (network, command) whose class, message or outputs differ from an earlier
campaign's --json (a rerun in other processes). Exit 1 when any outcome is in a failing
class (`tests.fuzz.diffnets.FAILING`) or differs from the earlier campaign. docs/fuzz.md
records a campaign.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tests.fuzz.diffnets import (
    CLASSES,
    COMMANDS,
    FAILING,
    Outcome,
    class_table,
    messages,
    op_table,
    rerun_differences,
    run_nets,
    shrink_failure,
)

OUT = Path(__file__).resolve().parent / "out" / "diffnets"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nets", type=int, default=1000)
    p.add_argument("--first", type=int, default=0, help="seed of the first network")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per run (120)")
    p.add_argument("--commands", default=",".join(COMMANDS))
    p.add_argument("--repeat", type=int, default=2, help="runs per network and command")
    p.add_argument("--shrink", action="store_true", help="shrink each failing network")
    p.add_argument("--json", metavar="FILE", help="write every outcome")
    p.add_argument("--compare", metavar="EARLIER.json", help="an earlier campaign's --json: "
                   "report every outcome that differs")
    args = p.parse_args()

    t0 = time.monotonic()
    seeds = range(args.first, args.first + args.nets)
    commands = args.commands.split(",")
    nets, outs = run_nets(seeds, args.jobs, args.timeout, commands, args.repeat,
                          progress=True)
    wall = time.monotonic() - t0
    print(f"{len(nets)} networks (seeds {seeds.start}..{seeds.stop - 1}), "
          f"{len(outs) * args.repeat} runs, {wall:.0f} s wall on {args.jobs} workers\n")
    print(class_table(outs) + "\n")
    print(op_table(nets, outs) + "\n")
    for klass in CLASSES[:-1]:
        for msg, n in messages(outs, klass).most_common(12):
            print(f"- {klass} x{n}: {msg}")
    bad = [o for o in outs if o.klass in FAILING]
    for o in bad:
        print(f"FAIL net {o.net} {o.command}: {o.klass}: {o.detail}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outs], indent=1))
    differ: list[str] = []
    if args.compare:
        earlier = [Outcome(**o) for o in json.loads(Path(args.compare).read_text())]
        differ = rerun_differences(outs, earlier)
        print(f"\nrerun against {args.compare}: {len(differ)} of {len(outs)} outcomes differ")
        for line in differ:
            print(f"DIFFER {line}")
    if args.shrink and bad:
        OUT.mkdir(parents=True, exist_ok=True)
        by_net = {n.seed: n for n in nets}
        for o in bad:
            path = OUT / f"net{o.net}_{o.command}.onnx"
            nodes = shrink_failure(by_net[o.net], o.command, o.klass, path)
            print(f"shrunk net {o.net} ({o.command}, {o.klass}) to {nodes} nodes: {path}")
    return 1 if bad or differ else 0


if __name__ == "__main__":
    sys.exit(main())
