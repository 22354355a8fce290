"""`pim.elu` (ONNX Elu), declared by one entry of `ops.UNARY`: its spelling, checks,
interpreter numerics, simulator kernel and cost all follow from that declaration."""

from __future__ import annotations

import numpy as np
import pytest

from raptor.ir.builder import new_func
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import UnaryOp
from raptor.ir.parser import parse_module
from raptor.ir.types import tensor
from raptor.ir.verifier import verify_module
from raptor.sim import Simulator
from raptor.solver.costs import op_cost_ns
from raptor.target import load_target

from .spat_util import GOLDEN, parse_checked, program_text, rules_of

X = np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8)


def elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * (np.exp(x.astype(np.float64)) - 1))


def test_golden_round_trip_and_numerics() -> None:
    text = program_text(GOLDEN / "elu.spat")
    module = parse_checked(text)
    assert module.print() == text
    (y,) = Interpreter(module).run([X])
    np.testing.assert_allclose(y, elu(X, 0.5), rtol=1e-6, atol=1e-7)


def test_alpha_is_required() -> None:
    text = program_text(GOLDEN / "elu.spat").replace(" {alpha = 0.5}", "")
    assert rules_of(verify_module(parse_module(text))) == ["VEC-2"]


def test_simulator_kernel_and_cost() -> None:
    f, b = new_func("main", [("x", tensor(4, 8))], [tensor(4, 8)])
    y = b.unary("elu", f.args[0], {"alpha": 1.5})
    b.ret([y])
    graph = Module([f])
    (want,) = Interpreter(graph).run([X])
    np.testing.assert_allclose(want, elu(X, 1.5), rtol=1e-6, atol=1e-7)
    op = f.body.ops[0]
    assert isinstance(op, UnaryOp)
    target = load_target("default")
    assert op_cost_ns(op, target) == 2 * target.vector_ns(32)  # exp, then the select
    scheduled = parse_checked("""func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = pim.alloc_shared : tensor<4x8xf32>
  pim.core 0 {
    %a = pim.load %x[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> to tensor<4x8xf32>
    %e = spat.scheduled_compute ins(%a : tensor<4x8xf32>) -> tensor<4x8xf32> {
    ^bb0(%in: tensor<4x8xf32>):
      %r = pim.elu %in {alpha = 1.5} : tensor<4x8xf32>
      spat.yield %r : tensor<4x8xf32>
    }
    pim.store %e into %y[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> into tensor<4x8xf32>
  }
  return %y : tensor<4x8xf32>
}
""")
    (got,) = Simulator(scheduled, target).run([X]).outputs
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_stacked_instances_in_the_simulator_match_the_interpreter(alpha: float) -> None:
    """Four instances of one body (a row each) run stacked in the simulator; the bits are
    those of the interpreter running each instance alone."""
    row = "tensor<8xf32>"
    computes = "".join(f"""
    %a{i} = pim.load %x[{i}, 0] [1, 8] [1, 1] : tensor<4x8xf32> to {row}
    %e{i} = spat.scheduled_compute ins(%a{i} : {row}) -> {row} {{
    ^bb0(%in: {row}):
      %r = pim.elu %in {{alpha = {alpha!r}}} : {row}
      spat.yield %r : {row}
    }}
    pim.store %e{i} into %y[{i}, 0] [1, 8] [1, 1] : {row} into tensor<4x8xf32>""" for i in range(4))
    module = parse_checked(f"""func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {{
  %y = pim.alloc_shared : tensor<4x8xf32>
  pim.core 0 {{{computes}
  }}
  return %y : tensor<4x8xf32>
}}
""")
    (want,) = Interpreter(module).run([X])
    np.testing.assert_allclose(want, elu(X, alpha), rtol=1e-6, atol=1e-7)
    (got,) = Simulator(module, load_target("default")).run([X]).outputs
    assert got.tobytes() == want.tobytes()
