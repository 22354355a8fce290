"""lark parser for the textual Spatial IR; builds ops while parsing (LALR callbacks).

Syntax errors become `ParseError` (file:line:col, the line and a caret); semantic
errors found while resolving names and annotated types become `ParseError` with a
rule id (SSA-1 undefined value, SSA-2 redefinition, TYPE-0 annotation mismatch).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from raptor.ir.core import Affine, Block, Location, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    BinaryOp,
    BlueprintEntry,
    BlueprintOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    ConcatOp,
    CoreBatchOp,
    CoreOp,
    DeferredCommunicationOp,
    EmptyOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    InsertSliceOp,
    LaneResultOp,
    LoadOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    PlanOp,
    ReduceOp,
    ReshapeOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    TransposeOp,
    UnaryOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import INDEX, TensorType, Type, parse_type


class ParseError(Exception):
    """Input that is not a Spatial IR program. `rule` is set for semantic errors."""

    def __init__(self, loc: Location, message: str, source_line: str = "", rule: str = "") -> None:
        self.loc, self.rule, self.message = loc, rule, message
        tag = f"[{rule}] " if rule else ""
        text = f"{loc}: error: {tag}{message}"
        if source_line:
            text += f"\n  {source_line}\n  {' ' * (loc.col - 1)}^"
        super().__init__(text)


class _Semantic(Exception):
    def __init__(self, token: Token | None, rule: str, message: str) -> None:
        super().__init__(message)
        self.token, self.rule, self.message = token, rule, message


@cache
def _grammar() -> str:
    return resources.files("raptor.ir").joinpath("grammar.lark").read_text()


def _ints(xs: list[Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


class _Builder(Transformer[Token, Any]):
    """LALR callbacks. Scopes open at `{` (and at `func.func`) and close at `}`."""

    def __init__(self, filename: str) -> None:
        super().__init__()
        self.filename = filename
        self.scopes: list[dict[str, Value]] = [{}]
        self.closed: dict[str, Value] = {}
        self.on_core: dict[str, int] = {}

    # ---- names and scopes ------------------------------------------------
    def loc(self, tok: Token) -> Location:
        return Location(self.filename, tok.line or 0, tok.column or 0)

    def define(self, tok: Token, type: Type) -> Value:
        name = str(tok)[1:]
        for scope in self.scopes:
            if name in scope:
                raise _Semantic(tok, "SSA-2", f"value %{name} is defined twice")
        v = Value(type, name)
        self.scopes[-1][name] = v
        return v

    def lookup(self, tok: Token) -> Value:
        name = str(tok)[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.on_core:
            raise _Semantic(tok, "SCH-3", f"%{name} is defined on core {self.on_core[name]} and "
                            "not visible here; cross-core values need spat.channel_send/receive")
        raise _Semantic(tok, "SSA-1", f"use of undefined value %{name}")

    def check(self, use: tuple[Value, Token], t: Type) -> Value:
        v, tok = use
        if v.type != t:
            raise _Semantic(tok, "TYPE-0", f"%{v.name} has type {v.type} but is annotated {t}")
        return v

    # ---- structure -------------------------------------------------------
    def func_kw(self, _: list[Any]) -> None:
        self.scopes.append({})
        self.on_core = {}

    def lbrace(self, _: list[Any]) -> None:
        self.scopes.append({})

    def rbrace(self, _: list[Any]) -> None:
        self.closed = self.scopes.pop()

    def _core_values(self, cores: tuple[int, ...]) -> None:
        """Remember what a core program defined, to name cross-core uses (SCH-3)."""
        for name in self.closed:
            self.on_core[name] = cores[0]

    def start(self, funcs: list[FuncOp]) -> list[FuncOp]:
        return funcs

    def type(self, c: list[Token]) -> Type:
        try:
            return parse_type(str(c[0]))
        except ValueError as e:
            raise _Semantic(c[0], "TYPE-0", str(e)) from None

    def types(self, c: list[Type]) -> list[Type]:
        return list(c)

    def types_ret(self, c: list[Any]) -> list[Type]:
        if not c:
            return []
        return c[0] if isinstance(c[0], list) else [c[0]]

    def arg(self, c: list[Any]) -> Value:
        return self.define(c[0], c[1])

    def block_header(self, c: list[Any]) -> list[Value]:
        return [x for x in c if isinstance(x, Value)]

    def block(self, c: list[Any]) -> Block:
        args: list[Value] = []
        ops: list[Operation] = []
        for x in c:
            if isinstance(x, list):
                args = x
            elif isinstance(x, Operation):
                ops.append(x)
        return Block(args, ops)

    def func(self, c: list[Any]) -> FuncOp:
        sym = next(x for x in c if isinstance(x, Token) and x.type == "SYMBOL")
        args = [x for x in c if isinstance(x, Value)]
        rets = next((x for x in c if isinstance(x, list)), [])
        ops = [x for x in c if isinstance(x, Operation)]
        self.scopes.pop()
        op = FuncOp(str(sym)[1:], Block(args, ops), rets)
        op.loc = self.loc(sym)
        return op

    def use(self, c: list[Token]) -> tuple[Value, Token]:
        return (self.lookup(c[0]), c[0])

    def uses(self, c: list[tuple[Value, Token]]) -> list[tuple[Value, Token]]:
        return list(c)

    def typed_use(self, c: list[Any]) -> Value:
        return self.check(c[0], c[1])

    def ins(self, c: list[Value]) -> list[Value]:
        return list(c)

    # ---- numbers, affine, attributes ---------------------------------------
    def sint(self, c: list[Token]) -> int:
        return -int(c[-1]) if len(c) == 2 else int(c[-1])

    def fnum(self, c: list[Token]) -> float:
        return -float(c[-1]) if len(c) == 2 else float(c[-1])

    fnum_attr = fnum

    def int_list(self, c: list[int]) -> list[int]:
        return list(c)

    def a_const(self, c: list[Token]) -> Affine:
        return Affine(int(c[0]))

    def index_use(self, use: tuple[Value, Token]) -> Value:
        v, tok = use
        if v.type != INDEX:
            raise _Semantic(tok, "TYPE-0", f"offset uses %{v.name} of type {v.type}; affine "
                            "offsets may only use index values (the lane or a slot variable)")
        return v

    def a_scaled(self, c: list[Any]) -> Affine:
        return Affine(0, ((int(c[0]), self.index_use(c[1])),))

    def a_var(self, c: list[Any]) -> Affine:
        return Affine(0, ((1, self.index_use(c[0])),))

    def a_neg(self, c: list[Any]) -> Affine:
        a: Affine = c[-1]
        return Affine(-a.const, tuple((-k, v) for k, v in a.terms))

    def a_plus(self, _: list[Any]) -> int:
        return 1

    def a_minus(self, _: list[Any]) -> int:
        return -1

    def affine(self, c: list[Any]) -> Affine:
        const, terms = c[0].const, list(c[0].terms)
        for sign, a in zip(c[1::2], c[2::2], strict=True):
            const += sign * a.const
            terms += [(sign * k, v) for k, v in a.terms]
        return Affine(const, tuple(terms))

    def affine_list(self, c: list[Affine]) -> tuple[Affine, ...]:
        return tuple(c)

    def attrs(self, c: list[tuple[str, Any]]) -> dict[str, Any]:
        return dict(c)

    def attr(self, c: list[Any]) -> tuple[str, Any]:
        return (str(c[0]), c[1])

    def a_string(self, c: list[Token]) -> str:
        s = str(c[0])[1:-1]
        return s.replace('\\"', '"').replace("\\\\", "\\")

    def a_true(self, _: list[Any]) -> bool:
        return True

    def a_false(self, _: list[Any]) -> bool:
        return False

    def a_list(self, c: list[Any]) -> list[Any]:
        return list(c)

    # ---- ops ---------------------------------------------------------------
    def assign(self, c: list[Any]) -> Operation:
        names: list[Token] = [x for x in c if isinstance(x, Token) and x.type == "VALUE"]
        op: Operation = c[-1]
        spec: list[Type] = op._result_types  # type: ignore[attr-defined]
        del op._result_types  # type: ignore[attr-defined]
        if len(names) != len(spec):
            raise _Semantic(names[0], "TYPE-0", f"{len(names)} results named but the op has "
                            f"{len(spec)}")
        values = [self.define(n, t) for n, t in zip(names, spec, strict=True)]
        _bind_results(op, values)
        op.own_results()
        return op

    def _pending(self, op: Operation, tok: Token, result_types: list[Type]) -> Operation:
        op.loc = self.loc(tok)
        op._result_types = result_types  # type: ignore[attr-defined]
        return op

    def _compute(self, cls: builtins.type[ComputeOp], c: list[Any], **kw: Any) -> Operation:
        ins, rets = [x for x in c if isinstance(x, list)]
        op = cls(inputs=ins, outs=[], body=c[-1], **kw)
        return self._pending(op, c[0], rets)

    def batch(self, c: list[Any]) -> Operation:
        assembly = any(isinstance(x, Token) and x.type == "ASSEMBLY" for x in c)
        return self._compute(GraphComputeBatchOp, c, lanes=int(c[1]), assembly=assembly)

    def gcompute(self, c: list[Any]) -> Operation:
        return self._compute(GraphComputeOp, c)

    def deferred(self, c: list[Any]) -> Operation:
        return self._compute(DeferredCommunicationOp, c)

    def scompute(self, c: list[Any]) -> Operation:
        return self._compute(ScheduledComputeOp, c)

    def sbatch(self, c: list[Any]) -> Operation:
        return self._compute(ScheduledComputeBatchOp, c, lanes=int(c[1]))

    def bp_single(self, c: list[Token]) -> tuple[int, None, int]:
        return (int(c[0]), None, 0)

    def bp_family(self, c: list[Token]) -> tuple[int, Value, int]:
        self.scopes.append({})
        var = self.define(c[0], INDEX)
        return (int(c[1]), var, int(c[2]))

    def bp_entry(self, c: list[Any]) -> tuple[BlueprintEntry, tuple[Value, Token] | None]:
        slot, var, hi = c[0]
        of = c[1] if len(c) == 5 else None
        offsets, sizes, strides = c[-3], c[-2], c[-1]
        if var is not None:
            self.scopes.pop()
        entry = BlueprintEntry(-1, slot, offsets, _ints(sizes), _ints(strides), var, hi)
        return (entry, of)

    def blueprint(self, c: list[Any]) -> Operation:
        srcs: list[tuple[Value, Token]] = c[1]
        types: list[Type] = c[2]
        if len(types) != len(srcs):
            raise _Semantic(c[0], "TYPE-0", f"{len(srcs)} operands but {len(types)} types")
        sources = [self.check(u, t) for u, t in zip(srcs, types, strict=True)]
        entries = []
        for entry, of in c[6:]:
            if of is None:
                entry.source = 0 if len(sources) == 1 else len(sources)
            else:
                entry.source = next((i for i, s in enumerate(sources) if s is of[0]), -1)
                if entry.source < 0:
                    raise _Semantic(of[1], "BP-1", f"slot {entry.slot} names %{of[0].name}, "
                                    "which is not an operand of this blueprint")
            entries.append(entry)
        op = BlueprintOp(sources, Value(c[3]), entries, str(c[4]), str(c[5]))
        return self._pending(op, c[0], [c[3]])

    def weight(self, c: list[Any]) -> Operation:
        return self._pending(WeightOp(Value(c[2]), str(c[1])[1:]), c[0], [c[2]])

    def plan(self, c: list[Any]) -> Operation:
        tok = c[0]
        uses_: list[tuple[Value, Token]] = next(
            (x for x in c[1:] if isinstance(x, list) and x and isinstance(x[0], tuple)), [])
        attrs = next((x for x in c[1:] if isinstance(x, dict)), {})
        lists = [x for x in c[1:] if isinstance(x, list) and (not x or not isinstance(x[0], tuple))]
        in_types, out_types = (lists[0], lists[1]) if len(lists) == 2 else ([], lists[0])
        if len(in_types) != len(uses_):
            raise _Semantic(tok, "TYPE-0", f"{len(uses_)} operands but {len(in_types)} types")
        ins = [self.check(u, t) for u, t in zip(uses_, in_types, strict=True)]
        op = PlanOp(str(tok)[len("spat.plan."):], ins, [], attrs)
        return self._pending(op, tok, out_types)

    def materialize(self, c: list[Any]) -> Operation:
        op = MaterializeLayoutOp(self.check(c[1], c[4]), Value(c[4]), str(c[2]), str(c[3]))
        return self._pending(op, c[0], [c[4]])

    def extract(self, c: list[Any]) -> Operation:
        src = self.check(c[1], c[5])
        op = ExtractSliceOp(src, Value(c[6]), c[2], _ints(c[3]), _ints(c[4]))
        return self._pending(op, c[0], [c[6]])

    def insert(self, c: list[Any]) -> Operation:
        src, dst = self.check(c[1], c[6]), self.check(c[2], c[7])
        op = InsertSliceOp(src, dst, Value(c[7]), c[3], _ints(c[4]), _ints(c[5]))
        return self._pending(op, c[0], [c[7]])

    def pis_op(self, c: list[Any]) -> Operation:
        src, dst = self.check(c[1], c[6]), self.check(c[2], c[7])
        op = ParallelInsertSliceOp(src, dst, c[3], _ints(c[4]), _ints(c[5]))
        op.loc = self.loc(c[0])
        return op

    def reshape(self, c: list[Any]) -> Operation:
        op = ReshapeOp(self.check(c[1], c[2]), Value(c[3]))
        return self._pending(op, c[0], [c[3]])

    def transpose(self, c: list[Any]) -> Operation:
        op = TransposeOp(self.check(c[1], c[3]), Value(c[4]), _ints(c[2]))
        return self._pending(op, c[0], [c[4]])

    def concat(self, c: list[Any]) -> Operation:
        srcs, types = c[2], c[3]
        if len(srcs) != len(types):
            raise _Semantic(c[0], "TYPE-0", f"{len(srcs)} operands but {len(types)} types")
        sources = [self.check(u, t) for u, t in zip(srcs, types, strict=True)]
        op = ConcatOp(sources, Value(c[4]), int(c[1]))
        return self._pending(op, c[0], [c[4]])

    def pad(self, c: list[Any]) -> Operation:
        op = PadOp(self.check(c[1], c[5]), Value(c[6]), _ints(c[2]), _ints(c[3]), c[4])
        return self._pending(op, c[0], [c[6]])

    def empty(self, c: list[Any]) -> Operation:
        return self._pending(EmptyOp(Value(c[1])), c[0], [c[1]])

    def mvm(self, c: list[Any]) -> Operation:
        op = MvmOp(self.check(c[1], c[3]), self.check(c[2], c[4]), Value(c[5]))
        return self._pending(op, c[0], [c[5]])

    def binary(self, c: list[Any]) -> Operation:
        types = [x for x in c[3:] if x is not None]
        ta, tb, tr = (types * 3) if len(types) == 1 else types
        op = BinaryOp(str(c[0])[4:], self.check(c[1], ta), self.check(c[2], tb), Value(tr))
        return self._pending(op, c[0], [tr])

    def unary(self, c: list[Any]) -> Operation:
        attrs = next((x for x in c if isinstance(x, dict)), {})
        t = c[-1]
        op = UnaryOp(str(c[0])[4:], self.check(c[1], t), Value(t), attrs)
        return self._pending(op, c[0], [t])

    def reduce(self, c: list[Any]) -> Operation:
        op = ReduceOp(str(c[0])[4:], self.check(c[1], c[3]), Value(c[4]), _ints(c[2]))
        return self._pending(op, c[0], [c[4]])

    def receive(self, c: list[Any]) -> Operation:
        op = ChannelReceiveOp(Value(c[3]), int(c[1]), int(c[2]))
        return self._pending(op, c[0], [c[3]])

    def lane_result(self, c: list[Any]) -> Operation:
        op = LaneResultOp(Value(c[4]), self.check(c[1], c[3]), int(c[2]))
        return self._pending(op, c[0], [c[4]])

    def alloc(self, c: list[Any]) -> Operation:
        return self._pending(AllocSharedOp(Value(c[1])), c[0], [c[1]])

    def load(self, c: list[Any]) -> Operation:
        op = LoadOp(self.check(c[1], c[5]), Value(c[6]), c[2], _ints(c[3]), _ints(c[4]))
        return self._pending(op, c[0], [c[6]])

    def _located(self, op: Operation, tok: Token) -> Operation:
        op.loc = self.loc(tok)
        return op

    def return_op(self, c: list[Any]) -> Operation:
        return self._located(ReturnOp(self._typed(c)), c[0])

    def yield_op(self, c: list[Any]) -> Operation:
        return self._located(YieldOp(self._typed(c)), c[0])

    def _typed(self, c: list[Any]) -> list[Value]:
        if len(c) < 3 or c[1] is None:
            return []
        uses_, types = c[1], c[2]
        if len(uses_) != len(types):
            raise _Semantic(c[0], "TYPE-0", f"{len(uses_)} values but {len(types)} types")
        return [self.check(u, t) for u, t in zip(uses_, types, strict=True)]

    def send_op(self, c: list[Any]) -> Operation:
        if isinstance(c[2], tuple):  # a region: SEND use offs sizes strides core ch T -> M
            msg = c[8] if len(c) == 9 else None
            if not isinstance(msg, TensorType):
                raise _Semantic(c[0], "TYPE-0", "a region send needs its message tensor type "
                                "(`: T -> M`)")
            op = ChannelSendOp(self.check(c[1], c[7]), int(c[5]), int(c[6]), c[2],
                               _ints(c[3]), _ints(c[4]), msg)
        else:
            if len(c) != 5:
                raise _Semantic(c[0], "TYPE-0", "`-> M` is only for a send of a region")
            op = ChannelSendOp(self.check(c[1], c[4]), int(c[2]), int(c[3]))
        return self._located(op, c[0])

    def store_op(self, c: list[Any]) -> Operation:
        val, buf = self.check(c[1], c[6]), self.check(c[2], c[7])
        return self._located(StoreOp(val, buf, c[3], _ints(c[4]), _ints(c[5])), c[0])

    def core_op(self, c: list[Any]) -> Operation:
        self._core_values((int(c[1]),))
        return self._located(CoreOp(int(c[1]), c[2]), c[0])

    def core_batch_op(self, c: list[Any]) -> Operation:
        self._core_values(_ints(c[1]))
        return self._located(CoreBatchOp(_ints(c[1]), c[2]), c[0])


def _bind_results(op: Operation, values: list[Value]) -> None:
    """Put parsed result values into the op's typed fields."""
    if isinstance(op, ComputeOp | PlanOp):
        op.outs = values
    else:
        # single-result ops keep their placeholder in `result`; swap it for the named value
        op.result = values[0]  # type: ignore[attr-defined]


@cache
def _parser() -> tuple[Lark, _Builder]:
    """One LALR table for the process; the callbacks object is reset per parse."""
    builder = _Builder("<string>")
    lark = Lark(_grammar(), parser="lalr", lexer="contextual", transformer=builder,
                maybe_placeholders=False)
    return lark, builder


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _describe(e: UnexpectedInput, line: str, col: int) -> str:
    if isinstance(e, UnexpectedEOF):
        return "unexpected end of input (truncated program?)"
    if isinstance(e, UnexpectedCharacters):
        return f"unexpected character {e.char!r}"
    tok = getattr(e, "token", None)
    if tok is not None and tok.type == "$END":
        return "unexpected end of input (truncated program?)"
    expected = sorted(getattr(e, "expected", set()) or [])
    word = _WORD.match(line, col - 1)
    if word and "." in word.group(0) and ("EXTRACT" in expected or "RETURN" in expected):
        return f"unknown or misplaced operation '{word.group(0)}'"
    shown = ", ".join(expected[:8]) + (", ..." if len(expected) > 8 else "")
    return f"unexpected {str(tok)!r}" + (f"; expected one of: {shown}" if shown else "")


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse a whole program. Raises `ParseError` with file:line:col."""
    if "\x00" in text:
        raise ParseError(Location(filename, 1, 1), "input is binary, not Spatial IR text")
    lines = text.splitlines()

    def src(line: int) -> str:
        return lines[line - 1] if 0 < line <= len(lines) else ""

    lark, builder = _parser()
    builder.filename, builder.scopes, builder.on_core = filename, [{}], {}
    try:
        funcs: list[FuncOp] = lark.parse(text)  # type: ignore[assignment]
    except VisitError as e:
        raise _convert(e.orig_exc, filename, src) from None
    except _Semantic as e:
        raise _convert(e, filename, src) from None
    except UnexpectedInput as e:
        tok = getattr(e, "token", None)
        at_end = isinstance(e, UnexpectedEOF) or (tok is not None and tok.type == "$END")
        line = e.line if isinstance(e.line, int) and e.line > 0 else max(len(lines), 1)
        if at_end:
            line = max(len(lines), 1)
            while line > 1 and not src(line).strip():
                line -= 1
        col = len(src(line)) + 1 if at_end or not (isinstance(e.column, int) and e.column > 0) \
            else e.column
        raise ParseError(Location(filename, line, col), _describe(e, src(line), col),
                         src(line)) from None
    if not funcs:
        raise ParseError(Location(filename, 1, 1), "no func.func in input (empty program)")
    return Module(funcs, filename=filename)


def _convert(e: BaseException, filename: str, src: Callable[[int], str]) -> Exception:
    if isinstance(e, _Semantic):
        tok = e.token
        line = (tok.line or 1) if tok is not None else 1
        col = (tok.column or 1) if tok is not None else 1
        return ParseError(Location(filename, line, col), e.message, src(line), e.rule)
    return e if isinstance(e, Exception) else RuntimeError(str(e))


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
