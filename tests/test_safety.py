"""Regression tests for the ways a Python user could crash the interpreter or get a silently
wrong answer through pyggml's Python layer (issue: no crash, no silent wrong answer). Each
fails on the code before the fix: a segfault or abort (run in a child process where the old
behaviour was a death), a wrong value, or growing memory."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pyggml as gg
from pyggml import checked, ffi, lib


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


# --- 1. ownership -----------------------------------------------------------------------------------
def _weights(backend):
    wctx = gg.Context()
    w = wctx.tensor("f32", (4, 8), "w")
    backend.alloc_tensors(wctx)
    w.set(np.arange(32, dtype=np.float32).reshape(4, 8) / 10)
    return w  # wctx is only reachable through w


def test_weights_from_a_helper_context_outlive_it():
    runner = gg.Runner("cpu")
    w = _weights(runner.backend)
    ctx = gg.Context()
    x = ctx.tensor("f32", (2, 8), "x", input=True)
    out = ctx.mul_mat(w, x)
    del w
    gc.collect()
    graph = gg.Graph(ctx).build_forward_expand(out)
    xv = np.ones((2, 8), np.float32)
    [y] = runner.run(graph, {x: xv}, [out])
    np.testing.assert_allclose(y, xv @ (np.arange(32, dtype=np.float32).reshape(4, 8) / 10).T, rtol=1e-6)
    # reached through the graph: src and leafs keep the weights' context too
    [w_again] = [t for t in graph.leafs() if t.name == "w"]
    del ctx, out, x
    gc.collect()
    np.testing.assert_allclose(w_again.numpy()[0, :3], [0.0, 0.1, 0.2], rtol=1e-6)


def test_numpy_view_keeps_the_tensor_alive():
    ctx = gg.Context(mem_size=1 << 16, no_alloc=False)
    t = ctx.tensor("f32", (4, 4))
    t.set(np.full((4, 4), 7.0, np.float32))
    arr = t.view()
    del t, ctx
    gc.collect()
    for _ in range(50):  # memory churn that would reuse a freed arena
        junk = gg.Context(mem_size=1 << 16, no_alloc=False).tensor("f32", (4, 4))
        junk.set(np.zeros((4, 4), np.float32))
    np.testing.assert_array_equal(arr, np.full((4, 4), 7.0, np.float32))


def test_memory_is_constant_however_often_a_graph_runs():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    out = ctx.exp(a)
    graph = gg.Graph(ctx).build_forward_expand(out)
    runner = gg.Runner("cpu")
    runner.run(graph, {a: np.zeros(4)}, [out])
    kept = len(ctx._keep)
    marks, paths = len(graph.state.marks), len(graph.state.paths)
    for _ in range(200):
        runner.run(graph, {a: np.zeros(4)}, [out])
    assert len(ctx._keep) == kept
    assert len(graph.state.marks) == marks and len(graph.state.paths) == paths  # per compute path, not per run


# --- 2. preconditions ggml asserts: exceptions, from ggml's own checks -----------------------------
def test_ggml_asserts_become_op_errors():
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 8))
    with pytest.raises(gg.OpError, match=r"^scale: ggml requires ggml_is_padded_1d\(a\)"):
        ctx.scale(ctx.view_3d(ctx.tensor("f32", (2, 3, 8)), 8, 2, 2, 32, 96, 0), 2.0)  # rows packed, planes not
    with pytest.raises(gg.OpError, match="add: ggml requires ggml_can_repeat"):
        ctx.add(a, ctx.tensor("f32", (2, 8)))
    with pytest.raises(gg.OpError, match="ggml_add: ggml requires ggml_can_repeat"):
        checked.ggml_add(ctx.ptr, a.ptr, ctx.tensor("f32", (2, 8)).ptr)
    assert checked.ggml_nbytes(a.ptr) == 96


def test_guard_is_per_thread():
    errors, ok = [], []

    def work(i):
        ctx = gg.Context()
        a = ctx.tensor("f32", (3, 8))
        for _ in range(200):
            try:
                ctx.add(a, ctx.tensor("f32", (2, 8)) if i % 2 else a)
                ok.append(i)
            except gg.OpError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 600 and len(ok) == 600
    assert all("ggml_can_repeat" in e for e in errors)


def test_context_full_is_a_memory_error():
    ctx = gg.Context(mem_size=lib.ggml_tensor_overhead() + 1024, no_alloc=False)
    with pytest.raises(MemoryError, match="context is full"):
        ctx.tensor("f32", (1024,))
    small = gg.Context(mem_size=3 * lib.ggml_tensor_overhead() + 256, no_alloc=False)
    a = small.tensor("f32", (16,))
    with pytest.raises(MemoryError, match="context is full: add"):
        for _ in range(10):
            small.add(a, a)


def test_sizes_ggml_cannot_address():
    ctx = gg.Context()
    with pytest.raises(ValueError, match="more than ggml can address"):
        ctx.tensor("f32", (2**40, 2**40))
    with pytest.raises(ValueError, match="mem_size"):
        gg.Context(mem_size=2**62)
    with pytest.raises(TypeError, match="ne must be integers"):
        ctx.tensor("f32", (2.5, 3))


@pytest.mark.parametrize("type_name", ["q8_k", "q8_1", "iq1_s", "iq2_xs", "iq2_xxs"])
def test_set_on_types_ggml_cannot_quantize_from_floats(type_name):
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    t = ctx.tensor(type_name, (2, 256))
    with pytest.raises(TypeError, match=gg.Type[type_name.upper()].name):
        t.set(np.zeros((2, 256), np.float32))


# --- 3. graphs that died at compute ------------------------------------------------------------------
def test_zero_element_tensors_are_refused():
    # ggml's shape checks divide by extents (mul_mat of an empty tensor was a SIGFPE while
    # building) and its kernels die on empty tensors at compute
    ctx = gg.Context()
    with pytest.raises(ValueError, match="empty tensors"):
        ctx.tensor("f32", (0, 4), "a")
    a = ctx.tensor("f32", (3, 4), "a")
    for make in (
        lambda: ctx.view_2d(a, 4, 0, 16, 0),
        lambda: ctx.view_1d(a, 0, 0),
        lambda: ctx.reshape_2d(a, 0, 12),
        lambda: ctx.cont_2d(a, 0, 4),
    ):
        with pytest.raises(ValueError, match="positive"):
            make()


def test_shape_keeps_every_dim():
    ctx = gg.Context()
    assert ctx.tensor("f32", (5, 1, 3)).shape == (5, 1, 3)
    assert ctx.tensor("f32", (1, 1, 3)).shape == (1, 1, 3)  # leading 1s as written (issue 19)


def test_cont_of_quantized_is_refused_or_right():
    ctx = gg.Context()
    q = ctx.tensor("q8_0", (2, 64), "q", input=True)
    out = ctx.cont_2d(q, 32, 4)
    graph = gg.Graph(ctx).build_forward_expand(out)
    vals = np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 64)
    try:
        [y] = gg.Runner("cpu").run(graph, {q: vals}, [out])
    except gg.GraphError:
        return
    np.testing.assert_allclose(y.reshape(-1), vals.reshape(-1), atol=0.02)


def test_bad_views_and_ranges():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4, 4))
    with pytest.raises(ValueError, match="must be positive"):
        ctx.view_nd(a, [-1, 4, 1, 1], [4, 16, 64, 64])  # negative extent
    with pytest.raises(ValueError, match="finite"):
        ctx.arange(0, float("inf"))
    with pytest.raises(ValueError, match="past the end"):
        ctx.view_2d(a, 4, 4, 20, 0)


def test_index_view_cannot_bypass_the_range_check():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4, 3), "a", input=True)
    idx = ctx.tensor("i32", (4,), "idx", input=True)
    out = ctx.get_rows(a, ctx.view_1d(idx, 2, 8))  # the last two indices, through a view
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="outside the 4 rows"):
        gg.Runner("cpu").run(graph, {a: np.zeros((4, 3)), idx: np.array([0, 1, 2, 99])}, [out])
    [y] = gg.Runner("cpu").run(graph, {a: np.arange(12).reshape(4, 3), idx: np.array([0, 1, 3, 2])}, [out])
    np.testing.assert_array_equal(y, [[9, 10, 11], [6, 7, 8]])


def test_scheduler_graph_size_too_small():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    out = ctx.exp(ctx.neg(ctx.abs(a)))
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="graph_size"):
        gg.Runner("cpu", graph_size=1).run(graph, {a: np.zeros(4)}, [out])


def test_graph_too_small_is_refused_and_never_computed():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    out = ctx.exp(ctx.neg(ctx.abs(a)))
    graph = gg.Graph(ctx, size=2)
    with pytest.raises(ValueError, match="graph is full"):
        graph.build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="expand failed"):
        gg.Runner("cpu").run(graph, {a: np.zeros(4)}, [out])


# --- 4. runner state ------------------------------------------------------------------------------------
def _chain(n):
    ctx = gg.Context()
    a = ctx.tensor("f32", (64,), "a", input=True)
    out = a
    for _ in range(n):
        out = ctx.add(out, a)
    return ctx, a, out, gg.Graph(ctx).build_forward_expand(out)


def test_one_graph_on_two_runners_then_a_bigger_graph():
    r1, r2 = gg.Runner("cpu"), gg.Runner("cpu")
    _, a, out, g = _chain(3)
    x = np.ones(64, np.float32)
    [y1] = r1.run(g, {a: x}, [out])
    [y2] = r2.run(g, {a: x}, [out])
    _, b, out_big, g_big = _chain(200)
    [y3] = r1.run(g_big, {b: x}, [out_big])  # r1 reallocates: g must not use its old memory
    [y4] = r2.run(g, {a: 2 * x}, [out])
    np.testing.assert_array_equal(y1, 4 * x)
    np.testing.assert_array_equal(y2, 4 * x)
    np.testing.assert_array_equal(y3, 201 * x)
    np.testing.assert_array_equal(y4, 8 * x)


def test_compute_of_a_graph_that_is_not_the_one_allocated():
    runner = gg.Runner("cpu")
    _, a, out1, g1 = _chain(1)
    _, b, out2, g2 = _chain(2)
    runner.allocate(g1, [out1])
    runner.allocate(g2, [out2])
    with pytest.raises(gg.GraphError, match="allocate this graph again"):
        runner.compute(g1)
    with pytest.raises(ValueError, match="no memory"):
        out1.numpy()


# --- 6. values --------------------------------------------------------------------------------------------
def test_set_refuses_values_an_integer_type_cannot_hold():
    ctx = gg.Context(mem_size=1 << 16, no_alloc=False)
    t = ctx.tensor("i32", (2,))
    with pytest.raises(ValueError, match="do not fit in I32"):
        t.set(np.array([1, 2**40], np.int64))
    with pytest.raises(ValueError, match="NaN"):
        t.set(np.array([1.0, np.nan]))
    t.set(np.array([-(2**31), 2**31 - 1], np.int64))
    np.testing.assert_array_equal(t.numpy(), [-(2**31), 2**31 - 1])


# --- the raw layer still aborts, with the Python call site ---------------------------------------------------
def test_raw_layer_abort_prints_the_call_site():
    res = run_child("""
        import pyggml as gg
        ctx = gg.Context()
        a = ctx.tensor("f32", (3, 8)); b = ctx.tensor("f32", (2, 8))
        gg.lib.ggml_add(ctx.ptr, a.ptr, b.ptr)
    """)
    assert res.returncode != 0
    assert "ggml aborted" in res.stderr and "ggml_can_repeat" in res.stderr


# --- found by the fuzzer -------------------------------------------------------------------------------------
def test_a_graph_that_does_not_fit_its_context():
    # ggml_new_graph_custom used the NULL of a full context (SIGSEGV) before patch 0010
    ctx = gg.Context(no_alloc=False, mem_size=1 << 16)
    with pytest.raises(MemoryError, match="context is full"):
        gg.Graph(ctx)
    with pytest.raises(ValueError, match="Graph: size"):
        gg.Graph(gg.Context(), 2**31)
    res = run_child("""
        import pyggml as gg
        ctx = gg.Context(no_alloc=False, mem_size=1 << 16)
        try:
            gg.checked.ggml_new_graph(ctx.ptr)
        except gg.OpError as e:
            print("raised", e)
    """)
    assert res.returncode == 0 and "raised" in res.stdout, res.stderr[-2000:]


def test_sizes_and_counts_out_of_range():
    with pytest.raises(ValueError, match="graph_size"):
        gg.Scheduler([gg.cpu_backend()], 2**40)  # ggml's malloc of its tables aborted
    with pytest.raises(ValueError, match="n_threads"):
        gg.Runner("cpu", n_threads=2**31)
    from pyggml.meta import Split

    with pytest.raises(ValueError, match="n_devices"):
        Split.even(0, 8, 2**40)  # built a list of 2**40 sizes
    with pytest.raises(ValueError, match="granularity"):
        Split.even(0, 8, 2, 0)
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    buf_ctx = gg.Context()
    buf_ctx.tensor("f32", (4,))
    buf = gg.cpu_backend().alloc_tensors(buf_ctx)
    with pytest.raises(ValueError, match="0..255"):
        buf.clear(256)
    with pytest.raises(IndexError):
        gg.Graph(ctx).node(2**63)


def test_only_leaves_can_be_inputs():
    ctx = gg.Context()
    t = ctx.tensor("i64", (2, 1, 16, 16))
    with pytest.raises(ValueError, match="only tensors no op computes"):
        ctx.permute(t, 2, 0, 1, 3).set_input()  # ggml asserted op == NONE


def test_quantized_rows_keep_whole_blocks():
    ctx = gg.Context()
    q = ctx.tensor("iq4_nl", (64,))
    with pytest.raises(ValueError, match="block size"):
        ctx.reshape_2d(q, 1, 64)  # accepted before, and read garbage
    with pytest.raises(ValueError, match="whole blocks"):
        ctx.transpose(ctx.tensor("q4_k", (256,)))  # get_rows of it read garbage


def test_writes_into_a_view_that_overlaps_itself():
    ctx = gg.Context()
    t = ctx.tensor("f32", (5, 16, 7))
    aliased = ctx.view_3d(t, 7, 16, 5, 28, 0, 0)  # the 5 planes are the same memory
    with pytest.raises(ValueError, match="overlaps itself"):
        ctx.set_rows(aliased, ctx.tensor("f16", (5, 2, 7)), ctx.tensor("i64", (2,)))


@pytest.mark.parametrize(
    "call",
    [
        lambda: gg.Runner(1),
        lambda: gg.Graph(gg.Context()).get_tensor(3),
        lambda: gg.Context().adopt(1),
        lambda: gg.Context().tensor("f32", (2,)).set_name(1),
        lambda: gg.cpu_backend().unsupported(1),
        lambda: gg.Scheduler([gg.cpu_backend()]).reserve(1),
        lambda: gg.device(None),
    ],
)
def test_wrong_kinds_of_arguments_are_type_errors(call):
    with pytest.raises(TypeError):
        call()


def test_set_rows_of_f16_rows_plans_a_work_buffer_for_every_thread():
    """Each CPU thread converts its F16 rows at wdata + (ne0 + 16)*ith floats; the plan reserved ne0
    floats for one task, so threads 1.. wrote past the buffer (heap corruption, found by the fuzzer
    and AddressSanitizer; patch 0012)."""
    ctx = gg.Context()
    dst = ctx.tensor("q4_0", (3, 64), "dst", input=True)
    rows = ctx.tensor("f16", (2, 64), "rows", input=True)
    idx = ctx.tensor("i32", (2,), "idx", input=True)
    out = ctx.set_rows(dst, rows, idx)
    graph = gg.Graph(ctx).build_forward_expand(out)
    n_threads, ne0, cache_line_floats = 4, 64, 16
    plan = lib.ggml_graph_plan(graph.ptr, n_threads, ffi.NULL)
    last_thread_end = 4 * ((ne0 + cache_line_floats) * (n_threads - 1) + ne0)
    assert plan.work_size >= last_thread_end
    # and the result is right with several threads
    vals = np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 64)
    [y] = gg.Runner("cpu", n_threads=n_threads).run(
        graph, {dst: np.zeros((3, 64)), rows: vals, idx: np.array([2, 0])}, [out]
    )
    np.testing.assert_allclose(y[[2, 0]], vals, atol=0.1)
    np.testing.assert_array_equal(y[1], 0)


def test_a_graph_expanded_after_it_ran_runs_again():
    """A view made of a node that held the runner's memory copied that address without a buffer;
    the next allocation took it for a tensor allocated elsewhere and ggml aborted (found by
    trying graph reuse as a user would)."""
    res = run_child("""
        import numpy as np, pyggml as gg
        x = np.arange(8, dtype=np.float32)
        ctx = gg.Context(); a = ctx.tensor("f32", (8,), "a", input=True)
        o1 = ctx.exp(a); g = gg.Graph(ctx).build_forward_expand(o1)
        r = gg.Runner("cpu")
        r.run(g, {a: x}, [o1])
        idx = ctx.tensor("i32", (2,), "idx", input=True)
        o3 = ctx.get_rows(ctx.reshape_2d(o1, 2, 4), idx)
        g.build_forward_expand(o3)
        for _ in range(3):
            [y] = r.run(g, {a: x, idx: np.array([3, 0])}, [o3])
            np.testing.assert_allclose(y, np.exp(x).reshape(4, 2)[[3, 0]], rtol=1e-6)
        print("ok")
    """)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


# --- one allocator, several graphs --------------------------------------------------------------------
def _same_size_graphs():
    """Two graphs of three nodes each whose memory plans differ (in-place reuse)."""
    out = []
    for first, second in (("sqr", "add"), ("cos", "mul")):
        ctx = gg.Context()
        x = ctx.tensor("f32", (4, 8), "x", input=True)
        y = ctx.tensor("f32", (4, 8), "y", input=True)
        h = getattr(ctx, first)(x)
        h = ctx.add(h, y) if second == "add" else ctx.mul(h, x)
        h = ctx.add(h, y)
        out.append((gg.Graph(ctx).build_forward_expand(h), x, y, h))
    return out


def test_a_runner_plans_memory_again_for_another_graph_of_the_same_size():
    # ggml_gallocr_needs_realloc reused the first graph's plan: the second computed wrong values
    rng = np.random.default_rng(0)
    X, Y = rng.uniform(-1, 1, (2, 4, 8)).astype(np.float32)
    (g1, x1, y1, h1), (g2, x2, y2, h2) = _same_size_graphs()
    runner = gg.Runner("cpu")
    runner.run(g1, {x1: X, y1: Y}, [h1])
    [got] = runner.run(g2, {x2: X, y2: Y}, [h2])
    np.testing.assert_allclose(got, np.cos(X) * X + Y, rtol=1e-6, atol=1e-6)
    [again] = runner.run(g1, {x1: X, y1: Y}, [h1])  # and back
    np.testing.assert_allclose(again, X * X + Y + Y, rtol=1e-6, atol=1e-6)


def test_a_gallocr_plans_memory_again_for_another_graph_of_the_same_size():
    rng = np.random.default_rng(1)
    X, Y = rng.uniform(-1, 1, (2, 4, 8)).astype(np.float32)
    (g1, x1, y1, h1), (g2, x2, y2, h2) = _same_size_graphs()
    cpu = gg.cpu_backend(1)
    galloc = gg.Gallocr(cpu.buffer_type)
    for g, x, y in ((g1, x1, y1), (g2, x2, y2)):
        galloc.alloc_graph(g)
        x.set(X)
        y.set(Y)
        cpu.compute(g)
    np.testing.assert_allclose(h2.numpy(), np.cos(X) * X + Y, rtol=1e-6, atol=1e-6)


def test_a_device_runner_computes_on_its_device():
    # ggml's scheduler ran a node fed only by inputs on the CPU: Runner("vulkan0") did not use Vulkan
    from pyggml.testing.check import available_backends

    devices = [b for b in available_backends() if b != "cpu"]
    if not devices:
        pytest.skip("no device besides the CPU")
    ctx = gg.Context()
    a = ctx.tensor("f32", (4, 8), "a", input=True)
    out = ctx.add(a, a)
    graph = gg.Graph(ctx).build_forward_expand(out)
    runner = gg.Runner(devices[0])
    [y] = runner.run(graph, {a: np.ones((4, 8), np.float32)}, [out])
    assert runner.sched.tensor_backend(out).lower() == devices[0]
    np.testing.assert_array_equal(y, np.full((4, 8), 2.0, np.float32))


@pytest.mark.parametrize("op", ["mul_mat", "soft_max", "argsort"])
def test_vulkan_refuses_misaligned_views_it_would_abort_on(op):
    # ggml-vulkan asserts (ending the process) when most ops read a view at an offset that is not a
    # multiple of the device's storage-buffer alignment; the preflight refuses it first
    from pyggml.testing.check import available_backends

    device = next((b for b in available_backends() if b.startswith("vulkan")), None)
    if device is None:
        pytest.skip("no Vulkan device")
    ctx = gg.Context()
    a = ctx.tensor("f32", (64,), "a", input=True)
    b = ctx.tensor("f32", (4, 8), "b", input=True)
    v = ctx.view_2d(a, 8, 4, 32, 4)  # 4 bytes into a
    out = {
        "mul_mat": lambda: ctx.mul_mat(v, b),
        "soft_max": lambda: ctx.soft_max(v),
        "argsort": lambda: ctx.argsort(v),
    }[op]()
    graph = gg.Graph(ctx).build_forward_expand(out)
    backend = gg.backend(device)
    backend.alloc_tensors(ctx)
    a.set(np.arange(64, dtype=np.float32))
    b.set(np.ones((4, 8), np.float32))
    with pytest.raises(gg.GraphError, match="aligned to"):
        backend.compute(graph)
    # through a Runner the view of an input stays with the input on the CPU, and the scheduler copies it
    # to aligned Vulkan memory for the op: it runs
    ctx2 = gg.Context()
    a2 = ctx2.tensor("f32", (64,), "a", input=True)
    out2 = ctx2.soft_max(ctx2.view_2d(a2, 8, 4, 32, 4))
    values = np.linspace(-1, 1, 64, dtype=np.float32)
    [y] = gg.Runner(device).run(gg.Graph(ctx2).build_forward_expand(out2), {a2: values}, [out2])
    rows = values[1:33].reshape(4, 8)
    np.testing.assert_allclose(y, np.exp(rows) / np.exp(rows).sum(-1, keepdims=True), rtol=1e-5)


def test_index_values_of_ssm_scan_and_get_rows_back_are_checked_before_compute():
    ctx = gg.Context()
    s = ctx.tensor("f32", (2, 2, 3, 4), "s", input=True)  # 2 state rows
    x = ctx.tensor("f32", (1, 2, 2, 3), "x", input=True)
    dt = ctx.tensor("f32", (1, 2, 2), "dt", input=True)
    A = ctx.tensor("f32", (2, 1), "A", input=True)
    B = ctx.tensor("f32", (1, 2, 1, 4), "B", input=True)
    C = ctx.tensor("f32", (1, 2, 1, 4), "C", input=True)
    ids = ctx.tensor("i32", (1,), "ids", input=True)
    out = ctx.ssm_scan(s, x, dt, A, B, C, ids)
    graph = gg.Graph(ctx).build_forward_expand(out)
    feed = {t: np.zeros(t.shape, np.float32) for t in (s, x, dt, A, B, C)}
    with pytest.raises(gg.GraphError, match="ssm_scan: index ids holds 2..2"):
        gg.Runner("cpu").run(graph, {**feed, ids: np.array([2], np.int32)}, [out])
    ctx = gg.Context()
    grad = ctx.tensor("f32", (3, 4), "grad", input=True)
    rows = ctx.tensor("i32", (3,), "rows", input=True)
    out = ctx.get_rows_back(grad, rows, ctx.new_tensor("f32", [4, 5]))
    graph = gg.Graph(ctx).build_forward_expand(out)
    runner = gg.Runner("cpu")
    runner.run(graph, {grad: np.ones((3, 4), np.float32), rows: np.array([0, 4, 1], np.int32)}, [out])
    with pytest.raises(gg.GraphError, match="get_rows_back.*outside the 5 rows"):  # the same graph, run again
        runner.run(graph, {grad: np.ones((3, 4), np.float32), rows: np.array([0, 5, 1], np.int32)}, [out])


def test_expert_ids_are_checked_before_compute():
    # mul_mat_id wrote out of bounds (the CPU checks ids with assert() only); add_id aborted
    ctx = gg.Context()
    experts = ctx.tensor("f32", (3, 4, 8), "experts", input=True)  # 3 matrices [8 -> 4]
    b = ctx.tensor("f32", (2, 1, 8), "b", input=True)
    ids = ctx.tensor("i32", (2, 1), "ids", input=True)
    out = ctx.mul_mat_id(experts, b, ids)
    graph = gg.Graph(ctx).build_forward_expand(out)
    feed = {experts: np.ones((3, 4, 8), np.float32), b: np.ones((2, 1, 8), np.float32)}
    runner = gg.Runner("cpu")
    runner.run(graph, {**feed, ids: np.array([[2], [0]], np.int32)}, [out])
    with pytest.raises(gg.GraphError, match="mul_mat_id: index ids holds 0..3, outside the 3 rows"):
        runner.run(graph, {**feed, ids: np.array([[3], [0]], np.int32)}, [out])
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 1, 8), "a", input=True)
    rows = ctx.tensor("f32", (3, 8), "rows", input=True)
    ids = ctx.tensor("i32", (2, 1), "ids", input=True)
    out = ctx.add_id(a, rows, ids)
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="add_id: index ids holds"):
        gg.Runner("cpu").run(
            graph,
            {
                a: np.ones((2, 1, 8), np.float32),
                rows: np.ones((3, 8), np.float32),
                ids: np.array([[0], [-1]], np.int32),
            },
            [out],
        )


def test_vulkan_mul_mat_id_with_a_half_b_is_unsupported_not_an_abort():
    # patch 0016: Vulkan said it supports it, then asserted in its matrix-vector path
    from pyggml.testing.check import available_backends

    device = next((b for b in available_backends() if b.startswith("vulkan")), None)
    if device is None:
        pytest.skip("no Vulkan device")
    code = f"""
import numpy as np, pyggml as gg
ctx = gg.Context()
experts = ctx.tensor("f16", (3, 4, 32), "experts", input=True)
b = ctx.tensor("f16", (2, 1, 32), "b", input=True)
ids = ctx.tensor("i32", (2, 1), "ids", input=True)
out = ctx.mul_mat_id(experts, b, ids)
graph = gg.Graph(ctx).build_forward_expand(out)
try:
    gg.Runner({device!r}, fallback=False).run(graph, {{experts: np.ones((3, 4, 32)), b: np.ones((2, 1, 32)), ids: np.zeros((2, 1))}}, [out])
    print("computed")
except gg.Unsupported as e:
    print("unsupported", e)
"""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"the process died: {res.stderr[-500:]}"
    assert res.stdout.startswith("unsupported"), res.stdout
