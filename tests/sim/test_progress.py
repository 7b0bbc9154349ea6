"""Progress inside a pipeline run (specsim/sim/progress.py): the hook run_pipeline calls while it runs."""

import json
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

import pytest

from specsim.scenario import apply_overrides, load_scenario
from specsim.sim.pipeline import run_pipeline
from specsim.sim.progress import RunProgress, Ticker
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SYNC = ROOT / "scenarios" / "8b_rl_think_sync.yaml"
ASYNC = ROOT / "scenarios" / "30b_a3b_h100_async.yaml"
SMALL = {"workload.prompts": 16, "workload.group_size": 4, "workload.max_response_tokens": 4096,
         "workload.response_tokens": {"kind": "lognormal", "median": 600, "p99": 3500},
         "pipeline.steps": 4, "pipeline.warmup_steps": 1, "sweep": {}}
CASES = {
    "sync, fleet": (SYNC, {"rollout.gpus": 4}, "fleet"),
    "sync, per-engine": (SYNC, {"rollout.gpus": 4}, "fast_v1"),
    "sync, reference": (SYNC, {"rollout.gpus": 2, "workload.prompts": 4}, "reference"),
    "async, fleet": (ASYNC, {"rollout.gpus": 8, "training.gpus": 16, "pipeline.policy_lag": 1}, "fleet"),
    "async, per-engine": (ASYNC, {"rollout.gpus": 8, "training.gpus": 16, "pipeline.policy_lag": 1}, "fast_v1"),
}


def _world(case: str):
    path, over, engine = CASES[case]
    return resolve(apply_overrides(load_scenario(path), {**SMALL, **over})), engine


def _same(a, b) -> bool:
    """Byte-identical step records and steady means."""
    return json.dumps([asdict(r) for r in a.records]) == json.dumps([asdict(r) for r in b.records]) \
        and json.dumps(a.steady()) == json.dumps(b.steady())


@pytest.mark.parametrize("case", list(CASES))
def test_reports_are_monotone_and_end_at_the_totals(case):
    world, engine = _world(case)
    got: list[RunProgress] = []
    with_hook = run_pipeline(world, engine=engine, progress=got.append, progress_every_s=0.0)
    total = world.pipeline.steps * world.workload.prompts * world.workload.group_size
    assert got[0] == RunProgress(0, world.pipeline.steps, 0, total)           # the start: totals known
    assert got[-1] == RunProgress(world.pipeline.steps, world.pipeline.steps, total, total)
    assert len(got) > 2                                                      # something in between
    for a, b in pairwise(got):
        assert a != b                                                        # no repeated report
        assert a.responses_done <= b.responses_done and a.steps_done <= b.steps_done
        assert (a.steps_total, a.responses_total) == (b.steps_total, b.responses_total)
    # a step is done only after its responses: never more steps done than their responses finished
    per_step = total // world.pipeline.steps
    assert all(p.steps_done * per_step <= p.responses_done for p in got)
    assert _same(with_hook, run_pipeline(world, engine=engine))


def test_inside_a_long_generation_phase_the_count_moves():
    """A sync run's generation phase reports responses finished inside it, not only at its end."""
    world, engine = _world("sync, per-engine")
    got: list[RunProgress] = []
    run_pipeline(world, engine=engine, progress=got.append, progress_every_s=0.0)
    per_step = world.workload.prompts * world.workload.group_size
    assert any(p.responses_done % per_step for p in got)


@pytest.mark.parametrize("case", ["sync, fleet", "async, fleet", "async, per-engine", "235b run, AR"])
def test_throttled_reports_never_pair_fresh_steps_with_a_stale_count(case, monkeypatch):
    """With a throttle, whichever check is due reports: a step's end reported between two counts
    of the engines still carries every response of the steps done (a clock that ticks once per
    read makes the throttle deterministic; the 235B AR run is one where a step's end used to be
    reported with the count of several steps before)."""
    from specsim.sim import progress

    clock = iter(range(10**9))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: float(next(clock)))
    if case == "235b run, AR":
        world, engine = resolve(load_scenario(ROOT / "scenarios" / "235b_run.yaml",
                                              ["pipeline.steps=12", "speculation.policy=off"])), "fast"
    else:
        world, engine = _world(case)
    got: list[RunProgress] = []
    run_pipeline(world, engine=engine, progress=got.append, progress_every_s=5.0)
    per_step = world.workload.prompts * world.workload.group_size
    assert 2 < len(got) and all(p.steps_done * per_step <= p.responses_done for p in got)


def test_a_long_throttle_reports_only_the_start_and_the_end():
    world, engine = _world("async, fleet")
    got: list[RunProgress] = []
    run_pipeline(world, engine=engine, progress=got.append, progress_every_s=3600.0)
    assert [p.responses_done for p in got] == [0, got[-1].responses_total]   # the start and the end only


def test_ticker_offsets_clamps_and_deduplicates():
    got: list[RunProgress] = []
    t = Ticker(got.append, steps_total=2, responses_total=10, every_s=0.0)
    t.responses(3)
    t.responses(2)                 # a smaller count never goes back
    t.base = 5
    t.responses(9)                 # base + 9 > total: clamped
    t.step_done()
    t.finish()
    t.finish()                     # the same report twice: once
    assert [(p.steps_done, p.responses_done) for p in got] == [(0, 0), (0, 3), (0, 10), (1, 10), (2, 10)]
    assert got[-1].fraction == 1.0 and RunProgress(0, 0, 0, 0).fraction == 1.0
