"""Skewed (software-pipelined) stream bodies: ops in a `pim.lag` region work on the inference
before the one the rest of the iteration starts, and read values an earlier iteration
defined. The interpreter and the simulator give every inference its own values, the loop
runs M + lag iterations, and local memory holds the carried copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import CoreOp, LagOp, StreamOp
from raptor.ir.parser import ParseError, parse_file, parse_module
from raptor.ir.printer import print_ir
from raptor.ir.verifier import verify_module
from raptor.passes.memory import plan_memory
from raptor.sim import SimOptions, Simulator

from .util import TARGET, rand

SKEWED = Path(__file__).resolve().parents[1] / "ir" / "golden" / "stream_skewed.spat"


def _stream(module: Module, core: int) -> StreamOp:
    op = next(o for o in module.main().body.ops if isinstance(o, CoreOp) and o.core == core)
    loop = op.body.ops[0]
    assert isinstance(loop, StreamOp)
    return loop


def _lag_first(module: Module) -> Module:
    """Core 1's lagged ops moved before the receive whose value they read: they read the
    copy the previous iteration received (a value carried across the back edge)."""
    body = _stream(module, 1).body
    lagged = [o for o in body.ops if isinstance(o, LagOp)]
    body.ops = [*lagged, *(o for o in body.ops if not isinstance(o, LagOp))]
    return module


@pytest.mark.parametrize("reorder", [False, True], ids=["after", "before"])
def test_every_inference_gets_its_own_values(reorder: bool) -> None:
    module = parse_file(str(SKEWED))
    if reorder:
        module = _lag_first(module)
    assert verify_module(module) == []
    x = rand(4, 16, 2, seed=3)
    want = 2 * np.maximum(x, 0)
    np.testing.assert_allclose(Interpreter(module).run([x])[0], want, rtol=1e-6)
    sim = Simulator(module, TARGET)
    for options in (SimOptions(), SimOptions.ideal()):
        got = sim.run({"x": x}, options)
        np.testing.assert_allclose(got.outputs[0], want, rtol=1e-6)
        rep = got.report
        assert len(rep.inference_end_ns) == 4
        assert all(e > s for s, e in zip(rep.inference_start_ns, rep.inference_end_ns,
                                         strict=True))
        assert rep.inference_end_ns == sorted(rep.inference_end_ns)  # in order


def test_a_carried_use_before_its_definition_round_trips() -> None:
    """The printed program names %b before its receive defines it; the parser takes the
    forward use, the verifier judges it (a lag-1 use of a lag-0 value: carried)."""
    text = print_ir(_lag_first(parse_file(str(SKEWED))).funcs)
    assert text.index("ins(%b :") < text.index("%b = spat.channel_receive")
    again = parse_module(text)
    assert verify_module(again) == []
    assert print_ir(again.funcs) == text


def test_a_use_never_defined_is_still_ssa1() -> None:
    text = SKEWED.read_text().replace("ins(%b :", "ins(%nope :")
    with pytest.raises(ParseError, match=r"SSA-1.*%nope"):
        parse_module(text)


def test_a_loop_runs_count_plus_lag_iterations() -> None:
    loop = _stream(parse_file(str(SKEWED)), 1)
    assert (loop.count, loop.lags) == (4, 1)
    assert [lag for lag, _ in loop.staged()] == [0, 1, 1]
    assert _stream(parse_file(str(SKEWED)), 0).lags == 0


@pytest.mark.parametrize(("reorder", "copies"), [(False, 2), (True, 1)])
def test_local_memory_holds_the_carried_copies(reorder: bool, copies: int) -> None:
    """The received %b (16x2 elements) is read a lag later: while the lagged compute stands
    after the receive, the next inference's copy arrives before the last is read (two
    copies); moved before it, one copy is held across the back edge."""
    module = parse_file(str(SKEWED))
    if reorder:
        module = _lag_first(module)
    plan = plan_memory(module, TARGET)
    skewed = plan.cores[1].peak_bytes
    body = _stream(module, 1).body  # the same ops unskewed
    body.ops = [o for op in body.ops for o in (op.body.ops if isinstance(op, LagOp) else [op])]
    unskewed = plan_memory(module, TARGET).cores[1].peak_bytes
    assert skewed == unskewed + copies * 32 * plan.element_bytes
