"""The notebooks under examples/ are committed executed: each runs top to bottom again, and its
fresh outputs must be what is committed (pyggml.testing.notebooks states the rules: same outputs
and kinds, text equal, numbers within rtol 1e-6 / atol 1e-9, images where they were; addresses,
host:port endpoints and column padding not compared; a cell may say, with its reason, that it is
compared by the kinds of its outputs only, with a wider tolerance, or fully only on a machine with
the backends that stored it). After a deliberate change: `python -m pyggml notebooks
--refresh examples/*.ipynb`."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from pyggml.testing.check import available_backends  # noqa: E402
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
    problems = compare(nbformat.read(path, as_version=4), execute(path), available_backends())
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
    assert (
        compare(
            notebook(stream("nmse 1.0000001e-05 over 12 cases\n")),
            notebook(stream("nmse 1.0000000e-05 over 12 cases\n")),
        )
        == []
    )
    problems = compare(
        notebook(stream("nmse 1.0e-05 over 12 cases\n")), notebook(stream("nmse 1.1e-05 over 12 cases\n"))
    )
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


def test_a_cell_listing_the_backends_is_compared_whole_only_on_a_machine_with_those_backends():
    rule = {"pyggml": {"backends": ["cpu", "vulkan0"], "why": "one line per backend"}}
    committed = notebook(stream("cpu True\nvulkan0 True\n"), metadata=rule)
    assert compare(committed, notebook(stream("cpu True\nvulkan0 False\n")), ["cpu", "vulkan0"])
    assert compare(committed, notebook(stream("cpu True\n")), ["cpu"]) == []
    assert compare(committed, notebook(image()), ["cpu"])  # kinds still count


def test_a_rule_says_why_and_only_what_it_may():
    assert compare(notebook(stream("1\n"), metadata={"pyggml": {"outputs": "structure"}}), notebook(stream("2\n")))
    typo = {"pyggml": {"rtoll": 0.1, "why": "lavapipe"}}
    assert "rtoll" in compare(notebook(stream("1\n"), metadata=typo), notebook(stream("1\n")))[0]


def test_stream_pieces_addresses_ports_and_padding_do_not_count():
    assert compare(notebook(stream("a 1\nb 2\n")), notebook(stream("a 1\n"), stream("b 2\n"))) == []
    assert compare_text("<Tensor at 0x7f3a12>", "<Tensor at 0x55e0aa>") is None
    assert compare_text("127.0.0.1:36121 -> RPC0", "127.0.0.1:40153 -> RPC0") is None
    assert compare_text("127.0.0.1:36121 -> RPC0", "127.0.0.1:40153 -> RPC1") is not None
    assert compare_text("pass 0          |", "pass 1e-12     |", atol=1e-9) is None


def test_a_changed_number_in_a_committed_notebook_is_caught():
    committed = nbformat.read(EXAMPLES / "tour.ipynb", as_version=4)
    fresh = copy.deepcopy(committed)
    [cell] = [c for c in fresh.cells if c.cell_type == "code" and "Q8_0" in c.source]
    cell.outputs[0].text = cell.outputs[0].text.replace("136 bytes", "137 bytes")
    assert compare(committed, committed) == []
    [problem] = compare(committed, fresh)
    assert "number 2 changed: 136.0 committed, 137.0 fresh" in problem and "137 bytes" in problem


# --- pictures an optional program draws ----------------------------------------------------------------------
def drawn(by):
    out = image()
    out.metadata = {"pyggml": {"drawn_by": by}}
    return out


def test_a_picture_must_come_from_the_drawer_this_machine_has(monkeypatch):
    from pyggml.testing import notebooks

    for have_dot in (True, False):
        monkeypatch.setattr(notebooks.shutil, "which", lambda name, have=have_dot: "/bin/" + name if have else None)
        here, elsewhere = ("graphviz", "matplotlib") if have_dot else ("matplotlib", "graphviz")
        for committed in ("graphviz", "matplotlib"):  # whichever drew the committed picture
            assert compare(notebook(drawn(committed)), notebook(drawn(here))) == []
            [problem] = compare(notebook(drawn(committed)), notebook(drawn(elsewhere)))
            assert f"drawn by '{elsewhere}'" in problem and f"must be '{here}'" in problem
        assert compare(notebook(drawn("graphviz")), notebook(image()))  # the fresh one must say
        assert compare(notebook(image()), notebook(drawn(here)))
        assert "not a drawer" in compare(notebook(drawn("gnuplot")), notebook(drawn("gnuplot")))[0]


def path_without(programs: set[str], tmp: Path) -> str:
    """PATH with `programs` hidden, as scripts/without_tools.sh hides them for a whole command: each folder
    holding one is replaced by a folder of links to the rest of its entries."""
    import os

    folders = []
    for n, folder in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        d = Path(folder)
        if d.is_dir() and any(os.path.lexists(d / p) for p in programs):
            shadow = tmp / f"path{n}"
            shadow.mkdir()
            for entry in d.iterdir():
                if entry.name not in programs:
                    (shadow / entry.name).symlink_to(entry)
            d = shadow
        folders.append(str(d))
    return os.pathsep.join(folders)


def test_without_graphviz_the_pictures_are_matplotlibs_and_the_notebook_reruns(monkeypatch, tmp_path):
    """The rerun above draws with what this machine has; this one hides Graphviz's `dot` from the kernel's PATH,
    as on a machine that never installed it: the notebook runs, draws with matplotlib and compares clean."""
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed: the rerun of graph_pictures.ipynb above ran without it already")
    path = EXAMPLES / "graph_pictures.ipynb"
    monkeypatch.setenv("PATH", path_without({"dot"}, tmp_path))
    assert shutil.which("dot") is None
    fresh = execute(path)
    drawers = {
        o.metadata["pyggml"]["drawn_by"]
        for c in fresh.cells
        for o in c.get("outputs", [])
        if "metadata" in o and "pyggml" in o.metadata
    }
    assert drawers == {"matplotlib"}
    problems = compare(nbformat.read(path, as_version=4), fresh, available_backends())
    assert problems == [], "\n".join(problems)
