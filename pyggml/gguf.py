"""GGUF files through ggml's own gguf API (gguf.h): `load`, `read_info` and `save`.

    f = gguf.load("model.gguf")                  # tensors in host memory (a CPU buffer)
    f = gguf.load("model.gguf", "vulkan0")       # or on a device: a name or a Backend
    f.metadata["general.architecture"], f.tensors["token_embd.weight"]
    gguf.save("out.gguf", {"general.name": "x", "n": gguf.Value("u64", 7)}, {"w": np.ones((2, 3), np.float32)})

ggml parses the header (keys, values, tensor descriptions); pyggml then reads each tensor's bytes
once, straight into the tensor's host memory, or through one reused staging buffer into device
memory. Tensors keep their ggml type (quantized too), name and shape, and keep their context and
buffer alive. `save` builds a gguf_context with gguf_set_* and gguf_add_tensor and writes ggml's
header (gguf_get_meta_data), then each tensor's bytes at the offset ggml gave it: the file is
byte for byte what gguf_write_to_file writes.

Metadata values (save): bool -> BOOL; int -> INT32 if it fits, else INT64, else UINT64;
float -> FLOAT32 (as llama.cpp's keys and the gguf Python package); str -> STRING; a list or
tuple -> an array of the type its elements infer (ints: the smallest of INT32/INT64/UINT64
that holds them all; any float: FLOAT32); NumPy scalars and 1-D arrays keep their dtype
(uint8..int64, float32/64, bool, str). `Value(type, v)` picks the type exactly, e.g.
`Value("u8", 3)`, `Value("f64", [0.1, 0.2])` (an array when v is a list, tuple or array).
ggml's gguf has no nested arrays: a list of lists is refused, and a file holding one does not
load. `general.alignment` is a UINT32 power of two up to 2**20 (a plain int is taken as one).

Loaded metadata are plain Python values; `GGUFFile.fields` has them with their GGUF types, so
`save(path, f.fields, f.tensors)` writes the same keys, types, values and tensors back. Strings
are UTF-8; bytes that are not are kept as lone surrogates (errors="surrogateescape"), so they
are written back unchanged. ggml's getters give strings as C strings: a value with a NUL byte
ends at the NUL (and `save` refuses NUL bytes).

Tensors (save): NumPy arrays of float32/float16/float64/int8/int16/int32/int64 (copied to C
order if they are not contiguous, big-endian ones to native order), or pyggml Tensors of any
type (contiguous, with memory; a device tensor is read back first). Names are at most
GGML_MAX_NAME - 1 bytes. Wrong input raises TypeError/ValueError before ggml sees it (gguf.h
aborts the process on a wrong type or a duplicate name); a corrupt or truncated file raises
GGUFError.
"""

from __future__ import annotations

import enum
import io
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyggml._native import ffi, has, lib, logged_warnings
from pyggml.backend import Backend, Buffer
from pyggml.backend import backend as backend_named
from pyggml.context import Context
from pyggml.errors import GGMLError
from pyggml.tensor import MAX_DIMS, Tensor, set_rank
from pyggml.types import Type

ALIGNMENT_KEY = "general.alignment"
DEFAULT_ALIGNMENT = lib.GGUF_DEFAULT_ALIGNMENT
MAX_ALIGNMENT = 1 << 20
_ENCODING = ("utf-8", "surrogateescape")


class GGUFError(GGMLError):
    """A GGUF file ggml cannot read (corrupt, truncated, unsupported), or one pyggml cannot load.

    The message names the file and the reason ggml logged (or the check that failed).
    """


class GGUFType(enum.IntEnum):
    """The GGUF value types (gguf.h's `enum gguf_type`).

    `str(t)` is ggml's short name (u8, i32, f32, bool, str, arr, ...), which `as_gguf_type` and `Value`
    take too.
    """

    UINT8 = lib.GGUF_TYPE_UINT8
    INT8 = lib.GGUF_TYPE_INT8
    UINT16 = lib.GGUF_TYPE_UINT16
    INT16 = lib.GGUF_TYPE_INT16
    UINT32 = lib.GGUF_TYPE_UINT32
    INT32 = lib.GGUF_TYPE_INT32
    FLOAT32 = lib.GGUF_TYPE_FLOAT32
    BOOL = lib.GGUF_TYPE_BOOL
    STRING = lib.GGUF_TYPE_STRING
    ARRAY = lib.GGUF_TYPE_ARRAY
    UINT64 = lib.GGUF_TYPE_UINT64
    INT64 = lib.GGUF_TYPE_INT64
    FLOAT64 = lib.GGUF_TYPE_FLOAT64

    def __str__(self) -> str:
        return ffi.string(lib.gguf_type_name(self)).decode()


# the bytes of each numeric type as NumPy sees them (BOOL: ggml stores it as int8, 0 or 1)
_DTYPE: dict[GGUFType, np.dtype[Any]] = {
    GGUFType.UINT8: np.dtype(np.uint8),
    GGUFType.INT8: np.dtype(np.int8),
    GGUFType.UINT16: np.dtype(np.uint16),
    GGUFType.INT16: np.dtype(np.int16),
    GGUFType.UINT32: np.dtype(np.uint32),
    GGUFType.INT32: np.dtype(np.int32),
    GGUFType.UINT64: np.dtype(np.uint64),
    GGUFType.INT64: np.dtype(np.int64),
    GGUFType.FLOAT32: np.dtype(np.float32),
    GGUFType.FLOAT64: np.dtype(np.float64),
    GGUFType.BOOL: np.dtype(np.bool_),
}
_TYPE_OF_DTYPE = {dt: t for t, dt in _DTYPE.items()}
_INTS = {t for t, dt in _DTYPE.items() if dt.kind in "iu"}
_FLOATS = {GGUFType.FLOAT32, GGUFType.FLOAT64}
_F32_MAX = float(np.finfo(np.float32).max)
_SHORT_NAMES = {str(t): t for t in GGUFType}
_SCALAR_GET = {
    GGUFType.UINT8: lib.gguf_get_val_u8,
    GGUFType.INT8: lib.gguf_get_val_i8,
    GGUFType.UINT16: lib.gguf_get_val_u16,
    GGUFType.INT16: lib.gguf_get_val_i16,
    GGUFType.UINT32: lib.gguf_get_val_u32,
    GGUFType.INT32: lib.gguf_get_val_i32,
    GGUFType.UINT64: lib.gguf_get_val_u64,
    GGUFType.INT64: lib.gguf_get_val_i64,
    GGUFType.FLOAT32: lib.gguf_get_val_f32,
    GGUFType.FLOAT64: lib.gguf_get_val_f64,
    GGUFType.BOOL: lib.gguf_get_val_bool,
}
_SCALAR_SET = {
    GGUFType.UINT8: lib.gguf_set_val_u8,
    GGUFType.INT8: lib.gguf_set_val_i8,
    GGUFType.UINT16: lib.gguf_set_val_u16,
    GGUFType.INT16: lib.gguf_set_val_i16,
    GGUFType.UINT32: lib.gguf_set_val_u32,
    GGUFType.INT32: lib.gguf_set_val_i32,
    GGUFType.UINT64: lib.gguf_set_val_u64,
    GGUFType.INT64: lib.gguf_set_val_i64,
    GGUFType.FLOAT32: lib.gguf_set_val_f32,
    GGUFType.FLOAT64: lib.gguf_set_val_f64,
    GGUFType.BOOL: lib.gguf_set_val_bool,
}


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot be a GGUF file, before anything reads it: missing, or its first bytes are not GGUF's magic.

    Args:
        path: the file.

    Returns:
        "no such file", "not a GGUF file (it starts with ...)", or None when it may be one.
    """
    if not os.path.isfile(path):
        return "no such file"
    with open(path, "rb") as f:
        head = f.read(4)
    return None if head == b"GGUF" else f"not a GGUF file (it starts with {head!r}, not b'GGUF')"


def as_gguf_type(t: GGUFType | str | int) -> GGUFType:
    """The GGUFType a type argument names.

    Args:
        t: a GGUFType, its name ("UINT8", any case), ggml's short name ("u8", "f32", "str", "bool") or
            its number.

    Returns:
        The GGUFType.

    Raises:
        ValueError: an unknown name or number, or ARRAY (give an array's element type instead).
        TypeError: `t` is neither a GGUFType, a str nor an int.
    """
    if isinstance(t, GGUFType):
        out = t
    elif isinstance(t, str):
        found = _SHORT_NAMES.get(t.lower(), GGUFType.__members__.get(t.upper()))  # not `or`: UINT8 is 0
        if found is None:
            raise ValueError(f"unknown GGUF value type {t!r} (one of {', '.join(_SHORT_NAMES)})")
        out = found
    elif isinstance(t, int) and not isinstance(t, bool):
        try:
            out = GGUFType(t)
        except ValueError:
            raise ValueError(f"unknown GGUF value type {t}") from None
    else:
        raise TypeError(f"a GGUF value type must be a GGUFType or its name, got {type(t).__name__}")
    if out == GGUFType.ARRAY:
        raise ValueError("give an array's element type: Value('u8', [1, 2]) is an array of UINT8")
    return out


@dataclass(frozen=True)
class Value:
    """A metadata value with its GGUF type: a scalar, or an array (a list) of that element type.

    `save` infers a plain Python value's type (see the module's doc); a Value picks it exactly:
    `Value("u64", 4096)`, `Value("f64", [0.1, 0.2])`. `GGUFFile.fields` holds what a file has as Values.

    Args:
        type: the scalar or element type: a GGUFType, its name or short name ("u8", "f32", "str").
        value: a scalar, or a list, tuple or 1-d NumPy array for an array (checked by `save`).

    Attributes:
        type: the GGUFType (of the elements, for an array).
        value: the value.

    Raises:
        ValueError: an unknown type, or ARRAY.
        TypeError: a type that is neither a GGUFType, a str nor an int.
    """

    type: GGUFType
    value: Any

    def __init__(self, type: GGUFType | str | int, value: Any) -> None:
        object.__setattr__(self, "type", as_gguf_type(type))
        object.__setattr__(self, "value", value)

    @property
    def is_array(self) -> bool:
        """Whether the value is an array (a list, tuple or NumPy array) of its type, not a scalar."""
        return isinstance(self.value, (list, tuple, np.ndarray))

    @property
    def type_name(self) -> str:
        """The value's type as `python -m pyggml gguf` shows it: u32, str, arr[f32], ..."""
        return f"arr[{self.type}]" if self.is_array else str(self.type)


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the file describes it.

    Attributes:
        name: the tensor's name.
        type: its ggml type.
        ne: its extents in ggml's order, innermost first, 4 entries.
        offset: where its bytes start, from the start of the data section.
        nbytes: its size in bytes.
    """

    name: str
    type: Type
    ne: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents in NumPy's order, trailing ggml dims of 1 dropped (the rank a loaded Tensor has)."""
        n = MAX_DIMS
        while n > 1 and self.ne[n - 1] == 1:
            n -= 1
        return tuple(reversed(self.ne[:n]))

    @property
    def nelements(self) -> int:
        """The number of elements: the product of `ne`."""
        return math.prod(self.ne)


@dataclass
class GGUFFile:
    """What `load` (or `read_info`, with `tensors` empty) found in a GGUF file.

    `metadata, tensors = gguf.load(path)` unpacks it into the two mappings `save` takes.

    Attributes:
        path: the file's path.
        version: the GGUF version.
        alignment: the data alignment in bytes.
        data_offset: where the tensor data section starts in the file.
        fields: the metadata with their GGUF types (`Value`s), in file order.
        tensor_info: each tensor's description (`TensorInfo`), in file order.
        tensors: the loaded tensors by name (empty after `read_info`), each of the file's ggml type and
            NumPy shape, in a buffer its context keeps alive.
    """

    path: str
    version: int
    alignment: int
    data_offset: int  # where the tensor data section starts in the file
    fields: dict[str, Value]  # metadata with their GGUF types, in file order
    tensor_info: dict[str, TensorInfo]  # in file order
    tensors: dict[str, Tensor] = field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata as plain Python values (arrays as lists), in file order."""
        return {k: v.value for k, v in self.fields.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """`metadata, tensors = gguf.load(path)`: the two halves of a file, as `save` takes them."""
        return iter((self.metadata, self.tensors))


# --- reading ----------------------------------------------------------------------------------
def _decode(ptr: Any) -> str:
    return ffi.string(ptr).decode(*_ENCODING)


def _read_value(g: Any, i: int, key: str) -> Value:
    kind = lib.gguf_get_kv_type(g, i)
    if kind == lib.GGUF_TYPE_ARRAY:
        try:
            t = GGUFType(lib.gguf_get_arr_type(g, i))
        except ValueError:
            raise GGUFError(f"key {key!r}: array of unknown type {lib.gguf_get_arr_type(g, i)}") from None
        n = lib.gguf_get_arr_n(g, i)
        if t == GGUFType.STRING:
            return Value(t, [_decode(lib.gguf_get_arr_str(g, i, j)) for j in range(n)])
        if t not in _DTYPE:
            raise GGUFError(f"key {key!r}: array of {t.name} (ggml has no nested arrays)")
        if n == 0:
            return Value(t, [])
        dt = np.dtype(np.int8) if t == GGUFType.BOOL else _DTYPE[t]
        arr = np.frombuffer(ffi.buffer(lib.gguf_get_arr_data(g, i), n * dt.itemsize), dt)
        return Value(t, (arr != 0).tolist() if t == GGUFType.BOOL else arr.tolist())
    try:
        t = GGUFType(kind)
    except ValueError:
        raise GGUFError(f"key {key!r}: unknown value type {kind}") from None
    if t == GGUFType.STRING:
        return Value(t, _decode(lib.gguf_get_val_str(g, i)))
    v = _SCALAR_GET[t](g, i)
    return Value(t, bool(v) if t == GGUFType.BOOL else v)


def _read_header(path: str, size: int) -> GGUFFile:
    # a ggml before gguf_get_tensor_ne (0.15 and older): the tensors' extents from the metadata context
    # gguf_init_from_file makes when asked for one (tensors without data)
    meta_out = None if has("gguf_get_tensor_ne") else ffi.new("struct ggml_context **")
    params = ffi.new("struct gguf_init_params *", {"no_alloc": True, "ctx": meta_out or ffi.NULL})
    with logged_warnings() as lines:
        g = lib.gguf_init_from_file(os.fsencode(path), params[0])
    meta = ffi.gc(meta_out[0], lib.ggml_free) if meta_out is not None and meta_out[0] != ffi.NULL else None
    if g == ffi.NULL:
        why = "; ".join(line.split(": ", 1)[-1] for line in lines) or "no reason given"
        if "invalid GGUF type 9" in why:
            why += " (nested arrays: ggml's gguf does not support them)"
        raise GGUFError(f"{path}: ggml cannot read this GGUF file: {why}")
    g = ffi.gc(g, lib.gguf_free)
    out = GGUFFile(path, lib.gguf_get_version(g), lib.gguf_get_alignment(g), lib.gguf_get_data_offset(g), {}, {})
    for i in range(lib.gguf_get_n_kv(g)):
        key = _decode(lib.gguf_get_key(g, i))
        # ggml's C strings end at a NUL byte: a key that starts with one reads as empty, two that
        # differ after one read the same
        if not key:
            raise GGUFError(f"{path}: key {i} is empty (it starts with a NUL byte)")
        if key in out.fields:
            raise GGUFError(f"{path}: key {key!r} appears twice")
        out.fields[key] = _read_value(g, i, key)
    for i in range(lib.gguf_get_n_tensors(g)):
        name = _decode(lib.gguf_get_tensor_name(g, i))
        if name in out.tensor_info:
            raise GGUFError(f"{path}: tensor name {name!r} appears twice")
        if meta is None:
            ne = tuple(lib.gguf_get_tensor_ne(g, i)[0:MAX_DIMS])
        else:
            ne = tuple(lib.ggml_get_tensor(meta, name.encode()).ne[0:MAX_DIMS])
        try:
            ttype = Type(lib.gguf_get_tensor_type(g, i))
        except ValueError:
            raise GGUFError(
                f"{path}: tensor {name!r} has ggml type {lib.gguf_get_tensor_type(g, i)}, which this ggml does not know"
            ) from None
        info = TensorInfo(name, ttype, ne, lib.gguf_get_tensor_offset(g, i), lib.gguf_get_tensor_size(g, i))
        # with no_alloc ggml does not look at the data section: check that it is all there
        end = out.data_offset + info.offset + info.nbytes
        if end > size:
            raise GGUFError(f"{path}: truncated: tensor {name!r} ends at byte {end}, the file has {size}")
        out.tensor_info[name] = info
    return out


def read_info(path: str | os.PathLike[str]) -> GGUFFile:
    """The header of a GGUF file (metadata, tensor descriptions), without reading tensor data.

    Args:
        path: the file.

    Returns:
        A GGUFFile whose `tensors` is empty.

    Raises:
        GGUFError: a file ggml cannot read (corrupt, truncated, unknown types, nested arrays, duplicate
            keys or tensor names).
        OSError: the file is missing or unreadable.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:  # a missing or unreadable file is Python's OSError
        return _read_header(path, os.fstat(f.fileno()).st_size)


def load(path: str | os.PathLike[str], backend: Backend | str | None = None) -> GGUFFile:
    """Read a GGUF file: its metadata and its tensors.

    The tensors are allocated in one buffer of `backend` and keep their ggml type (quantized too), name and
    shape; each tensor's bytes are read once, straight into host memory or through one staging buffer onto
    the device.

    Args:
        path: the file.
        backend: a Backend or a device name ("cpu", "vulkan0", ...) to hold the tensors, resident like
            weights; None (the default): a CPU (host) buffer.

    Returns:
        A GGUFFile with `tensors` filled.

    Raises:
        GGUFError: a file ggml cannot read, a truncated one, or a tensor without elements.
        OSError: the file is missing or unreadable.
        TypeError: `backend` is neither a Backend, a str nor None.
        ValueError: no device of that name.
        MemoryError: no host memory for the tensors.
        GGMLError: no device memory for the tensors.
    """
    path = os.fspath(path)
    if backend is not None and not isinstance(backend, (Backend, str)):
        raise TypeError(f"load: backend must be a Backend, a device name or None, got {type(backend).__name__}")
    with open(path, "rb") as f:
        out = _read_header(path, os.fstat(f.fileno()).st_size)
        infos = list(out.tensor_info.values())
        for info in infos:
            if info.nelements == 0:
                raise GGUFError(
                    f"{path}: tensor {info.name!r} has no elements (ne={info.ne}); pyggml does not handle empty tensors"
                )
        if not infos:
            return out
        be = backend_named(backend) if isinstance(backend, str) else backend
        ctx = Context(n_tensors=len(infos))
        tensors = []
        for info in infos:
            t = ctx.new_tensor(info.type, info.ne)
            set_rank(t.ptr, len(info.shape))  # GGUF keeps ggml's dims (ggml_n_dims), not leading 1s
            lib.ggml_set_name(t.ptr, info.name.encode(*_ENCODING))  # the file's bytes, UTF-8 or not
            tensors.append(t)
        if be is None:
            ptr = lib.ggml_backend_alloc_ctx_tensors_from_buft(ctx.ptr, lib.ggml_backend_cpu_buffer_type())
            if ptr == ffi.NULL:
                raise MemoryError(f"{path}: could not allocate {sum(i.nbytes for i in infos)} bytes for its tensors")
            ctx.keep_alive(Buffer(ptr))
        else:
            be.alloc_tensors(ctx)
            ctx.keep_alive(be)
        staging: bytearray | None = None
        for info, t in zip(infos, tensors):
            f.seek(out.data_offset + info.offset)
            if t.is_host:  # straight into the tensor's memory
                _read_exactly(f, ffi.buffer(t.ptr.data, info.nbytes), path, info)
            else:  # one read into a staging buffer (reused), one copy to the device
                if staging is None:
                    staging = bytearray(max(i.nbytes for i in infos))
                view = memoryview(staging)[: info.nbytes]
                _read_exactly(f, view, path, info)
                t.set_raw(view)
            out.tensors[info.name] = t
    return out


def _read_exactly(f: io.BufferedReader, into: Any, path: str, info: TensorInfo) -> None:
    got = f.readinto(into)
    if got != info.nbytes:
        raise GGUFError(f"{path}: truncated: tensor {info.name!r} got {got} of its {info.nbytes} bytes")


# --- writing ----------------------------------------------------------------------------------
def _text(what: str, s: str) -> bytes:
    raw = s.encode(*_ENCODING)
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL byte (ggml's gguf keeps strings as C strings)")
    return raw


def _scalar(key: str, t: GGUFType, v: Any) -> Any:
    """v checked and converted for type t: a Python bool/int/float, or bytes for STRING."""
    if t == GGUFType.STRING:
        if not isinstance(v, str):
            raise TypeError(f"metadata {key!r}: a STRING value must be a str, got {type(v).__name__}")
        return _text(f"metadata {key!r}", v)
    if t == GGUFType.BOOL:
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"metadata {key!r}: a BOOL value must be a bool, got {type(v).__name__} {v!r}")
        return bool(v)
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"metadata {key!r}: a bool for a {t.name} value (use Value('bool', ...) for a BOOL)")
    if t in _INTS:
        if not isinstance(v, (int, np.integer)):
            raise TypeError(f"metadata {key!r}: a {t.name} value must be an integer, got {type(v).__name__} {v!r}")
        info = np.iinfo(_DTYPE[t])
        if not info.min <= int(v) <= info.max:
            raise ValueError(f"metadata {key!r}: {v} does not fit in {t.name} ({info.min}..{info.max})")
        return int(v)
    if not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"metadata {key!r}: a {t.name} value must be a number, got {type(v).__name__} {v!r}")
    try:
        x = float(v)
    except OverflowError:
        raise ValueError(f"metadata {key!r}: {v} is too large for {t.name}") from None
    if t == GGUFType.FLOAT32 and math.isfinite(x) and abs(x) > _F32_MAX:
        raise ValueError(f"metadata {key!r}: {v} is too large for FLOAT32 (use Value('f64', ...))")
    return x


def _int_type(key: str, lo: int, hi: int) -> GGUFType:
    for t in (GGUFType.INT32, GGUFType.INT64, GGUFType.UINT64):
        info = np.iinfo(_DTYPE[t])
        if info.min <= lo and hi <= info.max:
            return t
    raise ValueError(f"metadata {key!r}: {lo if lo < 0 else hi} does not fit in any GGUF integer type")


def _infer_scalar(key: str, v: Any) -> GGUFType:
    if isinstance(v, (bool, np.bool_)):
        return GGUFType.BOOL
    if isinstance(v, (np.integer, np.floating)):
        t = _TYPE_OF_DTYPE.get(v.dtype)
        if t is None:
            raise TypeError(f"metadata {key!r}: no GGUF type for NumPy {v.dtype} (use Value(type, ...))")
        return t
    if isinstance(v, int):
        return _int_type(key, v, v)
    if isinstance(v, float):
        return GGUFType.FLOAT32
    if isinstance(v, str):
        return GGUFType.STRING
    if isinstance(v, (list, tuple, np.ndarray, Value)):
        raise TypeError(f"metadata {key!r}: nested arrays are not supported by ggml's gguf")
    raise TypeError(f"metadata {key!r}: no GGUF type for {type(v).__name__} {v!r} (use Value(type, ...))")


def _infer(key: str, v: Any) -> Value:
    """The Value for a plain metadata value (see the module's doc for the rules)."""
    if isinstance(v, Value):
        return v
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return _infer(key, v[()])
        if v.ndim > 1:
            raise TypeError(f"metadata {key!r}: a {v.ndim}-D array (ggml's gguf has no nested arrays)")
        if v.dtype.kind == "U":
            return Value(GGUFType.STRING, v.tolist())
        t = _TYPE_OF_DTYPE.get(v.dtype.newbyteorder("="))
        if t is None:
            raise TypeError(f"metadata {key!r}: no GGUF type for an array of NumPy {v.dtype} (use Value(type, ...))")
        return Value(t, v)
    if isinstance(v, (list, tuple)):
        if not v:
            raise ValueError(f"metadata {key!r}: the element type of an empty list is unknown (use Value(type, []))")
        kinds = {_infer_scalar(key, x) for x in v}
        if kinds <= _INTS:  # NumPy integers of one dtype keep it; else the range decides
            if len(kinds) == 1 and all(isinstance(x, np.integer) for x in v):
                return Value(kinds.pop(), v)
            return Value(_int_type(key, min(int(x) for x in v), max(int(x) for x in v)), v)
        if kinds <= _INTS | _FLOATS:  # only NumPy float64s make a FLOAT64 array, as for scalars
            return Value(GGUFType.FLOAT64 if kinds == {GGUFType.FLOAT64} else GGUFType.FLOAT32, v)
        if len(kinds) == 1:
            return Value(kinds.pop(), v)
        raise TypeError(
            f"metadata {key!r}: an array mixes {', '.join(sorted(k.name for k in kinds))} "
            "(a GGUF array has one element type)"
        )
    return Value(_infer_scalar(key, v), v)


def _array(key: str, t: GGUFType, values: Any) -> Any:
    """An array's elements checked for type t: a contiguous NumPy array, or a list of bytes (STRING)."""
    if t == GGUFType.STRING:
        items = values.tolist() if isinstance(values, np.ndarray) else values
        return [_scalar(key, t, x) for x in items]
    dt = _DTYPE[t]
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise TypeError(f"metadata {key!r}: a {values.ndim}-D array (ggml's gguf has no nested arrays)")
        kind = values.dtype.kind
        ok = {"b": kind == "b", "i": kind in "iu", "u": kind in "iu", "f": kind in "iuf"}[dt.kind]
        if not ok:
            raise TypeError(f"metadata {key!r}: an array of NumPy {values.dtype} for a {t.name} array")
        if values.size and kind in "iu" and t in _INTS:
            info = np.iinfo(dt)
            if int(values.min()) < info.min or int(values.max()) > info.max:
                raise ValueError(f"metadata {key!r}: values do not fit in {t.name} ({info.min}..{info.max})")
        if t == GGUFType.FLOAT32 and values.size:
            finite = values[np.isfinite(values)]
            if finite.size and np.abs(finite).max() > _F32_MAX:
                raise ValueError(f"metadata {key!r}: values too large for FLOAT32 (use Value('f64', ...))")
        return np.ascontiguousarray(values, dtype=dt)
    return np.array([_scalar(key, t, x) for x in values], dtype=dt)


def _set_metadata(g: Any, metadata: Mapping[str, Any]) -> None:
    keep = []  # C strings ggml reads during the calls
    for key, v in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"metadata keys must be str, got {type(key).__name__} {key!r}")
        if not key:
            raise ValueError("metadata: an empty key (ggml asserts keys are not empty)")
        ckey = _text(f"metadata key {key!r}", key)
        if lib.gguf_find_key(g, ckey) != -1:  # ggml would replace the first silently
            raise ValueError(f"metadata key {key!r} appears twice")
        if key == ALIGNMENT_KEY:  # the context's alignment follows it (patch 0021)
            lib.gguf_set_val_u32(g, ckey, _alignment(metadata))
            continue
        val = _infer(key, v)
        if val.is_array:
            data = _array(key, val.type, val.value)
            if val.type == GGUFType.STRING:
                strings = [ffi.new("char[]", s) for s in data]
                keep.append(strings)
                lib.gguf_set_arr_str(g, ckey, ffi.new("const char *[]", strings), len(strings))
            else:
                lib.gguf_set_arr_data(g, ckey, val.type, ffi.from_buffer(data.view(np.uint8)), len(data))
        elif val.type == GGUFType.STRING:
            lib.gguf_set_val_str(g, ckey, _scalar(key, val.type, val.value))
        else:
            _SCALAR_SET[val.type](g, ckey, _scalar(key, val.type, val.value))


def _alignment(metadata: Mapping[str, Any]) -> int:
    """general.alignment's value: a UINT32 power of two (ggml aborts on any other type or value)."""
    if ALIGNMENT_KEY not in metadata:
        return DEFAULT_ALIGNMENT
    v = metadata[ALIGNMENT_KEY]
    if isinstance(v, Value):
        if v.type != GGUFType.UINT32 or v.is_array:
            raise ValueError(f"metadata {ALIGNMENT_KEY!r} must be a UINT32, got {v.type_name}")
        v = v.value
    elif isinstance(v, np.generic) and v.dtype != np.uint32:
        raise ValueError(f"metadata {ALIGNMENT_KEY!r} must be a UINT32, got NumPy {v.dtype}")
    a = _scalar(ALIGNMENT_KEY, GGUFType.UINT32, v)
    if a <= 0 or a & (a - 1):
        raise ValueError(f"metadata {ALIGNMENT_KEY!r} must be a power of two, got {a}")
    if a > MAX_ALIGNMENT:  # ggml pads the header in memory, one byte at a time
        raise ValueError(f"metadata {ALIGNMENT_KEY!r} = {a} is more than pyggml writes ({MAX_ALIGNMENT})")
    return a


_NUMPY_TYPES = {
    np.dtype(np.float32): Type.F32,
    np.dtype(np.float16): Type.F16,
    np.dtype(np.float64): Type.F64,
    np.dtype(np.int8): Type.I8,
    np.dtype(np.int16): Type.I16,
    np.dtype(np.int32): Type.I32,
    np.dtype(np.int64): Type.I64,
}


def _tensor_source(name: str, obj: Any) -> tuple[Type, list[int], Any]:
    """(type, ne, something holding the bytes: a C-contiguous array, or a host Tensor)."""
    if isinstance(obj, Tensor):
        if not obj.is_allocated:
            raise ValueError(f"tensor {name!r} has no memory (allocate it first)")
        if not obj.is_contiguous():
            raise ValueError(f"tensor {name!r} is not contiguous (save cont() of it)")
        return obj.type, list(obj.ne), obj if obj.is_host else obj.raw_bytes()
    if not isinstance(obj, np.ndarray):
        raise TypeError(f"tensor {name!r} must be a NumPy array or a pyggml Tensor, got {type(obj).__name__}")
    arr = obj.astype(obj.dtype.newbyteorder("="), copy=False) if obj.dtype.byteorder == ">" else obj
    t = _NUMPY_TYPES.get(arr.dtype)
    if t is None:
        raise TypeError(
            f"tensor {name!r}: no ggml type for NumPy {obj.dtype} "
            f"(one of {', '.join(str(d) for d in _NUMPY_TYPES)}; or save a pyggml Tensor)"
        )
    if arr.size == 0:
        raise ValueError(f"tensor {name!r} has no elements (shape {arr.shape})")
    if arr.ndim > MAX_DIMS:
        raise ValueError(f"tensor {name!r} has {arr.ndim} dims; ggml has at most {MAX_DIMS}")
    arr = np.ascontiguousarray(arr)
    return t, list(reversed(arr.shape)) or [1], arr


def _build(metadata: Mapping[str, Any], tensors: Mapping[str, Any]) -> tuple[Any, list[tuple[int, Any]], list]:
    """The gguf_context of a file: (context, [(nbytes, C pointer to the bytes)], what keeps them alive)."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"save: metadata must be a mapping of str -> value, got {type(metadata).__name__}")
    if not isinstance(tensors, Mapping):
        raise TypeError(f"save: tensors must be a mapping of str -> array or Tensor, got {type(tensors).__name__}")
    _alignment(metadata)  # checked before ggml sees it
    g = ffi.gc(lib.gguf_init_empty(), lib.gguf_free)
    _set_metadata(g, metadata)
    ctx = Context(n_tensors=max(1, len(tensors)))
    blobs, keep = [], [ctx]
    for name, obj in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {type(name).__name__} {name!r}")
        cname = _text(f"tensor name {name!r}", name)
        if len(cname) >= lib.GGML_MAX_NAME:
            raise ValueError(
                f"tensor name {name!r} is {len(cname)} bytes; ggml keeps at most "
                f"GGML_MAX_NAME - 1 = {lib.GGML_MAX_NAME - 1}"
            )
        if lib.gguf_find_tensor(g, cname) != -1:  # names equal as C strings (ggml aborts on a duplicate)
            raise ValueError(f"tensor name {name!r} appears twice")
        t, ne, src = _tensor_source(name, obj)
        desc = ctx.new_tensor(t, ne)
        lib.ggml_set_name(desc.ptr, cname)
        ptr = src.ptr.data if isinstance(src, Tensor) else ffi.from_buffer(src)
        keep.append(src)
        lib.gguf_add_tensor(g, desc.ptr)
        lib.gguf_set_tensor_data(g, cname, ptr)  # for gguf_write_to_file; save writes the bytes itself
        blobs.append((desc.nbytes, ptr))
    return g, blobs, keep


def save(
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
    tensors: Mapping[str, np.ndarray | Tensor] | None = None,
) -> None:
    """Write a GGUF file (version 3), byte for byte what ggml's `gguf_write_to_file` writes.

    See the module's doc for how metadata values map to GGUF types.

    Args:
        path: the file to write.
        metadata: key -> value: a bool, int, float, str, list, NumPy scalar or 1-d array, or a `Value`;
            `general.alignment` a power of two up to 2**20. None: no metadata.
        tensors: name -> NumPy array (float32/float16/float64/int8/int16/int32/int64, any layout) or pyggml
            Tensor (any type; contiguous, with memory), in the order to write; NumPy arrays are stored in
            their NumPy shape (ne reversed). None: no tensors.

    Raises:
        TypeError: a value or tensor of a kind GGUF cannot hold (nested lists, unsupported dtypes).
        ValueError: a bad value (out of its type's range, NUL bytes in a string, a bad alignment), a name
            longer than `GGML_MAX_NAME - 1` bytes, a duplicate name, a Tensor without memory or not
            contiguous.
        OSError: the file cannot be written.
    """
    path = os.fspath(path)
    g, blobs, keep = _build({} if metadata is None else metadata, {} if tensors is None else tensors)
    meta = bytearray(lib.gguf_get_meta_size(g))
    lib.gguf_get_meta_data(g, ffi.from_buffer(meta))
    alignment = lib.gguf_get_alignment(g)
    with open(path, "wb") as f:
        f.write(meta)
        pos = 0
        for i, (nbytes, ptr) in enumerate(blobs):
            offset = lib.gguf_get_tensor_offset(g, i)
            f.write(bytes(offset - pos))
            f.write(ffi.buffer(ptr, nbytes))
            pos = offset + nbytes
        f.write(bytes(-pos % alignment))  # ggml pads after every tensor, the last one too
    del keep


# --- command line -----------------------------------------------------------------------------
def describe(f: GGUFFile) -> dict[str, Any]:
    """A JSON-ready summary of a file, as `python -m pyggml gguf FILE --json` prints it.

    Args:
        f: what `read_info` or `load` returned.

    Returns:
        A dict with the header (path, version, alignment, data_offset), the metadata with their types, the
        tensors (name, type, shape, ne, offset, nbytes) and totals.
    """
    tensors = [
        {
            "name": i.name,
            "type": i.type.name,
            "shape": list(i.shape),
            "ne": list(i.ne),
            "offset": i.offset,
            "nbytes": i.nbytes,
        }
        for i in f.tensor_info.values()
    ]
    return {
        "path": f.path,
        "version": f.version,
        "alignment": f.alignment,
        "data_offset": f.data_offset,
        "metadata": {k: {"type": v.type_name, "value": v.value} for k, v in f.fields.items()},
        "tensors": tensors,
        "totals": {
            "keys": len(f.fields),
            "tensors": len(tensors),
            "elements": sum(i.nelements for i in f.tensor_info.values()),
            "nbytes": sum(i.nbytes for i in f.tensor_info.values()),
        },
    }


def _show(v: Any, limit: int = 8) -> str:
    def one(x: Any) -> str:
        if isinstance(x, str):  # undecodable bytes shown as escapes, long strings cut
            x = x.encode(*_ENCODING).decode("utf-8", "backslashreplace")
            return repr(x if len(x) <= 60 else x[:57] + "...")
        return repr(x)

    if isinstance(v, list):
        more = f", ... {len(v) - limit} more" if len(v) > limit else ""
        return "[" + ", ".join(one(x) for x in v[:limit]) + more + "]"
    return one(v)


def main(args: Any) -> int:
    """`python -m pyggml gguf FILE [--json]`: print a file's header, metadata and tensors.

    Args:
        args: the parsed command line (`file`, `json`).

    Returns:
        The exit status: 0, or 2 when the file cannot be read, as every bad input (the reason on stderr).
    """
    try:
        f = read_info(args.file)
    except (OSError, GGUFError) as e:
        print(f"gguf: {e}", file=sys.stderr)
        return 2
    d = describe(f)
    if args.json:
        print(json.dumps(d, indent=1, default=repr))
        return 0
    tot = d["totals"]
    print(f"{f.path}: GGUF version {f.version}, alignment {f.alignment}, data at byte {f.data_offset}")
    print(f"metadata ({tot['keys']} keys):")
    width = max((len(k) for k in f.fields), default=0)
    for k, v in f.fields.items():
        n = f"{v.type_name[:-1]},{len(v.value)}]" if v.is_array else v.type_name
        print(f"  {k:<{width}}  {n:<14} {_show(v.value)}")
    print(f"tensors ({tot['tensors']}):")
    width = max((len(i.name) for i in f.tensor_info.values()), default=0)
    for i in f.tensor_info.values():
        shape = "x".join(map(str, i.shape))
        print(f"  {i.name:<{width}}  {i.type.name:<7} {shape:<20} {i.nbytes:>12} bytes")
    print(
        f"total: {tot['tensors']} tensors, {tot['elements']} elements, {tot['nbytes']} bytes "
        f"({tot['nbytes'] / 2**20:.2f} MiB)"
    )
    return 0
