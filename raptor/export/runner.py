"""Run pimsim-nn's `ChipTest` on an exported folder and read its report.

pimsim-nn is not part of Raptor: tests and benchmarks find the binary through the
environment variable `PIMSIM_NN=/path/to/ChipTest` and skip when it is unset.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV = "PIMSIM_NN"
_LATENCY = re.compile(r"latency:\s+([0-9.eE+-]+) ms")
_FINISH = re.compile(r"Core (\d+) Information\n\s+- finish time:\s+([0-9.eE+-]+) ms")


class PimsimError(RuntimeError):
    """ChipTest failed, timed out, or printed no latency."""


@dataclass
class PimsimRun:
    latency_ns: float
    finish_ns: dict[int, float] = field(default_factory=dict)
    """Per core with instructions, when its last instruction retired."""
    wall_s: float = 0.0
    max_rss_mb: float = 0.0
    """Peak resident memory of ChipTest."""


def chiptest() -> str | None:
    """The ChipTest binary named by $PIMSIM_NN, if it exists."""
    path = os.environ.get(ENV)
    return path if path and Path(path).is_file() else None


def run_chiptest(binary: str, folder: str | os.PathLike[str], config: str | None = None,
                 timeout_s: float | None = None) -> PimsimRun:
    """`ChipTest FOLDER/program FOLDER/chip.json` (or another `config`) in latency mode."""
    d = Path(folder)
    cfg = config or str(d / "chip.json")
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen([binary, str(d / "program"), cfg], stdout=out,
                                    stderr=err, text=True)
        except OSError as e:
            raise PimsimError(f"cannot run {binary}: {e.strerror or e}") from None
        timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory
        if timer is not None:
            timer.cancel()
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        wall = time.perf_counter() - start
        if timeout_s and code < 0 and wall >= timeout_s:
            raise PimsimError(f"ChipTest did not finish within {timeout_s} s")
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    m = _LATENCY.search(stdout)
    if proc.returncode or m is None:
        tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
        raise PimsimError(f"ChipTest exited {proc.returncode}: {' / '.join(tail)}")
    finish = {int(c): float(t) * 1e6 for c, t in _FINISH.findall(stdout)}
    return PimsimRun(float(m.group(1)) * 1e6, finish, wall, usage.ru_maxrss / 1024)
