"""The kinds of ggml backend pyggml knows, in one table: what builds each, how its devices are named, what is
checked before it computes, and what to say when a device of it is missing.

Adding a backend kind (a ggml backend pyggml does not build yet) is one `BackendKind` in `KINDS`: `device`,
`check --backend`, `python -m pyggml info` and the preflight read it from here (docs/layout.md has an
example).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendKind:
    """One kind of ggml backend.

    Attributes:
        family: pyggml's name for its devices without the index (`vulkan` for vulkan0, vulkan1, ...), as ggml's
            device names lower-cased; also the name `build_info()["backends"]` lists when it is built.
        label: its name in messages (Vulkan).
        cmake_option: the ggml CMake option that builds it (`CMAKE_ARGS="-D<option>=ON" pip install -e .`).
        preflight: the `pyggml.preflight` module whose rules hold for its devices ("" none of its own).
        missing: what to add when it is built but a device of it is not listed ("" nothing).
        aliases: other names users give it (rocm for hip).
    """

    family: str
    label: str
    cmake_option: str
    preflight: str = ""
    missing: str = ""
    aliases: tuple[str, ...] = ()


KINDS: tuple[BackendKind, ...] = (
    BackendKind("cpu", "CPU", "GGML_CPU", "pyggml.preflight.cpu"),
    BackendKind(
        "vulkan",
        "Vulkan",
        "GGML_VULKAN",
        "pyggml.preflight.vulkan",
        missing="ggml lists CPU-type Vulkan devices (Mesa's lavapipe) only when GGML_VK_VISIBLE_DEVICES names them, "
        "e.g. GGML_VK_VISIBLE_DEVICES=0 (or 0,0 for the same device twice), set before the first device is listed "
        "(pyggml.enable_cpu_vulkan_devices(); check's --vk-devices)",
    ),
    BackendKind(
        "cuda",
        "CUDA",
        "GGML_CUDA",
        missing="CUDA is built, but the CUDA runtime found no NVIDIA GPU or driver it can use (ggml's message on "
        "stderr says which)",
    ),
    BackendKind(
        "rpc",
        "RPC",
        "GGML_RPC",
        "pyggml.preflight.rpc",
        missing="RPC devices come from servers: start one with `python -m pyggml rpc-server` and add it "
        "(pyggml.rpc.add_server, check's --rpc HOST:PORT): rpc0, rpc1, ... in that order",
    ),
    BackendKind("metal", "Metal", "GGML_METAL"),
    BackendKind("sycl", "SYCL", "GGML_SYCL"),
    BackendKind("hip", "HIP", "GGML_HIP", aliases=("rocm",)),
    BackendKind("opencl", "OpenCL", "GGML_OPENCL"),
    BackendKind("cann", "CANN", "GGML_CANN"),
    BackendKind("musa", "MUSA", "GGML_MUSA"),
    BackendKind("webgpu", "WebGPU", "GGML_WEBGPU"),
    BackendKind("blas", "BLAS", "GGML_BLAS"),
)


def kind(family: str) -> BackendKind | None:
    """The kind of this device family or alias (case-insensitive), None for one pyggml does not know.

    Args:
        family: a device name without its index (vulkan), or an alias (rocm).

    Returns:
        The BackendKind, or None.
    """
    family = family.lower()
    return next((k for k in KINDS if family == k.family or family in k.aliases), None)


def of_device(name: str) -> BackendKind | None:
    """The kind of a device by its name (Vulkan0, CPU, rocm1), None for one pyggml does not know.

    Args:
        name: a device name, with or without its index.

    Returns:
        The BackendKind, or None.
    """
    return kind(split(name)[0])


def split(name: str) -> tuple[str, int | None]:
    """A device's name taken apart into its family and its index: `Vulkan1` -> (vulkan, 1), `CPU` -> (cpu, None),
    `rpc10` -> (rpc, 10). The one place a device name is split (`pyggml.target` splits backend names with it).

    Args:
        name: a device name, with or without its index, in any case.

    Returns:
        (the name without its index, lower case; the index, None without one).
    """
    m = re.fullmatch(r"(.*?)(\d*)", name.strip().lower(), re.DOTALL)
    assert m is not None  # the pattern matches every string
    return m.group(1), int(m.group(2)) if m.group(2) else None


def build_hint(k: BackendKind) -> str:
    """How to build a kind in: the command line.

    Args:
        k: the kind.

    Returns:
        `CMAKE_ARGS="-D<option>=ON" pip install -e .`
    """
    return f'CMAKE_ARGS="-D{k.cmake_option}=ON" pip install -e .'


if __name__ == "__main__":
    # The build reads the table from here (CMakeLists.txt runs this file as a script, before pyggml exists):
    # one line `family OPTION` per kind, so the backends a build reports come from KINDS, not from a second list.
    for k in KINDS:
        print(k.family, k.cmake_option)
