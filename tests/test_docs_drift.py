"""What the docs quote from the code is checked against it, so that a change that moves one fails here instead
of leaving a stale line: the spec docs/suite.md calls real and the one docs/reference.md shows, the patches
docs/patches.md lists, the packages a bare machine needs (README.md and the build's own message), the version
the changelog starts from; the counts of cases, op kinds, RPC attacks and llama.cpp's generated models, the
Pythons CI runs, the device budget, make-model's architectures and presets, the patches after llama_tests.md's
results; docs/layout.md's paths, modules, commands and scripts, examples/README.md's notebooks, and every
`python -m pyggml` command and option the docs show."""

from __future__ import annotations

import argparse
import ast
import functools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def test_the_spec_suite_md_calls_real_is_the_codes():
    doc = (ROOT / "docs" / "suite.md").read_text()
    blocks = list(re.finditer(r"real one, `(\S+)`'s `(\w+)`[^:]*:\s*```python\n(.*?)```", doc, re.S))
    assert len(blocks) >= 2, "docs/suite.md: the real spec examples are gone"
    for block in blocks:
        code = (ROOT / block.group(1)).read_text()
        assert _squeezed(block.group(3)) in _squeezed(code), (
            f"docs/suite.md's {block.group(2)} spec is not {block.group(1)}'s"
        )


def test_docs_patches_lists_every_patch_of_both_series_and_no_other():
    doc = (ROOT / "docs" / "patches.md").read_text()
    for series, heading in (("ggml", "patch"), ("llama", "llama.cpp patch")):
        files = sorted(p.stem for p in (ROOT / "vendor" / series / "patches").glob("*.patch"))
        assert files, series
        listed = re.findall(r"^\| (\d{4} [\w.-]+) \|", doc, re.M)
        for f in files:
            number, name = f.split("-", 1)
            assert f"{number} {name}" in listed, f"docs/patches.md does not list vendor/{series}/patches/{f}.patch"
    total = sum(len(list((ROOT / "vendor" / s / "patches").glob("*.patch"))) for s in ("ggml", "llama"))
    assert len(re.findall(r"^\| \d{4} [\w.-]+ \|", doc, re.M)) == total, "docs/patches.md lists a patch that is gone"


def test_the_bare_machine_packages_are_the_builds_own():
    readme = (ROOT / "README.md").read_text()
    cmake = (ROOT / "CMakeLists.txt").read_text()
    hint = re.search(r'set\(pyggml_install_hint "[^"]*?(apt-get install [^"]+)"\)', cmake)
    assert hint, "CMakeLists.txt: pyggml_install_hint is gone"
    assert f"sudo {hint.group(1)}" in readme, "README.md and the build name different packages for a bare machine"
    assert readme.index(hint.group(1)) < readme.index("pip install -e . && python -m pyggml check")


def test_the_changelog_starts_from_the_packages_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {version}" in changelog and (ROOT / "LICENSE").read_text().startswith("MIT License")


# --- counts and lists the docs quote, each computed from the code -----------------------------------------------
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "examples" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def _doc(name: str) -> str:
    return (ROOT / name).read_text()


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from pyggml.__main__ import _parser

    parser, _ = _parser(["info"])
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@functools.cache
def _subparser(command: str) -> argparse.ArgumentParser:
    from pyggml.__main__ import _parser

    parser, _ = _parser([command])
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def test_the_readme_quotes_no_test_count():
    # a count of tests moves with every test; README says how long they take instead
    quoted = re.findall(r"\b\d[\d,]* (?:passed|skipped|tests)\b", _doc("README.md"))
    assert not quoted, f"README.md quotes a test count: {quoted}"


def test_the_case_count_the_docs_quote_is_check_lists():
    from pyggml.testing.engine import cases

    n = len(cases.select())
    quoted = [
        ("docs/reference.md", r"`check` runs every registered case \(([\d,]+), covering"),
        ("docs/suite.md", r"\(it has ([\d,]+)\s+now, `check --list`"),
    ]
    for name, pattern in quoted:
        m = re.search(pattern, _doc(name))
        assert m, f"{name}: the case count is gone (or reworded: change this test)"
        assert _count(m.group(1)) == n, f"{name} says {m.group(1)} cases; `check --list` has {n}"


def test_the_op_kinds_the_docs_quote_are_coverages():
    from pyggml.testing.coverage import op_kinds, wrappers_of
    from pyggml.testing.engine.cases import REGISTRY, OpCase, _load_all

    _load_all()
    computed: set[str] = set()
    for c in REGISTRY.values():
        if isinstance(c, OpCase):
            c.build()
            computed |= c.graph_ops
    kinds = op_kinds()
    wrappers = wrappers_of(kinds)
    covered = [k for k in kinds if wrappers[k] and k in computed]
    m = re.search(r"covering (\d+) of ggml's (\d+) op kinds", _doc("docs/reference.md"))
    assert m, "docs/reference.md: the op kinds' count is gone"
    assert (int(m.group(1)), int(m.group(2))) == (len(covered), len(kinds)), (
        f"docs/reference.md says {m.group(1)} of {m.group(2)} op kinds; the cases cover {len(covered)} of {len(kinds)}"
    )
    missing = sorted(set(kinds) - set(covered))
    m = re.search(r"not covered: ([A-Z_, ]+) \(", _doc("docs/suite.md"))
    assert m and m.group(1).split(", ") == missing, f"docs/suite.md's kinds not covered are not {missing}"


def test_small_graph_work_is_where_and_what_reference_md_says():
    import importlib

    m = re.search(r"under `(\w+)` of the module `([\w.]+)`, 2\^(\d+) multiply-adds", _doc("docs/reference.md"))
    assert m, "docs/reference.md: the small graph's bound is gone"
    module = importlib.import_module(m.group(2))
    assert getattr(module, m.group(1)) == 2 ** int(m.group(3)), f"{m.group(2)}.{m.group(1)} is not 2^{m.group(3)}"


def test_the_spec_reference_md_shows_reads_nodes_as_the_code_does():
    doc = _doc("docs/reference.md")
    block = re.search(r'```python\nspec\("(\w+)",(.*?)```', doc, re.S)
    assert block, "docs/reference.md: the example spec is gone"
    op, body = block.group(1), block.group(2)
    files = [p for p in (ROOT / "pyggml/testing/engine/opdb").glob("*.py") if f'spec(\n    "{op}",' in p.read_text()]
    assert len(files) == 1, f"no one spec of {op} in pyggml/testing/engine/opdb"
    code = _squeezed(files[0].read_text())
    for key in ("reads", "from_node"):
        arg = re.search(rf"{key}=(.*?\)),\s", body)
        assert arg, f"docs/reference.md's {op} spec has no {key}="
        assert _squeezed(f"{key}={arg.group(1)},") in code, f"docs/reference.md's {op} {key}= is not the code's"


def test_ci_runs_the_pythons_the_docs_say():
    m = re.search(r"scripts/python_versions\.sh ([\d. ]+)\n", _doc(".ci/run"))
    assert m, ".ci/run: python_versions.sh's line is gone"
    ci = m.group(1).split()
    m = re.search(r"versions=\(([\d. ]+)\)", _doc("scripts/python_versions.sh"))
    assert m, "scripts/python_versions.sh: the default versions are gone"
    every = m.group(1).split()
    requires = tomllib.loads(_doc("pyproject.toml"))["project"]["requires-python"]
    assert requires == f">={every[0]}", f"pyproject's requires-python {requires} and the script's {every} disagree"
    main = [every[0]]  # README's command runs on the oldest; python_versions.sh on the newest; the others by hand
    assert ci == [every[-1]], f".ci/run's python_versions.sh {ci} should run the newest Python, {every[-1]}"
    reference = _squeezed(_doc("docs/reference.md"))
    maintenance = _squeezed(_doc("docs/maintenance.md"))
    said = {
        "README.md": (_squeezed(_doc("README.md")), f"with Python {', '.join(every[:-1])} or {every[-1]} and a C/C++"),
        "docs/reference.md": (
            reference,
            f"Python {', '.join(every[:-1])} and {every[-1]}: CI runs the whole suite on "
            f"{main[0]} with Vulkan and, on {' and '.join(ci)}, a CPU build",
        ),
        "docs/reference.md's command": (reference, f"`bash scripts/python_versions.sh {' '.join(ci)}`"),
        "docs/maintenance.md": (maintenance, f"`python3` ({main[0]})"),
        "docs/maintenance.md's command": (maintenance, f"then `scripts/python_versions.sh {' '.join(ci)}`"),
    }
    for name, (text, words) in said.items():
        assert words in text, f"{name} does not say {words!r} (.ci/run: {main[0]}, then {ci})"


def test_the_python_versions_tests_building_md_lists_are_the_scripts():
    script = _doc("scripts/python_versions.sh")
    tests = set()
    for name in ("TESTS", "NEWEST"):
        m = re.search(rf"^{name}=\((.*?)\)", script, re.S | re.M)
        assert m, f"scripts/python_versions.sh: {name} is gone"
        tests |= {Path(t).name for t in m.group(1).split()}
    tests |= {Path(t).name for t in re.findall(r"ONCE=\((tests/\S+)\)", script)}  # the first version's
    section = _doc("docs/building.md").split("## Python versions")[1].split("\n## ")[0]
    listed = set(re.findall(r"`(?:tests/)?(test_\w+\.py)`", section))
    assert listed == tests, (
        f"docs/building.md's Python-version tests differ from the script's: only the doc {sorted(listed - tests)}, "
        f"only the script {sorted(tests - listed)}"
    )


def test_the_device_budget_the_docs_quote_is_cis():
    m = re.search(r"^export PYGGML_DEVICE_BUDGET=(\d+)$", _doc(".ci/run"), re.M)
    assert m, ".ci/run: the device budget is gone"
    budget = m.group(1)
    doc = _doc("docs/maintenance.md")
    quoted = re.findall(r"PYGGML_DEVICE_BUDGET=(\d+)` \(", doc) + re.findall(r"devices of a budget of (\d+) s", doc)
    assert quoted and set(quoted) == {budget}, f"docs/maintenance.md quotes budgets {quoted}; .ci/run sets {budget}"


# docs/layout.md's tree: names left at 4 + 2 per level, what each holds from the description column on
# named by layout.md and not paths of this tree: llama.cpp's name, and files of the pinned sdist
_NOT_HERE = {"llama.cpp", "ggml.h", "tests/test-llama-archs.cpp"}


def _layout_tree() -> list[tuple[Path, str]]:
    """(the entry a line is about, that line's description) for every line of docs/layout.md's tree."""
    block = _doc("docs/layout.md").split("\n\n")[1]
    stack: list[Path] = []
    rows: list[tuple[Path, str]] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent >= 20:  # a description going on
            rows.append((rows[-1][0], line.strip()))
            continue
        m = re.match(r"([\w./-]+(?:, [\w./-]+)*)\s*(.*)", line.strip())
        assert m, f"docs/layout.md: not a line of the tree: {line!r}"
        name, description = m.groups()
        depth = (indent - 4) // 2
        for entry in name.split(", "):
            here = (stack[depth - 1] if depth else ROOT) / entry
            rows.append((here, description))
        if name.endswith("/") and ", " not in name:
            stack[depth:] = [here]
    return rows


def test_every_path_layout_md_names_exists():
    missing = []
    for entry, description in _layout_tree():
        if not entry.exists():
            missing.append(str(entry.relative_to(ROOT)))
        bases = [entry, *entry.parents] if entry.is_dir() else list(entry.parents)
        for name in re.findall(
            r"[\w./-]+\.(?:py|c|cpp|h|json|toml|md|sh|yml)\b|[\w.-]+/(?:[\w.-]+/)*(?![\w-])", description
        ):
            if name not in _NOT_HERE and not any((b / name).exists() for b in bases if ROOT in [b, *b.parents]):
                missing.append(f"{name} (on {entry.relative_to(ROOT)}'s line)")
    assert not missing, f"docs/layout.md names what is not in the tree: {missing}"


def test_layout_md_names_every_module():
    named = {entry for entry, _ in _layout_tree()}
    modules = [
        p
        for d in ("pyggml", "pyggml/testing", "pyggml/testing/engine", "pyggml/testing/fuzzers")
        for p in (ROOT / d).iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())
    ]
    text = _doc("docs/layout.md").split("\n\n")[1]
    unnamed = [str(p.relative_to(ROOT)) for p in modules if p not in named and not re.search(rf"\b{p.name}\b", text)]
    assert not unnamed, f"docs/layout.md's tree leaves out {sorted(unnamed)}"


def test_layout_md_lists_every_command():
    text = " ".join(d for e, d in _layout_tree() if e.name == "__main__.py")
    listed = set(re.findall(r"[a-z][a-z-]+", text.split(":", 1)[1])) - {"and", "the", "fuzzers"}
    commands = set(_subcommands())
    assert listed == commands, (
        f"docs/layout.md's __main__.py: only listed {listed - commands}, only in --help {commands - listed}"
    )


def test_layout_md_lists_every_script():
    text = " ".join(d for e, d in _layout_tree() if e.name == "scripts")
    listed = set(re.findall(r"\b[\w]+\.(?:sh|py|c)\b", text))
    scripts = {p.name for p in (ROOT / "scripts").iterdir() if p.is_file()}
    assert listed == scripts, (
        f"docs/layout.md's scripts/: only listed {listed - scripts}, only there {scripts - listed}"
    )


def _listed(text: str) -> list[str]:
    """The names of an English list: "a, b, c and d" or "a | b | c"."""
    return [w.strip(" `") for w in re.split(r",\s*(?:and\s+)?|\s+and\s+|\s*\|\s*", _squeezed(text)) if w.strip()]


def test_make_models_own_architectures_are_the_ones_the_docs_list():
    from pyggml.models.make_model import architectures

    ours = architectures()
    shown = re.search(r"^architectures\(\)\s+# (\[.*\])$", _doc("docs/make_model.md"), re.M)
    assert shown and ast.literal_eval(shown.group(1)) == ours, f"docs/make_model.md's architectures() is not {ours}"
    lists = {
        "docs/make_model.md": r"\*\*pyggml's own tables\*\* \(below\) for (.*?):",
        "docs/llama.md": r"pyggml's own\ntables for (.*?) \(",
    }
    for name, pattern in lists.items():
        m = re.search(pattern, _doc(name), re.S)
        assert m and sorted(_listed(m.group(1))) == sorted(ours), f"{name}'s own architectures are not {ours}"


def test_the_like_presets_the_docs_list_are_make_models():
    from pyggml.models.make_model import PRESETS

    m = re.search(r"`--like ([\w.| -]+)`", _doc("docs/llama.md"))
    assert m and _listed(m.group(1)) == list(PRESETS), f"docs/llama.md's --like presets are not {list(PRESETS)}"
    like = next(a for a in _subparser("make-model")._actions if "--like" in a.option_strings)
    assert _listed(like.help.split(": ", 1)[1]) == list(PRESETS), f"make-model --like's help is not {list(PRESETS)}"


def test_the_generators_models_the_docs_count_are_llama_archs():
    from pyggml.models import llama_archs

    try:
        variants = llama_archs.variants()
    except RuntimeError as e:
        pytest.skip(f"no llama-archs in this build: {e}")
    models, archs = len(variants), len({v.arch for v in variants})
    for name in ("docs/llama.md", "docs/make_model.md"):
        m = re.search(r"(\d+) models of (\d+) architectures", _squeezed(_doc(name)))
        assert m, f"{name}: the generator's count is gone"
        assert (int(m.group(1)), int(m.group(2))) == (models, archs), (
            f"{name} says {m.group(0)}; llama-archs --list has {models} models of {archs} architectures"
        )
    m = re.search(r"generator of (\d+) models", _squeezed(_doc("docs/layout.md")))
    assert m and int(m.group(1)) == models, f"docs/layout.md's generator does not make {models} models"
    shown = re.search(r"llama_archs\.names\(\)\[:(\d)\]\s+# (\[.*\])", _doc("docs/make_model.md"))
    assert shown, "docs/make_model.md: llama_archs.names()'s example is gone"
    first = llama_archs.names()[: int(shown.group(1))]
    assert ast.literal_eval(shown.group(2)) == first, f"docs/make_model.md's names() does not start {first}"


def _series() -> dict[str, list[str]]:
    return {s: sorted(p.stem for p in (ROOT / "vendor" / s / "patches").glob("*.patch")) for s in ("ggml", "llama")}


def test_llama_tests_md_says_which_patches_came_after_its_results():
    doc = _squeezed(_doc("docs/llama_tests.md"))
    m = re.search(r"Patched: ggml patches 0001-(\d{4}), llama\.cpp patches 0001-(\d{4})\.", doc)
    assert m, "docs/llama_tests.md: the series its results ran with is gone"
    last = {s: names[-1][:4] for s, names in _series().items()}
    ran = {"ggml": m.group(1), "llama": m.group(2)}
    if ran == last:
        return
    later = re.search(r"since ggml patches (\d{4})-(\d{4}) and llama\.cpp patches (\d{4})-(\d{4}) came", doc)
    assert later, f"docs/llama_tests.md ran with {ran}, the series end at {last}: say which came after, or rerun"
    assert later.group(2) == last["ggml"] and later.group(4) == last["llama"], (
        f"docs/llama_tests.md's patches after its results end at {later.group(2)}, {later.group(4)}; "
        f"the series at {last['ggml']}, {last['llama']}"
    )
    assert int(later.group(1)) == int(ran["ggml"]) + 1 and int(later.group(3)) == int(ran["llama"]) + 1


def test_info_lists_each_patch_series_apart_as_vendor_holds_them(capsys):
    from pyggml.__main__ import _print_tree_and_patches

    series = _series()
    names = [f"{n}.patch" for s in ("ggml", "llama") for n in series[s]]
    _print_tree_and_patches({"pin": None, "patches": names}, None)
    out = capsys.readouterr().out
    ggml, _, llama = out.partition("llama.cpp's (vendor/llama/patches)")
    for text, (name, files) in ((ggml, ("ggml", series["ggml"])), (llama, ("llama", series["llama"]))):
        shown = re.findall(r"\b\d{4}-[\w.-]+", text)
        assert shown == files, f"info lists {name}'s series as {shown}, vendor/{name}/patches holds {files}"


def test_the_rpc_attacks_the_docs_count_are_the_tests():
    from pyggml.testing.fuzzers.rpc_attacks import ATTACKS

    total = len(ATTACKS)
    refused = sum(a.outcome == "refused" for a in ATTACKS)
    computed = sum(a.outcome == "computed" for a in ATTACKS)
    for name in ("docs/reference.md", "docs/rpc.md", "docs/fuzzing.md"):
        quoted = [int(n) for n in re.findall(r"(\d+) (?:graph attacks|hostile graphs)", _squeezed(_doc(name)))]
        assert quoted and set(quoted) == {total}, f"{name} counts {quoted} attacks; rpc_attacks.ATTACKS has {total}"
    m = re.search(r"with it, (\d+) are refused and (\d+) are computed right", _squeezed(_doc("docs/reference.md")))
    assert m and (int(m.group(1)), int(m.group(2))) == (refused, computed), (
        f"docs/reference.md: the patched server refuses {refused} and computes {computed}"
    )
    m = re.search(r"^\| with it \| (\d+) \| 0 \| 0 \| (\d+) \(", _doc("docs/rpc.md"), re.M)
    assert m and (int(m.group(1)), int(m.group(2))) == (refused, computed), (
        f"docs/rpc.md's table: the patched server refuses {refused} and computes {computed}"
    )


def test_examples_readme_lists_every_notebook():
    listed = re.findall(r"^\| `(\w+\.ipynb)` \|", _doc("examples/README.md"), re.M)
    notebooks = sorted(p.name for p in (ROOT / "examples").glob("*.ipynb"))
    assert sorted(listed) == notebooks, f"examples/README.md lists {sorted(listed)}; examples/ holds {notebooks}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def test_every_pyggml_command_the_docs_show_is_real_with_real_options():
    commands = _subcommands()
    wrong = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            for m in re.finditer(r"python -m pyggml ([a-z][\w-]*)((?: +[^#`;&|)]*)?)", line):
                command, rest = m.group(1), m.group(2)
                where = f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
                if command not in commands:
                    wrong.append(f"{where} (no command {command})")
                    continue
                options = _options(_subparser(command))  # a fuzzer's options: only when it is chosen
                wrong += [f"{where} ({o})" for o in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest) if o not in options]
    assert not wrong, "the docs show commands or options the command line lacks:\n" + "\n".join(wrong)


def test_the_help_names_every_command():
    import pyggml.__main__ as cli

    named = set(re.findall(r"`([a-z][\w-]*)`", cli.__doc__ or ""))
    commands = set(_subcommands())
    assert commands <= named, f"`python -m pyggml --help`'s description leaves out {sorted(commands - named)}"
