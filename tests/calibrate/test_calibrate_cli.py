"""`specsim calibrate` is one typer sub-app: traces, kernels, workload, a100-sweep (and collect, acceptance).

The commands parse and print; the library functions they call return data
(specsim/calibrate/workload/run.py, a100_sweep.py). The data they read by default is found in the
calibration folder of the working directory or above it (--calibration names another). The workload fit of the
bundled 8B targets takes minutes, so `calibrate workload` is run here on a one-parameter synthetic
target file whose scenario is a copy in a temporary folder (a real run would rewrite the bundled
scenarios). Bad input exits 2 with one `error: ...` paragraph and no traceback.
"""

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.catalog.hardware import load_hardware
from specsim.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SUBCOMMANDS = ("traces", "kernels", "workload", "a100-sweep")
# a small 8B workload: a few hundred sequences, short responses (each pipeline run well under a second)
SMALL = {"workload.prompts": 16, "workload.group_size": 4, "pipeline.steps": 2, "pipeline.warmup_steps": 1,
         "rollout.gpus": 4, "workload.max_response_tokens": 2048,
         "workload.response_tokens": {"kind": "lognormal", "median": 300, "p99": 1500}}


def _bad(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, (args, r.exit_code, r.output)
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_calibrate_help_lists_the_five_subcommands():
    r = runner.invoke(app, ["calibrate", "--help"])
    assert r.exit_code == 0, r.output
    listed = r.output.split("Commands:", 1)[1].split()
    assert all(c in listed for c in SUBCOMMANDS), r.output
    for c in SUBCOMMANDS:
        r = runner.invoke(app, ["calibrate", c, "--help"])
        assert r.exit_code == 0 and f"specsim calibrate {c}" in r.output, (c, r.output)


def test_the_old_forms_are_gone():
    """`specsim calibrate TRACES --hardware H` and `--kernels` were the one-command forms."""
    r = runner.invoke(app, ["calibrate", "--kernels", "aiconfigurator"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert not (ROOT / "calibration" / "fit_8b.py").exists()
    assert not (ROOT / "calibration" / "fit_a100_sweep.py").exists()
    assert not (ROOT / "calibration" / "fit_acceptance_shape.py").exists()
    # the acceptance-shape fit is a recipe beside its data now (calibration/recipes/acceptance_shape.py)
    r = runner.invoke(app, ["calibrate", "acceptance-shape"])
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.mark.parametrize("args", [["calibrate", "workload", "--dry-run"], ["calibrate", "a100-sweep"]])
def test_commands_with_bundled_defaults_need_a_calibration_folder(tmp_path, monkeypatch, args):
    """Run where no calibration/ folder is (here or above): one error naming --calibration, exit 2;
    --calibration pointing at a missing folder: the same."""
    monkeypatch.chdir(tmp_path)
    err = _bad(*args)
    assert "--calibration" in err and "no calibration/ folder" in err and str(tmp_path) in err
    err = _bad(*args, "--calibration", str(tmp_path / "nope"))
    assert "--calibration" in err and "nope" in err


def test_a100_sweep_finds_the_checkout_from_a_subfolder(monkeypatch):
    """The default data is found walking up from the working directory (here: tests/)."""
    monkeypatch.chdir(ROOT / "tests")
    r = runner.invoke(app, ["calibrate", "a100-sweep"])
    assert r.exit_code == 0 and "5 fit rows of Qwen2.5-7B" in r.output, r.output


@pytest.mark.parametrize("args, needle", [
    (["calibrate", "traces", "some.csv"], "--hardware"),
    (["calibrate", "kernels", "--system", "bogus"], "--system"),
    (["calibrate", "kernels", "--source", "bogus"], "--source"),
    (["calibrate", "workload", "--max-nfev", "0"], "--max-nfev"),
    (["calibrate", "workload", "--targets", "no_such_targets.yaml", "--dry-run"], "no_such_targets.yaml"),
])
def test_bad_calibrate_input_is_one_error(args, needle):
    assert needle in _bad(*args)


# ----------------------------------------------------------------------------- calibrate workload
def _fit_targets(tmp_path: Path) -> tuple[Path, Path]:
    """A target file fitting training.mfu of a copy of 8b_rl_zero_sync.yaml to one synthetic row
    (the training stage time simulated at mfu 0.3)."""
    from specsim.validate.run import Runs, Target, simulate_target
    from specsim.validate.targets import TargetRow

    scen = tmp_path / "zero.yaml"
    shutil.copy(ROOT / "scenarios" / "8b_rl_zero_sync.yaml", scen)
    row = TargetRow(id="x", scenario=str(scen), overrides={**SMALL, "training.mfu": 0.3}, metric="stage_s",
                    params={"stage": "training", "run": "ar"}, measured=1.0, role="prediction", source="[S] synthetic")
    truth = simulate_target(Target(row, "", "", "gb200", str(scen), 0.1), Runs())[0]
    doc = {"source": "test", "hardware": "gb200",
           "targets": [{"id": "train", "scenario": str(scen), "overrides": SMALL, "metric": "stage_s",
                        "params": {"stage": "training", "run": "ar"}, "measured": truth, "role": "fit",
                        "pins": ["mfu"], "source": "[S] synthetic: simulated with training.mfu = 0.3"}],
           "fit": {"stages": [{"name": "trainer", "parameters": [
               {"name": "mfu", "path": "training.mfu", "scenarios": [str(scen)], "prior": 0.5,
                "bounds": [0.05, 0.9], "log": True}]}]}}
    targets = tmp_path / "fit.yaml"
    targets.write_text(yaml.safe_dump(doc, sort_keys=False))
    return targets, scen


def test_calibrate_workload_dry_run_prints_the_fit_and_writes_nothing(tmp_path):
    targets, scen = _fit_targets(tmp_path)
    before = scen.read_text()
    r = runner.invoke(app, ["calibrate", "workload", "--targets", str(targets), "--dry-run", "--max-nfev", "30"])
    assert r.exit_code == 0, r.output
    assert "stage trainer: 1 parameters, 1 rows, Jacobian rank 1" in r.output
    line = next(ln for ln in r.output.splitlines() if ln.strip().startswith("mfu "))
    assert float(line.split("fitted")[1].split()[0]) == pytest.approx(0.3, rel=0.01) and "fitted" in line
    assert "row train" in r.output and "measured" in r.output and "residual" in r.output
    assert "wrote" not in r.output and r.output.rstrip().endswith(" s")
    assert scen.read_text() == before


def test_run_workload_fit_writes_the_fitted_field_with_the_command(tmp_path):
    from specsim.calibrate.workload.run import COMMAND, fit_command, run_workload_fit
    from specsim.scenario import load_scenario

    targets, scen = _fit_targets(tmp_path)
    run = run_workload_fit(targets, max_nfev=30)
    assert run.written_scenarios == [str(scen)] and run.hardware_params == [] and run.written_profiles == {}
    assert run.command == fit_command(targets) == f"{COMMAND} --targets {targets}"
    cal = ROOT / "calibration"
    assert fit_command(cal / "targets" / "nemo_rl_8b.yaml", cal) == "specsim calibrate workload"
    assert fit_command(cal / "targets" / "vllm_eagle3_bs1.yaml", cal) == \
        "specsim calibrate workload --targets calibration/targets/vllm_eagle3_bs1.yaml"
    assert load_scenario(scen).training.mfu == pytest.approx(0.3, rel=0.01)
    assert f"fitted by `{COMMAND} --targets {targets}` to train" in scen.read_text()


# ----------------------------------------------------------------------------- calibrate a100-sweep
def test_calibrate_a100_sweep_prints_the_four_fits_every_grid_and_the_comparison():
    r = runner.invoke(app, ["calibrate", "a100-sweep"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert out.startswith("a100_sxm in-situ streaming factor: ") and "5 fit rows of Qwen2.5-7B" in out
    assert "a100_sxm multi-token attention: " in out and "60 verify rows of Qwen2.5-7B at batch < 8; 108 SMs" in out
    assert "a100_sxm piecewise-graph attention: " in out and "decode rows of Qwen2.5-7B that run cascade" in out
    assert "a100_sxm attention per (sequence, KV head) block: " in out and "without cascade attention" in out
    assert "every row at the four fits" in out
    assert "of 46 within 20 %" in out and "decode at batch 64 / batch 1" in out
    for model in ("Qwen2.5-7B", "Llama-3.1-8B-Instruct", "Qwen2.5-14B"):
        for mode in ("target_decode", "drafter_decode", "target_verify"):
            assert f"\n{model} {mode}: priced / measured - 1 (rows: batch, columns: prompt tokens)" in out
    assert "wrote" not in out


def test_fit_a100_sweep_writes_a_loadable_profile_copy(tmp_path):
    from specsim.calibrate.kernels.a100_sweep import COMMAND, PROFILE, fit_a100_sweep

    assert PROFILE == Path(load_hardware("a100_sxm").path)
    copy = tmp_path / "a100_sxm.yaml"
    shutil.copy(PROFILE, copy)
    fit = fit_a100_sweep(write_profile=True, profile=copy, root=ROOT)
    assert fit.written == copy
    kf = load_hardware(str(copy)).kernel_fit
    assert kf.insitu_stream_factor == pytest.approx(round(fit.stream.beta, 4))
    assert kf.multi_token_attention is not None
    assert COMMAND in kf.provenance["insitu_stream_fit"]["how"]
    assert {(g.model, g.mode) for g in fit.grids} >= {("Qwen2.5-14B", "target_verify")}
