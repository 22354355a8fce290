"""Simulation figures and the Chrome trace-event file (opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from raptor.sim.errors import SimError

BUSY, BLOCKED, MEMORY, COMM = "compute", "blocked", "memory", "comm"
"""Span categories; `memory` and `comm` spans are busy time, `blocked` is waiting."""


@dataclass
class CoreStats:
    """busy + blocked = finish; idle = latency - finish (the core has nothing left to do)."""

    core: int
    busy_ns: int = 0
    blocked_ns: int = 0
    idle_ns: int = 0
    finish_ns: int = 0
    ops: int = 0
    body_ops: int = 0
    crossbars: int = 0


@dataclass
class SimReport:
    latency_ns: int
    cores: list[CoreStats]
    messages: int = 0
    message_bytes: int = 0
    shared_reads: int = 0
    shared_read_bytes: int = 0
    shared_writes: int = 0
    shared_write_bytes: int = 0
    input_reads: int = 0
    """`pim.load`s of function inputs inside compute bodies: charged in the body's cost,
    outside the shared-memory queue (inputs are never written, so nothing can race)."""
    input_read_bytes: int = 0
    ops_executed: int = 0
    body_ops_executed: int = 0
    compile_time_s: float = 0.0
    wall_time_s: float = 0.0
    """The run (event loop and numerics), plus the compilation for `simulate`."""
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self) -> str:
        """A few human lines: latency, traffic and the busiest/most blocked cores."""
        busy = max(self.cores, key=lambda c: c.busy_ns, default=None)
        blocked = max(self.cores, key=lambda c: c.blocked_ns, default=None)
        lines = [f"latency {self.latency_ns} ns on {len(self.cores)} cores, "
                 f"{self.ops_executed} ops ({self.body_ops_executed} body ops), "
                 f"{self.messages} messages ({self.message_bytes} B), "
                 f"shared memory {self.shared_read_bytes} B read / "
                 f"{self.shared_write_bytes} B written, inputs {self.input_read_bytes} B "
                 "read inside bodies"]
        if busy is not None and blocked is not None:
            lines.append(f"busiest core {busy.core}: {busy.busy_ns} ns busy; most blocked core "
                         f"{blocked.core}: {blocked.blocked_ns} ns blocked")
        return "\n".join(lines)


@dataclass
class Trace:
    """Raw spans (core, start ns, duration ns, name, category, detail) and messages
    (src, dst, channel, bytes, injected ns, arrived ns); converted to JSON on demand."""

    spans: list[tuple[int, int, int, str, str, str]] = field(default_factory=list)
    messages: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)

    def to_chrome(self, cores: list[int]) -> dict[str, Any]:
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
             "args": {"name": "raptor simulator"}}]
        for c in cores:
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": c,
                           "args": {"name": f"core {c}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": c,
                           "args": {"sort_index": c}})
        for core, start, dur, name, cat, detail in self.spans:
            events.append({"ph": "X", "name": name, "cat": cat, "pid": 0, "tid": core,
                           "ts": start / 1000, "dur": dur / 1000, "args": {"detail": detail}})
        for i, (src, dst, ch, nbytes, sent, arrived) in enumerate(self.messages):
            common = {"name": f"channel {ch}", "cat": "message", "pid": 0, "id": i,
                      "args": {"bytes": nbytes, "from": src, "to": dst}}
            events.append({**common, "ph": "s", "tid": src, "ts": sent / 1000})
            events.append({**common, "ph": "f", "bp": "e", "tid": dst, "ts": arrived / 1000})
        return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_atomic(path: str | Path, text: str) -> None:
    """Write through a temporary file in the same directory, then rename, so a reader never
    sees a half-written trace."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class SimResult:
    """Output tensors in `return` order (with their names) plus figures and trace."""

    outputs: list[np.ndarray]
    names: list[str]
    report: SimReport
    trace: Trace

    def output(self, name: str) -> np.ndarray:
        key = name.lstrip("%")
        if key not in self.names:
            raise SimError(f"no output named %{key} (outputs: "
                           f"{', '.join('%' + n for n in self.names)})")
        return self.outputs[self.names.index(key)]

    def chrome_trace(self) -> dict[str, Any]:
        return self.trace.to_chrome([c.core for c in self.report.cores])

    def write_trace(self, path: str | Path) -> None:
        write_atomic(path, json.dumps(self.chrome_trace()))
