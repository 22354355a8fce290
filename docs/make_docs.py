"""The README's sample output and the pictures in docs/images/, made by running the
commands the README shows, so neither can drift from what Raptor prints and draws.

    python docs/make_docs.py            # rewrite the README's sample block and the PNGs
    python docs/make_docs.py --check    # exit 1 if the README block differs (timing masked)

The sample is `raptor solve` at 100 columns; `tests/ui/test_readme.py` runs it again and
compares. The pictures are the charts `raptor solve examples/resnet_block.onnx --solver peft`
writes, rendered with cairosvg (`pip install cairosvg`; docs only)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from raptor.cli import main  # noqa: E402

SAMPLE = ["solve", "examples/mlp.onnx", "--workers", "1", "--time-limit", "30"]
"""The README's sample command. One CP-SAT worker proves this model optimal in a few
seconds (the limit leaves room on a busy machine), so every run prints the same apart from
the seconds."""
PICTURES = ["solve", "examples/resnet_block.onnx", "--solver", "peft"]
IMAGES = {"gantt.peft.svg": "resnet_block.estimate.png",
          "gantt.peft.simulated.svg": "resnet_block.simulated.png",
          "noc.peft.svg": "resnet_block.noc.png"}
WIDTH = 100
BEGIN = "<!-- sample output: made by docs/make_docs.py, do not edit -->"
END = "<!-- end of sample output -->"
README = ROOT / "README.md"


def run(args: list[str], work: Path) -> str:
    """`raptor ARGS` as a terminal of WIDTH columns shows it, run in `work` (where
    `examples/` leads to the repository's) so that it writes `work/raptor-out/`."""
    buf = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    here = Path.cwd()
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "examples").exists():
        (work / "examples").symlink_to(ROOT / "examples")
    try:
        os.chdir(work)
        with contextlib.redirect_stdout(buf):
            code = main(args)
    finally:
        os.chdir(here)
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    if code != 0:
        raise SystemExit(f"raptor {' '.join(args)} exited {code}")
    return buf.getvalue()


def block(output: str) -> str:
    """The README block: the command and what it printed (without trailing blanks)."""
    lines = "\n".join(line.rstrip() for line in output.rstrip().splitlines())
    return f"{BEGIN}\n```\n$ raptor {' '.join(SAMPLE)}\n{lines}\n```\n{END}"


def readme_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def masked(text: str) -> str:
    """Seconds are the only figures that change between runs."""
    return re.sub(r"\d+\.\d+ s\b", "<t> s", text)


def same(have: str, want: str) -> bool:
    """Equal up to the seconds and to where lines wrap (a second's digits move the breaks)."""
    return masked(have).split() == masked(want).split()


def pictures(work: Path, images: Path) -> None:
    import cairosvg  # docs only

    run(PICTURES, work)
    images.mkdir(exist_ok=True)
    for svg, png in IMAGES.items():
        cairosvg.svg2png(url=str(work / "raptor-out" / svg), write_to=str(images / png))


def cli() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare, write nothing")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        want = block(run(SAMPLE, Path(tmp) / "sample"))
        text = README.read_text()
        have = readme_block(text)
        if args.check:
            if same(have, want):
                return 0
            sys.stdout.writelines(difflib.unified_diff(
                masked(have).splitlines(True), masked(want).splitlines(True), "README.md",
                "raptor"))
            return 1
        README.write_text(text.replace(have, want))
        pictures(Path(tmp) / "pictures", ROOT / "docs" / "images")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
