"""One sweep point as a Dask task: the `raptor solve` pipeline (raptor.solve.solve and
report) on one model, target and set of options, returning the report or the error.

Compilation (import, layout planning, lowering, canonicalization) depends on the model, the
target, the rules and the layout selector only, so points that differ in solver options
share it: each worker process keeps the last few compilations, keyed by `Point.compile_key`.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from raptor.driver import Compiled, CompileOptions, compile_model
from raptor.gc_pause import collector_paused
from raptor.rewrite.eggfile import resolve_rules_dir
from raptor.sim import SimOptions
from raptor.solve import SolveOptions, report, solve
from raptor.sweep.spec import CPSAT_OPTIONS, Point, inputs_sha256, rules_sha256, sha256_file

CACHE_SIZE = 2
"""Compilations kept per worker process: points are submitted grouped by compile key, so
a small cache catches the reuse while bounding memory (a ResNet-18 compilation is large)."""


@dataclass
class Outcome:
    """What a point's task sends back: the report, or the error that stopped it."""

    report: dict[str, Any] | None
    error: str | None
    traceback: str | None
    compile_reused: bool
    wall_seconds: float
    cpu_seconds: float
    """CPU time of the worker process during the point (CP-SAT threads included; other
    tasks' too when a worker runs several threads)."""
    worker: str


class _CompileCache:
    """LRU of compilations; one lock per key so concurrent threads compile a key once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[str, Compiled] = OrderedDict()
        self.lock = threading.Lock()
        self.key_locks: dict[str, threading.Lock] = {}

    def get(self, point: Point, opts: CompileOptions) -> tuple[Compiled, bool]:
        with self.lock:
            key_lock = self.key_locks.setdefault(point.compile_key, threading.Lock())
        with key_lock:
            with self.lock:
                hit = self.entries.get(point.compile_key)
                if hit is not None:
                    self.entries.move_to_end(point.compile_key)
                    return hit, True
            compiled = compile_model(point.model.path, point.target, opts)
            with self.lock:
                self.entries[point.compile_key] = compiled
                while len(self.entries) > self.size:
                    self.entries.popitem(last=False)
            return compiled, False

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


CACHE = _CompileCache(CACHE_SIZE)


def _worker_name() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().address)
    except ValueError:  # not inside a Dask worker (called directly)
        return "local"


def _check_inputs(point: Point) -> None:
    """The worker must read the files the client hashed (a remote worker without the shared
    file system, or an edited model, would otherwise give results under the wrong hash)."""
    path = point.model.path
    if not path.is_file():
        raise FileNotFoundError(f"model {path} does not exist on this worker")
    if sha256_file(path) != point.model.sha256:
        raise ValueError(f"model {path} on this worker differs from the one the sweep hashed")
    if inputs_sha256(path) != point.model.inputs_sha256:
        raise ValueError(f"inputs {path.with_suffix('.npz')} on this worker differ from the "
                         "ones the sweep hashed")
    if rules_sha256(resolve_rules_dir(point.option("rules"))) != point.rules_sha256:
        raise ValueError("the rules on this worker differ from the ones the sweep hashed")


def solve_options(point: Point) -> SolveOptions:
    """The options `raptor solve` would get for this point (simulation traces off: the
    sweep keeps report.json only)."""
    opt = point.option
    contention = opt("contention")
    cpsat = {k: opt(k) for k in CPSAT_OPTIONS if opt(k) is not None}
    return SolveOptions(
        mode=opt("mode"), solver=opt("solver"), simulate=True,
        sim=SimOptions(mode=opt("send_mode"), link_contention=contention,
                       shared_queueing=contention, trace=False),
        compile=CompileOptions(rules_dir=opt("rules"), layout_selector=opt("layout_selector"),
                               pipeline=opt("mode") == "pipeline"),
        **cpsat)


def run_point(point: Point) -> Outcome:
    """Solve one point; every error of the pipeline is returned, not raised, so that one bad
    point is a row of the results and the sweep goes on."""
    start, cpu = time.perf_counter(), time.process_time()
    reused = False
    try:
        with collector_paused():
            _check_inputs(point)
            opts = solve_options(point)
            compiled, reused = CACHE.get(point, opts.compile)
            solved = solve(point.model.path, point.target, opts, compiled=compiled)
            rep = report(solved)
        return Outcome(rep, None, None, reused, time.perf_counter() - start,
                       time.process_time() - cpu, _worker_name())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # egglog panics are BaseExceptions; all are this point's
        message = f"{type(e).__name__}: {str(e).strip()}".strip().splitlines()[0][:500]
        return Outcome(None, message, traceback.format_exc(), reused,
                       time.perf_counter() - start, time.process_time() - cpu, _worker_name())
