"""The CUDA wheel (scripts/build_cuda_wheel.sh) on a machine without a GPU: it installs into a fresh virtual
environment, imports without a driver, says CUDA is built and lists no CUDA device, and its CPU backend
passes its cases.

The wheel is PYGGML_CUDA_WHEEL (a path), else the one build_cuda_wheel.sh left in build/cuda/wheelhouse;
without either these tests are skipped (building one takes an hour or more on a small machine). It is
installed offline from the wheels beside it (cffi, pycparser, numpy) and the toolkit's (nvidia-cublas, from
build/cuda/toolkit-wheels or PYGGML_CUDA_WHEEL_LINKS), with the Python the wheel is for (python3.12 on
PATH, or pyenv's).

The first test, of tools/retag_wheel.py (the CUDA wheel's metadata), always runs.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("retag_wheel", ROOT / "tools" / "retag_wheel.py")
assert _spec is not None and _spec.loader is not None
retag_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(retag_wheel)

SYSTEM_LIBRARIES = re.compile(r"(libc|libm|libdl|libpthread|librt|ld-linux[-\w]*)\.so(\.[\d.]+)?")


def test_retag_gives_a_local_version_and_requirements_and_keeps_the_rest(tmp_path):
    wheel = tmp_path / "demo-1.2.0-cp312-cp312-linux_x86_64.whl"
    info = "demo-1.2.0.dist-info"
    metadata = "Metadata-Version: 2.1\nName: demo\nVersion: 1.2.0\nRequires-Dist: numpy>=1.24\n\n# demo\n\nText.\n"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo/__init__.py", "x = 1\n")
        z.writestr("demo/_mod.so", b"\x7fELF binary")
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: cp312-cp312-linux_x86_64\n")
        z.writestr(f"{info}/RECORD", "stale\n")
    out = retag_wheel.retag(wheel, tmp_path / "out", "cu130", ["nvidia-cublas>=13.0,<14"])
    assert out.name == "demo-1.2.0+cu130-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert names == {
            "demo/__init__.py",
            "demo/_mod.so",
            "demo-1.2.0+cu130.dist-info/METADATA",
            "demo-1.2.0+cu130.dist-info/WHEEL",
            "demo-1.2.0+cu130.dist-info/RECORD",
        }
        assert z.read("demo/_mod.so") == b"\x7fELF binary"
        meta = z.read("demo-1.2.0+cu130.dist-info/METADATA").decode()
        assert meta == (
            "Metadata-Version: 2.1\nName: demo\nVersion: 1.2.0+cu130\nRequires-Dist: numpy>=1.24\n"
            "Requires-Dist: nvidia-cublas>=13.0,<14\n\n# demo\n\nText.\n"
        )
        for line in z.read("demo-1.2.0+cu130.dist-info/RECORD").decode().splitlines():
            path, digest, size = line.split(",")
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))
    with pytest.raises(ValueError, match="already has a local version"):
        retag_wheel.retag(out, tmp_path / "again", "cu130", [])


def _the_wheel() -> Path | None:
    if os.environ.get("PYGGML_CUDA_WHEEL"):
        return Path(os.environ["PYGGML_CUDA_WHEEL"]).resolve()
    built = sorted((ROOT / "build" / "cuda" / "wheelhouse").glob("pyggml-*+cu*.whl"))
    return built[-1] if built else None


def _python_for(wheel: Path) -> str | None:
    """An interpreter of the wheel's CPython version: this one, pythonX.Y on PATH, or pyenv's."""
    tag = re.search(r"-cp(\d)(\d+)-", wheel.name)
    if tag is None:
        return None
    version = f"{tag.group(1)}.{tag.group(2)}"
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(str(p) for p in Path(root).glob(f"versions/{version}*/bin/python{version}"))
    for c in candidates:
        if c and subprocess.run([c, "-c", ""], capture_output=True).returncode == 0:
            return c
    return None


WHEEL = _the_wheel()
pytestmark_wheel = pytest.mark.skipif(
    WHEEL is None or not WHEEL.is_file(),
    reason="no CUDA wheel: PYGGML_CUDA_WHEEL=path, or build one with scripts/build_cuda_wheel.sh",
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """A fresh virtual environment with the wheel installed offline; the environment to run it in."""
    assert WHEEL is not None
    python = _python_for(WHEEL)
    if python is None:
        pytest.skip(f"no Python for {WHEEL.name}")
    tmp = tmp_path_factory.mktemp("cuda-wheel")
    subprocess.run([python, "-m", "venv", str(tmp / "venv")], check=True)
    venv_python = tmp / "venv" / "bin" / "python"
    links = Path(os.environ.get("PYGGML_CUDA_WHEEL_LINKS", ROOT / "build" / "cuda" / "toolkit-wheels"))
    offline = ["--no-index"] if any(links.glob("nvidia_cublas-*.whl")) else []
    install = subprocess.run(
        [str(venv_python), "-m", "pip", "install", "-q", *offline, "--find-links", str(WHEEL.parent)]
        + ["--find-links", str(links), str(WHEEL)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    # the venv alone on PATH (no compiler, no nvcc), an empty home and build cache, no CUDA device
    env = {"PATH": str(venv_python.parent), "HOME": str(elsewhere), "LANG": "C.UTF-8"}
    env["PYGGML_CACHE_DIR"] = str(elsewhere / "cache")
    return venv_python, env


def _run(python: Path, env: dict, *args: str, cwd: Path | None = None, timeout: int = 600):
    return subprocess.run(
        [str(python), *args], cwd=cwd or env["HOME"], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytestmark_wheel
def test_the_cuda_module_needs_cublas_but_neither_the_driver_nor_the_runtime(tmp_path):
    assert WHEEL is not None
    assert WHEEL.stat().st_size < 64 * 2**20
    with zipfile.ZipFile(WHEEL) as z:
        (module,) = [n for n in z.namelist() if re.fullmatch(r"pyggml/_pyggml_cffi\..*\.so", n)]
        z.extract(module, tmp_path)
        meta = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    assert re.search(r"^Version: .*\+cu\d+$", meta, re.M)
    assert re.search(r"^Requires-Dist: nvidia-cublas", meta, re.M)
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / module)], capture_output=True, text=True, check=True
    ).stdout
    libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    cuda = [n for n in libraries if not SYSTEM_LIBRARIES.fullmatch(n)]
    assert sorted(cuda) in (["libcublas.so.13"], ["libcublas.so.13", "libcublasLt.so.13"]), libraries
    assert "$ORIGIN/../nvidia/cu13/lib" in dynamic


@pytestmark_wheel
def test_info_says_cuda_is_built_and_finds_no_device(installed):
    python, env = installed
    res = _run(python, env, "-m", "pyggml", "info", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert "cuda" in data["build"]["backends"]
    assert [d["backend"] for d in data["devices"]] == ["CPU"]
    features = data["backend_features"]["CUDA"]
    assert features["NO_VMM"] == "1" and re.fullmatch(r"\d+(,\d+)*", features["ARCHS"]), features
    text = _run(python, env, "-m", "pyggml", "info")
    assert text.returncode == 0 and "no CUDA device" in text.stdout, text.stdout + text.stderr


@pytestmark_wheel
def test_the_cpu_backend_of_the_cuda_wheel_passes(installed):
    python, env = installed
    report = Path(env["HOME"]) / "add.json"
    res = _run(python, env, "-m", "pyggml", "check", "--backend", "cpu", "-q", "--only", "add", "--json", str(report))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    records = json.loads(report.read_text())
    assert records and {r["status"] for r in records} <= {"pass", "unsupported"}
    assert not (Path(env["HOME"]) / "cache").exists()


@pytestmark_wheel
def test_installed_apart_from_cublas_it_loads_cublas_from_the_pip_packages_on_sys_path(installed, tmp_path):
    """As on a GPU machine whose Python has nvidia-cublas, with pyggml installed by `pip install --target`:
    the module's RUNPATH finds nothing beside it, pyggml loads cuBLAS from the NVIDIA packages on sys.path."""
    python, env = installed
    assert WHEEL is not None
    target = tmp_path / "site"
    res = _run(
        python, env, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(WHEEL)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    code = "import pyggml, sys; print(pyggml.__file__); print(sorted(pyggml.build_info()['backends']))"
    res = _run(python, dict(env, PYTHONPATH=str(target)), "-c", code)
    assert res.returncode == 0, res.stderr[-3000:]
    where, backends = res.stdout.splitlines()
    assert where.startswith(str(target)) and "cuda" in backends
