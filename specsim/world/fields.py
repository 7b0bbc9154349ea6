"""Which scenario field a lower layer's parameter is.

cost/, workload/, catalog/ and sim/ know nothing of the scenario: their SpecErrors name their own
parameters (`alpha`, `staleness.floor_alpha`, `tree.branching`, `k`). The world layer builds their
inputs from the scenario, so it is the layer that knows which field each parameter came from;
`resolve` re-raises every SpecError under the scenario path this table gives, and leaves names
it does not know (already a scenario path, or a file's own field) as they are. A parameter's
element keeps its suffix: `context_curve[1][0]` is `drafter.context_curve[1][0]`.
"""

from __future__ import annotations

from collections.abc import Mapping

#: lower-layer parameter name -> dotted scenario field
SCENARIO_FIELDS: Mapping[str, str] = {
    "alpha": "drafter.alpha",
    "position_decay": "drafter.position_decay",
    "heterogeneity": "drafter.heterogeneity",
    "ref_temperature": "drafter.tau_temperature",
    "temperature": "workload.temperature",
    "staleness": "drafter.staleness",
    "staleness.floor_alpha": "drafter.staleness.floor_alpha",
    "staleness.rate_per_version": "drafter.staleness.rate_per_version",
    "staleness.after_versions": "drafter.staleness.after_versions",
    "staleness.tau_after": "drafter.staleness.tau_after",
    "tau": "drafter.tau",
    "tau_k": "drafter.tau_at_k",
    "update_every_steps": "drafter.update_every_steps",
    "context_curve": "drafter.context_curve",
    "proposal_rate": "drafter.proposal_rate",
    "drafter_kind": "drafter.kind",
    "draft_vocab": "drafter.draft_vocab",
    "k": "speculation.k",
    "tree.branching": "speculation.tree_branching",
    "tree.sibling_factor": "speculation.tree_sibling_factor",
    "tree.depth": "speculation.k",
    "tree.topk": "speculation.tree_topk",
    "tree.verify_tokens": "speculation.tree_verify_tokens",
    "per_step_growth": "workload.length_growth_per_step",
    "lengths": "workload.response_tokens",
    "max_lengths": "workload.max_response_tokens",
    "group_correlation": "workload.group_correlation",
    "steps": "pipeline.steps",
    "weight_sync": "training.weight_sync",
}


def scenario_field(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The scenario path of a lower layer's parameter `name` (`overrides` first, e.g. a tree built
    from the drafter section, whose depth is `drafter.tau_at_k`); unknown names pass through."""
    tables = (overrides, SCENARIO_FIELDS) if overrides else (SCENARIO_FIELDS,)
    for table in tables:
        if name in table:
            return table[name]
    for table in tables:   # a parameter's element or member: context_curve[1][0], staleness.x
        for cut in sorted((i for i, ch in enumerate(name) if ch in ".["), reverse=True):
            if name[:cut] in table:
                return table[name[:cut]] + name[cut:]
    return name
