"""SD policies, one class each: which draft length an engine uses for its next steps.

The registry below is the one list of policies: the scenario schema takes its kinds from it, a
run's key keeps the fields its policy declares, and the engines ask the policy object what they
need (specsim/policy/base.py). Adding a policy is a class in this folder, its entry here and its
fields in the scenario schema (docs/extending.md).
"""

from __future__ import annotations

from typing import Any

from specsim.errors import SpecError
from specsim.policy.base import PolicyContext, SDPolicy, choose_k
from specsim.policy.fixed import Always, Off, Threshold
from specsim.policy.priced import Adaptive, Toggle
from specsim.policy.schedule import Schedule
from specsim.workload.acceptance.shapes import DEFAULT_SIBLING_FACTOR, DraftShape, TopKTree, TreeShape

POLICIES: dict[str, type[SDPolicy]] = {cls.kind: cls for cls in (Off, Always, Threshold, Toggle, Adaptive, Schedule)}
KINDS = tuple(POLICIES)
#: every policy-specific `speculation` field; a run key drops those its policy does not read
POLICY_FIELDS = tuple(dict.fromkeys(f for cls in POLICIES.values() for f in cls.fields))

__all__ = ["KINDS", "POLICIES", "POLICY_FIELDS", "Adaptive", "Always", "Off", "PolicyContext", "SDPolicy",
           "Schedule", "Threshold", "Toggle", "choose_k", "from_section", "policy_class"]


def policy_class(kind: str) -> type[SDPolicy]:
    cls = POLICIES.get(kind)
    if cls is None:
        raise SpecError("speculation.policy", kind, "one of " + ", ".join(KINDS))
    return cls


def _tree(section: Any) -> DraftShape | None:
    """The draft tree the section asks for: `tree_branching` [b_1, ..., b_D] (a tree of depth
    D = k; `tree_sibling_factor` rho, default 0.5), or SGLang's EAGLE beam tree `tree_topk` K with
    `tree_verify_tokens` N (depth k; SGLang's num_steps = k, eagle_topk = K, num_draft_tokens = N);
    workload/acceptance/shapes.py. None: a chain of k drafts."""
    branching = getattr(section, "tree_branching", None)
    topk, n_verify = getattr(section, "tree_topk", None), getattr(section, "tree_verify_tokens", None)
    rho = getattr(section, "tree_sibling_factor", None)
    rho = DEFAULT_SIBLING_FACTOR if rho is None else rho
    if (topk is None) != (n_verify is None):
        raise SpecError("speculation.tree_topk" if topk is None else "speculation.tree_verify_tokens",
                        None, "given together: tree_topk (K) and tree_verify_tokens (N)")
    if branching and topk is not None:
        raise SpecError("speculation.tree_topk", topk, "omitted when tree_branching is given (one tree per scenario)")
    if branching:
        return TreeShape(tuple(branching), rho)
    if topk is not None and section.k > 0:
        return TopKTree(section.k, topk, n_verify, rho)
    return None


def from_section(section: Any) -> SDPolicy:
    """The policy of the scenario's `speculation` section (k and the tree are unused without SD:
    the baselines set policy off)."""
    cls = policy_class(section.policy)
    if cls is Off:
        return Off()
    return cls.from_section(section, _tree(section))
