"""Test-wide set-up: Mesa's lavapipe counts as a Vulkan device, listed twice (vulkan0 and
vulkan1) so a two-device meta backend exists on any machine with it.

`backend_name` runs a test once per available backend (cpu, vulkan0, vulkan1, ...) and
`meta_backend_name` once per meta backend (meta:cpu,cpu, and meta:vulkan0,vulkan1 when
there are two Vulkan devices), each reported on its own: pyggml's pytest plugin's
`ggml_backend` and `ggml_meta_backend` under the names these tests use (`--ggml-backend NAME`
restricts them).
"""

import os
import re
import time

# before ggml lists its devices (on the first pyggml call)
os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0,0")


import pytest  # noqa: E402

# the backend parametrization pyggml offers every pytest user (pyggml/testing/pytest_plugin.py)
pytest_plugins = ["pyggml.testing.pytest_plugin", "pytester"]


@pytest.fixture
def backend_name(ggml_backend: str) -> str:
    return ggml_backend


@pytest.fixture
def meta_backend_name(ggml_meta_backend: str) -> str:
    return ggml_meta_backend


@pytest.fixture(autouse=True)
def _no_rpc_device_left_behind():
    """ggml keeps a registered RPC device until the process ends, listed after its server has gone: a
    test that added one here would make it a backend of every later test (tests/test_rpc.py adds its
    servers in child processes)."""
    yield
    from pyggml import rpc

    if rpc._REGISTERED:
        left = sorted(rpc._REGISTERED)
        rpc._REGISTERED.clear()  # reported once, by the test that added them
        pytest.fail(f"this test registered RPC servers {left} in the pytest process: add them in a child process")


# --- tests that build pyggml again ---------------------------------------------------------------------------
# A few tests build a second pyggml (without the seed's patches, a portable wheel): minutes each on 2 cores, half
# of a fresh clone's test run. They are opt-in, so README's test command stays a wait a user takes; CI turns them
# on (PYGGML_REBUILD_TESTS=1 in .ci/run) and runs them on every Python it builds.
REBUILD = "PYGGML_REBUILD_TESTS"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"rebuild: builds pyggml again (minutes on 2 cores); skipped unless {REBUILD}=1 is set"
    )
    config.addinivalue_line(
        "markers", "device: computes on a device it makes itself (not a parameter): under the device budget"
    )


def pytest_collection_modifyitems(config, items):
    if os.environ.get(REBUILD, "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason=f"builds pyggml again (minutes on 2 cores): {REBUILD}=1 python -m pytest -q runs it")
    for item in items:
        if item.get_closest_marker("rebuild"):
            item.add_marker(skip)


# --- what an optional thing's skip says ------------------------------------------------------------------------
# A test that needs something README's command does not install skips, and its reason says how to get it: the many
# device tests say which device is missing, and this adds the command, once, in one place.
HOW_TO_GET = [
    (
        re.compile(
            r"\bno (vulkan|device)|\bneeds (two|a second)\b.*\b(vulkan|device)", re.IGNORECASE
        ),  # missing, not refusing
        'a Vulkan device: CMAKE_ARGS="-DGGML_VULKAN=ON" pip install -e . (Debian: apt-get install libvulkan-dev glslc '
        "mesa-vulkan-drivers; GGML_VK_VISIBLE_DEVICES=0,0 lists Mesa's lavapipe twice: docs/building.md)",
    ),
    (re.compile(r"could not import 'torch'"), "pip install torch"),
    (re.compile(r"could not import 'jax'"), "pip install jax jaxlib"),
]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, line, reason = report.longrepr
        for pattern, how in HOW_TO_GET:
            if pattern.search(reason) and "to run it:" not in reason and "PYGGML_" not in reason:
                report.longrepr = (path, line, f"{reason} (to run it: {how})")
                break


# --- the device budget ------------------------------------------------------------------------------------
# PYGGML_DEVICE_BUDGET=SECONDS bounds the session's time on devices (Vulkan, CUDA and meta devices over them):
# the device cases' run in workers (below) and every test parametrized by a device. Once it is spent, the
# device tests left are skipped, saying so. CI sets it: on a fresh machine's empty Mesa cache, lavapipe would
# compile pipelines for about an hour on 2 cores (bench/README.md); on a warm cache the device tests take far
# less than the budget, and nothing is skipped. Each run adds to the machine's cache.
_BUDGET = float(os.environ["PYGGML_DEVICE_BUDGET"]) if os.environ.get("PYGGML_DEVICE_BUDGET") else None
_OVER = (
    f"not run: the session's device budget (PYGGML_DEVICE_BUDGET={_BUDGET:g} s) was spent, most of it compiling "
    "Vulkan pipelines into a cold Mesa shader cache"
    if _BUDGET is not None
    else ""
)
_DEVICE_SECONDS = [0.0]  # spent so far
_DEVICE_SKIPPED = [0]
_BACKEND_PARAMS = ("backend", "backend_name", "meta_backend_name", "ggml_backend", "ggml_meta_backend")
# parameters that name the devices a test computes on by another name: a device in them puts the test under the
# budget (llama.cpp's split over two lavapipes, a GGUF loaded onto vulkan0: a minute each on a cold cache)
_DEVICES_PARAMS = ("name", "devices", "meta")
_DEVICE_NAME = re.compile(r"\b(?:vulkan|cuda|hip|sycl|metal|opencl|musa|cann)\d+\b", re.IGNORECASE)


def _device_of(item) -> str | None:
    """The device backend a test is parametrized with (None: the CPU, a meta device of CPUs, or none), or
    "device" for a test marked `@pytest.mark.device` (one that makes its device itself)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    for key in _BACKEND_PARAMS:
        name = params.get(key)
        if isinstance(name, str) and name != "cpu" and not name.startswith("meta:cpu"):
            return name
    for key in _DEVICES_PARAMS:
        value = params.get(key)
        names = " ".join(value) if isinstance(value, (tuple, list)) else value
        if isinstance(names, str) and _DEVICE_NAME.search(names):
            return names
    return "device" if item.get_closest_marker("device") else None


def pytest_runtest_setup(item):
    verdict = getattr(item, "originalname", "") in CASE_VERDICT_TESTS  # its record is made, or skipped, already
    if _BUDGET is not None and _DEVICE_SECONDS[0] >= _BUDGET and _device_of(item) and not verdict:
        _DEVICE_SKIPPED[0] += 1
        pytest.skip(_OVER)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = time.monotonic()
    yield
    if _device_of(item):
        _DEVICE_SECONDS[0] += time.monotonic() - start


def pytest_terminal_summary(terminalreporter):
    if _BUDGET is None and not _DEVICE_SECONDS[0]:
        return
    budget = f" of a budget of {_BUDGET:g} s; {_DEVICE_SKIPPED[0]} tests skipped by it" if _BUDGET is not None else ""
    terminalreporter.write_line(f"pyggml: {_DEVICE_SECONDS[0]:.0f} s on devices{budget}")


# tests whose verdict is `check`'s on one (case, backend) pair: on a device they read it from device_records
CASE_VERDICT_TESTS = {"test_op_case", "test_rollback_equals_rerun_and_the_reference"}


@pytest.fixture(scope="session")
def device_records(request) -> dict:
    """The records of every selected case-verdict test (`CASE_VERDICT_TESTS`: a registered case on a backend
    against its oracle, as `check` judges it) on a device (any backend but the CPU), made by `check -j`'s
    workers before the session's first test (`_device_op_cases_first`): a cold lavapipe compiles each pipeline
    for seconds to minutes, and the workers compile them on every core at once (this process would compile
    them one at a time); a driver crash is that case's error, not the end of the session. The CPU's cases
    run in this process, cheaper than in a worker.

    `PYGGML_DEVICE_BUDGET` bounds that run to half the budget (the other half is the device tests' that run
    in this process: the seed's meta splits, llama.cpp on Vulkan): the cases not done by then are skipped,
    saying so, and counted in the summary line. They run breadth first, each op's first type group before any
    op's second, so a spent budget leaves out whole type groups, never whole ops, and every later run on the
    machine finds more of the pipelines in the cache. `python -m pyggml check --backend vulkan0` runs them all."""
    selected: dict[str, list] = {}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "originalname", "") in CASE_VERDICT_TESTS and params.get("backend", "cpu") != "cpu":
            selected.setdefault(params["backend"], []).append(params["case"])
    from pyggml.testing.engine import workers

    start = time.monotonic()
    deadline = start + _BUDGET / 2 if _BUDGET is not None else None
    records = {}
    for backend, chosen in selected.items():
        over = f"{_OVER}; `python -m pyggml check --backend {backend}` runs it"
        _, per_case = workers.run_cases(
            _breadth_first(chosen), [backend], workers.default_jobs(), deadline=deadline, over=over
        )
        records.update({(r.case, r.backend): r for recs in per_case for r in recs})
    if selected:
        _DEVICE_SECONDS[0] += time.monotonic() - start
    _DEVICE_SKIPPED[0] += sum(bool(_OVER) and r.message.startswith(_OVER) for r in records.values())
    return records


def _breadth_first(chosen: list) -> list:
    """`chosen` with each op's n-th type group (workers.group) after every op's (n-1)-th; in order within."""
    from pyggml.testing.engine import workers

    rank: dict[str, int] = {}
    per_op: dict[str, int] = {}
    for c in chosen:
        g = workers.group(c.name)
        if g not in rank:
            op = g.split("/")[0]
            rank[g] = per_op.get(op, 0)
            per_op[op] = rank[g] + 1
    return sorted(chosen, key=lambda c: rank[workers.group(c.name)])


@pytest.fixture(scope="session", autouse=True)
def _device_op_cases_first(request):
    """The workers' run of the selected device op cases before any other test: the pipelines it compiles in
    parallel are then in Mesa's cache for every later test that needs them (the meta, delta-net and
    llama.cpp tests would otherwise compile them one at a time, each in turn)."""
    request.getfixturevalue("device_records")
