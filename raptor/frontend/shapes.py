"""Output-size arithmetic shared by the importer (static shapes) and the reference executor.

Keeping one definition of each formula means the shape the importer records and the array
the reference computes cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "broadcast_shape",
    "conv_out",
    "conv_transpose_out",
    "floor_scaled",
    "matmul_shape",
    "nearest_indices",
    "pool_out",
    "same_pads",
]


def conv_out(size: int, kernel: int, stride: int, pad_total: int, dilation: int) -> int:
    """Output length of a convolution along one axis (floor division)."""
    return (size + pad_total - ((kernel - 1) * dilation + 1)) // stride + 1


def pool_out(size: int, kernel: int, stride: int, pads: tuple[int, int], dilation: int,
             ceil_mode: bool) -> int:
    """Output length of a pool; with ceil_mode a window starting in the end padding is dropped."""
    span = size + pads[0] + pads[1] - ((kernel - 1) * dilation + 1)
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pads[0] else out


def padding_only_window(size: int, kernel: int, stride: int, pads: tuple[int, int],
                        dilation: int, out: int) -> int | None:
    """The first output position along an axis whose window taps only padding (dilation
    can step over the input, ceil_mode can start past it), or None."""
    for o in range(out):
        start = o * stride - pads[0]
        if not any(0 <= start + t * dilation < size for t in range(kernel)):
            return o
    return None


def same_pads(size: int, kernel: int, stride: int, dilation: int, upper: bool) -> tuple[int, int]:
    """Explicit (begin, end) pads for auto_pad SAME_UPPER/SAME_LOWER (output = ceil(in/s))."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def conv_transpose_out(size: int, kernel: int, stride: int, pads: tuple[int, int], dilation: int,
                       output_padding: int) -> int:
    """Output length of a transposed convolution along one axis."""
    return stride * (size - 1) + output_padding + (kernel - 1) * dilation + 1 - pads[0] - pads[1]


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Numpy broadcasting of shapes; ValueError when incompatible."""
    return tuple(int(d) for d in np.broadcast_shapes(*(tuple(s) for s in shapes)))


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Result shape of numpy/ONNX matmul, including the 1-D promotion rules."""
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"matmul inner dimensions differ: {list(a)} @ {list(b)}")
    batch = broadcast_shape(a2[:-2], b2[:-2])
    rows = () if len(a) == 1 else (a2[-2],)
    cols = () if len(b) == 1 else (b2[-1],)
    return (*batch, *rows, *cols)


def nearest_indices(in_size: int, out_size: int, scale: float, mode: str, nearest_mode: str
                    ) -> np.ndarray:
    """Source index of each output position for nearest resize along one axis (ONNX Resize)."""
    out = np.arange(out_size, dtype=np.float64)
    if mode == "asymmetric":
        src = out / scale
    elif mode == "half_pixel":
        src = (out + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        src = (out + 0.5) / scale - 0.5 if out_size > 1 else np.zeros_like(out)
    elif mode == "tf_half_pixel_for_nn":
        src = (out + 0.5) / scale
    elif mode == "align_corners":
        src = out * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros_like(out)
    elif mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        offset = in_size / 2 * (1 - adjustment)
        src = offset + (out + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")
    if nearest_mode in ("floor", "ceil"):
        idx = np.floor(src) if nearest_mode == "floor" else np.ceil(src)
    elif nearest_mode in ("round_prefer_floor", "round_prefer_ceil"):
        tie = np.floor(src) if nearest_mode == "round_prefer_floor" else np.ceil(src)
        idx = np.where(src - np.floor(src) == 0.5, tie, np.round(src))
    else:
        raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


def floor_scaled(size: int, scale: float) -> int:
    """floor(size * scale) as ONNX Resize sizes an axis from a scale factor."""
    return math.floor(size * scale + 1e-9)
