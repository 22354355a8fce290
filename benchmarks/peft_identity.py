"""Whether this checkout's PEFT and EFT give exactly another version's schedules (issue #27):
every field of the result but ``solve_seconds`` (placement, starts, the replayed estimate,
bounds, summary, notes), hashed, on random layered DAGs with and without tiles on 4×4, 8×8 and
16×16 meshes and under pimsim-nn's protocol.

    PYTHONPATH=$PWD python benchmarks/peft_identity.py [--baseline-rev REV]

The cases run once with git revision REV's `raptor` (default HEAD, i.e. uncommitted changes;
extracted into a temporary directory as `bench_peft_scale.py --baseline-rev` does) and once
with this checkout's, each in a subprocess; exits 1 naming the cases that differ. Real models
are checked by comparing `raptor solve X --solver peft --no-simulate --json --out DIR` outputs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = ((300, 1, (0, 3), 4, "raptor"), (1000, 1, (0, 0), 8, "raptor"),
         (600, 2, (0, 3), 16, "raptor"), (400, 3, (1, 2), 8, "raptor"),
         (2000, 1, (0, 0), 16, "raptor"), (1500, 4, (0, 2), 8, "raptor"),
         (500, 5, (0, 3), 8, "pimsim-nn"), (800, 6, (0, 1), 4, "pimsim-nn"),
         (3000, 7, (0, 0), 16, "raptor"))
"""(tasks, seed, tiles per batch, mesh side, protocol); EFT too up to 600 tasks."""


def hashes() -> None:
    """Print one line per case and scheduler: the case, the estimate and the result's hash."""
    import dataclasses
    import hashlib
    import json

    from raptor.solver import eft_schedule, peft_schedule
    from raptor.solver.generate import random_layered_dag
    from raptor.target import Target

    for n, seed, tiles, side, protocol in CASES:
        graph = random_layered_dag(n, seed, width=16, tiles_per_batch=tiles)
        target = Target(name=f"{side}x{side}", mesh_rows=side, mesh_cols=side,
                        protocol=protocol)
        for schedule in (peft_schedule, eft_schedule) if n <= 600 else (peft_schedule,):
            res = schedule(graph, target)
            fields = dataclasses.asdict(res)
            fields.pop("solve_seconds")
            fields.pop("comm", None)  # the replay behind the estimate, not the schedule
            digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
            print(f"{schedule.__name__} {n} tasks seed {seed} tiles {tiles} {side}x{side} "
                  f"{protocol}: estimate {res.estimate_ns} {digest[:16]}", flush=True)


def run_with(checkout: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=checkout)
    return subprocess.run([sys.executable, __file__, "--hashes"], env=env, check=True,
                          capture_output=True, text=True).stdout.splitlines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline-rev", default="HEAD",
                    help="git revision to compare with (default: HEAD, i.e. uncommitted "
                         "changes)")
    ap.add_argument("--hashes", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hashes:
        hashes()
        return
    from benchmarks.bench_peft_scale import extract, verdict

    with tempfile.TemporaryDirectory() as tmp:
        extract(args.baseline_rev, Path(tmp) / "base")
        base = run_with(str(Path(tmp) / "base"))
    this = run_with(str(ROOT))
    verdict([f"{a}  vs  {b}" for a, b in zip(base, this, strict=True) if a != b],
            f"{len(this)} schedules")


if __name__ == "__main__":
    main()
