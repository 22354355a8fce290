"""PIM target description: the single source of every time and capacity the compiler uses.

A target is a built-in name (``default``) or a TOML file that overrides any key of the default
(PIMCOMP-NN / pimsim-nn configuration, docs/spec/ARCHITECTURE.md §3). All times are converted from
cycles to integer nanoseconds with :meth:`Target.ns`, rounding up, so schedules never promise
more than the hardware delivers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from raptor import noc


class TargetError(ValueError):
    """An invalid target name, file or value (one-line message)."""


MAX_CORES = 4096
"""Cores per target: the schedulers keep tables of tasks × cores (PEFT's OCT, CP-SAT's
placement literals), so the mesh is bounded before anything is allocated for it."""

_CYCLES = (1, 1_000_000)
_BYTES = (1, 1 << 20)


def _key(default: float, low: float, high: float) -> Any:
    """A numeric target key: its default and its accepted range (inclusive, see `LIMITS`)."""
    return dataclasses.field(default=default, metadata={"range": (low, high)})


MAX_FILE_BYTES = 1 << 20
"""A target description is a few hundred bytes; larger files are refused unread."""

_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,64}")


def _shown(value: object) -> str:
    """A value for a one-line message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(x: float) -> str:
    """A number for a message; integers beyond 15 digits in scientific notation."""
    if not isinstance(x, int):
        return f"{x:g}"
    digits = str(abs(x))
    if len(digits) <= 15:
        return f"{x:,}"
    return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:3]}e{len(digits) - 1}"


@dataclass(frozen=True)
class Target:
    """Crossbar PIM many-core chip; cores form a ``mesh_rows`` × ``mesh_cols`` XY-routed mesh."""

    name: str = "default"
    clock_ghz: float = _key(1.0, 0.01, 100.0)
    mesh_rows: int = _key(8, 1, MAX_CORES)
    mesh_cols: int = _key(8, 1, MAX_CORES)
    crossbars_per_core: int = _key(64, 1, 65536)
    crossbar_rows: int = _key(128, 1, 65536)
    crossbar_cols: int = _key(128, 1, 65536)
    weight_bits: int = _key(8, 1, 64)
    input_bits: int = _key(8, 1, 64)
    mvm_cycles: int = _key(1305, *_CYCLES)
    array_group_max: int = _key(8, 1, 65536)
    mvm_units: int = _key(1, 1, 1024)
    conv_window_max: int = _key(8, 1, 65536)
    """The most adjacent output pixels of a convolution one MVM computes (shifted-and-
    duplicated kernels, `raptor.passes.lower.conv_windows`); 1: one pixel per MVM."""
    vector_lanes: int = _key(32, 1, 65536)
    vector_op_cycles: int = _key(4, *_CYCLES)
    local_memory_bytes: int = _key(65536, 1, 1 << 40)
    local_bytes_per_cycle: int = _key(64, *_BYTES)
    flit_bytes: int = _key(8, *_BYTES)
    flit_cycles: int = _key(2, *_CYCLES)
    hop_cycles: int = _key(2, *_CYCLES)
    shared_memory_bytes: int = _key(4 * 1024 * 1024, 1, 1 << 40)
    shared_access_bytes: int = _key(32, *_BYTES)
    shared_read_cycles: int = _key(40, *_CYCLES)
    shared_write_cycles: int = _key(50, *_CYCLES)
    protocol: str = "raptor"
    """How messages cross the mesh, and so what the schedulers optimize (`raptor.noc`):
    ``raptor`` (posted receives, pipelined flits, link contention) or ``pimsim-nn``
    (handshake, every flit charged the whole path, one message at a time per core)."""
    routing: str = "xy"
    """Which route each message takes on Raptor's links (`raptor.noc.ROUTINGS`): ``xy``, or
    ``xy-yx`` (source routing: the compiler picks XY or YX per message)."""

    def __post_init__(self) -> None:
        """Types first, then the core count, then each key's range (`LIMITS`)."""
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise TargetError("target key 'name' must be 1 to 64 printable characters, got "
                              f"{_shown(self.name)}")
        if self.protocol not in noc.PROTOCOLS:
            raise TargetError("target key 'protocol' must be one of "
                              f"{', '.join(noc.PROTOCOLS)}, got {_shown(self.protocol)}")
        if self.routing not in noc.ROUTINGS:
            raise TargetError("target key 'routing' must be one of "
                              f"{', '.join(noc.ROUTINGS)}, got {_shown(self.routing)}")
        for f in dataclasses.fields(self):
            if f.type == "str":  # name, protocol, routing: checked above
                continue
            value, real = getattr(self, f.name), f.type in ("float", float)
            if isinstance(value, bool) or not isinstance(value, int | float if real else int):
                kind = "a number" if real else "an integer"
                raise TargetError(f"target key '{f.name}' must be {kind}, got {_shown(value)}")
            if (real and not math.isfinite(value)) or value <= 0:
                raise TargetError(f"target key '{f.name}' must be positive, got {_shown(value)}")
        if self.num_cores > MAX_CORES:
            raise TargetError(f"target mesh {_num(self.mesh_rows)}x{_num(self.mesh_cols)} has "
                              f"{_num(self.num_cores)} cores; at most {MAX_CORES:,} are "
                              "supported")
        for key, (low, high) in LIMITS.items():
            value = getattr(self, key)
            if not low <= value <= high:
                raise TargetError(f"target key '{key}' must be between {_num(low)} and "
                                  f"{_num(high)}, got {_shown(value)}")

    # -- time -------------------------------------------------------------------------------

    @cached_property
    def clock_fraction(self) -> Fraction:
        """Exact rational clock, so that cycle → ns rounding is integer arithmetic."""
        return Fraction(str(self.clock_ghz))

    def ns(self, cycles: noc.N) -> noc.N:
        """Cycles → integer ns, rounded up (an int or an integer array)."""
        clock = self.clock_fraction
        return -(-cycles * clock.denominator // clock.numerator)

    def mvm_ns(self) -> int:
        """One matrix-vector multiplication of an array group (one crossbar or several
        sharing their input rows: the DACs drive them at once)."""
        return self.ns(self.mvm_cycles)

    def mvm_group_ns(self, counts: list[int]) -> int:
        """Independent MVMs of one body, `counts[g]` on array group g: a group fires one at a
        time, `mvm_units` groups of a core fire at once (unit MVMs on chains, so the longest
        chain or the work spread over the units, whichever is larger, is achievable)."""
        total = sum(counts)
        return max(max(counts, default=0), -(-total // self.mvm_units)) * self.mvm_ns()

    def crossbars_of(self, shape: tuple[int, ...]) -> int:
        """Crossbars a (rows, columns) weight occupies: an array group of column blocks."""
        rows, cols = shape
        return -(-rows // self.crossbar_rows) * -(-cols // self.crossbar_cols)

    def array_group(self, column_tiles: int) -> int:
        """Crossbars per array group for a matrix of `column_tiles` column tiles: as even
        as the bound (`array_group_max`, one core's crossbars) allows."""
        most = min(self.array_group_max, self.crossbars_per_core)
        return -(-column_tiles // -(-column_tiles // most))

    def vector_ns(self, n_elems: int) -> int:
        """One elementwise vector operation over ``n_elems`` elements."""
        return self.ns(-(-n_elems // self.vector_lanes) * self.vector_op_cycles)

    def local_copy_ns(self, n_bytes: int) -> int:
        """A copy inside one core's scratchpad."""
        return self.ns(-(-n_bytes // self.local_bytes_per_cycle))

    def transfer_ns(self, n_bytes: int, a: int, b: int) -> int:
        """A message of ``n_bytes`` between cores ``a`` and ``b`` over a free network, in ns,
        under the target's protocol (:func:`raptor.noc.message_cycles`; 0 on the same
        core)."""
        if a == b:
            return 0
        return self.ns(noc.message_cycles(self, self.hops(a, b), n_bytes, self.protocol))

    def flit_ns(self, a: int, b: int) -> int:
        """One flit from core ``a`` to ``b`` over free links (pimsim-nn's NoC table entry;
        0 on the same core). Kept per pair: the blocking model asks it for every message it
        plays (priced each time, it was a fifth of
        `raptor.solver.blocking.blocking_makespan`)."""
        got = self._flits.get((a, b))
        if got is None:
            got = self._flits[(a, b)] = \
                0 if a == b else self.ns(noc.flit_path_cycles(self, self.hops(a, b)))
        return got

    @cached_property
    def _flits(self) -> dict[tuple[int, int], int]:
        """`flit_ns` of the pairs asked so far."""
        return {}

    # -- mesh -------------------------------------------------------------------------------

    @property
    def num_cores(self) -> int:
        return self.mesh_rows * self.mesh_cols

    @property
    def mesh_links(self) -> int:
        """Directed links of the mesh (both directions between every pair of neighbours)."""
        r, c = self.mesh_rows, self.mesh_cols
        return 2 * (r * (c - 1) + c * (r - 1))

    @property
    def crossbar_capacity(self) -> int:
        """Weight tiles the whole chip can hold at once."""
        return self.num_cores * self.crossbars_per_core

    def core_coords(self, i: int) -> tuple[int, int]:
        """Core index → (row, col); index = row * mesh_cols + col."""
        if not 0 <= i < self.num_cores:
            raise TargetError(f"core {i} out of range 0..{self.num_cores - 1}")
        return divmod(i, self.mesh_cols)

    def hops(self, a: int, b: int) -> int:
        """XY routing distance (Manhattan) between cores ``a`` and ``b``."""
        ra, ca = self.core_coords(a)
        rb, cb = self.core_coords(b)
        return abs(ra - rb) + abs(ca - cb)

    # -- presentation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        """TOML text that :func:`load_target` reads back to an equal target."""
        return "".join(f"{key} = {json.dumps(value, ensure_ascii=False)}\n" if isinstance(
            value, str) else f"{key} = {value}\n" for key, value in self.to_dict().items())

    def describe(self) -> str:
        """One-paragraph summary with the derived figures."""
        return (
            f"target {self.name}: {self.mesh_rows}x{self.mesh_cols} mesh = {self.num_cores} cores, "
            f"{self.crossbars_per_core} crossbars of {self.crossbar_rows}x{self.crossbar_cols} "
            f"per core ({self.crossbar_capacity} tiles), MVM {self.mvm_ns()} ns, "
            f"{self.vector_lanes}-lane vector op {self.vector_ns(self.vector_lanes)} ns, "
            f"one {self.flit_bytes}-byte flit over one hop "
            f"{self.ns(self.hop_cycles + self.flit_cycles)} ns"
        )


_KEYS = tuple(f.name for f in dataclasses.fields(Target))
LIMITS: dict[str, tuple[float, float]] = {
    f.name: f.metadata["range"] for f in dataclasses.fields(Target) if "range" in f.metadata}
"""Accepted range of every numeric key (inclusive). A cycle lasts at most 100 ns and an
operation at most a million cycles, so task costs and schedule lengths stay far inside the
schedulers' int64 arithmetic."""
BUILTIN_TARGETS: dict[str, Target] = {"default": Target()}
BUILTIN_TARGETS["pimsim-nn"] = Target(
    # pimsim-nn's own example configuration (example/config/latency_config.json at f7446df,
    # unset keys at its Config.hpp defaults): its MVM pipeline gives 5,168 compute cycles
    # (front 32, back 642, 8 input passes); 16-lane vector unit; 1 MiB local and global
    # memories (memory_size default); global memory 16-byte accesses of one cycle.
    name="pimsim-nn", protocol="pimsim-nn", mvm_cycles=5168, vector_lanes=16,
    local_memory_bytes=1 << 20,
    shared_memory_bytes=1 << 20, shared_access_bytes=16, shared_read_cycles=1,
    shared_write_cycles=1)


def target_from_dict(values: dict[str, Any], name: str) -> Target:
    """Build a target from overrides of the default; ``mesh = [rows, cols]`` is accepted.
    ``name`` (a file's stem) is used unless the values name the target."""
    values = dict(values)
    if "mesh" in values:
        mesh = values.pop("mesh")
        if not isinstance(mesh, list) or len(mesh) != 2 or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in mesh):
            raise TargetError(f"target key 'mesh' must be [rows, cols] integers, got "
                              f"{_shown(mesh)}")
        if "mesh_rows" in values or "mesh_cols" in values:
            raise TargetError("give either 'mesh' or 'mesh_rows'/'mesh_cols', not both")
        values["mesh_rows"], values["mesh_cols"] = mesh
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        shown = [k if re.fullmatch(r"[\w-]{1,40}", k) else _shown(k) for k in unknown[:5]]
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise TargetError(f"unknown target key(s) {', '.join(shown)}{more}; known keys: mesh, "
                          f"{', '.join(_KEYS)}")
    if "name" not in values:
        values["name"] = name if _NAME.fullmatch(name) else "unnamed"
    return dataclasses.replace(BUILTIN_TARGETS["default"], **values)


def load_target(name_or_path: str) -> Target:
    """A built-in target by name, or a TOML file overriding keys of the default."""
    if name_or_path in BUILTIN_TARGETS:
        return BUILTIN_TARGETS[name_or_path]
    path = Path(name_or_path)
    known = ", ".join(BUILTIN_TARGETS)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise TargetError(f"cannot read target file {name_or_path}: {exc.strerror or exc} "
                          f"(built-in targets: {known})") from None
    if len(data) > MAX_FILE_BYTES:
        raise TargetError(f"target file {name_or_path} is larger than {MAX_FILE_BYTES:,} bytes; "
                          "a target is a short TOML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # 1-based line and column (in bytes)
        line, col = data.count(b"\n", 0, exc.start) + 1, exc.start - data.rfind(b"\n", 0, exc.start)
        raise TargetError(f"{name_or_path}:{line}:{col}: target file is not UTF-8 text "
                          f"(byte 0x{data[exc.start]:02x})") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"cannot parse target file {name_or_path}: {exc}") from None
    try:
        return target_from_dict(values, path.stem)
    except TargetError as exc:
        raise TargetError(f"{name_or_path}: {exc}") from None


def show_target(target: Target) -> Table:
    """Rich table of all keys plus derived figures, for ``raptor target show``."""
    table = Table("key", Column("value", justify="right"), title=f"target {target.name}")
    for key, value in [*target.to_dict().items(), ("cores (derived)", target.num_cores),
                       ("crossbar tiles (derived)", target.crossbar_capacity),
                       ("mvm_ns (derived)", target.mvm_ns())]:
        table.add_row(key, str(value))
    return table
