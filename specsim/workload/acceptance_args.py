"""Argument checks shared by the acceptance math and the tree law: per-token acceptance alpha in
[0, 1] and position decay in (0, 1], as float arrays, or a SpecError naming the field and value.

Kept apart from :mod:`specsim.workload.acceptance_math` so that :mod:`specsim.workload.tree`
(which the chain math calls for trees) can use them without an import cycle.
"""

from __future__ import annotations

import numpy as np

from specsim.errors import SpecError


def _float_array(value, fld: str, allowed: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    return arr


def _first_bad(arr: np.ndarray, bad: np.ndarray, value):
    return float(arr[bad].ravel()[0]) if arr.ndim else value


def _alpha_array(alpha, fld: str = "drafter.alpha", closed: bool = True) -> np.ndarray:
    """alpha in [0, 1] (closed=True, the math limit alpha = 1 allowed) or [0, 1)."""
    allowed = "in [0, 1]" if closed else "in [0, 1)"
    a = _float_array(alpha, fld, allowed)
    bad = np.isnan(a) | (a < 0) | ((a > 1) if closed else (a >= 1))
    if bad.any():
        raise SpecError(fld, _first_bad(a, bad, alpha), allowed)
    return a


def _decay_array(decay, fld: str = "drafter.position_decay") -> np.ndarray:
    d = _float_array(decay, fld, "in (0, 1]")
    bad = np.isnan(d) | (d <= 0) | (d > 1)
    if bad.any():
        raise SpecError(fld, _first_bad(d, bad, decay), "in (0, 1]")
    return d
