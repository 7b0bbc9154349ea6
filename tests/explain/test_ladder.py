"""`specsim explain` (specsim/explain/ladder.py): Shapley values sum to the total log-gain exactly;
the ladder's last rung is the plain run's SD gain exactly (the same draws); the ceiling is about τ;
bad inputs exit 2 with a located message."""

import copy
import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.errors import SpecError
from specsim.explain.ladder import explain, parse_point, shapley
from tests.small_sweep import TINY_SYNC


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = copy.deepcopy(TINY_SYNC)
    d["drafter"].update(heterogeneity=5.0, staleness={"tau_after": 1.6, "after_versions": 10})
    d["pipeline"]["steps"] = 3
    f = tmp_path_factory.mktemp("explain") / "tiny.yaml"
    f.write_text(yaml.safe_dump(d))
    return str(f)


@pytest.fixture(scope="module")
def explained(tiny):
    return explain(tiny, replicates=2, jobs=1)


def test_shapley_is_exact_and_efficient_on_a_known_game():
    w = {"a": 1.0, "b": 2.0, "c": -0.5}
    v = lambda s: np.array([sum(w[i] for i in s) + (3.0 if {"a", "b"} <= s else 0.0)])
    phi = shapley(list(w), v)
    assert phi["a"][0] == pytest.approx(2.5) and phi["b"][0] == pytest.approx(3.5) and phi["c"][0] == pytest.approx(-0.5)
    names = [f"x{i}" for i in range(8)]   # > 6 factors: permutations, still efficient
    v8 = lambda s: np.array([len(s) ** 1.5])
    phi8 = shapley(names, v8, permutations=30)
    assert sum(p[0] for p in phi8.values()) == pytest.approx(8 ** 1.5, rel=1e-12)


def test_shapley_sums_to_the_total_log_gain(explained):
    total = np.asarray(explained.variants["total_log_gain"])
    phis = np.array([s["values"] for s in explained.shapley])
    assert np.allclose(phis.sum(axis=0), total, rtol=0, atol=1e-12)


def test_last_rung_is_the_plain_runs_gain_exactly(explained, tiny):
    from specsim.scenario import apply_overrides, load_scenario
    from specsim.sim.pipeline import run_pipeline
    from specsim.study.sweep import baseline_of
    from specsim.world.resolve import resolve

    sc = apply_overrides(load_scenario(tiny), {"sweep": {}})
    for r in range(2):
        sd = run_pipeline(resolve(sc), replicate=r).steady()["step_s"]
        ar = run_pipeline(resolve(baseline_of(sc)), replicate=r).steady()["step_s"]
        assert explained.ladder[-1]["gains"][r] == ar / sd
    assert explained.ladder[-1]["gain"]["mean"] == explained.realised["mean"]


def test_ceiling_is_about_tau_and_rungs_telescope(explained):
    assert explained.ladder[0]["gain"]["mean"] == pytest.approx(explained.tau, rel=0.15)
    prod = explained.ladder[0]["gain"]["mean"]
    g = np.array(explained.ladder[0]["gains"])
    for r in explained.ladder[1:]:
        g = g * (np.array(r["gains"]) / g)
    assert np.allclose(g, explained.ladder[-1]["gains"])
    assert prod > 0 and [r["rung"] for r in explained.ladder][:3] == ["ceiling", "draft", "verify"]


def test_outputs_and_cli_json(tiny, tmp_path):
    res = CliRunner().invoke(app, ["explain", tiny, "--replicates", "1", "--out", str(tmp_path / "ex"),
                                   "--jobs", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert {r["rung"] for r in info["ladder"]} >= {"ceiling", "trainer"}
    for f in ("explain.md", "ladder.csv", "shapley.csv", "waterfall.png", "waterfall.csv", "report.html"):
        assert (tmp_path / "ex" / f).is_file()
    html = (tmp_path / "ex" / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in html and "counterfactual" in html and "where the SD gain goes" in html
    assert "one replicate" in " ".join(info["notes"])


@pytest.mark.parametrize("args, where", [
    (["--point", "k"], "--point"), (["--point", "k=0"], "--point"), (["--replicates", "0"], "--replicates"),
    (["--steps", "1"], "--steps"), (["--point", "nonsense.field=3"], "nonsense"),
    (["--set", "what_if.free_trainer=true"], "what_if.free_trainer"),
    (["--set", "pipeline.mode=async", "--set", "training.gpus=1", "--set", "pipeline.policy_lag=2", "--steps", "4"], "at least 5 for `explain`"),
    (["--set", "pipeline.mode=async", "--set", "training.gpus=1", "--set", "pipeline.policy_lag=1",
      "--set", "pipeline.steps=3"],
     "pipeline.steps"),
])
def test_bad_inputs_exit_2(tiny, tmp_path, args, where):
    res = CliRunner().invoke(app, ["explain", tiny, "--out", str(tmp_path / "x"), *args])
    assert res.exit_code == 2, res.output
    assert where in res.output and "Traceback" not in res.output


def test_parse_point_aliases():
    assert parse_point("k=5,lag=2") == {"speculation.k": 5, "pipeline.policy_lag": 2}
    with pytest.raises(SpecError):
        parse_point("k5")


def test_all_factors_on_is_the_plain_run_without_staleness_or_spread():
    """A point whose drafter never goes stale and has no acceptance spread: those factors are not
    switched off in any variant (the what-ifs would be no-ops under another run key), so the
    coalition of every factor is the plain scenario itself, whose run `explain` reads back."""
    from specsim.explain.ladder import applicable_factors, variant_overrides
    from specsim.scenario import validate_doc

    sc = validate_doc(copy.deepcopy(TINY_SYNC), None)
    names = frozenset(f.name for f in applicable_factors(sc))
    assert names == {"draft", "verify", "trainer"}
    assert variant_overrides(sc, names) == {}
    off = variant_overrides(sc, frozenset())
    assert "what_if.no_staleness" not in off and "what_if.no_acceptance_spread" not in off


def test_explain_keeps_its_runs_and_a_rerun_computes_none(tiny, tmp_path):
    """`specsim explain` keeps every variant's runs in <out>/runs/ (study/store.RunStore): an
    interrupted explain resumes there, and a rerun reuses every run and gives the same ladder."""
    out = tmp_path / "ex"
    args = ["explain", tiny, "--replicates", "1", "--out", str(out), "--jobs", "1", "--format", "json"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    a = json.loads(first.stdout)
    stored = sorted((out / "runs").glob("*.json"))
    assert a["computed_runs"] == a["pipeline_runs"] == len(stored) > 0 and a["reused_runs"] == 0
    # an interruption: half the runs lost; the rerun computes only those
    for f in stored[::2]:
        f.unlink()
    resumed = json.loads(CliRunner().invoke(app, args).stdout)
    assert resumed["computed_runs"] == len(stored[::2]) and resumed["reused_runs"] == len(stored) - len(stored[::2])
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    b = json.loads(again.stdout)
    assert b["computed_runs"] == 0 and b["reused_runs"] == b["pipeline_runs"] == a["pipeline_runs"]
    assert [r["gains"] for r in b["ladder"]] == [r["gains"] for r in a["ladder"]] == \
        [r["gains"] for r in resumed["ladder"]]
