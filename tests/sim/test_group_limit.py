"""A limit on prompt groups in flight (`pipeline.max_groups_in_flight`, sim/stream.py): NeMo-RL's
async collector starts a group only while fewer than `num_prompts_per_step ×
max_trajectory_age_steps` are generating, and a group holds its place until its last response
finishes. Invariants: at no time do more groups run than the limit, on every engine kind; one
place on one engine runs the groups one after another, each admitted when the one before it
ends; a limit no step reaches changes nothing; the fast engines agree with the reference one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.sim import stream
from specsim.sim.pipeline import run_pipeline
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "8b_rl_think_sync.yaml"
SMALL = {"workload.prompts": 8, "workload.group_size": 4, "rollout.gpus": 2, "pipeline.steps": 3,
         "pipeline.warmup_steps": 1, "pipeline.mode": "async", "training.gpus": 4, "pipeline.policy_lag": 1}
ENGINES = ("fleet", "fast", "reference")


@pytest.fixture(scope="module")
def small():
    return apply_overrides(load_scenario(SCEN), SMALL)


def _groups(world, res) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (step, group) of the run, in FIFO order: the first admission and the last finish of its
    responses, and its index in that order."""
    size = world.workload.group_size
    per_step = world.workload.prompts * size
    ids = np.concatenate([e.response_ids for e in res.engines])
    admit = np.concatenate([e.admit_s for e in res.engines])
    finish = np.concatenate([e.finish_s for e in res.engines])
    gid = ids // per_step * world.workload.prompts + (ids % per_step) // size
    n = int(gid.max()) + 1
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, gid, admit)
    np.maximum.at(last, gid, finish)
    return first, last, np.arange(n)


def _run(sc, engine: str, **over):
    world = resolve(apply_overrides(sc, over) if over else sc)
    return world, run_pipeline(world, engine=engine, engine_results=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(1, 6), lag=st.integers(0, 2), engine=st.sampled_from(ENGINES))
def test_groups_in_flight_never_exceed_the_limit(small, limit, lag, engine):
    world, res = _run(small, engine, **{"pipeline.max_groups_in_flight": limit, "pipeline.policy_lag": lag})
    first, last, _ = _groups(world, res)
    assert np.isfinite(first).all() and np.isfinite(last).all()
    # a group runs from (at the latest) its first admission to its last finish; count the running
    # groups just after every admission
    running = [(first <= t) & (t < last) for t in first]
    assert max(int(r.sum()) for r in running) <= limit


@pytest.mark.parametrize("engine", ENGINES)
def test_one_place_runs_the_groups_one_after_another(small, engine):
    """Limit 1 on one engine: group k + 1 (FIFO: step by step, group by group) is admitted when
    group k's last response finishes, never before, and at most one slice later (the engine,
    idle once group k ends, has run on to the slice's end: sim/stream.GROUP_SLICE_SHARE)."""
    world, res = _run(small, engine, **{"pipeline.max_groups_in_flight": 1, "rollout.gpus": 1})
    first, last, _ = _groups(world, res)
    gap = first[1:] - last[:-1]
    assert np.all(gap >= -1e-9)
    slice_bound = stream.GROUP_SLICE_SHARE * float(np.max(last - first)) + stream.GROUP_SLICE_MIN_S
    assert np.all(gap <= slice_bound + 0.05), (gap.max(), slice_bound)    # + one engine step
    assert np.mean(gap) < 0.5 * slice_bound + 0.05


@pytest.mark.parametrize("engine", ENGINES)
def test_a_limit_no_step_reaches_changes_nothing(small, engine):
    """With a place for every group of the steps in flight (lag 1: two steps' groups), every step
    record is the run's without a limit, bit for bit."""
    base = run_pipeline(resolve(small), engine=engine)
    roomy = run_pipeline(resolve(apply_overrides(small, {"pipeline.max_groups_in_flight": 2 * 8})), engine=engine)
    assert [r.step_end_s for r in roomy.records] == [r.step_end_s for r in base.records]
    assert [r.exposed_generation_s for r in roomy.records] == [r.exposed_generation_s for r in base.records]


def test_a_tight_limit_is_priced_alike_by_every_engine(small):
    """The fast engines' step ends within 1 % of the reference engine's (mean over steps) under a
    limit that binds (3 places for 8 groups a step)."""
    sc = apply_overrides(small, {"pipeline.max_groups_in_flight": 3})
    ref = run_pipeline(resolve(sc), engine="reference")
    limited = resolve(sc)
    for engine in ("fleet", "fast"):
        res = run_pipeline(limited, engine=engine)
        f = np.mean([r.gen_window_s for r in res.records])
        r = np.mean([x.gen_window_s for x in ref.records])
        assert abs(f - r) / r < 0.01, (engine, f, r)
    free = np.mean([x.step_end_s for x in run_pipeline(resolve(small), engine="reference").records])
    assert np.mean([x.step_end_s for x in ref.records]) > free      # it binds: the steps take longer


def test_the_limit_is_checked_and_async_only(small):
    with pytest.raises(ScenarioError, match="max_groups_in_flight"):
        apply_overrides(small, {"pipeline.max_groups_in_flight": 0})
    sync = apply_overrides(small, {"pipeline.mode": "sync", "training.gpus": None, "pipeline.max_groups_in_flight": 4})
    assert resolve(sync).pipeline.max_groups_in_flight is None
