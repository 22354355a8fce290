"""Whether this checkout's simulator gives exactly another version's results (issue #27):
the same outputs (bytes), reports (wall times aside), trace spans, messages and link
reservations, and the same timing-only reports, on saved scheduled programs under five
option sets (default, ideal, buffered, contention-free with `rendezvous_ns`, and pimsim-nn's
model for latency programs), and each latency program as exported for pimsim-nn, run under
pimsim-nn's model with the export's timings and message order.

    PYTHONPATH=$PWD python benchmarks/sim_identity.py --save DIR [MODEL.onnx ...]
    PYTHONPATH=$PWD python benchmarks/sim_identity.py DIR --baseline-rev REV

`--save` schedules each model with PEFT (latency program; for models other than ResNet-18
also the pipeline programs of `--mode pipeline`, 3 inferences) and saves the programs with
their weights and inputs; without models it saves every examples/*.onnx and ResNet-18 at
224 (`benchmarks/models.py`). The check then runs every program in DIR with this checkout
and with git revision REV's `raptor` (extracted into a temporary directory, as
`bench_peft_scale.py --baseline-rev` does), and exits 1 naming what differs.
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def save(models: list[str], out: Path) -> None:
    """Scheduled programs of `models`, with weights and inputs, under `out`."""
    import onnx

    from benchmarks.models import resnet18
    from raptor.driver import ir_inputs
    from raptor.ir.module import Module
    from raptor.solve import SolveOptions, solve, stream_inputs
    from raptor.target import Target

    out.mkdir(parents=True, exist_ok=True)
    if not models:
        models = sorted(glob.glob(str(ROOT / "examples" / "*.onnx")))
        onnx.save(resnet18(), out / "resnet18.onnx")
        models.append(str(out / "resnet18.onnx"))

    def keep(name: str, module: Module, feeds: dict[str, np.ndarray]) -> None:
        (out / f"{name}.spat").write_text(module.print())
        np.savez(out / f"{name}.weights.npz",
                 **{k: np.asarray(v) for k, v in module.constants.items()})  # type: ignore[arg-type]
        np.savez(out / f"{name}.inputs.npz", **feeds)  # type: ignore[arg-type]
        print("saved", name, flush=True)

    for model in models:
        stem = Path(model).stem
        s = solve(model, Target(), SolveOptions(solver="peft", simulate=False))
        keep(f"{stem}.lat", s.runs[0].scheduled, ir_inputs(s.compiled.graph, s.inputs))
        if stem == "resnet18":
            continue
        s = solve(model, Target(), SolveOptions(mode="pipeline", solver="pipeline",
                                                simulate=False, stream=3))
        data = stream_inputs(s.compiled.feeds.data, 3, 0)  # type: ignore[union-attr]
        stacked = {v.name: np.stack([d[v.name] for d in data]) for v in s.compiled.graph.inputs}
        for i, r in enumerate(s.runs):
            keep(f"{stem}.pipe{i}", r.scheduled, ir_inputs(s.compiled.graph, stacked))


def dump(programs: Path, out: Path) -> None:
    """Every program in `programs` run under each option set; what must stay identical,
    pickled to `out` (only the simulator's public interface: any version can run this)."""
    from raptor.ir.parser import parse_file
    from raptor.sim import SimError, SimOptions, Simulator
    from raptor.target import Target

    results: dict[str, Any] = {}
    for spat in sorted(programs.glob("*.spat")):
        name = spat.name[:-len(".spat")]
        module = parse_file(str(spat))
        module.constants.update(dict(np.load(programs / f"{name}.weights.npz")))
        feeds: dict[str | int, np.ndarray] = dict(np.load(programs / f"{name}.inputs.npz"))
        sim = Simulator(module, Target())
        options = {"default": SimOptions(), "ideal": SimOptions.ideal(),
                   "buffered": SimOptions(mode="buffered"),
                   "free": SimOptions(link_contention=False, shared_queueing=False,
                                      rendezvous_ns=7)}
        if ".lat" in name:
            options["pimsim"] = SimOptions.pimsim()
        got: dict[str, Any] = {}
        for key, opts in options.items():
            try:
                r = sim.run(feeds, opts)
                timing = sim.timing(opts).to_dict()
            except SimError as e:
                got[key] = ("error", str(e))
                continue
            rep = r.report.to_dict()
            for report in (rep, timing):
                report.pop("wall_time_s", None)
                report.pop("compile_time_s", None)
            got[key] = (rep, timing, [np.asarray(x).tobytes() for x in r.outputs], r.names,
                        r.trace.spans, r.trace.messages, r.trace.links)
        if ".lat" in name:
            got["pimsim-export"] = exported(module, feeds)
        results[name] = got
    with open(out, "wb") as f:
        pickle.dump(results, f)


def exported(module: Any, feeds: dict[str | int, np.ndarray]) -> Any:
    """The latency program as exported for pimsim-nn, run under the pimsim-nn model with
    the export's timings and message order (as `raptor solve --export-pimsim` does)."""
    from raptor.export import ExportError, export_pimsim
    from raptor.export.order import pimsim_order
    from raptor.sim import SimError, SimOptions, Simulator
    from raptor.target import Target

    try:
        ex = export_pimsim(module, Target(), allow_overflow=True)
        with pimsim_order(module, ex.rank):
            sim = Simulator(module, Target(), timings=ex.timings)
            r = sim.run(feeds, SimOptions.pimsim())
    except (SimError, ExportError) as e:
        return ("error", str(e))
    rep = r.report.to_dict()
    rep.pop("wall_time_s", None)
    rep.pop("compile_time_s", None)
    return (rep, ex.model_ns, [np.asarray(x).tobytes() for x in r.outputs], r.names,
            r.trace.spans, r.trace.messages, r.trace.links)


FIELDS = ("report", "timing-only report", "outputs", "output names", "trace spans",
          "messages", "link reservations")


PIMSIM_FIELDS = ("report", "exporter's model ns", "outputs", "output names", "trace spans",
                 "messages", "link reservations")


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per program, option set and field that differ."""
    lines = [f"program {n} only in one run" for n in sorted(set(a) ^ set(b))]
    for name in sorted(set(a) & set(b)):
        for key in a[name]:
            x, y = a[name][key], b[name].get(key)
            if x == y:
                continue
            if y is None or x[0] == "error" or y[0] == "error":
                lines.append(f"{name} {key}: {str(x)[:200]} | {str(y)[:200]}")
                continue
            fields = PIMSIM_FIELDS if key == "pimsim-export" else FIELDS
            lines += [f"{name} {key}: {field} differ" for field, p, q in zip(fields, x, y,
                                                                              strict=True)
                      if p != q]
    return lines


def run_with(pythonpath: str, programs: Path, out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pythonpath, str(ROOT)]))
    done = subprocess.run([sys.executable, __file__, str(programs), "--dump", str(out)], env=env,
                          check=False)
    if done.returncode:
        print(f"the simulator with {pythonpath} first on the path failed (above)",
              file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("programs", help="directory of saved programs")
    ap.add_argument("models", nargs="*", help="with --save: models to schedule and save")
    ap.add_argument("--save", action="store_true", help="save programs into the directory")
    ap.add_argument("--baseline-rev", default="HEAD",
                    help="git revision to compare with (default: HEAD, i.e. uncommitted "
                         "changes)")
    ap.add_argument("--dump", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    programs = Path(args.programs)
    if args.save:
        save(args.models, programs)
        return
    if args.dump:
        dump(programs, Path(args.dump))
        return
    if not list(programs.glob("*.spat")):
        print(f"{programs}: no saved programs (make them with --save)", file=sys.stderr)
        raise SystemExit(2)
    from benchmarks.bench_peft_scale import extract, verdict

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        extract(args.baseline_rev, base)
        run_with(str(base), programs, Path(tmp) / "base.pkl")
        run_with(str(ROOT), programs, Path(tmp) / "this.pkl")
        with open(Path(tmp) / "base.pkl", "rb") as f:
            a = pickle.load(f)
        with open(Path(tmp) / "this.pkl", "rb") as f:
            b = pickle.load(f)
    verdict(differences(a, b), f"{len(a)} programs")


if __name__ == "__main__":
    main()
