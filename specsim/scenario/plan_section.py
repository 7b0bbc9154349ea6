"""The scenario's `plan:` section: what `specsim plan` searches over and what it optimises.

A plan names a budget (total GPUs, one count or several), the GPU types, the constraints the
algorithm and the deployment put on a configuration (the policy lag it tolerates, the SD policies
and draft lengths allowed, the rollout layouts and rollout:training splits allowed) and an
objective. `specsim run` ignores it (run keys leave it out); `specsim plan` reads it, each field
overridable on the command line (`--set plan.total_gpus=[512,1024]` or the plan command's flags).
The search itself is :mod:`specsim.study.planner`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from specsim.scenario.base import Strict, field_error

__all__ = ["PAIR_SEP", "LayoutChoice", "PlanSearchSection", "PlanSection", "hardware_pair", "plan_hardware_names"]


#: how a plan's GPU-type entry names a mixed pair: TRAINING+ROLLOUT
PAIR_SEP = "+"


def hardware_pair(entry: str) -> tuple[str, str]:
    """(training profile, rollout profile) of a `plan.hardware` entry: `gb200+h200_sxm` is GB200
    training and H200 generating; a plain name is both pools."""
    parts = [p.strip() for p in entry.split(PAIR_SEP)]
    return (parts[0], parts[-1])


def plan_hardware_names(entries) -> list[str]:
    """Every profile name the entries of `plan.hardware` use (a pair counts both)."""
    return [name for e in (entries or ()) for name in dict.fromkeys(hardware_pair(e))]


class LayoutChoice(Strict):
    """One allowed rollout engine layout: tensor, expert and pipeline parallel degrees."""

    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel degree of one engine")
    ep: int = Field(default=1, ge=1, le=4096, description="expert-parallel degree (MoE only; 1 or a multiple of tp)")
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline stages of one engine")


class PlanSearchSection(Strict):
    """How the plan's search spends simulations.

    Survivors of the analytic bounds are simulated with successive halving: every one at one
    replicate, the best `keep_fraction` of each arm (AR / SD) at each GPU count that could still
    win, and every one that could be on its arm's front, go on to the next round (each judged by
    the paired per-step noise, or `keep_within` where that is larger), the last round runs
    `replicates` replicates. Replicate r of every candidate draws the same responses (paired)."""

    replicates: int = Field(default=3, ge=1, le=100, description=(
        "replicates of each finalist (the last halving round); 95 % t-intervals need ≥ 2"))
    steps: int | None = Field(default=None, ge=2, le=10000, description=(
        "RL steps per simulated candidate (null: `pipeline.steps`); `pipeline.warmup_steps` must stay below it"))
    halving_rounds: int = Field(default=2, ge=1, le=10, description=(
        "successive-halving rounds: the first runs replicate 0 of every surviving candidate, the last "
        "`replicates`; between them the replicate count grows geometrically"))
    keep_fraction: float = Field(default=0.25, gt=0, le=1, description=(
        "share of each arm's candidates (per GPU count and GPU type) kept after a halving round"))
    keep_within: float = Field(default=0.0, ge=0, le=10, description=(
        "a floor on the noise margin: also keep every candidate whose mean step time is within this "
        "relative margin of its arm's best or of a point that dominates it (0: the paired per-step noise "
        "alone decides; exact ties are always kept)"))
    bound_slack: float = Field(default=0.9, gt=0, le=1, description=(
        "the analytic step-time bounds are multiplied by this before they prune (a margin for the bounds' "
        "expected-length terms; 1 prunes hardest)"))


#: the most GPU budgets one plan searches (each multiplies the candidates; enumerating 12,500
#: budgets took minutes before a single run)
MAX_BUDGETS = 256


class PlanSection(Strict):
    """The plan: budget, constraints and objective of `specsim plan`.

    Candidates are GPU type × total GPUs × rollout:training split (async) × rollout layout × SD
    policy and k × policy lag ≤ `max_policy_lag`; AR (`k = 0`) is always one arm. The trainer keeps
    the scenario's `training` layout (tp, pp, ep); the training pool is the rest of the budget, in
    whole trainer replicas. Prices ($ per GPU-hour) are `output.gpu_hour_usd`. See `docs/plan.md`."""

    total_gpus: int | list[int] | None = Field(default=None, description=(
        "the GPU budget: one count or a list of counts (a range: list it, or `--gpus 512:2048:512`); null: the "
        "scenario's total GPUs"))
    hardware: list[str] | None = Field(default=None, description=(
        "GPU types to consider (hardware profile names); an entry `TRAINING+ROLLOUT` (`gb200+h200_sxm`: GB200 "
        "trains, H200 generates; async only) is one mixed pair of pools; null: the scenario's own profiles "
        "(`hardware`, or `training.hardware+rollout.hardware` when they differ)"))
    max_policy_lag: int = Field(default=1, ge=0, le=64, description=(
        "largest policy lag the algorithm tolerates (async; NeMo-RL `max_trajectory_age_steps`, default 1): lags "
        "0 … this are candidates"))
    sd_policies: list[Literal["always", "threshold", "schedule"]] = Field(default_factory=lambda: ["always"], description=(
        "SD policies allowed (`threshold` speculates only while the batch is ≤ `speculation.max_batch`; `schedule` "
        "drafts by the scenario's `speculation.k_per_batch_size` table, its k clamped to each candidate's k)"))
    k: list[int] = Field(default_factory=lambda: [0, 3, 5, 7], description=(
        "draft lengths allowed; 0 is AR (always evaluated: the AR arm)"))
    layouts: list[LayoutChoice] | None = Field(default=None, description=(
        "rollout engine layouts allowed; null: every tp × ep × pp (powers of two, at most `max_engine_gpus` GPUs "
        "per engine, pp ≤ 2) that fits the model and the memory plan"))
    max_engine_gpus: int = Field(default=8, ge=1, le=4096, description=(
        "default layout enumeration: the most GPUs one rollout engine may span"))
    rollout_shares: list[float] | None = Field(default=None, description=(
        "async: allowed shares of the budget that generate (the rest trains); each is rounded down to whole "
        "engines and the trainer to whole replicas; null: `split_grid` shares evenly spaced in (0, 1)"))
    split_grid: int = Field(default=7, ge=1, le=64, description=(
        "async, `rollout_shares` null: how many rollout shares the default grid has (i/(n+1), i = 1 … n)"))
    target_step_s: float | None = Field(default=None, gt=0, description=(
        "target step time (s): needed by the `min_gpus` and `min_gpu_hours` objectives, optional with `min_usd` (the "
        "cheapest that reaches it); with `min_step_time` it is marked on the fronts"))
    objective: Literal["min_step_time", "min_gpus", "min_gpu_hours", "min_usd"] = Field(
        default="min_step_time", description=(
            "min_step_time: the fastest step at the budget; min_gpus / min_gpu_hours: the fewest GPUs / GPU-hours per "
            "step that reach `target_step_s`; min_usd: the fewest dollars per step (GPU-hours × `output.gpu_hour_usd` "
            "of its GPU type; every GPU type of the plan needs a price), those that reach `target_step_s` if given"))
    max_usd_per_hour: float | None = Field(default=None, gt=0, description=(
        "a budget in $ per hour of the cluster: a candidate whose GPUs (rollout + training) × its GPU type's "
        "`output.gpu_hour_usd` cost more per hour is left out before it is simulated (every GPU type needs a price)"))
    run_steps: int | None = Field(default=None, ge=1, le=10**7, description=(
        "RL steps of the whole training run: the answer also quotes $ and GPU-hours per run (per step × this); "
        "null: per step only"))
    search: PlanSearchSection = Field(default=PlanSearchSection(), description="how the search spends simulations")

    @field_validator("total_gpus")
    @classmethod
    def _gpus(cls, v):
        vals = [v] if isinstance(v, int) else v
        if vals is not None and (not vals or any(isinstance(x, bool) or x < 1 or x > 10**6 for x in vals)):
            raise ValueError("a whole number of GPUs >= 1 or a non-empty list of them")
        if vals is not None and len(set(vals)) > MAX_BUDGETS:
            raise ValueError(f"at most {MAX_BUDGETS} GPU budgets (each is a plan of its own; this list has "
                             f"{len(set(vals)):,}): a coarser range, e.g. --gpus 512:8192:512")
        return v

    @field_validator("hardware", "layouts")
    @classmethod
    def _non_empty(cls, v, info):
        if v is not None and not v:
            raise ValueError(f"a non-empty list, or null for the default ({info.field_name}: [] allows nothing)")
        return v

    @field_validator("hardware")
    @classmethod
    def _pairs(cls, v):
        for entry in v or ():
            parts = entry.split(PAIR_SEP)
            if len(parts) > 2 or not all(p.strip() for p in parts):
                raise ValueError(f"{entry!r}: a profile name or one TRAINING{PAIR_SEP}ROLLOUT pair "
                                 f"(e.g. gb200{PAIR_SEP}h200_sxm)")
        return v

    @field_validator("k")
    @classmethod
    def _ks(cls, v):
        if not v or any(isinstance(x, bool) or x < 0 or x > 32 for x in v):
            raise ValueError("a non-empty list of draft lengths 0..32 (0 = AR)")
        return sorted(set(v))

    @field_validator("rollout_shares")
    @classmethod
    def _shares(cls, v):
        if v is not None and (not v or any(not 0 < x < 1 for x in v)):
            raise ValueError("a non-empty list of shares strictly between 0 and 1")
        return v

    @model_validator(mode="after")
    def _target(self):
        if self.objective in ("min_gpus", "min_gpu_hours") and self.target_step_s is None:
            raise field_error("target_step_s", None, f"a target step time (s) for objective {self.objective}")
        return self

    def gpu_counts(self, scenario_total: int) -> list[int]:
        """The budget's GPU counts, ascending."""
        v = self.total_gpus
        if v is None:
            return [int(scenario_total)]
        return sorted({int(x) for x in ([v] if isinstance(v, int) else v)})
