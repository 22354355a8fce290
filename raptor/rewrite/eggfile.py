"""Load egglog rule files (`rules/*.egg`) through the low-level bindings, state facts, run
them to saturation and read the derived tables, all against the declared `schema`.

Rule files are loaded in a fixed order from `MANIFEST` (egglog's `include` resolves paths
against the working directory and panics on missing files, so it is not used). The rules
directory is, in order of precedence: an explicit argument (`--rules DIR`), the
`RAPTOR_RULES` environment variable, the directory shipped inside the package.

Everything a user's rule file can do wrong becomes one `RuleError` line naming the file: a
missing or non-UTF-8 file, a parse or type error (with line and column), an egglog panic
(whose Rust report is kept off the terminal), a relation the decoder needs that the file
does not declare as Raptor expects, a command that would run or do I/O at load time, and
a saturation that does not end within `MAX_ITERATIONS` / `MAX_SECONDS`.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

from egglog import bindings

from raptor.rewrite.schema import SCHEMAS, Schema

T = TypeVar("T")
RULES_ENV = "RAPTOR_RULES"

MANIFEST: dict[str, tuple[str, ...]] = {
    "layout": ("layout.egg",),
    "canonicalize": ("canonicalize.egg",),
}
"""Each rule program (one e-graph) and the rule files it loads, in load order."""

MAX_ITERATIONS = 10_000
MAX_SECONDS = 60.0
MATCHES_PER_FACT = 100
MATCHES_BASE = 20_000
CHUNK = 16
CHUNK_MATCHES = 200
"""Bounds of one saturation: rules that derive without end stop here with an error. The
shipped rules match about 1-3 times per fact loaded (ResNet-18: 36,885 matches on 32,331
facts); a rule whose matches grow each iteration (a join that feeds itself) triples its
time per iteration, so the match bound (`MATCHES_PER_FACT` x facts + `MATCHES_BASE`) stops
it within a second or two where the time bound would wait minutes for one iteration. One
egglog call runs up to `CHUNK` iterations while they match at most `CHUNK_MATCHES` each and
no more than before (an iteration costs little next to a call: a rule that adds one fact per
iteration reaches `MAX_ITERATIONS` in about 6 s instead of 15 s)."""

_SPAN = re.compile(r"In (\d+):(\d+)-[\d:]* of .+?: ")
_FORBIDDEN = {"RunSchedule": "run", "Include": "include", "Input": "input", "Output": "output"}
"""Commands a rule file may not hold: Raptor runs the rules and does the I/O."""


class RuleError(Exception):
    """A rule file is missing, does not parse or type-check, does not match the schema,
    made egglog panic, or does not saturate."""


def shipped_rules_dir() -> Path:
    return Path(str(files("raptor").joinpath("rules")))


def resolve_rules_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The rules directory: `explicit` > `$RAPTOR_RULES` > the shipped `raptor/rules`."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(RULES_ENV)
    return Path(env) if env else shipped_rules_dir()


def _location(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _unclosed(text: str) -> int | None:
    """The offset of the outermost `(` of `text` that is never closed (comments and strings
    skipped), or None. A missing `)` makes egglog read on to the end of the file and report
    its last line; the form it belongs to starts here."""
    opened: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == ";":
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif c == '"':
            while (i := i + 1) < n and text[i] != '"':
                i += text[i] == "\\"
        elif c == "(":
            opened.append(i)
        elif c == ")" and opened:
            opened.pop()
        i += 1
    return opened[0] if opened else None


def _format_error(exc: BaseException, path: str, text: str, offset: int | None) -> RuleError:
    """Turn an egglog error or panic into one line `file:line:col: error: message`."""
    message = str(exc).strip()
    if message.endswith("unexpected end of file") and (start := _unclosed(text)) is not None:
        return RuleError("{}:{}:{}: error: this `(` is never closed (egglog read on to the end "
                         "of the file)".format(path, *_location(text, start)))
    match = _SPAN.search(message)
    if match:
        where = f"{path}:{match.group(1)}:{match.group(2)}"
        message = message[match.end():].split("\n", 1)[-1].strip()
    elif offset is not None:
        where = "{}:{}:{}".format(path, *_location(text, offset))
    else:
        where = path
    message = " ".join(message.removeprefix("Panic: ").split()) or "no message"
    kind = "egglog panic" if type(exc).__name__ == "PanicException" else "error"
    return RuleError(f"{where}: {kind}: {message}")


@contextmanager
def _rust_stderr_silenced() -> Iterator[None]:
    """egglog's panic hook writes `thread ... panicked at` (and a backtrace) to file
    descriptor 2 before Python sees the exception; keep it off the user's terminal."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to protect
        yield
        return
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _span_start(command: object) -> int | None:
    span = getattr(command, "span", None)
    if span is None and isinstance(command, bindings.RuleCommand):
        span = command.rule.span
    return getattr(span, "i", None)


def _check_command(command: object, source: str, text: str) -> None:
    """Rules must be named (the report counts them by name); a rule file must not run
    schedules or touch files."""
    name = type(command).__name__
    word = _FORBIDDEN.get(name) or ("run-schedule" if name == "UserDefined" and
                                    getattr(command, "name", "") == "run-schedule" else None)
    start = _span_start(command)
    where = source if start is None else "{}:{}:{}".format(source, *_location(text, start))
    if isinstance(command, bindings.RuleCommand) and not command.rule.name:
        raise RuleError(f"{where}: error: rule has no :name")
    if word is not None:
        raise RuleError(f"{where}: error: a rule file declares relations and rules; Raptor "
                        f"runs them and reads the facts (remove this `{word}`)")


def _egglog(call: Callable[[], T], source: str, text: str = "", offset: int | None = None) -> T:
    """Run one egglog call with its errors (and panics: a BaseException) as `RuleError`."""
    with _rust_stderr_silenced():
        try:
            return call()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            raise _format_error(exc, source, text, offset) from None


def run_text(egraph: bindings.EGraph, text: str, source: str, user: bool = False) -> list[object]:
    """Parse `text` (named `source` in spans) and run it command by command; `user` text
    (a rule file) is also checked by `_check_command`."""
    outputs: list[object] = []
    for command in _egglog(lambda: egraph.parse_program(text, filename=source), source, text):
        if user:
            _check_command(command, source, text)
        outputs += _egglog(partial(egraph.run_program, command), source, text, _span_start(command))
    return outputs


@dataclass
class RuleProgram:
    """An e-graph with rule files loaded; facts and schedules run on top of it."""

    egraph: bindings.EGraph
    files: tuple[Path, ...]
    fired: Counter[str] = field(default_factory=Counter)
    frozen: dict[str, Any] | None = None
    constants: dict[str, dict[object, str]] = field(default_factory=dict)
    facts: int = 0
    """Facts loaded by `load_facts` (the match bound of `run_schedule` scales with them)."""
    schema: Schema = field(default_factory=lambda: Schema("rules", (), ()))
    """What `load_facts` writes and `rows` reads: the program's own (`load_program`)."""

    @property
    def where(self) -> str:
        return ", ".join(map(str, self.files)) or "<rules>"

    def run(self, text: str, source: str = "<raptor>") -> list[object]:
        """Parse and run egglog commands; errors become `RuleError`."""
        return run_text(self.egraph, text, source)

    def run_schedule(self) -> dict[str, int]:
        """Run the default ruleset to saturation, a few iterations per egglog call so that
        rules deriving without end stop at the bounds (`MAX_ITERATIONS`, `MAX_SECONDS`, and
        the match bound); return and accumulate the matches per rule `:name`."""
        max_matches = MATCHES_PER_FACT * self.facts + MATCHES_BASE
        total = done = 0
        counts: Counter[str] = Counter()
        start = time.perf_counter()
        last: dict[str, int] = {}
        steps: dict[int, list[Any]] = {}
        chunk, rate = 1, 0.0
        while True:
            n = min(chunk, MAX_ITERATIONS - done)
            if n <= 0:
                raise self._unsaturated(f"{MAX_ITERATIONS} iterations", last)
            if n not in steps:
                steps[n] = self.egraph.parse_program(
                    f"(run-schedule (repeat {n} (run)))", filename="<schedule>")
            updated = False
            for out in _egglog(partial(self.egraph.run_program, *steps[n]), self.where):
                if isinstance(out, bindings.RunScheduleOutput) and out.report.updated:
                    updated = True
                    last = dict(out.report.num_matches_per_rule)
                    counts.update(last)
                    total += sum(last.values())
            done += n
            if not updated:  # like egglog's saturate, idle iterations are not counted
                break
            # several iterations per call only while each matches little and no more than
            # before: a join that feeds itself grows threefold per iteration, and the match
            # bound must see every one of its iterations
            now = sum(last.values()) / n
            chunk = min(2 * chunk, CHUNK) if now <= min(rate, CHUNK_MATCHES) else 1
            rate = now
            if total > max_matches:
                raise self._unsaturated(f"{max_matches:,} matches ({MATCHES_PER_FACT} per fact "
                                        f"loaded + {MATCHES_BASE:,})", last)
            if time.perf_counter() - start > MAX_SECONDS:
                raise self._unsaturated(f"{MAX_SECONDS:g} s", last)
        self.fired.update(counts)
        return counts

    def _unsaturated(self, bound: str, last: dict[str, int]) -> RuleError:
        busy = sorted((n, r) for r, n in last.items() if n)[-3:]
        rules = ", ".join(f"'{r}' ({n} matches)" for n, r in reversed(busy)) or "?"
        return RuleError(f"{self.where}: error: the rules did not saturate within {bound}; "
                         f"still firing in the last iterations: {rules} (a rule that derives "
                         "new facts without end?)")

    def load_facts(self, rows: Mapping[str, Sequence[tuple[Any, ...]]]) -> None:
        """Bulk-load the schema's facts (`(input rel "file.tsv")`, one row per line in the
        declared column order); relations without rows load empty."""
        with tempfile.TemporaryDirectory(prefix=f"raptor-{self.schema.program}-") as tmp:
            commands = []
            for rel in self.schema.facts:
                path = Path(tmp) / f"{rel.name}.tsv"
                lines = ["\t".join(map(str, row)) + "\n" for row in rows.get(rel.name, ())]
                if any(line.count("\t") != len(rel.columns) - 1 for line in lines):
                    raise ValueError(f"a {rel.name} fact does not have the columns "
                                     f"{rel.columns} (or holds a tab)")
                path.write_text("".join(lines), encoding="utf-8")
                commands.append(f'(input {rel.name} "{path.as_posix()}")')
                self.facts += len(lines)
            self.run("\n".join(commands), f"<{self.schema.program} facts>")

    def rows(self, name: str) -> list[tuple[Any, ...]]:
        """The rows of the schema's table `name` (after `run_schedule`), decoded by its sorts:
        `i64` to int, `String` to str, a nullary constructor (`Layout`'s `DenseNCHW`, ...)
        to its name, any other datatype value kept as an opaque key."""
        rel = next(r for r in self.schema.reads if r.name == name)
        if self.frozen is None:
            self.frozen = self.egraph.freeze().functions
            for fn_name, f in self.frozen.items():
                if not f.input_sorts and f.rows and not f.is_let_binding \
                        and f.output_sort not in ("i64", "String"):
                    self.constants.setdefault(f.output_sort, {})[f.rows[0].output] = fn_name
        decode = {"i64": self.egraph.value_to_i64, "String": self.egraph.value_to_string}
        fns = [decode.get(s) or partial(_named, self.constants.get(s, {})) for s in rel.sorts]
        table = self.frozen.get(rel.name)
        return [tuple(f(c) for f, c in zip(fns, row.inputs if rel.output is None
                                           else [*row.inputs, row.output], strict=True))
                for row in (table.rows if table is not None else ())]


def _named(names: dict[object, str], value: object) -> object:
    return names.get(value, value)


def check_schema(program: RuleProgram) -> None:
    """Every relation the program's schema writes or reads is declared by the rule files with the
    same sorts (and, for a function, the same output sort)."""
    frozen = _egglog(lambda: program.egraph.freeze().functions, program.where)
    for role, rels in (("writes", program.schema.facts), ("reads", program.schema.reads)):
        for rel in rels:
            fn = frozen.get(rel.name)
            inputs = rel.sorts if rel.output is None else rel.sorts[:-1]
            relation = fn is not None and fn.output_sort.startswith("@")
            if fn is None or list(fn.input_sorts) != list(inputs) or \
                    (rel.output is None) != relation or \
                    (rel.output is not None and fn.output_sort != rel.output):
                got = "is not declared" if fn is None else \
                    f"is declared with sorts ({' '.join(fn.input_sorts)})" + \
                    ("" if relation else f" -> {fn.output_sort}")
                raise RuleError(f"{program.where}: error: {rel.name}, which Raptor {role}, "
                                f"{got}; expected {rel.spelling()} (columns: "
                                f"{', '.join(rel.columns)})")


def load_files(paths: Iterable[Path]) -> RuleProgram:
    """A fresh e-graph with the given rule files run in order."""
    egraph = bindings.EGraph()
    loaded = tuple(paths)
    for path in loaded:
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise RuleError(f"{path}: error: cannot read rule file: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            line, col = _location(exc.object.decode("utf-8", "replace"), exc.start)
            raise RuleError(f"{path}:{line}:{col}: error: not UTF-8 text") from None
        run_text(egraph, text, str(path), user=True)
    return RuleProgram(egraph, loaded)


def load_program(name: str, rules_dir: str | os.PathLike[str] | None = None) -> RuleProgram:
    """Load the rule program `name` of `MANIFEST` from the resolved rules directory and
    check it against its schema."""
    directory = resolve_rules_dir(rules_dir)
    if name not in MANIFEST:
        raise RuleError(f"unknown rule program {name!r} (known: {', '.join(MANIFEST)})")
    program = load_files(directory / f for f in MANIFEST[name])
    program.schema = SCHEMAS[name]
    check_schema(program)
    return program
