"""Write pyggml/_pinned_api.json: the C API of the pinned ggml and llama.cpp as pyggml's wrappers were written
for it, read from a build of the pin (every function's C type as cffi spells it, every enum's members).

On another tree (PYGGML_GGML_SOURCE, PYGGML_LLAMA_SOURCE) pyggml._native compares what that build has with this
record: a function or enum member the tree lacks, or a function whose C type differs, makes what uses it refuse
with the reason instead of failing the import. Run it after bumping the pin, in a build of the pin
(tests/test_trees.py checks the record is current there):

    python tools/gen_pinned_api.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "pyggml" / "_pinned_api.json"
GUARDED = "pyggml_guarded_"
# a device backend's own functions (ggml-vulkan.h, ggml-cuda.h, ...): in a build of that backend only, so not part
# of what every build of the pin has (the record is of the default build: CPU, RPC, libllama)
DEVICE_BACKEND = re.compile(r"^ggml_backend_(is_)?(vk|cuda|metal|sycl|hip|opencl|cann|musa|webgpu|blas)(_|$)")


def record() -> dict:
    from pyggml import build_info
    from pyggml._native import ffi, real_lib

    tree = build_info().get("tree") or {}
    if tree.get("tree") != "pin":
        raise SystemExit("gen_pinned_api: this build is not of the pin (python -m pyggml info says its tree)")
    functions = {}
    for name in dir(real_lib):
        value = getattr(real_lib, name)
        # ggml's, gguf's and llama.cpp's functions, and the guarded twins of ggml.h's (tools/gen_ffi.py)
        if DEVICE_BACKEND.match(name):
            continue
        if callable(value) and (name.startswith(GUARDED) or not name.startswith("pyggml_")):
            functions[name] = ffi.typeof(value).cname
    from pyggml import _pyggml_cffi

    cdef_text = (Path(_pyggml_cffi.__file__).parent / "cdef.h").read_text()  # installed beside the module
    enums = {}
    for c_enum in sorted(set(re.findall(r"\benum (\w+) \{", cdef_text))):
        enums[f"enum {c_enum}"] = sorted(ffi.typeof(f"enum {c_enum}").relements)
    # what pyggml.types answers for a type an older ggml lacks (its cases are then built, and refused at run)
    type_traits = {
        t.name: [real_lib.ggml_blck_size(t), real_lib.ggml_type_size(t), bool(real_lib.ggml_is_quantized(t))]
        for t in __import__("pyggml").types.Type
    }
    return {"ggml_version": tree.get("ggml_version"), "functions": functions, "enums": enums, "types": type_traits}


def main() -> int:
    OUT.write_text(json.dumps(record(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {OUT.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
