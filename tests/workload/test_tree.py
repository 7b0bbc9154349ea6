"""Tree drafting: the expected longest accepted path, its sampling law, its cost, its scenario fields."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import make_config
from hypothesis import given
from hypothesis import strategies as st

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost, tree_step_cost
from specsim.errors import SpecError
from specsim.policy import Always
from specsim.scenario import ScenarioError, load_scenario
from specsim.sim.common import EngineWork
from specsim.sim.reference import run_reference
from specsim.workload.acceptance.drafter import (
    DrafterAcceptance,
    expected_tokens_per_verify,
    sample_tokens_per_verify,
    tokens_per_verify_pmf,
)
from specsim.workload.acceptance.shapes import TreeShape, tree_summary
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
Q8B = load_model("Qwen3-8B")
GB200 = load_hardware("gb200")
TP1 = ParallelLayout(tp=1)
EAGLE = drafter_arch("eagle3", Q8B)


@given(alpha=st.floats(0.0, 0.99), k=st.integers(1, 8), decay=st.floats(0.5, 1.0), rho=st.floats(0.0, 1.0))
def test_a_chain_is_the_chain_formula(alpha, k, decay, rho):
    chain = TreeShape((1,) * k, rho)
    assert chain.expected_tokens(alpha, decay) == pytest.approx(expected_tokens_per_verify(alpha, k, decay), rel=1e-12)


@given(alpha=st.floats(0.01, 0.95), b=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_tree_between_chain_and_independent_bound(alpha, b):
    tree = TreeShape(tuple(b))
    chain = expected_tokens_per_verify(alpha, len(b))
    independent = TreeShape(tuple(b), 1.0).expected_tokens(alpha)
    got = tree.expected_tokens(alpha)
    assert chain - 1e-12 <= got <= independent + 1e-12
    assert got <= len(b) + 1


def test_depth_acceptance_formula_and_shape():
    tree = TreeShape((3, 2), 0.5)
    beta = tree.depth_acceptance(np.array([0.6, 0.2]), decay=0.9)
    a1, a2 = 0.6, 0.6 * 0.9
    assert beta.shape == (2, 2)
    assert beta[0, 0] == pytest.approx(1 - (1 - a1) * (1 - 0.5 * a1) * (1 - 0.25 * a1))
    assert beta[0, 1] == pytest.approx(1 - (1 - a2) * (1 - 0.5 * a2))
    assert tree.tokens == 3 + 6 and tree.depth == 2


def test_tree_pmf_and_sampling_match_the_expectation():
    tree = TreeShape((4, 2, 1))
    alphas = np.linspace(0.2, 0.9, 7)
    pmf = tokens_per_verify_pmf(alphas, 3, 1.0, tree=tree)
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0)
    np.testing.assert_allclose(pmf @ np.arange(1, 5), tree.expected_tokens(alphas), rtol=1e-12)
    draws = sample_tokens_per_verify(np.random.default_rng(3), np.full(200_000, 0.6), 3, tree=tree)
    assert draws.mean() == pytest.approx(tree.expected_tokens(0.6), rel=0.01)
    with pytest.raises(SpecError, match="^k "):
        tokens_per_verify_pmf(0.5, 2, tree=tree)


def test_tree_cost_verifies_all_tree_tokens_and_a_chain_costs_like_k():
    n = np.array([1.0, 64.0])
    chain = tree_step_cost(Q8B, EAGLE, GB200, TP1, n, TreeShape((1, 1, 1)), 2.0).time_s(64 * 2000)
    np.testing.assert_allclose(chain, step_cost(Q8B, EAGLE, GB200, TP1, n, 3, 2.0).time_s(64 * 2000), rtol=1e-12)
    wide = tree_step_cost(Q8B, EAGLE, GB200, TP1, n, TreeShape((4, 2, 1)), 2.0).time_s(64 * 2000)
    assert np.all(wide > chain)


def test_reference_engine_reports_the_tree_tau():
    acc = DrafterAcceptance.from_tau("eagle3", 2.77, 3, concentration=8.0)
    tree = TreeShape((4, 2, 1))
    want = acc.tau(3, tree=tree)
    assert want > acc.tau(3)
    rng = np.random.default_rng(5)
    n = 2000
    alphas = acc.sample_alphas(rng, n)
    lengths = np.clip(np.rint(500 * np.exp(0.7 * rng.standard_normal(n))), 20, 5000).astype(np.int64)
    work = EngineWork(np.arange(n), np.arange(n) // 8, np.full(n, 128, dtype=np.int64), lengths, alphas)
    cfg = replace(make_config(Always(k=3, tree=tree), max_batch=256), record_timeline=False)
    res = run_reference(cfg, work, np.random.default_rng(6))
    assert res.sd_tokens / res.sd_seq_steps == pytest.approx(want, rel=0.01)


def test_scenario_tree_fields_resolve_and_validate():
    w = resolve(load_scenario(SCENARIO, ["speculation.tree_branching=[4,2,1]"]))
    assert w.policy.tree.branching == (4, 2, 1) and "tree=[4, 2, 1]" in w.policy.label
    plain = resolve(load_scenario(SCENARIO))
    i = plain.table.index(3)
    assert np.all(w.table.fixed_s[i, 1:] > plain.table.fixed_s[i, 1:])
    with pytest.raises(ScenarioError, match="speculation.k"):
        resolve(load_scenario(SCENARIO, ["speculation.tree_branching=[4,2]"]))
    with pytest.raises(ScenarioError, match="speculation.tree_branching"):
        resolve(load_scenario(SCENARIO, ["speculation.tree_branching=[4,0,1]"]))
    for policy in ("toggle", "adaptive"):   # they price a chain's τ: a tree is refused by name
        with pytest.raises(ScenarioError, match="speculation.tree_branching"):
            resolve(load_scenario(SCENARIO, ["speculation.tree_branching=[4,2,1]", f"speculation.policy={policy}"]))


def test_tree_summary_for_show_drafter():
    acc = DrafterAcceptance.from_tau("eagle3", 2.77, 3)
    s = tree_summary(acc, TreeShape((4, 2, 1)))
    assert s["tree_tokens"] == 20 and s["depth"] == 3
    assert s["chain_tau_same_depth"] == pytest.approx(2.77)
    assert s["expected_accepted_tokens"] == pytest.approx(s["tau"] - 1)
