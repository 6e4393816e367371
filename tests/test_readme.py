"""The README's "First steps" must run as written: its ```python blocks are executed here, in
order, in one namespace (as a reader pasting them into one session would), so the README cannot
drift from the code. Its relative links must lead to files of the repository."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def section(text: str, title: str) -> str:
    """The text of the `## title` section, up to the next `## ` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def first_steps() -> list[str]:
    return BLOCK.findall(section(README.read_text(), "First steps"))


def test_the_first_steps_have_their_snippets():
    blocks = first_steps()
    assert len(blocks) >= 5
    code = "".join(blocks)
    for step in ("Runner(", "alloc_tensors", "gguf.save", "gguf.load", "assert_close", "meta:cpu,cpu"):
        assert step in code, step


def test_the_first_steps_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a snippet writes stays out of the repository
    namespace: dict = {"__name__": "readme"}
    out = io.StringIO()
    for n, block in enumerate(first_steps()):
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block, f"README.md First steps, block {n + 1}", "exec"), namespace)
        except Exception as e:
            pytest.fail(f"block {n + 1} of the README's First steps raised {type(e).__name__}: {e}\n{block}")
    assert "[[6. 6. 6.]" in out.getvalue()  # what the first block's comment says it prints


@pytest.mark.parametrize(
    "path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_relative_links_lead_to_files(path):
    missing = [
        target
        for target in LINK.findall(path.read_text())
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert missing == [], f"{path.name} links to missing files: {missing}"
    if path.parent.name == "docs":  # mkdocs --strict fails on a link out of docs/ (the site has no such page)
        outside = [t for t in LINK.findall(path.read_text()) if "://" not in t and t.startswith("../")]
        assert outside == [], f"{path.name} links out of docs/ (name the file as code instead): {outside}"


def test_the_readme_stays_a_newcomers_path():
    """The two commands, what pyggml is, first steps, one short paragraph per capability with its link: at most
    14 KB (it had grown to 22 KB of reference, now docs/reference.md)."""
    text = README.read_text()
    assert len(text.encode()) <= 14 * 1024, len(text.encode())
    assert text.index("pip install -e . && python -m pyggml check") < text.index("## First steps")
    assert "(docs/reference.md)" in text
