"""pyggml.opt: ggml-opt's datasets and training loop from Python, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg
from pyggml import opt
from pyggml.testing.check import available_backends

NI, NO = 6, 3


def blobs(n=192, seed=0):
    """Three well separated Gaussian blobs in NI dimensions: (X, classes)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 4, (NO, NI))
    y = rng.integers(0, NO, n)
    return (centers[y] + rng.normal(0, 0.5, (n, NI))).astype(np.float32), y


def linear(runner, batch, w0=None, b0=None, seed=1):
    """A linear classifier (batch, NI) -> (batch, NO): the model and its weights."""
    rng = np.random.default_rng(seed)
    pctx = gg.Context()
    w = pctx.tensor("f32", (NO, NI), "w")
    b = pctx.tensor("f32", (NO,), "b")
    x = pctx.tensor("f32", (batch, NI), "x")
    runner.backend.alloc_tensors(pctx)
    w.set(rng.normal(0, 0.3, (NO, NI)) if w0 is None else w0)
    b.set(np.zeros(NO) if b0 is None else b0)
    ctx = gg.Context()
    logits = ctx.add(ctx.mul_mat(w, x), b)
    return opt.Model(runner, x, logits, params=[w, b]), w, b


def cross_entropy(logits, labels):
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-(labels * logp).sum(axis=1).mean())


@pytest.fixture(scope="module")
def runner():
    with gg.Runner("cpu", n_threads=1) as r:
        yield r


def test_a_dataset_holds_what_it_was_given():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(12, 2, 3))
    labels = opt.one_hot([0, 1, 2, 1, 0, 2, 2, 1, 0, 0, 1, 2], 3)
    ds = opt.Dataset(data, labels, shard_size=4)
    assert (len(ds), ds.ne_datapoint, ds.ne_label, ds.datapoint_shape) == (12, 6, 3, (2, 3))
    assert np.array_equal(ds.data(), data.astype(np.float32))  # float64 rounded to F32, as Tensor.set does
    assert np.array_equal(ds.labels(), labels)
    ints = opt.Dataset(np.arange(8).reshape(4, 2), type="i32")
    assert ints.labels() is None and ints.data().dtype == np.int32
    assert np.array_equal(ints.data(), np.arange(8).reshape(4, 2))
    assert opt.Dataset(np.ones((3, 1)), [1.5, 2, 3]).labels().tolist() == [[1.5], [2.0], [3.0]]


def test_a_dataset_refuses_what_it_cannot_hold_exactly():
    with pytest.raises(TypeError, match="numbers"):
        opt.Dataset(np.array([["a"], ["b"]]))
    with pytest.raises(ValueError, match="2 labels for 3 datapoints"):
        opt.Dataset(np.ones((3, 2)), np.ones((2, 1)))
    with pytest.raises(ValueError, match="does not divide"):
        opt.Dataset(np.ones((10, 2)), shard_size=4)
    with pytest.raises(ValueError, match="whole number"):
        opt.Dataset(np.full((2, 2), 0.5), type="i32")
    with pytest.raises(ValueError, match="quantized"):
        opt.Dataset(np.ones((2, 32)), type="q8_0")
    with pytest.raises(ValueError, match="at least one datapoint"):
        opt.Dataset(np.ones((0, 3)))
    with pytest.raises(ValueError, match="in 0..2"):
        opt.one_hot([0, 3], 3)


def test_fit_separates_three_blobs_and_evaluate_says_so(runner):
    X, y = blobs()
    model, w, b = linear(runner, 16)
    history = model.fit(opt.Dataset(X, opt.one_hot(y, NO)), epochs=8, batch=32, lr=0.05, val_split=0.25, progress=False)
    assert len(history) == 8 and history.steps == [4] * 8  # 192 * 0.75 / 32 logical batches
    assert history.train_loss[-1] < history.train_loss[0] / 4
    assert history.val_accuracy[-1] >= 0.97 and history.train_accuracy[-1] >= 0.97
    Xt, yt = blobs(288, seed=0)  # the same blobs (centers drawn first), other points
    Xt, yt = Xt[192:], yt[192:]
    ev = model.evaluate(opt.Dataset(Xt, opt.one_hot(yt, NO)))
    assert ev.ndata == 96 and ev.accuracy >= 0.97
    assert (model.predict(Xt).argmax(1) == yt).mean() == pytest.approx(ev.accuracy)


def test_evaluate_loss_is_numpy_cross_entropy_of_the_trained_weights(runner):
    X, y = blobs()
    labels = opt.one_hot(y, NO)
    model, w, b = linear(runner, 32)
    model.fit(opt.Dataset(X, labels), epochs=2, lr=0.01, progress=False)
    W, B = w.numpy().astype(np.float64), b.numpy().astype(np.float64)  # the weights ggml-opt trained, in place
    logits = X @ W.T + B
    ev = model.evaluate(opt.Dataset(X, labels))
    assert ev.loss == pytest.approx(cross_entropy(logits, labels), rel=1e-5)  # equal batches: the mean of means
    assert ev.accuracy == pytest.approx((logits.argmax(1) == y).mean())
    np.testing.assert_allclose(model.predict(X[:50]), logits[:50], rtol=1e-5, atol=1e-5)  # 50: the last batch padded


def sgd_step(W, B, X, labels, lr):
    """One SGD step of mean cross-entropy over the whole batch, in NumPy (float64)."""
    z = X @ W.T + B
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    g = (p - labels) / len(X)
    return W - lr * g.T @ X, B - lr * g.sum(0)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_accumulated_physical_batches_make_the_step_of_one_big_batch(runner, optimizer):
    X, y = blobs(32)
    labels = opt.one_hot(y, NO)
    rng = np.random.default_rng(5)
    w0, b0 = rng.normal(0, 0.3, (NO, NI)), rng.normal(0, 0.1, NO)
    after = []
    for physical in (32, 8):  # one batch of 32; four of 8 whose gradients are accumulated into one step
        model, w, b = linear(runner, physical, w0, b0)
        h = model.fit(opt.Dataset(X, labels), batch=32, optimizer=optimizer, lr=0.1, progress=False)
        assert h.steps == [1]
        after.append((w.numpy(), b.numpy()))
    np.testing.assert_allclose(after[1][0], after[0][0], rtol=0, atol=2e-6)
    np.testing.assert_allclose(after[1][1], after[0][1], rtol=0, atol=2e-6)
    if optimizer == "sgd":
        W, B = sgd_step(
            w0.astype(np.float32).astype(np.float64), b0.astype(np.float32), X.astype(np.float64), labels, 0.1
        )
        np.testing.assert_allclose(after[0][0], W, rtol=0, atol=1e-5)
        np.testing.assert_allclose(after[0][1], B, rtol=0, atol=1e-5)
    else:  # AdamW's first step moves every weight by lr * sign(gradient) (to eps)
        assert np.allclose(np.abs(after[0][0] - w0.astype(np.float32)), 0.1, atol=1e-4)


def test_the_train_loss_of_one_step_is_numpy_cross_entropy_before_it(runner):
    X, y = blobs(32)
    labels = opt.one_hot(y, NO)
    model, w, b = linear(runner, 32)
    W, B = w.numpy().astype(np.float64), b.numpy().astype(np.float64)
    h = model.fit(opt.Dataset(X, labels), optimizer="sgd", lr=0.1, progress=False)
    assert h.train_loss[0] == pytest.approx(cross_entropy(X @ W.T + B, labels), rel=1e-5)
    assert h.train_accuracy[0] == pytest.approx(((X @ W.T + B).argmax(1) == y).mean())


def test_mse_and_validation_numbers(runner):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(64, NI)).astype(np.float32)
    T = (X @ rng.normal(size=(NI, NO))).astype(np.float32)
    model, w, b = linear(runner, 16)
    model = opt.Model(runner, model.inputs, model.outputs, loss="mse")
    h = model.fit(opt.Dataset(X, T), epochs=30, lr=0.05, val_split=0.25, shuffle=False, progress=False)
    assert np.isnan(h.train_accuracy[0])  # no classes
    assert h.val_loss[-1] < h.val_loss[0] / 10
    W, B = w.numpy(), b.numpy()
    ev = model.evaluate(opt.Dataset(X[48:], T[48:]))
    assert ev.loss == pytest.approx(float(((X[48:] @ W.T + B - T[48:]) ** 2).mean()), rel=1e-4)


def test_bad_arguments_raise_before_ggml_sees_them(runner):
    X, y = blobs(64)
    ds = opt.Dataset(X, opt.one_hot(y, NO))
    model, w, b = linear(runner, 16)
    bad = [
        (dict(epochs=0), ValueError, "epochs"),
        (dict(batch=24), ValueError, "not a multiple of the physical batch"),
        (dict(batch=48), ValueError, "does not divide"),
        (dict(val_split=1.0), ValueError, "below 1"),
        (dict(val_split=-0.1), ValueError, "val_split"),
        (dict(val_split=0.9, batch=32), ValueError, "leaves no training batch"),
        (dict(val_split=1e-9), ValueError, "too small"),
        (dict(lr=0.0), ValueError, "lr"),
        (dict(lr="fast"), TypeError, "lr"),
        (dict(lr=lambda epoch: -1.0), ValueError, "lr"),
        (dict(beta1=1.5), ValueError, "beta1"),
        (dict(weight_decay=2.0), ValueError, "weight_decay"),
        (dict(optimizer="lbfgs"), ValueError, "optimizer"),
    ]
    for kwargs, exc, match in bad:
        with pytest.raises(exc, match=match):
            model.fit(ds, progress=False, **kwargs)
    with pytest.raises(TypeError, match="progress"):
        model.fit(ds, progress="yes")
    with pytest.raises(ValueError, match="holds 5 values"):
        model.fit(opt.Dataset(X[:, :5], opt.one_hot(y, NO)), progress=False)
    with pytest.raises(ValueError, match="one_hot"):
        model.fit(opt.Dataset(X, opt.one_hot(y, NO + 1)), progress=False)
    with pytest.raises(ValueError, match="has none"):
        model.fit(opt.Dataset(X), progress=False)
    with pytest.raises(TypeError, match="F16"):
        model.fit(opt.Dataset(X, opt.one_hot(y, NO), type="f16"), progress=False)
    with pytest.raises(ValueError, match="shard_size 32 does not divide the physical batch 16"):
        model.fit(opt.Dataset(X, opt.one_hot(y, NO), shard_size=32), batch=32, progress=False)
    with pytest.raises(ValueError, match="does not divide"):
        model.evaluate(opt.Dataset(X[:40], opt.one_hot(y[:40], NO)))
    with pytest.raises(TypeError, match="Dataset"):
        model.fit(X, progress=False)
    assert model.fit(ds, progress=False).steps == [4]  # and the model still trains


def test_a_model_refuses_what_ggml_opt_would_abort_on(runner):
    pctx = gg.Context()
    w = pctx.tensor("f32", (NO, NI), "w")
    w16 = pctx.tensor("f16", (NO, NI), "w16")
    unused = pctx.tensor("f32", (NO, NI), "unused")
    x = pctx.tensor("f32", (8, NI), "x")
    runner.backend.alloc_tensors(pctx)
    ctx = gg.Context()
    y = ctx.mul_mat(w, x)
    loose = gg.Context().tensor("f32", (8, NI), "loose")  # never given memory
    with pytest.raises(ValueError, match="inputs has no memory"):
        opt.Model(runner, loose, gg.Context().mul_mat(w, loose), params=[w])
    with pytest.raises(ValueError, match="no trainable parameter"):
        opt.Model(runner, x, ctx.mul_mat(w16, x))
    with pytest.raises(TypeError, match="F16"):
        opt.Model(runner, x, y, params=[w16])
    with pytest.raises(ValueError, match="not read by the forward pass"):
        opt.Model(runner, x, y, params=[w, unused])
    with pytest.raises(ValueError, match="inputs cannot be a trainable parameter"):
        opt.Model(runner, x, y, params=[w, x])
    with pytest.raises(ValueError, match="batch is NumPy's first axis"):
        opt.Model(runner, x, ctx.mul_mat(w, ctx.tensor("f32", (4, NI))), params=[w])
    with pytest.raises(ValueError, match="not computed from inputs"):
        opt.Model(runner, x, ctx.mul_mat(w, ctx.tensor("f32", (8, NI))), params=[w])
    with pytest.raises(ValueError, match="loss must be one of"):
        opt.Model(runner, x, y, loss="hinge", params=[w])
    with pytest.raises(TypeError, match="must be F32"):
        opt.Model(runner, x, ctx.cast(y, "f16"), params=[w])
    with pytest.raises(ValueError, match="2-d"):
        opt.Model(runner, x, ctx.reshape_3d(y, NO, 4, 2), params=[w])
    const = gg.Context().tensor("f32", (NO,), "const")  # a leaf read by the pass, with no memory
    with pytest.raises(ValueError, match="leaf const has no memory"):
        opt.Model(runner, x, ctx.add(y, const), params=[w])


def test_memory_an_earlier_run_lent_is_taken_back(runner):
    X, y = blobs(32)
    model, w, b = linear(runner, 32)
    before = model.predict(X)  # the runner lends the forward pass's nodes its memory
    model.fit(opt.Dataset(X, opt.one_hot(y, NO)), optimizer="sgd", lr=0.1, progress=False)
    after = model.predict(X)
    W, B = w.numpy(), b.numpy()
    np.testing.assert_allclose(after, X @ W.T + B, rtol=1e-5, atol=1e-5)
    assert not np.allclose(before, after)


def test_an_exception_in_the_progress_callback_propagates_and_the_model_lives_on(runner):
    X, y = blobs()
    ds = opt.Dataset(X, opt.one_hot(y, NO))
    model, w, b = linear(runner, 16)
    seen = []

    def stop(p: opt.Progress):
        seen.append(p)
        if p.batch == 3:
            raise KeyboardInterrupt("enough")

    with pytest.raises(KeyboardInterrupt, match="enough"):
        model.fit(ds, epochs=5, progress=stop)
    assert [p.batch for p in seen] == [1, 2, 3] and seen[0].phase == "train" and seen[0].batches == 12
    assert np.isfinite(seen[-1].loss)
    h = model.fit(ds, epochs=1, progress=lambda p: None)  # the model trains on afterwards
    assert len(h) == 1 and np.isfinite(h.train_loss[0])


def test_the_progress_bar_goes_to_stderr(runner, capsys):
    X, y = blobs(64)
    model, w, b = linear(runner, 16)
    model.fit(opt.Dataset(X, opt.one_hot(y, NO)), epochs=2, val_split=0.25)
    err = capsys.readouterr().err
    assert "epoch 2/2 train:" in err and "val:" in err and "acc=" in err


def test_a_fit_repeats_exactly_as_ggml_shuffles_with_its_own_seed(runner):
    X, y = blobs()
    losses = []
    for _ in range(2):
        model, w, b = linear(runner, 16)
        h = model.fit(opt.Dataset(X, opt.one_hot(y, NO)), epochs=3, val_split=0.25, progress=False)
        losses.append((h.train_loss, h.val_loss, w.numpy()))
    assert losses[0][0] == losses[1][0] and losses[0][1] == losses[1][1]
    assert np.array_equal(losses[0][2], losses[1][2])


@pytest.mark.skipif("vulkan0" not in available_backends(), reason="no vulkan0 in this build or machine")
def test_fit_on_vulkan0_matches_the_cpu():
    X, y = blobs()
    ds_args = (X, opt.one_hot(y, NO))
    out = []
    for name in ("cpu", "vulkan0"):
        with gg.Runner(name) as r:
            model, w, b = linear(r, 16)
            h = model.fit(opt.Dataset(*ds_args), epochs=3, progress=False)
            out.append((h.train_loss, w.numpy()))
    # Vulkan's batched F32 products round their operands to F16 in shared memory (docs/precision.md): the
    # losses differ by about 1e-4 relative; a wrong step would differ at the first digits
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=2e-3)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-3, atol=1e-4)


def test_a_runner_closes_with_a_model_alive_and_the_model_then_refuses():
    X, y = blobs(32)
    r = gg.Runner("cpu", n_threads=1)
    model, w, b = linear(r, 16)
    model.fit(opt.Dataset(X, opt.one_hot(y, NO)), progress=False)
    r.close()  # fit's scheduler is gone with its fit: nothing of the model holds the backends
    with pytest.raises(ValueError, match="closed"):
        model.fit(opt.Dataset(X, opt.one_hot(y, NO)), progress=False)
