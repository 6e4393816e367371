"""The one verdict pipeline: a record type with a status, one place that resolves a case's bound,
skip and known disagreement on a backend (each with its reason), and one comparison.

`check`, grad mode, JUnit, the pytest plugin, pyggml's own tests and the fuzzers all judge
through here, so a case cannot pass in one and fail in another for a reason of their own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pyggml._native import ffi, lib, tree_version, user_tree
from pyggml.errors import OpError, Unsplittable, Unsupported
from pyggml.target import matches as backend_matches
from pyggml.testing.engine.opdb import Bound, ElementBound, Known, Skip

if TYPE_CHECKING:
    from pyggml.testing.engine.cases import Case


class Status(StrEnum):
    PASS = "pass"
    KNOWN = "known"  # a disagreement findings.md records
    UNSUPPORTED = "unsupported"
    SKIPPED = "skipped"
    FAIL = "fail"
    ERROR = "error"

    @property
    def bad(self) -> bool:
        return self in (Status.FAIL, Status.ERROR)


class Mismatch(Exception):
    """A property a case checks on the backend itself did not hold (e.g. rollback == rerun): a failure."""


@dataclass
class Record:
    case: str
    backend: str
    status: Status
    error: float | None = None  # NMSE against the oracle (worst output); grad mode: worst relative error
    bound: float | None = None
    message: str = ""
    cross: dict = field(default_factory=dict)  # other backend -> NMSE between the two results
    seconds: float = 0.0
    ops: list = field(default_factory=list)  # the op kinds the case's graphs compute


# --- the error measures and the comparison ----------------------------------------------------------------
def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.asarray(expected, dtype=np.float64).ravel()
    if a.shape != e.shape:
        return float("inf")
    off = ~np.isfinite(a)
    if (off != ~np.isfinite(e)).any() or not np.array_equal(a[off], e[off], equal_nan=True):
        return float("inf")  # NaN and Inf must sit where the oracle has them
    fin = np.isfinite(e)
    num = np.sum((a[fin] - e[fin]) ** 2)
    den = np.sum(e[fin] ** 2)
    return float(num / den) if den > 0 else float(num)


def max_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """The largest per-element error relative to the output's scale (max |expected|), finite entries."""
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.asarray(expected, dtype=np.float64).ravel()
    fin = np.isfinite(e) & np.isfinite(a)
    if not fin.any():
        return 0.0
    diff = np.abs(a[fin] - e[fin]).max()
    scale = np.abs(e[fin]).max()
    return float(diff / scale) if scale > 0 else float(diff)


@dataclass
class Comparison:
    """One output against its oracle.

    Attributes:
        ok: whether it held to its bounds.
        nmse: its NMSE against the oracle, the whole output.
        max_error: its largest error, of the output's scale (max |expected|).
        message: what failed ("" when it held).
        units: where an `ElementBound` judged it: its largest element error, in rounding units (0 otherwise).
        row_units: likewise, its worst row's root mean square error in rounding units.
    """

    ok: bool
    nmse: float = 0.0
    max_error: float = 0.0
    message: str = ""
    units: float = 0.0
    row_units: float = 0.0


def compare(
    actual: np.ndarray,
    expected: np.ndarray,
    nmse_bound: float,
    max_error_bound: float,
    elements: ElementBound | None = None,
) -> Comparison:
    """The suite's verdict on one output: same size, NaN and Inf in the same places, NMSE within
    nmse_bound and every element within max_error_bound of the output's scale (a single wrong element
    of a large output can hide under an NMSE bound). Bounds of 0 mean bit-exact.

    Args:
        actual: the computed values.
        expected: the oracle's.
        nmse_bound: the NMSE bound (0 with max_error_bound 0: bit-exact).
        max_error_bound: the largest error one element may have, of the output's scale.
        elements: where the oracle models all but the kernel's order of float sums, the bound of every element
            and row in units of that rounding (`ElementBound`, `within_units`): held after the NMSE's.

    Returns:
        The Comparison: the whole output's NMSE and largest error, and with `elements` its figures in units.
    """
    judged = _compare(actual, expected, nmse_bound, max_error_bound)
    if elements is None or not judged.ok or (nmse_bound == 0 and max_error_bound == 0):
        return judged
    return within_units(np.asarray(actual), np.asarray(expected), elements, judged)


def within_units(actual: np.ndarray, expected: np.ndarray, bound: ElementBound, judged: Comparison) -> Comparison:
    """`judged` (the whole output's comparison, which held) with every element and every row held to `bound`:
    |actual - expected| <= bound.element units for each element, the root mean square in units <= bound.row for
    each row (along bound.axes). A unit is at least F32's smallest normal (a kernel may flush below it); finite
    elements only (NaN and Inf were held to their places already).

    Args:
        actual: the computed values.
        expected: the oracle's, same size.
        bound: the element and row bounds.
        judged: the comparison so far.

    Returns:
        `judged` with its figures in units (`units`, `row_units`), failed with the worst element or row where one
        is off.
    """
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual, dtype=np.float64).reshape(e.shape)
    unit = np.maximum(np.broadcast_to(np.asarray(bound.unit, dtype=np.float64), e.shape), np.finfo(np.float32).tiny)
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = np.abs(a - e) / unit
    ratio = np.where(np.isfinite(ratio), ratio, 0.0)  # NaN and Inf: placed alike already
    worst = float(ratio.max()) if ratio.size else 0.0
    axes = tuple(x % e.ndim for x in bound.axes) if e.ndim else ()
    if bound.rows is not None:  # rows by number: the root mean square of each number's elements
        labels = np.broadcast_to(np.asarray(bound.rows), e.shape).ravel()
        counts = np.bincount(labels)
        sums = np.bincount(labels, weights=(ratio**2).ravel(), minlength=counts.size)
        rows = np.sqrt(sums[counts > 0] / counts[counts > 0])
        numbers = np.flatnonzero(counts)
    else:
        rows = np.sqrt(np.mean(ratio**2, axis=axes)) if axes else ratio
    row_worst = float(np.max(rows)) if rows.size else 0.0
    out = replace(judged, units=worst, row_units=row_worst)
    what = f" ({bound.why})" if bound.why else ""
    if worst > bound.element:
        at = np.unravel_index(int(np.argmax(ratio)), e.shape)
        element = tuple(int(i) for i in at)
        return replace(
            out,
            ok=False,
            message=f"element {element}: {a[at]!r} vs {e[at]!r}, off by {worst:.3g} rounding units > {bound.element:g}"
            f"{what}; NMSE {judged.nmse:.2e}",
        )
    if row_worst > bound.row:
        if bound.rows is not None:
            where = f"number {int(numbers[int(np.argmax(rows))])}"
        else:
            at = np.unravel_index(int(np.argmax(rows)), rows.shape)
            kept = [d for d in range(e.ndim) if d not in axes]
            where = ", ".join(f"axis {d}: {int(i)}" for d, i in zip(kept, at))
        return replace(
            out,
            ok=False,
            message=f"row ({where}) off by {row_worst:.3g} rounding units (root mean square) > {bound.row:g}{what}; "
            f"NMSE {judged.nmse:.2e}",
        )
    return out


def _compare(actual: np.ndarray, expected: np.ndarray, nmse_bound: float, max_error_bound: float) -> Comparison:
    """`compare` without an element bound."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.size != e.size:
        return Comparison(False, float("inf"), float("inf"), f"{a.size} elements, the oracle has {e.size}")
    a = a.reshape(e.shape)
    if nmse_bound == 0 and max_error_bound == 0:
        same = np.array_equal(a, e, equal_nan=a.dtype.kind == "f")
        return Comparison(
            same,
            0.0 if same else float("inf"),
            0.0 if same else float("inf"),
            "" if same else f"{int((a != e).sum())} element(s) differ (bit-exact case)",
        )
    if a.dtype == np.float16 and e.dtype == np.float16:  # an F16 node (a KV cache) is most often bit for bit its oracle
        if np.array_equal(a.view(np.uint16), e.view(np.uint16)):
            return Comparison(True, 0.0, 0.0)
        a, e = a.astype(np.float32), e.astype(np.float32)  # exact
    if a.dtype == np.float32 and e.dtype == np.float32:
        # a node's values and its oracle's, in one pass in C, float64 (native/node_copies.c): NumPy's float64
        # difference and its five passes took 1.1 s of a 6 s check of a 0.8B model (899 nodes)
        ac, ec, out = np.ascontiguousarray(a), np.ascontiguousarray(e), ffi.new("double[5]")
        if lib.pyggml_compare_f32(ffi.from_buffer("float[]", ec), ffi.from_buffer("float[]", ac), ac.size, out):
            num, den, diff, scale = out[1], out[0], out[3], out[4]
            err, worst = (num / den if den > 0 else num), (diff / scale if scale > 0 else diff)
            return _judged(err, worst, nmse_bound, max_error_bound, a, e)
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    if np.isfinite(a64).all() and np.isfinite(e64).all():  # the common case, in fewer passes (a model's logits)
        err, worst = _finite_errors(a64.ravel(), e64.ravel())
    else:
        nonfinite = _nonfinite_mismatch(a64, e64)
        if nonfinite:
            return Comparison(False, float("inf"), float("inf"), nonfinite)
        err, worst = nmse(a64, e64), max_error(a64, e64)
    return _judged(err, worst, nmse_bound, max_error_bound, a64, e64)


def _judged(
    err: float, worst: float, nmse_bound: float, max_error_bound: float, a: np.ndarray, e: np.ndarray
) -> Comparison:
    """The Comparison of figures err (NMSE) and worst (largest error of the scale) against the bounds."""
    if err > nmse_bound:
        return Comparison(False, err, worst, f"NMSE {err:.2e} > {nmse_bound:.0e}")
    if worst > max_error_bound:
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        at = np.unravel_index(np.argmax(np.abs(a64 - e64) * np.isfinite(e64)), e64.shape)
        return Comparison(
            False,
            err,
            worst,
            f"largest error {worst:.2e} of the output's scale > {max_error_bound:.1e} "
            f"(at {tuple(int(i) for i in at)}: {a64[at]!r} vs {e64[at]!r})",
        )
    return Comparison(True, err, worst)


def _finite_errors(a: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """`nmse` and `max_error` of two finite float64 vectors, in one difference, summed in float64."""
    d = a - e
    # numpy's own loop: the BLAS float64 dot of this machine's numpy is slow on large vectors (a model's logits)
    num = float(np.einsum("i,i->", d, d, dtype=np.float64))
    den = float(np.einsum("i,i->", e, e, dtype=np.float64))
    diff = float(np.abs(d).max()) if d.size else 0.0
    scale = float(np.abs(e).max()) if e.size else 0.0
    return (num / den if den > 0 else num), (diff / scale if scale > 0 else diff)


def _nonfinite_mismatch(a64: np.ndarray, e64: np.ndarray) -> str:
    """Where NaN, +Inf or -Inf are not in the same places in both: what differs; "" when they are."""
    for what, fn in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        if (fn(a64) != fn(e64)).any():
            extra, missing = int((fn(a64) & ~fn(e64)).sum()), int((fn(e64) & ~fn(a64)).sum())
            why = [f"{what} at {extra} position(s) the oracle does not have"] if extra else []
            why += [f"no {what} at {missing} position(s) where the oracle has it"] if missing else []
            return "; ".join(why)
    return ""


# --- resolving a case's policy on a backend -----------------------------------------------------------------
def default_max_error(nmse_bound: float) -> float:
    """30 root-mean-square errors of the NMSE bound: the largest error one element may have."""
    return 30 * nmse_bound**0.5


def _matches(backend: str, types: frozenset[str], rule_backend: str, rule_types: Sequence[str]) -> bool:
    return backend_matches(backend, rule_backend) and (not rule_types or bool(types & set(rule_types)))


def _most_specific(rules: Sequence[Any], backend: str, types: frozenset[str]) -> Any:
    """The matching rule with the longest backend prefix, then with types; the first such rule wins."""
    hits = [r for r in rules if _matches(backend, types, r.backend, r.types)]
    return max(hits, key=lambda r: (len(r.backend), bool(r.types)), default=None)


def bounds(case: Case, backend: str) -> tuple[float, float]:
    """(NMSE bound, largest-error bound) of `case` on `backend`: the case's own, or an override stated
    for that backend or type (e.g. Vulkan's F16 copy of a non-contiguous F32 operand)."""
    return resolve_bound(case.bounds, backend, case.types, (case.nmse_bound, case.max_error_bound))


def resolve_bound(
    rules: Sequence[Bound], backend: str, types: frozenset[str], plain: tuple[float, float]
) -> tuple[float, float]:
    """The one rule by which a case and a node of a model get their bounds: of the rules stated for a backend
    (a name prefix) or for types, the most specific that holds for `backend` and `types`; else `plain`, the
    op's own (NMSE, largest error).

    Args:
        rules: the op's (and a case's sample's) bounds.
        backend: where the result was computed ("cpu", "vulkan0", "meta:cpu,cpu"; "" when unknown).
        types: the ggml type names involved, lower case.
        plain: the bound when no rule holds.

    Returns:
        (NMSE bound, largest-error bound).
    """
    rule: Bound | None = _most_specific([b for b in rules if b.backend or b.types], backend, types)
    if rule is None:
        return plain
    return rule.nmse, rule.max_error if rule.max_error is not None else default_max_error(rule.nmse)


class HasRules(Protocol):
    """What known() reads of a case (an op case, a scenario case or a grad case)."""

    @property
    def known(self) -> Sequence[Known]: ...
    @property
    def types(self) -> frozenset[str]: ...


def known(case: HasRules, backend: str) -> str | None:
    """Why `backend` is known to disagree with the oracle on this case, or None."""
    rule: Known | None = _most_specific(case.known, backend, case.types)
    return rule.why if rule else None


# Mesa's lavapipe (llvmpipe) compiles the Vulkan shaders of these types' products for 30-90 s each, and
# NVFP4's does not finish in 15 minutes (docs/findings.md): on it they are skipped unless asked for
SLOW_ON_LAVAPIPE = ("q1_0", "q2_0", "tq1_0", "tq2_0", "nvfp4")
SKIPS: list[Skip] = [
    Skip(
        "vulkan",
        "lavapipe compiles this type's shaders for minutes (--slow runs it)",
        SLOW_ON_LAVAPIPE,
        device="llvmpipe",
    )
]


def skipped(case: Case, backend: str, slow: bool = False) -> str | None:
    """Why `case` is not run on `backend` (None: run it). `slow` runs what is skipped only for its cost."""
    if slow:
        return None
    for rule in [*SKIPS, *case.skips]:
        if _matches(backend, case.types, rule.backend, rule.types) and _device_is(backend, rule.device):
            return rule.why
    return None


def _device_is(backend: str, words: str) -> bool:
    if not words:
        return True
    from pyggml.backend import device

    return words in device(backend).description.lower()


# --- the judge: every verdict of the project is ruled here --------------------------------------------------
@dataclass(frozen=True)
class Policy:
    """What an op states for one result of it: the bounds its comparison is held to and, where a backend is known
    to disagree with the oracle on it, why (None: not known to)."""

    nmse: float
    max_error: float
    known: str | None = None


def policy(
    bounds: Sequence[Bound],
    known_rules: Sequence[Known],
    backend: str,
    types: frozenset[str],
    plain: tuple[float, float],
) -> Policy:
    """The one rule by which a case, a node of a model, a grad case and a reproducer get their policy on a backend:
    the most specific bound and the most specific known disagreement stated for `backend` (a name prefix) and
    `types` (`resolve_bound`); the op's plain bound where no bound rule holds.

    Args:
        bounds: the op's (and a case's sample's) bounds.
        known_rules: its known disagreements.
        backend: where the result was computed ("cpu", "vulkan0", "meta:cpu,cpu"; "" when unknown).
        types: the ggml type names involved, lower case.
        plain: (NMSE, largest error) when no bound rule holds.

    Returns:
        The Policy.
    """
    nmse_bound, max_error_bound = resolve_bound(bounds, backend, types, plain)
    rule: Known | None = _most_specific(known_rules, backend, types)
    return Policy(nmse_bound, max_error_bound, rule.why if rule else None)


def rule(
    name: str,
    backend: str,
    comparisons: Sequence[Comparison],
    rules: Policy,
    seconds: float = 0.0,
    note: str = "",
    ops: Sequence[str] = (),
) -> Record:
    """The judge: the record of a result's comparisons (one per output) under its op's policy on `backend`.

    `pass` when every comparison holds; else `known`, naming why, when the policy knows this backend to disagree;
    else `fail` with the worst comparison's message.

    Args:
        name: what the record is of (a case, `model.gguf/MUL_MAT`, a reproducer).
        backend: where the result was computed.
        comparisons: the outputs' comparisons with their oracle (`compare`), at least one.
        rules: the policy (`policy`); its NMSE bound goes into the record.
        seconds: what it took.
        note: said after the verdict's own message ("312 nodes", "against cpu: ...").
        ops: the op kinds it computed.

    Returns:
        The Record.
    """
    worst = max(comparisons, key=lambda v: (not v.ok, v.nmse))
    err = max(v.nmse for v in comparisons)
    ops = list(ops)
    if worst.ok:
        return Record(name, backend, Status.PASS, err, rules.nmse, note, seconds=seconds, ops=ops)
    said = "; ".join(x for x in (worst.message, note) if x)
    if rules.known:
        message = f"known: {rules.known}" + (f" ({said})" if said else "")
        return Record(name, backend, Status.KNOWN, err, rules.nmse, message, seconds=seconds, ops=ops)
    return Record(name, backend, Status.FAIL, err, rules.nmse, said, seconds=seconds, ops=ops)


def judge(
    case: Case, backend: str, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], seconds: float = 0.0
) -> Record:
    """The record of one case's outputs against its oracle's on `backend`."""
    if len(actual) != len(expected):
        return failed(case.name, backend, f"{len(actual)} outputs, the oracle has {len(expected)}", seconds)
    rules = policy(case.bounds, case.known, backend, case.types, (case.nmse_bound, case.max_error_bound))
    return rule(
        case.name,
        backend,
        [compare(a, e, rules.nmse, rules.max_error) for a, e in zip(actual, expected)],
        rules,
        seconds,
    )


def within(figure: float, bound: float, what: str) -> Comparison:
    """The comparison of a figure that is already an error (a grad case's relative error, two runs' logits NMSE)
    with its bound."""
    ok = figure <= bound
    return Comparison(ok, figure, 0.0, "" if ok else f"{what} {figure:.2e} > {bound:.0e}")


def of_node(v: Any) -> Status:
    """A node's own status (a `NodeVerdict`): `pass` when it held to its bound (or was not compared), `known` when
    it did not and a known disagreement of its op covers it on its backend, `fail` otherwise."""
    return Status.PASS if v.ok else Status.KNOWN if v.known else Status.FAIL


def nodes(name: str, backend: str, verdicts: Sequence[Any]) -> Record:
    """The record of one op kind's nodes in a model run (`check --model`), each node judged by `rule`'s terms.

    Args:
        name: the record's name (`model.gguf/MUL_MAT`).
        backend: where they were computed.
        verdicts: the kind's `pyggml.testing.engine.nodes.NodeVerdict`s.

    Returns:
        `fail` when a node failed that no known disagreement covers (naming the first); else `known` when one
        failed that one covers; else `pass` when any was checked; else `skipped` (unread, or no oracle).
    """
    checked = [v for v in verdicts if v.comparison is not None]
    unread = [v for v in verdicts if v.unread]
    said = f"; {len(unread)} unread" if unread else ""
    worst = max((v.comparison.nmse for v in checked), default=None)
    for status in (Status.FAIL, Status.KNOWN):
        bad = [v for v in checked if of_node(v) == status]
        if bad:
            first = bad[0]
            at = f" ({first.step})" if first.step else ""
            why = f"known: {first.known} (" if status == Status.KNOWN else ""
            message = f"{why}{len(bad)} of {len(checked)} nodes; first: {first.name!r}{at}: {first.comparison.message}"
            message += ")" if why else ""
            return Record(name, backend, status, worst, first.nmse_bound, message + said)
    if checked:
        return Record(name, backend, Status.PASS, worst, message=f"{len(checked)} nodes{said}")
    if unread:
        return skip(name, backend, f"{len(unread)} nodes unread: {unread[0].error}")
    return skip(name, backend, f"{len(verdicts)} nodes, no oracle")


# --- the records of results that were not compared -----------------------------------------------------------
def failed(name: str, backend: str, why: str, seconds: float = 0.0) -> Record:
    """A property a run checks on the backend itself did not hold (a rollback against a rerun, an output count)."""
    return Record(name, backend, Status.FAIL, message=why, seconds=seconds)


def unsupported(name: str, backend: str, why: str) -> Record:
    """The backend does not compute it (its supports_op, a meta split it cannot make, a tree's kernel)."""
    return Record(name, backend, Status.UNSUPPORTED, message=why)


def skip(name: str, backend: str, why: str) -> Record:
    """Not run, or not judged, and why."""
    return Record(name, backend, Status.SKIPPED, message=why)


def error(name: str, backend: str, why: str, seconds: float = 0.0) -> Record:
    """It did not run to a result: why (an exception, a death, a backend missing)."""
    return Record(name, backend, Status.ERROR, message=why, seconds=seconds)


def unavailable(backend: str, e: BaseException | str, name: str = "*") -> Record:
    """A backend that could not be made: one error record for what was to run on it."""
    return error(name, backend, f"backend unavailable: {e}")


def timed(name: str, backend: str, message: str = "", seconds: float = 0.0) -> Record:
    """A case that was timed (check's perf mode): not judged against an oracle, so `pass` says only that it ran."""
    return Record(name, backend, Status.PASS, message=message, seconds=seconds)


def explained(record: Record, why: str) -> Record:
    """A failure or death a finding of this build explains (`findings.explain`): `known`, saying why."""
    if not record.status.bad:
        return record
    return replace(record, status=Status.KNOWN, message=f"known: {why} ({record.message})")


def attempt(case_name: str, backend: str, fn: Callable[[], Any]) -> tuple[Any, Record | None]:
    """Run `fn` (a case's execution); an exception becomes the case's record: unsupported, fail (a
    property the case checks on the backend did not hold) or error. The run goes on either way."""
    start = time.perf_counter()
    try:
        return fn(), None
    except (Unsupported, Unsplittable) as e:  # a meta device that cannot split a node cannot compute it
        return None, unsupported(case_name, backend, f"not supported: {e}")
    except Mismatch as e:
        return None, failed(case_name, backend, str(e), time.perf_counter() - start)
    except OpError as e:
        if user_tree():  # the tree's own ggml refuses the arguments the pin takes: its contract, not a bug
            return None, unsupported(case_name, backend, f"ggml {tree_version()} refuses it: {e}")
        return None, error(case_name, backend, f"{type(e).__name__}: {e}", time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - a failing case must not stop the run (a guard overwritten included)
        return None, error(case_name, backend, f"{type(e).__name__}: {e}", time.perf_counter() - start)


# --- judging a death -------------------------------------------------------------------------------------------
# what pyggml._native's abort callback writes before ggml aborts: "pyggml: ggml aborted: /build/.../ggml-cpu/ops.cpp:5092:
# src0->type = 1 (f16) not supported"
_ABORTED = re.compile(r"^pyggml: ggml aborted: (?P<file>[^:\n]*):(?P<line>\d+): (?P<text>.*)$", re.M)


def ggml_abort(stderr: str) -> str | None:
    """ggml's own message in a dead process's stderr (GGML_ABORT's file, line and text, as the abort callback saw
    them), the file from ggml's `src/` on; None when ggml did not abort (a segfault, a Python error)."""
    found = _ABORTED.findall(stderr)
    if not found:
        return None
    path, line, text = found[-1]
    parts = path.replace("\\", "/").split("/")
    short = "/".join(parts[parts.index("src") + 1 :] if "src" in parts else parts[-2:])
    return f"{short}:{line}: {text.strip()}"


def _unimplemented(message: str) -> bool:
    """A kernel's dispatch without a branch for the types it was given: ggml's "... not supported" aborts, and
    ggml-cpu's `default: GGML_ABORT("fatal error")` of its type switches."""
    where, _, text = message.partition(": ")
    return "not supported" in text or (text == "fatal error" and where.startswith("ggml-cpu/"))


def died(case: Case, backend: str, how: str, stderr: str) -> Record:
    """The record of a case whose process died computing it on `backend`, judged by what ggml said.

    Args:
        case: the case (its name, and its known disagreements).
        backend: the backend it was computing on.
        how: how the process died (SIGABRT, exit status 1).
        stderr: the process's stderr.

    Returns:
        `unsupported` with ggml's message where the tree's kernel has no branch for the types (its dispatch
        aborted: a tree older or newer than the pin); else `known` when a known disagreement covers the case on
        this backend, else `error`, with ggml's message where ggml aborted, the last lines of stderr otherwise.
        A death is never a pass.
    """
    name = case.name
    message = ggml_abort(stderr)
    if message is not None and _unimplemented(message):
        return unsupported(name, backend, f"not supported by this ggml's kernel: {message}")
    if message is not None:
        why = f"the worker process died ({how}) running this case: ggml aborted: {message}"
    else:
        tail = [line for line in stderr.splitlines() if line.strip()][-3:]
        why = f"the worker process died ({how}) running this case" + (": " + " | ".join(tail) if tail else "")
    reason = known(case, backend)
    if reason:
        return Record(name, backend, Status.KNOWN, message=f"known: {reason} ({why})")
    return error(name, backend, why)


def run_case(case: Case, runner: Any, backend: str, slow: bool = False) -> tuple[Record, list[np.ndarray] | None]:
    """Run one case on one backend and judge it: the record, and the outputs when it computed."""
    why = skipped(case, backend, slow)
    if why:
        return skip(case.name, backend, why), None
    start = time.perf_counter()
    actual, failed = attempt(case.name, backend, lambda: case.execute(runner))
    if failed is not None:
        return failed, None
    expected = case.expected()
    return judge(case, backend, actual, expected, time.perf_counter() - start), actual
