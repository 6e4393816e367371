"""The op database: one spec per op, names made from fields, and every node of every op case's graph
read back into its oracle call and checked with the data it received."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from pyggml import ops
from pyggml.errors import Unsupported
from pyggml.runner import Runner
from pyggml.testing.engine import opdb
from pyggml.testing.engine.cases import REGISTRY, OpCase, _load_all
from pyggml.testing.engine.nodes import VIEW_KINDS, check_case_nodes

_load_all()
SPEC_CASES = [c for c in REGISTRY.values() if isinstance(c, OpCase) and c.spec.op in opdb.SPECS]


def test_one_spec_per_op():
    with pytest.raises(ValueError, match="one spec per op"):
        opdb.spec("add" if "add" in opdb.SPECS else next(iter(opdb.SPECS)))


def test_names_are_made_from_fields():
    for c in SPEC_CASES:
        assert c.name == opdb.case_name(c.spec, c.sample)
        assert c.name.split("/")[0] == c.op and (not c.variant or c.name.endswith("/" + c.variant))


def test_every_spec_is_a_public_op():
    """An op of the database has a wrapper: its family's, or the one its ggml.h declaration makes."""
    from pyggml.ops.declared import declaration

    unknown = [op for op in opdb.SPECS if op not in ops.__all__ and not _declared(declaration, op)]
    assert not unknown, f"specs of ops neither pyggml.ops nor ggml.h has: {sorted(unknown)}"
    assert {"conv_2d_sk_p0", "conv_2d_s1_ph"} <= set(opdb.SPECS) - set(ops.__all__)


def _declared(declaration, op: str) -> bool:
    try:
        return bool(declaration(op))
    except KeyError:
        return False


def test_an_op_is_added_by_its_spec_alone(monkeypatch):
    """A spec of an op with no wrapper written (ggml_conv_2d_s1_ph) and its reference: the cases it makes run on the
    CPU and pass; the same spec with a wrong reference (no padding) fails. Nothing else is written."""
    from pyggml.testing.engine import oracles
    from pyggml.testing.engine.verdict import run_case

    monkeypatch.setattr(opdb, "SPECS", {})

    def made(ref):
        opdb.SPECS.clear()
        s = opdb.spec(
            "conv_2d_s1_ph",
            ref=ref,
            samples=[opdb.Sample({"a": ("f32", (2, 3, 3, 3)), "b": ("f32", (1, 3, 7, 9))})],
        )
        return OpCase(s, s.samples[0])

    right = made(lambda a, b: oracles.conv_2d(a, b, 1, 1, 1, 1, 1, 1))
    wrong = made(lambda a, b: oracles.conv_2d(a, b, 1, 1, 0, 0, 1, 1))
    assert run_case(right, _CPU, "cpu")[0].status == "pass"
    assert run_case(wrong, _CPU, "cpu")[0].status in ("fail", "error")


_CPU = Runner("cpu")


@pytest.mark.parametrize("case", SPEC_CASES, ids=[c.name for c in SPEC_CASES])
def test_every_node_against_its_oracle(case):
    """Each node of the case's graph on the CPU, against the oracle its spec reads it into."""
    try:
        verdicts = check_case_nodes(case, _CPU)
    except Unsupported as e:
        pytest.skip(f"cpu: not supported: {e}")
    bad = [
        f"node {v.index} {v.kind} {v.name!r}: {v.error or (v.comparison and v.comparison.message)}"
        for v in verdicts
        if v.error or not v.ok
    ]
    assert not bad, "\n".join(bad)
    assert not verdicts or any(v.comparison is not None for v in verdicts), "no node was checked"


def test_every_node_kind_has_a_reader():
    kinds = set()
    for c in SPEC_CASES:
        c.build()
        kinds |= c.graph_ops
    missing = sorted(kinds - set(opdb.READERS) - VIEW_KINDS)
    assert not missing, f"op kinds no spec reads back into an oracle call: {missing}"


def test_bad_calls_have_one_shape(monkeypatch):
    """A bad call is `bad(op, fn, raises, words)` before the op's spec, which takes it; errors= on a spec, a bad
    call after its op's spec, and one of an op with no spec are refused."""
    from pyggml.testing.engine import opdb as db

    monkeypatch.setattr(db, "BAD_CALLS", {})
    monkeypatch.setattr(db, "SPECS", dict(db.SPECS))
    db.bad("an_op_of_this_test", lambda c, t: None, ValueError, "words")
    s = db.spec("an_op_of_this_test", lambda xp, x: x.a)
    assert [b.words for b in s.errors] == ["words"] and db.BAD_CALLS == {}
    with pytest.raises(ValueError, match="before its spec"):
        db.bad("an_op_of_this_test", lambda c, t: None, ValueError, "late")
    with pytest.raises(ValueError, match="not errors="):
        db.spec("another_op_of_this_test", lambda xp, x: x.a, errors=[])
    db.bad("an_op_with_no_spec", lambda c, t: None, ValueError, "orphan")
    monkeypatch.setattr(db, "_loaded", False)
    with pytest.raises(ValueError, match="an_op_with_no_spec"):
        db.load()


def test_a_node_reads_its_parameters_by_name_as_its_builder_took_them():
    """Each op a spec reads nodes of, built by its wrapper from a sample: every parameter of its layout (`params=`, or
    the scalars its ggml.h declaration lists) reads back, by name, the value the builder was given."""
    import inspect

    from pyggml.ops import wrapper
    from pyggml.testing.engine.opdb import Node, as_input, param_layout

    checked = 0
    for op, s in sorted(opdb.load().items()):
        if s.from_node is None or s.call.__qualname__ != f"plain_call({op!r})":
            continue
        layout = param_layout(op)
        for sample in s.samples:
            if sample.call is not None:
                continue
            ctx = pyggml.Context(mem_size=64 << 20)
            xs = [ctx.tensor(as_input(v).type, as_input(v).shape) for v in sample.inputs.values()]
            try:
                node = wrapper(op)(ctx, *xs, *sample.args)
            except (ValueError, TypeError):  # a sample of a layout (a view) the plain inputs do not have
                continue
            given = inspect.signature(wrapper(op)).bind(ctx, *xs, *sample.args)
            given.apply_defaults()
            read = Node(node, [])
            for name in layout:
                want = given.arguments.get(name)
                if isinstance(want, (int, float)) and not isinstance(want, pyggml.Tensor):
                    assert read.param(name) == pytest.approx(float(np.float32(want)), rel=1e-6), (op, name)
                    checked += 1
            break
    assert checked > 100  # 124 parameters of 63 ops (2026-12-06)
    with pytest.raises(KeyError, match="no op parameter 'nope'"):
        Node(node, []).param("nope")
