"""The generated C layer (`ffi`, `lib`) and the hooks that tie ggml to Python.

`lib` is ggml's whole public C API, unguarded: a wrong call through it can abort the
process. Two hooks make that bearable: ggml's log goes to the `logging` logger
"pyggml.ggml", and when ggml aborts (GGML_ASSERT, GGML_ABORT) the Python call site is
printed before the process ends.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import threading
import traceback
from pathlib import Path

try:
    from pyggml import _pyggml_cffi
    from pyggml._pyggml_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on how pyggml was installed
    here = Path(__file__).resolve().parent
    raise ImportError(
        f"pyggml's compiled module is missing next to {here}. If this is the source folder, "
        "install it with `pip install -e .` (or run from another folder after `pip install .`)."
    ) from exc

log = logging.getLogger("pyggml.ggml")

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
def pyggml_log_callback(level, text, user_data):
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
def pyggml_abort_callback(error_message):
    # ggml calls abort() right after this returns: say where Python was
    message = ffi.string(error_message).decode("utf-8", "replace")
    sys.stderr.write(f"pyggml: ggml aborted: {message}\nPython call site (most recent call last):\n")
    traceback.print_stack(file=sys.stderr)
    sys.stderr.flush()


lib.ggml_log_set(lib.pyggml_log_callback, ffi.NULL)
lib.ggml_set_abort_callback(lib.pyggml_abort_callback)


@functools.cache
def build_info() -> dict:
    """What this build of pyggml contains: headers, backends, declared-but-undefined functions."""
    return json.loads(install_dir().joinpath("_build_info.json").read_text())


def install_dir() -> Path:
    """Where the compiled module and its build files lie (site-packages, also for editable installs)."""
    return Path(_pyggml_cffi.__file__).resolve().parent


def cstr(ptr) -> str:
    return ffi.string(ptr).decode("utf-8", "replace") if ptr != ffi.NULL else ""
