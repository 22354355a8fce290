"""Op declarations: one class per op holds its fields, textual format and checks.

An op is a dataclass decorated with `op_def`. The annotation of each field says what it is
(`core.Operand`, `Operands`, `Result`, `Results`, `Region`, `BareRegion`, or an attribute:
`int`, `float`, `str`, `bool`, `tuple[int, ...]`, `tuple[Affine, ...]`, `dict[str, Attr]`,
`TensorType | None`, or anything its own `custom<>`/`lines<>` directive handles); `NAME`
is the printed name, `FORMAT` the spelling after `results = NAME`, `verify` its checks.
`op_def` derives once per class the generic views (`operands()`, `results()`, `regions()`),
a printer (Python generated from the format, as fast as a hand-written one) and the op's
rule of the parser's lark grammar (`Syntax`: the rule, its name terminal, what each child
fills, and the rule's callback, also generated Python: `Syntax.read`). Families print
`FAMILY[0] + <kind field>` and register every kind of `KINDS` (all kinds when there is no
`KINDS`, as for `spat.plan.<kind>`).

The format language is MLIR's declarative assembly format reduced to what Spatial IR
spells. Elements separated by whitespace print with one space, touching ones with none
(`$source$offsets` prints `%in[0, 2*%lane]`). `$f` prints a field by its kind: `%v`,
`%a, %b`, `[1, 2]`, an affine list, a bare word (`str`), a float as `fmt_attr`, a `bool`'s
own name when true (else nothing), ` {k = v}` for a non-empty attribute dict; `@$f` a symbol;
a region (last). `type($a)` is the type of an operand or result (`type($a, $b)`: one type,
equal for both), of an operand list `T0, T1`, of a result list `T`, `(T0, T1)` or `()`;
`typed($ins)` prints `%x : T, %y : T2`. `( ... )?` is an optional group, printed when its
anchor (`$f^`) is present and parsed when its first element is next. `custom<x>` calls the
op's `print_x(p) -> str`; `lines<x>` (last) `print_x(p, header)`, which writes the header
line and the lines under it; both parse with the lark grammar fragment `SYNTAX[x]`, written
over the symbols of the parser's fixed grammar (`USE`, `uses`, `TYPE`, `types`, `SINT`,
`INTS`, `affine_list`, `bp_entry`...), whose children `parse_x(parser, state, children)`
turns into fields. Anything else is a literal; a word-like literal is a keyword that never
matches the start of a longer word.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, dataclass_transform

from raptor.ir.core import Operation
from raptor.ir.printer import Printer, fmt_attr
from raptor.ir.types import Type

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
    syntax: Syntax | None = None
    """The parse side of the format (ops with a `FORMAT`)."""

    @property
    def single_result(self) -> str | None:
        """The field of the op's one result when it has exactly one, not variadic."""
        return self.results[0][0] if len(self.results) == 1 and not self.results[0][1] else None


REGISTRY: list[type[Operation]] = []
"""Every op with a `FORMAT`, in declaration order: the parser's grammar has one rule each."""


# ---------------------------------------------------------------------- compiling formats
class FormatError(Exception):
    """A malformed op declaration (a programming error, raised at import)."""


_TOKEN = re.compile(r"(\s*)(?:(\)\?|->|@?\$\w+\^?|typed?\(|(?:custom|lines)<\w+>|[()\[\],:=]"
                    r"|[A-Za-z_][\w.]*)|(\S.*))")
"""A token with the white space before it; group 3 is text that is no token."""


def _compile(cls: type[Operation], d: OpDef) -> list[Item]:
    toks: list[tuple[bool, str]] = []
    for m in _TOKEN.finditer(cls.FORMAT):
        if m[3] is not None:
            raise FormatError(f"{cls.__name__}: bad format text at {m[3]!r}")
        toks.append((bool(m[1]), m[2]))
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
        call = f"p.region({header}, self.{last.fields[0]}, {last.text == 'region'}, " \
            f"{cls.SCOPES})"
    else:
        call = f"self.print_{last.text}(p, {header})"
    return f"def print(self, p):\n    {call}\n"


def _method(source: str, name: str, **env: Any) -> Callable[..., Any]:
    """The one function `source` defines, its globals `_NAMESPACE` and `env`."""
    scope: dict[str, Any] = {}
    exec(compile(source, f"<op_def {name}>", "exec"), {**_NAMESPACE, **env}, scope)
    return next(iter(scope.values()))


# ---------------------------------------------------------------------- grammar generation
_SYMBOL = {"operand": "USE", "operands": "[uses]", "int": "SINT", "float": "fnum", "str": "WORD",
           "ints": "INTS", "affines": "affine_list", "attrs": "[attr_dict]", "type": "TYPE",
           "symbol": "SYMBOL"}
"""Field kind → the grammar symbol (a nonterminal or terminal of the parser's fixed grammar)
that reads it; `[x]` is an optional `x` (None when absent)."""


@dataclass
class Syntax:
    """The parse side of one op: its lark rule and name terminal, and what each child of the
    rule after the name fills (`slots`, in format order)."""

    rule: str
    """Rule name and callback name, from `NAME`: `op_spat_graph_compute_batch`."""
    grammar: str
    """The op's rule, then one rule per `custom<>`/`lines<>` directive (`<rule>_<name>`)."""
    terminals: dict[str, str]
    """Name → lark definition: the name terminal (`OP_SPAT_GRAPH_COMPUTE_BATCH`; a family's
    matches every kind), one per keyword, one per `bool` flag."""
    directives: list[str]
    """The rules of its `custom<>`/`lines<>` directives (their children go to `parse_x`)."""
    slots: list[tuple[str, tuple[str, ...], bool]]
    """(what the child is, fields, whether it may be None) per child after the name, in
    format order: `use`, `uses`, `value`, `flag`, `symbol`, `typed`, `types` (an operand
    list's), `results` (a result list's), `type` (fields: `operand:f` or `result:f`) or
    `custom` (fields: the directive's name)."""
    read: Callable[..., Any] | None = None
    """`read(parser, children) -> op`, the rule's callback, generated from the slots."""


BOUNDARY = r"(?![\w.])"
"""Ends every word-like terminal: a name or keyword is never a prefix of a longer word."""


def _name_pattern(cls: type[Operation]) -> str:
    """A regular expression for the printed name(s), never a prefix of a longer word."""
    family = getattr(cls, "FAMILY", None)
    if family is None:
        body = re.escape(cls.NAME)
    else:
        kinds = getattr(cls, "KINDS", None)
        tail = "[a-z_0-9]+" if kinds is None else \
            "(?:" + "|".join(re.escape(k) for k in sorted(kinds, key=len, reverse=True)) + ")"
        body = re.escape(family[0]) + tail
    return f"(?:{body}){BOUNDARY}"


def keyword(word: str) -> tuple[str, str]:
    """A filtered terminal (its name starts with `_`) for a keyword: name and definition."""
    return "_KW_" + re.sub(r"\W", "_", word.upper()), f"/{re.escape(word)}{BOUNDARY}/"


def _lit(text: str, syntax: Syntax) -> str:
    """A literal's grammar symbol: keywords as bounded terminals, punctuation as strings."""
    if re.fullmatch(r"[A-Za-z_][\w.]*", text):
        name, definition = keyword(text)
        syntax.terminals[name] = definition
        return name
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _symbols(items: list[Item], cls: type[Operation], d: OpDef, rule: str,
             syntax: Syntax, in_group: bool = False) -> list[str]:
    """The grammar symbols of `items`; appends one slot per child they produce."""
    out = []
    for i in items:
        kind, names = i.kind, i.fields
        if kind == "lit":
            out.append(_lit(i.text, syntax))
            continue
        if kind == "group":  # `[...]`: a placeholder per child when absent
            out.append("[" + " ".join(_symbols(i.items, cls, d, rule, syntax, True)) + "]")
            continue
        if kind == "var" and i.text == "bool":
            term = f"FLAG_{names[0].upper()}"
            syntax.terminals[term] = f"/{re.escape(names[0])}{BOUNDARY}/"
            out.append(f"[{term}]")
            slot = "flag"
        elif kind == "var" and i.anchor and i.text == "operands":
            out.append("uses")  # a group is there when its anchor list is not empty
            slot = "uses"
        elif kind == "var":
            out.append(_SYMBOL[i.text])
            slot = {"operand": "use", "operands": "uses", "symbol": "symbol"}.get(i.text, "value")
        elif kind == "type" and d.kinds[names[0]] in ("operands", "results"):
            slot = "types" if d.kinds[names[0]] == "operands" else "results"
            out.append("[types]" if slot == "types" else "result_types")
        elif kind == "type":
            out.append("TYPE")
            slot = "type"
            names = tuple(("operand:" if d.kinds[n] == "operand" else "result:") + n for n in names)
        elif kind == "typed":
            out.append("[typed_uses]")
            slot = "typed"
        elif kind == "region":
            out.append("region")
            slot = "value"
        else:  # custom<x> / lines<x>: the op's own SYNTAX[x] as a rule of its own
            fragment = getattr(cls, "SYNTAX", {}).get(i.text)
            if fragment is None:
                raise FormatError(f"{cls.__name__}: {kind}<{i.text}> needs SYNTAX[{i.text!r}], "
                                  "its grammar")
            syntax.grammar += f"{rule}_{i.text}: {fragment}\n"
            syntax.directives.append(f"{rule}_{i.text}")
            out.append(f"{rule}_{i.text}")
            slot, names = "custom", (i.text,)
        syntax.slots.append((slot, names, in_group or out[-1].startswith("[")))
    return out


def _syntax(cls: type[Operation], d: OpDef) -> Syntax:
    rule = "op_" + re.sub(r"[^a-z0-9]+", "_", cls.NAME.lower())
    terminal = rule.upper()
    syntax = Syntax(rule, "", {terminal: f"/{_name_pattern(cls)}/"}, [], [])
    body = " ".join(['[defs "="]', terminal, *_symbols(d.format, cls, d, rule, syntax)])
    syntax.grammar = f"{rule}: {body}\n" + syntax.grammar
    syntax.read = _method(_reader_source(cls, syntax), f"{cls.__name__} reader", cls=cls,
                          ParseState=ParseState)
    return syntax


# ---------------------------------------------------------------------- reading an op
@dataclass(slots=True)
class ParseState:
    """What the rule of one op read: field values, operand uses still to be type-checked
    (value and token, or a list of them), result types, and the op's name token."""

    cls: type[Operation]
    tok: Any
    values: dict[str, Any]
    uses: dict[str, Any] = field(default_factory=dict)
    result_types: dict[str, list[Type]] = field(default_factory=dict)


def _reader_source(cls: type[Operation], syntax: Syntax) -> str:
    """Python for the callback of the op's rule: unpack the children (the result names, the
    name token, one child per slot), check operands against their annotations as the format
    orders them, collect field values `v` and result types `r`, and let the parser name the
    results and build the op (`Parser.make`)."""
    xs = [f"x{k}" for k, _ in enumerate(syntax.slots)]
    body = [f"names, tok, {''.join(x + ', ' for x in xs)}= c", "v, r = {}, {}"]
    family = getattr(cls, "FAMILY", None)
    if family is not None:
        body.append(f"v[{family[1]!r}] = tok.value[{len(family[0])}:]")
    uses: list[str] = []
    for x, (slot, names, optional) in zip(xs, syntax.slots, strict=True):
        f = names[0]
        if slot in ("use", "uses"):
            uses.append(f)
            body.append(f"u_{f} = {x}" + (" or []" if slot == "uses" else ""))
        elif slot in ("typed", "flag"):  # a list may be absent, a flag is its token or None
            body.append(f"v[{f!r}] = {x} " + ("is not None" if slot == "flag" else "or []"))
        elif slot == "types":
            body.append(f"v[{f!r}] = ps.check_all(u_{f}, {x} or [], tok)")
        elif slot == "custom":
            known = ", ".join(f"{u!r}: u_{u}" for u in uses)
            body.append(f"cls.parse_{f}(ps, ParseState(cls, tok, v, {{{known}}}, r), {x})")
        else:
            lines = {"value": [f"v[{f!r}] = {x}"], "symbol": [f"v[{f!r}] = {x}.value[1:]"],
                     "results": [f"r[{f!r}] = {x}"]}.get(slot) or [
                f"v[{n[8:]!r}] = u_{n[8:]}[0] if u_{n[8:]}[0].type is {x} else "
                f"ps.check(u_{n[8:]}[0], {x}, u_{n[8:]}[1])" if n.startswith("operand:")
                else f"r[{n[7:]!r}] = [{x}]" for n in names]
            if optional:
                lines = [f"if {x} is not None:", *("    " + line for line in lines)]
            body += lines
    body.append("return ps.make(cls, tok, names, v, r)")
    return "def read(ps, c):\n" + "".join(f"    {line}\n" for line in body)


# ---------------------------------------------------------------------- the decorator
OpT = TypeVar("OpT", bound=type[Operation])


@dataclass_transform(eq_default=False, field_specifiers=(dataclasses.field,))
def op_def(cls: OpT) -> OpT:
    """Make `cls` a dataclass and derive its generic views, printer and grammar rule."""
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
        d.syntax = _syntax(cls, d)
        REGISTRY.append(cls)
    return cls
