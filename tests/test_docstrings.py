"""Every public name of pyggml has a real docstring in one style, and the API reference shows every public module.

Public: the modules of the API reference (`MODULES`, one page each under docs/api/); every other module of
the package (its walk, no name with a leading underscore) is listed in `INTERNAL` with the reason, so a new
module gets a page or is said to be internal. In each module the names of its `__all__`, else the classes and functions it defines without a leading underscore; in each
public class the methods and properties it defines itself (not inherited, no leading underscore).

A real docstring is not empty, says something (`MIN_WORDS` words at least) and is not a bare echo of the C
call. The style is Google's, what the reference (mkdocstrings) renders: a function or method with
parameters has an `Args:` section naming each of them, and one that returns something a `Returns:`
section; a class whose constructor takes arguments names them in its own docstring's `Args:` (or, for a
dataclass, its fields under `Attributes:`). The op wrappers of `pyggml.ops` are the exception: their
docstrings use ggml's notation (`a: ne [K, M]`, `Result:`, `Precision:`; pyggml/ops/__init__.py), and
tests/test_docs.py checks that each names its parameters.

The reference itself is built by `mkdocs build --strict` (docs/reference.md, "API reference"; .ci/run runs it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
API_DOCS = ROOT / "docs" / "api"

# the public modules, each with its page of the reference (docs/api/<path>.md shows it with `::: module`)
MODULES = {
    "pyggml": "pyggml.md",
    "pyggml.context": "context.md",
    "pyggml.tensor": "tensor.md",
    "pyggml.graph": "graph.md",
    "pyggml.runner": "runner.md",
    "pyggml.optim": "optim.md",
    "pyggml.opt": "opt.md",
    "pyggml.backend": "backend.md",
    "pyggml.ops": "ops.md",
    "pyggml.ops.elementwise": "ops.md",
    "pyggml.ops.reductions": "ops.md",
    "pyggml.ops.matmul": "ops.md",
    "pyggml.ops.attention": "ops.md",
    "pyggml.ops.recurrent": "ops.md",
    "pyggml.ops.convolution": "ops.md",
    "pyggml.ops.movement": "ops.md",
    "pyggml.ops.training": "ops.md",
    "pyggml.ops.declared": "ops.md",
    "pyggml.meta": "meta.md",
    "pyggml.rpc": "rpc.md",
    "pyggml.gguf": "gguf.md",
    "pyggml.llama": "llama.md",
    "pyggml.conversation": "conversation.md",
    "pyggml.drift": "drift.md",
    "pyggml.node_reader": "node_reader.md",
    "pyggml.threads": "threads.md",
    "pyggml.cpu_variants": "cpu_variants.md",
    "pyggml.cpu_features": "cpu_variants.md",
    "pyggml.target": "target.md",
    "pyggml.types": "types.md",
    "pyggml.errors": "errors.md",
    "pyggml.lifetime": "lifetime.md",
    "pyggml.serial": "serial.md",
    "pyggml.parent": "parent.md",
    "pyggml.transport": "transport.md",
    "pyggml.graph_draw": "graph_draw.md",
    "pyggml.graph_dot": "graph_dot.md",
    "pyggml.profile": "profile.md",
    "pyggml.interop": "interop.md",
    "pyggml.models": "models.md",
    "pyggml.models.conv_state": "models/conv_state.md",
    "pyggml.models.delta_net": "models/delta_net.md",
    "pyggml.models.llama_twin": "models/llama_twin.md",
    "pyggml.models.make_model": "models/make_model.md",
    "pyggml.models.llama_archs": "models/llama_archs.md",
    "pyggml.models.imatrix": "models/imatrix.md",
    "pyggml.testing": "testing.md",
    "pyggml.testing.assertions": "testing.md",
    "pyggml.testing.pytest_plugin": "testing/pytest_plugin.md",
    "pyggml.testing.check": "testing/check.md",
    "pyggml.testing.engine.nodes": "testing/nodes.md",
    "pyggml.testing.engine.oracles.conv_state": "testing/oracles.md",
    "pyggml.testing.engine.oracles.delta_net": "testing/oracles.md",
}
# the modules that are not public API: the machinery behind the public modules and `python -m pyggml`.
# A module of pyggml (pkgutil's walk, no part of its name with a leading underscore) is in MODULES or here.
INTERNAL = {
    # generated (tools/gen_methods.py): Context's op methods, the wrappers of pyggml.ops' page
    "pyggml.ops.methods",
    # floors under a public face: Context's pool (its page shows Arena's methods as Context's) and the RPC
    # client's state (re-exported by pyggml.rpc)
    "pyggml.arena",
    "pyggml.rpc_link",
    # the table of backend kinds the device lookup, check and info read (docs/layout.md, "Backend kinds")
    "pyggml.backend_kinds",
    # the checks every compute runs before ggml sees a graph: what they refuse is raised as GraphError or
    # Unsupported by the Runner, Backend and Scheduler calls (docs/errors.md)
    "pyggml.preflight",
    "pyggml.preflight.core",
    "pyggml.preflight.cpu",
    "pyggml.preflight.meta",
    "pyggml.preflight.rpc",
    "pyggml.preflight.vulkan",
    # the differential suite's machinery, used through `python -m pyggml check` (docs/suite.md) and
    # pyggml.testing.check: the op database, the cases, the one verdict, grad and perf modes, guard bytes,
    # worker processes, JUnit, coverage, llama.cpp's forward pass checked, reproducers
    # the two packages the suite groups its engine and its fuzzers in (pyggml.testing's docstring)
    "pyggml.testing.engine",
    "pyggml.testing.check_options",
    "pyggml.testing.fuzzers",
    "pyggml.testing.engine.opdb",
    "pyggml.testing.engine.opdb.attention",
    "pyggml.testing.engine.opdb.convolution",
    "pyggml.testing.engine.opdb.elementwise",
    "pyggml.testing.engine.opdb.hints",
    "pyggml.testing.engine.opdb.matmul",
    "pyggml.testing.engine.opdb.movement",
    "pyggml.testing.engine.opdb.recurrent",
    "pyggml.testing.engine.opdb.reductions",
    "pyggml.testing.engine.opdb.training",
    "pyggml.testing.engine.cases",
    "pyggml.testing.engine.cases.conv_state",
    "pyggml.testing.engine.cases.delta_net",
    "pyggml.testing.engine.verdict",
    "pyggml.testing.engine.grad",
    "pyggml.testing.engine.perf",
    "pyggml.testing.engine.guard",
    "pyggml.testing.engine.workers",
    "pyggml.testing.engine.session",
    "pyggml.testing.engine.twin_check",
    "pyggml.testing.engine.findings",
    "pyggml.testing.engine.tbo",
    "pyggml.testing.engine.junit",
    "pyggml.testing.coverage",
    "pyggml.testing.compare",
    "pyggml.testing.engine.model_check",
    "pyggml.testing.engine.repro",
    "pyggml.testing.engine.projected",
    "pyggml.testing.engine.spread",
    # the op oracles: the suite's NumPy side of each op spec (docs/suite.md); the models' references
    # (conv_state, delta_net) are public
    "pyggml.testing.engine.oracles",
    "pyggml.testing.engine.oracles.attention",
    "pyggml.testing.engine.oracles.convolution",
    "pyggml.testing.engine.oracles.elementwise",
    "pyggml.testing.engine.oracles.matmul",
    "pyggml.testing.engine.oracles.dot_rounding",
    "pyggml.testing.engine.oracles.movement",
    "pyggml.testing.engine.oracles.recurrent",
    "pyggml.testing.engine.oracles.reductions",
    "pyggml.testing.engine.oracles.training",
    # the fuzzers (`python -m pyggml fuzz | meta-fuzz | gguf-fuzz | rpc-fuzz`, docs/fuzzing.md), ggml-rpc's
    # wire protocol they speak and the RPC graph attacks, and the child-process runner they share
    "pyggml.testing.fuzzers.fuzz",
    "pyggml.testing.fuzzers.meta_fuzz",
    "pyggml.testing.fuzzers.script_fuzz",
    "pyggml.testing.fuzzers.gguf_fuzz",
    "pyggml.testing.fuzzers.rpc_fuzz",
    "pyggml.testing.fuzzers.rpc_wire",
    "pyggml.testing.fuzzers.rpc_attacks",
    "pyggml.testing.engine.child",
    # `python -m pyggml notebooks`: the example notebooks re-executed and compared (examples/README.md)
    "pyggml.testing.notebooks",
}
# the op wrappers: documented in ggml's notation, not Google's (see above)
OP_FAMILIES = {m for m in MODULES if m.startswith("pyggml.ops.")}
# pyggml's C layer: generated from ggml's headers and documented there (pyggml.md describes them)
RAW = {"pyggml.ffi", "pyggml.lib", "pyggml.checked"}

# private modules whose names are public in another: ggml's enums are pyggml.types'
PUBLIC_HOME = {"pyggml._enums": "pyggml.types"}

MIN_WORDS = 4
_ECHO = re.compile(r"^\s*ggml_\w+\s*\((ctx)?[\w\s,]*\)\s*\.?\s*$")
_SECTION = re.compile(r"^(\w[\w ]*):\s*$")


def _import(name: str) -> Any:
    """The module, or None for pyggml.llama in a build without libllama (PYGGML_LLAMA=OFF)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if name == "pyggml.llama" and "without libllama" in str(e):
            return None
        raise


def _function(obj: Any) -> Any:
    """The function behind a method, property, classmethod, staticmethod or pytest fixture."""
    if isinstance(obj, property):
        return obj.fget
    if isinstance(obj, functools.cached_property):
        return obj.func
    obj = getattr(obj, "__func__", obj)
    wrapped = getattr(obj, "_get_wrapped_function", None)  # a pytest fixture (pytest >= 8.4)
    return wrapped() if callable(wrapped) else obj


def _doc(obj: Any) -> str:
    """obj's own docstring (inspect.getdoc would fall back on a base class's)."""
    return inspect.cleandoc(getattr(_function(obj), "__doc__", None) or "")


def _sections(doc: str) -> dict[str, list[str]]:
    """Google-style sections: title -> the lines under it (the summary and body under "")."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in doc.splitlines():
        m = _SECTION.match(line)
        if m and not line.startswith(" "):
            current = m.group(1)
            out[current] = []
        else:
            out[current].append(line)
    return out


def _named(lines: list[str]) -> set[str]:
    """The names a section's items give (`name: description` or `name (type): description`)."""
    found = set()
    for line in lines:
        m = re.match(r"^    (\*{0,2}\w+)(\s*\([^)]*\))?:", line)
        if m:
            found.add(m.group(1).lstrip("*"))
    return found


def _parameters(fn: Any, skip_first: bool) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    if skip_first and params:
        params = params[1:]
    return [p.name for p in params]


def _returns_something(fn: Any) -> bool:
    try:
        ann = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return False
    return ann not in (inspect.Signature.empty, None, "None", type(None))


def problem(obj: Any, kind: str, google: bool = True) -> str | None:
    """Why obj's docstring is not a real one in the reference's style (None when it is).

    kind: "module", "class", "function", "method" (its first parameter is self or cls), "property".
    """
    doc = _doc(obj)
    if not doc.strip():
        return "no docstring"
    if _ECHO.match(doc):
        return f"a bare echo of the C call: {doc.strip()!r}"
    if len(doc.split()) < MIN_WORDS:
        return f"too short to say anything: {doc.strip()!r}"
    if not google or kind in ("module", "property"):
        return None
    sections = _sections(doc)
    if kind == "class":
        init = vars(obj).get("__init__")
        generated = init is not None and getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"
        if dataclasses.is_dataclass(obj) and (init is None or generated):
            fields = {f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")}
            said = _named(sections.get("Attributes", [])) | _named(sections.get("Args", []))
            missing = sorted(fields - said)
            return f"Attributes: does not name {', '.join(missing)}" if missing else None
        if init is None or not inspect.isfunction(init):
            return None  # the constructor comes from a base: documented there
        fn, skip_first = init, True
    else:
        fn, skip_first = _function(obj), kind == "method"
    params = _parameters(fn, skip_first)
    if params:
        if "Args" not in sections:
            return f"no Args: section for {', '.join(params)}"
        missing = [p for p in params if p not in _named(sections["Args"])]
        if missing:
            return f"Args: does not name {', '.join(missing)}"
    if kind != "class" and _returns_something(fn) and "Returns" not in sections and "Yields" not in sections:
        return "no Returns: section"
    return None


def _public_names(module: Any) -> list[str]:
    """Its `__all__`; else what it defines, and what it re-exports from a private module whose public home
    it is (`PUBLIC_HOME`)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    out = []
    for n, v in vars(module).items():
        home = getattr(_function(v), "__module__", None) or ""
        if n.startswith("_") or not (inspect.isclass(v) or callable(v)):
            continue
        if home == module.__name__ or PUBLIC_HOME.get(home) == module.__name__:
            out.append(n)
    return out


def _members(cls: type) -> Iterator[tuple[str, Any, str]]:
    """(name, object, kind) of the public methods and properties cls defines, or a base of it in an internal
    floor module does (Context's Arena): a user meets them on cls."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is cls or klass.__module__ in INTERNAL - {"pyggml.ops.methods"}:
            found.update(vars(klass))
    for name, value in found.items():
        if name.startswith("_"):
            continue
        if isinstance(value, (property, functools.cached_property)):
            yield name, value, "property"
        elif isinstance(value, staticmethod):
            yield name, value, "function"
        elif isinstance(value, classmethod) or inspect.isfunction(value):
            yield name, value, "method"


def walk() -> Iterator[tuple[str, Any, str, bool]]:
    """(qualified name, object, kind, Google style expected) of every public name, each once."""
    seen: set[int] = set()
    for modname in MODULES:
        module = _import(modname)
        if module is None:
            continue
        google = modname not in OP_FAMILIES
        yield modname, module, "module", google
        for name in _public_names(module):
            qual = f"{modname}.{name}"
            obj = getattr(module, name)
            if qual in RAW or inspect.ismodule(obj) or id(obj) in seen:
                continue
            if not (inspect.isclass(obj) or callable(obj)) or type(obj).__module__ == "typing":
                continue  # a constant or a type alias: no docstring of its own at run time
            seen.add(id(obj))
            if getattr(_function(obj), "__module__", "").startswith("pyggml.ops"):
                google = False  # an op wrapper, wherever it is listed
            if not inspect.isclass(obj):
                yield qual, obj, "function", google
                continue
            yield qual, obj, "class", google
            if issubclass(obj, BaseException):
                continue
            for mname, member, kind in _members(obj):
                fn = _function(member)
                if id(fn) in seen:
                    continue
                seen.add(id(fn))
                op = getattr(fn, "__module__", "").startswith("pyggml.ops")
                yield f"{qual}.{mname}", member, kind, google and not op


def offenders() -> list[str]:
    out = []
    for qual, obj, kind, google in walk():
        why = problem(obj, kind, google)
        if why:
            out.append(f"{qual}: {why}")
    return out


def test_every_public_name_has_a_real_docstring():
    bad = offenders()
    assert not bad, f"{len(bad)} public names without a real docstring (Google style: Args, Returns):\n" + "\n".join(
        bad
    )


def test_the_walk_sees_the_public_surface():
    """The walk reaches what a user meets: top-level names, methods, properties, functions of each module."""
    walked = {q for q, *_ in walk()}
    for name in (
        "pyggml.Context",
        "pyggml.Context.tensor",
        "pyggml.Tensor.shape",
        "pyggml.Tensor.set",
        "pyggml.Runner.run",
        "pyggml.Scheduler.observe",
        "pyggml.gguf.load",
        "pyggml.meta.Split.even",
        "pyggml.rpc.Server.stop",
        "pyggml.ops.mul_mat",
        "pyggml.testing.assert_close",
        "pyggml.testing.check.run_check",
        "pyggml.testing.pytest_plugin.ggml_runner",
        "pyggml.models.delta_net.DeltaNet.step",
        "pyggml.Type",
        "pyggml.types.Status",
    ):
        assert name in walked, name
    assert len(walked) > 400


@pytest.mark.parametrize(
    "doc, kind, bad",
    [
        (None, "function", "no docstring"),
        ("short one", "function", "too short"),
        ("ggml_gelu(ctx, a)", "function", "echo"),
        ("Add two numbers, exactly.\n\nArgs:\n    a: one.\n\nReturns:\n    The sum.", "function", "does not name b"),
        ("Add two numbers, exactly.\n\nArgs:\n    a: one.\n    b: the other.", "function", "no Returns"),
        ("Add two numbers, exactly.", "function", "no Args"),
        (
            "Add two numbers, exactly.\n\nArgs:\n    a: one.\n    b (int): the other.\n\nReturns:\n    The sum.",
            "function",
            None,
        ),
        ("The sum of the two numbers.", "property", None),
    ],
)
def test_the_check_itself(doc, kind, bad):
    def f(a: int, b: int) -> int:
        return a + b

    f.__doc__ = doc
    obj: Any = property(f) if kind == "property" else f
    why = problem(obj, kind)
    assert (why is None) if bad is None else (why is not None and bad.split()[-1] in why), why


# --- every module public with its page, or internal ---------------------------------------------------
def _package_modules() -> list[str]:
    """Every module of the pyggml package, from pkgutil's walk, but those with a part of their name that
    starts with an underscore (`pyggml._native`, `pyggml.__main__`)."""
    import pyggml

    found = []
    for info in pkgutil.walk_packages(pyggml.__path__, "pyggml.", onerror=_walk_error):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(set(found))


def _walk_error(name: str) -> None:
    raise ImportError(f"pkgutil could not import the package {name} to walk it")


def test_every_module_is_documented_or_internal():
    modules = _package_modules()
    neither = [m for m in modules if m not in MODULES and m not in INTERNAL]
    assert not neither, (
        "modules neither in the API reference (MODULES, with a page under docs/api/) nor listed as internal "
        "(INTERNAL, with the reason): " + ", ".join(neither)
    )
    assert not MODULES.keys() & INTERNAL, "both public and internal: " + ", ".join(sorted(MODULES.keys() & INTERNAL))
    gone = sorted((set(MODULES) | INTERNAL) - set(modules) - {"pyggml"})
    assert not gone, "listed, but not modules of pyggml: " + ", ".join(gone)


# --- the reference: a page per module, every page in the navigation -------------------------------------
def _directives() -> dict[str, set[str]]:
    """page (relative to docs/api) -> the identifiers its `::: identifier` lines render."""
    out: dict[str, set[str]] = {}
    for page in API_DOCS.rglob("*.md"):
        found = re.findall(r"^:::\s*(\S+)", page.read_text(), flags=re.M)
        out[page.relative_to(API_DOCS).as_posix()] = set(found)
    return out


def test_every_module_has_its_page():
    pages = _directives()
    missing = [f"{m} (docs/api/{p})" for m, p in MODULES.items() if m not in pages.get(p, set())]
    assert not missing, "modules the reference does not show: " + ", ".join(missing)


def test_every_page_renders_what_exists_and_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page, identifiers in _directives().items():
        assert f"api/{page}" in nav, f"docs/api/{page} is not in mkdocs.yml's nav"
        for ident in identifiers:
            module, _, attr = ident.partition(":")  # no colon syntax is used; a module or module.attr
            try:
                importlib.import_module(module)
                continue
            except ImportError:
                parent, _, name = ident.rpartition(".")
                if _import(parent) is None:
                    continue
                assert hasattr(importlib.import_module(parent), name), f"docs/api/{page}: no {ident}"
    for guide in (ROOT / "docs").glob("*.md"):
        assert guide.name in nav, f"docs/{guide.name} is not in mkdocs.yml's nav"
