"""Per-step acceptance math: tokens emitted per verify step, its law, back-solving alpha, sampling.

With draft length k, draft position j (j = 1..k) is accepted with conditional probability

    alpha_j = alpha * d^(j - 1),        d in (0, 1] the position decay (d = 1: constant alpha),

and the verify step emits (number of leading accepted draft tokens) + 1 tokens (the target model
always contributes one: the correction or the bonus token). So

    S_j = P(accepted >= j) = prod_{m <= j} alpha_m = alpha^j d^(j (j - 1) / 2),
    E[emitted] = 1 + sum_{j=1..k} S_j  = (1 - alpha^(k+1)) / (1 - alpha)   for d = 1
                                                         (Leviathan et al. 2023, arXiv 2211.17192).

This is the "+1 convention" vLLM uses for its mean acceptance length
(1 + accepted draft tokens / drafts). Population averages over heterogeneous sequences live in
:mod:`specsim.workload.acceptance.population`; the drafter over RL training in
:mod:`specsim.workload.acceptance.drafter`. Bad inputs raise :class:`specsim.errors.SpecError` naming
its parameter. Math functions accept alpha in [0, 1] (alpha = 1 is the limit k + 1).
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import SpecError
from specsim.workload.acceptance.checks import (
    alpha_array,
    decay_array,
    finite_real,
    k_array,
    scalar_out,
    whole_k,
)

__all__ = [
    "alpha_from_tau",
    "beta_ppf",
    "brentq",
    "draw_tokens_per_verify",
    "expected_tokens_per_verify",
    "sample_tokens_per_verify",
    "tokens_per_verify_pmf",
    "tokens_per_verify_var",
]

EPS_RTOL = 4 * np.finfo(float).eps


# --------------------------------------------------------------------------- tokens per verify


def _survival(a: np.ndarray, kk: np.ndarray, d: np.ndarray) -> np.ndarray:
    """S_j = P(accepted >= j) = prod_{m<=j} alpha d^(m-1), j = 1..max(k); 0 beyond each k. Shape (..., K)."""
    kmax = int(kk.max()) if kk.size else 0
    shape = np.broadcast_shapes(a.shape, kk.shape, d.shape)
    j = np.arange(1, kmax + 1)
    alpha_j = a[..., None] * d[..., None] ** (j - 1)
    s = np.cumprod(alpha_j, axis=-1)
    s = np.where(j <= kk[..., None], s, 0.0)
    return np.broadcast_to(s, shape + (kmax,))


def _closed_form(a: np.ndarray, kk: np.ndarray) -> np.ndarray:
    """(1 - alpha^(k+1)) / (1 - alpha), computed as -expm1((k+1) log1p(-delta)) / delta, delta = 1 - alpha.

    delta is exact for alpha near 1, so this keeps full precision where the naive form cancels;
    alpha = 1 gives the limit k + 1, alpha = 0 gives 1.
    """
    delta = 1.0 - a
    with np.errstate(divide="ignore", invalid="ignore"):
        num = -np.expm1((kk + 1) * np.log1p(-delta))
        out = num / delta
    return np.where(delta == 0, kk + 1.0, out)


def expected_tokens_per_verify(alpha, k, decay=1.0):
    """tau = E[tokens emitted per verify step] = 1 + sum_{j=1..k} alpha^j d^(j(j-1)/2).

    Vectorised and broadcast over alpha, k and decay. For d = 1 this is (1 - alpha^(k+1)) / (1 - alpha)
    (Leviathan et al. 2023), evaluated in closed form; alpha = 0 -> 1, alpha = 1 -> k + 1 (d = 1),
    k = 0 -> 1 (plain decoding).
    """
    a = alpha_array(alpha)
    kk = k_array(k)
    d = decay_array(decay)
    scalar = a.ndim == 0 and kk.ndim == 0 and d.ndim == 0
    if np.all(d == 1.0):
        out = _closed_form(a, kk) * np.ones(np.broadcast_shapes(a.shape, kk.shape, d.shape))
    else:
        general = 1.0 + _survival(a, kk, d).sum(axis=-1)
        out = np.where(d == 1.0, _closed_form(a, kk), general)
    return scalar_out(out, scalar)


def _tree_positions(a: np.ndarray, kk: int, decay, tree) -> np.ndarray:
    """Per-depth acceptance of a token tree (workload/acceptance/shapes.py), shape a.shape + (k,); k must be its depth."""
    if tree.depth != kk:
        raise SpecError("k", kk, f"the tree's depth {tree.depth}")
    return tree.depth_acceptance(a, float(decay_array(decay)))


def tokens_per_verify_pmf(alpha, k: int, decay=1.0, tree=None) -> np.ndarray:
    """P(emitted = 1), ..., P(emitted = k + 1), shape (..., k + 1) over broadcast alpha and decay.

    P(emitted = j + 1) = S_j - S_{j+1} with S_0 = 1, S_{k+1} = 0 and S_j = P(accepted >= j).
    `tree` (a DraftShape of depth k, workload/acceptance/shapes.py): S_j is the tree's longest-accepted-path law.
    """
    a = alpha_array(alpha)
    kk = whole_k(k)
    d = decay_array(decay)
    if tree is not None:
        s = np.cumprod(_tree_positions(a, kk, decay, tree), axis=-1)
    else:
        s = _survival(a, np.asarray(kk), d)
    shape = s.shape[:-1]
    full = np.concatenate([np.ones(shape + (1,)), s, np.zeros(shape + (1,))], axis=-1)
    return np.clip(full[..., :-1] - full[..., 1:], 0.0, 1.0)


def tokens_per_verify_var(alpha, k, decay=1.0):
    """Var[emitted per verify step] = sum_{j=1..k} (2j - 1) S_j - (sum_j S_j)^2.

    Uses E[A] = sum_j P(A >= j) and E[A^2] = sum_j (2j - 1) P(A >= j) for the accepted count A;
    emitted = A + 1 has the same variance. Vectorised like :func:`expected_tokens_per_verify`.
    """
    a = alpha_array(alpha)
    kk = k_array(k)
    d = decay_array(decay)
    s = _survival(a, kk, d)
    j = np.arange(1, s.shape[-1] + 1)
    var = (s * (2 * j - 1)).sum(axis=-1) - s.sum(axis=-1) ** 2
    return scalar_out(np.maximum(var, 0.0), a.ndim == 0 and kk.ndim == 0 and d.ndim == 0)


def tau_scalar(a: float, k: int, d: float) -> float:
    """Fast unchecked scalar tau (used inside root finding)."""
    if d == 1.0:
        if a == 1.0:
            return k + 1.0
        if a == 0.0:
            return 1.0
        delta = 1.0 - a
        if a < 0.5:  # 1 - a rounds to 1 for a tiny alpha: log1p(-delta) would be log(0)
            return (1.0 - a ** (k + 1)) / delta
        return -math.expm1((k + 1) * math.log1p(-delta)) / delta
    total, s = 1.0, 1.0
    for j in range(1, k + 1):
        s *= a * d ** (j - 1)
        total += s
    return total


def check_tau(tau, k: int, d: float, fld: str) -> tuple[float, float]:
    t = finite_real(tau, fld, "a number >= 1")
    tau_max = tau_scalar(1.0, k, d)
    if not 1.0 <= t <= tau_max:
        extra = "" if d == 1.0 else f", the most a k={k} draft with decay {d:g} can give"
        raise SpecError(fld, tau, f"in [1, {tau_max:g}] (tokens per verify step at k = {k}{extra})")
    return t, tau_max


def alpha_from_tau(tau: float, k: int, decay: float = 1.0) -> float:
    """Back-solve the per-token acceptance alpha from a measured tau at draft length k.

    Solves expected_tokens_per_verify(alpha, k, decay) = tau for alpha in [0, 1] with scipy's
    brentq (tau is strictly increasing in alpha), to ~1e-15. Requires 1 <= tau <= tau_max, where
    tau_max = k + 1 for decay 1 (a tau above k + 1 is impossible: at most k drafts + 1 bonus token).
    tau = 1 -> 0; tau = tau_max -> 1.
    """
    kk = whole_k(k, "tau_k", minimum=1)
    d = float(decay_array(decay))
    t, tau_max = check_tau(tau, kk, d, "tau")
    if t == 1.0:
        return 0.0
    if t == tau_max:
        return 1.0
    return float(brentq(lambda x: tau_scalar(x, kk, d) - t, 0.0, 1.0, xtol=1e-16, rtol=EPS_RTOL, maxiter=500))


def brentq(f, a: float, b: float, **options) -> float:
    """scipy.optimize.brentq (Brent's method on a bracket [a, b] where f changes sign), imported at its
    first call: scipy.optimize costs a process ~0.35 s of start-up, and a simulation worker whose runs
    invert no τ (the main job's: the parent resolves the drafter when it plans) never calls it."""
    from scipy import optimize

    return optimize.brentq(f, a, b, **options)


# --------------------------------------------------------------------------- sampling


def check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def sample_tokens_per_verify(rng: np.random.Generator, alpha_per_seq, k: int, decay: float = 1.0,
                             tree=None) -> np.ndarray:
    """One verify step for each sequence: tokens emitted (int64, 1..k+1), same shape as alpha_per_seq.

    Draws k uniforms per sequence (array shape alpha.shape + (k,)); draft position j is accepted
    when u_j < alpha_i d^(j-1); emitted = 1 + number of leading accepts. The caller clips to the
    tokens a response still has left. `tree` (depth k): depth j is reached when one of the
    accepted parent's children is accepted, probability beta_j (workload/acceptance/shapes.py).
    """
    check_rng(rng)
    return draw_tokens_per_verify(rng, alpha_array(alpha_per_seq), whole_k(k), float(decay_array(decay)), tree)


def draw_tokens_per_verify(rng: np.random.Generator, alpha: np.ndarray, k: int, decay: float, tree=None) -> np.ndarray:
    """sample_tokens_per_verify on inputs already checked (alpha a float array in [0, 1], k an int
    >= 0, decay in (0, 1]): the same draws from the same generator. For a loop that draws every
    step of a run on values checked once (sim/reference.py's engine steps: the checks cost as
    much as the draw)."""
    u = rng.random(alpha.shape + (k,))
    alpha_j = alpha[..., None] * decay ** np.arange(k) if tree is None else _tree_positions(alpha, k, decay, tree)
    leading = np.cumprod(u < alpha_j, axis=-1).sum(axis=-1)
    return (1 + leading).astype(np.int64)



def beta_ppf(q, a: float, b: float) -> np.ndarray:
    """The Beta(a, b) quantile function at q: scipy.stats.beta.ppf's numbers (0 at q = 0, 1 at
    q = 1, NaN outside [0, 1] or where a or b is not positive) without importing scipy.stats,
    which costs every simulation process ~0.5 s of start-up. Its ppf is the ufunc
    scipy.special._ufuncs._beta_ppf (boost's ibeta_inv; scipy >= 1.14) applied inside (0, 1);
    scipy.special.betaincinv is not the same function (NaN in tails where it is finite). An
    older scipy without that ufunc gets stats.beta.ppf itself."""
    q = np.asarray(q, dtype=float)
    a, b = float(a), float(b)
    if _beta_ppf is None:
        return _beta_dist.ppf(q, a, b)
    out = np.full(q.shape, np.nan)
    if not (a > 0 and b > 0):
        return out
    out[q == 0] = 0.0
    out[q == 1] = 1.0
    inside = (q > 0) & (q < 1)
    out[inside] = _beta_ppf(q[inside], a, b)
    return out[()] if out.ndim == 0 else out


try:
    from scipy.special._ufuncs import _beta_ppf
except ImportError:  # pragma: no cover - scipy < 1.14
    from scipy.stats import beta as _beta_dist
    _beta_ppf = None
