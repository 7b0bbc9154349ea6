"""`specsim project`'s results folder (specsim/study/project_folder.py) and its report
(specsim/study/report/projection_run.py): the per-step table with intervals, the plot, summary,
report.html, resuming, and the same folder guard as `specsim run`."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.study.project_folder import STEP_METRICS, project_scenario
from specsim.study.report.projection_run import edge_over_run
from specsim.study.results_folder import ResultsConflict

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "8b_rl_think_sync.yaml"
SMALL = ["workload.prompts=16", "rollout.gpus=4", "pipeline.steps=6", "pipeline.warmup_steps=1", "pipeline.mode=async",
         "training.gpus=4", "workload.length_growth_per_step=0.05", "output.gpu_hour_usd={gb200: 4}"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("proj") / "p"
    return out, project_scenario(SCEN, SMALL, out, replicates=3)


def test_the_folder_holds_the_run_step_by_step(folder):
    out, res = folder
    for f in ("resolved.yaml", "inputs.json", "steps.csv", "per_step.csv", "summary.json", "summary.md", "report.html",
              "plots/projection_steps.png", "plots/projection_steps.csv"):
        assert (out / f).is_file(), f
    assert len(list((out / "runs").glob("*.json"))) == 6 and res.computed_runs == 6 and res.reused_runs == 0
    table = pd.read_csv(out / "per_step.csv")
    assert sorted(table["policy"].unique()) == ["AR", "SD"] and len(table) == 2 * 6
    steps = pd.read_csv(out / "steps.csv")
    for col, (_, floor, ceiling) in STEP_METRICS.items():
        lo, hi = table[f"{col}_lo"].dropna(), table[f"{col}_hi"].dropna()
        assert (lo >= floor).all(), col                                      # never below the domain
        if ceiling is not None:
            assert (hi <= ceiling).all(), col
    # each mean is the mean of its replicates' values; the dollars are the GPU-hours times the price
    sd3 = steps[(steps["policy"] == "SD") & (steps["step"] == 3)]
    row = table[(table["policy"] == "SD") & (table["step"] == 3)].iloc[0]
    assert row["step_s"] == pytest.approx(sd3["step_s"].mean()) and row["replicates"] == 3
    assert np.allclose(steps["usd"], steps["gpu_h"] * 4.0)
    assert np.allclose(steps["gpu_h"], steps["step_s"] * 8 / 3600)
    # lengths grow 5 % a step: the last steps' responses are longer than the first's
    assert table[table["policy"] == "SD"]["mean_response_tokens"].iloc[-1] > \
        table[table["policy"] == "SD"]["mean_response_tokens"].iloc[0]
    assert table[table["policy"] == "AR"]["tau"].isna().all() and (table[table["policy"] == "SD"]["tau"] > 1).all()


def test_summary_and_report_carry_the_totals_and_the_table(folder):
    out, res = folder
    md = (out / "summary.md").read_text()
    assert "## Totals" in md and "## Over the run" in md and "## Per step" in md
    assert f"{res.projection['sd_wall_h'][0]:,.2f} [" in md
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "per_step.csv" in html and "mean_response_tokens" in html
    assert res.warnings == ()                                                 # 3 replicates: no warning


def test_a_rerun_resumes_and_a_changed_scenario_is_refused(folder, tmp_path):
    out, res = folder
    again = project_scenario(SCEN, SMALL, out, replicates=3)
    assert (again.computed_runs, again.reused_runs) == (0, 6)
    assert again.projection == res.projection
    with pytest.raises(ResultsConflict, match="--out"):
        project_scenario(SCEN, [*SMALL, "workload.prompts=8"], out, replicates=1)
    mine = tmp_path / "mine"
    (mine / "runs").mkdir(parents=True)
    (mine / "runs" / "notes.txt").write_text("keep")
    with pytest.raises(ResultsConflict):
        project_scenario(SCEN, SMALL, mine, replicates=1, force=True)
    assert (mine / "runs" / "notes.txt").read_text() == "keep"


def test_two_replicates_warn_and_one_gives_no_interval(tmp_path):
    two = project_scenario(SCEN, SMALL, tmp_path / "two", replicates=2)
    assert any("2 replicates (Student t = 12.7)" in w for w in two.warnings)
    assert "2 replicates (Student t = 12.7)" in (tmp_path / "two" / "summary.md").read_text()
    one = project_scenario(SCEN, SMALL, tmp_path / "one", replicates=1)
    assert one.projection["sd_wall_h"][1] is None
    assert pd.read_csv(tmp_path / "one" / "per_step.csv")["step_s_lo"].isna().all()


def test_edge_over_run_finds_where_the_trainer_binds():
    rows = []
    for step in range(10):
        rows.append({"policy": "AR", "step": step, "step_s": 100.0, "trainer_idle_share": 0.5})
        rows.append({"policy": "SD", "step": step, "step_s": 50.0 if step < 5 else 100.0,
                     "trainer_idle_share": 0.4 if step < 6 else 0.02})
    e = edge_over_run(pd.DataFrame(rows))
    assert e["first_tenth_step_ratio"] == 2.0 and e["last_tenth_step_ratio"] == 1.0
    assert e["sd_trainer_bound_from_step"] == 6


def test_the_command_refuses_another_scenarios_folder_in_one_error(folder):
    from typer.testing import CliRunner

    from specsim.cli.app import app

    out, _ = folder
    sets = [a for s in [*SMALL, "workload.prompts=8"] for a in ("--set", s)]
    r = CliRunner().invoke(app, ["project", str(SCEN), *sets, "--replicates", "1", "--out", str(out)])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and "--out" in err and "--fresh" in err and "Traceback" not in r.output
