"""sim/select.py: the one place that picks the engine of a pool, for every `engine` name."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import make_config

from specsim.policy import Always
from specsim.sim.fleet.state import FLEET_MIN_ENGINES, FLEET_MIN_ENGINES_AMPLE_KV
from specsim.sim.select import ENGINES, EngineChoice, pick_engine
from specsim.workload.acceptance.context import ContextAcceptance, ContextCurve

PROMPT = np.full(4096, 500, dtype=np.int64)
LENGTHS = np.full(4096, 2000, dtype=np.int64)
AMPLE_KV, TIGHT_KV = 10**9, 1000.0
FLAT = make_config(Always(k=3))
FALLING = make_config(Always(k=3), context=ContextAcceptance(ContextCurve((200.0, 1300.0), (1.0, 0.2))))


def pick(engine, cfg=FLAT, engines=FLEET_MIN_ENGINES, kv=AMPLE_KV):
    return pick_engine(engine, cfg, engines, 64, kv, PROMPT, LENGTHS)


def test_fast_runs_the_fleet_where_it_pays_else_the_per_engine_fast_engine():
    """"fast": the fleet from FLEET_MIN_ENGINES engines whatever the KV, from
    FLEET_MIN_ENGINES_AMPLE_KV when every batch fits; below, the per-engine fast engine."""
    fleet, per_engine = EngineChoice(fleet=True, fast=True), EngineChoice(fleet=False, fast=True)
    assert pick("fast", engines=FLEET_MIN_ENGINES, kv=TIGHT_KV) == fleet
    assert pick("fast", engines=FLEET_MIN_ENGINES_AMPLE_KV, kv=AMPLE_KV) == fleet
    assert pick("fast", engines=FLEET_MIN_ENGINES_AMPLE_KV, kv=TIGHT_KV) == per_engine
    assert pick("fast", engines=FLEET_MIN_ENGINES_AMPLE_KV - 1, kv=AMPLE_KV) == per_engine


@pytest.mark.parametrize("engines", [1, 4, FLEET_MIN_ENGINES])
def test_each_name_picks_its_engine(engines):
    """"fleet" forces the fleet ("fleet_v1_inputs" on the per-engine fast engine's inputs), "fast_v1"
    the per-engine fast engine, "reference" the reference engine, whatever the pool's size."""
    assert pick("fleet", engines=engines) == EngineChoice(fleet=True, fast=True)
    assert pick("fleet_v1_inputs", engines=engines) == EngineChoice(fleet=True, fast=True, v1_inputs=True)
    assert pick("fast_v1", engines=engines) == EngineChoice(fleet=False, fast=True)
    assert pick("reference", engines=engines) == EngineChoice(fleet=False, fast=False)


@pytest.mark.parametrize("engine", ENGINES)
def test_acceptance_falling_with_context_never_runs_on_the_fleet(engine):
    """The fleet keys no per-sequence context rate (fleet/state.fleet_supports): every name runs
    the per-engine engine then."""
    assert not pick(engine, cfg=FALLING).fleet


def test_an_unknown_engine_name_is_refused():
    with pytest.raises(ValueError, match="fleet_v2.*fast, fleet, fleet_v1_inputs, fast_v1, reference"):
        pick("fleet_v2")
