"""Rollback on llama.cpp's real delta-net layer (qwen35, qwen35moe: llm_arch_supports_rs_rollback), with the
seed applied (vendor/llama/patches/0001) and our guard on deep rollbacks (0002).

A context with n_rs_seq = K-1 keeps K recurrent-state and conv-window snapshots per sequence. Drafting n
tokens, removing the last j from memory (`memory_seq_rm`) and going on must equal never having decoded
them: logits and both caches (read back by name), bit for bit on the CPU. The conv cache's bytes also
equal pyggml's NumPy conv-state model (the seed's rules) fed with the layer's own qkv. Then llama.cpp's own
rollback scenarios (tests/test-recurrent-state-rollback.cpp in the pinned sdist), and the ones upstream
has had bugs in: several sequences replayed across ubatches, single-token steps, a rollback deeper than the
last ubatch kept (which read a recurrent state of another token next to the right conv window).
"""

from __future__ import annotations

import numpy as np
import pytest

from pyggml._native import lib
from pyggml.models.make_model import make_model
from pyggml.testing.check import available_backends
from pyggml.testing.engine.oracles.conv_state import ConvStateOracle

llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")

ARCHS = ["qwen35", "qwen35moe"]
CACHES = ("cache_r_l", "cache_s_l")
FILL = 0x3E  # as llama.cpp's rollback test: unwritten cache bytes read as garbage, never as zeros
BACKENDS = [
    "cpu",
    pytest.param("vulkan0", marks=pytest.mark.skipif("vulkan0" not in available_backends(), reason="no Vulkan")),
]
# lavapipe: the draft and the accepted-only run multiply ubatches of other widths, which its matrix shaders
# round differently (docs/findings.md 25); the CPU computes each token the same way whatever the width
BOUND = {"cpu": 0.0, "vulkan0": 1e-5}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("rollback")
    out = {}
    for arch in [*ARCHS, "qwen3next"]:
        out[arch] = str(d / f"{arch}.gguf")
        make_model(arch, out[arch])
    return out


_models: dict[tuple[str, str], object] = {}


def model(path: str, backend: str = "cpu"):
    """The model on `backend`: cpu, a device, or meta:A,B (llama.cpp's tensor split over A and B)."""
    key = (path, backend)
    if key not in _models:
        if backend == "cpu":
            _models[key] = llama.Model.load(path, n_gpu_layers=0, devices=[])
        elif backend.startswith("meta:"):
            _models[key] = llama.Model.load(path, split_mode="tensor", devices=backend[5:].split(","))
        else:
            _models[key] = llama.Model.load(path, devices=[backend], split_mode="none")
    return _models[key]


def context(path: str, n_rs_seq: int, backend: str = "cpu", n_seq_max: int = 1, n_ubatch: int = 32, observe=None):
    """A context whose caches start filled with FILL bytes (llama.cpp's test does the same)."""
    ctx = llama.Context(
        model(path, backend),
        n_ctx=256,
        n_batch=256,
        n_ubatch=n_ubatch,
        n_seq_max=n_seq_max,
        n_rs_seq=n_rs_seq,
        tensors=CACHES,
        observe=observe,
    )
    ctx.decode([0] * n_ubatch)  # a full ubatch: the graph and its caches exist
    ctx.memory_clear()
    for name in ("cache_r_l0", "cache_s_l0"):
        ptr = ctx._tensors.found[name]
        lib.ggml_backend_buffer_clear(ptr.buffer, FILL)
    return ctx


def tokens(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, 256, n)]


def caches(ctx, written_conv: int, written_ssm: int) -> tuple[np.ndarray, np.ndarray]:
    """Both caches' rows the last ubatch wrote (one sequence, cell 0: row = slot)."""
    return ctx.tensor("cache_r_l0")[:written_conv], ctx.tensor("cache_s_l0")[:written_ssm]


def nmse(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    return float(np.sum((a - b) ** 2) / max(np.sum(b**2), 1e-300))


def test_qwen3next_clamps_n_rs_seq_and_qwen35_keeps_it(files):
    assert llama.Context(model(files["qwen3next"]), n_ctx=64, n_rs_seq=3).n_rs_seq == 0
    assert llama.Context(model(files["qwen35"]), n_ctx=64, n_rs_seq=3).n_rs_seq == 3
    with pytest.raises(ValueError, match="n_rs_seq"):
        llama.Context(model(files["qwen35"]), n_ctx=64, n_rs_seq=-1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_rs_seq", range(1, 8))
@pytest.mark.parametrize("arch", ARCHS)
def test_draft_accept_roll_back_equals_decoding_only_the_accepted_tokens(files, arch, n_rs_seq, backend):
    """Every draft length n up to K+1 and every rollback j the draft's snapshots allow (1..min(n-1, K-1));
    then a step of one token and one of three: logits and both caches as a run over the accepted tokens."""
    path, K = files[arch], n_rs_seq + 1
    prompt, draft, steps = tokens(5, 1), tokens(K + 1, 2), [tokens(1, 3), tokens(3, 4)]
    bound = BOUND[backend]
    for n in range(2, K + 2):
        for j in range(1, min(n - 1, n_rs_seq) + 1):
            rolled, ref = context(path, n_rs_seq, backend), context(path, n_rs_seq, backend)
            rolled.decode(prompt)
            rolled.decode(draft[:n])
            assert rolled.memory_seq_rm(0, len(prompt) + n - j, -1), (n, j)
            ref.decode(prompt)
            ref.decode(draft[: n - j])
            for step in steps:
                rolled.decode(step)
                ref.decode(step)
                m = len(step)
                assert nmse(rolled.logits(), ref.logits()) <= bound, (n, j, m)
                for a, b in zip(caches(rolled, min(m + 1, K), min(m, K)), caches(ref, min(m + 1, K), min(m, K))):
                    assert nmse(a, b) <= bound, (n, j, m)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_rollback_deeper_than_the_last_ubatch_kept_is_refused(files, arch):
    """A ubatch of n tokens keeps the states after each of its last min(n, K) tokens, not the one before
    its first: removing all n (or more than K-1) is refused (patch 0002), where llama.cpp used to accept it
    and read a recurrent state another ubatch left in that slot; single-token steps keep none."""
    path = files[arch]
    ctx = context(path, 3)
    ctx.decode(tokens(6, 1))
    ctx.decode(tokens(2, 2))
    assert not ctx.memory_seq_rm(0, 6, -1)  # both tokens of the last ubatch
    assert not ctx.memory_seq_rm(0, 3, -1)  # more than n_rs_seq
    assert ctx.memory_seq_rm(0, 7, -1)  # one of the two: its snapshot exists
    assert not ctx.memory_seq_rm(0, 6, -1)  # a rollback is pending: single-use
    ctx = context(path, 3)
    for t in tokens(4, 1):  # single-token steps
        ctx.decode([t])
    assert not ctx.memory_seq_rm(0, 3, -1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_rs_seq", [1, 3, 6])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_conv_cache_holds_what_the_numpy_conv_state_model_says(files, arch, n_rs_seq, backend):
    """The layer's own qkv (captured as llama.cpp computes it) through pyggml's NumPy model of the seed's
    conv-state write: the conv cache's bytes after every ubatch, rollbacks included, unwritten slots
    keeping their FILL bytes."""
    qkv: list[np.ndarray] = []

    def watch(t, ask):
        if ask:
            return t.name == "linear_attn_qkv_mixed-0"
        qkv.append(t.numpy().reshape(-1, t.ne[0]))
        return True

    path = files[arch]
    ctx = context(path, n_rs_seq, backend, observe=watch)
    qkv.clear()
    start = ctx.tensor("cache_r_l0")
    d_conv, rows = 4, start.shape[0]
    channels = start.shape[1] // (d_conv - 1)
    oracle = ConvStateOracle(1, d_conv, channels, 1, n_rs_seq, initial=[start])  # every byte FILL
    oracle.caches[0][0] = 0  # a new sequence reads a zeroed state (llama.cpp scales its row by 0 first)
    read = 0
    for batch, rollback in ((tokens(7, 1), 0), (tokens(3, 2), min(2, n_rs_seq)), (tokens(1, 3), 0), (tokens(5, 4), 1)):
        ctx.decode(batch)
        oracle.step([qkv[-1][None]], [read], 0)
        got = ctx.tensor("cache_r_l0")
        assert got.shape[0] == rows
        np.testing.assert_array_equal(got.view(np.uint32), oracle.caches[0].view(np.uint32))
        read = 0
        if rollback:
            p_end = int(lib.llama_memory_seq_pos_max(lib.llama_get_memory(ctx.ptr), 0)) + 1
            assert ctx.memory_seq_rm(0, p_end - rollback, -1)
            read = rollback  # the next ubatch reads slot j


def test_a_rolled_back_state_saved_and_restored_replays_the_same(files):
    """llama.cpp's test_rollback: roll back 3 tokens, save the sequence's state (its rollback pending),
    restore it into a fresh context and into a dirty one (its own rolled-back history), replay the 3
    tokens one at a time: the same logits, bit for bit."""
    path, n_rs_seq, n_rollback = files["qwen35"], 8, 3
    toks = list(range(1, 10))
    src = context(path, n_rs_seq)
    src.decode(toks)
    assert src.memory_seq_rm(0, len(toks) - n_rollback, -1)
    saved = src.state_save(seq=0)
    fresh, dirty = context(path, n_rs_seq), context(path, n_rs_seq)
    dirty.decode(tokens(len(toks), 9))
    assert dirty.memory_seq_rm(0, len(toks) - n_rollback, -1)
    fresh.state_load(saved, seq=0)
    dirty.state_load(saved, seq=0)
    for i in range(n_rollback):
        pos = len(toks) - n_rollback + i
        for c in (src, fresh, dirty):
            c.decode([toks[pos]], positions=[pos])
        assert np.array_equal(src.logits(), fresh.logits()) and np.array_equal(src.logits(), dirty.logits()), i


def test_several_sequences_replayed_across_ubatches(files):
    """llama.cpp's test_multi_seq_split_replay: two sequences roll back 3 tokens, then replay 40 tokens each
    in one batch (several ubatches of 16 while the restore is pending), against a context that never went
    past the rollback point; then seq-1-only steps are independent of what seq 0 holds. llama.cpp's test
    decodes the 3 tokens alone and rolls all of them back, which needs the state before that ubatch, which
    no slot holds (it read a recurrent state of another token, and its logits bound, NMSE 1e-4, let it
    pass): that is refused now, so the ubatch here starts one token earlier."""
    path, n_seqs, n_ubatch, n_prompt, n_rollback, n_replay = files["qwen35"], 2, 16, 19, 3, 40
    p0 = n_prompt - n_rollback

    def tok(s: int, pos: int) -> int:
        return (7 * pos + 31 * s + 1) % 256

    roll = context(path, 8, n_seq_max=n_seqs, n_ubatch=n_ubatch)
    ref = context(path, 8, n_seq_max=n_seqs, n_ubatch=n_ubatch)

    def decode_range(ctx, s, a, b, logits="none"):
        ctx.decode([tok(s, p) for p in range(a, b)], positions=list(range(a, b)), seq_ids=[s] * (b - a), logits=logits)

    upstream = context(path, 8, n_seq_max=n_seqs, n_ubatch=n_ubatch)
    decode_range(upstream, 0, 0, p0)
    decode_range(upstream, 0, p0, n_prompt)
    assert not upstream.memory_seq_rm(0, p0, -1)  # llama.cpp's own order: refused
    for s in range(n_seqs):
        decode_range(roll, s, 0, p0 - 1)
        decode_range(ref, s, 0, p0)
        decode_range(roll, s, p0 - 1, n_prompt)
        assert roll.memory_seq_rm(s, p0, -1)
        assert not roll.memory_seq_rm(s, p0 - 1, -1)  # a second removal while one is pending
    batch = [(s, p0 + i) for s in range(n_seqs) for i in range(n_replay)]
    for ctx in (roll, ref):
        ctx.decode(
            [tok(s, p) for s, p in batch], positions=[p for _, p in batch], seq_ids=[s for s, _ in batch], logits="all"
        )
    assert nmse(roll.all_logits(), ref.all_logits()) == 0.0
    # diverge seq 0 in ref only; seq-1-only steps must not see it
    tail = [p0 + n_replay + i for i in range(4)]
    ref.decode([tok(0, p + 7) for p in tail], positions=tail, seq_ids=[0] * 4)
    for p in tail:
        for ctx in (roll, ref):
            ctx.decode([tok(1, p)], positions=[p], seq_ids=[1])
        assert np.array_equal(roll.logits(), ref.logits()), p


# llama.cpp's tensor split (its Meta device) against the single CPU: over two lavapipe devices its
# F16-operand matrix shaders round differently (measured NMSE 1e-8 to 2e-8). Over two CPU devices llama.cpp
# runs the split too (NMSE 7e-15 on qwen35, 0 on qwen35moe); its NaN logits now and then under load were a
# device's empty share zeroed by a scale by 0 (ggml patch 0033, docs/findings.md 32).
# meta:cpu,cpu: llama.cpp's split sums each device's share of a product's K and adds the shares in F32 (docs/llama.md,
# "Why the runs differ"): an ulp per split product, carried through the layers. Measured on the tiny qwen35 with
# this test's tokens: up to 1e-10 on the Intel machines the bound was first set on, 1.47e-10 on an AMD EPYC's
# native build (its own kernels' summation order); 1e-8 keeps two orders of magnitude below the F32 logits bound
META_BOUND = {"meta:vulkan0,vulkan1": 1e-6, "meta:cpu,cpu": 1e-8}
META = [
    "meta:cpu,cpu",
    pytest.param(
        "meta:vulkan0,vulkan1",
        marks=pytest.mark.skipif("vulkan1" not in available_backends(), reason="needs two Vulkan devices"),
    ),
]


@pytest.mark.parametrize("backend", META)
@pytest.mark.parametrize("arch", ["qwen3next", *ARCHS])
def test_llama_cpps_tensor_split_equals_the_single_device_rollback_included(files, arch, backend):
    """split_mode tensor over two devices (llama.cpp's own split policy: attn_qkv, ssm_conv1d and the conv
    cache in several segments) runs the delta-net architectures, CPU devices included, and equals the
    single CPU: logits and both caches, after a draft rolled back (qwen3next: llama.cpp keeps no
    snapshots, n_rs_seq 0, so only the accepted tokens) and against the accepted tokens alone on the
    split."""
    path, bound = files[arch], META_BOUND[backend]
    prompt, draft, step = tokens(6, 1), tokens(4, 2), tokens(2, 3)
    runs = {}
    for name, on in (("split", backend), ("single", "cpu")):
        ctx = llama.Context(model(path, on), n_ctx=128, n_batch=32, n_ubatch=32, n_rs_seq=3, tensors=CACHES)
        ctx.decode(prompt)
        if arch == "qwen3next":  # no snapshots (n_rs_seq clamped to 0): only the accepted tokens
            assert ctx.n_rs_seq == 0
            ctx.decode(draft[:2], logits="all")
        else:
            ctx.decode(draft, logits="all")
            assert ctx.memory_seq_rm(0, len(prompt) + 2, -1)
        draft_logits = ctx.all_logits()
        ctx.decode(step, logits="all")
        runs[name] = (draft_logits, ctx.all_logits(), ctx.tensor("cache_r_l0"), ctx.tensor("cache_s_l0"))
    for split, single in zip(runs["split"], runs["single"]):
        assert nmse(split, single) <= bound
    if arch != "qwen3next":  # on the split itself: the rollback equals decoding the accepted tokens only
        ref = llama.Context(model(path, backend), n_ctx=128, n_batch=32, n_ubatch=32, n_rs_seq=3, tensors=CACHES)
        ref.decode(prompt)
        ref.decode(draft[:2])
        ref.decode(step, logits="all")
        assert nmse(ref.all_logits(), runs["split"][1]) <= bound
