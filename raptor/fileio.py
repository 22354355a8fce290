"""Output files are written whole or not at all: temp file in the same folder, then rename."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np


@contextmanager
def open_atomic(path: str | Path) -> Iterator[BinaryIO]:
    """A binary handle on a temporary file beside `path`, renamed to it when the block
    ends and removed if it raises: a file too large to hold in memory is written piece by
    piece and still never seen half-written. The file gets the mode a plain `open` would
    give it (0666 under the umask), not mkstemp's private 0600."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        mask = os.umask(0)  # the umask is read by setting it: put it straight back
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    with open_atomic(path) as fh:
        fh.write(data)


def copy_atomic(source: str | Path, path: str | Path) -> None:
    """`source`'s bytes to `path` in chunks, whole or not at all."""
    with open(source, "rb") as src, open_atomic(path) as fh:
        shutil.copyfileobj(src, fh)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def save_npz_atomic(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Zipped into the temporary file itself: no copy of the archive in memory (a
    model's weights, 100 MB on ResNet-50)."""
    with open_atomic(path) as fh:
        np.savez(fh, **dict(arrays))  # type: ignore[arg-type]


class InputFileError(ValueError):
    """An input file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class ArrayHeader:
    """What an .npy header claims, read before any data is: the check callback of
    `read_arrays` sees it and may refuse the array before it is loaded."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


HeaderCheck = Callable[[ArrayHeader], None]
_NUMERIC_KINDS = "biuf"
_ZIP_MAGIC, _NPY_MAGIC = b"PK\x03\x04", b"\x93NUMPY"


def _header(fp: BinaryIO, key: str, available: int, path: str, check: HeaderCheck | None
            ) -> ArrayHeader:
    """Read and check the .npy header at fp, which ``available`` bytes from here hold: a
    numeric dtype, then ``check``, then the data really present."""
    start = fp.tell()
    version = np.lib.format.read_magic(fp)
    if version not in ((1, 0), (2, 0)):
        raise InputFileError(f"{path}: array {key!r} uses .npy format {version}, which is "
                             "not read (save it with numpy.save/savez)")
    try:
        shape, fortran, dtype = getattr(np.lib.format, f"read_array_header_{version[0]}_0")(fp)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        # numpy parses the header with ast.literal_eval and passes its wording through
        raise InputFileError(f"{path}: array {key!r} has a malformed .npy header (not a "
                             "dict of descr, fortran_order and shape; save it with "
                             "numpy.save/savez)") from None
    header = ArrayHeader(key, tuple(int(d) for d in shape), np.dtype(dtype), bool(fortran))
    if header.dtype.kind not in _NUMERIC_KINDS or header.dtype.hasobject:
        shown = "object" if header.dtype.hasobject else header.dtype
        raise InputFileError(f"{path}: array {key!r} has dtype {shown}; "
                             "inputs must be numeric (float32, or integers for shape operands)")
    if check is not None:
        check(header)
    data_bytes = available - (fp.tell() - start)
    if header.nbytes > data_bytes:
        raise InputFileError(
            f"{path}: array {header.key!r} claims shape {list(header.shape)} "
            f"({header.nbytes:,} bytes) but the file holds {max(data_bytes, 0):,} bytes of it "
            "(truncated or corrupt)")
    return header


def read_arrays(path: str | Path, check: HeaderCheck | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz (keyed by name) or .npy (key ``arr_0``) file.

    Every header is read and checked first — numeric dtype, the data really present, then
    ``check`` (e.g. against a model's shapes) — so that a header claiming a huge array or
    Python objects fails before anything is allocated. Raises `InputFileError`.
    """
    label = str(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
            size = os.fstat(fh.fileno()).st_size
            fh.seek(0)
            if magic.startswith(_NPY_MAGIC):
                return {"arr_0": _read_data(fh, _header(fh, "arr_0", size, label, check))}
            if not magic.startswith(_ZIP_MAGIC):
                what = "an empty file" if not magic else "not a NumPy .npz or .npy file"
                raise InputFileError(f"{label}: cannot read inputs: {what} (write them with "
                                     "numpy.savez, keyed by graph input name)")
            return _read_npz(fh, label, check)
    except InputFileError:
        raise
    except FileNotFoundError:
        raise InputFileError(f"{label}: cannot read inputs: no such file") from None
    except IsADirectoryError:
        raise InputFileError(f"{label}: cannot read inputs: a directory, not an .npz "
                             "file") from None
    except zipfile.BadZipFile:
        raise InputFileError(f"{label}: cannot read inputs: truncated or corrupt .npz (not a "
                             "valid zip archive)") from None
    except (OSError, ValueError, EOFError, zlib.error,
            NotImplementedError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputFileError(f"{label}: cannot read inputs as .npz/.npy: {first}") from None


def _read_npz(fh: BinaryIO, label: str, check: HeaderCheck | None) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(fh) as archive:
        headers: dict[str, tuple[ArrayHeader, zipfile.ZipInfo]] = {}
        for info in archive.infolist():
            if info.is_dir():
                continue
            if not info.filename.endswith(".npy"):
                raise InputFileError(f"{label}: member {info.filename!r} is not an .npy array")
            key = info.filename[:-4]
            if key in headers:
                raise InputFileError(f"{label}: array {key!r} is stored twice")
            with archive.open(info) as member:
                header = _header(member, key, info.file_size, label, check)  # type: ignore[arg-type]
            headers[key] = (header, info)
        for key, (header, info) in headers.items():
            with archive.open(info) as member:
                _header(member, key, info.file_size, label, None)  # type: ignore[arg-type]
                out[key] = _read_data(member, header)  # type: ignore[arg-type]
    return out


def _read_data(fp: BinaryIO, header: ArrayHeader) -> np.ndarray:
    """The data after a header already read and checked (C order, never pickled)."""
    data = fp.read(header.nbytes)
    if len(data) != header.nbytes:
        raise InputFileError(f"array {header.key!r}: data ends early")
    flat = np.frombuffer(data, dtype=header.dtype)
    return flat.reshape(header.shape, order="F" if header.fortran else "C").copy()


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Load an `.npz` (or `.npy`) of named arrays; raises InputFileError naming the file."""
    return read_arrays(path)
