"""pytest fixtures for writing your own ggml tests with pyggml. Enable them in a conftest.py:

    pytest_plugins = ["pyggml.testing.pytest_plugin"]

(not registered automatically, so it loads only where asked for). Then:

- `ggml_backend`: a backend name; a test that asks for it runs once per available backend (cpu,
  vulkan0, cuda0, rpc0, ...), each reported under its own id (`test_x[cpu]`, `test_x[vulkan0]`);
- `ggml_meta_backend`: the same over meta devices (meta:cpu,cpu, and meta:vulkan0,vulkan1 when
  two Vulkan devices are listed);
- `--ggml-backend NAME` (repeatable) runs only on these names; `@pytest.mark.ggml_backends("cpu",
  "vulkan0")` restricts one test (names it lists that are not available are left out);
- `ggml_runner`: a `Runner` on the test's backend (whichever of the two above the test asks for);
- `ggml_ctx`: a fresh `Context`;
- `ggml_assert_close(actual, expected, nmse=1e-7, max_error=None)`: `check`'s comparison (NaN and
  Inf in the same places, NMSE, and the largest error relative to the output's scale; both 0:
  bit-exact) with check's default F32 bound, an AssertionError with the figures when it fails
  (also importable without pytest: `from pyggml.testing import assert_close`).

Mesa's lavapipe counts as a Vulkan device (`enable_cpu_vulkan_devices`: GGML_VK_VISIBLE_DEVICES
defaults to "0"; set it to "0,0" before the plugin loads for two, as pyggml's own tests do).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pyggml.backend import enable_cpu_vulkan_devices

enable_cpu_vulkan_devices()  # before ggml lists its devices, on the first call below

from pyggml.context import Context  # noqa: E402
from pyggml.runner import Runner  # noqa: E402
from pyggml.testing.assertions import assert_close  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    """pytest's hook: add `--ggml-backend NAME` (repeatable), which runs the backend fixtures' tests on these names only.

    Args:
        parser: pytest's option parser.
    """
    parser.addoption(
        "--ggml-backend",
        action="append",
        default=None,
        metavar="NAME",
        help="pyggml: run ggml_backend / ggml_meta_backend tests on this backend only (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """pytest's hook: register the marker `ggml_backends(*names)`, which runs one test on these backends only.

    Args:
        config: pytest's config.
    """
    config.addinivalue_line("markers", "ggml_backends(*names): run this test on these backends only")


def available_meta_backends(backends: list[str]) -> list[str]:
    """The meta devices `ggml_meta_backend` runs over.

    Args:
        backends: the available backends (`pyggml.testing.check.available_backends()`).

    Returns:
        "meta:cpu,cpu", and "meta:vulkan0,vulkan1" when two Vulkan devices are listed.
    """
    names = ["meta:cpu,cpu"]
    if {"vulkan0", "vulkan1"} <= set(backends):
        names.append("meta:vulkan0,vulkan1")
    return names


def _chosen(metafunc: pytest.Metafunc, names: list[str]) -> list[str]:
    wanted = metafunc.config.getoption("--ggml-backend")
    if wanted:
        names = [n for n in names if n in {w.lower() for w in wanted}]
    marker = metafunc.definition.get_closest_marker("ggml_backends")
    if marker is not None:
        names = [n for n in names if n in {m.lower() for m in marker.args}]
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """pytest's hook: parametrize `ggml_backend` and `ggml_meta_backend` with the available backends.

    Each backend becomes its own test id (`test_x[cpu]`, `test_x[vulkan0]`), filtered by `--ggml-backend`
    and the `ggml_backends` marker; a filter that leaves none makes one skipped test, so it is visible.

    Args:
        metafunc: pytest's view of the test function.
    """
    if not {"ggml_backend", "ggml_meta_backend"} & set(metafunc.fixturenames):
        return
    from pyggml.testing.engine.session import available_backends

    backends = available_backends()
    for fixture, names in (("ggml_backend", backends), ("ggml_meta_backend", available_meta_backends(backends))):
        if fixture in metafunc.fixturenames:
            chosen = _chosen(metafunc, names)
            # an empty choice still makes one (skipped) test, so a filter that matches nothing is visible
            metafunc.parametrize(
                fixture,
                chosen
                or [pytest.param(None, marks=pytest.mark.skip(reason=f"no {fixture} among {names} is selected"))],
                ids=lambda n: str(n),
            )


@pytest.fixture
def ggml_runner(request: pytest.FixtureRequest) -> Runner:
    """Fixture: a Runner on the test's backend (its `ggml_backend`, else its `ggml_meta_backend`, else cpu).

    Made with `fallback=False`: a node the device cannot compute raises Unsupported rather than being
    computed on the CPU, so that a test on a device tests the device.

    Args:
        request: pytest's fixture request.

    Returns:
        The Runner.
    """
    # read from the parametrization, so a meta test does not also pull in ggml_backend's
    params = getattr(request.node, "callspec", None)
    names = params.params if params is not None else {}
    return Runner(names.get("ggml_backend") or names.get("ggml_meta_backend") or "cpu", fallback=False)


@pytest.fixture
def ggml_ctx() -> Context:
    """Fixture: a fresh Context (tensor descriptions; memory comes from the runner).

    Returns:
        The Context.
    """
    return Context()


@pytest.fixture
def ggml_assert_close() -> Callable[..., None]:
    """Fixture: `check`'s comparison as an assertion (`pyggml.testing.assert_close`).

    Returns:
        `assert_close(actual, expected, nmse=1e-7, max_error=None)`.
    """
    return assert_close
