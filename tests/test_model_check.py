"""`check --model`: llama.cpp's own forward pass over a tiny model pyggml made, every node it computes
checked against its oracle with the values it received (pyggml.llama's observer, llama.cpp's cb_eval)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")

from pyggml.models.make_model import make_model  # noqa: E402
from pyggml.testing import model_check, opdb  # noqa: E402
from pyggml.testing.nodes import NodeChecker  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for arch in ("llama", "qwen35", "mamba2", "rwkv7"):
        path = tmp_path_factory.mktemp("models") / f"{arch}.gguf"
        make_model(arch, path)
        out[arch] = path
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen35", "mamba2", "rwkv7"])
def test_every_node_of_llama_cpps_graph_passes_its_oracle_on_the_cpu(tiny: dict[str, Path], arch: str) -> None:
    run = model_check.run_model(str(tiny[arch]), "cpu", n_tokens=6)
    assert not run.error, run.error
    kinds = run.by_kind()
    assert sum(c["checked"] for c in kinds.values()) > 20
    assert not run.failed, [(v.kind, v.name, v.comparison and v.comparison.message) for v in run.failed]
    assert not [k for k, c in kinds.items() if c["no oracle"] or c["not modelled"]], kinds
    assert run.logits is not None and run.logits.shape == (6, 256)


def test_a_wrong_node_is_reported_by_kind_and_name(tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    opdb.load()
    spec = opdb.READERS["RMS_NORM"]
    monkeypatch.setattr(spec, "from_node", lambda n: n.arg(0) * 1.01)  # an oracle off by 1 %
    run = model_check.run_model(str(tiny["llama"]), "cpu", n_tokens=4)
    assert run.failed and {v.kind for v in run.failed} == {"RMS_NORM"}
    recs = model_check.records(str(tiny["llama"]), [run])
    bad = [r for r in recs if r.status == "fail"]
    assert [r.case for r in bad] == ["llama.gguf/RMS_NORM"] and "NMSE" in bad[0].message


def test_an_observer_that_raises_stops_the_decode_with_its_exception(tiny: dict[str, Path]) -> None:
    def boom(t: object, ask: bool) -> bool:
        raise KeyError("from the observer")

    model = llama.Model.load(str(tiny["llama"]), n_gpu_layers=0)
    ctx = llama.Context(model, n_ctx=32, n_batch=4, observe=boom)
    with pytest.raises(KeyError, match="from the observer"):
        ctx.decode([1, 2, 3])
    checker = NodeChecker()
    ctx = llama.Context(model, n_ctx=32, n_batch=4, observe=checker)
    ctx.decode([1, 2, 3])
    assert checker.verdicts and all(v.ok for v in checker.verdicts)


def test_the_command_line(tiny: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyggml",
            "check",
            "--model",
            str(tiny["llama"]),
            "--json",
            str(report),
            "--tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "MUL_MAT" in res.stdout and "checked" in res.stdout
    recs = json.loads(report.read_text())
    assert recs and all(r["status"] == "pass" for r in recs)
    for args in (
        ["--model", str(tmp_path / "none.gguf")],
        ["--model", str(tiny["llama"]), "--backend", "meta:cpu,cpu"],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "pyggml", "check", *args], capture_output=True, text=True, timeout=600
        )
        assert res.returncode == 2 and res.stderr.strip(), res.stderr
