"""pyggml.llama: libllama built into pyggml's module, its C API in `lib`, a thin Pythonic layer whose
failures are exceptions (a missing or corrupt model file, a bad batch), never a dead interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyggml import ffi, lib
from pyggml._native import build_info, install_dir
from pyggml.errors import GGMLError

if "llama.h" not in build_info()["headers"]:
    pytest.skip("built without libllama (PYGGML_LLAMA=OFF)", allow_module_level=True)

from pyggml import gguf, llama  # noqa: E402
from pyggml.llama import Context, LlamaError, Model  # noqa: E402


def tiny_llama(path: Path, n_vocab: int = 32, n_embd: int = 16, n_ff: int = 32, n_head: int = 2) -> Path:
    """A one-layer llama-architecture GGUF with random weights and a made-up vocabulary: enough for
    llama.cpp to load and decode (an API test, not a language model), written with gguf-py."""
    gguf_py = pytest.importorskip("gguf")
    rng = np.random.default_rng(0)
    w = gguf_py.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges(["t 0"])

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", rand(n_vocab, n_embd))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", rand(n_embd, n_embd))
    w.add_tensor("blk.0.ffn_gate.weight", rand(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", rand(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", rand(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return Model.load(tiny_llama(tmp_path_factory.mktemp("llama") / "tiny.gguf"), n_gpu_layers=0)


# --- the build and the C layer -------------------------------------------------------------
def test_llama_h_is_part_of_the_c_layer():
    assert "llama.h" in build_info()["headers"]
    assert (install_dir() / "include" / "llama.h").is_file()
    for name in (
        "llama_model_load_from_file",
        "llama_init_from_model",
        "llama_decode",
        "llama_batch_init",
        "llama_get_logits_ith",
        "llama_memory_seq_rm",
        "llama_state_get_data",
        "llama_model_meta_val_str",
    ):
        assert callable(getattr(lib, name)), name
    assert lib.LLAMA_SPLIT_MODE_LAYER == 1 and lib.LLAMA_DEFAULT_SEED == 0xFFFFFFFF
    stub = (install_dir() / "_pyggml_cffi.pyi").read_text()
    assert "    def llama_decode(self, ctx: CData, batch: CData, /) -> int: ..." in stub
    # the guard is for ggml.h's pure-C functions only: nothing of llama.cpp (C++) gets a twin
    assert not [n for n in dir(lib) if n.startswith("pyggml_guarded_llama")]


def test_system_info_and_max_devices():
    assert lib.llama_max_devices() >= 1 and llama.max_devices() == lib.llama_max_devices()
    info = llama.system_info()
    assert "CPU" in info
    assert lib.llama_print_system_info() != ffi.NULL


def test_the_api_surface():
    assert issubclass(LlamaError, GGMLError)
    for name in ("load", "n_vocab", "n_embd", "n_layer", "arch", "meta", "close"):
        assert hasattr(Model, name), name
    for name in ("decode", "logits", "all_logits", "memory_seq_rm", "state_save", "state_load", "n_ctx", "close"):
        assert hasattr(Context, name), name
    assert llama.__doc__ is not None and "longjmp" in llama.__doc__


# --- model files llama.cpp cannot load -----------------------------------------------------
def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        Model.load(tmp_path / "absent.gguf")
    with pytest.raises(IsADirectoryError):
        Model.load(tmp_path)


def test_random_bytes_are_a_llama_error_naming_the_file_and_reason(tmp_path):
    path = tmp_path / "random.gguf"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(LlamaError) as info:
        Model.load(path)
    assert str(path) in str(info.value) and "magic" in str(info.value)


def test_a_truncated_gguf_is_a_llama_error(tmp_path):
    path = tmp_path / "truncated.gguf"
    gguf.save(str(path), {"general.architecture": "llama"}, {"w": np.ones((64, 64), np.float32)})
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(LlamaError, match="truncated.gguf"):
        Model.load(path)
    path.write_bytes(whole[:40])  # inside the header
    with pytest.raises(LlamaError, match="truncated.gguf"):
        Model.load(path)


def test_a_gguf_that_is_no_model_is_a_llama_error(tmp_path):
    path = tmp_path / "weights.gguf"
    gguf.save(str(path), {"general.architecture": "llama"}, {"w": np.ones((4, 4), np.float32)})
    with pytest.raises(LlamaError, match="llama.context_length"):
        Model.load(path)


def test_the_interpreter_lives_through_bad_files(tmp_path):
    script = tmp_path / "bad_files.py"
    script.write_text(
        textwrap.dedent(f"""
        import os
        from pyggml.llama import Model, LlamaError
        bad = os.path.join({str(tmp_path)!r}, "bad.gguf")
        for data in (b"", b"GGUF", os.urandom(100), b"GGUF" + bytes(200)):
            open(bad, "wb").write(data)
            try:
                Model.load(bad)
            except LlamaError:
                pass
        print("alive")
    """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "alive"


# --- a model: decode, logits, memory, state ------------------------------------------------
def test_model_metadata(tiny_model):
    assert (tiny_model.n_vocab, tiny_model.n_embd, tiny_model.n_layer) == (32, 16, 1)
    assert tiny_model.arch == "llama"
    assert tiny_model.meta("llama.block_count") == "1"
    assert tiny_model.meta("no.such.key") is None


def test_decode_logits_memory_and_state(tiny_model):
    ctx = Context(tiny_model, n_ctx=64, n_batch=16, n_seq_max=2)
    ctx.decode([1, 2, 3])
    first = ctx.logits(-1)
    assert first.shape == (32,) and first.dtype == np.float32 and np.isfinite(first).all()
    assert np.array_equal(ctx.logits(2), first)
    state = ctx.state_save()
    ctx.decode([4])
    after = ctx.logits()
    ctx.state_load(state)  # back to three tokens: the same fourth token, the same logits
    ctx.decode([4])
    np.testing.assert_array_equal(ctx.logits(), after)
    assert ctx.memory_seq_rm(0, 3, -1)  # drop the fourth token, decode it again at position 3
    ctx.decode([4], positions=[3])
    np.testing.assert_allclose(ctx.logits(), after, rtol=1e-5, atol=1e-6)
    ctx.decode([5, 6], seq_ids=[1, 1], logits="all")
    assert ctx.all_logits().shape == (2, 32)
    with pytest.raises(LlamaError, match="refused"):
        ctx.state_load(b"not a state")


def test_bad_batches_are_value_errors_before_llama_cpp(tiny_model):
    ctx = Context(tiny_model, n_ctx=64, n_batch=8, n_seq_max=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.decode([1, 32])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.decode([-1])
    with pytest.raises(ValueError, match="1 positions for 2 tokens"):
        ctx.decode([1, 2], positions=[0])
    with pytest.raises(ValueError, match="seq_ids for"):
        ctx.decode([1, 2], seq_ids=[0])
    with pytest.raises(ValueError, match="outside 0..1"):
        ctx.decode([1], seq_ids=[2])
    with pytest.raises(ValueError, match="n_batch"):
        ctx.decode(list(range(9)))
    with pytest.raises(ValueError, match="empty"):
        ctx.decode([])
    with pytest.raises(ValueError, match="no logits"):
        ctx.logits(0)
    ctx.decode([1, 2], logits=[True, False])
    with pytest.raises(ValueError, match="produced no logits"):
        ctx.logits(1)
    with pytest.raises(TypeError):
        ctx.decode([1.5])


def test_a_context_lists_its_node_names_and_its_key_error_says_them(tiny_model):
    with Context(tiny_model, n_ctx=16, n_batch=8, tensors=("l_out",)) as ctx:
        assert ctx.node_names() == []
        with pytest.raises(KeyError, match="no decode has run yet"):
            ctx.tensor("l_out-0")
        ctx.decode([1, 2, 3])
        names = ctx.node_names()
        # nodes in the order computed, and the leaves they read (inputs, weights, caches), each once
        for name in ("inp_tokens", "token_embd.weight", "attn_norm-0", "cache_k_l0", "l_out-0", "result_output"):
            assert names.count(name) == 1, name
        assert names.index("attn_norm-0") < names.index("l_out-0") < names.index("result_output")
        assert "" not in names
        with pytest.raises(KeyError, match=r"seen, matching \('l_out',\): l_out-0\).*attn_norm-0.*Context.node_names"):
            ctx.tensor("l_out-7")
        with pytest.raises(KeyError, match=r"'ffn_out-0' was in llama.cpp's last decode.*tensors=\('ffn_out-0', ...\)"):
            ctx.tensor("ffn_out-0")
    with Context(tiny_model, n_ctx=16) as plain, pytest.raises(ValueError, match="make the Context with tensors="):
        plain.node_names()


def test_name_patterns_collapse_layer_numbers():
    names = [f"l_out-{i}" for i in range(32)] + ["embd"] + [f"blk.{i}.attn_q.weight" for i in (0, 1, 5)]
    assert llama._name_patterns(names) == "l_out-{0..31}, embd, blk.{0..5}.attn_q.weight"
    assert llama._name_patterns(["a1", "b2", "c3"], most=2) == "a1, b2, and 1 more patterns"


def test_a_full_context_is_a_llama_error(tiny_model):
    ctx = Context(tiny_model, n_ctx=256, n_batch=256)
    ctx.decode(list(range(32)) * 8, logits="none")
    with pytest.raises(LlamaError, match="returned 1: no KV cache slot"):
        ctx.decode([1])


@pytest.mark.skipif(not os.environ.get("PYGGML_TEST_MODEL"), reason="PYGGML_TEST_MODEL names no GGUF model")
def test_a_real_model_loads_and_decodes():
    model = Model.load(os.environ["PYGGML_TEST_MODEL"], n_gpu_layers=0)
    assert model.n_vocab > 0 and model.n_embd > 0 and model.n_layer > 0 and model.arch
    ctx = Context(model, n_ctx=128, n_batch=32)
    ctx.decode([1, 2, 3])
    out = ctx.logits()
    assert out.shape == (model.n_vocab,) and np.isfinite(out).all()
