"""Whole-run projection (specsim/study/projection.py, `specsim project`) and the inverse answers
(specsim/study/report/projection.py)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.scenario import apply_overrides, load_scenario
from specsim.study.projection import format_projection, interval, project_run
from specsim.study.report.projection import _first_crossing, inverse_answers, inverse_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_first_crossing_interpolates_and_refuses_to_extrapolate():
    x = np.array([2.0, 3.0, 4.0])
    y = np.array([1.0, 1.2, 1.6])
    assert _first_crossing(x, y, 1.4) == pytest.approx(3.5)
    assert _first_crossing(x, y, 1.0) == 2.0
    assert _first_crossing(x, y, 2.0) is None


def test_inverse_answers_from_a_frame():
    rows = []
    for k in (3, 5):
        for tau in (2.0, 3.0, 4.0):
            rows.append({"k": k, "drafter.tau": tau, "generation_speedup": 0.5 + tau * (0.3 if k == 5 else 0.25)})
    sc = load_scenario(ROOT / "scenarios" / "235b_acceptance.yaml")
    inv = inverse_answers(sc, pd.DataFrame(rows))
    need = inv["acceptance_length_needed"]["at_k"]
    assert need["5"]["1.25x"] == pytest.approx(2.5)      # 0.5 + 0.3·τ = 1.25
    assert need["3"]["2x"] is None                       # 0.5 + 0.25·4 = 1.5 < 2: not reached
    assert "| 5 |" in inverse_markdown(inv)

    scale = pd.DataFrame({"policy_lag": [1] * 3, "total_gpus": [512, 1024, 2048],
                          "step_s": [300.0, 200.0, 100.0], "baseline_step_s": [400.0, 300.0, 200.0]})
    sc2 = apply_overrides(load_scenario(ROOT / "scenarios" / "235b_scale.yaml"), {"output.capacity.target_step_s": 250.0})
    g = inverse_answers(sc2, scale)["gpus_needed"]["per_policy_lag"]["1"]
    assert g["gpus_with_sd"] == pytest.approx(768) and g["gpus_without_sd"] == pytest.approx(1536)


def test_interval_respects_each_quantitys_domain():
    """Durations are cut at 0, a ratio's interval is taken on the log scale (positive, ×/÷ the same
    factor around the geometric mean), a saving is signed, and one replicate has no interval."""
    m, lo, hi = interval([1.0, 2.0, 3.0])
    assert m == 2.0 and lo < 2.0 < hi
    assert interval([0.1, 1.9])[1] == 0.0                     # a plain t-interval reaches ≈ −10.5
    r, rlo, rhi = interval([0.5, 2.0], "ratio")
    assert r == 1.25 and 0 < rlo < 1 < rhi and rlo * rhi == pytest.approx(1.0)   # geometric mean 1
    assert interval([-1.0, 1.0], "signed")[1] < -1
    assert interval([5.0]) == (5.0, None, None) and interval([5.0], "ratio") == (5.0, None, None)


def test_project_run_totals_are_consistent():
    sc = apply_overrides(load_scenario(ROOT / "scenarios" / "8b_rl_think_sync.yaml"),
                         {"workload.prompts": 16, "rollout.gpus": 4, "pipeline.steps": 5, "pipeline.warmup_steps": 1,
                          "pipeline.mode": "async", "training.gpus": 4, "workload.length_growth_per_step": 0.05})
    p = project_run(sc, replicates=2)
    assert p["gpus"] == 8
    for kind in ("sd", "ar"):
        m, lo, hi = p[f"{kind}_wall_h"]
        assert lo <= m <= hi and m > 0
        assert p[f"{kind}_gpu_h"][0] == pytest.approx(m * 8)
    assert p["saved_wall_h"][0] == pytest.approx(p["ar_wall_h"][0] - p["sd_wall_h"][0])
    assert p["sd_last_step_s"][0] > 0 and p["sd_mean_tau"][0] > 1


def test_project_run_in_dollars_is_gpu_hours_times_the_price():
    """With output.gpu_hour_usd for the scenario's GPU type, every $ total is its GPU-hour
    interval times the price exactly (mean and both limits); without one, no dollars at all."""
    sc = apply_overrides(load_scenario(ROOT / "scenarios" / "8b_rl_think_sync.yaml"),
                         {"workload.prompts": 16, "rollout.gpus": 4, "pipeline.steps": 3, "pipeline.warmup_steps": 1})
    plain = project_run(sc, replicates=2)
    assert not any(k.endswith("_usd") for k in plain) and "$" not in format_projection(plain)
    priced = project_run(apply_overrides(sc, {"output.gpu_hour_usd": {"GB200": 2.5, "h100_sxm": 9.0}}), replicates=2)
    assert priced["gpu_hour_usd"] == 2.5                                   # the scenario's own GPU type
    for kind in ("ar", "sd", "saved"):
        gpu_h, usd = priced[f"{kind}_gpu_h"], priced[f"{kind}_usd"]
        assert usd == tuple(v * 2.5 for v in gpu_h) and gpu_h == plain[f"{kind}_gpu_h"]
        assert usd[1] < usd[0] < usd[2]                                    # the interval, scaled
    text = format_projection(priced).splitlines()
    assert len(text) == 4 and text[0].endswith("at $2.50 per GPU-hour")
    m, lo, hi = priced["sd_usd"]
    assert f"GPU-h = ${m:,.0f} [{lo:,.0f}, {hi:,.0f}]" in text[2]
    assert "$" in text[1] and "$" in text[3]
    # a price for another GPU type only: GPU-hours only
    other = project_run(apply_overrides(sc, {"output.gpu_hour_usd": {"h100_sxm": 9.0}}), replicates=1)
    assert "gpu_hour_usd" not in other and "$" not in format_projection(other)


SMALL_RUN = ["--set", "workload.prompts=16", "--set", "rollout.gpus=4", "--set", "pipeline.steps=3",
             "--set", "pipeline.warmup_steps=1"]


def test_project_command_prints_the_projection_and_its_json(tmp_path):
    """`specsim project SCENARIO` prints format_projection's four lines; --format json is the
    project_run dict (every total a [mean, low, high] interval)."""
    import json

    from typer.testing import CliRunner

    from specsim.cli.app import app

    scen = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
    # one process (--jobs 1): what is printed does not depend on the workers
    # (test_project_run_on_two_workers_equals_one_process), and a pool costs each worker the imports
    r = CliRunner().invoke(app, ["project", scen, *SMALL_RUN, "--replicates", "2", "--jobs", "1", "--out",
                                 str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 6, r.stdout
    assert lines[4].startswith("note: intervals rest on 2 replicates (Student t = 12.7)")
    assert lines[5].startswith(f"results: {tmp_path / 'a'} (4 runs simulated, 0 reused)")
    assert lines[0].startswith("8b_rl_think_sync: 3 RL steps on 4 GPUs, 2 replicates (mean [95 % interval])")
    assert lines[1].startswith("  AR : wall-clock ") and lines[2].startswith("  SD : wall-clock ")
    assert lines[3].startswith("  SD saves ") and "run speedup" in lines[3]
    r = CliRunner().invoke(app, ["project", scen, *SMALL_RUN, "--replicates", "1", "--jobs", "1", "--format", "json",
                                 "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert (p["scenario"], p["steps"], p["replicates"], p["gpus"]) == ("8b_rl_think_sync", 3, 1, 4)
    m, lo, hi = p["sd_wall_h"]
    assert m > 0 and lo is None and hi is None and len(p["run_speedup"]) == 3   # one replicate: no interval
    assert p["out_dir"] == str(tmp_path / "b")
    assert p["saved_wall_h"][0] == pytest.approx(p["ar_wall_h"][0] - p["sd_wall_h"][0])


def test_project_command_json_carries_the_dollars(tmp_path):
    import json

    from typer.testing import CliRunner

    from specsim.cli.app import app

    scen = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
    r = CliRunner().invoke(app, ["project", scen, *SMALL_RUN, "--replicates", "1", "--jobs", "1", "--format", "json",
                                 "--out", str(tmp_path),
                                 "--set", "output.gpu_hour_usd={gb200: 4}"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert p["gpu_hour_usd"] == 4.0
    assert p["sd_usd"][0] == p["sd_gpu_h"][0] * 4.0 and p["saved_usd"][0] == p["saved_gpu_h"][0] * 4.0
    assert p["sd_usd"][1:] == [None, None]


@pytest.mark.parametrize("args, needle", [(["--replicates", "0"], "--replicates: must be >= 1"),
                                          (["--set", "pipeline.steps=abc"], "pipeline.steps"),
                                          (["--set", "output.gpu_hour_usd={gb200: -1}"], "output.gpu_hour_usd.gb200"),
                                          (["--set", "output.gpu_hour_usd={gb200: .nan}"], "output.gpu_hour_usd.gb200"),
                                          (["--set", "output.gpu_hour_usd={gb300: 5}"], "output.gpu_hour_usd.gb300")])
def test_project_command_bad_input_is_one_error(args, needle, tmp_path):
    from typer.testing import CliRunner

    from specsim.cli.app import app

    r = CliRunner().invoke(app, ["project", str(ROOT / "scenarios" / "235b_run.yaml"), *args, "--out", str(tmp_path / "p")])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and needle in err, err
    assert "Traceback" not in r.output and not (tmp_path / "p").exists()


def test_speedup_vs_scale_bars_are_the_summary_interval_cut_at_zero(tmp_path):
    """The plot's CSV carries the summary's interval (tables.mean_ci), not a symmetric mean ± half:
    two noisy replicates reach below 0 with a plain t-interval, and the bar must stop at 0."""
    from specsim.study.report.projection import speedup_vs_scale
    from specsim.study.report.tables import mean_ci

    frame = pd.DataFrame({"policy_lag": [1, 1, 1, 1, 1], "total_gpus": [512, 512, 1024, 1024, 2048],
                          "e2e_speedup": [0.1, 1.9, 1.4, 1.5, 1.6]})
    sc = load_scenario(ROOT / "scenarios" / "235b_scale.yaml")
    png = speedup_vs_scale(tmp_path / "speedup_vs_scale", sc, frame)
    assert png and Path(png).is_file()
    data = pd.read_csv(tmp_path / "speedup_vs_scale.csv").set_index("total_gpus")
    ref = mean_ci([0.1, 1.9])
    assert data.loc[512, "ci95_lo"] == 0.0 and ref["ci95"][0] == 0.0      # a t-interval would give ≈ −10.4
    assert data.loc[512, "ci95_hi"] == pytest.approx(ref["ci95"][1])
    assert data.loc[1024, "ci95_lo"] == pytest.approx(mean_ci([1.4, 1.5])["ci95"][0])
    assert 0 < data.loc[1024, "ci95_lo"] < 1.45 < data.loc[1024, "ci95_hi"]
    assert np.isnan(data.loc[2048, "ci95_lo"]) and data.loc[2048, "count"] == 1


def test_project_run_on_two_workers_equals_one_process():
    """The runs spread over worker processes give the same projection as in this process (each
    run is deterministic given its replicate's draws; results are gathered by run, not by order)."""
    sc = apply_overrides(load_scenario(ROOT / "scenarios" / "8b_rl_think_sync.yaml"),
                         {"workload.prompts": 16, "rollout.gpus": 4, "pipeline.steps": 3, "pipeline.warmup_steps": 1,
                          "pipeline.mode": "async", "training.gpus": 4})
    import json

    same = lambda p: json.dumps(p, sort_keys=True)       # AR's τ is NaN, which != itself
    assert same(project_run(sc, replicates=2, jobs=2)) == same(project_run(sc, replicates=2, jobs=1))
