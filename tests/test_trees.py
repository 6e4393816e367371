"""pyggml on other ggml and llama.cpp trees (docs/compat.md): patches as a choice (PYGGML_PATCHES), the tree
recorded in the build, the binding checked against the pin's C API (a function or member a tree lacks, or a C
type that differs, refuses with the reason), and docs/findings.md's upstream bugs as data (`known` on a build
without the fix, `python -m pyggml findings`). The other trees themselves are built by scripts/compat_matrix.py
(CI builds one)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pyggml as gg
from pyggml import _enums, _native
from pyggml.errors import Unsupported
from pyggml.testing.engine import findings
from pyggml.testing.engine.verdict import Record, Status

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
fetch_ggml: Any = importlib.import_module("fetch_ggml")  # tools/ is not a package: read as a script folder

PIN = (_native.build_info().get("tree") or {}).get("tree") == "pin"
pin_only = pytest.mark.skipif(not PIN, reason="a build of the pin (this one is of another tree)")


@pytest.mark.parametrize(
    "text, user_tree, strict, names",
    [
        (None, False, True, None),  # the pin: the whole series, strictly
        (None, True, False, []),  # a user's tree: none
        ("all", True, False, None),
        ("strict", True, True, None),  # strict alone: all, strictly
        ("none", False, False, []),
        (
            "0006,llama/0004",
            True,
            False,
            ["0004-qwen4exp-ple-norms-unquantized.patch", "0006-cpu-set-rows-threads.patch"],
        ),
        ("0012-cpu-set-rows-f16-work-size.patch,strict", True, True, ["0012-cpu-set-rows-f16-work-size.patch"]),
    ],
)
def test_pyggml_patches_chooses_the_series(text, user_tree, strict, names):
    choice = fetch_ggml.PatchChoice(text, user_tree)
    assert choice.strict is strict
    assert (None if choice.names is None else sorted(choice.names)) == names


def test_an_unknown_patch_name_is_refused_with_the_choices():
    with pytest.raises(fetch_ggml.FetchError, match="no patch named '0999'.*0006-cpu-set-rows-threads.patch"):
        fetch_ggml.PatchChoice("0999", user_tree=True)


def _tree_and_patches(tmp_path: Path) -> tuple[Path, Path]:
    tree, patches = tmp_path / "tree", tmp_path / "patches"
    tree.mkdir()
    patches.mkdir()
    (tree / "a.c").write_text("int a = 1;\n")
    (patches / "0001-fits.patch").write_text("--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-int a = 1;\n+int a = 2;\n")
    (patches / "0002-does-not-fit.patch").write_text("--- a/b.c\n+++ b/b.c\n@@ -1 +1 @@\n-int b = 1;\n+int b = 2;\n")
    return tree, patches


def test_a_patch_that_does_not_apply_is_skipped_with_its_reason(tmp_path):
    tree, patches = _tree_and_patches(tmp_path)
    record = fetch_ggml.apply_patches(tree, frozenset(), patches, "ggml", fetch_ggml.PatchChoice("all", True))
    assert [(r["name"], r["state"]) for r in record] == [
        ("0001-fits.patch", "applied"),
        ("0002-does-not-fit.patch", "does not apply"),
    ]
    assert record[1]["reason"] and (tree / "a.c").read_text() == "int a = 2;\n"


def test_strict_stops_at_a_patch_that_does_not_apply(tmp_path):
    tree, patches = _tree_and_patches(tmp_path)
    with pytest.raises(fetch_ggml.FetchError, match="0002-does-not-fit.patch does not apply"):
        fetch_ggml.apply_patches(tree, frozenset(), patches, "ggml", fetch_ggml.PatchChoice("strict", True))


@pin_only
def test_the_build_records_its_tree_and_every_patch():
    tree = _native.build_info()["tree"]
    assert tree["tree"] == "pin" and tree["strict"] and tree["ggml_version"]
    names = {p.name for p in (ROOT / "vendor" / "ggml" / "patches").glob("*.patch")}
    names |= {p.name for p in (ROOT / "vendor" / "llama" / "patches").glob("*.patch")}
    recorded = {p["name"]: p["state"] for p in tree["patches"]}
    assert set(recorded) == names
    assert all(state in ("applied", "already in the source", "not chosen") for state in recorded.values())


def test_info_says_which_tree_and_which_patches():
    out = subprocess.run([sys.executable, "-m", "pyggml", "info", "--json"], capture_output=True, text=True, check=True)
    g = json.loads(out.stdout)["ggml"]
    assert g["tree"] is not None and g["patches"] is not None and "adapted" in g
    if PIN:
        assert g["adapted"] == {"missing": [], "changed": [], "absent": []}


@pin_only
@pytest.mark.skipif(
    not {"llama.h", "ggml-rpc.h"} <= set(_native.build_info()["headers"]),
    reason="the record is of the default build (libllama and RPC in)",
)
def test_the_pinned_api_record_is_current():
    """pyggml/_pinned_api.json is what tools/gen_pinned_api.py reads off this build of the pin (a device backend's
    own functions left out: the same record from a Vulkan or CUDA build)."""
    assert importlib.import_module("gen_pinned_api").record() == _native.pinned_api()


def _api_with(monkeypatch, functions: dict) -> _native.CApi:
    pinned = dict(_native.pinned_api())
    pinned["functions"] = {**pinned["functions"], **functions}
    monkeypatch.setattr(_native, "pinned_api", lambda: pinned)
    return _native.CApi()


def test_a_function_the_tree_lacks_refuses_with_the_reason(monkeypatch):
    api = _api_with(monkeypatch, {"ggml_from_a_later_ggml": "void(*)(void)"})
    with pytest.raises(Unsupported, match=r"^ggml_from_a_later_ggml is not in ggml \d+\.\d+\.\d+$"):
        api.ggml_from_a_later_ggml()
    assert "is not in ggml" in api.ggml_from_a_later_ggml.pyggml_unavailable
    with pytest.raises(AttributeError, match="no ggml_nobody_has"):  # a name the pin never had: a plain error
        api.ggml_nobody_has  # noqa: B018


def test_a_function_whose_c_type_differs_refuses_with_both_types(monkeypatch):
    api = _api_with(monkeypatch, {"ggml_add": "struct ggml_tensor *(*)(struct ggml_context *, struct ggml_tensor *)"})
    with pytest.raises(Unsupported, match=r"ggml_add is struct ggml_tensor \*\(\*\)\(.*\) in ggml .*written for"):
        api.ggml_add()
    assert api.ggml_sub is getattr(_native.real_lib, "ggml_sub")  # the rest is ggml's own function


def test_an_enum_member_the_tree_lacks_is_absent(monkeypatch):
    pinned = dict(_native.pinned_api())
    pinned["enums"] = {**pinned["enums"], "enum ggml_op": [*pinned["enums"]["enum ggml_op"], "GGML_OP_FROM_LATER"]}
    monkeypatch.setattr(_enums, "pinned_api", lambda: pinned)
    op = _enums._enum("Op", "enum ggml_op", "GGML_OP_")
    later = op.FROM_LATER
    assert isinstance(later, _enums.Absent) and "not in ggml" in later.absent and str(later) == "FROM_LATER"
    assert later not in set(op) and all(int(m) != later for m in op)
    with pytest.raises(AttributeError):
        op.NEVER_AN_OP  # noqa: B018


def test_a_type_the_tree_lacks_is_refused_before_any_c_call(monkeypatch):
    absent = _enums.Absent(-1, "Q9_9", "enum ggml_type GGML_TYPE_Q9_9 not in ggml 0.15.3")
    monkeypatch.setitem(gg.types.Type._absent_, "Q9_9", absent)
    assert gg.types.as_type("q9_9") is absent
    with pytest.raises(Unsupported, match="Q9_9: enum ggml_type GGML_TYPE_Q9_9 not in ggml 0.15.3"):
        gg.Context().tensor("q9_9", (32,))


def test_a_later_feature_without_a_new_c_type_is_refused_on_an_older_ggml(monkeypatch):
    ctx = gg.Context()
    x, res, post = ctx.tensor("f32", (3, 8)), ctx.tensor("f32", (3, 4, 8)), ctx.tensor("f32", (3, 4))
    ctx.dsv4_hc_post(x, res, post)  # the pin has the identity comb
    monkeypatch.setattr(_native, "tree_version", lambda: "0.20.0")
    with pytest.raises(Unsupported, match=r"comb=None \(the identity\) is not in ggml 0.20.0 \(it came after 0.21.0\)"):
        ctx.dsv4_hc_post(x, res, post)


def _lacking(monkeypatch, patch: str) -> None:
    tree = dict(_native.build_info().get("tree") or {})
    tree["patches"] = [{"name": patch, "state": "not chosen"}]
    tree["ggml_version"] = "0.25.3"
    monkeypatch.setattr(findings, "build_info", lambda: {**_native.build_info(), "tree": tree})
    findings._patch_states.cache_clear()


def test_a_failure_a_finding_covers_is_known_on_a_build_without_its_fix(monkeypatch):
    failing = Record("rwkv_wkv6/f32/S8_H2_T5_s1", "vulkan0", Status.FAIL, 0.9, 1e-6, "NMSE 9e-01 > 1e-06")
    other = Record("add/f32", "vulkan0", Status.FAIL, 0.9, 1e-6, "NMSE 9e-01 > 1e-06")
    on_cpu = Record("rwkv_wkv6/f32/S8_H2_T5_s1", "cpu", Status.FAIL, 0.9, 1e-6, "NMSE 9e-01 > 1e-06")
    if PIN:  # the pin has patch 0014: the failure stays a failure
        assert findings.explain([failing])[0].status == Status.FAIL
    _lacking(monkeypatch, "0014-vulkan-wkv-head-size-64.patch")
    try:
        known, still, cpu = findings.explain([failing, other, on_cpu])
    finally:
        findings._patch_states.cache_clear()
    assert known.status == Status.KNOWN and "docs/findings.md 5:" in known.message and "0014" in known.message
    assert "NMSE 9e-01" in known.message
    assert still.status == Status.FAIL and cpu.status == Status.FAIL  # another case; another backend kind


def test_an_upstream_fix_by_version_counts():
    f = findings.Finding(99, "ggml-cpu", "a bug", fixed_in="0.20.0", cases="^x/")
    tree = (_native.build_info().get("tree") or {}).get("ggml_version", "")
    assert (findings.fixed_here(f) is not None) == (bool(tree) and _native.version_key(tree) >= (0, 20, 0))


def test_every_finding_names_a_patch_or_an_upstream_version_and_matches_cases():
    from pyggml.testing.engine import cases

    numbers = [f.number for f in findings.FINDINGS]
    assert len(numbers) == len(set(numbers))
    doc = (ROOT / "docs" / "findings.md").read_text()
    for f in findings.FINDINGS:
        assert f.patch or f.fixed_in, f.number
        assert f"| {f.number} |" in doc, f"docs/findings.md has no row {f.number}"
        if f.patch:
            folder = "llama" if f.patch.startswith("llama/") else "ggml"
            assert (ROOT / "vendor" / folder / "patches" / f.patch.removeprefix("llama/")).exists(), f.patch
        if f.cases:
            assert cases.select(f.cases), f"finding {f.number}: no case matches {f.cases!r}"


def test_findings_export_writes_test_backend_ops_files(tmp_path):
    written = findings.export(str(tmp_path))
    assert written
    for path in map(Path, written):
        if path.suffix == ".txt":
            for line in path.read_text().splitlines():
                fields = line.split()
                assert fields[-1] == "-" and int(fields[6]) == 16  # op, type, ne x4, 16 op_params
        else:
            assert "--test-file" in path.read_text() and path.stat().st_mode & 0o100


def test_the_findings_command_says_what_fixes_each_finding():
    out = subprocess.run(
        [sys.executable, "-m", "pyggml", "findings", "--json", "--backend", "cpu"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {r["finding"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {f.number for f in findings.FINDINGS}
    for f in findings.FINDINGS:
        r = rows[f.number]
        assert r["state"] in ("present", "absent", "not run"), r
        if PIN and f.patch:
            assert r["fixed_here"] and r["state"] != "present", r
    assert np.all([r["detail"] for r in rows.values()])


def test_make_model_writes_a_tokenizer_the_trees_llama_cpp_reads(monkeypatch):
    from pyggml.models import make_model

    tree = _native.build_info().get("tree") or {}
    older = {**_native.build_info(), "tree": {**tree, "llama_tokenizers": ["bert", "gpt2", "llama", "rwkv"]}}
    monkeypatch.setattr(make_model, "build_info", lambda: older)
    assert make_model.vocabulary(4)["tokenizer.ggml.model"] == "rwkv"
    newer = {**_native.build_info(), "tree": {**tree, "llama_tokenizers": ["rwkv", "test"]}}
    monkeypatch.setattr(make_model, "build_info", lambda: newer)
    assert make_model.vocabulary(4)["tokenizer.ggml.model"] == "test"


def test_the_tree_record_lists_the_tokenizers_of_its_llama_cpp(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "llama-vocab.cpp").write_text(
        'if (tokenizer_model == "llama") {} else if (tokenizer_model == "rwkv") {} else if (tokenizer_model == "llama")'
    )
    assert fetch_ggml.llama_tokenizers(tmp_path) == ["llama", "rwkv"]
    assert fetch_ggml.llama_tokenizers(tmp_path / "nowhere") == []


def test_gguf_reads_tensor_extents_without_gguf_get_tensor_ne(monkeypatch, tmp_path):
    """ggml 0.15 has no gguf_get_tensor_ne: the extents come from the metadata context gguf_init makes."""
    from pyggml import gguf

    path = tmp_path / "t.gguf"
    gguf.save(str(path), {"general.architecture": "x"}, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    want = gguf.read_info(str(path)).tensor_info["w"].ne
    monkeypatch.setattr(gguf, "has", lambda name: name != "gguf_get_tensor_ne")
    assert gguf.read_info(str(path)).tensor_info["w"].ne == want == (3, 2, 1, 1)


def test_a_known_record_names_every_finding_that_could_explain_it():
    r = Record(
        "delta_net/f32/K1/n1/kv2",
        "meta:cpu,cpu",
        Status.KNOWN,
        message="known: upstream bug, docs/findings.md 26 or 51: a view (this build lacks ...) (NMSE 1)",
    )
    assert findings.named(r) == [26, 51]
    assert findings.named(Record("x", "cpu", Status.KNOWN, message="known: a stated Vulkan bound")) == []
    assert findings.named(Record("x", "cpu", Status.FAIL, message="known: upstream bug, docs/findings.md 5: y")) == []


def test_has_is_false_for_a_function_the_tree_lacks(monkeypatch):
    """Feature tests (the RPC server's client trust, patch 0023) ask `has`: a stand-in that refuses is not the
    function (hasattr would say yes, and the call would raise)."""
    api = _api_with(monkeypatch, {"ggml_backend_rpc_from_a_later_ggml": "void(*)(void)"})
    monkeypatch.setattr(_native, "lib", api)
    assert hasattr(api, "ggml_backend_rpc_from_a_later_ggml")
    assert not _native.has("ggml_backend_rpc_from_a_later_ggml") and not _native.has("ggml_nobody_has")
    assert _native.has("ggml_add")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--backend", "nodevice3"], "findings: --backend nodevice3: no backend 'nodevice3'"),
        (["--export", "/proc/no/such/folder"], "findings: --export /proc/no/such/folder:"),
        (["-j", "0"], "findings: -j must be at least 1"),
    ],
)
def test_the_findings_command_refuses_bad_arguments_with_the_reason(args, says):
    out = subprocess.run([sys.executable, "-m", "pyggml", "findings", *args], capture_output=True, text=True)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
