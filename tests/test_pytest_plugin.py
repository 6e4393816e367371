"""pyggml's pytest plugin, as a user enables it: backend parametrization, its option and marker,
and the runner, context and comparison fixtures."""

from __future__ import annotations

import pytest

from pyggml.testing.check import available_backends
from pyggml.testing.pytest_plugin import assert_close

USER_TESTS = """
import numpy as np
import pytest
import pyggml as gg


def test_add(ggml_backend, ggml_runner, ggml_ctx, ggml_assert_close):
    assert ggml_runner.name == ggml_backend
    a = ggml_ctx.tensor("f32", (3, 4), "a", input=True)
    g = gg.Graph(ggml_ctx).build_forward_expand(y := ggml_ctx.scale(ggml_ctx.add(a, a), 0.5))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    [out] = ggml_runner.run(g, {a: x}, [y])
    ggml_assert_close(out, x, nmse=0)


def test_meta(ggml_meta_backend, ggml_runner):
    assert ggml_runner.name == ggml_meta_backend and ggml_runner.n_devices == 2


@pytest.mark.ggml_backends("cpu")
def test_cpu_only(ggml_backend):
    assert ggml_backend == "cpu"


@pytest.mark.ggml_backends("nosuch0")
def test_nowhere(ggml_backend):
    raise AssertionError("never runs")
"""


@pytest.fixture
def user_project(pytester):
    pytester.makeconftest('pytest_plugins = ["pyggml.testing.pytest_plugin"]\n')
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester


def test_every_available_backend_gets_its_own_test(user_project):
    result = user_project.runpytest_subprocess("-v")
    backends = available_backends()
    metas = ["meta:cpu,cpu"] + (["meta:vulkan0,vulkan1"] if {"vulkan0", "vulkan1"} <= set(backends) else [])
    result.assert_outcomes(passed=len(backends) + len(metas) + 1, skipped=1)
    for name in backends:
        result.stdout.fnmatch_lines([f"*test_add?{name}? PASSED*"])
    for name in metas:
        result.stdout.fnmatch_lines([f"*test_meta?{name}? PASSED*"])
    result.stdout.fnmatch_lines(["*test_cpu_only?cpu? PASSED*"])
    # a marker that names no available backend leaves one skipped test that says so
    result.stdout.fnmatch_lines(["*test_nowhere?None? SKIPPED*no ggml_backend among*"])


def test_the_option_restricts_the_backends(user_project):
    result = user_project.runpytest_subprocess("-v", "--ggml-backend", "cpu", "--ggml-backend", "meta:cpu,cpu")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.no_fnmatch_line("*vulkan*PASSED*")
    # a filter that selects nothing shows as a skipped test, not as no test at all
    result = user_project.runpytest_subprocess("-v", "--ggml-backend", "nosuch0")
    result.assert_outcomes(skipped=4)


def test_assert_close_is_checks_comparison():
    import numpy as np

    x = np.linspace(-1, 1, 100)
    assert_close(x, x, nmse=0)
    assert_close(x * (1 + 1e-7), x, nmse=1e-10)
    assert_close(x * (1 + 1e-5), x)  # check's F32 bound by default (NMSE 1e-10 <= 1e-7)
    with pytest.raises(AssertionError, match="NMSE"):
        assert_close(x * 1.01, x)
    with pytest.raises(AssertionError, match="NMSE"):
        assert_close(x * 1.01, x, nmse=1e-10)
    y = x.copy()
    y[7] = np.nan
    with pytest.raises(AssertionError, match="NaN"):
        assert_close(y, x, nmse=1e-3)
