"""Issue #49's comparison of the A100 forward sweeps as a test: verify ÷ decode from batch 1 to 64
(Qwen2.5-7B and Llama-3.1-8B, prompt 1024/4096, γ 3/7/15) and decode's growth with batch, priced
with the committed a100_sxm profile as the sweep runs (one prompt shared by the batch); and the
per-block and piecewise-graph attention fits recovering a known value."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels.a100_sweep import FIT_MODEL, sweep_comparison
from specsim.calibrate.kernels.forward_sweep import (
    RATIO_TOLERANCE,
    cascade_rows,
    fit_block_attention,
    fit_piecewise_attention,
    price_rows,
    with_multi_token_attention,
)
from specsim.catalog.hardware import load_hardware
from specsim.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]   # the checkout: calibration/published/ holds the sweeps

#: issue #49's target: at least this many of the 46 points within 20 % (fit rows included)
MIN_WITHIN = 38
A100 = load_hardware("a100_sxm")


@pytest.fixture(scope="module")
def comparison():
    return sweep_comparison(ROOT)


def test_verify_over_decode_within_20_percent_at_38_of_46_points(comparison):
    ratios, _ = comparison
    assert len(ratios) == 46     # 2 models x 4 batches x 2 prompts x 3 gammas, less the 2 the sweep lacks
    assert set(ratios["model"]) == {"Qwen2.5-7B", "Llama-3.1-8B-Instruct"}
    within = int((ratios["rel_error"].abs() <= RATIO_TOLERANCE).sum())
    assert within >= MIN_WITHIN, ratios.to_string()
    # batch 1 (no sharing possible, what vLLM's draft-length sweep also measures): every point
    assert ratios.loc[ratios["batch"] == 1, "within"].all()
    # the other model's points are all held out: predictions, never fitted
    assert set(ratios.loc[ratios["model"] != FIT_MODEL, "role"]) == {"held-out"}


def test_decode_growth_to_batch_64_of_the_fit_model_within_10_percent(comparison):
    _, growth = comparison
    own = growth[growth["model"] == FIT_MODEL]
    assert len(own) == 5 and (own["rel_error"].abs() <= 0.10).all(), own.to_string()
    # the held-out model is a prediction: within 10 % at 4 of its 5 prompts, its 256-token miss
    # (-10.2 %) stated in docs/validation.md; it must not get worse
    other = growth[growth["model"] != FIT_MODEL]
    assert (other["rel_error"].abs() <= 0.11).all(), other.to_string()
    assert (other["rel_error"].abs() <= 0.10).sum() >= 4, other.to_string()
    assert (growth["measured_growth"] > 1.0).all() and (growth["priced_growth"] > 1.0).all()


def _decode_rows(piecewise_s: float, block_s: float | None = None) -> tuple[pd.DataFrame, object]:
    b, s = (a.ravel() for a in np.meshgrid([1, 8, 16, 32, 48, 64], [256, 1024, 4096]))
    df = pd.DataFrame({"model": "Qwen2.5-7B", "batch": b, "seq": s, "gamma": 0, "mode": "target_decode"})
    mt = A100.kernel_fit.multi_token_attention
    mt = mt if block_s is None else replace(mt, block_s=block_s)
    hw = with_multi_token_attention(A100, replace(mt, piecewise_attention_s=piecewise_s))
    t = price_rows(df, hw) * np.exp(np.random.default_rng(1).normal(0, 0.002, len(df)))
    return df.assign(median_ms=t * 1e3, n_samples=100), mt


def test_piecewise_fit_recovers_a_known_value_from_cascade_rows_only():
    df, mt = _decode_rows(40e-6)
    casc = cascade_rows(df, mt.sms)
    assert 2 <= casc.sum() < len(df)
    df.loc[~casc, "median_ms"] *= 1.3      # rows without cascade must never move the fit
    fit = fit_piecewise_attention(df, with_multi_token_attention(A100, replace(mt, piecewise_attention_s=0.0)))
    assert fit.piecewise_attention_s == pytest.approx(40e-6, rel=0.05)
    assert fit.fit_rows == int(casc.sum())
    assert set(fit.rows.loc[casc, "role"]) == {"fit"}


def test_piecewise_fit_needs_cascade_rows():
    df, _ = _decode_rows(40e-6)
    with pytest.raises(SpecError, match="cascade"):
        fit_piecewise_attention(df[df["batch"] < 8], A100)


def test_block_fit_recovers_a_known_value_from_rows_without_cascade_only():
    df, mt = _decode_rows(40e-6, block_s=120e-9)
    casc = cascade_rows(df, mt.sms)
    fit_rows = ~casc & (df["batch"] > 1).to_numpy()
    assert 2 <= fit_rows.sum() < len(df)
    df.loc[casc, "median_ms"] *= 1.3      # rows with cascade must never move the fit
    hw = with_multi_token_attention(A100, replace(mt, block_s=0.0))
    fit = fit_block_attention(df, hw)
    assert fit.block_s == pytest.approx(120e-9, rel=0.05)
    assert fit.fit_rows == int(fit_rows.sum())
    assert set(fit.rows.loc[fit_rows, "role"]) == {"fit"}


def test_block_fit_needs_rows_without_cascade():
    df, _ = _decode_rows(40e-6)
    with pytest.raises(SpecError, match="without cascade"):
        fit_block_attention(df[df["batch"] == 1], A100)
