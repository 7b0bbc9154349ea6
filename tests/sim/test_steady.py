"""PipelineResult.steady without pandas: every mean equals pandas' Series.mean of the steps frame's
column bit for bit (the study's points.csv and summary read these means)."""

from __future__ import annotations

import math
from dataclasses import fields

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from specsim.sim.pipeline import PipelineResult, StepRecord

_INT = {"step", "policy_version", "tokens"}


def _record(draw, step: int) -> StepRecord:
    vals = {}
    for f in fields(StepRecord):
        if f.name == "step":
            vals[f.name] = step
        elif f.name in _INT:
            vals[f.name] = draw(st.integers(0, 10**12))
        else:
            vals[f.name] = draw(st.one_of(st.floats(-1e6, 1e12, allow_nan=False), st.just(float("nan"))))
    return StepRecord(**vals)


@st.composite
def results(draw):
    n = draw(st.integers(1, 16))
    return PipelineResult("s", "async", [_record(draw, j) for j in range(n)], draw(st.integers(0, n)))


def _pandas_steady(res: PipelineResult) -> dict[str, float]:
    df = res.steps_frame()
    df = df[df["step"] >= res.warmup_steps]
    return {c: float(df[c].mean()) for c in df.columns}


@settings(max_examples=25, deadline=None)
@given(results())
def test_steady_means_equal_pandas_bit_for_bit(res):
    got = res.steady()
    want = _pandas_steady(res)
    for name, value in want.items():
        assert (math.isnan(value) and math.isnan(got[name])) or np.float64(got[name]).tobytes() == \
            np.float64(value).tobytes(), name
