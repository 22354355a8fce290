"""Trade-off plots of a sweep's rows (matplotlib, Agg; each as SVG and PNG), one colour per
model and one marker per crossbar shape:

- `pareto_latency_crossbars`: simulated latency against crossbars used, the Pareto front
  (no other point of the model is both faster and smaller) drawn as a staircase;
- `throughput_cores`: throughput against cores used, with its front (more for fewer cores);
- `estimate_vs_simulated`: the schedulers' estimate against the simulator's figure (latency,
  or period in pipeline mode), with the diagonal and a ±10 % band.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from raptor.fileio import write_bytes_atomic

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
Row = dict[str, Any]


def pareto(points: Sequence[tuple[float, float]], maximize_y: bool = False
           ) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (smaller x, and smaller y or larger y
    with `maximize_y`), sorted by x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1] if maximize_y else p[1])):
        if not front or (y > front[-1][1] if maximize_y else y < front[-1][1]):
            front.append((x, y))
    return front


def _shape(row: Row) -> str:
    target = row.get("target") or {}
    return f"{target.get('crossbar_rows', '?')}x{target.get('crossbar_cols', '?')}"


def _style(rows: list[Row]) -> tuple[dict[str, Any], dict[str, str]]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    palette = [matplotlib.colormaps["tab10"](i) for i in range(10)]
    colours = {m: palette[i % len(palette)] for i, m in enumerate(models)}
    shapes = sorted({_shape(r) for r in rows},
                    key=lambda s: [int(x) if x.isdigit() else 0 for x in s.split("x")])
    markers = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(shapes)}
    return colours, markers


def _finish(ax: Axes, colours: dict[str, Any], markers: dict[str, str], xlabel: str,
            ylabel: str, title: str) -> None:
    """Log scales with plain tick labels (1, 2, 5, 10, 20...: easier to read than powers of
    ten, and much faster to lay out than mathtext), the labels, and the legend beside."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:,.10g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.35)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    handles = [Line2D([], [], color=c, marker="o", linestyle="-", label=m)
               for m, c in colours.items()]
    if len(markers) > 1:
        handles.append(Line2D([], [], linestyle="", label=""))
        handles += [Line2D([], [], color="0.3", marker=mk, linestyle="",
                           label=f"{s} crossbars") for s, mk in markers.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              fontsize=9)


def _front_plot(rows: list[Row], x_key: str, y_of: Callable[[Row], float | None],
                maximize_y: bool, xlabel: str, ylabel: str, title: str) -> Figure:
    colours, markers = _style(rows)
    fig = Figure(figsize=(8.5, 5.2), layout="constrained")
    ax = fig.subplots()
    for model, colour in colours.items():
        pts = []
        for shape, marker in markers.items():
            group = [(float(r[x_key]), float(y)) for r in rows
                     if r["model"] == model and _shape(r) == shape
                     and (y := y_of(r)) is not None and r.get(x_key) is not None]
            if group:
                gx, gy = zip(*group, strict=True)
                ax.scatter(gx, gy, color=colour, marker=marker, s=36, alpha=0.55,
                           edgecolors="none", zorder=3)
            pts += group
        front = pareto(pts, maximize_y)
        if front:
            xs, ys = zip(*front, strict=True)
            ax.step(xs, ys, where="post", color=colour, linewidth=1.6, zorder=2)
            ax.scatter(xs, ys, facecolors="none", edgecolors=colour, s=90, linewidths=1.2, zorder=4)
    _finish(ax, colours, markers, xlabel, ylabel, title)
    return fig


def _estimate_plot(rows: list[Row]) -> Figure:
    colours, markers = _style(rows)
    fig = Figure(figsize=(8.5, 5.2), layout="constrained")
    ax = fig.subplots()
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        pipeline = r.get("mode") == "pipeline"
        est = r.get("period_ns") if pipeline else r.get("estimate_ns")
        sim = r.get("simulated_period_ns") if pipeline else r.get("simulated_ns")
        if est and sim:
            groups.setdefault((r["model"], _shape(r)), []).append((est / 1000, sim / 1000))
    values = [v for pts in groups.values() for p in pts for v in p]
    lo, hi = min(values, default=float("inf")), max(values, default=0.0)
    for (model, shape), pts in groups.items():
        px, py = zip(*pts, strict=True)
        ax.scatter(px, py, color=colours[model], marker=markers[shape], s=40, alpha=0.7,
                   edgecolors="none", zorder=3)
    if hi > 0:
        lo, hi = lo / 1.5, hi * 1.5
        ax.plot([lo, hi], [lo, hi], color="0.3", linewidth=1, zorder=2)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.5",
                        alpha=0.25, linewidth=0, zorder=1, label="±10 %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    _finish(ax, colours, markers, "scheduler estimate (µs; latency, or period in pipeline mode)",
            "simulated (µs; with link contention and rendezvous)",
            "Estimate against the simulator (diagonal: equal; band: ±10 %)")
    return fig


def _save(fig: Figure, out: Path, name: str) -> list[Path]:
    paths = []
    for fmt in ("svg", "png"):
        buf = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        with matplotlib.rc_context({"svg.hashsalt": "raptor-sweep"}):
            fig.savefig(buf, format=fmt, dpi=110, metadata=metadata)
        path = out / f"{name}.{fmt}"
        write_bytes_atomic(path, buf.getvalue())
        paths.append(path)
    return paths


def write_plots(rows: list[Row], out: str | Path) -> list[Path]:
    """Plot the rows that simulated; returns the files written (none without such rows)."""
    out = Path(out)
    done = [r for r in rows if r.get("simulated_ns") is not None]
    if not done:
        return []
    files = _save(_front_plot(
        done, "crossbars", lambda r: r["simulated_ns"] / 1000, False,
        "crossbars used (weight tiles)", "simulated latency (µs)",
        "Simulated latency against crossbars used (staircase and rings: Pareto front)"),
        out, "pareto_latency_crossbars")
    files += _save(_front_plot(
        done, "cores_used", lambda r: r.get("throughput_per_s"), True,
        "cores used", "throughput (inferences/s; latency mode: one at a time)",
        "Throughput against cores used (staircase and rings: Pareto front)"),
        out, "throughput_cores")
    files += _save(_estimate_plot(done), out, "estimate_vs_simulated")
    return files
