"""A scenario against its baseline: scenario editing for paired comparisons (the sweep layer).

`baseline_scenario` applies the scenario's `pipeline.baseline` overrides (default: SD off);
`compare` runs both on the same draws (common random numbers, sim/cluster.draw_step), so the
speedups are paired. This lives above sim/: the simulator takes resolved worlds, never schemas.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.scenario import Scenario, apply_overrides
from specsim.sim.pipeline import PipelineResult, run_pipeline
from specsim.world.resolve import resolve


@dataclass
class Comparison:
    """A scenario (variant) against its baseline (by default the same scenario with SD off)."""

    variant: PipelineResult
    baseline: PipelineResult

    @property
    def generation_speedup(self) -> float:
        """Baseline over variant generation time per step: sync, the rollout phase; async (continuous
        generation), the pool's time between consecutive steps' last finishes (gen_window_s)."""
        return self.baseline.steady()["gen_window_s"] / self.variant.steady()["gen_window_s"]

    @property
    def e2e_speedup(self) -> float:
        return self.baseline.steady()["step_s"] / self.variant.steady()["step_s"]

    @property
    def generation_share(self) -> float:
        """The baseline's steady generation time over its steady step time."""
        b = self.baseline.steady()
        return b["gen_window_s"] / b["step_s"]

    @property
    def exposed_generation_saving_s(self) -> float:
        return self.baseline.steady()["exposed_generation_s"] - self.variant.steady()["exposed_generation_s"]

    def summary(self) -> dict[str, float]:
        return {"generation_share": self.generation_share, "generation_speedup": self.generation_speedup,
                "e2e_speedup": self.e2e_speedup, "exposed_generation_saving_s": self.exposed_generation_saving_s}


def baseline_scenario(sc: Scenario) -> Scenario:
    """The scenario with `pipeline.baseline` overrides applied (default: speculation.policy=off)."""
    return apply_overrides(sc, dict(sc.pipeline.baseline))


def compare(sc: Scenario, *, engine: str = "fast", replicate: int = 0) -> Comparison:
    """Run the scenario and its baseline on the same draws (common random numbers)."""
    variant = run_pipeline(resolve(sc), engine=engine, replicate=replicate)
    baseline = run_pipeline(resolve(baseline_scenario(sc)), engine=engine, replicate=replicate)
    return Comparison(variant, baseline)
