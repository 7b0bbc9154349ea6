"""The fleet engine (sim/fleet/loop.py): a pool of fast engines advanced together. Held to the reference
engine at the pool level (many engines, arrivals mid-rollout, weight switches, preemption), to
the per-engine fast engine (engine="fast_v1"), which it reproduces to rounding given the same
inputs (engine="fleet_v1_inputs"), and on its own inputs to fast_v1 within the replicate interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_helpers import make_config, make_work
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.policy import Always, Off, Schedule, Threshold
from specsim.sim.engine.loop import FastEngine
from specsim.sim.fastlaw import step_law
from specsim.sim.fleet import loop as fleet_module
from specsim.sim.fleet.events import apply_events
from specsim.sim.fleet.loop import Fleet, SwitchPayload
from specsim.sim.fleet.state import INF, FleetWork, Slots
from specsim.sim.reference import ReferenceEngine

ROOT = Path(__file__).resolve().parents[2]


def _pool(cfg, works, zs, open_=False, step_ids=None, group_stride=10_000):
    """One Fleet over per-engine works (engine e's groups offset by e · group_stride so they stay
    distinct)."""
    eng_of = np.concatenate([np.full(len(w), e) for e, w in enumerate(works)])
    cat = lambda f: np.concatenate([f(w) for w in works])
    groups = np.concatenate([w.group_ids + group_stride * e for e, w in enumerate(works)])
    alphas = cat(lambda w: w.alphas)
    laws = {k: step_law(alphas, k, cfg.position_decay, cfg.policy.tree_for(k), cfg.proposal_rate)
            for k in cfg.policy.ks if k > 0}
    work = FleetWork(eng_of, cat(lambda w: w.response_ids), groups, cat(lambda w: w.prompt_tokens),
                     cat(lambda w: w.response_tokens), np.concatenate(zs), alphas, laws, step_ids)
    return Fleet(cfg, [f"e{e}" for e in range(len(works))], work, open_=open_)


POOL_GRID = [
    ("AR ample", Off(), 10**7),
    ("k=3 ample", Always(k=3), 10**7),
    ("AR tight", Off(), 16_000),
    ("k=3 tight", Always(k=3), 16_000),
    ("threshold tight", Threshold(k=5, max_batch=24), 16_000),
    ("schedule tight", Schedule(k=5, table=((1, 8, 5), (9, 24, 3), (40, 4096, 0))), 16_000),
]


@pytest.mark.parametrize("label,policy,kv", POOL_GRID, ids=[g[0] for g in POOL_GRID])
def test_fleet_matches_v1_and_reference_on_a_pool(label, policy, kv):
    """A pool of 6 engines with different works: every engine's rollout equals the v1 fast
    engine's to rounding (same keying, same events), and the pool's mean rollout is within 1 %
    of the reference engine's (mean over 8 draws; tight budgets preempt)."""
    cfg = make_config(policy, max_batch=64, kv_capacity_tokens=kv)
    fleet_t, ref_t, preempted, chained = [], [], 0, 0
    for seed in range(8):
        works = [make_work(100 * seed + e, groups=8, group_size=8, median=500, cap=1200, concentration=10.0)
                 for e in range(6)]
        zs = [np.random.default_rng([seed, e]).standard_normal(len(w)) for e, w in enumerate(works)]
        fl = _pool(cfg, works, zs)
        fl.run()
        fl.check()
        chained += fl.kv_chain_boundaries
        res = fl.results()
        for e, (w, z, r) in enumerate(zip(works, zs, res)):
            v1 = FastEngine(cfg, w, z)
            v1.run_closed()
            r1 = v1.result()
            assert r.rollout_s == pytest.approx(r1.rollout_s, rel=1e-9)
            assert np.array_equal(r.tokens, w.response_tokens)
            assert np.array_equal(r.preemptions, r1.preemptions)
            # per-response SD counters and the token-weighted batch's sums: the v1 engine's to rounding
            assert np.allclose(r.seq_sd_tokens, r1.seq_sd_tokens, rtol=1e-9, atol=1e-6)
            assert np.allclose(r.seq_sd_steps, r1.seq_sd_steps, rtol=1e-9, atol=1e-6)
            assert r.token_sum == pytest.approx(r1.token_sum, rel=1e-9)
            assert r.token_batch_sum == pytest.approx(r1.token_batch_sum, rel=1e-9)
            ref = ReferenceEngine(cfg, w, np.random.default_rng([seed, e, 7]))
            ref.run()
            rr = ref.result()
            fleet_t.append(r.rollout_s)
            ref_t.append(rr.rollout_s)
            preempted += int(rr.preemptions.sum())
    rel = abs(np.mean(fleet_t) - np.mean(ref_t)) / np.mean(ref_t)
    assert rel < 0.01, f"{label}: fleet {np.mean(fleet_t):.3f}s vs reference {np.mean(ref_t):.3f}s ({rel:.2%})"
    if kv < 10**6:
        assert preempted > 0
        assert chained > 0, "no boundary ran in the KV chain: the tight pools no longer cover it"


@pytest.mark.parametrize("kv", [40_000, 12_000], ids=["kv-40k", "kv-12k-bound"])
@pytest.mark.parametrize("in_flight", [True, False], ids=["in-flight", "gated"])
def test_fleet_arrivals_and_switches_match_reference(in_flight, kv):
    """Open pools: half of each engine's work at 0, the rest released mid-rollout, and a weight
    switch (acceptance 0.7 -> 0.5) between, in flight or gated (admission stops until the batch
    drains). The fleet equals the v1 engines to rounding and the reference within 1 %. At 12,000
    KV tokens the pool is KV-bound (it admits all 48 and preempts as they grow): the relay and
    the drain advance it through admissions and KV limits."""
    policy = Always(k=3)
    cfg = make_config(policy, max_batch=48, kv_capacity_tokens=kv)
    fl_t, v1_t, ref_t = [], [], []
    preempted = 0
    for seed in range(6):
        works = [make_work(10 * seed + e, groups=12, group_size=8, median=500, cap=1200, alpha=0.7)
                 for e in range(4)]
        zs = [np.random.default_rng([seed, e]).standard_normal(len(w)) for e, w in enumerate(works)]
        half = [len(w) // 2 for w in works]
        t_late = 0.4 * FastEngine(cfg, works[0], zs[0]).run_closed()
        t_switch = 0.25 * t_late
        new_alpha = 0.5
        fl = _pool(cfg, works, zs, open_=True)
        off = fl.resp.off
        fl.release(np.concatenate([np.arange(off[e], off[e] + half[e]) for e in range(4)]), 0.0, np.arange(4))
        idx = np.arange(fl.resp.N)
        a = np.full(fl.resp.N, new_alpha)
        lw = step_law(a, 3, cfg.position_decay)
        fl.switch(t_switch, SwitchPayload(1, idx, off.copy(), a, {3: (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)},
                                          in_flight))
        fl.release(np.concatenate([np.arange(off[e] + half[e], off[e + 1]) for e in range(4)]), t_late, np.arange(4))
        fl.run()
        fl.check()
        res = fl.results()
        preempted += int(fl.resp.preempt.sum())
        for e, (w, z, r) in enumerate(zip(works, zs, res)):
            assert np.all(r.admit_s[half[e]:] >= t_late - 1e-9)
            assert np.array_equal(r.tokens, w.response_tokens)
            for cls, out in ((FastEngine, v1_t), (ReferenceEngine, ref_t)):
                eng = cls(cfg, w, z if cls is FastEngine else np.random.default_rng([seed, e, 3]), open_=True)
                eng.release(np.arange(half[e]), 0.0)
                eng.switch(t_switch, 1, np.full(len(w), new_alpha), new_alpha, in_flight,
                           {3: step_law(np.full(len(w), new_alpha), 3, cfg.position_decay)} if cls is FastEngine
                           else None)
                eng.release(np.arange(half[e], len(w)), t_late)
                eng.run()
                out.append(eng.result().rollout_s)
            assert r.admit_version[half[e]:].min() == 1
            fl_t.append(r.rollout_s)
    assert np.allclose(fl_t, v1_t, rtol=1e-9)
    rel = abs(np.mean(fl_t) - np.mean(ref_t)) / np.mean(ref_t)
    assert rel < 0.01, f"fleet {np.mean(fl_t):.3f}s vs reference {np.mean(ref_t):.3f}s ({rel:.2%})"
    if kv < 20_000:
        assert preempted > 0


@pytest.mark.long
def test_fleet_matches_v1_on_the_235b_main_job():
    """The 235B async main job (384 engines, k = 5, lag 2; fewer steps, and the 128 x 16 reading of
    its rollout batch, ~5 responses an engine: the equality holds at any size, and the per-engine v1
    engine takes minutes at 4096 x 16), the fleet given fast_v1's inputs (engine="fleet_v1_inputs": per-engine noise, exact laws): step times and
    τ equal the per-engine fast engine's (engine="fast_v1") to rounding; AR, partial rollouts (with
    a drifting and with a fresh drafter), toggle and adaptive too."""
    from specsim.scenario import load_scenario
    from specsim.sim.pipeline import run_pipeline
    from specsim.world.resolve import resolve

    for ov in (["speculation.k=5", "pipeline.policy_lag=2"], ["speculation.k=0", "pipeline.policy_lag=0"],
               ["speculation.k=3", "pipeline.policy_lag=1", "pipeline.partial_rollouts=true"],
               # in flight with a fresh drafter: a switch that changes no acceptance re-keys nothing
               ["speculation.k=3", "pipeline.policy_lag=1", "pipeline.partial_rollouts=true", "drafter.staleness={rate_per_version: 0.0}",
                "drafter.update_every_steps=0"],
               ["speculation.policy=toggle", "speculation.k=3", "pipeline.policy_lag=2"],
               ["speculation.policy=adaptive", "speculation.k_max=4", "pipeline.policy_lag=1"]):
        world = resolve(load_scenario(ROOT / "scenarios" / "235b_async.yaml",
                                      ["sweep={}", "workload.prompts=128"] + ov + ["pipeline.steps=5"]))
        a = run_pipeline(world, engine="fast_v1").steps_frame()
        b = run_pipeline(world, engine="fleet_v1_inputs").steps_frame()
        for col in ("step_end_s", "gen_end_s", "tokens", "verify_steps"):
            assert np.allclose(a[col], b[col], rtol=1e-9, atol=1e-9), (ov, col)
        assert np.allclose(a["tau"], b["tau"], rtol=1e-9, equal_nan=True)


@pytest.mark.long
def test_fleet_within_the_replicate_interval_of_v1_on_the_235b_main_job():
    """The fleet on its own inputs (one noise stream per step, tabulated laws) against today's
    fast engine (fast_v1) on the 235B main job (k = 5, lag 2, 6 steps, replicates 0..2; the 256 x 16
    reading of its rollout batch): per
    replicate the same draws, so the gap is the engines' noise alone; the mean over replicates of
    the steady step time and τ lies within the 95 % replicate interval of fast_v1's."""
    from specsim.scenario import load_scenario
    from specsim.sim.pipeline import run_pipeline
    from specsim.world.resolve import resolve

    world = resolve(load_scenario(ROOT / "scenarios" / "235b_async.yaml",
                                  ["sweep={}", "workload.prompts=256", "speculation.k=5", "pipeline.policy_lag=2",
                                   "pipeline.steps=6"]))
    reps = range(3)
    v1 = [run_pipeline(world, engine="fast_v1", replicate=r).steady() for r in reps]
    fl = [run_pipeline(world, engine="fast", replicate=r).steady() for r in reps]
    for key in ("effective_step_s", "tau", "generation_s"):
        a = np.array([x[key] for x in v1])
        b = np.array([x[key] for x in fl])
        half = 4.303 * a.std(ddof=1) / np.sqrt(len(a))        # t(0.975, 2 dof)
        assert abs(b.mean() - a.mean()) <= half, (key, a, b, half)
        assert np.max(np.abs(b - a) / a) < 0.05, (key, a, b)   # paired draws: the engine noise alone


def test_fleet_sync_generation_matches_v1():
    """simulate_generation on the fleet equals the per-engine loop given its inputs
    (engine="fleet_v1_inputs"): the 235B pool (384 engines) and the 8B pool under a tight KV budget
    (preemption); toggle and adaptive priced with per-engine measured estimates."""
    from specsim.scenario import load_scenario
    from specsim.sim.cluster import draw_step, simulate_generation
    from specsim.world.resolve import resolve

    cases = [("235b_async.yaml", ["sweep={}", "workload.prompts=64"], None),
             ("8b_rl_think_sync.yaml", ["workload.prompts=64", "rollout.gpu_memory_utilization=0.3"], None),
             ("8b_rl_think_sync.yaml", ["workload.prompts=64", "rollout.gpu_memory_utilization=0.3",
                                        "speculation.policy=toggle", "speculation.k=3"], None),
             ("8b_rl_think_sync.yaml", ["workload.prompts=64", "speculation.policy=adaptive", "speculation.k_max=4"],
              {"engine0": 0.3, "engine3": 0.9})]
    for path, ov, est in cases:
        world = resolve(load_scenario(ROOT / "scenarios" / path, ov))
        draw = draw_step(world, 0)
        a = simulate_generation(world, draw, engine="fast_v1", alpha_estimates=est)
        b = simulate_generation(world, draw, engine="fleet_v1_inputs", alpha_estimates=est)
        assert [e.name for e in a.engines] == [e.name for e in b.engines]
        assert b.rollout_s == pytest.approx(a.rollout_s, rel=1e-9)
        assert b.total_tokens == a.total_tokens
        assert b.verify_steps == pytest.approx(a.verify_steps, rel=1e-12)
        assert np.allclose([e.rollout_s for e in a.engines], [e.rollout_s for e in b.engines], rtol=1e-9)
        assert np.allclose([e.draft_passes for e in a.engines], [e.draft_passes for e in b.engines], rtol=1e-12)
        assert len(a.slowest.timeline["t_s"]) == len(b.slowest.timeline["t_s"])


def test_tabulated_laws_match_step_law():
    """cluster.QuantileLaws against fastlaw.step_law per response: at the 235B acceptance and
    concentration every law column within 1e-5 relative (the steps-to-finish noise is ~1e-2)."""
    from specsim.sim.cluster import QuantileLaws, sequence_alpha_fn

    u = np.clip(np.random.default_rng(0).random(20_000), 1e-12, 1 - 1e-12)
    for k, decay, p in ((3, 1.0, 1.0), (5, 0.9, 0.8)):
        a, laws = QuantileLaws(0.7, 8.0, (0, k), decay, lambda k: None, p)(u)
        exact = sequence_alpha_fn(0.7, 8.0)(u)
        assert np.allclose(a, exact, rtol=0, atol=1e-9)
        lw = step_law(exact, k, decay, None, p)
        for got, want in zip(laws[k], (lw.mu, lw.inv_mu, lw.offset, lw.sd1)):
            assert np.allclose(got, want, rtol=1e-5, atol=1e-7)


def test_kept_grid_positions_give_the_laws_of_a_fresh_lookup():
    """A response's grid position, found once (cluster.grid_position) and taken for a subset, gives
    bit-identical α and laws to the lookup at every call (the stream keeps positions per run)."""
    from specsim.sim.cluster import QuantileLaws, grid_position

    u = np.clip(np.random.default_rng(1).random(5_000), 1e-12, 1 - 1e-12)
    table = QuantileLaws(0.8, 6.7, (0, 3, 5), 0.94, lambda k: None, 1.0)
    sub = np.random.default_rng(2).choice(len(u), 700, replace=False)
    a0, laws0 = table(u[sub])
    a1, laws1 = table(u[sub], grid_position(u).take(sub))
    assert np.array_equal(a0, a1)
    for k in (3, 5):
        for x, y in zip(laws0[k], laws1[k]):
            assert np.array_equal(x, y)


def test_keying_a_response_without_laws_raises():
    """The stream gives laws at version 0 only to the steps released under it and the rest at the
    switch that precedes their release; a response keyed with NaN laws (that order broken) is an
    InvariantError naming the engine and the response, never a silent finish boundary."""
    from specsim.errors import InvariantError

    cfg = make_config(Always(k=3), max_batch=64, kv_capacity_tokens=10**7)
    works = [make_work(e, groups=4, group_size=4, median=300, cap=800, concentration=10.0) for e in range(2)]
    zs = [np.zeros(len(w)) for w in works]
    fl = _pool(cfg, works, zs)
    for arr in fl.resp.laws[3]:
        arr[5] = np.nan
    with pytest.raises(InvariantError, match="without steps-to-finish laws"):
        fl.run()



def _lagged_work(cfg, seed: int, groups: int, **law):
    """Four engines' work for an open pool: the first half of each engine's responses holds two RL
    steps (0 and 1, interleaved, as a lagged stream admits them) and is released at 0, the second
    half (step 2) at t_late, 0.4 × engine 0's closed rollout. Returns (works, zs, t_late, step_ids)."""
    works = [make_work(10 * seed + e, groups=groups, group_size=8, median=500, cap=1200, alpha=0.7, **law)
             for e in range(4)]
    zs = [np.random.default_rng([seed, e]).standard_normal(len(w)) for e, w in enumerate(works)]
    t_late = 0.4 * FastEngine(cfg, works[0], zs[0]).run_closed()
    step_ids = np.concatenate([np.where(np.arange(len(w)) < len(w) // 2, np.arange(len(w)) % 2, 2) for w in works])
    return works, zs, t_late, step_ids

@pytest.mark.parametrize("kv", [10**7, 15_000], ids=["ample", "tight"])
@pytest.mark.parametrize("in_flight", [True, False], ids=["in-flight", "gated"])
def test_open_drain_equals_the_round_by_round_loop(in_flight, kv, monkeypatch):
    """Open pools drain finish-only rounds in closed form up to each engine's cut (its next event,
    the stop time, its queue head's arrival), with a watched step up to that step's last finish,
    and (tight KV: a batch whose whole tail would not fit) up to the first segment where the
    loop would preempt or cut at the KV overflow step. The same pool with the drain switched off
    steps those rounds one by one: every response's finish time and preemptions, every counter
    and the stop state agree to rounding, under arrivals, a weight switch and
    `run(until_s=..., watch_step=...)` calls as the async stream makes them."""
    from specsim.sim.fleet.drain import tail_fits

    policy = Always(k=3)
    cfg = make_config(policy, max_batch=48, kv_capacity_tokens=kv)
    calls, kv_bound, preempted = [], [], 0
    real = fleet_module.drain

    def spy(st, D, t_cut=None, watch_step=None):
        fits = tail_fits(st.engines, st.prices, D)
        out = real(st, D, t_cut, watch_step)
        if t_cut is not None:
            calls.append(int(out.sum()))
            kv_bound.append(int((out & ~fits).sum()))
        return out

    monkeypatch.setattr(fleet_module, "drain", spy)
    for seed in range(3):
        works, zs, t_late, step_ids = _lagged_work(cfg, seed, groups=12)
        out = []
        for drain in (True, False):
            fl = _pool(cfg, works, zs, open_=True, step_ids=step_ids)
            fl.open_drainable = drain
            off = fl.resp.off
            first = np.flatnonzero(step_ids < 2)
            fl.release(first, 0.0, np.arange(4))
            a = np.full(fl.resp.N, 0.5)
            lw = step_law(a, 3, cfg.position_decay)
            fl.switch(0.25 * t_late, SwitchPayload(1, np.arange(fl.resp.N), off.copy(), a,
                                                   {3: (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)}, in_flight))
            fl.release(np.setdiff1d(np.arange(fl.resp.N), first), t_late, np.arange(4))
            stops = []
            for until_s, watch in ((0.2 * t_late, None), (INF, 0), (0.9 * t_late, None), (INF, 1), (INF, 2), (INF, None)):
                fl.run(until_s=until_s, watch_step=watch)
                stops.append((fl.engines.t.copy(), fl.engines.s.copy(), fl.engines.n.copy()))
            fl.check()
            out.append((fl, stops))
        (a_, stops_a), (b_, stops_b) = out
        for (ta, sa, na), (tb, sb, nb) in zip(stops_a, stops_b):     # where each run() call leaves every engine
            assert np.allclose(ta, tb, rtol=1e-9)
            assert np.array_equal(sa, sb)
            assert np.array_equal(na, nb)
        assert np.allclose(a_.resp.finish_s, b_.resp.finish_s, rtol=1e-9)
        assert np.allclose(a_.engines.t, b_.engines.t, rtol=1e-9)
        assert np.array_equal(a_.engines.s, b_.engines.s)
        for name in ("steps", "sd_steps", "seq_steps", "sd_seq_steps", "sd_tokens", "draft_passes", "weighted_active"):
            assert np.allclose(getattr(a_.counters, name), getattr(b_.counters, name), rtol=1e-9), name
        assert np.allclose(a_.resp.seq_sd_steps, b_.resp.seq_sd_steps, rtol=1e-9)
        assert np.array_equal(a_.resp.preempt, b_.resp.preempt)
        preempted += int(a_.resp.preempt.sum())
    assert sum(calls) > 0, "the open drain never ran: the test no longer covers it"
    if kv < 10**6:
        assert sum(kv_bound) > 0, "no drain of a batch whose tail would not fit: the tight case no longer covers it"
        assert preempted > 0, "the tight case no longer preempts"


def test_grid_position_is_the_searchsorted_cell():
    """cluster.grid_position finds the cell arithmetically (GRID_U is uniform in logit u); it must
    be exactly searchsorted's cell and weight, at grid points, their neighbours and the ends."""
    from specsim.sim.cluster import GRID_U, grid_position

    rng = np.random.default_rng(3)
    u = np.concatenate([rng.random(20_000), rng.random(2_000) ** 60, 1 - rng.random(2_000) ** 60, GRID_U,
                        np.nextafter(GRID_U, 2.0), np.nextafter(GRID_U, -1.0), [0.0, 1.0, 5e-324, 1 - 2**-53]])
    i = np.clip(np.searchsorted(GRID_U, u) - 1, 0, len(GRID_U) - 2)
    got = grid_position(u)
    assert np.array_equal(got.i, i)
    assert np.array_equal(got.w, (u - GRID_U[i]) / (GRID_U[i + 1] - GRID_U[i]))


def test_single_prompt_prefills_read_from_the_table_are_the_cost_function():
    """A one-prompt prefill pass is read from Prices.single_prefill_s: every entry must be the
    number the cost function returns for that pass alone (n = 1, Σq = q, Σq² = q², nothing cached)."""
    cfg = make_config(Always(k=3), max_batch=64, kv_capacity_tokens=10**7)
    works = [make_work(e, groups=4, group_size=4, median=300, cap=800, concentration=10.0) for e in range(2)]
    fl = _pool(cfg, works, [np.zeros(len(w)) for w in works])
    table = fl.prices.single_prefill_s()
    assert len(table) == int(max(w.prompt_tokens.max() for w in works)) + 1
    for q in (1, 2, 17, 100, len(table) - 1):
        one = cfg.prefill_batches_s(np.array([1.0]), np.array([q * 1.0]), np.array([q * q * 1.0]), np.zeros(1),
                                    np.zeros(1))
        assert table[q] == one[0]


@pytest.mark.parametrize("kv", [10**7, 16_000], ids=["ample", "tight"])
def test_group_numbering_does_not_change_the_fleet(kv):
    """The fleet numbers (engine, group) pairs from the groups themselves when every group is on one
    engine, else by a sort; both numberings give bit-identical rollouts (tight KV: preemption
    re-queues responses, and admission then looks for a group's members apart)."""
    cfg = make_config(Always(k=3), max_batch=64, kv_capacity_tokens=kv)
    works = [make_work(50 + e, groups=8, group_size=8, median=500, cap=1200, concentration=10.0) for e in range(4)]
    zs = [np.random.default_rng(e).standard_normal(len(w)) for e, w in enumerate(works)]
    sparse = _pool(cfg, works, zs)                                     # groups 10,000 apart: the sort
    dense = _pool(cfg, works, zs, group_stride=9)                      # 8 groups per engine, gaps: the groups
    assert not np.array_equal(sparse.resp.groups, dense.resp.groups)
    assert not dense.queues.requeued and not sparse.queues.requeued
    for fl in (sparse, dense):
        fl.run()
    assert np.array_equal(sparse.resp.finish_s, dense.resp.finish_s) and np.array_equal(sparse.engines.t, dense.engines.t)
    if kv < 10**6:
        assert sparse.queues.requeued and sparse.resp.preempt.sum() > 0


@pytest.mark.parametrize("kv", [10**7, 16_000], ids=["ample", "tight"])
def test_rounds_over_the_slots_handed_out_equal_rounds_over_every_slot(kv, monkeypatch):
    """The rounds read the slot columns [0, slots_seen) only (Slots.slots_seen: the most slots an engine ever
    held, since free slots are handed out lowest first). Long prompts make the admission budget
    bind at a fraction of max_batch; a fleet made to read every column (slots_seen pinned at max_batch)
    gives bit-identical rollouts, open (arrivals, relay) and closed (drain)."""
    cfg = make_config(Always(k=3), max_batch=128, kv_capacity_tokens=kv)
    works = [make_work(70 + e, groups=6, group_size=8, median=500, cap=1200, prompt=1500) for e in range(4)]
    zs = [np.random.default_rng(e).standard_normal(len(w)) for e, w in enumerate(works)]
    fleets = []
    for pin in (False, True):
        if pin:
            monkeypatch.setattr(Slots, "pop_slots", lambda self, *a, _pop=Slots.pop_slots: _pinned(self, _pop, *a))
        for open_ in (False, True):
            fl = _pool(cfg, works, zs, open_=open_)
            if open_:
                half = [len(w) // 2 for w in works]
                fl.release(np.concatenate([np.arange(fl.resp.off[e], fl.resp.off[e] + half[e]) for e in range(4)]), 0.0, np.arange(4))
                fl.release(np.concatenate([np.arange(fl.resp.off[e] + half[e], fl.resp.off[e + 1]) for e in range(4)]), 5.0,
                           np.arange(4))
            fl.run()
            fl.check()
            fleets.append(fl)
    for a, b in zip(fleets[:2], fleets[2:]):
        assert np.array_equal(a.resp.finish_s, b.resp.finish_s) and np.array_equal(a.engines.t, b.engines.t)
        assert np.array_equal(a.counters.steps, b.counters.steps) and np.array_equal(a.resp.preempt, b.resp.preempt)
    assert all(fl.slots.slots_seen == cfg.max_batch for fl in fleets[2:])
    if kv < 10**6:
        assert max(fl.slots.slots_seen for fl in fleets[:2]) < cfg.max_batch // 2


def _pinned(sl, pop, *args):
    """pop_slots with the high-water mark pinned at max_batch: every round reads every column."""
    out = pop(sl, *args)
    sl.slots_seen = sl.max_batch
    return out


RUN_235B = ROOT / "scenarios" / "235b_run.yaml"


@pytest.mark.parametrize("over", [
    {"pipeline.policy_lag": 1},
    {"pipeline.policy_lag": 0, "speculation.policy": "off"},
    {"pipeline.policy_lag": 3, "pipeline.partial_rollouts": True},   # switches in flight
], ids=["lag1", "lag0-AR", "lag3-in-flight"])
def test_a_windowed_fleet_equals_one_that_holds_the_whole_run(over, monkeypatch):
    """run_pipeline(engine_results=False) lets a fleet hold only the steps in flight (the stream
    takes later steps in and lets finished ones go: sim/fleet/window.rewindow); every step record must be
    bit-identical to the fleet that holds the whole run, and the window must actually have moved."""
    from dataclasses import asdict

    from specsim.scenario import apply_overrides, load_scenario
    from specsim.sim import stream
    from specsim.sim.pipeline import run_pipeline
    from specsim.world.resolve import resolve

    w = resolve(apply_overrides(load_scenario(RUN_235B), {"workload.prompts": 32, "pipeline.steps": 30, **over}))
    whole = run_pipeline(w, replicate=1, engine_results=True)
    moves = []
    real = stream.rewindow

    def counted(fl, keep, new):
        moves.append((int((~keep).sum()), len(new["eng_of"])))
        return real(fl, keep, new)

    monkeypatch.setattr(stream, "rewindow", counted)
    windowed = run_pipeline(w, replicate=1, engine_results=False)
    assert len(moves) >= 2 and sum(gone for gone, _ in moves) > 0
    assert whole.engines and not windowed.engines
    for a, b in zip(whole.records, windowed.records, strict=True):
        for (key, x), y in zip(asdict(a).items(), asdict(b).values()):
            assert x == y or (np.isnan(x) and np.isnan(y)), (key, x, y)


def test_a_rewindow_never_lets_an_unfinished_response_go_and_results_refuse_after_one():
    """Letting go a response that has not finished would lose it: InvariantError. A fleet that let
    responses go has no per-response results to give."""
    from specsim.errors import InvariantError
    from specsim.sim.fleet.window import rewindow

    cfg = make_config(Always(k=3), max_batch=64, kv_capacity_tokens=10**7)
    works = [make_work(e, groups=4, group_size=4, median=300, cap=800, concentration=10.0) for e in range(2)]
    fl = _pool(cfg, works, [np.zeros(len(w)) for w in works])
    none = {name: np.zeros(0, dtype=int) for name in ("eng_of", "ids", "groups", "P", "L", "z", "step_ids")}
    with pytest.raises(InvariantError, match="has not finished"):
        rewindow(fl, np.zeros(fl.resp.N, dtype=bool), none)
    fl.run()
    rewindow(fl, np.arange(fl.resp.N) >= 5, none)
    assert fl.resp.N == len(fl.resp.L) == len(fl.resp.finish_s) and fl.finished_responses() == fl.counters.let_go + fl.resp.N
    with pytest.raises(InvariantError, match="let go"):
        fl.results()


def test_closed_drain_of_a_kv_bound_batch_equals_the_loop_and_records_its_kv():
    """A closed pool whose batches could not hold their whole tail drains each engine up to the
    first segment where the loop would preempt or cut at the KV overflow step; with the drain off
    the same segments come one round at a time. Finish times, preemptions and every timeline row
    (time, active count, KV in use: the drain records the KV of its segments too) agree."""
    from specsim.sim.fleet.drain import tail_fits

    cfg = make_config(Always(k=3), max_batch=48, kv_capacity_tokens=15_000)
    works = [make_work(70 + e, groups=12, group_size=8, median=500, cap=1200, alpha=0.7) for e in range(4)]
    zs = [np.random.default_rng(e).standard_normal(len(w)) for e, w in enumerate(works)]
    kv_bound = []
    real = fleet_module.drain

    def spy(st, D, t_cut=None, watch_step=None):
        fits = tail_fits(st.engines, st.prices, D)
        out = real(st, D, t_cut, watch_step)
        kv_bound.append(int((out & ~fits).sum()))
        return out

    out = []
    for drain in (True, False):
        fl = _pool(cfg, works, zs)
        fl.drainable = drain
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fleet_module, "drain", spy)
            fl.run()
        fl.check()
        out.append(fl)
    a, b = out
    assert sum(kv_bound) > 0 and a.resp.preempt.sum() > 0
    assert np.allclose(a.resp.finish_s, b.resp.finish_s, rtol=1e-9) and np.array_equal(a.resp.preempt, b.resp.preempt)
    for ta, tb in zip(a.timelines(), b.timelines()):
        assert len(ta["t_s"]) == len(tb["t_s"])
        for key in ("t_s", "active", "kv_tokens", "tokens_per_s"):
            assert np.allclose(ta[key], tb[key], rtol=1e-9, equal_nan=False), key


def test_an_engine_takes_only_the_events_due_at_its_own_time():
    """Engines of a pool run at different times. An engine whose next event (a gated switch) is
    due must step past it alone, not also take the next event (a later release) that another
    engine, further on in time, takes in the same pass: it would lose that release as a segment
    cut and admit the released work a whole segment late."""
    cfg = make_config(Always(k=3), max_batch=16, kv_capacity_tokens=10**7)
    works = [make_work(e, groups=2, group_size=4, median=300, cap=800) for e in range(2)]
    fl = _pool(cfg, works, [np.zeros(len(w)) for w in works], open_=True)
    a = np.full(fl.resp.N, 0.5)
    lw = step_law(a, 3, cfg.position_decay)
    fl.release(np.arange(fl.resp.N), 0.0, np.arange(2))
    fl.switch(1.0, SwitchPayload(1, np.arange(fl.resp.N), fl.resp.off.copy(), a,
                                 {3: (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)}, False))
    fl.release(np.zeros(0, dtype=np.int64), 5.0, np.arange(2))
    R = np.arange(2)
    apply_events(fl, R)                     # both at 0: the first release
    fl.engines.t[:] = (1.5, 6.0)                   # engine 0 between the switch and the release, engine 1 past both
    fl.schedule.ev_ptr[1] = 2                       # engine 1 already switched (its next event: the release)
    fl.schedule.next_ev[1] = 5.0
    apply_events(fl, R)
    assert fl.engines.policy_version[0] == 1 and fl.schedule.ev_ptr[0] == 2 and fl.schedule.next_ev[0] == 5.0   # switched (its batch is empty)
    assert fl.schedule.ev_ptr[1] == 3 and fl.schedule.next_ev[1] == INF


@pytest.mark.parametrize("kv", [10**7, 30_000, 12_000], ids=["ample", "tight", "tighter"])
@pytest.mark.parametrize("k", [0, 3])
def test_relay_equals_the_round_by_round_loop(kv, k, monkeypatch):
    """Engines that admit as they finish (a queue longer than the batch) run those rounds in one
    closed-form window (sim/fleet/relay.py). The same open pools with the relay switched off step
    them one round at a time: every response's admission and finish time, its preemptions, every
    engine counter and where each run() call leaves each engine agree to rounding -- under a
    release mid-rollout, a weight switch in flight and gated, stop times and watched steps, small
    and large batches, queues longer than RELAY_QUEUE and budgets that make admissions KV-bound
    and preempt."""
    import dataclasses

    policy = Always(k=k) if k else Off()
    kept, calls, preempted = [], [], 0
    real = fleet_module.relay

    def spy(st, W, t_cut, watch_step=None):
        s0 = st.engines.s[W].copy()
        out = real(st, W, t_cut, watch_step)
        calls.append(len(W))
        kept.append(int((st.engines.s[W] - s0)[out].sum()))
        return out

    monkeypatch.setattr(fleet_module, "relay", spy)
    for seed, max_batch, groups, in_flight in ((0, 4, 24, True), (1, 16, 24, False), (2, 24, 12, False),
                                               (3, 64, 24, True)):
        cfg = dataclasses.replace(make_config(policy, max_batch=max_batch, kv_capacity_tokens=kv),
                                  record_timeline=False)          # a recorded timeline is never relayed
        works, zs, t_late, step_ids = _lagged_work(cfg, seed, groups=groups, concentration=10.0)
        out = []
        for relay in (True, False):
            fl = _pool(cfg, works, zs, open_=True, step_ids=step_ids)
            assert fl.relayable
            fl.relayable = relay
            first = np.flatnonzero(step_ids < 2)
            fl.release(first, 0.0, np.arange(4))
            if k:
                a = np.full(fl.resp.N, 0.5)
                lw = step_law(a, k, cfg.position_decay)
                fl.switch(0.25 * t_late, SwitchPayload(1, np.arange(fl.resp.N), fl.resp.off.copy(), a,
                                                       {k: (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)}, in_flight))
            fl.release(np.setdiff1d(np.arange(fl.resp.N), first), t_late, np.arange(4))
            stops = []
            for until_s, watch in ((0.2 * t_late, None), (INF, 0), (0.9 * t_late, None), (INF, 1), (INF, 2), (INF, None)):
                fl.run(until_s=until_s, watch_step=watch)
                stops.append((fl.engines.t.copy(), fl.engines.s.copy(), fl.engines.n.copy(), fl.queues.qhead.copy()))
            fl.check()
            out.append((fl, stops))
        (a_, stops_a), (b_, stops_b) = out
        for (ta, sa, na, qa), (tb, sb, nb, qb) in zip(stops_a, stops_b):
            assert np.allclose(ta, tb, rtol=1e-9)
            assert np.array_equal(sa, sb) and np.array_equal(na, nb) and np.array_equal(qa, qb)
        assert np.allclose(a_.resp.admit_s, b_.resp.admit_s, rtol=1e-9)
        assert np.allclose(a_.resp.finish_s, b_.resp.finish_s, rtol=1e-9)
        assert np.array_equal(a_.resp.preempt, b_.resp.preempt) and np.array_equal(a_.resp.admit_version, b_.resp.admit_version)
        for name in ("steps", "sd_steps", "seq_steps", "sd_seq_steps", "sd_tokens", "draft_passes", "weighted_active",
                     "prefill_total", "token_sum", "token_batch_sum"):
            assert np.allclose(getattr(a_.counters, name), getattr(b_.counters, name), rtol=1e-9), name
        assert np.allclose(a_.resp.seq_sd_steps, b_.resp.seq_sd_steps, rtol=1e-9)
        assert np.allclose(a_.resp.seq_sd_tokens, b_.resp.seq_sd_tokens, rtol=1e-9, atol=1e-9)
        preempted += int(a_.resp.preempt.sum())
    assert sum(kept) > 0, "the relay never kept a segment: the test no longer covers it"
    if kv < 20_000:
        assert preempted > 0, "the tightest budget no longer preempts"


def _fleet_arrays(fl) -> dict:
    """Every array of a fleet's responses, engines, counters, slots and queues, copied."""
    out = {}
    for part in ("resp", "engines", "counters", "slots", "queues"):
        obj = getattr(fl, part)
        for name in obj.__slots__:
            v = getattr(obj, name)
            if isinstance(v, np.ndarray):
                out[f"{part}.{name}"] = v.copy()
    return out


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), kv=st.integers(6_000, 12_000), max_batch=st.sampled_from([32, 64]),
       policy=st.sampled_from([Off(), Always(k=3), Threshold(k=5, max_batch=24)]), open_=st.booleans())
def test_kv_chain_is_the_round_by_round_loop_bit_for_bit(seed, kv, max_batch, policy, open_):
    """A pool that thrashes its KV budget runs its chains of overflow-step preemptions (no finish
    between them) in one round (Fleet._kv_chain) with the round's own phases: the same pool with
    the chain switched off steps them one round at a time, and every array of the two fleets is
    identical, bit for bit (the drain and the relay off on both sides: their closed forms sum an
    engine's segments behind those of the engines sharing the call, so which engines share a call
    moves their sums by rounding). Closed pools and open ones (two releases, a gated weight switch,
    stop times and watched steps as the async stream makes them) of drawn sizes; the chain must
    have run."""
    import dataclasses

    cfg = dataclasses.replace(make_config(policy, max_batch=max_batch, kv_capacity_tokens=kv), record_timeline=False)
    works, zs, t_late, step_ids = _lagged_work(cfg, seed, groups=8)
    out = []
    for chain in (True, False):
        fl = _pool(cfg, works, zs, open_=open_, step_ids=step_ids if open_ else None)
        fl.drainable = fl.open_drainable = fl.relayable = False
        fl.kv_chainable = chain
        if open_:
            first = np.flatnonzero(step_ids < 2)
            fl.release(first, 0.0, np.arange(4))
            if policy.ks[-1]:
                a = np.full(fl.resp.N, 0.5)
                k = policy.ks[-1]
                lw = step_law(a, k, cfg.position_decay)
                fl.switch(0.25 * t_late, SwitchPayload(1, np.arange(fl.resp.N), fl.resp.off.copy(), a,
                                                       {k: (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)}, False))
            fl.release(np.setdiff1d(np.arange(fl.resp.N), first), t_late, np.arange(4))
            for until_s, watch in ((0.2 * t_late, None), (INF, 0), (0.9 * t_late, None), (INF, 1), (INF, None)):
                fl.run(until_s=until_s, watch_step=watch)
        else:
            fl.run()
        fl.check()
        out.append((fl, _fleet_arrays(fl)))
    (chained, a), (stepped, b) = out
    assert chained.kv_chain_boundaries > 0 and stepped.kv_chain_boundaries == 0
    assert chained.resp.preempt.sum() >= chained.kv_chain_boundaries
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
