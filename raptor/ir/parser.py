"""Parser of the textual Spatial IR, driven by the op declarations.

A regular-expression lexer cuts the text into tokens; the parser reads functions, blocks
and the `%r, %s = name` head of each op, and hands the rest of the op to the parse program
of its declaration (`opdef.parse_op`), which calls back into the readers below. Names
resolve in nested scopes while parsing, so a use names its definition or fails at once.

Syntax errors become `ParseError` (file:line:col, the line and a caret); semantic errors
carry a rule id (SSA-1 undefined value, SSA-2 redefinition, TYPE-0 annotation mismatch or
a type too large, SCH-3 cross-core use, BP-1 a Blueprint entry naming a non-operand).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import Any, NoReturn, TypeVar

from raptor.ir.core import Affine, Block, Location, Operation, Value
from raptor.ir.module import Module
from raptor.ir.opdef import lookup, parse_op
from raptor.ir.ops import CoreBatchOp, CoreOp, FuncOp
from raptor.ir.types import INDEX, Type, parse_type

T = TypeVar("T")


class ParseError(Exception):
    """Input that is not a Spatial IR program. `rule` is set for semantic errors."""

    def __init__(self, loc: Location, message: str, source_line: str = "", rule: str = "") -> None:
        self.loc, self.rule, self.message = loc, rule, message
        text = f"{loc}: error: " + (f"[{rule}] " if rule else "") + message
        if source_line:
            text += f"\n  {source_line}\n  {' ' * (loc.col - 1)}^"
        super().__init__(text)


_TOKEN = re.compile(r"""((?:\s|//[^\n]*)*)(
    %[A-Za-z0-9_$.]+ | @[A-Za-z0-9_$.\-]+ | \^[A-Za-z0-9_]+ | tensor<[^>\n]*>
  | \d+\.(?!\.)\d*(?:[eE][-+]?\d+)? | \d+[eE][-+]?\d+ | \d+ | [A-Za-z_][A-Za-z0-9_.]*
  | "(?:[^"\\\n]|\\.)*" | -> | \.\. | [()\[\]{},:=*+\-] | .)""", re.X)
"""(whitespace and comments before, token). A token's first character says what it is:
`%` value, `@` symbol, `^` block label, `tensor<` type, a digit a number (a float when it
has `.` or an exponent), a letter a word (op names, keywords, `index`, `inf`), `"` a
string, else punctuation or a stray character."""


class Parser:
    """One parse of one text: the tokens, the position and the scopes of names."""

    def __init__(self, text: str, filename: str) -> None:
        self.text, self.filename = text, filename
        pairs = _TOKEN.findall(text)
        self.toks = [t for _, t in pairs] + [""]
        ends = accumulate([len(w) + len(t) for w, t in pairs])
        self.starts = [e - len(t) for e, (_, t) in zip(ends, pairs, strict=True)] + [len(text)]
        self.lines = [m.end() for m in re.finditer("\n", text)]
        self.i = 0
        self.scopes: list[dict[str, Value]] = [{}]
        self.on_core: dict[str, int] = {}
        self.types: dict[str, Type] = {"index": INDEX}
        self.closed: dict[str, Value] = {}

    # ---- positions and errors -----------------------------------------------------
    def loc(self, tok: int) -> Location:
        p = self.starts[tok]
        line = bisect_right(self.lines, p)
        return Location(self.filename, line + 1, p - (self.lines[line - 1] if line else 0) + 1)

    def fail(self, tok: int, rule: str, message: str) -> NoReturn:
        """A semantic error at token `tok`."""
        loc = self.loc(tok)
        lines = self.text.splitlines()
        raise ParseError(loc, message, lines[loc.line - 1] if loc.line <= len(lines) else "",
                         rule)

    def error(self, message: str) -> NoReturn:
        """A syntax error at the next token (at the end of the input: after its last
        non-blank line)."""
        if self.toks[self.i]:
            self.fail(self.i, "", message)
        lines = self.text.splitlines() or [""]
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        raise ParseError(Location(self.filename, len(lines), len(lines[-1]) + 1),
                         "unexpected end of input (truncated program?)", lines[-1])

    def unexpected(self, what: str) -> NoReturn:
        tok = self.toks[self.i]
        if len(tok) == 1 and not tok.isalnum() and tok not in "()[]{},:=*+-%@^\"_":
            self.error(f"unexpected character {tok!r}")
        self.error(f"unexpected {tok!r}; expected {what}")

    # ---- tokens -------------------------------------------------------------------
    def peek(self) -> str:
        return self.toks[self.i]

    def at_value(self) -> bool:
        return self.toks[self.i][:1] == "%"

    def at_type(self) -> bool:
        tok = self.toks[self.i]
        return tok.startswith("tensor<") or tok == "index"

    def accept(self, word: str) -> bool:
        if self.toks[self.i] == word:
            self.i += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if self.toks[self.i] != word:
            self.unexpected(repr(word))
        self.i += 1

    def skip(self) -> int:
        """Pass the next token; its index."""
        self.i += 1
        return self.i - 1

    def take(self, first: str, what: str) -> str:
        """The next token, which must start with `first`."""
        tok = self.toks[self.i]
        if tok[:1] != first or len(tok) < 2:
            self.unexpected(what)
        self.i += 1
        return tok

    def delimited(self, open_: str, close: str, item: Callable[[], T]) -> list[T]:
        """`open item, item, ... close` (possibly empty)."""
        self.expect(open_)
        out = []
        while not self.accept(close):
            out.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return out

    def commas(self, starts: Callable[[], bool], item: Callable[[], T]) -> list[T]:
        """`item, item, ...` while the next token `starts` one (possibly none)."""
        out = []
        while starts():
            out.append(item())
            if not self.accept(","):
                break
        return out

    # ---- names and scopes -----------------------------------------------------------
    def push_scope(self) -> None:
        self.scopes.append({})

    def pop_scope(self) -> dict[str, Value]:
        return self.scopes.pop()

    def define(self, type: Type, tok: int | None = None) -> Value:
        """Define the value named by token `tok` (default: the next token, consumed)."""
        if tok is None:
            tok = self.i
            self.take("%", "a %value")
        name = self.toks[tok][1:]
        if any(name in scope for scope in self.scopes):
            self.fail(tok, "SSA-2", f"value %{name} is defined twice")
        v = self.scopes[-1][name] = Value(type, name)
        return v

    def use(self) -> tuple[Value, int]:
        tok = self.i
        name = self.take("%", "a %value")[1:]
        for scope in reversed(self.scopes):
            v = scope.get(name)
            if v is not None:
                return v, tok
        if name in self.on_core:
            self.fail(tok, "SCH-3", f"%{name} is defined on core {self.on_core[name]} and "
                      "not visible here; cross-core values need spat.channel_send/receive")
        self.fail(tok, "SSA-1", f"use of undefined value %{name}")

    def uses(self) -> tuple[list[Value], list[int]]:
        pairs = self.commas(self.at_value, self.use)
        return [v for v, _ in pairs], [t for _, t in pairs]

    def check(self, v: Value, t: Type, tok: int) -> Value:
        if v.type is not t and v.type != t:
            self.fail(tok, "TYPE-0", f"%{v.name} has type {v.type} but is annotated {t}")
        return v

    # ---- types, numbers, lists, attributes -----------------------------------------
    def type_(self) -> Type:
        text = self.toks[self.i]
        t = self.types.get(text)
        if t is None:
            if not text.startswith("tensor<"):
                self.unexpected("a type")
            try:
                t = self.types[text] = parse_type(text)
            except ValueError as e:
                self.fail(self.i, "TYPE-0", str(e))
        self.i += 1
        return t

    def types_list(self) -> list[Type]:
        return self.commas(self.at_type, self.type_)

    def result_types(self) -> list[Type]:
        """`T`, `(T0, T1)` or `()`."""
        return self.delimited("(", ")", self.type_) if self.peek() == "(" else [self.type_()]

    def int_(self) -> int:
        tok = self.toks[self.i]
        if not tok.isdecimal():
            self.unexpected("an integer")
        if len(tok) > 18:
            self.error(f"integer {tok[:20]}... is too large")
        self.i += 1
        return int(tok)

    def sint(self) -> int:
        return -self.int_() if self.accept("-") else self.int_()

    def fnum(self) -> float:
        sign = -1.0 if self.accept("-") else 1.0
        tok = self.toks[self.i]
        if not (tok[:1].isdecimal() or tok in ("inf", "nan")):
            self.unexpected("a number")
        self.i += 1
        return sign * float(tok)

    def word(self) -> str:
        tok = self.toks[self.i]
        if not (tok[:1].isalpha() or tok[:1] == "_"):
            self.unexpected("a name")
        self.i += 1
        return tok

    def symbol(self) -> str:
        return self.take("@", "an @symbol")[1:]

    def int_list(self) -> list[int]:
        return self.delimited("[", "]", self.sint)

    def affine_list(self) -> tuple[Affine, ...]:
        return tuple(self.delimited("[", "]", self.affine))

    def affine(self) -> Affine:
        """`aterm (+|- aterm)*` with aterm `INT`, `INT*%v`, `%v` or `-aterm`."""
        const, terms = self._aterm()
        while self.toks[self.i] in ("+", "-"):
            sign = 1 if self.toks[self.i] == "+" else -1
            self.i += 1
            c, ts = self._aterm()
            const += sign * c
            terms += [(sign * k, v) for k, v in ts]
        return Affine(const, tuple(terms))

    def _aterm(self) -> tuple[int, list[tuple[int, Value]]]:
        if self.accept("-"):
            c, ts = self._aterm()
            return -c, [(-k, v) for k, v in ts]
        if self.toks[self.i].isdecimal():
            n = self.int_()
            return (0, [(n, self._index_use())]) if self.accept("*") else (n, [])
        if self.at_value():
            return 0, [(1, self._index_use())]
        self.unexpected("an offset (integer, %value or k*%value)")

    def _index_use(self) -> Value:
        v, tok = self.use()
        if v.type != INDEX:
            self.fail(tok, "TYPE-0", f"offset uses %{v.name} of type {v.type}; affine offsets "
                      "may only use index values (the lane or a slot variable)")
        return v

    def attr_dict(self) -> dict[str, Any]:
        def attr() -> tuple[str, Any]:
            key = self.word()
            self.expect("=")
            return key, self.attr_value()

        return dict(self.delimited("{", "}", attr))

    def attr_value(self) -> Any:
        tok = self.toks[self.i]
        if tok[:1] == '"':
            self.i += 1
            return tok[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if tok in ("true", "false"):
            self.i += 1
            return tok == "true"
        if tok == "[":
            return self.delimited("[", "]", self.attr_value)
        nxt = self.toks[self.i + (tok == "-")]
        if nxt.isdecimal():
            return self.sint()
        if nxt[:1].isdecimal() or nxt in ("inf", "nan"):
            return self.fnum()
        self.unexpected("an attribute value")

    # ---- structure ------------------------------------------------------------------
    def region(self, show_args: bool) -> Block:
        """`{ [^bb0(args):] ops }` in a scope of its own."""
        self.expect("{")
        self.push_scope()
        args: list[Value] = []
        if self.toks[self.i][:1] == "^":
            self.i += 1
            args = self.arguments()
            self.expect(":")
        ops = self.ops()
        self.closed = self.pop_scope()
        return Block(args, ops)

    def arguments(self) -> list[Value]:
        """`(%a: T, %b: T2)`."""
        def arg() -> Value:
            tok = self.i
            self.take("%", "a %value")
            self.expect(":")
            return self.define(self.type_(), tok)

        return self.delimited("(", ")", arg)

    def ops(self) -> list[Operation]:
        ops = []
        while not self.accept("}"):
            ops.append(self.op())
        return ops

    def op(self) -> Operation:
        names = self.commas(self.at_value, self.skip)
        if names:
            self.expect("=")
        tok = self.i
        found = lookup(self.toks[tok])
        if found is None:
            if "." in self.toks[tok] and self.toks[tok][:1].isalpha():
                self.error(f"unknown or misplaced operation '{self.toks[tok]}'")
            self.unexpected("an operation")
        self.i += 1
        cls, fixed = found
        loc = self.loc(tok)
        st = parse_op(self, cls, fixed, tok)
        count = sum(len(st.result_types.get(f, ())) for f, _ in cls.DEF.results)
        if len(names) != count:
            self.fail(names[0] if names else tok, "TYPE-0",
                      f"{len(names)} results named but the op has {count}")
        for f, variadic in cls.DEF.results:
            vals = [self.define(t, names.pop(0)) for t in st.result_types.get(f, ())]
            st.values[f] = vals if variadic else vals[0]
        op = cls(**st.values)
        op.loc = loc
        op.own_results()
        if isinstance(op, CoreOp | CoreBatchOp):
            for name in self.closed:  # name cross-core uses as SCH-3, not SSA-1
                self.on_core[name] = op.cores[0]
        return op

    def func(self) -> FuncOp:
        if not self.accept("func.func"):
            self.unexpected("func.func")
        loc = self.loc(self.i)
        name = self.symbol()
        self.push_scope()
        self.on_core = {}
        args = self.arguments()
        results = self.result_types() if self.accept("->") else []
        self.expect("{")
        self.push_scope()
        ops = self.ops()
        self.scopes[-2:] = []
        op = FuncOp(name, Block(args, ops), results)
        op.loc = loc
        return op


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse a whole program. Raises `ParseError` with file:line:col."""
    if "\x00" in text:
        raise ParseError(Location(filename, 1, 1), "input is binary, not Spatial IR text")
    ps = Parser(text, filename)
    funcs = []
    while ps.peek():
        funcs.append(ps.func())
    if not funcs:
        raise ParseError(Location(filename, 1, 1), "no func.func in input (empty program)")
    return Module(funcs, filename=filename)


def parse_file(path: str) -> Module:
    """Read and parse a `.spat` file; unreadable or non-UTF-8 input is a `ParseError`."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise ParseError(Location(path, 1, 1), f"cannot read file: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(Location(path, 1, 1), "input is binary, not Spatial IR text") from None
    return parse_module(text, path)
