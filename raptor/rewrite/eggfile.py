"""Load and check egglog rule files (`rules/*.egg`) through the low-level bindings.

Rule files are loaded in a fixed order from `MANIFEST` (egglog's `include` resolves paths
against the working directory and panics on missing files, so it is not used). The rules
directory is, in order of precedence: an explicit argument (`--rules DIR`), the
`RAPTOR_RULES` environment variable, the directory shipped inside the package.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from egglog import bindings

RULES_ENV = "RAPTOR_RULES"

MANIFEST: dict[str, tuple[str, ...]] = {
    "layout": ("layout.egg",),
    "canonicalize": ("canonicalize.egg",),
}
"""Each rule program (one e-graph) and the rule files it loads, in load order."""

_SPAN = re.compile(r"In (\d+):(\d+)-[\d:]* of .+?: ")


class RuleError(Exception):
    """A rule file is missing, does not parse or type-check, or made egglog panic."""


def resolve_rules_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The rules directory: `explicit` > `$RAPTOR_RULES` > the shipped `raptor/rules`."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(RULES_ENV)
    if env:
        return Path(env)
    return Path(str(files("raptor").joinpath("rules")))


def _location(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _format_error(exc: BaseException, path: str, text: str, offset: int | None) -> RuleError:
    """Turn an egglog error or panic into `file:line:col: error: message`."""
    message = str(exc).strip()
    match = _SPAN.search(message)
    if match:
        where = f"{path}:{match.group(1)}:{match.group(2)}"
        detail = message[match.end() :].split("\n", 1)
        message = detail[1].strip() if len(detail) == 2 else detail[0].strip()
    elif offset is not None:
        line, col = _location(text, offset)
        where = f"{path}:{line}:{col}"
    else:
        where = path
    if message.startswith("Panic: "):
        message = message[len("Panic: ") :]
    kind = "egglog panic" if type(exc).__name__ == "PanicException" else "error"
    return RuleError(f"{where}: {kind}: {message}")


@dataclass
class RuleProgram:
    """An e-graph with rule files loaded; facts and schedules run on top of it."""

    egraph: bindings.EGraph
    files: tuple[Path, ...]
    fired: dict[str, int] = field(default_factory=dict)

    def run(self, text: str, source: str = "<raptor>") -> list[object]:
        """Parse and run egglog commands; errors become `RuleError`."""
        return run_text(self.egraph, text, source)

    def run_schedule(self, schedule: str = "(saturate (run))") -> dict[str, int]:
        """Run a schedule; return and accumulate the matches per rule `:name`."""
        outputs = self.run(f"(run-schedule {schedule})", "<schedule>")
        counts: dict[str, int] = {}
        for out in outputs:
            if isinstance(out, bindings.RunScheduleOutput):
                for name, n in out.report.num_matches_per_rule.items():
                    counts[name] = counts.get(name, 0) + n
        for name, n in counts.items():
            self.fired[name] = self.fired.get(name, 0) + n
        return counts


def run_text(egraph: bindings.EGraph, text: str, source: str) -> list[object]:
    """Parse `text` (named `source` in spans) and run it command by command."""
    try:
        commands = egraph.parse_program(text, filename=source)
    except BaseException as exc:  # PanicException is a BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise _format_error(exc, source, text, None) from None
    outputs: list[object] = []
    for command in commands:
        _check_named(command, source, text)
        try:
            outputs.extend(egraph.run_program(command))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            raise _format_error(exc, source, text, _span_start(command)) from None
    return outputs


def _span_start(command: object) -> int | None:
    span = getattr(command, "span", None)
    if span is None and isinstance(command, bindings.RuleCommand):
        span = command.rule.span
    return getattr(span, "i", None)


def _check_named(command: object, source: str, text: str) -> None:
    if isinstance(command, bindings.RuleCommand) and not command.rule.name:
        line, col = _location(text, _span_start(command) or 0)
        raise RuleError(f"{source}:{line}:{col}: error: rule has no :name")


def load_files(paths: Iterable[Path]) -> RuleProgram:
    """A fresh e-graph with the given rule files run in order."""
    egraph = bindings.EGraph()
    loaded = tuple(paths)
    for path in loaded:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RuleError(f"{path}: error: cannot read rule file: {exc.strerror}") from None
        run_text(egraph, text, str(path))
    return RuleProgram(egraph, loaded)


def load_program(name: str, rules_dir: str | os.PathLike[str] | None = None) -> RuleProgram:
    """Load the rule program `name` of `MANIFEST` from the resolved rules directory."""
    directory = resolve_rules_dir(rules_dir)
    if name not in MANIFEST:
        raise RuleError(f"unknown rule program {name!r} (known: {', '.join(MANIFEST)})")
    return load_files(directory / f for f in MANIFEST[name])


def check_rules(rules_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Parse and type-check every `.egg` file of a rules directory; return the errors.

    Files of one `MANIFEST` program are loaded together in order (absent ones are skipped);
    any other `.egg` file is checked on its own. Each failing program reports its first error
    as `file:line:col: error: message`.
    """
    directory = resolve_rules_dir(rules_dir)
    if not directory.is_dir():
        return [f"{directory}: error: not a rules directory"]
    present = {p.name for p in directory.glob("*.egg")}
    groups = [[f for f in names if f in present] for names in MANIFEST.values()]
    listed = {f for names in MANIFEST.values() for f in names}
    groups += [[f] for f in sorted(present - listed)]
    errors: list[str] = []
    for group in groups:
        if not group:
            continue
        try:
            load_files(directory / f for f in group)
        except RuleError as exc:
            errors.append(str(exc))
    return errors
