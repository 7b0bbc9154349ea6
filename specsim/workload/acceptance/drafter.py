"""Drafter acceptance over RL training: temperature, staleness and the drafter's tau.

The per-step law (tokens emitted per verify step, the "+1 convention") is in
:mod:`specsim.workload.acceptance.laws`; the population average an engine reports (a ratio of
sums over verify steps: 1 / E[1 / tau(alpha_i)]) in :mod:`specsim.workload.acceptance.population`. Every
configured tau (``drafter.tau``, ``drafter.general_tau``, ``drafter.staleness.tau_after``) means
that reported value, at the temperature it was measured at (``drafter.tau_temperature``). On top:

* per-sequence heterogeneity: alpha_i ~ Beta(mean c, (1 - mean) c) (concentration c; None = all
  sequences share the mean);
* sampling temperature: :func:`temperature_alpha`, a documented heuristic (not fitted);
* staleness: the policy moves away from an external drafter, alpha(v) = floor + (alpha0 - floor)
  e^(-lambda v) after v policy versions (ReSpec, arXiv 2510.26475, observed the acceptance length
  of a fixed EAGLE-3 drafter fall from ~4 to ~2 over 100 RL steps -- a calibration target, see
  :func:`staleness_from_taus`, never a hard-coded output); online drafter updates every I steps
  reset v; drafters whose registry entry says they cannot go stale (self_quant, ngram) never do.

Every random draw goes through the ``numpy.random.Generator`` passed in as ``rng``. Bad inputs
raise :class:`specsim.errors.SpecError` naming the scenario field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specsim.catalog.models import check_proposal_rate, drafter_kind
from specsim.errors import SpecError
from specsim.workload.acceptance.checks import (
    alpha_array,
    check_concentration,
    decay_array,
    finite_real,
    first_bad,
    float_array,
    scalar_out,
    whole_k,
)
from specsim.workload.acceptance.laws import (
    alpha_from_tau,
    expected_tokens_per_verify,
    sample_tokens_per_verify,
    tau_scalar,
    tokens_per_verify_pmf,
    tokens_per_verify_var,
)
from specsim.workload.acceptance.population import mean_alpha_from_tau, reported_tau, sample_sequence_alphas

__all__ = [
    "DrafterAcceptance",
    "Staleness",
    "alpha_from_tau",
    "expected_tokens_per_verify",
    "reported_tau",
    "sample_sequence_alphas",
    "sample_tokens_per_verify",
    "staleness_from_taus",
    "temperature_alpha",
    "tokens_per_verify_pmf",
    "tokens_per_verify_var",
]

#: Default temperature sensitivity s of :func:`temperature_alpha` (heuristic, not fitted).
DEFAULT_TEMPERATURE_SENSITIVITY = 0.5

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
    a = alpha_array(alpha_ref, "alpha", closed=False)
    t = float_array(temperature, "temperature", ">= 0")
    bad = np.isnan(t) | (t < 0) | ~np.isfinite(t)
    if bad.any():
        raise SpecError("temperature", first_bad(t, bad, temperature), "a finite number >= 0")
    t_ref = finite_real(ref_temperature, "ref_temperature", "a finite number >= 0")
    if not 0.0 <= t_ref < math.inf:
        raise SpecError("ref_temperature", ref_temperature, "a finite number >= 0")
    s = finite_real(sensitivity, "temperature_sensitivity", "a finite number >= 0")
    if not 0.0 <= s < math.inf:
        raise SpecError("temperature_sensitivity", sensitivity, "a finite number >= 0")
    out = a ** ((1.0 + s * t) / (1.0 + s * t_ref))
    return scalar_out(np.asarray(out, dtype=float), a.ndim == 0 and t.ndim == 0)


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
        f = finite_real(self.floor_alpha, "staleness.floor_alpha", "in [0, 1)")
        if not 0.0 <= f < 1.0:
            raise SpecError("staleness.floor_alpha", self.floor_alpha, "in [0, 1)")
        lam = finite_real(self.decay_per_version, "staleness.rate_per_version", "a finite number >= 0")
        if not 0.0 <= lam < math.inf:
            raise SpecError("staleness.rate_per_version", self.decay_per_version, "a finite number >= 0")
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
        v = float_array(versions, "versions", ">= 0")
        bad = np.isnan(v) | (v < 0)
        if bad.any():
            raise SpecError("versions", first_bad(v, bad, versions), "a number of policy versions >= 0")
        if self.is_never:
            out = np.full(v.shape, float(alpha0))
        else:
            out = self.floor_alpha + (float(alpha0) - self.floor_alpha) * np.exp(-self.decay_per_version * v)
        return scalar_out(out, v.ndim == 0)


def staleness_from_taus(tau_fresh: float, tau_after: float, after_versions: float, k: int,
                        floor_alpha: float = 0.0, decay: float = 1.0, concentration=None, tree=None) -> Staleness:
    """The Staleness whose tau falls from ``tau_fresh`` to ``tau_after`` in ``after_versions`` versions.

    Back-solves mean alpha for both taus at draft length k (same decay and heterogeneity as the
    drafter, see :meth:`DrafterAcceptance.tau`; `tree` (depth k): both taus were measured drafting
    that tree, as the fresh one in :meth:`DrafterAcceptance.from_tau`, so both are solved on it), then
    lambda = ln((alpha_fresh - floor) / (alpha_after - floor)) / after_versions. Calibrate it to
    a measured drift (e.g. ReSpec's fixed EAGLE-3 drafter, tau ~4 -> ~2 over 100 RL steps);
    the result is a model parameter, not a published number copied into the simulator.
    """
    kk = whole_k(k, "tau_k", minimum=1)
    d = float(decay_array(decay))
    c = check_concentration(concentration)
    v = finite_real(after_versions, "staleness.after_versions", "a number of versions > 0")
    if not 0.0 < v < math.inf:
        raise SpecError("staleness.after_versions", after_versions, "a number of versions > 0")
    a0 = mean_alpha_from_tau(tau_fresh, kk, d, c, "tau", tree)
    a1 = mean_alpha_from_tau(tau_after, kk, d, c, "staleness.tau_after", tree)
    if a1 > a0:
        raise SpecError("staleness.tau_after", tau_after, f"<= tau_fresh ({tau_fresh:g})")
    f = finite_real(floor_alpha, "staleness.floor_alpha", "in [0, 1)")
    if a1 == a0:
        return Staleness(f, 0.0)
    if not f < a1:
        raise SpecError("staleness.floor_alpha", floor_alpha,
                        f"< the alpha at tau_after ({a1:.6g}), or no decay can reach tau_after")
    return Staleness(f, math.log((a0 - f) / (a1 - f)) / v)


@dataclass(frozen=True)
class DrafterAcceptance:
    """A drafter's acceptance behaviour over RL training.

    kind: a drafter kind of the registry (``catalog/drafters.yaml``, :func:`specsim.catalog.models.drafter_kind`);
    its ``goes_stale`` / ``retrainable`` flags decide whether staleness and online updates may be
    given (a kind that cannot go stale rejects them: nothing is silently dropped). alpha0: mean per-token acceptance of a freshly trained drafter at the
    scenario's temperature. decay: position decay d. concentration: Beta heterogeneity over
    sequences (None = homogeneous). staleness: drift per policy version. update_every_steps I:
    online drafter updates every I RL steps reset v to 0 (0 = never updated). proposal_rate p:
    the share of request-steps that carry a draft (None: the registry default of the kind; 1 for
    model drafters). A request-step without a draft decodes one token; with one, it emits
    1 + accepted with the acceptance above, so the tokens per request-step are 1 + p·(τ − 1)
    while `tau` stays the conditional τ vLLM reports (1 + accepted / num_drafts).
    """

    kind: str
    alpha0: float
    decay: float = 1.0
    concentration: float | None = None
    staleness: Staleness = field(default_factory=Staleness.never)
    update_every_steps: int = 0
    proposal_rate: float | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        spec = drafter_kind(self.kind)
        p = spec.proposal_rate if self.proposal_rate is None else self.proposal_rate
        put(self, "proposal_rate", check_proposal_rate(p))
        put(self, "alpha0", float(alpha_array(self.alpha0, "alpha", closed=False)))
        put(self, "decay", float(decay_array(self.decay)))
        put(self, "concentration", check_concentration(self.concentration))
        if not isinstance(self.staleness, Staleness):
            raise SpecError("staleness", self.staleness, "a Staleness")
        u = self.update_every_steps
        if isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < 0:
            raise SpecError("update_every_steps", u, "an integer >= 0 (0 = never)")
        put(self, "update_every_steps", int(u))
        if not spec.goes_stale and not self.staleness.is_never:
            raise SpecError("staleness", self.staleness,
                            f"none for a {self.kind} drafter (it never goes stale: {spec.source})")
        if not spec.retrainable and self.update_every_steps:
            raise SpecError("update_every_steps", u,
                            f"0 for a {self.kind} drafter (it is never retrained online: {spec.source})")
        if not self.staleness.is_never and self.staleness.floor_alpha > self.alpha0:
            raise SpecError("staleness.floor_alpha", self.staleness.floor_alpha,
                            f"<= alpha0 ({self.alpha0:g})")

    @classmethod
    def from_tau(cls, kind: str, tau: float, tau_k: int, *, decay: float = 1.0, concentration=None,
                 staleness: Staleness | None = None, update_every_steps: int = 0, tree=None,
                 proposal_rate: float | None = None) -> DrafterAcceptance:
        """A drafter whose fresh tau (see :meth:`tau`) at draft length ``tau_k`` is ``tau``.

        alpha0 is back-solved (brentq) for the given decay and heterogeneity; tau must be in
        [1, k + 1) (k + 1 itself would need alpha = 1). `tree` (depth tau_k): tau was measured
        drafting that tree, not a chain.
        """
        kk = whole_k(tau_k, "tau_k", minimum=1)
        d = float(decay_array(decay))
        c = check_concentration(concentration)
        p = check_proposal_rate(drafter_kind(kind).proposal_rate if proposal_rate is None else proposal_rate)
        a0 = mean_alpha_from_tau(tau, kk, d, c, "tau", tree, p)
        if a0 >= 1.0:
            raise SpecError("tau", tau, f"< {tau_scalar(1.0, kk, d):g} (that would need alpha = 1)")
        return cls(kind, a0, d, c, staleness if staleness is not None else Staleness.never(), update_every_steps, p)

    def alpha_at_version(self, v):
        """Mean alpha after v policy versions without a drafter update (kinds that never go stale: alpha0)."""
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

    def tau(self, k: int, step: int = 0, tree=None) -> float:
        """tau an engine reports at draft length k and RL step ``step``: tokens / verify steps.

        The ratio of sums over every verify step of a rollout, 1 / E[1 / tau(alpha_i)] with
        alpha_i ~ Beta around alpha_at_step(step) (:func:`specsim.workload.acceptance.population.reported_tau`);
        equals expected_tokens_per_verify(alpha_at_step(step), k, decay) for a homogeneous drafter.
        A configured ``drafter.tau`` round-trips: ``from_tau(kind, tau, k).tau(k) == tau``.
        `tree` (a DraftShape of depth k, workload/acceptance/shapes.py): the tau of drafting that tree instead of a chain.
        """
        kk = whole_k(k)
        return reported_tau(float(self.alpha_at_step(step)), kk, self.decay, self.concentration, tree,
                            self.proposal_rate)

    def tokens_per_step(self, k: int, step: int = 0, tree=None) -> float:
        """Tokens a running request emits per engine step at draft length k: 1 + p·(τ − 1), with p
        the proposal rate and τ = :meth:`tau` (conditional on a draft). k = 0: 1."""
        if whole_k(k) == 0:
            return 1.0
        return 1.0 + self.proposal_rate * (self.tau(k, step, tree) - 1.0)

    def sample_alphas(self, rng: np.random.Generator, n: int, step: int = 0) -> np.ndarray:
        """Per-sequence alphas (n,) at RL step ``step``: Beta around alpha_at_step(step)."""
        return sample_sequence_alphas(rng, n, float(self.alpha_at_step(step)), self.concentration)
