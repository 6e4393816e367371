"""pyggml's modules import each other without circles.

The graph is read from the source with `ast`: an edge for each module-level import of another pyggml
module (imports inside functions run later, when every module is loaded, and are not edges; neither are
those under `if TYPE_CHECKING:`). `from pyggml import x` is an edge to pyggml.x when x is a module,
else to the package. A module's own parent packages are loaded first by Python whatever it imports,
so they are not edges either. pyggml.testing is left out: it is the test suite's, not the library's.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pyggml"


def modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not name.startswith("pyggml.testing"):
            out[name] = f
    return out


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when the module is imported (into if/try blocks, not TYPE_CHECKING's)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for h in node.handlers:
                out += _top_level(h.body)
        else:
            out.append(node)
    return out


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _top_level(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in mods and t != name)
    return out


def compiled() -> set[str]:
    """The compiled modules (the cffi extension, known by its stub or its shared library): leaves."""
    return {f"pyggml.{f.name.split('.')[0]}" for f in [*ROOT.glob("*.pyi"), *ROOT.glob("*.so")]}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = {**dict.fromkeys(compiled(), ROOT), **mods}
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):  # a compiled module imports nothing of pyggml
            if state.get(m) == 1:
                return path[path.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:  # a new start: every module is visited once
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_is_read_from_the_source():
    graph = import_graph()
    assert "pyggml.tensor" in graph and "pyggml.testing.check" not in graph
    assert "pyggml.transport" in graph["pyggml.tensor"]  # tensor.py reports transfers there
    assert "pyggml.rpc" not in graph["pyggml.tensor"]


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_pyggml_imports_without_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_transport_imports_nothing_but_native_and_errors():
    assert import_graph()["pyggml.transport"] <= {"pyggml._native", "pyggml.errors"}
