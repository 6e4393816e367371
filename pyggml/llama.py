"""llama.cpp's models from Python: a thin layer over libllama, built into pyggml's module.

    from pyggml.llama import Model, Context
    model = Model.load("model.gguf")                     # llama_model_load_from_file
    ctx = Context(model, n_ctx=512, n_batch=64)          # llama_init_from_model
    ctx.decode([1, 15043, 3186])                         # llama_batch + llama_decode
    next_logits = ctx.logits(-1)                         # the last token's logits, NumPy (n_vocab,)

libllama is linked against pyggml's own (patched) ggml: one ggml in the process, whose log goes to
the logger "pyggml.ggml" like the rest of pyggml's (llama.cpp's log too: llama_log_set).
`llama_backend_init` runs once, when this module is imported. The whole C API of llama.h is
`pyggml.lib.llama_*` (unchecked, as the rest of `lib`).

Errors, not crashes. A missing model file raises FileNotFoundError before llama.cpp sees it; a file
llama.cpp cannot load raises `LlamaError` naming the file and the reason llama.cpp logged;
llama_decode's failure codes raise `LlamaError` saying what they mean; arguments llama.cpp would
trip over (token ids outside the vocabulary, positions or sequence ids of the wrong length or
range, a batch larger than n_batch, a logits index that produced no output) raise ValueError
before the C call.

Why the arguments are checked here instead of catching llama.cpp's asserts: pyggml turns a
GGML_ASSERT into an exception only inside the pure-C functions of ggml.h (tools/gen_ffi.py), where
its abort hook may longjmp back to the guarded call. llama.cpp is C++: between the assert and the
call from Python lie C++ frames with destructors (std::vector, std::unique_ptr, locks held by
std::lock_guard), and longjmp over them skips the destructors, leaks their memory, leaves mutexes
locked and the model's or context's state half-updated; C++ does not allow it (undefined behaviour
for any frame with a non-trivial destructor). So no jump is armed around llama.cpp's functions: a
GGML_ASSERT inside them still aborts the process (after the Python call site is printed), and this
module checks, before each call, what the asserts it can reach would check.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from pyggml import cpu_variants, threads
from pyggml._native import build_info, ffi, lib, logged_warnings
from pyggml._native import log as native_log
from pyggml.backend import Device, EvalObserver, device
from pyggml.conversation import Script, Step, Transcript, converse, detokenize, no_draft, tokenize
from pyggml.drift import BOUND, Comparison, Recorder, logit_stats
from pyggml.errors import LlamaError
from pyggml.lifetime import Closable
from pyggml.node_reader import NodeReader, kept_while
from pyggml.target import Target
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

__all__ = [
    "Model",
    "Context",
    "Script",
    "Step",
    "Transcript",
    "converse",
    "no_draft",
    "tokenize",
    "detokenize",
    "Recorder",
    "Comparison",
    "Run",
    "record",
    "compare",
    "held_against",
    "record_pair",
    "LlamaError",
    "SplitMode",
    "file_types",
    "max_devices",
    "quantize",
    "system_info",
]

if "llama.h" not in build_info()["headers"]:
    raise ImportError("this pyggml was built without libllama (PYGGML_LLAMA=OFF): rebuild with it to use pyggml.llama")

SplitMode = Literal["none", "layer", "row", "tensor"]
_SPLIT_MODES: dict[str, int] = {
    "none": lib.LLAMA_SPLIT_MODE_NONE,
    "layer": lib.LLAMA_SPLIT_MODE_LAYER,
    "row": lib.LLAMA_SPLIT_MODE_ROW,
    "tensor": lib.LLAMA_SPLIT_MODE_TENSOR,
}

# llama.cpp logs through its own hook (llama_log_set also sets ggml's): route both to pyggml's
# callback, and back to stderr at exit (a log call into Python during finalization would hang)
lib.llama_log_set(lib.pyggml_log_callback, ffi.NULL)
atexit.register(lib.llama_log_set, ffi.NULL, ffi.NULL)
lib.llama_backend_init()


def max_devices() -> int:
    """The most devices llama.cpp splits a model over (`llama_max_devices`).

    Returns:
        The count.
    """
    return int(lib.llama_max_devices())


def system_info() -> str:
    """llama.cpp's summary of the CPU features and backends of this build (`llama_print_system_info`).

    Returns:
        The text.
    """
    return ffi.string(lib.llama_print_system_info()).decode("utf-8", "replace")


def file_types() -> dict[str, int]:
    """The file types this libllama's quantizer writes (llama.h's `enum llama_ftype`), read from the header it
    was built with: `{"f32": 0, "f16": 1, "q4_0": 2, ..., "q4_k_m": 15, ...}`.

    The IQ1, IQ2 and IQ3 types (but IQ3_S and IQ3_M's larger members) need an importance matrix, which
    llama.cpp's quantizer asks for (`quantize` raises its reason).

    Returns:
        {lower-case name: the enum's value}.
    """
    prefix = "LLAMA_FTYPE_MOSTLY_"
    out = {"f32": int(lib.LLAMA_FTYPE_ALL_F32)}
    out.update({n[len(prefix) :].lower(): int(getattr(lib, n)) for n in dir(lib) if n.startswith(prefix)})
    return out


def quantize(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    file_type: str,
    n_threads: int = 0,
    imatrix: Mapping[str, ArrayLike] | None = None,
    token_embedding_type: str | None = None,
    output_tensor_type: str | None = None,
) -> None:
    """Write `src`'s model as `file_type`, with llama.cpp's own quantizer (`llama_model_quantize`), as
    llama.cpp's `llama-quantize [--imatrix FILE] SRC DST TYPE` does.

    Args:
        src: a GGUF model file (F32, F16 or BF16 weights).
        dst: the file to write.
        file_type: a name of `file_types()`, in any case ("Q4_K_M", "q8_0", "bf16", ...).
        n_threads: threads for the quantizer; 0: the machine's cores.
        imatrix: an importance matrix, weight name -> values (`pyggml.models.imatrix.compute`): what the
            IQ1/IQ2/IQ3_XXS types need, and what the others use where given.
        token_embedding_type: the token embedding's ggml type ("q8_0", "f16", ...) instead of the file type's
            choice, as `llama-quantize --token-embedding-type`.
        output_tensor_type: the output weight's ggml type, as `llama-quantize --output-tensor-type`.

    Raises:
        ValueError: an unknown file type (the message lists this libllama's), an unknown tensor type, or a
            negative n_threads.
        FileNotFoundError: `src` does not exist.
        LlamaError: llama.cpp refused or failed (its logged reason: a type that needs an importance matrix,
            a file it cannot read, ...).
    """
    types = file_types()
    key = str(file_type).lower()
    if key not in types:
        raise ValueError(f"quantize: unknown file type {file_type!r}; this libllama writes: {', '.join(types)}")
    if int(n_threads) < 0:
        raise ValueError(f"quantize: n_threads must be 0 (the cores) or more, not {n_threads}")
    src_path, dst_path = os.fspath(src), os.fspath(dst)
    if not os.path.isfile(src_path):
        raise FileNotFoundError(f"quantize: no such file: {src_path}")
    params = ffi.new("llama_model_quantize_params *", lib.llama_model_quantize_default_params())
    params.ftype = types[key]
    params.nthread = int(n_threads)
    from pyggml.types import as_type

    for field_name, value in (
        ("token_embedding_type", token_embedding_type),
        ("output_tensor_type", output_tensor_type),
    ):
        if value is not None:
            try:
                setattr(params, field_name, int(as_type(value)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"quantize: {field_name} {value!r}: {e}") from None
    keep = []  # the C arrays the entries point into, alive until llama.cpp has copied them
    if imatrix:
        entries = ffi.new("struct llama_model_imatrix_data[]", len(imatrix) + 1)  # ends with a NULL name
        keep.append(entries)
        for i, (name, values) in enumerate(imatrix.items()):
            data = np.ascontiguousarray(values, dtype=np.float32).ravel()
            if not np.isfinite(data).all():
                raise ValueError(f"quantize: imatrix[{name!r}] has values that are not finite")
            keep += [ffi.new("char[]", name.encode()), ffi.from_buffer("float[]", data)]
            entries[i].name, entries[i].data, entries[i].size = keep[-2], keep[-1], data.size
        params.imatrix = entries
    existed = os.path.exists(dst_path)
    with logged_warnings() as lines:
        rc = lib.llama_model_quantize(_c_str(src_path), _c_str(dst_path), params)
    if rc != 0:
        if not existed and os.path.exists(dst_path):  # llama.cpp leaves what it began to write: not a model
            os.remove(dst_path)
        raise LlamaError(f"llama.cpp could not quantize {src_path} to {key}: {_reason(lines, 'no reason logged')}")


def _reason(lines: list[str], default: str) -> str:
    return "; ".join(line.strip() for line in lines[-4:]) or default


def _c_str(text: str) -> bytes:
    return os.fsencode(text)


class Model(Closable):
    """A llama.cpp model (`llama_model *`), loaded from a GGUF file with `Model.load`.

    Freed when the last reference goes; the contexts made from it hold it.

    Args:
        ptr: a loaded `llama_model *` (cffi cdata); use `Model.load` instead.
        path: the file it came from.

    Attributes:
        ptr: the `llama_model *`.
        path: the file it was loaded from.
        vocab: its `llama_vocab *`.

    Raises:
        LlamaError: `ptr` is NULL.
    """

    def __init__(self, ptr: CData, path: str) -> None:
        if ptr == ffi.NULL:
            raise LlamaError(f"{path}: no model")
        self._ptr = ptr
        self.path = path
        self._vocab = lib.llama_model_get_vocab(ptr)
        self._contexts: weakref.WeakSet = weakref.WeakSet()  # the contexts made from it (they hold it)
        self._finalizer = weakref.finalize(self, lib.llama_model_free, ptr)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        n_gpu_layers: int = -1,
        split_mode: SplitMode = "layer",
        devices: Sequence[Device | str] | None = None,
        main_gpu: int = 0,
        vocab_only: bool = False,
        use_mmap: bool = True,
        use_extra_bufts: bool = True,
    ) -> Model:
        """Load a GGUF model (`llama_model_load_from_file`).

        Args:
            path: the GGUF file.
            n_gpu_layers: layers to put on GPU devices (-1: all; 0: the CPU only).
            split_mode: how to split over several devices: "none" (all on `main_gpu`), "layer", "row",
                "tensor" (llama.cpp's tensor split, a meta device).
            devices: the devices to offload to (pyggml Devices or their names); None: every GPU llama.cpp
                finds.
            main_gpu: the device used with split_mode "none".
            vocab_only: load the vocabulary without the weights.
            use_mmap: map the file instead of reading it.
            use_extra_bufts: let the CPU keep weights in its extra buffer types (CPU_REPACK, AMX: layouts of
                its own for Q4_0, Q4_K, IQ4_NL ...), as llama.cpp does by default; False is llama.cpp's
                `--no-repack`. Tensors there cannot be read back (`pyggml.transport.unreadable`).

        Returns:
            The model.

        Raises:
            FileNotFoundError: there is no such file (checked before llama.cpp sees the path).
            IsADirectoryError: the path is a folder.
            TypeError: a path that is neither a str nor an os.PathLike of str.
            ValueError: an unknown split mode, more devices than llama.cpp takes, or no device of a name.
            LlamaError: llama.cpp cannot load the file (its logged reason in the message).
        """
        fspath = os.fspath(path)
        if not isinstance(fspath, str):
            raise TypeError(f"Model.load: path must be a str or os.PathLike[str], not {type(path).__name__}")
        if not os.path.isfile(fspath):
            if os.path.exists(fspath):
                raise IsADirectoryError(f"Model.load: {fspath} is not a file")
            raise FileNotFoundError(f"Model.load: no such file: {fspath}")
        if split_mode not in _SPLIT_MODES:
            raise ValueError(f"Model.load: split_mode must be one of {', '.join(_SPLIT_MODES)}, not {split_mode!r}")
        params = lib.llama_model_default_params()
        params.n_gpu_layers = int(n_gpu_layers)
        params.split_mode = _SPLIT_MODES[split_mode]
        params.main_gpu = int(main_gpu)
        params.vocab_only = bool(vocab_only)
        params.use_extra_bufts = bool(use_extra_bufts)
        if not use_mmap:
            params.load_mode = lib.LLAMA_LOAD_MODE_NONE
        keep: list[object] = []
        if devices is not None:
            devs = [device(d) if isinstance(d, str) else d for d in devices]
            if len(devs) > max_devices():
                raise ValueError(f"Model.load: {len(devs)} devices, llama.cpp takes at most {max_devices()}")
            arr = ffi.new("ggml_backend_dev_t[]", [d.ptr for d in devs] + [ffi.NULL])
            keep.append(arr)
            params.devices = arr
        with logged_warnings() as lines:
            ptr = lib.llama_model_load_from_file(_c_str(fspath), params)
        if ptr == ffi.NULL:
            raise LlamaError(f"llama.cpp could not load {fspath}: {_reason(lines, 'no reason logged')}")
        return cls(ptr, fspath)

    @classmethod
    def for_backend(cls, path: str | os.PathLike[str], backend: str, use_extra_bufts: bool = True) -> Model:
        """Load a model to run on one backend, by its name as `check --backend` takes it.

        Args:
            path: the GGUF file.
            backend: "cpu" (the CPU alone, no GPU even for op offload); a device ("vulkan0", "cuda0", "rpc0":
                every layer on it); "meta:DEV,DEV,..." (llama.cpp's tensor split over those devices).
            use_extra_bufts: as `load`'s (False: llama.cpp's --no-repack).

        Returns:
            The model.

        Raises:
            ValueError: a meta backend naming no device, or an unknown device.
            LlamaError: llama.cpp cannot load the file (and the other errors of `load`).
        """
        target = Target.parse(backend)
        in_use = cpu_variants.in_use()
        if target.name == "cpu" or (in_use is not None and target.variant == in_use.name):
            # the process's CPU, a CPU variant that is one included: llama.cpp's CPU, extra buffer types and all
            return cls.load(path, n_gpu_layers=0, devices=[], use_extra_bufts=use_extra_bufts)
        if target.meta:
            return cls.load(path, devices=list(target.devices), split_mode="tensor", use_extra_bufts=use_extra_bufts)
        return cls.load(path, devices=[target.name], split_mode="none", use_extra_bufts=use_extra_bufts)

    @property
    def vocab(self) -> CData:
        """The model's `llama_vocab *` (part of the model: it raises ValueError once the model is closed)."""
        self.ptr  # noqa: B018 - raises when closed
        return self._vocab

    @property
    def n_vocab(self) -> int:
        """The number of tokens in the vocabulary (`llama_vocab_n_tokens`)."""
        return int(lib.llama_vocab_n_tokens(self.vocab))

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained for (`llama_model_n_ctx_train`; a model loaded with
        `vocab_only` has no hyperparameters: the file's `ARCH.context_length`); 0 where the file says none."""
        n = int(lib.llama_model_n_ctx_train(self.ptr))
        if n:
            return n
        value = self.meta(f"{self.meta('general.architecture')}.context_length") or ""
        return int(value) if value.isdigit() else 0

    @property
    def n_embd(self) -> int:
        """The embedding width (`llama_model_n_embd`)."""
        return int(lib.llama_model_n_embd(self.ptr))

    @property
    def n_layer(self) -> int:
        """The number of layers (`llama_model_n_layer`)."""
        return int(lib.llama_model_n_layer(self.ptr))

    @property
    def n_params(self) -> int:
        """The number of parameters (`llama_model_n_params`)."""
        return int(lib.llama_model_n_params(self.ptr))

    @property
    def size(self) -> int:
        """The bytes of all the weights (`llama_model_size`)."""
        return int(lib.llama_model_size(self.ptr))

    @property
    def arch(self) -> str:
        """The architecture's name, the GGUF key `general.architecture` ("llama", "qwen3", ...).

        Raises:
            LlamaError: the model has no such key.
        """
        value = self.meta("general.architecture")
        if value is None:
            raise LlamaError(f"{self.path}: no general.architecture")
        return value

    def meta(self, key: str) -> str | None:
        """A metadata value as a string (`llama_model_meta_val_str`).

        Args:
            key: the GGUF key, e.g. "general.name".

        Returns:
            The value as llama.cpp formats it, or None when the model has no such key.

        Raises:
            TypeError: `key` is not a str.
        """
        if not isinstance(key, str):
            raise TypeError(f"Model.meta: key must be a str, not {type(key).__name__}")
        size = 256
        while True:
            buf = ffi.new("char[]", size)
            n = lib.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return ffi.string(buf, n).decode("utf-8", "replace")
            size = n + 1

    def description(self) -> str:
        """llama.cpp's one-line description of the model: architecture, size, type (`llama_model_desc`).

        Returns:
            The text.
        """
        buf = ffi.new("char[]", 256)
        n = lib.llama_model_desc(self.ptr, buf, 256)
        return ffi.string(buf, max(0, min(n, 255))).decode("utf-8", "replace")

    def _close(self) -> None:
        """Free the model now (`close()`, or the end of a `with` block); it is refused while a Context made
        from it is open (close those first). Using the model afterwards raises ValueError."""
        if any(not c.closed for c in self._contexts):
            raise ValueError(f"Model.close: a Context of {self.path} is still open: close it first")
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Model {self.path}>"


class Context(Closable):
    """An inference context over a Model (`llama_init_from_model`): the memory (KV cache), the batch's buffers, the last decode's logits.

    It holds its model.

    Args:
        model: the Model.
        n_ctx: the context length in tokens (0: the model's training length).
        n_batch: the most tokens one `decode` takes.
        n_ubatch: the most tokens computed at once (at most `n_batch`).
        n_seq_max: distinct sequences: seq ids are 0 .. n_seq_max - 1.
        n_threads: CPU threads for single tokens (None: the cores this process may run on, `pyggml.threads.cores`;
            llama.cpp's own default of 4 made a decode 18 times slower on 2 cores). On a tensor split over CPU
            devices each device gets them in turn (the meta backend computes its devices one after another).
        n_threads_batch: CPU threads for batches (None: `n_threads`, or the cores).
        embeddings: also extract embeddings.
        offload_kqv: keep the KV cache on the GPU.
        observe: called for every node llama.cpp's scheduler computes (its `cb_eval`), as
            `pyggml.backend.Scheduler.observe` calls it: `observe(node, ask=True)` before the node is
            computed (True: show it computed), `observe(node, ask=False)` once it is.
            `pyggml.testing.engine.nodes.NodeChecker` is one. An exception it raises stops the decode and is raised
            by `decode`. On llama.cpp's tensor split (a meta device) ggml aborts reading some nodes back:
            NodeChecker leaves those unread (docs/llama.md). The CPU then computes with a thread pool whose
            workers sleep between the graph's pieces (`pyggml.threads.quiet_pool`).
        n_rs_seq: recurrent-state snapshots each sequence keeps for rollback (llama.cpp's n_rs_seq, 0 to
            64; 0: none): with n_rs_seq = K-1 the last K-1 tokens of a sequence can be removed again
            (`memory_seq_rm`) on architectures that support it (qwen35, qwen35moe, lfm2); llama.cpp clamps
            it to 0 for the others (read `n_rs_seq`). Where it keeps them, n_ubatch must be at least
            n_rs_seq + 2: llama.cpp computes a sequence's last n_rs_seq + 1 tokens in one ubatch.
        tensors: name prefixes of tensors of llama.cpp's graph (the memory's caches: "cache_r_l",
            "cache_s_l", "cache_k_l", "cache_v_l") to read back by name with `tensor(name)` after a decode;
            they are found through the eval callback, as `observe`.

    Attributes:
        ptr: the `llama_context *`.
        model: the Model.

    Raises:
        TypeError: `model` is not a Model, `observe` is not callable, `tensors` is not a sequence of
            non-empty str.
        ValueError: a negative or zero size, `n_seq_max` beyond llama.cpp's limit, `n_rs_seq` outside 0..64, an
            n_ubatch of at most n_rs_seq + 1 on a recurrent state that keeps snapshots (llama.cpp would assert
            at the first decode and end the process).
        LlamaError: llama.cpp cannot make the context (its logged reason in the message).
    """

    ptr: CData

    def __init__(
        self,
        model: Model,
        n_ctx: int = 0,
        n_batch: int = 2048,
        n_ubatch: int = 512,
        n_seq_max: int = 1,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        embeddings: bool = False,
        offload_kqv: bool = True,
        observe: Callable[[Tensor, bool], bool] | None = None,
        n_rs_seq: int = 0,
        tensors: Sequence[str] = (),
    ) -> None:
        if not isinstance(model, Model):
            raise TypeError(f"Context: model must be a pyggml.llama.Model, not {type(model).__name__}")
        for name, value, least in (("n_ctx", n_ctx, 0), ("n_batch", n_batch, 1), ("n_ubatch", n_ubatch, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"Context: {name} must be an int >= {least}, not {value!r}")
        limit = int(lib.llama_max_parallel_sequences())
        if not isinstance(n_seq_max, int) or not 1 <= n_seq_max <= limit:
            raise ValueError(f"Context: n_seq_max must be an int in 1..{limit}, not {n_seq_max!r}")
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_ubatch, n_batch)
        params.n_seq_max = n_seq_max
        single = threads.cores() if n_threads is None else threads.checked("Context: n_threads", n_threads)
        batch = single if n_threads_batch is None else threads.checked("Context: n_threads_batch", n_threads_batch)
        params.n_threads, params.n_threads_batch = single, batch
        params.embeddings = bool(embeddings)
        params.offload_kqv = bool(offload_kqv)
        if not isinstance(n_rs_seq, int) or not 0 <= n_rs_seq <= 64:
            raise ValueError(f"Context: n_rs_seq must be an int in 0..64, not {n_rs_seq!r}")
        params.n_rs_seq = n_rs_seq
        if isinstance(tensors, str) or not all(isinstance(p, str) and p for p in tensors):
            raise TypeError(f"Context: tensors must be a sequence of non-empty name prefixes, not {tensors!r}")
        self._tensors = _TensorFinder(tuple(tensors), observe) if tensors else None
        if observe is not None and not callable(observe):
            raise TypeError(f"Context: observe must be callable, not {type(observe).__name__}")
        watch = self._tensors if self._tensors is not None else observe
        self._watch = watch
        self._observer: EvalObserver | None = None
        native = getattr(watch, "eval_callback", None)  # an observer with a C callback (a Recorder copying in C)
        if native is not None:
            params.cb_eval, params.cb_eval_user_data = native
        elif watch is not None:
            self._observer = EvalObserver(watch)
            params.cb_eval = lib.pyggml_eval_callback
            params.cb_eval_user_data = self._observer.handle
        with logged_warnings() as lines:
            ptr = lib.llama_init_from_model(model.ptr, params)
        if ptr == ffi.NULL:
            raise LlamaError(f"llama.cpp could not make a context for {model.path}: {_reason(lines, 'no reason')}")
        kept, ubatch = int(lib.llama_n_rs_seq(ptr)), int(lib.llama_n_ubatch(ptr))
        recurrent = bool(lib.llama_model_is_recurrent(model.ptr)) or bool(lib.llama_model_is_hybrid(model.ptr))
        if recurrent and kept > 0 and ubatch <= kept + 1:
            # llama.cpp keeps a sequence's last n_rs_seq + 1 tokens in one ubatch for its rollback snapshots, and
            # asserts n_ubatch > n_rs_seq + 1 at the first decode (GGML_ASSERT: the process dies)
            lib.llama_free(ptr)
            raise ValueError(
                f"Context: n_ubatch {ubatch} must be more than n_rs_seq + 1 = {kept + 1} for {model.arch}, whose "
                f"recurrent state keeps {kept} rollback snapshots (llama.cpp computes a sequence's last n_rs_seq + 1 "
                f"tokens in one ubatch): give n_ubatch (and n_batch) of at least {kept + 2}, or a smaller n_rs_seq"
            )
        self._ptr = ptr
        self.model = model
        model._contexts.add(self)
        self._outputs: list[int] = []  # batch indices of the last decode that produced logits
        self._kept = [False]  # whether a decode kept its nodes for a NodeReader (`_free`)
        # under an observer, a pool whose workers sleep between the graph's pieces (`threads.quiet_pool`)
        pools = [threads.quiet_pool(n) for n in dict.fromkeys((single, batch))] if watch is not None else []
        pools = [p for p in pools if p is not None]
        if pools:
            lib.llama_attach_threadpool(ptr, pools[0], pools[-1])
        self._finalizer = weakref.finalize(self, _free, ptr, self._kept, pools)

    @property
    def n_ctx(self) -> int:
        """The context length in tokens (`llama_n_ctx`)."""
        return int(lib.llama_n_ctx(self.ptr))

    @property
    def n_rs_seq(self) -> int:
        """The rollback snapshots per sequence llama.cpp keeps (`llama_n_rs_seq`): 0 where the architecture does not support rollback."""
        return int(lib.llama_n_rs_seq(self.ptr))

    def tensor(self, name: str, occurrence: int = -1) -> np.ndarray:
        """The values of a tensor of llama.cpp's graph, by name, as they were computed.

        Only names matching the context's `tensors` prefixes. A node of the last decode's graphs (`l_out-3`,
        `attn_norm-0`) and an input come back as copied when ggml computed them (their memory is given to later
        nodes right after: reading it later would give another node's values); when a decode's batch ran in
        several ubatches, the last ubatch's (an input's: the first's). The memory's caches (cache_k_l<il>,
        cache_r_l<il>, cache_s_l<il>) and weights keep their memory: they come back as they are now. A recurrent
        cache comes back as (rows, row size): row `slot * mem_size + cell`.

        Args:
            name: the tensor's name in llama.cpp's graph, e.g. "cache_r_l0", "l_out-3".
            occurrence: which of the last decode's nodes of that name, in compute order (-1: the last): a name
                may be given to several nodes (Gemma's `Qcur-0`: the product, then its rope), and a batch computed
                in several ubatches repeats them.

        Returns:
            A copy of its values, in NumPy order (ggml's ne reversed).

        Raises:
            ValueError: the context was made without `tensors`; or the tensor's memory was reused and it could
                not be copied in time (the reason).
            KeyError: no tensor of that name in the last decode: the message lists those seen that match the
                prefixes and the last decode's names, abbreviated (each: `node_names()`), or says the name needs
                a prefix the context was not made with.
            IndexError: fewer nodes of that name than `occurrence` asks for.
        """
        if self._tensors is None:
            raise ValueError("tensor: make the Context with tensors=(name prefixes,) to read its tensors by name")
        finder = self._tensors
        if name in finder.copied:
            found = finder.copied[name]
            if not -len(found) <= occurrence < len(found):
                raise IndexError(
                    f"tensor: {len(found)} nodes named {name!r} in the last decode, no occurrence {occurrence}"
                )
            return found[occurrence].copy()
        if name in finder.reused:
            raise ValueError(f"tensor: {name!r} lay in memory ggml reused after computing it: {finder.reused[name]}")
        ptr = finder.found.get(name)
        if ptr is None:
            prefixes = tuple(p.decode() for p in finder.prefixes)
            if name in finder.names:
                raise KeyError(
                    f"tensor: {name!r} was in llama.cpp's last decode but does not start with one of the context's "
                    f"tensors prefixes {prefixes}: make the Context with tensors=({name!r}, ...) to read it"
                )
            seen = ", ".join(sorted([*finder.found, *finder.copied])) or "none"
            if not finder.names:
                raise KeyError(f"tensor: no tensor {name!r}: no decode has run yet (seen: {seen}); decode first")
            raise KeyError(
                f"tensor: no tensor {name!r} seen in llama.cpp's last decode (seen, matching {prefixes}: {seen}); "
                f"its graph's names: {_name_patterns(list(finder.names))} (each name: Context.node_names())"
            )
        return Tensor(ptr, None).numpy()

    def node_names(self) -> list[str]:
        """The names of the tensors of llama.cpp's graphs in the last decode: each node's, in the order computed,
        and each input, weight and cache a node read, where first read.

        What `tensor(name)` can read, given a prefix (`tensors=`) that the name starts with: `l_out-0`,
        `attn_norm-0`, `cache_k_l0`, `blk.0.attn_q.weight`, ... Unnamed nodes are left out; a name given to
        several nodes, or repeated by a batch computed in several ubatches, is listed once.

        Returns:
            The names, each once; [] before the first decode.

        Raises:
            ValueError: the context was made without `tensors` (the names are gathered by the eval callback
                that reads them): make it with `tensors=(a prefix,)`, e.g. `tensors=("l_out",)`.
        """
        if self._tensors is None:
            raise ValueError(
                "node_names: make the Context with tensors=(name prefixes,) (e.g. tensors=('l_out',)): the names "
                "are gathered by the eval callback that reads tensors by name"
            )
        return list(self._tensors.names)

    @property
    def n_batch(self) -> int:
        """The most tokens one decode takes (`llama_n_batch`)."""
        return int(lib.llama_n_batch(self.ptr))

    @property
    def n_seq_max(self) -> int:
        """The number of distinct sequences (`llama_n_seq_max`): seq ids are 0 .. n_seq_max - 1."""
        return int(lib.llama_n_seq_max(self.ptr))

    def decode(
        self,
        tokens: Sequence[int] | np.ndarray,
        positions: Sequence[int] | np.ndarray | None = None,
        seq_ids: Sequence[int | Sequence[int]] | None = None,
        logits: Literal["last", "all", "none"] | Sequence[bool] = "last",
    ) -> None:
        """Run the model over a batch of tokens (`llama_batch`, `llama_decode`), adding them to the memory.

        Read the logits afterwards with `logits(i)` / `all_logits()`.

        Args:
            tokens: the token ids, each in the vocabulary; 1 to `n_batch` of them.
            positions: each token's position (>= 0); None: llama.cpp continues each sequence where its memory
                ends.
            seq_ids: each token's sequence id, or several ids for a token shared by sequences; None: all
                sequence 0.
            logits: which tokens output logits: "last" (the batch's last token), "all", "none", or one bool
                per token.

        Raises:
            ValueError: before llama.cpp runs, for an empty batch or one larger than `n_batch`, a token id
                outside the vocabulary, positions / seq_ids / logits of another length than tokens, a negative
                position, a seq id outside 0 .. n_seq_max - 1, an unknown logits word.
            TypeError: ids that are not integers; seq_ids that are not a sequence.
            LlamaError: `llama_decode` failed: 1 (no KV slot for the batch: the context is full), 2 (aborted),
                negative (invalid batch, or an error).
            Exception: what `observe` raised, once llama.cpp has stopped.
        """
        toks = _int_list("decode: tokens", tokens)
        n = len(toks)
        if n == 0:
            raise ValueError("decode: tokens is empty")
        if n > self.n_batch:
            raise ValueError(f"decode: {n} tokens, more than this context's n_batch {self.n_batch}")
        n_vocab = self.model.n_vocab
        bad = [t for t in toks if not 0 <= t < n_vocab]
        if bad:
            raise ValueError(f"decode: token ids {bad[:5]} outside the vocabulary 0..{n_vocab - 1}")
        pos: list[int] | None = None
        if positions is not None:
            pos = _int_list("decode: positions", positions)
            if len(pos) != n:
                raise ValueError(f"decode: {len(pos)} positions for {n} tokens")
            if any(p < 0 for p in pos):
                raise ValueError("decode: positions must be >= 0")
        seqs: list[list[int]] | None = None
        if seq_ids is not None:
            if isinstance(seq_ids, (str, bytes)) or not isinstance(seq_ids, Sequence | np.ndarray):
                raise TypeError("decode: seq_ids must be a sequence, one entry per token")
            if len(seq_ids) != n:
                raise ValueError(f"decode: {len(seq_ids)} seq_ids for {n} tokens")
            seqs = [_int_list("decode: seq_ids", s) if not _is_int(s) else [int(s)] for s in seq_ids]  # type: ignore[arg-type]
            n_seq_max = self.n_seq_max
            for s in seqs:
                if not s:
                    raise ValueError("decode: a token with no seq id")
                if any(not 0 <= x < n_seq_max for x in s):
                    raise ValueError(f"decode: seq ids {s} outside 0..{n_seq_max - 1} (n_seq_max {n_seq_max})")
        if logits == "last":
            out = [False] * (n - 1) + [True]
        elif logits == "all":
            out = [True] * n
        elif logits == "none":
            out = [False] * n
        elif isinstance(logits, str):
            raise ValueError(f"decode: logits must be 'last', 'all', 'none' or one bool per token, not {logits!r}")
        else:
            out = [bool(x) for x in logits]
            if len(out) != n:
                raise ValueError(f"decode: {len(out)} logits flags for {n} tokens")

        batch = ffi.new("struct llama_batch *")
        keep: list[object] = []
        batch.n_tokens = n
        token_arr = ffi.new("llama_token[]", toks)
        batch.token = token_arr
        batch.embd = ffi.NULL
        pos_arr = ffi.new("llama_pos[]", pos) if pos is not None else ffi.NULL
        batch.pos = pos_arr
        if seqs is not None:
            n_seq_arr = ffi.new("int32_t[]", [len(s) for s in seqs])
            rows = [ffi.new("llama_seq_id[]", s) for s in seqs]
            keep += rows
            seq_arr = ffi.new("llama_seq_id *[]", rows)
            batch.n_seq_id, batch.seq_id = n_seq_arr, seq_arr
        else:
            n_seq_arr = seq_arr = ffi.NULL
            batch.n_seq_id, batch.seq_id = ffi.NULL, ffi.NULL
        out_arr = ffi.new("int8_t[]", [1 if o else 0 for o in out])
        batch.logits = out_arr
        if self._tensors is not None:
            self._tensors.clear()
        watch = self._watch
        self._kept[0] = self._kept[0] or isinstance(watch, NodeReader)
        with logged_warnings() as lines, kept_while(watch):  # a NodeReader reads the graph computed whole
            rc = lib.llama_decode(self.ptr, batch[0])
        del keep, token_arr, pos_arr, n_seq_arr, seq_arr, out_arr
        after_decode = getattr(watch, "after_decode", None)
        if after_decode is not None:  # a C callback's log, read once per decode
            after_decode()
        if self._observer is not None and self._observer.error is not None:  # llama.cpp stopped at that node
            self._outputs = []
            self._observer.raise_pending()
        if rc != 0:
            self._outputs = []
            meaning = {
                1: "no KV cache slot for the batch (the context is full: make a larger n_ctx, or free memory "
                "with memory_seq_rm)",
                2: "aborted (the abort callback asked to stop)",
                -1: "invalid input batch",
            }.get(rc, "error while computing the batch")
            raise LlamaError(f"llama_decode returned {rc}: {meaning}: {_reason(lines, 'no reason logged')}")
        self._outputs = [i for i, o in enumerate(out) if o]

    def logits(self, i: int = -1) -> np.ndarray:
        """The logits of token `i` of the last decoded batch (`llama_get_logits_ith`).

        Args:
            i: the token's index in the batch; negative: counts the batch's outputs from the end.

        Returns:
            A float32 array of `n_vocab` values (a copy).

        Raises:
            TypeError: `i` is not an int.
            ValueError: that token produced no logits (or the last decode produced none).
            LlamaError: llama.cpp returned no logits.
        """
        if not _is_int(i):
            raise TypeError(f"logits: i must be an int, not {type(i).__name__}")
        if not self._outputs:
            raise ValueError("logits: the last decode produced no logits (decode with logits='last' or 'all')")
        index = self._batch_index(int(i))
        with logged_warnings() as lines:
            ptr = lib.llama_get_logits_ith(self.ptr, index)
        if ptr == ffi.NULL:
            raise LlamaError(f"llama_get_logits_ith({index}) failed: {_reason(lines, 'no reason logged')}")
        n_vocab = self.model.n_vocab
        return np.frombuffer(ffi.buffer(ptr, 4 * n_vocab), dtype=np.float32).copy()

    def all_logits(self) -> np.ndarray:
        """The logits of every token of the last batch that produced them, in batch order (`llama_get_logits`).

        Returns:
            A float32 array of shape (outputs, n_vocab) (a copy); (0, n_vocab) when none were produced.

        Raises:
            LlamaError: llama.cpp returned no logits.
        """
        if not self._outputs:
            return np.zeros((0, self.model.n_vocab), np.float32)
        ptr = lib.llama_get_logits(self.ptr)
        if ptr == ffi.NULL:
            raise LlamaError("llama_get_logits returned NULL")
        n_vocab = self.model.n_vocab
        count = len(self._outputs)
        return np.frombuffer(ffi.buffer(ptr, 4 * n_vocab * count), dtype=np.float32).reshape(count, n_vocab).copy()

    def _batch_index(self, i: int) -> int:
        if i < 0:
            # negative: counts the outputs from the end, as llama_get_logits_ith does
            if -i > len(self._outputs):
                raise ValueError(f"logits: index {i}, but the last decode produced {len(self._outputs)} outputs")
            return i
        if i not in self._outputs:
            more = "..." if len(self._outputs) > 10 else ""
            raise ValueError(
                f"logits: token {i} of the last batch produced no logits (tokens with logits: {self._outputs[:10]}{more})"
            )
        return i

    def memory_seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove the tokens of sequence `seq` at positions [p0, p1) from the memory (`llama_memory_seq_rm`).

        Args:
            seq: the sequence id; negative: every sequence.
            p0: the first position removed; negative: from 0.
            p1: the position after the last removed; negative: to the end.

        Returns:
            False when the memory cannot remove that part of a sequence (a recurrent model's state without
            rollback snapshots), True otherwise.

        Raises:
            TypeError: an argument is not an int.
            ValueError: `seq` >= `n_seq_max`.
            LlamaError: the context has no memory.
        """
        for name, v in (("seq", seq), ("p0", p0), ("p1", p1)):
            if not _is_int(v):
                raise TypeError(f"memory_seq_rm: {name} must be an int, not {type(v).__name__}")
        if seq >= self.n_seq_max:
            raise ValueError(f"memory_seq_rm: seq {seq} outside 0..{self.n_seq_max - 1}")
        mem = lib.llama_get_memory(self.ptr)
        if mem == ffi.NULL:
            raise LlamaError("this context has no memory")
        return bool(lib.llama_memory_seq_rm(mem, int(seq), int(p0), int(p1)))

    def memory_clear(self) -> None:
        """Empty the memory (KV cache) of every sequence (`llama_memory_clear`)."""
        mem = lib.llama_get_memory(self.ptr)
        if mem != ffi.NULL:
            lib.llama_memory_clear(mem, True)
        self._outputs = []

    def state_save(self, seq: int | None = None) -> bytes:
        """The context's state as bytes.

        Args:
            seq: None: the whole state, memory, logits and RNG (`llama_state_get_data`); a sequence id: that
                sequence's memory (`llama_state_seq_get_data`; a recurrent model's pending rollback included).

        Returns:
            The bytes, for `state_load`.

        Raises:
            TypeError: `seq` is not an int.
            ValueError: `seq` outside 0 .. n_seq_max - 1.
            LlamaError: llama.cpp could not save it.
        """
        if seq is not None:
            seq = self._seq("state_save", seq)
            size = int(lib.llama_state_seq_get_size(self.ptr, seq))
        else:
            size = int(lib.llama_state_get_size(self.ptr))
        buf = ffi.new("uint8_t[]", size)
        with logged_warnings() as lines:
            if seq is not None:
                n = int(lib.llama_state_seq_get_data(self.ptr, buf, size, seq))
            else:
                n = int(lib.llama_state_get_data(self.ptr, buf, size))
        if n == 0 and size:
            raise LlamaError(f"llama.cpp could not save the state: {_reason(lines, 'no reason logged')}")
        return bytes(ffi.buffer(buf, n))

    def state_load(self, data: bytes, seq: int | None = None) -> None:
        """Restore a state saved by `state_save` of a context of the same model and sizes.

        Args:
            data: what `state_save` returned.
            seq: None: the whole state (`llama_state_set_data`); a sequence id: load a sequence's memory saved
                by `state_save(seq=...)` into sequence `seq` (`llama_state_seq_set_data`).

        Raises:
            TypeError: data that is not bytes-like, a `seq` that is not an int.
            ValueError: `seq` outside 0 .. n_seq_max - 1.
            LlamaError: the state does not fit (llama.cpp's reason in the message).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"state_load: data must be bytes, not {type(data).__name__}")
        raw = bytes(data)
        with logged_warnings() as lines:
            if seq is not None:
                n = int(lib.llama_state_seq_set_data(self.ptr, raw, len(raw), self._seq("state_load", seq)))
            else:
                n = int(lib.llama_state_set_data(self.ptr, raw, len(raw)))
        if n == 0:
            raise LlamaError(f"llama.cpp refused the state: {_reason(lines, 'no reason logged')}")
        self._outputs = []

    def _seq(self, what: str, seq: object) -> int:
        if not _is_int(seq):
            raise TypeError(f"{what}: seq must be an int, not {type(seq).__name__}")
        if not 0 <= int(seq) < self.n_seq_max:  # type: ignore[call-overload]
            raise ValueError(f"{what}: seq {seq} outside 0..{self.n_seq_max - 1}")
        return int(seq)  # type: ignore[call-overload]

    def _close(self) -> None:
        """Free the context now (`llama_free`; `close()`, or the end of a `with` block). Using it afterwards
        raises ValueError."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Context n_ctx={self.n_ctx} of {self.model.path}>"


def _free(ptr: Any, kept: list[bool], pools: list[Any] | None = None) -> None:
    """llama_free, then the context's thread pools. A context whose nodes were kept for a NodeReader
    (`pyggml.node_reader`) grew its compute buffer past what llama.cpp reserved, and llama.cpp warns of that when
    freeing it: expected there, so not shown."""
    grown = _BufferGrowth() if kept[0] else None
    if grown is not None:
        native_log.addFilter(grown)
    try:
        lib.llama_free(ptr)
    finally:
        if grown is not None:
            native_log.removeFilter(grown)
        for pool in pools or ():
            threads.free_pool(pool)


class _BufferGrowth(logging.Filter):
    """Drops llama.cpp's "compute buffer size ... does not match expectation" (see `_free`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "does not match expectation" not in record.getMessage()


@dataclass
class Run:
    """One conversation of a model on one backend (`record`).

    Attributes:
        path: the model file.
        backend: where it ran ("cpu", "vulkan0", "meta:cpu,cpu", ...).
        transcript: what it decoded (`pyggml.conversation.Transcript`): every step's tokens and logits.
        recorder: every node's values (`pyggml.drift.Recorder`), or, recorded against another run, every
            node's figures against that run's; None when nodes were not recorded.
        seconds: the wall time of the conversation (loading the model not included).
        n_vocab: the model's vocabulary size.
        arch: its architecture (general.architecture).
    """

    path: str
    backend: str
    transcript: Transcript
    recorder: Recorder | None
    seconds: float = 0.0
    n_vocab: int = 0
    arch: str = ""

    @property
    def label(self) -> str:
        """The file's name and the backend, in words."""
        return f"{os.path.basename(self.path)} on {self.backend}"


def record(
    path: str | os.PathLike[str],
    script: Script,
    backend: str = "cpu",
    against: Run | None = None,
    nodes: bool = True,
    observe: Callable[[Tensor, bool], bool] | None = None,
    use_extra_bufts: bool = True,
    n_threads: int | None = None,
    on_step: Callable[[str], None] | None = None,
    n_ctx: int | None = None,
) -> Run:
    """Run a conversation on a backend with every node's value kept, or compared with another run's.

    Args:
        path: the model file.
        script: the conversation (`Script.from_text(model, ...)`, `Script.from_tokens(...)`).
        backend: as `Model.for_backend` takes it.
        against: an earlier Run (recorded with nodes): decode its very tokens and rollbacks (its transcript is
            followed) and compare each node with its node of the same step, name and occurrence as it is
            computed; the values are then not kept.
        nodes: record the nodes (False: the logits only, no observer, llama.cpp's full speed).
        observe: another observer called for every node as well (a `NodeChecker`).
        use_extra_bufts: as `Model.load`'s.
        n_threads: the CPU's threads (None: the cores, `pyggml.threads.cores`).
        on_step: called with each step's label before its decode (after the recorder is told).
        n_ctx: the context's length, set on purpose (`Script.context_args`); None: what the conversation needs.

    Returns:
        The Run.

    Raises:
        ValueError: `against` of another vocabulary or architecture (`compatible_or_raise`), a conversation that
            does not fit (and the other errors of `Model.load` and `converse`).
        LlamaError: llama.cpp could not load or decode the model.
    """
    import time

    model = Model.for_backend(path, backend, use_extra_bufts)
    try:
        if against is not None:
            compatible_or_raise(against, model, nodes=nodes)
        recorder = None
        if nodes:
            recorder = Recorder(
                against=against.recorder.recorded if against is not None and against.recorder else None,
                then=observe,
                native=None if "rpc" not in backend else False,  # RPC reads go through pyggml's transport checks
            )
        watch = recorder if recorder is not None else observe
        args = script.context_args(model, n_ctx=n_ctx)
        with Context(model, **args, observe=watch, n_threads=n_threads) as ctx:
            if recorder is not None and against is not None:  # its values are read at once, after each decode
                recorder.leave_in_place(one_ubatch(ctx, script))
            started = time.perf_counter()
            follow = against.transcript if against is not None else None

            def step(label: str) -> None:
                if recorder is not None:
                    recorder.set_step(label)
                if on_step is not None:
                    on_step(label)

            talk = converse(ctx, script, follow=follow, on_step=step)
            seconds = time.perf_counter() - started
        arch = model.meta("general.architecture") or ""
        return Run(os.fspath(path), backend, talk, recorder, seconds, model.n_vocab, arch)
    finally:
        model.close()


def one_ubatch(ctx: Context, script: Script) -> bool:
    """Whether every decode of the conversation is computed as one graph (one ubatch): one sequence (llama.cpp
    splits a batch of several sequences into ubatches of equal lengths), each batch within n_ubatch. Then the
    nodes a scheduler keeps are still where they were computed when the decode returns.

    Args:
        ctx: the context.
        script: the conversation.

    Returns:
        True when each decode is one ubatch.
    """
    return script.sequences == 1 and int(lib.llama_n_ubatch(ctx.ptr)) >= script.largest_batch()


def record_pair(
    path_a: str | os.PathLike[str],
    path_b: str | os.PathLike[str],
    script: Script,
    backend_a: str = "cpu",
    backend_b: str | None = None,
    use_extra_bufts: bool = True,
    n_threads: int | None = None,
    n_ctx: int | None = None,
) -> tuple[Run, Run]:
    """Decode one conversation with two models (or one model on two backends) in turns, every node of B compared
    with A's of the same step, name and occurrence: A decodes a step, then B the same tokens, while A still
    holds its nodes where they were computed (kept by the scheduler, ggml patch 0034); A's values are not
    copied (where the decode is one ubatch: `one_ubatch`) nor kept past the step. `record(a)` then
    `record(b, against=a)` compares the same, one model loaded at a time, but copies and keeps every node of A
    for the whole conversation.

    Args:
        path_a: the reference's model file.
        path_b: the other's.
        script: the conversation.
        backend_a: A's backend, as `Model.for_backend` takes it.
        backend_b: B's (None: `backend_a`).
        use_extra_bufts: as `Model.load`'s, for both.
        n_threads: the CPU's threads (None: the cores), for both.
        n_ctx: as `record`'s, for both.

    Returns:
        (run A, run B): B's recorder holds the figures (`held_against(a, b)`); A's holds no values.

    Raises:
        ValueError: another vocabulary or architecture (`compatible_or_raise`), a conversation that does not fit,
            B's steps not A's.
        LlamaError: llama.cpp could not load or decode a model.
    """
    import contextlib
    import time

    from pyggml.conversation import conversing

    backend_b = backend_b or backend_a
    with contextlib.ExitStack() as stack:
        model_a = Model.for_backend(path_a, backend_a, use_extra_bufts)
        stack.callback(model_a.close)
        model_b = Model.for_backend(path_b, backend_b, use_extra_bufts)
        stack.callback(model_b.close)
        compatible_or_raise(model_a, model_b)
        rec_a = Recorder(native=None if "rpc" not in backend_a else False)
        rec_a.held = True
        rec_b = Recorder(against=rec_a, native=None if "rpc" not in backend_b else False)
        ctx_a = stack.enter_context(
            Context(model_a, **script.context_args(model_a, n_ctx=n_ctx), observe=rec_a, n_threads=n_threads)
        )
        ctx_b = stack.enter_context(
            Context(model_b, **script.context_args(model_b, n_ctx=n_ctx), observe=rec_b, n_threads=n_threads)
        )
        rec_a.leave_in_place(one_ubatch(ctx_a, script))
        rec_b.leave_in_place(one_ubatch(ctx_b, script))
        talk_a = Transcript(script, tokens=[[] for _ in script.prompts])
        talk_b = Transcript(script, tokens=[[] for _ in script.prompts])
        turns_a = conversing(ctx_a, script, talk_a)
        turns_b = conversing(ctx_b, script, talk_b, follow=talk_a)
        stack.callback(turns_b.close)
        stack.callback(turns_a.close)
        seconds = [0.0, 0.0]

        def turn(side: int) -> str | None:  # run A (0) or B (1) to its next step's decode; None: it ended
            started = time.perf_counter()
            try:
                return next(turns_a if side == 0 else turns_b)
            except StopIteration:
                return None
            finally:
                seconds[side] += time.perf_counter() - started

        label_a, label_b = turn(0), turn(1)
        while label_a is not None:
            if label_b != label_a:
                raise ValueError(f"record_pair: B decodes {label_b!r} where A decoded {label_a!r}")
            rec_a.set_step(label_a)  # lets A's last step go: B has read it
            next_a = turn(0)  # A decodes the step and stops before its next
            rec_b.set_step(label_b)
            seen = len(rec_b.diffs), len(rec_b.only_here)
            next_b = turn(1)  # B decodes the same tokens, each node held against A's at once
            compared = {d.key for d in rec_b.diffs[seen[0] :]} | set(rec_b.only_here[seen[1] :])
            rec_a.unmatched += [k for k in rec_a.keys() if k not in compared]
            label_a, label_b = next_a, next_b
        if label_b is not None:
            raise ValueError(f"record_pair: B decodes {label_b!r} after A's last step")
        rec_a.let_go()
        arch_a, arch_b = model_a.meta("general.architecture") or "", model_b.meta("general.architecture") or ""
        run_a = Run(os.fspath(path_a), backend_a, talk_a, rec_a, seconds[0], model_a.n_vocab, arch_a)
        run_b = Run(os.fspath(path_b), backend_b, talk_b, rec_b, seconds[1], model_b.n_vocab, arch_b)
    return run_a, run_b


def compatible_or_raise(reference: str | Run | Model, model: Model, nodes: bool = True) -> None:
    """Raise ValueError when `model` cannot be held against the model of file `reference` (or of a Run, whose
    vocabulary and architecture were kept, or of a loaded Model: the file is not read again): another vocabulary
    (its size; the logits do not correspond) or, when `nodes`, another architecture (its nodes do not
    correspond)."""
    if isinstance(reference, Run) and reference.n_vocab:
        name, ref_vocab, ref_arch = os.path.basename(reference.path), reference.n_vocab, reference.arch
    elif isinstance(reference, Model):
        ref_arch = reference.meta("general.architecture") or ""
        name, ref_vocab = os.path.basename(reference.path), reference.n_vocab
    else:
        path = reference.path if isinstance(reference, Run) else reference
        ref = Model.load(path, n_gpu_layers=0, devices=[], vocab_only=True)
        try:
            name, ref_vocab, ref_arch = os.path.basename(path), ref.n_vocab, ref.meta("general.architecture") or ""
        finally:
            ref.close()
    if ref_vocab != model.n_vocab:
        raise ValueError(
            f"{name} has {ref_vocab} tokens, {os.path.basename(model.path)} {model.n_vocab}: their logits and nodes "
            "do not correspond; compare each with a file of its own vocabulary (its parent, or itself on another "
            "backend)"
        )
    arch = model.meta("general.architecture") or ""
    if nodes and ref_arch != arch:
        raise ValueError(
            f"{name} is {ref_arch}, {os.path.basename(model.path)} is {arch}: their nodes do not correspond; with one "
            "vocabulary their logits still can (compare --logits-only)"
        )


def compare(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str] | None = None,
    script: Script | None = None,
    backend_a: str = "cpu",
    backend_b: str | None = None,
    nodes: bool = True,
    bound: float = BOUND,
    use_extra_bufts: bool = True,
    n_ctx: int | None = None,
    in_turns: bool = True,
) -> Comparison:
    """Hold one run against another: two files of one architecture and vocabulary on one backend, or one file on
    two backends (or splits); the same tokens through both (B follows A's transcript).

    Args:
        a: the reference's model file.
        b: the other file (None: `a` again, on `backend_b`).
        script: the conversation (None: 8 random ids of A's vocabulary in one sequence, no generation).
        backend_a: A's backend.
        backend_b: B's backend (None: `backend_a`).
        nodes: compare every node (False: the logits only).
        bound: the NMSE above which a node counts as departed (`Comparison.first_divergent`).
        use_extra_bufts: as `Model.load`'s, for both runs.
        n_ctx: as `record`'s, for both runs.
        in_turns: compare every node with both models loaded, a step each (`record_pair`: A's nodes held one
            step); False: one model at a time (`record`, every node of A kept until B is done).

    Returns:
        The Comparison (`table()`, `to_json()`, `plot(path)`).

    Raises:
        ValueError: B is the same file on the same backend as A; different vocabularies or architectures (said).
    """
    b_path = os.fspath(b if b is not None else a)
    backend_b = backend_b or backend_a
    if os.path.realpath(os.fspath(a)) == os.path.realpath(b_path) and backend_a.lower() == backend_b.lower():
        raise ValueError("compare: B is A (the same file on the same backend): name another file or --backend")
    if script is None:
        probe = Model.load(a, n_gpu_layers=0, devices=[], vocab_only=True)
        try:
            rng = np.random.default_rng(0)
            script = Script.from_tokens([int(t) for t in rng.integers(0, probe.n_vocab, 8)])
        finally:
            probe.close()
    if nodes and in_turns:  # A's nodes read by B where A computed them, not copied and kept
        run_a, run_b = record_pair(a, b_path, script, backend_a, backend_b, use_extra_bufts, n_ctx=n_ctx)
    else:  # one model loaded at a time
        run_a = record(a, script, backend_a, nodes=nodes, use_extra_bufts=use_extra_bufts, n_ctx=n_ctx)
        run_b = record(
            b_path, script, backend_b, against=run_a, nodes=nodes, use_extra_bufts=use_extra_bufts, n_ctx=n_ctx
        )
    return held_against(run_a, run_b, bound)


def held_against(run_a: Run, run_b: Run, bound: float = BOUND) -> Comparison:
    """The Comparison of run B, recorded `against=run_a`, with run A.

    Args:
        run_a: the reference run.
        run_b: the run recorded against it.
        bound: as `compare`'s.

    Returns:
        The Comparison.

    Raises:
        ValueError: B did not follow A (another conversation).
    """
    ta, tb = run_a.transcript, run_b.transcript
    if ta.script != tb.script:
        raise ValueError("held_against: the two runs decoded different conversations")
    stats = logit_stats(ta.logits(), tb.logits(), ta.next_tokens())
    diffs = run_b.recorder.diffs if run_b.recorder is not None else []
    seen_b = {d.key for d in diffs}
    only_a = [k for k in (run_a.recorder.recorded if run_a.recorder else {}) if k not in seen_b]
    only_a += run_a.recorder.unmatched if run_a.recorder else []  # in turns (`record_pair`): found step by step
    only_b = list(run_b.recorder.only_here) if run_b.recorder is not None else []
    return Comparison(run_a.label, run_b.label, diffs, only_a, only_b, stats, ta.labels(), bound)


class _TensorFinder:
    """The eval callback's observer when a Context reads tensors by name: for each tensor whose name starts with
    one of `prefixes`, either its values copied while they are valid, or its pointer where its memory outlives
    the decode. Then it answers as the user's observer does.

    Memory of the scheduler's compute buffers (a node's, or an input's) is given to later nodes by ggml's graph
    allocator: such a tensor is copied right after ggml computed it (a node asked for), or, a source, just before
    the node reading it is computed. A tensor in any other buffer (the model's weights, the memory's caches:
    cache_k_l0, cache_r_l0) keeps its values between decodes and is read when asked for.
    """

    def __init__(self, prefixes: tuple[str, ...], then: Callable[[Tensor, bool], bool] | None) -> None:
        self.prefixes = tuple(x.encode() for x in prefixes)
        self.then = then
        self.found: dict[str, CData] = {}  # persistent memory, read when asked
        self.copied: dict[str, list[np.ndarray]] = {}  # transient memory, copied while valid: each node so named
        self.reused: dict[str, str] = {}  # names seen whose memory could not be copied: why
        self._after: CData | None = None  # the node asked for, copied once computed
        self._then_asked = False  # whether the user's observer asked for the node being computed
        self._leaves: set[tuple[int, bytes]] = set()  # the leaves read this decode (an input: its first ubatch's)
        self.names: dict[str, None] = {}  # the names of this decode's nodes and the leaves they read, in order

    def clear(self) -> None:
        """Forget the copies and names of the last decode (a new one starts)."""
        self.copied.clear()
        self.reused.clear()
        self._leaves.clear()
        self.names.clear()

    def _matches(self, p: CData) -> bool:
        return p != ffi.NULL and ffi.string(p.name).startswith(self.prefixes)

    def _transient(self, p: CData) -> bool:
        buf = p.buffer if p.view_src == ffi.NULL else p.view_src.buffer
        return buf == ffi.NULL or int(lib.ggml_backend_buffer_get_usage(buf)) == int(
            lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
        )

    def _keep(self, p: CData) -> None:
        name = ffi.string(p.name).decode(errors="replace")
        if not self._transient(p):
            self.found[name] = p
            return
        try:
            self.copied.setdefault(name, []).append(Tensor(p, None).numpy())
        except ValueError as e:  # memory ggml cannot read back: said when the name is asked for
            self.reused[name] = str(e)

    def __call__(self, t: Tensor, ask: bool) -> bool:
        if not ask:  # the user's observer sees a node computed only where it asked for it
            then = self.then(t, ask) if self.then is not None and self._then_asked else True
            if self._after is not None and self._after == t.ptr:
                self._keep(t.ptr)
            self._after = None
            return then
        then = self._then_asked = bool(self.then(t, ask)) if self.then is not None else False
        self._after = None
        names = self.names
        names[ffi.string(t.ptr.name).decode(errors="replace")] = None
        for p in t.ptr.src:
            for q in (p, p.view_src) if p != ffi.NULL else ():
                if q != ffi.NULL and q.op == lib.GGML_OP_NONE:
                    names[ffi.string(q.name).decode(errors="replace")] = None
                # a leaf (an input, a weight, a cache) read by this node: valid now; a node is copied once computed
                if self._matches(q) and q.op == lib.GGML_OP_NONE:
                    key = (int(ffi.cast("uintptr_t", q)), ffi.string(q.name))
                    if key not in self._leaves:
                        self._leaves.add(key)
                        self._keep(q)
        if self._matches(t.ptr) and self._transient(t.ptr):
            self._after = t.ptr
            return True  # computed on its own, so that its value is read before its memory is reused
        return then


def _name_patterns(names: list[str], most: int = 40) -> str:
    """`names` abbreviated for a message: the names that differ only in their numbers (layers: l_out-0 ..
    l_out-31, blk.0.attn_q.weight ..) as one pattern, `l_out-{0..31}`, in the order first seen."""
    groups: dict[str, list[list[int]]] = {}
    for name in names:
        if name:
            groups.setdefault(re.sub(r"\d+", "#", name), []).append([int(n) for n in re.findall(r"\d+", name)])
    shown = []
    for pattern, numbers in list(groups.items())[:most]:
        # each number's place: the one number, or the range of those of the names alike
        parts = iter(f"{{{min(col)}..{max(col)}}}" if min(col) != max(col) else str(col[0]) for col in zip(*numbers))
        pieces = pattern.split("#")
        shown.append(pieces[0] + "".join(next(parts) + piece for piece in pieces[1:]))
    more = f", and {len(groups) - most} more patterns" if len(groups) > most else ""
    return ", ".join(shown) + more


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _int_list(what: str, values: object) -> list[int]:
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or not (np.issubdtype(values.dtype, np.integer)):
            raise ValueError(f"{what}: a 1-d integer array, not {values.dtype} of shape {values.shape}")
        return [int(v) for v in values]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{what}: a sequence of ints, not {type(values).__name__}")
    out = []
    for v in values:
        if not _is_int(v):
            raise TypeError(f"{what}: a sequence of ints, found {v!r}")
        out.append(int(v))
    return out
