"""Pipeline mode end to end: stream programs simulated, the period estimate beside the
simulator (ideal options and contention), throughput, numerics of every inference.

    python -m benchmarks.bench_stream [--stream 8] [--time-limit 60] [--workers 2]
                                      [--models NAME ...] [--resnet] [--cnns [NAME ...]] [--cli]

For every example (and ResNet-18 224×224 with `--resnet`, with and without replication)
this runs `raptor.solve.solve(mode="pipeline", solver="both")` — the spec's heuristic and
the CP-SAT pipeline model, each materialized as a stream program and simulated for
`--stream` inferences, the judge returning each row's fastest simulated candidate — and
prints one markdown row per schedule: the candidate returned, stages and cores,
crossbars (+ copies), the solvers' period model, the stream estimate (ideal and with the
shared-memory service) beside the simulated period (ideal options and default options), the
latency of one inference in the pipeline, throughput, efficiency (period lower bound /
simulated period), the latency-mode latency, the numerics of every inference against
onnxruntime, and seconds. `--cnns` adds the three CNNs of `benchmarks/cnns.py`, the five
pretrained nets of `benchmarks/bench_pretrained.py` (from its cache) and the torchvision
nets of `benchmarks/torchvision_cnns.py` that its cache holds (exported there with torch,
which this script does not need). `--cli` also times
`raptor solve MODEL --mode pipeline` on ResNet-18 as a user runs it (outputs written).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from raptor.driver import CompileOptions, InputOptions
from raptor.gc_pause import collector_paused
from raptor.sim import SimOptions, Simulator
from raptor.solve import ScheduleRun, SolveOptions, solve
from raptor.target import Target, load_target

ROOT = Path(__file__).resolve().parents[1]


def pct(a: int | None, b: int | None) -> str:
    """How far `a` (simulated) is from `b` (estimate)."""
    if not a or not b:
        return "—"
    return f"{(a - b) / b:+.1%}"


def fmt(n: int | float | None) -> str:
    return "—" if n is None else f"{n:,}"


HEAD = ("| model | replication | solver | returned | stages / cores | crossbars (+copies) | "
        "solver period model ns | status | est. ideal period ns | sim. ideal period ns | Δ | "
        "est. period ns | sim. period ns | Δ | shared-memory service ns | latency in pipeline ns | "
        "throughput /s | efficiency | latency mode ns | period ≤ latency mode | numerics "
        "(inferences) | local memory peak | solve s |\n"
        "|---|---|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---|---|---:|---:|")


def row(model: str, replication: bool, run: ScheduleRun, stream: int, bound: int) -> str:
    pr, est = run.pipeline, run.stream_estimate
    assert pr is not None and est is not None
    fill = len(pr.stages)
    sim = run.sim.report if run.sim is not None else None
    ideal = run.ideal
    period = run.period_ns
    ideal_p = ideal.period_ns(fill) if ideal is not None else None
    lat = sorted(sim.inference_latency_ns()) if sim is not None else []
    extra = sum(r.extra_crossbars for r in pr.replicated)
    used = sum(1 for c in range(len(pr.schedule.core_tasks)) if pr.schedule.core_tasks[c])
    nums = run.inference_numerics or []
    ok = all(all(x[2] for x in p.values()) for p in nums) and len(nums) == stream
    err = max((x[0] for p in nums for x in p.values()), default=0.0)
    numerics = f"{'ok' if ok else 'FAIL'} {err:.1e} ({len(nums)})"
    top = run.memory.peak if run.memory is not None else None
    mem = f"{top.peak_bytes / 1024:.1f} KiB" if top is not None else "—"
    returned = next((c["candidate"] for c in run.candidates if c["returned"]), "—")
    lm = run.latency_mode_ns
    return (f"| {model} | {'on' if replication else 'off'} | {run.name} | {returned} | "
            f"{len(pr.stages)} / {used} | {pr.crossbars_used - extra:,} (+{extra:,}) | "
            f"{pr.period_ns:,} | {pr.status.split()[0]} | {est.ideal_period_ns:,} | "
            f"{fmt(ideal_p)} | {pct(ideal_p, est.ideal_period_ns)} | {est.period_ns:,} | "
            f"{fmt(period)} | {pct(period, est.period_ns)} | {est.memory_ns:,} | "
            f"{fmt(lat[len(lat) // 2] if lat else None)} | "
            f"{1e9 / period:,.1f} | {bound / period:.0%} | {fmt(lm)} | "
            f"{'yes' if lm and period <= lm else 'NO'} | {numerics} | {mem} | "
            f"{pr.solve_seconds:.2f} |"
            if period else f"| {model} | {run.name} | not simulated: {run.sim_error} |")


CAUSES = (("default", SimOptions(trace=False)),
          ("no shared-memory queue", SimOptions(shared_queueing=False, trace=False)),
          ("no link contention", SimOptions(link_contention=False, trace=False)),
          ("buffered sends", SimOptions(mode="buffered", trace=False)),
          ("ideal", SimOptions.ideal(trace=False)))


def causes(model: str, run: ScheduleRun, target: Target) -> str:
    """The simulated period with one contention effect off at a time: which one makes the
    default run differ from the ideal one."""
    assert run.pipeline is not None
    sim = Simulator(run.scheduled, target)
    fill = len(run.pipeline.stages)
    cells = [fmt(sim.timing(o).period_ns(fill)) for _, o in CAUSES]
    return f"| {model} | {run.name} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stream", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", nargs="*", help="example names (default: all)")
    ap.add_argument("--resnet", action="store_true", help="ResNet-18 224x224 too")
    ap.add_argument("--cnns", nargs="*", metavar="NAME", help="benchmarks/cnns.py's three "
                    "CNNs, bench_pretrained.py's five pretrained nets and the cached exports "
                    "of torchvision_cnns.py too (or those named)")
    ap.add_argument("--cli", action="store_true",
                    help="time `raptor solve --mode pipeline` on ResNet-18")
    ap.add_argument("--causes", action="store_true", help="also the simulated period with "
                    "each contention effect off (shared-memory queue, links, rendezvous)")
    args = ap.parse_args(argv)
    target = load_target("default")
    models = [(p.stem, p) for p in sorted((ROOT / "examples").glob("*.onnx"))
              if not args.models or p.stem in args.models]
    tmp = Path(tempfile.mkdtemp())
    if args.resnet or args.cli:
        from benchmarks.models import resnet18
        r18 = tmp / "resnet18.onnx"
        onnx.save(resnet18(), str(r18))
    if args.resnet:
        models.append(("resnet18", r18))
    shapes: dict[str, dict[str, tuple[int, ...]]] = {}
    if args.cnns is not None:
        from benchmarks.bench_pretrained import MODELS, default_cache, fetch
        from benchmarks.cnns import CNNS
        from benchmarks.torchvision_cnns import cached
        for cnn, build in CNNS.items():
            if not args.cnns or cnn in args.cnns:
                onnx.save(build(), str(tmp / f"{cnn}.onnx"))
                models.append((cnn, tmp / f"{cnn}.onnx"))
        for m in (m for m in MODELS if not args.cnns or m.name in args.cnns):
            models.append((m.name, fetch(m, default_cache())))
            k, v = m.shape.split("=")
            shapes[m.name] = {k: tuple(int(d) for d in v.split("x"))}
        models += [(n.label, p) for n, p in cached() if not args.cnns or n.label in args.cnns]
        known = {*CNNS, *(m.name for m in MODELS), *(n.label for n, _ in cached())}
        if unknown := [n for n in args.cnns if n not in known]:
            # a misspelt net gave a table of no rows (`efficientnet_b0`, not `-64`)
            ap.error(f"--cnns: no net named {', '.join(unknown)} (known: "
                     f"{', '.join(sorted(known))})")
    print(HEAD)
    cause_rows = []
    for name, path in models:
        for replication in ((True, False) if name == "resnet18" else (True,)):
            opts = SolveOptions(solver="both", mode="pipeline", stream=args.stream,
                                time_limit=args.time_limit, workers=args.workers,
                                replication=replication, allow_memory_overflow=True,
                                compile=CompileOptions(inputs=InputOptions(
                                    shapes=shapes.get(name, {}))))
            t0 = time.perf_counter()
            with collector_paused():
                solved = solve(path, target, opts)
            wall = time.perf_counter() - t0
            for run in solved.runs:
                assert solved.problem is not None
                print(row(name, replication, run, args.stream, solved.problem.period_bound(True)))
                if args.causes and run.sim is not None:
                    cause_rows.append(causes(name, run, target))
            print(f"<!-- {name} replication={replication}: solve() {wall:.1f} s wall; "
                  f"{solved.seconds} -->", flush=True)
    if cause_rows:
        print("\n| model | solver | " + " | ".join(f"{n} period ns" for n, _ in CAUSES)
              + " |\n|---|---|" + "---:|" * len(CAUSES))
        print("\n".join(cause_rows))
    if args.cli:
        out = tmp / "out"
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "raptor.cli", "solve", str(r18), "--mode",
                               "pipeline", "--out", str(out)], capture_output=True, text=True,
                              check=False, cwd=ROOT)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
        print(f"\n`raptor solve resnet18.onnx --mode pipeline`: exit {proc.returncode}, "
              f"{wall:.1f} s wall, {cpu:.1f} s CPU (user + system), load average "
              f"{os.getloadavg()[0]:.1f}")
        print("\n".join(proc.stdout.splitlines()[-12:]))
        print("\n".join(line for line in proc.stderr.splitlines()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
