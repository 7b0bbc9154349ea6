"""`specsim plan` over mixed GPU pools: a `plan.hardware` entry TRAINING+ROLLOUT is one pair of
profiles; its candidates run as that pair (their overrides reproduce it in a plain run), cost
their two pools' prices, and a pair asked of a sync scenario is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.study.planner import plan_checks
from specsim.study.planner.candidates import enumerate_candidates
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
MIXED = str(ROOT / "scenarios" / "mixed_gb200_train_h200_gen.yaml")


def test_the_plan_enumerates_each_entry_and_the_pair_runs_as_the_pair():
    sc = load_scenario(MIXED)
    cands, rejected = enumerate_candidates(sc, sc.plan)
    assert not rejected
    kinds = {c.hardware for c in cands}
    assert kinds == {"gb200", "h200_sxm", "gb200+h200_sxm"}
    for c in cands:
        w = resolve(apply_overrides(sc, c.overrides))
        train, roll = c.pools
        assert (w.trainer_hw.name, w.hw.name) == (train, roll), c.label()
        assert w.mixed_hardware == c.mixed


def test_a_pair_costs_each_pool_at_its_own_price():
    sc = load_scenario(MIXED)
    usd = sc.output.gpu_hour_usd
    cands, _ = enumerate_candidates(sc, sc.plan)
    for c in cands:
        train, roll = c.pools
        want = c.rollout_gpus * usd[roll] + c.training_gpus * usd[train]
        assert c.usd_per_hour(usd) == pytest.approx(want)
        assert c.usd_per_gpu_hour(usd) * c.total_gpus == pytest.approx(want)
    pair = next(c for c in cands if c.mixed)
    assert pair.usd_per_hour({"gb200": 6.0}) is None           # the rollout profile has no price


def test_min_usd_needs_a_price_for_each_profile_of_a_pair():
    with pytest.raises(ScenarioError) as info:
        plan_checks(load_scenario(MIXED, ["output.gpu_hour_usd={gb200: 6.0}", "plan.hardware=[gb200+h200_sxm]"]))
    assert info.value.field == "output.gpu_hour_usd" and "h200_sxm" in info.value.allowed


def test_a_mixed_scenario_plans_its_own_pair_by_default():
    sc = load_scenario(MIXED, ["plan.hardware=null"])
    cands, _ = enumerate_candidates(sc, sc.plan)
    assert {c.hardware for c in cands} == {"gb200+h200_sxm"}


def test_a_pair_in_a_sync_plan_is_refused_naming_the_field():
    sc = load_scenario(str(ROOT / "scenarios" / "8b_rl_think_sync.yaml"), ["plan.hardware=[gb200+h200_sxm]",
                                                                             "plan.total_gpus=64"])
    with pytest.raises(ScenarioError) as info:
        enumerate_candidates(sc, sc.plan)
    assert info.value.field == "plan.hardware" and "async" in info.value.allowed


@pytest.mark.parametrize("entry", ["a+b+c", "+h20", "gb200+"])
def test_a_malformed_pair_is_refused(entry):
    with pytest.raises(ScenarioError) as info:
        load_scenario(MIXED, [f"plan.hardware=[{entry!r}]"])
    assert "plan.hardware" in info.value.field


def test_a_single_type_plan_of_a_scenario_without_pool_fields_keeps_its_candidate_ids():
    """Plain scenarios' candidates set `hardware` only: their ids (and resumed plan folders) are unchanged."""
    sc = load_scenario(str(ROOT / "scenarios" / "30b_a3b_h100_async.yaml"),
                       ["plan.total_gpus=32", "plan.layouts=[{tp: 2, ep: 2}]", "plan.k=[0]"])
    cands, _ = enumerate_candidates(sc, sc.plan)
    assert all(set(c.overrides) >= {"hardware"} and "training.hardware" not in c.overrides for c in cands)
