"""The size of raptor/ at git revisions: physical lines, and measures that line wrapping
does not change (statement lines, AST nodes, tokens), so that a reduction can be told apart
from a reformatting.

- ``lines``: every line of every tracked ``raptor/**/*.py`` (``wc -l``);
- ``code``: lines that are not blank, comments or docstrings (attribute docstrings too);
- ``statements``: AST statement nodes; ``nodes``: all AST nodes;
- ``tokens``: Python tokens other than comments, newlines and indentation.

Usage: ``python -m benchmarks.code_size REV [REV ...]`` (default: HEAD).
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from dataclasses import astuple, dataclass

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENDMARKER}


@dataclass
class Size:
    lines: int = 0
    code: int = 0
    statements: int = 0
    nodes: int = 0
    tokens: int = 0

    def add(self, src: str) -> None:
        tree = ast.parse(src)
        docs: set[int] = set()
        for node in ast.walk(tree):  # docstrings: of modules, classes, defs and attributes
            body = getattr(node, "body", None)
            for st in body if isinstance(body, list) else []:
                if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) \
                        and isinstance(st.value.value, str):
                    docs.update(range(st.lineno, (st.end_lineno or st.lineno) + 1))
        lines = src.splitlines()
        self.lines += len(lines)
        self.code += sum(1 for k, line in enumerate(lines, 1)
                         if line.strip() and not line.strip().startswith("#") and k not in docs)
        self.statements += sum(isinstance(n, ast.stmt) for n in ast.walk(tree))
        self.nodes += sum(1 for _ in ast.walk(tree))
        self.tokens += sum(t.type not in _SKIP
                           for t in tokenize.generate_tokens(io.StringIO(src).readline))


def size(rev: str) -> Size:
    """The size of the tracked raptor/**/*.py files as committed at `rev`."""
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "raptor"],
                           capture_output=True, text=True, check=True).stdout.split()
    total = Size()
    for name in names:
        if name.endswith(".py"):
            total.add(subprocess.run(["git", "show", f"{rev}:{name}"], capture_output=True,
                                     text=True, check=True).stdout)
    return total


def main(revs: list[str]) -> None:
    print(f"{'revision':<12}" + "".join(f"{f:>12}" for f in Size.__dataclass_fields__))
    for rev in revs or ["HEAD"]:
        print(f"{rev:<12}" + "".join(f"{v:>12,}" for v in astuple(size(rev))))


if __name__ == "__main__":
    main(sys.argv[1:])
