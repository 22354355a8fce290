"""Pausing Python's cyclic garbage collector around work that builds large object graphs.

The compiler's IR holds reference cycles (values point at their defining blocks), so every
allocation counts towards a collection, and each full collection rescans every live op,
value and type. On ResNet-18 that was a fifth of `raptor solve`'s wall time, while the
garbage it found was a few MB (peak memory 833 MB with the collector, 843 MB without).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (restored afterwards, even on errors);
    reference counting still frees everything that is not part of a cycle."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
