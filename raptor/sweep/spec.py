"""The sweep file (ARCHITECTURE.md §9): models, a base target, a grid and shared options,
validated up front and expanded into points, each named by the hash of everything it reads.

    models = ["mlp.onnx", "nets/*.onnx"]     # paths or globs, relative to the sweep file
    target = "default"                       # a built-in name or a TOML file (same rule)
    [grid]                                   # every combination is one point
    crossbars_per_core = [16, 64]            # any target key (`raptor target show`)
    mesh = [[4, 4], [8, 8]]
    crossbar = [{crossbar_rows = 64, crossbar_cols = 64, mvm_cycles = 653},
                {crossbar_rows = 128, crossbar_cols = 128}]   # keys that vary together
    solver = ["peft", "cpsat"]
    [solve]                                  # options shared by all points
    time_limit = 10

Validation raises `SweepError` with one line; nothing runs until the whole file is valid.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raptor.driver import MODES
from raptor.rewrite.eggfile import MANIFEST, RULES_ENV, resolve_rules_dir
from raptor.rewrite.select import SELECTORS
from raptor.sim.engine import MODES as SEND_MODES
from raptor.solve import SolveOptions
from raptor.target import Target, TargetError, load_target, target_from_dict

FORMAT = "raptor-sweep-1"
"""Part of every point hash: bump it when a point's meaning changes."""

TARGET_KEYS = ("mesh", *(f.name for f in dataclasses.fields(Target) if f.name != "name"))

SOLVERS_BY_MODE = {mode: tuple(s for s in solvers if s != "both")
                   for mode, solvers in MODES.items()}
"""One schedule per point: `raptor solve --solver both` is the grid `solver = [a, b]`."""

CPSAT_OPTIONS = ("time_limit", "workers", "seed")
"""Options only CP-SAT reads; heuristic points leave them unset, so a grid over time limits
does not run the same heuristic schedule once per limit."""


def supported_modes() -> tuple[str, ...]:
    """Modes this build's `raptor.solve` can run: pipeline mode needs `SolveOptions.mode`."""
    fields = {f.name for f in dataclasses.fields(SolveOptions)}
    return ("latency", "pipeline") if "mode" in fields else ("latency",)


class SweepError(ValueError):
    """An invalid sweep file (one-line message)."""


# ----------------------------------------------------------------------------- option checks
Check = Callable[[Any], str | None]
"""A value's problem (completing "key = value: ..."), or None when it is valid."""


def _check(ok: Callable[[Any], bool], problem: str) -> Check:
    return lambda v: None if ok(v) else problem


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _choice(*allowed: str) -> Check:
    return _check(lambda v: v in allowed, f"must be one of {', '.join(allowed)}")


def _mode(v: Any) -> str | None:
    if v not in SOLVERS_BY_MODE:
        return f"must be one of {', '.join(SOLVERS_BY_MODE)}"
    if v not in supported_modes():
        return (f"'{v}' is not supported by this raptor's solve yet (supported: "
                f"{', '.join(supported_modes())})")
    return None


OPTION_CHECKS: dict[str, Check] = {
    "mode": _mode,
    "solver": _choice(*sorted({s for v in SOLVERS_BY_MODE.values() for s in v})),
    "time_limit": _check(lambda v: (_int(v) or isinstance(v, float)) and math.isfinite(v)
                         and v > 0, "must be a positive number"),
    "workers": _check(lambda v: _int(v) and v > 0, "must be a positive integer"),
    "seed": _check(lambda v: _int(v) and v >= 0, "must be a non-negative integer"),
    "layout_selector": _choice(*SELECTORS),
    "send_mode": _choice(*SEND_MODES),
    "contention": _check(lambda v: isinstance(v, bool), "must be true or false"),
    "rules": _check(lambda v: isinstance(v, str) and v != "", "must be a rules directory path"),
}
"""Point keys besides the target's: what `raptor solve` takes (`workers`: CP-SAT threads)."""

DEFAULTS: dict[str, Any] = {
    "mode": "latency", "solver": "peft", "time_limit": 10.0, "workers": 2, "seed": 0,
    "layout_selector": "exact", "send_mode": "rendezvous", "contention": True, "rules": None,
}
"""`raptor solve`'s defaults, except the solver: `both` is two points, so PEFT alone."""

POINT_KEYS = (*TARGET_KEYS, *OPTION_CHECKS)


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Model:
    path: Path
    label: str
    """Short unique name for rows and plots: the file stem, or more of the path if needed."""
    sha256: str
    inputs_sha256: str | None
    """Hash of `<model>.npz` beside it (raptor solve's default inputs), if present."""


@dataclass(frozen=True)
class Point:
    """One solve: a model, a complete target and the options, with the hash of them all."""

    index: int
    model: Model
    target: Target
    values: tuple[tuple[str, Any], ...]
    """The grid keys' values for this point, in grid order (linked groups expanded)."""
    options: tuple[tuple[str, Any], ...]
    """Every option of OPTION_CHECKS, resolved (CP-SAT options None for heuristics)."""
    rules_sha256: str
    inputs_hash: str
    compile_key: str
    """Hash of what compilation reads: points sharing it share one compilation."""

    @property
    def id(self) -> str:
        return self.inputs_hash[:12]

    @property
    def folder(self) -> str:
        return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.model.label)}-{self.id}"

    def option(self, key: str) -> Any:
        return dict(self.options)[key]


@dataclass
class Sweep:
    path: Path
    models: list[Model]
    grid_keys: list[str]
    """Every key the grid varies, in file order (columns of the results)."""
    groups: dict[str, list[str]]
    """Grid entries in file order: a key, or a linked group's name, and the keys it sets."""
    points: list[Point]
    combinations: int
    """Grid combinations before identical points (ignored CP-SAT options) were merged."""
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- hashing
def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def inputs_sha256(model: Path) -> str | None:
    """Hash of `<model>.npz` beside it (raptor solve's default inputs), if present."""
    npz = model.with_suffix(".npz")
    return sha256_file(npz) if npz.exists() else None


def rules_sha256(directory: Path) -> str:
    """Hash of the rule files compilation loads (the manifest, in load order)."""
    h = hashlib.sha256()
    for name in sorted({n for names in MANIFEST.values() for n in names}):
        h.update(name.encode())
        try:
            h.update((directory / name).read_bytes())
        except OSError as e:
            raise SweepError(f"rules directory {directory}: cannot read {name} "
                             f"({e.strerror or e})") from None
    return h.hexdigest()


def _digest(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _target_values(target: Target) -> dict[str, Any]:
    return {k: v for k, v in target.to_dict().items() if k != "name"}


# ----------------------------------------------------------------------------- loading
def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a sweep file; raises SweepError (one line)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SweepError(f"cannot read sweep file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"cannot parse sweep file {path}: {e}") from None
    except UnicodeDecodeError:
        raise SweepError(f"cannot read sweep file {path}: not UTF-8 text") from None
    try:
        return _expand(path, data)
    except SweepError as e:
        raise SweepError(f"{path}: {e}") from None


def _expand(path: Path, data: dict[str, Any]) -> Sweep:
    unknown = sorted(set(data) - {"models", "target", "grid", "solve"})
    if unknown:
        raise SweepError(f"unknown key(s) {', '.join(unknown)}; a sweep file has models, "
                         "target, [grid] and [solve]")
    base_dir = path.parent
    models = _models(data.get("models"), base_dir)
    base = _base_target(data.get("target", "default"), base_dir)
    grid = _grid(data.get("grid", {}))
    if "rules" in grid:
        raise SweepError("'rules' is one directory for the whole sweep: put it in [solve]")
    groups = {key: list(vs[0]) if isinstance(vs[0], dict) else [key] for key, vs in grid.items()}
    grid_keys = [k for keys in groups.values() for k in keys]
    shared = _shared(data.get("solve", {}), grid_keys)
    rules_dir = _rules_dir(shared.get("rules"), base_dir)
    rules_hash = rules_sha256(rules_dir)

    # workers get the directory the client hashed, unless it is the package's own
    explicit = "rules" in shared or bool(os.environ.get(RULES_ENV))
    rules_arg = str(rules_dir.absolute()) if explicit else None
    points: dict[str, Point] = {}  # by inputs hash: the first of identical points
    for model in models:
        for combo in itertools.product(*grid.values()):
            chosen = {k: x for key, v in zip(grid, combo, strict=True)
                      for k, x in (v.items() if isinstance(v, dict) else [(key, v)])}
            point = _point(len(points), model, base, chosen, shared, grid_keys, rules_arg,
                           rules_hash)
            points.setdefault(point.inputs_hash, point)
    combinations = len(models) * math.prod(map(len, grid.values()))
    notes = [f"{combinations} combinations give {len(points)} distinct points (heuristic "
             f"schedules ignore {', '.join(CPSAT_OPTIONS)})"] if len(points) < combinations else []
    return Sweep(path, models, grid_keys, groups, list(points.values()), combinations, notes)


def _models(spec: Any, base_dir: Path) -> list[Model]:
    if spec is None:
        raise SweepError("no models: add models = [\"model.onnx\", \"nets/*.onnx\"]")
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, list) or not spec or not all(isinstance(s, str) for s in spec):
        raise SweepError("models must be a list of paths or globs")
    paths: list[Path] = []
    for pattern in spec:
        full = str(base_dir / pattern)
        magic = any(c in pattern for c in "*?[")
        found = sorted(glob.glob(full, recursive=True)) if magic else (
            [full] if Path(full).exists() else [])
        if not found:
            where = "" if Path(pattern).is_absolute() else f" (relative to {base_dir})"
            raise SweepError(f"no model matches '{pattern}'{where}")
        for f in found:
            p = Path(f).absolute()
            if p.suffix != ".onnx" or not p.is_file():
                raise SweepError(f"'{f}' is not an .onnx model file")
            if p.resolve() not in {q.resolve() for q in paths}:
                paths.append(p)
    return [Model(p, label, sha256_file(p), inputs_sha256(p))
            for p, label in zip(paths, _labels(paths), strict=True)]


def _labels(paths: list[Path]) -> list[str]:
    """File stems, with parent folders prepended until they are unique."""
    depth = 1
    while True:
        labels = ["/".join(p.with_suffix("").parts[-depth:]) for p in paths]
        if len(set(labels)) == len(labels) or depth > max(len(p.parts) for p in paths):
            return labels
        depth += 1


def _base_target(spec: Any, base_dir: Path) -> Target:
    if not isinstance(spec, str) or not spec:
        raise SweepError("target must be a built-in name or a TOML file path")
    try:
        return load_target(spec if Path(spec).is_absolute() or not (base_dir / spec).exists()
                           else str(base_dir / spec))
    except TargetError as e:
        raise SweepError(str(e)) from None


def _check_value(key: str, value: Any, where: str) -> None:
    if key in OPTION_CHECKS:
        problem = OPTION_CHECKS[key](value)
        if problem:
            raise SweepError(f"{where} {key} = {value!r}: {problem}")
    elif key == "mesh":
        if not (isinstance(value, list) and len(value) == 2
                and all(_int(v) and v > 0 for v in value)):
            hint = " (a grid over meshes lists pairs: mesh = [[4, 4], [8, 8]])" \
                if where == "grid" else ""
            raise SweepError(f"{where} mesh = {value!r}: must be [rows, cols]{hint}")
    elif key not in TARGET_KEYS:
        raise SweepError(f"unknown {where} key '{key}'; known: target keys "
                         f"({', '.join(TARGET_KEYS)}) and {', '.join(OPTION_CHECKS)}")


def _grid(grid: Any) -> dict[str, list[Any]]:
    if not isinstance(grid, dict):
        raise SweepError("[grid] must be a table of key = [values]")
    linked: dict[str, str] = {}
    for key, values in grid.items():
        if not isinstance(values, list):
            raise SweepError(f"grid {key} = {values!r}: a grid key takes a list of values, "
                             f"e.g. {key} = [{json.dumps(values)}]")
        if not values:
            raise SweepError(f"grid {key} has no values")
        if any(isinstance(v, dict) for v in values):
            _linked_group(key, values, linked)
        else:
            for v in values:
                _check_value(key, v, "grid")
            if key in linked:
                raise SweepError(f"grid key {key} is also set by the linked group "
                                 f"'{linked[key]}'")
            linked[key] = key
        if len({json.dumps(v, sort_keys=True) for v in values}) < len(values):
            raise SweepError(f"grid {key} lists a value twice")
    return dict(grid)


def _linked_group(name: str, values: list[Any], seen: dict[str, str]) -> None:
    """A list of tables: keys that vary together (e.g. crossbar size and MVM cycles)."""
    if not all(isinstance(v, dict) for v in values):
        raise SweepError(f"grid {name}: mix of tables and plain values")
    keys = set(values[0])
    for v in values:
        if set(v) != keys:
            raise SweepError(f"grid {name}: every table must set the same keys "
                             f"({', '.join(sorted(keys))})")
        for k, x in v.items():
            _check_value(k, x, "grid")
    for k in keys:
        if k in seen:
            raise SweepError(f"grid key {k} is set by both '{seen[k]}' and '{name}'")
        seen[k] = name


def _shared(solve: Any, varied: list[str]) -> dict[str, Any]:
    if not isinstance(solve, dict):
        raise SweepError("[solve] must be a table of key = value")
    for key, value in solve.items():
        _check_value(key, value, "solve")
        if key in varied:
            raise SweepError(f"{key} is in both [grid] and [solve]")
    return dict(solve)


def _rules_dir(spec: str | None, base_dir: Path) -> Path:
    directory = resolve_rules_dir(None if spec is None else base_dir / spec)
    if not directory.is_dir():
        raise SweepError(f"rules directory {directory} does not exist")
    return directory


def _point(index: int, model: Model, base: Target, values: dict[str, Any],
           shared: dict[str, Any], grid_keys: Iterable[str], rules_dir: str | None,
           rules_hash: str) -> Point:
    settings = {**shared, **values}
    overrides = {k: v for k, v in settings.items() if k in TARGET_KEYS}
    name = base.name
    if overrides:
        name += "[" + ",".join(f"{k}={v}" for k, v in overrides.items()) + "]"
    try:
        current = {k: v for k, v in _target_values(base).items()
                   if not (k in ("mesh_rows", "mesh_cols") and "mesh" in overrides)}
        target = target_from_dict({**current, **overrides}, name)
    except (TargetError, TypeError) as e:
        raise SweepError(f"point {_describe(values)}: {e}") from None
    options = {k: settings.get(k, DEFAULTS[k]) for k in OPTION_CHECKS}
    options["rules"] = rules_dir
    solvers = SOLVERS_BY_MODE[options["mode"]]
    if options["solver"] not in solvers:
        raise SweepError(f"point {_describe(values)}: solver '{options['solver']}' does not "
                         f"schedule mode {options['mode']} (solvers: {', '.join(solvers)})")
    if options["solver"] != "cpsat":
        options.update(dict.fromkeys(CPSAT_OPTIONS))
    hashed = {k: v for k, v in options.items() if k != "rules"}
    target_values = _target_values(target)
    compile_key = _digest({"format": FORMAT, "model": model.sha256, "target": target_values,
                           "rules": rules_hash, "layout_selector": options["layout_selector"],
                           "pipeline": options["mode"] == "pipeline"})  # lowered per mode
    inputs_hash = _digest({"format": FORMAT, "model": model.sha256,
                           "inputs": model.inputs_sha256, "target": target_values,
                           "rules": rules_hash, "options": hashed})
    return Point(index, model, target,
                 tuple((k, options[k] if k in options else values[k]) for k in grid_keys),
                 tuple(options.items()), rules_hash, inputs_hash, compile_key)


def _describe(values: Mapping[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in values.items()) + ")" if values else "(base)"
