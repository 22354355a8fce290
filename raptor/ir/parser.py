"""Parser of the textual Spatial IR: a lark LALR grammar generated from the op declarations.

The grammar is the fixed structure below (functions, regions, block arguments, types,
lists, affine offsets, attribute values, Blueprint entries) plus one rule per declared op,
which `opdef` derives from the op's `FORMAT` (`Syntax`); the op rules are the alternatives
of a block's statements (`OPS`). Lark parses it LALR(1) with a contextual lexer and calls the
callbacks of `Parser` as it goes, building no tree: fixed rules by their names, the rule
`op_<name>` of each op by the reader `opdef` generated from its format (`Syntax.read`: the
fields, then `Parser.make` names the results and builds the op), and terminals (numbers,
integer lists, types, strings, uses) as they are shifted. Names resolve in nested scopes
while parsing, so a use names its definition or fails at once.

Syntax errors become `ParseError` (file:line:col, the line and a caret); semantic errors
carry a rule id (SSA-1 undefined value, SSA-2 redefinition, TYPE-0 annotation mismatch or
a type too large, SCH-3 cross-core use, BP-1 a Blueprint entry naming a non-operand).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from functools import cache, partial
from typing import Any, NoReturn

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

try:  # lark-cython: the same lexer and parser, compiled (1.5-1.8x faster parses)
    from lark_cython import plugins as PLUGINS
except ImportError:  # pragma: no cover - pure-Python lark, same results
    PLUGINS = {}

from raptor.ir.core import Affine, Block, Location, Operation, Value
from raptor.ir.module import Module
from raptor.ir.opdef import BOUNDARY, REGISTRY, Syntax, keyword
from raptor.ir.ops import CoreBatchOp, CoreOp, FuncOp
from raptor.ir.types import INDEX, Type, parse_type

_FIXED = r"""
start: func*
func: func_head "(" [args] ")" ["->" result_types] lbrace OPS* "}"
func_head: _KW_FUNC_FUNC SYMBOL
region: lbrace [BLOCK_LABEL "(" [args] ")" ":"] OPS* "}"
lbrace: "{"
args: arg ("," arg)*
arg: DEF ":" TYPE
defs: DEF ("," DEF)*

uses: USE ("," USE)*
typed_use: USE ":" TYPE
typed_uses: typed_use ("," typed_use)*
types: TYPE ("," TYPE)*
result_types: TYPE -> result_type
            | "(" types? ")" -> result_tuple
affine_list: INTS -> affine_consts
           | "[" (affine ("," affine)*)? "]"
affine: INT -> aterm_const
      | INT "*" USE -> aterm_scaled
      | USE -> aterm_use
      | "-" aterm -> aterm_neg
      | affine "+" aterm -> affine_add
      | affine "-" aterm -> affine_sub
aterm: INT -> aterm_const
     | INT "*" USE -> aterm_scaled
     | USE -> aterm_use
     | "-" aterm -> aterm_neg
fnum: FLOAT | SINT
attr_dict: "{" (attr ("," attr)*)? "}"
attr: WORD "=" attr_value
?attr_value: SINT | FLOAT | STRING | BOOL
           | INTS -> attr_ints
           | "[" (attr_value ("," attr_value)*)? "]" -> attr_list
bp_entry: _KW_SLOT bp_slot [_KW_OF USE] "->" affine_list _KW_SIZES INTS _KW_STRIDES INTS
bp_slot: SINT | bp_var _KW_IN SINT ".." SINT
bp_var: DEF

USE.2: /%[A-Za-z0-9_$.]+/
DEF: /%[A-Za-z0-9_$.]+/
SYMBOL: /@[A-Za-z0-9_$.\-]+/
BLOCK_LABEL: /\^[A-Za-z0-9_]+/
TYPE: /tensor<[^>\n]*>|index(?![\w.])/
FLOAT.2: /-?(?:\d+\.(?!\.)\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf|nan)(?![\w.])/
SINT: /-?\d+/
INTS: /\[[ \t]*(?:-?\d+(?:[ \t]*,[ \t]*-?\d+)*)?[ \t]*\]/
INT: /\d+/
WORD: /[A-Za-z_][A-Za-z0-9_.]*/
STRING: /"(?:[^"\\\n]|\\.)*"/
BOOL: /(?:true|false)(?![\w.])/
COMMENT: /\/\/[^\n]*/
WS: /\s+/
%ignore WS
%ignore COMMENT
"""
"""The fixed structure; `OPS` stands for the op rules, `[x]` leaves a None child when x is
absent, `x?` leaves nothing. A `%name` is a USE (resolved as it is shifted) wherever a use can
stand, else a DEF. An integer list is one token (INTS, a literal like a type: half the tokens
of a scheduled module); an affine list of constants lexes as one too. An affine offset repeats
its one-term forms so that a simple offset is one reduction, not two."""
_KEYWORDS = ("func.func", "slot", "of", "in", "sizes", "strides")

_WHAT = {"USE": "a %value", "DEF": "a %value", "SYMBOL": "an @symbol", "TYPE": "a type",
         "SINT": "an integer", "INT": "an integer", "INTS": "an integer list",
         "FLOAT": "a number", "WORD": "a name", "STRING": "a string", "BOOL": "true or false",
         "BLOCK_LABEL": "a block label"}
"""How a syntax error names what it expected (literals are quoted, op names 'an operation')."""


class ParseError(Exception):
    """Input that is not a Spatial IR program. `rule` is set for semantic errors."""

    def __init__(self, loc: Location, message: str, source_line: str = "", rule: str = "") -> None:
        self.loc, self.rule, self.message = loc, rule, message
        text = f"{loc}: error: " + (f"[{rule}] " if rule else "") + message
        if source_line:
            text += f"\n  {source_line}\n  {' ' * (loc.col - 1)}^"
        super().__init__(text)


def _syntaxes(ops: Sequence[type[Operation]]) -> list[Syntax]:
    return [cls.DEF.syntax for cls in ops if cls.DEF.syntax is not None]


def grammar(ops: Sequence[type[Operation]] = REGISTRY) -> str:
    """The whole grammar: the fixed structure, then each op's rule and terminals (op names,
    keywords and flags, all bounded words, win over a WORD where both could stand)."""
    terminals = dict(keyword(word) for word in _KEYWORDS)
    for syntax in _syntaxes(ops):
        terminals.update(syntax.terminals)
    alternatives = "(" + " | ".join(syntax.rule for syntax in _syntaxes(ops)) + ")"
    return (_FIXED.replace("OPS", alternatives)
            + "".join(syntax.grammar for syntax in _syntaxes(ops))
            + "".join(f"{name}.2: {pattern}\n" for name, pattern in terminals.items()))


def _children(c: list[Any]) -> list[Any]:
    """The callback of list rules and of `custom<>`/`lines<>` directives' rules (whose
    children go to the op's `parse_x`): the children, a list of lark's own making."""
    return c


class Parser:
    """The callbacks of one parse (lark calls them by rule and terminal name) and its
    scopes of names. One instance serves every parse, under a lock."""

    def __init__(self, ops: Sequence[type[Operation]] = REGISTRY) -> None:
        for syntax in _syntaxes(ops):
            assert syntax.read is not None
            setattr(self, syntax.rule, partial(syntax.read, self))
            for rule in syntax.directives:
                setattr(self, rule, _children)
        self.reset("", "<string>")

    def reset(self, text: str, filename: str) -> None:
        self.text, self.filename = text, filename
        self.scopes: list[dict[str, Value]] = [{}]
        self.on_core: dict[str, int] = {}
        self.closed: dict[str, Value] = {}
        self.ahead: dict[str, tuple[Value, Token]] = {}
        """Values used before their definition (a skewed stream's carried values), with
        their first use; the verifier judges such uses (STREAM-4, SSA-1)."""
        self.untyped: set[Value] = set()
        """Of those, the ones no annotation has typed yet."""
        self.type_cache: dict[str, Type] = {}

    # ---- errors ---------------------------------------------------------------------
    def error(self, line: int, col: int, rule: str, message: str) -> NoReturn:
        """An error at line:col (a syntax error when `rule` is empty), shown with its line."""
        lines = self.text.splitlines()
        raise ParseError(Location(self.filename, line, col), message,
                         lines[line - 1] if 0 < line <= len(lines) else "", rule)

    def fail(self, tok: Token, rule: str, message: str) -> NoReturn:
        """An error at token `tok`."""
        self.error(tok.line or 1, tok.column or 1, rule, message)

    # ---- names and scopes -----------------------------------------------------------
    def define(self, type: Type, tok: Token) -> Value:
        """Define the value `tok` names in the innermost scope."""
        name = tok.value[1:]
        for scope in self.scopes:
            if name in scope:
                self.fail(tok, "SSA-2", f"value %{name} is defined twice")
        v = self.ahead.pop(name, (Value(type, name), tok))[0]
        if v in self.untyped:
            self.untyped.discard(v)
            v.type = type
        self.check(v, type, tok)
        return self.scopes[-1].setdefault(name, v)

    def USE(self, tok: Token) -> tuple[Value, Token]:
        """A use of a value, resolved when shifted (so in text order), with its token."""
        name = tok.value[1:]
        for scope in reversed(self.scopes):
            v = scope.get(name)
            if v is not None:
                return v, tok
        if name in self.on_core:
            self.fail(tok, "SCH-3", f"%{name} is defined on core {self.on_core[name]} and "
                      "not visible here; cross-core values need spat.channel_send/receive")
        got = self.ahead.get(name)
        if got is None:  # perhaps defined further on (`define`), else SSA-1 at `func`'s end
            got = self.ahead[name] = (Value(INDEX, name), tok)
            self.untyped.add(got[0])
        return got[0], tok

    def check(self, v: Value, t: Type, tok: Token) -> Value:
        """`v`, which the text annotates with type `t` at `tok`."""
        if v in self.untyped:
            self.untyped.discard(v)
            v.type = t
        if v.type is not t and v.type != t:
            self.fail(tok, "TYPE-0", f"%{v.name} has type {v.type} but is annotated {t}")
        return v

    def check_all(self, uses: list[tuple[Value, Token]], types: list[Type], op: Token
                  ) -> list[Value]:
        """An operand list, annotated with a list of types."""
        if len(types) != len(uses):
            self.fail(op, "TYPE-0", f"{len(uses)} operands but {len(types)} types")
        return [self.check(v, t, tok) for (v, tok), t in zip(uses, types, strict=True)]

    def index_use(self, use: tuple[Value, Token]) -> Value:
        v, tok = use
        if v.type != INDEX:
            self.fail(tok, "TYPE-0", f"offset uses %{v.name} of type {v.type}; affine offsets "
                      "may only use index values (the lane or a slot variable)")
        return v

    # ---- terminals, as they are shifted ------------------------------------------------
    def TYPE(self, tok: Token) -> Type:
        text = tok.value
        t = self.type_cache.get(text)
        if t is None:
            try:
                t = self.type_cache[text] = INDEX if text == "index" else parse_type(text)
            except ValueError as e:
                self.fail(tok, "TYPE-0", str(e))
        return t

    def SINT(self, tok: Token) -> int:
        text = tok.value
        if len(text) > 18 + text.startswith("-"):
            self.fail(tok, "", f"integer {text[:20]}... is too large")
        return int(text)

    INT = SINT

    def INTS(self, tok: Token) -> tuple[int, ...]:
        """`[1, -2, 3]`, one token: integer lists are literals, like types."""
        text = tok.value
        items = text[1:-1].split(",")
        if len(text) > 20 and any(len(x.strip(" \t-")) > 18 for x in items):
            self.fail(tok, "", "an integer in this list is too large")
        return tuple(map(int, items)) if items[0].strip() else ()

    def FLOAT(self, tok: Token) -> float:
        return float(tok.value)

    def WORD(self, tok: Token) -> str:
        return tok.value

    def STRING(self, tok: Token) -> str:
        return tok.value[1:-1].replace('\\"', '"').replace("\\\\", "\\")

    def BOOL(self, tok: Token) -> bool:
        return tok.value == "true"

    # ---- structure --------------------------------------------------------------------
    def func_head(self, c: list[Token]) -> Token:
        self.scopes.append({})  # the arguments' scope
        self.on_core = {}
        return c[0]

    def func(self, c: list[Any]) -> FuncOp:
        sym, args, results, _, *ops = c
        del self.scopes[-2:]
        for _, tok in self.ahead.values():
            self.fail(tok, "SSA-1", f"use of undefined value {tok.value}")
        op = FuncOp(sym.value[1:], Block(args or [], ops), results or [])
        op.loc = Location(self.filename, sym.line, sym.column)
        return op

    def lbrace(self, _: list[Any]) -> None:
        self.scopes.append({})

    def region(self, c: list[Any]) -> Block:
        _, _, args, *ops = c
        self.closed = self.scopes.pop()
        return Block(args or [], ops)

    def arg(self, c: list[Any]) -> Value:
        return self.define(c[1], c[0])

    def make(self, cls: type[Operation], tok: Token, names: list[Token] | None,
             values: dict[str, Any], types: dict[str, list[Type]]) -> Operation:
        """Name the results of the op an op rule's reader (`Syntax.read`) read, build it."""
        names = names or []
        results = cls.DEF.results
        count = sum(len(types.get(f, ())) for f, _ in results)
        if len(names) != count:
            self.fail(names[0] if names else tok, "TYPE-0",
                      f"{len(names)} results named but the op has {count}")
        named = iter(names)
        for f, variadic in results:
            vals = [self.define(t, next(named)) for t in types.get(f, ())]
            values[f] = vals if variadic else vals[0]
        op = cls(**values)
        op.loc = Location(self.filename, tok.line or 1, tok.column or 1)
        op.own_results()
        if isinstance(op, CoreOp | CoreBatchOp):
            for name in self.closed:  # name cross-core uses as SCH-3, not SSA-1
                self.on_core[name] = op.cores[0]
        elif not op.SCOPES:  # a region that orders ops (`pim.lag`) leaves its values visible
            self.scopes[-1].update(self.closed)
        return op

    def typed_use(self, c: list[Any]) -> Value:
        (v, tok), t = c
        return self.check(v, t, tok)

    start = args = defs = uses = typed_uses = types = result_type = attr_list = \
        staticmethod(_children)

    def affine_list(self, c: list[Affine]) -> tuple[Affine, ...]:
        return tuple(c)

    def attr_ints(self, c: list[tuple[int, ...]]) -> list[int]:
        return list(c[0])

    def affine_consts(self, c: list[tuple[int, ...]]) -> tuple[Affine, ...]:
        return tuple(map(Affine, c[0]))

    def result_tuple(self, c: list[list[Type]]) -> list[Type]:
        return c[0] if c else []

    def fnum(self, c: list[int | float]) -> float:
        return float(c[0])

    # ---- affine offsets -----------------------------------------------------------------
    def aterm_const(self, c: list[int]) -> Affine:
        return Affine(c[0])

    def aterm_scaled(self, c: list[Any]) -> Affine:
        return Affine(0, ((c[0], self.index_use(c[1])),))

    def aterm_use(self, c: list[Any]) -> Affine:
        return Affine(0, ((1, self.index_use(c[0])),))

    def aterm_neg(self, c: list[Affine]) -> Affine:
        a = c[0]
        return Affine(-a.const, tuple((-k, v) for k, v in a.terms))

    def affine_add(self, c: list[Affine]) -> Affine:
        a, b = c
        return Affine(a.const + b.const, a.terms + b.terms)

    def affine_sub(self, c: list[Affine]) -> Affine:
        a, b = c
        return Affine(a.const - b.const, a.terms + tuple((-k, v) for k, v in b.terms))

    # ---- attributes and Blueprint entries -------------------------------------------
    def attr_dict(self, c: list[tuple[str, Any]]) -> dict[str, Any]:
        return dict(c)

    def attr(self, c: list[Any]) -> tuple[str, Any]:
        return c[0], c[1]

    def bp_var(self, c: list[Token]) -> Value:
        """A slot family's variable: an index value scoped to its entry line."""
        self.scopes.append({})
        return self.define(INDEX, c[0])

    def bp_slot(self, c: list[Any]) -> tuple[int, Value | None, int]:
        """(first slot, family variable or None, hi): `N` or `%s in LO..HI`."""
        return (c[0], None, 0) if len(c) == 1 else (c[1], c[0], c[2])

    def bp_entry(self, c: list[Any]) -> tuple[Any, ...]:
        """(slot, family variable or None, hi, `of` use or None, offsets, sizes, strides)."""
        (slot, var, hi), of, offsets, sizes, strides = c
        if var is not None:
            self.scopes.pop()
        return slot, var, hi, of, offsets, sizes, strides


def build(plugins: dict[str, Any], ops: Sequence[type[Operation]] = REGISTRY
          ) -> tuple[Lark, Parser]:
    """A lark LALR parser of the grammar of `ops` with the callbacks of a new `Parser` bound.
    lark caches the tables on disk (keyed by the grammar text, so any change to an op's
    format rebuilds them), which makes this 0.05 s instead of 0.5 s."""
    parser = Parser(ops)
    lark = Lark(grammar(ops), parser="lalr", lexer="contextual", transformer=parser,
                maybe_placeholders=True, cache=True, _plugins=plugins)
    return lark, parser


@cache
def _lark() -> tuple[Lark, Parser]:
    """The process's parser, with lark-cython's lexer and LALR loop when it is installed."""
    return build(PLUGINS)


_LOCK = threading.Lock()


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse a whole program. Raises `ParseError` with file:line:col."""
    if "\x00" in text:
        raise ParseError(Location(filename, 1, 1), "input is binary, not Spatial IR text")
    lark, parser = _lark()
    with _LOCK:
        parser.reset(text, filename)
        try:
            funcs: list[FuncOp] = lark.parse(text)  # type: ignore[assignment]
        except UnexpectedInput as e:
            _syntax_error(parser, lark, e)
        finally:
            parser.reset("", "<string>")
    if not funcs:
        raise ParseError(Location(filename, 1, 1), "no func.func in input (empty program)")
    return Module(funcs, filename=filename)


def _syntax_error(parser: Parser, lark: Lark, e: UnexpectedInput) -> NoReturn:
    """Say what was found and what was expected, at its place (at the end of the input:
    after its last non-blank line)."""
    if isinstance(e, UnexpectedCharacters):
        found, line, col, expected = e.char, e.line, e.column, e.allowed
    elif isinstance(e, UnexpectedToken) and e.token.type != "$END":
        found, line, col, expected = e.token.value, e.token.line, e.token.column, e.expected
    else:
        _end_of_input(parser)
    if found == "[" and "INTS" in expected:  # a list that is not one token: point inside it
        pos = sum(map(len, parser.text.splitlines(keepends=True)[:line - 1])) + col - 1
        end = _INTS_PREFIX.match(parser.text, pos).end()  # type: ignore[union-attr]
        if end == len(parser.text):
            _end_of_input(parser)
        parser.error(line, col + end - pos, "",
                     f"unexpected {parser.text[end]!r} in an integer list")
    patterns = {t.name: t.pattern.value for t in lark.terminals}
    what = sorted({_describe(name, patterns[name]) for name in expected if name in patterns})
    if "an operation" in what and "." in found and found[:1].isalpha():
        parser.error(line, col, "", f"unknown or misplaced operation '{found}'")
    shown = what[0] if len(what) == 1 else "one of " + ", ".join(what)
    kind = "character " if isinstance(e, UnexpectedCharacters) else ""
    parser.error(line, col, "", f"unexpected {kind}{found!r}; expected {shown}")


_INTS_PREFIX = re.compile(r"\[[ \t]*(?:-?\d+[ \t]*,[ \t]*)*-?\d*[ \t]*")
"""The longest start of an integer list (`INTS`) at a position."""


def _end_of_input(parser: Parser) -> NoReturn:
    """The input ends inside a construct: the error goes after its last non-blank line."""
    lines = parser.text.splitlines() or [""]
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    parser.error(len(lines), len(lines[-1]) + 1, "", "unexpected end of input (truncated program?)")


def _describe(terminal: str, pattern: str) -> str:
    """What a terminal reads, for a syntax error: `'('`, `'lanes'`, `an operation`..."""
    if terminal.startswith("OP_"):
        return "an operation"
    if terminal.startswith(("_KW_", "FLAG_")):  # a bounded keyword
        return repr(re.sub(r"\\(.)", r"\1", pattern.removesuffix(BOUNDARY)))
    return _WHAT.get(terminal) or repr(pattern)


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
