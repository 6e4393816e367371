"""The example notebooks are committed executed, and what a reader sees must be what the code does.

    python -m pyggml notebooks --refresh examples/*.ipynb   # execute, store the outputs
    python -m pyggml notebooks examples/*.ipynb             # execute, compare, report

`compare(committed, fresh)` lists how a fresh execution differs from the stored one, cell by
cell. The rules:

- every code cell has the same outputs in the same order, of the same kinds: a stream of the same
  name, or a display/result with the same MIME types; an error output is always a difference;
- text (streams, text/plain) is equal once its numbers are taken out, and each number is equal
  within rtol 1e-6 and atol 1e-9 (the notebooks compute seeded values; CPU results repeat bit for
  bit, so anything more is a change). Memory addresses (0x...) and host:port endpoints (a free
  port each run) are not compared, nor the widths of runs of spaces (column padding follows the
  widths of the numbers in the column);
- an image/png is where it was: present, not compared pixel by pixel (fonts and renderer versions
  differ between machines; the numbers a plot shows are printed in a text output too);
- a picture an optional program draws (Graphviz's `dot`) says which drew it, in its output's metadata
  (`"pyggml": {"drawn_by": "graphviz"}`, or `"matplotlib"` for pyggml's own drawing, the documented
  fallback): a fresh picture must come from the program where this machine has it and from the fallback
  where it does not, whichever drew the committed one; a picture that says nothing where the committed one
  said, or a drawer not known here, is a difference;
- a cell can say otherwise in its metadata, with the reason: `"pyggml": {"outputs": "structure",
  "why": ...}` compares only the kinds of its outputs (device lists, timings: what depends
  on the machine), `"pyggml": {"rtol": r, "atol": a, "why": ...}` widens the number tolerance,
  and `"pyggml": {"backends": [...], "why": ...}` says the output lists the backends of the
  machine that stored it (`--refresh` records them): on a machine with other backends (a build
  without Vulkan, a GPU machine) the cell is compared by the kinds of its outputs only. A rule
  without its "why", or with a key not named here, is itself a difference.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

RTOL, ATOL = 1e-6, 1e-9
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?\b(?:nan|inf)\b")
# known-variable tokens, replaced alike in both texts before they are compared
VARIABLE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b"), "host:port"),
    (re.compile(r"[ \t]+"), " "),
]
RULE_KEYS = {"outputs", "rtol", "atol", "backends", "why"}
# the pictures an optional program draws where it is installed: the drawer, the program it needs; where the
# program is missing, pyggml's own drawing (FALLBACK_DRAWER) draws them
OPTIONAL_DRAWERS = {"graphviz": "dot"}
FALLBACK_DRAWER = "matplotlib"
TEXT_TYPES = ("text/plain",)


def execute(path: Path, timeout: int = 600) -> Any:
    """The notebook at `path`, executed top to bottom in its own folder (a fresh kernel)."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    nb.metadata.get("language_info", {}).pop("version", None)  # this machine's Python, a diff per refresh
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = coalesce_streams(cell.outputs)
    return nb


def coalesce_streams(outputs: list[Any]) -> list[Any]:
    """Consecutive pieces of one stream as one output: how a print is cut into pieces depends on
    when the kernel flushed, not on what the code printed."""
    out: list[Any] = []
    for o in outputs:
        if o.output_type == "stream" and out and out[-1].output_type == "stream" and out[-1].name == o.name:
            out[-1].text += o.text
        else:
            out.append(o)
    return out


def _kind(output: Any) -> str:
    if output.output_type == "stream":
        return f"stream:{output.name}"
    if output.output_type in ("display_data", "execute_result"):
        return f"{output.output_type}:{','.join(sorted(output.data))}"
    return output.output_type


def _texts(output: Any) -> list[str]:
    if output.output_type == "stream":
        return [output.text]
    data = output.get("data", {})
    return [data[t] for t in TEXT_TYPES if t in data]


def _split(text: str) -> tuple[list[str], list[float]]:
    for pattern, replacement in VARIABLE:
        text = pattern.sub(replacement, text)
    return NUMBER.split(text), [float(m) for m in NUMBER.findall(text)]


def compare_text(old: str, new: str, rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """None when the texts agree (words equal, numbers within tolerance), else what differs."""
    old_words, old_numbers = _split(old)
    new_words, new_numbers = _split(new)
    if old_words != new_words or len(old_numbers) != len(new_numbers):
        return f"the text changed:\n--- committed\n{old}\n--- fresh\n{new}"
    for i, (a, b) in enumerate(zip(old_numbers, new_numbers)):
        same = (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= atol + rtol * abs(a)
        if not same:
            return (
                f"number {i} changed: {a!r} committed, {b!r} fresh (rtol {rtol}, atol {atol})\n"
                f"--- committed\n{old}\n--- fresh\n{new}"
            )
    return None


def drawer_here(drawer: str) -> str:
    """Who draws, on this machine, a picture that `drawer` drew: the optional program's drawer where the
    program is on PATH, else the fallback."""
    for optional, program in OPTIONAL_DRAWERS.items():
        if drawer in (optional, FALLBACK_DRAWER):
            return optional if shutil.which(program) else FALLBACK_DRAWER
    raise ValueError(
        f"drawn_by {drawer!r}: not a drawer the comparison knows ({sorted(OPTIONAL_DRAWERS)}, {FALLBACK_DRAWER!r})"
    )


def _drawn_by(output: Any) -> str | None:
    return output.get("metadata", {}).get("pyggml", {}).get("drawn_by")


def compare_drawers(old: Any, new: Any) -> str | None:
    """None when the fresh output was drawn by what this machine draws the committed one's picture with."""
    committed, fresh = _drawn_by(old), _drawn_by(new)
    if committed is None and fresh is None:
        return None
    if committed is None or fresh is None:
        return f"a picture says it was drawn by {committed!r} committed, {fresh!r} fresh: both must say"
    try:
        want = drawer_here(committed)
    except ValueError as e:
        return str(e)
    if fresh != want:
        have = "has" if want != FALLBACK_DRAWER else "lacks"
        return f"a picture drawn by {fresh!r}: this machine {have} what {committed!r} needs, so it must be {want!r}"
    return None


def compare(committed: Any, fresh: Any, backends: list[str] | None = None) -> list[str]:
    """How `fresh` differs from `committed` (two executions of the same notebook), per the rules
    above; `backends`: those of the machine that ran `fresh` (None: not known, compare all)."""
    problems = []
    old_cells = [c for c in committed.cells if c.cell_type == "code"]
    new_cells = [c for c in fresh.cells if c.cell_type == "code"]
    if [c.source for c in old_cells] != [c.source for c in new_cells]:
        return ["the code cells differ: compare two executions of the same notebook"]
    for n, (old, new) in enumerate(zip(old_cells, new_cells)):
        where = f"code cell {n}"
        errors = [o for o in new.get("outputs", []) if o.output_type == "error"]
        if errors:
            problems.append(f"{where}: raised {errors[0].ename}: {errors[0].evalue}")
            continue
        rule = old.metadata.get("pyggml", {})
        if rule and (not rule.get("why") or set(rule) - RULE_KEYS):
            problems.append(f"{where}: a rule needs its 'why' and only the keys {sorted(RULE_KEYS)}: {dict(rule)}")
            continue
        old_outputs = coalesce_streams(old.get("outputs", []))
        new_outputs = coalesce_streams(new.get("outputs", []))
        old_kinds, new_kinds = [_kind(o) for o in old_outputs], [_kind(o) for o in new_outputs]
        if old_kinds != new_kinds:
            problems.append(f"{where}: outputs {new_kinds}, committed {old_kinds}")
            continue
        drawers = [compare_drawers(o_old, o_new) for o_old, o_new in zip(old_outputs, new_outputs)]
        problems += [f"{where}: {d}" for d in drawers if d]
        other_machine = backends is not None and "backends" in rule and list(rule["backends"]) != backends
        if rule.get("outputs") == "structure" or other_machine:
            continue
        rtol, atol = rule.get("rtol", RTOL), rule.get("atol", ATOL)
        for o_old, o_new in zip(old_outputs, new_outputs):
            for t_old, t_new in zip(_texts(o_old), _texts(o_new)):
                diff = compare_text(t_old, t_new, rtol, atol)
                if diff:
                    problems.append(f"{where}: {diff}")
    return problems


def main(args: argparse.Namespace) -> int:
    """Execute each notebook; with --refresh store its outputs, else compare them with the committed ones."""
    # the environment of the tests (tests/conftest.py): lavapipe listed twice
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0,0")
    from pyggml.testing.engine.session import available_backends

    backends = available_backends()
    status = 0
    for path in args.notebooks:
        fresh = execute(path)
        if args.refresh:
            for cell in fresh.cells:
                if "backends" in cell.metadata.get("pyggml", {}):
                    cell.metadata.pyggml.backends = backends
            nbformat.write(fresh, path)
            print(f"{path}: executed and stored")
            continue
        problems = compare(nbformat.read(path, as_version=4), fresh, backends)
        print(f"{path}: {'as committed' if not problems else f'{len(problems)} differences'}")
        for p in problems:
            print("  " + p.replace("\n", "\n  "))
        status |= bool(problems)
    return status
