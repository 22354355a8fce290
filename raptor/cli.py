"""`raptor`: the command line. Exit codes: 0 ok, 1 verification/compile failure, 2 usage or
input error. Every expected failure is one clear line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from raptor.driver import (
    PASSES,
    Compiled,
    CompileOptions,
    VerificationFailed,
    compile_model,
    ir_inputs,
    model_inputs,
)
from raptor.fileio import load_npz, save_npz_atomic
from raptor.frontend.errors import FrontendError
from raptor.frontend.oracle import compare, oracle_name, run_reference
from raptor.ir.core import IRError
from raptor.ir.interpreter import Interpreter
from raptor.ir.module import Module
from raptor.ir.parser import ParseError, parse_file
from raptor.ir.verifier import verify_module
from raptor.passes.lower import LoweringError
from raptor.rewrite.eggfile import RuleError
from raptor.rewrite.layout import LayoutError
from raptor.target import Target, TargetError, load_target, show_target

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


def _target(args: argparse.Namespace) -> Target:
    try:
        return load_target(args.target)
    except TargetError as e:
        raise CliError(str(e)) from None


def _print_ir_hook(args: argparse.Namespace) -> Callable[[str, Module], None] | None:
    which = getattr(args, "print_ir_after", None)
    if not which:
        return None

    def hook(name: str, module: Module) -> None:
        if which in ("all", name):
            err.print(f"// ----- IR after {name} -----", markup=False)
            err.print(module.print(), markup=False, end="")

    return hook


def _compile(args: argparse.Namespace, target: Target) -> Compiled:
    selector = "disabled" if args.disable_spatial_planning else args.layout_selector
    opts = CompileOptions(rules_dir=args.rules, layout_selector=selector,
                          print_ir=_print_ir_hook(args))
    try:
        return compile_model(args.file, target, opts)
    except (FrontendError, LoweringError, LayoutError) as e:
        raise CliError(f"{args.file}: {e}") from None
    except RuleError as e:
        raise CliError(str(e)) from None
    except VerificationFailed as e:
        raise CliError(str(e), EXIT_FAIL) from None


def cmd_interpret(args: argparse.Namespace) -> int:
    if args.file.endswith(".onnx"):
        return _interpret_onnx(args)
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


def _interpret_onnx(args: argparse.Namespace) -> int:
    target = _target(args)
    comp = _compile(args, target)
    for note in comp.notes:
        err.print(f"note: {note}", markup=False)
    given = None
    if args.inputs:
        try:
            given = load_npz(args.inputs)
        except ValueError as e:
            raise CliError(str(e)) from None
    try:
        inputs, source = model_inputs(comp.graph, args.file, given)
    except ValueError as e:
        raise CliError(f"{args.file}: {e}") from None
    results = Interpreter(comp.module).run(ir_inputs(comp.graph, inputs))
    named = {v.name: r for v, r in zip(comp.graph.outputs, results, strict=True)}
    table = Table(title=f"{args.file} (inputs: {source})")
    for col in ("output", "shape", "min", "max", "mean"):
        table.add_column(col)
    for k, r in named.items():
        table.add_row(k, "x".join(map(str, r.shape)), f"{r.min():.6g}", f"{r.max():.6g}",
                      f"{r.mean():.6g}")
    out.print(table)
    code = EXIT_OK
    if args.check:
        which = oracle_name()
        want = run_reference(args.file, inputs, which)
        check = Table(title=f"check against {which} (rtol {args.rtol:g}, atol {args.atol:g})")
        for col in ("output", "max abs error", "max rel error", "ok"):
            check.add_column(col)
        for name, (ae, re_, ok) in compare(named, want, args.rtol, args.atol).items():
            check.add_row(name, f"{ae:.3g}", f"{re_:.3g}", "yes" if ok else "NO")
            if not ok:
                code = EXIT_FAIL
        out.print(check)
        if code:
            err.print(f"{args.file}: outputs differ from the {which} reference", markup=False)
    if args.out:
        save_npz_atomic(args.out, named)
        out.print(f"wrote {args.out}")
    return code


# ------------------------------------------------------------------ inspect, target
def cmd_inspect(args: argparse.Namespace) -> int:
    target = _target(args)
    comp = _compile(args, target)
    for note in comp.notes:
        err.print(f"note: {note}", markup=False)
    low = comp.lowered
    table = Table(title=f"{args.file} on target {target.name} "
                  f"({target.crossbar_rows}x{target.crossbar_cols} crossbars)")
    for col in ("plan", "op", "inputs", "output", "crossbars", "lanes", "MVMs"):
        table.add_column(col, justify="right" if col in ("crossbars", "lanes", "MVMs") else
                         "left")
    for s in low.stats:
        op = s.kind + (f"+{s.fused}" if s.fused else "")
        table.add_row(s.name, op, ", ".join("x".join(map(str, i)) for i in s.inputs),
                      "x".join(map(str, s.output)), str(s.crossbars), str(s.lanes), str(s.mvms))
    table.add_section()
    table.add_row("total", "", "", "", str(low.crossbars), str(low.lanes), str(low.mvms))
    out.print(table)
    cap = target.crossbar_capacity
    out.print(f"{low.crossbars} of {cap} crossbars ({target.num_cores} cores x "
              f"{target.crossbars_per_core}); at least "
              f"{-(-low.crossbars // target.crossbars_per_core)} cores hold the weights")
    return EXIT_OK


def cmd_target_show(args: argparse.Namespace) -> int:
    try:
        target = load_target(args.name)
    except TargetError as e:
        raise CliError(str(e)) from None
    out.print(show_target(target))
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

    i = sub.add_parser("interpret", help="run a .spat program or a lowered ONNX model",
                       description="Run @main of a .spat file, or compile MODEL.onnx to graph "
                       "IR and run that, with the reference interpreter. For .spat, inputs are "
                       "an .npz keyed by argument name (x or %%x) or position (0, arg0, arr_0); "
                       "for ONNX, keyed by graph input name (default: MODEL.npz beside the "
                       "model, else seeded random inputs).")
    i.add_argument("file", metavar="FILE.spat|MODEL.onnx")
    i.add_argument("--inputs", metavar="X.npz", help="input arrays")
    i.add_argument("--weights", metavar="W.npz", help="data for spat.weight @symbols (.spat)")
    i.add_argument("--out", metavar="Y.npz", help="write results (.spat: result0, ...; ONNX: "
                   "keyed by graph output name)")
    i.add_argument("--check", action="store_true", help="compare with the ONNX reference "
                   "(onnxruntime if installed, else onnx.reference); exit 1 on mismatch")
    i.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    i.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    _add_target(i)
    _add_compile_options(i)
    i.set_defaults(func=cmd_interpret)

    n = sub.add_parser("inspect", help="per-plan crossbars, lanes and MVMs of an ONNX model",
                       description="Import and lower MODEL.onnx for the target and show, per "
                       "plan, its op, shapes, crossbar tiles, lanes and MVMs, with totals: "
                       "whether a model fits a target.")
    n.add_argument("file", metavar="MODEL.onnx")
    _add_target(n)
    _add_compile_options(n)
    n.set_defaults(func=cmd_inspect)

    t = sub.add_parser("target", help="PIM target descriptions",
                       description="Targets are TOML files overriding keys of the built-in "
                       "'default' (PIMCOMP-NN / pimsim-nn: 8x8 mesh, 64 crossbars of 128x128 "
                       "per core, 1 GHz).")
    tsub = t.add_subparsers(dest="target_command", metavar="SUBCOMMAND", required=True)
    ts = tsub.add_parser("show", help="print every key of a target with derived figures")
    ts.add_argument("name", nargs="?", default="default", metavar="NAME|FILE.toml")
    ts.set_defaults(func=cmd_target_show)
    return p


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="default", metavar="default|FILE.toml",
                   help="PIM target (default: the built-in 'default')")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", metavar="DIR", help="rule directory overriding the shipped "
                   "rules/ (also $RAPTOR_RULES)")
    p.add_argument("--layout-selector", choices=["exact", "iterative"], default="exact",
                   help="exact: CP-SAT optimum over the layout tables the rules derive "
                   "(default); iterative: the spec's local search, for comparison")
    p.add_argument("--disable-spatial-planning", action="store_true",
                   help="select alternative 0 (dense) for every plan; materialization and "
                   "verification still run")
    p.add_argument("--print-ir-after", metavar="PASS|all", choices=[*PASSES, "all"],
                   help=f"print the IR to stderr after a pass ({', '.join(PASSES)}) or all")


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
