"""Tree drafting: expected accepted length of a token tree (EAGLE-2 / SpecInfer / SGLang style).

Shape. A full tree given by its branching per depth, b = (b_1, ..., b_D): every node at depth
j - 1 (depth 0 is the last accepted token) has b_j drafted children, so depth j holds
N_j = b_1 ... b_j nodes and the tree T = sum_j N_j draft tokens; D is the longest path. A chain
of k drafts is b = (1,) * k.

Acceptance. Verification walks the tree from the root: at depth j the target accepts at most one
of the accepted parent's b_j children (multi-candidate rejection sampling keeps the target
distribution, SpecInfer arXiv 2305.09781), and the walk continues below it; the step emits the
longest accepted path + 1 token. The top-ranked child is accepted with the chain's conditional
probability alpha_j = alpha d^(j-1). Siblings are NOT independent draws -- they are the
drafter's next-best guesses for the same position, accepted mostly when the top guess was close
-- so sibling r (r = 1..b) adds acceptance with a diminishing weight:

    beta_j = 1 - prod_{r=1..b_j} (1 - alpha_j rho^(r-1)),   rho in [0, 1] the sibling factor.

rho = 1 is the optimistic independent-candidate bound 1 - (1 - alpha_j)^b; rho = 0 makes extra
siblings worthless (the chain). Then

    S_j = P(path accepted to depth >= j) = prod_{i<=j} beta_i,   E[emitted] = 1 + sum_j S_j,

the chain formula with alpha_j replaced by beta_j, so every chain function (pmf, sampling) applies
per depth. rho is a HEURISTIC (default 0.5, not fitted): calibrate it from a tree-vs-chain tau
pair measured on the same drafter before trusting tree predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecError
from specsim.workload.acceptance_args import _alpha_array, _decay_array

__all__ = ["DEFAULT_SIBLING_FACTOR", "TreeShape", "tree_depth_acceptance", "tree_expected_tokens"]

#: Default sibling factor rho (heuristic, see the module docstring).
DEFAULT_SIBLING_FACTOR = 0.5


@dataclass(frozen=True)
class TreeShape:
    """A full draft tree: `branching[j]` children per node at depth j + 1 (see the module docstring)."""

    branching: tuple[int, ...]
    sibling_factor: float = DEFAULT_SIBLING_FACTOR

    def __post_init__(self) -> None:
        b = tuple(self.branching)
        if not b or any(isinstance(x, bool) or int(x) != x or x < 1 for x in b):
            raise SpecError("speculation.tree_branching", list(b), "a non-empty list of whole numbers >= 1")
        object.__setattr__(self, "branching", tuple(int(x) for x in b))
        rho = self.sibling_factor
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= 1.0:
            raise SpecError("speculation.tree_sibling_factor", rho, "a number in [0, 1]")
        object.__setattr__(self, "sibling_factor", float(rho))

    @property
    def depth(self) -> int:
        """D: the longest path, and the number of sequential draft passes."""
        return len(self.branching)

    @property
    def nodes_per_depth(self) -> np.ndarray:
        """N_j = b_1 ... b_j, j = 1..D."""
        return np.cumprod(self.branching).astype(float)

    @property
    def tokens(self) -> int:
        """T: draft tokens in the tree (the verify pass runs over T + 1 per sequence)."""
        return int(self.nodes_per_depth.sum())

    @property
    def is_chain(self) -> bool:
        return all(x == 1 for x in self.branching)


def tree_depth_acceptance(alpha, tree: TreeShape, decay: float = 1.0) -> np.ndarray:
    """beta_j, j = 1..D: probability that one of the accepted parent's children is accepted.

    Shape alpha.shape + (D,). For a chain this is alpha d^(j-1). A tree object with its own
    law (workload/tree_topk.TopKTree, SGLang's beam tree) supplies it through `depth_acceptance`.
    """
    if hasattr(tree, "depth_acceptance"):
        return tree.depth_acceptance(alpha, decay)
    a = _alpha_array(alpha)
    d = float(_decay_array(decay))
    j = np.arange(tree.depth)
    alpha_j = a[..., None] * d ** j
    out = np.ones(alpha_j.shape)
    for col, b in enumerate(tree.branching):
        r = np.arange(b)
        miss = np.prod(1.0 - alpha_j[..., col, None] * tree.sibling_factor ** r, axis=-1)
        out[..., col] = 1.0 - miss
    return np.clip(out, 0.0, 1.0)


def tree_expected_tokens(alpha, tree: TreeShape, decay: float = 1.0):
    """E[tokens emitted per verify step] of the tree: 1 + sum_j prod_{i<=j} beta_i (vectorised over alpha)."""
    beta = tree_depth_acceptance(alpha, tree, decay)
    out = 1.0 + np.cumprod(beta, axis=-1).sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def parse_branching(text: str, fld: str = "--tree"):
    """A TreeShape from '4,2,1' (children per node at depths 1..D), or SGLang's beam tree from
    'topk:D,K,N' (num_steps, eagle_topk, num_draft_tokens; workload/tree_topk.TopKTree)."""
    if str(text).startswith("topk:"):
        from specsim.workload.tree_topk import TopKTree
        try:
            d, k, n = (int(x) for x in str(text)[5:].split(","))
        except ValueError:
            raise SpecError(fld, text, "topk:D,K,N (num_steps, eagle_topk, num_draft_tokens), e.g. topk:5,4,8") from None
        return TopKTree(d, k, n)
    try:
        b = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise SpecError(fld, text, "comma-separated whole numbers >= 1, e.g. 4,2,1") from None
    return TreeShape(b)


def tree_summary(acceptance, tree: TreeShape, step: int = 0) -> dict:
    """What `show drafter --tree` prints: the tree's shape and the tau an engine would report
    drafting it (expected longest accepted path + 1, population ratio of sums), next to the chain
    of the same depth. `acceptance` is a workload.acceptance.DrafterAcceptance."""
    chain = acceptance.tau(tree.depth, step)
    tau = acceptance.tau(tree.depth, step, tree=tree)
    shape = {"branching": list(tree.branching)} if hasattr(tree, "branching") else {
        "tree": tree.label, "topk": tree.topk, "verify_tokens": tree.verify_tokens}
    return {**shape, "depth": tree.depth, "tree_tokens": tree.tokens,
            "sibling_factor": tree.sibling_factor, "tau": tau, "expected_accepted_tokens": tau - 1.0,
            "chain_tau_same_depth": chain}
