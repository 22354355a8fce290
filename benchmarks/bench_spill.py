"""What spilling to shared memory costs: each net that needs it, compiled on a target whose
local memory it does not fit, simulated with spilling (the default) and with
``--allow-memory-overflow`` (the same schedule without the memory limit: the unconstrained
figure). Each run is one ``python -m raptor.cli solve --json`` in a subprocess (PEFT, seeded
random inputs, numerics against onnxruntime); rows print as a Markdown table.

Usage: ``python -m benchmarks.bench_spill [--mode latency|pipeline] [NAME ...]``
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

import onnx

from benchmarks.bench_pretrained import MODELS, default_cache, fetch
from benchmarks.models import resnet50

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    """examples/<model>.onnx, a bench_pretrained name, or ``resnet50`` (benchmarks/models.py)."""
    mesh: int
    local_kib: int


CASES = (
    Case("resnet50", "resnet50", 8, 64),
    Case("resnet_block-2x2-6k", "resnet_block", 2, 6),
    Case("torch_cnn-2x2-8k", "torch_cnn_dynamo", 2, 8),
    Case("lenet-2x2-4k", "lenet", 2, 4),
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
    target = work / f"{case.mesh}x{case.mesh}-{case.local_kib}k.toml"
    target.write_text(f'name = "{case.mesh}x{case.mesh}-{case.local_kib}KiB"\n'
                      f"mesh_rows = {case.mesh}\nmesh_cols = {case.mesh}\n"
                      f"local_memory_bytes = {case.local_kib * 1024}\n")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help=f"cases (default all: "
                   f"{', '.join(c.name for c in CASES)})")
    p.add_argument("--mode", default="latency", choices=["latency", "pipeline"])
    args = p.parse_args(argv)
    key = "simulated_ns" if args.mode == "latency" else "simulated_period_ns"
    est_key = "estimate_ns" if args.mode == "latency" else "period_ns"
    failed = 0
    print("| net | target | exit | spilled B (stores/loads) | peak B | estimate ns | "
          "simulated ns | est. error | numerics | overflow: simulated ns | spill cost | "
          "wall s |\n|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for case in CASES:
            if args.names and case.name not in args.names:
                continue
            sp, free = run(case, args.mode, False, work), run(case, args.mode, True, work)
            target = f"{case.mesh}x{case.mesh}, {case.local_kib} KiB"
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
