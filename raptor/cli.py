"""`raptor`: the command line. Exit codes: 0 ok, 1 verification/compile failure, 2 usage or
input error, 130 stopped by Ctrl-C (`raptor.ui.interrupt`). Every expected failure is one
clear line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import sys
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import numpy as np
from rich.console import Console
from rich.table import Table

from raptor.driver import (
    MAX_INPUT_ELEMENTS,
    MODES,
    PASSES,
    Compiled,
    CompileOptions,
    InputOptions,
    VerificationFailed,
    compile_model,
    import_with_inputs,
    ir_inputs,
)
from raptor.fileio import ArrayHeader, InputFileError, load_npz, read_arrays, save_npz_atomic
from raptor.frontend.errors import FrontendError
from raptor.gc_pause import collector_paused
from raptor.ir.core import IRError
from raptor.ir.module import Module
from raptor.ir.parser import ParseError, parse_file
from raptor.ir.types import TensorType
from raptor.ir.verifier import verify_module
from raptor.target import Target, TargetError, load_target, show_target
from raptor.ui.interrupt import EXIT_INTERRUPTED, Interrupts
from raptor.ui.interrupt import MESSAGE as INTERRUPTED
from raptor.ui.progress import LiveProgress
from raptor.ui.table import ns, print_results

if TYPE_CHECKING:
    from raptor.solve import Solved

# The compiler's passes, solvers and simulator (egglog, OR-Tools, onnxruntime: about 2 s of
# imports) load inside the commands that use them, after the inputs were checked: a bad
# input file is refused at once.

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

_Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"
"""`raptor`'s subcommands: each command's parser builder (`_solve_parser`, ...) adds itself
here, beside the `cmd_*` function it configures."""


def _about(path: str, e: Exception) -> str:
    """`path: message`, unless the message already names the file."""
    text = str(e)
    return text if text.startswith(path) else f"{path}: {text}"


class CliError(Exception):
    """An expected failure: message for stderr and the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _loaded(*names: str, base: tuple[type[Exception], ...] = ()) -> tuple[type[Exception], ...]:
    """`base` and the exception classes `module.Class` among `names` whose module is loaded
    (an exception cannot come from a module that never loaded, and importing one costs time)."""
    split = (name.rpartition(".") for name in names)
    return (*base, *(getattr(sys.modules[m], c) for m, _, c in split if m in sys.modules))


@contextmanager
def _expected(path: str) -> Iterator[None]:
    """An expected failure of compiling or scheduling `path` as its one-line `CliError` (exit
    1 for a model the target cannot run or IR that does not verify, 2 for bad input). Bad
    input has its own classes (the frontend's, the input files', the rules', the layout's);
    any other exception, a bare `ValueError` included, is Raptor's bug and reaches `main`'s
    internal-error line: the checks before compiling (the parser's, `cmd_solve`'s, the
    frontend's, `raptor.fileio`'s, onnx.checker's) leave no bare `ValueError` to user input."""
    try:
        yield
    except _loaded("raptor.rewrite.eggfile.RuleError", base=(InputFileError,)) as e:
        raise CliError(str(e)) from None
    except VerificationFailed as e:
        raise CliError(str(e), EXIT_FAIL) from None
    except _loaded("raptor.solver.peft.CapacityError", "raptor.passes.lower.CapacityExceeded",
                   "raptor.solver.graph.GraphError", "raptor.passes.projection.ProjectionError",
                   "raptor.solver.pipeline.problem.PipelineCapacityError") as e:
        raise CliError(_about(path, e), EXIT_FAIL) from None
    except _loaded("raptor.passes.lower.LoweringError", "raptor.rewrite.layout.LayoutError",
                   base=(FrontendError,)) as e:
        raise CliError(_about(path, e)) from None


def _console(stderr: bool, markup: bool = True) -> Console:
    """Terminal output; tables keep their columns when piped (no 80-column default)."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=markup)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=markup, width=160)
    return c


out = _console(stderr=False)
err = _console(stderr=True, markup=False)  # messages quote paths and IR: never markup


def _stderr(lines: Sequence[object], prefix: str = "") -> bool:
    """Print each line to stderr after `prefix`; whether there was any."""
    for line in lines:
        err.print(f"{prefix}{line}")
    return bool(lines)


def _folder(path: str | None, flag: str) -> None:
    """An output folder option (`--out DIR`) must not name a file: said before any work."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise CliError(f"{flag} {path}: is a file; {flag} names a folder (created if missing)")


def _parse_spat(path: str) -> Module:
    try:
        return parse_file(path)
    except ParseError as e:
        # semantic errors (undefined value, type annotation) are invalid IR: exit 1
        raise CliError(str(e), EXIT_FAIL if e.rule else EXIT_USAGE) from None


def _command(sub: _Commands, name: str, func: Callable[[argparse.Namespace], int],
             **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of subcommand `name`, which runs `func`."""
    parser = sub.add_parser(name, **kwargs)
    parser.set_defaults(func=func, parser=parser)
    return parser


# ------------------------------------------------------------------ verify
def _verify_parser(sub: _Commands) -> None:
    v = _command(sub, "verify", cmd_verify, help="parse and verify Spatial IR files (.spat)",
                 description="Parse each file and check SSA, types, the graph-batch invariant "
                 "(GCB-1..10), Blueprint rules (BP-1..5) and scheduled communication (SCH-*). "
                 "Diagnostics go to stderr as file:line:col: error: [RULE] message.")
    v.add_argument("files", nargs="+", metavar="FILE.spat")
    v.add_argument("--allow-assembly", action="store_true", help="accept the temporary "
                   "logical-assembly batches emitted before canonicalization")
    v.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid files")


def cmd_verify(args: argparse.Namespace) -> int:
    code = EXIT_OK
    for path in args.files:
        try:
            module = _parse_spat(path)
        except CliError as e:
            err.print(str(e))
            code = max(code, e.code)
            continue
        if _stderr(verify_module(module, allow_assembly=args.allow_assembly)):
            code = max(code, EXIT_FAIL)
        elif not args.quiet:
            out.print(f"{path}: ok ({sum(1 for _ in module.walk())} ops)")
    return code


# ------------------------------------------------------------------ interpret
def _arg_key(key: str) -> str:
    """np.savez(x, y) names positional arrays arr_0, arr_1: they stand for positions."""
    return key[4:] if key.startswith("arr_") and key[4:].isdigit() else key


def _inputs_for(path: str | None, module: Module) -> dict[str, np.ndarray]:
    """The arrays of an input file for the module's main function, each header checked
    against the argument it binds (by name, `argN` or position) before its data is read,
    so that a header claiming gigabytes is refused without allocating them."""
    if path is None:
        return {}
    main = module.main()
    args = {a.name: a for a in main.args if a.name}
    args.update({f"arg{i}": a for i, a in enumerate(main.args)})
    args.update({str(i): a for i, a in enumerate(main.args)})

    def check(header: ArrayHeader) -> None:
        arg = args.get(_arg_key(header.key).lstrip("%"))
        if arg is not None and isinstance(t := arg.type, TensorType) and t.is_static \
                and header.shape != t.static_shape:
            raise InputFileError(f"{path}: array {header.key!r} has shape "
                                 f"{list(header.shape)} but @{main.sym_name} expects %{arg.name} "
                                 f"(argument {main.args.index(arg)}) as {t}")
        if math.prod(header.shape) > MAX_INPUT_ELEMENTS:
            raise InputFileError(f"{path}: array {header.key!r} has shape {list(header.shape)}; "
                                 f"inputs must be at most {MAX_INPUT_ELEMENTS:,} elements")

    try:
        data = read_arrays(path, check)
    except ValueError as e:
        raise CliError(str(e)) from None
    return {_arg_key(k): v for k, v in data.items()}


def _target(name: str) -> Target:
    try:
        return load_target(name)
    except TargetError as e:
        raise CliError(str(e)) from None


def _compile_options(args: argparse.Namespace) -> CompileOptions:
    """The options of a command that compiles a model."""
    which = args.print_ir_after

    def print_ir(name: str, module: Module) -> None:
        if which in ("all", name):
            err.print(f"// ----- IR after {name} -----")
            err.print(module.print(), end="")

    inputs = InputOptions(inputs=args.inputs, constants=args.constants,
                          shapes=dict(args.input_shape or []),
                          sample_inputs=not args.no_sample_inputs,
                          allow_nonfinite=args.allow_nonfinite, seed=getattr(args, "seed", 0))
    selector = "disabled" if args.disable_spatial_planning else args.layout_selector
    return CompileOptions(rules_dir=args.rules, layout_selector=selector,
                          print_ir=print_ir if which else None, inputs=inputs)


def _compile(args: argparse.Namespace, target: Target) -> Compiled:
    """Compile the command's model; its compile notes go to stderr."""
    with _expected(args.file):
        comp = compile_model(args.file, target, _compile_options(args))
    _stderr(comp.notes, "note: ")
    return comp


def _interpret_parser(sub: _Commands) -> None:
    i = _command(sub, "interpret", cmd_interpret,
                 help="run a .spat program or a lowered ONNX model",
                 description="Run @main of a .spat file, or compile MODEL.onnx to graph IR and run "
                 "that, with the reference interpreter. For .spat, inputs are an .npz keyed by "
                 "argument name (x or %%x) or position (0, arg0, arr_0); for ONNX, keyed by graph "
                 "input name (default: MODEL.npz beside the model, else seeded random inputs).")
    i.add_argument("file", metavar="FILE.spat|MODEL.onnx")
    i.add_argument("--inputs", metavar="X.npz", help="input arrays")
    _add_input_options(i)
    i.add_argument("--weights", metavar="W.npz", help="data for spat.weight @symbols (.spat; "
                   "default: weights.npz beside the file, as raptor solve writes it)")
    i.add_argument("--out", metavar="Y.npz", help="write results (.spat: result0, ...; ONNX: "
                   "keyed by graph output name)")
    i.add_argument("--check", action="store_true", help="compare with the ONNX reference "
                   "(onnxruntime; onnx.reference for a model it cannot run); exit 1 on mismatch")
    i.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    i.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    _add_target(i)
    _add_compile_options(i)


def cmd_interpret(args: argparse.Namespace) -> int:
    if args.file.endswith(".onnx"):
        return _interpret_onnx(args)
    module = _parse_spat(args.file)
    if _stderr(verify_module(module, allow_assembly=True)):
        return EXIT_FAIL
    weights = args.weights
    if weights is None and (beside := Path(args.file).with_name("weights.npz")).is_file():
        weights = str(beside)  # what `raptor solve` writes
    if weights:
        try:
            module.constants.update(load_npz(weights))
        except InputFileError as e:
            raise CliError(str(e)) from None
    from raptor.ir.interpreter import InputBindError, Interpreter

    inputs = _inputs_for(args.inputs, module)
    try:
        results = Interpreter(module).run(inputs)
    except InputBindError as e:
        raise CliError(_about(args.file, e)) from None
    except IRError as e:
        raise CliError(str(e), EXIT_FAIL) from None
    named = {f"result{i}": r for i, r in enumerate(results)}
    _print_results(f"{args.file}: @{module.main().sym_name}", "result", named)
    _save(args.out, named)
    return EXIT_OK


def _print_results(title: str, what: str, named: dict[str, np.ndarray]) -> None:
    table = Table(what, "shape", "min", "max", "mean", title=title)
    for k, r in named.items():
        table.add_row(k, "x".join(map(str, r.shape)), f"{r.min():.6g}", f"{r.max():.6g}",
                      f"{r.mean():.6g}")
    out.print(table)


def _save(path: str | None, named: dict[str, np.ndarray]) -> None:
    if path:
        try:
            save_npz_atomic(path, named)
        except OSError as e:
            raise CliError(f"cannot write {path}: {e.strerror or e}", EXIT_FAIL) from None
        out.print(f"wrote {path}")


def _interpret_onnx(args: argparse.Namespace) -> int:
    from raptor.frontend.oracle import compare, reference_outputs
    from raptor.ir.interpreter import Interpreter

    comp = _compile(args, _target(args.target))
    feeds = comp.feeds
    assert feeds is not None
    with np.errstate(all="ignore"):  # NaN/Inf inputs (--allow-nonfinite) propagate quietly
        results = Interpreter(comp.module).run(ir_inputs(comp.graph, feeds.data))
    named = {v.name: r for v, r in zip(comp.graph.outputs, results, strict=True)}
    _print_results(f"{args.file} (inputs: {feeds.source})", "output", named)
    code = EXIT_OK
    if args.check:
        want, oracle, unavailable = reference_outputs(args.file, feeds.reference())
        if want is None:
            err.print(f"note: {unavailable}")
        else:
            check = Table("output", "max abs error", "max rel error", "ok", title=f"check "
                          f"against {oracle} (rtol {args.rtol:g}, atol {args.atol:g})")
            for name, (ae, re_, ok) in compare(named, want, args.rtol, args.atol).items():
                check.add_row(name, f"{ae:.3g}", f"{re_:.3g}", "yes" if ok else "NO")
                code = code if ok else EXIT_FAIL
            out.print(check)
            if code:
                err.print(f"{args.file}: outputs differ from the {oracle} reference")
    _save(args.out, named)
    return code


# ------------------------------------------------------------------ inspect, target
def _inspect_parser(sub: _Commands) -> None:
    n = _command(sub, "inspect", cmd_inspect,
                 help="per-plan crossbars, lanes and MVMs of an ONNX model",
                 description="Import and lower MODEL.onnx for the target and show, per plan, its "
                 "op, shapes, crossbars, array groups (crossbars fired by one MVM), lanes "
                 "and MVMs, with totals: whether a model fits a target.")
    n.add_argument("file", metavar="MODEL.onnx")
    n.add_argument("--inputs", metavar="X.npz", help="input values (their shapes fix dynamic "
                   "dimensions; weights and shape operands among them are bound)")
    _add_input_options(n)
    _add_target(n)
    _add_compile_options(n)


def cmd_inspect(args: argparse.Namespace) -> int:
    target = _target(args.target)
    comp = _compile(args, target)
    low = comp.lowered
    table = Table("plan", "op", "inputs", "output", title=f"{args.file} on target "
                  f"{target.name} ({target.crossbar_rows}x{target.crossbar_cols} crossbars)")
    for col in ("crossbars", "groups", "lanes", "MVMs"):
        table.add_column(col, justify="right")
    for s in low.stats:
        op = s.kind + (f"+{s.fused}" if s.fused else "") + \
            (f" ({s.pixels} px/MVM)" if s.pixels > 1 else "")
        table.add_row(s.name, op, ", ".join("x".join(map(str, i)) for i in s.inputs),
                      "x".join(map(str, s.output)), str(s.crossbars), str(s.groups),
                      str(s.lanes), str(s.mvms))
    table.add_section()
    table.add_row("total", "", "", "", str(low.crossbars), str(low.groups), str(low.lanes),
                  str(low.mvms))
    out.print(table)
    cap = target.crossbar_capacity
    out.print(f"{low.crossbars} of {cap} crossbars ({target.num_cores} cores x "
              f"{target.crossbars_per_core}); at least "
              f"{-(-low.crossbars // target.crossbars_per_core)} cores hold the weights")
    return EXIT_OK


def _rules_parser(sub: _Commands) -> None:
    r = sub.add_parser("rules", help="egglog rule files (rules/*.egg)",
                       description="The canonicalization and layout rules are plain egglog "
                       "files; edit them and the compiler follows.")
    rsub = r.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", required=True)
    rc = _command(rsub, "check", cmd_rules_check, help="parse and type-check every rule file",
                  description="Load each rule program's files in manifest order and "
                  "report file:line:col of the first error of each (exit 1).")
    rc.add_argument("dir", nargs="?", metavar="DIR",
                    help="rules directory (default: $RAPTOR_RULES, else the shipped rules/)")


def cmd_rules_check(args: argparse.Namespace) -> int:
    from raptor.passes.rulecheck import check_rules
    from raptor.rewrite.eggfile import resolve_rules_dir

    directory = resolve_rules_dir(args.dir)
    if not directory.is_dir():
        raise CliError(f"{directory}: error: not a rules directory")
    if _stderr(check_rules(args.dir)):
        return EXIT_FAIL
    files = sorted(p.name for p in directory.glob("*.egg"))
    out.print(f"{directory}: ok ({', '.join(files)})")
    return EXIT_OK


def _target_parser(sub: _Commands) -> None:
    t = sub.add_parser("target", help="PIM target descriptions", description="Targets are TOML "
                       "files overriding keys of the built-in 'default' (PIMCOMP-NN / pimsim-nn: "
                       "8x8 mesh, 64 crossbars of 128x128 per core, 1 GHz).")
    tsub = t.add_subparsers(dest="target_command", metavar="SUBCOMMAND", required=True)
    ts = _command(tsub, "show", cmd_target_show,
                  help="print every key of a target with derived figures")
    ts.add_argument("name", nargs="?", default="default", metavar="NAME|FILE.toml")


def cmd_target_show(args: argparse.Namespace) -> int:
    out.print(show_target(_target(args.name)))
    return EXIT_OK


# ------------------------------------------------------------------ solve
def _solve_parser(sub: _Commands) -> None:
    s = _command(sub, "solve", cmd_solve, help="compile an ONNX model, schedule it, simulate it",
                 description="Compile MODEL.onnx for the target, schedule it for latency with the "
                 "PEFT heuristic and an OR-Tools CP-SAT model side by side, materialize each "
                 "schedule into scheduled IR with explicit channels, simulate it, and check its "
                 "outputs against the ONNX reference. Prints one row per schedule and writes "
                 "report.json, scheduled IR (.spat), Gantt charts of the estimate and the "
                 "simulation and a NoC heatmap (SVG), Chrome traces and outputs (.npz) to --out. "
                 "Exit 0 when every schedule validates and its numbers match, 1 otherwise.")
    s.add_argument("file", metavar="MODEL.onnx")
    _add_target(s)
    s.add_argument("--mode", choices=list(MODES), default="latency", help="scheduling objective: "
                   "latency (single-inference makespan, default) or pipeline (period of a stream "
                   "of inferences: stages through shared memory, docs/pipeline.md)")
    s.add_argument("--solver", choices=sorted({x for v in MODES.values() for x in v}),
                   default="both", help="latency: peft (heuristic), cpsat (optimal or best found), "
                   "or both (default); pipeline: pipeline (the spec's heuristic), cpsat (the "
                   "CP-SAT pipeline model), or both (default)")
    s.add_argument("--stream", type=int, metavar="M", help="pipeline mode: inferences to simulate "
                   "(default 8): inference 0 on the given inputs, the others on seeded variations")
    s.add_argument("--no-replication", action="store_true", help="pipeline mode: keep every "
                   "crossbar tile on one core (no copies of bottleneck weights on spare crossbars)")
    s.add_argument("--no-spread", action="store_true", help="pipeline mode: leave the one-stage "
                   "spread placements out of the candidates a row is chosen from (a row then "
                   "returns its partition or the latency schedule as a stream)")
    s.add_argument("--time-limit", type=_positive(float), default=10.0, metavar="S",
                   help="CP-SAT search limit (default 10): a deterministic work budget "
                   "of S x 0.05 units of CP-SAT's deterministic time, about S seconds on an "
                   "idle 2-core machine, so reruns are identical (the status says how many "
                   "units the search used); "
                   "the best schedule found is used if it beats the heuristic one under the "
                   "communication model, else the heuristic one")
    s.add_argument("--workers", type=_positive(int), default=2, metavar="N",
                   help="CP-SAT worker threads (default 2)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")
    s.add_argument("--inputs", metavar="X.npz", help="inputs keyed by graph input name "
                   "or position (input_0; arr_0 for one input); those feeding weights, "
                   "biases, bounds or shape operands are bound as constants (default: "
                   "MODEL.npz beside the model when its keys are input names, else seeded "
                   "random inputs)")
    _add_input_options(s)
    s.add_argument("--no-simulate", action="store_true",
                   help="schedule and materialize only: no simulation on Raptor's mesh, no "
                   "numerics check (simulated fields are null; with --export-pimsim, "
                   "'simulated' is the exported program under Raptor's model of pimsim-nn)")
    s.add_argument("--send-mode", choices=["rendezvous", "buffered"], default="rendezvous",
                   help="simulated channel semantics (default rendezvous)")
    s.add_argument("--no-contention", action="store_true",
                   help="simulate without link contention and shared-memory queueing")
    s.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    s.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    s.add_argument("--out", default="raptor-out", metavar="DIR",
                   help="output directory (default raptor-out/)")
    s.add_argument("--json", action="store_true", help="print report.json to stdout")
    s.add_argument("--wide", action="store_true", help="every column (bound, status, solve "
                   "time, crossbars, messages) in the table, transposed if the terminal is "
                   "too narrow for them")
    s.add_argument("--export-pimsim", metavar="DIR",
                   help="also export each valid schedule to pimsim-nn (DIR, or DIR/<solver> "
                   "for several): program/, chip.json, noc.json; see `raptor export`")
    s.add_argument("--export-inferences", type=int, metavar="M",
                   help="pipeline mode with --export-pimsim: unroll M inferences of the "
                   "stream into straight-line code (default: --stream)")
    _add_order_steps(s, "--export-order-steps")
    _add_memory_flag(s)
    _add_compile_options(s)


def cmd_solve(args: argparse.Namespace) -> int:
    if args.solver not in MODES[args.mode]:
        raise CliError(f"--mode {args.mode} has no solver {args.solver!r}; valid solvers: "
                       f"{', '.join(MODES[args.mode])}")
    if args.stream is not None and args.mode != "pipeline":
        raise CliError("--stream applies to --mode pipeline (a stream of inferences)")
    if args.stream is not None and args.stream < 1:
        raise CliError(f"--stream must be at least 1 inference, got {args.stream}")
    if args.no_replication and args.mode != "pipeline":
        raise CliError("--no-replication applies to --mode pipeline")
    if args.no_spread and args.mode != "pipeline":
        raise CliError("--no-spread applies to --mode pipeline")
    if args.export_inferences is not None and not (args.export_pimsim and args.mode == "pipeline"):
        raise CliError("--export-inferences applies to --mode pipeline with --export-pimsim")
    if args.export_order_steps is not None and not args.export_pimsim:
        raise CliError("--export-order-steps applies to --export-pimsim")
    if args.export_inferences is not None and not 1 <= args.export_inferences <= (args.stream or 8):
        raise CliError(f"--export-inferences must be 1..{args.stream or 8} (the inferences "
                       f"of --stream), got {args.export_inferences}")
    _folder(args.out, "--out")
    _folder(args.export_pimsim, "--export-pimsim")
    target = _target(args.target)
    if args.export_pimsim and target.protocol == "raptor":
        # a program for pimsim-nn is scheduled for its protocol (raptor.solver.blocking), a
        # stream too (ResNet-18's: 2.3x faster on pimsim-nn, docs/pimsim.md)
        target = dataclasses.replace(target, protocol="pimsim-nn")
    compile_opts = _compile_options(args)
    with LiveProgress(Console(stderr=True), enabled=not args.json) as progress:
        with _expected(args.file):
            progress("checking the model and its inputs")
            imported = import_with_inputs(args.file, compile_opts.inputs)
            from raptor.sim import SimOptions
            from raptor.solve import SolveOptions, report, solve
            from raptor.ui.outputs import write_outputs

            sim = SimOptions(mode=args.send_mode, link_contention=not args.no_contention,
                             shared_queueing=not args.no_contention)
            opts = SolveOptions(
                solver=args.solver, time_limit=args.time_limit, workers=args.workers,
                seed=args.seed, simulate=not args.no_simulate, sim=sim, rtol=args.rtol,
                atol=args.atol, compile=compile_opts,
                allow_memory_overflow=args.allow_memory_overflow, mode=args.mode,
                stream=args.stream or 8, replication=not args.no_replication,
                spread=not args.no_spread)
            solved = solve(args.file, target, opts, progress, imported=imported)
        rep = report(solved)
        rep["warnings"] = args.warnings.lines
        exported, export_failed = _export_runs(args.export_pimsim, solved, rep,
                                               args.export_inferences,
                                               args.export_order_steps) \
            if args.export_pimsim else ([], [])
        try:
            wrote = write_outputs(args.out, solved, rep, progress)
        except OSError as e:
            raise CliError(f"cannot write to {args.out}: {e.strerror or e}") from None
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        _stderr(solved.notes, "note: ")
        print_results(Console(highlight=False), rep, wide=args.wide, files=wrote)
        for line in exported:
            out.print(line, markup=False)
    _stderr(export_failed)
    failed = [r.name for r in solved.runs if not r.ok] + export_failed
    for r in solved.runs:
        _stderr((r.violations + r.scheduled_errors)[:5], f"{r.name}: invalid schedule: ")
        if r.sim_error:
            err.print(f"{r.name}: simulation failed: {r.sim_error}")
        if r.numerics and not all(ok for _, _, ok in r.numerics.values()):
            err.print(f"{r.name}: simulated outputs differ from the {solved.oracle} reference",
                      markup=False)
        # one line for the worst core (every core's peak is in report.json)
        over = r.memory_summary
        for line in over if r.memory_errors else []:
            err.print(f"{r.name}: local memory: {line} (every core in report.json; "
                      "--allow-memory-overflow lets it through)")
        for line in over if r.memory_warnings else []:
            err.print(f"{r.name}: warning: {line} (allowed by --allow-memory-overflow)",
                      markup=False)
    return EXIT_FAIL if failed else EXIT_OK


_PIMSIM_FIGURES = ("pimsim_export", "simulated_ns", "mesh_simulated_ns", "simulated_protocol")
"""What `_export_runs` adds to a schedule's report entry."""


def _export_runs(out_dir: str, solved: Solved, rep: dict[str, Any],
                 inferences: int | None = None, order_steps: int | None = None
                 ) -> tuple[list[str], list[str]]:
    """`--export-pimsim DIR`: every valid schedule's program (into DIR, or DIR/<solver>
    when there are several), with Raptor's simulator under pimsim-nn's model beside it
    (a latency program), or for a stream program unrolled for `inferences` (default: the
    stream's) the period Raptor simulated; `order_steps` bounds the message-order search
    (`export_pimsim`'s default when None). Returns the lines to print and the failures
    (one line each)."""
    from raptor.export import ExportError, export_pimsim, pimsim_order, write_export
    from raptor.sim import SimError, SimOptions, Simulator

    lines: list[str] = []
    failed: list[str] = []
    done: dict[int, str] = {}
    stream = solved.mode == "pipeline"
    for run in solved.runs:
        if run.violations or run.scheduled_errors or run.memory_errors:
            failed.append(f"{run.name}: not exported to pimsim-nn: the schedule is invalid "
                          "or does not fit local memory (see above)")
            continue
        d = Path(out_dir) if len(solved.runs) == 1 else Path(out_dir) / run.name
        if id(run.scheduled) in done:  # the same program (a schedule that fell back)
            first = rep["schedules"][done[id(run.scheduled)]]
            rep["schedules"][run.name].update(  # and so the same figures on pimsim-nn
                {k: first[k] for k in _PIMSIM_FIGURES if k in first})
            lines.append(f"{run.name}: same program as {done[id(run.scheduled)]}")
            continue
        try:
            ex = export_pimsim(run.scheduled, solved.target, run.memory,
                               allow_overflow=bool(run.memory_warnings),
                               inferences=inferences if stream else None,
                               order_steps=order_steps)
        except ExportError as e:
            failed.append(f"{run.name}: cannot export to pimsim-nn: {e}")
            rep["schedules"][run.name]["pimsim_export"] = {"error": str(e)}
            continue
        model_ns = ex.model_ns
        if not stream and model_ns is None:
            try:  # in the exported order (receives block there)
                with pimsim_order(run.scheduled, ex.rank):
                    sim = Simulator(run.scheduled, solved.target, timings=ex.timings)
                model_ns = sim.timing(SimOptions.pimsim(trace=False)).latency_ns
            except SimError as e:
                lines.append(f"{run.name}: Raptor's simulator under pimsim-nn's model failed: {e}")
        try:
            write_export(ex, d)
        except OSError as e:
            raise CliError(f"cannot write {d}: {e.strerror or e}") from None
        done[id(run.scheduled)] = run.name
        entry = rep["schedules"][run.name]
        cores = sum(1 for p in ex.cores.values() if p.instructions)
        run_it = f"run: ChipTest {d}/program {d}/chip.json"
        if stream:
            count = inferences or solved.stream
            entry["pimsim_export"] = {"dir": str(d), "instructions": ex.instructions,
                                      "inferences": count, "stand_ins": dict(ex.notes)}
            lines.append(f"{run.name}: exported {count} inferences unrolled, "
                         f"{ex.instructions:,} pimsim-nn instructions on {cores} cores to {d}/ "
                         f"(Raptor's simulated period: {ns(entry.get('simulated_period_ns'))} "
                         f"ns; pimsim-nn's latency is the whole stream's); {run_it}")
        else:
            entry["pimsim_export"] = {"dir": str(d), "instructions": ex.instructions,
                                      "pimsim_model_ns": model_ns,
                                      "orders_modeled": ex.orders_modeled,
                                      "stand_ins": dict(ex.notes)}
            if model_ns is not None:
                # the estimate is pimsim-nn's protocol's: "simulated" speaks of the same chip,
                # under --no-simulate too (the export ran the model; Raptor's mesh did not)
                entry.update(mesh_simulated_ns=entry["simulated_ns"], simulated_ns=model_ns,
                             simulated_protocol="pimsim-nn")
            lines.append(f"{run.name}: exported {ex.instructions:,} pimsim-nn instructions on "
                         f"{cores} cores to {d}/ (Raptor's simulator under pimsim-nn's model: "
                         f"{ns(model_ns)} ns); {run_it}")
    return lines, failed


# ------------------------------------------------------------------ export
def _export_parser(sub: _Commands) -> None:
    e = _command(sub, "export", cmd_export, help="export scheduled IR to the pimsim-nn simulator",
                 description="Allocate local memory for every core of a scheduled program "
                 "(`scheduled.<solver>.spat` from `raptor solve`), lower it to pimsim-nn "
                 "instructions and write DIR/program/ (config.json and core_<id>.json), "
                 "DIR/chip.json and DIR/noc.json derived from the target, and DIR/export.json "
                 "(what was exported), so that `ChipTest DIR/program DIR/chip.json` runs it in "
                 "latency mode. Checks what pimsim-nn does not (send/receive sizes and partners, "
                 "array groups, addresses, deadlock) and refuses with exit 1.")
    e.add_argument("file", metavar="FILE.spat")
    e.add_argument("--pimsim", required=True, metavar="DIR", help="output directory")
    e.add_argument("--inferences", type=int, metavar="M", help="a stream program (pipeline mode): "
                   "unroll M inferences into straight-line code (default: the stream's own count)")
    e.add_argument("--timeout-ms", type=_positive(float), metavar="MS", help="pimsim-nn "
                   "latency_timeout_ms (default: twice a serial bound on the program's latency)")
    _add_order_steps(e, "--order-steps")
    _add_target(e)
    _add_memory_flag(e)


def cmd_export(args: argparse.Namespace) -> int:
    from raptor.export import ExportError, export_pimsim, stream_count, write_export
    from raptor.passes.memory import plan_memory

    _folder(args.pimsim, "--pimsim")
    target = _target(args.target)
    module = _parse_spat(args.file)
    if _stderr(verify_module(module)):
        return EXIT_FAIL
    count = stream_count(module)
    if args.inferences is not None and (count is None or not 1 <= args.inferences <= count):
        raise CliError(f"--inferences applies to a stream program (pipeline mode) and must be "
                       f"1..{count} (the inferences it has inputs for), got {args.inferences}"
                       if count is not None else "--inferences applies to a stream program "
                       f"(pipeline mode); {args.file} is a latency program")
    try:
        plan = plan_memory(module, target)
        ex = export_pimsim(module, target, plan, allow_overflow=args.allow_memory_overflow,
                           inferences=args.inferences,
                           order_steps=args.order_steps)
    except ExportError as e:
        raise CliError(f"{args.file}: cannot export to pimsim-nn: {e}", EXIT_FAIL) from None
    try:
        d = write_export(ex, args.pimsim, args.timeout_ms)
    except OSError as e:
        raise CliError(f"cannot write {args.pimsim}: {e.strerror or e}") from None
    for line in ex.overflow:
        err.print(f"warning: {line} (allowed by --allow-memory-overflow)")
    active = sum(1 for p in ex.cores.values() if p.instructions)
    out.print(f"{args.file}: {ex.instructions:,} pimsim-nn instructions on {active} cores "
              f"-> {d}/ (program/, chip.json, noc.json, export.json)")
    if (top := plan.peak) is not None:
        out.print(f"local memory: peak {top.peak_bytes:,} bytes on core {top.core} of "
                  f"{target.local_memory_bytes:,}; shared {plan.shared_bytes:,} of "
                  f"{target.shared_memory_bytes:,}")
    if ex.notes:
        out.print("stand-ins: " + ", ".join(f"{k} ({n})" for k, n in sorted(ex.notes.items())))
    out.print(f"run: ChipTest {d}/program {d}/chip.json")
    return EXIT_OK


# ------------------------------------------------------------------ sweep
def _sweep_parser(sub: _Commands) -> None:
    w = _command(sub, "sweep", cmd_sweep, help="solve a grid of models x targets x options on Dask",
                 description="Run `raptor solve` on every point of the grid in SWEEP.toml "
                 "(models, a base target, [grid] over target keys, mode, solver and "
                 "solver options, [solve] for shared options; docs/sweep.md) as Dask "
                 "tasks, and write results.csv, results.json, each point's report.json "
                 "and Pareto plots (SVG, PNG) to --out. Each row is written as its point "
                 "finishes. Exit 0 when every point is ok, 1 when one failed.")
    w.add_argument("file", metavar="SWEEP.toml")
    w.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask cluster "
                   "(tcp://host:8786, started with `dask scheduler` and `dask worker`); "
                   "default: a local cluster")
    w.add_argument("--workers", type=_positive(int), metavar="N", help="worker processes of "
                   "the local cluster (default: one per CPU core)")
    w.add_argument("--out", default="raptor-sweep", metavar="DIR",
                   help="output directory (default raptor-sweep/)")
    w.add_argument("--resume", action="store_true", help="keep the finished rows in DIR whose "
                   "inputs hash matches a point, run the others")
    w.add_argument("--dry-run", action="store_true", help="validate and list the points only")


def cmd_sweep(args: argparse.Namespace) -> int:
    _folder(args.out, "--out")
    from raptor.sweep.command import sweep_command  # Dask and matplotlib load for sweeps only
    return sweep_command(args.file, args.scheduler, args.workers, args.out, args.resume,
                         args.dry_run, out, err)


# ------------------------------------------------------------------ entry point
class _Parser(argparse.ArgumentParser):
    """A usage error in one line on stderr (`raptor solve: error: ...`) with where to read
    more, exit 2, instead of argparse's usage block (its subcommands are of this class too)."""

    def error(self, message: str) -> NoReturn:
        hint = f"{self.prog} --help"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())} (see {hint})\n")


def build_parser() -> argparse.ArgumentParser:
    """The commands are added in the order `raptor --help` lists them."""
    p = _Parser(
        prog="raptor",
        description="Raptor compiles ONNX networks into validated programs for crossbar "
                    "processing-in-memory many-core chips.",
        epilog="Exit codes: 0 ok, 1 verification or compile failure, 2 usage or input error, "
               "130 stopped by Ctrl-C (during a CP-SAT search the first Ctrl-C ends the search "
               "and the run goes on with its best schedule).")
    p.add_argument("--debug", action="store_true",
                   help="on an internal error, print the Python traceback (also RAPTOR_DEBUG=1)")
    sub: _Commands = p.add_subparsers(dest="command", metavar="COMMAND")
    _solve_parser(sub)
    _export_parser(sub)
    _verify_parser(sub)
    _interpret_parser(sub)
    _inspect_parser(sub)
    _rules_parser(sub)
    _target_parser(sub)
    _sweep_parser(sub)
    return p


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """argparse type: a number > 0 (a usage error otherwise)."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _count(text: str) -> int:
    """argparse type: a whole number >= 0 (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _add_order_steps(p: argparse.ArgumentParser, flag: str) -> None:
    from raptor.export import ORDER_STEPS

    p.add_argument(flag, type=_count, metavar="N",
                   help="steps of each descent of the message-order search: a step runs the "
                   "orders the messages leave in under Raptor's model of pimsim-nn and keeps "
                   f"the fastest (default {ORDER_STEPS}; 0: the channel order alone, the "
                   "quickest export; ResNet-18 at 4 MVM units models about 8 s a step)")


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """argparse type: NAME=1x3x48x192 (positive sizes)."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected NAME=AxBx... with positive sizes (e.g. x=1x3x48x192), got {text!r}")
    return name, shape


def _add_input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--constants", metavar="C.npz", help="values for graph inputs, bound as "
                   "constants at compile time whatever they feed (weights of an "
                   "export_params=False model, shape operands)")
    p.add_argument("--input-shape", action="append", type=_input_shape, metavar="NAME=AxBx..",
                   help="fix the dynamic dimensions of an input (repeatable), e.g. "
                   "x=1x3x48x192; without it a dynamic batch dimension is 1")
    p.add_argument("--no-sample-inputs", action="store_true",
                   help="do not use MODEL.npz beside the model as its inputs")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN and Inf in input files (refused by default)")


def _add_memory_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-memory-overflow", action="store_true",
                   help="let a program that needs more local (or shared) memory than the "
                   "target has through with a warning instead of failing (exit 1); nothing "
                   "is spilled to shared memory")


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="default", metavar="default|FILE.toml",
                   help="PIM target (default: the built-in 'default')")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", metavar="DIR", help="rule directory overriding the shipped "
                   "rules/ (also $RAPTOR_RULES)")
    p.add_argument("--layout-selector", choices=["exact", "iterative"], default="exact",
                   help="exact: CP-SAT optimum over the layout tables the rules derive "
                   "(default); iterative: the spec's local search, for comparison")
    p.add_argument("--disable-spatial-planning", action="store_true", help="select alternative 0 "
                   "(dense) for every plan; materialization and verification still run")
    p.add_argument("--print-ir-after", metavar="PASS|all", choices=[*PASSES, "all"],
                   help=f"print the IR to stderr after a pass ({', '.join(PASSES)}) or all")


class _Warnings:
    """The Python warnings a command raises that the filters let through, one line per
    distinct message with a count (for report.json and stderr at the end), instead of
    Python's raw `file:line: Category: message` text and source line."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def show(self, message: Warning | str, category: type[Warning], filename: str,
             lineno: int, file: Any = None, line: str | None = None) -> None:
        self.counts[" ".join(str(message).split())[:200] or category.__name__] += 1

    @property
    def lines(self) -> list[str]:
        return [text if n == 1 else f"{text} ({n} times)" for text, n in self.counts.items()]


def internal_error(e: BaseException) -> str:
    """The last line of defence: an exception no check anticipated, in one line."""
    text = " ".join(str(e).split())
    detail = f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__
    return (f"raptor: internal error ({detail}); this is a bug in Raptor, please report it "
            "with the command and its input files (--debug shows the traceback)")


def _interrupted() -> int:
    """Ctrl-C stopped the program: the cursor shown again (a Ctrl-C inside the progress
    line's own start or stop can leave it hidden), one line, exit 130."""
    err.show_cursor(True)
    err.print(INTERRUPTED)
    return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's parser, which names the command and its help
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    debug = args.debug or os.environ.get("RAPTOR_DEBUG", "") not in ("", "0")
    args.warnings = caught = _Warnings()
    interrupts = Interrupts()
    try:
        # Ctrl-C: see raptor.ui.interrupt (a CP-SAT search ends early, anything else stops)
        with collector_paused(), warnings.catch_warnings(), interrupts:
            warnings.showwarning = caught.show
            try:
                code = func(args)
                if interrupts.stopping:  # its KeyboardInterrupt was swallowed on the way
                    raise KeyboardInterrupt
                return code
            finally:
                # the `raptor` program, whose process ends next: freeze every live object
                # out of the cyclic collector's reach. Re-enabling the collector made its
                # next collection scan the whole heap, and the interpreter collects again
                # at exit: on ResNet-18 (a 2 GB heap of IR cycles) that was 5.6 s of a
                # pipeline solve, to free memory the ending process returns anyway.
                if argv is None:
                    gc.freeze()
    except CliError as e:
        err.print(str(e))
        return e.code
    except KeyboardInterrupt:
        return _interrupted()
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # egglog's PanicException derives from BaseException
        if debug:
            traceback.print_exc()
        if interrupts.stopping:  # raised in place of the KeyboardInterrupt (a `finally`)
            return _interrupted()
        err.print("raptor: out of memory; the input needs more memory than this machine gives "
                  "the process (try a smaller model or target)" if isinstance(e, MemoryError)
                  else internal_error(e))
        return EXIT_FAIL
    finally:
        _stderr(caught.lines, "warning: ")


if __name__ == "__main__":
    sys.exit(main())
