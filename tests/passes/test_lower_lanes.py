"""How lowering cuts a convolution's work into lanes (`_lanes`, `_column_windows`): only as
fine as balancing the cores needs, and every cut reads exactly the input its pixels need."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from raptor.ir.core import Value
from raptor.ir.types import TensorType
from raptor.passes.lower import Tile, Window, _column_windows, _conv_lane_bytes, _lanes
from raptor.target import Target, load_target


@pytest.fixture
def target() -> Target:
    return load_target("default")


def _row_tiles(n: int, cols: int = 64) -> list[Tile]:
    weight = Value(TensorType((128, cols), "f32"))
    return [Tile(128 * i, weight, (128, cols)) for i in range(n)]


def _conv3(size: int, stride: int = 1) -> Window:
    return Window(size, size, (3, 3), (stride, stride), (1, 1), (1, 1),
                  ((size - 1) // stride + 1,) * 2)


def test_wide_rows_are_cut_into_whole_column_lanes(target: Target) -> None:
    """ResNet-18's 56-pixel 3x3 layers: 5 row tiles x 56 rows = 280 one-tile lanes take 5
    rounds of 56 MVMs on 64 cores. Eighths of a row with all 5 tiles (448 lanes) take 7
    rounds of 35: the best balance, and no partial sums to send and add."""
    win, tiles = _conv3(56), _row_tiles(5)
    bundles, chunks = _lanes(target, tiles, 56, 56, lambda n, k: _conv_lane_bytes(
        target, win, tiles[0].shape, len(tiles), n, k))
    assert [len(b) for b in bundles] == [5] and chunks == 8


def test_bundles_are_as_wide_as_the_units(target: Target) -> None:
    """A 7-row layer of 36 row tiles of 4 crossbars: at one unit a tile per lane (bundling
    more would only make every copy hold more crossbars; all 36 do not fit a core); at 4
    units 4 tiles per lane, fired at once."""
    win, tiles = _conv3(7), _row_tiles(36, 512)
    for units, sizes in ((1, [1] * 36), (4, [4] * 9)):
        t = dataclasses.replace(target, mvm_units=units)
        bundles, chunks = _lanes(t, tiles, 7, 7, lambda n, k, t=t: _conv_lane_bytes(
            t, win, tiles[0].shape, len(tiles), n, k))
        assert [len(b) for b in bundles] == sizes and chunks == 1


def test_units_take_several_row_tiles_per_lane(target: Target) -> None:
    """A 28-pixel layer of 9 row tiles: at one unit one tile per lane, whole rows (252
    lanes, 4 rounds of 28 MVMs); at 4 units three tiles fire at once: 3 bundles in thirds
    of a row (252 lanes, 4 rounds of 10)."""
    win, tiles = _conv3(28), _row_tiles(9, 128)
    for units, sizes, chunks in ((1, [1] * 9, 1), (4, [3, 3, 3], 3)):
        t = dataclasses.replace(target, mvm_units=units)
        bundles, k = _lanes(t, tiles, 28, 28, lambda n, k, t=t: _conv_lane_bytes(
            t, win, tiles[0].shape, len(tiles), n, k))
        assert [len(b) for b in bundles] == sizes and k == chunks


def test_one_bundle_takes_the_shortest_lanes(target: Target) -> None:
    """yolo_neck's last layer (4 row tiles, 32 rows of 32 pixels): all tiles per lane, in
    eighths of a row (256 lanes, 4 rounds of 16 MVMs) rather than quarters (128 lanes, 2
    rounds of 32): the same balance, each run of a row ready twice as soon."""
    win, tiles = _conv3(32), _row_tiles(4, 32)
    bundles, chunks = _lanes(target, tiles, 32, 32, lambda n, k: _conv_lane_bytes(
        target, win, tiles[0].shape, len(tiles), n, k))
    assert [len(b) for b in bundles] == [4] and chunks == 8


def test_idle_cores_are_not_filled_with_tiny_lanes(target: Target) -> None:
    """One lane per core already: no cut (a gemm of one sample, 4 row tiles)."""
    bundles, chunks = _lanes(target, _row_tiles(4), 1)
    assert [len(b) for b in bundles] == [1] * 4 and chunks == 1


@pytest.mark.parametrize(("size", "stride", "chunks"), [(56, 1, 2), (224, 2, 2), (7, 1, 3),
                                                        (14, 2, 4)])
def test_column_windows_read_what_their_pixels_need(size: int, stride: int, chunks: int) -> None:
    """Each run's window, placed at its first input column, convolves to exactly the run's
    pixels of the whole window's result (1-D check over a row)."""
    k = 7 if size == 224 else 3
    pad = k // 2
    win = Window(size, size, (k, k), (stride, stride), (1, 1), (pad, pad),
                 ((size + 2 * pad - k) // stride + 1,) * 2)
    rng = np.random.default_rng(0)
    row, kern = rng.standard_normal(size), rng.standard_normal(k)

    def conv(x: np.ndarray, left: int, out: int) -> np.ndarray:
        need = (out - 1) * stride + k
        xp = np.pad(x, (left, max(0, need - len(x) - left)))
        return np.array([xp[i * stride:i * stride + k] @ kern for i in range(out)])

    whole = conv(row, pad, win.out[1])
    runs = _column_windows(win, chunks)
    got = np.concatenate([conv(row[c0:c0 + w.w], w.pads[1], w.out[1]) for c0, w in runs])
    np.testing.assert_allclose(got, whole)
    assert sum(w.out[1] for _, w in runs) == win.out[1]
