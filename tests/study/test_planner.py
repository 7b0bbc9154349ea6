"""`specsim plan` (study/planner/): the search against brute force, reproduction by plain runs,
resume, bad inputs, bisection brackets (min GPUs against brute force over GPU counts, break-even τ
and where SD stops paying against plain points either side), prices, and the bounds below
simulated step times."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.scenario import apply_overrides, load_scenario
from specsim.study.executors import execute
from specsim.study.planner import plan_scenario
from specsim.study.planner.bounds import BoundModel
from specsim.study.planner.candidates import candidate_scenario, configurations, enumerate_candidates
from specsim.study.planner.inverse import bisect_float, bisect_int, tau_overrides
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


_BRUTE: dict = {}


def _brute(tiny, reps: int) -> dict:
    """Every candidate of the tiny plan as plain runs: cid -> (arm, mean step, candidate) (cached)."""
    if (str(tiny), reps) not in _BRUTE:
        _BRUTE[(str(tiny), reps)] = _brute_runs(tiny, reps)
    return _BRUTE[(str(tiny), reps)]


def brute_fronts(means: dict) -> dict[str, list[str]]:
    """Per arm, the candidate ids on the Pareto front of (GPUs × mean step, mean step), from plain runs."""
    out = {}
    for arm in ("ar", "sd"):
        pts = sorted((v[2].total_gpus * v[1], v[1], cid) for cid, v in means.items() if v[0] == arm)
        front, best = [], math.inf
        for _, step, cid in pts:
            if step < best:
                front.append(cid)
                best = step
        out[arm] = front
    return out


def _brute_runs(tiny, reps: int) -> dict:
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
    res, out = planned
    assert any("2 replicates (Student t = 12.7)" in w for w in res.warnings)       # few replicates: said
    assert "2 replicates (Student t = 12.7)" in (out / "report.html").read_text(encoding="utf-8")
    brute = _brute(tiny, 2)
    assert len(brute) == 24
    for arm in ("ar", "sd"):
        best = min((v for v in brute.values() if v[0] == arm), key=lambda v: v[1])
        got = res.answer[f"best_{arm}"]
        assert got is not None
        assert got["candidate"] == best[2].cid, (arm, got["label"], best[2].label())
        assert got["step_s"]["mean"] == pytest.approx(best[1], rel=1e-12)


def test_fronts_are_the_brute_force_fronts(tiny, planned):
    """The plan's Pareto fronts (GPU-hours per step vs step time) are the fronts of every
    candidate run plainly at the plan's replicates: pruning and halving keep every candidate that
    could be on the front, and every front point is a mean over the same (full) replicates, with
    its intervals and the points its step interval overlaps."""
    res, _ = planned
    brute = brute_fronts(_brute(tiny, 2))
    for arm in ("ar", "sd"):
        got = res.summary["fronts"][arm]
        assert [p["candidate"] for p in got] == brute[arm], arm
        for p in got:
            assert p["replicates"] == 2 and p["step_s_ci"]["n"] == 2 and p["step_s_ci"]["ci95"] is not None
            assert p["step_s"] == pytest.approx(_brute(tiny, 2)[p["candidate"]][1], rel=1e-12)
            assert all(c in {q["candidate"] for q in got} for c in p["overlaps"])


def test_the_best_is_compared_with_the_scenarios_own_and_the_half_split(planned):
    res, out = planned
    against = {b["baseline"]: b for b in res.summary["against"]}
    assert set(against) == {"scenario", "half"}
    for b in against.values():
        assert b["is_best"] or (b["step_ratio"]["ci95"] is not None and b["step_ratio"]["n"] == 2)
    md = (out / "summary.md").read_text()
    assert "against the scenario's own configuration" in md and "against the half-and-half split" in md


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
    assert g["scale"] == "log" and 0 < g["ci95"][0] <= g["ci95"][1]        # a ratio: a positive, log-scale interval


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
    assert s["cpu_s"] > 0 and s["cpu_s_per_computed_run"] == s["cpu_s"] / s["computed_runs"]   # where its CPU went
    for f in ("candidates.csv", "summary.json", "summary.md", "plan.yaml", "resolved.yaml"):
        assert (out / f).is_file()
    assert "SD's gain at each one's own optimum" in (out / "summary.md").read_text()


runner = CliRunner()


@pytest.mark.parametrize("sets, needle", [
    (["plan.total_gpus=1"], "plan.total_gpus"),                       # no room for an engine and a trainer replica
    (["plan.layouts=[{tp: 3}]"], "plan.layouts"),                     # tp 3 does not divide the 16 heads
    (["rollout.gpu_memory_utilization=0.05"], "plan.layouts"),        # no layout fits the memory plan
    (["plan.objective=min_gpus"], "plan.target_step_s"),              # objective needs a target
    (["plan.rollout_shares=[1.5]"], "plan.rollout_shares"),
    (["output.gpu_hour_usd={h100_sxm: -2}"], "output.gpu_hour_usd.h100_sxm"),
    (["output.gpu_hour_usd={h100_sxm: .nan}"], "output.gpu_hour_usd.h100_sxm"),
    (["output.gpu_hour_usd={h1000: 2}"], "output.gpu_hour_usd.h1000"),   # no such hardware profile
    (["plan.gpu_hour_usd={h100_sxm: 2}"], "plan.gpu_hour_usd"),       # the price is output.gpu_hour_usd
    (["plan.sd_policies=[always, schedule]"], "plan.sd_policies"),     # schedule needs the table it searches
])
def test_bad_plan_inputs_exit_2(tiny, tmp_path, sets, needle):
    args = ["plan", str(tiny), "--out", str(tmp_path / "o")]
    for s in sets:
        args += ["--set", s]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output
    if "memory" in sets[0]:
        assert "KV cache" in r.output or "usable per GPU" in r.output   # the memory plan's reason


def test_min_gpus_for_an_unreachable_target_exits_2(tiny, planned):
    """A step time no GPU count reaches (below every configuration's latency floor: the bounds
    prune every probe, nothing is simulated) is an error naming the option, after the plan."""
    _, out = planned
    for value in ("0.01", "-1"):
        r = runner.invoke(app, ["plan", str(tiny), "--out", str(out), f"--min-gpus-for={value}"])
        assert r.exit_code == 2, r.output
        assert "--min-gpus-for" in r.output and "Traceback" not in r.output
    assert "no GPU count up to" in r.output or "> 0 s" in r.output


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


@pytest.mark.long
def test_min_gpus_for_is_the_brute_force_answer(tiny, planned):
    """Each probe re-optimises split and layout (k and lag held): the bisection's answer is the
    smallest GPU count whose brute-force best (every allowed layout × split at that count, all
    replicates) reaches the target, and its configuration is that count's brute-force best."""
    res, out = planned
    sc = load_scenario(tiny)
    best = res.answer["best_sd"]
    arm, lag = [(best["sd_policy"], best["k"])], [best["policy_lag"]]
    brute = {}
    for n in range(1, 9):
        means = []
        for c in configurations(sc, sc.plan, "h100_sxm", [(1, 1, 1), (2, 1, 1)], n, arm, lag):
            rs = [execute(RunTask.of(candidate_scenario(sc, c), r, "plan")) for r in range(2)]
            means.append((sum(r["steady"]["step_s"] for r in rs) / 2, c.cid))
        brute[n] = min(means, default=(math.inf, None))
    n_star = max(range(4, 8), key=lambda n: brute[n - 1][0] - brute[n][0])
    target = (brute[n_star - 1][0] + brute[n_star][0]) / 2
    # the case is monotone in the GPU count about the target (the bisection's assumption)
    assert all(brute[m][0] > target for m in range(1, n_star))
    assert all(brute[m][0] <= target for m in range(n_star, 9))
    again = plan_scenario(tiny, out=out, jobs=1, min_gpus_for=target)
    (q,) = [q for q in again.summary["queries"] if q["arm"] == "sd"]
    assert q["unit_gpus"] == 1 and q["bracket_gpus"] == [n_star - 1, n_star], q["text"]
    assert q["candidate"] == brute[n_star][1]
    assert q["step_s_at_answer"]["mean"] == pytest.approx(brute[n_star][0], rel=1e-12)
    assert q["gpus"] <= n_star and q["monotone"]
    rerun = plan_scenario(tiny, out=out, jobs=1, min_gpus_for=target)
    assert rerun.search["inverse_computed_runs"] == 0 and rerun.summary["queries"] == again.summary["queries"]


def _plain_mean(tiny, ov: dict, reps: int = 2) -> float:
    """The mean steady step of a plain point (the scenario with `ov`, as `specsim run` runs it),
    simulated afresh (not read from the plan's runs/)."""
    s = apply_overrides(load_scenario(tiny), ov)
    return sum(execute(RunTask.of(s, r, "point"))["steady"]["step_s"] for r in range(reps)) / reps


@pytest.fixture(scope="module")
def inverse_runs(tiny, planned):
    _, out = planned
    first = plan_scenario(tiny, out=out, jobs=1, break_even_tau=True, stops_paying=True)
    again = plan_scenario(tiny, out=out, jobs=1, break_even_tau=True, stops_paying=True)
    return first, again


def _query(res, name: str) -> dict:
    (q,) = [q for q in res.summary["queries"] if q["query"] == name]
    return q


def test_break_even_tau_brackets_sd_against_ar(tiny, inverse_runs):
    first, _ = inverse_runs
    q = _query(first, "break_even_tau")
    lo, hi = q["bracket"]
    assert 1 < lo < hi <= lo + 0.05, q["text"]
    base = first.answer["best_sd"]["overrides"]
    sc = load_scenario(tiny)
    ar = _plain_mean(tiny, {**base, "speculation.policy": "off"})
    assert ar == pytest.approx(q["goal_step_s"], rel=1e-12)
    assert _plain_mean(tiny, {**base, **tau_overrides(sc, lo)}) > ar     # just below: SD slower than AR
    assert _plain_mean(tiny, {**base, **tau_overrides(sc, hi)}) <= ar    # at the answer: SD no slower


def test_stops_paying_brackets_k_and_lag(tiny, inverse_runs):
    first, _ = inverse_runs
    base = first.answer["best_sd"]["overrides"]
    ar = _plain_mean(tiny, {**base, "speculation.policy": "off"})
    q = _query(first, "k_stops_paying")
    lo, hi = q["bracket"]
    assert hi == lo + 1 and lo > base["speculation.k"], q["text"]
    assert _plain_mean(tiny, {**base, "speculation.k": hi}) >= ar        # SD no faster than AR from here
    assert _plain_mean(tiny, {**base, "speculation.k": lo}) < ar         # one below: SD still pays
    lag = _query(first, "lag_stops_paying")
    if lag["lag"] is None:                                              # still pays at the largest lag tried
        at = {**base, "pipeline.policy_lag": 16}
        assert _plain_mean(tiny, {**at, "speculation.policy": "off"}) / _plain_mean(tiny, at) >= 1.01
    else:
        lo, hi = lag["bracket"]
        at = {**base, "pipeline.policy_lag": hi}
        assert _plain_mean(tiny, {**at, "speculation.policy": "off"}) / _plain_mean(tiny, at) < 1.01


def test_inverse_reruns_reuse_every_probe(inverse_runs):
    first, again = inverse_runs
    s1, s2 = first.search, again.search
    assert s2["inverse_computed_runs"] == 0 and s2["computed_runs"] == 0
    assert s2["inverse_reused_runs"] == s1["inverse_computed_runs"] + s1["inverse_reused_runs"] > 0
    assert again.summary["queries"] == first.summary["queries"]


def test_prices_read_output_gpu_hour_usd_and_reuse_the_runs(tiny, planned):
    """A price (output.gpu_hour_usd) changes no run: the plan's folder takes it and reuses every
    run; each $ figure is GPU-hours × the price, the fronts' points too."""
    res, out = planned
    priced = plan_scenario(tiny, ["output.gpu_hour_usd={h100_sxm: 2.5}"], out=out, jobs=1)
    assert priced.search["computed_runs"] == 0
    b = priced.answer["best_sd"]
    assert b["usd_per_step"]["mean"] == b["gpu_hours_per_step"]["mean"] * 2.5
    assert b["usd_per_step"]["ci95"] == [v * 2.5 for v in b["gpu_hours_per_step"]["ci95"]]
    assert [p["usd_per_step"] for p in priced.summary["fronts"]["sd"]] == \
        [p["gpu_hours_per_step"] * 2.5 for p in priced.summary["fronts"]["sd"]]
    df = priced.candidates()
    sim = df[df.status == "simulated"]
    assert (sim.usd_per_step == sim.gpu_hours_per_step * 2.5).all()
    assert "usd_per_step" not in res.answer["best_sd"]                  # the unpriced plan: no $
    assert all("usd_per_step" not in p for p in res.summary["fronts"]["sd"])


def test_min_usd_answers_which_gpu_type_in_its_first_lines(tiny, planned, tmp_path):
    """--objective min_usd over two GPU types with prices: the best of each type (with $ and GPU-hours,
    per step and per run) and the cheaper type lead the summary; a $/hour budget leaves out what it
    cannot pay for before any run."""
    prices = "output.gpu_hour_usd={h100_sxm: 2.5, h200_sxm: 3.5}"
    res = plan_scenario(tiny, [prices, 'plan.hardware=["h100_sxm", "h200_sxm"]', "plan.objective=min_usd",
                               "plan.run_steps=500", "plan.max_usd_per_hour=27", "plan.total_gpus=[6, 8]",
                               "plan.max_policy_lag=0", "plan.layouts=[{tp: 2}]"], out=tmp_path / "usd", jobs=1)
    a = res.answer
    per_hw = {r["hardware"]: r for r in a["best_per_hardware"]}
    assert set(per_hw) == {"h100_sxm", "h200_sxm"}
    for hw, r in per_hw.items():
        b = r["best"]
        assert b["hardware"] == hw and b["usd_per_hour"] <= 27
        assert b["usd_per_run"]["mean"] == pytest.approx(b["usd_per_step"]["mean"] * 500, rel=1e-12)
        assert b["gpu_hours_per_run"]["mean"] == pytest.approx(b["gpu_hours_per_step"]["mean"] * 500, rel=1e-12)
    costs = {hw: r["best"]["usd_per_step"]["mean"] for hw, r in per_hw.items()}
    assert a["hardware_choice"]["hardware"] == min(costs, key=costs.get)
    df = res.candidates()
    over = df[df.pruned_by == "usd_budget"]
    assert len(over) > 0 and (over.status == "pruned").all() and (over.replicates_run == 0).all()
    assert (over.hardware == "h200_sxm").all() and (over.total_gpus == 8).all()   # 8 H200 cost $28/h, 6 $21/h
    first = (tmp_path / "usd" / "summary.md").read_text().split("## Answer")[1].strip().splitlines()[0]
    assert first.startswith("- **GPU type: " + a["hardware_choice"]["hardware"])


def test_min_usd_needs_a_price_for_every_gpu_type(tiny, tmp_path):
    r = runner.invoke(app, ["plan", str(tiny), "--out", str(tmp_path / "o"), "--objective", "min_usd",
                            "--hardware", "h100_sxm,h200_sxm", "--set", "output.gpu_hour_usd={h100_sxm: 2.5}"])
    assert r.exit_code == 2 and "output.gpu_hour_usd" in r.output and "h200_sxm" in r.output, r.output
    assert "Traceback" not in r.output


def test_a_plan_nothing_of_which_runs_exits_2_naming_the_constraint(tiny, tmp_path):
    """Every candidate left out (here by a $/hour budget no candidate meets) -> exit 2 naming the
    constraint, after the plan's files are written."""
    r = runner.invoke(app, ["plan", str(tiny), "--out", str(tmp_path / "o"), "--set", "plan.max_usd_per_hour=1",
                            "--set", "output.gpu_hour_usd={h100_sxm: 2.5}"])
    assert r.exit_code == 2 and "plan.max_usd_per_hour" in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "o" / "candidates.csv").is_file()


def test_report_page_folds_the_candidates_table(planned):
    from specsim.study.planner import REASON_CHARS, page_table

    res, out = planned
    t = page_table(res.candidates())
    assert "overrides" not in t.columns and len(t) == 24
    assert t.reason.str.len().max() <= REASON_CHARS
    assert t.configuration.str.len().max() < 40
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "&#34;rollout.gpus&#34;" not in html and '"rollout.gpus"' not in html


def test_bound_model_prices_trainer_and_latency(tiny):
    sc = load_scenario(tiny)
    cands, _ = enumerate_candidates(sc, sc.plan)
    bm = BoundModel(sc)
    b = bm.bound(cands[0])
    assert b.trainer_s > 0 and b.throughput_s > 0 and b.latency_s > 0
    assert b.binding in ("trainer", "throughput", "latency")


def test_progress_display_counts_the_plan_runs_and_changes_nothing(planned, tiny, tmp_path, monkeypatch):
    """With the display on, the search and the inverse probes announce every run they simulate and
    mark each done (the display's runs row ends full), and the answer is the plain plan's."""
    from specsim.study.report import progress as progress_mod

    seen = {"added": 0, "done": 0}
    real_add, real_done = progress_mod.Progress.add_runs, progress_mod.Progress.runs_done

    def add(self, n):
        seen["added"] += n
        real_add(self, n)

    def done(self):
        seen["done"] += 1
        real_done(self)

    monkeypatch.setattr(progress_mod.Progress, "add_runs", add)
    monkeypatch.setattr(progress_mod.Progress, "runs_done", done)
    res = plan_scenario(tiny, out=tmp_path / "res", jobs=1, progress=True, break_even_tau=True)
    assert seen["added"] == seen["done"] == res.search["computed_runs"] > 0
    ref, _ = planned
    for arm in ("best_ar", "best_sd"):
        assert res.answer[arm]["candidate"] == ref.answer[arm]["candidate"]
        assert res.answer[arm]["step_s"] == ref.answer[arm]["step_s"]


def test_the_plan_searches_a_schedule_arm(tiny):
    """`plan.sd_policies: [schedule]` makes one SD arm per k of the plan, drafting by the scenario's
    vLLM table clamped to that k; each candidate resolves to the schedule policy as `run` would."""
    from specsim.policy import Schedule
    from specsim.world.resolve import resolve

    sc = load_scenario(tiny, ["speculation.k_per_batch_size={1-4: 3, 5-16: 1}", "plan.sd_policies=[schedule]"])
    cands, _ = enumerate_candidates(sc, sc.plan)
    sd = [c for c in cands if c.policy != "off"]
    assert sd and {c.policy for c in sd} == {"schedule"}
    pol = resolve(candidate_scenario(sc, sd[0])).policy
    assert isinstance(pol, Schedule) and pol.ks == (0, 1, 3)


def test_runs_stopped_once_they_cannot_win_change_no_answer(tiny, planned, tmp_path, monkeypatch):
    """With no noise margin (step_noise_s = 0: every run's threshold is a simulated point's mean,
    scaled by GPUs), later waves' runs stop once their steps and the trainer's floor for the rest
    prove their steady mean above it: every stopped candidate's full run (brute force, replicate 0)
    is indeed above its threshold, the best AR and SD and the fronts are the brute-force ones, and
    a rerun reuses the stopped runs (nothing simulated)."""
    import importlib

    search_mod = importlib.import_module("specsim.study.planner.search")
    monkeypatch.setattr(search_mod, "step_noise_s", lambda d, confidence=0.999: 0.0)
    out = tmp_path / "stopped"
    res = plan_scenario(tiny, out=out, jobs=1)
    s = res.search
    assert s["stopped_runs"] == s["pruned_by"].get("stopped", 0) > 0
    brute1, brute2 = _brute(tiny, 1), _brute(tiny, 2)
    df = res.candidates()
    for row in df[df.pruned_by == "stopped"].itertuples():
        floor, limit = (float(x) for x in re.findall(r"at least ([\d.]+) s .*> ([\d.]+) s", row.reason)[0])
        assert floor >= limit and brute1[row.candidate][1] > limit - 0.05     # the reason rounds to 0.1 s
    for arm in ("ar", "sd"):
        assert res.answer[f"best_{arm}"]["candidate"] == planned[0].answer[f"best_{arm}"]["candidate"]
        assert [p["candidate"] for p in res.summary["fronts"][arm]] == brute_fronts(brute2)[arm]
    again = plan_scenario(tiny, out=out, jobs=1)      # (a stopped run the baselines ran in full is read in full)
    assert again.search["computed_runs"] == 0 and 0 < again.search["stopped_runs"] <= s["stopped_runs"]
    assert all(again.answer[f"best_{a}"]["candidate"] == res.answer[f"best_{a}"]["candidate"] for a in ("ar", "sd"))
