"""Ctrl-C through a real process and signal (raptor.ui.interrupt), at three moments: while
the program starts, outside a search (PEFT), and during a CP-SAT search. Each test waits for
the phase line the program prints with RAPTOR_PROGRESS=lines before it signals, so the
moment is the one named, not a guess of a sleep."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raptor.ui.interrupt import ENDING

ROOT = Path(__file__).resolve().parents[2]
BLOCK = str(ROOT / "examples" / "resnet_block.onnx")
YOLO_NECK = str(ROOT / "examples" / "yolo_neck.onnx")
SEARCH = ["--time-limit", "60"]
"""A search of resnet_block that runs for half a minute unless Ctrl-C ends it."""


def interrupt(args: list[str], marker: str, then: str = "",
              timeout: float = 240) -> tuple[int, str, str]:
    """Run `raptor ARGS`, send SIGINT once a stderr line holds `marker`, and again once a
    later line holds `then` (if given); (exit code, stdout, stderr)."""
    env = {**os.environ, "RAPTOR_PROGRESS": "lines", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "raptor.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for wanted in [marker, then] if then else [marker]:
        for line in proc.stderr:
            seen.append(line)
            if wanted in line:
                proc.send_signal(signal.SIGINT)
                break
        else:
            pytest.fail(f"no line with {wanted!r}: {''.join(seen)}")
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, "".join(seen) + err


def said(err: str) -> list[str]:
    """stderr without the phase lines."""
    return [line for line in err.splitlines() if not line.startswith("raptor: phase: ")]


def no_temporaries(folder: Path) -> bool:
    return not folder.exists() or not [p for p in folder.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("marker", ["phase: starting", "phase: PEFT"])
def test_ctrl_c_outside_a_search_stops_with_one_line_and_exit_130(marker: str,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, err = interrupt(["solve", BLOCK, *SEARCH, "--out", str(out)], marker)
    assert code == 130 and said(err) == ["raptor: interrupted"], err
    assert stdout == "" and no_temporaries(out) and not (out / "report.json").exists()


def test_ctrl_c_during_the_search_keeps_its_best_schedule(tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.perf_counter()
    code, stdout, err = interrupt(["solve", BLOCK, *SEARCH, "--out", str(out)],
                                  "2 workers: best ")
    assert code == 0, err
    assert f"raptor: phase: {ENDING}" in err
    assert time.perf_counter() - t0 < 50  # not the search's whole minute
    rep = json.loads((out / "report.json").read_text())
    cp = rep["schedules"]["cpsat"]
    assert cp["status"] == "INTERRUPTED" and cp["status_detail"].startswith("Ctrl-C ended")
    assert cp["valid"] and cp["numerics"]["ok"] and rep["schedules"]["peft"]["status"] == \
        "HEURISTIC"
    assert "cpsat: INTERRUPTED Ctrl-C ended the search" in " ".join(stdout.split())
    assert no_temporaries(out)


def test_a_second_ctrl_c_during_the_search_stops(tmp_path: Path) -> None:
    # sent once the first has ended the search (two SIGINTs pending at once are one);
    # YOLO_NECK's run after its search lasts about a second, resnet_block's 0.1 s, which a
    # loaded machine's scheduling delay of this test could outlast (the run then exits 0)
    out = tmp_path / "out"
    code, _, err = interrupt(["solve", YOLO_NECK, *SEARCH, "--out", str(out)],
                             "2 workers: best ", then=ENDING)
    assert code == 130 and said(err) == ["raptor: interrupted"], err
    assert not (out / "report.json").exists() and no_temporaries(out)


def test_on_a_terminal_the_cursor_comes_back(tmp_path: Path) -> None:
    """The live progress line hides the cursor; Ctrl-C shows it again before the line.
    The first line drawn may be a later phase's (the short ones between two refreshes are
    never drawn), so the signal may land in the search: it then ends the search (its line
    says so) and a second Ctrl-C, during YOLO_NECK's run of about a second after it, stops
    (resnet_block's run could end before it came: exit 0)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    env.pop("RAPTOR_PROGRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "raptor.cli", "solve", YOLO_NECK, *SEARCH,
                             "--out", str(tmp_path / "out")], cwd=ROOT, env=env,
                            stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    data = b""
    deadline = time.monotonic() + 240
    signalled = again = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the program ended: the terminal closed
                break
            if not chunk:
                break
            data += chunk
        if not signalled and b"\x1b[?25l" in data:  # the live line is up
            proc.send_signal(signal.SIGINT)
            signalled = True
        if signalled and not again and ENDING.encode() in data:
            proc.send_signal(signal.SIGINT)
            again = True
    code = proc.wait(timeout=60)
    assert code == 130 and signalled, (code, signalled, again, data[-3000:])
    os.close(leader)
    assert b"\x1b[?25l" in data  # hidden while the progress line showed
    tail = data[data.rindex(b"\x1b[?25l"):]
    assert b"\x1b[?25h" in tail and tail.rstrip().endswith(b"raptor: interrupted")


@pytest.mark.parametrize("ending", ["swallowed", "replaced"])
def test_a_ctrl_c_a_library_swallows_or_replaces_still_stops_with_130(
        ending: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stop's KeyboardInterrupt can land in code that swallows it (a finalizer, a
    library's `except BaseException`) or raises another exception in its `finally`: the
    program still stops with the one line and exit 130, not a result or an internal error."""
    from raptor import cli

    def command(args: object) -> int:
        try:
            signal.raise_signal(signal.SIGINT)
            end = time.monotonic() + 30
            while time.monotonic() < end:  # Python code: the stop lands in it within this
                pass
        except KeyboardInterrupt:
            if ending == "replaced":
                raise RuntimeError("cleanup failed") from None
        return 1

    monkeypatch.setattr(cli, "cmd_verify", command)
    t0 = time.perf_counter()
    assert cli.main(["verify", "any.spat"]) == 130
    assert time.perf_counter() - t0 < 20
    assert capsys.readouterr().err.strip() == "raptor: interrupted"
