"""Scenario files: loading, dotted overrides, and errors that name the file, the field and the value."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from specsim.scenario import ScenarioError, apply_overrides, load_scenario, parse_override, source_file
from specsim.world.resolve import resolve, vllm_default_max_num_seqs

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "8b_rl_think_sync.yaml"


def _doc() -> dict:
    return yaml.safe_load(SCENARIO.read_text())


def _write(tmp_path: Path, doc, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return p


def _assert_names(err: ScenarioError, file, field: str, value_text: str | None = None):
    msg = str(err)
    assert err.file == str(file) and str(file) in msg
    assert err.field == field and field in msg
    if value_text is not None:
        assert value_text in msg, msg


# ----------------------------------------------------------------------------- loading
def test_loads_the_8b_scenario():
    sc = load_scenario(SCENARIO)
    assert sc.model == "Qwen3-8B" and sc.hardware == "gb200"
    assert sc.rollout.gpus == 32 and sc.rollout.tp == 1
    assert sc.workload.prompts == 512 and sc.workload.group_size == 16
    assert sc.drafter.kind == "eagle3" and sc.drafter.tau == pytest.approx(2.77)
    assert sc.speculation.policy == "always" and sc.speculation.k == 3
    assert sc.pipeline.mode == "sync"
    assert source_file(sc) == str(SCENARIO)


def test_the_8b_scenario_resolves():
    world = resolve(load_scenario(SCENARIO))
    assert world.engines == 32
    assert world.kv_capacity_tokens > world.scenario.workload.max_response_tokens
    assert world.drafter.kind == "eagle3"
    assert world.acceptance.tau(3) == pytest.approx(2.77, rel=1e-6)


def test_max_batch_defaults_to_vllms_own_for_the_gpu():
    """vLLM's max_num_seqs default is 1024 on a GPU with >= 70 GiB and 256 below
    (EngineArgs.get_batch_defaults); an omitted rollout.max_batch takes it from the profile."""
    sc = load_scenario(SCENARIO, ["rollout.max_batch=null"])
    assert sc.rollout.max_batch is None
    world = resolve(sc)
    assert world.rollout.max_batch == 1024
    hw = world.hw
    assert vllm_default_max_num_seqs(hw) == 1024
    assert vllm_default_max_num_seqs(replace(hw, hbm_bytes=70 * 2**30)) == 1024
    assert vllm_default_max_num_seqs(replace(hw, hbm_bytes=70 * 2**30 - 1)) == 256
    assert vllm_default_max_num_seqs(replace(hw, hbm_bytes=48e9)) == 256
    assert resolve(load_scenario(SCENARIO, ["rollout.max_batch=64"])).rollout.max_batch == 64


# ----------------------------------------------------------------------------- overrides
def test_dotted_overrides_are_applied_and_yaml_typed():
    sc = load_scenario(SCENARIO, ["speculation.k=5", "workload.response_tokens.median=3000",
                                  "pipeline.partial_rollouts=true", "rollout.kv_capacity_tokens=null",
                                  "speculation.policy=off"])
    assert sc.speculation.k == 5
    assert sc.workload.response_tokens.median == 3000.0
    assert sc.pipeline.partial_rollouts is True
    assert sc.rollout.kv_capacity_tokens is None
    assert sc.speculation.policy == "off"  # a bare YAML `off` is the policy name, not False


def test_override_can_create_a_section():
    sc = load_scenario(SCENARIO, ["output.capacity.target_step_s=60"])
    assert sc.output.capacity.target_step_s == 60.0


def test_a_sweep_entry_is_set_by_its_own_dotted_path():
    """`--set sweep.speculation.k=[0,3]` (the form `specsim run --help` shows) sets the sweep entry
    `speculation.k`, next to the file's other entries; an unknown swept path is still named."""
    sc = load_scenario(SCENARIO, ["sweep.speculation.k=[0, 3]", "sweep.pipeline.policy_lag=[1, 2]",
                                  "sweep.replicates=2", "pipeline.mode=async", "training.gpus=8"])
    assert sc.sweep["speculation.k"] == [0, 3] and sc.sweep["pipeline.policy_lag"] == [1, 2]
    assert sc.sweep["replicates"] == 2 and sc.rows == 8
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO, ["sweep.speculation.kk=[0, 3]"])
    assert "speculation.kk" in str(err.value)


def test_apply_overrides_revalidates():
    sc = load_scenario(SCENARIO)
    new = apply_overrides(sc, {"rollout.tp": 2})
    assert new.rollout.tp == 2 and sc.rollout.tp == 1
    with pytest.raises(ScenarioError) as err:
        apply_overrides(sc, {"rollout.tp": 0})
    _assert_names(err.value, SCENARIO, "rollout.tp", "0")


def test_parse_override_needs_an_equals_sign():
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    with pytest.raises(ScenarioError, match="path=value"):
        parse_override("speculation.k")


# ----------------------------------------------------------------------------- unknown keys
def test_unknown_override_key_suggests():
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO, ["rollout.tpp=2"])
    _assert_names(err.value, SCENARIO, "rollout.tpp", "2")
    assert "did you mean 'rollout.tp'" in str(err.value)


def test_unknown_key_in_file_suggests(tmp_path):
    doc = _doc()
    doc["speculation"]["kk"] = 3
    p = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    _assert_names(err.value, p, "speculation.kk")
    assert "did you mean 'k'" in str(err.value)


def test_unknown_top_level_section_suggests(tmp_path):
    doc = _doc()
    doc["drafters"] = doc.pop("drafter")
    p = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    assert err.value.file == str(p)
    assert "drafter" in str(err.value)


# ----------------------------------------------------------------------------- bad values
BAD = [
    ("rollout.gpus=0", "rollout.gpus", "0"),
    ("rollout.tp=-1", "rollout.tp", "-1"),
    ("workload.prompts=0", "workload.prompts", "0"),
    ("workload.max_response_tokens=-5", "workload.max_response_tokens", "-5"),
    ("speculation.k=-1", "speculation.k", "-1"),
    ("workload.response_tokens.median=0", "workload.response_tokens.median", "0"),
    ("rollout.gpu_memory_utilization=1.5", "rollout.gpu_memory_utilization", "1.5"),
    ("rollout.tp=abc", "rollout.tp", "'abc'"),
    ("workload.prompts=[1, 2]", "workload.prompts", "[1, 2]"),
    ("rollout.weight_dtype=fp7", "rollout.weight_dtype", "'fp7'"),
    ("speculation.policy=sometimes", "speculation.policy", "'sometimes'"),
    ("pipeline.mode=asynchronous", "pipeline.mode", "'asynchronous'"),
    ("drafter.tau=9", "drafter.tau", "9"),
    ("workload.temperature=nan", "workload.temperature", "nan"),
    ("seed=-1", "seed", "-1"),
]


@pytest.mark.parametrize("override, field, value_text", BAD)
def test_bad_values_name_file_field_value(override, field, value_text):
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO, [override])
    _assert_names(err.value, SCENARIO, field, value_text)


def test_wrong_section_type(tmp_path):
    doc = _doc()
    doc["rollout"] = 5
    p = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    _assert_names(err.value, p, "rollout", "5")


def test_missing_required_field(tmp_path):
    doc = _doc()
    del doc["workload"]["max_response_tokens"]
    p = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    _assert_names(err.value, p, "workload.max_response_tokens")
    assert "missing" in str(err.value)


def test_cross_field_rule_names_one_field():
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO, ["pipeline.warmup_steps=41"])
    _assert_names(err.value, SCENARIO, "pipeline.warmup_steps", "41")


# ----------------------------------------------------------------------------- files
def test_missing_file():
    with pytest.raises(ScenarioError) as err:
        load_scenario("no/such/scenario.yaml")
    _assert_names(err.value, "no/such/scenario.yaml", "(file)", "no/such/scenario.yaml")


@pytest.mark.parametrize("text, field", [("a: [1,\n", "(file)"), ("- 1\n- 2\n", "(scenario)"), ("", "(scenario)")])
def test_bad_yaml(tmp_path, text, field):
    p = _write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    _assert_names(err.value, p, field)


def test_binary_file(tmp_path):
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\x00\xff\xfe\x80")
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    _assert_names(err.value, p, "(file)")


# ----------------------------------------------------------------------------- resolve
def test_unknown_model_via_resolve_suggests():
    sc = load_scenario(SCENARIO, ["model=Qwen3-8C"])
    with pytest.raises(ScenarioError) as err:
        resolve(sc)
    _assert_names(err.value, SCENARIO, "model", "'Qwen3-8C'")
    assert "did you mean 'Qwen3-8B'" in str(err.value)


def test_unknown_hardware_via_resolve_suggests():
    sc = load_scenario(SCENARIO, ["hardware=h100"])
    with pytest.raises(ScenarioError) as err:
        resolve(sc)
    _assert_names(err.value, SCENARIO, "hardware", "'h100'")
    assert "did you mean 'h100_sxm'" in str(err.value)


def test_layout_that_does_not_fit_via_resolve():
    sc = load_scenario(SCENARIO, ["model=Qwen3-235B-A22B", "hardware=h100_sxm", "rollout.tp=1"])
    with pytest.raises(ScenarioError) as err:
        resolve(sc)
    e = err.value
    _assert_names(e, SCENARIO, "rollout", "TP=1")
    assert "needs 4" in str(e) and "GB" in str(e) and "h100_sxm" in str(e)


def test_tp_must_divide_heads_via_resolve():
    sc = load_scenario(SCENARIO, ["rollout.tp=3", "rollout.gpus=33"])
    with pytest.raises(ScenarioError) as err:
        resolve(sc)
    _assert_names(err.value, SCENARIO, "rollout.tp", "3")
