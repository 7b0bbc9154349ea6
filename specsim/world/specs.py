"""The run-time objects a simulation takes: frozen specs with no schema behind them.

`world/resolve.py` builds a `World` from a validated Scenario once; the simulator (sim/) reads only the
specs here, never the schema, so sim/ imports nothing from scenario/resolve/sweep/report. Every
field is already checked (layouts fit, KV holds the longest sequence, the trainer fits its pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost.forward import prefill_batches_s
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import MemoryPlan
from specsim.cost.step import StepCostTable
from specsim.cost.training import TrainingLayout
from specsim.policy import SDPolicy
from specsim.workload.acceptance.context import ContextAcceptance
from specsim.workload.acceptance.drafter import DrafterAcceptance
from specsim.workload.lengths import LengthDistribution


@dataclass(frozen=True)
class WorkloadSpec:
    """What one RL step generates: `prompts` GRPO groups of `group_size` responses; lengths are
    drawn from the world's distributions, capped, correlated within a group (`group_correlation`)
    and scaled by (1 + length_growth_per_step)^step."""

    seed: int
    prompts: int
    group_size: int
    max_prompt_tokens: int
    max_response_tokens: int
    group_correlation: float
    length_growth_per_step: float


@dataclass(frozen=True)
class RolloutSpec:
    """The generation pool: `gpus` GPUs as data-parallel engines, each batching up to `max_batch`
    sequences (vLLM max_num_seqs) in KV blocks of `kv_block_tokens`; groups go to engines by
    `dispatch` (round_robin | least_loaded)."""

    gpus: int
    max_batch: int
    kv_block_tokens: int
    dispatch: str


@dataclass(frozen=True)
class PipelineSpec:
    """The RL loop: `mode` sync (colocated) or async (split pools, `policy_lag` versions of
    staleness allowed, `partial_rollouts` = in-flight weight updates), `steps` simulated of which
    the first `warmup_steps` are left out of steady-state means; `reward_s` per step;
    `engine_prepare_s` per weight update of a colocated (sync) pool: waking the sleeping rollout
    engine and the refit bookkeeping that no bandwidth term covers (fitted, not derived);
    `data_s` per step: loading the step's prompt batch, on the critical path of a sync step (before
    its generation) and, async, only for the first batch (the data loader prefetches the next
    batches while the engines work, as NeMo-RL's async trajectory collector does);
    `max_groups_in_flight` (async): most prompt groups generating at once, a released group starting
    when an earlier one's last response finishes (sim/stream.py); None: no limit."""

    name: str
    mode: str
    steps: int
    warmup_steps: int
    policy_lag: int
    partial_rollouts: bool
    reward_s: float
    engine_prepare_s: float = 0.0
    data_s: float = 0.0
    max_groups_in_flight: int | None = None

    @property
    def fill_steps(self) -> int:
        """Steps that belong to the pipeline's fill, not its steady state: async, steps 0..L are
        all admitted at t = 0 (versions 0..L need no trained update) and finish together in one
        burst, and step L + 1's generation window starts at that burst's end, so steps below L + 2
        are fill; a sync pipeline has none (each step starts from an idle pool)."""
        return self.policy_lag + 2 if self.mode == "async" else 0

    @property
    def steady_from_step(self) -> int:
        """The first step of the steady-state means: after the configured warm-up and the fill,
        keeping at least the last step."""
        return min(max(self.warmup_steps, self.fill_steps), self.steps - 1)

    @property
    def steady_includes_fill(self) -> bool:
        """Too few steps for a steady window past the fill: the means then include fill steps."""
        return self.steady_from_step < self.fill_steps


@dataclass(frozen=True)
class TrainerSpec:
    """The trainer: its layout (GPUs, parallelism), how weights reach the rollout engines
    (`weight_sync`: cost/training.WEIGHT_SYNCS) and the share of tokens an online drafter update trains on."""

    layout: TrainingLayout
    weight_sync: str
    update_token_fraction: float


@dataclass(frozen=True)
class World:
    """A scenario resolved into specs. `engines` data-parallel rollout engines of `layout`.

    `scenario` is the schema object the world came from, kept for the layers above the simulator
    (reports, doctor); the simulator never reads it. `context`: the drafter's acceptance falling
    with the context (drafter.context_curve with its normalising scale), None when not configured.
    `hw` is the rollout pool's profile; `train_hw` the trainer pool's when it differs
    (`training.hardware`, async only), else None (`trainer_hw` gives whichever applies)."""

    scenario: Any
    hw: HardwareSpec
    model: ModelSpec
    drafter: DrafterArch
    layout: ParallelLayout
    memory: MemoryPlan
    kv_capacity_tokens: int
    engines: int
    policy: SDPolicy
    acceptance: DrafterAcceptance
    response_dist: LengthDistribution
    prompt_dist: LengthDistribution
    table: StepCostTable
    workload: WorkloadSpec
    rollout: RolloutSpec
    pipeline: PipelineSpec
    trainer: TrainerSpec
    context: ContextAcceptance | None = None
    train_hw: HardwareSpec | None = None

    @property
    def trainer_hw(self) -> HardwareSpec:
        """The trainer pool's profile: `train_hw` when the pools differ (`training.hardware`), else
        `hw`. `hw` is always the rollout pool's (the engines, their memory plan and step table)."""
        return self.train_hw if self.train_hw is not None else self.hw

    @property
    def mixed_hardware(self) -> bool:
        """The trainer and the engines run on different profiles."""
        return self.train_hw is not None and self.train_hw.name != self.hw.name

    def prefill_fn(self):
        """Prices prefill passes given as sums (see cost/forward.prefill_batches_s)."""
        return partial(prefill_batches_s, self.model, self.hw, self.layout)

    @property
    def name(self) -> str:
        return self.pipeline.name

def steady_fill_warning(ps) -> str:
    """The warning for an async run too short to have a steady step past its fill
    (`PipelineSpec.fill_steps`)."""
    return (f"pipeline.steps = {ps.steps} leaves no steady step after the async pipeline's fill (steps 0-"
            f"{ps.fill_steps - 1} at policy_lag {ps.policy_lag}): its steady means include fill steps; "
            f"run at least {ps.fill_steps + 1} steps")
