"""The plan's Pareto fronts and dominance rule as properties over synthetic candidates (no
simulation): every front point is non-dominated, every finalist off the front is dominated by a
front point, only equal-replicate finalists enter, intervals overlap symmetrically; and halving
keeps every candidate a front could need."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specsim.study.planner.candidates import Candidate
from specsim.study.planner.report import fronts
from specsim.study.planner.search import Evaluated, _keep, dominates

REPS = 2


def _ev(i: int, gpus: int, steps: list[float], arm: str = "sd") -> Evaluated:
    c = Candidate("h100_sxm", 16, gpus // 2, gpus - gpus // 2, (1, 1, 1), "off" if arm == "ar" else "always",
                  0 if arm == "ar" else 3, 1, 6, cid=f"c{i}")
    e = Evaluated(c, status="simulated")
    e.steady = {r: {"step_s": s, "tau": 2.0} for r, s in enumerate(steps)}
    return e


points = st.lists(st.tuples(st.integers(2, 16), st.lists(st.floats(1.0, 100.0), min_size=1, max_size=REPS)),
                  min_size=1, max_size=12)


@given(points)
def test_front_points_are_exactly_the_non_dominated_finalists(pts):
    evs = [_ev(i, g, s) for i, (g, s) in enumerate(pts)]
    front = fronts(evs, replicates=REPS)["sd"]
    final = [e for e in evs if len(e.steady) >= REPS]
    on = {p["candidate"] for p in front}
    assert on <= {e.cand.cid for e in final}                      # equal replicates only
    for e in final:
        m, g = e.mean_step(), e.cand.total_gpus
        beaten = any(dominates(o.mean_step(), o.cand.total_gpus, m, g, "min_step_time")
                     and (o.mean_step(), o.cand.total_gpus * o.mean_step()) != (m, g * m) for o in final)
        if e.cand.cid in on:
            assert not beaten
        else:
            assert beaten or any(p["step_s"] == m and p["gpu_hours_per_step"] <= g * m / 3600 for p in front)
    for p in front:                                                # overlaps are symmetric
        for q in p["overlaps"]:
            assert p["candidate"] in next(x["overlaps"] for x in front if x["candidate"] == q)
    xs = [p["gpu_hours_per_step"] for p in front]
    ys = [p["step_s"] for p in front]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)     # cheaper is slower along the front


@given(points, st.floats(0.0, 0.2))
def test_halving_keeps_every_candidate_not_dominated_by_the_margin(pts, within):
    evs = [_ev(i, g, s[:1]) for i, (g, s) in enumerate(pts)]
    kept = {id(e) for e in _keep(evs, 0.25, within)}
    for e in evs:
        m, g = e.mean_step(), e.cand.total_gpus
        if not any(dominates(o.mean_step(), o.cand.total_gpus, m, g, "min_step_time", within) for o in evs):
            assert id(e) in kept
    assert id(min(evs, key=Evaluated.mean_step)) in kept          # the fastest always goes on


def test_dominance_for_min_gpus_also_needs_no_more_gpus():
    assert dominates(10.0, 8, 12.0, 16, "min_step_time")
    assert not dominates(10.0, 16, 12.0, 8, "min_gpus")          # faster but on more GPUs
    assert not dominates(10.0, 16, 12.0, 8, "min_step_time")     # 160 > 96 GPU-seconds per step
    assert not dominates(10.0, 8, 10.2, 8, "min_step_time", margin=0.03)


def _paired(i: int, gpus: int, steps: list[float]) -> Evaluated:
    """A candidate with one replicate whose steady steps 4, 5, … are `steps` (paired by index)."""
    e = _ev(i, gpus, [sum(steps) / len(steps)])
    e.series = {0: {4 + j: s for j, s in enumerate(steps)}}
    return e


@given(st.lists(st.floats(50.0, 100.0), min_size=3, max_size=8), st.floats(0.0, 1.0),
       st.lists(st.floats(0.0, 5.0), min_size=8, max_size=8))
def test_halving_drops_as_cannot_win_only_what_trails_by_more_than_its_noise(base, offset, noise):
    """Paired per-step series: a candidate is dropped as "cannot win" only when its mean trails the
    best's by more than `keep_within` and by more than the one-sided t limit of the per-step
    difference; a constant offset (no noise) within `keep_within` always goes on."""
    from scipy import stats

    from specsim.study.planner.search import WIN_CONFIDENCE, could_still_win

    best = _paired(0, 8, base)
    other = _paired(1, 8, [b * (1 + offset) + n for b, n in zip(base, noise)])
    far = _paired(2, 8, [b + 100.0 for b in base])     # far behind by a constant: no noise, on the same GPUs
    kept = _keep([best, other, far], 1.0, 0.03)
    assert best in kept and far not in kept and far.dropped == "cannot win"
    if other not in kept:
        assert other.dropped == "cannot win" and not could_still_win(other, best, 0.03)
        d = [other.series[0][j] - best.series[0][j] for j in best.series[0]]
        m = sum(d) / len(d)
        se = (sum((x - m) ** 2 for x in d) / (len(d) - 1)) ** 0.5 / len(d) ** 0.5
        assert m > 0.03 * best.mean_step() and m > stats.t.ppf(WIN_CONFIDENCE, len(d) - 1) * se


def test_a_candidate_that_cannot_win_still_runs_when_the_front_needs_it():
    """Slower but on fewer GPUs (fewer GPU-hours per step): on its arm's front, so it goes on."""
    best = _paired(0, 16, [10.0, 10.0, 10.0])
    cheap = _paired(1, 4, [20.0, 20.0, 20.0])
    kept = _keep([best, cheap], 1.0, 0.03)
    assert cheap in kept and cheap.dropped == ""


series = st.lists(st.floats(50.0, 100.0), min_size=3, max_size=8)


@given(series, st.lists(st.tuples(st.integers(4, 16), st.floats(0.0, 0.1), st.floats(0.0, 3.0)),
                        min_size=1, max_size=8), st.sampled_from(["min_step_time", "min_gpus"]))
def test_halving_leaves_out_only_what_a_kept_point_dominates_beyond_its_noise(base, others, objective):
    """Paired series (noise, offset, GPUs): every candidate halving leaves out is dominated beyond
    the paired noise by another (`dominated_beyond_noise`) or, in its arm's best quarter, cannot win;
    the fastest always goes on; of two candidates with the same series and GPUs neither dominates."""
    from specsim.study.planner.search import could_still_win, dominated_beyond_noise

    evs = [_paired(0, 8, base)]
    for i, (g, off, amp) in enumerate(others, start=1):
        evs.append(_paired(i, g, [b * (1 + off) + amp * ((j * 7919 + i) % 5 - 2) for j, b in enumerate(base)]))
    evs.append(_paired(len(evs), evs[-1].cand.total_gpus, list(evs[-1].series[0].values())))   # an exact twin
    kept = _keep(evs, 0.25, 0.0, objective)
    best = min(evs, key=Evaluated.mean_step)
    assert best in kept
    assert not dominated_beyond_noise(evs[-1], evs[-2], objective) and not dominated_beyond_noise(evs[-2], evs[-1],
                                                                                                  objective)
    for e in evs:
        if e not in kept:
            assert any(dominated_beyond_noise(e, d, objective) for d in evs if d is not e) or \
                (e.dropped == "cannot win" and not could_still_win(e, best, 0.0))


def test_near_ties_without_noise_are_left_out_and_exact_ties_kept():
    """The trainer-bound finalists: 1 % slower by a constant (no noise) on more GPUs is dominated and
    left out (a fixed 3 % margin kept it); the same series on the same GPUs is kept beside the best;
    on fewer GPUs (fewer GPU-hours per step) it stays for the front."""
    base = [100.0, 101.0, 99.5, 100.5, 100.2, 99.8]
    best = _paired(0, 2032, base)
    twin = _paired(1, 2032, base)
    near = _paired(2, 2036, [b * 1.01 for b in base])
    cheaper = _paired(3, 2000, [b * 1.01 for b in base])
    kept = _keep([best, twin, near, cheaper], 0.25, 0.0)
    assert best in kept and twin in kept and cheaper in kept and near not in kept
    assert near not in _keep([best, near], 1.0, 0.0) and near.dropped == "cannot win"
    assert near in _keep([best, near], 1.0, 0.03)          # keep_within is a floor on the margin


@given(st.lists(st.tuples(st.integers(4, 16), series), min_size=1, max_size=6), st.integers(4, 16),
       st.floats(0.0, 0.05), st.sampled_from(["min_step_time", "min_gpus"]))
def test_a_run_stops_only_where_a_simulated_candidate_dominates_it_beyond_the_noise(sims, gpus, within, objective):
    """stop_thresholds: a run whose steady mean ends above its threshold is slower, and costs more
    GPU-hours per step, than some simulated candidate of its arm by more than that one's noise
    margin (`step_noise_s`, or `within`; for min_gpus on no more GPUs): it could be neither the best
    nor on the front. The threshold is never below the fastest simulated mean."""
    from specsim.study.planner.search import step_noise_s, stop_thresholds

    evs = [_paired(i, g, s) for i, (g, s) in enumerate(sims)]
    new = _paired(len(evs), gpus, [1.0, 1.0, 1.0])
    new.status = "pending"
    limit = stop_thresholds([*evs, new], [new], objective, within).get(id(new))
    refs = [d for d in evs if objective != "min_gpus" or d.cand.total_gpus <= gpus]
    if not refs:
        assert limit is None
        return
    assert limit is not None and limit >= min(d.mean_step() for d in refs)
    above = limit * (1 + 1e-9)
    assert any(dominates(d.mean_step() + max(step_noise_s(d), within * d.mean_step()), d.cand.total_gpus, above,
                         gpus, objective) for d in refs)


def _pair(i: int, rollout: int, training: int, steps: list[float]) -> Evaluated:
    """A GB200-trains / H200-generates candidate at GB200 $6.0 and H200 $3.5 per GPU-hour."""
    c = Candidate("gb200+h200_sxm", 64, rollout, training, (1, 1, 1), "always", 3, 1, 6, cid=f"p{i}")
    e = Evaluated(c, status="simulated", usd_per_hour=c.usd_per_hour({"gb200": 6.0, "h200_sxm": 3.5}))
    e.steady = {0: {"step_s": steps[0], "tau": 2.0}}
    e.series = {0: {j: s for j, s in enumerate(steps)}}
    return e


def test_a_mixed_pair_is_ranked_and_pruned_in_dollars_as_well_as_gpu_hours():
    """Two splits of a priced mixed pair blend its prices differently: 8 GB200 + 40 H200 (48 GPUs,
    $188/h) at 100 s is more GPU-hours per step than 8 H200 + 32 GB200 (40 GPUs, $220/h) at 100 s
    but fewer dollars, so neither dominates the other; halving, the bound pruning and the stop
    threshold all keep the cheap-in-dollars one, and min_usd ranks it first."""
    from specsim.study.planner.search import _score, dominated_beyond_noise, stop_thresholds

    cheap, lean = _pair(0, 40, 8, [100.0] * 6), _pair(1, 8, 32, [100.0] * 6)
    assert cheap.cand.total_gpus > lean.cand.total_gpus and cheap.usd_per_hour < lean.usd_per_hour
    assert dominates(100.0, 40, 100.0, 48, "min_usd")                     # by GPU-hours alone
    assert not dominates(100.0, 40, 100.0, 48, "min_usd", d_usd_h=lean.usd_per_hour, c_usd_h=cheap.usd_per_hour)
    assert not dominated_beyond_noise(cheap, lean, "min_usd") and not dominated_beyond_noise(lean, cheap, "min_usd")
    assert cheap in _keep([cheap, lean], 0.25, 0.0, "min_usd")
    assert _score(cheap, "min_usd", None) < _score(lean, "min_usd", None)
    pending = _pair(2, 40, 8, [1.0])
    pending.status, pending.series = "pending", {}
    limit = stop_thresholds([lean, pending], [pending], "min_usd", 0.0)[id(pending)]
    assert limit >= 100.0 * lean.usd_per_hour / pending.usd_per_hour     # stops only beyond lean's dollars too
    single = _ev(3, 48, [100.0])
    assert single.pair_usd_per_hour is None                               # one GPU type: GPU-hours decide
