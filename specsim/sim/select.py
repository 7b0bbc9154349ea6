"""Which engine runs a rollout pool: the one place that picks it (simulate_generation's barrier
phase and the async stream both ask `pick_engine`).

The `engine` option of run_pipeline and simulate_generation names one of ENGINES:

* "fast" (default): the fleet engine (sim/fleet/) where it supports the config
  (fleet/state.fleet_supports) and pays for this pool (fleet/state.fleet_pays: enough engines, or
  enough whose batches fit their KV budget), else the per-engine fast engine (sim/engine/);
* "fleet": the fleet wherever it supports the config, else the per-engine fast engine;
* "fast_v1": the per-engine fast engine (the engine the fleet replaced; sim/engine/);
* "reference": the per-engine reference engine, one iteration at a time (sim/reference.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.common import EngineConfig
from specsim.sim.fleet.state import fleet_pays, fleet_supports

ENGINES = ("fast", "fleet", "fast_v1", "reference")


@dataclass(frozen=True)
class EngineChoice:
    """What runs a pool: the fleet (every engine at once, in arrays), or one engine per replica,
    fast (event to event) or reference (iteration by iteration)."""

    fleet: bool
    fast: bool      # per-engine: the fast engine (else the reference engine); the fleet is fast


def pick_engine(engine: str, cfg: EngineConfig, n_engines: int, max_batch: int, kv_capacity_tokens: float,
                prompt: np.ndarray, lengths: np.ndarray) -> EngineChoice:
    """The engine that runs a pool of `n_engines` sharing `cfg`, for the `engine` option (ENGINES).
    `prompt`, `lengths`: the prompt and response tokens of every response of the pool's (first)
    step, which decide whether the fleet pays. An unknown name is a ValueError naming the allowed."""
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if fleet_supports(cfg) and (engine == "fleet" or (engine == "fast" and fleet_pays(
            n_engines, max_batch, kv_capacity_tokens, prompt, lengths))):
        return EngineChoice(fleet=True, fast=True)
    return EngineChoice(fleet=False, fast=engine != "reference")
