"""The results of `raptor solve` on a terminal, rendered from report.json alone: a line
about the model, the layout costs (naming the rules directory used), one row per schedule,
and a status line per schedule under the table.

The table never cuts a number: by default it has the columns a reader compares (estimate,
ideal and contended simulation, gap to the bound, cores, numerics), which fit 80 columns;
`wide` adds the bound, status, solve time, crossbars and traffic. When a table's narrowest
rendering is still wider than the terminal it is printed transposed (one column per
schedule), which fits any width a person uses.

In pipeline mode the row is a stream's: estimated and simulated period, throughput,
efficiency (the period lower bound / the simulated period), stages / cores, crossbars
(+ copies made by replication), status and numerics over every inference; `wide` adds the
ideal figures, the solver's own period model and bound, the latency of one inference in the
pipeline and the latency schedule's, solve time, local memory and messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table


def ns(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def counted(n: int, noun: str, plural: str = "") -> str:
    """`1 stage`, `2 stages`, `1,024 cores`: a count and its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def shown_rules(directory: str) -> str:
    """The rules directory as a reader knows it: the shipped one by that name, any other
    (`--rules`, `$RAPTOR_RULES`) by the path given."""
    shipped = Path(str(files("raptor").joinpath("rules"))).resolve()
    return "shipped rules" if Path(directory).resolve() == shipped else directory


def summary_lines(rep: dict[str, Any]) -> list[str]:
    lay = rep["layouts"]
    first = (f"{rep['model']} on target {rep['target']}: {rep['tasks']:,} tasks, "
             f"{rep['edges']:,} edges, {rep['crossbars']:,} crossbars in "
             f"{rep['groups']:,} array groups, {rep['mvms']:,} MVMs"
             + (f" ({rep['mvm_units']} MVM units per core)" if rep.get("mvm_units", 1) > 1
                else "") + ", layouts "
             f"{lay.get('NHWCRowStrip', 0)} row-strip / {lay.get('DenseNCHW', 0)} dense "
             f"({lay.get('materializations', 0)} materializations), inputs: {rep['inputs']}")
    if rep.get("bound_inputs"):
        first += f" (bound as constants: {', '.join(rep['bound_inputs'])})"
    costs = ", ".join(f"{k} {v}" + (" (selected)" if k == rep["layout_selector"] else "")
                      for k, v in rep["layout_costs"].items())
    rules = shown_rules(rep["rules"]["dir"])
    return [first, f"layout cost by selector ({rules}/layout.egg): {costs}"]


def _solver_bound(s: dict[str, Any]) -> str:
    """CP-SAT's proven bound, labelled when it bounds only a restricted model."""
    if s["bound_ns"] is None or s["status"].startswith("HEURISTIC"):
        return "-"
    return f"{s['bound_ns']:,}" + ("" if s.get("bound_of", "problem") == "problem"
                                   else f" ({s['model']} only)")


def _gap(rep: dict[str, Any], s: dict[str, Any]) -> str:
    """The estimate against the problem's lower bound (not a restricted model's)."""
    bound = rep["lower_bound_ns"]
    return f"{(s['estimate_ns'] - bound) / bound:.1%}" if bound else "-"


def _numerics(s: dict[str, Any]) -> str:
    if not s["valid"]:
        return "INVALID"
    if s["simulation_error"]:
        return "sim failed"
    num = s["numerics"]
    if num is None:
        return "-"
    return ("ok" if num["ok"] else "MISMATCH") + f" {num['max_abs_error']:.1e}"


def _crossbars(s: dict[str, Any]) -> str:
    """Crossbars a pipeline occupies, copies made by replication after a `+`."""
    extra = sum(r["extra_crossbars"] for r in s.get("replicated") or [])
    used = s["crossbars_used"]
    return f"{used - extra:,}+{extra:,}" if extra else f"{used:,}"


def memory(s: dict[str, Any]) -> str:
    """Peak local memory of the fullest core over the capacity ("OVER" when it overflows),
    and the bytes spilled to shared memory to fit it."""
    mem = s.get("local_memory")
    if mem is None:
        return "-"
    text = f"{mem['peak_bytes'] / 1024:.1f}/{mem['capacity_bytes'] / 1024:g} KiB"
    spilled = (mem.get("spill") or {}).get("bytes", 0)
    if spilled:
        text += f" +{spilled / 1024:.1f} KiB spilled"
    return text if mem["fits"] else text + " OVER"


Report = dict[str, Any]
Cell = tuple[str, bool, Callable[[Report, Report], str]]
"""(header, right-aligned, the text from the report and one schedule's entry)."""


def _ns(key: str) -> Callable[[Report, Report], str]:
    return lambda rep, s: ns(s[key])


CELLS: dict[str, Cell] = {
    "estimate": ("estimate ns", True, _ns("estimate_ns")),
    "simulated": ("simulated ns", True, _ns("simulated_ns")),
    "ideal": ("ideal sim ns", True, _ns("ideal_simulated_ns")),
    "bound": ("solver bound ns", True, lambda rep, s: _solver_bound(s)),
    "gap": ("gap to lower bound", True, _gap),
    "status": ("status", False, lambda rep, s: str(s["status"]).split()[0]),
    "solve": ("solve s", True, lambda rep, s: f"{s['solve_seconds']:.2f}"),
    "cores": ("cores", True, lambda rep, s: str(s["cores_used"])),
    "crossbars": ("crossbars", True, lambda rep, s: f"{rep['crossbars']:,}"),
    "messages": ("messages", True, lambda rep, s: "-" if s["simulation"] is None
                 else f"{s['simulation']['messages']:,}"),
    "memory": ("local mem", True, lambda rep, s: memory(s)),
    "period": ("estimated period ns", True, _ns("period_ns")),
    "sim_period": ("simulated period ns", True, _ns("simulated_period_ns")),
    "ideal_period": ("ideal est. period ns", True, _ns("ideal_period_ns")),
    "ideal_sim_period": ("ideal sim period ns", True, _ns("ideal_simulated_period_ns")),
    "solver_period": ("solver period ns", True, _ns("solver_period_ns")),
    "throughput": ("inf/s", True, lambda rep, s: "-" if (v := s["throughput_per_s"]) is None
                   else f"{v:,.1f}" if v < 1e5 else f"{v:,.0f}"),
    "latency": ("latency in pipeline ns", True, _ns("latency_in_pipeline_ns")),
    "efficiency": ("efficiency", True, lambda rep, s: "-" if (e := s.get("efficiency")) is None
                   else f"{e:.0%}"),
    "latency_mode": ("latency mode ns", True, _ns("latency_mode_ns")),
    "stages": ("stages / cores", True, lambda rep, s: f"{len(s['stages'])}/{s['cores_used']}"),
    "pipe_crossbars": ("crossbars +copies", True, lambda rep, s: _crossbars(s)),
    "numerics": ("numerics", False, lambda rep, s: _numerics(s)),
}
"""Every column a results table can show, by key."""

COMPACT: tuple[str, ...] = ("estimate", "simulated", "ideal", "gap", "cores", "numerics")
WIDE: tuple[str, ...] = ("estimate", "simulated", "ideal", "bound", "gap", "status", "solve",
                         "cores", "crossbars", "messages", "memory", "numerics")
PIPELINE: tuple[str, ...] = ("period", "sim_period", "throughput", "efficiency", "stages",
                             "pipe_crossbars", "status", "numerics")
PIPELINE_WIDE: tuple[str, ...] = (
    "period", "sim_period", "ideal_period", "ideal_sim_period", "solver_period", "bound",
    "throughput", "efficiency", "latency", "latency_mode", "stages", "pipe_crossbars", "status",
    "solve", "messages", "memory", "numerics")


def _title(rep: dict[str, Any]) -> str:
    if rep.get("mode") == "pipeline":
        n = rep["inferences"]
        return (f"pipeline schedules, {counted(n, 'inference')} simulated; inf/s: "
                f"throughput; efficiency: period lower bound {rep['period_lower_bound_ns']:,} "
                "ns (work packed on the cores, heaviest group, output stores) / simulated period")
    title = (f"latency schedules (lower bound {rep['lower_bound_ns']:,} ns: critical path, "
             "work / cores, fan-in, shared memory, layer load)")
    if rep.get("protocol", "raptor") == "raptor":
        return title
    schedules = rep["schedules"].values()
    simulated = {s.get("simulated_protocol") for s in schedules} - {None}
    mesh = "" if any(s.get("mesh_simulated_ns") is not None for s in schedules) else \
        " (Raptor's mesh not simulated)"  # --no-simulate: the export's model ran alone
    return title + "; estimate under pimsim-nn's protocol" + (
        "; simulated: the exported program under Raptor's model of pimsim-nn" + mesh
        if simulated == {"pimsim-nn"} else "; simulated: Raptor's mesh" if simulated else "")


def _fitted(title: str, heads: Sequence[str], rows: Sequence[Sequence[str]],
            right: Sequence[bool], wraps: Sequence[bool], width: int) -> Table | None:
    """A table whose column widths keep every cell on one line (cells of `wraps` columns
    may break between words; headers always may), or None when that needs more than
    `width`.

    Rich's own fitting shrinks the widest columns first and then all evenly, cutting
    numbers with "…"; here each column gets at least its widest unbreakable text and the
    spare width unfolds the headers, the ones closest to one line first."""
    def longest_word(text: str) -> int:
        return max((len(w) for w in text.split()), default=0)

    cols = list(zip(*rows, strict=True)) if rows else [()] * len(heads)
    need = [max((longest_word(c) if wrap else len(c) for c in cells), default=0)
            for cells, wrap in zip(cols, wraps, strict=True)]
    floor = [max(n, longest_word(h)) for n, h in zip(need, heads, strict=True)]
    prefer = [max(max((len(c) for c in cells), default=0), len(h))
              for cells, h in zip(cols, heads, strict=True)]
    avail = width - (3 * len(heads) - 3)  # a divider and two spaces between columns
    if sum(floor) > avail:
        return None
    widths = list(floor)
    spare = avail - sum(widths)
    for k in sorted(range(len(widths)), key=lambda k: prefer[k] - floor[k]):
        give = min(spare, prefer[k] - widths[k])
        widths[k] += give
        spare -= give
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for head, w, r in zip(heads, widths, right, strict=True):
        table.add_column(head, justify="right" if r else "left", width=w)
    for row in rows:
        table.add_row(*row)
    return table


def results_table(rep: dict[str, Any], columns: Sequence[str], width: int) -> Table | None:
    """One row per schedule; None when it cannot fit `width` without cutting a cell."""
    cells = [CELLS[key] for key in columns]
    heads = ["solver", *(h for h, _, _ in cells)]
    rows = [[name, *(text(rep, s) for _, _, text in cells)] for name, s in rep["schedules"].items()]
    wraps = ("status", "numerics") if rep.get("mode") == "pipeline" else ("status",)
    return _fitted(_title(rep), heads, rows, [False, *(r for _, r, _ in cells)],
                   [False, *(key in wraps for key in columns)], width)


def transposed_table(rep: dict[str, Any], columns: Sequence[str], width: int) -> Table | None:
    """One column per schedule, one row per figure: as narrow as the figures themselves."""
    names = list(rep["schedules"])
    rows = [[head, *(text(rep, s) for s in rep["schedules"].values())]
            for head, _, text in (CELLS[key] for key in columns)]
    return _fitted(_title(rep), ["", *names], rows, [False, *(True for _ in names)],
                   [False, *(True for _ in names)], width)


def status_lines(rep: dict[str, Any]) -> list[str]:
    """What each solver did and when, its model and bound, and its peak local memory. The
    table's gap is against the problem's lower bound (the title); a solver's own bound is
    named here, labelled when it bounds only a restricted model."""
    out = []
    pipeline = rep.get("mode") == "pipeline"
    for name, s in rep["schedules"].items():
        model = f", {s['model']} model" if s["model"] else ""
        bound = _solver_bound(s)
        said = f"; solver bound {bound} ns" if bound != "-" else ""
        if pipeline:
            said = (f"; period model {s['solver_period_ns']:,} ns"
                    + (f", proven bound {s['bound_ns']:,} ns"
                       + (" of the wave model" if "wave" in s.get("bound_of", "") else "")
                       if s["bound_ns"] is not None
                       and not s["status"].startswith("HEURISTIC") else ""))
        mem = f"; local memory {memory(s)}" if s.get("local_memory") else ""
        detail = f" {s['status_detail']}" if s.get("status_detail") else ""
        out.append(f"{name}: {s['status']}{detail} ({s['solve_seconds']:.2f} s{model}){said}{mem}")
    return out


def print_results(console: Console, rep: dict[str, Any], *, wide: bool = False,
                  files: str = "") -> None:
    """Everything `raptor solve` prints on stdout, fitted to `console.width`."""
    for line in summary_lines(rep):
        console.print(line, markup=False, highlight=False)
    pipeline = rep.get("mode") == "pipeline"
    columns = (PIPELINE_WIDE if wide else PIPELINE) if pipeline else WIDE if wide else COMPACT
    table = results_table(rep, columns, console.width) or \
        transposed_table(rep, columns, console.width)
    if table is None:  # narrower than any figure: let the terminal wrap the rows
        table = results_table(rep, columns, 10_000)
        assert table is not None
        console.print(table, crop=False, soft_wrap=True)
    else:
        console.print(table)
    console.print()
    for line in status_lines(rep):
        console.print(line, markup=False, highlight=False)
    if files:
        console.print(files, markup=False, highlight=False)
