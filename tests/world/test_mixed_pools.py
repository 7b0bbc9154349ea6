"""Mixed GPU pools (`rollout.hardware`, `training.hardware`): each pool resolves to its own
profile; the trainer's terms are those of the same scenario on the trainer's profile alone; the
engines' are those of the rollout profile; two profiles need separate (async) pools."""

from pathlib import Path

import pytest

from specsim.scenario import ScenarioError, load_scenario
from specsim.sim.pipeline import run_pipeline
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
GB200_H200 = str(ROOT / "scenarios" / "mixed_gb200_train_h200_gen.yaml")
H100_H20 = str(ROOT / "scenarios" / "mixed_h100_train_h20_gen.yaml")
#: a few short steps of a small batch: the trainer terms are per draw, so this is enough
SMALL = ["workload.prompts=4", "workload.group_size=4", "workload.max_response_tokens=2048",
         "pipeline.steps=4", "pipeline.warmup_steps=1", "sweep={}"]


def test_each_pool_resolves_to_its_own_profile():
    w = resolve(load_scenario(GB200_H200, SMALL))
    assert (w.hw.name, w.trainer_hw.name, w.mixed_hardware) == ("h200_sxm", "gb200", True)
    assert w.memory.hbm_bytes == w.hw.hbm_bytes == pytest.approx(150.1e9, rel=1e-3)   # the engines' memory plan: H200's
    w2 = resolve(load_scenario(H100_H20, SMALL))
    assert (w2.hw.name, w2.trainer_hw.name) == ("h20", "h100_sxm")
    assert w2.trainer.layout.mfu == w2.trainer_hw.efficiency.train_mfu   # the trainer profile's MFU prior
    # one profile: no second spec, trainer_hw is hw
    one = resolve(load_scenario(H100_H20, SMALL + ["rollout.hardware=null"]))
    assert one.train_hw is None and one.trainer_hw is one.hw and not one.mixed_hardware


@pytest.mark.parametrize("path", [GB200_H200, H100_H20])
def test_trainer_terms_equal_the_scenario_on_the_trainer_profile_alone(path):
    """Same trainer, same GPUs, same draws: logprob, training and drafter update per step are those
    of the scenario with `hardware` = the trainer's profile for both pools; generation differs."""
    sc = load_scenario(path, SMALL)
    alone = load_scenario(path, SMALL + [f"hardware={sc.training_hardware}", "rollout.hardware=null",
                                         "training.hardware=null"])
    mixed_run = run_pipeline(resolve(sc), engine_results=False)
    alone_run = run_pipeline(resolve(alone), engine_results=False)
    for a, b in zip(mixed_run.records, alone_run.records, strict=True):
        assert (a.logprob_s, a.train_s, a.drafter_update_s) == (b.logprob_s, b.train_s, b.drafter_update_s)
        assert a.tokens == b.tokens
    assert [r.generation_s for r in mixed_run.records] != [r.generation_s for r in alone_run.records]


def test_engines_equal_the_scenario_on_the_rollout_profile_alone():
    sc = load_scenario(H100_H20, SMALL)
    alone = resolve(load_scenario(H100_H20, SMALL + ["hardware=h20", "rollout.hardware=null"]))
    mixed = resolve(sc)
    assert mixed.kv_capacity_tokens == alone.kv_capacity_tokens
    assert mixed.rollout.max_batch == alone.rollout.max_batch
    assert mixed.table.step_s(0, 8, 8 * 4096.0) == alone.table.step_s(0, 8, 8 * 4096.0)


@pytest.mark.parametrize("sets, field", [
    (["training.hardware=h200_sxm"], "training.hardware"),
    (["rollout.hardware=h100_sxm"], "rollout.hardware"),
])
def test_sync_with_two_profiles_is_an_error_naming_the_field(sets, field):
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(ROOT / "scenarios" / "8b_rl_think_sync.yaml"), sets)
    assert info.value.field == field and "async" in info.value.allowed


def test_sync_with_the_same_profile_named_twice_is_fine():
    sc = load_scenario(str(ROOT / "scenarios" / "8b_rl_think_sync.yaml"),
                       ["training.hardware=GB200", "rollout.hardware=gb200"])
    assert not sc.mixed_hardware and sc.hardware_profiles == ("gb200",)


@pytest.mark.parametrize("field", ["training.hardware", "rollout.hardware"])
def test_an_unknown_pool_profile_names_its_field(field):
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(GB200_H200, SMALL + [f"{field}=h999"]))
    assert info.value.field == field and "h999" in str(info.value)


def test_the_sync_ar_comparator_of_a_mixed_point_is_colocated_on_the_rollout_profile():
    from specsim.study.sweep import sync_ar_of

    s = sync_ar_of(load_scenario(GB200_H200, SMALL))
    assert s.pipeline.mode == "sync" and s.hardware_profiles == ("h200_sxm",) and s.rollout.gpus == 32


def test_a_mixed_scenarios_gpu_hour_price_is_each_pool_at_its_own_price():
    sc = load_scenario(H100_H20)                     # 32 H20 at $1.6 + 16 H100 at $3.0
    assert sc.gpu_hour_price() * sc.total_gpus == pytest.approx(32 * 1.6 + 16 * 3.0)
    assert load_scenario(H100_H20, ["output.gpu_hour_usd={h20: 1.6}"]).gpu_hour_price() is None
    one = load_scenario(H100_H20, ["rollout.hardware=null"])
    assert one.gpu_hour_price() == 3.0


def test_run_keys_follow_both_profiles_of_a_mixed_scenario():
    """A changed trainer profile must not reuse a stored run: the inputs fingerprint hashes each pool's file."""
    from specsim.study.sweep import inputs_fingerprint

    mixed = inputs_fingerprint(load_scenario(H100_H20))
    one = inputs_fingerprint(load_scenario(H100_H20, ["rollout.hardware=null"]))
    assert mixed["training_hardware"] == one["hardware"] != mixed["hardware"]
    assert "training_hardware" not in one
