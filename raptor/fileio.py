"""Output files are written whole or not at all: temp file in the same folder, then rename."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """The file gets the mode a plain `open` would give it (0666 under the umask), not
    mkstemp's private 0600."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def save_npz_atomic(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **dict(arrays))  # type: ignore[arg-type]
    write_bytes_atomic(path, buf.getvalue())


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Load an `.npz` of named arrays; raises ValueError with the file name when unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{path}: cannot read inputs as .npz ({e})") from None
