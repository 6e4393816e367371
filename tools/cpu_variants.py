"""The CPU variants an editable build makes (CMakeLists.txt, PYGGML_CPU_VARIANTS=native): x64, ggml's baseline
without SIMD, and the variant with the most features this machine has, of ggml's list for x86-64. Prints them
as a CMake list (nothing where this is not an x86-64 Linux machine).

    python tools/cpu_variants.py GGML_SOURCE_DIR
"""

from __future__ import annotations

import importlib.util
import platform
import re
import sys
from pathlib import Path

_features = Path(__file__).resolve().parent.parent / "pyggml" / "cpu_features.py"
_spec = importlib.util.spec_from_file_location("cpu_features", _features)
cpu_features = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_features)

_VARIANT = re.compile(r"^[ \t]*ggml_add_cpu_backend_variant\(([^)\s]+)([^)]*)\)", re.M)


def x86_variants(cmake_text: str) -> dict[str, list[str]]:
    """ggml's x86 variants and the features each needs, in ggml's order."""
    start = cmake_text.index('GGML_SYSTEM_ARCH STREQUAL "x86"', cmake_text.index("if (GGML_CPU_ALL_VARIANTS)"))
    end = cmake_text.index("elseif", start)
    return {m[1]: m[2].split() for m in _VARIANT.finditer(cmake_text[start:end])}


def native(ggml_dir: Path) -> list[str]:
    flags = cpu_features.machine_flags()
    if flags is None or platform.machine() not in ("x86_64", "AMD64"):
        return []
    variants = x86_variants((ggml_dir / "src" / "CMakeLists.txt").read_text())
    runs = [n for n, feats in variants.items() if cpu_features.lacking(feats, flags) == []]
    best = max(runs, key=lambda n: len(variants[n]), default=None)
    return [n for n in dict.fromkeys(["x64", best]) if n is not None and n in variants]


if __name__ == "__main__":
    print(";".join(native(Path(sys.argv[1]))))
