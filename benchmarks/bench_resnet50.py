"""ResNet-50 (224) end to end on a 16×16 target (issue #27): `raptor solve` in each mode as
its own process, with its wall time, peak memory (the process's maximum resident set, as
`/usr/bin/time -v` reports it) and report.json's seconds per stage.

    PYTHONPATH=$PWD python benchmarks/bench_resnet50.py [--modes latency,pipeline]
        [--rows 16 --cols 16] [--solver S] [--work DIR] [-- extra solve arguments]

The model is `benchmarks.models.resnet50()`; the target is the default one with a
`rows`×`cols` mesh, written as a TOML file in the work folder. Each mode's outputs are kept
in `DIR/<mode>/`. The pass criterion of the issue is < 5 min wall and < 8 GB per mode with
the numerics ok.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from benchmarks.models import resnet50


def solve(model: Path, target: Path, mode: str, out: Path, extra: list[str],
          solver: str | None) -> tuple[float, float, int, dict]:
    """Run one `raptor solve` process (its output in `out`/solve.log): wall seconds, its
    CPU seconds, its peak RSS in bytes and its report (empty when it failed)."""
    cmd = [sys.executable, "-m", "raptor.cli", "solve", str(model), "--mode", mode,
           "--target", str(target), "--out", str(out), *extra]
    if solver:
        cmd += ["--solver", solver]
    out.mkdir(parents=True, exist_ok=True)
    log = out / "solve.log"
    t = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=os.environ.copy())
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        print(f"{mode}: exit {proc.returncode}\n{log.read_text()[-3000:]}")
    report = out / "report.json"
    rep = json.loads(report.read_text()) if report.is_file() else {}
    return wall, cpu, usage.ru_maxrss * 1024, rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="latency,pipeline")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--cols", type=int, default=16)
    ap.add_argument("--solver", help="one solver instead of the mode's default (both)")
    ap.add_argument("--work", help="folder for the model, target and outputs (default: a "
                    "temporary one)")
    ap.add_argument("extra", nargs="*", help="more `raptor solve` arguments (after --)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_resnet50_"))
    work.mkdir(parents=True, exist_ok=True)
    model, target = work / "resnet50.onnx", work / f"mesh{args.rows}x{args.cols}.toml"
    if not model.is_file():
        onnx.save(resnet50(), str(model))
    target.write_text(f'name = "mesh{args.rows}x{args.cols}"\nmesh_rows = {args.rows}\n'
                      f"mesh_cols = {args.cols}\n")
    print(f"ResNet-50 (224) on a {args.rows}x{args.cols} target, outputs in {work}")
    for mode in args.modes.split(","):
        wall, cpu, rss, rep = solve(model, target, mode, work / mode, args.extra, args.solver)
        print(f"\n{mode}: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss / 2**30:.2f} GiB, "
              f"{rep.get('tasks', '?')} tasks")
        stages = rep.get("seconds", {})
        print("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
        for name, s in rep.get("schedules", {}).items():
            sim = s.get("simulation") or {}
            ops = sim.get("ops_executed", 0) + sim.get("body_ops_executed", 0)
            rate = ops / sim["wall_time_s"] if sim.get("wall_time_s") else 0.0
            num = s.get("numerics") or {}
            period = s.get("simulated_period_ns")
            print(f"  {name}: {s.get('status')}, simulated {s.get('simulated_ns')} ns"
                  + (f", period {period} ns" if period else "")
                  + f", numerics {'ok' if num.get('ok') else 'FAILED'} "
                  f"(max abs error {num.get('max_abs_error')}), simulation {ops} ops in "
                  f"{sim.get('wall_time_s', 0):.1f} s ({rate:,.0f} ops/s)")


if __name__ == "__main__":
    main()
