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
(slices named `... #n`), and outputs.<solver>.npz holds inference 0.

A reused folder: the files above that an earlier run wrote and this one does not (another
solver's, or the simulation's after --no-simulate) are removed, and any other file stays.
report.json is removed first and written last, so a folder without it holds a run that was
cut short."""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Any

from raptor.driver import MODES
from raptor.fileio import copy_atomic, save_npz_atomic, write_text_atomic
from raptor.sim.charts import noc_svg, timeline_svg
from raptor.solve import Progress, ScheduleRun, Solved
from raptor.solver.evaluate import retime
from raptor.solver.gantt import gantt_svg
from raptor.ui.labels import legend, span_labels, task_layers
from raptor.ui.table import counted

PER_SOLVER = ("scheduled.{}.spat", "gantt.{}.svg", "gantt.{}.simulated.svg", "noc.{}.svg",
              "trace.{}.json", "outputs.{}.npz")
"""The files written per schedule (`{}`: the solver's name)."""


def known_files(out_dir: Path) -> set[Path]:
    """Raptor's own files in a folder: report.json, weights.npz and `PER_SOLVER` for every
    solver name of either mode. A reused --out loses those a new run does not write, and
    nothing else (a user's files there stay)."""
    solvers = {name for names in MODES.values() for name in names if name != "both"}
    names = {"report.json", "weights.npz", *(f.format(s) for f in PER_SOLVER for s in solvers)}
    return {out_dir / n for n in names if (out_dir / n).is_file()}


FILES = ("report.json, scheduled.<solver>.spat, weights.npz, gantt.<solver>.svg (estimate)",
         "gantt.<solver>.simulated.svg, noc.<solver>.svg, trace.<solver>.json, "
         "outputs.<solver>.npz")
"""What the `wrote` line lists: always, and for simulated schedules."""


def _planned(head: str, run: ScheduleRun, span: int) -> str:
    """The estimate chart's figures: the plan it draws (each task at its contention-free
    start), and beside it the estimate with link contention and flow control (the table's
    figure), which the chart does not draw."""
    plan = f"contention-free plan {span:,} ns (estimate with contention {run.estimate_ns:,} ns)"
    if run.pipeline is not None and run.stream_estimate is not None:
        return (f"{head}{counted(len(run.pipeline.stages), 'stage')}, estimated period "
                f"{run.stream_estimate.period_ns:,} ns; one inference's {plan}")
    return head + plan


def _retitled(svg: str, was: str, title: str) -> str:
    """A chart drawn under the title `was` (its first bold text) under `title` instead."""
    return svg if was == title else svg.replace(
        f'font-weight="bold">{escape(was)}</text>', f'font-weight="bold">{escape(title)}</text>',
        1)


def write_outputs(out_dir: str | Path, solved: Solved, rep: dict[str, Any],
                  say: Progress | None = None) -> str:
    """Write every file (report.json last, with the seconds this took as
    `seconds.outputs`); returns the `wrote ...` line. Raises OSError."""
    t0 = time.perf_counter()
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    stale = known_files(d)
    (d / "report.json").unlink(missing_ok=True)  # a folder without one holds a run cut short
    written: set[Path] = set()

    def put(name: str, text: str) -> None:
        write_text_atomic(d / name, text)
        written.add(d / name)
    g = solved.build.graph
    target = solved.target
    lowered = solved.compiled.lowered
    layers = task_layers(lowered, solved.build)
    keys = [layer.name for layer in layers]
    names = legend(lowered)
    lanes = [t.lane for t in g.tasks]
    model = Path(solved.model).name
    printed: dict[int, str] = {}
    planned: dict[tuple[int, int], tuple[int, str, str]] = {}
    traced: dict[int, tuple[Path, str, str, str, str]] = {}
    for run in solved.runs:
        if say is not None:
            say(f"writing the {run.name} outputs")
        text = printed.get(id(run.scheduled))
        if text is None:
            text = printed[id(run.scheduled)] = run.scheduled.print()
        put(f"scheduled.{run.name}.spat", text)
        # a schedule that shares another's placement (a pipeline row returning another's
        # candidate) shares its chart, retitled: only the title names the row
        head = f"{model}: {run.name} schedule ({rep['schedules'][run.name]['status']}), "
        placement = (id(run.result.core_of), id(run.result.core_tasks))
        if placement not in planned:
            drawn: list[int] = []  # the span the chart's bars end at

            def title(span: int, head: str = head, run: ScheduleRun = run,
                      drawn: list[int] = drawn) -> str:
                drawn.append(span)
                return _planned(head, run, span)
            start = retime(g, target, run.result.core_of, run.result.core_tasks)
            chart = gantt_svg(g, run.result, title=title, keys=keys, legend=names,
                              start=start)
            planned[placement] = drawn[-1], _planned(head, run, drawn[-1]), chart
        span, was, chart = planned[placement]
        put(f"gantt.{run.name}.svg", _retitled(chart, was, _planned(head, run, span)))
        if run.sim is None:
            continue
        latency = run.sim.report.latency_ns
        sim_title = f"{model}: {run.name} schedule, simulated {latency:,} ns"
        if run.pipeline is not None:
            period = run.period_ns
            sim_title = (f"{model}: {run.name} schedule, "
                         f"{counted(solved.stream, 'inference')} simulated in "
                         f"{latency:,} ns, period {period or 0:,} ns")
        noc_title = f"{model}: NoC traffic of the {run.name} schedule (simulated)"
        # a schedule that shares another's program (and simulation) shares its labels,
        # trace and charts, the charts retitled with its solver, the trace copied
        trace = d / f"trace.{run.name}.json"
        if id(run.sim) not in traced:
            labels = span_labels(run.scheduled, layers, lanes)
            run.sim.write_trace(trace, labels, target.mesh_links)  # streamed: it can be large
            traced[id(run.sim)] = (
                trace, sim_title,
                timeline_svg(run.sim, labels, legend=names, title=sim_title,
                             stage_of_core=run.result.stage_of_core),
                noc_title, noc_svg(run.sim, target, title=noc_title))
        first_trace, was_sim, timeline, was_noc, noc = traced[id(run.sim)]
        if first_trace != trace:
            copy_atomic(first_trace, trace)
        written.add(trace)
        put(f"gantt.{run.name}.simulated.svg", _retitled(timeline, was_sim, sim_title))
        put(f"noc.{run.name}.svg", _retitled(noc, was_noc, noc_title))
        first = run.pipeline is not None  # a stream: inference 0's outputs
        outs = {v.name: o[0] if first else o for v, o in zip(
            solved.compiled.graph.outputs, run.sim.outputs, strict=True)}
        save_npz_atomic(d / f"outputs.{run.name}.npz", outs)
        written.add(d / f"outputs.{run.name}.npz")
    if solved.runs:  # the weights the scheduled IR names, for `raptor interpret`
        save_npz_atomic(d / "weights.npz", solved.runs[0].scheduled.constants)
        written.add(d / "weights.npz")
    for path in stale - written - {d / "report.json"}:  # an earlier run's, not this one's
        path.unlink(missing_ok=True)
    rep["seconds"]["outputs"] = round(time.perf_counter() - t0, 4)
    write_text_atomic(d / "report.json", json.dumps(rep, indent=2) + "\n")
    simulated = any(r.sim is not None for r in solved.runs)
    return f"wrote {out_dir}/: " + ", ".join(FILES if simulated else FILES[:1])
