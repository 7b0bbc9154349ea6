"""`specsim validate` and its target schema (the workload fit: tests/calibrate/workload/).

Bad target files and options exit 2 with one error naming file, field and value (issue 15 row 13);
the default targets are the calibration folder's, found from the working directory up (none: one
error); JSON keeps params as objects and values at full precision; ordinal rows report both
simulated values."""

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.errors import SpecError
from specsim.scenario import load_scenario
from specsim.validate.run import load_targets, validate
from specsim.validate.targets import find_calibration_dir

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TARGET_DIR = ROOT / "calibration" / "targets"
S7B = str(ROOT / "scenarios" / "7b_h100_sync.yaml")
S8B = str(ROOT / "scenarios" / "8b_rl_zero_sync.yaml")
# a small 8B workload: a few hundred sequences, short responses (each pipeline run well under a second)
SMALL = {"workload.prompts": 16, "workload.group_size": 4, "pipeline.steps": 2, "pipeline.warmup_steps": 1,
         "rollout.gpus": 4, "workload.max_response_tokens": 2048,
         "workload.response_tokens": {"kind": "lognormal", "median": 300, "p99": 1500}}
runner = CliRunner()


def tau_row(**kw):
    row = {"id": "r1", "scenario": S7B, "metric": "tau", "params": {"step": 37}, "measured": 3.0,
           "tolerance": 0.5, "role": "prediction", "source": "[P] test"}
    row.update(kw)
    return row


def write(tmp_path, rows, name="t.yaml", **top):
    doc = {"source": "test", "hardware": "h100_sxm", "targets": rows, **top}
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(p)


def bad(*args):
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


# ----------------------------------------------------------------------------- schema errors
@pytest.mark.parametrize("change, needles", [
    ({"metric": "engine_speedup_at_batch", "params": {}}, ["params.batch", "engine_speedup_at_batch"]),
    ({"params": {"stepp": 1}}, ["params.stepp"]),
    ({"role": "bogus"}, ["role", "bogus"]),
    ({"role": "held_out"}, ["role", "held_out"]),
    ({"role": "fit"}, ["pins"]),
    ({"pins": ["x"]}, ["prediction pins no parameters"]),
    ({"metric": "nope"}, ["metric", "nope"]),
    ({"measured": 0}, ["measured"]),
    ({"measured": float("nan")}, ["measured"]),
    ({"measured": True}, ["measured"]),
    ({"tolerance": 1e309}, ["tolerance"]),
    ({"tolerance": -0.1}, ["tolerance"]),
    ({"source": ""}, ["source"]),
    ({"extra_field": 1}, ["extra_field"]),
    ({"metric": "ordinal", "params": {"slower": {"run": "sd"}, "faster": {"run": "ar"}}}, ["ordinal", "measured"]),
    ({"metric": "stage_s", "params": {"stage": "reward", "run": "ar"}}, ["params.stage"]),
    ({"scenario": "no/such/scenario.yaml"}, ["scenario", "no/such/scenario.yaml"]),
])
def test_bad_target_rows_exit_2_naming_file_and_field(tmp_path, change, needles):
    f = write(tmp_path, [tau_row(**change)])
    err = bad("validate", f, "--out", str(tmp_path / "out"))
    assert f in err
    for n in needles:
        assert n in err, (n, err)


def test_empty_targets_and_non_mapping_files_are_refused(tmp_path):
    f = write(tmp_path, [])
    assert "targets" in bad("validate", f, "--out", str(tmp_path / "o"))
    p = tmp_path / "list.yaml"
    p.write_text("[1, 2]\n")
    assert str(p) in bad("validate", str(p), "--out", str(tmp_path / "o"))
    p.write_bytes(b"\xff\xfe bad")
    assert str(p) in bad("validate", str(p), "--out", str(tmp_path / "o"))


def test_duplicate_ids_refused_within_and_across_files(tmp_path):
    f = write(tmp_path, [tau_row(), tau_row()])
    err = bad("validate", f, "--out", str(tmp_path / "o"))
    assert "r1" in err and "unique" in err
    a = write(tmp_path, [tau_row()], "a.yaml")
    b = write(tmp_path, [tau_row()], "b.yaml")
    err = bad("validate", a, b, "--out", str(tmp_path / "o"))
    assert "r1" in err and a in err and b in err


@pytest.mark.parametrize("tol", ["1e309", "inf", "nan", "0", "-1", "11"])
def test_tolerance_override_must_be_finite_and_bounded(tmp_path, tol):
    f = write(tmp_path, [tau_row()])
    err = bad("validate", f, "--tolerance", tol, "--out", str(tmp_path / "o"))
    assert "--tolerance" in err


# ----------------------------------------------------------------------------- defaults and output
def test_defaults_found_from_the_working_directory_up(monkeypatch):
    """The default targets are the calibration folder's, found walking up from the working directory
    (here a subfolder of the checkout), never from where the package is installed."""
    monkeypatch.chdir(ROOT / "scenarios")
    assert find_calibration_dir() == DEFAULT_TARGET_DIR.parent
    targets = load_targets()
    assert DEFAULT_TARGET_DIR.is_dir() and {Path(t.file).parent for t in targets} == {DEFAULT_TARGET_DIR}
    assert all(Path(t.scenario_path).is_file() for t in targets)
    ids = [t.id for t in targets]
    assert len(ids) == len(set(ids))


def test_no_calibration_folder_is_one_error_and_writes_nothing(tmp_path, monkeypatch):
    """From a folder with no calibration/ above it: exit 2, one error naming --calibration and the
    folder searched, and no --out folder created; --calibration (or the files) makes it work."""
    monkeypatch.chdir(tmp_path)
    err = bad("validate", "--out", str(tmp_path / "o"))
    assert "--calibration" in err and "no calibration/ folder" in err and str(tmp_path) in err
    assert not (tmp_path / "o").exists()
    err = bad("validate", "--calibration", str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert "--calibration" in err and "missing" in err
    assert {t.file for t in load_targets(calibration=ROOT / "calibration")} == \
        {str(f) for f in DEFAULT_TARGET_DIR.glob("*.yaml")}
    (tmp_path / "calibration" / "targets").mkdir(parents=True)   # found, but empty: says so
    with pytest.raises(SpecError, match="a folder holding target YAML files"):
        load_targets()


def test_bundled_targets_have_roles_and_fit_rows_name_their_parameters():
    targets = load_targets()
    fit_block = yaml.safe_load((DEFAULT_TARGET_DIR / "nemo_rl_8b.yaml").read_text())["fit"]
    fitted = {p["name"] for s in fit_block["stages"] for p in s["parameters"]}
    for t in targets:
        assert t.role in ("fit", "prediction")
        if t.role == "fit" and Path(t.file).name == "nemo_rl_8b.yaml" and t.metric == "stage_s":
            assert set(t.row.pins) <= fitted, t.id
            # AR stage rows fit the workload and trainer; the only SD rows allowed to fit are the two
            # EAGLE-3 k=3 generation rows, and only the SD-overhead parameter (at most two exist)
            if t.row.params["run"] != "ar":
                assert t.id in ("think_sd_generation_s", "zero_sd_generation_s"), t.id
                assert set(t.row.pins) == {"draft_overhead_ms"} and not t.row.overrides, t.id
    # SD rows other than the named k=3 SD-overhead fit are predictions; so is every async row
    for t in targets:
        if "async" in t.id or "ngram" in t.id or "_k5_" in t.id or "_k7_" in t.id:
            assert t.role == "prediction", t.id
    # the corrected EAGLE-3 acceptance lengths are the scenarios' inputs
    assert load_scenario(ROOT / "scenarios" / "8b_rl_think_sync.yaml").drafter.tau == 2.77
    assert load_scenario(ROOT / "scenarios" / "8b_rl_zero_sync.yaml").drafter.tau == 3.32


def test_json_keeps_params_as_objects_and_full_precision(tmp_path):
    # relative scenario path, resolved from the target file's folder upwards; run from elsewhere
    sub = tmp_path / "calibration" / "targets"
    sub.mkdir(parents=True)
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "s.yaml").write_text(Path(S7B).read_text())
    f = write(sub, [tau_row(scenario="scenarios/s.yaml")])
    cwd = os.getcwd()
    os.chdir(tmp_path.parent)
    try:
        r = runner.invoke(app, ["validate", f, "--format", "json", "--out", str(tmp_path / "o"),
                                "--calibration", str(ROOT / "calibration")])
        bare = runner.invoke(app, ["validate", f, "--format", "json", "--out", str(tmp_path / "bare")])
    finally:
        os.chdir(cwd)
    assert r.exit_code in (0, 1), r.output
    # outside a checkout, the user's own targets validate without the A100 sweep (its data is the checkout's)
    assert bare.exit_code in (0, 1) and json.loads(bare.stdout)["sweep"] is None
    assert not (tmp_path / "bare" / "validation_sweep.csv").exists()
    doc = json.loads(r.stdout)
    row = doc["rows"][0]
    assert row["params"] == {"step": 37}
    # the A100 forward sweep's section rides along: every verify ÷ decode point and decode growth
    assert len(doc["sweep"]["ratios"]) == 46 and len(doc["sweep"]["decode_growth"]) == 10
    assert {"measured_ratio", "priced_ratio", "rel_error", "role"} <= set(doc["sweep"]["ratios"][0])
    md = (tmp_path / "o" / "validation.md").read_text()
    assert "## A100 forward sweep: verify ÷ decode and decode growth" in md and md.count("| held-out |") == 23
    assert (tmp_path / "o" / "validation_sweep.csv").is_file()
    exact = validate([f])[0].simulated          # the library's value, bit for bit
    assert row["simulated"] == exact and round(exact, 4) != exact
    assert row["error_pct"] == pytest.approx(100 * (exact - 3.0) / 3.0, rel=1e-12)
    assert (tmp_path / "o" / "validation.csv").is_file()


def test_ordinal_row_reports_both_values_and_its_verdict(tmp_path):
    ov = dict(SMALL)
    rows = [
        {"id": "sd_slower_than_ar", "scenario": S8B, "overrides": ov, "metric": "ordinal", "role": "prediction",
         "params": {"slower": {"run": "sd"}, "faster": {"run": "ar"}}, "source": "[S] test"},
        {"id": "ar_slower_than_sd", "scenario": S8B, "overrides": ov, "metric": "ordinal", "role": "prediction",
         "params": {"slower": {"run": "ar"}, "faster": {"run": "sd"}}, "source": "[S] test"},
    ]
    out = validate([write(tmp_path, rows)])
    a, b = out
    assert a.slower_s == b.faster_s and a.faster_s == b.slower_s and a.slower_s != a.faster_s
    assert a.passed != b.passed                 # exactly one of two opposite claims holds
    d = a.as_dict()
    assert d["simulated_slower_s"] == a.slower_s and d["simulated_faster_s"] == a.faster_s
    assert d["result"] in ("pass", "FAIL") and d["error_pct"] is None
    # the margin says how far each claim holds or fails; opposite claims have opposite signs
    assert d["ordinal_margin_pct"] == pytest.approx(100 * (a.slower_s / a.faster_s - 1), rel=1e-12)
    assert (a.ordinal_margin > 0) == a.passed and (b.ordinal_margin > 0) == b.passed
    assert f"margin {d['ordinal_margin_pct']:+.1f} %" in d["simulated"]
    # the CLI's last line counts the passes per role; one of the two opposite claims fails: exit 1
    r = runner.invoke(app, ["validate", write(tmp_path, rows, "u.yaml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "1 of 2 rows within tolerance (prediction 1 / 2)" in " ".join(r.stdout.split())


def test_ratio_standard_error_closed_forms():
    """The delta-method error of mean(a)/mean(b) over paired steps: zero when a is proportional to
    b (the same draws scale both runs), the error of mean(a) when b is constant, and the two
    relative variances added for independent a and b."""
    import numpy as np

    from specsim.validate.run import _mean_se, _ratio_se

    rng = np.random.default_rng(0)
    b = rng.lognormal(4.0, 0.2, 40)
    assert _ratio_se(1.7 * b, b) == pytest.approx(0.0, abs=1e-12)
    a = rng.lognormal(3.0, 0.3, 40)
    assert _ratio_se(a, np.full(40, 5.0)) == pytest.approx(_mean_se(a), rel=1e-12)
    assert _mean_se(a) == pytest.approx(a.std(ddof=1) / np.sqrt(40) / a.mean(), rel=1e-12)
    c = rng.permutation(b)                      # the same spread, drawn apart from a
    cov = np.cov(a, c, ddof=1)[0, 1]
    expected = np.sqrt(_mean_se(a) ** 2 + _mean_se(c) ** 2 - 2 * cov / (40 * a.mean() * c.mean()))
    assert _ratio_se(a, c) == pytest.approx(expected, rel=1e-12)
    assert _mean_se(a[:1]) is None and _ratio_se(a[:1], b[:1]) is None


def test_stage_rows_report_the_standard_error_of_their_steady_steps(tmp_path):
    """A stage row's simulated_se is sd / sqrt(n) / mean of that stage over the run's steady steps;
    a deterministic metric (τ) reports none; the CSV carries the column."""
    import numpy as np

    from specsim.scenario import apply_overrides
    from specsim.sim.pipeline import run_pipeline
    from specsim.world.resolve import resolve

    ov = dict(SMALL, **{"pipeline.steps": 9})
    rows = [{"id": "gen", "scenario": S8B, "overrides": ov, "metric": "stage_s", "params": {"stage": "generation", "run": "sd"},
             "measured": 50.0, "tolerance": 0.5, "role": "prediction", "source": "[S] test"},
            tau_row(id="tau")]
    gen, tau = validate([write(tmp_path, rows)])
    res = run_pipeline(resolve(apply_overrides(load_scenario(S8B), ov)))
    x = np.array([r.generation_s for r in res.records[res.warmup_steps:]])
    assert len(x) == 8 and gen.simulated == pytest.approx(x.mean(), rel=1e-12)
    assert gen.simulated_se == pytest.approx(x.std(ddof=1) / np.sqrt(8) / x.mean(), rel=1e-9) and gen.simulated_se > 0
    assert tau.simulated_se is None and tau.as_dict()["simulated_se_pct"] is None
    assert gen.as_dict()["simulated_se_pct"] == pytest.approx(100 * gen.simulated_se)


def test_engine_speedup_metric_reports_the_configured_tau_under_heterogeneity():
    """The fixed-batch engine metric serves the drafter's whole acceptance population (Beta
    heterogeneity at evenly spaced quantiles): its SD run's ratio-of-sums τ is the configured τ
    within 1 % at batch 1 and batch 32, where one batch at the mean α reports the mean α's τ
    (higher by the heterogeneity's Jensen gap, > 1 % here)."""
    import numpy as np

    from specsim.validate.run import fixed_batch_runs
    from specsim.workload.acceptance.drafter import expected_tokens_per_verify
    from specsim.world.resolve import resolve

    scen = DEFAULT_TARGET_DIR / "scenarios" / "vllm_eagle3_llama31_8b_h100_bs1.yaml"
    for k, tau in ((3, 2.79), (7, 3.54)):
        world = resolve(load_scenario(str(scen), [f"speculation.k={k}", f"drafter.tau={tau}",
                                                  f"drafter.tau_at_k={k}"]))
        mean_tau = float(expected_tokens_per_verify(world.acceptance.alpha0, k, world.acceptance.decay))
        assert mean_tau > tau * 1.01   # the homogeneous shortcut would be off by more than the tolerance
        for batch in (1, 32):
            ar, sd = fixed_batch_runs(world, batch, 128, 256)
            assert sd.total_tokens == ar.total_tokens == 256 * 256   # SD never changes response lengths
            assert sd.sd_tokens / sd.sd_seq_steps == pytest.approx(tau, rel=0.01), (k, batch)
            assert np.isfinite(ar.rollout_s / sd.rollout_s)


def test_show_hardware_reports_which_sd_costs_are_fitted():
    """`specsim show hardware` lists the SD-cost block with sources: h100_sxm's two SD overheads are
    fitted (vLLM #20780), a GPU without SD timings (h200_sxm) still lists both as priors."""
    from specsim.calibrate.kernels.describe import hardware_info

    h100 = hardware_info("h100_sxm")
    step = next(r for r in h100["sd_costs"] if r["parameter"] == "sd_step_overhead_ms")
    assert step["source"].startswith("fitted") and "vllm_eagle3_bs1" in step["source"] and step["unit"] == "ms"
    assert "sd_costs.sd_step_overhead_ms" not in h100["priors"] and "draft_overhead" not in h100["priors"]
    h200 = hardware_info("h200_sxm")
    assert "sd_costs.sd_step_overhead_ms" in h200["priors"] and "draft_overhead" in h200["priors"]
    res = runner.invoke(app, ["show", "hardware", "h100_sxm"])
    assert res.exit_code == 0 and "speculative-decoding costs" in res.output


def test_engine_tpot_at_batch_one_is_the_priced_decode_step():
    """engine_tpot_s of the AR run at batch 1 is the priced batch-1 decode step (step_cost with the
    profile's overheads) between the first and the last context of the response: prefill passes
    excluded, one token per step."""
    from specsim.cost.step import step_cost
    from specsim.validate.run import _tpot_s, fixed_batch_runs
    from specsim.world.resolve import resolve

    scen = DEFAULT_TARGET_DIR / "scenarios" / "vllm_eagle3_llama31_8b_h100_bs1.yaml"
    world = resolve(load_scenario(str(scen)))
    ar, sd = fixed_batch_runs(world, 1, 128, 256)
    tpot = _tpot_s(ar, 1)
    lo, hi = (float(step_cost(world.model, None, world.hw, world.layout, 1, 0).time_s(c)) for c in (128, 128 + 256))
    assert lo * 0.999 <= tpot <= hi * 1.001
    assert _tpot_s(sd, 1) < tpot   # SD at batch 1 with tau 2.79 emits tokens faster than AR
