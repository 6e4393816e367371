"""pyggml's modules import in floors: every import that runs points down, or stays in its floor without a cycle.

The floors are docs/layout.md's table ("Floors"): a module is on the floor of the longest prefix that names
it. The graph is read from the source with `ast`: an edge for every import of another pyggml module, at a
module's top or inside a function, a class or a try block (they all run, sooner or later); only those
under `if TYPE_CHECKING:` are left out, and they may point up only through `ANNOTATIONS_UP`. `from pyggml
import x` is an edge to pyggml.x when x is a module, else to the package. A module's own parent packages
are loaded first by Python whatever it imports, so they are not edges.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pyggml"
LAYOUT = ROOT.parent / "docs" / "layout.md"

# (importer prefix, imported module): annotations that name a class of a floor above. Only shrinks: the
# test fails on an entry no module needs any more.
ANNOTATIONS_UP = {
    ("pyggml.ops", "pyggml.context"),  # every op's signature: ctx: Context
    ("pyggml.tensor", "pyggml.arena"),  # Tensor.ctx
    ("pyggml.lifetime", "pyggml.graph"),  # the graphs a lender lends to
    ("pyggml.graph", "pyggml.profile"),  # Graph.to_dot(profile=)
}


def modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def compiled() -> set[str]:
    """The compiled modules (the cffi extension, known by its stub or its shared library): leaves."""
    return {f"pyggml.{f.name.split('.')[0]}" for f in [*ROOT.glob("*.pyi"), *ROOT.glob("*.so")]}


def floors() -> list[tuple[str, list[str]]]:
    """docs/layout.md's floors, lowest first: (name, module prefixes)."""
    text = LAYOUT.read_text()
    table = text[text.index("| floor | modules |") :].split("\n\n")[0].splitlines()[2:]
    return [(row.split("|")[1].strip(), re.findall(r"`([\w.]+)`", row.split("|")[2])) for row in table]


def floor_of(name: str, table: list[tuple[str, list[str]]]) -> int | None:
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(table):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def _imports(tree: ast.Module) -> tuple[list[ast.Import | ast.ImportFrom], list[ast.Import | ast.ImportFrom]]:
    """(imports that run, imports under `if TYPE_CHECKING:`), anywhere in the module."""
    runs: list[ast.Import | ast.ImportFrom] = []
    annotations: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            (annotations if typing_only else runs).append(node)
        for sub in ast.iter_child_nodes(node):
            visit(sub, typing_only)

    visit(tree, False)
    return runs, annotations


def targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return {t for t in names if t in known and t != name and not name.startswith(t + ".")}


def import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(the imports that run, the annotation-only ones) of every module, as edges between modules."""
    mods = modules()
    known = set(mods) | compiled()
    runs: dict[str, set[str]] = {}
    annotations: dict[str, set[str]] = {}
    for name, path in mods.items():
        r, a = _imports(ast.parse(path.read_text()))
        runs[name] = set().union(*(targets(name, path, n, known) for n in r))
        annotations[name] = set().union(*(targets(name, path, n, known) for n in a))
    return runs, annotations


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
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
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_every_module_is_on_a_floor():
    table = floors()
    assert [name for name, _ in table][:2] == ["base", "lifetime"] and len(table) >= 10, table
    lost = sorted(m for m in modules() if floor_of(m, table) is None)
    assert not lost, f"modules on no floor of docs/layout.md's table: {lost}"


def test_every_import_that_runs_points_down_or_stays_in_its_floor():
    table = floors()
    runs, _ = import_graphs()
    up = sorted(
        f"{m} ({table[floor_of(m, table)][0]}) imports {t} ({table[floor_of(t, table)][0]})"
        for m, ts in runs.items()
        for t in ts
        if floor_of(t, table) is not None and floor_of(t, table) > floor_of(m, table)
    )
    assert not up, "imports that point up a floor:\n" + "\n".join(up)


def test_no_import_cycle_counting_imports_inside_functions():
    runs, _ = import_graphs()
    cycle = find_cycle(runs)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_library_does_not_import_its_test_suite():
    runs, annotations = import_graphs()
    wrong = sorted(
        f"{m} -> {t}"
        for g in (runs, annotations)
        for m, ts in g.items()
        for t in ts
        if not m.startswith("pyggml.testing")
        and m not in ("pyggml", "pyggml.__main__")
        and t.startswith("pyggml.testing")
    )
    assert not wrong, wrong


def test_annotations_point_up_only_through_the_allow_list_which_only_shrinks():
    table = floors()
    _, annotations = import_graphs()
    up = {
        (m, t)
        for m, ts in annotations.items()
        for t in ts
        if floor_of(t, table) is not None and floor_of(t, table) > floor_of(m, table)
    }
    allowed = lambda m, t: any(m == p or m.startswith(p + ".") for p, target in ANNOTATIONS_UP if t == target)  # noqa: E731
    assert not [e for e in sorted(up) if not allowed(*e)], "annotations pointing up, not allowed"
    unused = [e for e in sorted(ANNOTATIONS_UP) if not any(m.startswith(e[0]) and t == e[1] for m, t in up)]
    assert not unused, f"ANNOTATIONS_UP entries no module needs: remove them: {unused}"
    assert len(ANNOTATIONS_UP) <= 10


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path):
    """The walk reads imports in functions, classes and try blocks, and skips TYPE_CHECKING's."""
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pyggml.runner import Runner\n"
        "def f():\n    from pyggml.backend import Backend\n"
        "class C:\n    def g(self):\n        try:\n            import pyggml.meta\n        except ImportError:\n            pass\n"
    )
    runs, annotations = _imports(ast.parse(src))
    known = {"pyggml.runner", "pyggml.backend", "pyggml.meta"}
    got = set().union(*(targets("pyggml.x", tmp_path / "x.py", n, known) for n in runs))
    assert got == {"pyggml.backend", "pyggml.meta"}
    assert set().union(*(targets("pyggml.x", tmp_path / "x.py", n, known) for n in annotations)) == {"pyggml.runner"}
