"""Run pimsim-nn's `ChipTest` on an exported folder and read its report.

pimsim-nn is not part of Raptor: tests and benchmarks find the binary through the
environment variable `PIMSIM_NN=/path/to/ChipTest` and skip when it is unset.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
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
    """Peak resident memory of ChipTest (sampled every 50 ms)."""


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
        hwm_kb, status = 0, 0
        while True:  # poll: the peak of ChipTest's own image (ru_maxrss of a forked
            # child also counts the parent's pages it shared before exec)
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            hwm_kb = max(hwm_kb, _peak_kb(proc.pid))
            if timeout_s and time.perf_counter() - start > timeout_s:
                proc.kill()
                proc.wait()
                raise PimsimError(f"ChipTest did not finish within {timeout_s} s")
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    m = _LATENCY.search(stdout)
    if proc.returncode or m is None:
        tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
        raise PimsimError(f"ChipTest exited {proc.returncode}: {' / '.join(tail)}")
    finish = {int(c): float(t) * 1e6 for c, t in _FINISH.findall(stdout)}
    # pimsim-nn prints milliseconds to 6 decimals (whole ns): drop the float residue
    return PimsimRun(round(float(m.group(1)) * 1e6, 3), finish, wall, hwm_kb / 1024)


def _peak_kb(pid: int) -> int:
    """VmHWM of a running process (0 when it is gone or /proc is absent)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
