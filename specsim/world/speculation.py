"""SD policies: which draft length k an engine uses for its next steps.

A policy sees the engine's batch state (active sequences n, total context C) and returns k
(0 = plain autoregressive decoding). Engines consult it whenever the batch changes (admission,
finish, preemption); between those events n is fixed and so is the choice.

* off            k = 0
* always(k)      k
* threshold(k, max_batch)   k while n <= max_batch, else 0 — a fixed batch threshold: speculate
                 only once the shrinking batch is memory-bound
* toggle(k, margin)         k while the predicted SD speedup τ(α̂, k) · step_s(0) / step_s(k, n, C)
                 is >= 1 + margin, else 0 — EfficientRollout's roofline toggle
                 (github.com/furiosa-ai/EfficientRollout: vLLM core.py _check_sd_toggle, sd_toggle/
                 predict.py should_enable_sd, margin 0.05 in its run scripts), priced by the engine's
                 own cost table instead of its fitted roofline. Its engine also latches SD on for the
                 rest of a rollout once enabled; in a closed rollout the running batch only shrinks,
                 so the test rarely flips back, and specsim re-evaluates it at every batch change.
* adaptive(k_max)           argmax over k in 0..k_max of expected tokens per second
                 n·τ(α̂, k) / step_s(k, n, C)  — ReSpec's / EfficientRollout's acceptance-aware
                 choice, priced by the same cost table the engine uses.

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

import numpy as np

from specsim.cost.step import StepCostTable
from specsim.errors import SpecError
from specsim.workload.acceptance.context import ContextAcceptance
from specsim.workload.acceptance.drafter import expected_tokens_per_verify
from specsim.workload.acceptance.shapes import DEFAULT_SIBLING_FACTOR, DraftShape, TopKTree, TreeShape

KINDS = ("off", "always", "threshold", "toggle", "adaptive")


@dataclass(frozen=True)
class SDPolicy:
    """A draft-length policy. `kind`: off | always | threshold | toggle | adaptive; `margin` is the
    toggle's required predicted speedup above 1; `estimate` where α̂ comes from (module docstring)."""

    kind: str
    k: int = 0
    max_batch: int = 0
    k_max: int = 0
    tree: DraftShape | None = None
    margin: float = 0.0
    estimate: str = "drafter"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SpecError("speculation.policy", self.kind, "one of " + ", ".join(KINDS))
        if self.k < 0 or self.k_max < 0:
            raise SpecError("speculation.k", self.k, ">= 0")
        if self.margin < 0:
            raise SpecError("speculation.toggle_margin", self.margin, ">= 0")
        if self.estimate not in ("drafter", "measured"):
            raise SpecError("speculation.acceptance_estimate", self.estimate, "drafter or measured")
        if self.tree is not None:
            if self.kind not in ("always", "threshold"):   # toggle / adaptive price a chain's τ
                raise SpecError("speculation.tree_branching", self.tree_label,
                                "only with policy always or threshold (a fixed tree), not " + self.kind)
            if self.k != self.tree.depth:
                raise SpecError("speculation.k", self.k,
                                f"the tree's depth {self.tree.depth} (len(speculation.tree_branching))")

    @property
    def tree_label(self) -> str:
        if self.tree is None:
            return ""
        return self.tree.label

    def tree_for(self, k: int) -> DraftShape | None:
        """The draft tree a step at draft length k verifies (None: a chain of k drafts)."""
        return self.tree if self.tree is not None and k == self.tree.depth and k > 0 else None

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
        k = self.tree_label if self.tree is not None else f"k={self.k}"
        return {"off": "off", "always": f"always({k})",
                "threshold": f"threshold({k}, max_batch={self.max_batch})",
                "toggle": f"toggle({k}, margin={self.margin:g})",
                "adaptive": f"adaptive(k<={self.k_max})"}[self.kind]


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
    tau = expected_tokens_per_verify(np.full(len(ks), ctx.alpha_for(n_active, total_ctx_tokens)), ks,
                                     ctx.position_decay)
    if ctx.proposal_rate != 1.0:
        tau = 1.0 + ctx.proposal_rate * (tau - 1.0)
    rate = tau / step_s
    if policy.kind == "toggle":   # ks == (0, k): predicted speedup rate_k / rate_0
        return policy.k if rate[1] >= (1.0 + policy.margin) * rate[0] else 0
    return int(ks[int(np.argmax(rate))])


def from_section(section) -> SDPolicy:
    """Build a policy from the scenario's `speculation` section.

    `tree_branching` [b_1, ..., b_D] (optional): draft a token tree of depth D = k instead of a
    chain (workload/acceptance/shapes.py); `tree_sibling_factor` its sibling factor rho (default 0.5).
    `tree_topk` K with `tree_verify_tokens` N (optional, instead of tree_branching): SGLang's
    EAGLE beam tree of depth k (workload/acceptance/shapes.py; SGLang's num_steps = k, eagle_topk = K,
    num_draft_tokens = N).
    """
    if section.policy == "off":  # k and the tree are unused without SD (the baselines set this)
        return SDPolicy("off")
    branching = getattr(section, "tree_branching", None)
    topk, n_verify = getattr(section, "tree_topk", None), getattr(section, "tree_verify_tokens", None)
    rho = getattr(section, "tree_sibling_factor", None)
    rho = DEFAULT_SIBLING_FACTOR if rho is None else rho
    tree = None
    if (topk is None) != (n_verify is None):
        raise SpecError("speculation.tree_topk" if topk is None else "speculation.tree_verify_tokens",
                        None, "given together: tree_topk (K) and tree_verify_tokens (N)")
    if branching and topk is not None:
        raise SpecError("speculation.tree_topk", topk, "omitted when tree_branching is given (one tree per scenario)")
    if branching:
        tree = TreeShape(tuple(branching), rho)
    elif topk is not None and section.k > 0:
        tree = TopKTree(section.k, topk, n_verify, rho)
    if section.policy == "always" and section.k == 0:
        if tree is not None:
            raise SpecError("speculation.k", 0, f"the tree's depth {tree.depth} (a tree needs k = depth)")
        return SDPolicy("off")
    return SDPolicy(section.policy, k=section.k, max_batch=section.max_batch, k_max=section.k_max, tree=tree,
                    margin=getattr(section, "toggle_margin", 0.05) if section.policy == "toggle" else 0.0,
                    estimate=getattr(section, "acceptance_estimate", "drafter"))
