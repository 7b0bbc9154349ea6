"""Drafter acceptance: tokens emitted per verify step, heterogeneity, temperature and staleness.

Model (docs/design.md, "Speculative step" and "Drafters"). With draft length k, draft position j
(j = 1..k) is accepted with conditional probability

    alpha_j = alpha * d^(j - 1),        d in (0, 1] the position decay (d = 1: constant alpha),

and the verify step emits (number of leading accepted draft tokens) + 1 tokens (the target model
always contributes one: the correction or the bonus token). So

    S_j = P(accepted >= j) = prod_{m <= j} alpha_m = alpha^j d^(j (j - 1) / 2),
    E[emitted] = 1 + sum_{j=1..k} S_j  = (1 - alpha^(k+1)) / (1 - alpha)   for d = 1
                                                         (Leviathan et al. 2023, arXiv 2211.17192).

tau ("mean acceptance length") is E[emitted]. On top of that:

* per-sequence heterogeneity: alpha_i ~ Beta(mean c, (1 - mean) c) (concentration c; None = all
  sequences share the mean);
* sampling temperature: :func:`temperature_alpha`, a documented heuristic (not fitted);
* staleness: the policy moves away from an external drafter, alpha(v) = floor + (alpha0 - floor)
  e^(-lambda v) after v policy versions (ReSpec, arXiv 2510.26475, observed the acceptance length
  of a fixed EAGLE-3 drafter fall from ~4 to ~2 over 100 RL steps -- a calibration target, see
  :func:`staleness_from_taus`, never a hard-coded output); online drafter updates every I steps
  reset v; a self-speculative (quantized-policy) drafter never goes stale.

Every random draw goes through the ``numpy.random.Generator`` passed in as ``rng``. Bad inputs
raise :class:`specsim.errors.SpecError` naming the scenario field (``drafter.alpha``, ``drafter.tau``,
``drafter.tau_at_k``, ``drafter.position_decay``, ``drafter.heterogeneity``,
``drafter.staleness.rate_per_version``, ``workload.temperature``, ``speculation.k``, ...).
Math functions accept alpha in [0, 1] (alpha = 1 is the limit k + 1); a drafter's alpha0 must be
in [0, 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from specsim.errors import SpecError

__all__ = [
    "DrafterAcceptance",
    "Staleness",
    "alpha_from_tau",
    "expected_tokens_per_verify",
    "sample_sequence_alphas",
    "sample_tokens_per_verify",
    "staleness_from_taus",
    "temperature_alpha",
    "tokens_per_verify_pmf",
    "tokens_per_verify_var",
]

DRAFTER_KINDS = ("eagle3", "mtp", "self_quant", "ngram")

#: Default temperature sensitivity s of :func:`temperature_alpha` (heuristic, not fitted).
DEFAULT_TEMPERATURE_SENSITIVITY = 0.5

_EPS_RTOL = 4 * np.finfo(float).eps


# --------------------------------------------------------------------------- validation helpers


def _scalar_out(arr, scalar: bool):
    return float(arr) if scalar else arr


def _float_array(value, fld: str, allowed: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    return arr


def _first_bad(arr: np.ndarray, bad: np.ndarray, value):
    return float(arr[bad].ravel()[0]) if arr.ndim else value


def _alpha_array(alpha, fld: str = "drafter.alpha", closed: bool = True) -> np.ndarray:
    """alpha in [0, 1] (closed=True, the math limit alpha = 1 allowed) or [0, 1)."""
    allowed = "in [0, 1]" if closed else "in [0, 1)"
    a = _float_array(alpha, fld, allowed)
    bad = np.isnan(a) | (a < 0) | ((a > 1) if closed else (a >= 1))
    if bad.any():
        raise SpecError(fld, _first_bad(a, bad, alpha), allowed)
    return a


def _decay_array(decay, fld: str = "drafter.position_decay") -> np.ndarray:
    d = _float_array(decay, fld, "in (0, 1]")
    bad = np.isnan(d) | (d <= 0) | (d > 1)
    if bad.any():
        raise SpecError(fld, _first_bad(d, bad, decay), "in (0, 1]")
    return d


def _k_array(k, fld: str = "speculation.k") -> np.ndarray:
    allowed = "an integer >= 0 (draft length)"
    if isinstance(k, bool):
        raise SpecError(fld, k, allowed)
    try:
        kf = np.asarray(k, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(fld, k, allowed) from None
    bad = ~np.isfinite(kf) | (kf < 0) | (kf != np.floor(kf))
    if bad.any():
        raise SpecError(fld, _first_bad(kf, bad, k), allowed)
    return kf.astype(np.int64)


def _k_int(k, fld: str = "speculation.k", minimum: int = 0) -> int:
    allowed = f"an integer >= {minimum} (draft length)"
    kk = _k_array(k, fld)
    if kk.ndim != 0 or int(kk) < minimum:
        raise SpecError(fld, k, allowed)
    return int(kk)


def _real(value, fld: str, allowed: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if math.isnan(out):
        raise SpecError(fld, value, allowed)
    return out


def _concentration(value, fld: str = "drafter.heterogeneity") -> float | None:
    """None or inf -> None (homogeneous); otherwise a finite number > 0."""
    if value is None:
        return None
    c = _real(value, fld, "> 0, or None/inf for identical sequences")
    if c == math.inf:
        return None
    if c <= 0:
        raise SpecError(fld, value, "> 0, or None/inf for identical sequences")
    return c


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
    a = _alpha_array(alpha)
    kk = _k_array(k)
    d = _decay_array(decay)
    scalar = a.ndim == 0 and kk.ndim == 0 and d.ndim == 0
    if np.all(d == 1.0):
        out = _closed_form(a, kk) * np.ones(np.broadcast_shapes(a.shape, kk.shape, d.shape))
    else:
        general = 1.0 + _survival(a, kk, d).sum(axis=-1)
        out = np.where(d == 1.0, _closed_form(a, kk), general)
    return _scalar_out(out, scalar)


def tokens_per_verify_pmf(alpha, k: int, decay=1.0) -> np.ndarray:
    """P(emitted = 1), ..., P(emitted = k + 1), shape (..., k + 1) over broadcast alpha and decay.

    P(emitted = j + 1) = S_j - S_{j+1} with S_0 = 1, S_{k+1} = 0 and S_j = P(accepted >= j).
    """
    a = _alpha_array(alpha)
    kk = _k_int(k)
    d = _decay_array(decay)
    s = _survival(a, np.asarray(kk), d)
    shape = s.shape[:-1]
    full = np.concatenate([np.ones(shape + (1,)), s, np.zeros(shape + (1,))], axis=-1)
    return np.clip(full[..., :-1] - full[..., 1:], 0.0, 1.0)


def tokens_per_verify_var(alpha, k, decay=1.0):
    """Var[emitted per verify step] = sum_{j=1..k} (2j - 1) S_j - (sum_j S_j)^2.

    Uses E[A] = sum_j P(A >= j) and E[A^2] = sum_j (2j - 1) P(A >= j) for the accepted count A;
    emitted = A + 1 has the same variance. Vectorised like :func:`expected_tokens_per_verify`.
    """
    a = _alpha_array(alpha)
    kk = _k_array(k)
    d = _decay_array(decay)
    s = _survival(a, kk, d)
    j = np.arange(1, s.shape[-1] + 1)
    var = (s * (2 * j - 1)).sum(axis=-1) - s.sum(axis=-1) ** 2
    return _scalar_out(np.maximum(var, 0.0), a.ndim == 0 and kk.ndim == 0 and d.ndim == 0)


def _tau_scalar(a: float, k: int, d: float) -> float:
    """Fast unchecked scalar tau (used inside root finding)."""
    if d == 1.0:
        if a == 1.0:
            return k + 1.0
        if a == 0.0:
            return 1.0
        delta = 1.0 - a
        return -math.expm1((k + 1) * math.log1p(-delta)) / delta
    total, s = 1.0, 1.0
    for j in range(1, k + 1):
        s *= a * d ** (j - 1)
        total += s
    return total


def _check_tau(tau, k: int, d: float, fld: str) -> tuple[float, float]:
    t = _real(tau, fld, "a number >= 1")
    tau_max = _tau_scalar(1.0, k, d)
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
    kk = _k_int(k, "drafter.tau_at_k", minimum=1)
    d = float(_decay_array(decay))
    t, tau_max = _check_tau(tau, kk, d, "drafter.tau")
    if t == 1.0:
        return 0.0
    if t == tau_max:
        return 1.0
    return float(optimize.brentq(lambda x: _tau_scalar(x, kk, d) - t, 0.0, 1.0,
                                 xtol=1e-16, rtol=_EPS_RTOL, maxiter=500))


# --------------------------------------------------------------------------- sampling


def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def sample_tokens_per_verify(rng: np.random.Generator, alpha_per_seq, k: int, decay: float = 1.0) -> np.ndarray:
    """One verify step for each sequence: tokens emitted (int64, 1..k+1), same shape as alpha_per_seq.

    Draws k uniforms per sequence (array shape alpha.shape + (k,)); draft position j is accepted
    when u_j < alpha_i d^(j-1); emitted = 1 + number of leading accepts. The caller clips to the
    tokens a response still has left.
    """
    _check_rng(rng)
    a = _alpha_array(alpha_per_seq)
    kk = _k_int(k)
    d = float(_decay_array(decay))
    u = rng.random(a.shape + (kk,))
    alpha_j = a[..., None] * d ** np.arange(kk)
    leading = np.cumprod(u < alpha_j, axis=-1).sum(axis=-1)
    return (1 + leading).astype(np.int64)


def sample_sequence_alphas(rng: np.random.Generator, n: int, mean_alpha: float, concentration) -> np.ndarray:
    """Per-sequence acceptance alpha_i ~ Beta(mean c, (1 - mean) c), shape (n,).

    Some responses are predictable (boilerplate, repeated derivations), some are not; c is the
    Beta concentration (variance mean (1 - mean) / (1 + c)). concentration None or inf: every
    sequence gets exactly the mean and nothing is drawn from ``rng``; mean 0 likewise.
    """
    _check_rng(rng)
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise SpecError("n", n, "an integer >= 0")
    m = float(_alpha_array(mean_alpha, "drafter.alpha", closed=False))
    c = _concentration(concentration)
    if c is None or m == 0.0:
        return np.full(int(n), m)
    return rng.beta(m * c, (1.0 - m) * c, size=int(n))


def _beta_moments(m: float, c: float | None, kmax: int) -> np.ndarray:
    """E[alpha^j], j = 1..kmax, for alpha ~ Beta(m c, (1 - m) c): prod_{r<j} (m c + r) / (c + r)."""
    j = np.arange(kmax)
    if c is None:
        return m ** (j + 1.0)
    return np.cumprod((m * c + j) / (c + j))


def _population_tau(m: float, k: int, d: float, c: float | None) -> float:
    """Mean over sequences of tau(alpha_i): 1 + sum_j d^(j(j-1)/2) E[alpha^j] (Beta moments)."""
    if c is None or k == 0:
        return _tau_scalar(m, k, d)
    j = np.arange(1, k + 1)
    return float(1.0 + np.sum(d ** (j * (j - 1) / 2.0) * _beta_moments(m, c, k)))


def _mean_alpha_from_tau(tau, k: int, d: float, c: float | None, fld: str = "drafter.tau") -> float:
    if c is None:
        return alpha_from_tau(tau, k, d)
    t, tau_max = _check_tau(tau, k, d, fld)
    if t == 1.0:
        return 0.0
    if t == tau_max:
        return 1.0
    return float(optimize.brentq(lambda x: _population_tau(x, k, d, c) - t, 0.0, 1.0,
                                 xtol=1e-16, rtol=_EPS_RTOL, maxiter=500))


def temperature_alpha(alpha_ref, temperature, ref_temperature: float = 1.0,
                      sensitivity: float = DEFAULT_TEMPERATURE_SENSITIVITY):
    """alpha at sampling temperature T from alpha_ref measured at T_ref. HEURISTIC, NOT FITTED.

        alpha_T = alpha_ref ** ((1 + s T) / (1 + s T_ref))

    Rationale: acceptance E[sum_x min(p, q)] is highest for greedy decoding and falls as sampling
    gets hotter (both distributions flatten and their overlap shrinks); drafter papers report
    higher acceptance at T = 0 than at T = 1. The power law keeps alpha in [0, 1), is the identity
    at T = T_ref, is non-increasing in T (strictly for s > 0 and 0 < alpha_ref < 1) and stays
    below 1 at T = 0 (exponent 1 / (1 + s T_ref) > 0). s >= 0 is its one parameter (s = 0: no
    temperature effect; default 0.5 turns alpha 0.70 at T=1 into 0.79 at T=0); calibrate it from
    traces at two temperatures before trusting it. Vectorised over alpha_ref and temperature.
    """
    a = _alpha_array(alpha_ref, "drafter.alpha", closed=False)
    t = _float_array(temperature, "workload.temperature", ">= 0")
    bad = np.isnan(t) | (t < 0) | ~np.isfinite(t)
    if bad.any():
        raise SpecError("workload.temperature", _first_bad(t, bad, temperature), "a finite number >= 0")
    t_ref = _real(ref_temperature, "drafter.ref_temperature", "a finite number >= 0")
    if not 0.0 <= t_ref < math.inf:
        raise SpecError("drafter.ref_temperature", ref_temperature, "a finite number >= 0")
    s = _real(sensitivity, "drafter.temperature_sensitivity", "a finite number >= 0")
    if not 0.0 <= s < math.inf:
        raise SpecError("drafter.temperature_sensitivity", sensitivity, "a finite number >= 0")
    out = a ** ((1.0 + s * t) / (1.0 + s * t_ref))
    return _scalar_out(np.asarray(out, dtype=float), a.ndim == 0 and t.ndim == 0)


# --------------------------------------------------------------------------- staleness and drafters


@dataclass(frozen=True)
class Staleness:
    """Acceptance drift of a fixed drafter as the policy moves away from it.

    alpha(v) = floor_alpha + (alpha0 - floor_alpha) * exp(-decay_per_version * v), v = policy
    versions since the drafter was last trained. decay_per_version (lambda, per version) is the
    e-folding rate; floor_alpha the acceptance a drafter keeps however stale (shared language).
    ``Staleness.never()`` (lambda = 0) for drafters that cannot go stale.
    """

    floor_alpha: float = 0.0
    decay_per_version: float = 0.0

    def __post_init__(self) -> None:
        f = _real(self.floor_alpha, "drafter.staleness.floor_alpha", "in [0, 1)")
        if not 0.0 <= f < 1.0:
            raise SpecError("drafter.staleness.floor_alpha", self.floor_alpha, "in [0, 1)")
        lam = _real(self.decay_per_version, "drafter.staleness.rate_per_version", "a finite number >= 0")
        if not 0.0 <= lam < math.inf:
            raise SpecError("drafter.staleness.rate_per_version", self.decay_per_version, "a finite number >= 0")
        object.__setattr__(self, "floor_alpha", f)
        object.__setattr__(self, "decay_per_version", lam)

    @classmethod
    def never(cls) -> Staleness:
        """No drift (self-speculative and n-gram drafters)."""
        return cls(0.0, 0.0)

    @property
    def is_never(self) -> bool:
        return self.decay_per_version == 0.0

    def alpha(self, alpha0, versions):
        """alpha after ``versions`` policy versions (vectorised over versions >= 0)."""
        v = _float_array(versions, "drafter.versions", ">= 0")
        bad = np.isnan(v) | (v < 0)
        if bad.any():
            raise SpecError("drafter.versions", _first_bad(v, bad, versions), "a number of policy versions >= 0")
        if self.is_never:
            out = np.full(v.shape, float(alpha0))
        else:
            out = self.floor_alpha + (float(alpha0) - self.floor_alpha) * np.exp(-self.decay_per_version * v)
        return _scalar_out(out, v.ndim == 0)


def staleness_from_taus(tau_fresh: float, tau_after: float, after_versions: float, k: int,
                        floor_alpha: float = 0.0, decay: float = 1.0, concentration=None) -> Staleness:
    """The Staleness whose tau falls from ``tau_fresh`` to ``tau_after`` in ``after_versions`` versions.

    Back-solves mean alpha for both taus at draft length k (same decay and heterogeneity as the
    drafter, see :meth:`DrafterAcceptance.tau`), then
    lambda = ln((alpha_fresh - floor) / (alpha_after - floor)) / after_versions. Calibrate it to
    a measured drift (e.g. ReSpec's fixed EAGLE-3 drafter, tau ~4 -> ~2 over 100 RL steps);
    the result is a model parameter, not a published number copied into the simulator.
    """
    kk = _k_int(k, "drafter.tau_at_k", minimum=1)
    d = float(_decay_array(decay))
    c = _concentration(concentration)
    v = _real(after_versions, "drafter.staleness.after_versions", "a number of versions > 0")
    if not 0.0 < v < math.inf:
        raise SpecError("drafter.staleness.after_versions", after_versions, "a number of versions > 0")
    a0 = _mean_alpha_from_tau(tau_fresh, kk, d, c, "drafter.tau")
    a1 = _mean_alpha_from_tau(tau_after, kk, d, c, "drafter.staleness.tau_after")
    if a1 > a0:
        raise SpecError("drafter.staleness.tau_after", tau_after, f"<= tau_fresh ({tau_fresh:g})")
    f = _real(floor_alpha, "drafter.staleness.floor_alpha", "in [0, 1)")
    if a1 == a0:
        return Staleness(f, 0.0)
    if not f < a1:
        raise SpecError("drafter.staleness.floor_alpha", floor_alpha,
                        f"< the alpha at tau_after ({a1:.6g}), or no decay can reach tau_after")
    return Staleness(f, math.log((a0 - f) / (a1 - f)) / v)


@dataclass(frozen=True)
class DrafterAcceptance:
    """A drafter's acceptance behaviour over RL training.

    kind: ``eagle3`` (external head trained on policy outputs), ``mtp`` (native multi-token
    prediction heads), ``self_quant`` (quantized copy of the policy: re-quantized at each weight
    sync, so always in sync -- it never goes stale and is never "updated"), ``ngram`` (suffix /
    n-gram lookup). alpha0: mean per-token acceptance of a freshly trained drafter at the
    scenario's temperature. decay: position decay d. concentration: Beta heterogeneity over
    sequences (None = homogeneous). staleness: drift per policy version. update_every_steps I:
    online drafter updates every I RL steps reset v to 0 (0 = never updated).
    """

    kind: str
    alpha0: float
    decay: float = 1.0
    concentration: float | None = None
    staleness: Staleness = field(default_factory=Staleness.never)
    update_every_steps: int = 0

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.kind not in DRAFTER_KINDS:
            raise SpecError("drafter.kind", self.kind, "one of " + ", ".join(repr(k) for k in DRAFTER_KINDS))
        put(self, "alpha0", float(_alpha_array(self.alpha0, "drafter.alpha", closed=False)))
        put(self, "decay", float(_decay_array(self.decay)))
        put(self, "concentration", _concentration(self.concentration))
        if not isinstance(self.staleness, Staleness):
            raise SpecError("drafter.staleness", self.staleness, "a Staleness")
        u = self.update_every_steps
        if isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < 0:
            raise SpecError("drafter.update_every_steps", u, "an integer >= 0 (0 = never)")
        put(self, "update_every_steps", int(u))
        if self.kind == "self_quant":
            if not self.staleness.is_never:
                raise SpecError("drafter.staleness", self.staleness,
                                "none for a self_quant drafter (a quantized copy of the policy never goes stale)")
            if self.update_every_steps:
                raise SpecError("drafter.update_every_steps", u,
                                "0 for a self_quant drafter (it is re-quantized at every weight sync)")
        if not self.staleness.is_never and self.staleness.floor_alpha > self.alpha0:
            raise SpecError("drafter.staleness.floor_alpha", self.staleness.floor_alpha,
                            f"<= alpha0 ({self.alpha0:g})")

    @classmethod
    def from_tau(cls, kind: str, tau: float, tau_k: int, *, decay: float = 1.0, concentration=None,
                 staleness: Staleness | None = None, update_every_steps: int = 0) -> DrafterAcceptance:
        """A drafter whose fresh tau (see :meth:`tau`) at draft length ``tau_k`` is ``tau``.

        alpha0 is back-solved (brentq) for the given decay and heterogeneity; tau must be in
        [1, k + 1) (k + 1 itself would need alpha = 1).
        """
        kk = _k_int(tau_k, "drafter.tau_at_k", minimum=1)
        d = float(_decay_array(decay))
        c = _concentration(concentration)
        a0 = _mean_alpha_from_tau(tau, kk, d, c, "drafter.tau")
        if a0 >= 1.0:
            raise SpecError("drafter.tau", tau, f"< {_tau_scalar(1.0, kk, d):g} (that would need alpha = 1)")
        return cls(kind, a0, d, c, staleness if staleness is not None else Staleness.never(), update_every_steps)

    def alpha_at_version(self, v):
        """Mean alpha after v policy versions without a drafter update (self_quant: always alpha0)."""
        if self.kind == "self_quant":
            return self.staleness.never().alpha(self.alpha0, v)
        return self.staleness.alpha(self.alpha0, v)

    def versions_since_update(self, step):
        """v at RL step ``step``: step mod I with updates every I steps (at steps 0, I, 2I, ...), else step.

        In an async pipeline pass the policy version that generates the rollouts, not the
        trainer's step.
        """
        s = np.asarray(step)
        if s.dtype.kind not in "iu" and not (s.dtype.kind == "f" and np.all(s == np.floor(s))):
            raise SpecError("step", step, "an integer step >= 0")
        if (s < 0).any():
            raise SpecError("step", step, "an integer step >= 0")
        s = s.astype(np.int64)
        out = np.mod(s, self.update_every_steps) if self.update_every_steps else s
        return int(out) if out.ndim == 0 else out

    def alpha_at_step(self, step):
        """Mean alpha at RL step ``step`` (staleness since the last update)."""
        return self.alpha_at_version(self.versions_since_update(step))

    def tau(self, k: int, step: int = 0) -> float:
        """Mean tokens per verify step at draft length k and RL step ``step``, averaged over sequences.

        = 1 + sum_j d^(j(j-1)/2) E[alpha_i^j] with alpha_i ~ Beta (exact Beta moments); equals
        expected_tokens_per_verify(alpha_at_step(step), k, decay) for a homogeneous drafter. Note:
        a tau reported by an inference engine over a whole rollout is total tokens / total verify
        steps, a length-weighted harmonic mean over sequences, which is a little lower than this
        when concentration is finite.
        """
        kk = _k_int(k)
        return _population_tau(float(self.alpha_at_step(step)), kk, self.decay, self.concentration)

    def sample_alphas(self, rng: np.random.Generator, n: int, step: int = 0) -> np.ndarray:
        """Per-sequence alphas (n,) at RL step ``step``: Beta around alpha_at_step(step)."""
        return sample_sequence_alphas(rng, n, float(self.alpha_at_step(step)), self.concentration)
