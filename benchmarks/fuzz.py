"""Raptor's own fuzz campaign in benchmark mode: seeded mutations of the bundled models, IR,
rule files, targets and input files through the command line, classified by outcome.

    python -m benchmarks.fuzz --cases 10000 --seed 1 --jobs 2 [--timeout 30] [--mem-mb 2048]
                              [--classes onnx,ir,rules,target,inputs] [--profile bench|ci]

Cases are split evenly over the classes and interleaved. Prints (markdown) the table of
class x outcome, then every failure signature with its count and an example case (rerun one
with `--only CLASS#INDEX`). Exit 1 when any case hung, crashed, ran out of memory, ended in
a traceback, or left files in --out after failing early.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.fuzz.harness import (
    DUMP,
    FAILURES,
    Case,
    FuzzRun,
    Result,
    classify,
    signatures,
    table,
)
from tests.fuzz.mutators import CLASSES, cases, make_case


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000, help="total cases (default 10,000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case (30)")
    p.add_argument("--mem-mb", type=int, default=2048, help="address-space cap per worker")
    p.add_argument("--classes", default=",".join(CLASSES))
    p.add_argument("--profile", choices=["bench", "ci"], default="bench")
    p.add_argument("--only", metavar="CLASS#INDEX", help="run one case and print its output")
    p.add_argument("--json", metavar="FILE", help="write every result (without file contents)")
    p.add_argument("--report", metavar="FILE", help="print the tables of an earlier --json "
                   "file again (messages judged again) instead of "
                   "running")
    args = p.parse_args()

    if args.report:
        results = load(args.report)
        print(f"{len(results)} cases from {args.report}\n")
        print_tables(results)
        return 0
    if args.only:
        klass, index = args.only.split("#")
        batch = [make_case(klass, args.seed, int(index), args.profile)]
    else:
        classes = args.classes.split(",")
        counts = {k: args.cases // len(classes) + (i < args.cases % len(classes))
                  for i, k in enumerate(classes)}
        batch = cases(counts, args.seed, args.profile)  # type: ignore[assignment]
    start = time.monotonic()
    done = [0]

    def progress(r: Result) -> None:
        done[0] += 1
        if args.only:
            print(f"{r.case.name}: {r.outcome} (exit {r.code}) {r.signature}\n"
                  f"argv: {' '.join(r.case.argv)}\ninvalid: {r.case.invalid}\n"
                  f"--- stderr\n{r.stderr}")
        elif r.outcome in FAILURES or r.left_files:
            print(f"  [{done[0]}] {r.case.name}: {r.outcome} {r.signature}", file=sys.stderr)
        if done[0] % 500 == 0:
            print(f"  {done[0]} cases, {time.monotonic() - start:.0f} s", file=sys.stderr)

    run = FuzzRun(jobs=args.jobs, timeout=args.timeout, mem_mb=args.mem_mb)
    results = run.run(batch, progress)
    wall = time.monotonic() - start
    if args.only:
        return 0
    print(f"{len(results)} cases, seed {args.seed}, profile {args.profile}, {args.jobs} jobs, "
          f"timeout {args.timeout:g} s, cap {args.mem_mb} MiB, {wall:.0f} s wall\n")
    print_tables(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"case": r.case.name, "argv": list(r.case.argv), "outcome": r.outcome,
                        "code": r.code, "signature": r.signature, "seconds": round(r.seconds, 3),
                        "left_files": r.left_files, "invalid": r.case.invalid,
                        "stderr": r.stderr[-4000:]} for r in results], fh, indent=1)
    bad = [r for r in results if r.outcome in FAILURES or r.left_files]
    return 1 if bad else 0


def print_tables(results: list[Result]) -> None:
    """The class x outcome table, then every failure, unclean and accepted signature."""
    print(table(results))
    failed = [r for r in results if r.outcome in FAILURES]
    print(f"\n{len(failed)} failures, {sum(r.left_files for r in results)} runs left files "
          "in --out")
    for title, outcomes in (("Failures", FAILURES), ("Unclean messages", ("unclean",)),
                            ("Invalid models accepted", ("accepted",))):
        rows = signatures(results, outcomes)
        if not rows:
            continue
        print(f"\n{title}:\n\n| outcome | class | signature | cases | example |\n"
              "|---|---|---|---:|---|")
        for outcome, klass, sig, n, example in rows:
            print(f"| {outcome} | {klass} | `{sig}` | {n} | {example} |")


def load(path: str) -> list[Result]:
    """Results of an earlier `--json` run, their messages judged again."""
    with open(path) as fh:
        rows = json.load(fh)
    out = []
    for row in rows:
        klass, rest = row["case"].split("#", 1)
        index, mutator = rest.split(":", 1)
        case = Case(klass, mutator, int(index), {}, tuple(row["argv"]), row["invalid"])
        outcome, signature = row["outcome"], row["signature"]
        if outcome not in FAILURES:  # judged again from the exit code and the text
            outcome, signature = classify(case, row["code"], row["stderr"], None, "", "done")
        elif outcome in ("hang", "crash") and DUMP in row["stderr"]:
            dump = row["stderr"].split(DUMP, 1)[1]
            signature = classify(case, None, "", None, dump, outcome)[1]
        out.append(Result(case, outcome, row["code"], row["stderr"], signature, row["seconds"],
                          row["left_files"]))
    return out


if __name__ == "__main__":
    sys.exit(main())
