"""Op wrappers made from ggml.h: an op's parameters (their names, order and C types) are read from the
declaration this build compiled (`cdef.h`, written by tools/gen_ffi.py from ggml.h), so a plain op's
signature is written once, by ggml, and never copied here.

`declared(op, doc=...)` makes the checked wrapper of `ggml_<op>(ctx, ...)`: a tensor argument is a
`Tensor` (a wrong object is a TypeError naming it), a C int an integer (never a float or a bool), a
float a number, a bool a bool, an `enum ggml_type` anything `types.as_type` reads; the call goes
through the guarded twin, so a failed GGML_ASSERT is an `OpError`. `check(x)`, where the op needs one,
sees the converted arguments by name (`x.a`, `x.s0`) and raises for what ggml does not check itself.
`pyggml.ops.wrapper(op)` is an op's wrapper: the one its family defines, or else the one ggml.h declares
(an op the database checks with no wrapper written for it).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import CodeType, FunctionType, SimpleNamespace
from typing import Any

import numpy as np

from pyggml import types
from pyggml._native import unavailable
from pyggml.errors import Unsupported
from pyggml.ops._common import _ARG_ERRORS, _NULL, _bad_arguments, _failed, _fill, _guarded, _new_tensor, _scalar
from pyggml.tensor import Tensor

# C types a declared parameter may have (as `declaration` spells them), by what it takes from Python; any other
# `enum ggml_*` is an "enum"
_KINDS = {
    "struct ggml_tensor *": "tensor",
    "float": "float",
    "double": "float",
    "bool": "bool",
    "enum ggml_type": "type",
    **dict.fromkeys(("int", "int32_t", "int64_t", "uint32_t", "size_t"), "int"),
}
_PARAM = re.compile(r"(?:const )?(.*?) ?(\w+)")  # a parameter, spaces normalized and "*" set apart: type, name
_DECLARATION = re.compile(r"struct ggml_tensor \*\s*ggml_(\w+)\s*\(([^;]*);")  # the list and its ")"


@dataclass(frozen=True)
class Param:
    """One parameter of a declaration: its name and what it takes ("tensor", "int", "float", "bool", "type",
    "enum"; "" for a C type no plain wrapper passes, such as an array or a callback)."""

    name: str
    kind: str
    c_type: str


@cache
def _declarations() -> dict[str, str]:
    """The parameter list of every `struct ggml_tensor * ggml_<name>(...)` of this build, by name (each parsed when
    asked for: `declaration`)."""
    from pyggml._native import install_dir

    path = install_dir() / "cdef.h"
    if not path.exists():  # the package build installs it beside the module; a copied module alone lacks it
        raise ImportError(
            f"pyggml's build is incomplete: {path} (the C declarations its op wrappers are made from) is missing; "
            "install pyggml again (pip install .)"
        )
    text = path.read_text()
    return {m.group(1): m.group(2) for m in _DECLARATION.finditer(text)}


@cache
def declaration(op: str) -> tuple[Param, ...]:
    """The parameters after ctx of `ggml_<op>` as this build's ggml.h declares them; KeyError if it has none."""
    text = _declarations().get(op)
    parts = [" ".join(p.split()) for p in (text or "").rstrip().removesuffix(")").split(",")]
    if text is None or not re.match(r"struct ggml_context\s*\*\s*\w+$", parts[0]):
        raise KeyError(f"ggml.h declares no ggml_{op}(struct ggml_context *, ...) returning a tensor")
    params = []
    for p in parts[1:]:
        found = _PARAM.fullmatch(" ".join(p.replace("*", " * ").split()))
        if not found:  # an array (`int sections[4]`): no C type a Python value passes as is
            params.append(Param(p.rsplit(" ", 1)[-1].split("[")[0], "", p))
            continue
        c_type = found.group(1).replace(" *", "*").replace("*", " *")
        kind = _KINDS.get(c_type) or ("enum" if c_type.startswith("enum ggml_") else "")
        params.append(Param(found.group(2), kind, c_type))
    return tuple(params)


Check = Callable[[SimpleNamespace], object]


def all_of(*checks: Check) -> Check:
    """One check (`declared(..., check=...)`) that runs each of `checks` in turn."""

    def check(x: SimpleNamespace) -> None:
        for c in checks:
            c(x)

    return check


def _bool(op: str, name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{op}: {name} must be a bool, got {type(value).__name__} {value!r}")


def _type(op: str, name: str, value: Any) -> int:
    try:
        return int(types.as_type(value))
    except (TypeError, ValueError, KeyError) as e:  # a name no type has is a ValueError, another object a TypeError
        raise (TypeError if isinstance(e, TypeError) else ValueError)(
            f"{op}: {name} must be a ggml type, got {value!r}: {e}"
        ) from e


_ANNOTATIONS = {"tensor": "Tensor", "int": "int", "enum": "int", "float": "float", "bool": "bool", "type": "TypeLike"}
_COMPILED: dict[str, Any] = {}  # a generated wrapper's source -> its compiled code


@cache
def _stand_in(n: int) -> CodeType:
    """The code of a stand-in of n parameters (named when it is used: `declared`), which compiles its wrapper at the
    first call and passes its arguments on."""
    names = ", ".join(f"_{i}" for i in range(n))
    return compile(f"def _wrapper({names}):\n    return _compile(_self)({names})", "<declared>", "exec").co_consts[0]


def _compile(fn: FunctionType) -> FunctionType:
    """A declared wrapper's first call: its code compiled (once per source) in place of the stand-in's."""
    namespace = fn.__globals__
    source = namespace["_source"]
    code = _COMPILED.get(source) or _COMPILED.setdefault(source, compile(source, "<pyggml.ops.declared>", "exec"))
    exec(code, namespace)
    made = namespace.pop("_wrapper")
    fn.__defaults__ = made.__defaults__
    fn.__code__ = made.__code__.replace(co_name=fn.__name__, co_qualname=fn.__name__)
    return fn


_CONVERT = {
    "int": "{n} = {n} if type({n}) is int else _scalar(_op, '{n}', {n}, int)",
    "enum": "{n} = {n} if type({n}) is int else _scalar(_op, '{n}', {n}, int)",
    "float": "{n} = {n} if type({n}) is float else _scalar(_op, '{n}', {n})",
    "bool": "{n} = {n} if type({n}) is bool else _bool(_op, '{n}', {n})",
    "type": "{n} = _type(_op, '{n}', {n})",
}


def declared(
    op: str,
    doc: str | None = None,
    *,
    c_name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    check: Check | None = None,
    optional: tuple[str, ...] = (),
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Callable[..., Tensor]:
    """The checked wrapper of `ggml_<c_name or op>(ctx, ...)`, its parameters those ggml.h declares.

    Args:
        op: the wrapper's name (the name its errors give).
        doc: its docstring (what help() shows: what it computes, the arguments' shapes and types, the result,
            the precision).
        c_name: the C function's name without `ggml_`, where it differs from op.
        defaults: default values of trailing parameters, by name.
        check: called with the converted arguments by name before the call, for what ggml does not check;
            it may replace a value (`x.s0 = ...`), which is then what ggml gets; what it returns is not used.
        optional: tensor parameters that may be None (passed to ggml as NULL; their default is None).
        convert: a parameter's own conversion of what the caller gave, by name, instead of its C type's (a name
            for an enum's value).

    Returns:
        The wrapper, `op(ctx, *params)`, with the declaration's signature.
    """
    c = c_name or op
    why = unavailable(f"pyggml_guarded_ggml_{c}")
    if why:  # a user's tree without the pin's function, or with another C type: refuse when called, as lib does
        return _refusing(op, why, doc)
    params = declaration(c)
    unpassable = [f"{p.name} ({p.c_type})" for p in params if not p.kind]
    if unpassable:
        raise ValueError(f"ggml_{c} takes {', '.join(unpassable)}: write its wrapper by hand")
    defaults = dict(defaults or {}) | dict.fromkeys(optional)
    convert = dict(convert or {})
    unknown = (set(defaults) | set(convert)) - {p.name for p in params}
    if unknown:
        raise ValueError(f"ggml_{c} has no parameter {sorted(unknown)}")
    names = [p.name for p in params]
    if "ctx" in names or any(n.startswith("_") for n in names):  # the generated function's own names
        raise ValueError(f"ggml_{c}'s parameters {names} clash with the wrapper's own: write it by hand")
    tensors = [p.name for p in params if p.kind == "tensor"]
    signature = ", ".join(["ctx"] + [f"{n}=_defaults[{n!r}]" if n in defaults else n for n in names])
    lines = [f"def _wrapper({signature}):"]
    lines += [
        f"    {p.name} = _convert[{p.name!r}]({p.name})"
        if p.name in convert
        else "    " + _CONVERT[p.kind].format(n=p.name)
        for p in params
        if p.kind in _CONVERT or p.name in convert
    ]
    if check is not None:
        lines.append(f"    _x = _SimpleNamespace({', '.join(f'{n}={n}' for n in names)})")
        lines.append("    _check(_x)")
        lines += [f"    {n} = _x.{n}" for n in names if n not in tensors]

    def pointer(n: str) -> str:
        return f"(_NULL if {n} is None else {n}.ptr)" if n in optional else f"{n}.ptr"

    passed = ", ".join(["ctx.ptr"] + [pointer(n) if n in tensors else n for n in names])
    lines += [
        "    try:",
        f"        _r = _fn({passed})",
        "    except _ARG_ERRORS as _e:",
        f"        raise _bad_arguments(_op, _e, ctx, **_given({', '.join(f'{n}={n}' for n in tensors)})) from None",
        "    if not _r:",
        f"        raise _failed(_op, _given({', '.join(f'{n}={n}' for n in tensors)}))",
    ]
    # the result lives in ctx, which keeps alive each argument's context (inlined, as the hot ops need)
    lines += [
        f"    if {n} is not None and {n}.ctx is not ctx:\n        ctx.adopt({n})"
        if n in optional
        else f"    if {n}.ctx is not ctx:\n        ctx.adopt({n})"
        for n in tensors
    ]
    lines += ["    _t = _new_tensor(Tensor)", "    _t.ptr, _t.ctx = _r, ctx", "    return _t"]
    namespace: dict[str, Any] = dict(
        _op=op,
        _fn=_guarded(c),
        _defaults=defaults,
        _convert=convert,
        _check=check,
        _SimpleNamespace=SimpleNamespace,
        _scalar=_scalar,
        _bool=_bool,
        _type=_type,
        _ARG_ERRORS=_ARG_ERRORS,
        _bad_arguments=_bad_arguments,
        _failed=_failed,
        _NULL=_NULL,
        _given=lambda **tensors: {n: t for n, t in tensors.items() if not (t is None and n in optional)},
        _new_tensor=_new_tensor,
        _compile=_compile,
        Tensor=Tensor,
    )
    # A real function: its signature, and no per-call loop over parameters. It is compiled when first called (ops
    # of one shape, the unary ops, share the code): compiling 140 wrappers would be a sixth of importing pyggml.
    # Until then it is a stand-in with the wrapper's parameters that compiles it, takes its code, and calls it.
    namespace["_source"] = "\n".join(lines)
    # the stand-in has the wrapper's parameters (names, defaults) from the start, so its signature is the wrapper's
    with_default = [n for n in names if n in defaults]
    if with_default != names[len(names) - len(with_default) :]:
        raise ValueError(f"ggml_{c}: defaults for {with_default}, but a parameter after them has none")
    code = _stand_in(len(names) + 1).replace(co_varnames=("ctx", *names), co_name=op, co_qualname=op)
    fn = FunctionType(code, namespace, op, tuple(defaults[n] for n in with_default) or None)
    namespace["_self"] = fn
    fn.__name__ = fn.__qualname__ = op
    # the docstring as written in its family (indented under the call), wrapped for help() as a def's would be
    fn.__doc__ = _fill(inspect.cleandoc(doc)) if doc else f"ggml_{c}(ctx, {', '.join(names)}), as ggml.h declares it."
    fn.__module__ = sys._getframe(1).f_globals["__name__"]  # the family module that made it
    fn.__annotations__ = {"ctx": "Context", **{p.name: _ANNOTATIONS[p.kind] for p in params}, "return": "Tensor"}
    return fn


def _refusing(op: str, why: str, doc: str | None) -> Callable[..., Tensor]:
    def refuse(ctx: Any, *args: Any, **kwargs: Any) -> Tensor:
        raise Unsupported(f"{op}: {why}")

    refuse.__name__ = refuse.__qualname__ = op
    refuse.__doc__ = _fill(doc) if doc else None
    refuse.__module__ = sys._getframe(2).f_globals["__name__"]
    return refuse
