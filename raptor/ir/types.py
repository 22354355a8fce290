"""Types of the Spatial IR: ranked tensors (static or `?` dims) and `index`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import numpy as np

DTYPES: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
                               "i8": np.dtype(np.int8), "i32": np.dtype(np.int32)}
"""Element types the IR knows, with the numpy dtype that executes them."""


@lru_cache(maxsize=1 << 14)
def _tensor_spelling(shape: tuple[int | None, ...], dtype: str) -> str:
    """`tensor<...>`, cached: a large module prints a few hundred types a million times."""
    dims = "".join(("?" if d is None else str(d)) + "x" for d in shape)
    return f"tensor<{dims}{dtype}>"


@dataclass(frozen=True, slots=True)
class TensorType:
    """`tensor<AxBx...xf32>`; a dimension of `None` is dynamic (`?`)."""

    shape: tuple[int | None, ...]
    dtype: str = "f32"

    def __str__(self) -> str:
        return _tensor_spelling(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return None not in self.shape

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape as ints; raises for dynamic dimensions (hot: no copy)."""
        if None in self.shape:
            raise ValueError(f"{self} has dynamic dimensions")
        return cast(tuple[int, ...], self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.static_shape)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]


@dataclass(frozen=True, slots=True)
class IndexType:
    """`index`: the lane index and affine loop variables."""

    def __str__(self) -> str:
        return "index"


Type = TensorType | IndexType
INDEX = IndexType()

_TENSOR_RE = re.compile(r"tensor<((?:(?:\d+|\?)x)*)(f32|f16|i8|i32)>")


MAX_ELEMENTS = 1 << 27
"""The most elements a tensor type may hold (512 MiB of f32): a bound checked before
anything is allocated, so a small file cannot ask for gigabytes."""
MAX_RANK = 16


def parse_type(text: str) -> Type:
    """Parse the spelling of a type; raises ValueError with the offending text."""
    if text == "index":
        return INDEX
    m = _TENSOR_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"malformed type '{text}' (expected tensor<AxBx...xf32|f16|i8|i32>)")
    dims = [d for d in m.group(1).split("x") if d]
    if len(dims) > MAX_RANK or any(len(d) > 12 for d in dims):
        raise ValueError(f"type '{text[:60]}' is too large (at most rank {MAX_RANK} and "
                         f"{MAX_ELEMENTS} elements)")
    shape = tuple(None if d == "?" else int(d) for d in dims)
    if math.prod(d for d in shape if d is not None) > MAX_ELEMENTS:
        raise ValueError(f"type '{text}' has more than {MAX_ELEMENTS} elements")
    return TensorType(shape, m.group(2))


def tensor(*shape: int, dtype: str = "f32") -> TensorType:
    """Shorthand used by builders and tests: `tensor(16, 4)`."""
    return TensorType(tuple(shape), dtype)
