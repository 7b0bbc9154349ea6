"""SGLang's EAGLE beam tree (workload/acceptance/shapes.py) and its step cost (cost/step.tree_step_cost)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost, tree_step_cost
from specsim.errors import SpecError
from specsim.scenario import load_scenario
from specsim.workload.acceptance.laws import expected_tokens_per_verify, tokens_per_verify_pmf
from specsim.workload.acceptance.shapes import TopKTree, TreeShape
from specsim.world.resolve import resolve

M7 = load_model("Qwen2.5-7B")
EAGLE = drafter_arch("eagle3", M7)
H100 = load_hardware("h100_sxm")
TP1 = ParallelLayout(tp=1)
SCEN = "scenarios/7b_h100_sync.yaml"


@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 0.99), st.integers(1, 7), st.floats(0.5, 1.0))
def test_topk_one_is_the_chain(alpha, d, decay):
    """K = 1, N = D + 1 (what SGLang forces for topk 1) is the chain of D drafts."""
    assert TopKTree(d, 1, d + 1).expected_tokens(alpha, decay) == pytest.approx(
        float(expected_tokens_per_verify(alpha, d, decay)), rel=1e-12)


def test_full_budget_beam_of_width_k_matches_full_tree_when_beam_keeps_all():
    """K = 2, D = 2, every candidate verified (N = 1 + 2 + 4): the beam keeps both depth-1 nodes,
    so the tree is the full tree b = (2, 2) and both laws agree."""
    a = np.array([0.3, 0.6, 0.9])
    assert TopKTree(2, 2, 7).expected_tokens(a) == pytest.approx(TreeShape((2, 2)).expected_tokens(a))


def test_tau_grows_with_budget_and_is_bounded():
    a = np.linspace(0.05, 0.95, 10)
    small, mid, big = (TopKTree(5, 8, n).expected_tokens(a) for n in (8, 32, 64))
    assert np.all(small <= mid + 1e-12) and np.all(mid <= big + 1e-12)
    assert np.all(big <= 6.0) and np.all(TopKTree(5, 8, 32).expected_tokens(a) >= expected_tokens_per_verify(a, 5) - 1e-12)


def test_pmf_of_topk_tree_sums_to_one_and_has_its_mean():
    tree = TopKTree(5, 4, 8)
    a = np.array([0.4, 0.8])
    pmf = tokens_per_verify_pmf(a, 5, tree=tree)
    assert np.allclose(pmf.sum(axis=-1), 1.0)
    assert np.allclose((pmf * np.arange(1, 7)).sum(axis=-1), tree.expected_tokens(a))


def test_bad_topk_tree_is_a_spec_error():
    with pytest.raises(SpecError, match="^tree.verify_tokens "):
        TopKTree(2, 2, 8)          # 1 + 2 + 4 = 7 candidates at most
    with pytest.raises(SpecError, match="^tree.topk "):
        TopKTree(3, 0, 4)


def test_chain_topk_tree_costs_the_chain_step():
    n = np.array([1.0, 8.0, 64.0])
    chain = step_cost(M7, EAGLE, H100, TP1, n, 5, 3.0).time_s(n * 1000)
    tree = tree_step_cost(M7, EAGLE, H100, TP1, n, TopKTree(5, 1, 6), 3.0).time_s(n * 1000)
    assert np.allclose(chain, tree)


def test_verify_cost_grows_with_tree_tokens_and_crosses_into_compute_bound():
    """At batch 2 a 32-token tree costs about what an 8-token one does (weights dominate, memory
    bound); at batch 32 it runs B·32 = 1024 tokens through the GEMMs, past H100's ridge
    (~ peak FLOP/s ÷ HBM B/s ≈ 300 tokens for bf16), so it costs several decode steps."""
    def ratio(b, n_verify):
        sd = tree_step_cost(M7, EAGLE, H100, TP1, b, TopKTree(5, 8, n_verify), 4.0).time_s(b * 500)
        ar = step_cost(M7, EAGLE, H100, TP1, b, 0).time_s(b * 500)
        return float(sd / ar)
    assert ratio(2, 8) < ratio(2, 32) < ratio(2, 64)
    assert ratio(32, 8) < ratio(32, 32) < ratio(32, 64)
    assert ratio(2, 32) < 1.3 * ratio(2, 8)          # memory bound: extra tree tokens nearly free
    assert ratio(32, 32) > 1.5 * ratio(32, 8)        # compute bound: they cost time
    assert ratio(32, 32) > 1.5 * ratio(2, 32)


def test_scenario_topk_tree_and_tau_on_a_tree_round_trip():
    ov = ["speculation.tree_topk=8", "speculation.tree_verify_tokens=32", "drafter.tau=4.68",
          "drafter.tau_tree_topk=8", "drafter.tau_tree_verify_tokens=32"]
    w = resolve(load_scenario(SCEN, ov))
    assert isinstance(w.policy.tree, TopKTree) and "topk=8" in w.policy.label
    assert w.acceptance.tau(5, tree=w.policy.tree) == pytest.approx(4.68, rel=1e-6)
    assert w.acceptance.tau(5) < 4.68     # the same drafter on a chain of 5 emits fewer tokens
    # the scenario's staleness (tau_after 2.0 after 100 versions) is solved on the same tree
    assert w.acceptance.tau(5, step=100, tree=w.policy.tree) == pytest.approx(2.0, rel=1e-6)


def test_topk_without_verify_tokens_is_an_error():
    from specsim.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="tree_verify_tokens"):
        resolve(load_scenario(SCEN, ["speculation.tree_topk=8"]))
