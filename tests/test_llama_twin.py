"""The seed's layer in Python (pyggml.models.delta_net) against llama.cpp's own layer, on model files made
by make-model: the same outputs and both states, bit for bit on the CPU and on lavapipe."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pyggml import gguf
from pyggml.models.delta_net import DeltaNetConfig, split_policy
from pyggml.models.make_model import make_model
from pyggml.testing.check import available_backends

pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")
from pyggml.models import llama_twin  # noqa: E402
from pyggml.testing.engine import twin_check  # noqa: E402

VULKAN = pytest.mark.skipif("vulkan0" not in available_backends(), reason="no Vulkan device")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("twin")
    out = {}
    for arch in ("qwen3next", "qwen35", "llama"):
        out[arch] = str(d / f"{arch}.gguf")
        make_model(arch, out[arch])
    return out


@pytest.mark.parametrize("backend", ["cpu", pytest.param("vulkan0", marks=VULKAN)])
@pytest.mark.parametrize("arch", ["qwen3next", "qwen35"])
def test_the_twin_equals_llama_cpps_layer(files, arch, backend):
    records = twin_check.compare_with_llama(files[arch], backend, chunks=(5, 3, 1))
    assert [(r.layer, r.step, r.n_tokens) for r in records] == [(0, 0, 5), (0, 1, 3), (0, 2, 1)]
    for r in records:  # outputs and both states, bit for bit
        assert (r.output, r.conv, r.ssm) == (0.0, 0.0, 0.0) and r.ok, r


def test_the_file_gives_llama_cpps_layout_and_sizes(files):
    twin = llama_twin.load_twin(files["qwen35"])
    c = twin.config
    assert (c.layout, c.n_embd, c.head_dim, c.n_k_heads, c.n_v_heads, c.d_conv) == ("qwen35", 128, 32, 2, 4, 4)
    assert twin.layers == [0]  # full_attention_interval 2: layer 1 is attention
    assert set(twin.weights[0]) == set(c.weight_shapes())
    assert "ssm_beta" in twin.weights[0] and "ssm_ba" not in twin.weights[0]
    assert llama_twin.load_twin(files["qwen3next"]).config.layout == "qwen3next"


@pytest.mark.parametrize(
    ("arch", "wrong"), [("qwen35", "qwen3next"), ("qwen3next", "grouped")], ids=["broadcast", "channel-order"]
)
def test_the_wrong_layout_does_not_match(files, arch, wrong):
    """Each architecture's value-head broadcast and llama.cpp's channel order matter: the comparison sees
    them (qwen3next's ssm_ba has the same shape as the grouped layout's)."""
    twin = llama_twin.load_twin(files[arch])
    if wrong == "qwen3next":  # same weights, the other broadcast: build ssm_ba from beta and alpha
        w = twin.weights[0]
        nk, r = twin.config.n_k_heads, twin.config.ratio
        ba = np.concatenate([w.pop("ssm_beta").reshape(nk, r, -1), w.pop("ssm_alpha").reshape(nk, r, -1)], axis=1)
        w["ssm_ba"] = ba.reshape(2 * nk * r, -1)
    twin.config = dataclasses.replace(twin.config, layout=wrong)
    records = twin_check.compare_with_llama(files[arch], "cpu", chunks=(4,), twin=twin)
    r = records[0]
    assert r.output > 1e-5 and r.ssm > 1e-2 and not r.ok, r  # the residual carries most of the output


def test_a_file_without_the_layer_is_refused_with_the_reason(files, tmp_path):
    with pytest.raises(ValueError, match="architecture 'llama' has no gated delta-net layer"):
        llama_twin.load_twin(files["llama"])
    metadata, tensors = gguf.load(files["qwen35"])
    del tensors["blk.0.ssm_beta.weight"]
    cut = tmp_path / "cut.gguf"
    gguf.save(cut, metadata, tensors)
    with pytest.raises(ValueError, match="no tensor 'blk.0.ssm_beta.weight'"):
        llama_twin.load_twin(cut)
    del metadata["qwen35.ssm.state_size"]
    gguf.save(cut, metadata, {})
    with pytest.raises(ValueError, match="no metadata key 'qwen35.ssm.state_size'"):
        llama_twin.load_twin(cut)
    with pytest.raises(ValueError, match="chunks"):
        twin_check.compare_with_llama(files["qwen35"], "cpu", chunks=(0,))


def test_recurrent_layers_follow_llama_cpps_rules():
    assert llama_twin.recurrent_layers({"a.block_count": 8}, "a") == [0, 1, 2, 4, 5, 6]  # every 4th: attention
    assert llama_twin.recurrent_layers({"a.block_count": 4, "a.full_attention_interval": 2}, "a") == [0, 2]
    meta = {"a.block_count": 4, "a.attention.recurrent_layers": [True, False, True, True], "a.nextn_predict_layers": 1}
    assert llama_twin.recurrent_layers(meta, "a") == [0, 2]  # the MTP layer is never run


def test_layouts_are_checked():
    with pytest.raises(ValueError, match="layout must be one of"):
        DeltaNetConfig(layout="qwen4")
    assert split_policy(DeltaNetConfig(), 2) and split_policy(DeltaNetConfig(layout="qwen35"), 2)


META = [
    "meta:cpu,cpu",
    pytest.param(
        "meta:vulkan0,vulkan1",
        marks=pytest.mark.skipif("vulkan1" not in available_backends(), reason="needs two Vulkan devices"),
    ),
]


@pytest.mark.parametrize("twin_backend", META)
@pytest.mark.parametrize("arch", ["qwen3next", "qwen35"])
def test_the_twin_split_as_llama_cpp_splits_it_equals_llama_cpps_layer(files, arch, twin_backend):
    """The twin on a meta device, split with llama.cpp's own policy (several segments), against llama.cpp's
    layer on the CPU: within the twin's bound for that device (the split sums ssm_out's partial products
    in another order)."""
    records = twin_check.compare_with_llama(files[arch], "cpu", chunks=(5, 3, 1), twin_backend=twin_backend)
    assert len(records) == 3
    for r in records:
        assert r.ok, r
