"""Charts say what they show: a schedule's charts are titled with its own solver (also when
it shares another's program), the estimate Gantt's figure is where its bars end, and a
large network's legend is capped with the rest of its layers grouped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raptor.cli import main
from raptor.solver.gantt import LEGEND_LAYERS, Bar, render_gantt
from raptor.ui.outputs import _planned

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


def heading(path: Path) -> str:
    return next(ET.fromstring(path.read_text()).iter(f"{SVG}text")).text or ""


def bar_ends(path: Path) -> list[int]:
    """The end (ns) of every bar, from its tooltip `...; a–b ns on core c`."""
    return [int(m.group(1).replace(",", "")) for m in
            re.finditer(r"–([\d,]+) ns on core", path.read_text())]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CP-SAT run too short for a schedule of its own: it shares PEFT's program."""
    out = tmp_path_factory.mktemp("out")
    assert main(["solve", str(ROOT / "examples" / "mlp.onnx"), "--workers", "1",
                 "--time-limit", "1e-6", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("solver", ["peft", "cpsat"])
def test_every_chart_is_titled_with_its_solver(shared: Path, solver: str) -> None:
    for name in ("gantt.{}.svg", "gantt.{}.simulated.svg", "noc.{}.svg"):
        title = heading(shared / name.format(solver))
        assert f"{solver} schedule" in title, (name, title)


@pytest.mark.parametrize("solver", ["peft", "cpsat"])
def test_the_estimate_title_is_the_span_its_bars_draw(shared: Path, solver: str) -> None:
    title = heading(shared / f"gantt.{solver}.svg")
    drawn = re.search(r"contention-free plan ([\d,]+) ns", title)
    assert drawn is not None, title
    assert int(drawn.group(1).replace(",", "")) == max(bar_ends(shared / f"gantt.{solver}.svg"))
    assert "estimate with contention" in title


def test_a_one_stage_pipeline_is_one_stage() -> None:
    run: Any = SimpleNamespace(pipeline=SimpleNamespace(stages=[object()]), estimate_ns=9,
                               stream_estimate=SimpleNamespace(period_ns=5))
    text = _planned("m: cpsat schedule (OPTIMAL), ", run, 7)
    assert "1 stage," in text and "stages" not in text


def test_a_large_network_has_a_capped_legend_and_a_smaller_chart() -> None:
    layers = [f"layer{i:03d}" for i in range(300)]
    bars = [Bar(core, t * 10, t * 10 + 9 + (i % 7), layers[i], layers[i], f"task {i}")
            for i in range(300) for core, t in [(i % 64, i // 64)]]
    legend = {k: k for k in layers}
    colours = {k: f"#{i:06x}" for i, k in enumerate(layers)}
    svg = render_gantt(list(range(64)), bars, [], title="t", subtitle="s", span=60,
                       legend=legend, colours=colours)
    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    shown = [t for t in texts if t.startswith("layer")]
    assert len(shown) == LEGEND_LAYERS - 1
    assert f"{300 - LEGEND_LAYERS + 1} other layers" in texts
    assert "layer299" in svg  # in a tooltip: every bar still names its layer
    height = int(root.get("height", "0"))
    assert height < 64 * 12 + 54 + 34 + 18 * 6 + 10  # the legend: at most six lines
