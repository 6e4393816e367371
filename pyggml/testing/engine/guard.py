"""Guarded runs: a case's tensors laid out in one buffer of the backend with guard bytes between
them, so that a kernel writing past its output (or into an input) is caught, the way
test-backend-ops' sentinels catch it.

Every tensor of the case's context gets its own slot, `GUARD` bytes of a known pattern before
and after it (views share their source's slot). After compute, each guard is read back through
a one-byte-per-element tensor placed on it; a changed byte is an out-of-bounds write, reported
with the tensor it borders. The graph is computed directly on the backend (Backend.compute,
with pyggml's preflight), not through a scheduler: a scheduler would place the nodes itself.
"""

from __future__ import annotations

import numpy as np

from pyggml._native import ffi, lib
from pyggml.backend import Backend, Buffer
from pyggml.context import Context
from pyggml.errors import GGMLError
from pyggml.graph import Graph
from pyggml.tensor import Tensor

GUARD = 256  # bytes of pattern on each side of every tensor
PATTERN = 0xA5


class OutOfBounds(AssertionError):
    """A kernel wrote into a guard: past the end (or before the start) of a tensor."""


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def run_guarded(
    backend: Backend,
    ctx: Context,
    graph: Graph,
    inputs: dict[Tensor, np.ndarray],
    outputs: list[Tensor],
    raw: bool = False,
) -> list[np.ndarray]:
    """Allocate every tensor of ctx (a no_alloc context) between guards on `backend`, set the inputs
    (values, or with `raw` the tensors' bytes), compute, check the guards, read the outputs."""
    buft = lib.ggml_backend_get_default_buffer_type(backend.ptr)
    align = max(lib.ggml_backend_buft_get_alignment(buft), 32)
    guard = _align(GUARD, align)
    owners = [t for t in ctx.tensors() if t.ptr.view_src == ffi.NULL and t.ptr.data == ffi.NULL]
    offsets, pos = [], guard
    for t in owners:
        offsets.append(pos)
        pos = _align(pos + lib.ggml_backend_buft_get_alloc_size(buft, t.ptr), align) + guard
    # not `raw`: that name is the caller's choice between set and set_raw, read below
    buf = lib.ggml_backend_buft_alloc_buffer(buft, pos)
    if buf == ffi.NULL:
        raise GGMLError(f"{backend.name}: could not allocate {pos} bytes for a guarded run")
    buffer = Buffer(buf)
    ctx.keep_alive(buffer)
    base = int(ffi.cast("uintptr_t", lib.ggml_backend_buffer_get_base(buf)))
    for t, off in zip(owners, offsets):
        _check(lib.ggml_backend_tensor_alloc(buf, t.ptr, ffi.cast("void *", base + off)), t)
    for t in ctx.tensors():
        if t.ptr.view_src != ffi.NULL and t.ptr.buffer == ffi.NULL:
            _check(lib.ggml_backend_view_init(t.ptr), t)
    # the guards: [guard][t0][guard][t1][guard]...; each readable through an I8 tensor placed on it
    gctx = Context(n_tensors=len(owners) + 1)
    ctx.keep_alive(gctx)
    spans = [(0, None)] + [
        (_align(off + lib.ggml_backend_buft_get_alloc_size(buft, t.ptr), align), t) for t, off in zip(owners, offsets)
    ]
    guards = []
    for start, before in spans:
        g = gctx.tensor("i8", (guard,))
        _check(lib.ggml_backend_tensor_alloc(buf, g.ptr, ffi.cast("void *", base + start)), g)
        g.set(np.full(guard, PATTERN, np.uint8).view(np.int8))
        guards.append((g, before))
    for t, values in inputs.items():
        t.set_raw(values) if raw else t.set(values)
    backend.compute(graph)
    backend.synchronize()
    for g, before in guards:
        got = np.frombuffer(g.numpy().tobytes(), np.uint8)
        bad = np.flatnonzero(got != PATTERN)
        if bad.size:
            where = f"after {_describe(before)}" if before is not None else "before the first tensor"
            raise OutOfBounds(
                f"{backend.name}: {bad.size} guard byte(s) {where} were overwritten (first at +{bad[0]} bytes)"
            )
    return [t.numpy() for t in outputs]


def _check(status, t: Tensor):
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"guarded run: could not place {_describe(t)} (status {status})")


def _describe(t: Tensor) -> str:
    return f"{t.name or '(unnamed)'} ({t.op.name} {t.type.name} ne={t.ne})"
