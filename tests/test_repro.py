"""Reproducers of nodes of pyggml's own graphs: a quantized weight, a permuted source, a node that writes into
its source's memory, each saved with what it read and computed again on its own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pyggml as gg
from pyggml.testing.check import available_backends
from pyggml.testing.engine import repro
from pyggml.testing.engine.nodes import NodeChecker, observing


def _checked_graph(backend: str) -> list:
    ctx = gg.Context()
    w = ctx.tensor("q8_0", (6, 64), "w", input=True)
    x = ctx.tensor("f32", (64, 3, 2), "x", input=True)  # permuted below: a strided source
    cache = ctx.tensor("f32", (5, 6), "cache", input=True)
    idx = ctx.tensor("i32", (2,), "idx", input=True)
    xp = ctx.cont(ctx.permute(x, 0, 2, 1, 3))  # (3, 2, 64) -> contiguous copy of a permuted view
    y = ctx.mul_mat(w, ctx.reshape_2d(xp, 64, 6))  # (6, 6)
    rows = ctx.view_2d(y, 6, 2, y.nb[1], 0)
    # writes into its destination's memory: a view of that source (a computed one: set_rows of a device's rows
    # into an input, which lives in host memory, segfaulted Runner("vulkan0") in ggml's scheduler)
    out = ctx.set_rows(ctx.cont(cache), rows, idx)
    z = ctx.mul(
        ctx.permute(ctx.reshape_3d(y, 6, 3, 2), 0, 2, 1, 3), ctx.permute(ctx.reshape_3d(y, 6, 3, 2), 0, 2, 1, 3)
    )
    graph = gg.Graph(ctx).build_forward_expand(out).build_forward_expand(z)
    rng = np.random.default_rng(0)
    values = {
        w: rng.uniform(-1, 1, (6, 64)).astype(np.float32),
        x: rng.uniform(-1, 1, (64, 3, 2)).astype(np.float32),
        cache: rng.uniform(-1, 1, (5, 6)).astype(np.float32),
        idx: np.array([4, 1], np.int32),
    }
    checker = NodeChecker(keep=lambda v: True)
    runner = gg.Runner(backend)
    with observing(runner, checker):
        runner.run(graph, values, [out, z])
    return checker.verdicts


@pytest.mark.parametrize("backend", ["cpu", "vulkan0"])
def test_quantized_strided_and_in_place_nodes_round_trip(backend: str, tmp_path: Path) -> None:
    if backend not in available_backends():
        pytest.skip(f"no {backend}")
    verdicts = _checked_graph(backend)
    assert [v.kind for v in verdicts].count("CONT") == 2 and all(v.ok for v in verdicts)
    assert {v.kind for v in verdicts} == {"CONT", "MUL_MAT", "SET_ROWS", "MUL"}
    saved = {v.kind: repro.load(repro.save(tmp_path, v, "graph", backend)) for v in verdicts}
    weight = saved["MUL_MAT"].capture.sources[0]
    assert weight is not None and weight.type == "Q8_0"  # raw blocks saved, decoded values beside them
    assert saved["SET_ROWS"].capture.view_of == (2, 0)  # ggml keeps set_rows' destination in src[2]
    mul = saved["MUL"].capture.sources[0]
    assert mul is not None and mul.nb[1] > mul.nb[2]  # a permuted source stays permuted
    for kind, r in saved.items():
        rec = repro.rerun(r, backend)
        assert rec.status == "pass", (kind, rec.message)
        assert backend == "cpu" or "Vulkan0" in rec.message


def test_on_a_meta_device_the_rebuilt_node_is_read_and_checked(tmp_path: Path) -> None:
    """A node rebuilt on a meta device is read back and judged like any other (before ggml patch 0032 it was
    left unread and skipped)."""
    [v] = [v for v in _checked_graph("cpu") if v.kind == "MUL"]
    rec = repro.rerun(repro.load(repro.save(tmp_path, v, "graph", "cpu")), "meta:cpu,cpu")
    assert rec.status == "pass" and "Meta(CPU,CPU)" in rec.message, rec


def test_a_set_rows_rebuilt_without_its_view_is_caught(tmp_path: Path) -> None:
    """The view_of is what makes set_rows reproducible: the node's rows not written are its source's."""
    [v] = [v for v in _checked_graph("cpu") if v.kind == "SET_ROWS"]
    r = repro.load(repro.save(tmp_path, v, "graph", "cpu"))
    assert repro.rerun(r, "cpu").status == "pass"
    r.capture.view_of = None
    assert repro.rerun(r, "cpu").status == "fail"


def test_reproducers_that_cannot_be_read_say_what_is_wrong(tmp_path: Path) -> None:
    [v] = [v for v in _checked_graph("cpu") if v.kind == "MUL"]
    path = repro.save(tmp_path, v, "graph", "cpu")
    doc = json.loads(path.read_text())
    for change, words in (
        ({"op": "NOT_AN_OP"}, "NOT_AN_OP"),
        ({"type": "f33"}, "f33"),
        ({"op_params": [0, 1]}, "op_params has 2 values"),
        ({"version": 9}, "version 9"),
        ({"arrays": "gone.npz"}, "gone.npz"),
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**doc, **change}))
        with pytest.raises(ValueError, match=words):
            repro.load(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="not a readable reproducer"):
        repro.load(bad)
    with pytest.raises(ValueError, match="inputs were not kept"):
        v.capture = None
        repro.save(tmp_path, v, "graph", "cpu")
