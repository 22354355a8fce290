"""Array groups (issue #25): MVM instructions, array groups, latency and pipeline period of
every example and the benchmarks/cnns.py CNNs (optionally ResNet-18), exactly as
`raptor solve` reports them: PEFT in latency mode, the pipeline heuristic in pipeline mode
(8 inferences simulated).

    python benchmarks/bench_groups.py --json after.json [--target FILE.toml] [--resnet]
    python benchmarks/bench_groups.py --array-group-max 1 --json before.json
    python benchmarks/bench_groups.py --mvm-units 4 --json u4.json
    python benchmarks/bench_groups.py --routing xy-yx --json yx.json
    python benchmarks/bench_groups.py --compare before.json after.json   # Markdown table

Run it with `--array-group-max 1` (one crossbar per MVM) and without, or once on a tree
before a change and once after; `--compare` prints the table docs/benchmarks.md holds.
`--array-group-max`, `--mvm-units` and `--routing` override those keys of the target.
Older trees whose report has no `groups` field show "-" there."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cnns import CNNS
from benchmarks.models import resnet18
from raptor.noc import ROUTINGS
from raptor.sim import SimOptions
from raptor.solve import SolveOptions, report, solve
from raptor.target import Target, TargetError, load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def measure(path: Path, target: Target, pipeline: bool) -> dict[str, Any]:
    opts = SolveOptions(solver="pipeline", mode="pipeline") if pipeline else \
        SolveOptions(solver="peft")
    opts.sim = SimOptions(trace=False)
    rep = report(solve(path, target, opts))
    (s,) = rep["schedules"].values()
    num = s["numerics"]
    return {"mvms": rep["mvms"], "groups": rep.get("groups"), "crossbars": rep["crossbars"],
            "tasks": rep["tasks"], "simulated_ns": s["simulated_ns"],
            "period_ns": s.get("simulated_period_ns"),
            "numerics": None if num is None else num["ok"]}


def run(target: Target, resnet: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {p.stem: p for p in sorted(EXAMPLES.glob("*.onnx"))}
        for name, build in CNNS.items():
            models[name] = Path(tmp) / f"{name}.onnx"
            onnx.save(build(), models[name])
        if resnet:
            models["resnet18"] = Path(tmp) / "resnet18.onnx"
            onnx.save(resnet18(), models["resnet18"])
        for name, path in models.items():
            row = measure(path, target, pipeline=False)
            if name != "resnet18":  # its pipeline figures are in docs/benchmarks.md §Pipeline
                piped = measure(path, target, pipeline=True)
                row["period_ns"] = piped["period_ns"]
                row["numerics"] = row["numerics"] and piped["numerics"]
            out[name] = row
            print(name, row, file=sys.stderr)
    return out


def _n(v: Any) -> str:
    return "-" if v is None else f"{v:,}"


def compare(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> str:
    lines = ["| model | MVMs before → after | groups / crossbars | latency ns before → after "
             "| period ns before → after | numerics |", "|---|---:|---:|---:|---:|---|"]
    for name, a in after.items():
        b = before.get(name, {})
        change = "" if not b.get("simulated_ns") else \
            f" ({(a['simulated_ns'] - b['simulated_ns']) / b['simulated_ns']:+.1%})"
        pchange = "" if not (b.get("period_ns") and a["period_ns"]) else \
            f" ({(a['period_ns'] - b['period_ns']) / b['period_ns']:+.1%})"
        lines.append(
            f"| {name} | {_n(b.get('mvms'))} → {_n(a['mvms'])} | {_n(a['groups'])} / "
            f"{_n(a['crossbars'])} | {_n(b.get('simulated_ns'))} → {_n(a['simulated_ns'])}"
            f"{change} | {_n(b.get('period_ns'))} → {_n(a['period_ns'])}{pchange} | "
            f"{'ok' if a['numerics'] and b.get('numerics', True) else 'FAILED'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--resnet", action="store_true", help="add ResNet-18 (224), latency only")
    ap.add_argument("--array-group-max", type=int, metavar="N",
                    help="override the target's array_group_max (1: one crossbar per MVM)")
    ap.add_argument("--mvm-units", type=int, metavar="N", help="override the target's mvm_units")
    ap.add_argument("--routing", choices=ROUTINGS, help="override the target's routing")
    ap.add_argument("--json", metavar="FILE", help="write the figures here")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        print(compare(before, after))
        return
    keys = {"array_group_max": args.array_group_max, "mvm_units": args.mvm_units,
            "routing": args.routing}
    try:
        target = dataclasses.replace(load_target(args.target),
                                     **{k: v for k, v in keys.items() if v is not None})
    except TargetError as e:
        print(f"bench_groups: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    got = run(target, args.resnet)
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=1))
    print(json.dumps(got, indent=1))


if __name__ == "__main__":
    main()
