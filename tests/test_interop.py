"""Zero-copy interop (pyggml.interop): host tensors shared through DLPack, the buffer protocol and
NumPy's array interface, by `view()`'s rules; values given as any DLPack or buffer-protocol array.

Each export shares memory both ways, keeps it alive after the Tensor object is gone, and is refused
(ExportError, a BufferError) where a view would be: memory lent by an allocator, device memory, no
memory, quantized types. The fuzz at the end makes, consumes and drops exports in random orders and
checks that every one is released exactly once and that memory read through a survivor is intact."""

from __future__ import annotations

import array
import ctypes
import gc
import random
import sys
import threading
from typing import Any

import numpy as np
import pytest

import pyggml as gg
from pyggml import interop, lifetime
from pyggml.errors import ExportError

RAW = {  # type -> (NumPy dtype, DLPack (code, bits), buffer format)
    "f32": (np.float32, (2, 32), "f"),
    "f16": (np.float16, (2, 16), "e"),
    "f64": (np.float64, (2, 64), "d"),
    "i8": (np.int8, (0, 8), "b"),
    "i16": (np.int16, (0, 16), "h"),
    "i32": (np.int32, (0, 32), "i"),
    "i64": (np.int64, (0, 64), "q"),
}


def own(type_: str = "f32", shape: tuple[int, ...] = (3, 4), values: Any = None) -> gg.Tensor:
    """A tensor with memory of its own (a CPU buffer from alloc_tensors), filled with 0, 1, 2, ..."""
    ctx = gg.Context()
    t = ctx.tensor(type_, shape, "t")
    gg.cpu_backend(1).alloc_tensors(ctx)
    t.set(np.arange(int(np.prod(shape))).reshape(shape) if values is None else values)
    return t


def in_context(type_: str = "f32", shape: tuple[int, ...] = (2, 3, 4)) -> tuple[gg.Context, gg.Tensor]:
    """A tensor in a context's own memory (no_alloc=False), filled with 0, 1, 2, ..."""
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    t = ctx.tensor(type_, shape, "base")
    t.set(np.arange(int(np.prod(shape))).reshape(shape))
    return ctx, t


def buffer_of(t: gg.Tensor) -> memoryview:
    """memoryview(t) where Python has PEP 688 (3.12+); t.__buffer__ on 3.11, which Python does not call."""
    if sys.version_info >= (3, 12):
        return memoryview(t)  # type: ignore[arg-type,unused-ignore]
    return t.__buffer__(0)


def churn() -> None:
    """Allocate and free memory of the same sizes, which a freed arena or buffer would be reused for."""
    for _ in range(30):
        junk = gg.Context(mem_size=1 << 16, no_alloc=False).tensor("f32", (4, 4))
        junk.set(np.full((4, 4), -1.0, np.float32))
        own(values=np.full((3, 4), -2.0))


# --- sharing memory both ways -----------------------------------------------------------------------
def test_dlpack_shares_memory_both_ways():
    t = own()
    a = np.from_dlpack(t)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.writeable
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    a[1, 2] = 99  # through the export into the tensor
    assert t.numpy()[1, 2] == 99
    t.set(np.full((3, 4), 5.0))  # through the tensor into the export
    np.testing.assert_array_equal(a, 5.0)
    assert t.__dlpack_device__() == (1, 0)
    assert lifetime.address(t.ptr.data) == a.__array_interface__["data"][0]


def test_the_buffer_protocol_and_the_array_interface_share_memory_both_ways():
    t = own("i64")
    m = buffer_of(t)
    assert (m.format, m.shape, m.strides, m.readonly) == ("q", (3, 4), (32, 8), False)
    m[0, 1] = -7
    assert t.numpy()[0, 1] == -7
    arr = np.asarray(t)  # __array_interface__: on every Python version
    assert arr.base is t or np.shares_memory(arr, np.asarray(m))
    arr[2, 3] = 123
    assert m[2, 3] == 123 and t.numpy()[2, 3] == 123
    t.set(np.zeros((3, 4), np.int64))
    assert m[2, 3] == 0 and arr[2, 3] == 0
    # Python 3.11's path to a memoryview: through NumPy
    assert memoryview(np.asarray(t)).shape == (3, 4)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="memoryview(obj) calls __buffer__ from Python 3.12 on")
def test_memoryview_of_a_tensor():
    t = own()
    m = memoryview(t)  # type: ignore[arg-type,unused-ignore]
    assert m.format == "f" and m.shape == (3, 4)
    assert bytes(t) == t.raw_bytes().tobytes()  # type: ignore[call-overload,unused-ignore]


@pytest.mark.parametrize("type_", sorted(RAW))
def test_each_type_exports_its_own_dtype(type_):
    dtype, (code, bits), fmt = RAW[type_]
    t = own(type_, (2, 5))
    capsule = t.__dlpack__()
    info = interop.capsule_info(capsule)
    assert info.dtype == (code, bits, 1) and info.shape == (2, 5) and info.device == (1, 0)
    assert info.data == lifetime.address(t.ptr.data)
    del capsule
    a = np.from_dlpack(t)
    assert a.dtype == dtype
    np.testing.assert_array_equal(a, np.arange(10).reshape(2, 5))
    m = buffer_of(t)
    assert m.format == fmt and m.itemsize == np.dtype(dtype).itemsize
    assert np.asarray(t).dtype == dtype
    a[0, 0] = 3
    assert t.numpy()[0, 0] == 3 and np.asarray(m)[0, 0] == 3  # (memoryview cannot index format "e")


def test_bf16_is_kdlbfloat_through_dlpack_and_refused_by_the_buffer_protocol():
    t = own("bf16", (2, 4))
    for max_version in (None, (1, 0)):
        capsule = t.__dlpack__(max_version=max_version)
        info = interop.capsule_info(capsule)
        assert info.dtype == (4, 16, 1)  # kDLBfloat, 16 bits
        assert info.data == lifetime.address(t.ptr.data) and info.shape == (2, 4)
    with pytest.raises(ExportError, match="BF16.*numpy\\(\\)"):
        buffer_of(t)
    with pytest.raises(ExportError, match="BF16"):
        np.asarray(t)
    with pytest.raises(ExportError, match="BF16"):
        t.view()
    with pytest.raises((BufferError, TypeError, ValueError, RuntimeError)):  # NumPy has no bfloat16 dtype
        np.from_dlpack(t)


def test_quantized_tensors_are_refused_naming_the_type():
    t = own("q8_0", (2, 32), np.ones((2, 32)))
    for export in (t.__dlpack__, lambda: buffer_of(t), lambda: np.asarray(t), lambda: np.from_dlpack(t)):
        with pytest.raises(ExportError, match="Q8_0.*numpy\\(\\)"):
            export()
    with pytest.raises(BufferError):  # what a DLPack or buffer consumer expects
        t.__dlpack__()
    assert t.numpy().dtype == np.float32  # the copy dequantizes


# --- versions, devices, streams, copies -------------------------------------------------------------
def test_legacy_and_versioned_capsules():
    t = own()
    legacy = interop.capsule_info(t.__dlpack__())
    assert legacy.name == "dltensor" and legacy.version is None
    if not interop._NUMPY_VERSIONED:
        pytest.skip("NumPy < 2.1 makes legacy capsules only")
    v = interop.capsule_info(t.__dlpack__(max_version=(1, 0)))
    assert v.name == "dltensor_versioned" and v.version is not None and v.version[0] == 1
    assert v.flags & interop.DLPACK_FLAG_READ_ONLY == 0  # writeable
    assert interop.capsule_info(t.__dlpack__(max_version=(0, 8))).name == "dltensor"


def test_streams_other_devices_and_copies():
    t = own()
    with pytest.raises(ExportError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0))
    t.__dlpack__(dl_device=(1, 0))
    c = np.from_dlpack(t, copy=True)
    c[0, 0] = 42
    assert t.numpy()[0, 0] == 0  # a copy
    if interop._NUMPY_VERSIONED:
        copied = interop.capsule_info(t.__dlpack__(max_version=(1, 0), copy=True))
        assert copied.flags & interop.DLPACK_FLAG_IS_COPIED and copied.data != lifetime.address(t.ptr.data)
    shared = np.from_dlpack(t, copy=False)
    shared[0, 0] = 42
    assert t.numpy()[0, 0] == 42


def test_capsule_info_refuses_what_is_not_an_unconsumed_capsule():
    with pytest.raises(ValueError, match="capsule"):
        interop.capsule_info(object())


# --- strides --------------------------------------------------------------------------------------
def test_a_permuted_view_exports_its_strides():
    ctx, base = in_context("f32", (2, 3, 4))
    v = ctx.permute(base, 2, 0, 1, 3)  # ggml axes: 0 -> 2, 1 -> 0, 2 -> 1
    expected = v.numpy()
    assert not v.is_contiguous()
    a = np.from_dlpack(v)
    np.testing.assert_array_equal(a, expected)
    info = interop.capsule_info(v.__dlpack__())
    assert info.strides == tuple(s // 4 for s in reversed(v.nb[: v.ndim]))
    assert info.data == lifetime.address(base.ptr.data)
    m = np.asarray(v)
    np.testing.assert_array_equal(m, expected)
    np.testing.assert_array_equal(np.asarray(buffer_of(v)), expected)
    # writes through the strided export land in the base tensor, where the view's strides say
    a[...] = -np.arange(a.size).reshape(a.shape)
    np.testing.assert_array_equal(v.numpy(), a)
    assert sorted(base.numpy().ravel()) == sorted(a.ravel())
    with pytest.raises(ExportError, match="contiguous"):
        v.view()  # view() keeps to contiguous tensors


def test_a_stride_of_no_whole_element_is_refused_by_dlpack_only():
    ctx, base = in_context("f32", (4, 8))
    v = ctx.view_2d(base, 2, 3, 6, 0)  # rows 6 bytes apart: 1.5 F32 elements
    with pytest.raises(ExportError, match="F32.*stride of 6 bytes.*numpy\\(\\)"):
        v.__dlpack__()
    a = np.asarray(v)  # the array interface and the buffer protocol count strides in bytes
    assert a.strides == (6, 4)
    np.testing.assert_array_equal(a, v.numpy())


# --- lifetime -------------------------------------------------------------------------------------
def test_exports_outlive_the_tensor_object():
    t = own(values=np.full((3, 4), 7.0))
    a = np.from_dlpack(t)
    m = buffer_of(t)
    arr = np.asarray(t)
    capsule = t.__dlpack__()
    assert lifetime.exports(t.ptr) >= 3
    key = t.ptr
    del t
    gc.collect()
    churn()
    for x in (a, np.asarray(m), arr):
        np.testing.assert_array_equal(x, 7.0)
    a[0, 0] = 1  # still the tensor's memory, still writeable
    assert m[0, 0] == 1 and arr[0, 0] == 1
    late = np.from_dlpack(_Capsule(capsule))  # a capsule consumed after the tensor object is gone
    np.testing.assert_array_equal(late[1:], 7.0)
    del a, m, arr, capsule, late, x
    gc.collect()
    assert lifetime.exports(key) == 0


# a capsule keeps a pointer to its name, not a copy: names given to it must live as long as it does
_USED = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}
_set_name = ctypes.pythonapi["PyCapsule_SetName"]
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name.restype = ctypes.c_int
_get_pointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_pointer.restype = ctypes.c_void_p


def test_a_consumer_of_its_own_reads_then_calls_the_deleter_once_from_another_thread():
    """What torch or any C consumer does: rename the capsule 'used_dltensor' (its destructor then leaves
    the tensor alone), read the memory through DLTensor.data, and call the deleter when done, from
    whatever thread, without the GIL (ctypes releases it around the call)."""
    t = own(values=np.full((3, 4), 3.0))
    key = t.ptr
    for max_version in (None, (1, 0)):
        capsule = t.__dlpack__(max_version=max_version)
        name = interop.capsule_info(capsule).name.encode()
        addr = _get_pointer(capsule, name)
        managed = interop._managed(capsule)
        assert _set_name(capsule, _USED[name]) == 0
        del capsule  # consumed: its destructor must not release the tensor
        gc.collect()
        assert lifetime.exports(key) == 1
        data = ctypes.cast(managed.dl_tensor.data, ctypes.POINTER(ctypes.c_float))
        del t
        gc.collect()
        churn()
        assert [data[i] for i in range(12)] == [3.0] * 12  # still the tensor's memory
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)
        done = threading.Thread(target=deleter, args=(addr,))
        done.start()
        done.join()
        gc.collect()
        assert lifetime.exports(key) == 0
        t = own(values=np.full((3, 4), 3.0))
        key = t.ptr


def test_an_unconsumed_capsule_releases_the_tensor():
    t = own()
    for _ in range(5):
        t.__dlpack__()
        t.__dlpack__(max_version=(1, 0))
    gc.collect()
    assert lifetime.exports(t.ptr) == 0


def test_memory_lent_by_a_runner_is_refused_then_gone():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    y = ctx.exp(a)
    g = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("cpu", n_threads=1)
    runner.run(g, {a: np.zeros(4)}, y)
    for export in (y.__dlpack__, lambda: buffer_of(y), lambda: np.asarray(y), y.view, lambda: np.from_dlpack(a)):
        with pytest.raises(ExportError, match="lent by a graph allocator.*numpy\\(\\)"):
            export()
    c = np.from_dlpack(y, copy=True)  # a copy may be taken while the memory is the graph's
    np.testing.assert_array_equal(c, 1.0)
    # the runner allocates another graph: the memory is taken back, and the tensor has none
    ctx2 = gg.Context()
    b = ctx2.tensor("f32", (4,), "b", input=True)
    z = ctx2.neg(b)
    runner.run(gg.Graph(ctx2).build_forward_expand(z), {b: np.ones(4)}, z)
    for export in (y.__dlpack__, lambda: buffer_of(y), lambda: np.asarray(y), y.__dlpack_device__):
        with pytest.raises(ExportError, match="has no memory"):
            export()


def test_a_tensor_ggml_handed_over_is_refused():
    t = own()
    with pytest.raises(ExportError, match="handed over by ggml.*numpy\\(\\)"):
        gg.Tensor(t.ptr, None).__dlpack__()


def test_a_context_tensor_export_keeps_the_context():
    ctx, base = in_context("f32", (4, 4))
    a = np.from_dlpack(base)
    del ctx, base
    gc.collect()
    churn()
    np.testing.assert_array_equal(a, np.arange(16).reshape(4, 4))


# --- device memory ----------------------------------------------------------------------------------
def test_meta_memory_is_refused_naming_its_buffer():
    meta = gg.Runner("meta:cpu,cpu")
    ctx = gg.Context()
    w = ctx.tensor("f32", (4, 3), "w")
    meta.backend.alloc_tensors(ctx)
    w.set(np.ones((4, 3)))
    assert not w.is_host
    for export in (w.__dlpack__, lambda: buffer_of(w), lambda: np.asarray(w), w.view):
        with pytest.raises(ExportError, match="not in host memory.*buffer.*numpy\\(\\)"):
            export()
    assert w.__dlpack_device__()[0] == interop.KDL_EXT_DEV
    c = np.from_dlpack(w, device="cpu", copy=True)  # a copy to the host, asked for
    np.testing.assert_array_equal(c, 1.0)


def test_vulkan_memory_is_refused_naming_the_device():
    if "vulkan0" not in [d.name.lower() for d in gg.devices()]:
        pytest.skip("no Vulkan device")
    ctx = gg.Context()
    w = ctx.tensor("f32", (4, 3), "w")
    gg.backend("vulkan0").alloc_tensors(ctx)
    w.set(np.arange(12).reshape(4, 3))
    assert w.__dlpack_device__() == (interop.KDL_VULKAN, 0)
    for export in (w.__dlpack__, lambda: buffer_of(w), lambda: np.asarray(w), lambda: np.from_dlpack(w)):
        with pytest.raises(ExportError, match="not in host memory but in a Vulkan0 buffer.*numpy\\(\\)"):
            export()
    # a view made after the allocation has no buffer of its own: its memory is still the device's
    v = ctx.view_1d(w, 3, 0)
    assert not v.is_host
    with pytest.raises(ExportError, match="Vulkan0"):
        v.__dlpack__()
    with pytest.raises(ExportError, match="Vulkan0"):
        w.__dlpack__(copy=True)  # a copy stays on the device unless the host is asked for
    np.testing.assert_array_equal(np.from_dlpack(w, device="cpu", copy=True), np.arange(12).reshape(4, 3))


# --- values in ------------------------------------------------------------------------------------
class Producer:
    """A DLPack producer that is not NumPy (what a torch or JAX array looks like to pyggml)."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr

    def __dlpack__(self, **kwargs):
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


class _Capsule:
    """A capsule given to np.from_dlpack as if produced now (consumed once)."""

    def __init__(self, capsule) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return (1, 0)


class _CConsumer:
    """A consumer as C code is one: takes the capsule (renames it used), reads through DLTensor.data,
    and calls the deleter once when done, from another thread (without the GIL)."""

    def __init__(self, capsule) -> None:
        name = interop.capsule_info(capsule).name.encode()
        self.addr = _get_pointer(capsule, name)
        self.managed = interop._managed(capsule)
        assert _set_name(capsule, _USED[name]) == 0

    def values(self) -> np.ndarray:
        dl = self.managed.dl_tensor
        shape = tuple(dl.shape[i] for i in range(dl.ndim))
        strides = tuple(dl.strides[i] * 4 for i in range(dl.ndim)) if dl.strides else None
        raw = ctypes.cast(dl.data, ctypes.POINTER(ctypes.c_float * (1 << 20))).contents
        return np.ndarray(shape, np.float32, buffer=memoryview(raw), strides=strides).copy()

    def release(self) -> None:
        done = threading.Thread(target=ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.managed.deleter), args=(self.addr,))
        done.start()
        done.join()


def test_set_takes_buffer_protocol_and_dlpack_arrays():
    t = own("f32", (2, 3))
    t.set(memoryview(array.array("f", [1, 2, 3, 4, 5, 6])).cast("B").cast("f", (2, 3)))
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [4, 5, 6]])
    t.set(array.array("d", [6, 5, 4, 3, 2, 1]))
    np.testing.assert_array_equal(t.numpy().ravel(), [6, 5, 4, 3, 2, 1])
    t.set(Producer(np.full((2, 3), 0.5, np.float32)))
    np.testing.assert_array_equal(t.numpy(), 0.5)
    t.set(own("i32", (2, 3)))  # another tensor: its values
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    i = own("i32", (3,))
    i.set(array.array("i", [7, 8, 9]))
    np.testing.assert_array_equal(i.numpy(), [7, 8, 9])


def test_wrong_values_from_any_producer_raise_as_numpy_values_do():
    t = own("f32", (2, 3))
    i = own("i32", (3,))
    cases = [
        (t, np.ones(5), Producer(np.ones(5)), ValueError, "5 values for a tensor of 6"),
        (t, np.ones((3, 2)), Producer(np.ones((3, 2))), ValueError, "shape \\(3, 2\\) does not match"),
        (i, np.array([0.5, 1, 2]), array.array("d", [0.5, 1, 2]), ValueError, "not a whole number"),
        (i, np.array([1, 2, 2**40]), array.array("q", [1, 2, 2**40]), ValueError, "do not fit in I32"),
        (t, np.ones((2, 3), np.complex64), Producer(np.ones((2, 3), np.complex64)), TypeError, "complex64"),
    ]
    for tensor, as_numpy, other, error, message in cases:
        with pytest.raises(error, match=message):
            tensor.set(as_numpy)
        with pytest.raises(error, match=message):
            tensor.set(other)


def test_a_dlpack_producer_numpy_cannot_read_is_a_type_error():
    class OnDevice(Producer):
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, **kwargs):
            raise BufferError("the data is on a CUDA device")

    with pytest.raises(TypeError, match="OnDevice values through DLPack.*CUDA"):
        own().set(OnDevice(np.ones((3, 4))))


def test_runner_inputs_from_any_producer():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    b = ctx.tensor("f32", (4,), "b", input=True)
    y = ctx.add(a, b)
    g = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("cpu", n_threads=1)
    out = runner.run(g, {a: array.array("f", [1, 2, 3, 4]), b: Producer(np.full(4, 10, np.float32))}, y)
    np.testing.assert_array_equal(out, [11, 12, 13, 14])
    out = runner.run(g, {a: memoryview(np.ones(4, np.float32)), b: own("f32", (4,))}, y)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="3 values for a tensor of 4"):
        runner.run(g, {a: array.array("f", [1, 2, 3]), b: np.ones(4)}, y)


# --- PyTorch, where installed -----------------------------------------------------------------------
def test_torch_shares_memory_both_ways():
    torch = pytest.importorskip("torch")
    t = own()
    x = torch.from_dlpack(t)
    assert tuple(x.shape) == (3, 4) and x.dtype == torch.float32
    x[0, 0] = 5
    assert t.numpy()[0, 0] == 5
    t.set(np.full((3, 4), 2.0))
    assert float(x.sum()) == 24
    ctx, base = in_context("f32", (2, 3, 4))
    v = ctx.permute(base, 2, 0, 1, 3)
    np.testing.assert_array_equal(torch.from_dlpack(v).numpy(), v.numpy())
    b = own("bf16", (2, 4))
    xb = torch.from_dlpack(b)
    assert xb.dtype == torch.bfloat16
    np.testing.assert_array_equal(xb.float().numpy(), b.numpy())
    # and back: torch tensors as values
    t.set(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    np.testing.assert_array_equal(t.numpy(), np.arange(12).reshape(3, 4))
    with pytest.raises(TypeError, match="DLPack"):
        t.set(torch.ones(3, 4, dtype=torch.bfloat16))
    del t
    gc.collect()
    churn()
    assert float(x.sum()) == 66  # torch's tensor keeps the memory: the values set last, 0 + 1 + ... + 11


def test_jax_reads_the_memory_and_keeps_it():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    t = own()
    x = jnp.from_dlpack(t)
    assert x.dtype == jnp.float32 and x.shape == (3, 4)
    assert x.unsafe_buffer_pointer() == lifetime.address(t.ptr.data)  # no copy
    ctx, base = in_context("f32", (2, 3, 4))
    v = ctx.permute(base, 2, 0, 1, 3)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(v)), v.numpy())
    b = own("bf16", (2, 4))
    xb = jnp.from_dlpack(b)
    assert xb.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(xb.astype(jnp.float32)), b.numpy())
    key = t.ptr
    del t
    gc.collect()
    churn()
    assert float(x.sum()) == 66 and lifetime.exports(key) == 1
    del x
    gc.collect()
    assert lifetime.exports(key) == 0
    u = own()
    u.set(jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * 2)
    np.testing.assert_array_equal(u.numpy(), np.arange(12).reshape(3, 4) * 2)


# --- fuzz: make, consume and drop exports in random orders ---------------------------------------------
def fuzz_lifetimes(steps: int, seed: int) -> dict[str, int]:
    """Random walk over tensors (own buffers, context memory, permuted views) and their exports: make
    capsules, consume some (by NumPy), drop capsules, arrays, memoryviews and Tensor objects in any
    order, collect garbage, churn memory. After each step every live consumer must still read the values
    its tensor was filled with (a freed or reused memory would not), and at the end every export must be
    released (lifetime.exports back to 0: no deleter skipped, none run twice)."""
    rng = random.Random(seed)
    tensors: list[tuple[gg.Tensor, np.ndarray]] = []  # (tensor, the values it holds)
    consumers: list[tuple[object, np.ndarray]] = []  # (array, memoryview or capsule; the values it must read)
    keys: set[int] = set()  # addresses of every tensor exported (held by int: a freed one's may be reused)
    counts = {"made": 0, "consumed": 0, "dropped_unconsumed": 0, "tensors_dropped": 0}
    for step in range(steps):
        _fuzz_step(rng, step, tensors, consumers, keys, counts)
        _check_consumers(consumers)
    tensors.clear()
    _drop_all(consumers)
    gc.collect()
    leaked = [k for k in keys if lifetime._exports.get(k)]
    assert not leaked, f"{len(leaked)} tensors still counted as exported after every consumer was dropped"
    return counts


def _fuzz_step(rng, step, tensors, consumers, keys, counts) -> None:
    """One random step of fuzz_lifetimes (a function of its own: no local variable outlives it)."""
    op = rng.random()
    if op < 0.2 or not tensors:
        kind = rng.choice(["own", "context", "permuted"])
        fill = float(step)
        if kind == "own":
            t = own(values=np.full((3, 4), fill))
        else:
            ctx, base = in_context("f32", (2, 3, 4))
            base.set(np.full((2, 3, 4), fill))
            t = base if kind == "context" else ctx.permute(base, 1, 2, 0, 3)
        tensors.append((t, np.full(t.shape, fill, np.float32)))
        keys.add(lifetime.address(t.ptr))
    elif op < 0.55:
        t, expected = rng.choice(tensors)
        how = rng.choice(["capsule", "versioned", "from_dlpack", "buffer", "asarray", "later", "c"])
        counts["made"] += 1
        if how in ("capsule", "versioned"):
            consumers.append((t.__dlpack__(max_version=(1, 0) if how == "versioned" else None), expected))
        elif how == "from_dlpack":
            consumers.append((np.from_dlpack(t), expected))
            counts["consumed"] += 1
        elif how == "buffer":
            consumers.append((buffer_of(t), expected))
        elif how == "asarray":
            consumers.append((np.asarray(t), expected))
        elif how == "c":
            consumers.append((_CConsumer(t.__dlpack__(max_version=rng.choice([None, (1, 0)]))), expected))
            counts["consumed"] += 1
        else:  # a capsule consumed later, possibly after its tensor object is gone
            consumers.append((_Capsule(t.__dlpack__()), expected))
    elif op < 0.7 and consumers:
        i = rng.randrange(len(consumers))
        c, expected = consumers[i]
        if isinstance(c, _Capsule) and c.capsule is not None:
            consumers[i] = (np.from_dlpack(c), expected)
            counts["consumed"] += 1
        else:
            if type(c).__name__ == "PyCapsule":
                counts["dropped_unconsumed"] += 1
            if isinstance(c, _CConsumer):
                c.release()
            consumers.pop(i)
    elif op < 0.85 and tensors:
        tensors.pop(rng.randrange(len(tensors)))
        counts["tensors_dropped"] += 1
    elif op < 0.95:
        gc.collect()
    else:
        churn()


def _drop_all(consumers: list[tuple[object, np.ndarray]]) -> None:
    """Drop every consumer (a C consumer calls its deleter); no reference outlives this function."""
    for c, _ in consumers:
        if isinstance(c, _CConsumer):
            c.release()
    consumers.clear()


def _check_consumers(consumers: list[tuple[object, np.ndarray]]) -> None:
    """Every live consumer still reads its tensor's values (an unconsumed capsule still describes it)."""
    for c, expected in consumers:
        if isinstance(c, (np.ndarray, memoryview)):
            np.testing.assert_array_equal(np.asarray(c), expected)
        elif isinstance(c, _Capsule) and c.capsule is not None:
            assert interop.capsule_info(c.capsule).shape == expected.shape
        elif type(c).__name__ == "PyCapsule":
            assert interop.capsule_info(c).shape == expected.shape
        elif isinstance(c, _CConsumer):
            np.testing.assert_array_equal(c.values(), expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzz_lifetimes(seed):
    counts = fuzz_lifetimes(300, seed)
    assert counts["made"] > 50 and counts["consumed"] > 10 and counts["tensors_dropped"] > 10
