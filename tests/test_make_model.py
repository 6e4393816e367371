"""make-model: small random-weight GGUF models in llama.cpp's layout (pyggml/models/make_model.py).

The lists below are what llama.cpp's loader (the llama.cpp pyggml pins) reads and requires, per
architecture: the hparams keys from `load_arch_hparams` in src/models/ARCH.cpp together with the common
ones of `llama_model_base::load_hparams` (src/llama-model.cpp), and the tensors from `load_arch_tensors`
(src/models/ARCH.cpp) with their names from src/llama-arch.cpp (LLM_TENSOR_NAMES). The files were also
compared with the ones llama.cpp's tests/test-llama-archs.cpp saves (`-o DIR`), and loaded and decoded
by llama.cpp (tools/llama_decode_check.c; docs/make_model.md). With PYGGML_LLAMA_DECODE_CHECK naming
that program built, test_llama_cpp_loads_and_decodes runs it on every architecture.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pyggml import gguf
from pyggml.models import llama_archs
from pyggml.models.make_model import architectures, make_model

# llama_model_base::load_hparams (src/llama-model.cpp): context_length, embedding_length, block_count
# are required; feed_forward_length, attention.head_count(_kv) are read per layer (0 for the
# attention-free ones, as their converters write); vocab_size as test-llama-archs.cpp writes it
COMMON = [
    "vocab_size",
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
]
# src/models/qwen3next.cpp, qwen35.cpp: load_arch_hparams (ssm.*; full_attention_interval: which
# layers are recurrent when attention.recurrent_layers is absent)
DELTA_NET = [
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "ssm.inner_size",
    "full_attention_interval",
]
RMS = ["attention.layer_norm_rms_epsilon"]  # every load_arch_hparams here but rwkv7's
MOE = ["expert_count", "expert_used_count", "expert_feed_forward_length"]  # load_hparams, qwen3moe.cpp

KEYS = {
    "llama": COMMON + RMS + ["rope.freq_base"],  # src/models/llama.cpp
    "qwen3": COMMON + RMS + ["rope.freq_base"],  # src/models/qwen3.cpp
    "qwen3moe": COMMON + RMS + MOE + ["rope.freq_base"],  # src/models/qwen3moe.cpp
    # src/models/qwen3next.cpp: also expert_shared_feed_forward_length
    "qwen3next": COMMON + RMS + MOE + ["expert_shared_feed_forward_length"] + DELTA_NET + ["rope.freq_base"],
    # src/models/qwen35.cpp: rope.dimension_sections is required (get_key_or_arr(..., 4, true))
    "qwen35": COMMON + RMS + DELTA_NET + ["rope.freq_base", "rope.dimension_sections"],
    # src/models/qwen35moe.cpp: qwen3next's expert keys and qwen35's rope sections
    "qwen35moe": COMMON
    + RMS
    + MOE
    + ["expert_shared_feed_forward_length"]
    + DELTA_NET
    + ["rope.freq_base", "rope.dimension_sections"],
    # src/models/gemma3.cpp: sliding_window (+ load_swa_pattern), rope.freq_base_swa; key/value_length
    # (load_hparams)
    "gemma3": COMMON
    + RMS
    + [
        "attention.key_length",
        "attention.value_length",
        "attention.sliding_window",
        "attention.sliding_window_pattern",
        "rope.freq_base",
        "rope.freq_base_swa",
    ],
    # src/models/mamba2.cpp: all five ssm keys are required
    "mamba2": COMMON
    + RMS
    + ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"],
    # src/models/rwkv7.cpp: wkv.head_size and three LoRA ranks required, the gate's and layer_norm_epsilon read
    "rwkv7": COMMON
    + [
        "attention.layer_norm_epsilon",
        "wkv.head_size",
        "attention.decay_lora_rank",
        "attention.iclr_lora_rank",
        "attention.value_residual_mix_lora_rank",
        "attention.gate_lora_rank",
    ],
}

# tensors per layer (blk.N.), from load_arch_tensors; attn_q/k/v: create_tensor_qkv (llama-model.cpp)
# in its unfused form
ATTN = ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"]
FFN = ["ffn_gate.weight", "ffn_down.weight", "ffn_up.weight"]
EXPERTS = ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight", "ffn_up_exps.weight"]
QK_NORM = ["attn_k_norm.weight", "attn_q_norm.weight"]
# the gated delta-net branch (is_recr) of qwen3next.cpp / qwen35.cpp
DELTA = ["attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a"]
ENDS = ["token_embd.weight", "output_norm.weight", "output.weight"]
LAYERS = {
    "llama": [["attn_norm.weight", *ATTN, "ffn_norm.weight", *FFN]] * 2,
    "qwen3": [["attn_norm.weight", *ATTN, *QK_NORM, "ffn_norm.weight", *FFN]] * 2,
    "qwen3moe": [["attn_norm.weight", *ATTN, *QK_NORM, "ffn_norm.weight", *EXPERTS]] * 2,
    # layer 0 recurrent, layer 1 attention (full_attention_interval 2)
    "qwen3next": [
        ["attn_norm.weight", "post_attention_norm.weight", *DELTA, "ssm_ba.weight", "ssm_norm.weight"]
        + ["ssm_out.weight", *EXPERTS]
        + ["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"],
        ["attn_norm.weight", "post_attention_norm.weight", *ATTN, *QK_NORM, *EXPERTS]
        + ["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"],
    ],
    "qwen35": [
        ["attn_norm.weight", "post_attention_norm.weight", *DELTA, "ssm_beta.weight", "ssm_alpha.weight"]
        + ["ssm_norm.weight", "ssm_out.weight", *FFN],
        ["attn_norm.weight", "post_attention_norm.weight", *ATTN, *QK_NORM, *FFN],
    ],
    "qwen35moe": [
        ["attn_norm.weight", "post_attention_norm.weight", *DELTA, "ssm_beta.weight", "ssm_alpha.weight"]
        + ["ssm_norm.weight", "ssm_out.weight", *EXPERTS]
        + ["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"],
        ["attn_norm.weight", "post_attention_norm.weight", *ATTN, *QK_NORM, *EXPERTS]
        + ["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"],
    ],
    "gemma3": [
        ["attn_norm.weight", *ATTN, "post_attention_norm.weight", *QK_NORM, "ffn_norm.weight"]
        + ["ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight"]
    ]
    * 2,
    "mamba2": [
        ["attn_norm.weight", "ssm_in.weight", "ssm_conv1d.weight", "ssm_conv1d.bias", "ssm_dt.bias"]
        + ["ssm_a", "ssm_d", "ssm_norm.weight", "ssm_out.weight"]
    ]
    * 2,
    "rwkv7": [
        ["attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_norm_2.bias"]
        + [f"time_mix_{x}.weight" for x in ("w0", "w1", "w2", "a0", "a1", "a2", "v0", "v1", "v2", "g1", "g2")]
        + [f"time_mix_{x}.weight" for x in ("lerp_fused", "k_k", "k_a", "r_k", "key", "value", "receptance")]
        + ["time_mix_ln.weight", "time_mix_ln.bias", "time_mix_output.weight"]
        + ["channel_mix_lerp_k.weight", "channel_mix_key.weight", "channel_mix_value.weight"]
    ]
    * 2,
}
# rwkv7.cpp: token_embd_norm (weight, bias) and output_norm.bias too; its output.weight is required
EXTRA_ENDS = {"rwkv7": ["token_embd_norm.weight", "token_embd_norm.bias", "output_norm.bias"]}

# tensors that are not weights of a matrix product stay F32 in llama.cpp's converters; here all are F32
ARCHS = sorted(KEYS)


def test_the_tables_cover_the_architectures():
    assert architectures() == ARCHS


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {a: (make_model(a, d / f"{a}.gguf"), gguf.load(d / f"{a}.gguf")) for a in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_keys_and_tensors_are_llama_cpps(models, arch):
    written, f = models[arch]
    meta = f.metadata
    assert meta["general.architecture"] == arch
    assert [k.removeprefix(arch + ".") for k in meta if k.startswith(arch + ".")] == KEYS[arch]
    # the vocabulary: llama.cpp's test tokenizer (src/llama-vocab.cpp, "test"), as test-llama-archs.cpp's
    n_vocab = meta[f"{arch}.vocab_size"]
    assert meta["tokenizer.ggml.model"] == "test"
    assert meta["tokenizer.ggml.tokens"] == [f"tok_{i}" for i in range(n_vocab)]
    assert len(meta["tokenizer.ggml.scores"]) == n_vocab
    expected = {f"blk.{i}.{n}" for i, layer in enumerate(LAYERS[arch]) for n in layer}
    expected |= set(ENDS) | set(EXTRA_ENDS.get(arch, []))
    assert set(f.tensor_info) == expected
    n_embd = meta[f"{arch}.embedding_length"]
    assert f.tensor_info["token_embd.weight"].ne[:2] == (n_embd, n_vocab)
    for name, info in f.tensor_info.items():
        assert info.type.name == "F32", name
        assert np.array_equal(f.tensors[name].numpy().ravel(), written.tensors[name].ravel()), name
        assert np.isfinite(written.tensors[name]).all()


def test_shapes_follow_the_hparams(models):
    """A few shapes llama.cpp checks on load, derived from the keys as load_arch_tensors derives them."""
    _, f = models["qwen3"]
    m, ti = f.metadata, f.tensor_info
    head = m["qwen3.embedding_length"] // m["qwen3.attention.head_count"]
    assert ti["blk.0.attn_k.weight"].ne[:2] == (m["qwen3.embedding_length"], head * m["qwen3.attention.head_count_kv"])
    assert ti["blk.0.attn_q_norm.weight"].ne[0] == head
    _, f = models["qwen3next"]
    m, ti = f.metadata, f.tensor_info
    conv = m["qwen3next.ssm.state_size"] * (2 * m["qwen3next.ssm.group_count"] + m["qwen3next.ssm.time_step_rank"])
    assert ti["blk.0.ssm_conv1d.weight"].ne[:2] == (m["qwen3next.ssm.conv_kernel"], conv)
    assert ti["blk.0.ffn_gate_exps.weight"].ne[:3] == (
        m["qwen3next.embedding_length"],
        m["qwen3next.expert_feed_forward_length"],
        m["qwen3next.expert_count"],
    )
    _, f = models["mamba2"]
    assert (f.tensors["blk.0.ssm_a"].numpy() < 0).all()  # a state decay
    _, f = models["rwkv7"]
    assert f.tensor_info["blk.0.time_mix_lerp_fused.weight"].ne == (f.metadata["rwkv7.embedding_length"], 1, 1, 6)


def test_weights_are_reproducible_from_the_seed(tmp_path):
    a = make_model("llama", tmp_path / "a.gguf", seed=7)
    b = make_model("llama", tmp_path / "b.gguf", seed=7)
    c = make_model("llama", tmp_path / "c.gguf", seed=8)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
    assert all(np.array_equal(a.tensors[n], b.tensors[n]) for n in a.tensors)
    assert not np.array_equal(a.tensors["token_embd.weight"], c.tensors["token_embd.weight"])
    # a tensor depends on the seed and its name only: more layers leave the others as they were
    d = make_model("llama", tmp_path / "d.gguf", seed=7, layers=3)
    assert set(a.tensors) < set(d.tensors) and "blk.2.ffn_up.weight" in d.tensors
    assert all(np.array_equal(a.tensors[n], d.tensors[n]) for n in a.tensors)
    assert gguf.load(tmp_path / "d.gguf").metadata["llama.block_count"] == 3


def test_layers_give_the_recurrent_pattern(tmp_path):
    f = gguf.read_info(make_model("qwen35", tmp_path / "q.gguf", layers=4).path)
    attention = [i for i in range(4) if f"blk.{i}.attn_q.weight" in f.tensor_info]
    assert attention == [1, 3]  # (i + 1) % full_attention_interval == 0


def test_bad_arguments_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown architecture 'gpt5'; known: " + ", ".join(ARCHS)):
        make_model("gpt5", tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="layers must be a positive int"):
        make_model("llama", tmp_path / "x.gguf", layers=0)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        make_model("llama", tmp_path / "x.gguf", seed=-1)
    with pytest.raises(FileNotFoundError, match="cannot write .*no directory"):
        make_model("llama", tmp_path / "no" / "x.gguf")
    with pytest.raises(IsADirectoryError, match="cannot write"):
        make_model("llama", tmp_path)
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(PermissionError, match="cannot write"):
            make_model("llama", ro / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyggml", *args], capture_output=True, text=True, timeout=300)


def test_cli_writes_a_model(tmp_path):
    path = tmp_path / "m.gguf"
    res = run("make-model", "qwen3moe", str(path), "--seed", "3", "--layers", "3")
    assert res.returncode == 0, res.stderr
    assert f"{path}: qwen3moe, 3 layers, 39 tensors" in res.stdout
    f = gguf.load(path)
    assert f.metadata["qwen3moe.block_count"] == 3 and f.metadata["pyggml.make_model.seed"] == 3
    again = make_model("qwen3moe", tmp_path / "api.gguf", seed=3, layers=3)
    assert path.read_bytes() == (tmp_path / "api.gguf").read_bytes() and again.arch == "qwen3moe"


def test_cli_refuses_bad_arguments(tmp_path):
    res = run("make-model", "nope", str(tmp_path / "x.gguf"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"unknown architecture 'nope': pyggml makes {', '.join(ARCHS)}, llama.cpp's generator" in res.stderr
    res = run("make-model", "nope", str(tmp_path / "x.gguf"), "--generator", "llama.cpp")
    assert res.returncode == 2 and "llama.cpp's generator saves no such model" in res.stderr
    res = run("make-model", "gpt2", str(tmp_path / "x.gguf"), "--layers", "3")
    assert res.returncode == 2 and "--layers: only pyggml's own architectures" in res.stderr
    res = run("make-model", str(tmp_path / "x.gguf"))
    assert res.returncode == 2 and "give ARCH and FILE" in res.stderr
    res = run("make-model", "llama", str(tmp_path / "no" / "x.gguf"))
    assert res.returncode == 2 and "Traceback" not in res.stderr and "cannot write" in res.stderr
    res = run("make-model", "llama", str(tmp_path / "x.gguf"), "--layers", "0")
    assert res.returncode == 2 and "layers must be a positive int" in res.stderr
    res = run("make-model", "--help")
    assert res.returncode == 0 and all(a in res.stdout for a in ARCHS)


@pytest.mark.skipif(
    not os.environ.get("PYGGML_LLAMA_DECODE_CHECK"),
    reason="set PYGGML_LLAMA_DECODE_CHECK to tools/llama_decode_check.c built against llama.cpp",
)
@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_loads_and_decodes(tmp_path, arch):
    path = make_model(arch, tmp_path / f"{arch}.gguf", seed=1, layers=4).path
    res = subprocess.run([os.environ["PYGGML_LLAMA_DECODE_CHECK"], path], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "0 not finite: ok" in res.stdout, res.stdout + res.stderr


# --- quantized files, by llama.cpp's own quantizer ---------------------------------------------------------------
def test_the_file_types_are_llama_hs():
    from pyggml import lib, llama

    types = llama.file_types()
    assert types["f32"] == lib.LLAMA_FTYPE_ALL_F32 and types["q4_k_m"] == lib.LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert {"bf16", "q8_0", "q6_k", "q5_k_m", "q4_0", "iq4_nl", "iq4_xs", "iq2_xxs", "tq1_0"} <= set(types)


def test_quantize_writes_the_type_and_refuses_with_llama_cpps_reason(tmp_path):
    from pyggml import llama

    src, dst = tmp_path / "f32.gguf", tmp_path / "q.gguf"
    make_model("qwen35", src)
    llama.quantize(src, dst, "Q8_0")
    kinds = {t.type.name for t in gguf.read_info(dst).tensor_info.values()}
    assert "Q8_0" in kinds and kinds <= {"Q8_0", "F32"}  # 1-d tensors (norms) stay F32
    with pytest.raises(llama.LlamaError, match="requires an imatrix"):
        llama.quantize(src, tmp_path / "iq2.gguf", "iq2_xxs")
    with pytest.raises(ValueError, match="unknown file type 'q9'.*q4_k_m"):
        llama.quantize(src, dst, "q9")
    with pytest.raises(FileNotFoundError):
        llama.quantize(tmp_path / "none.gguf", dst, "q8_0")
    cli = [sys.executable, "-m", "pyggml", "quantize", str(src)]
    ok = subprocess.run([*cli, str(tmp_path / "q6.gguf"), "q6_k"], capture_output=True, text=True)
    assert ok.returncode == 0 and "q6_k" in ok.stdout, ok.stderr[-2000:]
    refused = subprocess.run(
        [*cli, str(tmp_path / "iq1.gguf"), "iq1_s", "--no-imatrix"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "requires an imatrix" in refused.stderr
    made = subprocess.run([*cli, str(tmp_path / "iq1.gguf"), "iq1_s"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]  # an importance matrix computed from the model


def test_make_model_type_writes_a_quantized_model_that_every_node_of_passes(tmp_path):
    """make-model --type: a Q4_0 file whose nodes all pass `check --model` on the CPU (its weights kept out of
    the CPU's extra buffer types, as `check --model --no-repack` does)."""
    path = tmp_path / "q4.gguf"
    made = subprocess.run(
        [sys.executable, "-m", "pyggml", "make-model", "qwen35", str(path), "--type", "q4_0"],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert "q4_0" in made.stdout and "Q4_0" in {t.type.name for t in gguf.read_info(path).tensor_info.values()}
    bad = subprocess.run(
        [sys.executable, "-m", "pyggml", "make-model", "qwen35", str(tmp_path / "x.gguf"), "--type", "q9"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--type q9" in bad.stderr
    checked = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--model", str(path), "--backend", "cpu", "--no-repack", "-q"],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert "MUL_MAT" in checked.stdout


# --- llama.cpp's own generator (tests/test-llama-archs.cpp, built as llama-archs) ------------------------------
def test_make_model_lists_every_architecture_one_per_line():
    res = run("make-model", "--list")
    assert res.returncode == 0, res.stderr
    names = res.stdout.split()
    assert len(names) == len(set(names)) >= 120 and res.stdout.count("\n") == len(names)
    # llama.cpp's generator's (dense and MoE variants), and pyggml's own that it does not make (rwkv7)
    assert {"llama", "llama-moe", "deepseek4", "gemma3", "granitehybrid", "lfm2", "rwkv7"} <= set(names)
    assert names == llama_archs.names() + [a for a in ARCHS if a not in llama_archs.names()]


def test_the_list_is_what_llama_cpps_generator_saves(tmp_path):
    """native/llama_archs.cpp repeats save_models' tests for --list: the files `-o` writes for a few
    architectures are the listed ones."""
    pattern = "^(llama|gpt2|qwen3moe|mamba2)$"
    subprocess.run([llama_archs.program(), "-a", pattern, "-s", "1", "-o", tmp_path], check=True, capture_output=True)
    written = sorted(p.name for p in tmp_path.iterdir())
    listed = sorted(
        f"{v.arch}-{'moe' if v.moe else 'dense'}.gguf"
        for v in llama_archs.variants()
        if v.arch in ("llama", "gpt2", "qwen3moe", "mamba2")
    )
    assert (
        written
        == listed
        == ["gpt2-dense.gguf", "llama-dense.gguf", "llama-moe.gguf", "mamba2-dense.gguf", "qwen3moe-moe.gguf"]
    )


def test_llama_cpps_generator_makes_a_model_that_loads_and_passes_every_node(tmp_path):
    path = tmp_path / "g.gguf"
    res = run("make-model", "gpt2", str(path), "--seed", "5")
    assert res.returncode == 0, res.stderr
    assert f"{path}: gpt2, " in res.stdout and "(made by llama.cpp)" in res.stdout
    assert gguf.read_info(path).metadata["general.architecture"] == "gpt2"
    same = llama_archs.generate("gpt2", tmp_path / "again.gguf", seed=5)
    assert same.read_bytes() == path.read_bytes()  # the seed decides the weights
    other = llama_archs.generate("gpt2", tmp_path / "other.gguf", seed=6)
    assert other.read_bytes() != path.read_bytes()
    res = run("check", "--model", str(path), "--backend", "cpu", "--tokens", "4")
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr


def test_pyggmls_own_architecture_can_come_from_llama_cpps_generator(tmp_path):
    path = tmp_path / "q.gguf"
    res = run("make-model", "qwen35", str(path), "--generator", "llama.cpp", "--type", "q8_0")
    assert res.returncode == 0, res.stderr
    assert "qwen35" in res.stdout and "q8_0" in res.stdout and "(made by llama.cpp)" in res.stdout
    with pytest.raises(ValueError, match="no such model"):
        llama_archs.generate("rwkv7", tmp_path / "r.gguf")  # llama.cpp's generator skips RWKV (it hangs there)
    with pytest.raises(ValueError, match="seed"):
        llama_archs.generate("gpt2", tmp_path / "r.gguf", seed=-1)
    with pytest.raises(FileNotFoundError):
        llama_archs.generate("gpt2", tmp_path / "no" / "r.gguf")
