"""The Chrome trace-event file and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from raptor.sim import SimOptions

from .test_timing import CONTENTION
from .util import rand, run


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
    flows = [e for e in events if e["ph"] in "sf"]
    assert sorted((e["ph"], e["tid"], e["ts"]) for e in flows) == [
        ("f", 2, 0.02), ("f", 2, 0.036), ("s", 0, 0.0), ("s", 1, 0.004)]


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
