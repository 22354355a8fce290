"""Gantt charts as standalone SVG text (no plotting dependency): one row per core, bars
coloured by layer with a legend, a time axis with ticks, messages drawn between cores, and a
`<title>` tooltip on every bar. `gantt_svg` draws a schedule's estimate; the simulator's
timeline (`raptor.sim.charts`) uses the same renderer, so both read alike.

Colours are hex (some renderers, cairosvg among them, draw `hsl()` black). Bars narrower
than a couple of pixels that touch a neighbour of the same colour are drawn as one bar whose
tooltip counts them: a 15,000-task schedule stays a few thousand rectangles."""

from __future__ import annotations

import colorsys
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from raptor.solver.graph import ComputeGraph
from raptor.solver.schedule import MergeScheduleResult

WIDTH = 1200
_LEFT = 62
_RIGHT = 18
_TOP = 54
_AXIS = 34
_PLOT_W = WIDTH - _LEFT - _RIGHT

WORK, MEMORY, BLOCKED = "work", "memory", "blocked"
"""Bar kinds: work is coloured by its key; memory and blocked have fixed colours."""
FIXED = {MEMORY: "#4d4d4d", BLOCKED: "#d8d8d8"}
_MESSAGE = "#b2182b"

LEGEND_LAYERS = 24
"""At most this many layers get their own colour and legend entry; the rest of a large
network (ResNet-18 has 50 layers, pretrained nets hundreds) share one colour, `OTHER`,
listed last with their count (each bar's tooltip still names its layer). What a reader
compares is the big layers; 300 legend entries filled three quarters of the image."""
OTHER, _OTHER_FILL = "\x00other", "#a9a9a9"

_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d", "#a0cbe8", "#ffbe7d",
            "#499894", "#f1ce63", "#bab0ac", "#79706e", "#d4a6c8", "#b6992d")
"""Tableau 20, reordered so that neighbouring layers differ in hue."""


def layer_colours(keys: Sequence[str]) -> dict[str, str]:
    """A hex colour per key, in order: the palette first, then golden-angle hues at
    alternating lightness (distinct enough for neighbouring layers of a deep network)."""
    out: dict[str, str] = {}
    for i, k in enumerate(dict.fromkeys(keys)):
        if i < len(_PALETTE):
            out[k] = _PALETTE[i]
            continue
        j = i - len(_PALETTE)
        r, g, b = colorsys.hls_to_rgb((j * 0.381966) % 1.0, 0.45 + 0.15 * (j % 3), 0.55)
        out[k] = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
    return out


@dataclass(frozen=True)
class Bar:
    """`row` is the core; `label` names it in the tooltip (the layer and op), `detail` adds
    what only this bar has (task, lane, bytes)."""

    row: int
    start: int
    end: int
    key: str
    label: str
    detail: str = ""
    kind: str = WORK


@dataclass(frozen=True)
class Arrow:
    """A message from core `src` at `t0` to core `dst` at `t1`."""

    src: int
    dst: int
    t0: int
    t1: int
    nbytes: int


def nice_step(span: float, ticks: int = 8) -> int:
    """A 1-2-5 step that cuts `span` into at most about `ticks` intervals."""
    raw = max(span / ticks, 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return max(int(step), 1)


def time_unit(span: int) -> tuple[str, float]:
    """The unit the axis of a `span`-ns chart reads best in, and ns per unit."""
    if span >= 2_000_000:
        return "ms", 1e6
    if span >= 2_000:
        return "µs", 1e3
    return "ns", 1.0


def _num(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def stage_rows(rows: Sequence[int], stage_of_core: Sequence[int] | None
               ) -> tuple[list[int], dict[int, str]]:
    """Pipeline charts: the cores ordered by stage, each named with its stage."""
    if stage_of_core is None:
        return list(rows), {}
    ordered = sorted(rows, key=lambda c: (stage_of_core[c], c))
    return ordered, {c: f"S{stage_of_core[c]} core {c}" for c in ordered}


@dataclass(frozen=True)
class _Frame:
    """Where a chart's parts go: `row_of` maps each core shown to its row (top to bottom),
    `scale` is pixels per ns, the time axis runs at `axis_y` (below the rows)."""

    row_of: Mapping[int, int]
    row_h: int
    scale: float
    axis_y: int


def render_gantt(rows: Sequence[int], bars: Sequence[Bar], arrows: Sequence[Arrow], *,
                 title: str, subtitle: str, span: int, legend: Mapping[str, str],
                 colours: Mapping[str, str], max_arrows: int = 800,
                 names: Mapping[int, str] | None = None) -> str:
    """The chart: `rows` are the cores shown (top to bottom), `legend` maps each colour key
    to its label in order, `span` is the time range in ns. At most `max_arrows` messages are
    drawn (every k-th by send time; the subtitle says so). `names` labels rows other than
    `core N` (a pipeline's `S1 core 5`); a line separates rows whose names start with
    different words (the stages)."""
    names = names or {}
    row_h = 16 if len(rows) <= 40 else 12
    span = max(span, 1)
    frame = _Frame({c: i for i, c in enumerate(rows)}, row_h, _PLOT_W / span,
                   _TOP + row_h * len(rows))
    bars, legend, colours = _grouped(bars, legend, colours)
    entries = _legend_entries(bars, arrows, legend, colours)
    per_col = max(1, _PLOT_W // 190)
    height = frame.axis_y + _AXIS + 18 * math.ceil(len(entries) / per_col) + 10
    every = max(1, -(-len(arrows) // max_arrows))  # spread over the run, not one burst
    drawn = sorted(arrows, key=lambda a: (a.t0, a.src, a.dst, a.t1))[::every]
    note = subtitle
    if every > 1:
        note += f"; 1 in {every} of {len(arrows):,} messages drawn"
    return "\n".join([*_header(frame, height, title, note), *_axis(frame, span),
                      *_row_labels(frame, names), *_bars(frame, bars, colours),
                      *_arrows(frame, drawn),
                      *_legend(entries, frame.axis_y + _AXIS + 4, per_col), "</svg>"]) + "\n"


def _grouped(bars: Sequence[Bar], legend: Mapping[str, str], colours: Mapping[str, str]
             ) -> tuple[Sequence[Bar], Mapping[str, str], Mapping[str, str]]:
    """Beyond `LEGEND_LAYERS` layers with work bars, the ones with the least work time
    become `OTHER` (their bars keep their labels)."""
    work: dict[str, int] = {}
    for b in bars:
        if b.kind == WORK:
            work[b.key] = work.get(b.key, 0) + b.end - b.start
    if len(work) <= LEGEND_LAYERS:
        return bars, legend, colours
    keep = set(sorted(work, key=lambda k: (-work[k], k))[:LEGEND_LAYERS - 1])
    rest = len(work) - len(keep)
    grouped = [b if b.kind != WORK or b.key in keep else
               Bar(b.row, b.start, b.end, OTHER, b.label, b.detail, b.kind) for b in bars]
    kept = {k: v for k, v in legend.items() if k in keep}
    kept[OTHER] = f"{rest} other layers"
    return grouped, kept, {**colours, OTHER: _OTHER_FILL}


def _legend_entries(bars: Sequence[Bar], arrows: Sequence[Arrow], legend: Mapping[str, str],
                    colours: Mapping[str, str]) -> list[tuple[str, str]]:
    """(colour, label) of what the chart shows: the legend's keys that have work bars, the
    fixed kinds present, messages."""
    used = {b.key for b in bars if b.kind == WORK}
    kinds = {b.kind for b in bars}
    extra = [(FIXED[k], name) for k, name in ((MEMORY, "shared memory load / store"),
                                               (BLOCKED, "blocked (waiting)")) if k in kinds]
    entries = [(colours.get(k, "#999999"), legend[k]) for k in legend if k in used] + extra
    if arrows:
        entries.append((_MESSAGE, "message"))
    return entries


def _header(frame: _Frame, height: int, title: str, note: str) -> list[str]:
    """The canvas, the title lines, the message arrowhead and the rows' alternate shading."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="{_LEFT}" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="{_LEFT}" y="38" font-size="12" fill="#444444">{escape(note)}</text>',
           '<defs><marker id="head" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" '
           f'markerHeight="5" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="{_MESSAGE}"/>'
           "</marker></defs>"]
    for i in range(1, len(frame.row_of), 2):
        out.append(f'<rect x="{_LEFT}" y="{_TOP + i * frame.row_h}" width="{_PLOT_W}" '
                   f'height="{frame.row_h}" fill="#f5f5f5"/>')
    return out


def _axis(frame: _Frame, span: int) -> list[str]:
    """Grid lines and tick labels in the unit the span reads best in."""
    unit, per = time_unit(span)
    step = nice_step(span / per) * per
    axis_y = frame.axis_y
    out = []
    t = 0.0
    while t <= span + 1e-9:
        x = _LEFT + t * frame.scale
        out.append(f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{axis_y + 4}" '
                   'stroke="#e3e3e3" stroke-width="1"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" '
                   f'fill="#333333">{_num(t / per)}</text>')
        t += step
    out.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_LEFT + _PLOT_W}" y2="{axis_y}" '
               'stroke="#666666"/>')
    out.append(f'<text x="{_LEFT + _PLOT_W}" y="{axis_y + 30}" text-anchor="end" '
               f'fill="#333333">time ({unit})</text>')
    return out


def _row_labels(frame: _Frame, names: Mapping[int, str]) -> list[str]:
    """Each row's name, and a line where the first word of the names changes (a stage)."""
    out = []
    row_h = frame.row_h
    prev = None
    for c, i in frame.row_of.items():
        y = _TOP + i * row_h
        name = names.get(c, f"core {c}")
        group = name.split()[0]
        if names and prev is not None and group != prev:
            out.append(f'<line x1="0" y1="{y}" x2="{_LEFT + _PLOT_W}" y2="{y}" '
                       'stroke="#555555" stroke-width="1"/>')
        prev = group
        out.append(f'<text x="{_LEFT - 6}" y="{y + row_h - 4}" text-anchor="end" '
                   f'font-size="{min(11 if not names else 9, row_h - 2)}">{escape(name)}'
                   "</text>")
    return out


def _bars(frame: _Frame, bars: Sequence[Bar], colours: Mapping[str, str]) -> list[str]:
    """The bars with their tooltips; runs of tiny ones merged (:func:`_merged`)."""
    out = []
    row_h, scale = frame.row_h, frame.scale
    for bar, n in _merged(bars, frame.row_of, 2.0 / scale):
        i = frame.row_of[bar.row]
        x = _LEFT + bar.start * scale
        w = max((bar.end - bar.start) * scale, 0.6)
        inset = row_h * 0.3 if bar.kind == BLOCKED else 1.5
        fill = FIXED.get(bar.kind) or colours.get(bar.key, "#999999")
        what = bar.label if n == 1 else f"{bar.label}: {n} ops"
        detail = f", {bar.detail}" if bar.detail and n == 1 else ""
        tip = f"{what}{detail}; {bar.start:,}–{bar.end:,} ns on core {bar.row}"
        out.append(f'<rect x="{x:.1f}" y="{_TOP + i * row_h + inset:g}" width="{w:.1f}" '
                   f'height="{row_h - 2 * inset:g}" fill="{fill}"><title>{escape(tip)}'
                   "</title></rect>")
    # the outline once for all bars (a 15,000-bar chart is megabytes of attributes)
    return ['<g stroke="#ffffff" stroke-width="0.4">', *out, "</g>"]


def _arrows(frame: _Frame, drawn: Sequence[Arrow]) -> list[str]:
    """The messages between rows shown, as lines from send to arrival."""
    out = []
    row_of, row_h, scale = frame.row_of, frame.row_h, frame.scale
    for a in drawn:
        if a.src not in row_of or a.dst not in row_of:
            continue
        y1 = _TOP + row_of[a.src] * row_h + row_h / 2
        y2 = _TOP + row_of[a.dst] * row_h + row_h / 2
        tip = f"{a.nbytes:,} B core {a.src} → core {a.dst}: {a.t0:,}–{a.t1:,} ns"
        out.append(f'<line x1="{_LEFT + a.t0 * scale:.1f}" y1="{y1:.1f}" '
                   f'x2="{_LEFT + a.t1 * scale:.1f}" y2="{y2:.1f}" stroke="{_MESSAGE}" '
                   'stroke-width="0.7" stroke-opacity="0.55" marker-end="url(#head)">'
                   f"<title>{escape(tip)}</title></line>")
    return out


def _legend(entries: Sequence[tuple[str, str]], top: int, per_col: int) -> list[str]:
    """A swatch and a label per entry, `per_col` to a line."""
    out = []
    for k, (fill, name) in enumerate(entries):
        x = _LEFT + (k % per_col) * 190
        y = top + (k // per_col) * 18
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{fill}"/>')
        label = name if len(name) <= 28 else name[:27] + "…"
        out.append(f'<text x="{x + 17}" y="{y + 10}">{escape(label)}</text>')
    return out


def _merged(bars: Sequence[Bar], row_of: Mapping[int, int], tiny: float) -> list[tuple[Bar, int]]:
    """Runs of same-colour bars on a row that touch (gap under `tiny` ns) where one of them
    is under `tiny` wide, as one bar with the run's length."""
    out: list[tuple[Bar, int]] = []
    by_row: dict[int, list[Bar]] = {}
    for b in bars:
        if b.row in row_of:
            by_row.setdefault(b.row, []).append(b)
    for row in sorted(by_row, key=row_of.__getitem__):
        cur: Bar | None = None
        n = 0
        for b in sorted(by_row[row], key=lambda b: (b.start, b.end)):
            if cur is not None and b.key == cur.key and b.kind == cur.kind \
                    and b.start - cur.end <= tiny \
                    and min(b.end - b.start, cur.end - cur.start) < tiny:
                label = cur.label if b.label == cur.label else "several layers"
                cur = Bar(row, cur.start, max(cur.end, b.end), cur.key, label, "", cur.kind)
                n += 1
                continue
            if cur is not None:
                out.append((cur, n))
            cur, n = b, 1
        if cur is not None:
            out.append((cur, n))
    return out


def gantt_svg(graph: ComputeGraph, schedule: MergeScheduleResult, *,
              transfers: bool = True, title: str | Callable[[int], str] | None = None,
              keys: Sequence[str] | None = None, legend: Mapping[str, str] | None = None,
              start: Sequence[int] | None = None, subtitle: str | None = None) -> str:
    """The schedule's estimate: one bar per task on its core from `start` (default the
    solver's start times) for its cost, coloured by `keys[t]` (default its graph batch) and
    labelled by `legend[key]`; with `transfers`, a line per cross-core producer → consumer
    pair from the producer's end to the consumer's start. A pipeline schedule's rows are
    grouped by stage (`schedule.stage_of_core`). A callable `title` is given the span drawn
    (ns), so that the figure in the title is the one the bars end at."""
    n = graph.num_tasks
    begin = list(start) if start is not None else schedule.start_ns
    end = [begin[t] + graph.tasks[t].cost_ns for t in range(n)]
    if keys is None:
        keys = [f"batch {graph.tasks[t].batch}" if graph.tasks[t].batch >= 0 else "single"
                for t in range(n)]
    legend = dict(legend) if legend is not None else {k: k for k in dict.fromkeys(keys)}
    bars = [Bar(schedule.core_of[t], begin[t], end[t], keys[t], legend.get(keys[t], keys[t]),
                f"task {t} ({graph.tasks[t].name}) lane {graph.tasks[t].lane}") for t in range(n)]
    sent: dict[tuple[int, int], Arrow] = {}  # one message per (producer, consumer core)
    for e in graph.edges if transfers else ():
        a, b = schedule.core_of[e.src], schedule.core_of[e.dst]
        if a != b:
            prev = sent.get((e.src, b))
            first = begin[e.dst] if prev is None else min(prev.t1, begin[e.dst])
            nbytes = max(e.bytes, prev.nbytes if prev is not None else 0)
            sent[(e.src, b)] = Arrow(a, b, end[e.src], first, nbytes)
    used, names = stage_rows([c for c, tasks in enumerate(schedule.core_tasks) if tasks],
                             schedule.stage_of_core)
    span = max(end, default=0)
    heading = title(span) if callable(title) else \
        title or f"{schedule.solver} schedule ({schedule.status}): estimate {span:,} ns"
    note = subtitle or ("the plan: the scheduler's cost model without link contention, with "
                        "a free shared memory; lines: producer end → consumer start")
    return render_gantt(used, bars, list(sent.values()), title=heading, subtitle=note, span=span,
                        legend=legend, colours=layer_colours(list(legend)), names=names)
