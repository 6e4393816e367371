"""Sources split, mirrored or partial in every combination on a meta device: the single device's value or
Unsplittable naming the node, each source's layout and what would work (patches 0039, 0040; findings 48)."""

import subprocess
import sys
import time

import numpy as np
import pytest

import pyggml as gg
from pyggml.errors import Unsplittable
from pyggml.meta import Split

C = np.arange(24, dtype=np.float32).reshape(4, 6)


def _resident(runner, rules, names=("c",)):
    """Static tensors of shape (4, 6) allocated on the meta device under `rules`, c holding C."""
    runner.set_policy(rules)
    wctx = gg.Context()
    ts = [wctx.tensor("f32", (4, 6), n) for n in names]
    runner.backend.alloc_tensors(wctx)
    for t in ts:
        t.set(C if t.name == "c" else np.zeros_like(C))
    return wctx, ts


def test_concat_of_a_split_and_a_mirrored_input_is_refused_naming_the_layouts():
    """It returned device 1's rows of x replaced by device 0's, silently."""
    runner = gg.Runner("meta:cpu,cpu")
    _wctx, (c,) = _resident(runner, [("c", Split(1, (2, 2)))])
    ctx = gg.Context()
    x = ctx.tensor("f32", (4, 6), "x", input=True)
    y = ctx.concat(c, x, 0)
    graph = gg.Graph(ctx).build_forward_expand(y)
    with pytest.raises(Unsplittable) as e:
        runner.run(graph, {x: C + 100}, [y])
    msg = str(e.value)
    assert "CONCAT" in msg and "c: split along axis 1 as Split(1, (2, 2))" in msg and "x: mirrored" in msg
    assert "split x the same way: Split(1, (2, 2))" in msg and "mirror c" in msg


def test_concat_of_alike_splits_is_the_single_device_value():
    runner = gg.Runner("meta:cpu,cpu")
    _wctx, (c, d) = _resident(runner, [("*", Split(1, (2, 2)))], ("c", "d"))
    d.set(C + 100)
    ctx = gg.Context()
    y = ctx.concat(c, d, 0)
    got = runner.run(gg.Graph(ctx).build_forward_expand(y), {}, [y])[0]
    np.testing.assert_array_equal(got, np.concatenate([C, C + 100], axis=1))


_COPY_INTO_INPUT = """
import numpy as np, pyggml as gg
from pyggml.meta import Split
C = np.arange(24, dtype=np.float32).reshape(4, 6)
for split in (Split(1, (2, 2)), Split(0, (4, 2)), Split("mirrored")):
    runner = gg.Runner("meta:cpu,cpu")
    runner.set_policy([("c", split)])
    wctx = gg.Context()
    c = wctx.tensor("f32", (4, 6), "c")
    runner.backend.alloc_tensors(wctx)
    c.set(C)
    ctx = gg.Context()
    x = ctx.tensor("f32", (4, 6), "x", input=True)
    y = ctx.cpy(c, x)
    got = runner.run(gg.Graph(ctx).build_forward_expand(y), {x: C + 100}, [y])[0]
    np.testing.assert_array_equal(got, C)
print("ok")
"""


def test_a_copy_of_a_weight_into_an_input_is_the_weight():
    """Split, it killed the process (SIGSEGV); mirrored, ggml aborted at allocation (patch 0040). In a child."""
    proc = subprocess.run([sys.executable, "-c", _COPY_INTO_INPUT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("dst", [Split("mirrored"), Split(1, (3, 1)), Split(0, (3, 3))])
def test_a_copy_into_a_destination_laid_out_otherwise_is_refused(dst):
    """Into a mirrored d, each device wrote its part at the start of its own copy of d, silently."""
    runner = gg.Runner("meta:cpu,cpu")
    _wctx, (c, d) = _resident(runner, [("c", Split(1, (2, 2))), ("d", dst)], ("c", "d"))
    ctx = gg.Context()
    y = ctx.cpy(c, d)
    with pytest.raises(Unsplittable, match=r"split d the same way: Split\(1, \(2, 2\)\)"):
        runner.run(gg.Graph(ctx).build_forward_expand(y), {}, [y])


def test_a_copy_into_a_destination_split_alike_writes_it():
    runner = gg.Runner("meta:cpu,cpu")
    _wctx, (c, d) = _resident(runner, [("*", Split(1, (3, 1)))], ("c", "d"))
    ctx = gg.Context()
    y = ctx.cpy(c, d)
    got = runner.run(gg.Graph(ctx).build_forward_expand(y), {}, [y])[0]
    np.testing.assert_array_equal(got, C)
    np.testing.assert_array_equal(d.numpy(), C)


@pytest.mark.parametrize("op", ["silu", "sqr", "rms_norm", "soft_max", "mul"])
def test_a_partial_sum_through_an_op_not_linear_in_it_is_refused(op):
    runner = gg.Runner("meta:cpu,cpu")
    _wctx, (c,) = _resident(runner, [("c", Split("partial"))])
    ctx = gg.Context()
    y = {"rms_norm": lambda: ctx.rms_norm(c, 1e-6), "mul": lambda: ctx.mul(c, c)}.get(op, lambda: getattr(ctx, op)(c))()
    with pytest.raises(Unsplittable, match=r"c: partial .*mirror c"):
        runner.run(gg.Graph(ctx).build_forward_expand(y), {}, [y])


def test_the_layouts_matrix_on_two_cpus_gives_no_wrong_value_and_no_death():
    """Every op the layouts fuzz knows with every pair of layouts (`python -m pyggml meta-fuzz --layouts`)."""
    from pyggml.testing.fuzzers.meta_fuzz import fuzz_layouts, layout_trials

    start = time.monotonic()
    records = fuzz_layouts("cpu,cpu")
    assert len(records) == len(layout_trials()) > 400
    bad = [r for r in records if r["status"] not in ("pass", "unsplittable")]
    assert bad == []
    passed = {r["graph"] for r in records if r["status"] == "pass"}
    assert {
        "concat0(split1, split1)",
        "cpy(split1, input)",
        "add(partial, partial)",
        "mul_mat(split0, split0)",
    } <= passed
    for r in records:
        if r["status"] == "unsplittable":
            assert "What would work" in r["message"] or "mirror" in r["message"], r
    assert time.monotonic() - start < 120
