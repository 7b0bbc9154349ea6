"""Acceptance over a population of sequences: the tau an engine reports, and its back-solve.

An inference engine reports the mean acceptance length as a ratio of sums over everything it
ran (vLLM's spec-decode metrics: 1 + accepted draft tokens / drafts; the simulator's engines:
emitted tokens / sequence-verify-steps, the same "+1 convention", see
:mod:`specsim.workload.acceptance.laws`). Give sequence i the per-token acceptance alpha_i and
length L_i. It needs about L_i / tau(alpha_i) verify steps, so

    tau_reported = sum_i L_i / sum_i (L_i / tau(alpha_i))  ->  1 / E[1 / tau(alpha)]

when lengths are drawn independently of acceptance (they are: SD never changes the response).
Every verify step counts once: long responses weigh by their length, and sequences with a high
alpha finish in fewer steps, so they weigh *less* than in the plain average E[tau(alpha)]. The
reported tau is the harmonic mean of per-sequence tau, below the plain mean by Jensen's
inequality (about 5 % for a Beta concentration of a few). A configured ``drafter.tau`` is this
reported value, so the mean alpha is back-solved from it (:func:`mean_alpha_from_tau`).

alpha_i ~ Beta(m c, (1 - m) c) (mean m, concentration c; None = every sequence has m). The
expectation is taken by Gauss-Jacobi quadrature (64 nodes, exact for polynomials of degree 127;
1/tau is analytic on [0, 1], so it converges geometrically); for extreme Beta shapes (a shape
parameter below 1e-3 or above 1e4, or a + b of several thousand, where the Jacobi recurrence
over/underflows) by
Gauss-Legendre quadrature over the quantile function, the way the cluster draws alphas.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special

from specsim.errors import SpecError
from specsim.workload.acceptance.checks import alpha_array, check_concentration
from specsim.workload.acceptance.laws import (
    EPS_RTOL,
    alpha_from_tau,
    beta_ppf,
    brentq,
    check_rng,
    check_tau,
    expected_tokens_per_verify,
    tau_scalar,
)

__all__ = [
    "beta_nodes",
    "mean_alpha_from_tau",
    "plain_mean_tau",
    "reported_position_rates",
    "reported_tau",
    "reported_taus",
    "sample_sequence_alphas",
]

_JACOBI_NODES = 64
_LEGENDRE_NODES = 256


@lru_cache(maxsize=1)
def _legendre() -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes on [-1, 1] (cached: an eigenvalue problem of size 256, ~10 ms)."""
    u, w = np.polynomial.legendre.leggauss(_LEGENDRE_NODES)
    u.flags.writeable = False
    w.flags.writeable = False
    return u, w


def beta_nodes(m: float, c: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes x and weights w (summing to 1) with E[f(alpha)] ~ sum w f(x), alpha ~ Beta(mc, (1-m)c).

    c None (homogeneous) or m at 0/1: the single node m.
    """
    if c is None or m <= 0.0 or m >= 1.0:
        return np.array([float(m)]), np.array([1.0])
    a, b = m * c, (1.0 - m) * c
    if 1e-3 <= min(a, b) and max(a, b) <= 1e4:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # masked 0/0, inf normaliser
            t, w = special.roots_jacobi(_JACOBI_NODES, b - 1.0, a - 1.0)  # weight (1-t)^(b-1) (1+t)^(a-1)
        x = (1.0 + t) / 2.0
        if np.all(np.isfinite(w)) and np.all(np.isfinite(x)) and w.sum() > 0:
            return np.clip(x, 0.0, 1.0), w / w.sum()
    # extreme shapes, or a Jacobi recurrence that overflowed (a + b of several thousand: scipy's
    # 2^(a+b+1) normaliser is inf and the weights NaN): quantile nodes, the way the cluster draws
    u, w = _legendre()
    x = beta_ppf((u + 1.0) / 2.0, a, b)
    return np.clip(x, 0.0, 1.0), w / w.sum()


def reported_tau(m: float, k: int, d: float = 1.0, c: float | None = None, tree=None, p: float = 1.0) -> float:
    """tau an engine reports (ratio of sums, per-verify-step weighting): 1 / E[1 / tau(alpha)].

    `tree` (a DraftShape of depth k, workload/acceptance/shapes.py): per-sequence tau is the tree's expected
    accepted length + 1 instead of the chain's. `p` < 1 (proposal rate: a share p of the
    request-steps carries a draft): vLLM reports 1 + accepted / drafts, and a sequence of length
    L runs L / (1 + p(tau_i − 1)) steps, p of them with a draft, so
    tau = 1 + E[(tau_i − 1) / s_i] / E[1 / s_i] with s_i = 1 + p(tau_i − 1) (p = 1: 1 / E[1/tau_i])."""
    if k == 0:
        return 1.0
    if p != 1.0:
        x, w = beta_nodes(m, c)
        t = np.atleast_1d(tree.expected_tokens(x, d) if tree is not None else expected_tokens_per_verify(x, k, d))
        s_i = 1.0 + p * (t - 1.0)
        return float(1.0 + np.sum(w * (t - 1.0) / s_i) / np.sum(w / s_i))
    x, w = beta_nodes(m, c)
    if tree is not None:
        if tree.depth != k:
            raise SpecError("k", k, f"the tree's depth {tree.depth}")
        return float(1.0 / np.sum(w / np.atleast_1d(tree.expected_tokens(x, d))))
    if x.size == 1:
        return tau_scalar(float(x[0]), k, d)
    return float(1.0 / np.sum(w / expected_tokens_per_verify(x, k, d)))


def reported_position_rates(m: float, k: int, d: float = 1.0, c: float | None = None) -> np.ndarray:
    """Per-position acceptance rates an engine reports at draft length k, shape (k,).

    vLLM's "acceptance at token j" / "Per-position acceptance rate" is (drafts whose position j
    was accepted) / (all drafts): unconditional, a ratio of sums over verify steps like
    :func:`reported_tau`. A sequence with acceptance alpha runs ~L / tau(alpha) drafts, so

        r_j = E[S_j(alpha) / tau(alpha)] / E[1 / tau(alpha)],   S_j = alpha^j d^(j (j - 1) / 2),

    and 1 + sum_j r_j = 1 / E[1 / tau] = reported_tau(m, k, d, c). Heterogeneity (finite c) makes
    r_(j+1) / r_j rise with j (the sequences still accepting at depth j are the good ones);
    position decay d < 1 makes it fall: the shape of a published curve tells them apart
    (python calibration/recipes/acceptance_shape.py).
    """
    if k <= 0:
        return np.zeros(0)
    x, w = beta_nodes(m, c)
    j = np.arange(1, k + 1)
    s = x[:, None] ** j * d ** (j * (j - 1) / 2.0)
    wt = w / (1.0 + s.sum(axis=-1))
    return (wt @ s) / wt.sum()


def reported_taus(m: float, ks, d: float = 1.0, c: float | None = None) -> np.ndarray:
    """:func:`reported_tau` at several draft lengths ks (chains), sharing one set of Beta nodes.

    Used to compare a drafter's tau-versus-k curve (one engine run per k) with published ones.
    """
    kk = np.atleast_1d(np.asarray(ks, dtype=np.int64))
    x, w = beta_nodes(m, c)
    tau = expected_tokens_per_verify(x[:, None], kk[None, :], d)
    return 1.0 / (w @ (1.0 / tau))


def plain_mean_tau(m: float, k: int, d: float = 1.0, c: float | None = None) -> float:
    """E[tau(alpha)], the plain average of per-sequence tau (NOT what an engine reports; diagnostics)."""
    x, w = beta_nodes(m, c)
    return float(np.sum(w * expected_tokens_per_verify(x, k, d)))


def mean_alpha_from_tau(tau, k: int, d: float, c: float | None, fld: str = "tau", tree=None,
                        p: float = 1.0) -> float:
    """Mean alpha m whose population reports ``tau`` (see :func:`reported_tau`) at draft length k.

    reported_tau is strictly increasing in m for a fixed concentration, so scipy's brentq finds
    the root on [0, 1]. Homogeneous (c None): :func:`alpha_from_tau`. `tree` (depth k): ``tau``
    was measured drafting that tree (e.g. SGLang's beam tree), so m solves the tree's tau. `p`: the
    proposal rate the tau was reported under (a homogeneous population does not depend on it).
    """
    if tree is not None:
        t = float(tau)
        hi = reported_tau(1.0 - 1e-12, k, d, c, tree)
        if not 1.0 <= t < hi:
            raise SpecError(fld, tau, f"in [1, {hi:.4g}) (what the tree {getattr(tree, 'label', tree)} can report)")
        if t == 1.0:
            return 0.0
        return float(brentq(lambda x: reported_tau(x, k, d, c, tree) - t, 0.0, 1.0 - 1e-12,
                                     xtol=1e-13, maxiter=500))
    if c is None:
        return alpha_from_tau(tau, k, d)
    t, tau_max = check_tau(tau, k, d, fld)
    if t == 1.0:
        return 0.0
    if t == tau_max:
        return 1.0
    return _mean_alpha_of_population(float(t), int(k), float(d), float(c), float(p))


@lru_cache(maxsize=1024)
def _mean_alpha_of_population(t: float, k: int, d: float, c: float, p: float) -> float:
    """The root of reported_tau(m) = t (a brentq of ~12 quadratures, ~15 ms): a pure function of
    five numbers, remembered, since every point of a sweep and every run resolves the same drafter
    (a sweep over k or lag asks it the same question dozens of times)."""
    return float(brentq(lambda x: reported_tau(x, k, d, c, p=p) - t, 0.0, 1.0,
                                 xtol=1e-15, rtol=EPS_RTOL, maxiter=500))


def sample_sequence_alphas(rng: np.random.Generator, n: int, mean_alpha: float, concentration) -> np.ndarray:
    """Per-sequence acceptance alpha_i ~ Beta(mean c, (1 - mean) c), shape (n,).

    Some responses are predictable (boilerplate, repeated derivations), some are not; c is the
    Beta concentration (variance mean (1 - mean) / (1 + c)). concentration None or inf: every
    sequence gets exactly the mean and nothing is drawn from ``rng``; mean 0 likewise.
    """
    check_rng(rng)
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise SpecError("n", n, "an integer >= 0")
    m = float(alpha_array(mean_alpha, "alpha", closed=False))
    c = check_concentration(concentration)
    if c is None or m == 0.0:
        return np.full(int(n), m)
    return rng.beta(m * c, (1.0 - m) * c, size=int(n))

