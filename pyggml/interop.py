"""Zero-copy interop: a host tensor's memory shared through DLPack, the buffer protocol and NumPy's
array interface; values from any array producer.

Export (`Tensor.__dlpack__`, `__dlpack_device__`, `__buffer__`, `__array_interface__`):

    np.from_dlpack(t)        # NumPy >= 1.22; torch.from_dlpack(t) alike
    np.asarray(t)            # the array interface
    memoryview(t)            # Python >= 3.12 (PEP 688); on 3.11 memoryview(np.asarray(t))

All of them share the tensor's memory (no copy: writes through the consumer's array change the
tensor and the reverse) and keep it alive for as long as the consumer's array lives: the capsule,
memoryview or array holds a `_HostMemory`, which holds the Tensor, which holds its Context, which
holds the buffer (pyggml.lifetime). They follow `Tensor.view()`'s rules, checked in one place
(`pyggml.lifetime.check_shareable`): only host memory the tensor keeps (a context's own memory, a buffer
from `Backend.alloc_tensors`, a GGUF file loaded onto a host device); memory a Runner, Scheduler or
Gallocr lends to one graph is refused, as are device memory (Vulkan, CUDA, RPC, meta: ggml gives no
pointer pyggml could hand out safely), tensors without memory and tensors ggml handed to a callback.
Each refusal is an `ExportError` (a BufferError and a ValueError) that says why and what to do
instead (`numpy()` copies). Strided views export their strides (DLPack counts them in elements: a byte
stride that is not a whole number of elements is refused). Types: F32, F16, F64, I8, I16, I32 and I64
everywhere; BF16 through DLPack only (kDLBfloat: torch reads it, NumPy has no such dtype, and the
buffer protocol no format code); quantized types nowhere (their bytes are blocks, not elements:
`numpy()` dequantizes).

How the DLPack capsule is made: NumPy's own exporter makes it. The tensor's memory is first wrapped
in a NumPy array whose base holds the tensor (as `view()` does), then `array.__dlpack__()` builds the
capsule. NumPy's C code owns the capsule's destructor and the DLManagedTensor's deleter: the deleter
drops the array (and so the tensor) exactly once, under the GIL, and does nothing once the interpreter
is finalizing; an unconsumed capsule's destructor calls it, a consumed one (renamed "used_dltensor" by
its consumer) leaves it to the consumer. A pure-Python capsule (ctypes' PyCapsule_New, a deleter from
ctypes.CFUNCTYPE or cffi's callback, the manager context as a manually increfed PyObject) has to get all
of that right in Python, where a deleter run from a consumer's thread or at shutdown crashes the
process. Only the description is fixed up, before the consumer sees it: BF16, which NumPy exports as
uint16, gets kDLBfloat, and a copy (copy=True) the is-copied flag (the deleter reads neither).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

import numpy as np

from pyggml import lifetime
from pyggml.errors import ExportError
from pyggml.target import Buffer as BufferName
from pyggml.types import Type

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from pyggml.tensor import Tensor


# --- DLPack's C side (dlpack.h 1.0), to read a capsule and fix a BF16 one --------------------------
class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):  # DLManagedTensor (legacy, "dltensor")
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned (DLPack 1.0, "dltensor_versioned")
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# DLDeviceType and DLDataTypeCode values (dlpack.h)
KDL_CPU = 1
KDL_CUDA = 2
KDL_VULKAN = 7
KDL_EXT_DEV = 12
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
DLPACK_FLAG_READ_ONLY = 1
DLPACK_FLAG_IS_COPIED = 2


def _python_api(name: str, restype: Any, argtypes: list) -> Any:
    """A function of Python's C API with its own argument types (`pythonapi[name]` is a new object each
    time, unlike `pythonapi.name`, whose types every other user of ctypes shares)."""
    fn = ctypes.pythonapi[name]
    fn.restype, fn.argtypes = restype, argtypes
    return fn


_capsule_is_valid = _python_api("PyCapsule_IsValid", ctypes.c_int, [ctypes.py_object, ctypes.c_char_p])
_capsule_pointer = _python_api("PyCapsule_GetPointer", ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p])

# --- the types each protocol has a code for ---------------------------------------------------------
# ggml type -> NumPy dtype of its bytes as exported. The dtype's char is the buffer protocol's struct
# format ('q' for I64 on every platform: NumPy's int64 says 'l' on Linux). BF16 travels as its uint16 bits.
_EXPORT_DTYPE: dict[Type, np.dtype] = {
    Type.F32: np.dtype("f"),
    Type.F16: np.dtype("e"),
    Type.F64: np.dtype("d"),
    Type.I8: np.dtype("b"),
    Type.I16: np.dtype("h"),
    Type.I32: np.dtype("i"),
    Type.I64: np.dtype("q"),
    Type.BF16: np.dtype("H"),
}
# NumPy >= 2.1 takes max_version/dl_device/copy and makes versioned (DLPack 1.0) capsules
_NUMPY_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


class _HostMemory:
    """A tensor's host memory as NumPy sees it (the array interface), holding the Tensor: every array,
    memoryview and capsule made over the memory holds this object, so the memory outlives them all.
    `pyggml.lifetime` counts the live ones per tensor (`exports`)."""

    __slots__ = ("tensor", "__array_interface__", "__weakref__")

    def __init__(self, tensor: Tensor, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        self.tensor = tensor
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "strides": strides,
            "version": 3,
            "data": (lifetime.address(tensor.ptr.data), False),
        }
        lifetime.exported(tensor.ptr, self)


def _refuse_type(t: Tensor, what: str, protocol: str) -> ExportError:
    name = t.type.name
    if t.type == Type.BF16:
        why = (
            f"{protocol} has no code for BF16 (NumPy has no bfloat16 dtype); np.from_dlpack/torch.from_dlpack share it"
        )
    else:
        why = f"{name} is stored in blocks of {t.element_size} bytes, not elements {protocol} can describe"
    return ExportError(
        f"{what}: cannot share tensor {t.name or '(unnamed)'} of type {name}: {why}; "
        "numpy() gives a float32 copy (dequantized), or convert it in the graph (ctx.cast / ctx.cpy to F32)"
    )


def _layout(t: Tensor, what: str, protocol: str, bf16: bool) -> tuple[np.dtype, tuple[int, ...], tuple[int, ...]]:
    """(dtype, shape, byte strides) the tensor's memory is shared as, once the sharing rules allow it."""
    lifetime.check_shareable(t, what)
    dtype = _EXPORT_DTYPE.get(t.type)
    if dtype is None or (t.type == Type.BF16 and not bf16):
        raise _refuse_type(t, what, protocol)
    n = t.ndim
    ne, nb = t.ptr.ne, t.ptr.nb
    return dtype, tuple(ne[i] for i in range(n - 1, -1, -1)), tuple(nb[i] for i in range(n - 1, -1, -1))


def shared_array(t: Tensor, what: str, protocol: str, bf16: bool = False) -> np.ndarray:
    """A NumPy array of shape `t.shape` over a tensor's memory, through its strides, without a copy.

    The array's base holds the tensor (and is counted by `pyggml.lifetime.exports` while it lives).

    Args:
        t: the Tensor.
        what: the caller's name for messages ('view', '__dlpack__', ...).
        protocol: the protocol's name in a type error.
        bf16: export BF16 as its uint16 bits (DLPack fixes the code up).

    Returns:
        The array, writeable.

    Raises:
        ExportError: the memory may not be shared (`pyggml.lifetime.check_shareable`) or the type has no
            dtype here (quantized types; BF16 unless bf16).
    """
    dtype, shape, strides = _layout(t, what, protocol, bf16)
    arr = np.asarray(_HostMemory(t, dtype, shape, strides))
    return arr if arr.dtype.char == dtype.char else arr.view(dtype)  # NumPy reads '<i8' as 'l'


def array_interface(t: Tensor) -> dict[str, Any]:
    """NumPy's array interface (version 3) of a tensor's memory, for `Tensor.__array_interface__`.

    The caller's object must hold the tensor: NumPy keeps the object it read the interface from as the
    array's base.

    Args:
        t: the Tensor.

    Returns:
        shape, typestr, byte strides and the data address, writeable.

    Raises:
        ExportError: as `shared_array` (BF16 included: NumPy has no dtype for it).
    """
    dtype, shape, strides = _layout(t, "__array_interface__", "the array interface", False)
    return {
        "shape": shape,
        "typestr": dtype.str,
        "strides": strides,
        "version": 3,
        "data": (lifetime.address(t.ptr.data), False),
    }


def buffer(t: Tensor) -> memoryview:
    """A memoryview of a tensor's memory without a copy (`Tensor.__buffer__`); it holds the tensor.

    Args:
        t: the Tensor.

    Returns:
        The memoryview: its struct format is the type's ('f' F32, 'e' F16, 'd' F64, 'b' I8, 'h' I16,
        'i' I32, 'q' I64), its shape `t.shape`, its strides the tensor's byte strides.

    Raises:
        ExportError: as `shared_array` (BF16 has no struct format code).
    """
    return memoryview(cast("Buffer", shared_array(t, "memoryview", "the buffer protocol")))


def dlpack_device(t: Tensor) -> tuple[int, int]:
    """The DLPack device of a tensor's memory (`Tensor.__dlpack_device__`).

    Args:
        t: the Tensor.

    Returns:
        (DLDeviceType, device id): (kDLCPU=1, 0) for host memory; for device memory (which cannot be
        exported) kDLCUDA=2 or kDLVulkan=7 with the device's index, kDLExtDev=12 for any other (RPC, meta).

    Raises:
        ExportError: the tensor has no memory.
    """
    if not t.is_allocated:
        lifetime.check_shareable(t, "__dlpack_device__")  # raises, naming why
    if t.is_host:
        return (KDL_CPU, 0)
    return device_memory(lifetime.buffer_name(t.ptr))


def device_memory(buffer: str) -> tuple[int, int]:
    """The DLPack device of a device buffer by its type's name (`dlpack_device`, for memory not on the host).

    Args:
        buffer: the buffer type's name (`CUDA0`, `Vulkan1`, `RPC0[127.0.0.1:50052]`, `Meta(Vulkan0,Vulkan1)`).

    Returns:
        (kDLCUDA=2 or kDLVulkan=7, the device's index); (kDLExtDev=12, the device's index, 0 without one) for any
        other.
    """
    b = BufferName.parse(buffer)
    index = b.index or 0
    return ({"cuda": KDL_CUDA, "vulkan": KDL_VULKAN}.get(b.family, KDL_EXT_DEV), index)


def dlpack(
    t: Tensor,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """A DLPack capsule of a tensor (`Tensor.__dlpack__`; the parameters are the protocol's).

    Args:
        t: the Tensor.
        stream: must be None (host memory has no stream).
        max_version: the newest DLPack version the consumer reads, (major, minor); (1, x) or newer gives a
            versioned capsule ("dltensor_versioned", DLPack 1.0, with NumPy >= 2.1), None or (0, x) a legacy
            one ("dltensor").
        dl_device: None or (kDLCPU, 0): the host is the only device pyggml exports to.
        copy: None or False share the memory (no copy); True exports a copy made now, which also works for
            memory that cannot be shared (lent, on a device when dl_device=(1, 0) asks for the host) as long
            as the tensor is contiguous.

    Returns:
        The capsule.

    Raises:
        ExportError: (a BufferError) memory that may not be shared (and no copy asked for), strides that
            are not whole elements, quantized types, another device or a stream.
    """
    if stream is not None:
        raise ExportError(f"__dlpack__: stream must be None for host memory, got {stream!r}")
    if dl_device is not None and tuple(dl_device) != (KDL_CPU, 0):
        raise ExportError(
            f"__dlpack__: cannot export to DLPack device {tuple(dl_device)}: pyggml exports host memory only, "
            f"(kDLCPU={KDL_CPU}, 0)"
        )
    if copy:
        arr = _copied(t, to_host=dl_device is not None)
    else:
        arr = shared_array(t, "__dlpack__", "DLPack", bf16=True)
        bad = [s for s in arr.strides if s % arr.itemsize]
        if bad:
            raise ExportError(
                f"__dlpack__: tensor {t.name or '(unnamed)'} ({t.type.name}) has a stride of {bad[0]} bytes, not "
                f"a whole number of {arr.itemsize}-byte elements, and DLPack counts strides in elements; "
                "numpy() copies it, ctx.cont() makes it contiguous, memoryview(t) or np.asarray(t) share it"
            )
    if _NUMPY_VERSIONED:
        capsule = arr.__dlpack__(max_version=max_version, copy=False)
    else:  # NumPy 1.22-2.0: legacy capsules only, which every consumer takes
        capsule = arr.__dlpack__()
    if t.type == Type.BF16 or copy:
        m = _managed(capsule)
        if t.type == Type.BF16:
            m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits = KDL_BFLOAT, 16
        if copy and isinstance(m, _ManagedVersioned):
            m.flags |= DLPACK_FLAG_IS_COPIED
    return capsule


def _copied(t: Tensor, to_host: bool) -> np.ndarray:
    """A host copy of the tensor's values in its exported dtype (copy=True)."""
    dtype = _EXPORT_DTYPE.get(t.type)
    if dtype is None:
        raise _refuse_type(t, "__dlpack__", "DLPack")
    try:
        return shared_array(t, "__dlpack__", "DLPack", bf16=True).copy()
    except ExportError:
        if not t.is_allocated or (not t.is_host and not to_host) or not t.is_contiguous():
            raise
    return t.raw_bytes().view(dtype).reshape(t.shape)  # device or lent memory: one copy from it


def _managed(capsule: Any) -> _Managed | _ManagedVersioned:
    """The DLManagedTensor(Versioned) of an unconsumed capsule, read in place (ctypes, no copy)."""
    for name, struct in ((b"dltensor", _Managed), (b"dltensor_versioned", _ManagedVersioned)):
        if type(capsule).__name__ == "PyCapsule" and _capsule_is_valid(capsule, name):
            return struct.from_address(_capsule_pointer(capsule, name))
    raise ValueError(f"not an unconsumed DLPack capsule: {capsule!r}")


class CapsuleInfo(NamedTuple):
    """What an unconsumed DLPack capsule describes (`capsule_info`).

    name: the capsule's name ('dltensor' or 'dltensor_versioned'); version: (major, minor) of a
    versioned capsule, None for a legacy one; flags: a versioned capsule's flags (bit 0 read-only, bit 1
    is-copied), 0 for a legacy one; device: (DLDeviceType, id); dtype: (DLDataTypeCode, bits, lanes);
    shape: the extents, outermost first; strides: in elements, None when the producer left them out
    (compact row-major); data: the address of the first element (data + byte_offset)."""

    name: str
    version: tuple[int, int] | None
    flags: int
    device: tuple[int, int]
    dtype: tuple[int, int, int]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    data: int


def capsule_info(capsule: Any) -> CapsuleInfo:
    """Read an unconsumed DLPack capsule without consuming it, for tests and debugging.

    The capsule keeps its name, and its destructor still frees it.

    Args:
        capsule: a PyCapsule named 'dltensor' or 'dltensor_versioned'.

    Returns:
        A CapsuleInfo: what `t.__dlpack__()` describes.

    Raises:
        ValueError: any other object (a consumed capsule, 'used_dltensor', included).
    """
    m = _managed(capsule)
    dl = m.dl_tensor
    n = dl.ndim
    versioned = isinstance(m, _ManagedVersioned)
    return CapsuleInfo(
        name="dltensor_versioned" if versioned else "dltensor",
        version=(m.version.major, m.version.minor) if isinstance(m, _ManagedVersioned) else None,
        flags=int(m.flags) if isinstance(m, _ManagedVersioned) else 0,
        device=(dl.device.device_type, dl.device.device_id),
        dtype=(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes),
        shape=tuple(dl.shape[i] for i in range(n)),
        strides=tuple(dl.strides[i] for i in range(n)) if dl.strides else None,
        data=(dl.data or 0) + dl.byte_offset,
    )


# --- values in: any array producer ------------------------------------------------------------------
class SupportsDLPack(Protocol):
    """Any DLPack producer: an object with `__dlpack__` (a torch tensor, a JAX array, a pyggml Tensor)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        """A DLPack capsule of the object's memory (the producer's signature: stream, max_version, ...)."""
        ...


def as_array(values: Any, what: str) -> np.ndarray:
    """Values as a NumPy array, without a copy where the producer allows one.

    An ndarray as it is (a pyggml Tensor is the caller's to read first: `Tensor.set` does); an object with
    `__dlpack__` (a torch tensor on the CPU, a JAX array on the host) through `np.from_dlpack`; anything
    else through `np.asarray` (the buffer protocol: memoryview, array.array, bytes-likes; the array
    interface; lists and scalars).

    Args:
        values: what a caller gave.
        what: the caller's name for messages ('set').

    Returns:
        The array (its dtype and shape are the caller's to check).

    Raises:
        TypeError: the producer has `__dlpack__` but NumPy cannot read what it exports (memory on a device,
            a dtype NumPy lacks such as bfloat16: convert it on its side first, e.g. torch's `.cpu()`,
            `.float()`); the message names the producer.
    """
    if isinstance(values, np.ndarray):
        return values
    if hasattr(values, "__dlpack__") and not isinstance(values, (bytes, bytearray, memoryview)):
        try:
            return np.from_dlpack(values)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise TypeError(
                f"{what}: NumPy cannot read {type(values).__name__} values through DLPack ({e}); "
                "give them on the host in a dtype NumPy has (e.g. torch: .detach().cpu().float())"
            ) from e
    return np.asarray(values)


__all__ = [
    "CapsuleInfo",
    "SupportsDLPack",
    "as_array",
    "buffer",
    "capsule_info",
    "dlpack",
    "dlpack_device",
    "shared_array",
    "array_interface",
]
