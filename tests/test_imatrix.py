"""Importance matrices (pyggml.models.imatrix) and the quantized types that need one (IQ1, IQ2, IQ3_XXS)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pyggml import gguf, llama
from pyggml.models import imatrix, llama_archs


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    return llama_archs.generate("llama-moe", tmp_path_factory.mktemp("im") / "moe.gguf", seed=1)


def test_every_weight_of_a_product_gets_the_mean_square_of_its_inputs(moe_model):
    m = imatrix.compute(moe_model, n_tokens=16)
    layer = {k.split(".", 2)[2]: v for k, v in m.items() if k.startswith("blk.0.")}
    assert {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"} <= set(layer)
    assert "output.weight" in m and all(np.isfinite(v).all() and (v >= 0).all() for v in m.values())
    # q, k and v read the same normed input: the same matrix, as llama.cpp's imatrix tool finds it
    assert np.array_equal(layer["attn_q.weight"], layer["attn_k.weight"])
    assert np.array_equal(layer["attn_q.weight"], layer["attn_v.weight"])
    assert not np.array_equal(layer["attn_q.weight"], layer["attn_output.weight"])
    # an expert weight: one slice of K per expert (the quantizer reads expert e's at e * K)
    shapes = gguf.read_info(moe_model).tensor_info
    experts = [k for k in m if "_exps" in k]
    assert experts
    for name in experts:
        ne = shapes[name].ne
        assert m[name].size == ne[0] * ne[2], (name, ne)
    again = imatrix.compute(moe_model, n_tokens=16)
    assert all(np.array_equal(m[k], again[k]) for k in m)  # the seed decides the tokens
    with pytest.raises(ValueError, match="n_tokens"):
        imatrix.compute(moe_model, n_tokens=0)


@pytest.mark.parametrize("file_type", ["iq2_xs", "iq1_m"])
def test_a_type_that_needs_an_importance_matrix_is_made_with_one_and_checks(tmp_path, moe_model, file_type):
    out = tmp_path / f"{file_type}.gguf"
    with pytest.raises(llama.LlamaError, match="requires an imatrix"):
        llama.quantize(moe_model, out, file_type)
    llama.quantize(moe_model, out, file_type, imatrix=imatrix.compute(moe_model, n_tokens=8))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyggml",
            "check",
            "--model",
            str(out),
            "--backend",
            "cpu",
            "--no-repack",
            "--tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr


def test_the_quantize_command_computes_the_matrix_where_the_type_needs_it(tmp_path, moe_model):
    def quantize(*extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "pyggml", "quantize", str(moe_model), str(tmp_path / "o.gguf"), "iq2_xxs"]
        return subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=300)

    assert quantize().returncode == 0
    refused = quantize("--no-imatrix")
    assert refused.returncode == 2 and "requires an imatrix" in refused.stderr and "Traceback" not in refused.stderr


def test_an_importance_matrix_with_a_non_finite_value_is_refused(tmp_path, moe_model):
    with pytest.raises(ValueError, match="not finite"):
        llama.quantize(moe_model, tmp_path / "x.gguf", "iq2_xs", imatrix={"blk.0.attn_q.weight": [np.nan] * 256})


def test_a_weight_no_product_reads_gets_an_even_matrix_and_the_model_quantizes(tmp_path):
    """llama.cpp's generated qwen3next keeps blk.N.ssm_in.weight, which its graph does not read: the
    quantizer refused IQ2_XS ("Missing importance matrix for tensor blk.0.ssm_in.weight")."""
    src = llama_archs.generate("qwen3next", tmp_path / "q3n.gguf", seed=0)
    m = imatrix.compute(src, n_tokens=8)
    assert np.array_equal(m["blk.0.ssm_in.weight"], np.ones_like(m["blk.0.ssm_in.weight"]))
    llama.quantize(src, tmp_path / "iq2.gguf", "iq2_xs", imatrix=m)
    # a type llama.cpp refuses for these sizes leaves no file behind (llama.cpp had begun writing it)
    with pytest.raises(llama.LlamaError, match="no tensor type fallback"):
        llama.quantize(src, tmp_path / "q1.gguf", "q1_0")
    assert not (tmp_path / "q1.gguf").exists()


def test_the_quantize_command_refuses_a_file_that_is_not_a_model(tmp_path):
    """The importance matrix reads the file first: a file that is not GGUF was a traceback there."""
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    res = subprocess.run(
        [sys.executable, "-m", "pyggml", "quantize", str(bad), str(tmp_path / "o.gguf"), "iq2_xs"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and "invalid magic" in res.stderr, res.stderr
    assert not (tmp_path / "o.gguf").exists()
