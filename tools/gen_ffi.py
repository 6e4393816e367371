"""Generate pyggml's cffi extension source from ggml's own public headers.

Run by CMakeLists.txt at configure time. The cdef is never written by hand: the
headers are run through the C compiler's preprocessor with stub standard headers
(so only ggml's declarations remain), the few compiler-specific words cffi's parser
does not take are removed, and integer macros of ggml (GGML_MAX_DIMS, ...) are kept
as `#define NAME ...` so cffi reads their values from the real headers.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# The standard headers ggml's public headers include. cffi knows their types
# (int64_t, size_t, bool, FILE, ...), so empty stand-ins are all the preprocessor needs.
STUB_HEADERS = ["stdint.h", "stddef.h", "stdbool.h", "stdio.h", "stdlib.h", "string.h", "stdarg.h"]

# Callbacks implemented in Python (pyggml/_native.py, pyggml/meta.py, pyggml/backend.py).
PYTHON_CALLBACKS = """
extern "Python" bool pyggml_eval_callback(struct ggml_tensor * t, bool ask, void * user_data);
extern "Python" void pyggml_log_callback(enum ggml_log_level level, const char * text, void * user_data);
extern "Python" void pyggml_abort_callback(const char * error_message);
extern "Python" struct ggml_backend_meta_split_state pyggml_meta_split_state(const struct ggml_tensor * tensor, void * userdata);
"""

# The guard: ggml.h's functions are pure C (ggml.c) and report a broken precondition with
# GGML_ASSERT -> ggml_abort -> the abort callback -> abort(). Each is wrapped in a
# `pyggml_guarded_<name>` that arms a thread-local jmp_buf; pyggml's abort callback jumps
# back to it instead of returning (so abort() is never reached) and the wrapper reports
# failure. That is safe for these functions because they run on the calling thread, hold
# no lock and allocate nothing that a jump would leak beyond a tensor header left in the
# context's arena (see GUARD_EXCLUDED for the exceptions). Anywhere else (C++ backends,
# compute threads) no jmp_buf is armed and the callback prints the Python call site as
# before, then ggml aborts.
GUARD_HEADER = "ggml.h"
GUARD_EXCLUDED = {
    "ggml_abort": "variadic, and is the abort itself",
    "ggml_set_abort_callback": "installs the hook the guard relies on",
    "ggml_log_set": "global hook, nothing to guard",
    "ggml_quantize_init": "asserts inside ggml's critical section: a jump would leave it locked",
    "ggml_quantize_free": "runs inside ggml's critical section",
    "ggml_print_backtrace": "diagnostic, nothing to guard",
}

GUARD_PRELUDE = r"""
#include <setjmp.h>
#include <string.h>

/* The guard of ggml.h's functions (see tools/gen_ffi.py). */
static __thread jmp_buf * pyggml_guard_jmp;
static __thread int pyggml_guard_failed;
static __thread char pyggml_guard_msg[2048];

static void pyggml_abort_callback(const char * error_message);  /* extern "Python", below */

static void pyggml_abort_hook(const char * message) {
    jmp_buf * env = pyggml_guard_jmp;
    if (env != NULL) {
        pyggml_guard_jmp = NULL;
        strncpy(pyggml_guard_msg, message, sizeof(pyggml_guard_msg) - 1);
        pyggml_guard_msg[sizeof(pyggml_guard_msg) - 1] = 0;
        pyggml_guard_failed = 1;
        longjmp(*env, 1);
    }
    pyggml_abort_callback(message);  /* unguarded: say where Python was; ggml aborts next */
}

/* The message of the last guarded call on this thread that failed, or NULL if it succeeded. */
static const char * pyggml_guard_error(void) {
    return pyggml_guard_failed ? pyggml_guard_msg : NULL;
}
"""

NATIVE = Path(__file__).resolve().parent.parent / "native"
# pyggml's own C, declared here; each .c is a source of the module (CMakeLists.txt)
NATIVE_HEADERS = (NATIVE / "node_copies.h", NATIVE / "dequantize.h")

GUARD_CDEF = """
void pyggml_abort_hook(const char * message);
const char * pyggml_guard_error(void);
"""


def guarded_functions(cdef: str, names: set[str]) -> tuple[str, str]:
    """C source and cdef of `pyggml_guarded_<name>` for each function named. A wrapper returns
    what the function returns (NULL for a pointer, 0 otherwise, when the guard caught an
    assert: pyggml_guard_error() tells); a void function's wrapper returns 1 on failure."""
    import cffi
    from cffi import model

    parser = cffi.FFI()
    parser.cdef(cdef)
    src, decls = [], []
    for key, (tp, _) in sorted(parser._parser._declarations.items()):
        if not key.startswith("function "):
            continue
        name = key.split(" ", 1)[1]
        if name not in names or name in GUARD_EXCLUDED or tp.ellipsis:
            continue
        params = ", ".join(a.get_c_name(f" a{i}") for i, a in enumerate(tp.args)) or "void"
        call = f"{name}({', '.join(f'a{i}' for i in range(len(tp.args)))})"
        is_void = isinstance(tp.result, model.VoidType)
        result = "int" if is_void else tp.result.get_c_name()
        proto = (
            tp.result.get_c_name(f" pyggml_guarded_{name}({params})")
            if not is_void
            else f"int pyggml_guarded_{name}({params})"
        )
        failed = "1" if is_void else ("NULL" if isinstance(tp.result, model.PointerType) else "0")
        body = (
            f"{call}; pyggml_guard_jmp = prev; return 0;"
            if is_void
            else f"{result} r = {call}; pyggml_guard_jmp = prev; return r;"
        )
        if not is_void and isinstance(tp.result, model.StructOrUnion):
            failed = f"({result}){{0}}"
        src.append(
            f"static {proto} {{\n"
            f"    jmp_buf env; jmp_buf * prev = pyggml_guard_jmp;\n"
            f"    pyggml_guard_failed = 0; pyggml_guard_jmp = &env;\n"
            f"    if (setjmp(env)) {{ pyggml_guard_jmp = prev; return {failed}; }}\n"
            f"    {body}\n}}\n"
        )
        decls.append(proto + ";")
    return "".join(src), "\n".join(decls) + "\n"


# cffi's parser does not take these; they carry no meaning for the binding.
STRIP_WORDS = re.compile(r"\b(__restrict__|__restrict|restrict|__inline__|__inline|__extension__)\b")


def preprocess(cc: str, include_dirs: list[Path], headers: list[str], extra: list[str]) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        stubs = Path(tmp)
        for name in STUB_HEADERS:
            (stubs / name).write_text("")
        umbrella = stubs / "pyggml_all.h"
        umbrella.write_text("".join(f'#include "{h}"\n' for h in headers))
        flags = [
            cc,
            "-E",
            "-nostdinc",
            "-I",
            str(stubs),
            *(f for d in include_dirs for f in ("-I", str(d))),
            "-D__attribute__(x)=",
            "-D__declspec(x)=",
            *extra,
            str(umbrella),
        ]
        code = subprocess.run(flags + ["-P"], check=True, capture_output=True, text=True).stdout
        macros = subprocess.run(flags + ["-dM"], check=True, capture_output=True, text=True).stdout
    return code, macros


def integer_macros(macros: str) -> list[str]:
    names = []
    for line in macros.splitlines():
        m = re.match(r"#define ((?:GGML|GGUF|LLAMA)_[A-Z0-9_]+) (\(?-?(?:0x[0-9a-fA-F]+|[0-9]+)[uUlL]*\)?)$", line)
        if m:
            names.append(m.group(1))
    return sorted(set(names))


def drop_repeated_typedefs(code: str) -> str:
    """C11 allows the same typedef twice (ggml.h and ggml-backend.h both have some); cffi does not."""
    seen: set[str] = set()
    out = []
    for line in code.splitlines():
        key = " ".join(line.split())
        if re.fullmatch(r"typedef [^;{}]*;", key):
            if key in seen:
                continue
            seen.add(key)
        out.append(line)
    return "\n".join(out)


def defined_symbols(libraries: list[str]) -> set[str]:
    names: set[str] = set()
    for lib in libraries:
        out = subprocess.run(["nm", "--defined-only", "-g", lib], check=True, capture_output=True, text=True).stdout
        names.update(line.split()[-1] for line in out.splitlines() if len(line.split()) == 3)
    return names


def drop_declarations(code: str, names: list[str]) -> str:
    """Remove the declarations of functions a header declares but no built library defines."""
    for name in names:
        m = re.search(rf"\b{name}\s*\(", code)
        start = max(code.rfind(c, 0, m.start()) for c in ";{}") + 1
        end = code.index(";", m.end()) + 1
        code = code[:start] + code[end:]
    return code


def declared_functions(cdef: str) -> list[str]:
    import cffi

    parser = cffi.FFI()
    parser.cdef(cdef)
    return sorted(
        key.split(" ", 1)[1] for key, (tp, _) in parser._parser._declarations.items() if key.startswith("function ")
    )


def make_cdef(code: str, macros: str) -> str:
    code = STRIP_WORDS.sub("", code)
    # `extern` before function declarations is harmless for C but noise for cffi
    code = re.sub(r"^\s*extern\s+", "", code, flags=re.M)
    # array sizes written as expressions (64 / sizeof(int32_t)): cffi reads the real size
    code = re.sub(r"\[([^\]\[]*[^\]\[0-9\s][^\]\[]*)\]", "[...]", code)
    # constants initialised in the header: cffi reads the value from the compiled header
    code = re.sub(r"(static const [\w\s\*]+?\b\w+)\s*=[^;]*;", r"\1;", code)
    code = drop_repeated_typedefs(code)
    defines = "".join(f"#define {name} ...\n" for name in integer_macros(macros))
    return code + "\n" + defines + PYTHON_CALLBACKS


# --- the type stubs: what the C layer and ggml's enums look like to IDEs and type checkers ----
STUB_HEADER = """# Generated by tools/gen_ffi.py from the headers this build compiled: do not edit.
# The signatures of `lib` (positional only, as cffi calls them). Pointers, structs and arrays
# are cffi's CData, typed Any: what a pointer points to is ggml's business, not the checker's.
from typing import Any

CData = Any

"""
QUALIFIERS = {"const", "struct", "enum", "union", "unsigned", "signed", "volatile", "restrict"}


def param_names(cdef: str, name: str, count: int) -> list[str]:
    """The parameter names a declaration gives (cffi's model keeps only their types)."""
    m = re.search(rf"\b{name}\s*\(", cdef)
    names = []
    if m:
        depth, i, start, params = 1, m.end(), m.end(), []
        while depth:  # the parameter list, up to its closing parenthesis
            depth += {"(": 1, ")": -1}.get(cdef[i], 0)
            if cdef[i] == "," and depth == 1 or depth == 0:
                params.append(cdef[start:i])
                start = i + 1
            i += 1
        for p in params:
            fn_ptr = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)
            words = [w for w in re.findall(r"\w+", re.sub(r"\[[^\]]*\]", "", p)) if w not in QUALIFIERS]
            names.append(fn_ptr.group(1) if fn_ptr else words[-1] if len(words) >= 2 else "")
    if len(names) != count:
        names = [""] * count
    out: list[str] = []
    for i, n in enumerate(names):
        n = n if n and n.isidentifier() and not keyword.iskeyword(n) and n not in out else f"arg{i}"
        out.append(n)
    return out


def python_type(tp) -> str:
    from cffi import model

    if isinstance(tp, model.VoidType):
        return "None"
    if isinstance(tp, model.EnumType):
        return "int"
    if isinstance(tp, model.PrimitiveType):
        if tp.name == "_Bool":
            return "bool"
        if tp.name == "char":
            return "bytes"
        return "float" if tp.is_float_type() else "int"
    return "CData"


def lib_stub(cdef: str) -> str:
    import cffi

    parser = cffi.FFI()
    parser.cdef(cdef)
    lines = [STUB_HEADER, "class _Lib:"]
    for key, (tp, _) in sorted(parser._parser._declarations.items()):
        kind, _, name = key.partition(" ")
        if kind in ("macro", "constant"):
            lines.append(f"    {name}: int")
        elif kind == "enum" or kind == "anonymous" and hasattr(tp, "enumerators"):
            lines += [f"    {e}: int" for e in tp.enumerators]
        elif kind in ("function", "extern_python"):
            args = ", ".join(f"{n}: {python_type(t)}" for n, t in zip(param_names(cdef, name, len(tp.args)), tp.args))
            args = args + ", /" if args else ""
            variadic = ", *args: Any" if tp.ellipsis else ""
            lines.append(f"    def {name}(self{', ' if args else ''}{args}{variadic}) -> {python_type(tp.result)}: ...")
    lines += ["", "", "lib: _Lib", "ffi: Any  # cffi.FFI", ""]
    return "\n".join(lines)


# ggml's enums as pyggml.types shows them (pyggml/_enums.py builds them at import)
ENUMS = {
    "Type": ("ggml_type", "GGML_TYPE_"),
    "Op": ("ggml_op", "GGML_OP_"),
    "UnaryOp": ("ggml_unary_op", "GGML_UNARY_OP_"),
    "Status": ("ggml_status", "GGML_STATUS_"),
    "SortOrder": ("ggml_sort_order", "GGML_SORT_ORDER_"),
    "DeviceType": ("ggml_backend_dev_type", "GGML_BACKEND_DEVICE_TYPE_"),
}


def enum_stub(cdef: str) -> str:
    import cffi

    parser = cffi.FFI()
    parser.cdef(cdef)
    decls = parser._parser._declarations
    lines = ["# Generated by tools/gen_ffi.py from the headers this build compiled: do not edit.", "import enum", ""]
    # a member of the pin's enums that an older ggml lacks (pyggml/_enums.py)
    lines += ["", "class Absent(int):", "    name: str", "    absent: str", ""]
    for py_name, (c_name, prefix) in ENUMS.items():
        tp = decls[f"enum {c_name}"][0]
        lines += ["", f"class {py_name}(enum.IntEnum):"]
        lines += [
            f"    {e[len(prefix) :]} = {v}"
            for e, v in zip(tp.enumerators, tp.enumvalues)
            if e.startswith(prefix) and not e.endswith("_COUNT")
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", required=True, help="C compiler used for preprocessing")
    parser.add_argument(
        "--include", action="append", required=True, type=Path, help="include folder: ggml's, llama.cpp's (repeatable)"
    )
    parser.add_argument("--header", action="append", required=True, help="public header to expose (repeatable)")
    parser.add_argument("--module", default="_pyggml_cffi")
    parser.add_argument("--out", required=True, type=Path, help="C file to write")
    parser.add_argument("--cdef-out", type=Path, help="also write the cdef here (for reading)")
    parser.add_argument("--lib", action="append", default=[], help="built ggml static library (repeatable)")
    parser.add_argument("--backend", action="append", default=[], help="backend built into ggml (repeatable)")
    parser.add_argument("--build-info", type=Path, help="write what was built here (JSON)")
    parser.add_argument("--stub-dir", type=Path, help="write the type stubs here (_pyggml_cffi.pyi, _enums.pyi)")
    parser.add_argument("--tree", type=Path, help="tools/fetch_ggml.py's record of the tree and its patches")
    args = parser.parse_args()

    import cffi

    code, macros = preprocess(args.cc, args.include, args.header, [])
    cdef = make_cdef(code, macros)
    missing: list[str] = []
    if args.lib:
        defined = defined_symbols(args.lib)
        missing = [f for f in declared_functions(cdef) if f not in defined]
        cdef = drop_declarations(cdef, missing)
    # the functions of ggml.h (pure C) get a guarded twin
    guard_names = set(declared_functions(make_cdef(*preprocess(args.cc, args.include, [GUARD_HEADER], []))))
    guard_src, guard_cdef = guarded_functions(cdef, guard_names)
    cdef += GUARD_CDEF + guard_cdef
    # pyggml's own C (not ggml's): the node copier behind pyggml.drift.Recorder, the decoders of pyggml.types
    native = "".join(h.read_text() for h in NATIVE_HEADERS)
    cdef += native
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(cdef)
    source = "".join(f'#include "{h}"\n' for h in args.header) + GUARD_PRELUDE + guard_src
    ffibuilder.set_source(args.module, source + native)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ffibuilder.emit_c_code(str(args.out))
    if args.cdef_out:
        args.cdef_out.write_text(cdef)
    if args.stub_dir:
        args.stub_dir.mkdir(parents=True, exist_ok=True)
        (args.stub_dir / f"{args.module}.pyi").write_text(lib_stub(cdef))
        (args.stub_dir / "_enums.pyi").write_text(enum_stub(cdef))
    if args.build_info:
        # declared_not_defined: in a public header, but no built library has it (a gap of
        # ggml's, e.g. ggml_threadpool_get_n_threads in 0.25.3); the coverage test pins the list
        info = {"headers": args.header, "backends": args.backend, "declared_not_defined": missing}
        if args.tree and args.tree.exists():  # the tree and the patches (tools/fetch_ggml.py --record)
            info["tree"] = json.loads(args.tree.read_text())
        args.build_info.write_text(json.dumps(info, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
