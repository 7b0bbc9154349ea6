"""Intervals that respect their domain and say when they rest on too few replicates
(specsim/study/report/tables.py: mean_ci, ratio_ci, few_replicates_warning)."""

import math

import pytest
from scipy import stats

from specsim.study.report.tables import few_replicates_warning, mean_ci, ratio_ci, t975, t_quantile


def test_a_ratio_interval_is_positive_and_multiplicative():
    """The issue's [−0.129, 2.245]: two ratios 0.5 and 1.6 give a plain t-interval below 0; on the
    log scale the interval is positive and symmetric in log around the geometric mean."""
    plain = mean_ci([0.5, 1.6], floor=None)
    assert plain["ci95"][0] < 0
    m = ratio_ci([0.5, 1.6])
    lo, hi = m["ci95"]
    assert m["mean"] == pytest.approx(1.05) and m["scale"] == "log" and 0 < lo < 1 < hi
    assert math.sqrt(lo * hi) == pytest.approx(math.sqrt(0.5 * 1.6))
    tight = ratio_ci([1.10, 1.12, 1.11])["ci95"]
    assert 1.08 < tight[0] < 1.11 < tight[1] < 1.14                          # close to the plain one when tight
    assert ratio_ci([1.2])["ci95"] is None and ratio_ci([1.0, -1.0])["ci95"] is None


def test_two_replicates_warn_and_three_do_not():
    w = few_replicates_warning(2)
    assert w and "2 replicates" in w and "12.7" in w and "at least 3" in w
    assert few_replicates_warning(3) is None and few_replicates_warning(1) is None


def test_the_t_factor_is_scipy_stats_own():
    """t975 (scipy.special.stdtrit, so the report needs no scipy.stats) gives stats.t.ppf's number."""
    for df in [*range(1, 200), 1_000, 10**6]:
        assert t975(df) == float(stats.t.ppf(0.975, df))
    for q in (0.95, 0.975, 0.999):       # the plan's halving and stop margins (planner/search.py)
        for df in [*range(1, 100), 1_000]:
            assert t_quantile(q, df) == float(stats.t.ppf(q, df))
