"""Types: pyggml ships `py.typed` and generated stubs of its C layer, the op methods of Context
are an explicit registry (no setattr), and mypy passes over pyggml/, tests/ and the code of the
example notebooks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyggml import lib, ops
from pyggml._native import install_dir
from pyggml.context import Context
from pyggml.ops.methods import OpMethods

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def test_every_op_wrapper_is_a_method_of_context_through_the_registry():
    listed = {n for n in vars(OpMethods) if not n.startswith("_")}
    assert listed == set(ops.__all__)
    for name in ops.__all__:
        assert vars(OpMethods)[name] is getattr(ops, name)
        assert getattr(Context, name) is getattr(ops, name)
        assert name not in vars(Context)  # inherited from the registry, not set on the class
    assert len(ops.__all__) >= 160


def test_the_name_lists_are_generated():
    """The families' __all__ and pyggml/ops/methods.py are what tools/gen_methods.py derives from the code."""
    import runpy

    gen_methods = runpy.run_path(str(ROOT / "tools" / "gen_methods.py"))
    stale = [str(p.relative_to(ROOT)) for p in gen_methods["stale"]()]
    assert not stale, f"{stale} differ from what they are generated from: run python tools/gen_methods.py"


def test_the_package_is_typed_and_its_c_layer_has_a_stub():
    package = Path(ops.__file__).resolve().parent.parent
    assert (package / "py.typed").is_file()
    stub = (install_dir() / "_pyggml_cffi.pyi").read_text()
    declared = set(re.findall(r"^    def (\w+)\(", stub, flags=re.M))
    constants = set(re.findall(r"^    (\w+): int$", stub, flags=re.M))
    functions = {n for n in dir(lib) if callable(getattr(lib, n))}
    assert declared == functions
    assert {"GGML_MAX_DIMS", "GGML_TYPE_Q8_0", "GGML_OP_MUL_MAT"} <= constants
    assert "def ggml_add(self, ctx: CData, a: CData, b: CData, /) -> CData: ..." in stub
    enums = (install_dir() / "_enums.pyi").read_text()
    assert "class Type(enum.IntEnum):" in enums and "    Q8_0 = 8" in enums


def notebook_code(tmp: Path) -> list[Path]:
    """Each notebook's code cells as one module (IPython's % and ! lines left out)."""
    import nbformat

    out = []
    for path in sorted(EXAMPLES.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [
            "\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            for c in nb.cells
            if c.cell_type == "code"
        ]
        module = tmp / f"notebook_{path.stem}.py"
        module.write_text("\n\n".join(cells) + "\n")
        out.append(module)
    return out


def test_mypy_passes(tmp_path):
    pytest.importorskip("mypy")
    pytest.importorskip("nbformat")
    if not (ROOT / "pyggml" / "_pyggml_cffi.pyi").is_file():
        pytest.fail(
            "pyggml/_pyggml_cffi.pyi is missing: an editable install (pip install -e .) puts the generated stubs there"
        )
    notebooks = notebook_code(tmp_path)
    env = dict(os.environ, MYPY_FORCE_COLOR="0")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "pyggml", "tests", *map(str, notebooks)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _public_functions():
    """Every public function of pyggml's modules and every public method (and __init__) of their public
    classes, as (qualified name, function)."""
    import importlib
    import inspect
    import pkgutil

    import pyggml

    names = ["pyggml"] + [m.name for m in pkgutil.walk_packages(pyggml.__path__, "pyggml.")]
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("_") or getattr(value, "__module__", None) != name:
                continue
            if inspect.isfunction(value):
                yield f"{name}.{attr}", value
            elif inspect.isclass(value):
                for member, mv in vars(value).items():
                    if member.startswith("_") and member != "__init__":
                        continue
                    fn = mv.fget if isinstance(mv, property) else getattr(mv, "__func__", mv)
                    if inspect.isfunction(fn) and fn.__module__ == name:
                        yield f"{name}.{attr}.{member}", fn


def test_every_public_function_is_annotated():
    """Every parameter (ctx included) and every return of the public API has a type annotation."""
    import inspect

    missing = []
    for qual, fn in _public_functions():
        sig = inspect.signature(fn)
        params = [
            p.name
            for p in sig.parameters.values()
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
        ]
        if params or sig.return_annotation is inspect.Signature.empty:
            missing.append(
                f"{qual}({', '.join(params)})" + (" -> ?" if sig.return_annotation is inspect.Signature.empty else "")
            )
    assert not missing, f"{len(missing)} public functions lack annotations:\n" + "\n".join(missing)
