"""The files `raptor solve` writes to `--out`, each whole or not at all (`raptor.fileio`):

    report.json                 every figure (the table is rendered from it)
    scheduled.<solver>.spat     the scheduled IR (`raptor verify` / `raptor interpret` read it)
    weights.npz                 the weights the scheduled IR names (`raptor interpret` finds it)
    gantt.<solver>.svg          the schedule's estimate, bars named by ONNX layer
    gantt.<solver>.simulated.svg  the simulated timeline, same layout
    noc.<solver>.svg            bytes per mesh link, busy / blocked share per core
    trace.<solver>.json         Chrome trace (Perfetto): layer slices, message arrows, counters
    outputs.<solver>.npz        simulated outputs keyed by graph output name

The last four exist for simulated schedules only. A CP-SAT run that fell back to the
heuristic schedule shares its program, labels and simulation. In pipeline mode the charts
group cores by stage, the simulated chart and the trace show every inference of the stream
(slices named `... #n`), and outputs.<solver>.npz holds inference 0."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from raptor.fileio import save_npz_atomic, write_text_atomic
from raptor.sim.charts import noc_svg, timeline_svg
from raptor.solve import Progress, Solved
from raptor.solver.evaluate import retime
from raptor.solver.gantt import gantt_svg
from raptor.ui.labels import legend, span_labels, task_layers
from raptor.ui.table import counted

FILES = ("report.json, scheduled.<solver>.spat, weights.npz, gantt.<solver>.svg (estimate)",
         "gantt.<solver>.simulated.svg, noc.<solver>.svg, trace.<solver>.json, "
         "outputs.<solver>.npz")
"""What the `wrote` line lists: always, and for simulated schedules."""


def write_outputs(out_dir: str | Path, solved: Solved, rep: dict[str, Any],
                  say: Progress | None = None) -> str:
    """Write every file (report.json last, with the seconds this took as
    `seconds.outputs`); returns the `wrote ...` line. Raises OSError."""
    t0 = time.perf_counter()
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    g = solved.build.graph
    target = solved.target
    lowered = solved.compiled.lowered
    layers = task_layers(lowered, solved.build)
    keys = [layer.name for layer in layers]
    names = legend(lowered)
    lanes = [t.lane for t in g.tasks]
    model = Path(solved.model).name
    printed: dict[int, str] = {}
    drawn: dict[int, tuple[str, str, str]] = {}
    for run in solved.runs:
        if say is not None:
            say(f"writing the {run.name} outputs")
        text = printed.get(id(run.scheduled))
        if text is None:
            text = printed[id(run.scheduled)] = run.scheduled.print()
        write_text_atomic(d / f"scheduled.{run.name}.spat", text)
        start = retime(g, target, run.result.core_of, run.result.core_tasks)
        title = f"{model}: {run.name} schedule ({run.result.status.split(' (')[0]}), "
        if run.pipeline is not None and run.stream_estimate is not None:
            title += (f"{counted(len(run.pipeline.stages), 'stage')}, one inference "
                      f"{run.estimate_ns:,} ns, "
                      f"estimated period {run.stream_estimate.period_ns:,} ns")
        else:
            title += f"estimate {run.estimate_ns:,} ns"
        write_text_atomic(d / f"gantt.{run.name}.svg", gantt_svg(
            g, run.result, title=title, keys=keys, legend=names, start=start))
        if run.sim is None:
            continue
        texts = drawn.get(id(run.sim))
        if texts is None:  # a schedule that shares another's program reuses its drawings
            labels = span_labels(run.scheduled, layers, lanes)
            latency = run.sim.report.latency_ns
            sim_title = f"{model}: {run.name} schedule, simulated {latency:,} ns"
            if run.pipeline is not None:
                period = run.sim.report.period_ns(len(run.pipeline.stages))
                sim_title = (f"{model}: {run.name} schedule, "
                             f"{counted(solved.stream, 'inference')} simulated in "
                             f"{latency:,} ns, period {period or 0:,} ns")
            texts = drawn[id(run.sim)] = (
                timeline_svg(run.sim, labels, legend=names, title=sim_title,
                             stage_of_core=run.result.stage_of_core),
                noc_svg(run.sim, target, title=f"{model}: NoC traffic of the {run.name} "
                        "schedule (simulated)"),
                json.dumps(run.sim.chrome_trace(labels, target.mesh_links)))
        for name, text in zip(("gantt.{}.simulated.svg", "noc.{}.svg", "trace.{}.json"),
                              texts, strict=True):
            write_text_atomic(d / name.format(run.name), text)
        first = run.pipeline is not None  # a stream: inference 0's outputs
        outs = {v.name: o[0] if first else o for v, o in zip(
            solved.compiled.graph.outputs, run.sim.outputs, strict=True)}
        save_npz_atomic(d / f"outputs.{run.name}.npz", outs)
    if solved.runs:  # the weights the scheduled IR names, for `raptor interpret`
        save_npz_atomic(d / "weights.npz", solved.runs[0].scheduled.constants)
    rep["seconds"]["outputs"] = round(time.perf_counter() - t0, 4)
    write_text_atomic(d / "report.json", json.dumps(rep, indent=2) + "\n")
    simulated = any(r.sim is not None for r in solved.runs)
    return f"wrote {out_dir}/: " + ", ".join(FILES if simulated else FILES[:1])
