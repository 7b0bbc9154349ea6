"""RL pipeline on the simpy clock (specsim/sim/pipeline.py): sync, async with policy lag, staleness."""

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.sim.pipeline import RunStopped, StepRecord, run_pipeline
from specsim.study.comparison import baseline_scenario, compare
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "8b_rl_think_sync.yaml"

SMALL = {"workload.prompts": 32, "rollout.gpus": 4, "pipeline.steps": 4, "pipeline.warmup_steps": 1}


@pytest.fixture(scope="module")
def small():
    return apply_overrides(load_scenario(SCEN), SMALL)


def _async(sc, **over):
    base = {"pipeline.mode": "async", "training.gpus": 4, "pipeline.policy_lag": 1}
    base.update(over)
    return apply_overrides(sc, base)


def _run(sc, **kw):
    return run_pipeline(resolve(sc), **kw)


# ----------------------------------------------------------------------------- sync
def test_sync_step_is_the_sum_of_its_stages(small):
    res = _run(small)
    assert res.mode == "sync" and len(res.records) == 4 and len(res.generations) == 4
    prev = 0.0
    for r in res.records:
        stages = (r.data_s + r.generation_s + r.reward_s + r.logprob_s + r.train_s + r.weight_sync_s
                  + r.drafter_update_s)
        assert r.step_s == pytest.approx(stages, abs=1e-9)
        assert r.data_s == small.pipeline.data_s > 0
        assert r.gen_start_s == pytest.approx(prev + r.data_s, abs=1e-9)  # strictly sequential: load, then generate
        assert r.train_start_s == pytest.approx(r.gen_end_s, abs=1e-9)
        assert r.exposed_generation_s == r.generation_s
        assert r.policy_version == r.step
        assert min(r.logprob_s, r.train_s, r.weight_sync_s) > 0 and r.reward_s == small.pipeline.reward_s
        prev = r.step_end_s
    assert res.total_s == pytest.approx(sum(r.step_s for r in res.records), rel=1e-12)
    df = res.steps_frame()
    assert list(df.columns) == list(StepRecord.__dataclass_fields__) and len(df) == 4
    st = res.steady()
    assert st["step_s"] == pytest.approx(df["step_s"].iloc[1:].mean())
    assert st["throughput_steps_per_h"] == pytest.approx(3600 / st["step_s"])


def test_data_loading_is_on_the_sync_critical_path_and_prefetched_async(small):
    """pipeline.data_s: a sync step waits for its prompt batch every step; async, the loader
    prefetches, so only the first batch delays the run: the whole timeline shifts by data_s and
    every later step is unchanged."""
    d = 5.0
    sync0, sync1 = (_run(apply_overrides(small, {"pipeline.data_s": x})) for x in (0.0, d))
    for a, b in zip(sync0.records, sync1.records):
        assert b.step_s == pytest.approx(a.step_s + d, rel=1e-12) and b.generation_s == a.generation_s
    as0, as1 = (_run(_async(small, **{"pipeline.data_s": x})) for x in (0.0, d))
    assert as1.records[0].data_s == d and all(r.data_s == 0.0 for r in as1.records[1:])
    assert as1.records[0].step_s == pytest.approx(as0.records[0].step_s + d, rel=1e-9)
    for a, b in zip(as0.records[1:], as1.records[1:]):
        assert b.step_s == pytest.approx(a.step_s, rel=1e-9, abs=1e-9)
        assert b.step_end_s == pytest.approx(a.step_end_s + d, rel=1e-9)
        assert b.exposed_generation_s == pytest.approx(a.exposed_generation_s, rel=1e-9, abs=1e-9)
    assert as1.steady()["effective_step_s"] == pytest.approx(as0.steady()["effective_step_s"], rel=1e-9)


def test_sync_e2e_speedup_is_amdahl(small):
    """Static acceptance, no growth: E2E = 1/((1−f) + f/s) with the simulated f and s."""
    c = compare(small)
    f, s = c.generation_share, c.generation_speedup
    assert s > 1.1 and 0.3 < f < 0.95
    assert c.e2e_speedup == pytest.approx(1.0 / ((1 - f) + f / s), rel=1e-6)
    # common random numbers: both runs generated the same responses
    assert [r.tokens for r in c.variant.records] == [r.tokens for r in c.baseline.records]
    assert all(np.isnan(r.tau) for r in c.baseline.records)
    assert all(r.tau > 1.5 for r in c.variant.records)
    assert c.exposed_generation_saving_s > 0


def test_baseline_scenario(small):
    b = baseline_scenario(small)
    assert b.speculation.policy == "off" and small.speculation.policy == "always"
    custom = apply_overrides(small, {"pipeline.baseline": {"speculation.policy": "threshold", "speculation.k": 2}})
    assert baseline_scenario(custom).speculation.policy == "threshold"
    assert baseline_scenario(custom).speculation.k == 2


# ----------------------------------------------------------------------------- async
@pytest.mark.parametrize("train_gpus", [2, 4])
def test_async_more_lag_never_slower(small, train_gpus):
    """Continuous generation: step j's groups are released when version j − L lands; the lag bound
    holds for every trajectory; training runs in order after its rollouts; more lag is never
    slower, and lag 1 is strictly faster than lag 0 (the next step's work fills the tail)."""
    sc = apply_overrides(small, {"pipeline.steps": 6})
    steps = []
    for lag in (0, 1, 2, 4):
        res = _run(_async(sc, **{"pipeline.policy_lag": lag, "training.gpus": train_gpus}))
        for r in res.records:
            assert r.policy_version >= r.step - lag                     # the lag bound holds
            assert r.max_policy_age <= lag
            assert r.train_start_s >= r.gen_end_s - 1e-9
            if r.step > lag:                                            # released when version step − L landed
                assert r.gen_start_s == pytest.approx(res.records[r.step - lag - 1].step_end_s)
        for a, b in zip(res.records, res.records[1:]):
            assert b.train_start_s >= a.step_end_s - 1e-9               # training is in order
        steps.append(res.steady()["step_s"])
    assert all(b <= a * 1.01 for a, b in pairwise(steps)), steps
    assert steps[1] < 0.9 * steps[0]


def test_async_lag_zero_is_a_barrier_per_step(small):
    """Lag 0 on split pools: each step's generation is exactly a closed barrier phase on the same
    draws (sim/cluster.simulate_generation), and the step is generation + the training side."""
    from specsim.sim.cluster import draw_step, simulate_generation

    world = resolve(_async(small, **{"pipeline.policy_lag": 0}))
    res = run_pipeline(world)
    for r in res.records:
        side = r.reward_s + r.logprob_s + r.train_s + r.weight_sync_s + r.drafter_update_s
        assert r.step_s == pytest.approx(r.data_s + r.generation_s + side, abs=1e-9)   # data_s: step 0 only
        assert r.policy_version == r.step
        barrier = simulate_generation(world, draw_step(world, r.step), r.versions_since_update)
        assert r.generation_s == pytest.approx(barrier.rollout_s, rel=1e-9)
        assert r.tau == pytest.approx(barrier.mean_accept_len, rel=1e-9)
        # the response that set the step and the batch a token saw are the barrier phase's too
        assert r.step_setter_tau == pytest.approx(barrier.step_setter_tau(world.acceptance.proposal_rate), rel=1e-9)
        assert r.token_weighted_batch == pytest.approx(barrier.token_weighted_batch, rel=1e-9)
    partial = _run(_async(small, **{"pipeline.policy_lag": 0, "pipeline.partial_rollouts": True}))
    for a, b in zip(res.records, partial.records):
        assert b.step_end_s <= a.step_end_s + 1e-9                     # in-flight updates never hurt
    # in flight, step j + 1 is released when the sync begins, but every engine stops for the
    # sync's transfer while it loads the weights (sim/stream.switch_all): at lag 0 nothing overlaps
    assert partial.total_s == pytest.approx(res.total_s, rel=1e-9)


def test_async_stream_fast_matches_reference(small):
    """Continuous generation with arrivals and in-flight weight switches: the fast engine's step
    ends and the batch a token saw within 1 % of the reference engine's (mean over steps); τ of
    the response that set each step within 2 %: that is one response's τ per step, with one
    response's sampling noise (its steps are sampled in the reference, drawn from the renewal law
    in the fast engine), not a pool mean."""
    for part in (False, True):
        world = resolve(_async(apply_overrides(small, {"pipeline.steps": 4}),
                               **{"pipeline.policy_lag": 2, "pipeline.partial_rollouts": part}))
        r = run_pipeline(world, engine="reference")
        mean = lambda res, key: float(np.nanmean([getattr(x, key) for x in res.records]))
        for eng in ("fast", "fleet"):     # a 4-engine pool: "fast" runs the per-engine loop (fleet_pays)
            f = run_pipeline(world, engine=eng)
            for key, bound in (("gen_window_s", 0.01), ("token_weighted_batch", 0.01), ("step_setter_tau", 0.02)):
                tf, tr = mean(f, key), mean(r, key)
                assert abs(tf - tr) / tr < bound, (part, eng, key, tf, tr)
            assert [x.tokens for x in f.records] == [x.tokens for x in r.records]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_token_weighted_batch_is_finite_and_bounded(small, mode):
    """The active batch a generated token saw (Σ tokens × batch ÷ Σ tokens, counted by the engines
    at every step or segment): finite in every steady step of sync and async runs, on every
    engine, within [1, max_batch], and at least the time-weighted mean batch (tokens per second
    grow with the batch, so tokens lean towards the full batch); async counts the pool's tokens
    between consecutive step finishes, as its mean active batch does. Capped batch: max_batch 16,
    8 x 16 responses on 4 engines (32 each: two full batches, then the drain; the bounds hold at
    any size, and the reference engine walks every verify step). The fewest steps with a steady
    one: sync 2 (warm-up 1), async 4 (the fill is steps 0..lag + 1)."""
    sc = apply_overrides(small, {"rollout.max_batch": 16, "workload.prompts": 8})
    sc = apply_overrides(sc, {"pipeline.steps": 2}) if mode == "sync" else \
        _async(sc, **{"pipeline.policy_lag": 1, "pipeline.steps": 4})
    world = resolve(sc)
    for engine in ("fast", "fleet", "reference"):
        res = run_pipeline(world, engine=engine)
        steady = [x for x in res.records if x.step >= res.warmup_steps]
        assert steady
        for x in steady:
            assert np.isfinite(x.token_weighted_batch), (engine, x.step)
            assert 1.0 <= x.token_weighted_batch <= world.rollout.max_batch, (engine, x.step, x.token_weighted_batch)
            assert x.token_weighted_batch >= x.mean_active_batch - 1e-9, (engine, x.step)
        st = res.steady()["token_weighted_batch"]
        assert np.isfinite(st) and 1.0 <= st <= world.rollout.max_batch


def test_step_setter_tau_is_the_last_finishers(small):
    """step_setter_tau: τ (vLLM's, conditional on a draft) of the response that finished last in
    each step — the one that set its generation time — recomputed here from the engines'
    per-response counters; in [1, k + 1]; below the step's mean τ when acceptance differs between
    responses (the slow, long tail is the response that drafts worst); nan for AR. Sync and async
    give the same value for the same phase (lag 0: tested with the barrier phase above)."""
    from specsim.sim.cluster import draw_step, simulate_generation

    world = resolve(small)
    p = world.acceptance.proposal_rate
    res = run_pipeline(world)
    for r in res.records:
        g = simulate_generation(world, draw_step(world, r.step), r.versions_since_update)
        fin = np.concatenate([e.finish_s for e in g.engines])
        last = fin == fin.max()
        tok = np.concatenate([e.seq_sd_tokens for e in g.engines])[last].sum()
        steps = np.concatenate([e.seq_sd_steps for e in g.engines])[last].sum()
        assert r.step_setter_tau == pytest.approx(1 + (tok - steps) / (p * steps), rel=1e-12)
        assert 1.0 <= r.step_setter_tau <= world.policy.k + 1
    st = res.steady()
    assert small.drafter.heterogeneity is not None and st["step_setter_tau"] < st["tau"]
    ar = run_pipeline(resolve(apply_overrides(small, {"speculation.policy": "off"})))
    assert all(np.isnan(r.step_setter_tau) for r in ar.records)
    for r in run_pipeline(resolve(_async(small))).records:
        assert 1.0 <= r.step_setter_tau <= world.policy.k + 1


def test_async_generation_bound_step_tends_to_generation(small):
    sc = _async(apply_overrides(small, {"pipeline.steps": 6, "pipeline.reward_s": 0.5}),
                **{"training.gpus": 64, "pipeline.policy_lag": 1})
    st = _run(sc).steady()
    side = st["reward_s"] + st["logprob_s"] + st["train_s"] + st["weight_sync_s"]
    assert side < 0.1 * st["gen_window_s"]
    assert st["step_s"] == pytest.approx(st["gen_window_s"], rel=0.05)
    assert st["effective_step_s"] == pytest.approx(st["step_s"], rel=1e-9)
    assert st["exposed_generation_s"] > 0.85 * st["step_s"]


def test_async_sd_saves_exposed_generation(small):
    c = compare(_async(apply_overrides(small, {"pipeline.steps": 5}), **{"training.gpus": 4}))
    v, b = c.variant.steady(), c.baseline.steady()
    assert b["exposed_generation_s"] > 0
    assert v["exposed_generation_s"] < b["exposed_generation_s"]
    assert c.exposed_generation_saving_s > 0
    assert c.e2e_speedup > 1.0
    # overlap hides part of the generation speedup: E2E is below the generation speedup
    assert c.e2e_speedup < c.generation_speedup


# ----------------------------------------------------------------------------- staleness
def test_fixed_drafter_goes_stale(small):
    sc = apply_overrides(small, {"pipeline.steps": 5,
                                 "drafter.staleness": {"tau_after": 1.8, "after_versions": 4}})
    res = _run(sc)
    alphas = [r.mean_alpha for r in res.records]
    taus = [r.tau for r in res.records]
    assert [r.versions_since_update for r in res.records] == [0, 1, 2, 3, 4]
    assert all(b < a for a, b in pairwise(alphas))
    assert all(b < a for a, b in pairwise(taus))
    assert all(r.drafter_update_s == 0 for r in res.records)
    # a staler drafter generates more slowly: the last step is slower than the first per token
    first, last = res.records[0], res.records[-1]
    assert last.generation_s / last.tokens > first.generation_s / first.tokens


def test_online_updates_restore_acceptance(small):
    sc = apply_overrides(small, {"pipeline.steps": 5, "drafter.update_every_steps": 2,
                                 "drafter.staleness": {"tau_after": 1.8, "after_versions": 4}})
    res = _run(sc)
    r = res.records
    assert [x.versions_since_update for x in r] == [0, 1, 0, 1, 0]
    assert r[2].mean_alpha == r[0].mean_alpha == r[4].mean_alpha > r[1].mean_alpha == r[3].mean_alpha
    assert r[2].tau > r[1].tau and r[4].tau > r[3].tau
    # the drafter is retrained after the syncs that publish versions 2 and 4 (steps 1 and 3)
    assert [x.drafter_update_s > 0 for x in r] == [False, True, False, True, False]
    assert r[1].drafter_update_s < 0.1 * r[1].train_s


def test_online_updates_in_async_cost_the_training_pool(small):
    sc = _async(apply_overrides(small, {"pipeline.steps": 5, "drafter.update_every_steps": 1,
                                        "drafter.staleness": {"rate_per_version": 0.3}}))
    res = _run(sc)
    assert all(r.drafter_update_s > 0 for r in res.records)
    # lag 1: generation runs on a one-version-old policy whose drafter is at most one version behind
    assert all(r.versions_since_update <= 1 for r in res.records)
    no_upd = _run(apply_overrides(sc, {"drafter.update_every_steps": 0}))
    assert no_upd.records[-1].versions_since_update > res.records[-1].versions_since_update


def test_self_quant_never_stale(small):
    sc = apply_overrides(small, {"pipeline.steps": 4, "drafter.kind": "self_quant", "drafter.tau": 1.9})
    res = _run(sc)
    alphas = {r.mean_alpha for r in res.records}
    assert len(alphas) == 1
    assert all(r.versions_since_update == 0 for r in res.records)
    # each step's τ is a fresh draw of per-sequence acceptance (Beta heterogeneity c = 6.71 in this
    # scenario), so steps scatter around the configured 1.9 without drifting down
    taus = np.array([r.tau for r in res.records])
    assert abs(taus.mean() - 1.9) < 0.03 * 1.9
    assert np.ptp(taus) < 0.08 * taus.mean()
    # re-quantized at every weight sync: a small memory-bound cost every step
    assert all(0 < r.drafter_update_s < r.weight_sync_s * 10 + 0.1 for r in res.records)


def test_baseline_pays_no_drafter_costs(small):
    sc = apply_overrides(small, {"drafter.update_every_steps": 1})
    c = compare(sc)
    assert all(r.drafter_update_s > 0 for r in c.variant.records)
    assert all(r.drafter_update_s == 0 for r in c.baseline.records)


def test_trainer_memory_checked(small):
    """A trainer that does not fit is refused when the scenario is resolved (so `check` sees it)."""
    sc = apply_overrides(small, {"hardware": "h100_sxm", "pipeline.mode": "async", "training.gpus": 1})
    with pytest.raises(ScenarioError, match="training: Qwen3-8B training needs .* training.gpus=1 gives 85 GB"):
        _run(sc)


def test_sim_imports_nothing_upward():
    """sim/ takes resolved worlds: no module under specsim/sim imports the schema, resolve, sweep,
    report, runner, cli or the comparison layer (checked on the source, so a lazy import counts)."""
    import ast
    from pathlib import Path

    import specsim.sim

    upward = ("specsim.scenario", "specsim.world.resolve", "specsim.study.sweep", "specsim.study.report", "specsim.study.runner",
              "specsim.cli.app", "specsim.study.comparison", "specsim.validate.run")
    for path in Path(specsim.sim.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert not name.startswith(upward), f"{path.name} imports {name}"


def test_measured_acceptance_estimate_inverts_the_reported_tau(small):
    """`speculation.acceptance_estimate: measured`: each engine's next-step α̂ is the α whose τ at the
    draft length it used equals the acceptance length it reported; homogeneous acceptance gives back
    the drafter's α (within 3 %: a response's last step emits what is left), the rollout is then the
    drafter-estimate one within 1 %, and async pipelines refuse it by name."""
    from specsim.sim.cluster import draw_step, measured_alpha_estimates, simulate_generation
    from specsim.workload.acceptance.drafter import expected_tokens_per_verify

    sc = apply_overrides(small, {"speculation.policy": "toggle", "speculation.k": 3, "drafter.heterogeneity": None})
    world = resolve(sc)
    g = simulate_generation(world, draw_step(world, 0, 0))
    est = measured_alpha_estimates(world, g, {})
    assert set(est) == {r.name for r in g.engines if r.sd_steps > 0} and est
    alpha = float(world.acceptance.alpha_at_version(0))
    for r in g.engines:
        if r.name in est:
            tau = float(expected_tokens_per_verify(np.array([est[r.name]]), np.array([3]), world.acceptance.decay)[0])
            assert tau == pytest.approx(r.mean_accept_len, rel=1e-6)
            assert est[r.name] == pytest.approx(alpha, rel=0.03)
    assert measured_alpha_estimates(world, g, {"engine99": 0.5})["engine99"] == 0.5   # no SD steps: kept
    drafter = _run(sc)
    meas = _run(apply_overrides(sc, {"speculation.acceptance_estimate": "measured"}))
    assert meas.steady()["generation_s"] == pytest.approx(drafter.steady()["generation_s"], rel=0.01)
    with pytest.raises(ScenarioError, match="speculation.acceptance_estimate"):
        resolve(_async(apply_overrides(sc, {"speculation.acceptance_estimate": "measured"})))


def test_default_acceptance_estimate_keeps_run_keys(small):
    from specsim.study.sweep import run_key

    explicit = apply_overrides(small, {"speculation.acceptance_estimate": "drafter", "speculation.toggle_margin": 0.3})
    assert run_key(explicit, 0) == run_key(small, 0)
    assert run_key(apply_overrides(small, {"speculation.acceptance_estimate": "measured"}), 0) != run_key(small, 0)


def test_async_steady_means_leave_out_the_fill(small):
    """Async steps 0..L need no trained version: they are admitted together at t = 0 and the
    trainer drains that buffer faster than the pool refills it, so the steady means start at
    max(warmup_steps, L + 2); sync keeps its warm-up; a run too short for a step past the fill
    is flagged by `specsim check` (doctor) instead of silently averaging fill steps."""
    from specsim.explain.check import doctor_warnings

    for lag in (0, 1, 3):
        world = resolve(_async(apply_overrides(small, {"pipeline.steps": 7, "pipeline.warmup_steps": 1}),
                               **{"pipeline.policy_lag": lag}))
        res = run_pipeline(world)
        assert res.warmup_steps == lag + 2 == world.pipeline.steady_from_step
        assert all(r.gen_start_s == res.records[0].gen_start_s for r in res.records[:lag + 1])
        assert res.records[lag + 1].gen_start_s > res.records[0].gen_start_s
        steady_step_s = np.mean([r.step_s for r in res.records[lag + 2:]])
        assert res.steady()["step_s"] == pytest.approx(steady_step_s, rel=1e-12)
        assert not world.pipeline.steady_includes_fill
        assert not any("fill" in w for w in doctor_warnings(world))
    assert _run(apply_overrides(small, {"pipeline.steps": 4, "pipeline.warmup_steps": 1})).warmup_steps == 1
    short = resolve(_async(apply_overrides(small, {"pipeline.steps": 3, "pipeline.warmup_steps": 1})))
    assert short.pipeline.steady_includes_fill and short.pipeline.steady_from_step == 2
    assert any("run at least 4 steps" in w for w in doctor_warnings(short))


# ----------------------------------------------------------------------------- stopping a run that cannot win
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stopped_run_is_provably_above_its_threshold(small, mode):
    """run_pipeline(stop_above_s=T): below the run's steady mean (and only there) it raises
    RunStopped, whose floor lies between T and the full run's mean (the floor is sound); at or above
    the mean it never stops and the run is the same run; each step is at least its trainer-side
    stages (`step_floor_s`, the floor's term)."""
    sc = small if mode == "sync" else _async(small, **{"pipeline.steps": 6, "pipeline.warmup_steps": 2})
    world = resolve(sc)
    full = run_pipeline(world)
    mean = full.steady()["step_s"]
    same = run_pipeline(world, stop_above_s=mean * (1 + 1e-9))
    assert [r.step_s for r in same.records] == [r.step_s for r in full.records]
    stops = []
    for f in (0.2, 0.5, 0.8, 0.95, 0.999):
        with pytest.raises(RunStopped) as exc:
            run_pipeline(world, stop_above_s=mean * f)
        e = exc.value
        assert mean * f < e.floor_step_s <= mean * (1 + 1e-12) and e.stop_above_s == mean * f
        assert -1 <= e.step < len(full.records)
        stops.append(e.step)
    assert stops == sorted(stops)          # a higher threshold stops no earlier
    for r in full.records:
        stages = r.reward_s + r.logprob_s + r.train_s + r.weight_sync_s + r.drafter_update_s
        assert r.step_s >= stages + (r.data_s if mode == "sync" else 0.0) - 1e-9
