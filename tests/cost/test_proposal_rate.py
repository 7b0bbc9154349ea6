"""Proposal rate p: drafters that may propose nothing (vLLM's n-gram proposer without a match).

A request-step carries a draft with probability p (else it decodes one token), so the tokens per
request-step are 1 + p·(τ − 1) while the reported τ stays vLLM's conditional mean acceptance
length (1 + accepted / num_drafts). These tests hold both engines to that law, p = 1 to the old
behaviour, the two engines to each other, lengths to their draws, and bad p to located errors.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from engine_helpers import make_config, make_work

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, drafter_kind, load_model
from specsim.cost.forward import prefill_batches_s
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost, step_cost_table
from specsim.errors import SpecError
from specsim.policy import Always, PolicyContext
from specsim.scenario import ScenarioError
from specsim.sim.common import EngineConfig
from specsim.sim.engine.loop import run_fast
from specsim.sim.reference import run_reference
from specsim.workload.acceptance.drafter import DrafterAcceptance, expected_tokens_per_verify

ALPHA, K = 0.6, 3


def _cfg(p: float, drafter: str = "ngram", policy=None, kv: int = 10**7) -> EngineConfig:
    policy = policy or Always(k=K)
    m, hw, layout = load_model("Qwen3-8B"), load_hardware("h100_sxm"), ParallelLayout(tp=1)
    table = step_cost_table(m, drafter_arch(drafter, m), hw, layout, 64, policy.ks, proposal_rate=p)
    return EngineConfig("t", table, policy, PolicyContext(table, ALPHA, 1.0, p), 64, kv, 16,
                        partial(prefill_batches_s, m, hw, layout), proposal_rate=p)


def test_registry_rates():
    """Model drafters propose every step; the n-gram default is sourced and in (0, 1)."""
    for kind in ("eagle3", "mtp", "self_quant"):
        assert drafter_kind(kind).proposal_rate == 1.0
    ng = drafter_kind("ngram")
    assert 0 < ng.proposal_rate < 1 and "19254" in ng.proposal_rate_source
    assert DrafterAcceptance("ngram", 0.5).proposal_rate == ng.proposal_rate
    assert DrafterAcceptance("eagle3", 0.5).proposal_rate == 1.0


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_effective_tokens_closed_form(engine, p):
    """Tokens per SD request-step = 1 + p·(τ − 1) within 1 % and the conditional τ = τ(α, k)
    within 0.5 %/p (fixed seeds, ~100k tokens: the steps-to-finish noise is ~0.15 % of the
    tokens per step, and the conditional τ carries it amplified by 1/p)."""
    cfg = _cfg(p)
    tau = float(expected_tokens_per_verify(ALPHA, K))
    runner = run_fast if engine == "fast" else run_reference
    work = make_work(3, groups=32, group_size=8, median=400, alpha=ALPHA)
    res = runner(cfg, work, np.random.default_rng(7))
    assert res.tokens_per_seq_step == pytest.approx(1 + p * (tau - 1), rel=0.01)
    assert res.mean_accept_len == pytest.approx(tau, rel=0.005 / p)
    assert np.array_equal(res.tokens, work.response_tokens)   # SD never changes what is generated


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_p_one_reproduces_previous_behaviour(engine):
    """p = 1 (explicit) is bit-identical to the default config: same table, same rng use, same result."""
    policy = Always(k=K)
    base = make_config(policy, drafter="eagle3", mean_alpha=ALPHA)
    m, hw = load_model("Qwen3-8B"), load_hardware("h100_sxm")
    table1 = step_cost_table(m, drafter_arch("eagle3", m), hw, ParallelLayout(tp=1), 64, policy.ks, proposal_rate=1.0)
    assert np.array_equal(table1.fixed_s, base.table.fixed_s) and np.array_equal(table1.per_ctx_s, base.table.per_ctx_s)
    one = replace(base, table=table1, proposal_rate=1.0)
    runner = run_fast if engine == "fast" else run_reference
    work = make_work(5, groups=6, group_size=4, alpha=ALPHA)
    a = runner(base, work, np.random.default_rng(11))
    b = runner(one, work, np.random.default_rng(11))
    assert a.rollout_s == b.rollout_s and a.sd_tokens == b.sd_tokens and a.steps == b.steps
    assert a.mean_accept_len == b.mean_accept_len == a.tokens_per_seq_step
    assert np.array_equal(a.finish_s, b.finish_s)


@pytest.mark.parametrize("kv", [10**7, 16_000], ids=["ample", "tight"])
def test_fast_matches_reference_with_low_proposal_rate(kv):
    """p = 0.2: rollout time within 1.5 % (mean over 12 draws), identical tokens, τ and tokens per
    step within 2 %, on ample and preempting KV budgets."""
    cfg = _cfg(0.2, kv=kv)
    fast, ref, ft, rt = [], [], [], []
    for seed in range(12):
        work = make_work(seed, groups=16, group_size=8, median=500, cap=1200, alpha=ALPHA, concentration=10.0)
        f = run_fast(cfg, work, np.random.default_rng([seed, 1]))
        r = run_reference(cfg, work, np.random.default_rng([seed, 2]))
        assert f.total_tokens == r.total_tokens == int(work.response_tokens.sum())
        fast.append(f.rollout_s)
        ref.append(r.rollout_s)
        ft.append((f.tokens_per_seq_step, f.mean_accept_len))
        rt.append((r.tokens_per_seq_step, r.mean_accept_len))
    assert np.mean(fast) == pytest.approx(np.mean(ref), rel=0.015)
    assert np.mean(ft, axis=0) == pytest.approx(np.mean(rt, axis=0), rel=0.02)


def test_verify_priced_on_actual_query_tokens():
    """A lower p makes the SD step cheaper at large batch (fewer verify tokens) and never costs
    the n-gram search: every request is searched, found or not."""
    m, hw, layout = load_model("Qwen3-8B"), load_hardware("h100_sxm"), ParallelLayout(tp=1)
    ng = drafter_arch("ngram", m)
    n = np.array([256.0])
    full = step_cost(m, ng, hw, layout, n, K, proposal_rate=1.0)
    low = step_cost(m, ng, hw, layout, n, K, proposal_rate=0.1)
    ar = step_cost(m, None, hw, layout, n, 0)
    assert low.time_s(1e6) < full.time_s(1e6)
    assert low.time_s(1e6) > ar.time_s(1e6)   # still pays q = 1 + p·k, the search and the SD overheads
    assert low.per_ctx_token_s[0] - ar.per_ctx_token_s[0] >= 1.0 / hw.sd_costs.ngram_cpu_tokens_per_s - 1e-18


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), True, "half"])
def test_bad_proposal_rate_is_a_spec_error(bad):
    with pytest.raises(SpecError) as exc:
        DrafterAcceptance("ngram", 0.5, proposal_rate=bad)
    assert exc.value.field == "proposal_rate" and "(0, 1]" in exc.value.allowed


@pytest.mark.parametrize("bad", ["0", "1.5"])
def test_bad_proposal_rate_in_a_scenario_names_file_field_value(bad):
    from specsim.scenario import load_scenario
    with pytest.raises(ScenarioError) as exc:
        load_scenario("scenarios/8b_rl_think_sync.yaml", [f"drafter.proposal_rate={bad}"])
    msg = str(exc.value)
    assert "8b_rl_think_sync.yaml" in msg and "drafter.proposal_rate" in msg and bad in msg


def test_scenario_override_reaches_the_world():
    from specsim.scenario import load_scenario
    from specsim.world.resolve import resolve
    sc = load_scenario("scenarios/8b_rl_think_sync.yaml",
                       ["drafter.kind=ngram", "drafter.tau=2.05", "drafter.proposal_rate=0.3"])
    w = resolve(sc)
    assert w.acceptance.proposal_rate == 0.3
    assert w.acceptance.tau(3) == pytest.approx(2.05)
    assert w.acceptance.tokens_per_step(3) == pytest.approx(1 + 0.3 * 1.05)


def test_heterogeneous_population_reports_configured_tau():
    """With Beta-distributed α the conditional τ weights sequences by their steps, which depend
    on p; the back-solve accounts for it, so the simulated vLLM-style τ still matches the
    configured one (fast engine, fixed seed, within 3 %: 0.3 %/p of tokens-per-step noise)."""
    acc = DrafterAcceptance.from_tau("ngram", 2.05, K, concentration=4.0, proposal_rate=0.1)
    assert acc.tau(K) == pytest.approx(2.05, rel=1e-9)
    assert DrafterAcceptance.from_tau("ngram", 2.05, K, concentration=4.0, proposal_rate=1.0).alpha0 != acc.alpha0
    cfg = _cfg(0.1)
    rng = np.random.default_rng(2)
    work = make_work(9, groups=32, group_size=8, median=400)
    work = replace(work, alphas=acc.sample_alphas(rng, len(work)))
    res = run_fast(cfg, work, np.random.default_rng(3))
    assert res.mean_accept_len == pytest.approx(2.05, rel=0.03)
    assert res.tokens_per_seq_step == pytest.approx(acc.tokens_per_step(K), rel=0.01)
