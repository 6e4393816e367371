"""Grad mode: ggml's backward pass on the CPU against finite differences of the NumPy oracles."""

from __future__ import annotations

import numpy as np
import pytest

from pyggml.runner import Runner
from pyggml.testing.check import Record
from pyggml.testing.engine import grad
from pyggml.testing.engine import oracles as O
from pyggml.testing.engine.opdb import uniform

CASES = grad.select()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_grad_case_passes_on_cpu(case):
    rec = grad.run_grad_case(case, Runner("cpu"), "cpu")
    assert rec.status == "pass", f"{case.name}: {rec.status} {rec.error} {rec.message}"


def test_a_wrong_gradient_is_caught():
    """cos built, sin's oracle: the gradients differ (-sin vs cos), the comparison must fail."""
    case = grad.GradCase(
        "cos/wrong_oracle",
        {"a": ("f32", (3, 5), uniform(-3, 3))},
        ("a",),
        lambda c, x: c.cos(x.a),
        lambda x: O.sin(x.a),
    )
    rec = grad.run_grad_case(case, Runner("cpu"), "cpu")
    assert rec.status == "fail" and rec.error > 0.1


def test_a_missing_term_is_caught():
    """mul's gradient with respect to b, against an oracle whose b enters with a different weight."""
    case = grad.GradCase(
        "mul/wrong_oracle",
        {"a": ("f32", (3, 5)), "b": ("f32", (3, 5))},
        ("a", "b"),
        lambda c, x: c.mul(x.a, x.b),
        lambda x: O.mul(x.a, x.b) + 0.1 * x.b**2,
    )
    rec = grad.run_grad_case(case, Runner("cpu"), "cpu")
    assert rec.status == "fail"


def test_grad_error_measures_relative_max_error():
    e = {"a": np.array([1.0, -2.0])}
    assert grad.grad_error({"a": np.array([1.0, -2.0])}, e) == 0.0
    assert grad.grad_error({"a": np.array([1.2, -2.0])}, e) == pytest.approx(0.1)
    assert grad.grad_error({"a": np.array([np.nan, -2.0])}, e) == float("inf")


def test_run_grad_records():
    records = grad.run_grad(["cpu", "nodevice7"], "^(sin|mul_mat)/")
    assert all(isinstance(r, Record) for r in records)
    assert [r.status for r in records if r.backend == "nodevice7"] == ["error"]
    ok = [r for r in records if r.backend == "cpu"]
    assert len(ok) == 3 and all(r.status == "pass" and r.bound == grad.GRAD_BOUND for r in ok)


def test_an_op_without_backward_is_an_error_not_a_death():
    """ggml aborts in build_backward_expand on ops it has no backward for: here an OpError."""
    case = grad.GradCase(
        "concat/no_backward",
        {"a": ("f32", (3, 5)), "b": ("f32", (2, 5))},
        ("a",),
        lambda c, x: c.concat(x.a, x.b, 1),
        lambda x: O.concat(x.a, x.b, 1),
    )
    rec = grad.run_grad_case(case, Runner("cpu"), "cpu")
    assert rec.status == "error" and "build_backward_expand" in rec.message
