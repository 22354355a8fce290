"""Simulation figures and the Chrome trace-event file (opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import itertools
import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from raptor.fileio import open_atomic
from raptor.noc import LinkLog, Route
from raptor.sim.errors import SimError
from raptor.solver.pipeline.stream import steady_period

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
    signals: int = 0
    """`pim.signal`s (READY/FREE counts of a stream), each one shared-memory write."""
    waits: int = 0
    """`pim.wait`s, each one shared-memory read once its count is reached."""
    ops_executed: int = 0
    body_ops_executed: int = 0
    compile_time_s: float = 0.0
    wall_time_s: float = 0.0
    """The run (event loop and numerics), plus the compilation for `simulate`."""
    options: dict[str, Any] = field(default_factory=dict)
    inference_start_ns: list[int] = field(default_factory=list)
    """Stream programs: when the first core began each inference's iteration."""
    inference_end_ns: list[int] = field(default_factory=list)
    """Stream programs: when the last core finished each inference's iteration."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def period_ns(self, fill: int = 1) -> int | None:
        """Long-run period of a stream (`steady_period`: the mean completion interval
        without the stream's fill and drain, `fill` being its number of stages, at least its
        busiest core's work per inference). None for a latency program, a single
        inference, or a stream too short to tell."""
        busiest = max((c.busy_ns for c in self.cores), default=0)
        return steady_period(self.inference_start_ns, self.inference_end_ns, fill,
                             -(-busiest // max(len(self.inference_end_ns), 1)))

    def inference_latency_ns(self) -> list[int]:
        """Per inference of a stream: its end minus its start (its latency in the pipeline)."""
        return [e - s for s, e in zip(self.inference_start_ns, self.inference_end_ns, strict=True)]

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


@dataclass(frozen=True)
class SpanLabel:
    """What a compute or memory span is in model terms: `name` is the slice name, `key`
    the layer it is coloured by, `args` what the trace viewer shows on selection."""

    name: str
    key: str
    args: dict[str, Any] = field(default_factory=dict)


Labels = Mapping[int, Sequence[SpanLabel]]
"""Per core, one label per compute and memory span in program order (a core runs its
program in order, so its k-th such span is its k-th labelled op)."""

QUEUE = "shared memory queue"
"""The detail of a span spent waiting for the shared memory (the engine's wording)."""

COUNTER_BINS = 1000
"""Counter tracks average over at most this many time bins (a bounded file on any model)."""


Span = tuple[int, int, int, str, str, str]
"""A trace span: (core, start ns, duration ns, name, category, detail)."""


@dataclass
class Trace:
    """Raw spans (core, start ns, duration ns, name, category, detail), messages
    (src, dst, channel, bytes, injected ns, arrived ns) and mesh link occupancy
    (link `a * cores + b`, start ns, end ns); converted to JSON on demand."""

    recorded: list[Span | tuple[int, tuple[int, int, str, str]]] = field(default_factory=list)
    """The spans as the run recorded them, a compute's kept as cheaply as the loop can write
    it: (start ns, its instruction's `Instr.span`); `spans` lists them."""
    log: LinkLog = field(default_factory=LinkLog)
    """The mesh links' walks as the run logged them, or as `link_log` fills them."""
    sent: list[tuple[int, int] | tuple[int, int, int, int]] = field(default_factory=list)
    """The messages as the run recorded them, kept as cheaply as it can write them: (message
    number, injected ns), arrived when `arrival` says, or, where the protocol traces
    another arrival or size (pimsim-nn), (message number, injected ns, arrived ns, bytes,
    -1 for those of `ends`); `messages` lists them."""
    ends: Sequence[tuple[int, int, int, int]] = ()
    """Per message number: (src, dst, channel, bytes) (`Program.ends`)."""
    received: Sequence[int] = ()
    """Per message number, the slot of its arrival in `arrival` (`Program.received`)."""
    arrival: Sequence[int] = ()
    """Per slot, when the value arrived (`Engine.arrival`)."""
    walked: Sequence[Route] = ()
    """Per message number, its route (`Program.routes`) when the run walked the links of
    each message that has some as it recorded it in `sent`, and logged nothing itself
    (`raptor.sim.loop._inject`): `link_log` fills `log` from the two."""
    _messages: list[tuple[int, int, int, int, int, int]] = field(default_factory=list,
                                                                 repr=False, compare=False)
    _logged: int = field(default=0, repr=False, compare=False)
    _spanned: int = field(default=0, repr=False, compare=False)

    @property
    def spans(self) -> list[Span]:
        """(core, start ns, duration ns, name, category, detail) per span, in the order
        the run recorded them (`recorded`, made so in place when first read)."""
        rec = self.recorded
        for i in range(self._spanned, len(rec)):
            r = rec[i]
            if len(r) == 2:
                start, (core, cost, label, where) = r
                rec[i] = (core, start, cost, label, BUSY, where)
        self._spanned = len(rec)
        return cast(list[Span], rec)

    @property
    def link_log(self) -> LinkLog:
        """The mesh links' walks in the order the run made them (`links` lists their
        reservations)."""
        log, walked = self.log, self.walked
        if walked and self._logged != len(self.sent):
            routes: list[tuple[int, ...]] = []
            serial: list[int] = []
            starts: list[int] = []
            for rec in self.sent:
                r = walked[rec[0]]
                if r.links:
                    routes.append(r.links)
                    serial.append(r.serial_ns)
                    starts.append(rec[1])
            log.routes, log.serial, log.starts = routes, serial, starts
            self._logged = len(self.sent)
        return log

    @property
    def messages(self) -> list[tuple[int, int, int, int, int, int]]:
        """(src, dst, channel, bytes, injected ns, arrived ns) per message, in the order
        they arrived."""
        if len(self._messages) != len(self.sent):
            ends, received, arrival = self.ends, self.received, self.arrival
            out: list[tuple[int, int, int, int, int, int]] = []
            add = out.append
            for rec in self.sent:
                m = rec[0]
                src, dst, ch, size = ends[m]
                if len(rec) == 2:
                    add((src, dst, ch, size, rec[1], arrival[received[m]]))
                else:
                    _, inject, arrived, nbytes = rec
                    add((src, dst, ch, size if nbytes < 0 else nbytes, inject, arrived))
            self._messages = out
        return self._messages

    @property
    def links(self) -> list[tuple[int, int, int]]:
        """Mesh link occupancy: (link, start ns, end ns) per reservation."""
        return self.link_log.reservations()

    def labelled(self, labels: Labels | None) -> list[SpanLabel | None]:
        """The label of each span (None for waiting, rendezvous and unlabelled spans)."""
        out: list[SpanLabel | None] = []
        seen: dict[int, int] = {}
        for core, _, _, _, cat, _ in self.spans:
            mine = labels.get(core) if labels is not None and cat in (BUSY, MEMORY) else None
            if mine is None:
                out.append(None)
                continue
            k = seen.get(core, 0)
            seen[core] = k + 1
            out.append(mine[k] if k < len(mine) else None)
        return out

    def chrome_events(self, cores: list[int], labels: Labels | None = None,
                      mesh_links: int = 0, flows_until: int | None = None
                      ) -> Iterator[dict[str, Any]]:
        """Chrome trace events, one at a time (a long stream's trace is too large to hold as
        one list): a track per core whose compute slices are named by layer and op (lanes,
        tiles and bytes in their args), a flow arrow per message from the compute that
        produced it to the first compute on the receiver after it arrived, and counter
        tracks for mesh link utilization and the shared-memory queue. `flows_until` keeps
        the arrows of messages sent by then only (a stream's first inference: the others
        repeat its pattern, and a long stream would carry hundreds of thousands of them)."""
        meta = [(0, "process_name", {"name": "raptor simulator"})] + [
            m for c in cores for m in ((c, "thread_name", {"name": f"core {c}"}),
                                       (c, "thread_sort_index", {"sort_index": c}))]
        for t, kind, value in meta:
            yield {"ph": "M", "name": kind, "pid": 0, "tid": t, "args": value}
        starts: dict[int, list[int]] = {}  # per core: its compute spans' starts and ends
        ends: dict[int, list[int]] = {}
        for (core, start, dur, name, cat, detail), label in zip(
                self.spans, self.labelled(labels), strict=True):
            args: dict[str, Any] = {"detail": detail}
            if label is not None:  # the detail is a source location, if the IR has one
                name = label.name
                args = label.args if detail.startswith("<") else {**label.args, "detail": detail}
            yield {"ph": "X", "name": name, "cat": cat, "pid": 0, "tid": core,
                   "ts": start / 1000, "dur": dur / 1000, "args": args}
            if cat == BUSY and dur > 0:
                starts.setdefault(core, []).append(start)
                ends.setdefault(core, []).append(start + dur)
        yield from self._flows(starts, ends, flows_until)
        yield from self._counters(mesh_links)

    def _flows(self, starts: dict[int, list[int]], ends: dict[int, list[int]],
               until: int | None = None) -> Iterator[dict[str, Any]]:
        """Flow events bind to the slice enclosing their timestamp: the start sits in the
        middle of the last compute that ended by the send, the end in the middle of the
        first compute that starts after the arrival (the one that waited for it)."""
        for i, (src, dst, ch, nbytes, sent, arrived) in enumerate(self.messages):
            if until is not None and sent > until:
                continue
            k = bisect_right(ends.get(src, []), sent) - 1
            j = bisect_left(starts.get(dst, []), arrived)
            if k < 0 or j >= len(starts.get(dst, [])):
                continue  # nothing computed it (a forwarded weight) or nothing reads it
            common = {"name": "message", "cat": "message", "pid": 0, "id": i,
                      "args": {"bytes": nbytes, "from": src, "to": dst, "channel": ch,
                               "sent_ns": sent, "arrived_ns": arrived}}
            yield {**common, "ph": "s", "tid": src, "ts": (starts[src][k] + ends[src][k]) / 2000}
            yield {**common, "ph": "f", "bp": "e", "tid": dst,
                   "ts": (starts[dst][j] + ends[dst][j]) / 2000}

    def _link_spans(self) -> np.ndarray:
        """`links`' (start, end) pairs as an n x 2 array, read from the log's flat lists (a
        stream's reservations listed as tuples took over a GiB on ResNet-50)."""
        log = self.link_log
        heads = np.asarray(log.heads, dtype=np.int64)
        serial = np.repeat(np.asarray(log.serial, dtype=np.int64),
                           np.fromiter(map(len, log.routes), np.int64, len(log.routes)))
        return np.stack([heads, heads + serial], axis=1)

    def _counters(self, mesh_links: int) -> Iterator[dict[str, Any]]:
        """Time-binned averages: busy mesh links (percent of `mesh_links`, else a count) and
        shared-memory requests waiting or in service."""
        links = self._link_spans()
        end = max((s + d for _, s, d, _, _, _ in self.spans), default=0)
        end = max(end, int(links[:, 1].max(initial=0)))
        if end <= 0:
            return
        width = -(-end // COUNTER_BINS)
        edges = np.arange(0, end + width, width, dtype=np.int64)
        memory = [(s, s + d) for _, s, d, _, cat, detail in self.spans
                  if cat == MEMORY or detail == QUEUE]
        tracks = (("NoC links busy", "percent" if mesh_links else "links",
                   links,
                   100.0 / mesh_links if mesh_links else 1.0),
                  ("shared memory queue", "requests", memory, 1.0))
        for name, unit, spans, scale in tracks:
            if not len(spans):
                continue
            level = busy_per_bin(spans, edges) * (scale / width)
            prev = None
            for t, v in zip(edges[:-1].tolist(), np.round(level, 3).tolist(), strict=True):
                if v != prev:
                    yield {"ph": "C", "name": name, "pid": 0, "tid": 0, "ts": t / 1000,
                           "args": {unit: v}}
                    prev = v


def busy_per_bin(spans: Sequence[tuple[int, int]] | np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Σ over spans of their overlap with each bin [edges[k], edges[k+1]), in ns: the integral
    F(t) = Σ max(0, min(t, end) - start) at the edges, differenced (O((n + bins) log n))."""
    arr = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    s, e = np.sort(arr[:, 0]), np.sort(arr[:, 1])
    cs = np.concatenate(([0], np.cumsum(s)))
    ce = np.concatenate(([0], np.cumsum(e)))
    ns = np.searchsorted(s, edges, side="left")
    ne = np.searchsorted(e, edges, side="left")
    total = (ns * edges - cs[ns]) - (ne * edges - ce[ne])
    out: np.ndarray = np.diff(total).astype(np.float64)
    return out


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

    def chrome_events(self, labels: Labels | None = None, mesh_links: int = 0
                      ) -> Iterator[dict[str, Any]]:
        """A stream's trace draws the message arrows of its first inference only."""
        ends = self.report.inference_end_ns
        return self.trace.chrome_events([c.core for c in self.report.cores], labels,
                                        mesh_links, flows_until=ends[0] if ends else None)

    def chrome_trace(self, labels: Labels | None = None, mesh_links: int = 0) -> dict[str, Any]:
        """The trace-event document in memory (`write_trace` writes it without)."""
        return _chrome_document(list(self.chrome_events(labels, mesh_links)))

    def write_trace(self, path: str | Path, labels: Labels | None = None,
                    mesh_links: int = 0) -> None:
        """`json.dumps(self.chrome_trace(...))`, byte for byte, written TRACE_BATCH events
        at a time (a long stream's events would take gigabytes as dicts), whole or not at
        all (`raptor.fileio`): a reader never sees a half-written trace."""
        head, tail = json.dumps(_chrome_document([])).split("[]")
        events = self.chrome_events(labels, mesh_links)
        with open_atomic(path) as fh:
            fh.write(head.encode() + b"[")
            sep = b""
            while batch := list(itertools.islice(events, TRACE_BATCH)):
                fh.write(sep + json.dumps(batch)[1:-1].encode())  # the list's items
                sep = b", "
            fh.write(b"]" + tail.encode())


TRACE_BATCH = 4096
"""Trace events encoded per write."""


def _chrome_document(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"traceEvents": events, "displayTimeUnit": "ns"}
