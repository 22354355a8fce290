"""What spilling to shared memory costs: each net that needs it, compiled on a target whose
local memory it does not fit, simulated with spilling (the default) and with
``--allow-memory-overflow`` (the same schedule without the memory limit: the unconstrained
figure). Each run is one ``python -m raptor.cli solve --json`` in a subprocess (PEFT, seeded
random inputs, numerics against onnxruntime); rows print as a Markdown table.

``--compare`` instead measures the two ways of choosing what to spill on the same
program (the case compiled and scheduled once, in-process, with the memory limit lifted so
nothing is spilled yet): Belady (furthest next use at the fullest step, the default) and
the exact model (CP-SAT over each core's idle stretches, fewest bytes moved, then Belady
for what fragmentation leaves); each spilled copy is simulated with the capacity check.

Usage: ``python -m benchmarks.bench_spill [--mode latency|pipeline] [--compare] [NAME ...]``
(default: every case; ResNet-50 takes minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from benchmarks.bench_pretrained import MODELS, default_cache, fetch
from benchmarks.models import resnet50
from raptor.ir.parser import parse_module
from raptor.ir.printer import print_ir
from raptor.passes.spill import spill
from raptor.sim import SimError, Simulator, simulate
from raptor.solve import SolveOptions, solve
from raptor.target import Target

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    """examples/<model>.onnx, a bench_pretrained name, or ``resnet50`` (benchmarks/models.py)."""
    mesh: int
    local_bytes: int


CASES = (
    Case("resnet50", "resnet50", 8, 64 * 1024),
    Case("resnet_block-2x2-6k", "resnet_block", 2, 6 * 1024),
    Case("mobilenet_block-2x2-10k", "mobilenet_block", 2, 10 * 1024),
)


def model_path(name: str, work: Path) -> tuple[Path, list[str]]:
    """The case's ONNX file and its --input-shape arguments."""
    if name == "resnet50":
        path = work / "resnet50.onnx"
        if not path.exists():
            onnx.save(resnet50(), str(path))
        return path, []
    for m in MODELS:
        if m.name == name:
            return fetch(m, default_cache()), ["--input-shape", m.shape]
    return ROOT / "examples" / f"{name}.onnx", []


def run(case: Case, mode: str, overflow: bool, work: Path) -> dict[str, object]:
    """One solve: its schedule row of report.json, exit code and wall time."""
    path, shape = model_path(case.model, work)
    t = target_of(case)
    target = work / f"{t.name}.toml"
    target.write_text(f'name = "{t.name}"\nmesh_rows = {t.mesh_rows}\n'
                      f"mesh_cols = {t.mesh_cols}\nlocal_memory_bytes = {t.local_memory_bytes}\n")
    solver = "peft" if mode == "latency" else "pipeline"
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "raptor.cli", "solve", str(path), *shape, "--target",
             str(target), "--mode", mode, "--solver", solver, "--json", "--out", out,
             *(["--allow-memory-overflow"] if overflow else [])],
            capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
    try:
        row = next(iter(json.loads(proc.stdout)["schedules"].values()))
    except (json.JSONDecodeError, KeyError, StopIteration):
        return {"exit": proc.returncode, "wall_s": wall,
                "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return {"exit": proc.returncode, "wall_s": wall, **row}


def target_of(case: Case) -> Target:
    return Target(name=f"{case.mesh}x{case.mesh}-{case.local_bytes}B", mesh_rows=case.mesh,
                  mesh_cols=case.mesh, local_memory_bytes=case.local_bytes)


def compare(case: Case, work: Path) -> int:
    """Belady against the exact model on one program; prints a row each, returns the
    number that failed (did not fit or mismatched the unspilled program's outputs)."""
    path, shape = model_path(case.model, work)
    target = target_of(case)
    if shape:
        print(f"| {case.name} | (--compare takes models without --input-shape) |")
        return 1
    s = solve(path, target, SolveOptions(solver="peft", simulate=False,
                                         allow_memory_overflow=True))
    base = s.runs[0].scheduled
    text = print_ir(base.funcs)
    want = simulate(base, target, s.inputs).outputs
    failed = 0
    for exact in (False, True):
        m = parse_module(text, base.filename)
        m.constants = base.constants
        t0 = time.perf_counter()
        sp = spill(m, target, exact=exact)
        wall = time.perf_counter() - t0
        try:
            res = Simulator(m, target, check_memory=True).run(s.inputs)
        except SimError as e:
            failed += 1
            print(f"| {case.name} | {'exact' if exact else 'Belady'} | FAILED: {e} |")
            continue
        same = all(np.allclose(a, b, rtol=1e-5, atol=1e-6)
                   for a, b in zip(res.outputs, want, strict=True))
        failed += not same or bool(sp.unfit)
        stores = sum(c.stores for c in sp.cores.values())
        loads = sum(c.loads for c in sp.cores.values())
        print(f"| {case.name} | {'exact' if exact else 'Belady'} | {sp.bytes:,} | "
              f"{stores}/{loads} | {res.report.latency_ns:,} | "
              f"{'ok' if same else 'MISMATCH'} | {wall:.1f} |", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help=f"cases (default all: "
                   f"{', '.join(c.name for c in CASES)})")
    p.add_argument("--mode", default="latency", choices=["latency", "pipeline"])
    p.add_argument("--compare", action="store_true",
                   help="Belady against the exact eviction model (latency mode)")
    args = p.parse_args(argv)
    cases = [c for c in CASES if not args.names or c.name in args.names]
    if args.compare:
        print("| net | eviction | bytes moved | stores/loads | simulated ns | outputs | "
              "spill wall s |\n|---|---|---:|---:|---:|---|---:|")
        with tempfile.TemporaryDirectory() as tmp:
            return 1 if sum(compare(c, Path(tmp)) for c in cases) else 0
    key = "simulated_ns" if args.mode == "latency" else "simulated_period_ns"
    est_key = "estimate_ns" if args.mode == "latency" else "period_ns"
    failed = 0
    print("| net | target | exit | spilled B (stores/loads) | peak B | estimate ns | "
          "simulated ns | est. error | numerics | overflow: simulated ns | spill cost | "
          "wall s |\n|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for case in cases:
            sp, free = run(case, args.mode, False, work), run(case, args.mode, True, work)
            target = f"{case.mesh}x{case.mesh}, {case.local_bytes:,} B"
            if "error" in sp:
                failed += 1
                print(f"| {case.name} | {target} | {sp['exit']}: {sp['error']} |")
                continue
            mem = sp["local_memory"] or {}
            spill = mem.get("spill") or {}
            sim, est = sp.get(key), sp.get(est_key)
            free_sim = free.get(key)
            err = f"{100 * (est - sim) / sim:+.2f} %" if sim and est else "-"
            cost = f"{100 * (sim - free_sim) / free_sim:+.1f} %" if sim and free_sim else "-"
            ok = (sp.get("numerics") or {}).get("ok")
            failed += sp["exit"] != 0 or not ok
            print(f"| {case.name} | {target} | {sp['exit']} | {spill.get('bytes', 0):,} "
                  f"({spill.get('stores', 0)}/{spill.get('loads', 0)}) | "
                  f"{mem.get('peak_bytes', 0):,} | {est or 0:,} | {sim or 0:,} | {err} | "
                  f"{'ok' if ok else 'MISMATCH'} | {free_sim or 0:,} | {cost} | "
                  f"{sp['wall_s'] + free['wall_s']:.0f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
