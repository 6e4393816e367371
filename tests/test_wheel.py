"""The wheel: `pip wheel .` builds a self-contained wheel, and installed into a fresh virtual
environment, with no compiler on PATH and no build cache, it runs the CPU suite from anywhere.

The wheel is built for the CPU only (CMAKE_ARGS=-DGGML_VULKAN=OFF), whatever this machine's
development install was built with, in its own build folder (build/wheel-<tag>, so a second run
is incremental). Installing it fetches numpy and cffi like any `pip install`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.rebuild  # builds a wheel (tests/conftest.py: opt-in, CI runs it)
# what a portable module may need from the system: the C library and its parts
SYSTEM_LIBRARIES = re.compile(r"(libc|libm|libdl|libpthread|librt|ld-linux[-\w]*)\.so(\.[\d.]+)?")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # ggml's CPU variants: x64 and the best for this machine (PYGGML_CPU_VARIANTS=native), not the wheel's default
    # of all fourteen, whose builds cost CI minutes the two do not need to show how they are laid out and loaded
    env = dict(os.environ, CMAKE_ARGS="-DGGML_VULKAN=OFF -DGGML_CUDA=OFF -DPYGGML_CPU_VARIANTS=native")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = out.glob("pyggml-*.whl")
    return built


def test_the_wheel_holds_a_module_that_needs_only_the_c_library(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (module,) = [n for n in names if re.fullmatch(r"pyggml/_pyggml_cffi\..*\.so", n)]
        z.extract(module, tmp_path)
    for needed in (
        "pyggml/py.typed",
        "pyggml/_pyggml_cffi.pyi",
        "pyggml/_enums.pyi",
        "pyggml/_build_info.json",
        "pyggml/include/ggml.h",
        "pyggml/include/gguf.h",
        "pyggml/ops/methods.py",
    ):
        assert needed in names
    assert not any(n.startswith(("tests/", "build/")) for n in names)
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / module)], capture_output=True, text=True, check=True
    ).stdout
    libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert libraries and all(SYSTEM_LIBRARIES.fullmatch(name) for name in libraries), libraries
    # llama.cpp's generator of random models (make-model), an executable beside the module: as portable
    assert "pyggml/llama-archs" in names
    with zipfile.ZipFile(wheel) as z:
        z.extract("pyggml/llama-archs", tmp_path)
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / "pyggml" / "llama-archs")], capture_output=True, text=True, check=True
    ).stdout
    libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert libraries and all(SYSTEM_LIBRARIES.fullmatch(name) for name in libraries), libraries
    # ggml's CPU variants and their ggml-base: as portable, finding each other beside themselves
    variants = [n for n in names if n.startswith("pyggml/cpu_variants/") and n.endswith(".so")]
    assert "pyggml/cpu_variants/libggml-cpu-x64.so" in variants and "pyggml/cpu_variants/variants.json" in names
    for v in variants:
        with zipfile.ZipFile(wheel) as z:
            z.extract(v, tmp_path)
        dynamic = subprocess.run(["readelf", "-d", str(tmp_path / v)], capture_output=True, text=True).stdout
        libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        ours = [n for n in libraries if not SYSTEM_LIBRARIES.fullmatch(n)]
        assert ours in ([], ["libpyggml-cpu-base.so"]), (v, libraries)
        assert v.endswith("base.so") or "$ORIGIN" in dynamic


def test_the_wheel_runs_the_cpu_suite_from_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=900
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # only the venv on PATH: no compiler, no cmake; an empty home and build cache
    env = {
        "PATH": str(env_dir / "bin"),
        "HOME": str(elsewhere),
        "PYGGML_CACHE_DIR": str(elsewhere / "cache"),
        "LANG": "C.UTF-8",
    }
    where = subprocess.run(
        [str(python), "-c", "import pyggml, sys; print(pyggml.__file__); print(pyggml.build_info())"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(env_dir))
    check = subprocess.run(
        [str(python), "-m", "pyggml", "check", "--backend", "cpu", "-q", "--json", str(elsewhere / "records.json")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    import json

    records = json.loads((elsewhere / "records.json").read_text())
    statuses = {r["status"] for r in records}
    assert len(records) > 1500 and statuses <= {"pass", "unsupported"}, statuses
    # each CPU variant this machine runs, from the installed wheel
    variants = subprocess.run(
        [str(python), "-m", "pyggml", "check", "--backend", "cpu:all", "--only", "mul_mat/q4_k", "-q"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert variants.returncode == 0 and "cpu:x64" in variants.stdout, variants.stdout[-3000:] + variants.stderr[-3000:]
    # a portable build's cpu is the best variant this machine runs (its own CPU backend is built for AVX2)
    info = subprocess.run(
        [str(python), "-m", "pyggml", "info"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert "in use as cpu (and libllama's CPU): " in info.stdout and "(a portable build takes the best" in info.stdout
    # llama.cpp's generator, installed executable beside the module, writes a model llama.cpp decodes
    made = subprocess.run(
        [str(python), "-m", "pyggml", "make-model", "gpt2", str(elsewhere / "g.gguf")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0 and "(made by llama.cpp)" in made.stdout, made.stdout + made.stderr
    # nothing fetched or built: the cache holds at most the CPU variants' probe (pyggml.cpu_variants.probe)
    cached = sorted(p.name for p in (elsewhere / "cache").glob("*")) if (elsewhere / "cache").exists() else []
    assert cached in ([], ["cpu-variant-probes.json"]), cached
