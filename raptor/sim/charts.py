"""Pictures of a simulation: the simulated timeline as a Gantt chart (the estimate's chart
layout, `raptor.solver.gantt`, with memory and waiting time shown) and the NoC heatmap PIM
papers draw — bytes over every directed mesh link, and each core's busy / blocked / idle
share of the latency."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

from raptor.noc import Network
from raptor.sim.report import BLOCKED, MEMORY, CoreStats, SimResult, SpanLabel
from raptor.solver import gantt
from raptor.solver.gantt import Arrow, Bar, layer_colours, render_gantt
from raptor.target import Target


def describe(options: Mapping[str, object]) -> str:
    """The simulated conditions in words, from `SimOptions.to_dict()`."""
    sends = "rendezvous sends" if options.get("mode") == "rendezvous" else "buffered sends"
    links = "XY link contention" if options.get("link_contention") else "free links"
    memory = "one shared-memory request at a time" if options.get("shared_queueing") \
        else "free shared memory"
    return f"{sends}, {links}, {memory}"


MAX_ARROWS = 800
"""Message lines a simulated chart draws at most (as `render_gantt`)."""


def timeline_svg(sim: SimResult, labels: Mapping[int, Sequence[SpanLabel]], *, title: str,
                 legend: Mapping[str, str], stage_of_core: Sequence[int] | None = None) -> str:
    """The simulated timeline: computes coloured by layer, shared-memory accesses dark,
    waiting light and thin, a line per message from injection to arrival; a pipeline's
    cores grouped by stage (`stage_of_core`)."""
    bars = []
    for (core, start, dur, name, cat, detail), label in zip(
            sim.trace.spans, sim.trace.labelled(labels), strict=True):
        kind = gantt.MEMORY if cat == MEMORY else gantt.WORK  # labels are on BUSY or MEMORY
        if cat == BLOCKED:
            bars.append(Bar(core, start, start + dur, "", "blocked", detail, gantt.BLOCKED))
        elif label is None:
            bars.append(Bar(core, start, start + dur, name, name, detail, kind))
        else:
            args = label.args
            facts = [f"{k} {args[k]}" for k in ("lanes", "tiles", "bytes") if k in args]
            where = [] if detail.startswith("<") else [detail]  # a location, if known
            bars.append(Bar(core, start, start + dur, label.key, label.name,
                            ", ".join([*facts, *where]), kind))
    msgs = sim.trace.messages
    every = max(1, -(-len(msgs) // MAX_ARROWS))  # sampled here: a stream sends 10^5 and more
    arrows = [Arrow(src, dst, sent, arrived, nbytes) for src, dst, _, nbytes, sent, arrived
              in sorted(msgs, key=lambda m: (m[4], m[0], m[1], m[5]))[::every]]
    rows, names = gantt.stage_rows(
        sorted({b.row for b in bars} | {c.core for c in sim.report.cores if c.ops}),
        stage_of_core)
    note = f"simulated: {describe(sim.report.options)}; lines: message injected → arrived"
    if every > 1:
        note += f"; 1 in {every} of {len(msgs):,} messages drawn"
    return render_gantt(rows, bars, arrows, title=title, subtitle=note,
                        span=sim.report.latency_ns, legend=legend,
                        colours=layer_colours(list(legend)), names=names)


_HEAT = ("#fff5d6", "#fed976", "#fd8d3c", "#e31a1c", "#800026")
"""Light yellow to dark red (ColorBrewer YlOrRd stops): more bytes, darker."""
BUSY_FILL, BLOCKED_FILL, IDLE_FILL = "#2b8cbe", "#f6a04d", "#e6e6e6"


def heat(f: float) -> str:
    """The colour of a fraction 0..1 of the largest link's bytes."""
    f = min(max(f, 0.0), 1.0) * (len(_HEAT) - 1)
    i = min(int(f), len(_HEAT) - 2)
    a, b = _HEAT[i], _HEAT[i + 1]
    t = f - i
    rgb = [round(int(a[k:k + 2], 16) * (1 - t) + int(b[k:k + 2], 16) * t) for k in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in rgb)


def human_bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def link_traffic(sim: SimResult, net: Network) -> dict[int, tuple[int, int, int]]:
    """Per directed link (`raptor.noc` numbering): bytes, messages, and ns busy (the serialisation
    time the contention model held it; 0 when links are not modelled)."""
    # summed per (source, destination) first, each pair routed once: a stream sends 10^5
    # messages over a few thousand pairs (same sums, links in the same first-seen order)
    pairs: dict[tuple[int, int], list[int]] = {}
    for src, dst, _, nbytes, _, _ in sim.trace.messages:
        pair = pairs.setdefault((src, dst), [0, 0])
        pair[0] += nbytes
        pair[1] += 1
    traffic: dict[int, list[int]] = {}
    for (src, dst), (nbytes, count) in pairs.items():
        for link in net.route(src, dst):
            t = traffic.setdefault(link, [0, 0, 0])
            t[0] += nbytes
            t[1] += count
    log = sim.trace.link_log  # each walk holds each of its links for its serialization
    held: dict[tuple[int, ...], int] = {}  # summed per route first (a few thousand of them)
    for links, ser in zip(log.routes, log.serial, strict=True):
        held[links] = held.get(links, 0) + ser
    for links, ser in held.items():
        for link in links:
            traffic.setdefault(link, [0, 0, 0])[2] += ser
    return {k: (v[0], v[1], v[2]) for k, v in traffic.items()}


def noc_svg(sim: SimResult, target: Target, *, title: str) -> str:
    """The mesh: a square per core (busy / blocked / idle bar and percentages), two arrows
    per neighbouring pair (one per direction) coloured and sized by the bytes they carried."""
    rows, cols, n = target.mesh_rows, target.mesh_cols, target.num_cores
    pitch = max(56.0, min(118.0, 900.0 / max(rows, cols)))
    box = pitch * 0.64
    left, top = 30.0, 74.0
    bar_x = left + cols * pitch + 24
    width = int(bar_x + 150)
    height = int(top + rows * pitch + 56)
    net = Network(target, "raptor")
    traffic = link_traffic(sim, net)
    peak = max((b for b, _, _ in traffic.values()), default=0)
    latency = max(sim.report.latency_ns, 1)
    font = max(8, min(11, int(pitch / 9)))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="{font}">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{left}" y="22" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="{left}" y="40" font-size="12" fill="#444444">bytes per directed mesh '
           f'link (XY routing), colour and width; {len(sim.trace.messages):,} messages, '
           f'{human_bytes(sim.report.message_bytes)}</text>',
           f'<text x="{left}" y="56" font-size="12" fill="#444444">cores: busy / blocked / '
           f'idle share of the {sim.report.latency_ns:,} ns latency '
           f'({escape(describe(sim.report.options))})</text>']

    def centre(core: int) -> tuple[float, float]:
        r, c = divmod(core, cols)
        return left + c * pitch + pitch / 2, top + r * pitch + pitch / 2

    for a in range(n):
        r, c = divmod(a, cols)
        for b in ((a + 1) if c + 1 < cols else -1, (a + cols) if r + 1 < rows else -1):
            for s, d in ((a, b), (b, a)) if b >= 0 else ():
                out.append(_link(s, d, centre, box, pitch, traffic.get(net.link(s, d)), peak,
                                 latency))
    stats = {c.core: c for c in sim.report.cores}
    for core in range(n):
        x, y = centre(core)
        x0, y0 = x - box / 2, y - box / 2
        st = stats.get(core)
        used = st is not None and st.ops > 0
        out += [f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{box:.1f}" height="{box:.1f}" '
                f'rx="3" fill="{"#ffffff" if used else "#fafafa"}" '
                f'stroke="{"#555555" if used else "#c8c8c8"}" stroke-width="1"'
                + ('' if used else ' stroke-dasharray="3,2"') + ">"
                f"<title>{escape(_core_tip(core, st, latency))}</title></rect>",
                f'<text x="{x0 + 4:.1f}" y="{y0 + font + 2:.1f}" font-weight="bold">{core}</text>']
        if st is None or not used:
            continue
        busy, blocked = st.busy_ns / latency, st.blocked_ns / latency
        bw, by = box - 8, y0 + box - 14
        out += [f'<rect x="{x:.1f}" y="{by:.1f}" width="{w:.1f}" height="9" fill="{fill}"/>'
                for x, w, fill in ((x0 + 4, bw, IDLE_FILL), (x0 + 4, bw * busy, BUSY_FILL),
                                   (x0 + 4 + bw * busy, bw * blocked, BLOCKED_FILL))]
        out += [f'<text x="{x0 + 4:.1f}" y="{y0 + k * font + dy:.1f}" fill="{colour}">'
                f"{f:.0%} {what}</text>" for k, dy, f, what, colour in
                ((2, 6, busy, "busy", "#1f5f85"), (3, 8, blocked, "blocked", "#b35806"))]
    out.extend(_key(bar_x, top, rows * pitch, peak))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _core_tip(core: int, st: CoreStats | None, latency: int) -> str:
    if st is None or not st.ops:
        return f"core {core}: unused"
    return (f"core {core}: busy {st.busy_ns:,} ns ({st.busy_ns / latency:.1%}), blocked "
            f"{st.blocked_ns:,} ns ({st.blocked_ns / latency:.1%}), idle {st.idle_ns:,} ns; "
            f"{st.ops} ops, {st.crossbars} crossbar tiles")


def _link(s: int, d: int, centre: Callable[[int], tuple[float, float]], box: float,
          pitch: float,
          t: tuple[int, int, int] | None, peak: int, latency: int) -> str:
    """An arrow from core `s` to its neighbour `d`, offset to the right of its direction of
    travel, so the two directions of a pair sit side by side."""
    (x1, y1), (x2, y2) = centre(s), centre(d)
    dx, dy = (x2 - x1) / pitch, (y2 - y1) / pitch
    off = pitch * 0.09
    ox, oy = -dy * off, dx * off  # perpendicular
    gap = box / 2 + 3
    ax, ay = x1 + dx * gap + ox, y1 + dy * gap + oy
    bx, by = x2 - dx * gap + ox, y2 - dy * gap + oy
    nbytes, msgs, busy = t if t is not None else (0, 0, 0)
    if nbytes == 0:
        return (f'<line x1="{ax:.1f}" y1="{ay:.1f}" x2="{bx:.1f}" y2="{by:.1f}" '
                f'stroke="#dddddd" stroke-width="1"><title>core {s} → core {d}: no traffic'
                "</title></line>")
    f = nbytes / peak if peak else 0.0
    w = 1.2 + 4.3 * math.sqrt(f)
    colour = heat(f)
    tip = (f"core {s} → core {d}: {nbytes:,} B in {msgs} messages"
           + (f", busy {busy:,} ns ({busy / latency:.1%} of the latency)" if busy else ""))
    hx, hy = bx - dx * w * 1.6, by - dy * w * 1.6  # arrowhead base
    px, py = -dy * w * 1.1, dx * w * 1.1
    return (f'<g><title>{escape(tip)}</title>'
            f'<line x1="{ax:.1f}" y1="{ay:.1f}" x2="{hx:.1f}" y2="{hy:.1f}" '
            f'stroke="{colour}" stroke-width="{w:.1f}"/>'
            f'<path d="M{bx:.1f},{by:.1f} L{hx + px:.1f},{hy + py:.1f} '
            f'L{hx - px:.1f},{hy - py:.1f} z" fill="{colour}"/></g>')


def _key(x: float, top: float, h: float, peak: int) -> list[str]:
    """The colour scale of link bytes and the key of the core bars."""
    bar_h = min(h * 0.55, 260.0)
    out = ['<defs><linearGradient id="heat" x1="0" y1="1" x2="0" y2="0">',
           *[f'<stop offset="{i / (len(_HEAT) - 1):.2f}" stop-color="{c}"/>'
             for i, c in enumerate(_HEAT)],
           "</linearGradient></defs>",
           f'<text x="{x}" y="{top - 16:.1f}" font-weight="bold">bytes per link</text>',
           f'<rect x="{x}" y="{top:.1f}" width="16" height="{bar_h:.1f}" '
           'fill="url(#heat)" stroke="#999999" stroke-width="0.5"/>']
    for f in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + bar_h * (1 - f)
        out += [f'<line x1="{x + 16}" y1="{y:.1f}" x2="{x + 20}" y2="{y:.1f}" stroke="#666666"/>',
                f'<text x="{x + 23}" y="{y + 4:.1f}">{human_bytes(peak * f)}</text>']
    y = top + bar_h + 28
    for fill, name in ((BUSY_FILL, "busy"), (BLOCKED_FILL, "blocked"), (IDLE_FILL, "idle")):
        out += [f'<rect x="{x}" y="{y:.1f}" width="16" height="9" fill="{fill}"/>',
                f'<text x="{x + 22}" y="{y + 8:.1f}">{name}</text>']
        y += 16
    return out
