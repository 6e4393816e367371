"""The product checker's power, measured: the share of draws in which each fault is caught, by the full oracle and
by the projected one (docs/llama.md, "Each element of a product" and "The projected oracle").

Each draw: a MUL_MAT node computed by ggml-cpu (Q4_K weights, Gaussian activations with four outlier channels), its
memory corrupted as a kernel bug would between the compute and the judgement (tests/test_product_power.py's faults),
judged by the node checker. Usage: python scripts/product_power.py small|real-size DRAWS
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_product_power as power  # noqa: E402

from pyggml.testing.engine.projected import ProjectionCache  # noqa: E402


def main() -> None:
    size, draws = sys.argv[1], int(sys.argv[2])
    m, k, t, _ = power.SIZES[size]
    faults = {
        "none": None,
        "one row off by 1e-4": power._row(1.0001),
        "one row off by 5e-5": power._row(1.00005),
        "one row off by 3e-5": power._row(1.00003),
        "one row off by 1e-5": power._row(1.00001),
        "one element off by 1e-3": power._element(1.001),
        "one element off by 1e-4": power._element(1.0001),
        **power.FAULTS,
    }
    node = power.ProductNode("q4_k", m, k, t, seed=70)
    cache = ProjectionCache(tempfile.mkdtemp())
    print(f"{size} ({m} x {k}, {t} columns), {draws} draws: caught by the projected oracle, by the full one")
    for name, fault in faults.items():
        projected = [node.judged(fault, oracle="projected", projections=cache) for _ in range(draws)]
        by_projection = sum(v.oracle != "projected" for v in projected)
        full = sum(not node.judged(fault).ok for _ in range(draws))
        worst = ""
        if fault is None:
            units = max(v.comparison.units for v in projected if v.comparison)
            rows = max(v.comparison.row_units for v in projected if v.comparison)
            worst = f" (the projection's worst bucket: {units:.3f} units in a column, {rows:.3f} over the columns)"
        print(f"  {name:34} {by_projection:>5} / {draws} {full:>5} / {draws}{worst}", flush=True)


if __name__ == "__main__":
    main()
