"""Bad calls raise ValueError/TypeError naming the op and the failed condition, in-process: none of them
kills the interpreter running these tests.

Every public op of pyggml.ops has at least one entry in BAD, which is every op spec's `errors=`. A call ggml.c refuses raises while the
graph is built (OpError: ggml's own GGML_ASSERT, caught by the guard); a call ggml.c accepts but the
CPU kernels abort on (type combinations, strided rows) raises GraphError from the preflight before the
CPU computes it. GOOD holds edge calls next to those that the kernels do accept, computed on the CPU to
show the checks are not too strict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyggml as gg
from pyggml import lib, ops
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.testing.engine import opdb


def public_ops() -> list[str]:
    return sorted(
        n
        for n in ops.__all__
        if callable(getattr(ops, n)) and not isinstance(getattr(ops, n), type) and n != "set_name"
    )


class T:
    """Tensor factory over one context: T(ctx)("f32", (3, 4)) is a NumPy-order shape."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __call__(self, type, shape):
        return self.ctx.tensor(type, shape)


# (op, call(ctx, t), exception, words the message must hold besides "<op>:"): each op spec's `errors=`,
# in the op database (pyggml/testing/engine/opdb/<family>.py)
BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = [
    (op, b.fn, b.raises, b.words) for op, s in opdb.load().items() for b in s.errors
]


# --- the table ------------------------------------------------------------------------------------------------
def _run_bad(op, fn, exc, words):
    """The call raises while building (naming the op), or the CPU preflight refuses its graph."""
    ctx = Context()
    with pytest.raises((ValueError, TypeError)) as info:
        out = fn(ctx, T(ctx))
        graph = Graph(ctx).build_forward_expand(out)
        for leaf in graph.leafs():
            leaf.set_input()
        runner = Runner("cpu")
        runner.allocate(graph, [out])
        runner.compute(graph)
    msg = str(info.value)
    assert isinstance(info.value, exc), f"{op}: expected {exc.__name__}, got {type(info.value).__name__}: {msg}"
    if isinstance(info.value, gg.GraphError):
        assert msg.startswith("compute: ") and " node " in msg, f"{op}: the message does not name the node: {msg}"
    else:
        assert msg.startswith(f"{op}:"), f"message does not name {op}: {msg}"
    assert words in msg, f"{op}: message {msg!r} lacks {words!r}"


@pytest.mark.parametrize("op,fn,exc,words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_call(op, fn, exc, words):
    _run_bad(op, fn, exc, words)


def test_every_op_has_a_bad_call():
    covered = {b[0] for b in BAD}
    missing = [op for op in public_ops() if op not in covered]
    assert not missing, f"ops without a bad-input check: {missing}"
    assert covered <= set(public_ops()), f"unknown ops in BAD: {covered - set(public_ops())}"


# --- guards outside the ops -----------------------------------------------------------------------------------
def test_context_full():
    ctx = Context(mem_size=2 * lib.ggml_tensor_overhead())
    a = ctx.tensor("f32", (4,))
    ctx.tensor("f32", (4,))
    with pytest.raises(MemoryError, match="context is full"):
        ctx.tensor("f32", (4,))
    with pytest.raises(MemoryError, match="context is full: add"):
        ops.add(ctx, a, a)


def test_context_full_with_data():
    ctx = Context(mem_size=lib.ggml_tensor_overhead() + 1024, no_alloc=False)
    with pytest.raises(MemoryError, match="context is full"):
        ctx.tensor("f32", (1024,))


def test_graph_too_small():
    ctx = Context()
    a = ctx.tensor("f32", (4,), input=True)
    out = ops.exp(ctx, ops.neg(ctx, ops.abs(ctx, a)))
    graph = Graph(ctx, size=2)
    with pytest.raises(ValueError, match="graph is full"):
        graph.build_forward_expand(out)


def test_graph_not_a_tensor():
    ctx = Context()
    with pytest.raises(TypeError, match="build_forward_expand: expected a Tensor"):
        Graph(ctx).build_forward_expand(np.zeros(3))


def test_tensor_set_wrong_size():
    ctx = Context(mem_size=1 << 20, no_alloc=False)
    t = ctx.tensor("f32", (3, 4))
    with pytest.raises(ValueError, match="set: 5 values for a tensor of 12 elements"):
        t.set(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="does not match tensor shape"):
        t.set(np.zeros((4, 3), np.float32))


def test_tensor_set_unallocated():
    ctx = Context()
    t = ctx.tensor("f32", (3, 4))
    with pytest.raises(ValueError, match="has no memory yet"):
        t.set(np.zeros((3, 4), np.float32))


def test_tensor_name_too_long():
    ctx = Context()
    t = ctx.tensor("f32", (3,))
    with pytest.raises(ValueError, match="longer than GGML_MAX_NAME"):
        t.name = "x" * lib.GGML_MAX_NAME
    with pytest.raises(ValueError, match="longer than GGML_MAX_NAME"):
        ops.set_name(ctx, t, "y" * 200)
    with pytest.raises(ValueError, match="longer than GGML_MAX_NAME"):
        ctx.tensor("f32", (3,), "z" * 100)
    t.name = "x" * (lib.GGML_MAX_NAME - 1)
    assert t.name == "x" * (lib.GGML_MAX_NAME - 1)


def test_unknown_device():
    with pytest.raises(ValueError, match="no device named 'no-such-device'"):
        gg.device("no-such-device")
    with pytest.raises(ValueError, match="no device named"):
        Runner("no-such-device")


def test_unknown_type():
    ctx = Context()
    with pytest.raises(ValueError, match="unknown ggml type"):
        ctx.tensor("f33", (3,))


# --- still alive ----------------------------------------------------------------------------------------------
def test_alive_after_every_bad_call():
    """All the bad calls in one process, then a correct graph still computes the right values."""
    for op, fn, exc, words in BAD:
        _run_bad(op, fn, exc, words)
    ctx = Context()
    a = ctx.tensor("f32", (3, 8), "a", input=True)
    b = ctx.tensor("f32", (1, 8), "b", input=True)
    out = ops.mul_mat(ctx, ops.add(ctx, a, b), a)
    graph = Graph(ctx).build_forward_expand(out)
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((3, 8), dtype=np.float32), rng.standard_normal((1, 8), dtype=np.float32)
    [y] = Runner("cpu").run(graph, {a: av, b: bv}, [out])
    np.testing.assert_allclose(y, av @ (av + bv).T, rtol=1e-5, atol=1e-5)


# --- the checks do not reject what the kernels accept ------------------------------------------------------------
GOOD = [
    ("add f16 + f32", lambda c, x: ops.add(c, x["h"], x["f"])),
    ("scale bf16", lambda c, x: ops.scale(c, x["bf"], 2.0)),
    ("cpy q8_0 -> f32", lambda c, x: ops.cpy(c, x["q"], c.new_tensor("f32", [64, 2]))),
    ("cont of a permuted f32", lambda c, x: ops.cont(c, ops.permute(c, x["f"], 1, 0, 2, 3))),
    ("clamp of a padded-row view", lambda c, x: ops.clamp(c, ops.view_2d(c, x["f"], 4, 3, 32), 0.0, 0.5)),
    ("unary of a padded-row view", lambda c, x: ops.tanh(c, ops.view_2d(c, x["f"], 4, 3, 32))),
    ("repeat i32", lambda c, x: ops.repeat(c, x["i"], c.new_tensor("i32", [8, 6]))),
    ("concat of a transposed f32", lambda c, x: ops.concat(c, ops.transpose(c, x["sq"]), x["sq"], 1)),
]


@pytest.mark.parametrize("name,build", GOOD, ids=[g[0] for g in GOOD])
def test_good_edge_calls_compute(name, build):
    ctx = Context()
    x = {
        "h": ctx.tensor("f16", (3, 8), "h", input=True),
        "f": ctx.tensor("f32", (3, 8), "f", input=True),
        "bf": ctx.tensor("bf16", (3, 8), "bf", input=True),
        "q": ctx.tensor("q8_0", (2, 64), "q", input=True),
        "i": ctx.tensor("i32", (3, 8), "i", input=True),
        "sq": ctx.tensor("f32", (8, 8), "sq", input=True),
    }
    out = build(ctx, x)
    graph = Graph(ctx).build_forward_expand(out)
    used = {t for t in x.values() if t in graph.leafs()}
    rng = np.random.default_rng(1)
    vals = {
        t: rng.integers(-3, 4, t.shape).astype(np.int32)
        if t.type.name == "I32"
        else rng.uniform(-1, 1, t.shape).astype(np.float32)
        for t in used
    }
    [y] = Runner("cpu").run(graph, vals, [out])
    assert np.isfinite(y).all()


def test_out_of_range_row_indices_are_rejected_before_ggml():
    import pyggml as gg

    ctx = gg.Context()
    a = ctx.tensor("f32", (4, 3), "a", input=True)
    idx = ctx.tensor("i32", (2,), "idx", input=True)
    out = ctx.get_rows(a, idx)
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="get_rows: index idx holds 1..4, outside the 4 rows"):
        gg.Runner("cpu").run(graph, {a: np.zeros((4, 3), np.float32), idx: np.array([1, 4])}, [out])
    [rows] = gg.Runner("cpu").run(
        graph, {a: np.arange(12, dtype=np.float32).reshape(4, 3), idx: np.array([3, 0])}, [out]
    )
    np.testing.assert_array_equal(rows, [[9, 10, 11], [0, 1, 2]])
