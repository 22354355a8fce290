"""Op declarations: one class per op holds its fields, textual format and checks.

An op is a dataclass decorated with `op_def`. The annotation of each field says what it is
(`core.Operand`, `Operands`, `Result`, `Results`, `Region`, `BareRegion`, or an attribute:
`int`, `float`, `str`, `bool`, `tuple[int, ...]`, `tuple[Affine, ...]`, `dict[str, Attr]`,
`TensorType | None`, or anything its own `custom<>`/`lines<>` directive handles); `NAME`
is the printed name, `FORMAT` the spelling after `results = NAME`, `verify` its checks.
`op_def` derives once per class the generic views (`operands()`, `results()`, `regions()`),
a printer (Python generated from the format, as fast as a hand-written one) and the parse
program the parser interprets. Families print `FAMILY[0] + <kind field>` and register
every kind of `KINDS` (all kinds when there is no `KINDS`, as for `spat.plan.<kind>`).

The format language is MLIR's declarative assembly format reduced to what Spatial IR
spells. Elements separated by whitespace print with one space, touching ones with none
(`$source$offsets` prints `%in[0, 2*%lane]`). `$f` prints a field by its kind: `%v`,
`%a, %b`, `[1, 2]`, an affine list, a bare word (`str`), a float as `fmt_attr`, a `bool`'s
own name when true (else nothing), ` {k = v}` for a non-empty attribute dict; `@$f` a symbol;
a region (last). `type($a)` is the type of an operand or result (`type($a, $b)`: one type,
equal for both), of an operand list `T0, T1`, of a result list `T`, `(T0, T1)` or `()`;
`typed($ins)` prints `%x : T, %y : T2`. `( ... )?` is an optional group, printed when its
anchor (`$f^`) is present and parsed when its first element is next. `custom<x>` calls the
op's `print_x(p) -> str` / `parse_x(parser, state)`; `lines<x>` (last) `print_x(p, header)`,
which writes the header line and the lines under it. Anything else is a literal.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, dataclass_transform

from raptor.ir.core import Operation
from raptor.ir.printer import Printer, fmt_attr
from raptor.ir.types import Type

if TYPE_CHECKING:
    from raptor.ir.parser import Parser

_KINDS = {"Operand": "operand", "Operands": "operands", "Result": "result",
          "Results": "results", "Region": "region", "BareRegion": "bare_region",
          "int": "int", "float": "float", "str": "str", "bool": "bool",
          "tuple[int, ...]": "ints", "tuple[Affine, ...]": "affines",
          "dict[str, Attr]": "attrs", "TensorType | None": "type"}
"""Field annotation → kind; any other annotation is kind `other` (custom directives)."""


@dataclass
class Item:
    """A compiled format element: `lit` (text), `var` (fields[0]), `type` (fields), `typed`,
    `custom`/`lines` (text: the directive's name), `region`, or `group` (items, anchor)."""

    kind: str
    space: bool = False
    text: str = ""
    fields: tuple[str, ...] = ()
    items: list[Item] = field(default_factory=list)
    anchor: str = ""


@dataclass
class OpDef:
    """What `op_def` read from a class: fields by kind and the compiled format."""

    operands: list[tuple[str, bool]] = field(default_factory=list)
    """(field, variadic) in declaration order, as `results`."""
    results: list[tuple[str, bool]] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    attributes: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    format: list[Item] = field(default_factory=list)

    @property
    def single_result(self) -> str | None:
        """The field of the op's one result when it has exactly one, not variadic."""
        return self.results[0][0] if len(self.results) == 1 and not self.results[0][1] else None


@dataclass
class ParseState:
    """What the parse program of one op has read: field values, operand uses still to be
    type-checked (value or values, token index or indices) and result types."""

    cls: type[Operation]
    tok: int
    values: dict[str, Any] = field(default_factory=dict)
    uses: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    result_types: dict[str, list[Type]] = field(default_factory=dict)


OPS: dict[str, tuple[type[Operation], dict[str, str]]] = {}
"""Printed op name → class and the family field it fixes (`pim.vadd` → BinaryOp, op=vadd)."""
OPEN_FAMILIES: dict[str, tuple[type[Operation], str]] = {}
"""Name prefix → class and kind field of families of any kind (`spat.plan.` → PlanOp)."""


def lookup(name: str) -> tuple[type[Operation], dict[str, str]] | None:
    """The class (and fixed family field) printed as `name`, if any."""
    got = OPS.get(name)
    if got is None:
        for prefix, (cls, fld) in OPEN_FAMILIES.items():
            if name.startswith(prefix) and re.fullmatch(r"[a-z_0-9]+", name[len(prefix):]):
                return cls, {fld: name[len(prefix):]}
    return got


# ---------------------------------------------------------------------- compiling formats
class FormatError(Exception):
    """A malformed op declaration (a programming error, raised at import)."""


_TOKEN = re.compile(r"\s+|\)\?|->|@?\$\w+\^?|typed?\(|(?:custom|lines)<\w+>|[()\[\],:=]"
                    r"|[A-Za-z_][\w.]*")


def _compile(cls: type[Operation], d: OpDef) -> list[Item]:
    toks: list[tuple[bool, str]] = []
    pos, space = 0, False
    while pos < len(cls.FORMAT):
        m = _TOKEN.match(cls.FORMAT, pos)
        if m is None:
            raise FormatError(f"{cls.__name__}: bad format text at {cls.FORMAT[pos:]!r}")
        pos = m.end()
        if m.group().isspace():
            space = True
        else:
            toks.append((space, m.group()))
            space = False
    items = _items(cls, d, toks)
    if any(i.kind in ("region", "lines") for i in items[:-1]):
        raise FormatError(f"{cls.__name__}: a region or lines<> must come last")
    if items:
        items[0].space = True  # one space after the op name
    return items


def _items(cls: type[Operation], d: OpDef, toks: list[tuple[bool, str]]) -> list[Item]:
    items: list[Item] = []
    i = 0
    while i < len(toks):
        space, t = toks[i]
        j = _group_end(toks, i) if t == "(" else None
        if j is not None:
            inner = _items(cls, d, toks[i + 1:j])
            anchors = [x.fields[0] for x in inner if x.anchor]
            if len(anchors) != 1:
                raise FormatError(f"{cls.__name__}: an optional group needs one anchor (^)")
            inner[0].space = False
            items.append(Item("group", space, items=inner, anchor=anchors[0]))
            i = j + 1
        elif t in ("type(", "typed("):
            j = next(k for k in range(i, len(toks)) if toks[k][1] == ")")
            names = tuple(_field(cls, d, x) for _, x in toks[i + 1:j] if x != ",")
            items.append(Item(t[:-1], space, fields=names))
            i = j + 1
        else:
            items.append(_item(cls, d, space, t))
            i += 1
    return items


def _item(cls: type[Operation], d: OpDef, space: bool, t: str) -> Item:
    if t.startswith(("custom<", "lines<")):
        return Item(t[:t.index("<")], space, t[t.index("<") + 1:-1])
    if not t.startswith(("$", "@$")):
        return Item("lit", space, t)
    name = _field(cls, d, t)
    kind = d.kinds[name]
    if kind in ("region", "bare_region"):
        return Item("region", space, kind, (name,))
    if kind in ("result", "results", "other"):
        raise FormatError(f"{cls.__name__}: ${name} ({kind}) cannot be printed alone")
    return Item("var", space, "symbol" if t[0] == "@" else kind, (name,),
                anchor=name if t.endswith("^") else "")


def _group_end(toks: list[tuple[bool, str]], i: int) -> int | None:
    """Index of the `)?` closing the `(` at i, or None if that `(` is a literal."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j][1]
        depth += t in ("(", "type(", "typed(")
        depth -= t in (")", ")?")
        if depth == 0:
            return j if t == ")?" else None
    return None


def _field(cls: type[Operation], d: OpDef, tok: str) -> str:
    name = tok.lstrip("@$").rstrip("^")
    if name not in d.kinds:
        raise FormatError(f"{cls.__name__}: format names unknown field ${name}")
    return name


# ---------------------------------------------------------------------- printer generation
_PRINT = {"operand": "p.v({})", "operands": "p.vs({})", "int": "{}", "str": "{}", "type": "{}",
          "float": "_float({})", "ints": "_ints({})", "affines": "p.affs({})",
          "attrs": "_attr_dict({})", "symbol": '"@" + {}'}
"""Field kind → the expression printing `self.<field>`."""

_NAMESPACE: dict[str, Any] = {
    "_ints": Printer.ints, "_types": lambda vs: Printer.types([v.type for v in vs]),
    "_result_types": lambda vs: Printer.result_types([v.type for v in vs]),
    "_typed": lambda p, vs: ", ".join([f"{p.v(v)} : {v.type}" for v in vs]),
    "_attr_dict": lambda a: "{" + ", ".join(f"{k} = {fmt_attr(v)}" for k, v in a.items()) + "}",
    "_float": lambda x: fmt_attr(float(x)),
    "_results_eq": lambda p, vs: (p.vs(vs) + " = ") if vs else "",
}


def _expr(item: Item, d: OpDef) -> str:
    f = f"self.{item.fields[0]}" if item.fields else ""
    if item.kind == "var":
        return f'"{item.fields[0]}"' if item.text == "bool" else _PRINT[item.text].format(f)
    if item.kind == "typed":
        return f"_typed(p, {f})"
    if item.kind == "custom":
        return f"self.print_{item.text}(p)"
    if item.kind == "group":
        return _concat(item.items, d)
    wrap = {"operands": "_types({})", "results": "_result_types({})"}  # type(...)
    return wrap.get(d.kinds[item.fields[0]], "{}.type").format(f)


def _optional(item: Item, d: OpDef) -> str | None:
    """When an element may print nothing: the condition under which it prints."""
    name = item.anchor if item.kind == "group" else item.fields[0] if item.fields else ""
    if item.kind == "group" or (item.kind == "var" and item.text in ("bool", "attrs")):
        return f"self.{name}" + (" is not None" if d.kinds[name] == "type" else "")
    return None


def _concat(items: list[Item], d: OpDef) -> str:
    """A string expression (double-quoted literals) printing `items` unconditionally."""
    parts = [f'"{" " if i.space else ""}{i.text}"' if i.kind == "lit" else
             (' " " + ' if i.space else "") + f"str({_expr(i, d)})" for i in items]
    return " + ".join(parts) or '""'


def _printer_source(cls: type[Operation], d: OpDef) -> str:
    single = d.single_result
    head = f"{{p.v(self.{single})}} = " if single else \
        f"{{_results_eq(p, self.{d.results[0][0]})}}" if d.results else ""
    family = getattr(cls, "FAMILY", None)
    body = head + (f"{family[0]}{{self.{family[1]}}}" if family else cls.NAME)
    items = list(d.format)
    last = items.pop() if items and items[-1].kind in ("region", "lines") else None
    for i in items:
        sep = " " if i.space else ""
        cond = _optional(i, d)
        if i.kind == "lit":
            body += (sep + i.text).replace("{", "{{").replace("}", "}}")
        elif cond:
            inner = i.items if i.kind == "group" else [dataclasses.replace(i, space=False)]
            body += f'{{("{sep}" + {_concat(inner, d)}) if {cond} else ""}}'
        else:
            body += sep + "{" + _expr(i, d) + "}"
    header = f"f'{body}'"
    if last is None:
        call = f"p.line({header})"
    elif last.kind == "region":
        call = f"p.region({header}, self.{last.fields[0]}, {last.text == 'region'})"
    else:
        call = f"self.print_{last.text}(p, {header})"
    return f"def print(self, p):\n    {call}\n"


def _method(source: str, name: str) -> Callable[..., Any]:
    scope: dict[str, Any] = {}
    exec(compile(source, f"<op_def {name}>", "exec"), dict(_NAMESPACE), scope)
    return next(iter(scope.values()))


# ---------------------------------------------------------------------- parsing
_READ: dict[str, Callable[[Parser], Any]] = {
    "int": lambda ps: ps.sint(), "float": lambda ps: ps.fnum(), "str": lambda ps: ps.word(),
    "ints": lambda ps: tuple(ps.int_list()), "affines": lambda ps: ps.affine_list(),
    "attrs": lambda ps: ps.attr_dict() if ps.peek() == "{" else {},
    "type": lambda ps: ps.type_(), "symbol": lambda ps: ps.symbol(),
}
_FIRST = {"ints": "[", "affines": "[", "attrs": "{"}


def _starts(item: Item, ps: Parser) -> bool:
    """Whether the next token can begin `item` (the first element of an optional group)."""
    if item.kind == "lit":
        return ps.peek() == item.text
    if item.text in ("operand", "operands"):
        return ps.at_value()
    if item.text == "type":
        return ps.at_type()
    return ps.peek() == (item.fields[0] if item.text == "bool" else _FIRST.get(item.text))


def _parse(item: Item, ps: Parser, st: ParseState) -> None:
    k, names = item.kind, item.fields
    if k == "lit":
        ps.expect(item.text)
    elif k == "var":
        n = names[0]
        if item.text in ("operand", "operands"):
            st.uses[n] = ps.use() if item.text == "operand" else ps.uses()
        else:
            st.values[n] = ps.accept(n) if item.text == "bool" else _READ[item.text](ps)
    elif k == "type":
        _parse_type(names, ps, st)
    elif k == "typed":
        def typed_use() -> Any:
            v, tok = ps.use()
            ps.expect(":")
            return ps.check(v, ps.type_(), tok)

        st.values[names[0]] = ps.commas(ps.at_value, typed_use)
    elif k in ("custom", "lines"):
        getattr(st.cls, f"parse_{item.text}")(ps, st)
    elif k == "region":
        st.values[names[0]] = ps.region(item.text == "region")
    elif _starts(item.items[0], ps):  # a group that is there
        for i in item.items:
            _parse(i, ps, st)
    else:  # a group that is not: its operand lists are empty
        for i in item.items:
            if i.kind == "var" and i.text == "operands":
                st.values[i.fields[0]] = []


def _parse_type(names: tuple[str, ...], ps: Parser, st: ParseState) -> None:
    kinds = [st.cls.DEF.kinds[n] for n in names]
    if kinds[0] == "operands":
        ts = ps.types_list()
        vals, toks = st.uses[names[0]]
        if len(ts) != len(vals):
            ps.fail(st.tok, "TYPE-0", f"{len(vals)} operands but {len(ts)} types")
        st.values[names[0]] = [ps.check(v, t, tok) for v, t, tok in zip(vals, ts, toks,
                                                                        strict=True)]
    elif kinds[0] == "results":
        st.result_types[names[0]] = ps.result_types()
    else:
        t = ps.type_()
        for name, kind in zip(names, kinds, strict=True):
            if kind == "operand":
                v, tok = st.uses[name]
                st.values[name] = ps.check(v, t, tok)
            else:
                st.result_types[name] = [t]


def parse_op(ps: Parser, cls: type[Operation], fixed: dict[str, str], tok: int
             ) -> ParseState:
    """Run `cls`'s parse program after its name; the caller builds the op from the state."""
    st = ParseState(cls, tok, dict(fixed))
    for item in cls.DEF.format:
        _parse(item, ps, st)
    return st


# ---------------------------------------------------------------------- the decorator
OpT = TypeVar("OpT", bound=type[Operation])


@dataclass_transform(eq_default=False, field_specifiers=(dataclasses.field,))
def op_def(cls: OpT) -> OpT:
    """Make `cls` a dataclass and derive its generic views, printer and parse program."""
    cls = dataclass(eq=False)(cls)  # type: ignore[assignment]
    d = OpDef()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = d.kinds[f.name] = _KINDS.get(str(f.type), "other")
        group = {"operand": d.operands, "operands": d.operands, "result": d.results,
                 "results": d.results}.get(kind)
        if group is not None:
            group.append((f.name, kind.endswith("s")))
        elif kind in ("region", "bare_region"):
            d.regions.append(f.name)
        else:
            d.attributes.append(f.name)
    cls.DEF = d
    for method, items in (("operands", d.operands), ("results", d.results),
                          ("regions", [(r, False) for r in d.regions])):
        if method not in cls.__dict__:
            body = ", ".join(f"*self.{f}" if var else f"self.{f}" for f, var in items)
            setattr(cls, method, _method(f"def {method}(self):\n    return [{body}]\n",
                                         cls.__name__))
    family = getattr(cls, "FAMILY", None)
    if family is not None:
        cls.name = property(_method(  # type: ignore[assignment]
            f"def name(self):\n    return {family[0]!r} + self.{family[1]}\n", cls.__name__))
    if cls.FORMAT:
        d.format = _compile(cls, d)
        if "print" not in cls.__dict__:
            cls.print = _method(_printer_source(cls, d), cls.__name__)  # type: ignore
        if family is None:
            OPS[cls.NAME] = (cls, {})
        elif getattr(cls, "KINDS", None) is None:
            OPEN_FAMILIES[family[0]] = (cls, family[1])
        else:
            kinds: dict[str, Any] = cls.KINDS  # type: ignore[attr-defined]
            OPS.update({family[0] + k: (cls, {family[1]: k}) for k in kinds})
    return cls
