"""ggml's enums as Python enums, and NumPy conversion for every type pyggml moves data in.

F32, F16, F64, I8, I16, I32 and I64 have a NumPy dtype with the same bytes. BF16 and the
block-quantized types (Q8_0, Q4_0, ...) do not: they are converted on the way in
(quantized by ggml's own `ggml_quantize_chunk`) and out (dequantized by the type's
`to_float`), so NumPy sees float32.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TypeAlias, cast

import numpy as np
import numpy.typing as npt

from pyggml._enums import Absent, DeviceType, Op, SortOrder, Status, Type, UnaryOp  # noqa: F401 - re-exported
from pyggml._native import ffi, lib, pinned_api
from pyggml.errors import Unsupported

# what every type argument accepts (as_type): a Type, its name ('f32', 'Q8_0'), its number or a NumPy dtype
TypeLike: TypeAlias = "Type | str | int | npt.DTypeLike"

_DTYPES = {
    Type.F32: np.float32,
    Type.F16: np.float16,
    Type.F64: np.float64,
    Type.I8: np.int8,
    Type.I16: np.int16,
    Type.I32: np.int32,
    Type.I64: np.int64,
}


def as_type(t: TypeLike) -> Type:
    """The ggml `Type` a type argument names.

    Args:
        t: a `Type`, its name ('f32', 'Q8_0', any case), its number, or a NumPy dtype (float32, float16,
            float64, int8, int16, int32, int64).

    Returns:
        The Type.

    Raises:
        ValueError: an unknown name or number.
        TypeError: a NumPy dtype with no ggml type.
    """
    if type(t) is Type:
        return t
    if isinstance(t, str):
        try:
            return Type[t.upper()]
        except KeyError:
            absent = Type._absent_.get(t.upper())  # type: ignore[attr-defined]
            if absent is not None:  # the pin's type, not in this ggml: made only to be refused (require)
                return cast(Type, absent)
            raise ValueError(f"unknown ggml type {t!r}") from None
    if isinstance(t, int) and not isinstance(t, bool):
        return Type(t)
    dt = np.dtype(cast("npt.DTypeLike", t))  # what the cases above left: a dtype-like
    for k, v in _DTYPES.items():
        if np.dtype(v) == dt:
            return k
    raise TypeError(f"no ggml type for NumPy dtype {dt}")


_BLOCK_SIZE = {t: lib.ggml_blck_size(t) for t in Type}
_TYPE_SIZE = {t: lib.ggml_type_size(t) for t in Type}
_QUANTIZED = {t: bool(lib.ggml_is_quantized(t)) for t in Type}
# a type of the pin this ggml lacks: its traits as the pin has them, so that the cases of it are made (and each
# refused when it runs, by require)
for _absent in Type._absent_.values():  # type: ignore[attr-defined]
    _BLOCK_SIZE[_absent], _TYPE_SIZE[_absent], _QUANTIZED[_absent] = pinned_api()["types"][_absent.name]


def require(t: TypeLike) -> Type:
    """`as_type(t)`, or Unsupported for a type of the pin that this build's ggml lacks (before any C call with it).

    Args:
        t: a type (see `as_type`).

    Returns:
        The Type.

    Raises:
        Unsupported: the type is not in this ggml.
    """
    t = as_type(t)
    if isinstance(t, Absent):
        raise Unsupported(f"type {t.name}: {t.absent}")
    return t


def block_size(t: TypeLike) -> int:
    """How many values one block of type `t` holds: 1 for F32, F16 and the integers; 32 for Q8_0, 256 for Q4_K.

    A row's `ne0` must be a multiple of it.

    Args:
        t: a type (see `as_type`).

    Returns:
        The block size.
    """
    return _BLOCK_SIZE[as_type(t)]


def type_size(t: TypeLike) -> int:
    """The bytes of one block of type `t` (`ggml_type_size`): 4 for F32, 34 for Q8_0's 32 values.

    Args:
        t: a type (see `as_type`).

    Returns:
        The size in bytes.
    """
    return _TYPE_SIZE[as_type(t)]


def is_quantized(t: TypeLike) -> bool:
    """Whether `t` is a block-quantized type (Q8_0, Q4_K, IQ4_NL, ...; `ggml_is_quantized`).

    Args:
        t: a type (see `as_type`).

    Returns:
        True for a quantized type.
    """
    return _QUANTIZED[as_type(t)]


_INTEGER = {Type.I8, Type.I16, Type.I32, Type.I64}


def is_integer(t: TypeLike) -> bool:
    """Whether `t` is one of ggml's integer types (I8, I16, I32, I64).

    Args:
        t: a type (see `as_type`).

    Returns:
        True for an integer type.
    """
    return as_type(t) in _INTEGER


def can_quantize(t: TypeLike) -> str | None:
    """Whether `ggml_quantize_chunk` can write type `t` from floats.

    Args:
        t: a type (see `as_type`).

    Returns:
        None when it can, else the reason it cannot (an importance matrix needed, no quantizer).
    """
    t = require(t)
    if lib.ggml_quantize_requires_imatrix(t):
        return f"{t.name} needs an importance matrix to be quantized"
    if lib.ggml_get_type_traits(t).from_float_ref == ffi.NULL:
        return f"ggml has no quantizer for {t.name}"
    if not _quantize_chunk_writes(t):
        return f"ggml_quantize_chunk does not write {t.name} (it has only a row quantizer for it)"
    return None


@functools.cache
def _quantize_chunk_writes(t: Type) -> bool:
    """Whether ggml_quantize_chunk handles t (Q8_1 has a quantizer in its traits but not there):
    one block of zeros, through the guarded call, must come back whole."""
    n = block_size(t)
    src, out = np.zeros(n, dtype=np.float32), np.empty(row_size(t, n), dtype=np.uint8)
    return (
        lib.pyggml_guarded_ggml_quantize_chunk(
            t, ffi.from_buffer("float[]", src), ffi.from_buffer(out), 0, 1, n, ffi.NULL
        )
        == out.size
    )


def host_dtype(t: TypeLike) -> np.dtype:
    """The NumPy dtype values of type `t` are read and written as.

    Args:
        t: a type (see `as_type`).

    Returns:
        The type's own dtype for F32, F16, F64 and the integers; float32 for BF16 and the quantized types.
    """
    return np.dtype(_DTYPES.get(as_type(t), np.float32))


def has_raw_dtype(t: TypeLike) -> bool:
    """Whether NumPy can view this type's bytes directly (zero-copy reads; `Tensor.view`).

    Args:
        t: a type (see `as_type`).

    Returns:
        True for F32, F16, F64, I8, I16, I32, I64.
    """
    return as_type(t) in _DTYPES


def row_size(t: TypeLike, n: int) -> int:
    """The bytes of a row of `n` values of type `t` (`ggml_row_size`).

    Args:
        t: a type (see `as_type`).
        n: the values in the row, a multiple of the type's block size.

    Returns:
        The size in bytes.
    """
    return lib.ggml_row_size(require(t), n)


def encode(t: TypeLike, values: np.ndarray) -> np.ndarray:
    """Values to a tensor's bytes, row-major with the innermost dim last (NumPy order).

    Raw types are cast (exactness is `Tensor.set`'s check), BF16 converted by ggml, quantized types
    quantized by ggml's `ggml_quantize_chunk` row by row (the last axis is a row).

    Args:
        t: the tensor's type (see `as_type`).
        values: the values (host dtype, any shape, NumPy order).

    Returns:
        The bytes: an array of the raw dtype, uint16 for BF16, uint8 for quantized types.

    Raises:
        TypeError: a type ggml cannot quantize to.
        ValueError: a row length that is not a multiple of the block size.
    """
    t = require(t)
    if has_raw_dtype(t):
        return np.ascontiguousarray(values, dtype=_DTYPES[t])
    f = np.ascontiguousarray(values, dtype=np.float32)
    if t == Type.BF16:
        out: np.ndarray = np.empty(f.shape, dtype=np.uint16)
        lib.ggml_fp32_to_bf16_row(
            ffi.from_buffer("float[]", f), ffi.cast("ggml_bf16_t *", ffi.from_buffer(out)), f.size
        )
        return out
    reason = can_quantize(t)
    if reason:
        raise TypeError(reason)
    n_per_row = f.shape[-1] if f.ndim else 1
    if n_per_row % block_size(t):
        raise ValueError(f"{t.name}: a row of {n_per_row} values is not a multiple of the block size {block_size(t)}")
    nrows = f.size // n_per_row
    out = np.empty(row_size(t, n_per_row) * nrows, dtype=np.uint8)
    if (
        lib.pyggml_guarded_ggml_quantize_chunk(
            t, ffi.from_buffer("float[]", f), ffi.from_buffer(out), 0, nrows, n_per_row, ffi.NULL
        )
        == 0
        and out.size
    ):
        from pyggml._native import guard_error

        err = guard_error("quantize")
        if err is not None:
            raise TypeError(f"ggml cannot quantize floats to {t.name}: {err}")
    return out


# values per chunk when `decode` converts a large tensor on several cores
DECODE_CHUNK = 1 << 22
# pyggml's own decoders (native/dequantize.c) where ggml's to_float is slow: the same values, bit for bit
# (tests/test_dequantize.py); ggml's dequantize_row_q6_K took 0.8 s of a 2.8 s check of a Q4_K_M model
_OWN_DECODERS = {Type.Q6_K: lib.pyggml_dequantize_q6_k}


def decode(t: TypeLike, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor's bytes to values of the host dtype.

    Args:
        t: the tensor's type (see `as_type`).
        raw: the bytes (uint8, or the raw dtype).
        shape: the NumPy shape of the result.

    Returns:
        The values, in `shape` (a view of `raw` for raw types, a new float32 array otherwise).

    Raises:
        TypeError: a type ggml cannot convert to float.
        ValueError: a count of values that is not whole blocks of the type, or fewer bytes than they take (the
            conversion would read past them, or leave values unwritten).
    """
    t = require(t)
    if has_raw_dtype(t):
        return raw.view(_DTYPES[t]).reshape(shape)
    n = int(np.prod(shape, dtype=np.int64))
    traits = lib.ggml_get_type_traits(t)
    if traits.to_float == ffi.NULL:
        raise TypeError(f"ggml has no conversion from {t.name} to float")
    block, size = block_size(t), type_size(t)
    if n % block:
        raise ValueError(f"{n} values of {t.name} are not whole blocks of {block}: shape {tuple(shape)}")
    if raw.nbytes < n // block * size:
        raise ValueError(f"{n} values of {t.name} take {n // block * size} bytes, {raw.nbytes} given")
    out = np.empty(n, dtype=np.float32)
    to_float = _OWN_DECODERS.get(t, traits.to_float)
    workers = min(os.cpu_count() or 1, n // DECODE_CHUNK)
    if workers < 2:
        to_float(ffi.from_buffer(raw), ffi.from_buffer("float[]", out), n)
        return out.reshape(shape)
    # a large tensor (a model's weights) in chunks of whole blocks on every core: the conversion releases the GIL
    src, dst = ffi.from_buffer(raw), ffi.from_buffer("float[]", out)
    step = DECODE_CHUNK // block * block

    def chunk(at: int) -> None:
        to_float(src + at // block * size, dst + at, min(step, n - at))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(chunk, range(0, n, step)))
    return out.reshape(shape)
