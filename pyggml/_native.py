"""The generated C layer (`ffi`, `lib`) and the hooks that tie ggml to Python.

`lib` is ggml's whole public C API, unguarded: a wrong call through it can abort the
process. Two hooks make that bearable: ggml's log goes to the `logging` logger
"pyggml.ggml", and when ggml aborts (GGML_ASSERT, GGML_ABORT) the Python call site is
printed before the process ends.

`checked` is ggml.h's part of the API (graph building: contexts, tensors, ops, graphs)
with ggml's own asserts turned into `OpError`: each function has a generated C twin
`lib.pyggml_guarded_<name>` that arms a thread-local jump buffer, and the abort hook
jumps back to it instead of letting ggml abort (tools/gen_ffi.py says why that is safe
for ggml.h's pure-C functions). The checked op wrappers of `pyggml.ops` call those twins.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyggml.errors import OpError, Unsupported

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

# A shared library the compiled module needs and the loader did not find: "libcublas.so.13: cannot open ..."
_MISSING_LIBRARY = re.compile(r"(lib[\w.+-]+\.so(?:\.\d+)*): cannot open shared object file")


def _preload_from_pip_packages(name: str) -> bool:
    """Load the shared library `name` from the NVIDIA pip packages on sys.path (nvidia/cu13/lib/...).

    A CUDA wheel's module links cuBLAS, which the pip package nvidia-cublas installs under
    site-packages/nvidia/cuXX/lib. The module's RUNPATH finds it there when pyggml is installed in the
    same site-packages; installed elsewhere (`pip install --target`, PYTHONPATH, a user site beside a
    system site that has cuBLAS), the library is loaded here first, and the loader then reuses it (it
    matches the module's needed library by its soname)."""
    import ctypes

    for entry in sys.path:
        for path in sorted(Path(entry or ".").glob(f"nvidia/*/lib/{name}")):
            try:
                ctypes.CDLL(str(path))
            except OSError:
                continue
            return True
    return False


def _load_module() -> None:
    """Import the compiled module; a shared library it needs that the loader does not find is looked for in
    the NVIDIA pip packages (the CUDA wheel's cuBLAS) before the import fails."""
    import importlib

    tried: list[str] = []
    while True:
        try:
            importlib.import_module("pyggml._pyggml_cffi")
            return
        except ImportError as exc:  # pragma: no cover - depends on how pyggml was installed
            missing = _MISSING_LIBRARY.search(str(exc))
            if missing is None:
                here = Path(__file__).resolve().parent
                raise ImportError(
                    f"pyggml's compiled module is missing next to {here}. If this is the source folder, "
                    "install it with `pip install -e .` (or run from another folder after `pip install .`)."
                ) from exc
            name = missing.group(1)
            if name in tried or not _preload_from_pip_packages(name):
                hint = " (pip install nvidia-cublas: the CUDA wheel requires it)" if "cublas" in name else ""
                raise ImportError(
                    f"pyggml's compiled module needs {name}, found neither by the loader nor in the NVIDIA "
                    f"pip packages on sys.path{hint}: {exc}"
                ) from exc
            tried.append(name)


_load_module()
from pyggml import _pyggml_cffi  # noqa: E402
from pyggml._pyggml_cffi import ffi  # noqa: E402
from pyggml._pyggml_cffi import lib as real_lib  # noqa: E402


class CApi:
    """`lib`: the build's C API as pyggml's wrappers may call it. On the pinned tree it is the compiled module's
    `lib` itself; on another tree (PYGGML_GGML_SOURCE, PYGGML_LLAMA_SOURCE) a function the pin has (the record
    `_pinned_api.json`, tools/gen_pinned_api.py) that this tree lacks, or whose C type differs from the pin's,
    is a stand-in that raises `Unsupported` with the reason when called (`unavailable(name)` says it
    beforehand), instead of an import error or a call with the wrong arguments. Each name is looked up once."""

    def __getattr__(self, name: str) -> Any:
        value = _resolve(name)
        self.__dict__[name] = value
        return value

    def __dir__(self) -> list[str]:
        return dir(real_lib)


@functools.cache
def pinned_api() -> dict:
    """The pin's C API (functions' C types, enums' members), as recorded in _pinned_api.json."""
    path = Path(__file__).with_name("_pinned_api.json")
    if not path.exists():  # only while tools/gen_pinned_api.py writes it the first time
        return {"ggml_version": "", "functions": {}, "enums": {}}
    return json.loads(path.read_text())


def has(name: str) -> bool:
    """Whether this build's C API has the function or constant `name` as pyggml's wrappers may use it."""
    return getattr(lib, name, None) is not None and unavailable(name) is None


def adaptations() -> dict:
    """What the binding adapts in this build against the pin's C API it was written for: `missing`, the pin's
    functions (ggml's, gguf's, llama.cpp's; their guarded twins left out) this tree lacks; `changed`, those
    whose C type differs (their wrappers refuse); `absent`, the pin's enum members it lacks ("GGML_OP_...").
    All empty on the pin."""
    pinned = pinned_api()
    missing, changed = [], []
    for name, ctype in pinned["functions"].items():
        if name.startswith("pyggml_guarded_"):
            continue
        value = getattr(real_lib, name, None)
        if value is None:
            missing.append(name)
        elif ffi.typeof(value).cname != ctype:
            changed.append(name)
    absent = []
    for c_enum, members in pinned["enums"].items():
        try:
            have = ffi.typeof(c_enum).relements
        except ffi.error:
            absent += members
            continue
        absent += [m for m in members if m not in have]
    return {"missing": sorted(missing), "changed": sorted(changed), "absent": sorted(absent)}


def require_after(feature: str, last_without: str) -> None:
    """Unsupported unless this build's ggml is newer than `last_without`, the last version known to lack
    `feature`: for what a ggml function came to accept without its C type changing (cffi cannot see it), so an
    older tree refuses instead of reading a NULL it does not expect."""
    version = tree_version()
    if version and version_key(version) <= version_key(last_without):
        raise Unsupported(f"{feature} is not in ggml {version} (it came after {last_without})")


def version_key(text: str) -> tuple[int, ...]:
    """A ggml version ("0.15.3") as a tuple that compares as versions do."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def user_tree() -> bool:
    """Whether this build is of a tree of the user's (PYGGML_GGML_SOURCE, PYGGML_LLAMA_SOURCE), not the pin."""
    return (build_info().get("tree") or {}).get("tree") == "user"


def tree_version() -> str:
    """ggml's version in this build ("0.15.3"), as its CMakeLists.txt sets it."""
    return (build_info().get("tree") or {}).get("ggml_version") or cstr(real_lib.ggml_version())


def unavailable(name: str) -> str | None:
    """Why the C function `name` (`ggml_lightning_indexer`, or its guarded twin) cannot be called in this build,
    None if it can."""
    return getattr(getattr(lib, name, None), "pyggml_unavailable", None)


def _resolve(name: str) -> Any:
    base = name.removeprefix("pyggml_guarded_")
    pinned = pinned_api()["functions"].get(name)
    try:
        value = getattr(real_lib, name)
    except AttributeError:
        if pinned is None:
            raise AttributeError(f"pyggml.lib has no {name} (not in this build's C API)") from None
        return _refusal(name, f"{base} is not in ggml {tree_version()}")
    if pinned is not None and callable(value):
        here = ffi.typeof(value).cname
        if here != pinned:
            return _refusal(
                name,
                f"{base} is {here} in ggml {tree_version()}, but pyggml's wrapper was written for {pinned} "
                f"(ggml {pinned_api()['ggml_version']})",
            )
    return value


def _refusal(name: str, why: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Unsupported(why)

    refuse.__name__ = name
    refuse.pyggml_unavailable = why  # type: ignore[attr-defined]
    return refuse


lib: _pyggml_cffi._Lib = CApi()  # type: ignore[assignment]  # typed as the module it stands for

log = logging.getLogger("pyggml.ggml")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def logged_warnings() -> Iterator[list[str]]:
    """The warning and error lines ggml (and llama.cpp) log inside the block: the reason a call failed.
    While the block runs a handler is present, so logging's last resort does not print them too."""
    handler = _Collect()
    log.addHandler(handler)
    try:
        yield handler.lines
    finally:
        log.removeHandler(handler)


_LEVELS = {
    lib.GGML_LOG_LEVEL_NONE: logging.INFO,
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}

# ggml logs in pieces (GGML_LOG_LEVEL_CONT continues the last line), from any thread
_pending = threading.local()


@ffi.def_extern()
def pyggml_log_callback(level: int, text: CData, user_data: CData) -> None:
    piece = ffi.string(text).decode("utf-8", "replace")
    if level != lib.GGML_LOG_LEVEL_CONT:
        _pending.level = _LEVELS.get(level, logging.INFO)
    buf = getattr(_pending, "text", "") + piece
    *lines, rest = buf.split("\n")
    for line in lines:
        if line.strip():
            log.log(getattr(_pending, "level", logging.INFO), line)
    _pending.text = rest


@ffi.def_extern()
def pyggml_abort_callback(error_message: CData) -> None:
    # ggml calls abort() right after this returns: say where Python was
    message = ffi.string(error_message).decode("utf-8", "replace")
    sys.stderr.write(f"pyggml: ggml aborted: {message}\nPython call site (most recent call last):\n")
    traceback.print_stack(file=sys.stderr)
    sys.stderr.flush()


lib.ggml_log_set(lib.pyggml_log_callback, ffi.NULL)
# ggml's own threads log too (the RPC client's dispatcher when a server is gone, at exit freeing
# its buffers): a thread that calls into Python after finalization has begun is ended on the spot,
# and whoever waited for it hangs. From exit on, ggml logs to stderr itself.
atexit.register(lib.ggml_log_set, ffi.NULL, ffi.NULL)
# the C hook: inside a guarded call it jumps back; elsewhere it calls pyggml_abort_callback
lib.ggml_set_abort_callback(ffi.addressof(real_lib, "pyggml_abort_hook"))


def guard_error(op: str) -> Exception | None:
    """The exception for the last guarded call on this thread, or None if it succeeded.
    ggml's message is "path/ggml.c:LINE: GGML_ASSERT(cond) failed": the op, the condition
    and where it is in ggml are kept, the build path dropped. A full context (ggml asserts
    that a new object fits in the arena) is a MemoryError."""
    msg = lib.pyggml_guard_error()
    if msg == ffi.NULL:
        return None
    text = describe_abort(ffi.string(msg).decode("utf-8", "replace"))
    if text.startswith("ggml requires obj_new "):
        return MemoryError(
            f"context is full: {op} does not fit in the context's memory pool "
            "(create the Context with a larger mem_size or n_tensors)"
        )
    return OpError(f"{op}: {text}")


def describe_abort(message: str) -> str:
    where, _, what = message.partition(": ")
    if not what:
        return message
    what = what.strip()
    if what.startswith("GGML_ASSERT(") and what.endswith(") failed"):
        what = f"ggml requires {what[len('GGML_ASSERT(') : -len(') failed')]}"
    return f"{what} ({Path(where).name})"


class _Checked:
    """ggml.h with asserts as exceptions: `checked.ggml_add(ctx, a, b)` is `lib.ggml_add`,
    but a failed GGML_ASSERT raises OpError naming the function and the condition."""

    def __getattr__(self, name: str):
        guarded = getattr(lib, f"pyggml_guarded_{name}", None)
        if guarded is None:
            raise AttributeError(f"{name} is not a guarded ggml.h function (use pyggml.lib for the rest)")
        returns_void = ffi.typeof(getattr(lib, name)).result is ffi.typeof("void")

        def call(*args):
            out = guarded(*args)
            if out == ffi.NULL if isinstance(out, ffi.CData) else True:
                err = guard_error(name)
                if err is not None:
                    raise err
            return None if returns_void else out

        call.__name__ = name
        call.__doc__ = f"{name}, guarded: a failed GGML_ASSERT raises OpError."
        setattr(self, name, call)
        return call


checked = _Checked()


@functools.cache
def build_info() -> dict:
    """What this build of pyggml contains, read from the build's `_build_info.json` (cached).

    Returns:
        A dict: `headers`, the C headers the C layer was generated from (llama.h among them when libllama
        is built in); `backends`, the ggml backends compiled in (cpu, vulkan, cuda, rpc, ...);
        `declared_not_defined`, functions the headers declare that no built library defines (left out of
        `pyggml.lib`).
    """
    return json.loads(install_dir().joinpath("_build_info.json").read_text())


def install_dir() -> Path:
    """Where the compiled module and its build files lie (site-packages, also for editable installs)."""
    return Path(_pyggml_cffi.__file__).resolve().parent


def cstr(ptr: CData) -> str:
    return ffi.string(ptr).decode("utf-8", "replace") if ptr != ffi.NULL else ""
