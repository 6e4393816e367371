"""The device budget of tests/conftest.py (PYGGML_DEVICE_BUDGET): once spent, every test on a device is
skipped, whichever parameter names the device. On a cold Mesa cache the tests that named theirs otherwise (a
GGUF loaded onto `name="vulkan0"`, llama.cpp's split over `devices="vulkan0,vulkan1"`, a graph made on vulkan0
inside the test) ran past the budget: 446 s of README's 1,221 s in CI (docs/maintenance.md)."""

from __future__ import annotations

from pathlib import Path

SESSION = """
import time

import pytest


@pytest.mark.parametrize("backend", ["vulkan0"])
def test_a_spends_the_budget(backend):
    time.sleep(1.2)


@pytest.mark.parametrize("devices", ["vulkan0,vulkan1", "cpu,cpu"])
def test_b_split(devices):
    pass


@pytest.mark.parametrize("name", ["vulkan0", "cpu"])
def test_c_named(name):
    pass


@pytest.mark.parametrize("meta", ["meta:vulkan0,vulkan1"])
def test_d_meta(meta):
    pass


@pytest.mark.device
def test_e_marked():
    pass


def test_f_on_the_host():
    pass
"""


def test_a_test_on_a_device_is_skipped_once_the_budget_is_spent_whatever_names_the_device(pytester, monkeypatch):
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makepyfile(test_session=SESSION)
    monkeypatch.setenv("PYGGML_DEVICE_BUDGET", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=4, skipped=4)  # a, b[cpu,cpu], c[cpu], f ran; the rest on devices did not
    result.stdout.fnmatch_lines(["*devices of a budget of 1 s; 4 tests skipped by it*"])
    skipped = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert all("device budget (PYGGML_DEVICE_BUDGET=1 s) was spent" in line for line in skipped), skipped
