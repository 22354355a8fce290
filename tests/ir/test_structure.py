"""The verifier owns structure for IR however it was built: dominance (SSA-1), one definition
per value (SSA-2), ownership (REGION-3) and terminators (REGION-4)."""

from __future__ import annotations

from raptor.ir.builder import Builder, new_func
from raptor.ir.core import Affine, Block, Value, affines
from raptor.ir.module import Module
from raptor.ir.ops import AllocSharedOp, BinaryOp, CoreOp, ReturnOp, StoreOp, UnaryOp, YieldOp
from raptor.ir.parser import parse_file
from raptor.ir.types import tensor
from raptor.ir.verifier import verify_module

from .spat_util import EXAMPLE, rules_of


def chain() -> Module:
    """x -> relu -> neg -> return, built through the API."""
    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    r = b.unary("relu", f.args[0])
    n = b.unary("neg", r)
    b.ret([n])
    return Module([f])


def test_api_module_verifies() -> None:
    assert verify_module(chain()) == []


def test_use_before_definition_is_ssa1() -> None:
    m = chain()
    ops = m.funcs[0].body.ops
    ops[0], ops[1] = ops[1], ops[0]  # neg now reads relu's result before relu runs
    diags = verify_module(m)
    assert rules_of(diags)[0] == "SSA-1"
    assert diags[0].message == "pim.neg (@main op 1): uses the result of pim.relu before its " \
        "definition"


def test_use_before_definition_names_the_place_when_parsed() -> None:
    m = parse_file(str(EXAMPLE))
    body = m.funcs[0].body.ops[0].body.ops  # the lane body: slice, slice, vadd, publish
    body[1], body[2] = body[2], body[1]
    diags = verify_module(m)
    assert rules_of(diags) == ["SSA-1"]
    assert str(diags[0]).startswith(f"{EXAMPLE}:6:10: error: [SSA-1] uses %b before")


def test_value_from_an_inner_region_is_not_visible_outside() -> None:
    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    op, body = b.graph_compute(f.args, [tensor(4)])
    inner = body.unary("relu", op.body.args[0])
    body.yield_([inner])
    b.ret([inner])  # the body's value, not the compute's result
    diags = verify_module(Module([f]))
    assert "SSA-1" in rules_of(diags)
    assert any("not defined in this function or an enclosing region" in d.message
               for d in diags)


def test_affine_offset_variables_are_uses() -> None:
    f, b = new_func("main", [("x", tensor(4, 2))], [tensor(4, 2)])
    other, ob = b.graph_batch(2, f.args, [tensor(2, 4, 1)])
    col = ob.extract(other.in_args[0], [0, other.lane], [4, 1])
    ob.publish(col, other.out_args[0], [other.lane, 0, 0], [1, 4, 1])
    batch, lb = b.graph_batch(2, f.args, [tensor(2, 4, 1)])
    stray = lb.extract(batch.in_args[0], [0, Affine.of(other.lane)], [4, 1])  # wrong lane
    lb.publish(stray, batch.out_args[0], [batch.lane, 0, 0], [1, 4, 1])
    b.ret([f.args[0]])
    diags = verify_module(Module([f]))
    assert any(d.rule == "SSA-1" and "%lane" in d.message for d in diags)


def test_value_defined_twice_is_ssa2() -> None:
    m = chain()
    ops = m.funcs[0].body.ops
    relu = ops[0]
    assert isinstance(relu, UnaryOp)
    twin = UnaryOp("neg", m.funcs[0].args[0], relu.result)
    ops.insert(1, twin)
    assert "SSA-2" in rules_of(verify_module(m))


def test_result_owned_by_another_op_is_region3() -> None:
    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    r = b.unary("relu", f.args[0])
    b.ret([r])
    r.owner = None
    assert rules_of(verify_module(Module([f]))) == ["REGION-3"]


def test_op_in_two_places_is_region3() -> None:
    m = chain()
    ops = m.funcs[0].body.ops
    ops.insert(2, ops[1])
    assert "REGION-3" in rules_of(verify_module(m))


def test_misplaced_terminators_are_region4() -> None:
    m = chain()
    f = m.funcs[0]
    f.body.ops.insert(1, ReturnOp([f.args[0]]))
    diags = verify_module(m)
    assert rules_of(diags) == ["REGION-4"]
    assert "before the end of its block" in diags[0].message

    m = chain()
    f = m.funcs[0]
    f.body.ops.insert(0, YieldOp([f.args[0]]))
    assert rules_of(verify_module(m)) == ["REGION-4"]

    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    op, body = b.graph_compute(f.args, [tensor(4)])
    body.add(ReturnOp([op.body.args[0]]))
    b.ret(op.outs)
    diags = verify_module(Module([f]))
    assert "REGION-4" in rules_of(diags)
    assert any("inside spat.graph_compute" in d.message for d in diags)


def test_binary_op_reading_a_later_value() -> None:
    """The issue's example: two ops swapped in a module built through the API."""
    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    x = f.args[0]
    y = Value(tensor(4), "y")
    z = Value(tensor(4), "z")
    b.add(BinaryOp("vadd", x, y, z))
    b.add(UnaryOp("relu", x, y))
    b.ret([z])
    diags = verify_module(Module([f]))
    assert rules_of(diags) == ["SSA-1"]
    assert diags[0].message == "pim.vadd (@main op 1): uses %y before its definition"


def test_a_value_of_another_core_is_sch3() -> None:
    f, b = new_func("main", [("x", tensor(4))], [tensor(4)])
    buf = Value(tensor(4), "buf")
    b.add(AllocSharedOp(buf))
    core0 = b.add(CoreOp(0, Block()))
    assert isinstance(core0, CoreOp)
    made = Builder(core0.body).empty(tensor(4))
    made.name = "made"
    core1 = b.add(CoreOp(1, Block()))
    assert isinstance(core1, CoreOp)
    Builder(core1.body).add(StoreOp(made, buf, affines([0]), (4,), (1,)))
    b.ret([buf])
    diags = verify_module(Module([f]))
    assert rules_of(diags) == ["SCH-3"]
    assert diags[0].message == "pim.store (@main op 3.1): %made is defined on core 0 but used " \
        "on core 1; cross-core values need spat.channel_send/receive"
