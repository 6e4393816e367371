"""docs/findings.md's upstream bugs as data: where each shows (the cases that show it, on which backend kinds)
and what fixes it (our patch, or the ggml version upstream fixed it in).

On a build that lacks the fix (a user's tree without our patches, an older ggml), a case a finding covers that
fails or dies is `known`, naming the finding: an upstream bug, neither a pass nor an unexplained failure. `python
-m pyggml findings` reruns each finding's cases on the built tree, in worker processes where an abort ends only
the worker, and says which findings the tree still has; `--export DIR` writes them for upstream (a
test-backend-ops `--test-file` per finding, and a reproducer script that runs them with test-backend-ops).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pyggml._native import build_info, version_key
from pyggml.target import Target
from pyggml.testing.engine import verdict
from pyggml.testing.engine.verdict import Record, Status


@dataclass(frozen=True)
class Finding:
    """One upstream bug of docs/findings.md.

    Attributes:
        number: its number in docs/findings.md.
        where: the component (ggml-cpu, ggml-vulkan, ggml-backend-meta, ...).
        what: the bug, in a line.
        patch: the patch of vendor/ggml/patches (or `llama/NAME` of vendor/llama/patches) that fixes it, "" none.
        fixed_in: the first ggml version that has it fixed upstream ("0.20.0"), "" not fixed upstream (or unknown).
        cases: a regular expression over case names that show it ("" none: shown by tests, not by cases).
        backends: the backend kinds it shows on (cpu, vulkan, meta), () any.
        first_in: the first ggml version that has the bug (an op or a kernel it came with), "" older than any tried.
    """

    number: int
    where: str
    what: str
    patch: str = ""
    fixed_in: str = ""
    cases: str = ""
    backends: tuple[str, ...] = ()
    first_in: str = ""


FINDINGS: tuple[Finding, ...] = (
    Finding(
        1,
        "ggml-vulkan buffer_clear",
        "clearing a buffer to a byte other than 0 sets one byte of every four",
        "0013-vulkan-buffer-clear-byte.patch",
    ),
    Finding(
        5,
        "ggml-vulkan RWKV_WKV6/7",
        "shaders hardcode head size 64: other sizes silently wrong",
        "0014-vulkan-wkv-head-size-64.patch",
        cases=r"^rwkv_wkv[67]/",
        backends=("vulkan",),
    ),
    Finding(
        6,
        "ggml-vulkan SSM_SCAN",
        "with 8-wide subgroups and d_state 256, surplus subgroups overwrite rows",
        "0015-vulkan-ssm-scan-partial-workgroup.patch",
        cases=r"^ssm_scan/.*ds256",
        backends=("vulkan",),
    ),
    Finding(
        7,
        "ggml-vulkan MUL_MAT / MUL_MAT_ID",
        "matrix-vector path asserts on a BF16 b (or a non-F32 b of mul_mat_id) that supports_op accepted",
        "0016-vulkan-mul-mat-vec-b-types.patch",
        cases=r"^mul_mat(_id)?/.*bf16",
        backends=("vulkan",),
    ),
    Finding(
        8,
        "ggml-vulkan ADD_ID",
        "a 4-d a: dim 3 skipped, silently",
        "0017-vulkan-add-id-3d.patch",
        cases=r"^add_id/.*4d",
        backends=("vulkan",),
    ),
    Finding(
        26,
        "ggml-backend-meta views",
        "a view at an offset inside one element of its split dim had its offset scaled to each device's share",
        "0018-meta-view-offset-inside-split-element.patch",
        cases=r"^(delta_net|conv_state)",
        backends=("meta",),
    ),
    Finding(
        27,
        "gguf writer",
        "general.alignment set with gguf_set_val_u32 was stored but not used",
        "0021-gguf-set-alignment.patch",
    ),
    Finding(
        32,
        "ggml-backend-meta reduction",
        "a device's empty share zeroed by a scale by 0 of unset memory: now and then all-NaN results",
        "0033-meta-zero-empty-share-with-fill.patch",
        backends=("meta",),
    ),
    Finding(
        33,
        "ggml-backend-meta segmented splits",
        "a computed tensor of a split in several segments read back in the wrong order",
        "0026-meta-split-segments.patch",
        cases=r"^delta_net/.*/(qwen35|qwen3next)",
        backends=("meta",),
    ),
    Finding(
        34,
        "ggml-backend-meta single-holder splits",
        "a split that puts a whole tensor on one device got an axis from the shapes it went through",
        "0028-meta-single-holder-computes-alone.patch",
        backends=("meta",),
    ),
    Finding(
        44,
        "ggml-backend-meta partial sums",
        "a partial sum a later node consumed read back as n_devices times its value",
        "0031-meta-reduced-partial-reads-whole.patch",
        backends=("meta",),
    ),
    Finding(
        45,
        "ggml-backend-meta under an eval callback",
        "a split's nodes could not be read node by node",
        "0032-meta-eval-callback-per-node.patch",
        backends=("meta",),
    ),
    Finding(
        51,
        "ggml-backend-meta views",
        "a view of a permuted tensor is not split: the seed's graph (its conv windows written through a permuted "
        "view) aborted with `view of permuted tensor not implemented`",
        "0001-meta-split-permuted-view.patch",
        cases=r"^(conv_state|delta_net)/",
        backends=("meta",),
    ),
    Finding(
        52,
        "ggml-backend-meta ARANGE",
        "ARANGE has no split state: a graph that builds an index on the device with it aborts in allocation",
        "0005-meta-arange-mirrored.patch",
        cases=r"^arange/",
        backends=("meta",),
    ),
    # found by running the suite on older trees (docs/compat.md): fixed upstream, present in the versions before
    Finding(
        47,
        "ggml-cpu unary, GLU and SCALE ops",
        "a BF16 input (gelu, silu, the GLU family, scale, scale_bias): supports_op accepts it, the kernel aborts "
        '("fatal error")',
        fixed_in="0.25.3",
        cases=r"^(scale|scale_bias|gelu|gelu_quick|gelu_erf|silu|reglu|geglu|geglu_erf|geglu_quick|swiglu)"
        r"(_swapped|_split)?/bf16",
        backends=("cpu",),
    ),
    Finding(
        48,
        "ggml-cpu IM2COL",
        "an F16 result from an F32 kernel (and conv_1d, conv_1d_dw, im2col_3d, built on it): "
        "GGML_ASSERT(src0->type == GGML_TYPE_F16) aborts",
        fixed_in="0.20.0",
        cases=r"^(im2col/f32/\dd_f16_|im2col_3d/f32/f16_|conv_1d/f32/|conv_1d_dw/f32/)",
        backends=("cpu",),
    ),
    Finding(
        49,
        "ggml-cpu CONV_2D_DW (direct)",
        "an F16 kernel: wrong results (NMSE 3.7e38)",
        fixed_in="0.20.0",
        cases=r"^conv_2d_dw_direct/f16/",
        backends=("cpu",),
    ),
    Finding(
        50,
        "ggml-cpu CONV_TRANSPOSE_2D",
        "a batch of two inputs: wrong results (NMSE 0.48)",
        fixed_in="0.25.3",
        cases=r"^conv_transpose_2d_p0/f(16|32)/1$",
        backends=("cpu",),
    ),
    Finding(
        31,
        "llama.cpp recurrent memory",
        "memory_seq_rm granted a rollback of all n tokens of the last ubatch, whose state before it no slot keeps",
        "llama/0002-recurrent-rollback-within-the-last-ubatch.patch",
    ),
    Finding(
        42,
        "llama.cpp quantizer, qwen4exp",
        "its 2-D norm weights were quantized and every quantized decode aborted",
        "llama/0004-qwen4exp-ple-norms-unquantized.patch",
    ),
    Finding(
        43,
        "llama.cpp tensor-split policy",
        "a gated Q quantized with a block larger than a head's rows split one head per device while K went by pairs",
        "llama/0005-split-gated-q-granularity.patch",
    ),
)


def by_number(number: int) -> Finding:
    """The finding of that number (KeyError if docs/findings.md's table has no upstream bug of it)."""
    for f in FINDINGS:
        if f.number == number:
            return f
    raise KeyError(f"no upstream finding {number} (python -m pyggml findings lists them)")


@cache
def _patch_states() -> dict[str, str]:
    tree = build_info().get("tree") or {}
    return {p["name"]: p["state"] for p in tree.get("patches", [])}


def fixed_here(f: Finding) -> str | None:
    """How this build has the finding fixed ("patch 0013 applied", "fixed upstream in ggml 0.20.0"), None if it
    lacks every fix (the finding may be present)."""
    tree = build_info().get("tree") or {}
    version = tree.get("ggml_version", "")
    name = f.patch.removeprefix("llama/")
    state = _patch_states().get(name)
    if f.patch and (state in ("applied", "already in the source") or (not tree and f.patch)):
        return f"patch {f.patch.split('-', 1)[0]} {state or 'applied (a build without a record: the pin)'}"
    if f.fixed_in and version and version_key(version) >= version_key(f.fixed_in):
        return f"fixed upstream in ggml {f.fixed_in} (this is {version})"
    if f.first_in and version and version_key(version) < version_key(f.first_in):
        return f"not in ggml {version} (it came with {f.first_in})"
    return None


def covering(case: str, backend: str) -> list[Finding]:
    """The findings this build may have (it lacks their fixes) that show on this case and backend."""
    kind = Target.parse(backend).family  # cpu (its variants too), vulkan, meta, ...
    return [
        f
        for f in FINDINGS
        if f.cases and re.search(f.cases, case) and (not f.backends or kind in f.backends) and not fixed_here(f)
    ]


def named(record: Record) -> list[int]:
    """The findings a `known` record of explain() names ("docs/findings.md 26 or 51: ..."), [] for any other."""
    m = re.match(r"known: upstream bug, docs/findings.md ([\d or]+):", record.message or "")
    return [int(n) for n in m.group(1).split(" or ")] if record.status == Status.KNOWN and m else []


def node_case(op: str, source_types: list[str]) -> str:
    """The name a case of a node's op and sources' types has (`opdb.case_name` without a variant: "mul_mat/bf16_f32"),
    for the findings' patterns: a finding covers a model's node as it covers a case of the same op and types."""
    seen: list[str] = []
    for t in source_types:
        if t.lower() not in seen:
            seen.append(t.lower())
    return f"{op}/{'_'.join(seen) or 'f32'}"


def covering_node(op: str, source_types: list[str], backend: str) -> str:
    """Why a failing node of `op` with these sources' types, computed on `backend`, is known: the findings this build
    may have that cover its case, said as `explain` says them for a case; "" none."""
    found = covering(node_case(op, source_types), backend)
    if not found:
        return ""
    numbers = " or ".join(str(f.number) for f in found)
    lacks = ", ".join(f.patch or f"the upstream fix (ggml {f.fixed_in})" for f in found)
    return f"upstream bug, docs/findings.md {numbers}: {found[0].what} (this build lacks {lacks})"


def explain(records: list[Record]) -> list[Record]:
    """The records with each failure or death that findings of this build cover made `known`, naming them (all
    of them where several could explain it: the build lacks each one's fix)."""
    out = []
    for r in records:
        found = covering(r.case, r.backend) if r.status in (Status.FAIL, Status.ERROR) else []
        if found:
            numbers = " or ".join(str(f.number) for f in found)
            lacks = ", ".join(f.patch or f"the upstream fix (ggml {f.fixed_in})" for f in found)
            r = verdict.explained(
                r, f"upstream bug, docs/findings.md {numbers}: {found[0].what} (this build lacks {lacks})"
            )
        out.append(r)
    return out


def run(backends: list[str], run_check: Callable[..., list[Record]], jobs: int = 2) -> list[dict]:
    """Each finding on this build: its fix here (patch or upstream version) and, where cases show it, what its
    cases do on the given backends, each run in a worker process (an abort ends only the worker).

    Args:
        backends: the backends to run on (cpu, vulkan0, meta:cpu,cpu).
        run_check: `pyggml.testing.check.run_check` (the command line's, handed down).
        jobs: worker processes.

    Returns:
        A dict per finding: finding, where, what, patch, fixed_in, fixed_here, state (present, absent, not run),
        detail, and the cases that showed it.
    """
    from pyggml.testing.engine import cases

    def shows_on(f: Finding) -> list[str]:
        return [b for b in backends if not f.backends or Target.parse(b).family in f.backends]

    # one run per backend of every case some finding covers there (findings share cases: run each once)
    records: list[Record] = []
    for b in backends:
        patterns = [f"(?:{f.cases})" for f in FINDINGS if f.cases and b in shows_on(f)]
        if patterns:
            records += run_check([b], "|".join(patterns), progress=None, jobs=max(1, jobs))
    rows = []
    for f in FINDINGS:
        row = {"finding": f.number, "where": f.where, "what": f.what, "patch": f.patch, "fixed_in": f.fixed_in}
        row["fixed_here"] = fixed_here(f)
        on = shows_on(f)
        mine = [r for r in records if r.backend in on and f.cases and re.search(f.cases, r.case)]
        if not f.cases:
            row["state"], row["detail"] = "not run", "shown by tests and reproducers, not by the op cases"
        elif not on:
            row["state"], row["detail"] = "not run", f"shows on {', '.join(f.backends)}: no such backend here"
        elif not cases.select(f.cases):
            row["state"], row["detail"] = "not run", "no case of this build matches"
        else:
            bad = [r for r in mine if r.status.bad or f.number in named(r)]
            ran = [r for r in mine if r.status != Status.UNSUPPORTED and r.status != Status.SKIPPED]
            row["state"] = "present" if bad else "absent" if ran else "not run"
            row["detail"] = (
                f"{len(bad)} of {len(mine)} records fail or die on {', '.join(on)}"
                if bad
                else f"{len(ran)} records pass on {', '.join(on)}"
                if ran
                else "every case unsupported here"
            )
            row["cases"] = sorted({r.case for r in bad})
        rows.append(row)
    return rows


def export(directory: str) -> list[str]:
    """Write each finding that cases show as files an upstream developer can run without pyggml: finding-N.txt,
    its cases' nodes in test-backend-ops' --test-file format, and finding-N.sh, which runs them with
    test-backend-ops on the backend they show on (against the CPU, test-backend-ops' reference). Returns the
    paths written."""
    from pathlib import Path

    from pyggml.testing.engine import cases, tbo

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for f in FINDINGS:
        if not f.cases or "meta" in f.backends:  # a split over devices is no test-backend-ops node
            continue
        lines = [line for c in cases.select(f.cases) if (line := tbo.test_file_line(c)) is not None]
        if not lines:
            continue
        test_file = out / f"finding-{f.number}.txt"
        test_file.write_text("\n".join(lines) + "\n")
        on_cpu = not f.backends or f.backends[0] == "cpu"
        # test-backend-ops compares a backend with the CPU: a CPU bug shows there only as an abort (perf mode
        # computes each node)
        how = "perf -b CPU" if on_cpu else "test -b Vulkan0"
        script = out / f"finding-{f.number}.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"# docs/findings.md {f.number}, {f.where}: {f.what}\n"
            f"# fixed by: {f.patch or 'no patch of pyggml'}{f'; upstream in ggml {f.fixed_in}' if f.fixed_in else ''}\n"
            "# Run with llama.cpp's test-backend-ops built from the tree under test, exported by pyggml built on\n"
            "# that same tree (the lines hold its op and type numbers): each line of the .txt file is one node.\n"
            + (
                "# On the CPU, test-backend-ops has no reference to compare with: an abort shows, a wrong value needs\n"
                f"# pyggml's oracle (python -m pyggml check --backend cpu --only '{f.cases}').\n"
                if on_cpu
                else "# Computed on the backend below and compared with the CPU.\n"
            )
            + f'"${{TEST_BACKEND_OPS:-test-backend-ops}}" {how} --test-file "$(dirname "$0")/{test_file.name}"\n'
        )
        script.chmod(0o755)
        written += [str(test_file), str(script)]
    return written


def main(args: Any, run_check: Callable[..., list[Record]], backends: list[str]) -> int:
    """`python -m pyggml findings [--json] [--export DIR]`: which findings this build still has."""
    import json
    import sys

    from pyggml.testing.engine.session import backend_error

    if args.export:
        try:
            written = export(args.export)
        except OSError as e:
            print(f"findings: --export {args.export}: {e.strerror}", file=sys.stderr)
            return 2
        print("\n".join(written))
        return 0
    for b in backends:  # a backend this build or machine lacks: say so, as check does
        why = backend_error(b)
        if why:
            print(f"findings: --backend {b}: {why}", file=sys.stderr)
            return 2
    if args.jobs < 1:
        print(f"findings: -j must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    rows = run(backends, run_check, args.jobs)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    tree = build_info().get("tree") or {}
    print(f"ggml {tree.get('ggml_version', '?')} ({tree.get('tree', 'pin')} tree); backends: {', '.join(backends)}")
    for r in rows:
        fix = r["fixed_here"] or f"lacks {r['patch'] or 'the upstream fix'}"
        print(f"{r['finding']:>3} {r['state']:<8} {r['where']}: {r['what']}", file=sys.stdout)
        print(f"    {r['detail']}; {fix}")
    return 0
