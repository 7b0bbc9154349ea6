"""Shared names of the trace-based calibration: fitted parameters, their units, bounds and scales."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim.catalog.models import ModelSpec, drafter_arch, load_model
from specsim.errors import SpecError

#: Efficiency factors fit_hardware can fit, in Efficiency's (SI) units.
PARAMS = ("compute", "memory", "comm", "step_overhead_s", "per_seq_overhead_s", "draft_overhead_s")
#: optimiser variable = SI value / scale (keeps every variable O(1): ms, µs, ms)
SCALE = {
    "compute": 1.0,
    "memory": 1.0,
    "comm": 1.0,
    "step_overhead_s": 1e-3,
    "per_seq_overhead_s": 1e-6,
    "draft_overhead_s": 1e-3,
    "train_mfu": 1.0,
}
#: how the profile YAML names each factor, and the display unit
YAML_NAME = {
    "compute": ("compute", ""),
    "memory": ("memory", ""),
    "comm": ("comm", ""),
    "step_overhead_s": ("step_overhead_ms", "ms"),
    "per_seq_overhead_s": ("per_seq_overhead_us", "µs"),
    "draft_overhead_s": ("draft_overhead_ms", "ms"),
    "train_mfu": ("train_mfu", ""),
}
LOWER = {
    "compute": 0.05,
    "memory": 0.05,
    "comm": 0.05,
    "step_overhead_s": 0.0,
    "per_seq_overhead_s": 0.0,
    "draft_overhead_s": 0.0,
}
UPPER = {
    "compute": 1.0,
    "memory": 1.0,
    "comm": 1.0,
    "step_overhead_s": np.inf,
    "per_seq_overhead_s": np.inf,
    "draft_overhead_s": np.inf,
}
#: a parameter is identifiable when moving it this much moves some prediction by > SENS_MIN (log)
SENS_MIN = 2e-3
DEFAULT_DRAFTER = "eagle3"


def where_of(df: pd.DataFrame, default: str) -> str:
    return str(df.attrs.get("path") or default)


def model_cached(cache: dict, name: str, where: str) -> ModelSpec:
    if name not in cache:
        try:
            cache[name] = load_model(name)
        except SpecError as exc:
            raise SpecError("model", name, exc.allowed, where) from None
    return cache[name]


def drafter_cached(cache: dict, kind: str, model: ModelSpec, where: str):
    key = (kind, model.name)
    if key not in cache:
        try:
            cache[key] = drafter_arch(kind, model)
        except SpecError as exc:
            raise SpecError("drafter", kind, exc.allowed, where) from None
    return cache[key]


def optional_column(df: pd.DataFrame, col: str, default):
    if col not in df.columns:
        return np.full(len(df), default, dtype=object)
    return np.array(
        [default if (v is None or (not isinstance(v, str) and pd.isna(v))) else v for v in df[col]], dtype=object
    )


def rms(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.sqrt(np.mean(x**2))) if x.size else float("nan")


def as_list(x) -> list[pd.DataFrame]:
    if x is None:
        return []
    if isinstance(x, pd.DataFrame):
        return [x]
    return [d for d in x if d is not None]
