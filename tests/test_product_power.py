"""The power of a product node's judgement: a computed MUL_MAT node corrupted the way real kernel bugs corrupt it
(one element, one row off by 1 % and by 0.01 %, one quantization block decoded wrong, a sign flipped, a column
computed as zeros or as another column's, two columns swapped, the activations rounded to another type), then
judged by the node checker itself (`NodeChecker`: the node's memory changed between ggml's compute and the
judgement, nothing else), over many random draws, in a small node and a real-size one; and the uncorrupted node
passing every draw (no false alarm).

docs/llama.md ("Each element of a product") states the figures measured here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pyggml as gg
from pyggml import types
from pyggml._native import ffi, lib
from pyggml.testing.engine.nodes import NodeChecker, NodeVerdict, kind, observing
from pyggml.testing.engine.oracles import dot_rounding


@dataclass
class Drawn:
    """One draw: the weight as decoded, the activations as given and as the CPU's kernel rounds them."""

    w: np.ndarray  # [M, K], the weight's values as its type holds them
    x: np.ndarray  # [T, K], F32
    x_dot: np.ndarray  # [T, K], rounded to the weight type's dot type
    rng: np.random.Generator


# A fault: (the node's values [T, M], the draw) -> the corrupted values
Fault = Callable[[np.ndarray, Drawn], np.ndarray]


class Corrupting(NodeChecker):
    """The node checker with a fault put into each computed MUL_MAT node just before it is judged."""

    def __init__(self, fault: Fault | None, drawn: Drawn, **checker: Any) -> None:
        super().__init__(**checker)
        self.fault, self.drawn = fault, drawn

    def on_done(self, t: gg.Tensor) -> bool:
        """Write the fault into the node's memory, then judge it as the checker does.

        Args:
            t: the node, computed.

        Returns:
            True: the compute goes on.
        """
        if self.fault is not None and kind(t) in ("MUL_MAT", "MUL_MAT_ID"):
            bad = np.ascontiguousarray(self.fault(t.numpy().copy(), self.drawn), dtype=np.float32)
            lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(bad), 0, bad.nbytes)
        return super().on_done(t)


class ProductNode:
    """y = mul_mat(w, x) on the CPU: w of `wtype`, [M, K], set once; x, [T, K], F32, drawn each run."""

    def __init__(self, wtype: str, m: int, k: int, t: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.wtype, self.shape = wtype, (m, k, t)
        wctx = gg.Context()
        self.weight = wctx.tensor(wtype, (m, k), "w")
        self.runner = gg.Runner("cpu")
        self.runner.backend.alloc_tensors(wctx)
        # a model's weights, as llama.cpp's buffers say (the projected oracle projects weights only)
        lib.ggml_backend_buffer_set_usage(self.weight.ptr.buffer, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        self.weight.set(self.rng.standard_normal((m, k)).astype(np.float32) * 0.02)
        self.w = self.weight.numpy().astype(np.float32)
        self.ctx = gg.Context()
        self.x = self.ctx.tensor("f32", (t, k), "x", input=True)
        self.y = self.ctx.mul_mat(self.weight, self.x)
        self.graph = gg.Graph(self.ctx).build_forward_expand(self.y)
        dot = int(lib.ggml_get_type_traits_cpu(int(types.as_type(wtype))).vec_dot_type)
        self.dot_type = types.Type(dot).name

    def draw(self) -> Drawn:
        """Activations as a model's are: Gaussian, with a few outlier channels (x50)."""
        m, k, t = self.shape
        x = self.rng.standard_normal((t, k)).astype(np.float32)
        x[:, self.rng.integers(0, k, 4)] *= 50
        return Drawn(self.w, x, dot_rounding.as_dot_type(x, self.dot_type), self.rng)

    def judged(self, fault: Fault | None, **options: Any) -> NodeVerdict:
        """A draw computed by ggml, corrupted by `fault` (None: as computed), judged by the node checker (with
        `options`: oracle="projected")."""
        drawn = self.draw()
        checker = Corrupting(fault, drawn, **options)
        with observing(self.runner, checker):
            self.runner.run(self.graph, {self.x: drawn.x}, self.y)
        (v,) = [v for v in checker.verdicts if v.kind == "MUL_MAT"]
        assert v.comparison is not None, v.error
        return v


def _element(scale: float) -> Fault:
    def fault(y: np.ndarray, d: Drawn) -> np.ndarray:
        t, i = d.rng.integers(0, y.shape[0]), d.rng.integers(0, y.shape[1])
        y[t, i] *= scale
        return y

    return fault


def _row(scale: float) -> Fault:
    def fault(y: np.ndarray, d: Drawn) -> np.ndarray:
        y[:, d.rng.integers(0, y.shape[1])] *= scale
        return y

    return fault


def _block(width: int, scale: float) -> Fault:
    """One block of `width` values of one weight row decoded `scale` times what it holds (its scale off)."""

    def fault(y: np.ndarray, d: Drawn) -> np.ndarray:
        i, b = d.rng.integers(0, y.shape[1]), d.rng.integers(0, d.w.shape[1] // width)
        part = slice(b * width, (b + 1) * width)
        y[:, i] += (scale - 1) * (d.x_dot[:, part].astype(np.float64) @ d.w[i, part].astype(np.float64))
        return y

    return fault


def _sign(y: np.ndarray, d: Drawn) -> np.ndarray:
    t, i = d.rng.integers(0, y.shape[0]), d.rng.integers(0, y.shape[1])
    y[t, i] = -y[t, i]
    return y


def _column_zero(y: np.ndarray, d: Drawn) -> np.ndarray:
    y[d.rng.integers(0, y.shape[0])] = 0
    return y


def _two_columns(y: np.ndarray, d: Drawn) -> tuple[int, int]:
    t, s = d.rng.choice(y.shape[0], 2, replace=False)
    return int(t), int(s)


def _column_copied(y: np.ndarray, d: Drawn) -> np.ndarray:
    t, s = _two_columns(y, d)
    y[t] = y[s]
    return y


def _columns_swapped(y: np.ndarray, d: Drawn) -> np.ndarray:
    t, s = _two_columns(y, d)
    y[[t, s]] = y[[s, t]]
    return y


def _activations_f16(y: np.ndarray, d: Drawn) -> np.ndarray:
    """The activations rounded to F16 rather than the weight's dot type (Q8_K for Q4_K)."""
    delta = d.x.astype(np.float16).astype(np.float64) - d.x_dot.astype(np.float64)
    return (y + delta @ d.w.T.astype(np.float64)).astype(np.float32)


FAULTS: dict[str, Fault] = {
    "element +1%": _element(1.01),
    "row +1%": _row(1.01),
    "row +0.01%": _row(1.0001),
    "block of 32 scale +1%": _block(32, 1.01),
    "block of 256 scale +1%": _block(256, 1.01),
    "sign flipped": _sign,
    "column zeros": _column_zero,
    "column another's": _column_copied,
    "columns swapped": _columns_swapped,
    "activations F16, not Q8_K": _activations_f16,
}

# (M, K, T, draws of each fault): a small node, and one of a 0.8B model's (1024 x 1024, 32 tokens)
SIZES = {"small": (64, 256, 8, 100), "real-size": (1024, 1024, 32, 20)}


@pytest.fixture(scope="module", params=list(SIZES))
def node(request: pytest.FixtureRequest) -> tuple[ProductNode, int]:
    m, k, t, draws = SIZES[request.param]
    return ProductNode("q4_k", m, k, t, seed=58), draws


def test_an_uncorrupted_product_passes_every_draw(node: tuple[ProductNode, int]) -> None:
    """No false alarm: every draw of the node as ggml computed it passes, each element within its bound."""
    product, draws = node
    verdicts = [product.judged(None) for _ in range(3 * draws)]
    bad = [v.comparison.message for v in verdicts if not v.ok]  # type: ignore[union-attr]
    assert not bad, bad[:3]
    worst = max(v.comparison.units for v in verdicts)  # type: ignore[union-attr]
    assert 0 < worst < 4, worst  # within a quarter of the element bound (16 units)


# one element off by 1 % cannot be seen where the element itself is near 0 (its change below its rounding): measured
# 999 of 1,000 draws caught in the small node, 99 of 100 in the real-size one (docs/llama.md); every other fault in
# every draw
LEAST_CAUGHT = {"element +1%": 0.95}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_fault_is_caught_in_every_draw(node: tuple[ProductNode, int], fault: str) -> None:
    product, draws = node
    caught = [not product.judged(FAULTS[fault]).ok for _ in range(draws)]
    assert sum(caught) >= LEAST_CAUGHT.get(fault, 1.0) * draws, f"{fault}: caught {sum(caught)} of {draws}"


def test_one_element_off_by_a_hundredth_of_a_percent_is_caught_where_it_is_large_enough() -> None:
    """The limit of the judgement: one element off by 0.01 % stands out of its bound only where its value is large
    against its rounding unit (|y| >= 16 u |w| |x| / 1e-4); measured on the small node over 200 draws."""
    product = ProductNode("q4_k", 64, 256, 8, seed=59)
    caught = [not product.judged(_element(1.0001)).ok for _ in range(200)]
    assert 0.5 < sum(caught) / len(caught) < 1, sum(caught)


# --- the projected oracle (pyggml.testing.engine.projected) -------------------------------------------------------------
# what the projection catches in every draw of both sizes (scripts/product_power.py, 2026-12-08); one row off by
# 0.01 % (999 of 1,000 draws of the small node, 198 of 200 of the real-size one) and one element off by 1 % (999 and
# 197: an element near 0) are not caught in every one
CAUGHT_BY_PROJECTION = (
    "row +1%",
    "block of 32 scale +1%",
    "block of 256 scale +1%",
    "sign flipped",
    "column zeros",
    "column another's",
    "columns swapped",
    "activations F16, not Q8_K",
)


@pytest.fixture(scope="module")
def projections(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pyggml.testing.engine.projected import ProjectionCache

    return ProjectionCache(tmp_path_factory.mktemp("projections"))


def test_the_projection_passes_every_uncorrupted_draw(node: tuple[ProductNode, int], projections: Any) -> None:
    product, draws = node
    verdicts = [product.judged(None, oracle="projected", projections=projections) for _ in range(3 * draws)]
    assert all(v.oracle == "projected" for v in verdicts)
    bad = [v.comparison.message for v in verdicts if not v.ok]  # type: ignore[union-attr]
    assert not bad, bad[:3]
    worst = max(v.comparison.units for v in verdicts)  # type: ignore[union-attr]
    assert 0 < worst < 1, worst  # the projected bound: 3 units (a bucket's root mean square over its combinations)
    assert projections.hits >= 3 * draws - 1  # the weight projected once


@pytest.mark.parametrize("fault", CAUGHT_BY_PROJECTION)
def test_the_projection_catches_column_faults_in_every_draw(
    node: tuple[ProductNode, int], projections: Any, fault: str
) -> None:
    """A node the projection fails is rechecked in full at once: the verdict is the full oracle's, both said."""
    product, draws = node
    verdicts = [product.judged(FAULTS[fault], oracle="projected", projections=projections) for _ in range(draws)]
    caught = [not v.ok for v in verdicts]
    assert all(caught), f"{fault}: caught {sum(caught)} of {draws}"
    assert all(v.oracle.startswith("full") and "projected:" in v.comparison.message for v in verdicts)  # type: ignore[union-attr]


def test_the_projection_catches_one_row_off_by_a_hundredth_of_a_percent_in_a_real_size_node(projections: Any) -> None:
    """A bucket sees a row's error against its own 64 rows' rounding: one row of 1,024 off by 1e-4 caught in 199 of
    200 draws (scripts/product_power.py), where the dense 32 x n_out projection caught 45 of 50."""
    m, k, t, draws = SIZES["real-size"]
    product = ProductNode("q4_k", m, k, t, seed=62)
    verdicts = [product.judged(_row(1.0001), oracle="projected", projections=projections) for _ in range(2 * draws)]
    caught = sum(v.oracle != "projected" for v in verdicts)
    assert caught >= 2 * draws - 1, f"{caught} of {2 * draws}"
    assert not any(v.ok for v in verdicts if v.oracle != "projected")  # and each then failed in full


def test_the_projection_misses_some_rows_off_by_3e_5_in_a_real_size_node_where_the_full_oracle_catches_each(
    projections: Any,
) -> None:
    """Its limit: it weighs a row's error against its bucket's 64 rows' rounding, not the row's own, so one row of
    1,024 off by 3e-5 passes it in some draws where the full oracle's row bound fails it in every draw (measured
    200 of 200 draws, and the projection 136 of 200; by 5e-5: 200 and 193; by 1e-4: 200 and 199): why the full
    oracle stays the default."""
    m, k, t, draws = SIZES["real-size"]
    product = ProductNode("q4_k", m, k, t, seed=60)
    full = [not product.judged(_row(1.00003)).ok for _ in range(draws)]
    verdicts = [product.judged(_row(1.00003), oracle="projected", projections=projections) for _ in range(draws)]
    by_projection = [v.oracle != "projected" for v in verdicts]  # failed by the projection, then rechecked in full
    assert all(full), sum(full)
    assert 0 < sum(by_projection) < draws, sum(by_projection)
    assert all(v.ok == (v.oracle == "projected") for v in verdicts)  # what it misses passes; the rest fail in full


def test_a_repacked_weights_product_is_judged_by_its_kernels_bounds() -> None:
    """The kernels of the CPU's extra buffer types (the repacked Q4_K GEMM) round more than ggml-cpu's own (a bucket
    1.22 units where the others stay under 0.50): a weight in such a buffer is judged by their bounds."""
    from pyggml.testing.engine import projected

    plain, extra = projected.BUCKET_BOUNDS["plain"], projected.BUCKET_BOUNDS["extra"]
    assert plain[0] >= 6 * 0.50 and plain[1] >= 6 * 0.22 and extra[0] >= 6 * 1.22 and extra[1] >= 6 * 0.51
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((128, 256)), rng.standard_normal((4, 256)).astype(np.float32)
    p = projected.project("f32", w.astype(np.float32).view(np.uint8).reshape(-1), 128, 256)
    unit = 2.0**-24 * np.linalg.norm(w, axis=1).mean() * np.linalg.norm(x, axis=1).mean()
    y = x.astype(np.float64) @ w.T
    y[:, 7] += 4 * 64**0.5 * unit  # a row off by about 4 of its bucket's units in every column
    assert not projected.judge(y, x, p).ok
    assert projected.judge(y, x, p, kernel="extra").ok


def test_a_corrupt_or_unwritable_cache_is_said_and_the_check_goes_on(tmp_path: Path) -> None:
    from pyggml.testing.engine.projected import ProjectionCache

    product = ProductNode("q4_k", 64, 256, 8, seed=61)
    cache = ProjectionCache(tmp_path / "p")
    assert product.judged(None, oracle="projected", projections=cache).ok and cache.misses == 1
    (entry,) = cache.entries()
    entry.write_bytes(b"not an array")
    again = ProjectionCache(tmp_path / "p")
    with pytest.warns(UserWarning, match="corrupt"):
        assert product.judged(None, oracle="projected", projections=again).ok
    assert again.misses == 1 and len(again.entries()) == 1  # computed again, and kept anew
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder should be")
    nowhere = ProjectionCache(blocked / "p")
    with pytest.warns(UserWarning, match="cannot be written"):
        assert product.judged(None, oracle="projected", projections=nowhere).ok
    assert not product.judged(_column_zero, oracle="projected", projections=nowhere).ok
    assert again.clear() == 1 and again.entries() == []


def test_a_changed_weight_never_reuses_anothers_projection_and_the_cache_keeps_to_its_limit(tmp_path: Path) -> None:
    from pyggml.testing.engine.projected import ProjectionCache

    raw = np.arange(256 * 4 * 2, dtype=np.uint8).reshape(-1)  # any bytes: the key is the contents
    changed = raw.copy()
    changed[5] ^= 1
    key = ProjectionCache.key("q8_0", raw, 4, 512, 1, 32)
    assert key != ProjectionCache.key("q8_0", changed, 4, 512, 1, 32)
    assert key != ProjectionCache.key("q8_0", raw, 4, 512, 2, 32)  # another seed
    cache = ProjectionCache(tmp_path, limit=3 * (4 * 257 * 8 + 128))  # an entry: one bucket, 4 combinations of 256
    for seed in range(5):
        cache.get("f32", np.zeros(4 * 256 * 4, np.uint8), 4, 256, seed, 32)
    assert 1 <= len(cache.entries()) <= 3 and cache.size() <= cache.limit


# --- a mixture of experts' product (MUL_MAT_ID) ---------------------------------------------------------------------------
class ExpertsNode:
    """y = mul_mat_id(w, x, ids) on the CPU: 4 Q4_K experts of [64, 256], 8 tokens each routed to 2 of them."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        wctx = gg.Context()
        self.weight = wctx.tensor("q4_k", (4, 64, 256), "experts")
        self.runner = gg.Runner("cpu")
        self.runner.backend.alloc_tensors(wctx)
        self.weight.set(self.rng.standard_normal((4, 64, 256)).astype(np.float32) * 0.02)
        self.w = self.weight.numpy().astype(np.float32)
        self.ctx = gg.Context()
        self.x = self.ctx.tensor("f32", (8, 1, 256), "x", input=True)
        self.ids = self.ctx.tensor("i32", (8, 2), "ids", input=True)
        self.y = self.ctx.mul_mat_id(self.weight, self.x, self.ids)
        self.graph = gg.Graph(self.ctx).build_forward_expand(self.y)

    def judged(
        self, fault: Callable[[np.ndarray, np.ndarray, np.ndarray, np.random.Generator], np.ndarray] | None
    ) -> NodeVerdict:
        """A draw (activations, each token's two experts) computed by ggml, corrupted by `fault`, judged."""
        x = self.rng.standard_normal((8, 1, 256)).astype(np.float32)
        ids = np.stack([self.rng.permutation(4)[:2] for _ in range(8)]).astype(np.int32)
        x_dot = dot_rounding.as_dot_type(x, "Q8_K")
        drawn = Drawn(self.w, x, x_dot, self.rng)
        corrupt = None if fault is None else (lambda y, d: fault(y, ids, x_dot, d.rng))
        checker = Corrupting(corrupt, drawn)
        with observing(self.runner, checker):
            self.runner.run(self.graph, {self.x: x, self.ids: ids}, self.y)
        (v,) = [v for v in checker.verdicts if v.kind == "MUL_MAT_ID"]
        assert v.comparison is not None, v.error
        return v


def _expert_row(scale: float) -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.random.Generator], np.ndarray]:
    """One expert's weight row off by `scale` in every token routed to it."""

    def fault(y: np.ndarray, ids: np.ndarray, x_dot: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        e, i = int(ids[rng.integers(0, 8), rng.integers(0, 2)]), int(rng.integers(0, y.shape[-1]))
        y[ids == e, i] *= scale
        return y

    return fault


def _wrong_expert(y: np.ndarray, ids: np.ndarray, x_dot: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token's slot computed with an expert it was not routed to (the node's own other slot's result is no
    help: the expert's weights are needed, `ExpertsNode.w`, set on the function by the test)."""
    t, slot = int(rng.integers(0, 8)), int(rng.integers(0, 2))
    other = next(e for e in rng.permutation(4) if e not in ids[t])
    experts = _wrong_expert.experts  # type: ignore[attr-defined]
    y[t, slot] = x_dot[t, 0].astype(np.float64) @ np.asarray(experts[other], np.float64).T
    return y


def test_a_mixture_of_experts_product_is_judged_per_element_and_row_too() -> None:
    """MUL_MAT_ID: no false alarm over 100 draws; one expert's row off by 1 % and by 0.01 % (its rows judged over
    the tokens routed to it), and a slot computed with the wrong expert, caught in every draw."""
    node = ExpertsNode(seed=62)
    _wrong_expert.experts = node.w  # type: ignore[attr-defined]
    assert all(node.judged(None).ok for _ in range(100))
    for fault in (_expert_row(1.01), _expert_row(1.0001), _wrong_expert):
        caught = [not node.judged(fault).ok for _ in range(50)]
        assert all(caught), (fault, sum(caught))


def test_a_loaded_models_weights_are_hashed_once_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fixed_weights (a model's run: its weight tensors keep their values), a weight's entry is named by the
    tensor after the first hash; otherwise every get hashes the bytes again. Named by the bytes' address instead, a
    repacked weight (read from the file into a fresh array each time) took another weight's projection: the
    qwen35-0.8b preset's products failed by 1e6 units."""
    from pyggml.testing.engine.projected import ProjectionCache

    hashed: list[int] = []
    real = ProjectionCache.key

    def counting(*args: Any) -> str:
        hashed.append(1)
        return real(*args)

    monkeypatch.setattr(ProjectionCache, "key", staticmethod(counting))
    raw = np.zeros(4 * 256 * 4, np.uint8)
    raw.setflags(write=False)
    for fixed, expected in ((True, 1), (False, 3)):
        hashed.clear()
        cache = ProjectionCache(tmp_path / str(fixed), fixed_weights=fixed)
        for _ in range(3):
            cache.get("f32", raw, 4, 256, 1, 64, 4, place=(1234, "w"))
        assert len(hashed) == expected and cache.misses == 1
    # bytes with no tensor to name them (a weight read from the file): hashed each time, even where memory is reused
    cache = ProjectionCache(tmp_path / "reused", fixed_weights=True)
    buf = np.zeros(4 * 256 * 4, np.uint8)
    first = cache.get("f32", buf, 4, 256, 1, 64, 4)
    buf[:4] = np.frombuffer(np.float32(1.0).tobytes(), np.uint8)
    again = cache.get("f32", buf, 4, 256, 1, 64, 4)
    assert cache.misses == 2 and not np.array_equal(first.sw, again.sw)


def test_a_finding_covers_a_failing_node_as_it_covers_a_case_of_its_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a build lacking a finding's fix, a model's node of the op and types the finding's cases name is `known`,
    naming the finding, as `check`'s case of the same op says; another op's node stays failed."""
    from pyggml.testing.engine import findings

    planted = findings.Finding(999, "ggml-cpu Q4_K", "a planted bug", cases=r"^mul_mat/q4_k", backends=("cpu",))
    monkeypatch.setattr(findings, "FINDINGS", (planted,))
    monkeypatch.setattr(findings, "fixed_here", lambda f: None)
    assert findings.node_case("mul_mat", ["Q4_K", "F32"]) == "mul_mat/q4_k_f32"
    product = ProductNode("q4_k", 64, 256, 8, seed=63)
    v = product.judged(_column_zero)
    assert not v.ok and v.known.startswith("upstream bug, docs/findings.md 999: a planted bug"), v.known
    other = ProductNode("q8_0", 64, 256, 8, seed=63).judged(_column_zero)
    assert not other.ok and not other.known


def test_a_kept_weights_row_norms_are_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The element bounds' unit needs each weight row's norm; a weight the checker keeps across a conversation's
    steps (read-only values) has them taken once, not at every step (0.5 s of a 0.94 s checked step of the
    qwen3-0.6b preset); a writable array each time; a freed one's entry goes with it."""
    import gc

    from pyggml.testing.engine.opdb import matmul

    taken: list[int] = []
    real = matmul._row_norms

    def counting(a: np.ndarray) -> np.ndarray:
        taken.append(1)
        return real(a)

    monkeypatch.setattr(matmul, "_row_norms", counting)
    kept = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    kept.setflags(write=False)
    first = matmul._weight_row_norms(kept)
    assert matmul._weight_row_norms(kept) is first and len(taken) == 1
    assert np.allclose(first, np.linalg.norm(kept.astype(np.float64), axis=1))
    fresh = kept.copy()
    matmul._weight_row_norms(fresh)
    matmul._weight_row_norms(fresh)
    assert len(taken) == 3
    key = id(kept)
    assert key in matmul._WEIGHT_NORMS
    del kept, first
    gc.collect()
    assert key not in matmul._WEIGHT_NORMS
