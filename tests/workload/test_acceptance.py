"""Tests for specsim.workload.acceptance.drafter: tokens per verify, back-solving, sampling, staleness."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.workload.acceptance.drafter import (
    DrafterAcceptance,
    Staleness,
    alpha_from_tau,
    expected_tokens_per_verify,
    sample_sequence_alphas,
    sample_tokens_per_verify,
    staleness_from_taus,
    temperature_alpha,
    tokens_per_verify_pmf,
    tokens_per_verify_var,
)
from specsim.world.fields import scenario_field

ALPHAS = [0.0, 0.1, 0.3, 0.5, 0.7, 0.85, 0.9, 0.99]
KS = [0, 1, 2, 3, 5, 7]


# --------------------------------------------------------------------------- expected tokens


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_expected_tokens_closed_form_constant_alpha(alpha, k):
    leviathan = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert expected_tokens_per_verify(alpha, k) == pytest.approx(leviathan, rel=1e-12)
    # the same through the general (position-sum) definition
    assert expected_tokens_per_verify(alpha, k) == pytest.approx(sum(alpha**j for j in range(k + 1)), rel=1e-12)


def test_expected_tokens_limits_and_vectorisation():
    assert expected_tokens_per_verify(0.0, 5) == 1.0
    assert expected_tokens_per_verify(1.0, 5) == 6.0
    assert expected_tokens_per_verify(1 - 1e-12, 5) == pytest.approx(6.0, rel=1e-10)
    assert expected_tokens_per_verify(0.8, 0) == 1.0
    alphas = np.array(ALPHAS)
    vec = expected_tokens_per_verify(alphas, 3)
    assert vec.shape == alphas.shape
    np.testing.assert_allclose(vec, [expected_tokens_per_verify(a, 3) for a in ALPHAS], rtol=0, atol=0)
    # broadcast alpha (n, 1) against k (m,) and decay
    grid = expected_tokens_per_verify(alphas[:, None], np.array(KS), 0.9)
    assert grid.shape == (len(ALPHAS), len(KS))
    for i, a in enumerate(ALPHAS):
        for j, k in enumerate(KS):
            expected = 1 + sum(a**m * 0.9 ** (m * (m - 1) / 2) for m in range(1, k + 1))
            assert grid[i, j] == pytest.approx(expected, rel=1e-12)


def test_position_decay_lowers_tau():
    assert expected_tokens_per_verify(0.8, 5, 0.9) < expected_tokens_per_verify(0.8, 5, 1.0)
    # only the first position matters for k = 1
    assert expected_tokens_per_verify(0.8, 1, 0.5) == pytest.approx(1.8)


@pytest.mark.parametrize("alpha,k,decay", [(0.5, 3, 1.0), (0.7, 3, 1.0), (0.8, 5, 1.0), (0.9, 7, 1.0), (0.85, 5, 0.9)])
def test_expected_tokens_matches_monte_carlo(alpha, k, decay):
    rng = np.random.default_rng(1234)
    draws = sample_tokens_per_verify(rng, np.full(100_000, alpha), k, decay)
    assert draws.dtype == np.int64
    assert draws.min() >= 1 and draws.max() <= k + 1
    assert draws.mean() == pytest.approx(expected_tokens_per_verify(alpha, k, decay), rel=0.01)
    assert draws.var() == pytest.approx(tokens_per_verify_var(alpha, k, decay), rel=0.03)
    # the empirical distribution matches the pmf
    pmf = tokens_per_verify_pmf(alpha, k, decay)
    freq = np.bincount(draws, minlength=k + 2)[1:] / draws.size
    np.testing.assert_allclose(freq, pmf, atol=0.005)


def test_sample_tokens_heterogeneous_alphas_and_edges():
    rng = np.random.default_rng(7)
    a = np.array([0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(sample_tokens_per_verify(rng, a, 4), [1, 5, 1, 5])
    assert sample_tokens_per_verify(rng, np.full(10, 0.9), 0).tolist() == [1] * 10
    alphas = np.random.default_rng(3).uniform(0.2, 0.9, 100_000)
    draws = sample_tokens_per_verify(rng, alphas, 4)
    assert draws.mean() == pytest.approx(expected_tokens_per_verify(alphas, 4).mean(), rel=0.01)


# --------------------------------------------------------------------------- pmf / variance


@pytest.mark.parametrize("decay", [1.0, 0.8])
@pytest.mark.parametrize("k", [0, 1, 3, 7])
def test_pmf_sums_to_one_and_mean_matches(k, decay):
    alphas = np.array(ALPHAS)
    pmf = tokens_per_verify_pmf(alphas, k, decay)
    assert pmf.shape == (len(ALPHAS), k + 1)
    assert (pmf >= 0).all()
    np.testing.assert_allclose(pmf.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    emitted = np.arange(1, k + 2)
    mean = (pmf * emitted).sum(axis=-1)
    np.testing.assert_allclose(mean, expected_tokens_per_verify(alphas, k, decay), rtol=1e-12)
    var = (pmf * emitted**2).sum(axis=-1) - mean**2
    np.testing.assert_allclose(tokens_per_verify_var(alphas, k, decay), var, rtol=1e-9, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.0, 1.0), k=st.integers(0, 12), decay=st.floats(0.05, 1.0))
def test_pmf_property(alpha, k, decay):
    pmf = tokens_per_verify_pmf(alpha, k, decay)
    assert pmf.shape == (k + 1,)
    assert abs(pmf.sum() - 1.0) < 1e-12
    assert abs((pmf * np.arange(1, k + 2)).sum() - expected_tokens_per_verify(alpha, k, decay)) < 1e-9


# --------------------------------------------------------------------------- back-solving


@settings(max_examples=300, deadline=None)
@given(alpha=st.floats(0.0, 0.999), k=st.integers(1, 12), decay=st.floats(0.3, 1.0))
def test_alpha_tau_round_trip(alpha, k, decay):
    tau = expected_tokens_per_verify(alpha, k, decay)
    assert abs(alpha_from_tau(tau, k, decay) - alpha) < 1e-9


@settings(max_examples=300, deadline=None)
@given(frac=st.floats(0.0, 0.999), k=st.integers(1, 12))
def test_tau_alpha_round_trip(frac, k):
    tau = 1.0 + frac * k
    assert abs(expected_tokens_per_verify(alpha_from_tau(tau, k), k) - tau) < 1e-9


def test_alpha_from_tau_edges():
    assert alpha_from_tau(1.0, 3) == 0.0
    assert alpha_from_tau(4.0, 3) == 1.0
    a = alpha_from_tau(2.5, 3)
    assert 1 + a + a**2 + a**3 == pytest.approx(2.5, abs=1e-12)


@pytest.mark.parametrize("tau,k", [(4.5, 3), (0.9, 3), (9.0, 7), (float("nan"), 3)])
def test_alpha_from_tau_rejects_impossible_tau(tau, k):
    with pytest.raises(SpecError) as e:
        alpha_from_tau(tau, k)
    assert e.value.field == "tau"
    assert "tau " in str(e.value)


def test_alpha_from_tau_with_decay_bounds():
    # with decay 0.5 at k = 3 the most one can get is 1 + 1 + 0.5 + 0.125 = 2.625
    with pytest.raises(SpecError, match="^tau "):
        alpha_from_tau(3.0, 3, 0.5)
    assert alpha_from_tau(2.625, 3, 0.5) == 1.0


# --------------------------------------------------------------------------- heterogeneity and temperature


def test_sequence_alphas_beta_and_homogeneous():
    rng = np.random.default_rng(5)
    a = sample_sequence_alphas(rng, 200_000, 0.7, 10.0)
    assert a.mean() == pytest.approx(0.7, abs=0.003)
    assert a.var() == pytest.approx(0.7 * 0.3 / 11.0, rel=0.03)
    assert ((a >= 0) & (a <= 1)).all()
    for c in (None, math.inf):
        state = rng.bit_generator.state
        same = sample_sequence_alphas(rng, 5, 0.7, c)
        np.testing.assert_array_equal(same, np.full(5, 0.7))
        assert rng.bit_generator.state == state  # nothing drawn


def test_population_tau_accounts_for_heterogeneity():
    d = DrafterAcceptance.from_tau("eagle3", 3.0, 3, concentration=5.0)
    assert d.tau(3) == pytest.approx(3.0, abs=1e-9)
    alphas = d.sample_alphas(np.random.default_rng(11), 200_000)
    assert alphas.mean() == pytest.approx(d.alpha0, abs=0.003)
    per_seq = expected_tokens_per_verify(alphas, 3)
    # what an engine reports weighs every verify step once: the harmonic mean of per-sequence tau
    assert 1.0 / np.mean(1.0 / per_seq) == pytest.approx(3.0, rel=0.005)
    # ... which is below the plain average of per-sequence tau (Jensen)
    assert per_seq.mean() > 3.0 * 1.02


def test_temperature_alpha_heuristic():
    temps = np.array([0.0, 0.3, 0.6, 1.0, 1.3, 2.0])
    a = temperature_alpha(0.7, temps)
    assert temperature_alpha(0.7, 1.0) == pytest.approx(0.7, rel=1e-15)
    assert temperature_alpha(0.7, 0.5, ref_temperature=0.5) == pytest.approx(0.7, rel=1e-15)
    assert (np.diff(a) < 0).all()
    assert ((a >= 0) & (a < 1)).all()
    assert temperature_alpha(0.0, 0.0) == 0.0
    np.testing.assert_allclose(temperature_alpha(0.7, temps, sensitivity=0.0), 0.7)
    with pytest.raises(SpecError, match="^temperature "):
        temperature_alpha(0.7, -0.1)


# --------------------------------------------------------------------------- staleness


K_RESPEC = 7  # draft length used to read ReSpec's acceptance lengths (a calibration assumption)


def _respec_like(update_every_steps=0):
    # ReSpec (arXiv 2510.26475, Fig. 4): fixed EAGLE-3 drafter, acceptance length ~4 -> ~2 over
    # 100 RL steps. These are the *inputs* of the calibration; the model must reproduce them.
    st_ = staleness_from_taus(tau_fresh=4.0, tau_after=2.0, after_versions=100, k=K_RESPEC)
    return DrafterAcceptance.from_tau("eagle3", 4.0, K_RESPEC, staleness=st_, update_every_steps=update_every_steps)


def test_staleness_fixed_drafter_falls_4_to_2_over_100_steps():
    d = _respec_like()
    taus = np.array([d.tau(K_RESPEC, s) for s in range(101)])
    assert taus[0] == pytest.approx(4.0, abs=1e-9)
    assert taus[100] == pytest.approx(2.0, abs=1e-9)
    assert (np.diff(taus) < 0).all()
    assert 2.0 < taus[50] < 4.0
    assert d.versions_since_update(37) == 37


def test_online_updates_keep_tau_up():
    d = _respec_like(update_every_steps=10)
    taus = np.array([d.tau(K_RESPEC, s) for s in range(101)])
    assert taus.min() > 3.5
    assert taus[0] == taus[10] == taus[100] == pytest.approx(4.0, abs=1e-9)
    assert d.versions_since_update(23) == 3
    np.testing.assert_array_equal(d.versions_since_update(np.arange(25)), np.arange(25) % 10)


def test_self_drafter_tau_constant():
    d = DrafterAcceptance.from_tau("self_quant", 2.2, 3)
    taus = [d.tau(3, s) for s in range(0, 500, 7)]
    assert taus == pytest.approx([2.2] * len(taus), abs=1e-12)
    assert d.alpha_at_version(1e6) == d.alpha0
    with pytest.raises(SpecError, match="^staleness "):
        DrafterAcceptance("self_quant", 0.5, staleness=Staleness(0.0, 0.01))
    with pytest.raises(SpecError, match="^update_every_steps "):
        DrafterAcceptance("self_quant", 0.5, update_every_steps=5)


def test_staleness_formula_and_floor():
    s = Staleness(floor_alpha=0.3, decay_per_version=0.05)
    assert s.alpha(0.8, 0) == pytest.approx(0.8)
    assert s.alpha(0.8, 20) == pytest.approx(0.3 + 0.5 * math.exp(-1.0))
    assert s.alpha(0.8, 1e9) == pytest.approx(0.3)
    assert Staleness.never().alpha(0.8, 1e9) == 0.8
    st_ = staleness_from_taus(4.0, 2.0, 100, K_RESPEC, floor_alpha=0.2)
    d = DrafterAcceptance.from_tau("eagle3", 4.0, K_RESPEC, staleness=st_)
    assert d.tau(K_RESPEC, 100) == pytest.approx(2.0, abs=1e-9)
    assert d.alpha_at_step(10_000) == pytest.approx(0.2, abs=1e-6)
    with pytest.raises(SpecError, match="^staleness.floor_alpha "):
        staleness_from_taus(4.0, 2.0, 100, K_RESPEC, floor_alpha=0.6)
    with pytest.raises(SpecError, match="^staleness.tau_after "):
        staleness_from_taus(2.0, 4.0, 100, K_RESPEC)


def test_sample_alphas_follow_staleness():
    d = _respec_like()
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(d.sample_alphas(rng, 4, step=100), np.full(4, d.alpha_at_step(100)))
    het = DrafterAcceptance("eagle3", 0.8, concentration=20.0, staleness=d.staleness)
    a = het.sample_alphas(np.random.default_rng(1), 100_000, step=100)
    assert a.mean() == pytest.approx(het.alpha_at_step(100), abs=0.003)


# --------------------------------------------------------------------------- validation, determinism


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: DrafterAcceptance("eagle3", 1.0), "drafter.alpha"),
        (lambda: DrafterAcceptance("eagle3", -0.1), "drafter.alpha"),
        (lambda: DrafterAcceptance("eagle3", 0.5, decay=0.0), "drafter.position_decay"),
        (lambda: DrafterAcceptance("eagle3", 0.5, decay=1.2), "drafter.position_decay"),
        (lambda: DrafterAcceptance("eagle3", 0.5, concentration=0.0), "drafter.heterogeneity"),
        (lambda: DrafterAcceptance("eagle3", 0.5, concentration=-2), "drafter.heterogeneity"),
        (lambda: DrafterAcceptance("medusa", 0.5), "drafter.kind"),
        (lambda: DrafterAcceptance("eagle3", 0.5, update_every_steps=-1), "drafter.update_every_steps"),
        (lambda: DrafterAcceptance.from_tau("eagle3", 4.5, 3), "drafter.tau"),
        (lambda: DrafterAcceptance.from_tau("eagle3", 4.0, 3), "drafter.tau"),
        (lambda: DrafterAcceptance.from_tau("eagle3", 2.0, 0), "drafter.tau_at_k"),
        (lambda: expected_tokens_per_verify(1.5, 3), "drafter.alpha"),
        (lambda: expected_tokens_per_verify(np.array([0.5, -0.2]), 3), "drafter.alpha"),
        (lambda: expected_tokens_per_verify(0.5, -1), "speculation.k"),
        (lambda: expected_tokens_per_verify(0.5, 2.5), "speculation.k"),
        (lambda: tokens_per_verify_pmf(0.5, -2), "speculation.k"),
        (lambda: sample_sequence_alphas(np.random.default_rng(0), 3, 1.0, 5.0), "drafter.alpha"),
        (lambda: Staleness(floor_alpha=1.0), "drafter.staleness.floor_alpha"),
        (lambda: Staleness(decay_per_version=-0.1), "drafter.staleness.rate_per_version"),
        (lambda: DrafterAcceptance("eagle3", 0.3, staleness=Staleness(0.5, 0.1)), "drafter.staleness.floor_alpha"),
    ],
)
def test_bad_inputs_raise_spec_error_naming_field(make, field):
    with pytest.raises(SpecError) as e:
        make()
    # the workload layer names its own parameter; the world layer maps it to the scenario field
    assert scenario_field(e.value.field) == field
    assert e.value.field in str(e.value)


def test_same_seed_same_draws():
    alphas = np.linspace(0.1, 0.9, 1000)
    a = sample_tokens_per_verify(np.random.default_rng(42), alphas, 5, 0.95)
    b = sample_tokens_per_verify(np.random.default_rng(42), alphas, 5, 0.95)
    np.testing.assert_array_equal(a, b)
    d = DrafterAcceptance("mtp", 0.75, concentration=8.0)
    np.testing.assert_array_equal(d.sample_alphas(np.random.default_rng(9), 500, 3),
                                  d.sample_alphas(np.random.default_rng(9), 500, 3))
    assert not np.array_equal(a, sample_tokens_per_verify(np.random.default_rng(43), alphas, 5, 0.95))


def test_drafter_is_frozen_and_hashable():
    d = DrafterAcceptance.from_tau("eagle3", 2.47, 3)
    with pytest.raises(AttributeError):
        d.alpha0 = 0.1
    assert hash(d) == hash(DrafterAcceptance.from_tau("eagle3", 2.47, 3))
    assert d.tau(3) == pytest.approx(2.47, abs=1e-12)


def test_staleness_from_taus_measured_on_a_tree_is_solved_on_that_tree():
    """A τ measured drafting SGLang's beam tree (drafter.tau_tree_*) is not a chain τ: the fresh α
    is back-solved on the tree (from_tau), so the staleness rate must be solved on it too, or the
    τ the run reports after `after_versions` misses tau_after."""
    from specsim.workload.acceptance.shapes import TopKTree

    tree = TopKTree(5, 8, 32)
    st_tree = staleness_from_taus(4.68, 2.5, 100, 5, decay=0.94, concentration=6.7, tree=tree)
    st_chain = staleness_from_taus(4.68, 2.5, 100, 5, decay=0.94, concentration=6.7)
    d = DrafterAcceptance.from_tau("eagle3", 4.68, 5, decay=0.94, concentration=6.7, staleness=st_tree, tree=tree)
    assert d.tau(5, 0, tree=tree) == pytest.approx(4.68, rel=1e-6)
    assert d.tau(5, 100, tree=tree) == pytest.approx(2.5, rel=1e-6)
    wrong = DrafterAcceptance.from_tau("eagle3", 4.68, 5, decay=0.94, concentration=6.7, staleness=st_chain, tree=tree)
    assert abs(wrong.tau(5, 100, tree=tree) - 2.5) > 0.05
