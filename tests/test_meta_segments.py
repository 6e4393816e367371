"""Splits in several segments (llama.cpp's fused [q | k | v] splits): each device holds several ranges of
the split axis. ggml's meta code kept only each device's total for a computed tensor; patch 0026 keeps
the layout through the ops where it is defined and refuses, with the reason, where it is not.
PYGGML_SKIP_PATCHES=0026-meta-split-segments.patch shows what was wrong: the product read back in the
wrong order, tensors of different layouts added without notice."""

import numpy as np
import pytest

import pyggml as gg
from pyggml.meta import Split

E, T = 6, 3

# axis-1 splits of a [16, E] weight: (sizes, repeats); device 0's rows in the comment
LAYOUTS = {
    "qkv": (((2, 2), (4, 4)), (2, 1)),  # 0-1, 4-5, 8-11: llama.cpp's Qwen3-Next [q | k | v]
    "repeats": (((2, 2),), (4,)),  # 0-1, 4-5, 8-9, 12-13: llama.cpp's Qwen3.5
    "uneven": (((1, 3), (6, 0), (2, 4)), (1, 1, 1)),  # 0, 4-9, 10-11
    "device-1-first-empty": (((0, 4), (6, 6)), (1, 1)),  # 4-9: one range, in two segments
}


def rows_of(split: Split, device: int) -> list[int]:
    """The rows of the split axis a device holds, in ggml's order (segments, each repeated, each
    repetition split over the devices in order)."""
    out: list[int] = []
    pos = 0
    for seg, r in zip(split.segments(), split.repeats or [1] * len(split.segments())):
        for _ in range(r):
            for j, n in enumerate(seg):
                if j == device:
                    out += range(pos, pos + n)
                pos += n
    return out


def test_rows_of_follows_ggmls_order():
    assert rows_of(Split(1, *LAYOUTS["qkv"]), 0) == [0, 1, 4, 5, 8, 9, 10, 11]
    assert rows_of(Split(1, *LAYOUTS["repeats"]), 1) == [2, 3, 6, 7, 10, 11, 14, 15]


def _run(runner_name, policy, build, weights, inputs):
    """Allocate `weights` (name -> array) under `policy`, build outputs with build(ctx, w, x), run."""
    runner = gg.Runner(runner_name, n_threads=1)
    runner.set_policy(policy)
    wctx = gg.Context()
    w = {n: wctx.tensor("f32", a.shape, n) for n, a in weights.items()}
    runner.backend.alloc_tensors(wctx)
    for n, a in weights.items():
        w[n].set(a)
    ctx = gg.Context()
    x = {n: ctx.tensor("f32", a.shape, n, input=True) for n, a in inputs.items()}
    outs = build(ctx, w, x)
    graph = gg.Graph(ctx)
    for o in outs:
        graph.build_forward_expand(o)
    return runner.run(graph, {x[n]: a for n, a in inputs.items()}, outs)


def _same_on_meta(policy, build, weights, inputs, devices="cpu,cpu"):
    want = _run("cpu", None, build, weights, inputs)
    got = _run(f"meta:{devices}", policy, build, weights, inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


RNG = np.random.default_rng(0)
W = RNG.standard_normal((16, E)).astype(np.float32)
X3 = RNG.standard_normal((2, T, E)).astype(np.float32)  # [E, T, 2]: a ubatch of two sequences


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_segmented_tensor_reads_back_as_set(layout, axis):
    """ggml's segmented set/get took axis 0 of a 2-d tensor and axis 1 of a 3-d one (an abort otherwise)."""
    shape = [3, 2, 5, 2]  # NumPy order; the split axis gets 16
    shape[3 - axis] = 16
    runner = gg.Runner("meta:cpu,cpu")
    runner.set_policy([("w", Split(axis, *LAYOUTS[layout]))])
    wctx = gg.Context()
    w = wctx.tensor("f32", tuple(shape), "w")
    runner.backend.alloc_tensors(wctx)
    A = RNG.standard_normal(shape).astype(np.float32)
    w.set(A)
    np.testing.assert_array_equal(w.numpy(), A)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_product_of_a_segmented_weight_is_the_single_device_one(layout):
    """mul_mat of w [16, E] split along its output axis in segments: the product, split along axis 0,
    keeps the weight's layout (ggml gave it each device's total as one range: rows in the wrong order)."""
    split = Split(1, *LAYOUTS[layout])

    def build(ctx, w, x):
        y = ctx.mul_mat(w["w"], x["x"])  # [16, T, 2]
        return [y, ctx.silu(ctx.scale(y, 0.5)), ctx.cont(ctx.transpose(ctx.reshape_2d(y, 16, 2 * T)))]

    _same_on_meta([("w", split)], build, {"w": W}, {"x": X3})


def _qkv_views(ctx, y):
    """llama.cpp's fused q/k/v: views at 0, 4, 8 of [q4 | k4 | v8] per token, as heads of 2."""
    es = y.element_size

    def heads(n, off):
        return ctx.view_4d(y, 2, n, T, 2, 2 * es, y.nb[1], y.nb[2], off * es)

    return heads(2, 0), heads(2, 4), heads(4, 8)


QKV = Split(1, ((2, 2), (4, 4)), (2, 1))  # one head of q, k and two of v on each device


def test_fused_qkv_views_of_a_segmented_product_are_the_single_device_ones():
    def build(ctx, w, x):
        q, k, v = _qkv_views(ctx, ctx.mul_mat(w["w"], x["x"]))
        qk = ctx.mul(ctx.rms_norm(q, 1e-6), k)  # head by head: q's and k's heads on the same device
        vv = ctx.reshape_4d(ctx.cont(v), 2, 2, 2, T * 2)  # v's 4 heads as 2 pairs, one pair per device
        return [qk, ctx.cont(v), ctx.sum_rows(vv), ctx.cont(ctx.permute(k, 0, 2, 1, 3))]

    _same_on_meta([("w", QKV)], build, {"w": W}, {"x": X3})


def test_qkv_views_of_shares_out_of_proportion_are_refused():
    """q and k split 2:2 but v 2:6: ggml scales a view's offset and strides by the view's own share, so
    device 0's k or v view would read the wrong rows."""
    split = Split(1, ((2, 2), (2, 6)), (2, 1))

    def build(ctx, w, x):
        q, k, v = _qkv_views(ctx, ctx.mul_mat(w["w"], x["x"]))
        return [ctx.cont(k), ctx.cont(v)]

    with pytest.raises(gg.Unsplittable, match="not in proportion|would place device"):
        _run("meta:cpu,cpu", [("w", split)], build, {"w": W}, {"x": X3})


def test_tensors_laid_out_differently_are_not_combined():
    """The sum of two products whose weights put the same number of rows on each device, in different
    places: ggml compared only the totals and added the wrong rows."""
    split_a, split_b = QKV, Split(1, (8, 8))

    def build(ctx, w, x):
        return [ctx.add(ctx.mul_mat(w["a"], x["x"]), ctx.mul_mat(w["b"], x["x"]))]

    with pytest.raises(gg.Unsplittable, match="different layouts"):
        _run("meta:cpu,cpu", [("a", split_a), ("b", split_b)], build, {"a": W, "b": W}, {"x": X3})


def test_a_reduction_over_a_segmented_axis_needs_the_same_layout():
    """ssm_out's pattern: the activation split in segments along the axis a second weight reduces over."""
    w2 = RNG.standard_normal((5, 16)).astype(np.float32)

    def build(ctx, w, x):  # the partial sums, reduced over the devices, then scaled
        return [ctx.scale(ctx.mul_mat(w["w2"], ctx.silu(ctx.mul_mat(w["w"], x["x"]))), 2.0)]

    _same_on_meta([("w", QKV), ("w2", Split(0, *LAYOUTS["qkv"]))], build, {"w": W, "w2": w2}, {"x": X3})
    with pytest.raises(gg.Unsplittable, match="cannot combine"):
        _run("meta:cpu,cpu", [("w", QKV), ("w2", Split(0, (8, 8)))], build, {"w": W, "w2": w2}, {"x": X3})


def test_a_split_along_the_dim_a_norm_works_on_is_refused():
    def build(ctx, w, x):
        return [ctx.rms_norm(ctx.mul_mat(w["w"], x["x"]), 1e-6)]

    with pytest.raises(gg.Unsplittable, match="a split of the dim it works along"):
        _run("meta:cpu,cpu", [("w", QKV)], build, {"w": W}, {"x": X3})


_EMPTY_SHARE = """
import numpy as np, pyggml as gg
from pyggml.meta import Split
def run(name, split):
    r = gg.Runner(name)
    r.set_policy([("w", split)])
    wctx = gg.Context()
    w = wctx.tensor("f32", (8, 4), "w")
    r.backend.alloc_tensors(wctx)
    w.set(np.arange(32, dtype=np.float32).reshape(8, 4))
    ctx = gg.Context()
    x = ctx.tensor("f32", (12, 4), "x", input=True)
    # one row of the product (split along it) in each of 9 columns: a result whose split axis has extent 1
    o = ctx.scale(ctx.cont(ctx.view_3d(ctx.mul_mat(w, x), 1, 1, 9, 16, 32, 104)), 2.0)
    g = gg.Graph(ctx).build_forward_expand(o)
    return r.run(g, {x: np.ones((12, 4), np.float32)}, [o])[0]
np.testing.assert_array_equal(run("meta:cpu,cpu", Split(1, (0, 8))), run("cpu", Split("mirrored")))
print("ok")
"""


def test_a_device_holding_nothing_of_a_split_axis_of_extent_1_is_read_as_empty():
    """Found by the fuzzer's segmented splits (trial 49 --views: all of w on device 1): ggml sized each
    device's part of a read by its slice's strides, and an empty slice of an axis of extent 1 keeps the
    stride of one element; it read past device 0's empty slice (an abort)."""
    import os
    import subprocess
    import sys

    # the child imports the pyggml this process did (a build without the patch runs with -S and PYTHONPATH)
    cmd = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-c", _EMPTY_SHARE]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
