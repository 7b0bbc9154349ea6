"""The reworked plots (specsim/study/report/plots.py) and the capacity answer they and the summary
give (tables.capacity_answer): SD's gain over the best AR per lag, one marking for the best,
ranges where the intervals straddle the target."""

from pathlib import Path

import pandas as pd
import pytest

from specsim.explain.ladder import GAIN_TICKS, RUNG_NAMES
from specsim.scenario import load_scenario
from specsim.study.report.plots import sd_gain_by_lag
from specsim.study.report.tables import _min_range, capacity_answer, ratio_ci

ROOT = Path(__file__).resolve().parents[2]


def _frame():
    """Points: AR (k = 0) and SD (k = 3) at lags 0 and 1, two replicates; AR at lag 1 is the best AR."""
    rows, point = [], 0
    steps = {(0, 0): (100.0, 110.0), (0, 1): (80.0, 84.0), (3, 0): (60.0, 66.0), (3, 1): (50.0, 52.0)}
    for (k, lag), reps in steps.items():
        for r, s in enumerate(reps):
            rows.append({"point": point, "replicate": r, "k": k, "pipeline.policy_lag": lag, "step_s": s,
                         "sd_policy": "off" if k == 0 else "always(k=3)", "e2e_speedup_vs_sync_ar": 200.0 / s})
        point += 1
    return pd.DataFrame(rows)


def test_sd_gain_by_lag_is_the_paired_ratio_over_the_best_ar(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "235b_async_256x16.yaml")
    frame = _frame()
    analysis = {"swept": ["speculation.k", "pipeline.policy_lag"], "best_ar": {"point": 1},
                "rank_by": "e2e_speedup_vs_sync_ar"}
    png = sd_gain_by_lag(tmp_path / "sd_gain_by_lag", sc, frame, analysis)
    assert png and Path(png).is_file()
    data = pd.read_csv(tmp_path / "sd_gain_by_lag.csv").set_index("policy_lag")
    lag0 = ratio_ci([80.0 / 60.0, 84.0 / 66.0])          # best AR (lag 1) over SD at lag 0, per replicate
    assert data.loc[0, "vs_best_ar"] == pytest.approx(lag0["mean"])
    assert data.loc[0, "vs_best_ar_lo"] == pytest.approx(lag0["ci95"][0]) and data.loc[0, "vs_best_ar_lo"] > 0
    assert data.loc[0, "vs_ar_same_lag"] == pytest.approx((100 / 60 + 110 / 66) / 2)
    assert data.loc[1, "vs_best_ar"] == data.loc[1, "vs_ar_same_lag"]
    no_lag = {**analysis, "swept": ["speculation.k"]}
    assert sd_gain_by_lag(tmp_path / "x", sc, frame, no_lag) is None


def test_capacity_answer_is_a_range_when_the_intervals_straddle_the_target():
    sizes = [256, 512, 1024]
    sure = {"simulated": 512, "interpolated": 480, **_min_range([(256, [130, 150]), (512, [90, 110]),
                                                                 (1024, [60, 70])], 120.0)}
    assert sure["may_reach"] == sure["surely_reaches"] == 512
    assert capacity_answer(sure, sizes) == "512 GPUs simulated (≈ 480 interpolated)"
    straddle = {"simulated": 512, "interpolated": 480, **_min_range([(256, [100, 150]), (512, [90, 125]),
                                                                     (1024, [60, 70])], 120.0)}
    text = capacity_answer(straddle, sizes)
    assert text.startswith("between ≤ 256 and 1,024 GPUs (means: 512)") and "straddle" in text
    assert capacity_answer(straddle, sizes, reason=False) == "between ≤ 256 and 1,024 GPUs (means: 512)"
    never = {"simulated": 1024, "interpolated": 900, **_min_range([(512, [115, 140]), (1024, [100, 121])], 120.0)}
    assert capacity_answer(never, [512, 1024]).startswith("from ≤ 512 to more than 1,024 GPUs (means: 1,024)")
    assert capacity_answer({"simulated": 256, "interpolated": 256}, sizes).startswith("≤ 256 GPUs")
    assert capacity_answer({"simulated": None}, sizes) == "not reached by any simulated size"


def test_waterfall_rungs_have_plain_names_and_ticks_above_3x():
    for code in ("ceiling", "draft", "verify", "verify_rest", "coverage", "spread", "staleness", "batch_tail",
                 "async", "trainer"):
        name = RUNG_NAMES[code]
        assert "_" not in name and name != code
    assert {4, 5, 10} <= set(GAIN_TICKS)
