"""Drafter acceptance that falls with the context: a drafter trained on short sequences.

An EAGLE-style drafter is trained offline on sequences of bounded length. Past that length its
attention over the context is out of distribution and its per-token acceptance falls. Measured:

* vLLM speculators PR #684 (https://github.com/vllm-project/speculators/pull/684): a Qwen3-8B
  EAGLE-3 drafter served by vLLM on LongBench-v2 prompts cut to a context length. Its mean
  acceptance length falls from 2.30 at 2k tokens of context to 1.69 at 8k and 1.09 at 16k.
* Test-Time Speculation (arXiv 2605.09329): EAGLE-3, DFlash and PARD acceptance lengths degrade
  with the *generation* length, "close to 1 within a few thousand output tokens", because the
  speculators are trained on short sequences.
* SGLang issue #6783: an EAGLE-3 head with max_position_embeddings 2048 is slower than no SD past 2k.

How strongly a given drafter degrades depends on the length it was trained at, which is rarely
published. So the curve is an input (``drafter.context_curve``), never a default. Each point is
a context length in tokens and the per-token acceptance there relative to short contexts,
rho(c) in (0, 1]. rho is piecewise linear in c, flat beyond the end points. The curve measured in
PR #684 is in ``calibration/published/eagle3_context_curve.csv``.

The model. Sequence i with base acceptance alpha_i accepts a draft token at context c (prompt +
tokens generated so far) with probability

    alpha_i(c) = min(s * alpha_i * rho(c), ALPHA_MAX)

where s is the normalising scale. A configured ``drafter.tau`` is what the engine *reports* over
the run, a ratio of sums over verify steps (workload/acceptance/population.py). Under a falling curve, long
responses accept less. s is therefore solved (:func:`normalising_scale`) so that the workload's
ratio of sums sum_i L_i / sum_i N_i equals the configured tau at ``tau_at_k``, where N_i is the
expected number of verify steps of sequence i. A configured ``drafter.alpha`` is the short-context
acceptance itself (s = 1).

Engines. The reference engine samples every step at alpha_i(c), exactly. The fast engine keys a
sequence by one steps-to-finish law (sim/fastlaw.py), at the constant acceptance that gives the
same expected number of verify steps at that draft length (:func:`effective_alphas`):
tau_k(alpha_eff) = L / sum over the response's tokens of 1 / tau_k(alpha_i(c)), the harmonic mean
over its tokens. That conserves each sequence's step count, not the order of its tokens: at one
constant rate the batch's context would grow too slowly early and too fast late (the fast engine
ran 3-6 % fast on the RL-Think workload that way). So the fast engine also moves each response's
progress along its acceptance profile, piece by piece between the curve's points
(:func:`segment_steps`; sim/engine/state.rate_profile), and agrees with
the reference engine within 1 % (tests/workload/test_context_acceptance.py, tests/sim/test_engine.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecError
from specsim.workload.acceptance.laws import brentq, expected_tokens_per_verify
from specsim.workload.acceptance.population import beta_nodes

__all__ = ["ALPHA_MAX", "ContextAcceptance", "ContextCurve", "effective_alphas", "invert_tau", "normalising_scale",
           "segment_steps", "workload_tau"]

#: acceptance is capped below 1 (a sequence that always accepts would make tau_k = k + 1 exact)
ALPHA_MAX = 0.9999
#: midpoint bins per segment between the curve's points, where rho is linear and 1 / tau_k(alpha)
#: smooth: the quadrature error is second order in the bin width, far below the engines' noise
SEGMENT_BINS = 8
#: bisection steps that invert tau_k(alpha) per sequence (2^-42 of the bracket [0, 1): ~2e-13)
_BISECT = 42
FIELD = "context_curve"


@dataclass(frozen=True)
class ContextCurve:
    """rho(c): per-token acceptance at context c relative to short contexts (see module docstring).

    context_tokens: strictly increasing, >= 0. relative_alpha: in (0, 1], one per point."""

    context_tokens: tuple[float, ...]
    relative_alpha: tuple[float, ...]

    def __post_init__(self) -> None:
        c = np.asarray(self.context_tokens, dtype=float)
        r = np.asarray(self.relative_alpha, dtype=float)
        if c.ndim != 1 or c.size < 2 or c.size != r.size:
            raise SpecError(FIELD, [list(p) for p in zip(self.context_tokens, self.relative_alpha)],
                            "at least two [context_tokens, relative_alpha] points")
        for i, (ci, ri) in enumerate(zip(c, r)):
            if not math.isfinite(ci) or ci < 0 or (i and ci <= c[i - 1]):
                raise SpecError(f"{FIELD}[{i}][0]", self.context_tokens[i],
                                "a context length in tokens >= 0, strictly increasing along the curve")
            if not math.isfinite(ri) or not 0.0 < ri <= 1.0:
                raise SpecError(f"{FIELD}[{i}][1]", self.relative_alpha[i],
                                "a relative acceptance in (0, 1] (1 = as at short contexts)")
        object.__setattr__(self, "context_tokens", tuple(float(x) for x in c))
        object.__setattr__(self, "relative_alpha", tuple(float(x) for x in r))

    @classmethod
    def from_points(cls, points) -> ContextCurve:
        """From the scenario's list of [context_tokens, relative_alpha] pairs."""
        try:
            pairs = [(float(p[0]), float(p[1])) for p in points]
            if any(len(p) != 2 for p in points):
                raise ValueError
        except (TypeError, ValueError, IndexError):
            raise SpecError(FIELD, points, "a list of [context_tokens, relative_alpha] pairs") from None
        return cls(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))

    def rho(self, context_tokens):
        """Relative acceptance at each context length (vectorised, flat beyond the end points)."""
        return np.interp(np.asarray(context_tokens, dtype=float), self.context_tokens, self.relative_alpha)


@dataclass(frozen=True)
class ContextAcceptance:
    """A context curve with its normalising scale s: alpha_i(c) = min(s alpha_i rho(c), ALPHA_MAX)."""

    curve: ContextCurve
    scale: float = 1.0

    def alpha_at(self, alphas, context_tokens):
        """Per-token acceptance of sequences with base acceptance `alphas` at `context_tokens`."""
        return np.minimum(self.scale * np.asarray(alphas, dtype=float) * self.curve.rho(context_tokens), ALPHA_MAX)


def invert_tau(tau, k: int, decay: float) -> np.ndarray:
    """alpha in [0, ALPHA_MAX] with tau_k(alpha) = tau per element (bisection; tau_k increases)."""
    tau = np.asarray(tau, dtype=float)
    lo, hi = np.zeros_like(tau), np.full_like(tau, ALPHA_MAX)
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        below = expected_tokens_per_verify(mid, k, decay) < tau
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _segments(curve: ContextCurve, start_tokens, tokens) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's `tokens` tokens from context `start_tokens` cut at the curve's points:
    (edges (n, points + 2), tokens per segment (n, points + 1)); a point outside a sequence's
    span gives an empty segment. rho is linear inside every segment."""
    c0 = np.asarray(start_tokens, dtype=float)
    c1 = c0 + np.asarray(tokens, dtype=float)
    cuts = np.asarray(curve.context_tokens)
    edges = np.concatenate((c0[:, None], np.clip(cuts[None, :], c0[:, None], c1[:, None]), c1[:, None]), axis=1)
    return edges, np.diff(edges, axis=1)


def segment_steps(ctx: ContextAcceptance, alphas, start_tokens, tokens, k: int,
                  decay: float) -> tuple[np.ndarray, np.ndarray]:
    """The tokens and expected verify steps of each segment between the curve's points (n,
    points + 1) of sequences with base acceptance `alphas` (n,) and `tokens` tokens from context
    `start_tokens`: a segment's steps are its tokens × the mean of 1 / tau_k(alpha_i(c)) over
    them (midpoint rule, SEGMENT_BINS bins)."""
    edges, seg_tokens = _segments(ctx.curve, start_tokens, tokens)
    f = (np.arange(SEGMENT_BINS) + 0.5) / SEGMENT_BINS
    c = edges[:, :-1, None] + seg_tokens[:, :, None] * f
    per_token = ctx.alpha_at(np.asarray(alphas, dtype=float)[:, None, None], c)
    return seg_tokens, seg_tokens * np.mean(1.0 / expected_tokens_per_verify(per_token, k, decay), axis=-1)


def _harmonic_tau(ctx: ContextAcceptance, alphas, start_tokens, tokens, k: int, decay: float) -> np.ndarray:
    """Per sequence (tokens >= 1): tokens / expected verify steps, the harmonic mean of tau_k."""
    return np.asarray(tokens, dtype=float) / segment_steps(ctx, alphas, start_tokens, tokens, k, decay)[1].sum(axis=1)


def effective_alphas(ctx: ContextAcceptance | None, alphas, prompt_tokens, response_tokens, k: int,
                     decay: float) -> np.ndarray:
    """The constant acceptance per sequence with the same expected verify steps at draft length k
    as its context-dependent one (module docstring); `alphas` itself when there is no curve or k = 0."""
    a = np.asarray(alphas, dtype=float)
    if ctx is None or k == 0 or a.size == 0:
        return a
    return invert_tau(_harmonic_tau(ctx, a, prompt_tokens, response_tokens, k, decay), k, decay)


def workload_tau(ctx: ContextAcceptance, mean_alpha: float, concentration: float | None, k: int, decay: float,
                 prompt_tokens: float, response_tokens: np.ndarray, response_weights: np.ndarray) -> float:
    """The ratio of sums an engine reports over a workload: sum L / sum N over sequences whose base
    acceptance is Beta(mean, concentration) (quadrature nodes) and whose lengths are
    `response_tokens` with probabilities `response_weights`, independent of the acceptance."""
    x, w = beta_nodes(mean_alpha, concentration)
    L = np.asarray(response_tokens, dtype=float)
    aa, ll = np.meshgrid(x, L, indexing="ij")
    ww = np.outer(w, np.asarray(response_weights, dtype=float))
    tau = _harmonic_tau(ctx, aa.ravel(), np.full(aa.size, float(prompt_tokens)), ll.ravel(), k, decay)
    return float(np.sum(ww.ravel() * ll.ravel()) / np.sum(ww.ravel() * ll.ravel() / tau))


def normalising_scale(curve: ContextCurve, tau: float, mean_alpha: float, concentration: float | None, k: int,
                      decay: float, prompt_tokens: float, response_tokens: np.ndarray,
                      response_weights: np.ndarray) -> float:
    """The scale s under which the workload's reported tau (:func:`workload_tau`) at draft length
    k equals the configured `tau` (brentq on s; the reported tau increases with s).

    Raises SpecError on drafter.context_curve when no s reaches it (every sequence capped at
    ALPHA_MAX still reports less: the curve falls too far for this workload and tau)."""
    def gap(s: float) -> float:
        return workload_tau(ContextAcceptance(curve, s), mean_alpha, concentration, k, decay, prompt_tokens,
                            response_tokens, response_weights) - tau
    if mean_alpha <= 0.0 or gap(1.0) >= 0.0:
        return 1.0
    lowest = float(np.min(beta_nodes(mean_alpha, concentration)[0]))
    s_max = ALPHA_MAX / (max(lowest, 1e-12) * min(curve.relative_alpha))
    if gap(s_max) < 0.0:
        raise SpecError(FIELD, [list(p) for p in zip(curve.context_tokens, curve.relative_alpha)],
                        f"a curve under which this workload can report drafter.tau = {tau:g} at k = {k}: even with "
                        "every token accepted at the cap the long responses report less; give a curve that falls "
                        "less, or the short-context acceptance as drafter.alpha")
    return float(brentq(gap, 1.0, s_max, xtol=1e-10, rtol=1e-10))
