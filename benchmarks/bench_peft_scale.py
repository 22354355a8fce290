"""PEFT at scale (issue #27): seconds against tasks on tile-free random layered DAGs.

Graphs are ``random_layered_dag(n, seed 1, width 16, no tiles)``; targets a 16×16 mesh
(256 cores) for 1k..100k tasks and an 8×8 mesh for 1,000 tasks × 64 cores. Each point is
the best wall time of ``--repeat`` runs of ``peft_schedule`` (graph building excluded),
the schedule checked by ``validate_schedule``; the makespan column is the schedule's
communication-aware estimate (a plain makespan on versions that have none), so two
versions can be compared for quality too.

    PYTHONPATH=$PWD python benchmarks/bench_peft_scale.py [--sizes 1000,3000,...] [--repeat N]
        [--side N] [--phases] [--small-repeat N] [--baseline DIR ...] [--baseline-rev REV ...]

``--baseline DIR`` times the 1,000 × 64 point of the checkout at DIR (in a subprocess with
DIR first on PYTHONPATH), alternating with this checkout's runs so that both see the same
machine load. ``--baseline-rev REV`` does the same for a git revision of this repository,
extracted (``git archive REV raptor``) into a temporary directory for the run; the default
baseline is the previous PEFT, :data:`PREVIOUS_PEFT`. Run the whole script with another
checkout on PYTHONPATH to time that version's curve. ``--side N`` runs the curve on an N×N
mesh instead; ``--phases`` adds, per curve point, the CPU µs per task of each phase of the
list scheduler (every run of it: :data:`PHASES`, each timed by a wrapper, which adds a little).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from raptor.solver import peft, peft_schedule, validate_schedule
from raptor.solver.generate import random_layered_dag
from raptor.target import Target

SIZES = (1000, 3000, 10000, 30000, 100000)
PREVIOUS_PEFT = "f4707ad"
"""The PEFT before link reservations (issue #27's "previous PEFT")."""
PHASES = (("loop", "_ListScheduler", "run"), ("tile room", "_ListScheduler", "candidates"),
          ("ready rows", "_ListScheduler", "data_ready"), ("EFT + gaps", "_Cores", "finishes"),
          ("bounded", "_ListScheduler", "bounded"), ("lookahead", "_ListScheduler", "score"),
          ("judging", "_ListScheduler", "refine"), ("commit", "_ListScheduler", "commit"))
"""--phases: (label, class and method of `raptor.solver.peft`); "loop" is the whole
list-scheduling loop of a run, the others its parts (the rest of the loop is the ready queue
and reading the task's messages). "bounded" is the choice among the cores that can win
(lookahead and judging included); "lookahead" and "judging" the full pass it falls back to.
Looked up when used: a baseline's version may lack them."""


@contextlib.contextmanager
def phase_clock() -> Iterator[collections.Counter[str]]:
    """CPU ns spent in each of :data:`PHASES` while the context is open."""
    spent: collections.Counter[str] = collections.Counter()

    def timed(label: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            c0 = time.process_time_ns()
            try:
                return method(*args)
            finally:
                spent[label] += time.process_time_ns() - c0
        return run

    originals = [(getattr(peft, cls), name, getattr(peft, cls).__dict__[name])
                 for _, cls, name in PHASES]
    for (label, _, _), (cls, name, method) in zip(PHASES, originals, strict=True):
        setattr(cls, name, timed(label, method))
    try:
        yield spent
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)


def point(n: int, rows: int, cols: int, repeat: int,
          phases: collections.Counter[str] | None = None) -> tuple[float, float, int]:
    """Best wall and CPU seconds of ``repeat`` PEFT runs and the schedule's makespan (and
    the CPU ns of :data:`PHASES` over all runs, added to ``phases``)."""
    graph = random_layered_dag(n, 1, width=16, tiles_per_batch=(0, 0))
    target = Target(name=f"{rows}x{cols}", mesh_rows=rows, mesh_cols=cols)
    best = cpu = float("inf")
    makespan = 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        with phase_clock() if phases is not None else contextlib.nullcontext() as spent:
            res = peft_schedule(graph, target)
        if spent is not None and phases is not None:
            phases.update(spent)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
        errors = validate_schedule(graph, target, res)
        if errors:
            raise SystemExit(f"invalid schedule at {n} tasks: {errors[0]}")
        makespan = getattr(res, "estimate_ns", res.makespan_ns)
    return best, cpu, makespan


def small_in(checkout: str) -> tuple[float, float, int]:
    """One run of the 1,000 × 64 point by the checkout at ``checkout``."""
    env = dict(os.environ, PYTHONPATH=checkout)
    out = subprocess.run([sys.executable, __file__, "--small-only"], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="task counts on the 16x16 mesh (comma-separated)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per curve point (best kept)")
    ap.add_argument("--side", type=int, default=16, help="the curve's mesh is SIDE x SIDE")
    ap.add_argument("--phases", action="store_true",
                    help="CPU us per task of each list-scheduling phase, per curve point")
    ap.add_argument("--small-repeat", type=int, default=5,
                    help="runs of the 1,000 tasks x 64 cores point (best kept)")
    ap.add_argument("--baseline", action="append", default=[], metavar="DIR",
                    help="also time the 1,000 x 64 point of the checkout at DIR")
    ap.add_argument("--baseline-rev", action="append", default=None, metavar="REV",
                    help="also time the 1,000 x 64 point of git revision REV of this "
                         f"repository (default: {PREVIOUS_PEFT}, the previous PEFT; "
                         "'none' for no revision)")
    ap.add_argument("--small-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.small_only:
        print(*point(1000, 8, 8, 1))
        return
    revs = [r for r in (args.baseline_rev or [PREVIOUS_PEFT]) if r != "none"]
    with tempfile.TemporaryDirectory() as tmp:
        for rev in revs:
            extract(rev, Path(tmp) / rev)
        run(args, {**{d: d for d in args.baseline}, **{rev: str(Path(tmp) / rev) for rev in revs}})


def verdict(bad: list[str], what: str) -> NoReturn:
    """End a comparison against a revision: each difference on a line, then `what` and
    whether it was identical; exit 1 on any difference."""
    for line in bad:
        print("DIFF", line)
    print(f"{what}: " + ("identical" if not bad else f"{len(bad)} differ"))
    raise SystemExit(1 if bad else 0)


def extract(rev: str, into: Path) -> None:
    """The ``raptor`` package of git revision ``rev`` of this repository, under ``into``."""
    repo = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "raptor"],
                             capture_output=True, check=False)
    if archive.returncode:
        print(f"git archive {rev}: {archive.stderr.decode().strip()}", file=sys.stderr)
        raise SystemExit(2)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def run(args: argparse.Namespace, baselines: dict[str, str]) -> None:
    """The table: the 1,000 x 64 point against each baseline (label: checkout), then the
    curve (on a --side mesh)."""
    print("| tasks | cores | wall s | CPU s | makespan ns | version |")
    print("|---:|---:|---:|---:|---:|---|")
    inf = float("inf")
    runs = {d: (inf, inf, 0) for d in ["this", *baselines]}
    for _ in range(args.small_repeat):
        for d in runs:
            s, c, m = point(1000, 8, 8, 1) if d == "this" else small_in(baselines[d])
            runs[d] = (min(runs[d][0], s), min(runs[d][1], c), m)
    for d, (s, c, m) in runs.items() if args.small_repeat else ():
        ratio = "" if d == "this" else f" (this: {runs['this'][1] / c:.2f}x its CPU)"
        print(f"| 1000 | 64 | {s:.3f} | {c:.3f} | {m} | {d}{ratio} |", flush=True)
    side = args.side
    for n in (int(x) for x in args.sizes.split(",") if x):
        spent: collections.Counter[str] | None = collections.Counter() if args.phases else None
        s, c, m = point(n, side, side, args.repeat, spent)
        print(f"| {n} | {side * side} | {s:.2f} | {c:.2f} | {m} | this |", flush=True)
        if spent is not None:
            print("  CPU us per task (all runs of the list scheduler): " + ", ".join(
                f"{label} {spent[label] / 1000 / n / args.repeat:.1f}" for label, *_ in PHASES),
                flush=True)


if __name__ == "__main__":
    main()
