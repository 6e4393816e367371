"""A second pyggml, built with some of our patches left out, for the tests that show what a patch does
(`@pytest.mark.rebuild`: opt-in, CI runs them). CPU only and portable, the options of the wheel's build
and of scripts/python_versions.sh's, so that with a compiler cache only the sources the left-out patches
touch compile again. One build folder per interpreter, reused by later runs and shared by the tests: it
leaves out every patch one of them needs left out (LEFT_OUT), since none of those patches matters to the
others' tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = {
    # the seed, both halves (tests/test_seed_patch.py)
    "seed": "0001-meta-split-permuted-view.patch,0001-seed-delta-net-host-slot-index.patch",
    # the RPC server's graph checks and answers: upstream's server (tests/test_rpc_protocol.py)
    "rpc": "0023-rpc-server-graph-validation.patch,0030-rpc-protocol-7.0-for-stock-clients.patch",
}


def pyggml_without_patches(into: Path) -> Path:
    """`pyggml_without` every patch of LEFT_OUT, in build/without-patches-<interpreter>."""
    return pyggml_without(",".join(LEFT_OUT.values()), "without-patches", into)


def pyggml_without(patches: str, name: str, into: Path) -> Path:
    """Build pyggml with `patches` (comma-separated file names) left out, in build/NAME-<interpreter>, and
    lay its package out under `into`; returns the folder to put first on sys.path (or run `-m` from)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is needed to build pyggml without a patch")
    # one folder per interpreter: CMake keeps the Python it found in its cache, and a folder configured by
    # another Python version fails to configure ("Could NOT find Python (missing: Development.Module)")
    build = ROOT / "build" / f"{name}-{sys.implementation.cache_tag}"
    configure = [
        cmake,
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DPYGGML_SKIP_PATCHES={patches}",
        f"-DPython_EXECUTABLE={sys.executable}",
        "-DGGML_VULKAN=OFF",
        "-DGGML_CUDA=OFF",
        "-DPYGGML_PORTABLE=ON",
        "-DPYGGML_CPU_VARIANTS=none",
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build), "--target", "_pyggml_cffi", "--parallel"]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pkg = into / "pyggml"
    shutil.copytree(ROOT / "pyggml", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for f in build.glob("_pyggml_cffi*.so"):
        shutil.copy(f, pkg)
    for generated in ("_build_info.json", "cdef.h"):  # what the package build installs next to the module
        shutil.copy(build / "generated" / generated, pkg)
    return into
