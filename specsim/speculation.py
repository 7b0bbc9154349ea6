"""SD policies: which draft length k an engine uses for its next steps.

A policy sees the engine's batch state (active sequences n, total context C) and returns k
(0 = plain autoregressive decoding). Engines consult it whenever the batch changes (admission,
finish, preemption); between those events n is fixed and so is the choice.

* off            k = 0
* always(k)      k
* threshold(k, max_batch)   k while n <= max_batch, else 0 — EfficientRollout's toggle: speculate
                 only once the shrinking batch is memory-bound
* adaptive(k_max)           argmax over k in 0..k_max of expected tokens per second
                 n·τ(α̂, k) / step_s(k, n, C)  — ReSpec's / EfficientRollout's acceptance-aware
                 choice, priced by the same cost table the engine uses. α̂ is the engine's
                 current acceptance estimate (the drafter's α at this RL step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.cost.forward import StepCostTable
from specsim.errors import SpecError
from specsim.workload.acceptance import expected_tokens_per_verify


@dataclass(frozen=True)
class SDPolicy:
    """A draft-length policy. `kind`: off | always | threshold | adaptive."""

    kind: str
    k: int = 0
    max_batch: int = 0
    k_max: int = 0

    def __post_init__(self):
        if self.kind not in ("off", "always", "threshold", "adaptive"):
            raise SpecError("speculation.policy", self.kind, "one of off, always, threshold, adaptive")
        if self.k < 0 or self.k_max < 0:
            raise SpecError("speculation.k", self.k, ">= 0")

    @property
    def ks(self) -> tuple[int, ...]:
        """Every k this policy may return (the cost table must cover them)."""
        if self.kind == "off":
            return (0,)
        if self.kind == "adaptive":
            return tuple(range(self.k_max + 1))
        return (0, self.k)

    @property
    def label(self) -> str:
        return {"off": "off", "always": f"always(k={self.k})",
                "threshold": f"threshold(k={self.k}, max_batch={self.max_batch})",
                "adaptive": f"adaptive(k<={self.k_max})"}[self.kind]


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may read: the engine's cost table and its acceptance estimate."""

    table: StepCostTable
    alpha_estimate: float
    position_decay: float = 1.0


def choose_k(policy: SDPolicy, ctx: PolicyContext, n_active: int, total_ctx_tokens: float) -> int:
    """The draft length for a batch of `n_active` sequences holding `total_ctx_tokens` of context."""
    if n_active <= 0 or policy.kind == "off":
        return 0
    if policy.kind == "always":
        return policy.k
    if policy.kind == "threshold":
        return policy.k if n_active <= policy.max_batch else 0
    ks = np.asarray(policy.ks)
    rows = np.array([ctx.table.index(int(k)) for k in ks])
    step_s = ctx.table.fixed_s[rows, n_active] + ctx.table.per_ctx_s[rows, n_active] * total_ctx_tokens
    tau = expected_tokens_per_verify(np.full(len(ks), ctx.alpha_estimate), ks, ctx.position_decay)
    return int(ks[int(np.argmax(tau / step_s))])


def from_section(section) -> SDPolicy:
    """Build a policy from the scenario's `speculation` section."""
    if section.policy == "always" and section.k == 0:
        return SDPolicy("off")
    return SDPolicy(section.policy, k=section.k, max_batch=section.max_batch, k_max=section.k_max)
