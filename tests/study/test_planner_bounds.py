"""The plan's bounds (study/planner/bounds.py) are lower bounds of the simulated steady step: on
small cases across lag, draft length, group shape and KV pressure, every candidate's bound is at
or below the step its plain run simulates (each replicate), and the tail term prices the group
at its batch: never below the longest member alone at batch 1."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from specsim.scenario import apply_overrides, load_scenario
from specsim.study.executors import execute
from specsim.study.planner import bounds as bounds_mod
from specsim.study.planner.bounds import BoundModel
from specsim.study.planner.candidates import candidate_scenario, enumerate_candidates
from specsim.study.sweep import RunTask
from tests.study.test_planner import TINY

PLAN_235B = Path(__file__).resolve().parents[2] / "scenarios" / "235b_plan.yaml"


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    import yaml

    p = tmp_path_factory.mktemp("bounds") / "tiny.yaml"
    p.write_text(yaml.safe_dump(TINY))
    return p


#: variations of the tiny case: larger groups and correlated lengths (a heavier tail group), a
#: KV cache that holds a few sequences per engine (KV-bound: preemptions and queueing), lag 0..2
CASES = [
    {},
    {"workload.group_size": 8, "workload.group_correlation": 0.8},
    {"rollout.gpu_memory_utilization": 0.3, "workload.max_response_tokens": 4096,
     "workload.response_tokens": {"kind": "lognormal", "median": 1500, "p99": 4000}},
    {"workload.prompts": 16, "plan.max_policy_lag": 2, "pipeline.steps": 8, "pipeline.warmup_steps": 4},
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_candidates_bound_is_below_its_simulated_steps(tiny_file, case):
    sc = apply_overrides(load_scenario(tiny_file), CASES[case])
    cands, _ = enumerate_candidates(sc, sc.plan)
    bm = BoundModel(sc)
    checked = 0
    for c in cands:
        b = bm.bound(c)
        for rep in (0, 1):
            res = execute(RunTask.of(candidate_scenario(sc, c), rep, "plan"))
            if "error" in res:
                continue
            checked += 1
            assert b.step_s <= res["steady"]["step_s"], (case, c.label(), rep, b, res["steady"]["step_s"])
    assert checked > 0


def test_the_tail_prices_the_group_at_its_batch_and_context():
    """With f(r) = r (concave from 0) and no context cost, a group of members of 4, 2 and 1 steps
    costs 2 · 1 + 1 · 2 + 1 · 3 = 7 (three together for one step, two for one more, one for two
    more); at a constant f it is the longest member's steps; the context term adds c · area."""
    steps = np.array([[4.0, 2.0, 1.0]])
    groups = bounds_mod.TailGroups((steps,), (np.array([10.0]),), (7.0,))
    linear = np.arange(0, 8, dtype=float)
    assert bounds_mod._tail_s(groups, linear, 0.0)[0] == pytest.approx(7.0)
    assert bounds_mod._tail_s(groups, np.array([0.0] + [5.0] * 7), 0.0)[0] == pytest.approx(4 * 5.0)
    assert bounds_mod._tail_s(groups, linear, 0.5)[0] == pytest.approx(7 + 5.0)


def test_kv_bound_pools_are_the_costliest_runs():
    """run_cost_key marks the 235B plan's TP2·EP2 pools KV-bound (their KV cache holds fewer
    mean-context sequences than max_batch: the runs that preempt all step long) and its TP8 pools
    not, so a wave hands the TP2·EP2 runs over first; among batch-bound pools a smaller pool (more
    responses per engine) comes first."""
    sc = load_scenario(PLAN_235B)
    cands, _ = enumerate_candidates(sc, sc.plan)
    bm = BoundModel(sc)

    def key(layout, gpus):
        c = next(c for c in cands if c.layout == layout and c.rollout_gpus == gpus and c.k == 3)
        return bm.run_cost_key(c)

    tp2ep2, tp8, tp8_big = key((2, 2, 1), 340), key((8, 1, 1), 336), key((8, 1, 1), 1704)
    assert tp2ep2[0] and not tp8[0] and not tp8_big[0]
    assert tp2ep2 > tp8 > tp8_big


def test_a_batch_hands_its_runs_over_costliest_first():
    """_Runner.batch submits its runs ordered by their candidates' cost keys, costliest first,
    ties in the order given; every result still reaches its candidate."""
    search_mod = importlib.import_module("specsim.study.planner.search")
    sc = load_scenario(PLAN_235B)
    cands, _ = enumerate_candidates(sc, sc.plan)
    evs = [search_mod.Evaluated(c) for c in cands[:5]]
    for e, k in zip(evs, [(False, 1.0), (True, 0.5), (False, 3.0), (True, 2.0), (False, 1.0)]):
        e.cost_key = k

    class Store:
        def __init__(self):
            self.submitted: list[str] = []

        def answer(self, task):
            return None

        def results(self, tasks, **kw):
            self.submitted = [t.key for t in tasks]
            for t in tasks:
                kw["on_result"](t, {"key": t.key, "error": "not run"})

    store = Store()
    runner = search_mod._Runner(sc, store, search_mod.SearchState(evs), 1, "local", None, "fast", None, None)
    runner.batch([(e, 0) for e in evs], 1)
    position = {e.keys[0]: i for i, e in enumerate(evs)}
    assert [position[k] for k in store.submitted] == [3, 1, 2, 0, 4]
    assert all(e.status == "infeasible" for e in evs)
