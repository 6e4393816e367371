"""Test-wide set-up: Mesa's lavapipe counts as a Vulkan device, listed twice (vulkan0 and
vulkan1) so a two-device meta backend exists on any machine with it.

`backend_name` runs a test once per available backend (cpu, vulkan0, vulkan1, ...) and
`meta_backend_name` once per meta backend (meta:cpu,cpu, and meta:vulkan0,vulkan1 when
there are two Vulkan devices), each reported on its own.
"""

import os

# before ggml lists its devices (on the first pyggml call)
os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0,0")


def pytest_generate_tests(metafunc):
    from pyggml.testing.check import available_backends
    if "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", available_backends())
    if "meta_backend_name" in metafunc.fixturenames:
        names = ["meta:cpu,cpu"]
        if {"vulkan0", "vulkan1"} <= set(available_backends()):
            names.append("meta:vulkan0,vulkan1")
        metafunc.parametrize("meta_backend_name", names)
