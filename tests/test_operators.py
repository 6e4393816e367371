"""Tensor's operators (`+ - * / @`, unary minus, numbers on either side) against NumPy on the CPU, their refusals,
the repr, and one-value tensors as Python scalars."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import pyggml as gg

RNG = np.random.default_rng(20261205)


@pytest.fixture(scope="module")
def runner():
    with gg.Runner("cpu") as r:
        yield r


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to NumPy's result bit for bit (the sign of a zero too), NaN where NumPy has NaN."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    uint = {4: np.uint32, 2: np.uint16}[want.dtype.itemsize]
    np.testing.assert_array_equal(got[~nan].view(uint), want[~nan].view(uint))


def values(shape, dtype=np.float32, special: bool = False) -> np.ndarray:
    v = RNG.standard_normal(shape).astype(dtype)
    if special and v.size >= 6:
        v.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 3.0]
    return v


def run(runner, ctx, outs, feeds):
    graph = gg.Graph(ctx)
    for y in outs:
        graph.build_forward_expand(y)
    return runner.run(graph, feeds, list(outs))


def random_pair(rank_a: int, rank_b: int):
    """Two NumPy-order shapes where b broadcasts into a (each of b's dims 1 or a's; b may have fewer dims)."""
    a = tuple(int(n) for n in RNG.integers(1, 5, rank_a))
    b = tuple(n if RNG.random() < 0.5 else 1 for n in a[rank_a - rank_b :])
    return a, b


@pytest.mark.parametrize("seed", range(6))
def test_tensor_operators_are_numpys_float32_results_bit_for_bit(runner, seed):
    ctx = gg.Context()
    rank_a = 1 + seed % 4
    sa, sb = random_pair(rank_a, 1 + (seed * 7) % rank_a)
    a = ctx.tensor("f32", sa, "a", input=True)
    b = ctx.tensor("f32", sb, "b", input=True)
    av, bv = values(sa, special=True), values(sb)
    outs = {"a+b": a + b, "b+a": b + a, "a-b": a - b, "a*b": a * b, "b*a": b * a, "a/b": a / b, "-a": -a}
    want = {"a+b": av + bv, "b+a": bv + av, "a-b": av - bv, "a*b": av * bv, "b*a": bv * av, "a/b": av / bv}
    want["-a"] = -av
    with np.errstate(all="ignore"):
        got = run(runner, ctx, outs.values(), {a: av, b: bv})
    for (key, t), g in zip(outs.items(), got):
        assert t.shape == want[key].shape, key
        same_bits(g, want[key])


def test_a_broadcast_of_the_first_operand_into_the_second_swaps_add_and_mul(runner):
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    b = ctx.tensor("f32", (3, 2, 4), "b", input=True)
    av, bv = values((4,)), values((3, 2, 4))
    s, p = a + b, a * b
    assert s.op == gg.Op.ADD and s.src == [b, a] and s.shape == (3, 2, 4)
    got = run(runner, ctx, [s, p], {a: av, b: bv})
    same_bits(got[0], av + bv)
    same_bits(got[1], av * bv)


def test_leading_ones_keep_numpys_rank(runner):
    ctx = gg.Context()
    a = ctx.tensor("f32", (3,), "a", input=True)
    b = ctx.tensor("f32", (1, 1, 3), "b", input=True)
    av, bv = values((3,)), values((1, 1, 3))
    outs = [a + b, a - b, b / a, a * 2.0]
    assert [t.shape for t in outs] == [(1, 1, 3), (1, 1, 3), (1, 1, 3), (3,)]
    got = run(runner, ctx, outs, {a: av, b: bv})
    for g, w in zip(got, [av + bv, av - bv, bv / av, av * 2.0]):
        same_bits(g, w)


NUMBERS: list[object] = [
    2.0,
    -3,
    0.1,
    1.5,
    0.0,
    -0.0,
    0.25,
    3.0,
    1e30,
    1e300,
    2.0**-130,
    float("nan"),
    float("inf"),
    -float("inf"),
]
NUMBERS += [np.float32(0.7), np.float64(1 / 3), np.int64(5), 70000.0]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_numbers_on_either_side_are_numpys_result_bit_for_bit(runner, dtype):
    np_dtype = {"f32": np.float32, "f16": np.float16}[dtype]
    ctx = gg.Context()
    t = ctx.tensor(dtype, (3, 5), "t", input=True)
    tv = values((3, 5), np_dtype, special=True)
    outs, want = [], []
    with np.errstate(all="ignore"):
        for c in NUMBERS:
            w = float(np_dtype(c))  # NumPy rounds a Python number to the array's type (NEP 50)
            outs += [t + c, c + t, t - c, c - t, t * c, c * t, t / c, c / t]
            want += [tv + w, w + tv, tv - w, w - tv, tv * w, w * tv, tv / w, w / tv]
            want = [np.asarray(x, dtype=np_dtype) for x in want]
        got = run(runner, ctx, outs, {t: tv})
    for i, (g, w) in enumerate(zip(got, want)):
        c, form = NUMBERS[i // 8], ["t+c", "c+t", "t-c", "c-t", "t*c", "c*t", "t/c", "c/t"][i % 8]
        try:
            same_bits(g, w)
        except AssertionError as e:
            raise AssertionError(f"{dtype} {form} with c = {c!r}") from e


def test_the_ops_numbers_build(runner):
    ctx = gg.Context()
    t = ctx.tensor("f32", (2, 3), "t", input=True)
    assert (t * 2.0).op == gg.Op.SCALE and (2.0 * t).op == gg.Op.SCALE
    assert (t + 1.0).op == gg.Op.SCALE and (1.0 - t).op == gg.Op.SCALE  # ggml_scale_bias is a SCALE node
    assert (t / 4.0).op == gg.Op.SCALE  # 1/4 is exact
    assert (t / 3.0).op == gg.Op.DIV and (3.0 / t).op == gg.Op.DIV
    assert (t + 0.0).op == gg.Op.ADD  # scale_bias with bias 0 would keep -0.0
    assert (np.float32(2.0) * t).op == gg.Op.SCALE  # NumPy defers to the tensor
    assert (-t).op == gg.Op.UNARY


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 4), (4, 1)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (1, 4, 5)),
    ((3, 4), (2, 4, 5)),  # a broadcasts over b's batch
    ((1, 3, 4), (2, 4, 5)),
    ((4,), (2, 4, 5)),
    ((2, 3, 3, 4), (3, 4, 2)),
    ((2, 3, 3, 4), (2, 1, 4, 2)),
    ((1, 1, 3, 4), (4, 2)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_is_numpys(runner, sa, sb):
    ctx = gg.Context()
    a = ctx.tensor("f32", sa, "a", input=True)
    b = ctx.tensor("f32", sb, "b", input=True)
    av, bv = values(sa), values(sb)
    y = a @ b
    want = av @ bv
    assert y.shape == want.shape and y.type == gg.Type.F32
    [got] = run(runner, ctx, [y], {a: av, b: bv})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_by_a_transposed_weight_multiplies_the_weight_itself(runner):
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 8), "x", input=True)
    w = ctx.tensor("f32", (5, 8), "w", input=True)
    y = x @ ctx.transpose(w)
    assert y.op == gg.Op.MUL_MAT and y.src[0].op == gg.Op.TRANSPOSE and y.src[0].view_src == w  # no copy of w
    xv, wv = values((3, 8)), values((5, 8))
    [got] = run(runner, ctx, [y], {x: xv, w: wv})
    np.testing.assert_allclose(got, xv @ wv.T, rtol=1e-5, atol=1e-5)


def test_operands_from_another_context_keep_it_alive(runner):
    ctx = gg.Context()
    other = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    b = other.tensor("f32", (3,), "b", input=True)
    y = a - b
    z = a @ other.tensor("f32", (3, 2), "m", input=True)
    m = z.src[0].src[0].src[0]  # cont(transpose(m))
    del other
    gc.collect()
    av, bv, mv = values((2, 3)), values((3,)), values((3, 2))
    got = run(runner, ctx, [y, z], {a: av, b: bv, m: mv})
    same_bits(got[0], av - bv)
    np.testing.assert_allclose(got[1], av @ mv, rtol=1e-5, atol=1e-5)


# --- refusals -----------------------------------------------------------------------------------------
def test_refusals_say_what_was_wrong_and_what_to_do():
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a")
    with pytest.raises(
        ValueError, match=r"a \(.a., f32 of shape \(2, 3\)\) and b \(f32 of shape \(2,\)\) do not broadcast"
    ):
        a + ctx.tensor("f32", (2,))
    with pytest.raises(ValueError, match=r"repeat a first, ctx.repeat\(a, b\) - b"):
        ctx.tensor("f32", (3,)) - a
    with pytest.raises(ValueError, match=r"repeat a first"):
        ctx.tensor("f32", (1, 3)) / a
    with pytest.raises(ValueError, match=r"broadcast each into the other \(to \(3, 4\)\).*repeat_4d"):
        ctx.tensor("f32", (3, 1)) * ctx.tensor("f32", (1, 4))
    with pytest.raises(TypeError, match="one type.*cast one first"):
        a + ctx.tensor("f16", (2, 3))
    with pytest.raises(TypeError, match="i32.*cast it first"):
        ctx.tensor("i32", (2, 3)) + ctx.tensor("i32", (2, 3))
    with pytest.raises(TypeError, match="bf16.*f32, f16"):
        ctx.tensor("bf16", (2, 3)) * 2.0
    with pytest.raises(TypeError):
        a + "1"
    with pytest.raises(TypeError):
        a * True
    with pytest.raises(TypeError):
        a + [1.0]
    with pytest.raises(TypeError):
        a @ 2.0
    with pytest.raises(TypeError, match="i32"):
        -ctx.tensor("i32", (2,))


def test_matmul_refusals():
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a")
    with pytest.raises(ValueError, match=r"a's last dim \(3\) must be b's second to last dim \(4\)"):
        a @ ctx.tensor("f32", (4, 5))
    with pytest.raises(ValueError, match=r"only dim \(4\)"):
        a @ ctx.tensor("f32", (4,))
    with pytest.raises(ValueError, match="batch dims do not broadcast"):
        ctx.tensor("f32", (2, 2, 3)) @ ctx.tensor("f32", (3, 3, 4))
    with pytest.raises(ValueError, match="repeats only one operand's matrices"):
        ctx.tensor("f32", (2, 1, 2, 3)) @ ctx.tensor("f32", (1, 2, 3, 4))
    with pytest.raises(TypeError, match="F32 activations"):
        ctx.tensor("f16", (2, 3)) @ ctx.tensor("f16", (3, 4))
    with pytest.raises(TypeError, match=r"x @ w.T is ctx.mul_mat\(w, x\)"):
        a @ ctx.tensor("q8_0", (3, 32))
    with pytest.raises(ValueError, match="one dim or more"):
        a @ ctx.tensor("f32", ())


def test_a_callback_tensor_has_no_context_to_build_in():
    ctx = gg.Context()
    t = gg.Tensor(ctx.tensor("f32", (2,), "t").ptr, None)
    with pytest.raises(ValueError, match="no Context to build the result in"):
        t + 1.0


def test_op_errors_name_the_operands_and_what_to_do():
    ctx = gg.Context()
    a, b = ctx.tensor("f32", (2, 5)), ctx.tensor("f32", (3, 4))
    with pytest.raises(
        gg.OpError,
        match=r"^add: ggml requires ggml_can_repeat\(b, a\) \(ggml.c:\d+\): b f32 of shape \(3, 4\) \(ne \(4, 3, 1, 1\)\) "
        r"cannot repeat into a f32 of shape \(2, 5\) \(ne \(5, 2, 1, 1\)\).*neither repeats into the other",
    ):
        ctx.add(a, b)
    with pytest.raises(gg.OpError, match=r"a repeats into b: swap the operands, ctx.mul\(b, a\)"):
        ctx.mul(ctx.tensor("f32", (4,)), ctx.tensor("f32", (3, 4)))
    with pytest.raises(gg.OpError, match=r"a repeats into b: repeat a first, ctx.div\(ctx.repeat\(a, b\), b\)"):
        ctx.div(ctx.tensor("f32", (4,)), ctx.tensor("f32", (3, 4)))
    with pytest.raises(gg.OpError, match=r"ggml_can_mul_mat\(a, b\).*a f32 of shape \(2, 5\).*b f32 of shape \(3, 4\)"):
        ctx.mul_mat(a, b)
    with pytest.raises(
        gg.OpError,
        match=r"^scale: ggml requires ggml_is_padded_1d\(a\) \(ggml.c:\d+\): a ' \(view\)' f32 of shape \(2, 2, 8\)",
    ):
        ctx.scale(ctx.view_3d(ctx.tensor("f32", (2, 3, 8)), 8, 2, 2, 32, 96, 0), 2.0)


# --- repr and scalars ----------------------------------------------------------------------------------
def test_repr_names_name_type_numpy_shape_and_op():
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a")
    assert repr(a) == "<Tensor 'a' f32 (2, 3)>"
    assert repr((a + a).set_name("h")) == "<Tensor 'h' f32 (2, 3) op=ADD>"
    assert repr(ctx.sum(ctx.tensor("i32", (4,)))) == "<Tensor i32 (1,) op=SUM>"


def test_a_one_value_result_is_a_python_scalar(runner):
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    s = ctx.sum(a)
    n = ctx.count_equal(ctx.tensor("i32", (4,), "p", input=True), ctx.tensor("i32", (4,), "q", input=True))
    av = values((2, 3))
    feeds = {a: av, n.src[0]: np.array([1, 2, 3, 4]), n.src[1]: np.array([1, 0, 3, 0])}
    out = run(runner, ctx, [s, n], feeds)
    assert out[0].shape == (1,)  # run returns the array, as before
    assert isinstance(s.item(), float) and s.item() == out[0][0]
    assert float(s) == out[0][0] and abs(float(s) - float(av.sum(dtype=np.float64))) < 1e-5
    assert isinstance(n.item(), int) and n.item() == 2 and int(n) == 2
    with pytest.raises(TypeError, match="use float"):
        int(s)
    with pytest.raises(ValueError, match="6 elements"):
        a.item()
    with pytest.raises(ValueError, match="no memory"):
        float(ctx.tensor("f32", (1,), "unallocated"))
    with pytest.raises(TypeError, match="must be a number"):
        ctx.scale(a, s)  # a tensor is no constant of an op, one value or not


def test_an_f16_weight_multiplies_through_its_transposed_view(runner):
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 64), "x", input=True)
    w = ctx.tensor("f16", (5, 64), "w", input=True)
    y = x @ ctx.transpose(w)
    assert y.shape == (3, 5) and y.src[0].view_src == w
    xv, wv = values((3, 64)), values((5, 64), np.float16)
    [got] = run(runner, ctx, [y], {x: xv, w: wv})
    want = xv.astype(np.float16).astype(np.float64) @ wv.astype(np.float64).T  # x rounded to F16 (mul_mat)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
