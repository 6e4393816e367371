"""`check --model`: llama.cpp's own forward pass over a tiny model pyggml made, every node it computes
checked against its oracle with the values it received (pyggml.llama's observer, llama.cpp's cb_eval)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")

import numpy as np  # noqa: E402

import pyggml  # noqa: E402
from pyggml.models.make_model import make_model  # noqa: E402
from pyggml.runner import Runner  # noqa: E402
from pyggml.testing.engine import model_check, opdb, repro  # noqa: E402
from pyggml.testing.engine.nodes import NodeChecker  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for arch in ("llama", "qwen35", "mamba2", "rwkv7", "qwen3moe"):
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


@pytest.mark.parametrize("qtype", ["q4_k_m", "q8_0"])
def test_a_products_weight_read_a_block_of_rows_at_a_time_passes_as_decoded_whole(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtype: str
) -> None:
    """A quantized weight no later step reads is decoded and multiplied a block of rows at a time (a real model's
    weights decoded whole were GBs of fresh memory); the tiny model's weights are under the size that takes it,
    so the size is lowered here: every product passes its tight CPU bound either way."""
    from pyggml.testing.engine.opdb import matmul

    path = tmp_path / f"llama-{qtype}.gguf"
    llama.quantize(tiny["llama"], path, qtype)
    taken: list[bool] = []

    def by_blocks(n: opdb.Node, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        out = by_blocks_of_rows(n, b)
        taken.append(out is not None)
        return out

    by_blocks_of_rows = matmul._by_blocks_of_rows
    monkeypatch.setattr(matmul, "BLOCK_OF_ROWS_VALUES", 1024)
    monkeypatch.setattr(matmul, "_by_blocks_of_rows", by_blocks)
    run = model_check.run_model(str(path), "cpu", n_tokens=6, extra_bufts=False)
    assert not run.error and not run.failed, [(v.kind, v.name, v.comparison) for v in run.failed]
    assert sum(taken) >= 8, taken
    products = [v for v in run.verdicts if v.kind == "MUL_MAT" and v.comparison is not None]
    assert products and all(v.nmse_bound == matmul.NMSE_CPU_DOT for v in products if "ffn" in v.name)


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


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyggml", "check", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_models_child_runs_without_idle_threads_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child of `check --model` keeps OpenMP's and OpenBLAS's idle threads from spinning between the pieces
    llama.cpp computes and the checker's products (they took the cores from the compute: bench/README.md); a
    value the user set passes through as it is."""
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    env = model_check.child_env("cpu")
    assert env["GOMP_SPINCOUNT"] == "0" and env["OPENBLAS_THREAD_TIMEOUT"] == "4"
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "20")
    assert "OPENBLAS_THREAD_TIMEOUT" not in model_check.child_env("cpu")


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_that_cannot_be_written_is_said_before_the_run(
    tiny: dict[str, Path], tmp_path: Path, option: str
) -> None:
    """`check --model` and `check --repro` ran first and died on the report with a traceback (exit 1)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    nowhere = str(blocker / "r.out")
    for args in (["--model", str(tiny["llama"]), "--tokens", "4"], ["--repro", str(tmp_path)]):
        res = _cli(*args, option, nowhere)
        assert res.returncode == 2 and f"report {nowhere!r}" in res.stderr, res.stdout + res.stderr
        assert "Traceback" not in res.stderr and "MUL_MAT" not in res.stdout


def test_the_command_line(tiny: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    res = _cli("--model", str(tiny["llama"]), "--json", str(report), "--tokens", "4")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "MUL_MAT" in res.stdout and "checked" in res.stdout and "unread" in res.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    recs = json.loads(report.read_text())
    assert recs and all(r["status"] == "pass" for r in recs)
    for args, words in (
        (["--model", str(tmp_path / "none.gguf")], "no such file"),
        (["--model", str(report)], "not a GGUF file"),  # a JSON report given as a model: exit 2, not a failed run
        (["--model", str(tiny["llama"]), "--backend", "meta:"], "names its devices"),
        (["--model", str(tiny["llama"]), "--backend", "meta:cpu,nope0"], "no backend nope0"),
        (["--model", str(tiny["llama"]), "--node-nmse", "0"], "--node-nmse"),
        (["--model", str(tiny["llama"]), "--op", "add"], "--op does not apply"),
        (["--model", str(tiny["llama"]), "--type", "q8_0"], "--type does not apply"),
        (["--arch", "nope", "--type", "q8_0"], "--arch nope: no such architecture"),
        (["--repro", str(tmp_path), "--arch", "llama"], "--arch does not apply"),
        (["--repro", str(tmp_path), "--model", str(tiny["llama"])], "--model does not apply"),
        (["--repro", str(tmp_path), "--node-nmse", "1e-9"], "--node-nmse does not apply"),
        (["--repro", str(tmp_path), "--oracle", "projected"], "--oracle projected does not apply"),
        (["--repro", str(empty)], "no reproducer"),
        (["--repro", str(tmp_path / "none.json")], "no such file"),
        (["--repro", str(report)], "not a pyggml node reproducer"),
    ):
        res = _cli(*args)
        assert res.returncode == 2 and words in res.stderr, (args, res.stderr)


# --- reproducers: a node saved with its inputs, computed again on its own --------------------------------------------
def _saved(run: model_check.ModelRun, model: Path, directory: Path) -> list[repro.Repro]:
    return [repro.load(p) for p in model_check.save_captured(run, str(model), directory)]


@pytest.mark.parametrize("arch", ["llama", "qwen35", "rwkv7"])
def test_every_node_saved_from_a_passing_run_reruns_standalone_and_passes(
    tiny: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    run = model_check.run_model(str(tiny[arch]), "cpu", n_tokens=6, keep=lambda v: True)
    assert not run.error and not run.failed
    saved = _saved(run, tiny[arch], tmp_path)
    assert len(saved) == sum(v.comparison is not None for v in run.verdicts)
    by_index = {v.index: v for v in run.verdicts}
    runner = Runner("cpu")
    kinds = set()
    for r in saved:
        rec = repro.rerun(r, "cpu", runner)
        if r.capture.not_standalone:  # llama.cpp's empty copies of recurrent states: said, never passed
            assert rec.status == "skipped" and "cannot be rebuilt" in rec.message and "empty" in rec.message
            continue
        assert rec.status == "pass", (r.stem, rec.message)
        original = by_index[int(r.origin["index"])].comparison
        assert original is not None and rec.error == pytest.approx(original.nmse, rel=1e-6, abs=1e-30), r.stem
        kinds.add(r.capture.kind)
    assert {"MUL_MAT", "RMS_NORM" if arch != "rwkv7" else "NORM", "GET_ROWS", "ADD"} <= kinds
    if arch == "qwen35":  # a node that writes into its source's memory (view_of), and the delta-net op
        assert {"SET_ROWS", "CPY", "GATED_DELTA_NET", "SSM_CONV", "FLASH_ATTN_EXT", "ROPE"} <= kinds
        assert any(r.capture.view_of for r in saved if r.capture.kind == "SET_ROWS")
    if arch == "rwkv7":
        assert "RWKV_WKV7" in kinds


def test_failing_nodes_are_saved_and_their_reproducers_fail_alike(tiny: dict[str, Path], tmp_path: Path) -> None:
    """--node-nmse makes every inexact node's bound impossibly tight: real ggml nodes, real oracles, bounds they
    fail. The first MAX_FAILURES are kept; rerun on their own they fail with the same figures."""
    run = model_check.run_model(
        str(tiny["llama"]), "cpu", n_tokens=4, tolerance=model_check.node_nmse(1e-30), keep=model_check.keeper([])
    )
    assert len(run.failed) > repro.MAX_FAILURES
    saved = _saved(run, tiny["llama"], tmp_path)
    assert [r.origin["index"] for r in saved] == [v.index for v in run.failed[: repro.MAX_FAILURES]]
    doc = json.loads((tmp_path / f"{saved[0].stem}.json").read_text())
    assert doc["status"] == "fail" and doc["bound"] == 1e-30 and len(doc["op_params"]) == 16
    assert doc["sources"][0]["ne"] and (tmp_path / doc["arrays"]).is_file()
    for r in saved:
        rec = repro.rerun(r, "cpu")
        assert rec.status == "fail" and rec.bound == 1e-30 and "NMSE" in rec.message
        assert rec.error == pytest.approx(r.origin["nmse"], rel=1e-6)


def test_a_reproducer_whose_inputs_do_not_read_back_as_saved_is_an_error(tiny: dict[str, Path], tmp_path: Path) -> None:
    run = model_check.run_model(str(tiny["llama"]), "cpu", n_tokens=4, keep=model_check.keeper(["MUL_MAT"]))
    [path, *_] = model_check.save_captured(run, str(tiny["llama"]), tmp_path)
    assert repro.rerun(repro.load(path), "cpu").status == "pass"
    npz = path.with_suffix(".npz")
    arrays = dict(np.load(npz))
    arrays["src1_values"] = arrays["src1_values"] + 1  # what the oracle would get, no longer what the node reads
    np.savez(npz, **arrays)
    rec = repro.rerun(repro.load(path), "cpu")
    assert rec.status == "error" and "src1 did not read back as saved" in rec.message


def test_save_and_rerun_from_the_command_line(tiny: dict[str, Path], tmp_path: Path) -> None:
    fails = tmp_path / "fails"
    res = _cli("--model", str(tiny["llama"]), "--tokens", "4", "--node-nmse", "1e-30", "--save-failures", str(fails))
    assert res.returncode == 1 and f"check --repro {fails}" in res.stdout, res.stderr[-2000:]
    assert len(list(fails.glob("*.json"))) == repro.MAX_FAILURES == len(list(fails.glob("*.npz")))
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    res = _cli("--repro", str(fails), "--json", str(report), "--junit", str(junit))
    assert res.returncode == 1 and "repro/llama-cpu-n" in res.stdout
    recs = json.loads(report.read_text())
    assert len(recs) == repro.MAX_FAILURES and {r["status"] for r in recs} == {"fail"}
    assert junit.read_text().count("<failure") == repro.MAX_FAILURES
    res = _cli("--repro", str(fails), "--backend", "nope0")
    assert res.returncode == 2 and "no backend 'nope0'" in res.stderr, res.stderr
    keep = tmp_path / "keep"
    res = _cli("--model", str(tiny["qwen35"]), "--tokens", "4", "--save-failures", str(keep), "--save-node", "*norm-0")
    assert res.returncode == 0 and "reproducers saved" in res.stdout, res.stderr[-2000:]
    names = sorted(p.name for p in keep.glob("*.json"))
    assert names and all("NORM" in n or "MUL" in n for n in names), names  # attn_norm-0 is a MUL node
    res = _cli("--repro", str(keep), "--backend", "cpu", "--json", "-")
    assert res.returncode == 0, res.stderr[-2000:]
    assert {r["status"] for r in json.loads(res.stdout)} == {"pass"}


def test_nothing_is_saved_when_nothing_fails(tiny: dict[str, Path], tmp_path: Path) -> None:
    root = str(Path(pyggml.__file__).resolve().parent.parent)  # the pyggml these tests import, from another folder
    res = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--model", str(tiny["llama"]), "--tokens", "3"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # where the default folder would be made
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))},
    )
    assert res.returncode == 0 and not (tmp_path / repro.DEFAULT_DIR).exists(), res.stderr[-2000:]


# --- other devices: RPC servers and llama.cpp's tensor split -------------------------------------------------------
def test_a_model_on_an_rpc_device(tiny: dict[str, Path]) -> None:
    """`check --rpc HOST:PORT --model F --backend rpc0`: llama.cpp offloads every layer to a real RPC server (a
    child process), the nodes computed there are checked, and its logits match the CPU's."""
    from pyggml import rpc

    if not rpc.available():
        pytest.skip("built without ggml's RPC backend")
    with rpc.Server(threads=1) as srv:
        res = _cli("--rpc", srv.endpoint, "--model", str(tiny["llama"]), "--backend", "cpu", "--backend", "rpc0",
                   "--tokens", "4", "--json", "-")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    recs = json.loads(res.stdout)
    on_rpc = [r for r in recs if r["backend"] == "rpc0"]
    assert {r["status"] for r in on_rpc} == {"pass"} and any(r["case"].endswith("/MUL_MAT") for r in on_rpc)
    [logits] = [r for r in on_rpc if r["case"].endswith("/logits")]
    assert logits["error"] <= model_check.LOGITS_NMSE and logits["message"].startswith("against cpu: KLD mean")
    # the table (on stderr with --json -): the nodes lived in the server's buffers
    line = next(x for x in res.stderr.splitlines()[res.stderr.splitlines().index("== rpc0") :] if "nodes in" in x)
    assert f"RPC0[{srv.endpoint}]" in line


@pytest.mark.parametrize("arch", ["qwen35", "qwen3moe"])
@pytest.mark.parametrize("meta", ["meta:cpu,cpu", "meta:vulkan0,vulkan1"])
def test_llama_cpps_tensor_split_is_checked_node_by_node(
    tiny: dict[str, Path], tmp_path: Path, meta: str, arch: str
) -> None:
    """`--backend meta:...` loads the model with split_mode tensor over those devices, and every node is read
    back (each device's share assembled by its split state: segments, mirrored copies, partial sums summed,
    a MoE's delayed reduction) and checked: none unread, none failed, the logits compared with a CPU run.
    Before ggml patch 0032 every node but the token embedding was unread. An architecture llama.cpp cannot
    split (mamba2) is its error, not a crash."""
    from pyggml.testing.check import available_backends

    if meta.startswith("meta:vulkan") and not {"vulkan0", "vulkan1"} <= set(available_backends()):
        pytest.skip("needs two Vulkan devices (GGML_VK_VISIBLE_DEVICES=0,0)")
    report = tmp_path / "r.json"
    res = _cli("--model", str(tiny[arch]), "--backend", meta, "--tokens", "4", "--json", str(report))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "== cpu" in res.stdout and f"== {meta}" in res.stdout
    recs = json.loads(report.read_text())
    split = [r for r in recs if r["backend"] == meta]
    [logits] = [r for r in split if r["case"].endswith("/logits")]
    assert logits["status"] == "pass" and logits["message"].startswith("against cpu: KLD mean")
    kinds = [r for r in split if not r["case"].endswith("/logits")]
    assert len(kinds) >= 10 and {r["status"] for r in kinds} == {"pass"}, [r for r in kinds if r["status"] != "pass"]
    assert not any("unread" in r["message"] for r in kinds)
    assert "MUL_MAT" in {r["case"].rsplit("/", 1)[1] for r in kinds}
    if arch == "qwen35":
        assert "GATED_DELTA_NET" in {r["case"].rsplit("/", 1)[1] for r in kinds}
    res = _cli("--model", str(tiny["mamba2"]), "--backend", "cpu", "--backend", meta, "--tokens", "4")
    assert res.returncode == 1 and "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture 'mamba2'" in res.stdout


def test_a_backend_llama_cpp_refuses_is_an_error_and_the_others_still_report(tiny: dict[str, Path]) -> None:
    """Each backend runs in a child process. llama.cpp's tensor split of rwkv7 used to fail a GGML_ASSERT in
    its split policy (llama-model.cpp, suffix_fallback) and end that process; with llama.cpp patch 0003 RWKV
    refuses the tensor split with llama.cpp's own error. Either way that backend is an error record and the
    CPU still reports (a child that dies is tests/test_child.py's and tests/test_workers.py's)."""
    res = _cli("--model", str(tiny["rwkv7"]), "--backend", "meta:cpu,cpu", "--backend", "cpu", "--tokens", "4")
    assert res.returncode == 1, res.stderr[-2000:]
    [line] = [x for x in res.stdout.splitlines() if x.startswith("== meta:cpu,cpu")]
    assert "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture 'rwkv7'" in line
    assert "== cpu" in res.stdout and "RWKV_WKV7" in res.stdout


def test_the_matrix_in_one_command_architectures_by_types(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """`check --arch A --arch B --type T...` makes each model (llama.cpp's generator and quantizer), checks each
    on each backend in its own child, and prints one row per model and backend; a type llama.cpp refuses is
    a row saying why, and the exit status 1; `--model` repeats too."""
    report = tmp_path / "m.json"
    res = _cli(
        "--arch",
        "gpt2",
        "--arch",
        "mamba2",
        "--type",
        "q4_k_m",
        "--type",
        "nvfp4",
        "--no-repack",
        "--tokens",
        "4",
        "--json",
        str(report),
    )
    assert res.returncode == 1, res.stdout + res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[1:] if line and not line.startswith(" ")}
    assert set(rows) == {"gpt2-q4_k_m", "gpt2-nvfp4", "mamba2-q4_k_m", "mamba2-nvfp4"}, res.stdout
    assert "invalid output file type" in rows["gpt2-nvfp4"] and "not made" in rows["gpt2-nvfp4"]
    cells = rows["mamba2-q4_k_m"].split()
    assert cells[1] == "cpu" and int(cells[2]) > 20 and cells[3:6] == ["0", "0", "0"], rows
    recs = json.loads(report.read_text())
    assert {r["case"].split("/")[0] for r in recs} == {f"{m}.gguf" for m in rows}
    assert all(r["status"] == "pass" for r in recs if "q4_k_m" in r["case"])
    assert all(r["status"] == "error" for r in recs if "nvfp4" in r["case"])
    res = _cli("--model", str(tiny["llama"]), "--model", str(tiny["mamba2"]), "--tokens", "4")
    assert res.returncode == 0, res.stdout + res.stderr
    assert [line.split()[0] for line in res.stdout.splitlines()[1:3]] == ["llama.gguf", "mamba2.gguf"]


def test_a_run_that_dies_with_the_cpus_extra_buffers_is_checked_without_them_and_reported(
    tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A kernel of an extra buffer type that kills the process (AMX's did, docs/findings.md 37): the
    nodes are checked without the extra buffer types, and the death is the run's error record, not the
    end of the check. The death is made here by the child runner's stand-in for the run with them on."""
    from pyggml.__main__ import main

    real = model_check.run_in_child

    def dies_with_extra_bufts(path, backend, *rest, **conversation):
        if rest[-1]:  # extra_bufts
            return model_check.ModelRun(backend, error=f"{model_check.DIED} (SIGSEGV)")
        return real(path, backend, *rest, **conversation)

    monkeypatch.setattr(model_check, "run_in_child", dies_with_extra_bufts)
    assert main(["check", "--model", str(tiny["llama"]), "--tokens", "4"]) == 1
    out = capsys.readouterr().out
    assert "ERROR with the CPU's extra buffer types: the process running it died (SIGSEGV)" in out
    assert "MUL_MAT" in out and " 0 " in out.split("MUL_MAT")[1].splitlines()[0]
    assert main(["check", "--model", str(tiny["llama"]), "--tokens", "4", "--no-repack"]) == 0


def test_a_quantized_qwen4exp_decodes(tmp_path: Path) -> None:
    """llama.cpp's quantizer quantized qwen4exp's 2-D norm weights (ple_norm_*), and every decode of the file
    aborted in the CPU's binary_op (vendor/llama/patches/0004)."""
    path = tmp_path / "q4e.gguf"
    made = subprocess.run(
        [sys.executable, "-m", "pyggml", "make-model", "qwen4exp", str(path), "--type", "q8_0"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr
    assert all(
        info.type.name == "F32" for name, info in pyggml.gguf.read_info(path).tensor_info.items() if "ple_norm_" in name
    )
    res = _cli("--model", str(path), "--no-repack", "--tokens", "4")
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr


def test_the_logits_of_a_quantized_model_are_compared_within_the_activations_rounding(
    tmp_path: Path, tiny: dict[str, Path]
) -> None:
    """Each backend rounds the activations of a quantized product its own way: vulkan0 against the CPU at
    Q4_K_M differed by NMSE 1.7e-4, over llama.cpp's F32 bound of 1e-4, with every node passing on each."""
    assert model_check.logits_bound(str(tiny["llama"])) == model_check.LOGITS_NMSE == 1e-4
    q = tmp_path / "q8.gguf"
    llama.quantize(tiny["llama"], q, "q8_0")
    assert model_check.logits_bound(str(q)) == model_check.LOGITS_NMSE_QUANTIZED == opdb.NMSE_Q8_DOT


def test_every_product_judged_by_its_weights_projection_passes(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--oracle projected`: the products of a quantized model judged by their weights' projections, kept in the
    cache folder and read back by the next run; each product's elements otherwise within their rounding units."""
    from pyggml.testing.engine.projected import ProjectionCache

    monkeypatch.setenv("PYGGML_CACHE_DIR", str(tmp_path))
    path = tmp_path / "qwen35-q4_k_m.gguf"
    llama.quantize(tiny["qwen35"], path, "q4_k_m")
    kept = []
    for _ in range(2):
        run = model_check.run_model(str(path), "cpu", n_tokens=6, oracle="projected")
        assert not run.error and not run.failed, [(v.kind, v.name, v.comparison) for v in run.failed]
        projected = [v for v in run.verdicts if v.oracle == "projected"]
        assert len(projected) >= 8 and all(v.comparison and 0 < v.comparison.units < 1 for v in projected)
        kept.append(sorted(p.name for p in ProjectionCache().entries()))
    assert kept[0] and kept[0] == kept[1]  # one per weight, the second run's read back
    full = model_check.run_model(str(path), "cpu", n_tokens=6)
    products = [v for v in full.verdicts if v.kind == "MUL_MAT"]
    assert products and all(v.oracle == "full" and v.comparison and 0 < v.comparison.units < 4 for v in products)


def test_the_projected_oracle_and_its_cache_from_the_command_line(tiny: dict[str, Path], tmp_path: Path) -> None:
    """`check --model --oracle projected` says how many products its projections judged; `cache` lists what it
    kept, `cache --clear` removes it; a cache folder that cannot be written is said, and the check still passes."""
    env = {**os.environ, "PYGGML_CACHE_DIR": str(tmp_path / "cache")}
    model = tmp_path / "llama-q8_0.gguf"
    llama.quantize(tiny["llama"], model, "q8_0")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pyggml", *args], capture_output=True, text=True, env=env)

    res = run("check", "--model", str(model), "--tokens", "4", "--oracle", "projected")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "products judged by their weight's projection: " in res.stdout
    listed = run("cache")
    assert listed.returncode == 0 and " 0 projections" not in listed.stdout and "projections" in listed.stdout
    cleared = run("cache", "--clear")
    assert cleared.returncode == 0 and "removed" in cleared.stdout and " 0 projections" in run("cache").stdout
    (tmp_path / "blocked").write_text("a file where the cache folder should be")
    env["PYGGML_CACHE_DIR"] = str(tmp_path / "blocked")
    res = run("check", "--model", str(model), "--tokens", "4", "--oracle", "projected")
    assert res.returncode == 0 and "cannot be written" in res.stdout, res.stdout[-2000:]


def test_the_logits_bound_follows_the_references_own_spread(tmp_path: Path, tiny: dict[str, Path]) -> None:
    """The reference's conversation decoded again with each product's rounding realized anew (engine.spread):
    its logits move (the spread), a run whose logits drift within SPREAD_FACTOR times that passes where the fixed
    bound of its weights failed it, and one beyond it fails; the report says the figure and where it came from."""
    from pyggml.testing.engine import spread

    q = tmp_path / "q8.gguf"
    llama.quantize(tiny["llama"], q, "q8_0")
    ref = model_check.run_model(str(q), "cpu", n_tokens=6, spread=True)
    assert not ref.error and ref.spread_nmse is not None, ref.error
    assert 0 < ref.spread_nmse < 1  # the rounding realized again moves the logits, and by a rounding's size
    floor = model_check.LOGITS_NMSE_QUANTIZED
    assert model_check.logits_limit(str(q), ref) == max(floor, spread.SPREAD_FACTOR * ref.spread_nmse)

    def other(drift: float) -> model_check.ModelRun:
        assert ref.logits is not None
        noise = np.random.default_rng(1).standard_normal(ref.logits.shape)
        noise *= np.sqrt(drift * np.sum(ref.logits.astype(np.float64) ** 2) / np.sum(noise**2))
        return model_check.ModelRun("cpu:x64", logits=ref.logits + noise.astype(np.float32))

    ref.spread_nmse = 1e-3  # a trained model's sensitivity: 2e-3 allowed
    within, beyond = other(1.5e-3), other(4e-3)
    recs = {r.backend: r for r in model_check.records(str(q), [ref, within]) if r.case.endswith("/logits")}
    assert not recs["cpu:x64"].status.bad, recs["cpu:x64"].message
    assert "own spread 1.0e-03" in recs["cpu:x64"].message and "bound 2.0e-03" in recs["cpu:x64"].message
    recs = {r.backend: r for r in model_check.records(str(q), [ref, beyond]) if r.case.endswith("/logits")}
    assert recs["cpu:x64"].status.bad
    ref.spread_nmse = None  # no spread measured: the fixed bound alone
    recs = {r.backend: r for r in model_check.records(str(q), [ref, within]) if r.case.endswith("/logits")}
    assert recs["cpu:x64"].status.bad and "own spread" not in recs["cpu:x64"].message


def test_a_products_rounding_is_measured_on_its_dot_type() -> None:
    """The noise the spread adds to a product: the NMSE of its activations rounded to the weight's dot type
    (Q8_K for Q4_K, F16 for F16), F32's unit roundoff squared for an F32 weight."""
    from pyggml.testing.engine import spread

    x = np.random.default_rng(0).standard_normal((40, 512)).astype(np.float32)
    q8 = spread.rounding_nmse("Q4_K", x)
    f16 = spread.rounding_nmse("F16", x)
    assert 1e-6 < q8 < 1e-4 and 1e-9 < f16 < 1e-7, (q8, f16)
    assert spread.rounding_nmse("F32", x) == spread.UNIT2


def test_the_projections_seed_is_given_once_and_keeps_its_own_projections(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    """`--projection-seed N`: the projections drawn from N, kept apart from the default seed's; given twice (on the
    command line, or against $PYGGML_PROJECTION_SEED), or without --oracle projected, a usage error (exit 2)."""
    env = {**os.environ, "PYGGML_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYGGML_PROJECTION_SEED", None)
    model = tmp_path / "llama-q8_0.gguf"
    llama.quantize(tiny["llama"], model, "q8_0")

    def run(*args: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pyggml", "check", *args], capture_output=True, text=True, env={**env, **more}
        )

    res = run("--model", str(model), "--tokens", "4", "--oracle", "projected", "--projection-seed", "7")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    kept = [p.name for p in (tmp_path / "cache" / "projections").glob("*.npy")]
    assert kept and all("-s7-" in name for name in kept), kept
    twice = run("--model", str(model), "--oracle", "projected", "--projection-seed", "7", "--projection-seed", "8")
    assert twice.returncode == 2 and "given twice" in twice.stderr and "Traceback" not in twice.stderr
    clash = run("--model", str(model), "--oracle", "projected", "--projection-seed", "7", PYGGML_PROJECTION_SEED="9")
    assert clash.returncode == 2 and "given twice" in clash.stderr
    unreadable = run("--model", str(model), "--oracle", "projected", PYGGML_PROJECTION_SEED="abc")
    assert unreadable.returncode == 2 and "PYGGML_PROJECTION_SEED='abc'" in unreadable.stderr, unreadable.stderr[-500:]
    alone = run("--model", str(model), "--projection-seed", "7")
    assert alone.returncode == 2 and "add --oracle projected" in alone.stderr
    for flags in (["--oracle", "projected"], ["--generate", "2"], ["--no-repack"]):
        res = run(*flags)  # no model: the op cases would run and ignore them
        assert res.returncode == 2 and "for --model or --arch runs only" in res.stderr, (flags, res.stderr[-500:])
