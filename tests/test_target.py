"""pyggml.target: a backend's name taken apart once, for every module that takes one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyggml import cpu_variants
from pyggml.target import Target, expand

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("written", "parts", "meta", "is_cpu", "on_cpu", "variant"),
    [
        ("cpu", ("cpu",), False, True, True, None),
        ("Vulkan0", ("vulkan0",), False, False, False, None),
        ("cpu:zen4", ("cpu:zen4",), False, True, True, "zen4"),
        ("meta:cpu,cpu", ("cpu", "cpu"), True, False, True, None),
        ("meta:vulkan0,vulkan1,", ("vulkan0", "vulkan1"), True, False, False, None),
        ("meta:cpu:x64,cpu", ("cpu:x64", "cpu"), True, False, True, None),
    ],
)
def test_a_name_is_taken_apart(written, parts, meta, is_cpu, on_cpu, variant):
    t = Target.parse(written)
    assert (t.name, t.devices, t.meta, t.is_cpu, t.on_cpu, t.variant) == (
        written.lower(),
        parts,
        meta,
        is_cpu,
        on_cpu,
        variant,
    )
    assert all(k is not None and k.family in ("cpu", "vulkan") for k in t.kinds)


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="a meta backend names its devices"):
        Target.parse("meta:")
    with pytest.raises(TypeError):
        Target.parse(0)


def test_cpu_all_stands_for_every_variant_this_machine_runs():
    assert expand(["CPU", "cpu:all", "cpu"]) == ["cpu", *(f"cpu:{v.name}" for v in cpu_variants.runnable())] or (
        not cpu_variants.runnable() and expand(["cpu", "cpu:all"]) == ["cpu", "cpu:all"]
    )


def test_no_other_module_takes_a_backend_name_apart():
    taking_apart = re.compile(
        r"""startswith\((?:"meta:|META_PREFIX|cpu_variants\.PREFIX)|\[len\(META_PREFIX\)|\b(?:name|b|backend)\[5:\]"""
    )
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "pyggml").rglob("*.py"))
        if p.name not in ("target.py", "cpu_variants.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if taking_apart.search(line)
    ]
    assert not found, found
