"""Run pimsim-nn's `ChipTest` on an exported folder and read its report.

pimsim-nn is not part of Raptor: tests and benchmarks find the binary through the
environment variable `PIMSIM_NN=/path/to/ChipTest` and skip when it is unset.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
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
    """Peak resident memory of ChipTest (this process's largest child so far)."""


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
    try:
        proc = subprocess.run([binary, str(d / "program"), cfg], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise PimsimError(f"ChipTest did not finish within {timeout_s} s") from None
    except OSError as e:
        raise PimsimError(f"cannot run {binary}: {e.strerror or e}") from None
    wall = time.perf_counter() - start
    m = _LATENCY.search(proc.stdout)
    if proc.returncode or m is None:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise PimsimError(f"ChipTest exited {proc.returncode}: {' / '.join(tail)}")
    finish = {int(c): float(t) * 1e6 for c, t in _FINISH.findall(proc.stdout)}
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return PimsimRun(float(m.group(1)) * 1e6, finish, wall, rss)
