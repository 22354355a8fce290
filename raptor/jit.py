"""Compiled kernels: the few inner loops whose Python overhead dominates a run at scale
(issue #27: 100,000 tasks on 256 cores, the simulator's event loop) are compiled by numba.

One decorator for them all (`kernel`), so that the policy is written once: compiled to machine
code on first call, no Python objects inside (`nopython`), the machine code cached on disk (a
later process loads it in a fraction of the compile time; `cache_dir` says where, and why an
edit never leaves it stale); `jitable` marks a formula that kernels and Python code both call.
``NUMBA_DISABLE_JIT=1`` runs the same functions as plain Python, for a debugger or coverage.
A kernel's source is the only copy of its logic: there is no Python twin to keep equal."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import numba
from numba.extending import register_jitable

F = TypeVar("F", bound=Callable[..., object])

KERNEL_MARKS = (b"@kernel", b"@jitable")
"""A module using either decorator holds code that kernels compile."""


def cache_dir(package: Path, base: Path) -> Path:
    """Where the kernels of the sources under ``package`` keep their machine code: a folder
    of ``base`` named by a digest of every module there that holds kernel code
    (`KERNEL_MARKS`) and of this one. numba keys a cached kernel by its own file alone, so a
    kernel that inlines a function of another module (a `jitable` one, or a kernel it
    calls: `raptor.sim.loop` inlines `raptor.noc`'s pimsim-nn formulas) would keep stale
    machine code once that module is edited; any edit to such a module selects a fresh
    folder instead (old folders stay, for a checkout of other sources)."""
    digest = hashlib.blake2b(Path(__file__).read_bytes(), digest_size=8)
    for path in sorted(package.rglob("*.py")):
        text = path.read_bytes()
        if any(m in text for m in KERNEL_MARKS):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + text)
    return base / digest.hexdigest()


# under $NUMBA_CACHE_DIR if set, else the user's cache (~/.cache/raptor/numba)
numba.config.CACHE_DIR = str(cache_dir(  # type: ignore[attr-defined]
    Path(__file__).parent,
    Path(os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "raptor", "numba"))))


def kernel(func: F) -> F:
    """``func`` compiled by numba (typed as ``func`` for mypy, which cannot see through
    numba's dispatcher)."""
    return cast(F, numba.njit(cache=True, nogil=True)(func))


def jitable(func: F) -> F:
    """``func`` as it is, a plain Python function for Python callers, and compiled into the
    kernels that call it: a formula both sides use, written once in its own module."""
    return cast(F, register_jitable(func))
