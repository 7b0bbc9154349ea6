"""The SD policy: which draft length k an engine uses for its next steps.

A policy sees the engine's batch state (active sequences n, total context C) and returns k
(0 = plain autoregressive decoding). Engines consult it whenever the batch changes (admission,
finish, preemption); between those events n is fixed and so is the choice. Each policy is one
class (specsim/policy/__init__.py lists them); what the engines need to know of one is here:

- ``choose(n, rate)``: k for every engine at once (a vector over engines). A policy that prices
  its choice (``priced``) is given ``rate[i, e]``, the predicted tokens per second of engine e at
  ``ks[i]`` (:meth:`PolicyContext.rates`, or the fleet's per-engine estimate); the others read
  only n. An empty engine (n = 0) gets 0.
- ``batch_dependent``: k can change when n does (the engines re-evaluate it at every batch
  change); a policy that is not keeps one k for its whole life, which the engines' closed-form
  drains and relays rely on.
- ``ks``: every k it may return (the cost table must cover them); ``k_field``: the scenario field
  that holds the largest; ``fields``: the `speculation` fields it reads (its run key keeps those
  and drops the other policies' fields); ``label``: how outputs name it.

α̂ is the engine's acceptance estimate (`speculation.acceptance_estimate`): the drafter's mean α at
this RL step ("drafter"), or the α whose τ at the draft length used equals the acceptance length
the engine measured over its SD steps of the previous RL step ("measured", as EfficientRollout's
engine freezes it at each rollout's wake-up: sim/cluster.measured_alpha_estimates). The two differ
where the sequences running during SD steps accept differently from the whole population. With
acceptance falling with the context (`drafter.context_curve`), the drafter's α̂ is taken at the
batch's mean context, α̂(C / n) = min(s · α̂ · ρ(C / n), α_max) (workload/acceptance/context.py), as
the engines accept: priced at the short-context α a toggle kept SD on deep into a long tail where
it loses. A measured α̂ already holds the curve's effect (it is what the engine accepted) and is
taken as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from specsim.cost.step import StepCostTable
from specsim.errors import SpecError
from specsim.workload.acceptance.context import ContextAcceptance
from specsim.workload.acceptance.drafter import expected_tokens_per_verify
from specsim.workload.acceptance.shapes import DraftShape

ESTIMATES = ("drafter", "measured")


@dataclass(frozen=True)
class SDPolicy:
    """A draft-length policy (the module docstring says what a subclass declares). `k`: the draft
    length it speculates at (the largest, for a policy with several); `tree`: a draft tree at
    depth k instead of a chain; `estimate`: where α̂ comes from."""

    kind: ClassVar[str] = ""
    #: the `speculation` fields this policy reads besides the tree and the acceptance estimate
    fields: ClassVar[tuple[str, ...]] = ("k",)
    #: the scenario field that holds the largest draft length
    k_field: ClassVar[str] = "k"
    batch_dependent: ClassVar[bool] = False
    priced: ClassVar[bool] = False
    #: may draft a fixed token tree (a priced policy prices a chain's τ)
    tree_ok: ClassVar[bool] = False

    k: int = 0
    tree: DraftShape | None = None
    estimate: str = "drafter"

    def __post_init__(self):
        if self.k < 0:
            raise SpecError("speculation.k", self.k, ">= 0")
        if self.estimate not in ESTIMATES:
            raise SpecError("speculation.acceptance_estimate", self.estimate, " or ".join(ESTIMATES))
        if self.tree is not None:
            if not self.tree_ok:
                raise SpecError("speculation.tree_branching", self.tree.label,
                                "only with policy always or threshold (a fixed tree), not " + self.kind)
            if self.k != self.tree.depth:
                raise SpecError("speculation.k", self.k,
                                f"the tree's depth {self.tree.depth} (len(speculation.tree_branching))")

    # ---------------------------------------------------------------- what it may return
    @property
    def ks(self) -> tuple[int, ...]:
        """Every k this policy may return (the cost table must cover them)."""
        return (0, self.k)

    @property
    def k_top(self) -> int:
        return max(self.ks)

    @property
    def tree_label(self) -> str:
        return "" if self.tree is None else self.tree.label

    @property
    def k_label(self) -> str:
        return self.tree_label if self.tree is not None else f"k={self.k}"

    @property
    def label(self) -> str:
        raise NotImplementedError

    def tree_for(self, k: int) -> DraftShape | None:
        """The draft tree a step at draft length k verifies (None: a chain of k drafts)."""
        return self.tree if self.tree is not None and k == self.tree.depth and k > 0 else None

    # ---------------------------------------------------------------- the choice
    def choose(self, n: np.ndarray, rate: np.ndarray | None = None) -> np.ndarray:
        """k (int64) for engines with `n` active sequences; `rate[i, e]` (priced policies only):
        engine e's predicted tokens per second at ks[i]."""
        raise NotImplementedError

    @staticmethod
    def speculates(spec: dict[str, Any]) -> bool:
        """Whether the scenario's `speculation` section (as a dict) drafts at all under this
        policy (run keys name a policy that never drafts `off`)."""
        return True

    @classmethod
    def from_section(cls, section: Any, tree: DraftShape | None) -> SDPolicy:
        """This policy from the scenario's `speculation` section (its fields by name)."""
        return cls(k=section.k, tree=tree, estimate=getattr(section, "acceptance_estimate", "drafter"))


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may read: the engine's cost table and its acceptance estimate. `context`:
    the drafter's acceptance curve over the context when the estimate is the drafter's own
    short-context α (None: no curve, or a measured estimate that already holds it)."""

    table: StepCostTable
    alpha_estimate: float
    position_decay: float = 1.0
    proposal_rate: float = 1.0   # share of request-steps with a draft: tokens/step = 1 + p(τ − 1)
    context: ContextAcceptance | None = None

    def alpha_for(self, n_active: int, total_ctx_tokens: float) -> float:
        """α̂ for a batch of n_active sequences holding total_ctx_tokens: at their mean context
        under a context curve, else the estimate itself."""
        if self.context is None or n_active <= 0:
            return self.alpha_estimate
        return float(self.context.alpha_at(self.alpha_estimate, total_ctx_tokens / n_active))

    def rates(self, ks: tuple[int, ...], n_active: int, total_ctx_tokens: float) -> np.ndarray:
        """Predicted tokens per second of one engine at each k of `ks`, shape (len(ks), 1):
        τ̂(α̂, k) ÷ the cost table's step time at (k, n, C); τ̂ through the proposal rate."""
        k_arr = np.asarray(ks)
        rows = np.array([self.table.index(int(k)) for k in k_arr])
        step_s = self.table.fixed_s[rows, n_active] + self.table.per_ctx_s[rows, n_active] * total_ctx_tokens
        tau = expected_tokens_per_verify(np.full(len(k_arr), self.alpha_for(n_active, total_ctx_tokens)), k_arr,
                                         self.position_decay)
        if self.proposal_rate != 1.0:
            tau = 1.0 + self.proposal_rate * (tau - 1.0)
        return (tau / step_s)[:, None]


def choose_k(policy: SDPolicy, ctx: PolicyContext, n_active: int, total_ctx_tokens: float) -> int:
    """The draft length for one engine with `n_active` sequences holding `total_ctx_tokens` of
    context (the reference and per-engine engines call this; the fleet calls ``choose``)."""
    if n_active <= 0:
        return 0
    if not policy.batch_dependent:
        return int(policy.ks[-1])
    rate = ctx.rates(policy.ks, n_active, total_ctx_tokens) if policy.priced else None
    return int(policy.choose(np.array([n_active]), rate)[0])
