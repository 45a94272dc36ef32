"""Host-side checks of `--data-dir` (the trial reads the data; the host only validates).

The batch files a trial may read (data_batch_1 … 5, in order, while they exist) are checked
before anything is written: a binary batch is whole 3,073-byte records (a label byte 0–9, then
3,072 pixels); a python-layout batch is read with a restricted unpickler (docs/data-trust.md): only
a dict, lists, bytes, str, ints and numpy's own array/dtype reconstructors are allowed, and those
are host-side stand-ins that record shape, dtype and bytes (the host never imports numpy) — a
pickle that names anything else (os.system, builtins.eval, ...) is refused before any of it runs.
Then `data` must be uint8 records of 3,072 pixels, `labels` one int in 0–9 per record. The
official files hold 10,000 records each; fewer are accepted (the trial wraps around), so a small
extract works as well.
"""
from __future__ import annotations

import codecs
import os
import pickle
import struct
from pathlib import Path

LAYOUTS = {"cifar-10-batches-bin": "data_batch_1.bin", "cifar-10-batches-py": "data_batch_1"}
RECORD_BYTES = 1 + 32 * 32 * 3
NUM_CLASSES = 10
BATCHES = range(1, 6)  # what the trials read (trials/common/kittrial.py, trials/opennn/core/kit_data.cpp)


class DataError(ValueError):
    pass


def resolve_cifar10(data_dir: str | None) -> Path:
    """The folder holding CIFAR-10's batches, whether given that folder or its parent."""
    if not data_dir:
        raise DataError("--dataset cifar10 needs --data-dir (the official binary or python layout)")
    p = Path(data_dir).expanduser()
    if not p.is_dir():
        raise DataError(f"--data-dir {data_dir}: not a readable directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise DataError(f"--data-dir {data_dir}: permission denied")
    candidates = [p] + [p / name for name in LAYOUTS]
    for c in candidates:
        for layout, first in LAYOUTS.items():
            f = c / first
            if (c.name == layout or c == p) and f.is_file():
                if not os.access(f, os.R_OK):
                    raise DataError(f"--data-dir {data_dir}: {f.name} is not readable")
                check_batches(c.resolve(), "bin" if f.suffix == ".bin" else "py")
                return c.resolve()
    raise DataError(f"--data-dir {data_dir}: no CIFAR-10 batches found "
                    f"(expected {' or '.join(LAYOUTS)} with data_batch_1[.bin])")


def check_batches(folder: Path, layout: str) -> None:
    """Every batch file a trial may read is whole and well-formed; DataError (one line) if not."""
    suffix = ".bin" if layout == "bin" else ""
    for i in BATCHES:
        path = folder / f"data_batch_{i}{suffix}"
        if not path.is_file():
            break
        try:
            (_check_bin if layout == "bin" else _check_pickle)(path)
        except OSError as exc:
            raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _check_bin(path: Path) -> None:
    size = path.stat().st_size
    if size == 0 or size % RECORD_BYTES:
        raise DataError(f"{path}: {size:,} bytes is not whole CIFAR-10 records of {RECORD_BYTES:,} bytes "
                        f"(an official batch is {10000 * RECORD_BYTES:,})")
    labels = path.read_bytes()[::RECORD_BYTES]
    if max(labels) >= NUM_CLASSES:
        bad = next(i for i, b in enumerate(labels) if b >= NUM_CLASSES)
        raise DataError(f"{path}: record {bad} has label {labels[bad]}, outside 0–{NUM_CLASSES - 1}: "
                        "not a CIFAR-10 binary batch")


class _DType:
    """Stand-in for numpy.dtype: its type string (u1, <i8, ...) and, once built, its byte order."""

    def __init__(self, name: object = "", align: object = False, copy: object = True) -> None:
        text = name.decode("latin-1") if isinstance(name, bytes) else name
        if not isinstance(text, str):
            raise pickle.UnpicklingError(f"a numpy dtype of {type(name).__name__}")
        self.kind, self.order = text.lstrip("<>|="), text[:1] if text[:1] in "<>|=" else "="
        if self.kind[:1] in ("O", "V") or not self.kind:  # object arrays unpickle arbitrary objects
            raise pickle.UnpicklingError(f"numpy dtype {text!r} (only plain numbers are allowed)")

    def __setstate__(self, state: object) -> None:
        if isinstance(state, tuple) and len(state) > 1 and isinstance(state[1], (str, bytes)):
            order = state[1].decode("latin-1") if isinstance(state[1], bytes) else state[1]
            self.order = order if order in ("<", ">", "|", "=") else self.order


class _Array:
    """Stand-in for numpy.ndarray: shape, dtype and raw bytes, nothing evaluated."""

    def __init__(self, shape: tuple = (0,), dtype: _DType | None = None, raw: bytes = b"") -> None:
        self.shape, self.dtype, self.raw = shape, dtype, raw

    def __setstate__(self, state: object) -> None:
        if not (isinstance(state, tuple) and len(state) in (4, 5)):
            raise pickle.UnpicklingError("a numpy array with an unknown state")
        shape, dtype, _fortran, raw = state[-4:]  # (version,) shape, dtype, is_fortran, raw data
        if not isinstance(dtype, _DType) or not isinstance(raw, (bytes, bytearray)):
            raise pickle.UnpicklingError("a numpy array whose data is not bytes")
        self.shape, self.dtype, self.raw = tuple(shape), dtype, bytes(raw)

    def count(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    def ints(self) -> list[int]:
        """The values of an integer array (labels), decoded with struct."""
        kind = self.dtype.kind if self.dtype else ""
        codes = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q"}
        if kind not in codes:
            raise ValueError(f"labels of dtype {kind or '?'}, not integers")
        order = ">" if self.dtype.order == ">" else "<"
        size = struct.calcsize(codes[kind])
        if len(self.raw) != self.count() * size:
            raise ValueError(f"labels array of {self.count()} values holds {len(self.raw)} bytes")
        return [v for (v,) in struct.iter_unpack(order + codes[kind], self.raw)]


class _ArrayType:
    """What `numpy.ndarray` resolves to: only ever passed to _reconstruct as the array's class."""


def _reconstruct(cls: object, shape: object, dtype: object) -> _Array:
    if cls is not _ArrayType:
        raise pickle.UnpicklingError("an array of a class other than numpy.ndarray")
    return _Array()


def _frombuffer(buf: object, dtype: object, shape: object, order: object = "C") -> _Array:
    if not isinstance(buf, (bytes, bytearray)) or not isinstance(dtype, _DType):
        raise pickle.UnpicklingError("a numpy buffer that is not bytes")
    return _Array(tuple(shape), dtype, bytes(buf))


def _scalar(dtype: object, raw: object) -> int:
    if not isinstance(dtype, _DType) or not isinstance(raw, (bytes, bytearray)):
        raise pickle.UnpicklingError("a numpy scalar that is not a number")
    values = _Array((1,), dtype, bytes(raw)).ints()
    return values[0]


def _latin1(text: object, encoding: object = "latin1") -> bytes:
    """`_codecs.encode`, as protocol-2 pickles of bytes use it: latin-1 of a str only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode other than a str to latin-1")
    return codecs.encode(text, "latin-1")


_ALLOWED = {("_codecs", "encode"): _latin1, ("numpy", "ndarray"): _ArrayType, ("numpy", "dtype"): _DType}
for _m in ("numpy.core", "numpy._core"):
    _ALLOWED.update({(f"{_m}.multiarray", "_reconstruct"): _reconstruct, (f"{_m}.numeric", "_frombuffer"): _frombuffer,
                     (f"{_m}.multiarray", "scalar"): _scalar})


class _Restricted(pickle.Unpickler):
    """The python-layout batch's unpickler: every global a pickle names goes through find_class (GLOBAL,
    STACK_GLOBAL, INST, OBJ, EXT*), so anything outside _ALLOWED is refused before it is called."""

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR-10 batch never does "
                                         "(refused: a pickle can run code)") from None


def read_python_batch(path: Path) -> tuple[int, list[int]]:
    """(records, labels) of a python-layout batch, read with the restricted unpickler and checked; DataError
    (one line naming the file) for anything that is not a CIFAR-10 batch."""
    try:
        with open(path, "rb") as f:
            batch = _Restricted(f, encoding="bytes").load()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, EOFError, ValueError, ... from hostile bytes
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DataError(f"{path}: not a CIFAR-10 python batch ({text})") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path}: a pickle of {type(batch).__name__}, not a CIFAR-10 batch's dict")
    keys = {(k.decode("latin-1") if isinstance(k, bytes) else k): v for k, v in batch.items()}
    data, labels = keys.get("data"), keys.get("labels")
    if data is None or labels is None:
        raise DataError(f"{path}: a pickle without data/labels: not a CIFAR-10 python batch")
    pixels = RECORD_BYTES - 1
    if not isinstance(data, _Array) or data.dtype is None or data.dtype.kind != "u1":
        what = type(data).__name__ if not isinstance(data, _Array) else f"an array of {data.dtype.kind}"
        raise DataError(f"{path}: data is {what}, not uint8 pixels: not a CIFAR-10 python batch")
    n = data.count()
    if len(data.raw) != n or n == 0 or n % pixels or (len(data.shape) > 1 and data.shape[-1] != pixels):
        raise DataError(f"{path}: data of shape {tuple(data.shape)} ({len(data.raw):,} bytes) is not whole records "
                        f"of {pixels:,} pixels")
    try:
        values = labels.ints() if isinstance(labels, _Array) else list(labels)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: labels are not integers ({exc})") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise DataError(f"{path}: labels are not all integers")
    records = n // pixels
    if len(values) != records:
        raise DataError(f"{path}: {records} images but {len(values)} labels")
    bad = next((i for i, v in enumerate(values) if not 0 <= v < NUM_CLASSES), None)
    if bad is not None:
        raise DataError(f"{path}: record {bad} has label {values[bad]}, outside 0–{NUM_CLASSES - 1}: "
                        "not a CIFAR-10 python batch")
    return records, values


def _check_pickle(path: Path) -> None:
    read_python_batch(path)
