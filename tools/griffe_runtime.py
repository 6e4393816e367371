"""A griffe extension for pyggml's API reference (mkdocs.yml): what pyggml makes at import, read from the
installed package.

griffe reads pyggml's source (static analysis), where a name bound to a call's result is an attribute
without a docstring: ggml's enums (`Type = _enum("Type", ...)` in pyggml/_enums.py, read from the
compiled headers) and the op wrappers `_make_unary` and `_make_binary` make (pyggml/ops/). For each such
attribute whose value at run time is a function or an enum, this imports the module and puts in its place
a function with the signature and docstring Python has for it, or a class with the enum's docstring and
a list of its members (instead of one entry per member: Op has about a hundred). The op wrappers'
docstrings, in ggml's notation rather than Google's, are shown as written.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from typing import Any

import griffe


class RuntimeObjects(griffe.Extension):
    """Replace pyggml's attributes bound to functions and enums made at import by what they are.

    Args:
        modules: the modules (and the packages whose modules) to look at: where pyggml makes public
            functions and enums at import. Nothing else is imported.
    """

    def __init__(self, modules: tuple[str, ...] = ("pyggml._enums", "pyggml.ops")) -> None:
        super().__init__()
        self.modules = tuple(modules)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "pyggml":
            return
        parser = getattr(loader, "docstring_parser", None)
        options = getattr(loader, "docstring_options", None)
        for module in _modules(pkg):
            if not any(module.path == m or module.path.startswith(m + ".") for m in self.modules):
                continue
            made = [
                name
                for name, member in module.members.items()
                if not name.startswith("_")
                and not member.is_alias
                and not member.docstring
                and (
                    (member.is_attribute and isinstance(getattr(member, "value", None), griffe.ExprCall))
                    or member.is_class  # an enum of the generated stub (_enums.pyi)
                )
            ]
            if not made:
                continue
            try:
                runtime = importlib.import_module(module.path)
            except ImportError:  # an optional part that is not installed: its static view stays
                continue
            for name in made:
                value = getattr(runtime, name, None)
                static = module.members[name]
                if inspect.isfunction(value):
                    made_obj: griffe.Object = _function(name, value)
                elif inspect.isclass(value) and issubclass(value, enum.Enum):
                    made_obj = griffe.Class(name, bases=[b.__name__ for b in value.__bases__])
                else:
                    continue
                made_obj.lineno, made_obj.endlineno = static.lineno, static.endlineno
                made_obj.docstring = griffe.Docstring(
                    _doc(value), parent=made_obj, parser=parser, parser_options=options
                )
                module.set_member(name, made_obj)
        for module in _modules(pkg):
            if module.path.startswith("pyggml.ops."):
                _as_written(module)


def _as_written(module: griffe.Module) -> None:
    """An op's docstring is written in ggml's notation (`a: ne [K, M]`, `Result:`, `Precision:`), not
    Google's: shown as written, not parsed into sections."""
    for member in module.members.values():
        if not member.is_alias and member.is_function and member.docstring is not None:
            member.docstring.parser = None


def _modules(module: griffe.Module) -> list[griffe.Module]:
    out = [module]
    for member in module.modules.values():
        if not member.is_alias:
            out += _modules(member)
    return out


def _annotation(a: Any) -> str | None:
    if a is inspect.Parameter.empty:
        return None
    return a if isinstance(a, str) else getattr(a, "__name__", repr(a))


def _function(name: str, fn: Any) -> griffe.Function:
    sig = inspect.signature(fn)
    params = griffe.Parameters(
        *(
            griffe.Parameter(
                p.name,
                annotation=_annotation(p.annotation),
                kind=griffe.ParameterKind(p.kind.description),
                default=None if p.default is p.empty else repr(p.default),
            )
            for p in sig.parameters.values()
        )
    )
    return griffe.Function(name, parameters=params, returns=_annotation(sig.return_annotation))


def _doc(value: Any) -> str:
    doc = inspect.cleandoc(value.__doc__ or "")
    if inspect.isclass(value) and issubclass(value, enum.Enum):
        doc += (
            "\n\nMembers: " + ", ".join(f"`{m.name}` ({m.value})" for m in sorted(value, key=lambda m: m.value)) + "."
        )
    return doc
