"""The notebooks under examples/ are committed executed: each runs top to bottom again, and its
fresh outputs must be what is committed (pyggml.testing.notebooks states the rules: same outputs
and kinds, text equal, numbers within rtol 1e-6 / atol 1e-9 unless a cell says why not, images
where they were). After a deliberate change: `python -m pyggml.testing.notebooks --refresh
examples/*.ipynb`."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from pyggml.testing.notebooks import compare, compare_text, execute  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_the_examples_are_committed_executed_with_their_plots():
    assert len(NOTEBOOKS) >= 5
    images = 0
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), path.name
        images += sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert images >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_reruns_to_what_is_committed(path):
    problems = compare(nbformat.read(path, as_version=4), execute(path))
    assert problems == [], "\n".join(problems)


# --- the comparison itself, on small notebooks --------------------------------------------------
def notebook(*outputs, metadata=None):
    v4 = nbformat.v4
    cell = v4.new_code_cell("x = 1", outputs=list(outputs), metadata=metadata or {})
    return v4.new_notebook(cells=[v4.new_markdown_cell("# t"), cell])


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def image(text="<Figure size 640x480 with 1 Axes>"):
    return nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": text})


def test_numbers_within_tolerance_pass_and_beyond_fail():
    assert compare(notebook(stream("nmse 1.0000001e-05 over 12 cases\n")),
                   notebook(stream("nmse 1.0000000e-05 over 12 cases\n"))) == []
    problems = compare(notebook(stream("nmse 1.0e-05 over 12 cases\n")), notebook(stream("nmse 1.1e-05 over 12 cases\n")))
    assert len(problems) == 1 and "number 0 changed: 1e-05 committed, 1.1e-05 fresh" in problems[0]
    assert compare(notebook(stream("12 cases\n")), notebook(stream("13 cases\n")))  # integers exactly


def test_words_and_output_kinds_must_match():
    assert compare(notebook(stream("pass\n")), notebook(stream("fail\n")))
    assert compare(notebook(stream("x\n")), notebook(stream("x\n", name="stderr")))
    assert compare(notebook(stream("x\n")), notebook(stream("x\n"), stream("more\n", name="stderr")))


def test_an_image_must_be_where_it_was_and_an_error_never_passes():
    assert compare(notebook(image()), notebook(image())) == []
    problems = compare(notebook(stream("a\n"), image()), notebook(stream("a\n")))
    assert problems and "image/png" in problems[0]
    error = nbformat.v4.new_output("error", ename="ValueError", evalue="boom", traceback=[])
    problems = compare(notebook(stream("a\n")), notebook(stream("a\n"), error))
    assert problems and "raised ValueError: boom" in problems[0]


def test_a_cell_can_ask_for_structure_only_or_a_wider_tolerance():
    timings = {"pyggml": {"outputs": "structure", "why": "timings"}}
    assert compare(notebook(stream("0.31 ms\n"), metadata=timings), notebook(stream("0.24 ms\n"))) == []
    assert compare(notebook(stream("0.31 ms\n"), metadata=timings), notebook(image()))  # kinds still count
    wide = {"pyggml": {"rtol": 0.1, "why": "lavapipe rounds differently"}}
    assert compare(notebook(stream("1.00\n"), metadata=wide), notebook(stream("1.05\n"))) == []
    assert compare(notebook(stream("1.00\n"), metadata=wide), notebook(stream("1.20\n")))


def test_stream_pieces_and_addresses_do_not_count():
    assert compare(notebook(stream("a 1\nb 2\n")), notebook(stream("a 1\n"), stream("b 2\n"))) == []
    assert compare_text("<Tensor at 0x7f3a12>", "<Tensor at 0x55e0aa>") is None
