"""pyggml.target: a backend's name taken apart once, for every module that takes one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyggml import backend_kinds, cpu_variants
from pyggml.target import Buffer, Target, expand, matches

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


def test_bad_names_are_refused_with_what_to_write():
    for bad, says in [
        ("", "an empty backend name"),
        ("meta:,", "a meta backend names its devices"),
        ("meta:meta:cpu,cpu", "not 'meta:cpu'"),
        ("vulkan0,vulkan1", "meta:vulkan0,vulkan1"),
    ]:
        with pytest.raises(ValueError, match=re.escape(says)):
            Target.parse(bad)


@pytest.mark.parametrize(
    ("written", "family", "families", "index", "rpc", "rpc_indices"),
    [
        ("cpu", "cpu", ("cpu",), None, False, ()),
        ("cpu:zen4", "cpu", ("cpu",), None, False, ()),
        ("Vulkan1", "vulkan", ("vulkan",), 1, False, ()),
        ("rpc10", "rpc", ("rpc",), 10, True, (10,)),
        ("rocm0", "rocm", ("rocm",), 0, False, ()),
        ("meta:cpu,rpc0,rpc2", "meta", ("cpu", "rpc", "rpc"), None, True, (0, 2)),
    ],
)
def test_a_targets_family_index_and_rpc_devices(written, family, families, index, rpc, rpc_indices):
    t = Target.parse(written)
    assert (t.family, t.families, t.index, t.rpc) == (family, families, index, rpc)
    assert t.rpc_indices == rpc_indices


def test_device_names_are_split_in_backend_kinds():
    assert backend_kinds.split("Vulkan1") == ("vulkan", 1)
    assert backend_kinds.split("CPU") == ("cpu", None)
    assert backend_kinds.split("rpc10") == ("rpc", 10)
    assert backend_kinds.of_device("ROCm0") is backend_kinds.kind("hip")


@pytest.mark.parametrize(
    ("backend", "pattern", "holds"),
    [
        ("vulkan0", "vulkan", True),
        ("vulkan0", "", True),
        ("vulkan0", "vulkan0", True),
        ("vulkan0", "vulkan1", False),
        ("vulkan0", "meta:vulkan", False),
        ("cpu:zen4", "cpu", True),  # a variant is a CPU backend
        ("cpu", "meta:cpu", False),
        ("meta:cpu,cpu", "cpu", False),
        ("meta:cpu,cpu", "meta:cpu", True),
        ("meta:cpu:x64,cpu", "meta:cpu", True),
        ("meta:vulkan0,vulkan1", "meta:vulkan", True),
        ("meta:vulkan0,vulkan1", "meta", True),
        ("meta:cpu,vulkan0", "meta:cpu", False),  # a prefix said so: a mixed meta device is of no one kind
        ("meta:cpu,vulkan0", "meta:vulkan", False),
        ("meta:cpu,vulkan0", "meta", True),
        ("", "", True),  # a backend not known: the rules for all only
        ("", "cpu", False),
    ],
)
def test_a_rule_for_a_kind_holds_on_the_targets_of_that_kind(backend, pattern, holds):
    assert matches(backend, pattern) is holds


@pytest.mark.parametrize(
    ("name", "family", "device", "index", "on_cpu"),
    [
        ("CPU", "cpu", "cpu", None, True),
        ("CPU_Mapped", "cpu", None, None, True),
        ("CPU_REPACK", "cpu", None, None, True),
        ("Vulkan0", "vulkan", "vulkan0", 0, False),
        ("Vulkan_Host", "vulkan", None, None, False),
        ("CUDA1", "cuda", "cuda1", 1, False),
        ("RPC0[127.0.0.1:50052]", "rpc", "rpc0", 0, False),
        ("Meta(CPU,CPU)", "meta", None, None, True),
        ("Meta(CPU,Vulkan0)", "meta", None, None, False),
        ("Nonsense3", "nonsense", None, 3, False),
    ],
)
def test_a_buffer_name_is_taken_apart(name, family, device, index, on_cpu):
    b = Buffer.parse(name)
    assert (b.family, b.device, b.index, b.on_cpu) == (family, device, index, on_cpu)


def test_a_meta_buffers_parts_are_its_devices_buffers():
    assert [p.device for p in Buffer.parse("Meta(CPU,Vulkan0)").parts] == ["cpu", "vulkan0"]
    assert Buffer.parse("Vulkan0").parts == ()


def test_the_node_of_a_buffer_is_computed_by_its_device_else_by_the_run():
    from pyggml.testing.engine.nodes import backend_of

    assert backend_of("RPC0[127.0.0.1:50052]", "meta:rpc0,rpc1") == "rpc0"
    assert backend_of("Meta(Vulkan0,Vulkan1)", "meta:vulkan0,vulkan1") == "meta:vulkan0,vulkan1"
    assert backend_of("CPU_Mapped", "vulkan0") == "vulkan0"


def test_dlpack_names_a_device_by_its_index_not_by_every_digit_of_its_buffer():
    """Regression: the index was every digit of the buffer's name, an RPC server's address and port included."""
    from pyggml.interop import device_memory

    assert device_memory("RPC0[127.0.0.1:50052]") == (12, 0)
    assert device_memory("Meta(Vulkan0,Vulkan1)") == (12, 0)
    assert device_memory("CUDA1") == (2, 1) and device_memory("Vulkan1") == (7, 1)


def test_a_cpu_finding_covers_the_cpu_variants(monkeypatch):
    """Regression: a CPU finding's kind was the name less its last digits (`cpu:zen`), so it never covered a
    variant of ggml-cpu, which has the same kernels."""
    from pyggml.testing.engine import findings

    monkeypatch.setattr(findings, "fixed_here", lambda f: None)  # a tree that lacks every fix
    case = "conv_2d_dw_direct/f16/x"
    assert [f.number for f in findings.covering(case, "cpu:zen4")] == [f.number for f in findings.covering(case, "cpu")]
    assert findings.covering(case, "cpu") and not findings.covering(case, "vulkan0")


def test_bounds_by_kind_hold_on_every_target_of_the_kind():
    """A table of bounds by kind (twins, rollbacks) is read through Target.matches: the CPU variants are CPUs
    (rollback measured bit-exact on cpu:x64, cpu:haswell and meta:cpu:x64,cpu), a meta device over CPUs is one
    whatever its variants, and a meta device over several kinds gets the bound of kinds not measured."""
    from pyggml.testing.engine.cases.delta_net import ROLLBACK_BOUND_OTHER, rollback_bound
    from pyggml.testing.engine.twin_check import TWIN_NMSE_OTHER, twin_bound

    assert rollback_bound("cpu") == rollback_bound("cpu:haswell") == rollback_bound("meta:cpu:x64,cpu") == (0.0, 0.0)
    assert rollback_bound("meta:cpu,vulkan0") == rollback_bound("vulkan0") == ROLLBACK_BOUND_OTHER
    assert twin_bound("vulkan1") == 0.0 and twin_bound("meta:vulkan0,vulkan1") == 1e-10
    assert twin_bound("meta:cpu,vulkan0") == twin_bound("cuda0") == TWIN_NMSE_OTHER


# The ways backend, device and buffer names were taken apart outside pyggml.target and pyggml.backend_kinds (issue 59):
# a prefix or a substring test on a name, its index stripped, its meta list split by hand.
AD_HOC = re.compile(
    r"""startswith\(\(?\s*(?:f?["'](?:meta|Meta\(|cpu|CPU|vulkan|Vulkan|cuda|CUDA|rpc|RPC)|META_PREFIX|cpu_variants\.PREFIX)"""
    r"""|removeprefix\(\s*(?:["']meta|META_PREFIX)|\[len\(META_PREFIX\)|\b(?:backend|buffer)\[-?\d*:|\b(?:name|b)\[[35]:(?:-1)?\]"""
    r"""|\b(?:backend|buffer)\.(?:startswith|removeprefix|rstrip|split)\("""
    r"""|rstrip\(\s*["']0123456789|re\.sub\(\s*r?["']\\d\+\$|["'](?:rpc|meta|vulkan|cuda|cpu)["']\s+in\s+(?:b|name|backend)\b"""
    r"""|\b(?:backend|backends?_?name|buffer|devices)\S*\.split\(\s*["'][,\[]"""
)

# the lines the guard replaced: each must still be caught
OLD_PARSERS = [
    'kind = "meta" if backend.startswith("meta") else backend.rstrip("0123456789")',
    'family = re.sub(r"\\d+$", "", name)',
    'name = buffer.split("[")[0].lower()',
    'if name == "cpu" or name.startswith(("vulkan", "cuda", "rpc")) and name[-1:].isdigit():',
    "return next((b for kind, b in TWIN_NMSE.items() if backend.startswith(kind)), TWIN_NMSE_OTHER)",
    'listed = {d["name"].lower().rstrip("0123456789") for d in data["devices"]}',
    'if getattr(args, "rpc", None) or any("rpc" in b for b in backends):',
    'return kind(name.rstrip("0123456789"))',
    'if name.startswith("CUDA"):',
    'return all(part.startswith("CPU") for part in name[5:-1].split(","))',
    'if not name.startswith("Vulkan"):',
    'wanted = [int(d[3:]) for d in backend.removeprefix("meta:").split(",") if d.startswith("rpc")]',
    'self.tol = 1e-3 if backend in ("cpu",) or backend.startswith("meta:cpu") else 2e-2',
    'devices = tuple(d for d in name[len(META_PREFIX) :].split(",") if d)',
    "ok = backend[5:]",
]


@pytest.mark.parametrize("line", OLD_PARSERS)
def test_the_guard_catches_each_way_a_name_was_taken_apart(line):
    assert AD_HOC.search(line), line


def test_no_other_module_takes_a_backend_name_apart():
    """Backend, device and buffer names are taken apart in pyggml.target (and device names in pyggml.backend_kinds,
    CPU variants' in pyggml.cpu_variants) only: every other module asks them."""
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sorted((ROOT / "pyggml").rglob("*.py"))
        if p.name not in ("target.py", "backend_kinds.py", "cpu_variants.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if AD_HOC.search(line)
    ]
    assert not found, "\n".join(found)
