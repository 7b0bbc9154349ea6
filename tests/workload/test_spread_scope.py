"""The acceptance spread's scope (workload/acceptance/spread.py; drafter.spread_scope): `within`
with segments at least as long as every response is `between`; the per-response effective α
concentrates as the segments shorten (variance like 1/n); it conserves each response's expected
verify steps (a direct Monte-Carlo of segment draws); the engines' effective concentration keeps
the configured τ."""

import copy

import numpy as np
import pytest

from specsim.errors import SpecError
from specsim.scenario import ScenarioError, validate_doc
from specsim.workload.acceptance.laws import expected_tokens_per_verify, sample_tokens_per_verify
from specsim.workload.acceptance.spread import (
    SpreadScope,
    effective_concentration,
    length_bins,
    segment_effective_alphas,
    segment_latents,
)
from specsim.workload.lengths import LengthDistribution
from specsim.world.resolve import resolve
from tests.small_sweep import TINY_SYNC

M, C, K, D = 0.8, 6.71, 5, 0.94


def test_within_with_segments_longer_than_every_response_is_between():
    lengths = np.array([10, 500, 4000, 32768])
    rng = np.random.default_rng(1)
    lat = segment_latents(rng, 4, 1, SpreadScope("between"))
    a = segment_effective_alphas(M, C, lengths, SpreadScope("within", 32768), K, D, latents=lat)
    b = segment_effective_alphas(M, C, lengths, SpreadScope("between", 32768), K, D, latents=lat)
    assert np.allclose(a, b, atol=1e-6)
    lb = length_bins(LengthDistribution.lognormal_from_median_p99(5000, 30000).ppf, 32768)
    for scope in ("within", "both"):
        assert effective_concentration(M, C, lb, SpreadScope(scope, 32768), K, D) == C
    assert effective_concentration(M, C, lb, SpreadScope("between", 16), K, D) == C


def test_per_response_alpha_concentrates_like_one_over_n():
    rng = np.random.default_rng(7)
    L = 256
    var = {}
    for n in (1, 4, 16, 64):
        a = segment_effective_alphas(M, C, np.full(20000, n * L), SpreadScope("within", L), K, D, rng=rng)
        var[n] = float(np.var(a))
    for n in (4, 16, 64):
        assert var[n] * n == pytest.approx(var[1], rel=0.15), var
    # correlated segments average out more slowly; `both` keeps half the spread however short
    a_rho = segment_effective_alphas(M, C, np.full(20000, 64 * L), SpreadScope("within", L, 0.8), K, D, rng=rng)
    a_both = segment_effective_alphas(M, C, np.full(20000, 64 * L), SpreadScope("both", L), K, D, rng=rng)
    assert var[64] < np.var(a_rho) < var[1] and np.var(a_both) > 0.4 * var[1]


def test_effective_alpha_conserves_expected_verify_steps_monte_carlo():
    """Each response's steps, drawn token by token at its segments' α, average len / τ_k(α_eff)."""
    rng = np.random.default_rng(3)
    L, ell = 64, 640
    lat = segment_latents(rng, 40, 10, SpreadScope("within"))
    eff = segment_effective_alphas(M, C, np.full(40, ell), SpreadScope("within", L), K, D, latents=lat)
    from scipy import special, stats
    seg_alpha = stats.beta.ppf(special.ndtr(lat), M * C, (1 - M) * C)
    for i in range(40):
        done = np.zeros(150, dtype=np.int64)      # 150 walks of response i, stepped together
        steps = np.zeros(150, dtype=np.int64)
        while (live := done < ell).any():
            j = np.minimum(done[live] // L, 9)
            done[live] += sample_tokens_per_verify(rng, seg_alpha[i, j], K, D).astype(np.int64)
            steps[live] += 1
        expected = ell / expected_tokens_per_verify(eff[i], K, D)
        assert steps.mean() == pytest.approx(expected, rel=0.06, abs=2.0)


def test_engine_concentration_rises_as_segments_shorten_and_tau_holds():
    doc = copy.deepcopy(TINY_SYNC)
    doc["workload"].update(max_response_tokens=4096, response_tokens={"kind": "lognormal", "median": 800, "p99": 3500})
    doc["drafter"]["heterogeneity"] = 5.0
    base = resolve(validate_doc(doc, None)).acceptance
    last = base.concentration
    for L in (2048, 512, 128):
        d = copy.deepcopy(doc)
        d["drafter"].update(spread_scope="within", spread_segment_tokens=L)
        acc = resolve(validate_doc(d, None)).acceptance
        assert acc.concentration > last
        assert acc.tau(3) == pytest.approx(base.tau(3), rel=1e-6)
        last = acc.concentration


def test_bad_scope_inputs_are_located_errors():
    for key, value in (("spread_scope", "sideways"), ("spread_segment_tokens", 0), ("spread_segment_correlation", 1.0)):
        d = copy.deepcopy(TINY_SYNC)
        d["drafter"][key] = value
        with pytest.raises(ScenarioError, match=f"drafter.{key}"):
            validate_doc(d, None)


@pytest.mark.parametrize(("fields", "named"), [(("sideways",), "spread_scope"), (("within", 0), "spread_segment_tokens"),
                                               (("within", 64, 1.0), "spread_segment_correlation"),
                                               (("both", 64, -0.1), "spread_segment_correlation")])
def test_a_scope_that_cannot_exist_is_refused_naming_its_field(fields, named):
    with pytest.raises(SpecError) as exc:
        SpreadScope(*fields)
    assert exc.value.field == named

