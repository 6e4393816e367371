"""What this machine's CPU has, in the names of ggml's CPU variant features (GGML_AVX2, GGML_AVX512_VNNI, ...).

Plain Python with no import of the native module: the build reads it too (tools/cpu_variants.py chooses the
variants an editable build makes) before there is a module to import.
"""

from __future__ import annotations

from pathlib import Path

# ggml's feature names (the arguments of ggml_add_cpu_backend_variant, ggml/src/CMakeLists.txt) against the
# flags Linux lists in /proc/cpuinfo; GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq
# -mavx512bw (ggml-cpu/CMakeLists.txt), so it needs all five
FLAGS: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",),
    "AVX": ("avx",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "AVX2": ("avx2",),
    "BMI2": ("bmi2",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AVX_VNNI": ("avx_vnni",),
    "AMX_TILE": ("amx_tile",),
    "AMX_INT8": ("amx_int8",),
    "AMX_BF16": ("amx_bf16",),
}


def machine_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU flags Linux lists for this machine's first CPU.

    Args:
        cpuinfo: the file to read.

    Returns:
        The flags (avx2, avx512f, ...), None where there is no such file.
    """
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def lacking(features: list[str], flags: set[str] | None = None) -> list[str] | None:
    """The features of a list this machine lacks.

    Args:
        features: ggml's names (AVX2, AVX512_VNNI, ...).
        flags: the CPU's flags; None reads this machine's (`machine_flags`).

    Returns:
        Those it lacks, in order; None where it cannot tell (no /proc/cpuinfo, or a feature with no flag here).
    """
    flags = machine_flags() if flags is None else flags
    if flags is None or any(f not in FLAGS for f in features):
        return None
    return [f for f in features if not set(FLAGS[f]) <= flags]
