"""The EAGLE-2/3 dynamic draft tree as SGLang builds it: depth, top-k beam, verify budget.

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

Acceptance. With the sibling model of workload/tree.py (rank-r child accepted, given its parent
and ranks < r rejected, with p_r = alpha_j rho^(r-1), alpha_j = alpha d^(j-1)), a node whose path
has ranks (r_1..r_j) lies on the accepted path with probability

    P(node) = prod_i q(r_i, i),   q(r, i) = p_r prod_{s<r} (1 - p_s).

At most one node per depth is on the accepted path, so S_j = P(accepted length >= j) is the sum
of P over the verified depth-j nodes and E[tokens per verify] = 1 + sum_j S_j -- for a full tree
this is workload/tree.py's formula (sum_r q(r, j) = beta_j). The drafter's cumulative score is
modelled by P itself (a calibrated drafter ranks its candidates by their acceptance odds), so
the verified set is the beam's N - 1 largest P. K = 1, N = D + 1 is the chain of D drafts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecError
from specsim.workload.acceptance_args import _alpha_array, _decay_array

__all__ = ["TopKTree"]


def _whole(v, fld: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise SpecError(fld, v, f"a whole number >= {minimum}")
    return int(v)


@dataclass(frozen=True)
class TopKTree:
    """SGLang's EAGLE tree: `depth` D draft steps, `topk` K beam width, `verify_tokens` N per
    sequence (the root included), sibling factor rho (workload/tree.py)."""

    depth: int
    topk: int
    verify_tokens: int
    sibling_factor: float = 0.5

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "depth", _whole(self.depth, "speculation.k", 1))
        put(self, "topk", _whole(self.topk, "speculation.tree_topk", 1))
        n = _whole(self.verify_tokens, "speculation.tree_verify_tokens", 2)
        most = 1 + self.topk + (self.depth - 1) * self.topk ** 2
        if n > most:
            raise SpecError("speculation.tree_verify_tokens", n,
                            f"<= 1 + K + (D - 1) K^2 = {most} (the root plus every scored candidate)")
        put(self, "verify_tokens", n)
        rho = self.sibling_factor
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= 1.0:
            raise SpecError("speculation.tree_sibling_factor", rho, "a number in [0, 1]")
        put(self, "sibling_factor", float(rho))

    @property
    def tokens(self) -> int:
        """Draft tokens verified per sequence (N - 1; the verify pass runs over N)."""
        return self.verify_tokens - 1

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def label(self) -> str:
        return f"topk_tree(steps={self.depth}, topk={self.topk}, verify={self.verify_tokens})"

    def draft_passes(self) -> list[tuple[float, float]]:
        """(tokens, logit rows) per sequence of draft passes 2..D: the K beam nodes each."""
        return [(float(self.topk), float(self.topk))] * (self.depth - 1)

    def node_probs(self, alpha, decay: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """(P, depth) of every scored candidate: P shape alpha.shape + (K + (D-1) K^2,), depth
        (same last length) the 1-based depth of each candidate."""
        a = _alpha_array(alpha)
        d = float(_decay_array(decay))
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
