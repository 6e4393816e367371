"""What the docs quote from the code is checked against it, so that a change that moves one fails here instead
of leaving a stale line: the spec docs/suite.md calls real, the patches docs/patches.md lists, the packages a
bare machine needs (README.md and the build's own message), the version the changelog starts from."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def test_the_spec_suite_md_calls_real_is_the_codes():
    doc = (ROOT / "docs" / "suite.md").read_text()
    block = re.search(r"A real one, `(\S+)`'s `(\w+)`:\s*```python\n(.*?)```", doc, re.S)
    assert block, "docs/suite.md: the real spec example is gone"
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
