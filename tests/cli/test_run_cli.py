"""`specsim run` / `specsim show scenario` through typer's CliRunner, and a golden summary.

The commands live in specsim/cli/run.py; here they are registered on a throwaway typer app (the
real registration is in specsim/cli/app.py).

Golden file. tests/golden/small_async_summary.json holds the numbers of summary.json for the small
scenario below (a shrunken 30b_a3b_h100_async.yaml). A deliberate model change moves them;
regenerate with

    SPECSIM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_run_cli.py -k golden

and review the diff of tests/golden/ before committing it.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pandas as pd
import pytest
import typer
from small_sweep import ROOT, SCEN, SMALL
from typer.testing import CliRunner

from specsim.cli.run import run, show_scenario

GOLDEN = ROOT / "tests" / "golden" / "small_async_summary.json"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("run")(run)
    show = typer.Typer()
    show.command("scenario")(show_scenario)
    app.add_typer(show, name="show")
    return app


def _sets(extra=()):
    out = []
    for s in list(SMALL) + list(extra):
        out += ["--set", s]
    return out


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "res"
    res = CliRunner().invoke(_app(), ["run", SCEN, *_sets(), "--out", str(out), "--jobs", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), out


def test_run_json_and_folder(cli_run):
    info, out = cli_run
    assert info["rows"] == 8 and info["combinations"] == 4 and info["replicates"] == 2
    assert set(info["best"]["values"]) == {"speculation.k", "pipeline.policy_lag"}
    for f in ("points.csv", "steps.csv", "summary.md", "summary.json", "resolved.yaml"):
        assert (out / f).is_file()
    for name in ("heatmap_e2e_speedup", "speedup_vs_k", "rollout_timeline", "step_breakdown", "capacity_plan"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 5000, name
        assert len(pd.read_csv(out / "plots" / f"{name}.csv")) > 0, name
    md = (out / "summary.md").read_text()
    assert "Best configuration" in md and "Capacity plan" in md and "```yaml" in md
    # the prose names the best point and the baseline in words: no unformatted template or dict repr
    # (inline code may hold YAML: the explain block's command line carries the run's --set values)
    prose = re.sub(r"`[^`\n]*`", "`…`", md.split("```yaml")[0])
    assert "{" not in prose and "}" not in prose, [ln for ln in prose.splitlines() if "{" in ln or "}" in ln]
    b = info["best"]
    assert f"Best point #{b['point']}: " + ", ".join(f"{k}={v}" for k, v in b["values"].items()) in md


def test_no_plot_is_cut_by_its_edge(cli_run):
    """Every plot's outermost pixels are background: constrained layout keeps the axes inside the
    figure, and a plot that writes below its axes (the capacity plan's answer box, the breakdown's
    notes) is saved with a tight box (plots._save `beyond_figure`), so nothing is clipped."""
    from PIL import Image

    _, out = cli_run
    for png in sorted((out / "plots").glob("*.png")):
        px = np.asarray(Image.open(png).convert("L"))
        border = np.concatenate([px[:2].ravel(), px[-2:].ravel(), px[:, :2].ravel(), px[:, -2:].ravel()])
        assert border.min() == 255, png.name


def test_capacity_plan_is_the_mean_over_the_sweep_replicates(cli_run):
    """The plan runs every size for each of the sweep's replicates (paired draws), so at the
    scenario's own size its step times are the points table's means of the reference point and of
    its AR sibling, not one replicate's."""
    _, out = cli_run
    s = json.loads((out / "summary.json").read_text())
    cap = s["capacity"]
    pts = pd.read_csv(out / "points.csv")
    ref = pts[pts["point"] == cap["reference_point"]]
    lag = int(ref["pipeline.policy_lag"].iloc[0])
    ar = pts[(pts["speculation.k"] == 0) & (pts["pipeline.policy_lag"] == lag)]
    own = {r["variant"]: r for r in cap["rows"] if r["rollout_gpus"] == cap["sizes"][-1]}
    assert cap["replicates"] == 2 and all(r["replicates"] == 2 for r in cap["rows"])
    assert math.isclose(own["sd"]["step_s"], ref["step_s"].mean(), rel_tol=1e-9)
    assert math.isclose(own["ar"]["step_s"], ar["step_s"].mean(), rel_tol=1e-9)
    lo, hi = own["sd"]["step_s_ci95"]
    assert lo <= own["sd"]["step_s"] <= hi
    assert sorted(own["sd"]["step_s_by_replicate"]) == ["0", "1"]
    assert cap["target_step_s"] == own["ar"]["step_s"]


def test_trainer_idle_share_is_the_async_trainer_wait(cli_run):
    """points.csv: trainer_idle_share = exposed generation / step for every async row (the trainer's
    wait is part of an async step, so it lies in [0, 1)); summary.md labels the best point's bottleneck."""
    _, out = cli_run
    pts = pd.read_csv(out / "points.csv")
    assert (pts["mode"] == "async").all()
    want = pts["exposed_generation_s"] / pts["step_s"]
    assert ((pts["trainer_idle_share"] - want).abs() < 1e-12).all()
    assert ((pts["trainer_idle_share"] >= 0) & (pts["trainer_idle_share"] < 1)).all()
    md = (out / "summary.md").read_text()
    assert "| trainer idle (exposed generation ÷ step) |" in md
    assert ("trainer-bound" in md) or ("generation-bound" in md)


def test_rerun_table_resumes_and_prints(cli_run):
    _, out = cli_run
    res = CliRunner().invoke(_app(), ["run", SCEN, *_sets(), "--out", str(out), "--jobs", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "0 runs simulated" in res.stdout and "best (*)" in res.stdout and "capacity:" in res.stdout
    assert "explain (best SD point #" in res.stdout and "specsim explain" in res.stdout   # the best is AR here


def test_points_give_the_step_setter_tau_and_a_finite_token_weighted_batch(cli_run):
    """points.csv of an async sweep: the batch a token saw is finite in every row and within
    [1, max_batch] (it was empty for async runs); τ of the response that set each step lies in
    [1, k + 1] for SD rows, below the mean τ (acceptance spread: the tail drafts worst), empty
    for AR rows; the summary's explain block (for the best SD point: the best is AR here) holds
    both with their intervals, and summary.md shows them."""
    _, out = cli_run
    pts = pd.read_csv(out / "points.csv")
    max_batch = json.loads((out / "summary.json").read_text())["resolved_scenario"]["rollout"]["max_batch"]
    assert (pts["mode"] == "async").all()
    assert pts["token_weighted_batch"].between(1, max_batch).all()
    sd, ar = pts[pts["k"] > 0], pts[pts["k"] == 0]
    assert sd["step_setter_tau"].between(1, sd["k"] + 1).all() and ar["step_setter_tau"].isna().all()
    assert (sd["step_setter_tau"] < sd["tau"]).all()
    s = json.loads((out / "summary.json").read_text())
    block = s["explain"]
    assert s["best"]["k"] == 0 and block["is_best"] is False and block["k"] > 0
    assert block["point"] == s["best_sd"]["point"]
    for key in ("token_weighted_batch", "step_setter_tau", "tau", "per_token_sd_gain", "e2e_speedup"):
        assert block["measured"][key] == s["best_sd"][key], key
    assert block["measured"]["step_setter_tau"]["ci95"] is not None      # 2 replicates: an interval
    lag = block["values"]["pipeline.policy_lag"]
    assert block["command"].startswith(f"specsim explain {SCEN} --point k={block['k']},lag={lag} --set ")
    assert "sweep=" not in block["command"] and "--replicates 2" in block["command"]
    md = (out / "summary.md").read_text()
    assert "## Where the gain comes from" in md and "| τ over every trajectory / of the response that finished last" in md


def test_changed_scenario_exits_2_unless_force(cli_run, tmp_path):
    import shutil

    _, out = cli_run
    dst = tmp_path / "res"
    shutil.copytree(out, dst)
    res = CliRunner().invoke(_app(), ["run", SCEN, *_sets(["pipeline.reward_s=3"]), "--out", str(dst), "--jobs", "1",
                                      "--no-progress"])
    assert res.exit_code == 2
    assert "error:" in res.output and "--force" in res.output and "Traceback" not in res.output


def test_bad_override_exits_2(tmp_path):
    res = CliRunner().invoke(_app(), ["run", SCEN, "--set", "speculation.kk=3", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "speculation.kk" in res.output
    assert not (tmp_path / "x").exists()


def test_show_scenario_json_and_table(cli_run):
    res = CliRunner().invoke(_app(), ["show", "scenario", SCEN, *_sets(), "--format", "json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["rows"] == 8 and len(info["points"]) == 8
    assert info["resolved"]["rollout"]["gpus"] == 8
    # the points `show scenario` announces are the very points `run` wrote: one distinct id per row
    ids = [p["point_id"] for p in info["points"]]
    assert len(set(ids)) == 8
    assert ids == pd.read_csv(cli_run[1] / "points.csv", dtype={"point_id": str})["point_id"].tolist()
    res = CliRunner().invoke(_app(), ["show", "scenario", str(ROOT / "scenarios" / "235b_async.yaml")])
    assert res.exit_code == 0, res.output
    assert "45 points (15 combinations × 3 replicates)" in res.stdout


# ============================================================================ golden
def _golden_view(s: dict) -> dict:
    """The deterministic numbers of summary.json (no paths, times or versions)."""
    def metrics(e):
        return {k: v for k, v in e.items() if isinstance(v, dict) and "mean" in v}

    return {
        "best": {"values": s["best"]["values"], "k": s["best"]["k"], "policy_lag": s["best"]["policy_lag"],
                 **metrics(s["best"])},
        "sd_gain_over_best_ar": s["sd_gain_over_best_ar"],
        "points": [{"values": e["values"], **metrics(e)} for e in s["points"]],
        "capacity": {"rows": s["capacity"]["rows"], "target_step_s": s["capacity"]["target_step_s"],
                     "minimum": s["capacity"]["minimum"]},
    }


def _close(a, b, path="$"):
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_golden_summary(cli_run):
    _, out = cli_run
    view = _golden_view(json.loads((out / "summary.json").read_text()))
    if os.environ.get("SPECSIM_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(view, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"regenerated {GOLDEN}")
    assert GOLDEN.is_file(), f"missing {GOLDEN}: regenerate with SPECSIM_REGEN_GOLDEN=1"
    _close(json.loads(GOLDEN.read_text()), json.loads(json.dumps(view)))
