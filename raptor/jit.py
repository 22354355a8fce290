"""Compiled kernels: the few inner loops whose Python overhead dominates a run at scale
(issue #27: 100,000 tasks on 256 cores, the simulator's event loop) are compiled by numba.

One decorator for them all, so that the policy is written once: compiled to machine code on
first call, no Python objects inside (`nopython`), the machine code cached on disk beside the
module (a later process loads it in a fraction of the compile time; editing the source
invalidates it). ``NUMBA_DISABLE_JIT=1`` runs the same functions as plain Python, for a
debugger or coverage. A kernel's source is the only copy of its logic: there is no Python
twin to keep equal."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., object])


def kernel(func: F) -> F:
    """``func`` compiled by numba (typed as ``func`` for mypy, which cannot see through
    numba's dispatcher)."""
    return cast(F, numba.njit(cache=True, nogil=True)(func))
