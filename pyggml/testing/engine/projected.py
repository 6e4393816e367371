"""The projected oracle of a product node: Freivalds' check with the kernel's rounding modelled.

For a product Y = W X~ (W the weight, n_out x n_in; X~ the activations as the CPU's kernel rounds them,
`oracles.dot_rounding`), a seeded sketch S gives S Y = (S W) X~: S W is computed once per weight (its blocks of rows
decoded in turn, never whole, in float64) and kept on disk (`ProjectionCache`), so a node costs O(n_out T + k n_in T)
instead of the product's O(n_out n_in T), k = S's rows.

The sketch: the weight's rows in buckets of BUCKET_ROWS consecutive rows, each row with SETS Gaussian coefficients
g_ij; S's row (b, j) sums bucket b's rows weighted by g_ij, so k = SETS n_out / BUCKET_ROWS. Buckets, not one dense
Gaussian R over all rows: a dense projection sees an error against the whole column's norm |W|_F |x_t|, so one row
of 1,024 off by 1e-4 passed 5 draws of 50 (k = 32); a bucket sees it against its own rows' rounding. Several
Gaussian coefficients per row, not one or a sign: a row's error is never weighted near zero in all of them, and two
rows off alike never cancel.

What it judges, as the full oracle judges a product's elements and rows (opdb.matmul): the unit of bucket b and
column t is u |x_t| sqrt(mean_j sum over b of g_ij^2 |w_i|^2), u = 2^-24 (each element's rounding is within its
own u |w_i| |x_t|, and rows' errors add in quadrature); a bucket may be off, as the root mean square over its SETS
combinations, by BUCKET_BOUNDS' units in one column and over the columns. The same sketch estimates the node's NMSE
without bias, |S E|^2 / |S Y|^2 (E[g^2] = 1), reported with the 99.99 % interval that holds when the error is spread
over the rows (chi-square with k degrees of freedom).

Its limit, by construction: an error in one element or one row is seen against its bucket's BUCKET_ROWS rows, so it
must be about sqrt(BUCKET_ROWS) times larger to be seen than by the full oracle's element and row bounds
(docs/llama.md, "The projected oracle"; scripts/product_power.py and tests/test_product_power.py measure both).
`check --model --oracle projected` uses it for the products it applies to and rechecks any node it fails with the
full oracle at once; the full oracle stays the default.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import warnings
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyggml import types
from pyggml.testing.engine.verdict import Comparison

# rows of the weight per bucket, and the Gaussian combinations of each bucket's rows: (S W) X~ costs SETS / BUCKET_ROWS
# of the product and a kept projection SETS / BUCKET_ROWS float64 per weight value (half a byte), an error in one row
# is seen against BUCKET_ROWS rows' rounding, and the SETS combinations make a bucket's error estimate chi-square with
# SETS degrees of freedom (a row whose coefficients are all small goes unseen with the probability that chi-square
# falls that low). Measured on a 1,024 x 1,024 node, one row off by 5e-5 caught in 181 of 200 draws with these
# (scripts/product_power.py; docs/llama.md); with rows dealt at random 182, with 8 combinations 193, with 128 rows
# and 8 combinations 154
BUCKET_ROWS = 64
SETS = 4
SEED = 58
ROUNDING_UNIT = 2.0**-24
# per kernel, what a bucket may be off by in its rounding units: in one column (the root mean square over its
# combinations), and that over the columns. Measured worst, 32 tokens, every product the projection judged
# (2026-12-08): ggml-cpu's own kernels 0.50 and 0.22 (the trained Gemma 3 270M at Q4_K_M and SmolLM2 135M at Q4_1
# with --no-repack; the qwen35-0.8b preset at Q4_K_M 0.15 and 0.05; llama.cpp's generated llama-moe, qwen35 and
# gemma3 at most 0.23 and 0.10; random Q4_K nodes 0.23 and 0.11); the kernels of the CPU's extra buffer types (the
# repacked Q4_K GEMM) 1.22 and 0.51, on the qwen35-0.8b preset. The bounds are 6 to 8 times those.
BUCKET_BOUNDS = {"plain": (3.0, 1.5), "extra": (8.0, 4.0)}
# a weight is decoded this many values at a time
BLOCK_VALUES = 1 << 22
# the cache's default size limit, in bytes (PYGGML_PROJECTION_CACHE_BYTES), and its folder (PYGGML_CACHE_DIR)
CACHE_BYTES = 2 << 30


def seed() -> int:
    """The projections' seed: $PYGGML_PROJECTION_SEED (`check --projection-seed` sets it for its runs), else SEED.

    Raises:
        ValueError: a variable that is not an integer.
    """
    given = os.environ.get("PYGGML_PROJECTION_SEED", "").strip()
    if not given:
        return SEED
    try:
        return int(given)
    except ValueError:
        raise ValueError(f"PYGGML_PROJECTION_SEED={given!r}: the projections' seed is an integer") from None


@dataclass(frozen=True)
class Sketch:
    """S: the weight's rows in buckets of `rows` consecutive rows, each row with `sets` Gaussian coefficients; S's row
    (b, j) is the sum over bucket b's rows of coefficient j times the row. Consecutive rows, not rows dealt at random:
    a bucket is then a reshape (no gather: 0.45 s a step for a vocabulary's product of 248k rows, 0.025 s as one),
    and rows that go wrong together (a kernel's tile) add their errors with independent coefficients, never cancel.

    Attributes:
        n_out: the weight's rows.
        rows: rows per bucket (the last bucket's missing rows have coefficient 0).
        sets: the combinations per bucket.
        coef: [buckets, rows, sets], float64, read-only.
    """

    n_out: int
    rows: int
    sets: int
    coef: np.ndarray

    @property
    def buckets(self) -> int:
        return int(self.coef.shape[0])

    def bucketed(self, y: np.ndarray) -> np.ndarray:
        """y's columns, [T, n_out], as [T, buckets, rows], float64 (zeros past n_out)."""
        y64 = np.asarray(y, dtype=np.float64)
        pad = self.buckets * self.rows - self.n_out
        if pad:
            y64 = np.concatenate([y64, np.zeros((y64.shape[0], pad))], axis=1)
        return y64.reshape(y64.shape[0], self.buckets, self.rows)

    def apply(self, y: np.ndarray) -> np.ndarray:
        """S y for columns y, [T, n_out] -> [T, buckets, sets], float64."""
        return np.matmul(self.bucketed(y).transpose(1, 0, 2), self.coef).transpose(1, 0, 2)


@functools.lru_cache(maxsize=16)
def sketch(seed: int, n_out: int, rows: int = BUCKET_ROWS, sets: int = SETS) -> Sketch:
    """The sketch of an n_out-row weight, drawn from (seed, n_out); drawn once per process.

    Args:
        seed: the sketch's seed.
        n_out: the weight's rows.
        rows: rows per bucket.
        sets: combinations per bucket.

    Returns:
        The Sketch.
    """
    buckets = -(-n_out // rows)
    coef = np.random.default_rng([seed, n_out]).standard_normal((buckets * rows, sets))
    coef[n_out:] = 0.0
    coef = coef.reshape(buckets, rows, sets)
    coef.setflags(write=False)
    return Sketch(n_out, rows, sets, coef)


@dataclass(frozen=True)
class Projected:
    """A weight's projection.

    Attributes:
        sw: S W, [buckets * sets, n_in] (row b * sets + j), float64.
        norms2: per bucket, the mean over its combinations of the sum of g_ij^2 |w_i|^2 over its rows, [buckets].
    """

    sw: np.ndarray
    norms2: np.ndarray


def project(
    type_name: str, raw: np.ndarray, n_out: int, n_in: int, seed: int = SEED, rows: int = BUCKET_ROWS, sets: int = SETS
) -> Projected:
    """S W of a packed 2-D weight from its bytes, BLOCK_VALUES values decoded at a time, in float64.

    Args:
        type_name: the weight's ggml type (Q4_K, F16, ...).
        raw: its bytes, n_out rows of `types.row_size(type, n_in)` bytes.
        n_out: its rows.
        n_in: its row length.
        seed: the sketch's seed.
        rows: rows per bucket.
        sets: combinations per bucket.

    Returns:
        The Projected weight.

    Raises:
        ValueError: bytes of another size than the weight's.
    """
    t = types.as_type(type_name)
    width = types.row_size(t, n_in)
    if raw.size != width * n_out:
        raise ValueError(f"{raw.size} bytes for a {type_name} weight of {n_out} rows of {n_in} ({width * n_out} bytes)")
    s = sketch(seed, n_out, rows, sets)
    sw = np.zeros((s.buckets, sets, n_in))
    norms2 = np.zeros(s.buckets)
    weight2 = np.mean(s.coef**2, axis=2)  # [buckets, rows]: each row's mean squared coefficient
    step = rows * max(1, BLOCK_VALUES // (n_in * rows))  # whole buckets at a time
    for r0 in range(0, n_out, step):
        r1 = min(n_out, r0 + step)
        block = types.decode(t, raw[r0 * width : r1 * width], (r1 - r0, n_in)).astype(np.float64)
        b0, b1 = r0 // rows, -(-r1 // rows)
        if (b1 - b0) * rows != r1 - r0:  # the last bucket's missing rows: zeros
            block = np.concatenate([block, np.zeros(((b1 - b0) * rows - (r1 - r0), n_in))])
        block = block.reshape(b1 - b0, rows, n_in)
        sw[b0:b1] = np.matmul(s.coef[b0:b1].transpose(0, 2, 1), block)  # [b, sets, n_in]
        norms2[b0:b1] = np.einsum("br,brn,brn->b", weight2[b0:b1], block, block)
    return Projected(sw.reshape(s.buckets * sets, n_in), norms2)


def cache_dir() -> Path:
    """The projections' folder: $PYGGML_CACHE_DIR/projections, else ~/.cache/pyggml/projections."""
    base = os.environ.get("PYGGML_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pyggml")
    return Path(base) / "projections"


class ProjectionCache:
    """Weights' projections kept on disk, by the weight's contents (a BLAKE2 hash of its bytes), type, shape, seed
    and k: a changed weight never reuses another's. Least recently used entries go beyond `limit` bytes. A folder
    that cannot be written, or an entry that cannot be read back as written, is said once (a warning) and the
    check goes on without it: the projection is computed again.

    Args:
        folder: where the entries are (None: `cache_dir()`).
        limit: the most bytes kept (None: $PYGGML_PROJECTION_CACHE_BYTES, else CACHE_BYTES; 0: nothing kept).
        fixed_weights: the weight tensors it is asked for keep their values while it is used (one loaded model's):
            a weight's entry is then named once, by the tensor's `place`, not hashed at every step again.
    """

    def __init__(self, folder: str | Path | None = None, limit: int | None = None, fixed_weights: bool = False) -> None:
        self.folder = Path(folder) if folder is not None else cache_dir()
        if limit is None:
            limit = int(os.environ.get("PYGGML_PROJECTION_CACHE_BYTES", CACHE_BYTES))
        self.limit = limit
        self.writable = limit > 0
        self.hits = self.misses = 0
        self.fixed_weights = fixed_weights
        self._names: dict[tuple, str] = {}  # with fixed_weights, the entries' names by the weight tensors' place
        self.said: list[str] = []  # the warnings given, in order (a child's run reports them: its stderr is not shown)

    def _warn(self, what: str) -> None:
        message = f"projection cache {self.folder}: {what}; the check goes on without it"
        if message not in self.said:
            self.said.append(message)
            warnings.warn(message, stacklevel=3)

    @staticmethod
    def key(type_name: str, raw: np.ndarray, n_out: int, n_in: int, seed: int, rows: int, sets: int = SETS) -> str:
        """The entry's name: the weight's contents, type, shape, the sketch's seed, rows per bucket and sets."""
        digest = hashlib.blake2b(memoryview(np.ascontiguousarray(raw).data), digest_size=20).hexdigest()  # no copy
        return f"{digest}-{type_name.lower()}-{n_out}x{n_in}-s{seed}-b{rows}x{sets}"

    def get(
        self,
        type_name: str,
        raw: np.ndarray,
        n_out: int,
        n_in: int,
        seed: int,
        rows: int,
        sets: int = SETS,
        place: Hashable | None = None,
    ) -> Projected:
        """The weight's projection, from the cache or computed (and kept).

        Args:
            type_name: the weight's type.
            raw: its bytes.
            n_out: its rows.
            n_in: its row length.
            seed: the sketch's seed.
            rows: rows per bucket.
            sets: combinations per bucket.
            place: the weight tensor's identity while the weights are fixed (its ggml tensor's address and name).

        Returns:
            The Projected weight.
        """
        # a model's weight is the same tensor at every step of a conversation: with `fixed_weights` and its `place`,
        # hashed once (500 MB of the qwen35-0.8b preset's weights took 1.1 s at every step). Not by the bytes'
        # address: a weight read from the file (a repacked one) is a fresh array, whose memory the next one reuses
        memo = (place, type_name, n_out, n_in, seed, rows, sets) if self.fixed_weights and place is not None else None
        name = self._names.get(memo) if memo is not None else None
        if name is None:
            name = self.key(type_name, raw, n_out, n_in, seed, rows, sets)
            if memo is not None:
                self._names[memo] = name
        path = self.folder / f"{name}.npy"
        buckets = sketch(seed, n_out, rows, sets).buckets
        k = buckets * sets
        if self.limit > 0 and path.exists():
            try:
                stored = np.load(path, allow_pickle=False)
                if stored.shape != (k, n_in + 1) or stored.dtype != np.float64 or not np.isfinite(stored).all():
                    raise ValueError(f"shape {stored.shape} {stored.dtype}, expected {(k, n_in + 1)} float64")
                os.utime(path)  # recently used
                self.hits += 1
                return Projected(stored[:, :n_in], stored[::sets, n_in].copy())
            except (OSError, ValueError) as e:
                self._warn(f"entry {path.name} is corrupt ({e}); computed again")
                try:
                    path.unlink()
                except OSError:
                    pass
        self.misses += 1
        p = project(type_name, raw, n_out, n_in, seed, rows, sets)
        if self.writable:
            self._put(path, p)
        return p

    def _put(self, path: Path, p: Projected) -> None:
        sets = p.sw.shape[0] // p.norms2.size  # each bucket's norm beside each of its rows
        stored = np.hstack([p.sw, np.repeat(p.norms2, sets)[:, None]])
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            part = path.with_suffix(f".{os.getpid()}.part")
            with open(part, "wb") as f:
                np.save(f, stored, allow_pickle=False)
            os.replace(part, path)
        except OSError as e:
            self.writable = False
            self._warn(f"cannot be written ({e})")
            return
        self._evict()

    def entries(self) -> list[Path]:
        """The entries, least recently used first."""
        try:
            found = [p for p in self.folder.glob("*.npy") if p.is_file()]
        except OSError:
            return []
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def size(self) -> int:
        """The bytes the entries take."""
        return sum(p.stat().st_size for p in self.entries())

    def _evict(self) -> None:
        entries = self.entries()
        total = sum(p.stat().st_size for p in entries)
        for p in entries:
            if total <= self.limit:
                break
            total -= p.stat().st_size
            try:
                p.unlink()
            except OSError:
                pass

    def clear(self) -> int:
        """Remove every entry (and leftovers of interrupted writes).

        Returns:
            The entries removed.
        """
        n = 0
        for pattern in ("*.npy", "*.part"):
            for p in self.folder.glob(pattern) if self.folder.is_dir() else []:
                try:
                    p.unlink()
                    n += pattern == "*.npy"
                except OSError:
                    pass
        return n


def _chi2_quantile(k: int, z: float) -> float:
    """The chi-square quantile of k degrees of freedom at the standard normal's z (Wilson and Hilferty)."""
    c = 2.0 / (9.0 * k)
    return k * max(0.0, 1.0 - c + z * math.sqrt(c)) ** 3


def judge(
    y: np.ndarray,
    x_dot: np.ndarray,
    p: Projected,
    seed: int = SEED,
    rows: int = BUCKET_ROWS,
    sets: int = SETS,
    kernel: str = "plain",
) -> Comparison:
    """A product node (y = W x~, per column) against its weight's projection.

    Args:
        y: the node's values, [T, n_out] (NumPy order: a column, i.e. a token, per row).
        x_dot: the activations as the kernel rounded them, [T, n_in].
        p: the weight's projection (`project`, same seed, rows and sets).
        seed: the sketch's seed.
        rows: rows per bucket.
        sets: combinations per bucket.
        kernel: "plain", or "extra" for a weight in a CPU extra buffer type (its own kernels): BUCKET_BOUNDS' key.

    Returns:
        The Comparison: ok when y is finite, no bucket of any column is off by more than BUCKET_BOUNDS[kernel][0]
        of its unit (root mean square over its combinations) and no bucket by more than [1] over the columns; its nmse
        the estimate |S E|^2 / |S Y|^2; units the worst bucket-column's error in units, row_units the worst
        bucket's over the columns; the message says the estimate's interval.
    """
    y2 = np.asarray(y, dtype=np.float64).reshape(-1, np.shape(y)[-1])
    x2 = np.asarray(x_dot, dtype=np.float64).reshape(-1, np.shape(x_dot)[-1])
    if not np.isfinite(y2).all():
        return Comparison(False, float("inf"), float("inf"), "NaN or Inf in a product whose inputs are finite")
    s = sketch(seed, y2.shape[1], rows, sets)
    sy = s.apply(y2)  # [T, buckets, sets]
    e = sy - (x2 @ p.sw.T).reshape(sy.shape)
    est = np.mean(e * e, axis=2)  # [T, buckets]: each estimates the bucket's squared error in that column
    unit2 = ROUNDING_UNIT**2 * np.einsum("tk,tk->t", x2, x2)[:, None] * p.norms2[None, :]
    # a bucket of zero rows has no rounding: any error of it is infinitely many units, none is 0
    units = np.sqrt(np.divide(est, unit2, out=np.where(est > 0, np.inf, 0.0), where=unit2 > 0))
    total = float(np.sum(sy * sy))
    err = float(np.sum(e * e))
    nmse = err / total if total > 0 else err
    k = s.buckets * sets
    low = _chi2_quantile(k, -3.89)  # 99.99 %, two-sided; 0 for a few combinations
    lo, hi = k / _chi2_quantile(k, 3.89), (k / low if low > 0 else float("inf"))
    said = (
        f"projected NMSE {nmse:.2e} ({s.buckets} buckets of {rows} rows, {sets} combinations each: the node's within "
        f"[{lo:.2f}x, {hi:.3g}x] of it at 99.99 % where its error is spread over the rows)"
    )
    if not units.size:
        return Comparison(True, nmse, 0.0, said)
    column_bound, row_bound = BUCKET_BOUNDS[kernel]
    worst = float(units.max())
    row_rms = np.sqrt(np.mean(units * units, axis=0))
    worst_row = float(row_rms.max())
    if worst > column_bound:
        column, bucket = (int(i) for i in np.unravel_index(int(np.argmax(units)), units.shape))
        why = (
            f"bucket {bucket} (rows {_rows_of(s, bucket)}) of column {column} off by {worst:.3g} rounding units > "
            f"{column_bound:g}"
        )
        return Comparison(False, nmse, 0.0, f"{why}; {said}", units=worst, row_units=worst_row)
    if worst_row > row_bound:
        worst_bucket = int(np.argmax(row_rms))
        why = (
            f"bucket {worst_bucket} (rows {_rows_of(s, worst_bucket)}) off by {worst_row:.3g} rounding units (root mean square over the "
            f"columns) > {row_bound:g}"
        )
        return Comparison(False, nmse, 0.0, f"{why}; {said}", units=worst, row_units=worst_row)
    return Comparison(True, nmse, 0.0, said, units=worst, row_units=worst_row)


def _rows_of(s: Sketch, b: int) -> str:
    """A bucket's rows, for a message: the weight rows whose errors it adds."""
    return f"{b * s.rows}-{min(s.n_out, (b + 1) * s.rows) - 1}"
