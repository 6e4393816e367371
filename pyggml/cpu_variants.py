"""ggml's CPU backend in its run-time variants (x64, haswell, skylakex, zen4, sapphirerapids, ...), as llama.cpp's
releases ship it, each a backend to check: `cpu:zen4`, `cpu:best` (the one ggml would choose here), and in `check`
`cpu:all` (every variant this machine runs).

The variants are ggml's own loadable modules (GGML_CPU_ALL_VARIANTS with GGML_BACKEND_DL), built beside the
module from the same patched source (native/cpu_variants, the build's PYGGML_CPU_VARIANTS) with a ggml-base of
their own (libpyggml-cpu-base.so): each is asked for ggml's score of this CPU (0: it lacks a feature the
variant was compiled for) and made a device by its own `ggml_backend_init`. `cpu`, and libllama's CPU, is the
best variant in a portable build (the wheel), this build's own CPU backend in a native one, or what
`PYGGML_CPU_VARIANT` names (`choice`); `python -m pyggml info` says which, with the features of each.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyggml import cpu_features
from pyggml._native import ffi, install_dir, lib, real_lib

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

PREFIX = "cpu:"
ALL = "cpu:all"
BEST = "cpu:best"
BUILD_HINT = (
    'CMAKE_ARGS="-DPYGGML_CPU_VARIANTS=all" pip install -e .  (ggml\'s whole list; an editable build makes x64 and '
    "the best this machine runs, `pip install .` and the wheel all of them: docs/building.md)"
)


@dataclass(frozen=True)
class Variant:
    """One of ggml's CPU variants built with this pyggml.

    Attributes:
        name: ggml's name for it (haswell, zen4, ...).
        features: the features it was compiled for, in ggml's names (AVX2, AVX512_VNNI, ...).
        score: ggml's score of it on this machine (`ggml_backend_score`): 0 when this CPU cannot run it, higher for
            a better fit; ggml loads the highest.
        path: its module.
    """

    name: str
    features: tuple[str, ...]
    score: int
    path: Path

    @property
    def runs_here(self) -> bool:
        """Whether this CPU can run it (ggml's score above 0)."""
        return self.score > 0

    def lacking(self) -> list[str] | None:
        """The features this machine lacks for it.

        Returns:
            ggml's names of the features missing here ([] for none); None where pyggml cannot tell (no
            /proc/cpuinfo): ggml's score still says.
        """
        return cpu_features.lacking(list(self.features))


def folder() -> Path:
    """Where the variants' modules are installed.

    Returns:
        The folder pyggml/cpu_variants beside the compiled module.
    """
    return install_dir() / "cpu_variants"


_handles: dict[str, ctypes.CDLL] = {}


def _open(path: Path) -> ctypes.CDLL:
    if str(path) not in _handles:
        _handles[str(path)] = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
    return _handles[str(path)]


def _address(handle: ctypes.CDLL, name: str) -> int:
    address = ctypes.cast(getattr(handle, name), ctypes.c_void_p).value
    if address is None:
        raise RuntimeError(f"{handle._name} has no {name}")
    return address


@functools.cache
def _listing() -> dict:
    listing = folder() / "variants.json"
    return json.loads(listing.read_text()) if listing.exists() else {"cpu": "builtin", "variants": {}}


@functools.cache
def built() -> dict[str, Variant]:
    """The variants this build has, each scored on this machine.

    Loading one to score it runs no code of its features (ggml's own loader does the same).

    Returns:
        {name: Variant} in ggml's order; {} for a build without variants.
    """
    out = {}
    for name, feats in _listing()["variants"].items():
        path = folder() / f"libggml-cpu-{name}.so"
        if path.exists():
            out[name] = Variant(name, tuple(feats), int(_open(path).ggml_backend_score()), path)
    return out


def runnable() -> list[Variant]:
    """The variants this machine can run.

    Returns:
        Those ggml scores above 0 here, in ggml's order.
    """
    return [v for v in built().values() if v.runs_here]


def best() -> Variant | None:
    """The variant ggml would load here (`ggml_backend_load_best`: the highest score) of those whose probe
    survived (`probe`).

    Returns:
        The variant, None where this machine runs none.
    """
    return next((v for v in sorted(runnable(), key=lambda v: -v.score) if probe(v.name) is None), None)


# what the probe computes, in a child process: a quantized, an F16 and an F32 product on the variant, and the
# quantized ones again with the weight in each of its extra buffer types (CPU_REPACK, AMX: the kernels llama.cpp
# runs on weights it puts there, and where AMX's products died, docs/findings.md 37)
_PROBE = """
import sys
import numpy as np
import pyggml as gg
from pyggml import cpu_variants, ffi, lib, types
from pyggml.transport import device_extra_buffer_types
bufts = device_extra_buffer_types(cpu_variants.device_ptr("cpu:" + sys.argv[1]))
with gg.Runner("cpu:" + sys.argv[1]) as runner:
    for t, where in [(t, None) for t in ("q4_0", "q8_0", "f16", "f32")] + [(t, b) for b in bufts for t in ("q4_0", "q8_0")]:
        ctx, wctx = gg.Context(), gg.Context()
        a = wctx.tensor(t, (64, 256), "a") if where else ctx.tensor(t, (64, 256), "a", input=True)
        b = ctx.tensor("f32", (8, 256), "b", input=True)
        y = ctx.mul_mat(a, b)
        inputs = {b: np.ones((8, 256))}
        if where:
            buf = lib.ggml_backend_alloc_ctx_tensors_from_buft(wctx.ptr, where)
            if a.ptr.extra == ffi.NULL:  # the buffer type has no layout for this weight here (llama.cpp asks so)
                lib.ggml_backend_buffer_free(buf)
                continue
            a.set_raw(types.encode(types.Type[t.upper()], np.ones((64, 256), np.float32)))
        else:
            inputs[a] = np.ones((64, 256))
        out = runner.run(gg.Graph(ctx).build_forward_expand(y), inputs, y)
        assert np.allclose(out, 256, rtol=1e-2), (t, out)  # Q8_0 activations round
        if where:
            lib.ggml_backend_buffer_free(buf)
        print("passed:", t, ffi.string(lib.ggml_backend_buft_name(where)).decode() if where else "")
"""


def _probe_cache() -> Path:
    base = os.environ.get("PYGGML_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pyggml"
    )
    return Path(base) / "cpu-variant-probes.json"


def _probe_key(name: str) -> str:
    # the module as built and the machine it runs on: a new build or another CPU probes again
    st = built()[name].path.stat()
    try:
        model = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), "")
    except OSError:  # no /proc: the build alone
        model = ""
    probe_text = hashlib.sha256(_PROBE.encode()).hexdigest()[:12]  # and a probe that computes more probes again
    return f"{built()[name].path}|{st.st_size}|{st.st_mtime_ns}|{model}|{probe_text}"


@functools.cache
def probe(name: str) -> str | None:
    """Whether a variant computes products here without dying, tried in a child process once per build and
    machine (kept in the cache folder, cpu-variant-probes.json; docs/findings.md 37: AMX kernels that killed
    the process).

    Args:
        name: the variant (zen4).

    Returns:
        None when the probe passed, else how it died.
    """
    import subprocess
    import sys

    cache = _probe_cache()
    key = _probe_key(name)
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    # the child's own `cpu` is the linked-in one: it neither chooses nor probes at its import
    env = dict(os.environ, PYGGML_CPU_VARIANT="builtin")
    proc = subprocess.run([sys.executable, "-c", _PROBE, name], capture_output=True, text=True, timeout=300, env=env)
    why = None
    if proc.returncode != 0:
        died = (
            f"signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exit status {proc.returncode} (a wrong product, or an error)"
        )
        last = proc.stderr.strip().splitlines()[-1:] or [""]
        why = f"its probe (products of Q4_0, Q8_0, F16 and F32 in a child process, the quantized ones also in its extra buffer types) died: {died} {last[0]}".strip()
    known[key] = why
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1))
    except OSError:
        pass  # a read-only home: probed again by the next process
    return why


ENV = "PYGGML_CPU_VARIANT"


def choice() -> Variant | None:
    """The variant pyggml's `cpu` is (and libllama's CPU), None for this build's own CPU backend.

    `PYGGML_CPU_VARIANT` decides where set: a variant's name, `best`, or `builtin`. Otherwise the build does: a
    portable build (the wheel, `pip install .`) takes the best variant ggml scores here whose probe survived, since
    its own CPU backend is compiled for the oldest CPUs it runs on; a native build (an editable install) its own,
    compiled for this machine.

    Returns:
        The variant, None for this build's own CPU backend.

    Raises:
        ValueError: PYGGML_CPU_VARIANT names a variant not built or not for this CPU.
    """
    wanted = os.environ.get(ENV, "").strip().lower() or _listing()["cpu"]
    if wanted == "builtin":
        return None
    if wanted == "best":
        return best()
    why = error(PREFIX + wanted)
    if why:
        raise ValueError(f"{ENV}={wanted}: {why} (builtin: this build's own CPU backend)")
    return built()[wanted]


_chosen: Variant | None = None


def install_choice() -> Variant | None:
    """Make `choice()` the process's CPU (pyggml.backend does at import): ggml's registry gives its device for
    `cpu` and to libllama (ggml patch 0036, `ggml_backend_register_cpu_instead`). Once.

    Returns:
        The variant, None when the CPU stays this build's own.
    """
    global _chosen
    if _chosen is None:
        v = choice()
        if v is not None:
            lib.ggml_backend_register_cpu_instead(lib.ggml_backend_dev_backend_reg(_device_ptr(v.name)))
            _chosen = v
    return _chosen


def why_in_use() -> str:
    """Why the process's CPU is what it is.

    Returns:
        The reason in words (the environment variable, or the build's kind).
    """
    if os.environ.get(ENV, "").strip():
        return f"{ENV}={os.environ[ENV].strip()}"
    if _listing()["cpu"] == "best":
        return "a portable build takes the best variant this machine runs"
    return "a native build's own CPU backend is this machine's; PYGGML_CPU_VARIANT=best takes a variant"


def in_use() -> Variant | None:
    """The variant that is the process's CPU.

    Returns:
        The variant, None when the CPU is this build's own CPU backend.
    """
    return _chosen


def names_for(spec: str) -> list[str]:
    """The backend names a `check --backend` value stands for.

    Args:
        spec: a backend name.

    Returns:
        For `cpu:all` every variant this machine runs, for `cpu:best` the best, else the name itself.
    """
    spec = spec.lower()
    if spec == ALL:
        return [PREFIX + v.name for v in runnable()]
    chosen = best() if spec == BEST else None
    return [PREFIX + chosen.name] if chosen is not None else [spec]


def error(name: str) -> str | None:
    """Why a `cpu:NAME` backend cannot be had here (unknown, not built, not for this CPU), with what to do.

    Args:
        name: `cpu:zen4`, `cpu:best`, `cpu:all`.

    Returns:
        The reason, None when it can.
    """
    tag = name.lower()[len(PREFIX) :]
    have = built()
    if not have:
        return f"no backend {name!r}: this build has no CPU variants (only its own CPU backend, `cpu`). Build them: {BUILD_HINT}"
    if tag in ("all", "best"):
        return (
            None
            if runnable()
            else f"no backend {name!r}: this machine runs none of the CPU variants built ({', '.join(have)})"
        )
    v = have.get(tag)
    if v is None:
        return (
            f"no backend {name!r}: {tag!r} is not one of the CPU variants built: {', '.join(have)} "
            f"(cpu:all runs every one this machine can; another of ggml's: {BUILD_HINT})"
        )
    if not v.runs_here:
        lacks = v.lacking()
        why = f"it lacks {', '.join(lacks)}" if lacks else "ggml's score of it here is 0"
        return f"no backend {name!r}: this CPU cannot run the {tag} variant ({why}); it runs: {', '.join(x.name for x in runnable())}"
    return None


_wired = False


def _wire_base() -> None:
    """The variants' ggml-base reports aborts and logs as pyggml's own does (pyggml._native)."""
    global _wired
    if _wired:
        return
    base = _open(folder() / "libpyggml-cpu-base.so")
    set_abort = ffi.cast("ggml_abort_callback_t (*)(ggml_abort_callback_t)", _address(base, "ggml_set_abort_callback"))
    set_abort(ffi.addressof(real_lib, "pyggml_abort_hook"))
    log_set = ffi.cast("void (*)(ggml_log_callback, void *)", _address(base, "ggml_log_set"))
    log_set(lib.pyggml_log_callback, ffi.NULL)
    atexit.register(log_set, ffi.NULL, ffi.NULL)  # as pyggml._native: no Python from ggml's threads at exit
    _wired = True


@functools.cache
def _device_ptr(tag: str) -> CData:
    _wire_base()
    init = ffi.cast("ggml_backend_reg_t (*)(void)", _address(_open(built()[tag].path), "ggml_backend_init"))
    reg = init()
    if reg == ffi.NULL or lib.ggml_backend_reg_dev_count(reg) < 1:
        raise RuntimeError(f"ggml's {tag} CPU variant made no device")
    return lib.ggml_backend_reg_dev_get(reg, 0)


def device_ptr(name: str) -> CData:
    """The device of a variant, made once.

    Args:
        name: `cpu:zen4`, or `cpu:best` for the best.

    Returns:
        Its `ggml_backend_dev_t`.

    Raises:
        ValueError: a variant not built or not for this CPU (`error`).
    """
    why = error(name) if name.lower() != ALL else f"{ALL} is every variant this machine runs, not one backend"
    if why:
        raise ValueError(why)
    tag = names_for(name)[0][len(PREFIX) :]
    return _device_ptr(tag)
