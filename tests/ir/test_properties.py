"""Property tests: generated graph batches verify, round-trip and interpret to numpy; one
mutation of a valid program is rejected with the rule it breaks first.

Programs are text (string templates in the printer's exact spelling), cross-checked once
against the Builder. Hypothesis runs derandomized with bounded example counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raptor.ir.builder import new_func
from raptor.ir.core import Affine, Value
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.ops import BlueprintEntry
from raptor.ir.parser import parse_module
from raptor.ir.types import INDEX, tensor
from raptor.ir.verifier import verify_module

SETTINGS = settings(derandomize=True, max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

ACTS = {
    "relu": (" ", lambda a: np.maximum(a, 0)),
    "neg": (" ", lambda a: -a),
    "vscale": (" {factor = 0.5} ", lambda a: a * np.float32(0.5)),
}


def aff(k: int, var: str, c: int = 0) -> str:
    """An affine offset in the printer's spelling: `%v`, `3*%v`, `-2*%v+4`, `5`."""
    if k == 0:
        return str(c)
    text = f"%{var}" if k == 1 else f"{k}*%{var}"
    return text + (f"+{c}" if c > 0 else str(c) if c < 0 else "")


def ints(xs: list[int]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def ttext(*shape: int) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


@dataclass(frozen=True)
class Spec:
    """A graph batch of `lanes` lanes over x: lane l reads rows [r*l, r*l+r) of an
    (lanes*r) x c input, publishes act(rows) (and optionally its row sums) into slot
    sigma(l); Blueprints place slot s at logical block perm[s]."""

    lanes: int
    r: int
    c: int
    act: str | None
    reversed_slot: bool
    perm0: tuple[int, ...]
    family0: bool
    order0: tuple[int, ...]
    second: bool
    perm1: tuple[int, ...]


@dataclass(frozen=True)
class Mutation:
    """Overrides of one element of a valid program (None keeps the valid spelling)."""

    lanes: int | None = None
    slot: str | None = None
    tail_offset: int | None = None
    sizes: list[int] | None = None
    strides: list[int] | None = None
    bp_slot: int | None = None
    bp_offset: int | None = None
    bp_overlap: bool = False
    second_publication: bool = False


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    n = draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["identity", "reversed", "permutation"]))
    perm0 = {"identity": tuple(range(n)), "reversed": tuple(range(n - 1, -1, -1))}.get(
        kind) or tuple(draw(st.permutations(range(n))))
    return Spec(
        lanes=n, r=draw(st.integers(1, 3)), c=draw(st.integers(1, 4)),
        act=draw(st.sampled_from([None, *ACTS])), reversed_slot=draw(st.booleans()),
        perm0=perm0, family0=kind != "permutation" and draw(st.booleans()),
        order0=tuple(draw(st.permutations(range(n)))), second=draw(st.booleans()),
        perm1=tuple(draw(st.permutations(range(n)))))


def slot_text(s: Spec) -> str:
    return aff(-1, "lane", s.lanes - 1) if s.reversed_slot else aff(1, "lane")


def render(s: Spec, m: Mutation | None = None) -> str:
    """The program text of `s`, with the one change `m` applied."""
    m = m or Mutation()
    n, r, c = s.lanes, s.r, s.c
    xt, ft, pt = ttext(n * r, c), ttext(r, c), ttext(n, r, c)
    st1, pt1, lt1 = ttext(r), ttext(n, r), ttext(n * r)
    res_types = f"({pt}, {pt1})" if s.second else pt
    outs = f"%out0: {pt}" + (f", %out1: {pt1}" if s.second else "")
    slot = m.slot or slot_text(s)
    lines = [
        f"func.func @main(%x: {xt}) -> " + (f"({xt}, {lt1})" if s.second else xt) + " {",
        ("  %p, %q = " if s.second else "  %p = ")
        + f"spat.graph_compute_batch lanes({m.lanes or n}) ins(%x : {xt}) -> {res_types} {{",
        f"  ^bb0(%lane: index, %in: {xt}, {outs}):",
        f"    %a = tensor.extract_slice %in[{aff(r, 'lane')}, 0] [{r}, {c}] [1, 1] : {xt} to "
        f"{ft}",
    ]
    frag = "%a"
    if s.act:
        lines.append(f"    %f = pim.{s.act} %a{ACTS[s.act][0]}: {ft}".replace("  :", " :"))
        frag = "%f"
    if s.second:
        lines.append(f"    %g = pim.vreduce_sum %a dims [1] : {ft} to {st1}")
    pub = (f"    spat.parallel_insert_slice {frag} into %out0[{slot}, {m.tail_offset or 0}, 0] "
           f"{ints(m.sizes or [1, r, c])} {ints(m.strides or [1, 1, 1])} : {ft} into {pt}")
    lines.append(pub)
    if m.second_publication:
        lines.append(pub)
    if s.second:
        lines.append(f"    spat.parallel_insert_slice %g into %out1[{slot_text(s)}, 0] [1, {r}] "
                     f"[1, 1] : {st1} into {pt1}")
    lines += ["  }", f"  %y = spat.blueprint %p : {pt} -> {xt} coverage(complete) "
              "conflict(disjoint) {"]
    if s.family0:
        k, c0 = (r, 0) if s.perm0[:1] == (0,) else (-r, r * (n - 1))
        hi = n + 1 if m.bp_slot is not None else n
        lines.append(f"    slot %s in 0..{hi} -> [{aff(k, 's', c0 + (m.bp_offset or 0))}, 0] "
                     f"sizes [{r}, {c}] strides [1, 1]")
    else:
        for i, slot_ in enumerate(s.order0):
            row = r * s.perm0[slot_]
            if i == 0 and m.bp_offset is not None:
                row = m.bp_offset + r * (n - 1)
            if i == 1 and m.bp_overlap:
                row = r * s.perm0[s.order0[0]]
            shown = m.bp_slot if i == 0 and m.bp_slot is not None else slot_
            lines.append(f"    slot {shown} -> [{row}, 0] sizes [{r}, {c}] strides [1, 1]")
    lines.append("  }")
    if s.second:
        lines.append(f"  %z = spat.blueprint %q : {pt1} -> {lt1} coverage(complete) "
                     "conflict(disjoint) {")
        lines += [f"    slot {k} -> [{r * s.perm1[k]}] sizes [{r}] strides [1]"
                  for k in range(n)]
        lines += ["  }", f"  return %y, %z : {xt}, {lt1}"]
    else:
        lines.append(f"  return %y : {xt}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def expected(s: Spec, x: np.ndarray) -> list[np.ndarray]:
    n, r = s.lanes, s.r
    y, z = np.zeros_like(x), np.zeros(n * r, np.float32)
    for lane in range(n):
        rows = x[r * lane: r * lane + r]
        frag = ACTS[s.act][1](rows) if s.act else rows
        slot = n - 1 - lane if s.reversed_slot else lane
        y[r * s.perm0[slot]: r * s.perm0[slot] + r] = frag
        z[r * s.perm1[slot]: r * s.perm1[slot] + r] = rows.sum(1)
    return [y, z] if s.second else [y]


# ------------------------------------------------------------------ valid programs
@SETTINGS
@given(specs())
def test_generated_batches_verify_round_trip_and_interpret(s: Spec) -> None:
    text = render(s)
    module = parse_module(text, "gen.spat")
    assert verify_module(module) == [], text
    assert module.print() == text
    x = np.random.default_rng(s.lanes * 31 + s.c).standard_normal(
        (s.lanes * s.r, s.c)).astype(np.float32)
    got = Interpreter(module).run([x])
    for g, w in zip(got, expected(s, x), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@settings(derandomize=True, max_examples=15, deadline=None)
@given(specs().filter(lambda s: not s.second and s.act is None))
def test_builder_and_template_agree(s: Spec) -> None:
    """The same program built through the Builder prints as the template."""
    n, r, c = s.lanes, s.r, s.c
    f, b = new_func("main", [("x", tensor(n * r, c))], [tensor(n * r, c)])
    batch, body = b.graph_batch(n, f.args, [tensor(n, r, c)], names=["p"])
    lane, out = batch.lane, batch.out_args[0]
    out.name = "out0"
    a = body.extract(batch.in_args[0], [Affine(0, ((r, lane),)), 0], [r, c])
    a.name = "a"
    slot = Affine(n - 1, ((-1, lane),)) if s.reversed_slot else Affine.of(lane)
    body.publish(a, out, [slot, 0, 0], [1, r, c])
    if s.family0:
        var = Value(INDEX, "s")
        k, c0 = (r, 0) if s.perm0[:1] == (0,) else (-r, r * (n - 1))
        entries = [BlueprintEntry(0, 0, (Affine(c0, ((k, var),)), Affine(0)), (r, c), (1, 1),
                                  var, n)]
    else:
        entries = [BlueprintEntry(0, k, (Affine(r * s.perm0[k]), Affine(0)), (r, c), (1, 1))
                   for k in s.order0]
    y = b.blueprint(batch.outs, tensor(n * r, c), entries, name="y")
    b.ret([y])
    assert Module([f]).print() == render(s)
    assert verify_module(Module([f])) == []


# ------------------------------------------------------------------ single mutations
def mutations(s: Spec) -> list[tuple[Mutation, str, str]]:
    """(mutation, the rule it breaks first, the op whose line carries the diagnostic)."""
    n, r, c = s.lanes, s.r, s.c
    out: list[tuple[Mutation, str, str]] = [
        (Mutation(lanes=n + 1), "GCB-3", "spat.graph_compute_batch"),
        (Mutation(slot=aff(1, "lane", 1)), "GCB-6", "%out0["),
        (Mutation(slot=aff(2, "lane")), "GCB-6", "%out0[") if n > 1 else
        (Mutation(slot="1"), "GCB-6", "%out0["),
        (Mutation(tail_offset=1), "GCB-7", "%out0["),
        (Mutation(sizes=[1, r + 1, c]), "GCB-8", "%out0["),
        (Mutation(sizes=[2, r, c]), "GCB-8", "%out0["),
        (Mutation(strides=[1, 1, 2]), "GCB-9", "%out0["),
        (Mutation(strides=[2, 1, 1]), "GCB-9", "%out0["),
        (Mutation(second_publication=True), "GCB-10", "spat.graph_compute_batch"),
        (Mutation(bp_slot=n), "BP-2", "%y = spat.blueprint"),
        (Mutation(bp_offset=r), "BP-4", "%y = spat.blueprint"),
    ]
    if n > 1 and not s.family0:
        out.append((Mutation(bp_overlap=True), "BP-5", "%y = spat.blueprint"))
    return out


@SETTINGS
@given(specs(), st.data())
def test_single_mutation_is_rejected_with_its_rule(s: Spec, data: st.DataObject) -> None:
    mutation, rule, marker = data.draw(st.sampled_from(mutations(s)))
    text = render(s, mutation)
    diags = verify_module(parse_module(text, "mut.spat"))
    assert diags, text
    first = diags[0]
    assert first.rule == rule, (text, [str(d) for d in diags])
    line = next(i for i, t in enumerate(text.splitlines(), 1) if marker in t)
    assert first.loc is not None and first.loc.line == line


def test_mutations_change_the_text() -> None:
    """Guard against a mutation that silently renders the valid program."""
    s = Spec(3, 2, 2, "relu", True, (2, 1, 0), False, (1, 0, 2), True, (0, 2, 1))
    valid = render(s)
    assert verify_module(parse_module(valid)) == []
    for m, _, _ in mutations(s):
        assert render(s, m) != valid, m
    assert render(replace(s, family0=True), Mutation(bp_slot=3)).count("0..4") == 1
