"""End-to-end figures on real networks, exactly as `raptor solve` computes them: PEFT and
CP-SAT schedules, their communication-aware estimates against the simulator's default run
(rendezvous sends, XY link contention, serialized shared memory), bytes moved, messages,
link utilization, CP-SAT status and bounds, numerics.

    python benchmarks/bench_e2e.py [--time-limit 10] [--workers 2] [--models a,b]
                                   [--cnns] [--resnet] [--solver both|peft] [--json FILE]

Models: the bundled examples by name (default: every examples/*.onnx), `--cnns` adds the
three networks of benchmarks/cnns.py, `--resnet` ResNet-18 at 224×224 (PEFT only: CP-SAT's
model would be too large and says so). Prints Markdown tables (paste into
docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cnns import CNNS
from benchmarks.models import resnet18
from raptor.sim import SimOptions
from raptor.solve import SolveOptions, report, solve
from raptor.target import load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(path: Path, name: str, solver: str, time_limit: float, workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    solved = solve(path, load_target("default"),
                   SolveOptions(solver=solver, time_limit=time_limit, workers=workers,
                                sim=SimOptions(trace=False)))
    rep = report(solved)
    rep["name"] = name
    rep["wall_s"] = time.perf_counter() - t0
    return rep


def _pct(a: int | None, b: int | None) -> str:
    return "-" if a is None or not b else f"{(a - b) / b:+.1%}"


def tables(reps: list[dict[str, Any]]) -> str:
    out = ["| model | tasks | lower bound ns | solver | estimate ns | simulated ns | "
           "estimate error | ideal sim ns | bytes moved | messages | link util max / mean | "
           "numerics |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in reps:
        for name, s in r["schedules"].items():
            sim = s["communication"]["simulated"] or s["communication"]["estimated"]
            util = sim["link_utilization"]
            num = s["numerics"]
            out.append(
                f"| {r['name']} | {r['tasks']:,} | {r['lower_bound_ns']:,} | {name} | "
                f"{s['estimate_ns']:,} | {s['simulated_ns'] or 0:,} | "
                f"{_pct(s['estimate_ns'], s['simulated_ns'])} | "
                f"{s['ideal_simulated_ns'] or 0:,} | {sim['bytes_moved']:,} | "
                f"{sim['messages']:,} | {util['max']:.0%} / {util['mean']:.1%} | "
                f"{'ok' if num and num['ok'] else 'MISMATCH'} |")
    out += ["", "| model | CP-SAT status | model | CP-SAT bound ns (of) | solve s |",
            "|---|---|---|---|---:|"]
    for r in reps:
        s = r["schedules"].get("cpsat")
        if s is not None:
            of = "problem" if s["bound_of"] == "problem" else s["model"] + " only"
            out.append(f"| {r['name']} | {s['status']} | {s['model']} | "
                       f"{s['bound_ns'] or 0:,} ({of}) | {s['solve_seconds']:.1f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default=",".join(sorted(p.stem for p in
                                                        EXAMPLES.glob("*.onnx"))))
    ap.add_argument("--cnns", action="store_true")
    ap.add_argument("--resnet", action="store_true")
    ap.add_argument("--solver", default="both", choices=["both", "peft"])
    ap.add_argument("--json", help="also write the reports to this file")
    args = ap.parse_args()
    reps = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [(EXAMPLES / f"{m}.onnx", m, args.solver)
                 for m in args.models.split(",") if m]
        if args.cnns:
            for name, build in CNNS.items():
                onnx.save(build(), Path(tmp) / f"{name}.onnx")
                paths.append((Path(tmp) / f"{name}.onnx", name, args.solver))
        if args.resnet:
            onnx.save(resnet18(), Path(tmp) / "resnet18.onnx")
            paths.append((Path(tmp) / "resnet18.onnx", "resnet18", "peft"))
        for path, name, solver in paths:
            reps.append(run(path, name, solver, args.time_limit, args.workers))
            print(f"{name}: done in {reps[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(reps, indent=1))
    print(tables(reps))


if __name__ == "__main__":
    main()
