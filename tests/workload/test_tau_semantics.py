"""The configured tau is the tau an engine reports (ratio of sums over verify steps).

vLLM's mean acceptance length is 1 + accepted draft tokens / drafts, summed over the whole run;
the engines here count emitted tokens (accepted + 1) / sequence-verify-steps, the same thing.
These tests run the step-by-step reference engine over many sequences with a fixed seed and
hold the measured tau to the configured one within 1 %.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import make_config
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.policy import Always
from specsim.sim.cluster import sequence_alphas
from specsim.sim.common import EngineWork
from specsim.sim.reference import run_reference
from specsim.workload.acceptance.drafter import DrafterAcceptance, alpha_from_tau, expected_tokens_per_verify
from specsim.workload.acceptance.population import mean_alpha_from_tau, plain_mean_tau, reported_tau

ROOT = Path(__file__).resolve().parents[2]


def _measured_tau(acc: DrafterAcceptance, k: int, n: int = 3000, seed: int = 7) -> float:
    rng = np.random.default_rng(seed)
    u = np.clip(rng.random(n), 1e-12, 1 - 1e-12)
    alphas = sequence_alphas(acc.alpha0, acc.concentration, u)  # the cluster's own sampler
    lengths = np.clip(np.rint(600 * np.exp(0.8 * rng.standard_normal(n))), 20, 6000).astype(np.int64)
    work = EngineWork(np.arange(n), np.arange(n) // 8, np.full(n, 128, dtype=np.int64), lengths, alphas)
    cfg = replace(make_config(Always(k=k), max_batch=256), position_decay=acc.decay,
                  record_timeline=False)
    res = run_reference(cfg, work, np.random.default_rng(seed + 1))
    return res.sd_tokens / res.sd_seq_steps


@pytest.mark.parametrize("tau,k,decay,conc", [
    (2.77, 3, 1.0, None),   # EAGLE-3, RL-Think (corrected)
    (3.32, 3, 1.0, 4.0),    # EAGLE-3, RL-Zero, heterogeneous
    (2.47, 3, 1.0, 2.0),    # n-gram, RL-Zero, strongly heterogeneous
    (2.6, 5, 0.9, 6.0),     # position decay and heterogeneity
])
def test_reference_engine_reports_configured_tau(tau, k, decay, conc):
    acc = DrafterAcceptance.from_tau("eagle3", tau, k, decay=decay, concentration=conc)
    assert acc.tau(k) == pytest.approx(tau, abs=1e-9)
    assert _measured_tau(acc, k) == pytest.approx(tau, rel=0.01)


def test_plain_average_would_overstate_tau():
    """The old back-solve matched E[tau(alpha)]; the engine reports 1/E[1/tau]: ~5 % apart at c = 2."""
    m = mean_alpha_from_tau(2.47, 3, 1.0, 2.0)
    assert reported_tau(m, 3, 1.0, 2.0) == pytest.approx(2.47, abs=1e-9)
    assert plain_mean_tau(m, 3, 1.0, 2.0) > 2.47 * 1.04


@settings(max_examples=40)
@given(tau_frac=st.floats(0.0, 0.999), k=st.integers(1, 8), decay=st.floats(0.5, 1.0),
       conc=st.one_of(st.none(), st.floats(0.05, 1e6)))
def test_population_round_trip(tau_frac, k, decay, conc):
    tau_max = float(expected_tokens_per_verify(1.0, k, decay))
    tau = 1.0 + tau_frac * (tau_max - 1.0)
    m = mean_alpha_from_tau(tau, k, decay, conc)
    assert 0.0 <= m <= 1.0
    assert reported_tau(m, k, decay, conc) == pytest.approx(tau, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("tau", [1.0000000000000002, 1.0 + 1e-12, 1.0 + 1e-9])
@pytest.mark.parametrize("k", [1, 4, 12])
def test_tau_just_above_one_back_solves(tau, k):
    a = alpha_from_tau(tau, k)
    assert 0.0 <= a < 1e-8
    assert expected_tokens_per_verify(a, k) == pytest.approx(tau, abs=1e-15)
    assert DrafterAcceptance.from_tau("eagle3", tau, k).tau(k) == pytest.approx(tau, abs=1e-15)


def test_check_with_tau_just_above_one_is_no_internal_error():
    """In-process (CliRunner): an exception escaping the command would be res.exception, which a
    process of its own would print as a traceback or an internal error."""
    res = CliRunner().invoke(app, ["check", str(ROOT / "scenarios/8b_rl_think_sync.yaml"),
                                   "--set", "drafter.tau=1.0000000000000002", "--set", "drafter.heterogeneity=null",
                                   "--set", "drafter.tau_at_k=4"])
    assert "internal error" not in res.output.lower() and res.exception is None, res.output
    assert res.exit_code == 0, res.output


def test_tau_after_and_general_tau_mean_the_reported_tau_too():
    from specsim.workload.acceptance.drafter import staleness_from_taus

    st_ = staleness_from_taus(3.32, 2.2, 50, 3, concentration=4.0)
    acc = DrafterAcceptance.from_tau("eagle3", 3.32, 3, concentration=4.0, staleness=st_)
    assert acc.tau(3, 0) == pytest.approx(3.32, abs=1e-9)
    assert acc.tau(3, 50) == pytest.approx(2.2, abs=1e-9)
    stale = DrafterAcceptance("eagle3", float(acc.alpha_at_step(50)), concentration=4.0)
    assert _measured_tau(stale, 3) == pytest.approx(2.2, rel=0.01)


@pytest.mark.parametrize("scenario", ["8b_rl_think_sync.yaml", "8b_rl_zero_sync.yaml"])
@pytest.mark.parametrize("k_off", [0, 2])
def test_fitted_eagle3_shape_keeps_configured_tau(scenario, k_off):
    """Under the shape fitted by `python calibration/recipes/acceptance_shape.py` (heterogeneity and position
    decay as the scenario carries them), the reference engine's ratio-of-sums tau equals the
    configured tau at tau_at_k, and the model's tau at k = tau_at_k + 2, within 1 %."""
    from specsim.scenario import load_scenario
    from specsim.world.resolve import acceptance_model

    sc = load_scenario(ROOT / "scenarios" / scenario)
    acc = acceptance_model(sc)
    assert acc.decay < 1.0 and acc.concentration is not None  # the fitted shape, not the old default
    k = sc.drafter.tau_at_k + k_off
    if k_off == 0:
        assert acc.tau(k) == pytest.approx(sc.drafter.tau, abs=1e-9)
    assert _measured_tau(acc, k) == pytest.approx(acc.tau(k), rel=0.01)
