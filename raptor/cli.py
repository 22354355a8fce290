"""`raptor`: the command line. Exit codes: 0 ok, 1 verification/compile failure, 2 usage or
input error. Every expected failure is one clear line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from raptor.fileio import load_npz, save_npz_atomic
from raptor.ir.core import IRError
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.parser import ParseError, parse_file
from raptor.ir.verifier import verify_module

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """An expected failure: message for stderr and the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _parse_spat(path: str) -> Module:
    try:
        return parse_file(path)
    except ParseError as e:
        # semantic errors (undefined value, type annotation) are invalid IR: exit 1
        raise CliError(str(e), EXIT_FAIL if e.rule else EXIT_USAGE) from None


# ------------------------------------------------------------------ verify
def cmd_verify(args: argparse.Namespace) -> int:
    code = EXIT_OK
    for path in args.files:
        try:
            module = _parse_spat(path)
        except CliError as e:
            err.print(str(e), markup=False)
            code = max(code, e.code)
            continue
        diags = verify_module(module, allow_assembly=args.allow_assembly)
        for d in diags:
            err.print(str(d), markup=False)
        if diags:
            code = max(code, EXIT_FAIL)
        elif not args.quiet:
            n = sum(1 for _ in module.walk())
            out.print(f"{path}: ok ({n} ops)")
    return code


# ------------------------------------------------------------------ interpret
def _inputs_for(path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        return {}
    try:
        data = load_npz(path)
    except ValueError as e:
        raise CliError(str(e)) from None
    # np.savez(x, y) names positional arrays arr_0, arr_1: accept them as positions
    return {(k[4:] if k.startswith("arr_") and k[4:].isdigit() else k): v for k, v in data.items()}


def cmd_interpret(args: argparse.Namespace) -> int:
    module = _parse_spat(args.file)
    diags = verify_module(module, allow_assembly=True)
    if diags:
        for d in diags:
            err.print(str(d), markup=False)
        return EXIT_FAIL
    if args.weights:
        try:
            module.constants.update(load_npz(args.weights))
        except ValueError as e:
            raise CliError(str(e)) from None
    inputs = _inputs_for(args.inputs)
    try:
        results = Interpreter(module).run(inputs)
    except ValueError as e:
        raise CliError(f"{args.file}: {e}") from None
    except IRError as e:
        raise CliError(str(e), EXIT_FAIL) from None
    named = {f"result{i}": r for i, r in enumerate(results)}
    table = Table(title=f"{args.file}: @{module.main().sym_name}")
    for col in ("result", "shape", "min", "max", "mean"):
        table.add_column(col)
    for k, r in named.items():
        table.add_row(k, "x".join(map(str, r.shape)), f"{r.min():.6g}", f"{r.max():.6g}",
                      f"{r.mean():.6g}")
    out.print(table)
    if args.out:
        save_npz_atomic(args.out, named)
        out.print(f"wrote {args.out}")
    return EXIT_OK


# ------------------------------------------------------------------ entry point
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raptor",
        description="Raptor compiles ONNX networks into validated programs for crossbar "
                    "processing-in-memory many-core chips.",
        epilog="Exit codes: 0 ok, 1 verification or compile failure, 2 usage or input error.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    v = sub.add_parser("verify", help="parse and verify Spatial IR files (.spat)",
                       description="Parse each file and check SSA, types, the graph-batch "
                       "invariant (GCB-1..10), Blueprint rules (BP-1..5) and scheduled "
                       "communication (SCH-*). Diagnostics go to stderr as "
                       "file:line:col: error: [RULE] message.")
    v.add_argument("files", nargs="+", metavar="FILE.spat")
    v.add_argument("--allow-assembly", action="store_true",
                   help="accept the temporary logical-assembly batches emitted before "
                   "canonicalization")
    v.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid files")
    v.set_defaults(func=cmd_verify)

    i = sub.add_parser("interpret", help="run a Spatial IR program on numpy inputs",
                       description="Run @main (or the first function) with the reference "
                       "interpreter. Inputs are an .npz keyed by argument name (x or %%x) or "
                       "position (0, arg0, arr_0).")
    i.add_argument("file", metavar="FILE.spat")
    i.add_argument("--inputs", metavar="X.npz", help="input arrays")
    i.add_argument("--weights", metavar="W.npz", help="data for spat.weight @symbols")
    i.add_argument("--out", metavar="Y.npz", help="write results as result0, result1, ...")
    i.set_defaults(func=cmd_interpret)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return func(args)
    except CliError as e:
        err.print(str(e), markup=False)
        return e.code
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
