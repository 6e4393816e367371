"""llama.cpp's own random models, of every architecture its model saver writes.

llama.cpp's `tests/test-llama-archs.cpp` builds a small random model of each architecture through
libllama's public `llama_model_init_from_user` and saves it (`-o DIR`). pyggml builds that program,
from the same pinned sdist as its libllama, as `llama-archs` beside its module (native/llama_archs.cpp),
and runs it here: one child process per file, so a model llama.cpp cannot make is an exception, not a
death.

Names: an architecture with one variant is named as llama.cpp names it (`deepseek4`, `gemma3`);
one with a dense and a mixture-of-experts variant gives `ARCH` (dense) and `ARCH-moe` (`llama-moe`).

    from pyggml.models import llama_archs
    llama_archs.names()                                    # ['llama', 'llama-moe', 'llama4', ...]
    llama_archs.generate("deepseek4", "/tmp/ds4.gguf", seed=1)
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PROGRAM = "llama-archs"
STDEV = 0.1  # test-llama-archs.cpp's default: weights normal with this standard deviation


@dataclass(frozen=True)
class Variant:
    """One model llama.cpp's generator saves.

    Attributes:
        name: pyggml's name for it (`ARCH`, or `ARCH-moe` for the MoE variant of an architecture with both).
        arch: llama.cpp's architecture name (`general.architecture`).
        moe: the mixture-of-experts variant.
    """

    name: str
    arch: str
    moe: bool


def program() -> Path:
    """The `llama-archs` program of this build.

    Returns:
        Its path, beside pyggml's compiled module.

    Raises:
        RuntimeError: this build has none (built without libllama, or from a llama.cpp tree without
            tests/test-llama-archs.cpp).
    """
    from pyggml._native import install_dir

    path = install_dir() / PROGRAM
    if not path.is_file():
        raise RuntimeError(
            f"this pyggml has no {PROGRAM} (llama.cpp's generator of random models): it was built without "
            "libllama or from a llama.cpp tree without tests/test-llama-archs.cpp"
        )
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not executable: reinstall pyggml (or chmod +x it)")
    return path


@functools.cache
def variants() -> tuple[Variant, ...]:
    """Every model the generator saves, in llama.cpp's order of architectures.

    Returns:
        The `Variant`s, as `llama-archs --list` prints them.

    Raises:
        RuntimeError: no `llama-archs` in this build, or it failed.
    """
    out = subprocess.run([program(), "--list"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{PROGRAM} --list failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    pairs = [line.split() for line in out.stdout.splitlines() if line.strip()]
    kinds: dict[str, set[str]] = {}
    for arch, kind in pairs:
        kinds.setdefault(arch, set()).add(kind)
    return tuple(
        Variant(f"{arch}-moe" if kind == "moe" and len(kinds[arch]) > 1 else arch, arch, kind == "moe")
        for arch, kind in pairs
    )


def names() -> list[str]:
    """pyggml's names of the models the generator saves.

    Returns:
        `ARCH`, or `ARCH-moe` for the MoE variant of an architecture with both, in llama.cpp's order.
    """
    return [v.name for v in variants()]


def variant(name: str) -> Variant:
    """The model named `name`.

    Args:
        name: `ARCH`, `ARCH-moe` (`ARCH-dense` is also taken).

    Returns:
        Its `Variant`.

    Raises:
        ValueError: no such model (the message says how to list them).
    """
    for v in variants():
        if name in (v.name, f"{v.arch}-{'moe' if v.moe else 'dense'}"):
            return v
    raise ValueError(
        f"{name!r}: llama.cpp's generator saves no such model ({len(variants())} it does: "
        "python -m pyggml make-model --list)"
    )


def generate(name: str, path: str | os.PathLike[str], seed: int = 0, stdev: float = STDEV) -> Path:
    """Write llama.cpp's random model `name` to `path` (F32 and F16 weights, as llama.cpp makes them).

    Args:
        name: the model (`names()`).
        path: the GGUF file to write.
        seed: the weights' seed (llama.cpp's: each tensor's normal values from seed ^ hash(name)).
        stdev: the weights' standard deviation, > 0.

    Returns:
        The file written.

    Raises:
        ValueError: an unknown name or a bad argument.
        FileNotFoundError: the file's folder does not exist.
        RuntimeError: llama.cpp's generator failed (its message).
    """
    v = variant(name)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    if not stdev > 0:
        raise ValueError(f"stdev must be > 0, got {stdev!r}")
    target = Path(path)
    if not target.parent.resolve().is_dir():
        raise FileNotFoundError(f"cannot write {target}: no directory {target.parent}")
    if target.is_dir():
        raise IsADirectoryError(f"cannot write {target}: it is a directory")
    with tempfile.TemporaryDirectory(dir=target.parent.resolve()) as tmp:
        cmd = [str(program()), "-a", v.arch, "-s", str(seed), "-d", repr(float(stdev)), "-o", tmp]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        made = Path(tmp) / f"{v.arch}-{'moe' if v.moe else 'dense'}.gguf"
        if out.returncode != 0 or not made.is_file():
            tail = (out.stderr or out.stdout).strip()[-800:]
            raise RuntimeError(f"llama.cpp's generator did not write {v.name} (exit {out.returncode}): {tail}")
        shutil.move(made, target)  # the same file system: a rename
    return target
