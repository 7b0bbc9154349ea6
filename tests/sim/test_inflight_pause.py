"""The in-flight weight load (sim/stream.StreamCluster.switch_all, `pause_s`): NeMo-RL's in-flight
update reaches each vLLM engine as an RPC its core runs between two steps, so every engine stops
for the load at its first step boundary from the switch on. Closed form: a switch at t = 0, before
any engine has stepped, delays every finish of the step by exactly the pause, on every engine kind;
a pause of 0 changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specsim.scenario import apply_overrides, load_scenario
from specsim.sim.cluster import draw_step
from specsim.sim.stream import StreamCluster
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "8b_rl_think_sync.yaml"
SMALL = {"workload.prompts": 16, "rollout.gpus": 4, "pipeline.steps": 2, "pipeline.warmup_steps": 1,
         "pipeline.mode": "async", "training.gpus": 4, "pipeline.policy_lag": 1, "pipeline.partial_rollouts": True}


@pytest.fixture(scope="module")
def world():
    return resolve(apply_overrides(load_scenario(SCEN), SMALL))


def _finish_of_step0(world, engine: str, pause_s: float) -> float:
    draws = [draw_step(world, i, 0) for i in range(2)]
    alpha0 = float(world.acceptance.alpha_at_version(0))
    stream = StreamCluster(world, draws, alpha0, engine=engine)
    stream.release_step(0, 0.0)
    stream.switch_all(0.0, 1, alpha0, in_flight=True, pause_s=pause_s)
    finish = stream.advance(0, float("inf"))
    assert finish is not None
    return finish


@pytest.mark.parametrize("engine", ["fast", "fleet", "reference"])
def test_a_load_at_the_start_delays_every_finish_by_the_pause(world, engine):
    base = _finish_of_step0(world, engine, 0.0)
    for pause_s in (0.5, 7.25):
        assert np.isclose(_finish_of_step0(world, engine, pause_s), base + pause_s, rtol=0, atol=1e-9)


def test_an_in_flight_switch_without_a_pause_keeps_the_run(world):
    """pause_s = 0 is the switch as it was: the same finish on each engine kind as no switch at all
    (the switch at t = 0 carries the same acceptance)."""
    draws = [draw_step(world, i, 0) for i in range(2)]
    alpha0 = float(world.acceptance.alpha_at_version(0))
    for engine in ("fast", "fleet", "reference"):
        stream = StreamCluster(world, draws, alpha0, engine=engine)
        stream.release_step(0, 0.0)
        assert stream.advance(0, float("inf")) == _finish_of_step0(world, engine, 0.0)
