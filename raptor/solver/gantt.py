"""Gantt chart of a MergeScheduleResult as standalone SVG text (no plotting dependency)."""

from __future__ import annotations

from html import escape

from raptor.solver.graph import ComputeGraph
from raptor.solver.schedule import MergeScheduleResult

_ROW = 18
_LABEL = 56
_WIDTH = 1000
_TOP = 24


def _colour(batch: int) -> str:
    if batch < 0:
        return "#9e9e9e"
    hue = (batch * 137) % 360  # golden-angle spacing keeps neighbouring batches distinct
    return f"hsl({hue},60%,62%)"


def gantt_svg(graph: ComputeGraph, schedule: MergeScheduleResult, *,
              transfers: bool = False, title: str | None = None) -> str:
    """One row per used core, one rectangle per task coloured by batch; hover shows details.

    ``transfers`` draws a line for every cross-core edge (producer end → consumer start).
    """
    used = [c for c, tasks in enumerate(schedule.core_tasks) if tasks]
    row_of = {c: i for i, c in enumerate(used)}
    span = max(schedule.makespan_ns, 1)
    scale = (_WIDTH - _LABEL - 8) / span
    height = _TOP + _ROW * len(used) + 20
    heading = title or f"{schedule.solver} {schedule.status}: makespan {schedule.makespan_ns} ns"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="10">',
        f'<text x="4" y="14" font-size="12">{escape(heading)}</text>',
    ]
    for c in used:
        y = _TOP + row_of[c] * _ROW
        out.append(f'<text x="4" y="{y + 12}">core {c}</text>')
        for t in schedule.core_tasks[c]:
            task = graph.tasks[t]
            x = _LABEL + schedule.start_ns[t] * scale
            w = max(task.cost_ns * scale, 0.5)
            tip = escape(f"{task.name} (task {t}, batch {task.batch}, lane {task.lane}): "
                         f"{schedule.start_ns[t]}-{schedule.end_ns[t]} ns on core {c}")
            out.append(
                f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{_ROW - 4}" '
                f'fill="{_colour(task.batch)}" stroke="#333" stroke-width="0.3">'
                f"<title>{tip}</title></rect>"
            )
    if transfers:
        for e in graph.edges:
            a, b = schedule.core_of[e.src], schedule.core_of[e.dst]
            if a == b:
                continue
            x1 = _LABEL + schedule.end_ns[e.src] * scale
            x2 = _LABEL + schedule.start_ns[e.dst] * scale
            y1 = _TOP + row_of[a] * _ROW + _ROW / 2
            y2 = _TOP + row_of[b] * _ROW + _ROW / 2
            out.append(f'<line x1="{x1:.2f}" y1="{y1}" x2="{x2:.2f}" y2="{y2}" '
                       f'stroke="#d32f2f" stroke-width="0.5" opacity="0.6"/>')
    axis_y = _TOP + _ROW * len(used) + 12
    out.append(f'<text x="{_LABEL}" y="{axis_y}">0</text>')
    out.append(f'<text x="{_WIDTH - 8}" y="{axis_y}" text-anchor="end">{span} ns</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
