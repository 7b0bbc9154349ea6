"""Argument checks of the acceptance package: per-token acceptance alpha in [0, 1], position decay
in (0, 1], draft lengths, finite numbers and the Beta concentration, as floats or float arrays, or a
SpecError naming the parameter and the value.

Every module of the package validates its inputs with these (the laws, the draft shapes, the
per-response population, the drafter), so one parameter is refused with one message everywhere.
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import SpecError


def float_array(value, fld: str, allowed: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    return arr


def first_bad(arr: np.ndarray, bad: np.ndarray, value):
    return float(arr[bad].ravel()[0]) if arr.ndim else value


def alpha_array(alpha, fld: str = "alpha", closed: bool = True) -> np.ndarray:
    """alpha in [0, 1] (closed=True, the math limit alpha = 1 allowed) or [0, 1)."""
    allowed = "in [0, 1]" if closed else "in [0, 1)"
    a = float_array(alpha, fld, allowed)
    bad = np.isnan(a) | (a < 0) | ((a > 1) if closed else (a >= 1))
    if bad.any():
        raise SpecError(fld, first_bad(a, bad, alpha), allowed)
    return a


def decay_array(decay, fld: str = "position_decay") -> np.ndarray:
    d = float_array(decay, fld, "in (0, 1]")
    bad = np.isnan(d) | (d <= 0) | (d > 1)
    if bad.any():
        raise SpecError(fld, first_bad(d, bad, decay), "in (0, 1]")
    return d


def scalar_out(arr, scalar: bool):
    return float(arr) if scalar else arr


def k_array(k, fld: str = "k") -> np.ndarray:
    allowed = "an integer >= 0 (draft length)"
    if isinstance(k, bool):
        raise SpecError(fld, k, allowed)
    try:
        kf = np.asarray(k, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(fld, k, allowed) from None
    bad = ~np.isfinite(kf) | (kf < 0) | (kf != np.floor(kf))
    if bad.any():
        raise SpecError(fld, first_bad(kf, bad, k), allowed)
    return kf.astype(np.int64)


def whole_k(k, fld: str = "k", minimum: int = 0) -> int:
    allowed = f"an integer >= {minimum} (draft length)"
    kk = k_array(k, fld)
    if kk.ndim != 0 or int(kk) < minimum:
        raise SpecError(fld, k, allowed)
    return int(kk)


def finite_real(value, fld: str, allowed: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if math.isnan(out):
        raise SpecError(fld, value, allowed)
    return out


def check_concentration(value, fld: str = "heterogeneity") -> float | None:
    """None or inf -> None (homogeneous); otherwise a finite number > 0."""
    if value is None:
        return None
    c = finite_real(value, fld, "> 0, or None/inf for identical sequences")
    if c == math.inf:
        return None
    if c <= 0:
        raise SpecError(fld, value, "> 0, or None/inf for identical sequences")
    return c
