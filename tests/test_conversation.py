"""A conversation decoded as users run one (pyggml.conversation), one run held against another node by node
(pyggml.drift, llama.compare, `python -m pyggml compare`), and `check --model`'s conversation options."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")

import numpy as np  # noqa: E402

from pyggml import drift, node_reader  # noqa: E402
from pyggml.models.make_model import make_model  # noqa: E402

PROMPT = "The capital of France is Paris, and the capital of Spain is"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("talk")
    out = {}
    for arch in ("llama", "qwen35", "mamba2"):
        out[arch] = folder / f"{arch}.gguf"
        make_model(arch, out[arch])
    for arch in ("llama", "qwen35"):
        out[f"{arch}-q8"] = folder / f"{arch}-q8.gguf"
        llama.quantize(out[arch], out[f"{arch}-q8"], "q8_0")
    return out


def _cpu(path: Path) -> Any:
    return llama.Model.load(path, n_gpu_layers=0, devices=[])


def _run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyggml", cmd, *args], capture_output=True, text=True, timeout=600)


# --- the script ------------------------------------------------------------------------------------


def test_sequences_start_at_offsets_and_keep_the_first_token() -> None:
    s = llama.Script.from_tokens([1, 2, 3, 4], sequences=3, generate=2, speculative=1)
    assert s.prompts == ((1, 2, 3, 4), (1, 3, 4), (1, 4))
    assert s.positions() == 4 + 2 + 3


@pytest.mark.parametrize(
    "kw",
    [{"sequences": 0}, {"sequences": 5}, {"generate": -1}, {"speculative": -2}, {"prefill_logits": "some"}],
)
def test_a_script_refuses_what_cannot_be_decoded(kw: dict) -> None:
    with pytest.raises(ValueError):
        llama.Script.from_tokens([1, 2, 3, 4], **kw)


@pytest.mark.parametrize("tokens", [[1.7, 2], [True, 2], np.array([1.5, 2.0]), "12", [1, "2"]])
def test_token_ids_that_are_not_ints_are_refused_not_truncated(tokens: Any) -> None:
    """Script.from_tokens([1.7, 2]) decoded token 1 without a word."""
    with pytest.raises(TypeError, match="token ids must be ints"):
        llama.Script.from_tokens(tokens)
    with pytest.raises(TypeError, match="token ids must be ints"):
        llama.Script((tuple(tokens),) if not isinstance(tokens, str) else (tokens,))


def test_a_conversation_longer_than_the_context_is_refused_with_the_numbers() -> None:
    s = llama.Script.from_tokens(list(range(1, 30)), generate=10)
    with pytest.raises(
        ValueError, match=r"a prompt of 29 tokens, 10 generated and 0 drafted need 40 positions .* has 32"
    ):
        s.check_fits(64, 2)
    with pytest.raises(ValueError, match="3 sequences, the context has n_seq_max 2"):
        llama.Script.from_tokens([1, 2, 3], sequences=3).check_fits(1024, 2)


# --- the conversation ------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen35"])
def test_prompt_generation_sequences_and_a_rolled_back_draft(models: dict[str, Path], arch: str) -> None:
    """A draft rejected and rolled back (the KV cache's cells; qwen35's recurrent state through the seed's
    rollback slots) leaves the memory as if it never was: the next logits equal a run that never drafted."""
    model = _cpu(models[arch])
    script = llama.Script.from_text(model, PROMPT, sequences=2, generate=3, speculative=3, prefill_logits="last")
    with llama.Context(model, **script.context_args(model)) as ctx:
        talk = llama.converse(ctx, script)
    labels = [s.label for s in talk.steps]
    assert labels == ["prefill", "step 1", "step 2", "step 3", "draft", "after rollback"]
    n_vocab = model.n_vocab
    assert talk.steps[0].logits.shape == (2, n_vocab)
    assert talk.steps[4].logits.shape == (2 * 4, n_vocab)
    every = llama.Script.from_text(model, PROMPT, sequences=2, generate=1)  # every prompt token's logits
    with llama.Context(model, **every.context_args(model)) as ctx:
        first = llama.converse(ctx, every).steps[0]
    assert first.logits.shape == (sum(len(p) for p in every.prompts), n_vocab)
    np.testing.assert_allclose(first.logits[len(every.prompts[0]) - 1], talk.steps[0].logits[0], rtol=0, atol=1e-5)
    assert first.next_tokens[: len(every.prompts[0]) - 1] == list(every.prompts[0][1:])
    # each generated token is the greedy choice of the sequence's logits before it
    for before, step in zip(talk.steps[:3], talk.steps[1:4]):
        assert [t[0] for t in step.tokens] == [int(np.argmax(r)) for r in before.logits]
    for s in range(2):
        held = len(script.prompts[s]) + 3 + 1 + talk.accepted[s] + 1
        assert len(talk.tokens[s]) == held
        assert talk.steps[4].rolled_back[s] in (-1, held - 1)
    with llama.Context(model, **script.context_args(model)) as plain:
        again = llama.no_draft(plain, talk)
    np.testing.assert_array_equal(again, talk.steps[-1].logits)
    model.close()


def test_a_followed_run_decodes_the_very_same_tokens(models: dict[str, Path]) -> None:
    model = _cpu(models["llama"])
    script = llama.Script.from_tokens([1, 5, 9, 13, 17, 21], sequences=2, generate=2, speculative=2)
    with llama.Context(model, **script.context_args(model)) as ctx:
        first = llama.converse(ctx, script)
    other = _cpu(models["llama-q8"])
    with llama.Context(other, **script.context_args(other)) as ctx:
        second = llama.converse(ctx, script, follow=first)
    assert [s.tokens for s in second.steps] == [s.tokens for s in first.steps]
    assert second.tokens == first.tokens and second.accepted == first.accepted
    with pytest.raises(ValueError, match="another script"):
        with llama.Context(other, **script.context_args(other)) as ctx:
            llama.converse(ctx, llama.Script.from_tokens([1, 2]), follow=first)
    import dataclasses

    short = dataclasses.replace(first, steps=first.steps[:2])  # a followed run that stopped after step 1
    with pytest.raises(ValueError, match="follow has no step 'step 2'"):
        with llama.Context(other, **script.context_args(other)) as ctx:
            llama.converse(ctx, script, follow=short)
    model.close()
    other.close()


@pytest.mark.parametrize("command", ["check", "compare"])
def test_a_draft_after_a_one_token_prompt_runs(models: dict[str, Path], command: str) -> None:
    """The context was made with n_ubatch = the largest batch (the draft's K + 1 tokens), and llama.cpp asserts
    n_ubatch > n_rs_seq + 1 = K + 1 for a rollback-capable recurrent state: the process died (SIGABRT)."""
    path = str(models["qwen35"])
    args = ["--model", path] if command == "check" else [path, str(models["qwen35-q8"]), "--no-save"]
    res = _run(command, *args, "--tokens", "1", "--generate", "1", "--speculative", "2")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "GGML_ASSERT" not in res.stderr


def test_a_context_whose_ubatch_cannot_hold_the_rollback_tail_is_refused(models: dict[str, Path]) -> None:
    model = _cpu(models["qwen35"])
    with pytest.raises(ValueError, match=r"n_ubatch 3 must be more than n_rs_seq \+ 1 = 3"):
        llama.Context(model, n_batch=3, n_ubatch=3, n_rs_seq=2)
    with llama.Context(model, n_batch=4, n_ubatch=4, n_rs_seq=2) as ctx:
        ctx.decode([1, 2, 3])  # split as llama.cpp keeps the snapshots: no assertion
    model.close()
    plain = _cpu(models["llama"])  # no recurrent state: no snapshot, nothing to refuse
    with llama.Context(plain, n_batch=2, n_ubatch=2, n_rs_seq=3) as ctx:
        ctx.decode([1, 2])
    plain.close()


def test_a_draft_on_a_model_that_cannot_roll_back_is_refused(models: dict[str, Path]) -> None:
    model = _cpu(models["mamba2"])
    script = llama.Script.from_tokens([1, 2, 3, 4], speculative=2)
    with llama.Context(model, **script.context_args(model)) as ctx:
        with pytest.raises(ValueError, match="--speculative 2: mamba2 keeps a recurrent state"):
            llama.converse(ctx, script)
    model.close()


def test_tokenize_uses_the_models_own_tokenizer(models: dict[str, Path]) -> None:
    model = _cpu(models["llama"])
    ids = llama.tokenize(model, PROMPT)
    assert ids and all(0 <= t < model.n_vocab for t in ids)
    assert llama.detokenize(model, ids[1:]).replace(" ", "") in PROMPT.replace(" ", "") or ids
    with pytest.raises(TypeError):
        llama.tokenize(model, b"bytes")
    model.close()


# --- Context.tensor: as computed, never the memory's later tenant ---------------------------------


def test_layer_outputs_read_by_name_are_the_values_computed(models: dict[str, Path]) -> None:
    """ctx.tensor("l_out-0") returned whatever the graph allocator put in l_out-0's memory after it (another
    layer's values): the nodes are now copied when computed, and equal what an observer saw at compute time."""
    model = _cpu(models["llama"])
    seen = drift.Recorder()
    with llama.Context(model, n_ctx=64, n_batch=8, tensors=("l_out",), observe=seen) as ctx:
        seen.set_step("prefill")
        ctx.decode([1, 2, 3, 4, 5, 6, 7, 8], logits="all")
        l0, l1 = ctx.tensor("l_out-0"), ctx.tensor("l_out-1")
        np.testing.assert_array_equal(l0, seen.recorded[("prefill", "l_out-0", 0)].values)
        np.testing.assert_array_equal(l1, seen.recorded[("prefill", "l_out-1", 0)].values)
        assert not np.array_equal(l0, l1)
        with pytest.raises(KeyError, match="l_out-7"):
            ctx.tensor("l_out-7")
        with pytest.raises(IndexError, match="1 nodes named 'l_out-0'"):
            ctx.tensor("l_out-0", occurrence=1)
        np.testing.assert_array_equal(ctx.tensor("l_out-0", occurrence=0), l0)
    model.close()


# --- drift: the figures --------------------------------------------------------------------------


class _Kept(drift.Recorder):
    """A recorder that also counts the nodes it read after the scheduler kept them (patch 0034)."""

    def __init__(self) -> None:
        super().__init__(native=False)
        self.kept = 0

    def on_ask(self, t: Any) -> bool:
        self.kept += bool(t.ptr.flags & node_reader.KEPT)
        return super().on_ask(t)


@pytest.mark.skipif(not node_reader.KEPT, reason="a ggml without patch 0034 keeps no node")
@pytest.mark.parametrize("arch", ["llama", "qwen35"])
def test_nodes_read_from_the_graph_computed_whole_are_those_computed_one_at_a_time(
    models: dict[str, Path], arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the graph allocator's plan reserved before the callback's flags gave kept nodes' memory to later nodes:
    # every node after the first layers read garbage (a checked qwen3: 2,818 of 3,248 nodes failed)
    script = llama.Script.from_tokens(
        [3, 7, 11, 5, 9], generate=2, sequences=2, speculative=2 if arch == "qwen35" else 0
    )
    runs: list[tuple[Any, Any]] = []
    for budget, rec in ((node_reader.KEPT_BYTES, _Kept()), (0, _Kept()), (node_reader.KEPT_BYTES, drift.Recorder())):
        monkeypatch.setattr(node_reader, "KEPT_BYTES", budget)
        model = _cpu(models[arch])
        with llama.Context(model, **script.context_args(model), observe=rec) as ctx:
            talk = llama.converse(ctx, script, on_step=rec.set_step)
        model.close()
        runs.append((rec, talk))
    (kept, talk_kept), (one_by_one, talk_one), (native, talk_native) = runs
    assert native.native and not kept.native  # the nodes copied in C (native/node_copies.c), and in Python
    assert kept.kept > len(kept.recorded) // 2 and one_by_one.kept == 0  # all but the writes into shared memory
    for other in (kept, native):
        assert other.recorded.keys() == one_by_one.recorded.keys()
        for key, node in one_by_one.recorded.items():
            got = other.recorded[key]
            assert (got.op, got.shape, got.error) == (node.op, node.shape, node.error), key
            np.testing.assert_array_equal(got.values, node.values, err_msg=str(key))
    for talk in (talk_kept, talk_native):
        for a, b in zip(talk.steps, talk_one.steps):
            np.testing.assert_array_equal(a.logits, b.logits)


def test_a_rolled_back_recurrent_model_split_over_two_cpus_departs_nowhere(models: dict[str, Path]) -> None:
    # a one-token step's GATED_DELTA_NET writes the first of its K snapshot slots only, the rest holding whatever
    # the memory held: compared whole, cpu (its graph kept, patch 0034) against meta:cpu,cpu (node by node) read
    # NMSE 1.0 at every step and named it the first divergent node, while the logits were equal
    script = llama.Script.from_tokens([3, 7, 11, 5, 9, 2, 4, 6], generate=3, speculative=2)
    cmp = llama.compare(models["qwen35"], None, script, "cpu", "meta:cpu,cpu")
    assert cmp.first_divergent is None, cmp.first_divergent
    gdn = [d for d in cmp.nodes if d.op == "GATED_DELTA_NET"]
    assert {d.step for d in gdn} >= {"prefill", "step 1", "after rollback"} and max(d.nmse for d in gdn) < 1e-12


def test_a_context_that_kept_its_nodes_is_freed_without_llamas_buffer_warning(
    models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    # llama.cpp warns when a context's compute buffer grew past what it reserved ("does not match expectation"),
    # as a kept graph's does (patch 0034): every `compare` printed it
    model = _cpu(models["llama"])
    with caplog.at_level("WARNING", logger="pyggml.ggml"):
        with llama.Context(model, n_ctx=64, observe=drift.Recorder()) as ctx:
            ctx.decode([3, 7, 11, 5])
    model.close()
    assert not [r for r in caplog.records if "expectation" in r.getMessage()]


def test_the_figures_of_two_arrays() -> None:
    a = np.array([1.0, 2.0, -2.0], np.float32)
    nmse, max_abs, cos = drift.compare_values(a, a + np.float32(0.5))
    assert nmse == pytest.approx(0.75 / 9) and max_abs == pytest.approx(0.5)
    assert cos == pytest.approx(np.dot(a, a + 0.5) / (np.linalg.norm(a) * np.linalg.norm(a + 0.5)))
    assert drift.compare_values(np.zeros(3), np.zeros(3)) == (0.0, 0.0, 1.0)
    assert math.isinf(drift.compare_values(a, np.array([1, np.nan, -2]))[0])
    assert drift.layer_of("attn_norm-12") == 12 and drift.layer_of("result_output") is None
    assert drift.base_name("ffn_out-3") == "ffn_out"


def test_logit_figures_as_llama_perplexity_computes_them() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 11))
    b = a + rng.normal(scale=0.3, size=a.shape)
    b[2] = a[2]  # one output the same
    nxt = np.array([3, -1, 4, 0, 10])
    st = drift.logit_stats(a, b, nxt)
    pa = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    pb = np.exp(b) / np.exp(b).sum(1, keepdims=True)
    kld = (pa * np.log(pa / pb)).sum(1)
    assert st["kld"]["mean"] == pytest.approx(kld.mean()) and st["kld"]["max"] == pytest.approx(np.max(kld))
    assert st["kld"]["median"] == pytest.approx(np.median(kld)) and abs(st["kld_per_output"][2]) < 1e-12
    # logits a rounding apart: a KLD of 1e-16 or so, never a rounding below 0 (-4e-17 was printed)
    near = np.random.default_rng(1).normal(size=(8, 4000)) * 8
    close = drift.logit_stats(near, near + np.random.default_rng(2).normal(scale=1e-7, size=near.shape))
    assert min(close["kld_per_output"]) >= 0 and close["kld"]["max"] < 1e-10
    assert st["same_top1"] == pytest.approx(np.mean(a.argmax(1) == b.argmax(1)))
    dp = [pb[i, t] - pa[i, t] for i, t in enumerate(nxt) if t >= 0]
    assert st["rms_dp"] == pytest.approx(np.sqrt(np.mean(np.square(dp))))
    with pytest.raises(ValueError):
        drift.logit_stats(a, b[:2])


def test_float32_logits_take_c_and_agree_with_the_float64_figures() -> None:
    """llama.cpp's logits (float32) are reduced in C (pyggml_kld_f32); the same logits as float64 take NumPy's path:
    the figures agree, a row with a NaN is NaN (not a number made up), and the others are unchanged."""
    rng = np.random.default_rng(3)
    a = (rng.normal(size=(6, 5000)) * 6).astype(np.float32)
    b = (a + rng.normal(scale=0.05, size=a.shape)).astype(np.float32)
    b[1] = a[1]
    nxt = np.array([0, 17, -1, 4999, 3, 2])
    c, ref = drift.logit_stats(a, b, nxt), drift.logit_stats(a.astype(np.float64), b.astype(np.float64), nxt)
    assert np.allclose(c["kld_per_output"], ref["kld_per_output"], rtol=1e-9, atol=1e-15)
    assert c["kld_per_output"][1] == 0 and c["rms_dp"] == pytest.approx(ref["rms_dp"], rel=1e-9)
    b[4, 9] = np.nan
    bad = drift.logit_stats(a, b, nxt)
    assert math.isnan(bad["kld_per_output"][4]) and math.isnan(bad["kld"]["mean"])
    assert np.allclose(np.delete(bad["kld_per_output"], 4), np.delete(c["kld_per_output"], 4), rtol=0, atol=0)


# --- one run against another ----------------------------------------------------------------------


def test_a_quantized_file_against_its_parent_says_where_the_error_enters(models: dict[str, Path]) -> None:
    model = _cpu(models["llama"])
    script = llama.Script.from_text(model, PROMPT, generate=2)
    model.close()
    c = llama.compare(models["llama"], models["llama-q8"], script)
    assert c.nodes and not c.only_a and not c.only_b
    fd = c.first_divergent
    # Q8_0 rounds the weights: the error enters at the token embedding's rows or the first product
    assert fd is not None and fd.op in ("GET_ROWS", "MUL_MAT") and fd.layer in (None, 0), fd
    assert fd.step == "prefill" and fd.nmse > c.bound >= fd.inputs_nmse
    assert c.first_difference is not None and c.first_difference.index <= fd.index
    n_prompt = len(script.prompts[0])
    assert 0 < c.logits["kld"]["mean"] < 0.1 and c.logits["outputs"] == n_prompt + 2
    layers = c.layers()
    assert [x["layer"] for x in layers] == [0, 1] and all(x["node"] == f"l_out-{x['layer']}" for x in layers)
    doc = c.to_json()
    for key in ("nodes", "layers", "first_divergent", "first_difference", "kld", "same_top1", "rms_dp"):
        assert key in doc
    assert {"layer", "kind", "nmse"} <= set(doc["nodes"][0])
    json.dumps(doc)  # every figure is JSON


def test_one_file_on_the_cpu_against_its_split_over_two_cpus(models: dict[str, Path]) -> None:
    c = llama.compare(models["qwen35"], None, llama.Script.from_tokens([1, 7, 9, 11, 3], generate=2),
                      backend_b="meta:cpu,cpu")  # fmt: skip
    compared = [d for d in c.nodes if not d.error]
    assert len(compared) > 100
    assert c.first_divergent is None, c.table()
    assert c.logits["same_top1"] == 1.0 and c.logits["kld"]["max"] < 1e-8


def test_a_conversation_past_the_trained_length_needs_a_context_set_on_purpose(models: dict[str, Path]) -> None:
    """Without n_ctx the generated tokens must fit the model's n_ctx_train (read from the file when the model is
    loaded with its vocabulary only), or a longer prompt's length; with n_ctx, past it, as llama.cpp allows when
    told to."""
    model = _cpu(models["llama"])
    trained = model.n_ctx_train
    probe = llama.Model.load(models["llama"], n_gpu_layers=0, devices=[], vocab_only=True)
    try:
        assert trained > 0 and probe.n_ctx_train == trained
    finally:
        probe.close()
    fits = llama.Script.from_tokens(list(range(8)), generate=trained - 9)
    assert fits.context_args(model)["n_ctx"] >= trained - 8
    long = llama.Script.from_tokens(list(range(8)), generate=trained - 8)
    with pytest.raises(ValueError, match=f"positions per sequence, and llama.gguf was trained for {trained}"):
        long.context_args(model)
    prompt_only = llama.Script.from_tokens(list(range(trained + 100)))  # a long batch of ids: the kernels' check
    assert prompt_only.context_args(model)["n_ctx"] >= trained + 101
    with pytest.raises(ValueError, match="--generate past the context"):
        llama.Script.from_tokens(list(range(trained + 100)), generate=1).context_args(model)
    assert long.context_args(model, n_ctx=2 * trained)["n_ctx"] == 2 * trained
    with pytest.raises(ValueError, match="does not fit the context"):
        long.context_args(model, n_ctx=trained // 2)


def test_the_picture_of_two_equal_runs_says_so_without_a_warning(models: dict[str, Path], tmp_path: Path) -> None:
    """Every NMSE 0: nothing to draw on a log scale; matplotlib printed a warning of an empty legend."""
    pytest.importorskip("matplotlib")
    import warnings

    twin = tmp_path / "twin.gguf"
    twin.write_bytes(models["llama"].read_bytes())
    cmp = llama.compare(models["llama"], twin)
    assert all(d.nmse == 0 for d in cmp.nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cmp.plot(str(tmp_path / "p.png")) == ""
    assert (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "arch, kw",
    [
        ("llama", {"generate": 2}),
        ("qwen35", {"generate": 2, "speculative": 2}),  # the recurrent state rolled back, one sequence: in place
        ("qwen35", {"generate": 1, "speculative": 2, "sequences": 2}),  # several ubatches: A's nodes copied
    ],
)
def test_in_turns_every_figure_is_that_of_one_run_after_the_other(
    models: dict[str, Path], arch: str, kw: dict[str, int]
) -> None:
    """`record_pair` decodes A and B a step each, B reading A's nodes where A computed them: every figure, the
    nodes only one run has and B's transcript are those of A recorded whole, then B against it."""
    model = _cpu(models[arch])
    script = llama.Script.from_text(model, PROMPT, **kw)
    model.close()
    a, b = models[arch], models[f"{arch}-q8"]
    run_a, run_b = llama.record_pair(a, b, script)
    assert not run_a.recorder.recorded and not run_a.recorder.entries  # nothing of A held past its step
    pair = llama.held_against(run_a, run_b)
    seq_a = llama.record(a, script)
    seq_b = llama.record(b, script, against=seq_a)
    whole = llama.held_against(seq_a, seq_b)
    assert len(pair.nodes) > 50 and [d.key for d in pair.nodes] == [d.key for d in whole.nodes]
    assert sum(d.nmse > 0 for d in pair.nodes) > 10  # Q8_0 against F32: figures that could differ
    assert [asdict_of(d) for d in pair.nodes] == [asdict_of(d) for d in whole.nodes]
    assert pair.only_a == whole.only_a and pair.only_b == whole.only_b
    assert pair.to_json()["kld"] == whole.to_json()["kld"]
    for mine, theirs in zip(run_b.transcript.steps, seq_b.transcript.steps, strict=True):
        assert (mine.label, mine.tokens, mine.next_tokens) == (theirs.label, theirs.tokens, theirs.next_tokens)
    assert run_b.transcript.accepted == seq_b.transcript.accepted


def asdict_of(d: Any) -> dict[str, Any]:
    """A NodeDiff's fields, NaN made comparable."""
    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in vars(d).items()}


def test_a_node_left_in_place_is_copied_before_a_later_node_writes_over_it() -> None:
    """The C copier leaves a kept node in place (in_place) for a comparison made after the compute; a later node
    that writes into its memory (a copy into a view of it) must not change what the log holds."""
    import pyggml as gg
    from pyggml._native import ffi, lib

    n = 64
    ctx = gg.Context()
    x = ctx.tensor("f32", (n,), "x", input=True)
    a = ctx.scale(x, 2.0)
    ctx.set_name(a, "a")
    written = ctx.cpy(ctx.sqr(x), ctx.view_1d(a, n, 0))  # x^2 into a's memory, after a was computed
    out = ctx.add(written, x)
    graph = gg.Graph(ctx).build_forward_expand(out)
    sched = gg.Scheduler([gg.cpu_backend()])
    rec = drift.Recorder()
    rec.leave_in_place(True)
    assert rec.eval_callback is not None
    callback, log = rec.eval_callback
    lib.ggml_backend_sched_set_eval_callback(sched.ptr, callback, log)
    X = np.arange(1, n + 1, dtype=np.float32)
    with node_reader.kept_while(rec):
        sched.alloc_graph(graph)
        x.set(X)
        sched.compute(graph)
    left = [ffi.string(log.nodes[i].name).decode() for i in range(log.n_nodes) if log.nodes[i].at != ffi.NULL]
    assert left, "no node was left in place"
    rec.after_decode()
    np.testing.assert_array_equal(rec.recorded[("", "a", 0)].values, 2 * X)
    np.testing.assert_array_equal(out.numpy(), X * X + X)
    lib.ggml_backend_sched_set_eval_callback(sched.ptr, ffi.NULL, ffi.NULL)


def test_compare_refuses_a_run_against_itself(models: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="B is A"):
        llama.compare(models["llama"], models["llama"])


# --- the command lines ---------------------------------------------------------------------------


def test_the_compare_command(models: dict[str, Path], tmp_path: Path) -> None:
    report, picture, saved = tmp_path / "c.json", tmp_path / "c.png", tmp_path / "repro"
    res = _run("compare", str(models["llama"]), str(models["llama-q8"]), "--prompt", PROMPT, "--generate", "2",
               "--json", str(report), "--plot", str(picture), "--save", str(saved))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "KLD mean" in res.stdout and "first divergent node" in res.stdout and "layer" in res.stdout
    doc = json.loads(report.read_text())
    assert doc["first_divergent"]["reproducer"] and Path(doc["first_divergent"]["reproducer"]).is_file()
    assert picture.stat().st_size > 1000
    again = _run("check", "--repro", doc["first_divergent"]["reproducer"])
    assert again.returncode == 0, again.stdout + again.stderr
    elsewhere = tmp_path / "new-folder" / "c.png"  # a missing folder is made, as --json's is
    res = _run("compare", str(models["llama"]), str(models["llama-q8"]), "--no-save", "--plot", str(elsewhere))
    assert res.returncode == 0 and elsewhere.stat().st_size > 1000 and "Traceback" not in res.stderr


def test_the_compare_command_one_model_at_a_time_gives_the_same_figures(
    models: dict[str, Path], tmp_path: Path
) -> None:
    reports: list[dict[str, Any]] = []
    for extra in ([], ["--one-at-a-time"]):
        report = tmp_path / f"c{len(reports)}.json"
        res = _run("compare", str(models["qwen35"]), str(models["qwen35-q8"]), "--generate", "1", "--speculative",
                   "2", "--no-save", "--json", str(report), *extra)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        assert ("in turns" in res.stdout) == (not extra)
        reports.append(json.loads(report.read_text()))
    for key in ("nodes", "layers", "kld", "same_top1", "rms_dp", "only_a", "only_b"):
        assert reports[0][key] == reports[1][key], key


@pytest.mark.parametrize(
    "args, said",
    [
        (["--backend", "cpu"], "give --backend twice"),
        (["--backend", "cpu", "--backend", "cpu"], "compared with itself"),
        (["--backend", "cpu", "--backend", "nosuch0"], "no backend nosuch0"),
        (["--backend", "cpu", "--backend", "meta:cpu,cpu", "--generate", "-1"], "--generate must be at least 0"),
        (["--backend", "cpu", "--backend", "meta:cpu,cpu", "--prompt", " "], "the prompt is empty"),
        # it took the context as asked and ran for hours: the model was trained for 512 positions
        (["--backend", "cpu", "--backend", "meta:cpu,cpu", "--generate", "100000"], "(n_ctx_train); generate fewer"),
        (["--backend", "cpu", "--backend", "meta:cpu,cpu", "--tokens", "60", "--ctx-size", "32"], "does not fit"),
    ],
)
def test_the_compare_command_refuses_bad_input(models: dict[str, Path], args: list[str], said: str) -> None:
    res = _run("compare", str(models["llama"]), *args)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_the_compare_command_refuses_a_file_against_itself_and_unwritable_outputs_before_running(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The same file twice on one backend was compared with itself (all zeros), and a --plot or --json that
    could not be written was said only after both runs."""
    path = str(models["llama"])
    res = _run("compare", path, str(Path(path).parent / ".." / Path(path).parent.name / Path(path).name))
    assert res.returncode == 2 and "compared with itself" in res.stderr, res.stdout + res.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for option in ("--plot", "--json"):
        res = _run("compare", path, "--backend", "cpu", "--backend", "meta:cpu,cpu", option, str(blocker / "x"))
        assert res.returncode == 2 and f"{option} {blocker / 'x'}:" in res.stderr, res.stdout + res.stderr
        assert "A:" not in res.stdout and "Traceback" not in res.stderr


def test_files_of_other_architectures_or_vocabularies_are_refused_saying_what_still_compares(
    models: dict[str, Path],
) -> None:
    res = _run("compare", str(models["llama"]), str(models["qwen35"]))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "tokens" in res.stderr or "--logits-only" in res.stderr, res.stderr
    if "--logits-only" in res.stderr:  # one vocabulary: the logits still compare
        res = _run("compare", str(models["llama"]), str(models["qwen35"]), "--logits-only")
        assert res.returncode == 0 and "KLD mean" in res.stdout and "nodes compared: 0" in res.stdout, res.stderr


def test_check_a_conversation_every_node_of_every_step(models: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    res = _run("check", "--model", str(models["qwen35"]), "--prompt", PROMPT, "--generate", "2", "--sequences",
               "2", "--speculative", "2", "--backend", "cpu", "--backend", "meta:cpu,cpu", "--json", str(report))  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for label in ("prefill", "step 1", "step 2", "draft", "after rollback"):
        assert f"  {label} " in res.stdout
    recs = json.loads(report.read_text())
    rollback = [r for r in recs if r["case"].endswith("/rollback")]
    assert {r["backend"] for r in rollback} == {"cpu", "meta:cpu,cpu"} and all(r["status"] == "pass" for r in rollback)
    [logits] = [r for r in recs if r["case"].endswith("/logits")]
    assert "KLD mean" in logits["message"] and "same top-1" in logits["message"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--speculative", "2"], "cannot roll back"),
        (["--prompt", PROMPT, "--generate", "40", "--ctx-size", "32"], "does not fit the context"),
        (["--prompt", "x", "--prompt-file", "f"], "not both"),
        (["--sequences", "0"], "--sequences must be at least 1"),
        (["--generate", "100000"], "--generate past the context"),
    ],
)
def test_check_refuses_a_conversation_it_cannot_run(models: dict[str, Path], args: list[str], said: str) -> None:
    res = _run("check", "--model", str(models["mamba2"]), *args)
    assert res.returncode == 2 and said in res.stderr, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr


def test_in_a_matrix_a_model_that_cannot_roll_back_is_checked_without_its_draft(models: dict[str, Path]) -> None:
    """`check --arch ... --speculative K` over architectures llama.cpp cannot roll back (mamba2, qwen3next):
    the rest of the conversation is checked, the draft reported skipped with the reason."""
    from pyggml.testing.engine import model_check
    from pyggml.testing.engine.verdict import Status

    talk = model_check.Talk(tokens=6, generate=2, speculative=2)
    run = model_check.run_model(str(models["mamba2"]), "cpu", talk=talk)
    assert not run.error and "cannot roll back" in run.no_rollback
    assert [s.label for s in run.transcript.steps] == ["prefill", "step 1", "step 2"]
    assert (
        run.verdicts
        and all(v.ok for v in run.verdicts)
        and {v.step for v in run.verdicts}
        == {
            "prefill",
            "step 1",
            "step 2",
        }
    )
    [skipped] = [r for r in model_check.records(str(models["mamba2"]), [run]) if r.case.endswith("/rollback")]
    assert skipped.status == Status.SKIPPED and "llm_arch_supports_rs_rollback" in skipped.message
    # and the command line says so (its line for a skipped rollback once raised TypeError)
    res = _run("check", "--arch", "mamba2", "--tokens", "4", "--generate", "1", "--speculative", "2")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "mamba2-f32.gguf on cpu: --speculative 2: mamba2 keeps a recurrent state" in res.stdout
    assert "no draft (skipped)" in res.stdout


@pytest.mark.device  # lavapipe's pipelines: under the device budget (tests/conftest.py)
def test_lavapipes_quantized_products_match_its_f16_model(models: dict[str, Path]) -> None:
    """Why vulkan0's logits differ from the CPU's: its batched products of a quantized weight round the weight,
    the activations, each product and each sum to F16 (ggml-vulkan's f16acc kernel on lavapipe); the oracle
    models that, so each such node is judged at NMSE 1e-8 instead of 5e-4, and here matches to 1e-12."""
    from pyggml.testing.check import available_backends
    from pyggml.testing.engine import model_check
    from pyggml.testing.engine.opdb.matmul import NMSE_VULKAN_F16ACC

    if "vulkan0" not in available_backends():
        pytest.skip("no vulkan0 (lavapipe: GGML_VK_VISIBLE_DEVICES=0 and a Vulkan build)")
    if "llvmpipe" not in __import__("pyggml").device("vulkan0").description:
        pytest.skip("vulkan0 is not Mesa's llvmpipe: the F16 model is lavapipe's kernel choice")
    run = model_check.run_model(str(models["llama-q8"]), "vulkan0", n_tokens=16, tolerance=lambda t, b: min(b, 1e-12))
    assert not run.error, run.error
    products = [v for v in run.verdicts if v.kind == "MUL_MAT" and v.buffer.startswith("Vulkan")]
    assert products and all(v.comparison is not None and v.ok for v in products), [
        (v.name, v.error, v.comparison) for v in products
    ]
    assert {v.nmse_bound for v in products} == {1e-12} and NMSE_VULKAN_F16ACC == 1e-8
