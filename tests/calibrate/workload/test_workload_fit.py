"""The workload fit (specsim/calibrate/workload/fit.py) and its write-back (write_back.py): the fit
recovers a known parameter and refuses an under-determined or rank-deficient stage; write-back
changes only the addressed lines; the bundled fit blocks are determined. The command itself:
tests/calibrate/test_calibrate_cli.py."""

import math
from pathlib import Path

import pytest
import yaml

from specsim.calibrate.workload.fit import fit_file, load_fit_block
from specsim.calibrate.workload.write_back import rewrite_yaml_fields, scenario_updates
from specsim.errors import SpecError
from specsim.validate.run import load_targets

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_TARGET_DIR = ROOT / "calibration" / "targets"
S8B = str(ROOT / "scenarios" / "8b_rl_zero_sync.yaml")
# a small 8B workload: a few hundred sequences, short responses (each pipeline run well under a second)
SMALL = {"workload.prompts": 16, "workload.group_size": 4, "pipeline.steps": 2, "pipeline.warmup_steps": 1,
         "rollout.gpus": 4, "workload.max_response_tokens": 2048,
         "workload.response_tokens": {"kind": "lognormal", "median": 300, "p99": 1500}}


def write(tmp_path, rows, name="t.yaml", **top):
    doc = {"source": "test", "hardware": "h100_sxm", "targets": rows, **top}
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(p)


def _fit_doc(tmp_path, params, rows):
    return write(tmp_path, rows, "fit.yaml", fit={"stages": [{"name": "s", "parameters": params}]})


def test_fit_recovers_a_known_trainer_efficiency(tmp_path):
    from specsim.validate.run import Runs, Target, simulate_target
    from specsim.validate.targets import TargetRow

    true_ov = {**SMALL, "training.mfu": 0.3}
    row = TargetRow(id="x", scenario=S8B, overrides=true_ov, metric="stage_s", params={"stage": "training", "run": "ar"},
                    measured=1.0, role="prediction", source="[S] synthetic")
    truth = simulate_target(Target(row, "", "", "gb200", S8B, 0.1), Runs())[0]
    rows = [{"id": "train", "scenario": S8B, "overrides": SMALL, "metric": "stage_s",
             "params": {"stage": "training", "run": "ar"}, "measured": truth, "role": "fit", "pins": ["mfu"],
             "source": "[S] synthetic: simulated with training.mfu = 0.3"}]
    params = [{"name": "mfu", "path": "training.mfu", "scenarios": [S8B], "prior": 0.5, "bounds": [0.05, 0.9],
               "log": True}]
    f = _fit_doc(tmp_path, params, rows)
    res = fit_file(f, max_nfev=30)
    assert res.values()["mfu"] == pytest.approx(0.3, rel=0.01)
    st = res.stages[0]
    assert st.rank == 1 and not st.at_bound["mfu"] and abs(st.rows[0]["residual_pct"]) < 1
    assert scenario_updates(f, res)[S8B] == {"training.mfu": res.values()["mfu"]}


def test_fit_refuses_under_determined_and_unpinned_stages(tmp_path):
    rows = [{"id": "train", "scenario": S8B, "overrides": SMALL, "metric": "stage_s",
             "params": {"stage": "training", "run": "ar"}, "measured": 3.0, "role": "fit", "pins": ["mfu", "lp"],
             "source": "[S] synthetic"}]
    params = [{"name": "mfu", "path": "training.mfu", "scenarios": [S8B], "prior": 0.5, "bounds": [0.05, 0.9]},
              {"name": "lp", "path": "training.logprob_efficiency", "scenarios": [S8B], "prior": 0.5, "bounds": [0.05, 1]}]
    with pytest.raises(SpecError, match="at least as many fit rows as parameters"):
        fit_file(_fit_doc(tmp_path, params, rows))
    rows[0]["pins"] = ["mfu"]
    with pytest.raises(SpecError, match="pinned by at least one fit row"):
        fit_file(_fit_doc(tmp_path, params, rows))
    bad_prior = [dict(params[0], prior=2.0)]
    with pytest.raises(SpecError, match="bounds"):
        fit_file(_fit_doc(tmp_path, bad_prior, rows))


def test_fit_refuses_a_rank_deficient_stage(tmp_path):
    """Two rows, two parameters, but logprob time does not depend on train_mfu and the two rows are
    the same quantity: the Jacobian has rank 1, and the fit says so instead of returning a value."""
    rows = [{"id": f"lp{i}", "scenario": S8B, "overrides": SMALL, "metric": "stage_s",
             "params": {"stage": "logprob", "run": "ar"}, "measured": 2.0, "role": "fit", "pins": ["mfu", "lp"],
             "source": "[S] synthetic"} for i in range(2)]
    params = [{"name": "mfu", "path": "training.mfu", "scenarios": [S8B], "prior": 0.5, "bounds": [0.05, 0.9]},
              {"name": "lp", "path": "training.logprob_efficiency", "scenarios": [S8B], "prior": 0.5, "bounds": [0.05, 1]}]
    with pytest.raises(SpecError, match="rank"):
        fit_file(_fit_doc(tmp_path, params, rows), max_nfev=10)


def test_rewrite_yaml_fields_changes_only_the_addressed_lines():
    text = ("# head\ntraining:\n  tp: 1\n  mfu: 0.35   # prior\nworkload:\n  response_tokens:\n    kind: lognormal\n"
            "    median: 4500\n    p99: 19962\n  prompt_tokens: {kind: fixed, tokens: 5}\n")
    out = rewrite_yaml_fields(text, {"training.mfu": 0.21789, "workload.response_tokens.median": 930.4},
                              {"training.mfu": "fitted"})
    assert "  mfu: 0.2179   # fitted\n" in out and "    median: 930\n" in out
    assert out.replace("  mfu: 0.2179   # fitted\n", "  mfu: 0.35   # prior\n").replace(
        "    median: 930\n", "    median: 4500\n") == text
    with pytest.raises(SpecError):
        rewrite_yaml_fields(text, {"workload.prompt_tokens.tokens": 3}, "x")
    assert math.isfinite(yaml.safe_load(out)["training"]["mfu"])


def test_sd_overhead_parameters_go_through_a_profile_copy_and_back(tmp_path):
    """A `hardware.efficiency.*` fit parameter is applied through a temporary copy of the profile
    (a different value changes the SD run) and --write-profile writes it into the profile's block."""
    import shutil

    from specsim.calibrate.workload.fit import Applier, FitParameter, FitResult, StageResult
    from specsim.calibrate.workload.write_back import write_profile_values
    from specsim.catalog.hardware import load_hardware

    prof = tmp_path / "gb200_copy.yaml"
    shutil.copy(load_hardware("gb200").path, prof)
    scen = tmp_path / "s.yaml"
    scen.write_text(Path(S8B).read_text().replace("hardware: gb200", f"hardware: {prof}"))
    p = {"name": "draft_ms", "path": "hardware.efficiency.draft_overhead_ms", "scenarios": [str(scen)],
         "prior": 1.0, "bounds": [0.0, 20.0]}
    rows = [{"id": "sdgen", "scenario": str(scen), "overrides": SMALL, "metric": "stage_s",
             "params": {"stage": "generation", "run": "sd"}, "measured": 5.0, "role": "fit", "pins": ["draft_ms"],
             "source": "[S] synthetic"}]
    f = _fit_doc(tmp_path, [p], rows)
    ap = Applier([FitParameter(**p)], Path(f), tmp_path)
    from specsim.calibrate.workload.fit import simulate_rows
    from specsim.validate.run import load_targets as lt

    t = lt([f])
    slow, fast = (simulate_rows(t, ap.overrides({"draft_ms": v}))[0] for v in (10.0, 0.0))
    assert slow > fast
    res = FitResult(f, [StageResult("s", [FitParameter(**p)], {"draft_ms": 2.5}, {}, {},
                                    [{"target": "sdgen", "pins": "draft_ms"}], 1, 1)])
    done = write_profile_values(f, res, prof, "cmd")
    assert done == {"efficiency.draft_overhead_ms": 2.5}
    assert load_hardware(str(prof)).efficiency.draft_overhead_s == pytest.approx(2.5e-3)
    assert "fitted by `cmd` to sdgen" in prof.read_text()


def test_bundled_8b_fit_block_is_determined_and_every_parameter_pinned():
    """The 8B fit's parameters (without running it): each pinned by fit rows that are AR stage
    rows (or the k=3 SD generation rows for stage `sd`), never more parameters than rows."""
    from specsim.calibrate.workload.fit import load_fit_block

    f = DEFAULT_TARGET_DIR / "nemo_rl_8b.yaml"
    block = load_fit_block(f)
    targets = load_targets([str(f)])
    assert [st.name for st in block.stages][-1] == "sd" and len(block.stages[-1].parameters) <= 2
    for stage in block.stages:
        names = {p.name for p in stage.parameters}
        rows = [t for t in targets if t.role == "fit" and names & set(t.row.pins)]
        assert len(rows) >= len(names)
        assert names <= {n for t in rows for n in t.row.pins}
        for t in rows:
            run = t.row.params["run"]
            assert t.metric == "stage_s" and (run == "ar" if stage.name != "sd" else
                                              (run == "sd" and t.row.params["stage"] == "generation"))
            if stage.name == "engine_prepare":   # the wake-up time is pinned by the AR prepare rows only
                assert t.row.params["stage"] == "prepare", t.id


def test_vllm_bs1_sweep_fits_the_short_drafts_and_predicts_the_long_ones():
    """calibration/targets/vllm_eagle3_bs1.yaml: the two h100 SD overheads are pinned by the
    K = 2, 3, 4 rows only, K = 5, 6, 7 are predictions, and the fit block is determined."""
    from specsim.calibrate.workload.fit import load_fit_block

    f = DEFAULT_TARGET_DIR / "vllm_eagle3_bs1.yaml"
    block = load_fit_block(f)
    params = {p.name: p.path for st in block.stages for p in st.parameters}
    assert set(params.values()) == {"hardware.efficiency.draft_overhead_ms", "hardware.sd_costs.sd_step_overhead_ms"}
    targets = load_targets([str(f)])
    sweep = [t for t in targets if t.metric == "engine_speedup_at_batch"]
    ks = {t.id: t.row.overrides["speculation.k"] for t in sweep}
    assert {ks[t.id] for t in sweep if t.role == "fit"} == {2, 3, 4}
    assert {ks[t.id] for t in sweep if t.role == "prediction"} == {5, 6, 7}
    for t in sweep:
        assert t.row.overrides["drafter.tau_at_k"] == t.row.overrides["speculation.k"]
        assert t.row.params["batch"] == 1
    (vanilla,) = [t for t in targets if t.metric == "engine_tpot_s"]
    assert vanilla.role == "prediction" and vanilla.row.params["run"] == "ar"


def test_nemo_rl_performance_fits_at_most_five_rows_each_pinning_its_parameter():
    """calibration/targets/nemo_rl_performance.yaml (issue #44: at most 5 of its 15 rows fit): five
    fit rows, one parameter each (per GPU type the host time of a dense layer pass on its Llama 1-off
    row and the MoE extra on its Qwen3-30B 1-off row; the in-process engine's host time per sequence),
    each pinned by exactly its fit row. A layer-pass parameter also applies to the rows fitted after
    it that pay it (listed after its own row); every other row a prediction."""
    f = DEFAULT_TARGET_DIR / "nemo_rl_performance.yaml"
    block = load_fit_block(f)
    targets = load_targets([str(f)])
    fit = [t for t in targets if t.role == "fit"]
    assert len(targets) == 15 and len(fit) == 5   # the issue allows 5
    params = {p.name: p.path for st in block.stages for p in st.parameters}
    assert sorted(params.values()) == ["hardware.efficiency.inprocess_seq_overhead_us",
                                       "hardware.trainer.layer_overhead_ms", "hardware.trainer.layer_overhead_ms",
                                       "hardware.trainer.moe_layer_overhead_ms", "hardware.trainer.moe_layer_overhead_ms"]
    for stage in block.stages:
        (p,) = stage.parameters
        (row,) = [t for t in fit if p.name in t.row.pins]
        assert Path(p.scenarios[0]).name == Path(row.row.scenario).name
        later = [Path(t.row.scenario).name for st in block.stages[block.stages.index(stage) + 1:]
                 for t in fit if st.parameters[0].name in t.row.pins]
        assert {Path(s).name for s in p.scenarios[1:]} <= set(later)
