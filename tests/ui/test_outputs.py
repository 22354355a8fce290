"""The files `raptor solve` writes for a person: Gantt charts of the estimate and of the
simulation, the NoC heatmap and the Chrome trace, named by ONNX layer, plus their modes."""

from __future__ import annotations

import io
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from raptor.solve import Solved, SolveOptions, report, solve
from raptor.solver.gantt import nice_step, time_unit
from raptor.target import load_target
from raptor.ui.outputs import write_outputs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = EXAMPLES / "resnet_block.onnx"
SVG = "{http://www.w3.org/2000/svg}"
NODES = {n.name for n in onnx.load(str(MODEL)).graph.node}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Solved, Path]:
    out = tmp_path_factory.mktemp("out")
    solved = solve(MODEL, load_target("default"), SolveOptions(solver="peft"))
    wrote = write_outputs(out, solved, report(solved))
    # the `wrote` line names exactly the files that are there
    listed = re.findall(r"[\w.]+<solver>[\w.]+|report\.json|weights\.npz", wrote)
    assert sorted(f.replace("<solver>", "peft") for f in listed) == \
        sorted(p.name for p in out.iterdir())
    return solved, out


def _svg(path: Path) -> ET.Element:
    return ET.fromstring(path.read_text())


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _titled(root: ET.Element, tag: str) -> Iterator[tuple[ET.Element, str]]:
    for el in root.iter(f"{SVG}{tag}"):
        title = el.find(f"{SVG}title")
        if title is not None:
            yield el, title.text or ""


def _colours(text: str) -> set[str]:
    return set(re.findall(r'(?:fill|stroke|stop-color)="([^"]+)"', text))


@pytest.mark.parametrize("name", ["gantt.peft.svg", "gantt.peft.simulated.svg",
                                  "noc.peft.svg"])
def test_charts_use_hex_colours_only(written: tuple[Solved, Path], name: str) -> None:
    """cairosvg and other renderers draw hsl() black: every colour is #rrggbb."""
    text = (written[1] / name).read_text()
    colours = _colours(text)
    assert colours and all(re.fullmatch(r"#[0-9a-f]{6}|url\(#\w+\)|none", c)
                           for c in colours), colours


def test_estimate_gantt_has_legend_ticks_cores_tooltips_and_messages(
        written: tuple[Solved, Path]) -> None:
    solved, out = written
    run = solved.runs[0]
    root = _svg(out / "gantt.peft.svg")
    texts = _texts(root)
    assert texts[0] == f"resnet_block.onnx: peft schedule (HEURISTIC), contention-free plan " \
        f"{run.ideal_estimate_ns:,} ns (estimate with contention {run.estimate_ns:,} ns)"
    assert texts[1].startswith("the plan: the scheduler's cost model without link contention")
    # legend: every layer the chart draws, in topological order, by ONNX node and op
    assert [t for t in texts if " (" in t and t.split(" (")[0] in NODES] == [
        "conv2 (conv+relu)", "conv10 (conv)", "add16 (add)", "relu17 (relu)"]
    used = sorted(c for c, tasks in enumerate(run.result.core_tasks) if tasks)
    assert [t for t in texts if t.startswith("core ")] == [f"core {c}" for c in used]
    # a time axis in µs with 1-2-5 ticks up to the estimate
    assert "time (µs)" in texts
    assert [t for t in texts if t.isdigit()] == [str(k) for k in range(0, 13, 2)]
    bars = [tip for _, tip in _titled(root, "rect")]
    assert len(bars) == solved.build.graph.num_tasks  # few, wide bars: none merged
    assert all(re.match(r"\w+ \([a-z+]+\), task \d+ \(.+\) lane \d+; [\d,]+–[\d,]+ ns "
                        r"on core \d+$", tip) for tip in bars), bars[:3]
    assert {tip.split(" (")[0] for tip in bars} == {"conv2", "conv10", "add16", "relu17"}
    lines = [tip for _, tip in _titled(root, "line")]
    assert lines and all(re.match(r"[\d,]+ B core \d+ → core \d+: ", tip) for tip in lines)


def test_simulated_gantt_shows_waiting_memory_and_messages(
        written: tuple[Solved, Path]) -> None:
    solved, out = written
    sim = solved.runs[0].sim
    assert sim is not None
    root = _svg(out / "gantt.peft.simulated.svg")
    texts = _texts(root)
    assert texts[0] == f"resnet_block.onnx: peft schedule, simulated " \
        f"{sim.report.latency_ns:,} ns"
    assert texts[1].startswith("simulated: rendezvous sends, XY link contention, one "
                               "shared-memory request at a time")
    assert {"blocked (waiting)", "shared memory load / store", "relu17 (relu)"} <= set(texts)
    tips = [tip for _, tip in _titled(root, "rect")]
    assert any(t.startswith("blocked, waiting for %") for t in tips)
    assert any(t.startswith("pim.store relu17") for t in tips)
    assert any(t.startswith("conv10 (conv), lanes [") for t in tips)
    assert len([1 for _ in _titled(root, "line")]) == len(sim.trace.messages)


def test_noc_heatmap_counts_every_byte_on_its_links(written: tuple[Solved, Path]) -> None:
    """Each message crosses hops(src, dst) links under XY routing: the link tooltips add
    up to the bytes times the hops, and each used core shows its busy / blocked share."""
    solved, out = written
    sim = solved.runs[0].sim
    target = solved.target
    assert sim is not None
    root = _svg(out / "noc.peft.svg")
    carried = 0
    for _, tip in _titled(root, "g"):
        m = re.fullmatch(r"core (\d+) → core (\d+): ([\d,]+) B in (\d+) messages, busy "
                         r"([\d,]+) ns \(.+\)", tip)
        assert m, tip
        a, b = int(m[1]), int(m[2])
        assert target.hops(a, b) == 1
        carried += int(m[3].replace(",", ""))
    assert carried == sum(nbytes * target.hops(s, d)
                          for s, d, _, nbytes, _, _ in sim.trace.messages) > 0
    idle = [tip for _, tip in _titled(root, "line")]
    assert all(t.endswith("no traffic") for t in idle)
    assert len(idle) + len(list(_titled(root, "g"))) == target.mesh_links
    cores = [tip for _, tip in _titled(root, "rect")]
    used = [c for c in sim.report.cores if c.ops]
    assert len(cores) == target.num_cores
    for c in used:
        assert f"core {c.core}: busy {c.busy_ns:,} ns" in "\n".join(cores)


def test_trace_names_slices_by_layer_with_flows_and_counters(
        written: tuple[Solved, Path]) -> None:
    out = written[1]
    events = json.loads((out / "trace.peft.json").read_text())["traceEvents"]
    computes = [e for e in events if e["ph"] == "X" and e["cat"] == "compute"]
    assert computes and all(e["name"].split(" (")[0] in NODES for e in computes)
    for e in computes:
        args = e["args"]
        assert args["layer"] in NODES and args["op"] in e["name"]
        assert len(args["tasks"]) == len(args["lanes"]) >= 1
        assert args["bytes"] > 0 and args["tiles"] >= 0
    assert any(e["args"]["tiles"] > 0 for e in computes)
    stores = [e for e in events if e["ph"] == "X" and e["cat"] == "memory"]
    assert stores and all(e["name"] == "pim.store relu17" and e["args"]["bytes"] == 1024
                          for e in stores)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    for i, s in starts.items():
        f = ends[i]
        assert f["bp"] == "e" and s["tid"] == s["args"]["from"] and f["tid"] == s["args"]["to"]
        assert s["ts"] * 1000 <= s["args"]["sent_ns"] <= s["args"]["arrived_ns"] \
            <= f["ts"] * 1000
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"NoC links busy", "shared memory queue"}
    busy = [e["args"]["percent"] for e in events if e["ph"] == "C" and
            e["name"] == "NoC links busy"]
    assert 0 < max(busy) <= 100


def test_outputs_respect_the_umask(tmp_path: Path) -> None:
    """Like any file a program creates: 0666 under the umask (mkstemp alone gives 0600)."""
    from raptor.fileio import save_npz_atomic, write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.txt", "x")
        os.umask(0o077)
        save_npz_atomic(tmp_path / "b.npz", {})
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.npz").stat().st_mode & 0o777 == 0o600


def test_axis_ticks_are_round_numbers() -> None:
    assert [nice_step(s) for s in (7, 51.5, 140, 5054.4, 14.2)] == [1, 10, 20, 1000, 2]
    assert time_unit(140) == ("ns", 1.0) and time_unit(51_524)[0] == "µs"
    assert time_unit(14_180_117)[0] == "ms"


def test_charts_render_in_colour_with_cairosvg(written: tuple[Solved, Path]) -> None:
    """A real SVG renderer draws the layer colours (not black): the PNG holds the first
    palette colour over many pixels and little pure black."""
    cairosvg = pytest.importorskip("cairosvg")
    image = pytest.importorskip("PIL.Image")
    png = cairosvg.svg2png(url=str(written[1] / "gantt.peft.svg"))
    im = image.open(io.BytesIO(png)).convert("RGB")
    counts = {rgb: n for n, rgb in im.getcolors(1 << 20)}
    total = im.width * im.height
    assert counts.get((0x4e, 0x79, 0xa7), 0) > total // 20  # conv2's bars
    assert counts.get((0, 0, 0), 0) < total // 100


def test_a_reused_folder_keeps_only_this_runs_files_and_the_users(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A peft run after a both run: no cpsat program or charts beside a report that lists
    only peft; the simulation's files go after --no-simulate; a user's files stay."""
    from raptor.cli import main

    out = tmp_path / "out"
    model = str(Path(__file__).resolve().parents[2] / "examples" / "mlp.onnx")
    assert main(["solve", model, "--workers", "1", "--time-limit", "1", "--out", str(out)]) == 0
    assert (out / "scheduled.cpsat.spat").is_file() and (out / "noc.cpsat.svg").is_file()
    (out / "notes.txt").write_text("mine\n")
    (out / "gantt.mine.svg").write_text("<svg/>\n")
    assert main(["solve", model, "--solver", "peft", "--no-simulate", "--out", str(out)]) == 0
    capsys.readouterr()
    rep = json.loads((out / "report.json").read_text())
    assert list(rep["schedules"]) == ["peft"]
    assert sorted(p.name for p in out.iterdir()) == [
        "gantt.mine.svg", "gantt.peft.svg", "notes.txt", "report.json", "scheduled.peft.spat",
        "weights.npz"]
