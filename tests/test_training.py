"""Training through ggml's backward pass from Python: parameters and losses (`Tensor.set_param`, `set_loss`),
the gradients (`Graph.build_backward_expand`, `graph.grad`), the optimizers of `pyggml.optim` (ggml's
opt_step_adamw and opt_step_sgd) and a Runner's fallback to the CPU for nodes its device cannot compute.

Gradients and steps are held against NumPy written from the definitions (softmax cross-entropy's analytic
gradient, the AdamW and SGD update formulas), in float64."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import pyggml as gg
from pyggml import optim
from pyggml.testing.check import available_backends

RNG_SEED = 0
N, D_IN, D_H, D_OUT = 16, 2, 32, 3


def _weights(runner, shapes, values=None, rng=None):
    """Tensors of their own memory on the runner's device, written and flagged as parameters."""
    wctx = gg.Context()
    ts = {k: wctx.tensor("f32", s, k) for k, s in shapes.items()}
    runner.backend.alloc_tensors(wctx)
    for k, t in ts.items():
        v = values[k] if values is not None else rng.standard_normal(shapes[k]).astype(np.float32) * 0.5
        t.set(v)
        t.set_param()
    return ts


def _mlp(runner, rng):
    """A 2-32-3 MLP, relu, softmax cross-entropy (ggml's cross_entropy_loss): parameters, inputs, loss, graph."""
    p = _weights(runner, {"w1": (D_H, D_IN), "b1": (D_H,), "w2": (D_OUT, D_H), "b2": (D_OUT,)}, rng=rng)
    ctx = gg.Context()
    x = ctx.tensor("f32", (N, D_IN), "x", input=True)
    y = ctx.tensor("f32", (N, D_OUT), "y", input=True)
    h = ctx.relu(ctx.add(ctx.mul_mat(p["w1"], x), p["b1"]))
    logits = ctx.add(ctx.mul_mat(p["w2"], h), p["b2"])
    loss = ctx.cross_entropy_loss(logits, y).set_name("loss").set_loss()
    graph = gg.Graph.with_grads(ctx).build_forward_expand(loss).build_backward_expand()
    return p, x, y, loss, graph


def _mlp_numpy(P, X, Y):
    """Loss and analytic gradients of the same MLP in float64, from the definitions."""
    P = {k: v.astype(np.float64) for k, v in P.items()}
    pre = X @ P["w1"].T + P["b1"]
    h = np.maximum(pre, 0)
    z = h @ P["w2"].T + P["b2"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    loss = -(Y * np.log(soft)).sum(axis=1).mean()
    dz = (soft - Y) / len(X)  # d mean(-sum(y log softmax(z))) / dz, for labels that sum to 1
    dpre = (dz @ P["w2"]) * (pre > 0)
    grads = {"w1": dpre.T @ X, "b1": dpre.sum(0), "w2": dz.T @ h, "b2": dz.sum(0)}
    return loss, grads, pre


def _batch(rng):
    X = rng.standard_normal((N, D_IN)).astype(np.float32)
    Y = np.eye(D_OUT, dtype=np.float32)[rng.integers(0, D_OUT, N)]
    return X, Y


def _rel(a, e):
    return float(np.abs(np.asarray(a, np.float64) - e).max() / np.abs(e).max())


def test_mlp_gradients_are_numpys_analytic_ones():
    """Every parameter's gradient, read after the run through graph.grad, at two batches (the loss's seed is
    refilled by the runner at each). Bound 1e-5 relative to the largest entry: ggml computes in float32 over
    sums of at most 32 terms (about 1e-7 each), NumPy in float64; a wrong term or a missing factor of 1/N is
    off by far more. The batches keep every relu input away from 0, where float32 could take the other side."""
    rng = np.random.default_rng(RNG_SEED)
    runner = gg.Runner("cpu")
    p, x, y, loss, graph = _mlp(runner, rng)
    P = {k: t.numpy() for k, t in p.items()}
    for _ in range(2):
        X, Y = _batch(rng)
        want_loss, want, pre = _mlp_numpy(P, X, Y)
        assert np.abs(pre).min() > 1e-4
        got_loss = runner.run(graph, {x: X, y: Y}, loss)
        assert abs(float(got_loss.item()) - want_loss) <= 1e-6 * abs(want_loss)
        for k, t in p.items():
            g = graph.grad(t)
            assert g is not None and g.is_output
            assert g.shape == P[k].shape
            assert _rel(g.numpy(), want[k]) <= 1e-5, k
    seed = graph.grad_acc(loss)
    assert seed is not None and seed.is_input and seed.numpy().item() == 1.0


def test_the_graph_lists_its_parameters_and_flags():
    rng = np.random.default_rng(RNG_SEED)
    runner = gg.Runner("cpu")
    p, x, y, loss, graph = _mlp(runner, rng)
    assert set(graph.params()) == set(p.values())
    assert all(t.is_param and not t.is_loss for t in p.values())
    assert loss.is_loss and not loss.is_param and not x.is_param
    assert graph.has_grads and graph.has_backward


def _quadratic(runner, W0, C_shape):
    """loss = sum((w - c)**2): dL/dw = 2 (w - c), a gradient that changes at every step."""
    p = _weights(runner, {"w": W0.shape}, {"w": W0})
    ctx = gg.Context()
    c = ctx.tensor("f32", C_shape, "c", input=True)
    loss = ctx.sum(ctx.sqr(ctx.sub(p["w"], c))).set_loss()
    graph = gg.Graph.with_grads(ctx).build_forward_expand(loss).build_backward_expand()
    return p["w"], c, loss, graph


def test_adamw_steps_are_the_update_formula():
    """Six steps with weight decay, the learning rate changed half-way, against AdamW in float64 (bias
    correction 1/(1 - beta**t) at step t). Bound 1e-5 relative: float32 rounding over six steps."""
    rng = np.random.default_rng(1)
    runner = gg.Runner("cpu")
    W0 = rng.standard_normal((3, 5)).astype(np.float32)
    w, c, loss, graph = _quadratic(runner, W0, (3, 5))
    opt = optim.AdamW([w], lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)
    assert opt.build_step(graph) is graph
    W, m, v = W0.astype(np.float64), np.zeros((3, 5)), np.zeros((3, 5))
    for t in range(1, 7):
        if t == 4:
            opt.lr = 0.02
        C = rng.standard_normal((3, 5)).astype(np.float32)
        hp = opt.hyperparameters()
        assert hp[5] == np.float32(1 / (1 - 0.8**t)) and hp[6] == np.float32(1 / (1 - 0.95**t))
        runner.run(graph, {c: C}, loss)
        g = 2 * (W - C)
        m = 0.8 * m + 0.2 * g
        v = 0.95 * v + 0.05 * g * g
        mh, vh = m / (1 - 0.8**t), v / (1 - 0.95**t)
        W = W * (1 - opt.lr * 0.1) - opt.lr * mh / (np.sqrt(vh) + 1e-6)
        assert opt.step_count == t
        assert _rel(w.numpy(), W) <= 1e-5, t
    gm, gv = opt.moments(w)
    assert _rel(gm.numpy(), m) <= 1e-5 and _rel(gv.numpy(), v) <= 1e-5
    opt.reset()
    assert opt.step_count == 0 and not gm.numpy().any() and not gv.numpy().any()


def test_sgd_steps_are_the_update_formula():
    rng = np.random.default_rng(2)
    runner = gg.Runner("cpu")
    W0 = rng.standard_normal((4,)).astype(np.float32)
    w, c, loss, graph = _quadratic(runner, W0, (4,))
    opt = optim.SGD(w, lr=0.1, weight_decay=0.5)
    opt.build_step(graph)
    W = W0.astype(np.float64)
    for t in range(1, 5):
        C = rng.standard_normal(4).astype(np.float32)
        runner.run(graph, {c: C}, loss)
        W = W * (1 - 0.1 * 0.5) - 0.1 * 2 * (W - C)
        assert _rel(w.numpy(), W) <= 1e-6, t
    assert opt.step_count == 4
    np.testing.assert_array_equal(opt.hyperparameters(), np.array([0.1, 0.5], np.float32))


def test_a_training_loop_brings_a_classifiers_loss_down():
    """Three separated blobs: 150 AdamW steps take the MLP's loss below a fifth of its start and classify
    more than 95 % of the points (the eval graph reads the same weights)."""
    rng = np.random.default_rng(3)
    runner = gg.Runner("cpu")
    p, x, y, loss, graph = _mlp(runner, rng)
    opt = optim.AdamW(graph.params(), lr=0.03)
    opt.build_step(graph)
    centers = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    losses = []
    for _ in range(150):
        k = rng.integers(0, D_OUT, N)
        X = (centers[k] + 0.5 * rng.standard_normal((N, D_IN))).astype(np.float32)
        losses.append(float(runner.run(graph, {x: X, y: np.eye(D_OUT)[k]}, loss).item()))
    assert opt.step_count == 150
    assert np.mean(losses[-10:]) < np.mean(losses[:5]) / 5, (losses[:5], losses[-10:])
    ctx = gg.Context()
    xe = ctx.tensor("f32", (N, D_IN), "x", input=True)
    h = ctx.relu(ctx.add(ctx.mul_mat(p["w1"], xe), p["b1"]))
    logits = ctx.add(ctx.mul_mat(p["w2"], h), p["b2"])
    k = rng.integers(0, D_OUT, N)
    X = (centers[k] + 0.5 * rng.standard_normal((N, D_IN))).astype(np.float32)
    out = runner.run(gg.Graph(ctx).build_forward_expand(logits), {xe: X}, logits)
    assert (out.argmax(axis=1) == k).mean() > 0.95


# --- bad input --------------------------------------------------------------------------------------------
def test_set_loss_and_set_param_refuse_what_ggml_asserts():
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    with pytest.raises(ValueError, match=r"set_loss: a has shape \(2, 3\); a loss must be a scalar"):
        a.set_loss()
    with pytest.raises(TypeError, match="a loss must be F32"):
        ctx.tensor("f16", (1,), "h").set_loss()
    with pytest.raises(ValueError, match="computed by a ADD node; only tensors no op computes"):
        ctx.add(a, a).set_param()
    with pytest.raises(ValueError, match="computed by a"):
        ctx.reshape_1d(a, 6).set_param()
    with pytest.raises(TypeError, match="trainable parameters must be F32"):
        ctx.tensor("f16", (2,), "h16").set_param()
    assert not a.is_param and not a.is_loss


def test_a_backward_pass_needs_a_graph_with_grads_a_param_and_a_loss():
    ctx = gg.Context()
    w = ctx.tensor("f32", (3,), "w", input=True).set_param()
    loss = ctx.sum(ctx.sqr(w)).set_loss()
    plain = gg.Graph(ctx).build_forward_expand(loss)
    with pytest.raises(ValueError, match=r"made by Graph\(ctx\).*Graph\.with_grads\(ctx\)"):
        plain.build_backward_expand()
    with pytest.raises(ValueError, match="no nodes"):
        gg.Graph.with_grads(ctx).build_backward_expand()
    graph = gg.Graph.with_grads(ctx).build_forward_expand(loss).build_backward_expand()
    with pytest.raises(ValueError, match="holds its backward pass already"):
        graph.build_backward_expand()

    ctx = gg.Context()
    w = ctx.tensor("f32", (3,), "w", input=True)
    loss = ctx.sum(ctx.sqr(w)).set_loss()
    late = gg.Graph.with_grads(ctx).build_forward_expand(loss)
    w.set_param()
    with pytest.raises(ValueError, match=r"no trainable parameter \(w was flagged after build_forward_expand"):
        late.build_backward_expand()
    ctx = gg.Context()
    w = ctx.tensor("f32", (3,), "w", input=True).set_param()
    with pytest.raises(ValueError, match=r"no loss; flag it with t\.set_loss\(\)"):
        gg.Graph.with_grads(ctx).build_forward_expand(ctx.sum(w)).build_backward_expand()


def test_optimizers_refuse_bad_parameters_and_hyperparameters():
    runner = gg.Runner("cpu")
    p = _weights(runner, {"w": (2,), "u": (2,)}, {"w": np.ones(2), "u": np.ones(2)})
    w = p["w"]
    with pytest.raises(ValueError, match="no parameters"):
        optim.AdamW([])
    with pytest.raises(TypeError, match="params must be Tensors"):
        optim.SGD([w, "b"])
    with pytest.raises(TypeError, match="params must be a Tensor or an iterable"):
        optim.SGD(3)
    with pytest.raises(ValueError, match="given twice"):
        optim.SGD([w, w])
    wctx = gg.Context()
    plain = wctx.tensor("f32", (2,), "plain")
    runner.backend.alloc_tensors(wctx)
    with pytest.raises(ValueError, match=r"plain is not a trainable parameter: flag it with plain\.set_param\(\)"):
        optim.AdamW([w, plain])
    ctx = gg.Context()
    x = ctx.tensor("f32", (2,), "x", input=True).set_param()
    with pytest.raises(ValueError, match="x is a graph input"):
        optim.AdamW([x])
    bare = ctx.tensor("f32", (2,), "bare").set_param()
    with pytest.raises(ValueError, match="bare has no memory of its own"):
        optim.SGD(bare)
    for kw, err, msg in (
        ({"lr": -0.1}, ValueError, r"lr must be a finite number in \(0, inf\), got -0.1"),
        ({"lr": 0}, ValueError, "lr must be"),
        ({"lr": float("nan")}, ValueError, "lr must be"),
        ({"lr": True}, TypeError, "lr must be a number"),
        ({"beta1": 1.0}, ValueError, r"beta1 must be a finite number in \[0, 1\)"),
        ({"beta2": -0.5}, ValueError, "beta2"),
        ({"eps": -1e-8}, ValueError, "eps"),
        ({"weight_decay": 2.0}, ValueError, r"weight_decay must be a finite number in \[0, 1\]"),
    ):
        with pytest.raises(err, match=msg):
            optim.AdamW([w], **kw)
    opt = optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="lr must be"):
        opt.lr = -1
    assert opt.lr == 0.1
    with pytest.raises(ValueError, match="not a parameter of this optimizer"):
        optim.AdamW([w]).moments(p["u"])


def test_build_step_needs_the_backward_pass_and_every_parameters_gradient():
    runner = gg.Runner("cpu")
    p = _weights(runner, {"w": (2,), "u": (2,)}, {"w": np.ones(2), "u": np.ones(2)})
    opt = optim.AdamW([p["w"], p["u"]])
    ctx = gg.Context()
    loss = ctx.sum(ctx.sqr(p["w"])).set_loss()
    forward = gg.Graph.with_grads(ctx).build_forward_expand(loss)
    with pytest.raises(ValueError, match="no backward pass"):
        opt.build_step(forward)
    with pytest.raises(TypeError, match="expected a Graph"):
        opt.build_step(loss)
    forward.build_backward_expand()
    with pytest.raises(ValueError, match="parameter u has no gradient in this graph"):
        opt.build_step(forward)
    only_w = optim.SGD([p["w"]])
    only_w.build_step(forward)
    with pytest.raises(ValueError, match="holds this optimizer's steps already"):
        only_w.build_step(forward)


# --- falling back to the CPU ----------------------------------------------------------------------------
def _cpu_lacks():
    """A graph with a node the CPU cannot compute (a Q8_0 x F16 product: the CPU takes b as F32 or Q8_0)."""
    ctx = gg.Context()
    out = ctx.mul_mat(ctx.tensor("q8_0", (4, 32), "a", input=True), ctx.tensor("f16", (2, 32), "b", input=True))
    return gg.Graph(ctx).build_forward_expand(out)


def test_a_runner_that_must_not_fall_back_names_the_option():
    graph = _cpu_lacks()
    with pytest.raises(gg.Unsupported, match=r"^MUL_MAT: .* cannot compute MUL_MAT\(.*fallback=True\) computes"):
        gg.Runner("meta:cpu,cpu", fallback=False).allocate(graph)
    with pytest.raises(gg.Unsupported, match="a meta device does not fall back to the CPU"):
        gg.Runner("meta:cpu,cpu").allocate(graph)
    with pytest.raises(gg.Unsupported, match="^MUL_MAT$"):  # the CPU itself: nothing to fall back to
        gg.Runner("cpu").allocate(graph)
    with pytest.raises(TypeError, match="fallback must be True or False"):
        gg.Runner("cpu", fallback=1)
    assert gg.Runner("cpu").fallback is True


def test_the_checkers_runners_never_fall_back():
    """The differential suite checks the device, never the CPU in its place: every Runner it makes refuses."""
    import inspect

    from pyggml.testing import pytest_plugin
    from pyggml.testing.engine import grad, repro, session, twin_check

    runners, _ = session.make_runners(["cpu"])
    assert runners["cpu"].fallback is False
    for module in (session, grad, repro, twin_check, pytest_plugin):
        code = [
            line
            for line in inspect.getsource(module).splitlines()
            if "Runner(" in line
            and not line.lstrip().startswith(("#", "`", '"'))
            and ("= Runner(" in line or "return Runner(" in line or line.strip().startswith("Runner("))
            or "run_grad_case(case, Runner(" in line
        ]
        assert code and all("fallback=False" in c for c in code), (module.__name__, code)


def _device():
    return next((b for b in available_backends() if b.startswith("vulkan")), None)


def test_a_device_falls_back_to_the_cpu_for_the_ops_it_lacks_and_says_so(caplog):
    """On Vulkan (skipped without it): a training graph whose backward nodes the device lacks (OUT_PROD on
    some builds) computes them on the CPU with a warning naming them, and gives the CPU's gradients."""
    device = _device()
    if device is None:
        pytest.skip("no Vulkan device in this build")
    rng = np.random.default_rng(RNG_SEED)
    X, Y = _batch(rng)
    results = {}
    for name in ("cpu", device):
        runner = gg.Runner(name)
        p, x, y, loss, graph = _mlp(runner, np.random.default_rng(RNG_SEED))
        lacking = runner.unsupported(graph)
        if name != "cpu" and not lacking:
            pytest.skip(f"{device} computes every node of the training graph")
        with caplog.at_level(logging.WARNING, logger="pyggml.runner"):
            runner.run(graph, {x: X, y: Y}, loss)
            runner.run(graph, {x: X, y: Y}, loss)
        results[name] = {k: graph.grad(t).numpy() for k, t in p.items()}
        if name != "cpu":
            said = [r.getMessage() for r in caplog.records if r.name == "pyggml.runner"]
            assert len(said) == 1 and "the CPU computes them" in said[0]  # once per graph
            assert all(n.op.name in said[0] for n in lacking)
            with pytest.raises(gg.Unsupported, match="fallback=True"):
                gg.Runner(name, fallback=False).allocate(graph)
    # Vulkan's batched F32 products round their operands to F16 in shared memory (docs/precision.md): relative
    # differences of about 1e-4 against the CPU; an op computed on the wrong memory would be off by 100 %
    for k in results["cpu"]:
        assert _rel(results[device][k], results["cpu"][k].astype(np.float64)) <= 2e-3, k
