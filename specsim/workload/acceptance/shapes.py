"""Draft shapes: what one SD step drafts per sequence, and the acceptance law of that shape.

Every shape implements one interface, :class:`DraftShape`: `depth` (sequential draft passes, the
longest path), `tokens` (draft tokens verified per sequence), `label`,
`draft_passes()` (tokens and logit rows per sequence of draft passes 2..D, what cost/step.py
prices), `depth_acceptance(alpha, decay)` (beta_j, whose running product is
S_j = P(accepted length >= j)), `expected_tokens(alpha, decay)` (1 + sum_j S_j) and `describe()`.
Two shapes exist: :class:`TreeShape`, a full tree by its branching per depth (a chain of k drafts
is branching (1,) * k), and :class:`TopKTree`, SGLang's EAGLE beam tree.

## Full trees (EAGLE-2 / SpecInfer / SGLang style)

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

## SGLang's beam tree

SGLang's EAGLE worker (``--speculative-num-steps`` D, ``--speculative-eagle-topk`` K,
``--speculative-num-draft-tokens`` N; docs: https://docs.sglang.ai/advanced_features/speculative_decoding.html,
code: sglang/srt/speculative/eagle_utils.py `select_top_k_tokens`, `organize_draft_results`):

* draft pass 1 (the draft extend after the previous verify) gives K children of the root;
* draft passes 2..D each run the drafter over the K beam nodes of the previous depth (B·K tokens,
  K logit rows per sequence); each beam node gets K children (K² candidates per depth) and the K
  best by cumulative draft score form the next beam;
* of the K + (D - 1)·K² scored candidates the N - 1 best by cumulative score are verified, with
  the root, in one tree-attention pass over N tokens per sequence (N counts the root: for K = 1
  SGLang forces N = D + 1).

Acceptance. With the sibling model of workload/acceptance/shapes.py (rank-r child accepted, given its parent
and ranks < r rejected, with p_r = alpha_j rho^(r-1), alpha_j = alpha d^(j-1)), a node whose path
has ranks (r_1..r_j) lies on the accepted path with probability

    P(node) = prod_i q(r_i, i),   q(r, i) = p_r prod_{s<r} (1 - p_s).

At most one node per depth is on the accepted path, so S_j = P(accepted length >= j) is the sum
of P over the verified depth-j nodes and E[tokens per verify] = 1 + sum_j S_j -- for a full tree
this is workload/acceptance/shapes.py's formula (sum_r q(r, j) = beta_j). The drafter's cumulative score is
modelled by P itself (a calibrated drafter ranks its candidates by their acceptance odds), so
the verified set is the beam's N - 1 largest P. K = 1, N = D + 1 is the chain of D drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specsim.errors import SpecError
from specsim.workload.acceptance.checks import alpha_array, decay_array

__all__ = ["DEFAULT_SIBLING_FACTOR", "DraftShape", "TopKTree", "TreeShape", "parse_branching", "tree_summary"]

#: Default sibling factor rho (heuristic, see the module docstring).
DEFAULT_SIBLING_FACTOR = 0.5


class DraftShape(Protocol):
    """What every draft shape provides (the module docstring gives each member's formula)."""

    sibling_factor: float

    @property
    def depth(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def label(self) -> str: ...
    def draft_passes(self) -> list[tuple[float, float]]: ...
    def depth_acceptance(self, alpha, decay: float = 1.0) -> np.ndarray: ...
    def expected_tokens(self, alpha, decay: float = 1.0): ...
    def describe(self) -> dict: ...


#: The most draft tokens one tree may hold (SGLang's num_draft_tokens is at most a few hundred;
#: `speculation.tree_verify_tokens` allows 4096 verify tokens, the root included).
MAX_TREE_TOKENS = 4095


def _expected_from_beta(beta: np.ndarray):
    """E[tokens emitted per verify] = 1 + sum_j prod_{i<=j} beta_i, a float for scalar alpha."""
    out = 1.0 + np.cumprod(beta, axis=-1).sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def _sibling_factor(rho) -> float:
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= 1.0:
        raise SpecError("tree.sibling_factor", rho, "a number in [0, 1]")
    return float(rho)


@dataclass(frozen=True)
class TreeShape:
    """A full draft tree: `branching[j]` children per node at depth j + 1 (a chain: all ones)."""

    branching: tuple[int, ...]
    sibling_factor: float = DEFAULT_SIBLING_FACTOR

    def __post_init__(self) -> None:
        b = tuple(self.branching)
        if not b or any(isinstance(x, bool) or int(x) != x or x < 1 for x in b):
            raise SpecError("tree.branching", list(b), "a non-empty list of whole numbers >= 1")
        nodes, total = 1, 0
        for x in b:   # exact integers: a tree of 6·10⁵⁷ nodes is refused, not overflowed
            nodes *= int(x)
            total += nodes
            if total > MAX_TREE_TOKENS:
                raise SpecError("tree.branching", list(b), f"a tree of at most {MAX_TREE_TOKENS:,} draft tokens "
                                "(the product of the branching factors, summed over depths; engines verify "
                                "at most a few hundred)")
        object.__setattr__(self, "branching", tuple(int(x) for x in b))
        object.__setattr__(self, "sibling_factor", _sibling_factor(self.sibling_factor))

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
    def label(self) -> str:
        return f"tree={list(self.branching)}"

    def draft_passes(self) -> list[tuple[float, float]]:
        """(tokens, logit rows) per sequence of draft passes 2..D: pass j runs over the
        N_{j-1} nodes of the previous depth, one logit row each."""
        nodes = self.nodes_per_depth
        return [(float(nodes[j - 1]), float(nodes[j - 1])) for j in range(1, self.depth)]

    def depth_acceptance(self, alpha, decay: float = 1.0) -> np.ndarray:
        """beta_j = 1 - prod_r (1 - alpha_j rho^(r-1)), j = 1..D; shape alpha.shape + (D,).
        For a chain this is alpha d^(j-1)."""
        a = alpha_array(alpha)
        d = float(decay_array(decay))
        alpha_j = a[..., None] * d ** np.arange(self.depth)
        out = np.ones(alpha_j.shape)
        for col, b in enumerate(self.branching):
            r = np.arange(b)
            miss = np.prod(1.0 - alpha_j[..., col, None] * self.sibling_factor ** r, axis=-1)
            out[..., col] = 1.0 - miss
        return np.clip(out, 0.0, 1.0)

    def expected_tokens(self, alpha, decay: float = 1.0):
        """E[tokens emitted per verify step]: 1 + sum_j prod_{i<=j} beta_i (vectorised over alpha)."""
        return _expected_from_beta(self.depth_acceptance(alpha, decay))

    def describe(self) -> dict:
        return {"branching": list(self.branching)}


def _whole(v, fld: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise SpecError(fld, v, f"a whole number >= {minimum}")
    return int(v)


@dataclass(frozen=True)
class TopKTree:
    """SGLang's EAGLE tree: `depth` D draft steps, `topk` K beam width, `verify_tokens` N per
    sequence (the root included), sibling factor rho (workload/acceptance/shapes.py)."""

    depth: int
    topk: int
    verify_tokens: int
    sibling_factor: float = 0.5

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "depth", _whole(self.depth, "tree.depth", 1))
        put(self, "topk", _whole(self.topk, "tree.topk", 1))
        n = _whole(self.verify_tokens, "tree.verify_tokens", 2)
        most = 1 + self.topk + (self.depth - 1) * self.topk ** 2
        if n > most:
            raise SpecError("tree.verify_tokens", n,
                            f"<= 1 + K + (D - 1) K^2 = {most} (the root plus every scored candidate)")
        put(self, "verify_tokens", n)
        put(self, "sibling_factor", _sibling_factor(self.sibling_factor))

    @property
    def tokens(self) -> int:
        """Draft tokens verified per sequence (N - 1; the verify pass runs over N)."""
        return self.verify_tokens - 1

    @property
    def label(self) -> str:
        return f"topk_tree(steps={self.depth}, topk={self.topk}, verify={self.verify_tokens})"

    def draft_passes(self) -> list[tuple[float, float]]:
        """(tokens, logit rows) per sequence of draft passes 2..D: the K beam nodes each."""
        return [(float(self.topk), float(self.topk))] * (self.depth - 1)

    def node_probs(self, alpha, decay: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """(P, depth) of every scored candidate: P shape alpha.shape + (K + (D-1) K^2,), depth
        (same last length) the 1-based depth of each candidate."""
        a = alpha_array(alpha)
        d = float(decay_array(decay))
        k = self.topk
        r = np.arange(k)
        vals, depths = [], []
        beam = None
        for j in range(self.depth):
            p = np.clip(a[..., None] * d ** j * self.sibling_factor ** r, 0.0, 1.0)    # (..., K)
            before = np.cumprod(np.concatenate([np.ones(p.shape[:-1] + (1,)), 1.0 - p[..., :-1]], axis=-1), axis=-1)
            q = p * before                                                             # q(r, j+1)
            cand = q if beam is None else (beam[..., :, None] * q[..., None, :]).reshape(a.shape + (k * k,))
            vals.append(cand)
            depths.append(np.full(cand.shape[-1], j + 1))
            beam = -np.sort(-cand, axis=-1)[..., :k]
        return np.concatenate(vals, axis=-1), np.concatenate(depths)

    def survival(self, alpha, decay: float = 1.0) -> np.ndarray:
        """S_j = P(accepted length >= j), j = 1..D: the sum of P over the verified depth-j nodes."""
        p, depth = self.node_probs(alpha, decay)
        order = np.argsort(-p, axis=-1, kind="stable")[..., : self.tokens]
        chosen = np.take_along_axis(p, order, axis=-1)
        chosen_depth = depth[order]
        return np.stack([np.where(chosen_depth == j, chosen, 0.0).sum(axis=-1) for j in range(1, self.depth + 1)],
                        axis=-1)

    def depth_acceptance(self, alpha, decay: float = 1.0) -> np.ndarray:
        """beta_j = S_j / S_{j-1} (S_0 = 1): the per-depth conditional acceptance whose running
        product is S_j, so every chain function (pmf, sampling) applies per depth."""
        s = np.clip(self.survival(alpha, decay), 0.0, 1.0)
        prev = np.concatenate([np.ones(s.shape[:-1] + (1,)), s[..., :-1]], axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(prev > 0, s / np.where(prev > 0, prev, 1.0), 0.0)
        return np.clip(beta, 0.0, 1.0)

    def expected_tokens(self, alpha, decay: float = 1.0):
        """E[tokens emitted per verify] = 1 + sum_j S_j (vectorised over alpha)."""
        out = 1.0 + self.survival(alpha, decay).sum(axis=-1)
        return float(out) if np.ndim(out) == 0 else out

    def describe(self) -> dict:
        return {"tree": self.label, "topk": self.topk, "verify_tokens": self.verify_tokens}


def parse_branching(text: str, fld: str = "--tree") -> DraftShape:
    """A TreeShape from '4,2,1' (children per node at depths 1..D), or SGLang's beam tree from
    'topk:D,K,N' (num_steps, eagle_topk, num_draft_tokens)."""
    if str(text).startswith("topk:"):
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


def tree_summary(acceptance, tree: DraftShape, step: int = 0) -> dict:
    """What `show drafter --tree` prints: the tree's shape and the tau an engine would report
    drafting it (expected longest accepted path + 1, population ratio of sums), next to the chain
    of the same depth. `acceptance` is a workload.acceptance.drafter.DrafterAcceptance."""
    chain = acceptance.tau(tree.depth, step)
    tau = acceptance.tau(tree.depth, step, tree=tree)
    return {**tree.describe(), "depth": tree.depth, "tree_tokens": tree.tokens,
            "sibling_factor": tree.sibling_factor, "tau": tau, "expected_accepted_tokens": tau - 1.0,
            "chain_tau_same_depth": chain}
