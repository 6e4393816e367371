"""Patch 0001 (the seed's meta change) is needed: without it, the seed's graph aborts on the
meta backend with "view of permuted tensor not implemented".

A second, CPU-only pyggml is built with that patch left out (build/without-0001-cpython-3XX, one
per interpreter, reused by later runs) and the seed's graph runs in a child process on each build.
"""

import os
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCH = "0001-meta-split-permuted-view.patch"
SEED_GRAPH = textwrap.dedent("""
    import pyggml as gg
    from pyggml.testing.cases.conv_state import ConvStateCase
    case = ConvStateCase("host_index", "f32", 4)
    got = case.execute(gg.Runner("meta:cpu,cpu"))
    assert all((g == w).all() for g, w in zip(got, case.expected()))
    print("seed graph ran on meta:cpu,cpu")
""")


@pytest.fixture(scope="module")
def pyggml_without_patch(tmp_path_factory) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is needed to build pyggml without the patch")
    # one folder per interpreter: CMake keeps the Python it found in its cache, and a folder configured by
    # another Python version fails to configure ("Could NOT find Python (missing: Development.Module)")
    build = ROOT / "build" / f"without-0001-{sys.implementation.cache_tag}"
    configure = [
        cmake,
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DPYGGML_SKIP_PATCHES={PATCH}",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build), "--target", "_pyggml_cffi", "--parallel"]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pkg = tmp_path_factory.mktemp("without-0001") / "pyggml"
    shutil.copytree(ROOT / "pyggml", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for f in build.glob("_pyggml_cffi*.so"):
        shutil.copy(f, pkg)
    shutil.copy(build / "generated" / "_build_info.json", pkg)
    return pkg.parent


def run_seed_graph(pythonpath: Path | None) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    cmd = [sys.executable, "-c", SEED_GRAPH]
    if pythonpath is not None:
        # -S: no .pth files, so an installed pyggml cannot shadow the one in pythonpath
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *site.getsitepackages()])
        cmd.insert(1, "-S")
    # run outside the repository: `python -c` puts the working folder first on sys.path
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=300, cwd=pythonpath or tempfile.gettempdir()
    )


def test_the_seed_graph_needs_the_seed_patch(pyggml_without_patch):
    without = run_seed_graph(pyggml_without_patch)
    assert without.returncode != 0
    assert "view of permuted tensor not implemented" in without.stderr
    # refused in-process before compute (patch 0009), no longer a ggml abort
    assert "Unsplittable" in without.stderr and "ggml aborted" not in without.stderr
    with_patch = run_seed_graph(None)
    assert with_patch.returncode == 0, with_patch.stderr[-2000:]
    assert "seed graph ran on meta:cpu,cpu" in with_patch.stdout
