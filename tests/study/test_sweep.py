"""Sweep expansion, run keys, rows, resume, determinism (jobs=1 vs jobs=2) and the Ray backend.

The simulated scenario is a shrunken 30b_a3b_h100_async.yaml (8 rollout + 16 training H100s, 16
prompts × 4, 3 RL steps, k ∈ {0, 3} × policy lag ∈ {0, 1} × 2 replicates): a full run takes about
a second in one process.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from small_sweep import ROOT, SCEN, SMALL

from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.study.executors import execute
from specsim.study.runner import ResultsConflict, run_scenario, show_scenario
from specsim.study.sweep import (
    RunTask,
    combinations,
    expand,
    point_id,
    point_row,
    row_columns,
    run_key,
    swept_paths,
    sync_ar_of,
)


def small_sc(extra=()):
    return load_scenario(SCEN, SMALL + list(extra))


# ============================================================================ expansion
def test_expand_cartesian_order_and_replicates():
    sc = small_sc()
    pts = expand(sc)
    assert len(pts) == 8
    assert [p.values for p in pts[::2]] == [
        {"speculation.k": 0, "pipeline.policy_lag": 0}, {"speculation.k": 0, "pipeline.policy_lag": 1},
        {"speculation.k": 3, "pipeline.policy_lag": 0}, {"speculation.k": 3, "pipeline.policy_lag": 1}]
    assert [p.replicate for p in pts] == [0, 1] * 4
    assert [p.index for p in pts] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({p.point_id for p in pts}) == 8


def test_point_id_stable_and_order_independent():
    a = point_id({"speculation.k": 3, "pipeline.policy_lag": 1}, 0)
    b = point_id({"pipeline.policy_lag": 1, "speculation.k": 3}, 0)
    assert a == b and len(a) == 12
    assert a != point_id({"speculation.k": 3, "pipeline.policy_lag": 1}, 1)
    assert point_id({"speculation.k": 3}, 0) == "fd1306acfdc9"   # frozen: result folders depend on it


def test_zip_groups_vary_together():
    sc = load_scenario(ROOT / "scenarios" / "efficient_rollout_a100.yaml")
    combos = combinations(sc)
    assert combos == [{"speculation.policy": p, "speculation.k": k} for p, k in
                      [("always", 7), ("toggle", 7), ("toggle", 5), ("threshold", 5), ("adaptive", 5)]]
    sc2 = apply_overrides(sc, {"sweep": {"speculation.policy": ["always", "threshold"], "speculation.max_batch": [8, 16],
                                         "speculation.k": [2, 4], "zip": [["speculation.policy", "speculation.max_batch"]]}})
    combos2 = combinations(sc2)
    assert len(combos2) == 4
    assert {(c["speculation.policy"], c["speculation.max_batch"]) for c in combos2} == {("always", 8), ("threshold", 16)}


def test_zip_errors_name_the_field():
    """Refused when the scenario is validated (so `check` refuses them too), naming sweep.zip."""
    sc = load_scenario(ROOT / "scenarios" / "efficient_rollout_a100.yaml")
    with pytest.raises(ScenarioError, match="sweep.zip.*one length"):
        apply_overrides(sc, {"sweep": {"speculation.policy": ["always", "threshold"], "speculation.max_batch": [8],
                                       "zip": [["speculation.policy", "speculation.max_batch"]]}})
    with pytest.raises(ScenarioError, match="sweep.zip.*not swept"):
        apply_overrides(sc, {"sweep": {"speculation.k": [1, 2], "zip": [["speculation.k", "rollout.gpus"]]}})


def test_no_sweep_is_one_point():
    sc = load_scenario(SCEN, ["sweep={}"])
    pts = expand(sc)
    assert len(pts) == 1 and pts[0].values == {} and pts[0].replicate == 0


def test_bad_swept_path_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="speculation.kk"):
        show_scenario(SCEN, ["sweep={speculation.kk: [1, 2]}"])


# ============================================================================ run keys and baselines
def test_run_key_normalises_what_cannot_matter():
    sc = small_sc()
    off = apply_overrides(sc, {"speculation.policy": "off", "speculation.k": 5})
    k0 = apply_overrides(sc, {"speculation.k": 0})
    assert run_key(off, 0) == run_key(k0, 0)                       # AR is AR
    assert run_key(off, 0) != run_key(off, 1)                      # replicates differ
    assert run_key(sc, 0) == run_key(apply_overrides(sc, {"name": "x", "description": "y"}), 0)
    sync = apply_overrides(sc, {"pipeline.mode": "sync", "training.gpus": None})
    assert run_key(sync, 0) == run_key(apply_overrides(sync, {"pipeline.policy_lag": 4}), 0)
    assert run_key(sc, 0) != run_key(apply_overrides(sc, {"pipeline.policy_lag": 4}), 0)   # async: lag matters


def test_sync_ar_of_async_point_uses_all_gpus():
    sc = small_sc()
    s = sync_ar_of(sc)
    assert s.pipeline.mode == "sync" and s.speculation.policy == "off"
    assert s.rollout.gpus == sc.total_gpus == 24 and s.training.gpus is None
    sync_sc = load_scenario(ROOT / "scenarios" / "7b_h100_sync.yaml")
    assert sync_ar_of(sync_sc).model_dump() == apply_overrides(sync_sc, {"speculation.policy": "off"}).model_dump()


def test_row_columns_and_speedups():
    sc = small_sc(["sweep={speculation.k: [3]}"])
    p = expand(sc)[0]
    psc = apply_overrides(sc, p.values)
    run = execute(RunTask.of(psc, 0, "point"))
    base = execute(RunTask.of(apply_overrides(psc, {"speculation.policy": "off"}), 0, "baseline"))
    row = point_row(p, psc, run, base, None)
    assert list(row) == [c for c in row_columns(swept_paths(sc)) if c in row]
    assert row["speculation.k"] == 3 and row["k"] == 3 and row["replicate"] == 0 and row["seed"] == 0
    assert row["e2e_speedup"] == pytest.approx(base["steady"]["step_s"] / run["steady"]["step_s"])
    assert row["generation_speedup"] == pytest.approx(base["steady"]["gen_window_s"] / run["steady"]["gen_window_s"])
    assert row["gpu_hours_per_step"] == pytest.approx(24 * row["step_s"] / 3600)
    assert pd.isna(row["e2e_speedup_vs_sync_ar"])
    for col in ("reward_s", "logprob_s", "train_s", "weight_sync_s", "drafter_update_s", "exposed_generation_s",
                "tau", "mean_active_batch", "tokens_per_s_per_gpu"):
        assert col in row


# ============================================================================ full runs: resume, determinism
@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "res"
    res = run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    return res, out


def test_results_folder_contents(full_run):
    _, out = full_run
    for f in ("points.csv", "steps.csv", "runs.csv", "summary.json", "summary.md", "resolved.yaml"):
        assert (out / f).is_file(), f
    df = pd.read_csv(out / "points.csv")
    assert len(df) == 8 and df["point_id"].is_unique
    assert list(df["point"]) == sorted(df["point"])
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == 8 * 4 and set(steps["point_id"]) == set(df["point_id"])   # pipeline.steps=4
    assert len(list((out / "points").glob("*.json"))) == 8
    # the sync AR baseline is computed once per replicate, not per point
    runs = pd.read_csv(out / "runs.csv")
    assert (runs["role"] == "sync_ar").sum() == 2
    # k=0 rows: their own baseline (async AR at the same lag) -> speedup exactly 1
    assert (df[df["k"] == 0]["e2e_speedup"] == 1.0).all()
    s = json.loads((out / "summary.json").read_text())
    assert s["replicates"] == 2 and s["best"]["e2e_speedup_vs_sync_ar"]["ci95"] is not None
    assert s["specsim_version"]


def test_resume_after_interruption_gives_same_rows(full_run, tmp_path, monkeypatch):
    _, ref_out = full_run
    out = tmp_path / "res"
    import specsim.study.executors as sw

    real = sw.execute
    calls = {"n": 0}

    def dying(task):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt("simulated interruption")
        return real(task)

    monkeypatch.setattr(sw, "execute", dying)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    monkeypatch.setattr(sw, "execute", real)
    partial = pd.read_csv(out / "points.csv")
    assert 0 < len(partial) < 8
    assert not list(out.rglob("*.tmp"))
    res = run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    ref_res, _ = full_run
    assert res.reused_runs == 4                     # the 4 runs finished before the interruption
    assert res.computed_runs == ref_res.computed_runs - 4
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()
    assert (out / "steps.csv").read_bytes() == (ref_out / "steps.csv").read_bytes()
    # a third run simulates nothing and changes nothing
    again = run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    assert again.computed_runs == 0
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()


#: SMALL with a sync-AR baseline of its own: the AR points are no SD point's baseline, so the SD
#: points finish before them and the capacity plan can be queued then
EARLY_CAPACITY = SMALL + [('pipeline.baseline={pipeline.mode: sync, speculation.policy: "off", training.gpus: null, '
                           'rollout.gpus: 24}')]
_FILES = ("points.csv", "steps.csv", "runs.csv", "summary.md")


def test_the_capacity_plan_is_queued_once_the_sd_points_are_in(tmp_path, monkeypatch):
    """The capacity plan's reference is the best SD point, so its runs are queued as soon as the SD
    points are in: the baselines, then the SD points, then (the plan made) the AR points, then the
    capacity runs; the folder is byte for byte that of a run that plans after the whole sweep."""
    import specsim.study.executors as ex
    import specsim.study.runner as rn

    real_execute, real_plan = ex.execute, rn.capacity_plan
    ran: list[tuple[str, int]] = []
    planned_after: list[int] = []

    def execute(task, **kw):
        ran.append((task.role, task.doc["speculation"]["k"] if task.doc["speculation"]["policy"] != "off" else 0))
        return real_execute(task, **kw)

    def plan(*args):
        planned_after.append(len(ran))
        return real_plan(*args)

    monkeypatch.setattr(ex, "execute", execute)
    monkeypatch.setattr(rn, "capacity_plan", plan)
    early = run_scenario(SCEN, EARLY_CAPACITY, out=tmp_path / "early", jobs=1, progress=False, plots=False)
    assert planned_after[0] == 6                  # 2 baselines and the 4 SD point runs were in
    assert ran[:6] == [("baseline", 0)] * 2 + [("point", 3)] * 4
    assert ran[6:10] == [("point", 0)] * 4 and {r for r, _ in ran[10:]} == {"capacity"}
    monkeypatch.setattr(rn._CapacityPlan, "ready", lambda self: [])
    late = run_scenario(SCEN, EARLY_CAPACITY, out=tmp_path / "late", jobs=1, progress=False, plots=False)
    assert early.computed_runs == late.computed_runs
    for f in _FILES:
        assert (tmp_path / "early" / f).read_bytes() == (tmp_path / "late" / f).read_bytes(), f


def test_a_capacity_plan_queued_on_the_wrong_reference_is_made_again(tmp_path, monkeypatch):
    """Runs queued for a reference the whole sweep does not confirm are not used: the plan from the
    whole sweep runs its own, and the folder is that of a run that never queued early."""
    import specsim.study.runner as rn

    def wrong(self):                              # the AR point 0 as the reference
        if self.queued:
            return []
        self.queued = True
        return list(rn.capacity_plan(self.ctx.sc, self.ctx.plan, {"best_sd": None, "best": {"point": 0}},
                                     self.ctx.opts.engine)["tasks"].values())

    monkeypatch.setattr(rn._CapacityPlan, "ready", wrong)
    res = run_scenario(SCEN, EARLY_CAPACITY, out=tmp_path / "wrong", jobs=1, progress=False, plots=False)
    monkeypatch.setattr(rn._CapacityPlan, "ready", lambda self: [])
    ref = run_scenario(SCEN, EARLY_CAPACITY, out=tmp_path / "ref", jobs=1, progress=False, plots=False)
    assert res.computed_runs > ref.computed_runs
    for f in _FILES:
        assert (tmp_path / "wrong" / f).read_bytes() == (tmp_path / "ref" / f).read_bytes(), f


def test_resume_after_deleted_points(full_run, tmp_path):
    _, ref_out = full_run
    out = tmp_path / "res"
    shutil.copytree(ref_out, out)
    for i, f in enumerate(sorted((out / "points").glob("*.json"))):
        if i % 2:
            f.unlink()
    for i, f in enumerate(sorted((out / "runs").glob("*.json"))):
        if i % 3 == 0:
            f.unlink()
    (out / "points.csv").unlink()
    run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    df = pd.read_csv(out / "points.csv")
    assert df["point_id"].is_unique and len(df) == 8
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()


def test_changed_scenario_into_existing_folder_is_refused(full_run, tmp_path):
    _, ref_out = full_run
    out = tmp_path / "res"
    shutil.copytree(ref_out, out)
    with pytest.raises(ResultsConflict, match="--force"):
        run_scenario(SCEN, SMALL + ["workload.prompts=8"], out=out, jobs=1, progress=False, plots=False)
    res = run_scenario(SCEN, SMALL + ["workload.prompts=8"], out=out, jobs=1, progress=False, plots=False, force=True)
    assert res.reused_runs == 0 and len(pd.read_csv(out / "points.csv")) == 8


def test_deterministic_across_runs_and_jobs(full_run, tmp_path):
    _, ref_out = full_run
    out2 = tmp_path / "jobs2"
    run_scenario(SCEN, SMALL, out=out2, jobs=2, progress=False, plots=False)
    assert (out2 / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()
    assert (out2 / "steps.csv").read_bytes() == (ref_out / "steps.csv").read_bytes()


@pytest.mark.long
def test_ray_backend_matches_local(full_run, tmp_path):
    pytest.importorskip("ray")
    _, ref_out = full_run
    out = tmp_path / "ray"
    run_scenario(SCEN, SMALL, out=out, jobs=2, backend="ray", progress=False, plots=False)
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()


def test_ray_missing_is_a_clear_error(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("no ray")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from specsim.errors import SpecError

    with pytest.raises(SpecError, match=r"specsim\[ray\]"):
        run_scenario(SCEN, SMALL, out=tmp_path / "x", backend="ray", progress=False, plots=False)
    assert not (tmp_path / "x").exists()


def test_mean_ci_is_a_t_interval_intersected_with_the_metric_domain():
    """Two replicates of a positive metric: t(0.975, 1) = 12.7 would put the lower bound below
    zero; the interval is cut at 0 (coverage kept), the upper bound and the mean are untouched."""
    from scipy import stats

    from specsim.study.report.tables import mean_ci

    m = mean_ci([0.8, 1.25])
    half = stats.t.ppf(0.975, 1) * np.std([0.8, 1.25], ddof=1) / np.sqrt(2)
    assert m["mean"] == pytest.approx(1.025) and m["ci95"][1] == pytest.approx(1.025 + half)
    assert m["ci95"][0] == 0.0
    raw = mean_ci([0.8, 1.25], floor=None)
    assert raw["ci95"][0] == pytest.approx(1.025 - half) and raw["ci95"][0] < 0
    tight = mean_ci([2.0, 2.01, 1.99])  # a narrow interval far from 0 is the plain t-interval
    assert tight["ci95"][0] == pytest.approx(2.0 - stats.t.ppf(0.975, 2) * 0.01 / np.sqrt(3))
    assert mean_ci([])["ci95"] is None and mean_ci([3.0])["ci95"] is None


def test_folder_of_an_older_version_resumes_and_recomputes_what_it_lacks(full_run, tmp_path):
    """A results folder written before the schema gained a field (its resolved.yaml lacks
    `output.explain`) and before runs recorded a steady figure (`step_setter_tau`) is the same
    scenario: the rerun is not refused, the runs without the figure and every point resting on
    them are recomputed, and the result equals a fresh run's byte for byte."""
    import yaml

    _, ref_out = full_run
    out = tmp_path / "res"
    shutil.copytree(ref_out, out)
    doc = yaml.safe_load((out / "resolved.yaml").read_text())
    del doc["output"]["explain"]
    (out / "resolved.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    stripped = 0
    for i, f in enumerate(sorted((out / "runs").glob("*.json"))):
        if i % 2 == 0:
            run = json.loads(f.read_text())
            del run["steady"]["step_setter_tau"]
            f.write_text(json.dumps(run))
            stripped += 1
    res = run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False, plots=False)
    assert res.computed_runs == stripped
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()


def test_a_price_or_the_explain_block_is_the_same_scenario(full_run, tmp_path):
    """A rerun that only prices the GPUs or asks for another explain block reuses every run (a
    summary-only change); any other output change is still another scenario."""
    _, ref_out = full_run
    out = tmp_path / "res"
    shutil.copytree(ref_out, out)
    res = run_scenario(SCEN, SMALL + ["output.gpu_hour_usd={h100_sxm: 3.5}"], out=out, jobs=1, progress=False,
                       plots=False)
    assert res.computed_runs == 0
    assert (out / "points.csv").read_bytes() == (ref_out / "points.csv").read_bytes()
    with pytest.raises(ResultsConflict, match="--force"):
        run_scenario(SCEN, SMALL + ["output.max_simulated_tokens=1e10"], out=out, jobs=1, progress=False, plots=False)
