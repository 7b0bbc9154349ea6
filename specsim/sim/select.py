"""Which engine runs a rollout pool: the one place that picks it (simulate_generation's barrier
phase and the async stream both ask `pick_engine`).

The `engine` option of run_pipeline and simulate_generation names one of ENGINES:

* "fast" (default): the fleet engine (sim/fleet/) where it supports the config
  (fleet/state.fleet_supports) and pays for this pool (fleet/state.fleet_pays: enough engines, or
  enough whose batches fit their KV budget), else the per-engine fast engine (sim/engine/);
* "fleet": the fleet wherever it supports the config, else the per-engine fast engine;
* "fleet_v1_inputs": "fleet" given exactly the per-engine fast engine's inputs — one noise stream
  per engine and step, steps-to-finish laws computed per response (cluster.exact_laws) instead of
  one stream per step and the tabulated laws (cluster.QuantileLaws) — so it reproduces "fast_v1"
  to rounding: how the tests hold the fleet's logic to the engine it replaced;
* "fast_v1": the per-engine fast engine (the engine the fleet replaced; sim/engine/);
* "reference": the per-engine reference engine, one iteration at a time (sim/reference.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.common import EngineConfig
from specsim.sim.fleet.state import fleet_pays, fleet_supports

ENGINES = ("fast", "fleet", "fleet_v1_inputs", "fast_v1", "reference")


@dataclass(frozen=True)
class EngineChoice:
    """What runs a pool: the fleet (every engine at once, in arrays), or one engine per replica,
    fast (event to event) or reference (iteration by iteration)."""

    fleet: bool
    fast: bool      # per-engine: the fast engine (else the reference engine); the fleet is fast
    v1_inputs: bool = False   # the fleet on the per-engine fast engine's noise and exact laws


def pick_engine(engine: str, cfg: EngineConfig, n_engines: int, max_batch: int, kv_capacity_tokens: float,
                prompt: np.ndarray, lengths: np.ndarray) -> EngineChoice:
    """The engine that runs a pool of `n_engines` sharing `cfg`, for the `engine` option (ENGINES).
    `prompt`, `lengths`: the prompt and response tokens of every response of the pool's (first)
    step, which decide whether the fleet pays. An unknown name is a ValueError naming the allowed."""
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if fleet_supports(cfg) and (engine in ("fleet", "fleet_v1_inputs") or (engine == "fast" and fleet_pays(
            n_engines, max_batch, kv_capacity_tokens, prompt, lengths))):
        return EngineChoice(fleet=True, fast=True, v1_inputs=engine == "fleet_v1_inputs")
    return EngineChoice(fleet=False, fast=engine != "reference")
