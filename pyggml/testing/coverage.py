"""`python -m pyggml coverage`: for every op kind of this ggml, whether pyggml wraps it, how many
registered cases compute it, and how those cases fare on each backend.

The op kinds are read from ggml's own tables at run time (ggml_op_name, ggml_unary_op_name,
ggml_glu_op_name), leaving out NONE, the custom-op escape hatches and the UNARY/GLU umbrellas
(their members are counted one by one). A case counts for every kind its graphs compute, as
ggml_op_desc names the nodes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TextIO

from pyggml import ops
from pyggml._native import ffi, lib
from pyggml.testing.check import Record, available_backends, backend_error, jobs_for, run_check
from pyggml.testing.engine import cases as case_registry

NOT_COUNTED = {"NONE", "UNARY", "GLU", "MAP_CUSTOM1", "MAP_CUSTOM2", "MAP_CUSTOM3", "CUSTOM"}
NOT_OPS = {"set_name"}  # Context methods that make no node
# spelling differences between a C function and the op kind it makes (ggml_rope_ext makes ROPE)
_VARIANT = re.compile(r"_(ext|direct|p0)(?=_|$)")


def op_kinds() -> list[str]:
    """Every op kind of this ggml build, as ggml names it."""
    kinds = [ffi.string(lib.ggml_op_name(i)).decode() for i in range(lib.GGML_OP_COUNT)]
    kinds = [k for k in kinds if k not in NOT_COUNTED]
    kinds += [ffi.string(lib.ggml_unary_op_name(i)).decode() for i in range(lib.GGML_UNARY_OP_COUNT)]
    kinds += [ffi.string(lib.ggml_glu_op_name(i)).decode() for i in range(lib.GGML_GLU_OP_COUNT)]
    return kinds


def wrappers_of(kinds: list[str]) -> dict[str, list[str]]:
    """kind -> the op wrappers named after it: the kind's name, or it with a suffix
    (view_2d, reshape_3d, swiglu_split), or with ext/direct/p0 left out (rope_ext, conv_2d_direct);
    a wrapper that is itself some kind's name counts for that kind only."""
    lower = {k.lower(): k for k in kinds}
    out: dict[str, list[str]] = {k: [] for k in kinds}
    for w in ops.__all__:
        if w in NOT_OPS or not callable(getattr(ops, w)):
            continue
        names = {w, _VARIANT.sub("", w)}
        exact = [lower[n] for n in names if n in lower]
        if exact:
            out[exact[0]].append(w)
            continue
        prefixed = [k for low, k in lower.items() if any(n.startswith(low + "_") for n in names)]
        if prefixed:
            out[max(prefixed, key=len)].append(w)  # the longest: set_rows_x is SET_ROWS, not SET
    return out


def coverage(
    backends: list[str], progress: TextIO | None = sys.stderr, records: list[Record] | None = None, jobs: int = 0
) -> dict:
    """The coverage report of these backends' results: `records` (a check report's), or those of a
    run of the whole suite on `backends` now (in `jobs` worker processes; 0: in this process)."""
    kinds = op_kinds()
    wrappers = wrappers_of(kinds)
    if records is None:
        records = run_check(backends, progress=progress, jobs=jobs)
    by_kind: dict[str, dict[str, Any]] = {
        k: {"wrappers": wrappers[k], "cases": set(), "backends": {b: {} for b in backends}} for k in kinds
    }
    for r in records:
        for k in r.ops:
            if k in by_kind:
                entry = by_kind[k]
                entry["cases"].add(r.case)
                counts = entry["backends"].setdefault(r.backend, {})
                counts[r.status] = counts.get(r.status, 0) + 1
    rows = []
    for k in kinds:
        e = by_kind[k]
        rows.append({"kind": k, "wrappers": e["wrappers"], "cases": len(e["cases"]), "backends": e["backends"]})
    covered = [r for r in rows if r["wrappers"] and r["cases"]]
    totals = {
        "kinds": len(rows),
        "covered": len(covered),
        "percent": round(100 * len(covered) / len(rows), 1),
        "cases": len({r.case for r in records if r.case != "*"}),
        "missing": [r["kind"] for r in rows if not (r["wrappers"] and r["cases"])],
    }
    for b in backends:
        totals[b] = {
            s: sum(1 for r in records if r.backend == b and r.status == s)
            for s in ("pass", "known", "unsupported", "skipped", "fail", "error")
        }
    return {"rows": rows, "totals": totals}


def table(report: dict, backends: list[str]) -> str:
    lines = [f"{'op kind':<24} {'wrapper':<28} {'cases':>5}  " + "  ".join(f"{b:<18}" for b in backends)]
    for r in report["rows"]:
        cells = []
        for b in backends:
            c = r["backends"].get(b, {})
            cells.append(f"{' '.join(f'{s[0]}{n}' for s, n in sorted(c.items())) or '-':<18}")
        wrappers = ", ".join(r["wrappers"]) or "-"
        if len(wrappers) > 28:
            wrappers = wrappers[:25] + "..."
        lines.append(f"{r['kind']:<24} {wrappers:<28} {r['cases']:>5}  " + "  ".join(cells))
    t = report["totals"]
    lines.append("")
    lines.append(
        f"op kinds: {t['kinds']}, with a wrapper and cases: {t['covered']} ({t['percent']} %); cases: {t['cases']}"
    )
    for b in backends:
        lines.append(f"{b}: " + ", ".join(f"{s} {n}" for s, n in t[b].items()))
    if t["missing"]:
        lines.append("not covered: " + ", ".join(t["missing"]))
    lines.append(
        "(per backend: p pass, k known disagreement, u unsupported, s skipped (slow on lavapipe), f fail, "
        "e error; counts of cases)"
    )
    return "\n".join(lines)


def read_report(path: str) -> list[Record]:
    """The records of a `check --json` report (`-`: stdin); ValueError saying what is wrong with it."""
    try:
        if path == "-":
            data = json.load(sys.stdin)
        else:
            with open(path) as f:
                data = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path!r} is not JSON ({e}); write a report with `check --json FILE`") from None
    fields = set(Record.__dataclass_fields__)
    if not isinstance(data, list) or not all(
        isinstance(r, dict) and {"case", "backend", "status"} <= set(r) for r in data
    ):
        raise ValueError(f"{path!r} is not a `check --json` report (a list of records with case, backend, status)")
    records = [Record(**{k: v for k, v in r.items() if k in fields}) for r in data]
    if records and not any(r.ops for r in records):
        raise ValueError(
            f"{path!r} names no op kinds (a `check --mode grad` report?); write one with "
            "`check --json FILE` (test mode)"
        )
    return records


def main(args: argparse.Namespace) -> int:
    from_file = getattr(args, "from_file", None)
    records = None
    if from_file:
        try:
            records = read_report(from_file)
        except ValueError as e:
            print(f"coverage: --from: {e}", file=sys.stderr)
            return 2
        in_report = list(dict.fromkeys(r.backend for r in records))
        backends = [b.lower() for b in (args.backend or in_report)]
        missing = [b for b in backends if b not in in_report]
        if missing:
            print(
                f"coverage: the report {from_file!r} has no results on {', '.join(missing)}; it has: "
                f"{', '.join(in_report) or 'none'}",
                file=sys.stderr,
            )
            return 2
        records = [r for r in records if r.backend in backends]
        n_report = len({r.case for r in records if r.case != "*"})
        n_all = len(case_registry.select())
        note = (
            ""
            if n_report >= n_all
            else (f"; it holds {n_report} of the {n_all} cases (a filtered run?): the counts cover those only")
        )
        print(f"coverage: results of {from_file!r} on {', '.join(backends)}{note}", file=sys.stderr)
    else:
        backends = [b.lower() for b in (args.backend or available_backends())]
        for b in dict.fromkeys(backends):
            why = backend_error(b)
            if why:
                print(f"coverage: --backend {b}: {why}", file=sys.stderr)
                return 2
        n = len(case_registry.select())
        print(
            f"coverage: running the whole suite to see which op kinds each case computes: {n} cases on "
            f"{', '.join(backends)} ({n * len(backends)} runs; minutes). `check --json FILE` then "
            "`coverage --from FILE` reuses a run.",
            file=sys.stderr,
            flush=True,
        )
    progress = None if getattr(args, "quiet", False) else sys.stderr
    report = coverage(backends, progress, records, jobs_for(args, backends))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(table(report, backends))
    return 0
