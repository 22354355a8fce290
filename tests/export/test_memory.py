"""Local-memory allocation of scheduled IR: what takes space, reuse after the last use,
views and in-place ops, batches, staging buffers, the capacity check, and the peaks of
the bundled examples on the default target."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import pytest

from raptor.driver import compile_model
from raptor.export.chip import PimsimChip
from raptor.export.pimsim import _meet
from raptor.ir.core import Block
from raptor.ir.module import Module
from raptor.ir.ops import (
    CoreBatchOp,
    CoreOp,
    MvmOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
)
from raptor.ir.parser import parse_module
from raptor.passes.materialize import received_compute
from raptor.passes.memory import (
    NO_INSTRUCTION,
    MemoryPlan,
    Slot,
    _addresses,
    _live_peak,
    _meetings,
    _place,
    _Storage,
    activation_bytes,
    compute_memory,
    is_contiguous,
    plan_memory,
)
from raptor.solve import SolveOptions, solve
from raptor.solver.comm import START
from raptor.solver.from_ir import build_compute_graph
from raptor.target import Target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T = Target()


def plan(text: str, target: Target = T, element_bytes: int | None = None) -> MemoryPlan:
    return plan_memory(parse_module(text, "t.spat"), target, element_bytes)


def values(module_text: str) -> tuple[Module, dict[str, object]]:
    m = parse_module(module_text, "t.spat")
    names = {v.name: v for op in m.walk() for v in op.results() if v.name}
    return m, names


CHAIN = """
func.func @main(%x: tensor<2x32xf32>) -> tensor<2x32xf32> {
  %o = pim.alloc_shared : tensor<2x32xf32>
  pim.core 3 {
    %r = spat.scheduled_compute ins() -> tensor<2x32xf32> {
    ^bb0():
      %a = pim.load %x[0, 0] [2, 32] [1, 1] : tensor<2x32xf32> to tensor<2x32xf32>
      %b = tensor.extract_slice %a[0, 0] [2, 16] [1, 1] : tensor<2x32xf32> to tensor<2x16xf32>
      %c = tensor.extract_slice %a[0, 16] [2, 16] [1, 1] : tensor<2x32xf32> to tensor<2x16xf32>
      %v = tensor.extract_slice %a[1, 0] [1, 32] [1, 1] : tensor<2x32xf32> to tensor<32xf32>
      %d = pim.vadd %b, %c : tensor<2x16xf32>
      %e = pim.relu %d : tensor<2x16xf32>
      %f = tensor.reshape %e : tensor<2x16xf32> to tensor<32xf32>
      %w = pim.vmax %f, %v : tensor<32xf32>
      %g = tensor.empty : tensor<2x32xf32>
      %h = tensor.insert_slice %w into %g[0, 0] [1, 32] [1, 1] : tensor<32xf32> into
        tensor<2x32xf32>
      spat.yield %h : tensor<2x32xf32>
    }
    pim.store %r into %o[0, 0] [2, 32] [1, 1] : tensor<2x32xf32> into tensor<2x32xf32>
  }
  return %o : tensor<2x32xf32>
}
"""


def test_reuse_views_and_in_place_at_f32() -> None:
    m, v = values(CHAIN)
    mem = plan_memory(m, T, element_bytes=4).cores[3]
    slot = {k: mem.slots[x] for k, x in v.items() if x in mem.slots}  # type: ignore[index]
    # %b and %c are strided halves of %a: 128-B copies; %v is %a's second row, one range:
    # a view; vadd writes over %b (dying), relu over %d; the reshape is a view; vmax makes
    # a new buffer (%f is 128 B, the result 128 B, but %v still lives in %a); the insert
    # writes into %g in place and the yield is the compute's result
    assert slot["a"].nbytes == 256 and slot["b"].nbytes == 128
    assert slot["v"].addr == slot["a"].addr + 128 and slot["v"].nbytes == 128
    assert slot["d"] == slot["b"] and slot["e"] == slot["d"]
    assert slot["f"].addr == slot["e"].addr
    assert slot["w"] == slot["f"]  # %f dies at the vmax: in place
    assert slot["h"] == slot["g"] and slot["r"] == slot["h"]
    assert mem.buffers == 4  # %a, %b, %c, %g
    assert mem.live_peak_bytes == 256 + 128 + 128  # %a with %b and %c
    assert mem.peak_bytes >= mem.live_peak_bytes
    for x, y in (("a", "b"), ("a", "c"), ("b", "c")):  # live together: disjoint
        assert slot[x].end <= slot[y].addr or slot[y].end <= slot[x].addr


def test_slots_are_made_when_first_read() -> None:
    """A plan's slots wait until something reads them (the pimsim-nn exporter); made then,
    they are the addresses the footprint was measured on, and every copy of a batch's plan
    makes the same ones."""
    m, v = values(CHAIN)
    mem = plan_memory(m, T, element_bytes=4).cores[3]
    assert "slots" not in vars(mem)
    slot = mem.slots
    assert "slots" in vars(mem) and mem.slots is slot
    assert slot[v["a"]] == Slot(slot[v["a"]].addr, 256)  # type: ignore[index]
    assert max(s.end for s in slot.values()) <= mem.peak_bytes
    assert dataclasses.replace(mem, core=4).slots == slot


def test_activation_bytes_default_and_shared_layout() -> None:
    m, _ = values(CHAIN)
    p = plan_memory(m, T)  # the target's 8-bit activations: one byte per element
    assert p.element_bytes == 1
    assert p.cores[3].live_peak_bytes == 64 + 32 + 32
    func = m.main()
    out = func.body.ops[0].results()[0]
    assert p.shared[func.args[0]] == 0 and p.shared[out] == 64  # 32-byte aligned
    assert p.shared_bytes == 128 and not p.over_capacity()


def test_capacity_error_names_core_peak_and_capacity() -> None:
    small = Target(local_memory_bytes=100, shared_memory_bytes=64)
    p = plan(CHAIN, small)
    lines = p.over_capacity()
    assert len(lines) == 2
    assert lines[0].startswith("core 3 needs 128 bytes of local memory") and \
        "target default has 100 (local_memory_bytes)" in lines[0]
    assert "shared memory holds 128 bytes" in lines[1] and "has 64" in lines[1]
    d = p.to_dict()
    assert d["fits"] is False and d["peak_core"] == 3 and d["capacity_bytes"] == 100


SEND_REGION = """
func.func @main() -> tensor<4xf32> {
  %o = pim.alloc_shared : tensor<4xf32>
  pim.core 0 {
    %r = spat.scheduled_compute ins() -> tensor<4x8xf32> {
    ^bb0():
      %e = tensor.empty : tensor<4x8xf32>
      spat.yield %e : tensor<4x8xf32>
    }
  spat.channel_send %r[0, 2] [4, 1] [1, 1] to core(1) channel(0) : tensor<4x8xf32> -> tensor<4xf32>
  spat.channel_send %r[1, 0] [2, 8] [1, 1] to core(1) channel(1) : tensor<4x8xf32> -> tensor<16xf32>
  }
  pim.core 1 {
    %a = spat.channel_receive from core(0) channel(0) : tensor<4xf32>
    %b = spat.channel_receive from core(0) channel(1) : tensor<16xf32>
  }
  return %o : tensor<4xf32>
}
"""


def test_strided_region_send_gets_a_staging_buffer() -> None:
    p = plan(SEND_REGION)
    staging = p.cores[0].staging
    assert len(staging) == 1  # the column is strided; the two whole rows are contiguous
    (slot,) = staging.values()
    assert slot.nbytes == 4 and slot.addr >= 32  # beside the live 32-byte %r


def test_contiguity() -> None:
    assert is_contiguous((4, 8), (2, 8), (1, 1))
    assert is_contiguous((4, 8), (1, 3), (1, 1))
    assert not is_contiguous((4, 8), (4, 1), (1, 1))
    assert not is_contiguous((4, 8), (2, 3), (1, 1))
    assert not is_contiguous((4, 8), (1, 3), (1, 2))


BATCH = """
func.func @main(%x: tensor<16x4xf32>) -> tensor<16x2xf32> {
  %o = pim.alloc_shared : tensor<16x2xf32>
  pim.core 0 {
    %b = pim.load %x[0, 0] [16, 4] [1, 1] : tensor<16x4xf32> to tensor<16x4xf32>
    %q = spat.scheduled_compute_batch lanes(2) ins(%b : tensor<16x4xf32>) -> tensor<2x16x1xf32> {
    ^bb0(%lane: index, %in: tensor<16x4xf32>, %out: tensor<2x16x1xf32>):
      %c = tensor.extract_slice %in[0, 2*%lane] [16, 1] [1, 1] : tensor<16x4xf32> to
        tensor<16x1xf32>
      %s = pim.relu %c : tensor<16x1xf32>
      spat.parallel_insert_slice %s into %out[%lane, 0, 0] [1, 16, 1] [1, 1, 1] :
        tensor<16x1xf32> into tensor<2x16x1xf32>
    }
    %l1 = spat.lane_result %q[1] : tensor<2x16x1xf32> -> tensor<16x1xf32>
    pim.store %l1 into %o[0, 1] [16, 1] [1, 1] : tensor<16x1xf32> into tensor<16x2xf32>
  }
  return %o : tensor<16x2xf32>
}
"""


def test_batch_keeps_its_inputs_and_lane_results_are_views() -> None:
    m, v = values(BATCH)
    mem = plan_memory(m, T).cores[0]
    b, q, l1, c = (mem.slots[v[k]] for k in ("b", "q", "l1", "c"))  # type: ignore[index]
    assert l1.addr == q.addr + 16 and l1.nbytes == 16
    # %b is read by every lane: it must not overlap the lane intermediates or the result
    for other in (q, c):
        assert b.end <= other.addr or other.end <= b.addr
    assert mem.slots[v["s"]] == c  # type: ignore[index]  # relu in place over the dying slice


def test_examples_fit_the_default_target() -> None:
    """Every example's PEFT program fits 64 KiB per core at the target's 8-bit activations
    (the figures docs/pimsim.md reports come from the same plan)."""
    peaks = {}
    for model in ("mlp", "lenet", "yolo_neck"):
        s = solve(EXAMPLES / f"{model}.onnx", T, SolveOptions(solver="peft", simulate=False))
        run = s.runs[0]
        assert run.memory is not None and not run.memory_errors
        peaks[model] = run.memory.to_dict()["peak_bytes"]
        assert peaks[model] <= T.local_memory_bytes
    assert peaks["mlp"] < peaks["lenet"] < peaks["yolo_neck"]


@pytest.mark.parametrize("allow", [False, True])
def test_solve_fails_or_warns_over_capacity(allow: bool) -> None:
    small = Target(local_memory_bytes=256)
    s = solve(EXAMPLES / "mlp.onnx", small, SolveOptions(
        solver="peft", simulate=False, allow_memory_overflow=allow))
    run = s.runs[0]
    lines = run.memory_warnings if allow else run.memory_errors
    assert lines and all("bytes of local memory" in x and "has 256" in x for x in lines)
    assert run.ok is allow


def test_addresses_never_overlap_live_buffers() -> None:
    """The offline placement on random lifetimes: buffers live at once never share a
    byte, and the footprint is at least the live peak and within a quarter above it."""
    rnd = random.Random(7)
    for _ in range(20):
        stores = []
        for _ in range(rnd.randint(5, 120)):
            s = _Storage(rnd.choice([64, 420, 840, 1792, 3584, 7168]), rnd.randint(0, 300))
            s.end = s.start + rnd.choice([0, 1, 3, 10, 40, 150])
            stores.append(s)
        steps = max(s.end for s in stores) + 1
        footprint = _addresses(stores, steps)
        live = _live_peak(stores, steps)[0]
        assert live <= footprint <= live * 5 // 4
        assert footprint == max(s.addr + s.size for s in stores)
        for a, b in itertools.combinations(stores, 2):
            if a.start <= b.end and b.start <= a.end:
                assert a.addr + a.size <= b.addr or b.addr + b.size <= a.addr


def test_place_is_first_fit_with_few_and_many_overlapping_buffers() -> None:
    """Each buffer, in the order given, gets the lowest aligned address free of every
    earlier buffer whose lifetime meets its own: checked by brute force, with short lives
    (few overlaps) and long ones (many); `_meetings` finds exactly the overlapping pairs."""
    rnd = random.Random(3)
    for life in (0, 2, 400):
        stores = []
        for _ in range(150):
            s = _Storage(rnd.choice([1, 4, 60, 420, 840]), rnd.randint(0, 300))
            s.end = s.start + rnd.randint(0, life)
            stores.append(s)
        meets = _meetings(stores)
        for i, a in enumerate(stores):
            assert sorted(meets[i]) == [j for j, b in enumerate(stores) if j != i and
                                        a.start <= b.end and b.start <= a.end]
        order = list(range(len(stores)))
        rnd.shuffle(order)
        _place(stores, order, meets)
        widest = 0
        for k, i in enumerate(order):
            s = stores[i]
            size = -(-max(s.size, 1) // 4) * 4
            taken = [(stores[j].addr, stores[j].addr + -(-max(stores[j].size, 1) // 4) * 4)
                     for j in order[:k] if stores[j].start <= s.end and s.start <= stores[j].end]
            widest = max(widest, len(taken))
            addr = min(a for a in [0, *(e for _, e in taken)]
                       if all(a + size <= x or y <= a for x, y in taken))
            assert s.addr == addr
        assert (widest > 24) == (life == 400)


def test_a_small_memory_is_kept_by_posting_receives_late() -> None:
    """yolo_neck needs 12.6 KiB on a core when every receive is posted at the start; on a
    12 KiB target the communication model posts receives as they fit (and senders hold
    messages), the program fits, computes the right numbers, and the estimate still
    predicts the simulation. On the default target nothing changes. (resnet_block, which
    needed 5.5 KiB, needs 1.7 KiB since its lanes take runs of rows.)"""
    roomy = solve(EXAMPLES / "yolo_neck.onnx", T, SolveOptions(solver="peft")).runs[0]
    assert roomy.flow is not None and set(roomy.flow.posts.values()) == {START}
    small = Target(local_memory_bytes=12 * 1024)
    run = solve(EXAMPLES / "yolo_neck.onnx", small, SolveOptions(solver="peft")).runs[0]
    assert run.ok and run.memory is not None and not run.memory_errors
    assert roomy.memory is not None and \
        roomy.memory.peak is not None and roomy.memory.peak.peak_bytes > small.local_memory_bytes
    assert run.flow is not None and sum(p != START for p in run.flow.posts.values()) > 0
    assert run.sim is not None
    assert abs(run.estimate_ns - run.sim.report.latency_ns) <= run.sim.report.latency_ns // 50


def _mvm_runs(body: Block) -> list[list[MvmOp]]:
    """Each compute body's runs of consecutive MVMs, as the pimsim-nn export interleaves
    them (views between them do not end a run)."""
    runs: list[list[MvmOp]] = []
    for compute in body.walk():
        if not isinstance(compute, ScheduledComputeOp | ScheduledComputeBatchOp):
            continue
        run: list[MvmOp] = []
        for op in [*compute.body.ops, None]:
            if isinstance(op, MvmOp):
                run.append(op)
            elif not isinstance(op, NO_INSTRUCTION):
                runs.append(run) if len(run) > 1 else None
                run = []
    return runs


def _clashes(m: Module, plan: MemoryPlan, target: Target) -> int:
    """Pairs of rows of different MVMs of one run whose bytes pimsim-nn finds in conflict
    (one reads what the other writes, `PimsimChip.mvm_ranges`, touching ranges meet)."""
    chip = PimsimChip.of(target)
    eb = plan.element_bytes
    clashes = 0
    for op in m.main().body.ops:
        if not isinstance(op, CoreOp | CoreBatchOp):
            continue
        mem = plan.cores[op.core if isinstance(op, CoreOp) else op.cores[0]]
        for run in _mvm_runs(op.body):
            rows = []
            for i, mvm in enumerate(run):
                k = mvm.vector.type.static_shape[-1]
                n = mvm.result.type.static_shape[-1]
                size = target.crossbars_of(mvm.weight.type.static_shape)
                vec, out = mem.slots[mvm.vector].addr, mem.slots[mvm.result].addr
                rows += [(i, *chip.mvm_ranges(vec + r * k * eb, out + r * n * eb, size))
                         for r in range(mvm.vector.type.numel // k)]
            clashes += sum(1 for (i, r1, w1), (j, r2, w2) in itertools.combinations(rows, 2)
                           if i != j and (_meet(r1, w2) or _meet(r2, w1)))
    return clashes


def test_concurrent_array_groups_get_disjoint_bytes() -> None:
    """At `mvm_units` = 4 the MVMs mlp's bodies run at once read and write disjoint bytes
    (its serial layout has them share or touch bytes, which pimsim-nn's reorder buffer
    serializes: 8,888 ns on pimsim-nn, 4,966 apart); with too little memory for that, the
    plan keeps the serial layout and says so."""
    four = dataclasses.replace(T, mvm_units=4)
    s = solve(EXAMPLES / "mlp.onnx", four, SolveOptions(solver="peft", simulate=False))
    m = s.runs[0].scheduled
    concurrent = plan_memory(m, four)
    serial = plan_memory(m, dataclasses.replace(four, mvm_units=1))
    assert _clashes(m, serial, four) > 0
    assert _clashes(m, concurrent, four) == 0 and not concurrent.notes
    assert all(c.concurrent for c in concurrent.cores.values())
    assert concurrent.over_capacity() == []
    top = concurrent.peak
    assert top is not None and top.peak_bytes > serial.cores[top.core].peak_bytes
    tight = dataclasses.replace(four, local_memory_bytes=serial.cores[top.core].peak_bytes)
    fallback = plan_memory(m, tight)
    assert not fallback.cores[top.core].concurrent
    assert fallback.cores[top.core].peak_bytes == serial.cores[top.core].peak_bytes
    assert any(n.startswith(f"core {top.core}: buffers laid out for MVMs one after another")
               for n in fallback.notes)


def test_a_layout_without_meeting_mvms_stays_serial() -> None:
    """Only a core whose serial layout has running MVMs meet is laid out apart: lenet's
    cores at 4 units keep their serial layout, byte for byte."""
    four = dataclasses.replace(T, mvm_units=4)
    s = solve(EXAMPLES / "lenet.onnx", four, SolveOptions(solver="peft", simulate=False))
    m = s.runs[0].scheduled
    plan, serial = plan_memory(m, four), plan_memory(m, dataclasses.replace(four, mvm_units=1))
    assert _clashes(m, plan, four) == 0
    assert {c: mem.slots for c, mem in plan.cores.items()} == \
        {c: mem.slots for c, mem in serial.cores.items()}


def test_compute_memory_counts_the_layout_the_plan_uses() -> None:
    """The schedulers' memory demand (`compute_memory`, `MemoryDemand.scratch`) at 4 MVM
    units counts the buffers of MVMs running at once laid out apart, as `plan_memory` lays
    them out: never less than the serial layout, more where its MVMs would meet (mlp's
    lanes of two array groups), and the serial figure at one unit."""
    for units in (1, 4):
        target = dataclasses.replace(T, mvm_units=units)
        comp = compile_model(EXAMPLES / "mlp.onnx", target)
        build = build_compute_graph(comp.module.main(), target)
        module, eb = Module([comp.module.main()]), activation_bytes(target)
        assert build.graph.memory is not None
        pairs = []
        for i, inst in enumerate(build.projection.instances):
            sc = received_compute(module, build.projection, inst)
            laid, serial = compute_memory(sc, eb, target)[0], compute_memory(sc, eb)[0]
            assert build.graph.memory.scratch[i] == laid >= serial
            pairs.append((serial, laid))
        assert any(s < c for s, c in pairs) == (units > 1), pairs
