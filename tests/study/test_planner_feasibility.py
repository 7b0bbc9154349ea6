"""`specsim plan` on a case whose trainer needs more than one trainer replica's GPUs (Qwen3-30B-A3B
on H100: 16 training GPUs at EP 8): feasibility as `specsim run` decides it, exit 2 naming the
constraint when no split can run, break-even τ probed only where the drafter is valid, and (long)
the plan's fronts and best against plain runs of every candidate of a 32-GPU plan."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.study.executors import execute
from specsim.study.planner import plan_scenario
from specsim.study.planner.bounds import BoundModel
from specsim.study.planner.candidates import candidate_scenario, enumerate_candidates
from specsim.study.planner.inverse import Context, tau_bracket, tau_overrides
from specsim.study.store import RunStore
from specsim.study.sweep import RunTask
from specsim.workload.acceptance.laws import tau_scalar
from specsim.world.resolve import resolve

SCENARIO = "scenarios/30b_a3b_h100_async.yaml"
#: the issue's 32-H100 case: 2 layouts x 6 splits (1/8 ... 6/8 of 32 GPUs) x (AR, k=3) x lag 0..2
SETS_32 = ["workload.prompts=16", "plan.total_gpus=32", "plan.layouts=[{tp: 2, ep: 2}, {tp: 4, ep: 4}]",
           "plan.max_policy_lag=2", "plan.k=[0,3]", "plan.search.replicates=2", "output.plots=false"]


def _runs(sc, c) -> bool:
    try:
        resolve(apply_overrides(sc, c.overrides))
        return True
    except ScenarioError:
        return False


def test_candidates_are_infeasible_exactly_when_the_run_refuses_them():
    """Every candidate: the bound raises iff resolving its overrides (what `specsim run --set …`
    does) raises, and with the same field; splits whose trainer gets 16 GPUs are feasible."""
    sc = load_scenario(SCENARIO, SETS_32)
    cands, _ = enumerate_candidates(sc, sc.plan)
    bm = BoundModel(sc)
    feasible = 0
    for c in cands:
        try:
            b = bm.bound(c)
            ok, field = True, None
        except ScenarioError as exc:
            ok, field = False, exc.field
        assert ok == _runs(sc, c), c.label()
        if ok:
            feasible += 1
            assert c.training_gpus >= 16 and b.step_s > 0
        else:
            assert field == "training" and c.training_gpus == 8
    assert feasible == 48


def test_a_plan_whose_every_split_the_run_refuses_exits_2_naming_it(tmp_path):
    r = CliRunner().invoke(app, ["plan", SCENARIO, "--out", str(tmp_path / "o"), "--gpus", "24", "--set",
                                 "workload.prompts=16", "--set", "plan.rollout_shares=[0.5]", "--set",
                                 "plan.layouts=[{tp: 2, ep: 2}]", "--no-progress"])
    assert r.exit_code == 2, r.output
    assert "training" in r.output and "specsim run" in r.output and "Traceback" not in r.output
    assert (tmp_path / "o" / "candidates.csv").is_file()


def test_break_even_tau_brackets_only_valid_tau():
    """The τ bracket is what the drafter accepts: its top is below the most a k-draft with the
    position decay can give (τ = k + 1 - ε is invalid at decay 0.94), every τ inside resolves, and
    just outside does not."""
    sc = load_scenario(SCENARIO, ["workload.prompts=16"])
    ctx = Context(sc, RunStore(), 1, "local", None, "fast", 2)
    base = {"pipeline.steps": sc.pipeline.steps}
    lo, own, hi = tau_bracket(ctx, base)
    d = sc.drafter
    assert lo < own == d.tau < hi <= tau_scalar(1.0, d.tau_at_k, d.position_decay) < d.tau_at_k + 1 - 0.2
    for tau in (lo, own, hi, (lo + hi) / 2):
        assert ctx.valid({**base, **tau_overrides(sc, tau)}) is None, tau
    assert ctx.valid({**base, **tau_overrides(sc, hi + 0.01)}) is not None
    if lo > 1.0 + 0.01:
        assert ctx.valid({**base, **tau_overrides(sc, lo - 0.01)}) is not None


@pytest.mark.long
def test_the_32_gpu_plan_is_the_brute_force_plan(tmp_path):
    """The issue's case: every candidate of the 32-H100 plan run plainly at 2 replicates; the plan's
    best AR and SD and its Pareto fronts are the brute force's (the main before this fix planned
    none of them: every split infeasible)."""
    res = plan_scenario(SCENARIO, SETS_32, out=tmp_path / "p", jobs=1)
    sc = load_scenario(SCENARIO, SETS_32)
    cands, _ = enumerate_candidates(sc, sc.plan)
    means = {}
    for c in cands:
        if not _runs(sc, c):
            continue
        rs = [execute(RunTask.of(candidate_scenario(sc, c), r, "plan")) for r in range(2)]
        means[c.cid] = (c.arm, sum(r["steady"]["step_s"] for r in rs) / 2, c)
    assert len(means) == 48
    for arm in ("ar", "sd"):
        best = min((v for v in means.values() if v[0] == arm), key=lambda v: v[1])
        assert res.answer[f"best_{arm}"]["candidate"] == best[2].cid
        pts = sorted((v[2].total_gpus * v[1], v[1], cid) for cid, v in means.items() if v[0] == arm)
        front, fastest = [], math.inf
        for _, step, cid in pts:
            if step < fastest:
                front.append(cid)
                fastest = step
        assert [p["candidate"] for p in res.summary["fronts"][arm]] == front, arm
        assert len(front) >= 2          # a cheaper, slower split is on it (12+16 next to 16+16)
