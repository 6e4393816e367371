"""`check --junit FILE`: the records of a run as JUnit XML, so CI systems show the differential
suite as tests: one <testsuite> per backend, one <testcase> per case (classname
`pyggml.<case family>.<backend>`, name the case), a mismatch as <failure> with its figures, an
exception as <error>, unsupported, skipped and known disagreements as <skipped> with the reason."""

from __future__ import annotations

import json
import re
import socket
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyggml.testing.engine.verdict import Record

# XML 1.0 has no way to write these; ggml's messages can hold them (a case name never does)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
SKIPPED = ("unsupported", "skipped", "known")


def _text(s: str) -> str:
    return _NOT_XML.sub("\ufffd", s)


def _figures(r: Record, measure: str) -> str:
    lines = []
    if r.error is not None:
        bound = f" (bound {r.bound:.3g})" if r.bound is not None else ""
        lines.append(f"{measure} {r.error:.3g}{bound}")
    lines += [f"NMSE against {other}: {v:.3g}" for other, v in sorted(r.cross.items())]
    if r.message:
        lines.append(r.message)
    return "\n".join(lines)


def _counts(records: Sequence[Record]) -> dict[str, str]:
    return {
        "tests": str(len(records)),
        "failures": str(sum(r.status == "fail" for r in records)),
        "errors": str(sum(r.status == "error" for r in records)),
        "skipped": str(sum(r.status in SKIPPED for r in records)),
        "time": f"{sum(r.seconds for r in records):.3f}",
    }


def junit_tree(
    records: Sequence[Record],
    name: str = "pyggml.check",
    measure: str = "NMSE against the oracle",
    timestamp: datetime | None = None,
) -> ET.ElementTree:
    """`measure` names what Record.error is (grad mode: the relative gradient error)."""
    # timestamp and hostname: Ant's JUnit schema requires them on a testsuite, and CI shows them
    stamp = (timestamp or datetime.now()).strftime("%Y-%m-%dT%H:%M:%S")
    host = _text(socket.gethostname())
    suites = ET.Element("testsuites", {"name": name, **_counts(records)})
    backends: dict[str, list[Record]] = {}
    for r in records:
        backends.setdefault(r.backend, []).append(r)
    for backend, recs in backends.items():
        suite = ET.SubElement(
            suites, "testsuite", {"name": f"{name}.{backend}", **_counts(recs), "timestamp": stamp, "hostname": host}
        )
        for r in recs:
            family = r.case.split("/", 1)[0]
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_text(f"pyggml.{family}.{backend}"),
                name=_text(r.case),
                time=f"{r.seconds:.6f}",
            )
            figures = _figures(r, measure)
            # grad mode's failures carry no message: their figures say it
            first_line = _text((r.message or figures or r.status).splitlines()[0])[:500]
            if r.status == "fail":
                ET.SubElement(case, "failure", message=first_line, type="Mismatch").text = _text(figures)
            elif r.status == "error":
                kind = r.message.split(":", 1)[0] if ":" in r.message else "Error"
                ET.SubElement(case, "error", message=first_line, type=_text(kind)).text = _text(r.message)
            elif r.status in SKIPPED:
                # check's and grad's known records already say "known: why"
                known = r.status == "known" and not r.message.startswith("known")
                ET.SubElement(case, "skipped", message=_text(f"known: {r.message}" if known else r.message or r.status))
            elif r.message:  # a pass that says something (perf mode's figures)
                ET.SubElement(case, "system-out").text = _text(r.message)
    return ET.ElementTree(suites)


def write_junit(
    records: Sequence[Record],
    path: str | IO[bytes],
    name: str = "pyggml.check",
    measure: str = "NMSE against the oracle",
    timestamp: datetime | None = None,
) -> None:
    """To a file named `path`, or to a binary stream (check --junit -: stdout)."""
    tree = junit_tree(records, name, measure, timestamp)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def unwritable(path: str, make_folder: bool = False) -> str | None:
    """Why a file cannot be written at `path`, found before a run rather than after it (None: it can); a file
    this probe creates is removed again. make_folder: make its missing folders first."""
    target = Path(path)
    try:
        if make_folder:
            target.parent.mkdir(parents=True, exist_ok=True)
        existed = target.exists()
        with open(target, "ab"):
            pass
        if not existed:
            target.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def reports(json_path: str | None, junit_path: str | None) -> list[tuple[str, str]]:
    """A run's reports asked for, as (kind, path): ("JSON", --json), ("JUnit", --junit)."""
    return [(kind, path) for kind, path in (("JSON", json_path), ("JUnit", junit_path)) if path]


def reports_error(json_path: str | None, junit_path: str | None) -> str | None:
    """Why a run's `--json` and `--junit` reports cannot be written (both to stdout, or a file that cannot be
    made), or None."""
    asked = reports(json_path, junit_path)
    if sum(path == "-" for _, path in asked) > 1:
        return "only one report can go to stdout (-): give --json or --junit a file"
    for kind, path in asked:
        why = unwritable(path) if path != "-" else None
        if why:
            return f"cannot write the {kind} report {path!r}: {why}"
    return None


def write_report(
    kind: str,
    path: str,
    records: Sequence[Record],
    name: str,
    measure: str = "NMSE against the oracle",
    timestamp: datetime | None = None,
    data: Any = None,
) -> None:
    """One report of a run (`check`'s, `check --model`'s, `check --repro`'s, `--mode perf`'s): kind "JSON" (the
    records as dicts, or `data` when given) or "JUnit" (`write_junit`); path "-" is standard output."""
    if kind == "JSON":
        text = json.dumps([asdict(r) for r in records] if data is None else data, indent=1) + "\n"
        if path == "-":
            sys.stdout.write(text)
        else:
            with open(path, "w") as f:
                f.write(text)
    else:
        write_junit(records, sys.stdout.buffer if path == "-" else path, name, measure, timestamp)
