"""Guarded runs catch writes out of bounds, and buffers clear to the byte they are given."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg
from pyggml.testing.check import available_backends
from pyggml.testing.engine.guard import OutOfBounds, run_guarded


@pytest.mark.parametrize("name", [b for b in available_backends()])
def test_buffer_clear_sets_every_byte(name):
    # patch 0013: Vulkan's clear wrote the byte into one byte of every 32-bit word
    ctx = gg.Context()
    t = ctx.tensor("i8", (256,))
    buf = gg.backend(name).alloc_tensors(ctx)
    buf.clear(0xA5)
    got = np.frombuffer(t.numpy().tobytes(), np.uint8)
    assert (got == 0xA5).all(), f"{name}: {np.count_nonzero(got != 0xA5)} of 256 bytes are not 0xA5"


def _widen(t, by: int):
    t.ptr.ne[0] += by
    t.ptr.nb[1] = t.ptr.nb[2] = t.ptr.nb[3] = t.ptr.ne[0] * 4


def _copy_graph(widen: int):
    """A copy of 8 elements into `out` (8 elements), whose source and destination views are made
    `widen` elements longer after ggml checked them: the copy then writes beyond out."""
    ctx = gg.Context()
    x = ctx.tensor("f32", (8 + widen,), "x", input=True)
    out = ctx.tensor("f32", (8,), "out")
    src, dst = ctx.view_1d(x, 8, 0), ctx.view_1d(out, 8, 0)
    y = ctx.cpy(src, dst)
    for t in (src, dst, y):  # what no checked call can make: the raw layer's contract
        _widen(t, widen)
    graph = gg.Graph(ctx).build_forward_expand(y)
    return ctx, graph, x, out


def test_guard_catches_a_write_past_the_output():
    ctx, graph, x, out = _copy_graph(widen=3)
    with pytest.raises(OutOfBounds, match=r"guard byte\(s\) after out"):
        run_guarded(gg.cpu_backend(1), ctx, graph, {x: np.arange(11, dtype=np.float32)}, [out])


def test_guard_passes_a_write_within_bounds():
    ctx, graph, x, out = _copy_graph(widen=0)
    [y] = run_guarded(gg.cpu_backend(1), ctx, graph, {x: np.arange(8, dtype=np.float32)}, [out])
    np.testing.assert_array_equal(y, np.arange(8, dtype=np.float32))


def test_guard_sets_values_through_set_unless_raw():
    """Without `raw`, inputs are values that set() converts to the tensor's type (here float64 to F16):
    the buffer's pointer once shadowed `raw`, so every input went in as raw bytes."""
    ctx = gg.Context()
    x = ctx.tensor("f16", (8,), "x", input=True)
    out = ctx.tensor("f32", (8,), "out")
    y = ctx.cpy(x, out)
    graph = gg.Graph(ctx).build_forward_expand(y)
    values = np.arange(8, dtype=np.float64) / 4
    [got] = run_guarded(gg.cpu_backend(1), ctx, graph, {x: values}, [out])
    np.testing.assert_array_equal(got, values.astype(np.float32))
