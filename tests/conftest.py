"""Test-wide set-up: Mesa's lavapipe counts as a Vulkan device, listed twice (vulkan0 and
vulkan1) so a two-device meta backend exists on any machine with it.

`backend_name` runs a test once per available backend (cpu, vulkan0, vulkan1, ...) and
`meta_backend_name` once per meta backend (meta:cpu,cpu, and meta:vulkan0,vulkan1 when
there are two Vulkan devices), each reported on its own: pyggml's pytest plugin's
`ggml_backend` and `ggml_meta_backend` under the names these tests use (`--ggml-backend NAME`
restricts them).
"""

import os
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

    `PYGGML_DEVICE_CASES_BUDGET=SECONDS` bounds that run (CI sets it: a fresh machine's empty Mesa cache would
    cost lavapipe about an hour of compiling on 2 cores, bench/README.md): the cases not done by then are
    skipped, saying so. They run breadth first, each op's first type group before any op's second, so a
    spent budget leaves out whole type groups, never whole ops, and every later run on the machine finds
    more of the pipelines in the cache. `python -m pyggml check --backend vulkan0` runs them all."""
    selected: dict[str, list] = {}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "originalname", "") in CASE_VERDICT_TESTS and params.get("backend", "cpu") != "cpu":
            selected.setdefault(params["backend"], []).append(params["case"])
    from pyggml.testing import workers

    budget = os.environ.get("PYGGML_DEVICE_CASES_BUDGET")
    deadline = time.monotonic() + float(budget) if budget else None
    records = {}
    for backend, chosen in selected.items():
        over = (
            f"not run: the device cases' budget (PYGGML_DEVICE_CASES_BUDGET={budget} s) was spent compiling "
            f"{backend}'s pipelines (a cold Mesa shader cache); `python -m pyggml check --backend {backend}` runs it"
        )
        _, per_case = workers.run_cases(
            _breadth_first(chosen), [backend], workers.default_jobs(), deadline=deadline, over=over
        )
        records.update({(r.case, r.backend): r for recs in per_case for r in recs})
    return records


def _breadth_first(chosen: list) -> list:
    """`chosen` with each op's n-th type group (workers.group) after every op's (n-1)-th; in order within."""
    from pyggml.testing import workers

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
