"""Tests for specsim.workload.lengths: distributions, truncation, groups, fits, trace files."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specsim.errors import SpecError
from specsim.workload.lengths import (
    Z_99,
    LengthDistribution,
    LengthFit,
    fit,
    growth_factor,
    length_summary,
    sample_group_lengths,
    sample_lengths,
    sample_prompt_lengths,
)
from specsim.world.fields import scenario_field

LOGN = LengthDistribution.lognormal_from_median_p99(2000, 16000)
MIX = LengthDistribution.mixture([0.3, 0.7], medians_tokens=[300, 3000], p99s_tokens=[1000, 20000])
NO_CAP = 10**9


# --------------------------------------------------------------------------- distribution basics


def test_median_p99_parametrisation():
    assert LOGN.mu == pytest.approx(math.log(2000))
    assert LOGN.sigma == pytest.approx(math.log(8) / Z_99)
    assert LOGN.ppf(0.5) == pytest.approx(2000, rel=1e-12)
    assert LOGN.ppf(0.99) == pytest.approx(16000, rel=1e-12)
    assert LOGN.cdf(2000) == pytest.approx(0.5, abs=1e-12)
    assert LOGN.tail_mass(16000) == pytest.approx(0.01, abs=1e-12)


@pytest.mark.parametrize("dist", [LOGN, MIX], ids=["lognormal", "mixture"])
def test_ppf_inverts_cdf(dist):
    u = np.array([1e-6, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999999])
    x = dist.ppf(u)
    assert x.shape == u.shape and (np.diff(x) > 0).all()
    np.testing.assert_allclose(dist.cdf(x), u, rtol=1e-9, atol=1e-12)
    assert dist.ppf(0.0) == 0.0 and dist.ppf(1.0) == math.inf
    assert dist.cdf(0.0) == 0.0 and dist.cdf(-5.0) == 0.0


def test_mixture_by_params_equals_by_quantiles():
    same = LengthDistribution.mixture([0.3, 0.7], mus=MIX.mus, sigmas=MIX.sigmas)
    assert same == MIX
    # a mixture's cdf is the weighted sum of its components'
    a = LengthDistribution.lognormal_from_median_p99(300, 1000)
    b = LengthDistribution.lognormal_from_median_p99(3000, 20000)
    x = np.array([100.0, 1000.0, 5000.0, 30000.0])
    np.testing.assert_allclose(MIX.cdf(x), 0.3 * a.cdf(x) + 0.7 * b.cdf(x), rtol=1e-12)


@pytest.mark.parametrize("dist", [LOGN, MIX], ids=["lognormal", "mixture"])
@pytest.mark.parametrize("cap", [4000, 12000, 30000])
def test_mean_tokens_of_truncated_distribution(dist, cap):
    # numerical integral: E[min(L, c)] = int_0^c (1 - F(x)) dx
    xs = np.linspace(0, cap, 400_001)
    integral = np.trapezoid(1 - dist.cdf(xs), xs)
    assert dist.mean_tokens(cap) == pytest.approx(integral, rel=1e-6)
    assert dist.mean_tokens(None) > dist.mean_tokens(cap)


def test_empirical_quantiles_and_moments():
    e = LengthDistribution.empirical([5, 1, 3, 3])
    np.testing.assert_array_equal(e.ppf([0.0, 0.25, 0.26, 0.5, 0.75, 0.76, 1.0]), [1, 1, 3, 3, 3, 5, 5])
    assert e.cdf(3) == 0.75 and e.cdf(0.5) == 0.0
    assert e.mean_tokens(4) == pytest.approx((4 + 1 + 3 + 3) / 4)
    assert e.mean_tokens(None) == pytest.approx(3.0)
    assert e.tail_mass(3) == 0.25
    draws = sample_lengths(e, np.random.default_rng(0), 40_000, 100)
    assert set(np.unique(draws)) == {1, 3, 5}
    assert np.mean(draws == 3) == pytest.approx(0.5, abs=0.01)


def test_fixed_length():
    d = LengthDistribution.fixed(256, field_path="workload.prompt_tokens")
    assert d == LengthDistribution.empirical([256])
    np.testing.assert_array_equal(sample_prompt_lengths(d, np.random.default_rng(0), 5, 2048), [256] * 5)
    np.testing.assert_array_equal(sample_prompt_lengths(d, np.random.default_rng(0), 3, 100), [100] * 3)
    assert d.mean_tokens(2048) == 256 and d.tail_mass(255) == 1.0 and d.tail_mass(256) == 0.0
    with pytest.raises(SpecError, match="workload.prompt_tokens.tokens"):
        LengthDistribution.fixed(0, field_path="workload.prompt_tokens")


# --------------------------------------------------------------------------- sampling and truncation


@pytest.mark.parametrize("dist,cap", [(LOGN, 12000), (LOGN, 6000), (MIX, 16000)], ids=["logn12k", "logn6k", "mix16k"])
def test_truncated_mass_piles_at_cap(dist, cap):
    n = 200_000
    x = sample_lengths(dist, np.random.default_rng(2024), n, cap)
    assert x.dtype == np.int64 and x.min() >= 1 and x.max() == cap
    p = dist.tail_mass(cap)
    share = np.mean(x == cap)
    assert abs(share - p) < 3 * math.sqrt(p * (1 - p) / n)
    # rounding puts [cap - 0.5, cap] at the cap too; it is far below the MC error here
    assert dist.tail_mass(cap - 0.5) - p < 0.1 * math.sqrt(p * (1 - p) / n)
    assert x.mean() == pytest.approx(dist.mean_tokens(cap), abs=3 * x.std() / math.sqrt(n) + 0.5)


def test_growth_scales_lengths():
    assert growth_factor(0, 0.02) == 1.0
    assert growth_factor(10, 0.02) == pytest.approx(1.02**10)
    np.testing.assert_allclose(growth_factor(np.arange(4), 0.1), [1, 1.1, 1.21, 1.331])
    g = growth_factor(20, 0.02)
    x1 = sample_lengths(LOGN, np.random.default_rng(3), 100_000, NO_CAP)
    xg = sample_lengths(LOGN, np.random.default_rng(3), 100_000, NO_CAP, growth=g)
    assert np.median(xg) / np.median(x1) == pytest.approx(g, rel=0.002)
    assert LOGN.scaled(g).ppf(0.5) == pytest.approx(2000 * g)
    # with a cap, growth pushes more responses into the limit
    assert np.mean(sample_lengths(LOGN, np.random.default_rng(3), 100_000, 8000, growth=g) == 8000) > np.mean(
        sample_lengths(LOGN, np.random.default_rng(3), 100_000, 8000) == 8000
    )


def test_prompt_lengths():
    d = LengthDistribution.lognormal_from_median_p99(200, 1500, field_path="workload.prompt_tokens")
    x = sample_prompt_lengths(d, np.random.default_rng(0), 10_000, 2048)
    assert x.shape == (10_000,) and x.dtype == np.int64 and x.max() <= 2048
    with pytest.raises(SpecError, match="workload.max_prompt_tokens"):
        sample_prompt_lengths(d, np.random.default_rng(0), 10, 0)


@settings(max_examples=60, deadline=None)
@given(
    median=st.floats(1.0, 1e4),
    ratio=st.floats(1.01, 100.0),
    cap=st.integers(1, 50_000),
    growth=st.floats(0.1, 10.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_samples_always_within_1_and_cap(median, ratio, cap, growth, seed):
    d = LengthDistribution.lognormal_from_median_p99(median, median * ratio)
    x = sample_lengths(d, np.random.default_rng(seed), 500, cap, growth)
    assert x.dtype == np.int64 and x.min() >= 1 and x.max() <= cap


# --------------------------------------------------------------------------- GRPO groups


def _icc(groups: np.ndarray) -> float:
    """One-way ANOVA intraclass correlation of log lengths."""
    y = np.log(groups)
    n, k = y.shape
    msb = k * np.sum((y.mean(axis=1) - y.mean()) ** 2) / (n - 1)
    msw = np.sum((y - y.mean(axis=1, keepdims=True)) ** 2) / (n * (k - 1))
    return float((msb - msw) / (msb + (k - 1) * msw))


def test_group_correlation_raises_within_group_correlation():
    g0 = sample_group_lengths(LOGN, np.random.default_rng(1), 2000, 16, NO_CAP, correlation=0.0)
    g6 = sample_group_lengths(LOGN, np.random.default_rng(1), 2000, 16, NO_CAP, correlation=0.6)
    assert g0.shape == g6.shape == (2000, 16) and g6.dtype == np.int64
    assert abs(_icc(g0)) < 0.03
    assert _icc(g6) == pytest.approx(0.6, abs=0.05)  # latent corr == log-length corr without a cap
    # the marginal distribution is preserved
    ks = stats.ks_2samp(g0.ravel(), g6.ravel()).statistic
    assert ks < 0.03
    assert np.median(g6) == pytest.approx(2000, rel=0.05)
    g1 = sample_group_lengths(LOGN, np.random.default_rng(1), 50, 8, NO_CAP, correlation=1.0)
    assert (g1 == g1[:, :1]).all()


def test_group_marginal_with_cap_and_mixture():
    g = sample_group_lengths(MIX, np.random.default_rng(8), 12_500, 16, 16000, correlation=0.5)
    p, n = MIX.tail_mass(16000), g.size
    assert abs(np.mean(g == 16000) - p) < 3 * math.sqrt(p * (1 - p) / n * 16)  # loose: draws are correlated


# --------------------------------------------------------------------------- fits


def test_fit_lognormal_recovers_median_and_p99():
    x = sample_lengths(LOGN, np.random.default_rng(10), 10_000, NO_CAP)
    f = fit(x)
    assert isinstance(f, LengthFit) and f.kind == "lognormal" and f.n == 10_000 and f.n_censored == 0
    assert f.params["median_tokens"] == pytest.approx(2000, rel=0.05)
    assert f.params["p99_tokens"] == pytest.approx(16000, rel=0.05)
    assert f.ks_statistic < 0.02 and f.ks_pvalue > 0.01
    assert f.distribution() == LengthDistribution.lognormal(f.params["mu"], f.params["sigma"])


def test_censored_fit_recovers_tail_when_values_are_capped():
    cap = 6000  # ~11 % of responses hit the limit
    x = sample_lengths(LOGN, np.random.default_rng(11), 10_000, cap)
    assert np.mean(x == cap) > 0.08
    f = fit(x, cap_tokens=cap)
    assert f.n_censored == int(np.sum(x == cap))
    assert f.params["median_tokens"] == pytest.approx(2000, rel=0.05)
    assert f.params["p99_tokens"] == pytest.approx(16000, rel=0.05)
    assert f.ks_statistic < 0.02 and f.ks_pvalue > 0.01
    naive = fit(x)  # treating capped responses as finished underestimates the tail
    assert naive.params["p99_tokens"] < 0.8 * 16000
    assert naive.ks_statistic > f.ks_statistic


def test_fit_mixture():
    x = sample_lengths(MIX, np.random.default_rng(12), 20_000, 16000)
    f = fit(x, kind="mixture", n_components=2, cap_tokens=16000)
    assert f.kind == "mixture"
    assert f.params["weights"] == pytest.approx((0.3, 0.7), abs=0.03)
    np.testing.assert_allclose(np.exp(f.params["mus"]), [300, 3000], rtol=0.1)
    np.testing.assert_allclose(f.params["sigmas"], MIX.sigmas, rtol=0.1)
    assert f.ks_statistic < 0.015
    single = fit(x, kind="lognormal", cap_tokens=16000)
    assert single.ks_statistic > 3 * f.ks_statistic
    assert f.distribution().cdf(3000) == pytest.approx(MIX.cdf(3000), abs=0.01)


def test_fit_is_deterministic():
    x = sample_lengths(MIX, np.random.default_rng(13), 3000, 16000)
    assert fit(x, "mixture", cap_tokens=16000) == fit(x, "mixture", cap_tokens=16000)


# --------------------------------------------------------------------------- summary


def test_length_summary():
    x = np.array([10] * 90 + [100] * 9 + [1000])
    s = length_summary(x, 1000)
    assert s["n"] == 100 and s["max_tokens"] == 1000 and s["p50_tokens"] == 10
    assert s["mean_tokens"] == pytest.approx((900 + 900 + 1000) / 100)
    assert s["truncated_share"] == pytest.approx(0.01)
    assert s["top5pct_token_share"] == pytest.approx((1000 + 4 * 100) / 2800)
    assert set(s) >= {"p90_tokens", "p99_tokens", "p999_tokens"}
    assert math.isnan(length_summary(x, None)["truncated_share"])
    y = sample_lengths(LOGN, np.random.default_rng(0), 50_000, 12000)
    sy = length_summary(y, 12000)
    assert sy["p50_tokens"] == pytest.approx(2000, rel=0.03)
    assert sy["truncated_share"] == pytest.approx(LOGN.tail_mass(12000), abs=0.003)
    assert 0.05 < sy["top5pct_token_share"] < 1


# --------------------------------------------------------------------------- trace files


def test_empirical_file_round_trip(tmp_path):
    values = [120, 4500, 88, 20480, 733]
    (tmp_path / "a.csv").write_text("prompt_id,length\n" + "".join(f"p{i},{v}\n" for i, v in enumerate(values)))
    (tmp_path / "b.csv").write_text("response_tokens,reward\n" + "".join(f"{v},1\n" for v in values))
    (tmp_path / "c.csv").write_text("".join(f"{v}\n" for v in values) + "\n")
    (tmp_path / "d.csv").write_text("tokens\n" + "".join(f"{v}\n" for v in values))
    (tmp_path / "e.jsonl").write_text("".join(json.dumps({"length": v, "id": i}) + "\n" for i, v in enumerate(values)))
    (tmp_path / "f.jsonl").write_text("\n".join(json.dumps({"response_tokens": v}) for v in values))
    for name in ["a.csv", "b.csv", "c.csv", "d.csv", "e.jsonl", "f.jsonl"]:
        d = LengthDistribution.empirical_file(tmp_path / name)
        assert d.kind == "empirical"
        assert d == LengthDistribution.empirical(values), name
        assert sorted(d.values) == sorted(values)


@pytest.mark.parametrize(
    "name,content",
    [
        ("empty.csv", ""),
        ("blank.jsonl", "\n\n"),
        ("header_only.csv", "length\n"),
        ("neg.csv", "length\n10\n-5\n"),
        ("zero.jsonl", '{"length": 0}\n'),
        ("text.csv", "length\n10\nabc\n"),
        ("nokey.jsonl", '{"tokens": 10}\n'),
        ("multi.csv", "a,b\n1,2\n"),
    ],
)
def test_empirical_file_errors_name_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(SpecError) as e:
        LengthDistribution.empirical_file(path)
    assert e.value.where == str(path)
    assert str(path) in str(e.value)
    assert scenario_field(e.value.field).startswith("workload.response_tokens.")


def test_empirical_file_missing(tmp_path):
    with pytest.raises(SpecError, match="nope.csv") as e:
        LengthDistribution.empirical_file(tmp_path / "nope.csv")
    assert scenario_field(e.value.field) == "workload.response_tokens.path"


# --------------------------------------------------------------------------- validation, determinism


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: LengthDistribution.lognormal(7.0, 0.0), "workload.response_tokens.sigma"),
        (lambda: LengthDistribution.lognormal(7.0, -1.0), "workload.response_tokens.sigma"),
        (lambda: LengthDistribution.lognormal_from_median_p99(0, 100), "workload.response_tokens.median"),
        (lambda: LengthDistribution.lognormal_from_median_p99(-5, 100), "workload.response_tokens.median"),
        (lambda: LengthDistribution.lognormal_from_median_p99(2000, 1000), "workload.response_tokens.p99"),
        (lambda: LengthDistribution.mixture([0.5, 0.4], [100, 1000], [500, 5000]),
         "workload.response_tokens.components"),
        (lambda: LengthDistribution.mixture([1.2, -0.2], [100, 1000], [500, 5000]),
         "workload.response_tokens.components"),
        (lambda: LengthDistribution.mixture([0.5, 0.5], [100, 1000], [500, 50]),
         "workload.response_tokens.components[1].p99"),
        (lambda: LengthDistribution.mixture([0.5, 0.5], mus=[1, 2], sigmas=[1, 0]),
         "workload.response_tokens.components[1].sigma"),
        (lambda: LengthDistribution.empirical([10, -3]), "workload.response_tokens.values"),
        (lambda: LengthDistribution.empirical([]), "workload.response_tokens.values"),
        (lambda: LengthDistribution("weibull"), "workload.response_tokens.kind"),
        (lambda: sample_lengths(LOGN, np.random.default_rng(0), 10, 0), "workload.max_response_tokens"),
        (lambda: sample_lengths(LOGN, np.random.default_rng(0), 10, 100, growth=0), "workload.response_tokens.growth"),
        (lambda: sample_group_lengths(LOGN, np.random.default_rng(0), 2, 2, 100, correlation=1.5),
         "workload.group_correlation"),
        (lambda: sample_group_lengths(LOGN, np.random.default_rng(0), 2, 2, 100, correlation=-0.1),
         "workload.group_correlation"),
        (lambda: fit([100, -20, 300]), "workload.response_tokens.values"),
        (lambda: fit([100, 200, 300], cap_tokens=250), "workload.response_tokens.values"),
        (lambda: fit([100, 200, 300], kind="gamma"), "workload.response_tokens.fit.kind"),
        (lambda: growth_factor(3, -1.5), "workload.length_growth_per_step"),
        (lambda: LengthDistribution.lognormal_from_median_p99(50, 20, field_path="workload.prompt_tokens"),
         "workload.prompt_tokens.p99"),
    ],
)
def test_bad_inputs_raise_spec_error_naming_field(make, field):
    with pytest.raises(SpecError) as e:
        make()
    # the workload layer names its own parameter; the world layer maps it to the scenario field
    assert scenario_field(e.value.field) == field
    assert e.value.field in str(e.value)


def test_same_seed_same_draws():
    for dist in (LOGN, MIX, LengthDistribution.empirical([3, 1, 4, 1, 5, 9, 2, 6])):
        a = sample_lengths(dist, np.random.default_rng(77), 1000, 8000, growth=1.1)
        b = sample_lengths(dist, np.random.default_rng(77), 1000, 8000, growth=1.1)
        np.testing.assert_array_equal(a, b)
        ga = sample_group_lengths(dist, np.random.default_rng(77), 20, 8, 8000, correlation=0.4)
        gb = sample_group_lengths(dist, np.random.default_rng(77), 20, 8, 8000, correlation=0.4)
        np.testing.assert_array_equal(ga, gb)
    assert not np.array_equal(sample_lengths(LOGN, np.random.default_rng(1), 100, 8000),
                              sample_lengths(LOGN, np.random.default_rng(2), 100, 8000))


def test_distribution_is_frozen_and_hashable():
    with pytest.raises(AttributeError):
        LOGN.mu = 1.0
    assert hash(LOGN) == hash(LengthDistribution.lognormal_from_median_p99(2000, 16000))
    e = LengthDistribution.empirical(list(range(1, 10_001)))
    assert "values" not in repr(e)  # a long trace does not flood logs


# --------------------------------------------------------------------------- the split modules
SPLIT_MODULES = ["lengths.fit", "lengths.distribution", "lengths.checks", "lengths.sampling", "lengths"]
#: one interpreter imports each module first as a fresh one would: every specsim module is dropped
#: from sys.modules before each (third-party libraries stay loaded: one interpreter start, not five)
IMPORT_FIRST = """
import sys
for first in sys.argv[1:]:
    for key in [k for k in sys.modules if k == "specsim" or k.startswith("specsim.")]:
        del sys.modules[key]
    try:
        __import__("specsim.workload." + first)
        from specsim.workload import lengths as L
        from specsim.workload.lengths.fit import fit
        from specsim.workload.lengths.distribution import LengthDistribution
        assert L.fit is fit and L.LengthDistribution is LengthDistribution
        print(first, "ok")
    except Exception as exc:
        print(first, repr(exc).replace(chr(10), " "))
"""


@pytest.fixture(scope="module")
def split_imports() -> dict[str, str]:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", IMPORT_FIRST, *SPLIT_MODULES], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return dict(line.split(" ", 1) for line in r.stdout.splitlines())


@pytest.mark.parametrize("first", SPLIT_MODULES)
def test_split_modules_import_in_any_order(split_imports, first):
    """workload/lengths/__init__.py re-exports the package's modules; each imports first without a cycle."""
    assert split_imports[first] == "ok"
