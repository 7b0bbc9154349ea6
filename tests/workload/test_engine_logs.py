"""Trainer length logs (NeMo-RL, veRL, OpenRLHF columns; `column:`) and engine spec-decode metrics
(vLLM Prometheus / JSON / log, SGLang) → lengths and τ; a NeMo-RL length log and a vLLM metrics
dump drive a run."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.errors import SpecError
from specsim.scenario import ScenarioError, load_scenario
from specsim.workload.acceptance.engine_metrics import read_acceptance_metrics
from specsim.workload.lengths.checks import read_lengths_file
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "calibration" / "traces" / "examples"
sys.path.insert(0, str(ROOT / "tests"))
from small_sweep import TINY_SYNC

runner = CliRunner()


# ----------------------------------------------------------------------------- length logs
@pytest.mark.parametrize("name, n", [("nemo_rl_train_data.jsonl", 48), ("nemo_rl_step_lengths.jsonl", 32),
                                     ("verl_response_length.csv", 40), ("openrlhf_experience.jsonl", 40)])
def test_each_frameworks_example_log_is_read_by_default(name, n):
    values = read_lengths_file(EXAMPLES / name, "workload.response_tokens.path")
    assert len(values) == n and min(values) >= 1


def test_column_picks_another_key_and_refuses_aggregates(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("response_length/mean,num_tokens\n900,100\n950,200\n")
    assert list(read_lengths_file(f, "x.path", column="num_tokens")) == [100.0, 200.0]
    with pytest.raises(SpecError) as e:
        read_lengths_file(f, "workload.response_tokens.path")   # no per-response column by default
    assert "response_length" in e.value.allowed
    with pytest.raises(SpecError) as e:
        read_lengths_file(f, "workload.response_tokens.path", column="response_length/mean")
    assert e.value.field == "workload.response_tokens.column" and "aggregate" in e.value.allowed
    j = tmp_path / "log.jsonl"
    j.write_text(json.dumps({"total_length": 300, "Response_Length": 44}) + "\n")
    assert read_lengths_file(j, "x.path") == [44.0]                       # keys match case-insensitively
    assert read_lengths_file(j, "x.path", column="total_length") == [300.0]


def test_column_and_unit_in_the_scenario(tmp_path):
    doc = json.loads(json.dumps(TINY_SYNC))
    doc["workload"]["response_tokens"] = {"kind": "empirical", "path": "lengths.csv", "column": "n_tok",
                                          "unit": "tokens"}
    (tmp_path / "lengths.csv").write_text("n_tok,reward\n30,1\n50,0\n70,1\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    world = resolve(load_scenario(tmp_path / "s.yaml"))
    assert sorted(world.response_dist.values) == [30.0, 50.0, 70.0]
    doc["workload"]["response_tokens"]["unit"] = "chars"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as e:
        load_scenario(tmp_path / "s.yaml")
    assert e.value.field == "workload.response_tokens.unit"
    doc["workload"]["response_tokens"] = {"kind": "fixed", "tokens": 40, "column": "x"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match="only with kind: empirical"):
        load_scenario(tmp_path / "s.yaml")


# ----------------------------------------------------------------------------- engine metrics
def test_vllm_prometheus_counters_give_tau_as_vllm_reports_it():
    m = read_acceptance_metrics(EXAMPLES / "vllm_metrics.prom")
    # summed over both engines' series: 1 + (7620 + 3792) / (4000 + 2000); k = 18000 / 6000
    assert m.engine == "vllm" and m.k == 3 and m.tau == pytest.approx(1 + 11412 / 6000)
    assert m.per_position == pytest.approx((4852 / 6000, 3760 / 6000, 2800 / 6000))
    assert sum(m.per_position) == pytest.approx(m.tau - 1)


def test_vllm_log_lines_sum_their_intervals():
    # the second line is vLLM issue #19254's 10 s interval (Accepted 5306, Drafted 8703, k = 3)
    m = read_acceptance_metrics(EXAMPLES / "vllm_spec_decode.log")
    assert m.k == 3 and m.tau == pytest.approx(1 + (4810 + 5306) / ((8262 + 8703) / 3))


def test_vllm_json_dump_and_sglang(tmp_path):
    j = tmp_path / "metrics.json"
    j.write_text(json.dumps([{"name": "vllm:spec_decode_num_drafts", "value": 100},
                             {"name": "vllm:spec_decode_num_draft_tokens", "value": 500},
                             {"name": "vllm:spec_decode_num_accepted_tokens", "value": 240},
                             {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "values": [80, 60, 50, 30, 20]}]))
    m = read_acceptance_metrics(j)
    assert (m.k, m.tau, m.form) == (5, 3.4, "json") and m.per_position == pytest.approx((0.8, 0.6, 0.5, 0.3, 0.2))
    s = read_acceptance_metrics(EXAMPLES / "sglang_server.log")
    assert s.engine == "sglang" and s.k is None and s.tau == pytest.approx((2.68 + 2.74) / 2)
    assert read_acceptance_metrics(EXAMPLES / "sglang_metrics.prom").tau == pytest.approx(2.71)
    info = tmp_path / "server_info.json"
    info.write_text(json.dumps({"internal_states": [{"avg_spec_accept_length": 3.1}]}))
    assert read_acceptance_metrics(info).tau == pytest.approx(3.1)


@pytest.mark.parametrize("text, fragment", [
    ("vllm:spec_decode_num_drafts_total 10\n", "vllm:spec_decode_num_accepted_tokens_total"),
    (("vllm:spec_decode_num_drafts_total 0\nvllm:spec_decode_num_draft_tokens_total 0\n"
     "vllm:spec_decode_num_accepted_tokens_total 0\n"), "with drafts"),
    ("hello\n", "vLLM spec-decode metrics"),
])
def test_metrics_errors_name_what_is_missing(tmp_path, text, fragment):
    f = tmp_path / "m.txt"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        read_acceptance_metrics(f)
    assert fragment in (str(e.value.value) + e.value.allowed) and e.value.where == str(f)


def test_calibrate_acceptance_command():
    res = runner.invoke(app, ["calibrate", "acceptance", str(EXAMPLES / "vllm_metrics.prom"), "--format", "json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["k"] == 3 and info["tau"] == pytest.approx(2.902)
    res = runner.invoke(app, ["calibrate", "acceptance", str(EXAMPLES / "nemo_rl_train_data.jsonl")])
    assert res.exit_code == 2 and res.output.startswith("error:")


# ----------------------------------------------------------------------------- tau_from in a scenario
def _tiny(tmp_path: Path, **drafter) -> Path:
    doc = json.loads(json.dumps(TINY_SYNC))
    shutil.copy(EXAMPLES / "nemo_rl_train_data.jsonl", tmp_path / "lengths.jsonl")
    shutil.copy(EXAMPLES / "vllm_metrics.prom", tmp_path / "metrics.prom")
    doc["workload"].update(max_response_tokens=4096, prompts=4, group_size=4,
                           response_tokens={"kind": "empirical", "path": "lengths.jsonl"})
    doc["drafter"] = {"kind": "eagle3", **drafter}
    doc["speculation"] = {"policy": "always", "k": 3}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_tau_from_sets_tau_and_k(tmp_path):
    sc = load_scenario(_tiny(tmp_path, tau_from="metrics.prom"))
    assert sc.drafter.tau == pytest.approx(2.902) and sc.drafter.tau_at_k == 3
    with pytest.raises(ScenarioError) as e:
        load_scenario(_tiny(tmp_path, tau_from="metrics.prom", tau=2.5))
    assert e.value.field == "drafter.tau"
    with pytest.raises(ScenarioError) as e:
        load_scenario(_tiny(tmp_path, tau_from="metrics.prom", tau_at_k=5))
    assert e.value.field == "drafter.tau_at_k"
    with pytest.raises(ScenarioError) as e:
        load_scenario(_tiny(tmp_path, tau_from="absent.prom"))
    assert e.value.field == "drafter.tau_from"


def test_a_nemo_rl_length_log_and_a_vllm_metrics_dump_drive_a_run(tmp_path):
    path = _tiny(tmp_path, tau_from="metrics.prom")
    world = resolve(load_scenario(path))
    logged = read_lengths_file(EXAMPLES / "nemo_rl_train_data.jsonl", "x")
    assert sorted(world.response_dist.values) == sorted(logged)
    assert world.acceptance.tau(3) == pytest.approx(2.902, rel=1e-6)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", str(path), "--out", str(out), "--jobs", "1", "--no-progress",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    resolved = yaml.safe_load((out / "resolved.yaml").read_text())
    assert resolved["drafter"]["tau"] == pytest.approx(2.902) and resolved["drafter"]["tau_from"] == "metrics.prom"
    assert summary["best"]["k"] == 3 and summary["best"]["generation_speedup"]["mean"] > 1.0
    import pandas as pd
    points = pd.read_csv(out / "points.csv")
    # the simulated τ is the engine's τ (fresh drafter, every request drafting): 2.902 within sampling noise
    assert float(points["tau"].iloc[0]) == pytest.approx(2.902, rel=0.05)
