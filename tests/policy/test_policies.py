"""The SD policies: the registry is the schema's list, each policy's vector choice equals its
one-engine choice, the schedule follows vLLM's Dynamic SD rules, and bad tables are refused."""

from __future__ import annotations

import typing

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.errors import SpecError
from specsim.policy import KINDS, POLICIES, POLICY_FIELDS, Adaptive, Always, Off, Schedule, Threshold, Toggle, choose_k
from specsim.policy.base import PolicyContext
from specsim.policy.schedule import parse_batch_schedule
from specsim.scenario import load_scenario
from specsim.scenario.schema import SpeculationSection
from specsim.study.sweep import run_doc
from specsim.world.resolve import resolve
from tests.small_sweep import TINY_SYNC

VLLM_EXAMPLE = {"1-16": 3, "64-128": 2, "256-4096": 0}   # PR #32374's example: gaps inherit the k before them


def test_the_schema_lists_the_registry():
    assert typing.get_args(SpeculationSection.model_fields["policy"].annotation) == KINDS
    assert set(KINDS) == {"off", "always", "threshold", "toggle", "adaptive", "schedule"}
    for cls in POLICIES.values():   # every field a policy reads is a schema field
        assert set(cls.fields) <= set(SpeculationSection.model_fields), cls.kind
    assert "k_per_batch_size" in POLICY_FIELDS


def test_schedule_follows_vllm_rules():
    pol = Schedule(k=3, table=parse_batch_schedule(VLLM_EXAMPLE))
    n = np.array([0, 1, 16, 17, 63, 64, 128, 129, 255, 256, 4096, 10_000])
    assert pol.choose(n).tolist() == [0, 3, 3, 3, 3, 2, 2, 2, 2, 0, 0, 0]
    clamped = Schedule(k=2, table=parse_batch_schedule({"1-8": 5, "9-64": 1}))   # min(num_speculative_tokens, k)
    assert clamped.choose(np.array([1, 8, 9, 500])).tolist() == [2, 2, 1, 1]
    assert clamped.ks == (0, 1, 2) and clamped.label == "schedule(1-8:2, 9-64:1)"
    assert parse_batch_schedule([[1, 16, 3], [64, 128, 2], [256, 4096, 0]]) == parse_batch_schedule(VLLM_EXAMPLE)


@pytest.mark.parametrize("table, says", [
    ({"1-16": 3, "9-64": 2}, "sorted by batch and disjoint"),
    ({"17-64": 2, "1-16": 3}, "sorted by batch and disjoint"),
    ({"1-16": -1}, ">= 0"),
    ({"0-16": 3}, ">= 1"),
    ({"2-16": 3}, "starts at batch 1"),
    ({"1-16": 3, "40-20": 1}, "last batch is >= its first"),
    ({"1_16": 3}, "'first-last'"),
    ([[1, 16]], "[first batch, last batch, k]"),
    ({}, "at least one range"),
    ("1-16:3", "vLLM's table"),
])
def test_bad_schedules_are_refused_naming_the_field(table, says):
    with pytest.raises(SpecError) as err:
        parse_batch_schedule(table)
    assert err.value.field == "speculation.k_per_batch_size" and says in str(err.value)


def _scenario(tmp_path, **spec):
    d = dict(TINY_SYNC)
    d["speculation"] = {**d.get("speculation", {}), **spec}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    return f


@pytest.mark.parametrize("spec, says", [
    ({"policy": "schedule"}, "k_per_batch_size"),
    ({"policy": "schedule", "k_per_batch_size": {"1-16": 3, "8-32": 1}}, "disjoint"),
    ({"policy": "schedule", "k_per_batch_size": {"1-16": -2}}, ">= 0"),
    ({"policy": "schedule", "k_per_batch_size": {"0-16": 2}}, ">= 1"),
])
def test_cli_refuses_bad_schedules_with_exit_2(tmp_path, spec, says):
    res = CliRunner().invoke(app, ["check", str(_scenario(tmp_path, **spec))])
    assert res.exit_code == 2, res.output
    assert "k_per_batch_size" in res.output and says in res.output and "Traceback" not in res.output


def test_a_schedule_scenario_resolves_and_keys_by_its_table(tmp_path):
    sc = load_scenario(_scenario(tmp_path, policy="schedule", k=4, k_per_batch_size={"1-8": 4, "9-4096": 2}))
    pol = resolve(sc).policy
    assert isinstance(pol, Schedule) and pol.ks == (0, 2, 4)
    spec = run_doc(sc)["speculation"]
    assert spec["k_per_batch_size"] == [[1, 8, 4], [9, 4096, 2]] and "max_batch" not in spec and "k_max" not in spec
    same = load_scenario(_scenario(tmp_path, policy="schedule", k=4, k_per_batch_size=[[1, 8, 4], [9, 4096, 2]]))
    assert run_doc(same) == run_doc(sc)
    other = load_scenario(_scenario(tmp_path, policy="always", k=4, k_per_batch_size={"1-8": 4}))
    assert "k_per_batch_size" not in run_doc(other)["speculation"]   # read only by schedule: never in another key


POLICIES_UNDER_TEST = [Off(), Always(k=3), Threshold(k=3, max_batch=12), Toggle(k=4, margin=0.05), Adaptive(k_max=5),
                       Schedule(k=4, table=((1, 4, 4), (5, 12, 2), (20, 64, 0)))]


@given(st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=12),
       st.floats(min_value=0.2, max_value=0.9), st.floats(min_value=100, max_value=4000))
def test_the_vector_choice_is_the_one_engine_choice(ns, alpha, ctx_per_seq):
    """choose() over many engines equals choose_k() engine by engine, for every policy."""
    sc = load_scenario(_table_scenario())
    world = resolve(sc)
    ctx = PolicyContext(world.table, alpha, world.acceptance.decay)
    ns = [min(x, world.table.fixed_s.shape[1] - 1) for x in ns]   # batches the engine's table covers
    n = np.array(ns)
    for pol in POLICIES_UNDER_TEST:
        if pol.priced:
            rates = np.concatenate([ctx.rates(pol.ks, int(x), x * ctx_per_seq) if x else np.ones((len(pol.ks), 1))
                                    for x in ns], axis=1)
            vector = pol.choose(n, rates)
        else:
            vector = pol.choose(n)
        assert vector.tolist() == [choose_k(pol, ctx, int(x), x * ctx_per_seq) for x in ns], pol.label
        assert set(vector.tolist()) <= set(pol.ks)


_TABLE_SCENARIO: list = []


def _table_scenario():
    """A tiny scenario whose cost table covers k 0..5 (adaptive's k_max) for the property test."""
    if not _TABLE_SCENARIO:
        import tempfile
        from pathlib import Path

        d = dict(TINY_SYNC)
        d["speculation"] = {"policy": "adaptive", "k_max": 5}
        d["rollout"] = {**d["rollout"], "max_batch": 64}
        f = Path(tempfile.mkdtemp()) / "table.yaml"
        f.write_text(yaml.safe_dump(d))
        _TABLE_SCENARIO.append(f)
    return _TABLE_SCENARIO[0]


def test_show_drafter_prints_a_schedules_speedup_by_batch():
    """`show drafter --schedule`: a row per batch with the k the table picks (gaps inherit, clamped),
    speedup 1 where the schedule decodes, and never above the best fixed k's speedup at that batch."""
    import json

    res = CliRunner().invoke(app, ["show", "drafter", "--tau", "2.8", "--schedule", '{"1-8": 3, "33-64": 1}',
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["batch"]: r for r in json.loads(res.stdout)["schedule"]}
    assert rows[8]["k"] == 3 and rows[16]["k"] == 3 and rows[64]["k"] == 1 and rows[512]["k"] == 1
    for r in rows.values():
        assert r["expected_speedup"] <= r["best_speedup"] + 1e-12
    bad = CliRunner().invoke(app, ["show", "drafter", "--tau", "2.8", "--schedule", '{"1-8": 3, "4-64": 1}'])
    assert bad.exit_code == 2 and "--schedule" in bad.output and "disjoint" in bad.output
