"""The compiler pipeline as named passes, shared by the CLI and the tests.

import → layout → lower → canonicalize → (ComputeGraph, schedules) → materialize → simulate.
The IR verifies after every pass; `print_ir` sees each pass's output.
"""

from __future__ import annotations

import math
import os
import re
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from raptor.fileio import ArrayHeader, InputFileError, read_arrays
from raptor.frontend.errors import FrontendError
from raptor.frontend.onnx_import import (
    import_loaded,
    load_model,
    parameter_inputs,
    spell_dim,
)
from raptor.frontend.plan import PlanGraph
from raptor.ir.core import Diagnostic
from raptor.ir.module import Module
from raptor.ir.verifier import verify_module
from raptor.target import Target

if TYPE_CHECKING:  # the passes load egglog and OR-Tools: imported when compiling, so that
    # a bad input file is refused before they load (about 1.5 s)
    from raptor.passes.layout import LayoutChoice
    from raptor.passes.lower import Lowered
    from raptor.rewrite.canonicalize import CanonStats
    from raptor.rewrite.select import LayoutSelection

PASSES = ("import", "layout", "lower", "canonicalize", "materialize")
"""Pass names accepted by `--print-ir-after` (plus `all`)."""
MODES = {"latency": ("peft", "cpsat", "both"), "pipeline": ("pipeline", "cpsat", "both")}
"""Each scheduling mode's solvers (`raptor solve --mode M --solver S`)."""


class VerificationFailed(Exception):
    """A pass produced IR that does not verify (a compiler bug, reported with diagnostics)."""

    def __init__(self, after: str, diagnostics: list[Diagnostic]) -> None:
        first = str(diagnostics[0]).splitlines()[0] if diagnostics else "no diagnostics"
        more = f" (and {len(diagnostics) - 1} more)" if len(diagnostics) > 1 else ""
        super().__init__(f"IR does not verify after pass '{after}': {first}{more}; "
                         "this is a compiler bug, please report it with the model")
        self.diagnostics = diagnostics


class RulesProducedInvalidIR(VerificationFailed):
    """Canonicalization with a user's rules produced IR that does not verify: one line
    naming the rule file, the first failing rule id and the op."""

    def __init__(self, rules_dir: str | os.PathLike[str] | None,
                 diagnostics: list[Diagnostic]) -> None:
        from raptor.passes.rulecheck import invalid_ir

        Exception.__init__(self, invalid_ir(rules_dir, diagnostics))
        self.diagnostics = diagnostics


IRHook = Callable[[str, Module], None]


@dataclass
class InputOptions:
    """Where a model's inputs come from and how they may shape the compilation."""

    inputs: str | None = None
    """`--inputs X.npz`: values by graph input name (or input_K / arr_K by position, arr_K
    only for one input); those
    feeding a weight, bias, bound or shape operand are bound as constants."""
    constants: str | None = None
    """`--constants C.npz`: values bound as constants whatever they feed."""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """`--input-shape NAME=1x3x48x192`: sizes for dynamic dimensions."""
    sample_inputs: bool = True
    """Use `MODEL.npz` beside the model when its keys are graph input names."""
    allow_nonfinite: bool = False
    seed: int = 0


@dataclass
class CompileOptions:
    rules_dir: str | os.PathLike[str] | None = None
    layout_selector: str = "exact"  # exact | iterative | disabled
    print_ir: IRHook | None = None
    inputs: InputOptions = field(default_factory=InputOptions)
    pipeline: bool = False
    """Lower for pipeline mode (`raptor.passes.lower.conv_windows`); `raptor.solve.solve`
    sets it from its mode."""


@dataclass
class ModelFeeds:
    """A model's input values, validated against the imported graph."""

    data: dict[str, np.ndarray]
    """Inputs computed on the chip (float32, by graph input name, in graph order)."""
    bound: dict[str, np.ndarray]
    """Graph inputs bound as constants at compile time (their values)."""
    source: str
    """Where the data came from: the file read, or the random generator."""
    notes: list[str] = field(default_factory=list)

    def reference(self) -> dict[str, np.ndarray]:
        """Every graph input of the original model, for the ONNX reference."""
        return {**self.bound, **self.data}


@dataclass
class Compiled:
    graph: PlanGraph
    selection: LayoutSelection
    layouts: LayoutChoice
    lowered: Lowered
    canon: CanonStats
    rules_dir: Path
    notes: list[str] = field(default_factory=list)
    feeds: ModelFeeds | None = None
    pipeline: bool = False
    """Lowered for pipeline mode (`CompileOptions.pipeline`)."""

    @property
    def module(self) -> Module:
        return self.lowered.module

    @property
    def fired(self) -> dict[str, int]:
        out = Counter(self.selection.fired)
        out.update(self.canon.fired)
        return dict(out)


def _check(name: str, module: Module, opts: CompileOptions, assembly: bool = False) -> None:
    diags = verify_module(module, allow_assembly=assembly)
    if diags:
        raise VerificationFailed(name, diags)
    if opts.print_ir is not None:
        opts.print_ir(name, module)


def compile_model(model: str | Path, target: Target, opts: CompileOptions | None = None,
                  imported: tuple[PlanGraph, ModelFeeds] | None = None) -> Compiled:
    """ONNX file → verified canonical graph IR (N x F batches + Blueprints). `imported`:
    this model's `import_with_inputs(model, opts.inputs)`, when the caller has it already."""
    from raptor.passes.layout import select_layouts
    from raptor.passes.lower import lower
    from raptor.passes.plan_ir import plan_module
    from raptor.rewrite.canonicalize import canonicalize
    from raptor.rewrite.eggfile import resolve_rules_dir, shipped_rules_dir

    opts = opts or CompileOptions()
    graph, feeds = imported or import_with_inputs(model, opts.inputs)
    _check("import", plan_module(graph), opts)
    selection, layouts = select_layouts(graph, opts.layout_selector, opts.rules_dir)
    _check("layout", plan_module(graph, layouts), opts)
    lowered = lower(graph, target, layouts, opts.pipeline)
    _check("lower", lowered.module, opts, assembly=True)
    canon = canonicalize(lowered.module, opts.rules_dir)
    try:
        _check("canonicalize", lowered.module, opts)
    except VerificationFailed as e:
        if resolve_rules_dir(opts.rules_dir).resolve() == shipped_rules_dir().resolve():
            raise  # the shipped rules: a compiler bug, with every diagnostic
        raise RulesProducedInvalidIR(opts.rules_dir, e.diagnostics) from None
    return Compiled(graph, selection, layouts, lowered, canon,
                    resolve_rules_dir(opts.rules_dir), [*feeds.notes, *graph.notes], feeds,
                    opts.pipeline)


_POSITIONAL = re.compile(r"(?:arr|input)_(\d+)")
MAX_INPUT_ELEMENTS = 1 << 28
"""Largest input accepted (elements): 1 GiB of float32."""


@dataclass
class _Declared:
    name: str
    dims: list[int | str]  # a size, or the spelling of a dynamic dimension


def _declared(proto: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> list[_Declared]:
    """The graph inputs a caller may supply, with `--input-shape` sizes filled in."""
    initialized = {init.name for init in proto.graph.initializer}
    out = []
    for value in proto.graph.input:
        if value.name in initialized:
            continue
        dims: list[int | str] = [
            d.dim_value if d.WhichOneof("value") == "dim_value" and d.dim_value > 0
            else spell_dim(d) for d in value.type.tensor_type.shape.dim]
        given = shapes.get(value.name)
        if given is not None and len(given) == len(dims):
            dims = list(given)
        out.append(_Declared(value.name, dims))
    return out


def _input_for(path: str, key: str, declared: list[_Declared], taken: Mapping[str, str]) -> str:
    """The graph input a file key names: by name, else by position (input_K; arr_K, the
    key of an unnamed array, only for a model with one input)."""
    names = [d.name for d in declared]
    match = _POSITIONAL.fullmatch(key)
    if key in names:
        name = key
    elif key.startswith("arr_") and match and len(names) > 1:
        # numpy's name for an .npy file's array or an unnamed numpy.savez argument: which
        # input it is meant for is a guess when there are several
        raise InputFileError(
            f"{path}: array {key!r} is unnamed (an .npy file, or numpy.savez without "
            f"keywords) but the model has {len(names)} inputs ({', '.join(names)}); key "
            f"each array by input name (numpy.savez(FILE, {names[0]}=...)) or input_K")
    elif match and int(match.group(1)) < len(names):
        name = names[int(match.group(1))]
    else:
        raise InputFileError(
            f"{path}: array {key!r} is not a graph input (inputs: "
            f"{', '.join(names) or 'none'}; positional keys input_0, arr_0 ... also work)")
    if name in taken.values():
        raise InputFileError(f"{path}: two arrays give graph input {name!r}")
    return name


def _check_header(path: str, header: ArrayHeader, decl: _Declared, model: str) -> None:
    """Refuse an array whose header does not fit its graph input, before it is loaded."""
    fits = len(header.shape) == len(decl.dims) and all(
        isinstance(want, str) or want == got
        for want, got in zip(decl.dims, header.shape, strict=True))
    if not fits:
        raise InputFileError(
            f"{path}: array {header.key!r} has shape {list(header.shape)} but input "
            f"{decl.name!r} of {model} is [{', '.join(map(str, decl.dims))}]")
    if min(header.shape, default=1) <= 0 or math.prod(header.shape) > MAX_INPUT_ELEMENTS:
        raise InputFileError(
            f"{path}: array {header.key!r} has shape {list(header.shape)}; inputs must be "
            f"non-empty and at most {MAX_INPUT_ELEMENTS:,} elements")


def _read_inputs(path: str, declared: list[_Declared], model: str, allow_nonfinite: bool
                 ) -> dict[str, np.ndarray]:
    """An input file's arrays keyed by graph input name, each header checked before any
    data is read, then the values (NaN/Inf refused unless allowed)."""
    by_name = {d.name: d for d in declared}
    mapping: dict[str, str] = {}

    def check(header: ArrayHeader) -> None:
        mapping[header.key] = _input_for(path, header.key, declared, mapping)
        _check_header(path, header, by_name[mapping[header.key]], model)

    arrays = read_arrays(path, check)
    out = {}
    for key, array in arrays.items():
        name = mapping[key]
        if array.dtype.kind == "f" and not allow_nonfinite:
            bad = int(np.count_nonzero(~np.isfinite(array)))
            if bad:
                raise InputFileError(
                    f"{path}: array {key!r} (input {name!r}) has {bad} non-finite values "
                    "(NaN or Inf); pass --allow-nonfinite to use them")
        out[name] = array
    return out


def _sample_file(model: str | Path, declared: list[_Declared], notes: list[str]) -> str | None:
    """`MODEL.npz` beside the model, when its keys are exactly graph input names."""
    sample = Path(model).with_suffix(".npz")
    if not sample.is_file():
        return None
    try:
        with zipfile.ZipFile(sample) as archive:
            keys = [n[:-4] for n in archive.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile):
        keys = []
    names = {d.name for d in declared}
    if not keys or not set(keys) <= names:
        notes.append(f"{sample} beside the model was ignored: its arrays "
                     f"({', '.join(keys) or 'none readable'}) are not graph inputs "
                     f"({', '.join(sorted(names))})")
        return None
    return str(sample)


def import_with_inputs(model: str | Path, opts: InputOptions) -> tuple[PlanGraph, ModelFeeds]:
    """Load and check the model, read and validate its input files against the declared
    inputs (headers before data), bind constants and shapes, import, and complete the inputs
    (seeded random normals for data no file gives). Everything here runs before layout
    planning, so a wrong input file costs no scheduling time."""
    proto, label = load_model(str(model))
    declared = _declared(proto, opts.shapes)
    notes: list[str] = []
    bound: dict[str, np.ndarray] = {}
    data: dict[str, np.ndarray] = {}
    if opts.constants is not None:
        bound.update(_read_inputs(opts.constants, declared, label, opts.allow_nonfinite))
    path = opts.inputs
    if path is None and opts.sample_inputs and len(declared) > len(bound):
        path = _sample_file(model, declared, notes)
    if path is not None:
        given = _read_inputs(path, declared, label, opts.allow_nonfinite)
        params = parameter_inputs(proto)
        for name, array in given.items():
            if name in bound:
                raise InputFileError(f"{path}: input {name!r} is also given by --constants "
                                     f"{opts.constants}")
            (bound if name in params else data)[name] = array
    if bound:
        notes.append(f"bound as constants: {', '.join(bound)}")
    shapes = dict(opts.shapes)
    for name, array in data.items():
        if name in shapes and tuple(shapes[name]) != array.shape:
            raise InputFileError(
                f"{path}: array for input {name!r} has shape {list(array.shape)} but "
                f"--input-shape gives {'x'.join(map(str, shapes[name]))}")
        shapes[name] = array.shape
    missing = [d.name for d in declared if d.name not in data and d.name not in bound]
    if missing and path is not None:
        raise InputFileError(f"{path}: no array for input {', '.join(map(repr, missing))} "
                             f"(has: {', '.join(given) or 'nothing'})")
    try:
        graph = import_loaded(proto, label, bound, shapes)
    except FrontendError as e:
        if not data:
            raise
        given_shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in data.items())
        raise FrontendError(f"{e} (with the input shapes of {path}: {given_shapes})") from None
    if path is None:
        rng = np.random.default_rng(opts.seed)
        data = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    source = path if path is not None else f"random normal (seed {opts.seed})"
    ordered = {}
    for v in graph.inputs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf: checked below
            array = np.asarray(data[v.name], dtype=np.float32)
        if array.shape != v.shape:
            raise InputFileError(f"{source}: input {v.name!r} has shape {list(array.shape)}, "
                                 f"the model computes it as {list(v.shape)}")
        if not opts.allow_nonfinite and not np.all(np.isfinite(array)):
            raise InputFileError(f"{source}: input {v.name!r} does not fit float32 (values "
                                 "overflow to Inf); pass --allow-nonfinite to use them")
        ordered[v.name] = array
    return graph, ModelFeeds(ordered, bound, source, notes)


def ir_inputs(graph: PlanGraph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph input names → IR argument names."""
    from raptor.passes.lower import sanitize

    return {sanitize(v.name): inputs[v.name] for v in graph.inputs}
