"""The op layer's small promises to a user (issue 19): enums print as names, rope_ext's n_dims
defaults to the whole head (as llama.cpp's full rotary), not to a silent 0."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg
from pyggml.types import DeviceType, Op, SortOrder, Status, Type, UnaryOp


def test_a_tensor_type_prints_as_its_name():
    t = gg.Context().tensor("f32", (2, 3))
    assert str(t.type) == "F32" and f"{t.type}" == "F32" and f"{t.type:>4}" == " F32"
    assert int(t.type) == 0 and f"{t.type:d}" == "0" and t.type == 0  # still ggml's number where one is asked for
    assert repr(t.type) == "<Type.F32: 0>"


@pytest.mark.parametrize(
    "member, name",
    [
        (Type.Q8_0, "Q8_0"),
        (Op.MUL_MAT, "MUL_MAT"),
        (UnaryOp.GELU, "GELU"),
        (Status.SUCCESS, "SUCCESS"),
        (SortOrder.DESC, "DESC"),
        (DeviceType.GPU, "GPU"),
    ],
)
def test_every_enum_prints_as_its_name(member, name):
    assert str(member) == name and "%s" % member == name
    assert type(member).__doc__ and "enum ggml_" in type(member).__doc__


def _rope(n_dims_kw: dict, mode: int, multi: bool = False) -> np.ndarray:
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 2, 8), "a", input=True)  # NumPy (tokens, heads, head_dim): ne [8, 2, 3]
    pos = ctx.tensor("i32", (12 if multi else 3,), "pos", input=True)
    if multi:
        y = ctx.rope_multi(a, pos, None, sections=(2, 1, 1, 0), mode=mode, **n_dims_kw)
    else:
        y = ctx.rope_ext(a, pos, mode=mode, **n_dims_kw)
    graph = gg.Graph(ctx).build_forward_expand(y)
    rng = np.random.default_rng(0)
    feeds = {
        a: rng.uniform(-1, 1, (3, 2, 8)).astype(np.float32),
        pos: rng.integers(0, 50, 12 if multi else 3).astype(np.int32),
    }
    [out] = gg.Runner("cpu", n_threads=1).run(graph, feeds, [y])
    return np.array(out)


@pytest.mark.parametrize("mode", [0, 2])
def test_rope_ext_rotates_the_whole_head_by_default(mode):
    np.testing.assert_array_equal(_rope({}, mode), _rope({"n_dims": 8}, mode))
    assert not np.array_equal(_rope({}, mode), _rope({"n_dims": 4}, mode))


def test_rope_multi_defaults_to_the_whole_head_and_half_of_it_for_vision():
    np.testing.assert_array_equal(_rope({}, 8, multi=True), _rope({"n_dims": 8}, 8, multi=True))
    np.testing.assert_array_equal(_rope({}, 24, multi=True), _rope({"n_dims": 4}, 24, multi=True))


def test_rope_ext_back_defaults_to_the_whole_head():
    ctx = gg.Context()
    a, pos = ctx.tensor("f32", (3, 2, 8)), ctx.tensor("i32", (3,))
    assert ctx.rope_ext_back(a, pos).ne == ctx.rope_ext_back(a, pos, n_dims=8).ne


def test_n_dims_zero_is_refused_not_a_silent_no_op():
    ctx = gg.Context()
    with pytest.raises(ValueError, match="rope_ext: n_dims"):
        ctx.rope_ext(ctx.tensor("f32", (3, 2, 8)), ctx.tensor("i32", (3,)), n_dims=0)


@pytest.mark.parametrize("op", ["rope_ext", "rope_multi", "rope_ext_back"])
@pytest.mark.parametrize(
    "name, value, kind",
    [("n_ctx_orig", 1.5, "an integer"), ("freq_base", "x", "a number"), ("beta_slow", None, "a number")],
)
def test_every_rope_names_the_yarn_argument_it_refuses(op, name, value, kind):
    # the three ropes share one reader of their YaRN scalars: each must still name its own op and argument
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 2, 8))
    pos = ctx.tensor("i32", (12 if op == "rope_multi" else 3,))
    extra = {"sections": (2, 1, 1, 0)} if op == "rope_multi" else {}
    with pytest.raises(TypeError, match=f"^{op}: {name} must be {kind}"):
        getattr(ctx, op)(a, pos, **extra, **{name: value})
