"""What one process keeps across runs (sim/cluster.draw_step's draws with their dispatch, engine
order, noise and grid positions; sim/pipeline's trainer step costs) changes no number: a run with
everything kept from earlier runs equals the same run computed afresh, record for record."""

import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.scenario import load_scenario
from specsim.sim import cluster
from specsim.sim.cluster import draw_step
from specsim.sim.fleet.state import stable_order
from specsim.sim.pipeline import forget_reuse, run_pipeline
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "scenarios" / "235b_async.yaml"
#: the main job's pool (384 engines, fleet, windowed stream, weight switches) at 1/16 of its batch
SMALL = ["sweep={}", "workload.prompts=256", "pipeline.steps=6", "pipeline.warmup_steps=2"]


def _world(*over: str):
    return resolve(load_scenario(MAIN, [*SMALL, *over]))


def _records(world, replicate: int = 0) -> list[dict]:
    return [asdict(r) for r in run_pipeline(world, replicate=replicate, engine_results=False).records]


def _same(a: list[dict], b: list[dict]) -> bool:
    """Every field equal, NaN equal to NaN (an AR run's τ)."""
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(x[k] == y[k] or (isinstance(x[k], float) and math.isnan(x[k])
                                                     and math.isnan(y[k])) for k in x)
        for x, y in zip(a, b))


def test_a_run_after_others_equals_the_run_computed_afresh():
    """The sweep's order inside one worker: points sharing a replicate's draws with other k and
    lag, a sync baseline on another pool size, then the same point again."""
    point = ("speculation.k=5", "pipeline.policy_lag=1")
    forget_reuse()
    fresh = _records(_world(*point), replicate=1)
    for over in (("speculation.k=0", "pipeline.policy_lag=2"), ("speculation.k=3", "pipeline.policy_lag=0"),
                 ("pipeline.mode=sync", "speculation.policy=off", "training.gpus=null", "rollout.gpus=2048")):
        _records(_world(*over), replicate=1)
    again = _records(_world(*point), replicate=1)
    assert _same(fresh, again)
    forget_reuse()
    assert _same(fresh, _records(_world(*point), replicate=1))


def test_draws_are_shared_read_only_and_keyed_by_what_they_depend_on():
    forget_reuse()
    w5, w0 = _world("speculation.k=5"), _world("speculation.k=0", "pipeline.policy_lag=3")
    d = draw_step(w5, 2, 1)
    assert draw_step(w0, 2, 1) is d                    # k and lag are not inputs of a draw
    assert draw_step(w5, 2, 0) is not d and draw_step(w5, 3, 1) is not d
    assert draw_step(_world("workload.prompts=128"), 2, 1) is not d
    for a in (d.prompt_tokens, d.response_tokens, d.alpha_quantiles):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 0
    forget_reuse()
    again = draw_step(w5, 2, 1)
    assert again is not d and again.engine_seed == d.engine_seed
    for a, b in ((again.prompt_tokens, d.prompt_tokens), (again.response_tokens, d.response_tokens),
                 (again.alpha_quantiles, d.alpha_quantiles)):
        assert np.array_equal(a, b)


def test_the_draw_cache_holds_at_most_its_responses(monkeypatch):
    forget_reuse()
    w = _world()
    per_step = w.workload.prompts * w.workload.group_size
    monkeypatch.setattr(cluster, "DRAW_CACHE_RESPONSES", 3 * per_step)
    draws = []
    for j in range(5):
        draws.append(draw_step(w, j))
        cluster.step_memo(draws[-1])["mark"] = j        # kept with the draw while it is cached
    assert ["mark" in cluster.step_memo(d) for d in draws] == [False, False, True, True, True]
    assert draw_step(w, 4) is draws[4] and draw_step(w, 0) is not draws[0]
    forget_reuse()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 70_000), max_size=300), st.integers(0, 2))
def test_stable_order_is_the_stable_argsort(keys, shift):
    x = np.asarray(keys, dtype=np.int64) + shift
    assert np.array_equal(stable_order(x), np.argsort(x, kind="stable"))


def test_a_simulation_process_imports_no_scipy_stats_or_optimize():
    """scipy.stats and scipy.optimize cost a worker ~0.5 and ~0.35 s of start-up for nothing the
    main job's runs call (the τ inversions load scipy.optimize at their first call)."""
    code = ("import sys; import specsim.sim.pipeline, specsim.world.resolve, specsim.study.executors; "
            "print(sorted(m for m in ('scipy.stats', 'scipy.optimize') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

