"""Test-wide set-up: Mesa's lavapipe counts as a Vulkan device, and `backend_name` runs a
test once per available backend (cpu, vulkan0, ...), reported per backend."""

import os

# before ggml lists its devices (on the first pyggml call)
os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        from pyggml.check import available_backends
        metafunc.parametrize("backend_name", available_backends())
