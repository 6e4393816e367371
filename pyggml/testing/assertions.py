"""`check`'s verdict on one output as an assertion, for your own tests (no pytest needed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyggml.testing.engine.opdb import NMSE_F32
from pyggml.testing.engine.verdict import compare, default_max_error


def assert_close(actual: Any, expected: Any, nmse: float = NMSE_F32, max_error: float | None = None) -> None:
    """`check`'s verdict on one output, as an assertion (no pytest needed).

    NaN and Inf in the same places, NMSE <= `nmse`, and every element within `max_error` of the output's
    scale. `nmse=0, max_error=0` asks for a bit-exact result.

    Args:
        actual: the result (anything `np.asarray` takes), e.g. `Runner.run`'s.
        expected: the reference, with as many elements, e.g. a float64 NumPy oracle.
        nmse: the bound on the normalized mean squared error; default: check's F32 bound, 1e-7.
        max_error: the bound on any element's error relative to the output's scale; None: 30
            root-mean-square errors of `nmse`, as check.

    Raises:
        AssertionError: a bound is exceeded (the message gives the NMSE, the largest error and the bounds).
    """
    bound = max_error if max_error is not None else default_max_error(nmse)
    verdict = compare(np.asarray(actual), np.asarray(expected), nmse, bound)
    if not verdict.ok:
        raise AssertionError(
            f"{verdict.message} (NMSE {verdict.nmse:.3g}, largest error {verdict.max_error:.3g} "
            f"of the output's scale; bounds {nmse:g} and {bound:g})"
        )
