"""The table of backend kinds (pyggml.backend_kinds): one entry is all a kind needs for the messages of
`pyggml.device`, `check --backend` and `python -m pyggml info`."""

from __future__ import annotations

import pytest

import pyggml
from pyggml import backend_kinds
from pyggml.backend_kinds import BackendKind
from pyggml.testing.engine.session import backend_error


def test_every_kind_is_named_once_and_built_by_a_ggml_option():
    families = [k.family for k in backend_kinds.KINDS]
    assert len(families) == len(set(families)) and {"cpu", "vulkan", "cuda", "rpc"} <= set(families)
    assert all(k.cmake_option.startswith("GGML_") for k in backend_kinds.KINDS)
    assert backend_kinds.kind("ROCM") is backend_kinds.kind("hip") is not None
    assert backend_kinds.kind("nope") is None


@pytest.mark.parametrize("k", [k for k in backend_kinds.KINDS if k.family not in pyggml.build_info()["backends"]])
def test_a_kind_this_build_lacks_says_how_to_build_it(k):
    why = backend_error(f"{k.family}0")
    assert why is not None and k.label in why and f'CMAKE_ARGS="-D{k.cmake_option}=ON"' in why


def test_a_new_kind_is_one_entry(monkeypatch):
    """A kind pyggml has never heard of, added to the table: every message names it."""
    new = BackendKind("openvino", "OpenVINO", "GGML_OPENVINO", missing="its runtime found no device")
    monkeypatch.setattr(backend_kinds, "KINDS", (*backend_kinds.KINDS, new))
    why = backend_error("openvino0")
    assert why is not None and "no OpenVINO backend" in why and "-DGGML_OPENVINO=ON" in why
    with pytest.raises(ValueError, match=r"no openvino backend: rebuild with CMAKE_ARGS=\"-DGGML_OPENVINO=ON\""):
        pyggml.device("openvino0")


def test_a_kinds_preflight_rules_come_from_the_table(monkeypatch):
    """The preflight finds a kind's rules through its entry: a module named there, with a `structure` hook,
    is asked about the nodes that kind's devices compute (here the CPU's, through a stand-in module)."""
    import dataclasses
    import sys
    import types

    import numpy as np

    from pyggml import preflight

    seen: list[int] = []

    def structure(ns):
        seen.append(len(ns))
        raise pyggml.GraphError("refused by the kind's own rules")

    rules = types.ModuleType("kind_rules_for_test")
    rules.structure = structure
    monkeypatch.setitem(sys.modules, "kind_rules_for_test", rules)
    cpu = dataclasses.replace(backend_kinds.kind("cpu"), preflight="kind_rules_for_test")
    monkeypatch.setattr(backend_kinds, "KINDS", tuple(cpu if k.family == "cpu" else k for k in backend_kinds.KINDS))
    monkeypatch.setattr(preflight, "_RULES_OF", {})
    ctx = pyggml.Context()
    a = ctx.tensor("f32", (4,), "a")
    graph = pyggml.Graph(ctx).build_forward_expand(ctx.exp(ctx.neg(a)))
    backend = pyggml.cpu_backend(1)
    backend.alloc_tensors(ctx)
    a.set(np.zeros(4, np.float32))
    with pytest.raises(pyggml.GraphError, match="refused by the kind's own rules"):
        backend.compute(graph)
    assert seen == [2]


def test_the_build_reads_its_kinds_from_the_table():
    """CMakeLists.txt runs backend_kinds.py as a script for the kinds it reports built: one line per kind, and
    no second list of backends in the build (a new kind in KINDS is reported built when its option is on)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cmake = (root / "CMakeLists.txt").read_text()
    assert '"${Python_EXECUTABLE}" -I "${CMAKE_CURRENT_SOURCE_DIR}/pyggml/backend_kinds.py"' in cmake
    # as the build runs it, and without site (which may have imported Python's `types` already): run from its
    # folder without -I, pyggml/types.py shadowed Python's own and a fresh environment's build failed
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(root / "pyggml" / "backend_kinds.py")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-1000:]
    lines = out.stdout.split("\n")
    assert [line.split() for line in lines if line] == [[k.family, k.cmake_option] for k in backend_kinds.KINDS]
    assert not re.search(r"foreach\(\w+ [^)]*\b(VULKAN|vulkan)\b[^)]*\b(CUDA|cuda)\b", cmake)
    assert set(pyggml.build_info()["backends"]) <= {k.family for k in backend_kinds.KINDS}
