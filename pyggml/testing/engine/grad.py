"""Grad mode: ggml's backward pass against finite differences of the NumPy oracles.

A grad case builds a forward graph from some inputs, some of them flagged as parameters
(ggml_set_param); the loss is L = sum(out * W), W a fixed random tensor of the output's shape
(every output element counts, with its own weight). ggml builds the backward pass
(ggml_build_backward_expand) and a backend computes dL/dparam. The reference is the central
difference of L computed in NumPy from the case's ORACLE (never from ggml), in float64:

    D(h) = (L(x + h e_i) - L(x - h e_i)) / (2h),  g_i = (4 D(h/2) - D(h)) / 3  (Richardson)

Error: per parameter, max|g_ggml - g_fd| / max|g_fd|; a case's error is its worst parameter's.

Bound (GRAD_BOUND = 1e-3, why): the oracles return F32 outputs (relative rounding ~6e-8 per
element) from F32 inputs; dividing their differences by h = 1e-2 turns that into ~1e-5 of the
gradient's scale; Richardson's truncation error is O(h^4) ~ 1e-8 for the smooth functions here
(inputs are kept away from kinks: relu, abs, max); ggml's F32 backward pass differs from the exact
gradient by accumulation order, ~1e-6. 1e-3 leaves two orders of margin, while a wrong gradient (a
missing term, a wrong sign, a transposed operand) is off by O(0.1 .. 1): tests/test_grad.py shows
such a gradient failing.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, TextIO

import numpy as np

from pyggml import types
from pyggml._native import lib
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.runner import Runner, Unsupported
from pyggml.testing.engine import opdb, verdict
from pyggml.testing.engine import oracles as O
from pyggml.testing.engine.opdb import Known, uniform
from pyggml.testing.engine.verdict import Record, known

GRAD_BOUND = 1e-3
STEP = 1e-2  # the larger finite-difference step (the smaller is STEP/2), scaled by max(1, |x|)

GRAD_REGISTRY: dict[str, GradCase] = {}


class GradCase:
    """inputs: name -> (type, NumPy shape[, generator]); params: the inputs that get gradients;
    build(ctx, x) -> the output tensor (checked ops); oracle(x) -> the output from NumPy arrays."""

    def __init__(
        self,
        name: str,
        inputs: dict,
        params: tuple[str, ...],
        build: Callable,
        oracle: Callable,
        bound: float = GRAD_BOUND,
        known: Sequence[Known] = (),
    ) -> None:
        self.name, self.params = name, tuple(params)
        self.inputs = {k: opdb.as_input(v) for k, v in inputs.items()}
        self.build_fn, self.oracle_fn, self.bound, self.known = build, oracle, bound, list(known)
        self.types = frozenset(opdb.as_input(v).type.lower() for v in inputs.values())  # what known rules match
        self._values: dict[str | None, np.ndarray] | None = None

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(("grad:" + self.name).encode()))

    def values(self) -> dict[str | None, np.ndarray]:
        """Input values as the tensors hold them, and the loss weights W (key None)."""
        if self._values is None:
            rng = self.rng()
            vals = {}
            for k, spec in self.inputs.items():
                t, shape = types.as_type(spec.type), spec.shape
                raw = np.asarray((spec.gen or uniform())(rng, shape))
                vals[k] = types.decode(t, types.encode(t, raw), shape).copy()
            out = np.asarray(self.oracle_fn(SimpleNamespace(**vals)))
            # tuple(): with NumPy >= 2.5 stubs, an ndarray of unknown type has shape Any, which
            # picks uniform()'s scalar overload
            vals[None] = rng.uniform(-1, 1, tuple(out.shape)).astype(np.float32)
            self._values = vals
        return self._values

    def loss(self, vals: dict) -> float:
        out = np.asarray(
            self.oracle_fn(SimpleNamespace(**{k: v for k, v in vals.items() if k is not None})), dtype=np.float64
        )
        return float(np.sum(out * vals[None].reshape(out.shape)))

    def expected(self) -> dict[str, np.ndarray]:
        """dL/dparam by Richardson-extrapolated central differences of the oracle's loss."""
        base = self.values()
        grads = {}
        for p in self.params:
            x = base[p]
            g = np.zeros(x.size)
            for i in range(x.size):
                d = []
                for h in (STEP, STEP / 2):
                    h = h * max(1.0, abs(float(x.flat[i])))
                    f = []
                    for sign in (1, -1):
                        xp = x.copy()
                        xp.flat[i] = x.flat[i] + sign * h  # in x's dtype: the step actually taken is used
                        f.append((self.loss({**base, p: xp}), float(xp.flat[i])))
                    d.append((f[0][0] - f[1][0]) / (f[0][1] - f[1][1]))
                g[i] = (4 * d[1] - d[0]) / 3
            grads[p] = g.reshape(x.shape)
        return grads

    def execute(self, runner: Runner) -> dict[str, np.ndarray]:
        """ggml's gradients of the loss with respect to the parameters, computed by `runner`."""
        ctx = Context()
        vals = self.values()
        x = {k: ctx.tensor(spec.type, spec.shape, k, input=True) for k, spec in self.inputs.items()}
        for p in self.params:
            lib.ggml_set_param(x[p].ptr)
        out = self.build_fn(ctx, SimpleNamespace(**x))
        if not out.is_contiguous():  # mul's CPU kernel needs packed rows
            out = ctx.cont(out)
        w = ctx.tensor("f32", vals[None].shape, "loss_weights", input=True)
        loss = ctx.sum(ctx.mul(out, ctx.reshape(w, out)))
        if lib.pyggml_guarded_ggml_set_loss(loss.ptr):
            raise ValueError("grad: the loss must be an F32 scalar")
        graph = Graph.with_grads(ctx).build_forward_expand(loss).build_backward_expand()
        acc = graph.grad_acc(loss)
        if acc is None:
            raise ValueError("grad: ggml built no gradient for the loss")
        seed = acc.set_input()  # dL/dL: the leaf the backward pass starts from
        maybe = {p: graph.grad(x[p]) for p in self.params}
        grads = {p: g for p, g in maybe.items() if g is not None}
        missing = [p for p in maybe if p not in grads]
        if missing:
            raise ValueError(f"grad: ggml built no gradient for {', '.join(missing)}")
        inputs = {x[k]: vals[k] for k in x}
        inputs[w] = vals[None]
        inputs[seed] = np.ones(1, dtype=np.float32)
        results = runner.run(graph, inputs, list(grads.values()))
        return {p: r.reshape(vals[p].shape) for p, r in zip(grads, results)}


def grad_error(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """The worst parameter's max|actual - expected| / max|expected| (inf on a shape or NaN mismatch)."""
    worst = 0.0
    for p, e in expected.items():
        a = np.asarray(actual[p], dtype=np.float64)
        if a.shape != e.shape or not np.isfinite(a).all():
            return float("inf")
        scale = np.abs(e).max()
        err = np.abs(a - e).max()
        worst = max(worst, err / scale if scale > 0 else err)
    return float(worst)


def grad_case(
    name: str, inputs: dict, params: tuple[str, ...], build: Callable, oracle: Callable, **kw: Any
) -> GradCase:
    if name in GRAD_REGISTRY:
        raise ValueError(f"duplicate grad case {name}")
    GRAD_REGISTRY[name] = GradCase(name, inputs, params, build, oracle, **kw)
    return GRAD_REGISTRY[name]


def _load_specs() -> None:
    """The grad samples of every op spec, as grad cases named <op>/<variant>."""
    for s in opdb.load().values():
        for g in s.grad:
            name = g.name or f"{s.op}/{g.variant}"
            if name not in GRAD_REGISTRY:
                grad_case(
                    name,
                    dict(g.inputs),
                    g.params,
                    opdb.ggml_side(s, g),
                    opdb.oracle_side(s, g),
                    bound=g.bound if g.bound is not None else GRAD_BOUND,
                    known=g.known,
                )


def select(pattern: str | None = None) -> list[GradCase]:
    _load_specs()
    cases = list(GRAD_REGISTRY.values())
    if not pattern:
        return cases
    try:
        rx = re.compile(pattern)
    except re.error:
        return [c for c in cases if pattern in c.name]
    return [c for c in cases if pattern in c.name or rx.search(c.name)]


def run_grad_case(case: GradCase, runner: Runner, backend: str) -> Record:
    start = time.perf_counter()
    try:
        actual = case.execute(runner)
    except Unsupported as e:
        return verdict.unsupported(case.name, backend, f"not supported: {e}")
    except Exception as e:  # noqa: BLE001 - a failing case must not stop the run
        return verdict.error(case.name, backend, f"{type(e).__name__}: {e}", time.perf_counter() - start)
    err = grad_error(actual, case.expected())
    rules = verdict.Policy(case.bound, float("inf"), known(case, backend))
    cmp = verdict.within(err, case.bound, "relative gradient error")
    return verdict.rule(case.name, backend, [cmp], rules, time.perf_counter() - start)


def run_grad(backends: list[str], pattern: str | None = None, progress: TextIO | None = None) -> list[Record]:
    """Every grad case matching `pattern` on every backend; Record.error is the worst relative gradient error."""
    records: list[Record] = []
    usable = []
    for name in backends:
        try:
            Runner(name, fallback=False)
            usable.append(name)
        except Exception as e:  # noqa: BLE001 - reported as a record
            records.append(verdict.unavailable(name, e))
    for case in select(pattern):
        for name in usable:
            # a fresh Runner per case: ggml's graph allocator reuses the previous graph's memory plan
            # for any graph of the same node and leaf counts and sizes, whatever reads what, so a
            # backward graph after a similar one read forward outputs the plan had overwritten
            rec = run_grad_case(case, Runner(name, fallback=False), name)
            records.append(rec)
            if progress is not None and rec.status != "pass":
                progress.write(f"{case.name} on {name}: {rec.status} {rec.message}\n")
    return records


# --- the cases ----------------------------------------------------------------------------------------------
# the output of every case feeds the loss through mul and sum, so their backward passes are in every case
F32 = "f32"


def _softmax_rows(rng, shape):
    e = np.exp(rng.uniform(-2, 2, size=shape))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


# a small network: every op's backward in one graph, gradients of weights and input together
grad_case(
    "mlp/silu_rms_norm_softmax_ce",
    {"w": (F32, (6, 5)), "x": (F32, (3, 5)), "b": (F32, (6,)), "y": (F32, (3, 6), _softmax_rows)},
    ("w", "x", "b"),
    lambda c, x: c.cross_entropy_loss(c.rms_norm(c.silu(c.add(c.mul_mat(x.w, x.x), x.b)), 1e-5), x.y),
    lambda x: O.cross_entropy_loss(O.rms_norm(O.silu(O.add(O.mul_mat(x.w, x.x), x.b)), 1e-5), x.y),
)
