"""`specsim plan` (study/planner/): the search against brute force, reproduction by plain runs,
resume, bad inputs, bisection brackets, and the bounds below simulated step times."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.scenario import load_scenario
from specsim.study.executors import execute
from specsim.study.planner import plan_scenario
from specsim.study.planner.bounds import BoundModel
from specsim.study.planner.candidates import candidate_scenario, enumerate_candidates
from specsim.study.planner.inverse import bisect_float, bisect_int
from specsim.study.sweep import RunTask

#: a tiny async case: Qwen2.5-3B on 8 H100, 2 layouts x 3 splits x (AR, k=3) x lag 0..1 = 24 candidates
TINY = {
    "name": "tiny_plan", "seed": 0, "hardware": "h100_sxm", "model": "Qwen2.5-3B",
    "rollout": {"gpus": 4, "tp": 1, "max_batch": 16},
    "training": {"gpus": 4, "tp": 1},
    "workload": {"prompts": 8, "group_size": 4, "max_response_tokens": 1024,
                 "prompt_tokens": {"kind": "fixed", "tokens": 64},
                 "response_tokens": {"kind": "lognormal", "median": 200, "p99": 900}},
    "drafter": {"kind": "eagle3", "tau": 2.5, "tau_at_k": 3},
    "speculation": {"policy": "always", "k": 3},
    "pipeline": {"mode": "async", "steps": 6, "warmup_steps": 3, "policy_lag": 1, "reward_s": 0.5},
    "output": {"plots": False, "capacity": {"rollout_gpus": []}},
    "plan": {"total_gpus": 8, "max_policy_lag": 1, "k": [0, 3], "layouts": [{"tp": 1}, {"tp": 2}],
             "split_grid": 3, "search": {"replicates": 2, "halving_rounds": 2, "keep_fraction": 0.25}},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("plan") / "tiny.yaml"
    p.write_text(yaml.safe_dump(TINY))
    return p


@pytest.fixture(scope="module")
def planned(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan_out") / "res"
    return plan_scenario(tiny, out=out, jobs=1), out


def _brute(tiny, reps: int) -> dict:
    sc = load_scenario(tiny)
    cands, _ = enumerate_candidates(sc, sc.plan)
    means = {}
    for c in cands:
        s = candidate_scenario(sc, c)
        res = [execute(RunTask.of(s, r, "plan")) for r in range(reps)]
        if any("error" in r for r in res):
            continue
        means[c.cid] = (c.arm, sum(r["steady"]["step_s"] for r in res) / reps, c)
    return means


def test_search_keeps_the_brute_force_best(tiny, planned):
    res, _ = planned
    brute = _brute(tiny, 2)
    assert len(brute) == 24
    for arm in ("ar", "sd"):
        best = min((v for v in brute.values() if v[0] == arm), key=lambda v: v[1])
        got = res.answer[f"best_{arm}"]
        assert got is not None
        assert got["candidate"] == best[2].cid, (arm, got["label"], best[2].label())
        assert got["step_s"]["mean"] == pytest.approx(best[1], rel=1e-12)


def test_bounds_are_below_every_simulated_step(tiny, planned):
    res, _ = planned
    df = res.candidates()
    sim = df[df.status == "simulated"]
    assert len(sim) > 0
    assert (sim.bound_step_s <= sim.step_s).all()


def test_best_reproduces_as_a_plain_run(tiny, planned, tmp_path):
    from specsim.study.runner import run_scenario

    res, _ = planned
    for arm in ("ar", "sd"):
        b = res.answer[f"best_{arm}"]
        sets = [f"{k}={json.dumps(v)}" for k, v in b["overrides"].items()]
        sets += ["sweep={replicates: 2}"]
        run = run_scenario(tiny, sets, out=tmp_path / arm, jobs=1, progress=False, plots=False)
        steps = run.points().sort_values("replicate").step_s.tolist()
        assert steps == b["per_replicate_step_s"]
        assert sum(steps) / 2 == b["step_s"]["mean"]


def test_rerun_reuses_every_finished_run(tiny, planned):
    res, out = planned
    again = plan_scenario(tiny, out=out, jobs=1)
    assert again.search["computed_runs"] == 0
    assert again.search["reused_runs"] == res.search["computed_runs"] + res.search["reused_runs"]
    assert again.answer["best_sd"]["candidate"] == res.answer["best_sd"]["candidate"]
    g = again.answer["sd_gain_at_optima"]
    assert g["n"] == 2 and g["ci95"] is not None


def test_the_plan_writes_its_report_page(planned):
    _, out = planned
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "the plan" in html and "evaluated candidates" in html
    assert ("Pareto fronts" in html) == (out / "fronts.png").is_file()   # the fronts plot, embedded when drawn


def test_search_reports_its_cost(planned):
    res, out = planned
    s = res.search
    assert s["enumerated"] == 24
    assert s["simulated_candidates"] + sum(s["pruned_by"].values()) + s["infeasible"] <= 24
    for f in ("candidates.csv", "summary.json", "summary.md", "plan.yaml", "resolved.yaml"):
        assert (out / f).is_file()
    assert "SD's gain at each one's own optimum" in (out / "summary.md").read_text()


runner = CliRunner()


@pytest.mark.parametrize("sets, needle", [
    (["plan.total_gpus=1"], "plan.total_gpus"),                       # no room for an engine and a trainer replica
    (["plan.layouts=[{tp: 3}]"], "plan.layouts"),                     # tp 3 does not divide the 16 heads
    (["plan.objective=min_gpus"], "plan.target_step_s"),              # objective needs a target
    (["plan.rollout_shares=[1.5]"], "plan.rollout_shares"),
])
def test_bad_plan_inputs_exit_2(tiny, tmp_path, sets, needle):
    args = ["plan", str(tiny), "--out", str(tmp_path / "o")]
    for s in sets:
        args += ["--set", s]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_bisection_brackets_on_a_monotone_case():
    calls = []

    def ok(n):
        calls.append(n)
        return n * n >= 200          # first true at 15
    assert bisect_int(1, 64, ok) == (14, 15)
    assert len(calls) <= 8
    assert bisect_int(20, 64, ok) == (19, 20)   # true already at lo
    lo, hi = bisect_float(0.0, 10.0, lambda x: math.exp(x) >= 50.0, 1e-3)
    assert lo < math.log(50.0) <= hi and hi - lo <= 1e-3


def test_min_gpus_for_brackets(tiny, planned):
    res, out = planned
    b = res.answer["best_ar"]
    target = b["step_s"]["mean"] * 1.2
    again = plan_scenario(tiny, out=out, jobs=1, min_gpus_for=target)
    (q_ar,) = [q for q in again.summary["queries"] if q["arm"] == "ar"]
    lo, hi = q_ar["bracket_gpus"]
    assert lo < hi and q_ar["step_s_at_answer"]["mean"] <= target


def test_bound_model_prices_trainer_and_latency(tiny):
    sc = load_scenario(tiny)
    cands, _ = enumerate_candidates(sc, sc.plan)
    bm = BoundModel(sc)
    b = bm.bound(cands[0])
    assert b.trainer_s > 0 and b.throughput_s > 0 and b.latency_s > 0
    assert b.binding in ("trainer", "throughput", "latency")
