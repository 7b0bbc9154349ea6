"""The `what_if:` counterfactuals (scenario/schema.py WhatIfSection, applied in world/resolve.py and
cost/step.py): each switches its mechanism off exactly; a scenario with one on is marked in every
output and refused by validation targets."""

import copy

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.scenario import ScenarioError, validate_doc
from specsim.sim.pipeline import run_pipeline
from specsim.study.sweep import point_row, run_doc
from specsim.world.resolve import resolve
from tests.small_sweep import TINY_SYNC

MOE = "moe"   # the small Qwen3-30B-A3B async scenario of the run tests


def _sc(doc=None, **what_if):
    if doc == MOE:
        from specsim.scenario import load_scenario
        from tests.small_sweep import SCEN, SMALL
        sets = [s for s in SMALL if not s.startswith("sweep=")] + ["sweep={}", "speculation.k=2"]
        return load_scenario(SCEN, sets + [f"what_if.{k}={str(v).lower()}" for k, v in what_if.items()])
    d = copy.deepcopy(doc or TINY_SYNC)
    if what_if:
        d["what_if"] = what_if
    return validate_doc(d, None)


def test_defaults_are_off_and_a_prediction():
    sc = _sc()
    assert sc.what_ifs == []
    assert "what_if" not in run_doc(sc)   # default: run keys as before


def test_active_fields_are_listed_and_change_the_run_key():
    sc = _sc(free_trainer=True, no_staleness=True)
    assert sc.what_ifs == ["what_if.no_staleness", "what_if.free_trainer"]
    assert run_doc(sc)["what_if"]["free_trainer"] is True


def test_decodes_per_k_excludes_the_per_part_switches():
    with pytest.raises(ScenarioError, match="what_if.free_drafting"):
        _sc(sd_step_decodes_per_k=0.1, free_drafting=True)
    with pytest.raises(ScenarioError, match="sd_step_decodes_per_k"):
        _sc(sd_step_decodes_per_k=-1)


@pytest.mark.parametrize("doc", [TINY_SYNC, MOE])
def test_verify_as_decode_and_free_drafting_make_an_sd_step_a_decode_step(doc):
    t = resolve(_sc(doc, verify_as_decode=True, free_drafting=True)).table
    i0, ik = t.index(0), t.index(2)
    assert np.allclose(t.fixed_s[ik], t.fixed_s[i0], rtol=1e-12, atol=0)
    assert np.allclose(t.per_ctx_s[ik], t.per_ctx_s[i0], rtol=1e-12, atol=0)


def test_each_switch_lowers_the_sd_step_and_leaves_decode_alone():
    real = resolve(_sc(MOE)).table
    for wi in ({"verify_as_decode": True}, {"free_drafting": True}, {"verify_experts_as_decode": True}):
        t = resolve(_sc(MOE, **wi)).table
        assert np.array_equal(t.fixed_s[t.index(0)], real.fixed_s[real.index(0)])
        sd, sd_real = t.fixed_s[t.index(2), 1:], real.fixed_s[real.index(2), 1:]
        assert np.all(sd <= sd_real) and np.all(sd[:8] < sd_real[:8]), wi   # every expert hit at a large batch


def test_decodes_per_k_scales_the_decode_row():
    t = resolve(_sc(sd_step_decodes_per_k=0.25)).table
    assert np.allclose(t.fixed_s[t.index(2)], 1.5 * t.fixed_s[t.index(0)])
    assert np.allclose(t.per_ctx_s[t.index(2)], 1.5 * t.per_ctx_s[t.index(0)])
    c0 = resolve(_sc(sd_step_decodes_per_k=0.0)).table
    assert np.array_equal(c0.fixed_s[c0.index(2)], c0.fixed_s[c0.index(0)])


def test_free_trainer_leaves_only_generation():
    res = run_pipeline(resolve(_sc(free_trainer=True)))
    for r in res.records:
        assert r.train_s == r.logprob_s == r.weight_sync_s == r.reward_s == r.data_s == 0.0
        assert r.step_s == pytest.approx(r.generation_s)


def test_no_spread_and_no_staleness_keep_the_configured_tau():
    doc = copy.deepcopy(TINY_SYNC)
    doc["drafter"].update(heterogeneity=5.0, staleness={"tau_after": 1.6, "after_versions": 10})
    base = resolve(_sc(doc)).acceptance
    flat = resolve(_sc(doc, no_acceptance_spread=True, no_staleness=True)).acceptance
    assert flat.concentration is None and flat.staleness.is_never
    assert flat.tau(3) == pytest.approx(base.tau(3), rel=1e-9)
    assert flat.tau(3, step=30) == pytest.approx(base.tau(3), rel=1e-9) and base.tau(3, step=30) < base.tau(3)


def test_row_marks_a_counterfactual_point():
    from specsim.study.sweep import SweepPoint
    sc = _sc(free_trainer=True)
    run = {"steady": run_pipeline(resolve(sc)).steady(),
           "meta": {"total_gpus": 1, "policy": "always", "rollout_gpus": 1, "training_gpus": 1, "engines": 1}}
    row = point_row(SweepPoint(0, {}, 0, "x"), sc, run, run, None)
    assert row["what_if"] == "what_if.free_trainer"


def test_validation_target_refuses_a_what_if(tmp_path):
    from tests.small_sweep import ROOT
    target = {"source": "test", "hardware": "gb200", "targets": [{
        "id": "wi_row", "scenario": str(ROOT / "scenarios" / "8b_rl_think_sync.yaml"),
        "overrides": {"what_if.verify_as_decode": True}, "metric": "tau", "measured": 2.77, "tolerance": 0.1,
        "role": "prediction", "source": "[S] test"}]}
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(target))
    res = CliRunner().invoke(app, ["validate", str(f), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "what_if.verify_as_decode" in res.output and "wi_row" in res.output and "Traceback" not in res.output
