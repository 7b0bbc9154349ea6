"""world/fields.py: every lower-layer parameter maps to a field the scenario schema has, and a
bad value set in a scenario is reported under the path the user wrote (through resolve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.scenario import Scenario, ScenarioError, load_scenario
from specsim.scenario.paths import path_problem
from specsim.world.fields import SCENARIO_FIELDS, scenario_field
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
THINK = ROOT / "scenarios" / "8b_rl_think_sync.yaml"


@pytest.mark.parametrize("param, path", sorted(SCENARIO_FIELDS.items()))
def test_every_mapped_field_exists_in_the_schema(param, path):
    assert path_problem(path, Scenario) is None, f"{param} maps to {path}, which the scenario schema does not have"


def test_elements_keep_their_suffix_and_unknown_names_pass_through():
    assert scenario_field("context_curve[2][0]") == "drafter.context_curve[2][0]"
    assert scenario_field("lengths.components[1].p99") == "workload.response_tokens.components[1].p99"
    assert scenario_field("rollout.kv_capacity_tokens") == "rollout.kv_capacity_tokens"
    assert scenario_field("tree.depth", {"tree.depth": "drafter.tau_at_k"}) == "drafter.tau_at_k"


@pytest.mark.parametrize("override, field", [
    ("speculation.tree_sibling_factor=1.5", "speculation.tree_sibling_factor"),   # raised by workload's TreeShape
    ("drafter.staleness={rate_per_version: 0.1, floor_alpha: 0.95}",                # raised by workload's staleness law
     "drafter.staleness.floor_alpha"),
    ("drafter.context_curve=[[0, 1.0], [100, 1.5]]", "drafter.context_curve[1][1]"),
])
def test_resolve_names_the_scenario_field(override, field):
    sets = [override] + (["speculation.tree_branching=[2,1,1]"] if "tree" in override else [])
    with pytest.raises(ScenarioError) as exc:
        resolve(load_scenario(THINK, sets))
    assert exc.value.field == field
