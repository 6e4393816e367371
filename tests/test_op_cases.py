"""Every registered OpCase on every available backend against its NumPy oracle, and op coverage."""

from __future__ import annotations

import pytest

from pyggml import ops
from pyggml.runner import Runner
from pyggml.testing.engine import opdb
from pyggml.testing.engine.cases import REGISTRY, OpCase, _load_all
from pyggml.testing.engine.verdict import Status, run_case

_load_all()
OP_CASES = [c for c in REGISTRY.values() if isinstance(c, OpCase)]


def public_ops() -> list[str]:
    return sorted(
        n
        for n in ops.__all__
        if callable(getattr(ops, n)) and not isinstance(getattr(ops, n), type) and n != "set_name"
    )


_RUNNERS: dict[str, Runner] = {}


def runner_for(name: str) -> Runner:
    if name not in _RUNNERS:
        _RUNNERS[name] = Runner(name)
    return _RUNNERS[name]


def _backends():
    from pyggml.testing.check import available_backends

    # vulkan1 is vulkan0 listed again (for the meta tests): the same device, the same answers
    return [b for b in available_backends() if b != "vulkan1"]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("case", OP_CASES, ids=[c.name for c in OP_CASES])
def test_op_case(case, backend, request):
    """The same verdict as `check`: pass, a known disagreement (xfail), unsupported or skipped (skip)."""
    if backend == "cpu":
        rec, _ = run_case(case, runner_for(backend), backend)
    else:
        rec = request.getfixturevalue("device_records")[case.name, backend]
    if rec.status in (Status.UNSUPPORTED, Status.SKIPPED):
        pytest.skip(f"{backend}: {rec.message}")
    if rec.status == Status.KNOWN:
        pytest.xfail(rec.message)
    assert rec.status == Status.PASS, f"{case.name} on {backend}: {rec.status}: {rec.message}"


def test_case_names():
    for c in OP_CASES:
        op, _, rest = c.name.partition("/")
        assert rest, f"{c.name}: names are <op>/<type>[/<variant>]"
        assert c.params.get("op"), f"{c.name}: no op= parameter"


def test_every_op_has_a_case():
    covered = {c.params.get("op") for c in OP_CASES}
    missing = [op for op in public_ops() if op not in covered]
    assert not missing, f"ops without an oracle case: {missing}"
    # an op the database adds by its spec alone has the wrapper its ggml.h declaration makes (pyggml.ops.wrapper)
    unknown = {op for op in covered - set(public_ops()) if op not in opdb.SPECS or ops.family_of(op) is not None}
    assert not unknown, f"cases name unknown ops: {unknown}"
