"""Node readers made right by llama.cpp's own models (`check --model` on what llama.cpp's generator and
quantizer make): each test builds the node the model builds, computes it on the CPU under the node
checker, and shows the verdict holds at the op's tight bound where the oracle models what ggml does, and
that the unmodelled oracle would have failed it (so the test can fail)."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg
from pyggml import lib
from pyggml.testing.engine import oracles
from pyggml.testing.engine.nodes import NodeChecker, observing
from pyggml.testing.engine.opdb.matmul import NMSE_CPU_DOT
from pyggml.testing.engine.oracles import dot_rounding
from pyggml.testing.engine.verdict import nmse


def _checked(ctx: gg.Context, out: gg.Tensor, values: dict) -> tuple[dict, np.ndarray]:
    graph = gg.Graph(ctx).build_forward_expand(out)
    runner = gg.Runner("cpu")
    checker = NodeChecker()
    with observing(runner, checker):
        result = runner.run(graph, values, out)
    return {v.kind: v for v in checker.verdicts}, result


def _activations(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Activations as a model's are: small, with a few outliers per row (Q8 rounding is coarse there)."""
    b = rng.standard_normal(shape).astype(np.float32) * scale
    b[..., ::37] *= 40
    return b


# Q4_1 / Q5_1 with tiny activations: the block sum Q8_1 stores in F16 is subnormal, the case that showed
# NMSE 1.5e-2 on llama.cpp's llama at Q4_1 before the oracle modelled it
@pytest.mark.parametrize(
    ("weight", "scale"),
    [("q8_0", 1.0), ("q4_0", 1.0), ("q4_1", 1e-5), ("q5_1", 1e-5), ("q4_k", 1.0), ("q6_k", 0.01), ("f16", 1.0)],
)
def test_a_quantized_product_on_the_cpu_is_judged_with_its_activations_rounded_as_the_cpu_rounds_them(weight, scale):
    rng = np.random.default_rng(1)
    m, n, k = 24, 5, 512
    ctx = gg.Context()
    a = ctx.tensor(weight, (m, k), "w", input=True)
    b = ctx.tensor("f32", (n, k), "x", input=True)
    out = ctx.mul_mat(a, b)
    x = _activations(rng, (n, k), scale)
    verdicts, result = _checked(ctx, out, {a: rng.standard_normal((m, k)).astype(np.float32) * 0.1, b: x})
    v = verdicts["MUL_MAT"]
    assert v.ok and v.nmse_bound == NMSE_CPU_DOT, v
    assert v.comparison.nmse < 1e-9, v  # the rounding is modelled, not merely bounded
    plain = oracles.mul_mat(a.numpy(), x)
    if weight != "f16":  # the plain product is off by more than the tight bound: the test can fail
        assert nmse(result.astype(np.float64), plain.astype(np.float64)) > NMSE_CPU_DOT


def test_a_quantized_expert_product_is_judged_the_same_way():
    rng = np.random.default_rng(2)
    ctx = gg.Context()
    experts = ctx.tensor("q4_1", (3, 16, 256), "experts", input=True)
    b = ctx.tensor("f32", (4, 2, 256), "x", input=True)
    ids = ctx.tensor("i32", (4, 2), "ids", input=True)
    out = ctx.mul_mat_id(experts, b, ids)
    values = {
        experts: rng.standard_normal((3, 16, 256)).astype(np.float32) * 0.1,
        b: _activations(rng, (4, 2, 256), 1e-5),
        ids: rng.integers(0, 3, (4, 2)).astype(np.int32),
    }
    verdicts, _ = _checked(ctx, out, values)
    v = verdicts["MUL_MAT_ID"]
    assert v.ok and v.nmse_bound == NMSE_CPU_DOT and v.comparison.nmse < 1e-9, v


def test_dot_rounding_is_what_ggml_stores():
    """The oracle's Q8_0 rounding against ggml's own Q8_0 quantizer (the F16 scale, round to nearest)."""
    rng = np.random.default_rng(3)
    b = _activations(rng, (4, 256), 1.0)
    ours = dot_rounding.as_dot_type(b, "Q8_0")
    ggmls = gg.types.decode("q8_0", gg.types.encode("q8_0", b), b.shape)
    assert nmse(ours.astype(np.float64), ggmls.astype(np.float64)) < 1e-12
    assert np.array_equal(dot_rounding.as_dot_type(b, "F32"), b)
    with pytest.raises(ValueError, match="whole number of Q8_K blocks"):
        dot_rounding.as_dot_type(b[:, :100], "Q8_K")


def test_a_rope_with_an_offset_rotates_only_its_channels():
    """ggml_rope_set_offset (deepseek4's and hy_v4's attention): the checker read it as a plain rope and
    failed 12 nodes at NMSE 0.37."""
    rng = np.random.default_rng(4)
    ctx = gg.Context()
    x = ctx.tensor("f32", (5, 2, 16), "x", input=True)  # tokens, heads, 16 channels
    pos = ctx.tensor("i32", (5,), "pos", input=True)
    out = ctx.rope_ext(x, pos, n_dims=8, mode=0)
    lib.ggml_rope_set_offset(out.ptr, 6)  # channels 6..13 rotated, 0..5 and 14..15 copied
    xv = rng.standard_normal((5, 2, 16)).astype(np.float32)
    verdicts, result = _checked(ctx, out, {x: xv, pos: np.arange(5, dtype=np.int32) * 7})
    assert verdicts["ROPE"].ok and verdicts["ROPE"].comparison.nmse < 1e-12, verdicts["ROPE"]
    assert np.array_equal(result[..., :6], xv[..., :6]) and np.array_equal(result[..., 14:], xv[..., 14:])
    assert not np.allclose(result[..., 6:14], xv[..., 6:14])
    plain = oracles.rope_ext(xv, np.arange(5) * 7, n_dims=8, mode=0)
    assert nmse(result.astype(np.float64), plain.astype(np.float64)) > 1e-3


def test_a_max_pool_of_minus_infinity_is_ggmls_lowest_float():
    """minimax-m3 masks scores with -Inf before a max pool: every ggml backend starts a window at -FLT_MAX."""
    ctx = gg.Context()
    x = ctx.tensor("f32", (1, 2, 8), "x", input=True)
    out = ctx.pool_2d(x, 0, 4, 1, 4, 1, 0, 0)
    xv = np.full((1, 2, 8), -np.inf, np.float32)
    xv[0, 1, :4] = [1, 2, 3, 4]
    verdicts, result = _checked(ctx, out, {x: xv})
    assert verdicts["POOL_2D"].ok, verdicts["POOL_2D"]
    assert result[0, 0, 0] == -np.finfo(np.float32).max and result[0, 1, 0] == 4


@pytest.mark.parametrize("order", [gg.SortOrder.ASC, gg.SortOrder.DESC])
def test_argsort_may_order_equal_values_any_way_but_must_sort(order, monkeypatch):
    """glm5-next argsorts rows of -Inf: ggml's sort is not stable, so any order of ties is right."""
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 64), "x", input=True)
    out = ctx.argsort(x, order)
    xv = np.full((3, 64), -np.inf, np.float32)
    xv[1] = np.repeat(np.arange(8, dtype=np.float32), 8)  # ties in runs
    verdicts, _ = _checked(ctx, out, {x: xv})
    assert verdicts["ARGSORT"].ok, verdicts["ARGSORT"]
    # the reader still refuses an order that does not sort
    from pyggml.testing.engine.opdb import reductions

    class Backwards:
        def __init__(self, n):
            self.n = n

        def __getattr__(self, name):
            return getattr(self.n, name)

        def value(self):
            return self.n.value()[..., ::-1].copy()

    wrong = reductions._argsort_node
    monkeypatch.setattr(gg.testing.engine.opdb.READERS["ARGSORT"], "from_node", lambda n: wrong(Backwards(n)))
    verdicts, _ = _checked(ctx, out, {x: xv})
    assert not verdicts["ARGSORT"].ok


@pytest.mark.parametrize("weight", ["q4_k", "q6_k", "f32"])
def test_get_rows_of_a_large_weight_decodes_only_the_rows_it_takes(weight, monkeypatch):
    """A model's token embedding (248,320 rows for a batch's 32) is not decoded whole: the GET_ROWS reader
    decodes the rows the index takes from the source's bytes, and judges them as the whole source would."""
    from pyggml import types

    rng = np.random.default_rng(4)
    table = rng.standard_normal((300, 256)).astype(np.float32)
    idx = np.array([7, 299, 7, 0, 150], dtype=np.int32)
    ctx = gg.Context()
    a, b = ctx.tensor(weight, table.shape, "embd", input=True), ctx.tensor("i32", idx.shape, "idx", input=True)
    decoded: list[int] = []
    real = types.decode
    monkeypatch.setattr(
        types, "decode", lambda t, raw, shape: decoded.append(int(np.prod(shape))) or real(t, raw, shape)
    )
    by_kind, out = _checked(ctx, ctx.get_rows(a, b), {a: table, b: idx})
    v = by_kind["GET_ROWS"]
    assert v.comparison is not None and v.ok and v.comparison.nmse == 0, v
    assert max(decoded) < table.size  # never the whole table
    assert np.array_equal(out, types.decode(weight, types.encode(weight, table), table.shape)[idx])


def test_a_large_tensor_decodes_on_several_cores_as_in_one_call(monkeypatch):
    """types.decode converts a large tensor in chunks of whole blocks on every core: the same values as one
    call, also for a size that is not a whole number of chunks."""
    from pyggml import types

    monkeypatch.setattr(types, "DECODE_CHUNK", 1 << 12)  # small chunks: the same path, a small tensor
    x = np.random.default_rng(5).standard_normal((3 * types.DECODE_CHUNK // 256 + 3, 256)).astype(np.float32)
    for t in ("q4_k", "q8_0", "iq4_nl", "bf16"):
        raw = types.encode(t, x)
        chunked = types.decode(t, raw, x.shape)
        with monkeypatch.context() as m:
            m.setattr(types, "DECODE_CHUNK", 1 << 40)
            whole = types.decode(t, raw, x.shape)
        assert np.array_equal(chunked, whole), t


def test_the_comparisons_fast_path_gives_the_full_paths_errors():
    """compare's one-difference path for finite values gives the NMSE and largest error nmse() and
    max_error() give, and the non-finite path still names misplaced NaN and Inf."""
    from pyggml.testing.engine.verdict import compare, max_error

    rng = np.random.default_rng(6)
    for _ in range(200):
        e = rng.standard_normal(int(rng.integers(1, 60))).astype(np.float32)
        a = (e + rng.standard_normal(e.size) * 10 ** rng.uniform(-8, 0)).astype(np.float32)
        c = compare(a, e, 1.0, 1e9)
        assert c.nmse == pytest.approx(nmse(a, e), rel=1e-9, abs=1e-30)
        assert c.max_error == pytest.approx(max_error(a, e), rel=1e-12)
    assert compare(np.zeros(4, np.float32), np.zeros(4, np.float32), 1e-6, 1e-3).ok
    bad = compare(np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32), 1e-6, 1e-3)
    assert not bad.ok and "NaN at 1 position" in bad.message


def _gated_delta_rule_token_by_token(q, k, v, g, beta, state, K):
    """The recurrence of ggml_gated_delta_net as its docstring gives it, one head and one token at a time."""
    ns, nt, H, S = v.shape
    out, slots = np.zeros((ns, nt, H, S)), np.zeros((min(nt, K), ns, H, S, S))
    for s in range(ns):
        sq = s // (ns // q.shape[0])
        for h in range(H):
            hk = h % q.shape[2]
            M = state[s, h].T.copy()  # [key i, value j]
            for t in range(nt):
                M *= np.exp(g[s, t, h])[:, None]
                delta = beta[s, t, h, 0] * (v[s, t, h] - M.T @ k[sq, t, hk])
                M += np.outer(k[sq, t, hk], delta)
                out[s, t, h] = M.T @ q[sq, t, hk] / np.sqrt(S)
                if nt - 1 - t < len(slots):
                    slots[nt - 1 - t, s, h] = M.T
    return np.concatenate([out.ravel(), slots.ravel()]).reshape(-1, S * H)


def test_the_gated_delta_rule_by_chunks_is_the_token_by_token_recurrence():
    """The gated_delta_net oracle computes a chunk of tokens at once; it gives the token-by-token recurrence's
    values over random shapes: chunks longer than one and snapshots that split them, a gate per head and one per
    key row, q and k shared by heads and sequences, and keys of norm above 1, whose recurrence grows by tens a
    token (an LU solve with pivoting lost such values: 100x off)."""
    from pyggml.testing.engine.oracles import recurrent

    rng = np.random.default_rng(8)
    for case in range(120):
        S, Hk = int(rng.choice([1, 3, 8, 16])), int(rng.integers(1, 3))
        H, nqk = Hk * int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ns, nt, K = nqk * int(rng.integers(1, 3)), int(rng.integers(1, 80)), int(rng.integers(1, 5))
        if case < 4:  # the recurrence grows by tens a token: keys of norm near 6, a gate near 1
            S, H, Hk, nqk, ns, nt, K = 32, 2, 1, 1, 1, 58, 4
        q, k = (rng.standard_normal((nqk, nt, Hk, S)) * (1.0 if case < 4 else rng.choice([0.1, 1.0])) for _ in range(2))
        if case % 2 and case >= 4:
            k /= np.linalg.norm(k, axis=-1, keepdims=True)  # as the layer gives them
        v = rng.standard_normal((ns, nt, H, S))
        gates = 0.01 if case < 4 else rng.choice([0.01, 0.3, 3.0])
        g = -np.abs(rng.standard_normal((ns, nt, H, S if case % 3 == 0 else 1))) * gates
        beta, state = rng.random((ns, nt, H, 1)), rng.standard_normal((ns, H, S, S)) * 0.3
        got = recurrent.gated_delta_net(q, k, v, g, beta, state, K, written_only=K > nt)
        want = _gated_delta_rule_token_by_token(q, k, v, g, beta, state, K)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 * np.abs(want).max(), err_msg=f"case {case}")


@pytest.mark.parametrize("where", ["q", "k", "v", "beta"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_value_that_is_not_finite_reaches_only_the_tokens_from_it_on_as_in_the_recurrence(where, bad):
    """The chunked gated_delta_net oracle leaves the tokens before a NaN or inf finite, as the recurrence (and
    ggml) does: a later token's value times the zero of a pair no token sees made the earlier outputs NaN."""
    from pyggml.testing.engine.oracles import recurrent

    rng = np.random.default_rng(9)
    ns, nt, H, S, K = 1, 9, 2, 4, 3
    x = {n: rng.standard_normal((ns, nt, H, S)) * 0.5 for n in ("q", "k", "v")}
    x["k"] /= np.linalg.norm(x["k"], axis=-1, keepdims=True)
    g, x["beta"], state = (
        -np.abs(rng.standard_normal((ns, nt, H, 1))),
        rng.random((ns, nt, H, 1)),
        np.eye(S) * [[1]] * np.ones((ns, H, 1, 1)),
    )
    x[where][0, 4, 0, 0] = bad
    got = recurrent.gated_delta_net(x["q"], x["k"], x["v"], g, x["beta"], state, K)
    want = _gated_delta_rule_token_by_token(x["q"], x["k"], x["v"], g, x["beta"], state, K)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isfinite(got[: 4 * ns]).all()  # the outputs of tokens 0..3
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-6, atol=1e-6)
