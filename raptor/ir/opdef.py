"""Op declarations: one class per op holds its fields, textual format and checks.

An op is a dataclass decorated with `op_def`. Its fields say what it holds, by the kind in
their annotation (`core.Operand`, `Operands`, `Result`, `Results`, `Region`, `BareRegion`;
any other annotation is an attribute: `int`, `float`, `str`, `bool`, `tuple[int, ...]`,
`tuple[Affine, ...]`, `dict[str, Attr]`, `TensorType | None`, or a type the op prints with
its own `custom<...>`/`lines<...>` directive). `NAME` is the printed name, `FORMAT` the
spelling after `results = NAME`, `verify` the op's own checks. From that `op_def` derives,
once per class: the generic views `operands()`/`results()`/`regions()`, the printer (Python
generated from the format, as fast as a hand-written one) and the parse program the parser
interprets. Families (`pim.<kind>`, `spat.plan.<kind>`) print `PREFIX + kind` and register
each kind in `KINDS` (or, for `spat.plan`, any kind).

The format language follows MLIR's declarative assembly format, reduced to what the
Spatial IR spells. Elements are separated by one space where the format has whitespace
and by none where they touch (`$source$offsets` prints `%in[0, 2*%lane]`):

- `$f` a field: `%v` for an operand, `%a, %b` for a list, the value for an attribute (an
  int list `[1, 2]`, an affine list, a bare word for `str`, a float as `fmt_attr`), the
  field name when a `bool` is true (nothing when false), ` {k = v}` for an attribute dict
  (nothing when empty); `@$f` a symbol; a region (`$body`) must come last.
- `type($a)` the type of an operand or result (`type($a, $b)`: one type for both, checked
  equal when parsing); of a list of operands `T0, T1`; of a list of results `T`, `(T0, T1)`
  or `()`. `typed($ins)` prints `%x : T, %y : T2`.
- `( ... )?` an optional group, printed when its anchor (the element marked `^`) is present
  and parsed when its first element is next; any other word or punctuation is a literal.
- `custom<x>`: the op's `print_x(p) -> str` and `parse_x(parser, state)`; `lines<x>` (last
  element): `print_x(p, header)` writes the header line and the lines under it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, dataclass_transform

from raptor.ir.core import Operation, Value
from raptor.ir.printer import Printer, fmt_attr
from raptor.ir.types import Type

if TYPE_CHECKING:
    from raptor.ir.parser import Parser

_VALUE_KINDS = {"Operand": "operand", "Operands": "operands", "Result": "result",
                "Results": "results", "Region": "region", "BareRegion": "bare_region"}
_ATTR_KINDS = {"int": "int", "float": "float", "str": "str", "bool": "bool",
               "tuple[int, ...]": "ints", "tuple[Affine, ...]": "affines",
               "dict[str, Attr]": "attrs", "TensorType | None": "type"}


@dataclass
class OpDef:
    """What `op_def` read from a class: its fields by kind and its compiled format."""

    operands: list[tuple[str, bool]] = field(default_factory=list)
    """(field, variadic) in declaration order."""
    results: list[tuple[str, bool]] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    attributes: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    """Field name → kind (`operand`, `results`, `ints`, ...; `other` for custom ones)."""
    format: list[tuple[bool, Element]] = field(default_factory=list)
    """The compiled format: (space before, element)."""

    @property
    def single_result(self) -> str | None:
        """The field of the op's one non-variadic result, if that is all it returns."""
        if len(self.results) == 1 and not self.results[0][1]:
            return self.results[0][0]
        return None


@dataclass
class ParseState:
    """What the parse program of one op has read so far."""

    cls: type[Operation]
    tok: int
    """Token index of the op name (semantic errors without a better place point here)."""
    values: dict[str, Any] = field(default_factory=dict)
    uses: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Operand field → (value or values, token index or indices), type-checked later."""
    result_types: dict[str, list[Type]] = field(default_factory=dict)


OPS: dict[str, tuple[type[Operation], dict[str, str]]] = {}
"""Printed op name → class and the family field it fixes (`pim.vadd` → BinaryOp, op=vadd)."""
OPEN_FAMILIES: dict[str, tuple[type[Operation], str]] = {}
"""Name prefix → class and field for families of any kind (`spat.plan.` → PlanOp.kind)."""
_KIND_WORD = re.compile(r"[a-z_0-9]+")


def lookup(name: str) -> tuple[type[Operation], dict[str, str]] | None:
    """The class (and fixed family field) printed as `name`, if any."""
    got = OPS.get(name)
    if got is not None:
        return got
    for prefix, (cls, fld) in OPEN_FAMILIES.items():
        kind = name[len(prefix):]
        if name.startswith(prefix) and _KIND_WORD.fullmatch(kind):
            return cls, {fld: kind}
    return None


# ---------------------------------------------------------------------- format elements
class Element:
    """One element of a format: how it prints (a Python expression over `self` and `p`,
    or literal text) and how it parses."""

    optional = False
    """It may print nothing (its leading space goes with it)."""

    def text(self) -> str | None:
        """Literal output, if the element is literal."""
        return None

    def expr(self) -> str:
        raise NotImplementedError

    def cond(self) -> str:
        """For optional elements: when they print."""
        raise NotImplementedError

    def starts(self, ps: Parser) -> bool:
        """Whether the next token can begin this element."""
        raise NotImplementedError

    def parse(self, ps: Parser, st: ParseState) -> None:
        raise NotImplementedError

    def absent(self, st: ParseState) -> None:
        """Fill in what an optional group that is not there leaves (empty lists)."""


@dataclass
class Literal(Element):
    word: str

    def text(self) -> str:
        return self.word

    def starts(self, ps: Parser) -> bool:
        return ps.peek() == self.word

    def parse(self, ps: Parser, st: ParseState) -> None:
        ps.expect(self.word)


_PRINT = {
    "operand": "p.v({})", "operands": "p.vs({})", "int": "{}", "str": "{}", "type": "{}",
    "float": "_float({})", "ints": "_ints({})", "affines": "p.affs({})",
    "attrs": "_attr_dict({})", "symbol": "_at({})",
}
"""Field kind → the expression printing `self.<field>`."""
_READ: dict[str, Callable[[Parser], Any]] = {
    "int": lambda ps: ps.sint(), "float": lambda ps: ps.fnum(), "str": lambda ps: ps.word(),
    "ints": lambda ps: tuple(ps.int_list()), "affines": lambda ps: ps.affine_list(),
    "attrs": lambda ps: ps.attr_dict() if ps.peek() == "{" else {},
    "type": lambda ps: ps.type_(), "symbol": lambda ps: ps.symbol(),
}
"""Attribute kind → its reader."""
_FIRST = {"ints": "[", "affines": "[", "attrs": "{"}


@dataclass
class Var(Element):
    """`$f` (and `@$f`): a field printed and parsed according to its kind; a `bool`
    prints its own name when true, an attribute dict ` {k = v}` when not empty."""

    name: str
    kind: str
    anchor: bool = False

    def __post_init__(self) -> None:
        self.optional = self.kind in ("bool", "attrs")

    def expr(self) -> str:
        if self.kind == "bool":
            return f'"{self.name}"'
        return _PRINT[self.kind].format(f"self.{self.name}")

    def cond(self) -> str:
        return f"self.{self.name}" + (" is not None" if self.kind == "type" else "")

    def starts(self, ps: Parser) -> bool:
        k = self.kind
        if k in ("operand", "operands"):
            return ps.at_value()
        if k == "type":
            return ps.at_type()
        return ps.peek() == (self.name if k == "bool" else _FIRST.get(k))

    def parse(self, ps: Parser, st: ParseState) -> None:
        k, n = self.kind, self.name
        if k == "operand":
            st.uses[n] = ps.use()
        elif k == "operands":
            st.uses[n] = ps.uses()
        elif k == "bool":
            st.values[n] = ps.accept(n)
        else:
            st.values[n] = _READ[k](ps)

    def absent(self, st: ParseState) -> None:
        if self.kind == "operands":
            st.values[self.name] = []


@dataclass
class TypeOf(Element):
    """`type($a)` / `type($a, $b)`: one type (or list) for the named operands/results."""

    names: list[str]
    kinds: list[str]

    def expr(self) -> str:
        f, k = f"self.{self.names[0]}", self.kinds[0]
        if k == "operands":
            return f"_types({f})"
        if k == "results":
            return f"_result_types({f})"
        return f"{f}.type"

    def parse(self, ps: Parser, st: ParseState) -> None:
        k = self.kinds[0]
        if k == "operands":
            ts = ps.types_list()
            vals, toks = st.uses[self.names[0]]
            if len(ts) != len(vals):
                ps.fail(st.tok, "TYPE-0", f"{len(vals)} operands but {len(ts)} types")
            st.values[self.names[0]] = [ps.check(v, t, tok)
                                        for v, t, tok in zip(vals, ts, toks, strict=True)]
            return
        if k == "results":
            st.result_types[self.names[0]] = ps.result_types()
            return
        t = ps.type_()
        for name, kind in zip(self.names, self.kinds, strict=True):
            if kind == "operand":
                v, tok = st.uses[name]
                st.values[name] = ps.check(v, t, tok)
            else:
                st.result_types[name] = [t]


@dataclass
class Typed(Element):
    """`typed($ins)`: `%x : T, %y : T2`."""

    name: str

    def expr(self) -> str:
        return f"_typed(p, self.{self.name})"

    def parse(self, ps: Parser, st: ParseState) -> None:
        vals = []
        while ps.at_value():
            v, tok = ps.use()
            ps.expect(":")
            vals.append(ps.check(v, ps.type_(), tok))
            if not ps.accept(","):
                break
        st.values[self.name] = vals


@dataclass
class Custom(Element):
    """`custom<x>` (inline) or `lines<x>` (last: the header line and lines under it)."""

    name: str
    cls: type[Operation]
    lines: bool = False

    def expr(self) -> str:
        return f"self.print_{self.name}(p)"

    def parse(self, ps: Parser, st: ParseState) -> None:
        getattr(self.cls, f"parse_{self.name}")(ps, st)


@dataclass
class RegionVar(Element):
    name: str
    show_args: bool

    def parse(self, ps: Parser, st: ParseState) -> None:
        st.values[self.name] = ps.region(self.show_args)


@dataclass
class Group(Element):
    """`( ... )?`: present when its anchor is (printing) or its first element is next."""

    items: list[tuple[bool, Element]]
    """(space before, element)."""
    anchor: Var

    def __post_init__(self) -> None:
        self.optional = True

    def cond(self) -> str:
        return self.anchor.cond()

    def expr(self) -> str:
        return _concat(self.items)

    def starts(self, ps: Parser) -> bool:
        return self.items[0][1].starts(ps)

    def parse(self, ps: Parser, st: ParseState) -> None:
        if not self.starts(ps):
            for _, e in self.items:
                e.absent(st)
            return
        for _, e in self.items:
            e.parse(ps, st)


# ---------------------------------------------------------------------- format compiler
_FORMAT_TOKEN = re.compile(
    r"\s+|\)\?|->|@\$\w+|\$\w+\^?|type\(|typed\(|custom<\w+>|lines<\w+>|[()\[\],:=]"
    r"|[A-Za-z_][\w.]*")


class FormatError(Exception):
    """A malformed op declaration (a programming error, raised at import)."""


def _tokens(fmt: str) -> list[tuple[bool, str]]:
    """(space before, token) pairs of a format string."""
    out: list[tuple[bool, str]] = []
    pos, space = 0, False
    while pos < len(fmt):
        m = _FORMAT_TOKEN.match(fmt, pos)
        if m is None:
            raise FormatError(f"bad format text at {fmt[pos:]!r}")
        tok = m.group(0)
        pos = m.end()
        if tok.isspace():
            space = True
            continue
        out.append((space, tok))
        space = False
    return out


def _trailer(e: Element) -> bool:
    """A region or `lines<>`: printed after (and around) the header line."""
    return isinstance(e, RegionVar) or (isinstance(e, Custom) and e.lines)


def _compile(cls: type[Operation], d: OpDef) -> None:
    toks = _tokens(cls.FORMAT)
    items, rest = _elements(cls, d, toks, 0)
    if rest != len(toks):
        raise FormatError(f"{cls.__name__}: unbalanced ')' in format")
    if any(_trailer(e) for _, e in items[:-1]):
        raise FormatError(f"{cls.__name__}: a region or lines<> must come last")
    if items:  # one space between the op name and its format
        items[0] = (True, items[0][1])
    d.format = items


def _group_end(toks: list[tuple[bool, str]], i: int) -> int | None:
    """Index of the `)?` closing the `(` at i, or None if that `(` is literal."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j][1]
        if t in ("(", "type(", "typed("):
            depth += 1
        elif t in (")", ")?"):
            depth -= 1
            if depth == 0:
                return j if t == ")?" else None
    return None


def _elements(cls: type[Operation], d: OpDef, toks: list[tuple[bool, str]], i: int,
              stop: int | None = None) -> tuple[list[tuple[bool, Element]], int]:
    items: list[tuple[bool, Element]] = []
    end = len(toks) if stop is None else stop
    while i < end:
        space, t = toks[i]
        if t == "(" and (j := _group_end(toks, i)) is not None:
            inner, _ = _elements(cls, d, toks, i + 1, j)
            anchors = [e for _, e in inner if isinstance(e, Var) and e.anchor]
            if len(anchors) != 1:
                raise FormatError(f"{cls.__name__}: an optional group needs one anchor (^)")
            inner[0] = (False, inner[0][1])
            items.append((space, Group(inner, anchors[0])))
            i = j + 1
            continue
        if t in ("type(", "typed("):
            j = i + 1
            names = []
            while toks[j][1] != ")":
                if toks[j][1] != ",":
                    names.append(_field(cls, d, toks[j][1]))
                j += 1
            kinds = [d.kinds[n] for n in names]
            items.append((space, TypeOf(names, kinds) if t == "type(" else Typed(names[0])))
            i = j + 1
            continue
        if t.startswith(("custom<", "lines<")):
            items.append((space, Custom(t[t.index("<") + 1:-1], cls, t.startswith("lines<"))))
        elif t.startswith(("$", "@$")):
            name = _field(cls, d, t)
            kind = "symbol" if t.startswith("@") else d.kinds[name]
            if kind in ("region", "bare_region"):
                items.append((space, RegionVar(name, kind == "region")))
            elif kind in ("result", "results", "other"):
                raise FormatError(f"{cls.__name__}: ${name} ({kind}) cannot be printed alone")
            else:
                items.append((space, Var(name, kind, t.endswith("^"))))
        else:
            items.append((space, Literal(t)))
        i += 1
    return items, i


def _field(cls: type[Operation], d: OpDef, tok: str) -> str:
    name = tok.lstrip("@$").rstrip("^")
    if name not in d.kinds:
        raise FormatError(f"{cls.__name__}: format names unknown field ${name}")
    return name


# ---------------------------------------------------------------------- printer generation
def _ints(xs: Any) -> str:
    return "[" + ", ".join([str(x) for x in xs]) + "]"


def _types(vs: list[Value]) -> str:
    return ", ".join([str(v.type) for v in vs])


def _result_types(vs: list[Value]) -> str:
    return str(vs[0].type) if len(vs) == 1 else "(" + _types(vs) + ")"


def _typed(p: Printer, vs: list[Value]) -> str:
    return ", ".join([f"{p.v(v)} : {v.type}" for v in vs])


def _attr_dict(attrs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {fmt_attr(v)}" for k, v in attrs.items()) + "}"


def _float(x: float) -> str:
    return fmt_attr(float(x))


def _at(symbol: str) -> str:
    return "@" + symbol


def _results_eq(p: Printer, vs: list[Value]) -> str:
    return p.vs(vs) + " = " if vs else ""


_NAMESPACE: dict[str, Any] = {
    "_ints": _ints, "_types": _types, "_result_types": _result_types, "_typed": _typed,
    "_attr_dict": _attr_dict, "_float": _float, "_at": _at, "_results_eq": _results_eq,
}


def _fstring(items: list[tuple[bool, Element]]) -> str:
    """The body of a single-quoted f-string printing `items` (optional ones only when
    present)."""
    out = []
    for space, e in items:
        sep = " " if space else ""
        lit = e.text()
        if lit is not None:
            out.append((sep + lit).replace("{", "{{").replace("}", "}}"))
        elif e.optional:
            inner = e.items if isinstance(e, Group) else [(False, e)]
            out.append(f'{{("{sep}" + {_concat(inner)}) if {e.cond()} else ""}}')
        else:
            out.append(sep + "{" + e.expr() + "}")
    return "".join(out)


def _concat(items: list[tuple[bool, Element]]) -> str:
    """A string expression (double-quoted literals) printing `items` unconditionally."""
    parts: list[str] = []
    lit = ""
    for space, e in items:
        lit += " " if space else ""
        text = e.text()
        if text is not None:
            lit += text
            continue
        if lit:
            parts.append(f'"{lit}"')
            lit = ""
        parts.append(f"str({e.expr()})")
    if lit:
        parts.append(f'"{lit}"')
    return " + ".join(parts) if parts else '""'


def _printer_source(cls: type[Operation], d: OpDef) -> str:
    single = d.single_result
    if single is not None:
        head = f"{{p.v(self.{single})}} = "
    elif d.results:
        head = f"{{_results_eq(p, self.{d.results[0][0]})}}"
    else:
        head = ""
    family = getattr(cls, "FAMILY", None)
    name = f"{family[0]}{{self.{family[1]}}}" if family else cls.NAME
    items = list(d.format)
    trailer = items.pop() if items and _trailer(items[-1][1]) else None
    header = "f'" + head + name + _fstring(items) + "'"
    if trailer is None:
        return f"def print(self, p):\n    p.line({header})\n"
    e = trailer[1]
    if isinstance(e, RegionVar):
        return (f"def print(self, p):\n    p.region({header}, self.{e.name}, "
                f"{e.show_args})\n")
    assert isinstance(e, Custom)
    return f"def print(self, p):\n    self.print_{e.name}(p, {header})\n"


def _method(source: str, name: str) -> Callable[..., Any]:
    scope: dict[str, Any] = {}
    exec(compile(source, f"<op_def {name}>", "exec"), dict(_NAMESPACE), scope)
    return next(iter(scope.values()))


def _list_source(method: str, items: list[tuple[str, bool]]) -> str:
    body = ", ".join(f"*self.{f}" if var else f"self.{f}" for f, var in items)
    return f"def {method}(self):\n    return [{body}]\n"


# ---------------------------------------------------------------------- the decorator
OpT = TypeVar("OpT", bound=type[Operation])


@dataclass_transform(eq_default=False, field_specifiers=(dataclasses.field,))
def op_def(cls: OpT) -> OpT:
    """Make `cls` a dataclass and derive its generic views, printer and parse program."""
    cls = dataclass(eq=False)(cls)  # type: ignore[assignment]
    d = OpDef()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        ann = str(f.type)
        kind = _VALUE_KINDS.get(ann)
        if kind in ("operand", "operands"):
            d.operands.append((f.name, kind == "operands"))
        elif kind in ("result", "results"):
            d.results.append((f.name, kind == "results"))
        elif kind in ("region", "bare_region"):
            d.regions.append(f.name)
        else:
            d.attributes.append(f.name)
        d.kinds[f.name] = kind or _ATTR_KINDS.get(ann, "other")
    cls.DEF = d
    for method, items in (("operands", d.operands), ("results", d.results),
                          ("regions", [(r, False) for r in d.regions])):
        if method not in cls.__dict__:
            setattr(cls, method, _method(_list_source(method, items), cls.__name__))
    family = getattr(cls, "FAMILY", None)
    if family is not None:
        cls.name = property(_method(  # type: ignore[assignment]
            f"def name(self):\n    return {family[0]!r} + self.{family[1]}\n", cls.__name__))
    if cls.FORMAT:
        _compile(cls, d)
        if "print" not in cls.__dict__:
            cls.print = _method(_printer_source(cls, d), cls.__name__)  # type: ignore
    _register(cls)
    return cls


def _register(cls: type[Operation]) -> None:
    if not cls.NAME or not cls.FORMAT:
        return
    family = getattr(cls, "FAMILY", None)
    if family is None:
        OPS[cls.NAME] = (cls, {})
        return
    prefix, fld = family
    kinds = getattr(cls, "KINDS", None)
    if kinds is None:
        OPEN_FAMILIES[prefix] = (cls, fld)
    else:
        for kind in kinds:
            OPS[prefix + kind] = (cls, {fld: kind})


def parse_op(ps: Parser, cls: type[Operation], fixed: dict[str, str], tok: int
             ) -> ParseState:
    """Run `cls`'s parse program after its name; the caller builds the op from the state."""
    st = ParseState(cls, tok, dict(fixed))
    for _, e in cls.DEF.format:
        e.parse(ps, st)
    return st
