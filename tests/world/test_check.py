"""`world.resolve.check`: what a study's parent runs on every point before anything simulates.
It must refuse exactly what `resolve` refuses, with the same message, while building no step-cost
table (the worker that runs the point resolves it, once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specsim.world.resolve as resolve_module
from specsim.scenario import ScenarioError, load_scenario
from specsim.world.resolve import check, resolve

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [ROOT / "scenarios" / "efficient_rollout_a100.yaml", ROOT / "scenarios" / "8b_rl_think_async.yaml"]

#: overrides a point may carry, several of them refused by `resolve` at different stages: the
#: GEMMs' math dtype (fp8 on an A100: found while pricing the step), the layout, the KV
#: capacity, the memory plan, the trainer's dtype and context parallelism
OVERRIDES = ["rollout.weight_dtype=fp8", "rollout.weight_dtype=int8", "rollout.tp=3", "rollout.kv_capacity_tokens=100",
             "rollout.gpu_memory_utilization=0.2", "training.dtype=fp8", "training.cp=3", "speculation.k=3",
             "speculation.policy=off", "rollout.max_batch=8"]


def _outcome(fn, sc) -> str:
    try:
        fn(sc)
    except ScenarioError as exc:
        return f"refused: {exc}"
    return "ok"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(SCENARIOS), chosen=st.lists(st.sampled_from(OVERRIDES), max_size=3, unique=True))
def test_check_refuses_what_resolve_refuses_with_the_same_message(path, chosen):
    try:
        sc = load_scenario(path, chosen)
    except ScenarioError:   # refused by the schema already: neither function sees it
        return
    assert _outcome(check, sc) == _outcome(resolve, sc)


def test_check_builds_no_step_cost_table(monkeypatch):
    sc = load_scenario(SCENARIOS[0], [])

    def no_table(*args, **kwargs):
        raise AssertionError("check priced the step")

    monkeypatch.setattr(resolve_module, "step_cost_table", no_table)
    check(sc)
    with pytest.raises(AssertionError, match="priced the step"):
        resolve(sc)


def test_a_dtype_the_gpu_has_no_peak_for_is_refused_before_pricing():
    sc = load_scenario(SCENARIOS[0], ["rollout.weight_dtype=fp8"])
    with pytest.raises(ScenarioError, match="fp8"):
        check(sc)
