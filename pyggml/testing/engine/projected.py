"""The projected oracle of a product node: Freivalds' check with the kernel's rounding modelled.

For a product Y = W X~ (W the weight, n_out x n_in; X~ the activations as the CPU's kernel rounds them,
`oracles.dot_rounding`), a seeded Gaussian R (k x n_out) gives R Y = (R W) X~: R W is computed once per weight (its
blocks of rows decoded in turn, never whole, in float64) and kept on disk (`ProjectionCache`), so a node costs
O(k (n_out + n_in) T) instead of the product's O(n_out n_in T).

What it judges: each column t (a token) by E_t = |R e_t|^2 / k, e_t = y_t - W x~_t, which estimates |e_t|^2 without
bias (E[R^T R] = k I): k times E_t / |e_t|^2 is chi-square with k degrees of freedom. The bound is the modelled
rounding (opdb.matmul's unit u |w_i| |x_t|, u = 2^-24): |e_t|^2 <= PROJECTED_UNITS^2 u^2 |x_t|^2 |W|_F^2, a root
mean square of PROJECTED_UNITS units over the column (measured: at most 0.4, opdb.matmul.ROUNDING_UNITS_SEEN).
The same projections estimate the node's NMSE, |R E|^2 / |R Y|^2, reported with its 99.99 % interval.

Its limit, by construction: a projection sees an error against the whole column's norm, |W|_F |x_t|, not against
the element's own |w_i| |x_t|, so an error in one element or one row of an n_out-row product must be about
sqrt(n_out) times larger to be seen than by the full oracle's element bounds (docs/llama.md, "The projected
oracle"; tests/test_product_power.py measures both). `check --model --oracle projected` uses it for the
products it applies to and rechecks any node it fails with the full oracle at once; the full oracle stays the
default.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyggml import types
from pyggml.testing.engine.verdict import Comparison

# projections per node: E_t / |e_t|^2 is chi-square with K_PROJECTIONS degrees of freedom over K_PROJECTIONS
K_PROJECTIONS = 32
SEED = 58
ROUNDING_UNIT = 2.0**-24
# the root mean square, in rounding units, a column's error may have (measured under 0.4: a margin of 25 in E_t,
# which chi-square of 32 degrees of freedom over 32 exceeds with a probability far below 1e-20)
PROJECTED_UNITS = 2.0
# a weight is decoded this many values at a time
BLOCK_VALUES = 1 << 22
# the cache's default size limit, in bytes (PYGGML_PROJECTION_CACHE_BYTES), and its folder (PYGGML_CACHE_DIR)
CACHE_BYTES = 2 << 30


@functools.lru_cache(maxsize=16)
def projection(seed: int, k: int, n_out: int) -> np.ndarray:
    """R: k x n_out standard Gaussian values, float64, drawn from (seed, n_out); drawn once per process (read-only).

    Args:
        seed: the projection's seed.
        k: its rows.
        n_out: the weight's rows.

    Returns:
        R.
    """
    r = np.random.default_rng([seed, n_out]).standard_normal((k, n_out))
    r.setflags(write=False)
    return r


@dataclass(frozen=True)
class Projected:
    """A weight's projection.

    Attributes:
        rw: R W, k x n_in, float64.
        frobenius2: |W|_F^2, the sum of its squared values.
    """

    rw: np.ndarray
    frobenius2: float


def project(
    type_name: str, raw: np.ndarray, n_out: int, n_in: int, seed: int = SEED, k: int = K_PROJECTIONS
) -> Projected:
    """R W of a packed 2-D weight from its bytes, BLOCK_VALUES values decoded at a time, in float64.

    Args:
        type_name: the weight's ggml type (Q4_K, F16, ...).
        raw: its bytes, n_out rows of `types.row_size(type, n_in)` bytes.
        n_out: its rows.
        n_in: its row length.
        seed: the projection's seed.
        k: the projection's rows.

    Returns:
        The Projected weight.

    Raises:
        ValueError: bytes of another size than the weight's.
    """
    t = types.as_type(type_name)
    width = types.row_size(t, n_in)
    if raw.size != width * n_out:
        raise ValueError(f"{raw.size} bytes for a {type_name} weight of {n_out} rows of {n_in} ({width * n_out} bytes)")
    r = projection(seed, k, n_out)
    rw = np.zeros((k, n_in))
    frobenius2 = 0.0
    rows = max(1, BLOCK_VALUES // n_in)
    for r0 in range(0, n_out, rows):
        r1 = min(n_out, r0 + rows)
        block = types.decode(t, raw[r0 * width : r1 * width], (r1 - r0, n_in)).astype(np.float64)
        rw += r[:, r0:r1] @ block
        frobenius2 += float(np.einsum("ij,ij->", block, block))
    return Projected(rw, frobenius2)


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
    """

    def __init__(self, folder: str | Path | None = None, limit: int | None = None) -> None:
        self.folder = Path(folder) if folder is not None else cache_dir()
        if limit is None:
            limit = int(os.environ.get("PYGGML_PROJECTION_CACHE_BYTES", CACHE_BYTES))
        self.limit = limit
        self.writable = limit > 0
        self.hits = self.misses = 0
        self.said: list[str] = []  # the warnings given, in order (a child's run reports them: its stderr is not shown)

    def _warn(self, what: str) -> None:
        message = f"projection cache {self.folder}: {what}; the check goes on without it"
        if message not in self.said:
            self.said.append(message)
            warnings.warn(message, stacklevel=3)

    @staticmethod
    def key(type_name: str, raw: np.ndarray, n_out: int, n_in: int, seed: int, k: int) -> str:
        """The entry's name: the weight's contents, type, shape, the seed and k."""
        digest = hashlib.blake2b(np.ascontiguousarray(raw).tobytes(), digest_size=20).hexdigest()
        return f"{digest}-{type_name.lower()}-{n_out}x{n_in}-s{seed}-k{k}"

    def get(self, type_name: str, raw: np.ndarray, n_out: int, n_in: int, seed: int, k: int) -> Projected:
        """The weight's projection, from the cache or computed (and kept).

        Args:
            type_name: the weight's type.
            raw: its bytes.
            n_out: its rows.
            n_in: its row length.
            seed: the projection's seed.
            k: its rows.

        Returns:
            The Projected weight.
        """
        name = self.key(type_name, raw, n_out, n_in, seed, k)
        path = self.folder / f"{name}.npy"
        if self.limit > 0 and path.exists():
            try:
                stored = np.load(path, allow_pickle=False)
                if stored.shape != (k + 1, n_in) or stored.dtype != np.float64 or not np.isfinite(stored).all():
                    raise ValueError(f"shape {stored.shape} {stored.dtype}, expected {(k + 1, n_in)} float64")
                os.utime(path)  # recently used
                self.hits += 1
                return Projected(stored[:k], float(stored[k, 0]))
            except (OSError, ValueError) as e:
                self._warn(f"entry {path.name} is corrupt ({e}); computed again")
                try:
                    path.unlink()
                except OSError:
                    pass
        self.misses += 1
        p = project(type_name, raw, n_out, n_in, seed, k)
        if self.writable:
            self._put(path, p)
        return p

    def _put(self, path: Path, p: Projected) -> None:
        stored = np.vstack([p.rw, np.full((1, p.rw.shape[1]), p.frobenius2)])
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


def judge(y: np.ndarray, x_dot: np.ndarray, p: Projected, seed: int = SEED, k: int = K_PROJECTIONS) -> Comparison:
    """A product node (y = W x~, per column) against its weight's projection.

    Args:
        y: the node's values, [T, n_out] (NumPy order: a column, i.e. a token, per row).
        x_dot: the activations as the kernel rounded them, [T, n_in].
        p: the weight's projection (`project`, same seed and k).
        seed: the projection's seed.
        k: its rows.

    Returns:
        The Comparison: ok when every column's E_t is within PROJECTED_UNITS^2 u^2 |x_t|^2 |W|_F^2 and y is finite;
        its nmse the estimate |R E|^2 / |R Y|^2; units the worst column's root mean square error in rounding units
        (sqrt(E_t / (u^2 |x_t|^2 |W|_F^2))); the message says the estimate's 99.99 % interval.
    """
    y2 = np.asarray(y, dtype=np.float64).reshape(-1, np.shape(y)[-1])
    x2 = np.asarray(x_dot, dtype=np.float64).reshape(-1, np.shape(x_dot)[-1])
    if not np.isfinite(y2).all():
        return Comparison(False, float("inf"), float("inf"), "NaN or Inf in a product whose inputs are finite")
    r = projection(seed, k, y2.shape[1])
    ry = y2 @ r.T  # [T, k]
    e = ry - x2 @ p.rw.T
    est = np.einsum("tj,tj->t", e, e) / k  # estimates |e_t|^2
    unit2 = ROUNDING_UNIT**2 * np.einsum("tk,tk->t", x2, x2) * p.frobenius2
    units = np.sqrt(est / np.maximum(unit2, np.finfo(np.float32).tiny ** 2))
    total = float(np.einsum("tj,tj->", ry, ry) / k)
    nmse = float(est.sum() / total) if total > 0 else float(est.sum())
    lo, hi = k / _chi2_quantile(k, 3.89), k / _chi2_quantile(k, -3.89)  # 99.99 %, two-sided
    said = f"projected NMSE {nmse:.2e} (k = {k}: the node's within [{lo:.2f}x, {hi:.2f}x] of it, 99.99 %)"
    worst = float(units.max()) if units.size else 0.0
    if worst > PROJECTED_UNITS:
        t = int(np.argmax(units))
        return Comparison(
            False,
            nmse,
            0.0,
            f"column {t} off by {worst:.3g} rounding units (root mean square, projected) > {PROJECTED_UNITS:g}; {said}",
            units=worst,
            row_units=worst,
        )
    return Comparison(True, nmse, 0.0, said, units=worst, row_units=worst)
