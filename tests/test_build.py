"""The build: the generated C layer covers ggml's public API, ggml's log and aborts reach Python."""

import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyggml
from pyggml import lib
from pyggml._native import build_info, install_dir

ROOT = Path(__file__).resolve().parent.parent

# Functions ggml 0.25.3 declares in a public header but never defines. Pinned: a new entry
# means the build lost a function, and must be looked at.
DECLARED_NOT_DEFINED = {"ggml_threadpool_get_n_threads"}


def public_functions() -> set[str]:
    names = set()
    for header in build_info()["headers"]:
        text = (install_dir() / "include" / header).read_text()
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)  # the macros that define GGML_API itself
        text = re.sub(r"\bDEPRECATED\(", "(", text)  # llama.h: `LLAMA_API DEPRECATED(size_t f(...), "hint")`
        for m in re.finditer(r"\b(?:GGML_API|GGML_BACKEND_API|LLAMA_API)\b([^;{]*?)\b(\w+)\s*\(", text):
            names.add(m.group(2))
    return names


def test_every_public_function_is_callable_from_lib():
    names = public_functions()
    assert len(names) > 400  # ggml.h alone declares several hundred
    missing = sorted(n for n in names if not callable(getattr(lib, n, None)) and n not in DECLARED_NOT_DEFINED)
    assert missing == []
    assert set(build_info()["declared_not_defined"]) == DECLARED_NOT_DEFINED


def test_headers_of_every_built_backend_are_exposed():
    info = build_info()
    assert "cpu" in info["backends"]
    for b in info["backends"]:
        if b != "cpu":
            assert f"ggml-{b}.h" in info["headers"]
    assert lib.GGML_MAX_DIMS == 4 and lib.GGML_MAX_NAME == 64


def test_no_ggml_source_is_tracked():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    ggml_like = [
        f
        for f in files
        if Path(f).name in {"ggml.c", "ggml.h", "ggml-backend.cpp", "ggml-cpu.c"}
        or "/ggml-cpu/" in f
        or f.endswith((".cu", ".comp"))
    ]
    assert ggml_like == []
    assert all(f.startswith("vendor/ggml/") is False or f.endswith((".patch", ".toml", ".md")) for f in files)
    # nor llama.cpp's (tools/fetch_ggml.py --llama-dest extracts it from the same pinned sdist)
    assert [f for f in files if Path(f).name in {"llama.h", "llama.cpp", "llama-model.cpp"}] == []
    assert all(not f.startswith("vendor/llama/") or f.endswith((".patch", ".md")) for f in files)


def test_patches_have_headers():
    series = [ROOT / "vendor" / "ggml" / "patches", ROOT / "vendor" / "llama" / "patches"]
    for patch in sorted(p for d in series for p in d.glob("*.patch")):
        head = patch.read_text().split("\n--- ", 1)[0]
        assert head.startswith("Subject: "), patch.name
        assert "Why:" in head and "What:" in head, patch.name


def test_ggml_log_goes_to_python_logging(caplog):
    ctx = pyggml.Context()
    a = ctx.tensor("f32", (4,), "a")
    graph = pyggml.Graph(ctx).build_forward_expand(ctx.relu(a))
    with caplog.at_level(logging.DEBUG, logger="pyggml.ggml"):
        lib.ggml_graph_print(graph.ptr)
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "pyggml.ggml")
    assert "=== GRAPH ===" in text and "UNARY" in text and "n_leafs = 1" in text


def test_an_abort_in_ggml_prints_the_python_call_site(tmp_path):
    script = tmp_path / "abort_here.py"
    script.write_text(
        textwrap.dedent("""
        from pyggml import ffi, lib
        ctx = lib.ggml_init({"mem_size": 1 << 20, "mem_buffer": ffi.NULL, "no_alloc": True})
        a = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, 4, 3)
        t = lib.ggml_transpose(ctx, a)
        lib.ggml_reshape_1d(ctx, t, 12)   # the raw layer does not check: ggml asserts contiguity
    """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0
    assert "ggml aborted" in proc.stderr and "ggml_is_contiguous" in proc.stderr
    assert f'File "{script}", line 6' in proc.stderr


def test_cpu_threads_default_to_the_cores():
    assert pyggml.cpu_backend().n_threads == os.cpu_count()
    assert pyggml.Runner("cpu").backend.n_threads == os.cpu_count()
