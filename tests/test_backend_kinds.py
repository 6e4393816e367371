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
