"""Vectorized mesh arithmetic shared by the list schedulers and the CP-SAT model.

The key operation is the L1 distance transform ``g(p) = min_q f(q) + h * hops(p, q)`` on the
``rows × cols`` grid. XY routing makes hops the Manhattan distance, which is separable, and a
1-D L1 transform is two running minima (of ``f[j] - h j`` from the left and ``f[j] + h j``
from the right); so the transform costs O(P) instead of O(P²) per evaluation. This is what
keeps the optimistic cost table at O(E·P).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from raptor.noc import message_cycles, serial_cycles
from raptor.target import Target

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

INF = 1 << 60  # "impossible" in int64 arithmetic; sums of a few INFs stay below 2**63

DENSE_TRANSFORM = 3 * 64 * 64
"""Largest dense distance transform (rows × P × P elements): up to 3 rows on 64 cores it
took 44-118 µs against the separable one's 117-142 µs (5 rows: 153 against 123)."""

FEW_TERMS = 32
"""At most this many cores that can lower another, or that can be lowered, make a row's
transform dense over them (`Mesh._few_terms`): 11.1 us a lookahead row at 32, 12.1 at 8,
15.4 separable (random layered DAG, 30,000 tasks on 16x16)."""


class Mesh:
    """Target geometry and NoC costs as numpy arrays (integer ns)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.rows, self.cols, self.P = target.mesh_rows, target.mesh_cols, target.num_cores
        self._r = np.arange(self.P, dtype=np.int64) // self.cols
        self._c = np.arange(self.P, dtype=np.int64) % self.cols
        clock = target.clock_fraction
        self._num, self._den = clock.numerator, clock.denominator
        # Per-hop ns used inside the transform: ns(hop_cycles) >= the exact share of one hop,
        # so lookahead estimates round the same way as real transfers (never optimistic).
        self.hop_ns = target.ns(target.hop_cycles)
        self._col_idx = (np.arange(self.cols, dtype=np.int64) * self.hop_ns)
        self._row_idx = (np.arange(self.rows, dtype=np.int64) * self.hop_ns)[:, None]
        self._rows: dict[tuple[int, int], IntArray] = {}
        """:meth:`arrival_row`'s rows by (source, flit cycles) where it calls comm_rows."""

    @cached_property
    def hops(self) -> IntArray:
        """P × P hop counts; only small meshes need the dense matrix (memory is O(P²))."""
        out: IntArray = (np.abs(self._r[:, None] - self._r[None, :])
                         + np.abs(self._c[:, None] - self._c[None, :]))
        return out

    @cached_property
    def _hop_ns_matrix(self) -> IntArray:
        out: IntArray = self.hops * self.hop_ns
        return out

    def hops_from(self, src_core: int) -> IntArray:
        """Hop counts from ``src_core`` to every core (read-only): a row of :attr:`hops` on
        up to 256 cores (one look-up instead of five numpy calls per transfer row), else
        O(P) with no P × P matrix."""
        if self.P <= 256:
            row: IntArray = self.hops[src_core]
            return row
        out: IntArray = (np.abs(self._r - self._r[src_core]) + np.abs(self._c - self._c[src_core]))
        return out

    def hop_ns_rows(self, cores: int | IntArray) -> IntArray:
        """Hop ns from ``cores`` (one core: a row; an array of them: rows) to every core,
        from the dense matrix on up to 256 cores."""
        if self.P <= 256:
            got: IntArray = self._hop_ns_matrix[cores]
            return got
        c = np.asarray(cores)[..., None]
        out: IntArray = (np.abs(self._r - self._r[c]) + np.abs(self._c - self._c[c])) * self.hop_ns
        return out

    def mean_hop_cycles(self) -> int:
        """Mean hop cycles over ordered pairs of distinct cores (floor), in closed form:
        the sum of |i - j| over i, j < n is (n³ - n) / 3 along each axis."""
        rows, cols, P = self.rows, self.cols, self.P
        total = cols * cols * (rows**3 - rows) // 3 + rows * rows * (cols**3 - cols) // 3
        return total * self.target.hop_cycles // max(P * (P - 1), 1)

    def ns(self, cycles: IntArray) -> IntArray:
        if self._num == self._den:
            return cycles
        return (cycles * self._den + self._num - 1) // self._num

    def flit_cycles(self, nbytes: int) -> int:
        return serial_cycles(self.target, nbytes)

    def comm_rows(self, src_core: int, flit_cycles: IntArray) -> IntArray:
        """Transfer ns from ``src_core`` to every core, one row per message (by its flit
        cycles, see :meth:`flit_cycles`), under the target's protocol."""
        t = self.target
        if t.protocol == "raptor":
            out = self.ns(self.hops_from(src_core)[None, :] * t.hop_cycles + flit_cycles[:, None])
        else:
            nbytes = flit_cycles[:, None] // t.flit_cycles * t.flit_bytes
            out = self.ns(message_cycles(t, self.hops_from(src_core)[None, :], nbytes, t.protocol))
        out[:, src_core] = 0
        return out

    @cached_property
    def _hop_cycle_rows(self) -> IntArray | None:
        """P × P hop cycles where a message's transfer ns are exactly its hop cycles plus its
        flit cycles (Raptor's protocol at 1 GHz, up to 256 cores), else None."""
        t = self.target
        if t.protocol != "raptor" or self._num != self._den or self.P > 256:
            return None
        out: IntArray = self.hops * t.hop_cycles
        return out

    def arrival_row(self, src_core: int, flit_cycles: int, at: int) -> IntArray:
        """When a message of ``flit_cycles`` leaving ``src_core`` at ``at`` is on each core
        over free links (``at`` on ``src_core``): :meth:`comm_rows` plus ``at``, as a new
        array; one numpy call where :attr:`_hop_cycle_rows` applies (the list scheduler
        calls this once per read and per child, with sizes too varied to cache)."""
        rows = self._hop_cycle_rows
        if rows is None:
            key = (src_core, flit_cycles)
            row = self._rows.get(key)
            if row is None:
                row = self._rows[key] = self.comm_rows(
                    src_core, np.array([flit_cycles], dtype=np.int64))[0]
            moved: IntArray = row + at
            return moved
        out: IntArray = rows[src_core] + (flit_cycles + at)
        out[src_core] = at
        return out

    def _few_terms(self, f: IntArray) -> IntArray | None:
        """One row's transform where few cores matter, from rows of the dense hop matrix;
        None when many do. Only a core within the mesh's diameter (in hop ns) of the row's
        minimum can lower another (the minimum's own term is never further above it), and
        only a core more than one hop above the minimum can be lowered. The lookahead's
        rows are mostly one of the two: a message's arrival row (its source alone near the
        minimum) or the cores' ends past the best finish (a few busy cores above the idle
        ones): 15.4 us a row became 11.0 (random layered DAG, 30,000 tasks on 16x16)."""
        mn = int(f[f.argmin()])  # (a third of `min`'s cost on 256 cores)
        hops = self._hop_ns_matrix
        src = (f <= mn + (self.rows + self.cols - 2) * self.hop_ns).nonzero()[0]
        if len(src) <= FEW_TERMS:
            out: IntArray = np.minimum(f, np.minimum.reduce(f[src][:, None] + hops[src], axis=0))
            return out
        dst = (f > mn + self.hop_ns).nonzero()[0]
        if len(dst) <= FEW_TERMS:
            out = f.copy()
            out[dst] = np.minimum(f[dst], np.minimum.reduce(f + hops[dst], axis=1))
            return out
        return None

    def distance_transform(self, f: IntArray) -> IntArray:
        """``min_q f[..., q] + hop_ns * hops(p, q)`` for every p; f has shape (..., P) and
        values at most INF (so has the result: q = p is among the terms).

        Separable: a 1-D L1 transform along the columns, then along the rows. On small
        meshes, or for a few rows on a mid-sized one (a task's children in the lookahead),
        one dense (P × P) minimum needs fewer numpy calls, with the same result.
        """
        if self.P <= 32 or f.size * self.P <= DENSE_TRANSFORM:
            dense: IntArray = np.minimum.reduce(f[..., None, :] + self._hop_ns_matrix, axis=-1)
            return dense
        if f.ndim == 1 and self.P <= 256:
            few = self._few_terms(f)
            if few is not None:
                return few
        lead = f.shape[:-1]
        g = f.reshape(*lead, self.rows, self.cols)
        g = _dt1(g, self._col_idx, axis=-1)
        g = _dt1(g, self._row_idx, axis=-2)
        return g.reshape(*lead, self.P)


def transfer_ns(target: Target, src: IntArray, dst: IntArray, nbytes: IntArray) -> IntArray:
    """Vectorized :meth:`Target.transfer_ns` (0 on the same core)."""
    C = target.mesh_cols
    hops = np.abs(src // C - dst // C) + np.abs(src % C - dst % C)
    ns = target.ns(message_cycles(target, hops, nbytes, target.protocol))
    out: IntArray = np.where(src == dst, 0, ns)
    return out


def nearest_cores(target: Target, p: int, k: int) -> list[int]:
    """The ``k`` cores closest to ``p`` by hops (``p`` first), ties by index: O(P log P)
    in numpy, where sorting all cores per core in Python took minutes on 4,096 cores."""
    cols = target.mesh_cols
    idx = np.arange(target.num_cores, dtype=np.int64)
    hops = np.abs(idx // cols - p // cols) + np.abs(idx % cols - p % cols)
    return [int(q) for q in np.argsort(hops, kind="stable")[:k]]


def _dt1(f: IntArray, idx: IntArray, axis: int) -> IntArray:
    """1-D L1 transform along ``axis``; ``idx`` is position × weight, shaped to broadcast."""
    flip = (Ellipsis, slice(None, None, -1)) if axis == -1 else (
        Ellipsis, slice(None, None, -1), slice(None))
    left = np.minimum.accumulate(f - idx, axis=axis) + idx
    right = np.minimum.accumulate((f + idx)[flip], axis=axis)[flip] - idx
    out: IntArray = np.minimum(left, right)
    return out
