"""The gated delta-net layer (pyggml/models/delta_net.py): the NumPy reference, the rollback property on
every backend, the meta split, graph reuse and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from pyggml.models.delta_net import DeltaNet, DeltaNetConfig, split_policy
from pyggml.runner import Runner
from pyggml.testing.engine.cases import REGISTRY, _load_all
from pyggml.testing.engine.cases.delta_net import DeltaNetCase, Scenario
from pyggml.testing.engine.oracles.delta_net import DeltaNetReference
from pyggml.testing.engine.verdict import Status, bounds, compare

_load_all()
CASES = [c for c in REGISTRY.values() if isinstance(c, DeltaNetCase)]


def _backends():
    from pyggml.testing.check import available_backends

    names = [b for b in available_backends() if b != "vulkan1"] + ["meta:cpu,cpu"]
    if {"vulkan0", "vulkan1"} <= set(available_backends()):
        names.append("meta:vulkan0,vulkan1")
    return names


_RUNNERS: dict[str, Runner] = {}


def runner_for(name: str) -> Runner:
    if name not in _RUNNERS:
        _RUNNERS[name] = Runner(name)
    return _RUNNERS[name]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rollback_equals_rerun_and_the_reference(case, backend, request):
    """Drafting n tokens and rolling back j (slot j of both caches) == running only the accepted tokens,
    on the same backend (check_rollback raises Mismatch otherwise); and == the NumPy reference. On a device,
    the verdict of `check`'s workers on the same case (tests/conftest.py, device_records)."""
    if backend != "cpu":
        rec = request.getfixturevalue("device_records")[case.name, backend]
        if rec.status == Status.SKIPPED:
            pytest.skip(rec.message)
        assert rec.status == Status.PASS, f"{case.name} on {backend}: {rec.status}: {rec.message}"
        return
    actual = case.execute(runner_for(backend))
    expected = case.expected()
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        v = compare(a, e, *bounds(case, backend))
        assert v.ok, f"{case.name} on {backend}, output {i}: {v.message}"


def test_cases_cover_what_the_property_needs():
    Ks = {c.scenario.K for c in CASES}
    assert Ks == set(range(1, 9))
    assert {c.scenario.cache_type for c in CASES} == {"f32", "f16"}
    shorter = [c for c in CASES if c.scenario.n_draft < c.scenario.K - 1]
    longer = [c for c in CASES if c.scenario.n_draft > c.scenario.K - 1]
    assert shorter and longer
    assert any(len(set(c.scenario.rollback)) > 1 for c in CASES)  # sequences rolling back differently
    assert any(c.scenario.continue_at != c.scenario.kv_head for c in CASES)  # states moved to other cells
    assert any(c.scenario.config.ratio > 1 for c in CASES)


def test_reference_rollback_is_the_rerun():
    """The reference itself: reading slot j after a draft == having run only the accepted tokens."""
    sc = Scenario(DeltaNetConfig(n_layer=1), K=4, cache_type="f32", n_draft=5, rollback=[3, 1])
    from pyggml.models.delta_net import random_weights

    w = random_weights(sc.config, sc.seed)
    a = sc.run_rollback(DeltaNetReference(sc.config, w, sc.K, sc.mem_size))
    b = sc.run_accepted(DeltaNetReference(sc.config, w, sc.K, sc.mem_size))
    a[1] = np.where(sc.accepted_mask(), a[1], np.nan)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("strategy", ["host_index", "device_index", "copies"])
def test_every_conv_write_strategy_rolls_back(strategy):
    sc = Scenario(DeltaNetConfig(), K=4, cache_type="f32", n_draft=2, rollback=[1, 0])
    runner = Runner("cpu")
    rolled = sc.run_rollback(DeltaNet(runner, sc.config, K=4, mem_size=sc.mem_size, strategy=strategy))
    base = sc.run_rollback(DeltaNet(runner, sc.config, K=4, mem_size=sc.mem_size))
    for x, y in zip(rolled, base):
        np.testing.assert_array_equal(x, y)


def test_meta_view_offset_inside_group():
    """One value head per key head: the v heads are a view at offset 2*S inside each group of the conv
    output. ggml's meta code halved that offset on two devices (every device read the k heads), a
    silently wrong layer (max error 2.7); patch 0018 keeps it."""
    cfg = DeltaNetConfig(n_layer=1, n_k_heads=2, n_v_heads=2)
    x = np.random.default_rng(1).standard_normal((2, 3, cfg.n_embd)).astype(np.float32)
    outs = []
    for name in ("cpu", "meta:cpu,cpu"):
        m = DeltaNet(Runner(name), cfg, K=2, mem_size=2)
        outs.append(m.step(x, [m.row(0), m.row(1)], 0))
    v = compare(outs[1], outs[0], 1e-12, 1e-5)
    assert v.ok, v.message


def test_meta_splits_heads_across_devices():
    cfg = DeltaNetConfig(n_k_heads=4, n_v_heads=8)
    policy = dict(split_policy(cfg, 2))
    runner = Runner("meta:cpu,cpu")
    m = DeltaNet(runner, cfg, K=3, mem_size=3)
    splits = {t.name: runner.meta.split_of(t) for t in list(m.weights.ctx.tensors()) + list(m.mem.ctx.tensors())}
    assert splits["blk.0.attn_qkv"].axis == 1 and sum(splits["blk.0.attn_qkv"].sizes) == cfg.conv_channels
    assert list(splits["blk.0.attn_qkv"].sizes) == [cfg.conv_channels // 2] * 2
    assert splits["cache_ssm_l1"].axis == 0 and list(splits["cache_ssm_l1"].sizes) == [cfg.n_embd_s // 2] * 2
    assert splits["cache_conv_l0"].axis == 0 and list(splits["cache_conv_l0"].sizes) == [cfg.n_embd_r // 2] * 2
    assert splits["blk.0.ssm_out"].axis == 0
    assert splits["blk.1.ssm_norm"].axis == "mirrored" and splits["blk.1.attn_norm"].axis == "mirrored"
    assert "blk.*.attn_qkv" in policy
    with pytest.raises(ValueError, match="at least one key head per device"):
        split_policy(DeltaNetConfig(n_k_heads=1, n_v_heads=2), 2)


def test_graph_is_reused_for_one_shape():
    m = DeltaNet(Runner("cpu"), DeltaNetConfig(n_layer=1), K=2, mem_size=2)
    x = np.zeros((1, 2, 32), np.float32)
    m.step(x, [m.row(0)], 0)
    m.step(x, [m.row(0)], 0)
    m.step(x, [m.row(0, 1)], 0)
    assert (m.builds, m.reuses) == (1, 2)
    m.step(x[:, :1], [m.row(0)], 0)
    assert m.builds == 2


def test_rollback_beyond_what_both_caches_hold_is_refused():
    """After a ubatch of n tokens the conv cache holds n+1 windows but the recurrent cache only n states:
    rolling back all n tokens would pair a conv history with a recurrent state never captured."""
    m = DeltaNet(Runner("cpu"), DeltaNetConfig(n_layer=1), K=4, mem_size=2)
    x = np.ones((1, 2, 32), np.float32)
    m.step(x, [m.row(0)], 0)
    assert m.row(0, 1) == 2
    with pytest.raises(ValueError, match="cannot roll back 2 token"):
        m.row(0, 2)
    with pytest.raises(ValueError, match="cannot roll back"):
        m.step(x, [2 * m.mem_size], 0)  # slot 2 of cell 0, by row number
    with pytest.raises(ValueError, match="cannot roll back 1"):
        m.row(1, 1)  # cell 1 never ran: only its zero state (slot 0)


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda m: m.step(np.zeros((1, 2, 31), np.float32), [0], 0), r"x must be \(n_seqs, n_seq_tokens, 32\)"),
        (lambda m: m.step(np.zeros((2, 2, 32), np.float32), [0], 0), "one row per sequence"),
        (lambda m: m.step(np.zeros((2, 2, 32), np.float32), [0, 1], 1), "kv_head"),
        (lambda m: m.step(np.zeros((1, 2, 32), np.float32), [99], 0), "s_copy"),
        (lambda m: m.step(np.zeros((1, 0, 32), np.float32), [0], 0), "x must be"),
        (lambda m: m.row(0, 4), "rollback"),
    ],
)
def test_bad_steps_raise(bad, match):
    m = DeltaNet(Runner("cpu"), DeltaNetConfig(n_layer=1), K=4, mem_size=2)
    with pytest.raises((ValueError, TypeError), match=match):
        bad(m)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"n_k_heads": 2, "n_v_heads": 3}, "multiple of n_k_heads"),
        ({"d_conv": 1}, "d_conv"),
        ({"eps": 0.0}, "eps"),
        ({"head_dim": 0}, "head_dim"),
    ],
)
def test_bad_configs_raise(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        DeltaNetConfig(**kw)


def test_bad_model_arguments_raise():
    with pytest.raises(ValueError, match="strategy"):
        DeltaNet(Runner("cpu"), DeltaNetConfig(), strategy="nope")
    with pytest.raises(ValueError, match="K"):
        DeltaNet(Runner("cpu"), DeltaNetConfig(), K=0)
    with pytest.raises(TypeError, match="cache type"):
        DeltaNet(Runner("cpu"), DeltaNetConfig(), cache_type="q8_0")
    with pytest.raises(ValueError, match="weights for 1 layers"):
        DeltaNet(Runner("cpu"), DeltaNetConfig(), weights=[{}])


def test_states_of_a_one_row_cache():
    """mem_size = K = 1: the cache is one row, which Tensor.numpy() returns one-dimensional."""
    m = DeltaNet(Runner("cpu"), DeltaNetConfig(n_layer=1), K=1, mem_size=1)
    m.step(np.ones((1, 2, 32), np.float32), [m.row(0)], 0)
    conv, ssm = m.states(0, 0)
    assert conv.shape == (m.config.conv_channels, 3) and ssm.shape == (2, 16, 16)
    assert np.abs(ssm).sum() > 0
    with pytest.raises(ValueError, match="row"):
        m.states(0, 1)


# --- llama.cpp's split of the real layer ----------------------------------------------------------------


def _llama_cpp_split_state(name: str, ne: tuple, hp: dict, arch: str, n_devices: int, il_eff: int):
    """`llama_meta_device_get_split_state` (src/llama-model.cpp of the pinned llama.cpp) for the tensors of a
    recurrent layer of QWEN3NEXT / QWEN35, F32 weights, no tensor_split: (axis, ne[segment][device], nr).
    Written from llama.cpp's code (get_tensor_config, get_split_segments, get_split_granularity and the
    loop after them), independently of delta_net.llama_split_table."""
    import math
    import re

    def m(pattern):
        return re.fullmatch(pattern, name) is not None

    if m(r"blk\.\d*\.attn_qkv.weight") or m(r"blk\.\d*\.attn_gate.weight") or m(r"blk\.\d*\.ssm_conv1d.weight"):
        axis = 1
    elif m(r"blk\.\d*\.ssm_dt.bias") or m(r"blk\.\d*\.ssm_a"):
        axis = 0
    elif m(r"blk\.\d*\.ssm_alpha.weight") or m(r"blk\.\d*\.ssm_beta.weight") or m(r"blk\.\d*\.ssm_ba.weight"):
        axis = 1
    elif m(r"cache_r_l\d*") or m(r"cache_s_l\d*"):
        axis = 0
    elif m(r"blk\.\d*\.ssm_out.weight"):
        axis = 0
    else:
        return "mirrored", None, None
    head_k_dim = head_v_dim = hp["ssm_d_state"]
    n_k_heads, n_v_heads = hp["ssm_n_group"], hp["ssm_dt_rank"]
    key_dim, value_dim = head_k_dim * n_k_heads, head_v_dim * n_v_heads
    segments = [(ne[axis], 1)]
    if arch == "QWEN3NEXT":
        if m(r"blk\.\d*\.attn_qkv.weight") or m(r"blk\.\d*\.ssm_conv1d.weight"):
            segments = [(key_dim, 2), (value_dim, 1)]
        if m(r"cache_r_l\d*"):
            segments = [(key_dim * (hp["ssm_d_conv"] - 1), 2), (value_dim * (hp["ssm_d_conv"] - 1), 1)]
    else:
        head_ratio = n_v_heads // n_k_heads
        if m(r"blk\.\d*\.attn_qkv.weight") or m(r"blk\.\d*\.ssm_conv1d.weight"):
            segments = [(key_dim, 2 + head_ratio)]
        if m(r"blk\.\d*\.attn_gate.weight") or m(r"blk\.\d*\.ssm_out.weight"):
            segments = [(key_dim, head_ratio)]
        if m(r"blk\.\d*\.ssm_dt.bias") or m(r"blk\.\d*\.ssm_a") or m(r"blk\.\d*\.ssm_alpha.weight"):
            segments = [(n_k_heads, head_ratio)]
        if m(r"blk\.\d*\.ssm_beta.weight"):
            segments = [(n_k_heads, head_ratio)]
        if m(r"cache_r_l\d*"):
            segments = [(key_dim * (hp["ssm_d_conv"] - 1), 2 + head_ratio)]
        if m(r"cache_s_l\d*"):
            segments = [(n_k_heads * head_v_dim * head_v_dim, head_ratio)]
    head_dim = hp["ssm_d_state"]
    granularity_qkv = math.lcm(math.lcm(1, 128), head_dim)
    if any(
        m(p)
        for p in (
            r"blk\.\d*\.attn_qkv.weight",
            r"blk\.\d*\.attn_gate.weight",
            r"blk\.\d*\.ssm_conv1d.weight",
            r"blk\.\d*\.ssm_out.weight",
        )
    ):
        g = granularity_qkv
    elif any(
        m(p)
        for p in (
            r"blk\.\d*\.ssm_dt.bias",
            r"blk\.\d*\.ssm_a",
            r"blk\.\d*\.ssm_alpha.weight",
            r"blk\.\d*\.ssm_beta.weight",
        )
    ):
        g = granularity_qkv // head_dim
    elif m(r"blk\.\d*\.ssm_ba.weight"):
        g = 2 * (granularity_qkv // head_dim)
    elif m(r"cache_r_l\d*"):
        g = granularity_qkv * (hp["ssm_d_conv"] - 1)
    else:
        g = granularity_qkv * head_dim
    rotation = il_eff % n_devices
    shares, nr = [], []
    for ne_s, nr_s in segments:
        row, low = [0] * n_devices, 0
        for j in range(n_devices - 1):
            high = ne_s * (j + 1) // n_devices
            if high % g != 0:
                high -= high % g
            row[(j + rotation) % n_devices] = high - low
            low = high
        row[(n_devices - 1 + rotation) % n_devices] = ne_s - low
        shares.append(row)
        nr.append(nr_s)
    return axis, shares, nr


def _indices(ne, nr, device):
    """The indices of the split axis a device holds: segments, each repeated, each repetition split over
    the devices in order (ggml_backend_meta_split_state)."""
    out, pos = [], 0
    for row, r in zip(ne, nr):
        for _ in range(r):
            for j, n in enumerate(row):
                if j == device:
                    out += range(pos, pos + n)
                pos += n
    return out


_LLAMA_NAMES = {  # pyggml's name -> llama.cpp's
    "attn_qkv": "attn_qkv.weight",
    "attn_gate": "attn_gate.weight",
    "ssm_conv1d": "ssm_conv1d.weight",
    "ssm_dt": "ssm_dt.bias",
    "ssm_a": "ssm_a",
    "ssm_ba": "ssm_ba.weight",
    "ssm_beta": "ssm_beta.weight",
    "ssm_alpha": "ssm_alpha.weight",
    "ssm_out": "ssm_out.weight",
    "attn_norm": "attn_norm.weight",
    "ssm_norm": "ssm_norm.weight",
}


@pytest.mark.parametrize("layout, arch", [("qwen3next", "QWEN3NEXT"), ("qwen35", "QWEN35")])
@pytest.mark.parametrize(
    "dims, n_devices",
    [
        (dict(head_dim=16, n_k_heads=2, n_v_heads=4), 2),  # every layer on one device
        (dict(head_dim=16, n_k_heads=16, n_v_heads=32), 2),
        (dict(head_dim=16, n_k_heads=16, n_v_heads=32), 3),
        (dict(head_dim=128, n_k_heads=16, n_v_heads=32), 3),  # Qwen3-Next-80B's layer
        (dict(head_dim=128, n_k_heads=16, n_v_heads=48), 4),
    ],
)
def test_the_llama_policy_puts_on_each_device_what_llama_cpp_puts_there(layout, arch, dims, n_devices):
    """Every tensor of every layer: the indices of its split axis each device holds under pyggml's policy
    equal those under llama.cpp's own rule (so each device holds the same bytes of it)."""
    cfg = DeltaNetConfig(n_embd=8, n_layer=3, layout=layout, **dims)
    hp = dict(ssm_d_state=cfg.head_dim, ssm_n_group=cfg.n_k_heads, ssm_dt_rank=cfg.n_v_heads, ssm_d_conv=cfg.d_conv)
    runner = Runner("meta:" + ",".join(["cpu"] * n_devices))
    m = DeltaNet(runner, cfg, K=1, mem_size=1)  # allocated under the policy: its splits are checked too
    llama_name = {f"cache_conv_l{il}": f"cache_r_l{il}" for il in range(cfg.n_layer)}
    llama_name.update({f"cache_ssm_l{il}": f"cache_s_l{il}" for il in range(cfg.n_layer)})
    llama_name.update(
        {f"blk.{il}.{n}": f"blk.{il}.{ln}" for il in range(cfg.n_layer) for n, ln in _LLAMA_NAMES.items()}
    )
    for t in list(m.weights.ctx.tensors()) + list(m.mem.ctx.tensors()):
        ours = runner.meta.split_of(t)
        il = int(t.name.split(".")[1]) if t.name.startswith("blk.") else int(t.name.rsplit("l", 1)[1])
        axis, ne, nr = _llama_cpp_split_state(llama_name[t.name], t.ne, hp, arch, n_devices, il)
        assert ours.axis == axis, t.name
        if axis == "mirrored":
            continue
        seg = ours.segments()
        reps = list(ours.repeats) or [1] * len(seg)
        for j in range(n_devices):
            assert _indices(seg, reps, j) == _indices(ne, nr, j), f"{t.name} on device {j}"
