"""The lark parser: its grammar comes from the op declarations, it reads what the printer
writes, and its syntax errors point at the offending text."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import field
from typing import ClassVar

import pytest

from raptor.ir import opdef
from raptor.ir import parser as parser_mod
from raptor.ir.core import Affine, Operand, Operands, Operation, Results
from raptor.ir.opdef import REGISTRY, FormatError, op_def
from raptor.ir.ops import Attr
from raptor.ir.parser import ParseError, build, grammar, parse_module

from .spat_util import EXAMPLE, GOLDEN, INVALID, program_text

TEXT = EXAMPLE.read_text()


def error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_module(text, "t.spat")
    return info.value


# ------------------------------------------------------------------ generated from the ops
def test_every_declared_op_has_one_rule_named_after_it() -> None:
    text = grammar()
    for cls in REGISTRY:
        syntax = cls.DEF.syntax
        assert syntax is not None
        assert syntax.rule == "op_" + re.sub(r"[^a-z0-9]+", "_", cls.NAME)
        assert len(re.findall(rf"^{syntax.rule}:", text, re.M)) == 1, cls.NAME
        assert callable(getattr(parser_mod.Parser(), syntax.rule))


@pytest.fixture
def private_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[type[Operation]]]:
    """Ops declared in a test register here, not in the process's grammar."""
    ops: list[type[Operation]] = []
    monkeypatch.setattr(opdef, "REGISTRY", ops)
    yield ops


def test_a_new_op_parses_from_its_format_alone(
        private_registry: list[type[Operation]], monkeypatch: pytest.MonkeyPatch) -> None:
    """An op declared in the FORMAT style (operand lists, an optional group, ints, a word,
    an integer list, affine offsets, attributes, a flag, result types) needs no grammar or
    parse code of its own. The flag's keyword wins over the word field after it."""

    @op_def
    class WaitOp(Operation):
        NAME: ClassVar[str] = "spat.test_wait"
        FORMAT: ClassVar[str] = ("$token ins(typed($deps)) (after $after^ : type($after))? "
                                 "stage($stage) $urgent $mode $slots$offsets $attrs : "
                                 "type($token) -> type($outs)")
        token: Operand
        deps: Operands
        after: Operands
        outs: Results
        stage: int
        mode: str
        slots: tuple[int, ...]
        offsets: tuple[Affine, ...]
        attrs: dict[str, Attr] = field(default_factory=dict)
        urgent: bool = False

    assert private_registry == [WaitOp]
    lark = build({}, [*REGISTRY, WaitOp])
    monkeypatch.setattr(parser_mod, "_lark", lambda: lark)
    lines = TEXT.splitlines()
    t = "tensor<16x4xf32>"
    wait = [f"    %t0, %t1 = spat.test_wait %in ins(%in : {t}) after %in, %x : {t}, {t} stage(3) "
            f"urgent ring [1, -2][%lane, 2*%lane+1] {{x = 1.5}} : {t} -> (index, tensor<1xf32>)",
            f"    spat.test_wait %in ins() stage(-1) ring [][] : {t} -> ()"]
    text = "\n".join([*lines[:3], *wait, *lines[3:]]) + "\n"
    module = parse_module(text, "wait.spat")
    waits = [op for op in module.walk() if isinstance(op, WaitOp)]
    assert [(w.stage, w.mode, w.slots, w.urgent, len(w.after), len(w.outs)) for w in waits] \
        == [(3, "ring", (1, -2), True, 2, 2), (-1, "ring", (), False, 0, 0)]
    assert waits[0].attrs == {"x": 1.5} and waits[0].offsets[1].const == 1
    assert [str(v.type) for v in waits[0].outs] == ["index", "tensor<1xf32>"]
    assert module.print() == text


def test_a_custom_directive_needs_its_grammar(
        private_registry: list[type[Operation]]) -> None:
    with pytest.raises(FormatError, match=r"custom<sig> needs SYNTAX\['sig'\]"):
        @op_def
        class NoSyntaxOp(Operation):
            NAME: ClassVar[str] = "spat.test_nosyntax"
            FORMAT: ClassVar[str] = "$a : custom<sig>"
            a: Operand


def _leaves(x: object) -> Iterator[object]:
    if isinstance(x, dict):
        yield from x.keys()
        x = list(x.values())
    if isinstance(x, list | tuple):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def test_parsed_fields_hold_plain_values() -> None:
    """No lexer token ends up in an op (lark-cython's tokens are not even `str`)."""
    for path in sorted(GOLDEN.glob("*.spat")):
        for op in parse_module(path.read_text()).walk():
            for f in dataclasses.fields(op):  # type: ignore[arg-type]
                for leaf in _leaves(getattr(op, f.name)):
                    assert not type(leaf).__module__.startswith("lark"), (op.name, f.name)
                    if f.type == "str":
                        assert type(leaf) is str, (op.name, f.name)


def _outcome(text: str) -> str:
    try:
        return parse_module(text, "t.spat").print()
    except ParseError as e:
        return str(e)


def test_pure_lark_reads_as_the_compiled_lexer_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same grammar and callbacks with lark alone (no lark-cython): same results."""
    texts = [program_text(p) for p in sorted([*GOLDEN.glob("*.spat"), *INVALID.glob("*.spat")])]
    texts += [TEXT[:cut] for cut in (50, 140, 333, 480)]
    texts += [TEXT.replace("pim.vadd", "pim.vaddx"), TEXT.replace("%b : ", "%nope : ")]
    fast = [_outcome(t) for t in texts]
    pure = build({})
    monkeypatch.setattr(parser_mod, "_lark", lambda: pure)
    assert [_outcome(t) for t in texts] == fast


# ------------------------------------------------------------------ syntax errors
@pytest.mark.parametrize(("old", "new", "where", "message"), [
    ("pim.vadd", "pim.vaddx", "6:10", "unknown or misplaced operation 'pim.vaddx'"),
    ("slot 0", "slot0", "10:5", "unexpected 'slot0'; expected one of 'slot', '}'"),
    ("lanes(2)", "lanes(x)", "2:39", "unexpected 'x'; expected an integer"),
    ("[16, 1] [1, 1]", "[16, 1,] [1, 1]", "4:54", "unexpected ']' in an integer list"),
    ("[16, 1] [1, 1]", "[16, x] [1, 1]", "4:52", "unexpected 'x' in an integer list"),
    ("%b = ", "%b, = ", "5:9", "unexpected '='; expected a %value"),
    ("lanes(2)", "lanes(\u00b2)", "2:39", "unexpected character '\u00b2'"),
])
def test_a_syntax_error_points_at_the_offending_text(old: str, new: str, where: str,
                                                     message: str) -> None:
    e = error(TEXT.replace(old, new, 1))
    assert not e.rule
    assert str(e).startswith(f"t.spat:{where}: error: {message}"), str(e)
    line, col = map(int, where.split(":"))
    source, caret = str(e).splitlines()[1:]
    assert source == "  " + TEXT.replace(old, new, 1).splitlines()[line - 1]
    assert caret.index("^") - 2 == col - 1


@pytest.mark.parametrize("cut", ["[1, ", "[16, 1] [", "%in[0, 2*", "spat.blueprint %p :"])
def test_a_program_cut_inside_a_construct_ends_unexpectedly(cut: str) -> None:
    text = TEXT[:TEXT.index(cut) + len(cut)]
    e = error(text)
    assert "unexpected end of input" in e.message
    assert e.loc.line == text.count("\n") + 1


@pytest.mark.parametrize("text", ["", "// only a comment", "\n\n  // two\n"])
def test_no_function_is_an_empty_program(text: str) -> None:
    assert error(text).message == "no func.func in input (empty program)"


def test_results_are_counted_and_scoped() -> None:
    e = error(TEXT.replace("%s = pim.vadd", "%s, %t = pim.vadd"))
    assert (e.rule, str(e.loc)) == ("TYPE-0", "t.spat:6:5")
    assert "2 results named but the op has 1" in e.message
    e = error(TEXT.replace("%b = tensor", "%a = tensor"))
    assert (e.rule, str(e.loc)) == ("SSA-2", "t.spat:5:5")


def test_comments_and_blank_space_anywhere() -> None:
    text = TEXT.replace("lanes(2) ", "lanes( 2 )  // two lanes\n   ").replace(", ", " ,\t")
    assert parse_module(text).print() == TEXT
