"""Wrappers made from ggml.h (`pyggml.ops.declared`): the declaration's signature, its conversions and checks."""

from __future__ import annotations

import inspect

import pytest

import pyggml
from pyggml.ops import wrapper
from pyggml.ops.declared import declaration, declared


def test_a_declared_wrapper_has_ggml_h_s_signature_and_converts_each_kind():
    f = declared("im2col", defaults={"dst_type": "f32"})
    assert list(inspect.signature(f).parameters) == ["ctx", *(p.name for p in declaration("im2col"))]
    assert [p.kind for p in declaration("im2col")][-2:] == ["bool", "type"]
    ctx = pyggml.Context()
    k, x = ctx.tensor("f32", (4, 2, 3, 3)), ctx.tensor("f32", (1, 2, 9, 9))  # NumPy order
    assert f(ctx, k, x, 1, 1, 0, 0, 1, 1, True).ne == (18, 7, 7, 1)
    with pytest.raises(TypeError, match="im2col: s0 must be an integer, got float"):
        f(ctx, k, x, 1.0, 1, 0, 0, 1, 1, True)
    with pytest.raises(TypeError, match="im2col: is_2D must be a bool"):
        f(ctx, k, x, 1, 1, 0, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="dst_type must be a ggml type"):
        f(ctx, k, x, 1, 1, 0, 0, 1, 1, True, "nope")
    with pytest.raises(TypeError, match="im2col: b must be a Tensor, got list"):
        f(ctx, k, [1], 1, 1, 0, 0, 1, 1, True)


def test_a_check_sees_the_arguments_by_name_and_may_replace_one():
    seen = {}

    def check(x):
        seen.update(vars(x))
        x.c = 2.5

    f = declared("fill", check=check)
    ctx = pyggml.Context()
    a = ctx.tensor("f32", (4,))
    out = f(ctx, a, 1)
    assert seen["a"] is a and seen["c"] == 1.0 and isinstance(seen["c"], float)
    from pyggml.testing.engine.opdb import Node

    assert Node(out, []).param("c") == 2.5  # what the check put there is what ggml got


def test_a_parameter_may_have_any_name_ggml_gives_it():
    """rwkv_wkv6 takes `r`: the generated function's own locals must not shadow it (they did: a cdata error)."""
    names = [p.name for p in declaration("rwkv_wkv6")]
    assert "r" in names
    f = declared("rwkv_wkv6")
    ctx = pyggml.Context()
    S, H, T = 4, 2, 3
    k, v, r, td = (ctx.tensor("f32", (T, H, S)) for _ in range(4))  # NumPy order: ne [S, H, T]
    tf = ctx.tensor("f32", (H, S))
    state = ctx.tensor("f32", (1, S * S * H))
    assert f(ctx, k, v, r, tf, td, state).ne[0] == S * H


def test_what_cannot_be_declared_is_refused_by_name():
    with pytest.raises(KeyError, match="declares no ggml_no_such_op"):
        declaration("no_such_op")
    with pytest.raises(ValueError, match="write its wrapper by hand"):
        declared("map_custom1")
    with pytest.raises(ValueError, match="has no parameter"):
        declared("fill", defaults={"nope": 1})


def test_an_op_without_a_family_wrapper_gets_the_declared_one():
    f = wrapper("conv_2d_s1_ph")
    assert f.__name__ == "conv_2d_s1_ph" and list(inspect.signature(f).parameters) == ["ctx", "a", "b"]
    assert wrapper("add") is pyggml.ops.add


def test_a_declared_wrapper_is_compiled_at_its_first_call_and_keeps_its_signature():
    f = declared("scale_bias")
    before = inspect.signature(f)
    assert f.__code__.co_filename == "<declared>"  # the stand-in, with the wrapper's parameters, until called
    ctx = pyggml.Context()
    a = ctx.tensor("f32", (4,))
    with pytest.raises(TypeError, match="scale_bias: b must be a number"):
        f(ctx, a, 1.0, "x")  # a first call that raises still leaves the wrapper compiled
    assert f.__code__.co_filename != "<declared>" and f.__code__.co_name == "scale_bias"
    assert inspect.signature(f) == before
    assert f(ctx, a, s=2.0, b=1.0).ne == (4, 1, 1, 1)
