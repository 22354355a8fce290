"""The Chrome trace-event file and the JSON report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from raptor.noc import Network
from raptor.sim import SimOptions, protocol, report
from raptor.sim.report import SpanLabel, busy_per_bin

from .test_timing import CONTENTION
from .util import TARGET, rand, run


def test_chrome_trace_has_one_track_per_core_with_spans(tmp_path: Path) -> None:
    res = run(CONTENTION, {"w": rand(16)})
    path = tmp_path / "trace.json"
    res.write_trace(path)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # no temporary left over
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {0: "core 0", 1: "core 1", 2: "core 2"}
    spans = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], float) and isinstance(e["dur"], float) for e in spans)
    assert {e["tid"] for e in spans} == {1, 2}  # core 0 only sends (zero time)
    blocked = [e for e in spans if e["cat"] == "blocked"]
    assert [(e["tid"], e["ts"], e["dur"]) for e in blocked] == [(2, 0.0, 0.036)]
    store = next(e for e in spans if e["name"].startswith("pim.store"))
    assert (store["ts"], store["dur"], store["cat"]) == (0.04, 0.1, "memory")
    # an arrow binds to the slice around its timestamp: from the middle of the relu that
    # produced the message to the middle of the add that waited for it (core 0 forwards a
    # weight it did not compute: no slice to start from, no arrow)
    flows = [e for e in events if e["ph"] in "sf"]
    assert sorted((e["ph"], e["tid"], e["ts"]) for e in flows) == [
        ("f", 2, 0.038), ("s", 1, 0.002)]
    assert {e["id"] for e in flows} == {1} and flows[0]["args"]["bytes"] == 64


def test_messages_and_link_reservations_listed_from_what_the_run_recorded() -> None:
    """The run records each message as its number and times, and each walk's start: the
    lists are made when read. Core 1's message, injected at 4, takes link 4 at 18 when core
    0's leaves it."""
    res = run(CONTENTION, {"w": rand(16)})
    assert len(res.trace.sent) == 2 and res.trace.link_log.starts == [0, 4]
    assert res.trace.messages == [(0, 2, 0, 64, 0, 20), (1, 2, 1, 64, 4, 36)]
    assert res.trace.links == [(0, 0, 16), (4, 2, 18), (4, 18, 34)]


def test_spans_listed_from_what_the_run_recorded() -> None:
    """A compute's span is recorded as its start and its instruction's `span`, made a
    trace span in place when first read; the others are recorded whole."""
    res = run(CONTENTION, {"w": rand(16)})
    relu, vadd = (1, 4, "pim.relu", "t.spat:9:10"), (2, 4, "pim.vadd", "t.spat:15:10")
    blocked = (2, 0, 36, "blocked", "blocked", "waiting for %a, %b")
    store = (2, 40, 100, "pim.store %o", "memory", "t.spat:16:5")
    assert res.trace.recorded == [(0, relu), blocked, (36, vadd), store]
    spans = res.trace.spans
    assert spans == [(1, 0, 4, "pim.relu", "compute", "t.spat:9:10"), blocked,
                     (2, 36, 4, "pim.vadd", "compute", "t.spat:15:10"), store]
    assert res.trace.recorded is spans and res.trace.spans == spans


def crossing(senders: int = 6) -> str:
    """Cores 0..senders-1 on row 0 each send a weight to core 7, then to core 15, over the
    row's links; core c first runs senders-1-c relus, so the last sender injects first."""
    lines = ["func.func @main() -> (tensor<16xf32>, tensor<16xf32>) {",
             "  %w = spat.weight @w : tensor<16xf32>",
             "  %o = pim.alloc_shared : tensor<16xf32>",
             "  %p = pim.alloc_shared : tensor<16xf32>"]
    for c in range(senders):
        lines.append(f"  pim.core {c} {{")
        x = "%w"
        for k in range(senders - 1 - c):
            lines.append(f"    %x{k} = pim.relu {x} : tensor<16xf32>")
            x = f"%x{k}"
        lines += [f"    spat.channel_send {x} to core({dst}) channel({c}) : tensor<16xf32>"
                  for dst in (7, 15)] + ["  }"]
    for dst, out in ((7, "%o"), (15, "%p")):
        lines.append(f"  pim.core {dst} {{")
        lines += [f"    %r{c} = spat.channel_receive from core({c}) channel({c}) : "
                  "tensor<16xf32>" for c in range(senders)]
        acc = "%r0"
        for c in range(1, senders):
            lines.append(f"    %s{c} = pim.vadd {acc}, %r{c} : tensor<16xf32>")
            acc = f"%s{c}"
        lines += [f"    pim.store {acc} into {out}[0] [16] [1] : tensor<16xf32> into "
                  "tensor<16xf32>", "  }"]
    return "\n".join([*lines, "  return %o, %p : tensor<16xf32>, tensor<16xf32>", "}"])


def test_link_log_filled_when_read_is_the_one_logged_in_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In rendezvous mode the run logs no walk: the trace fills the log from `sent` when it
    is read. It equals the log the loop writes when told to (`walks_traced` off), walk for
    walk, on messages that contend and are walked out of their numbers' order."""
    late = run(crossing(), {"w": rand(16)})
    monkeypatch.setattr(protocol.Mesh, "walks_traced", False)
    inline = run(crossing(), {"w": rand(16)})
    assert late.trace.walked and not inline.trace.walked
    order = [rec[0] for rec in late.trace.sent]
    assert order != sorted(order) and len(order) == 12
    a, b = late.trace.link_log, inline.trace.link_log
    assert (a.routes, a.serial, a.starts, a.hop) == (b.routes, b.serial, b.starts, b.hop)
    assert late.trace.links == inline.trace.links
    free = run(crossing(), {"w": rand(16)}, options=SimOptions(link_contention=False))
    assert late.report.latency_ns > free.report.latency_ns  # the links were contended
    assert not free.trace.links


def test_written_trace_is_the_document_byte_for_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`write_trace` streams the events in batches (3 here, so several batches and a short
    last one) and writes what `json.dumps` of the whole document would."""
    monkeypatch.setattr(report, "TRACE_BATCH", 3)
    res = run(CONTENTION, {"w": rand(16)})
    labels = {1: [SpanLabel("relu3 (relu)", "relu3", {"lanes": [0], "bytes": 64})]}
    path = tmp_path / "trace.json"
    res.write_trace(path, labels, mesh_links=4)
    doc = res.chrome_trace(labels, mesh_links=4)
    assert len(doc["traceEvents"]) > 2 * report.TRACE_BATCH
    assert path.read_text() == json.dumps(doc)
    assert json.loads(path.read_text()) == doc


def test_a_trace_cut_short_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    res = run(CONTENTION, {"w": rand(16)})
    (tmp_path / "trace.json").write_text("earlier")

    def failing(*_: object, **__: object) -> Iterator[dict[str, object]]:
        yield {"ph": "M"}
        raise OSError("disk full")
    monkeypatch.setattr(res.trace, "chrome_events", failing)
    with pytest.raises(OSError, match="disk full"):
        res.write_trace(tmp_path / "trace.json")
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # no temporary left over
    assert (tmp_path / "trace.json").read_text() == "earlier"  # the old file untouched


def test_link_occupancy_and_counter_tracks() -> None:
    """0->2 holds link 0->1 over [0, 16) and 1->2 over [2, 18); 1->2, sent at 4, gets link
    1->2 at 18 (test_timing's contention case). The counters average per bin."""
    res = run(CONTENTION, {"w": rand(16)})
    net = Network(TARGET)
    assert sorted(res.trace.links) == [(net.link(0, 1), 0, 16), (net.link(1, 2), 2, 18),
                                       (net.link(1, 2), 18, 34)]
    events = res.chrome_trace(mesh_links=4)["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    links = [(e["ts"], e["args"]["percent"]) for e in counters if e["name"] == "NoC links busy"]
    # 140 ns in 1-ns bins: two of four links busy over [2, 16), one otherwise until 34
    assert links[:4] == [(0.0, 25.0), (0.002, 50.0), (0.016, 25.0), (0.034, 0.0)]
    queue = [(e["ts"], e["args"]["requests"]) for e in counters
             if e["name"] == "shared memory queue"]
    assert queue == [(0.0, 0.0), (0.04, 1.0)]


def test_labels_name_the_slices_in_program_order() -> None:
    res = run(CONTENTION, {"w": rand(16)})
    labels = {1: [SpanLabel("relu3 (relu)", "relu3", {"lanes": [0], "bytes": 64})],
              2: [SpanLabel("add4 (add)", "add4", {"tiles": 0}),
                  SpanLabel("pim.store add4", "shared memory", {"bytes": 64})]}
    spans = [e for e in res.chrome_trace(labels)["traceEvents"] if e["ph"] == "X"]
    named = [(e["tid"], e["name"], e["args"]) for e in spans if e["cat"] != "blocked"]
    assert named == [(1, "relu3 (relu)", {"lanes": [0], "bytes": 64, "detail": "t.spat:9:10"}),
                     (2, "add4 (add)", {"tiles": 0, "detail": "t.spat:15:10"}),
                     (2, "pim.store add4", {"bytes": 64, "detail": "t.spat:16:5"})]


def test_busy_per_bin_integrates_overlaps() -> None:
    edges = np.array([0, 5, 10, 15, 20])
    assert busy_per_bin([(0, 10), (5, 15)], edges).tolist() == [5, 10, 5, 0]
    assert busy_per_bin([(3, 4)], edges).tolist() == [1, 0, 0, 0]


def test_trace_off_records_nothing_and_report_is_json() -> None:
    res = run(CONTENTION, {"w": rand(16)}, options=SimOptions(trace=False))
    assert res.trace.spans == [] and res.trace.messages == []
    doc = json.loads(res.report.to_json())
    assert doc["latency_ns"] == 140
    assert doc["messages"] == 2 and doc["message_bytes"] == 128
    assert doc["shared_writes"] == 1 and doc["shared_write_bytes"] == 64
    assert [c["core"] for c in doc["cores"]] == [0, 1, 2]
    assert doc["options"]["mode"] == "rendezvous"
    assert "latency 140 ns on 3 cores" in res.report.summary()
