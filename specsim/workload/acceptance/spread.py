"""What the per-sequence spread of acceptance belongs to: the response, or stretches along it.

A drafter's acceptance differs between sequences: the per-token α of a sequence is drawn from
Beta(mean α, concentration c) (`drafter.heterogeneity`, workload/acceptance/population.py). The
scope says what one draw covers (`drafter.spread_scope`):

* ``between``: one α per response for its whole length (a hard prompt stays hard to draft for 32K
  tokens). specsim's behaviour before the scope existed.
* ``within``: α is redrawn from the same Beta every L tokens (`drafter.spread_segment_tokens`)
  along a response, the segments' latent normals an AR(1) with correlation ρ
  (`spread_segment_correlation`, a Gaussian copula: each segment's marginal stays the Beta).
* ``both``: the latent normal of segment j of response i is √½·zᵢ + √½·eᵢⱼ, a response part and
  an AR(1) segment part: half the latent variance each way.

The reported τ (vLLM's ratio of sums) is the same under every scope: every segment's α has the
same marginal, and the expected verify steps of a segment of ℓ tokens are ℓ / τ_k(α), so
Σ tokens / Σ steps → 1 / E[1/τ_k(α)] whatever the scope (lengths independent of α).

A response of n = ⌈len / L⌉ segments runs, in expectation, Σⱼ ℓⱼ / τ_k(αⱼ) verify steps: the
constant acceptance with the same expected steps is α_eff = τ_k⁻¹(len / Σⱼ ℓⱼ / τ_k(αⱼ)), the
harmonic combination of the segments (as workload/acceptance/context.py combines a context
curve's). Long responses average out (Var α_eff falls like 1/n for ρ = 0) and short ones keep
their spread: :func:`segment_effective_alphas`.

The engines key each response by one constant acceptance drawn as Beta⁻¹(u; mean, c) from one
uniform u per response (sim/cluster.py); they take no per-response length-dependent α without an
engine change. So the run-time model of ``within``/``both`` is the ``between`` model at an
effective concentration c_eff (:func:`effective_concentration`): the token-weighted variance of
α_eff over the workload's lengths, Var = Σ_ℓ w(ℓ) Var(α_eff | ℓ) with w ∝ ℓ·p(ℓ) (the tokens, and
so the time, each length carries), matched by Beta(mean, c_eff): c_eff + 1 = (c + 1)·Var_between /
Var. The mean is then re-solved so that the configured τ still holds (resolve). This is exact for
the responses that carry the tokens and too narrow for short ones (which barely matter to a step
set by its longest responses); with L ≥ the longest response it is c itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from specsim.errors import SpecError
from specsim.workload.acceptance.context import ALPHA_MAX
from specsim.workload.acceptance.laws import beta_ppf, expected_tokens_per_verify

__all__ = ["SCOPES", "SpreadScope", "effective_concentration", "length_bins", "segment_effective_alphas", "segment_latents"]

SCOPES = ("between", "within", "both")
#: responses per length bin of :func:`effective_concentration`'s fixed-seed quadrature
_DRAWS = 1000
#: quantile bins of the response lengths there
LENGTH_BINS = 32


@dataclass(frozen=True)
class SpreadScope:
    """What one draw of a sequence's α covers (module docstring): `kind` between | within | both,
    redrawn every `segment_tokens` tokens along a response, neighbouring segments' latent normals
    correlated by `rho` (the drafter's spread_scope, spread_segment_tokens and
    spread_segment_correlation). Checked when made: a SpecError names the bad one."""

    kind: str = "between"
    segment_tokens: int = 1024
    rho: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCOPES:
            raise SpecError("spread_scope", self.kind, " | ".join(SCOPES))
        if int(self.segment_tokens) < 1:
            raise SpecError("spread_segment_tokens", self.segment_tokens, ">= 1")
        if not 0.0 <= float(self.rho) < 1.0:
            raise SpecError("spread_segment_correlation", self.rho, "in [0, 1)")


#: one draw per response for its whole length
_ONE_DRAW = SpreadScope("between", 10**9)


def segment_latents(rng: np.random.Generator, n_responses: int, n_segments: int, spread: SpreadScope) -> np.ndarray:
    """Standard-normal latents (n_responses, n_segments) of each segment's α under `spread`:
    between = one normal per response repeated; within = an AR(1) of correlation ρ along the
    segments (stationary: every marginal N(0, 1)); both = √½·(response normal) + √½·(AR(1))."""
    scope, rho = spread.kind, spread.rho
    z0 = rng.standard_normal((n_responses, 1))
    if scope == "between":
        return np.repeat(z0, n_segments, axis=1)
    e = rng.standard_normal((n_responses, n_segments))
    ar = np.empty_like(e)
    ar[:, 0] = e[:, 0]
    s = math.sqrt(1.0 - rho * rho)
    for j in range(1, n_segments):
        ar[:, j] = rho * ar[:, j - 1] + s * e[:, j]
    return ar if scope == "within" else math.sqrt(0.5) * (z0 + ar)


@lru_cache(maxsize=64)
def _beta_of_latent(mean_alpha: float, concentration: float):
    """z ↦ Beta⁻¹(Φ(z); mean, c) on a grid of z in [-8.5, 8.5], interpolated (|error| < 1e-4 in α;
    scipy's ppf on every segment would dominate)."""
    grid = np.linspace(-8.5, 8.5, 4097)
    vals = beta_ppf(special.ndtr(grid), mean_alpha * concentration, (1.0 - mean_alpha) * concentration)
    return lambda z: np.interp(z, grid, vals)


def segment_effective_alphas(mean_alpha: float, concentration: float | None, lengths, spread: SpreadScope, k: int,
                             decay: float = 1.0, *, rng: np.random.Generator | None = None,
                             latents: np.ndarray | None = None) -> np.ndarray:
    """Per response (lengths (n,)): the constant α with the same expected verify steps at draft
    length k as its n_i = ⌈len_i / L⌉ segment draws (module docstring; L = spread.segment_tokens).
    Segment j covers min(L, len − jL) tokens. `latents` (n, max segments) may be given (else drawn
    from `rng` with :func:`segment_latents`); α of a segment = Beta⁻¹(Φ(latent); mean, c)."""
    lengths = np.asarray(lengths, dtype=float)
    n = lengths.size
    L = float(spread.segment_tokens)
    n_seg = np.maximum(1, np.ceil(lengths / L)).astype(int)
    width = int(n_seg.max()) if n else 1
    if concentration is None or n == 0:
        return np.full(n, float(mean_alpha))
    if latents is None:
        latents = segment_latents(rng if rng is not None else np.random.default_rng(0), n, width, spread)
    alpha = np.minimum(_beta_of_latent(float(mean_alpha), float(concentration))(latents[:, :width]), ALPHA_MAX)
    start = np.arange(width)[None, :] * L
    tok = np.clip(lengths[:, None] - start, 0.0, L)
    steps = np.sum(tok / expected_tokens_per_verify(alpha, k, decay), axis=1)
    grid_a, grid_tau = _tau_grid(int(k), float(decay))
    return np.interp(lengths / steps, grid_tau, grid_a)   # τ_k⁻¹ (τ_k increases in α)


@lru_cache(maxsize=64)
def _tau_grid(k: int, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """α on a fine grid in [0, ALPHA_MAX] and τ_k(α) there (the inverse by interpolation; the
    grid is denser near 1, where τ_k bends most)."""
    a = ALPHA_MAX * (1.0 - (1.0 - np.linspace(0.0, 1.0, 8193)) ** 2)
    return a, expected_tokens_per_verify(a, k, decay)


def length_bins(response_ppf, max_response_tokens: int) -> tuple[float, ...]:
    """Midpoint quantiles of the response lengths (capped), the bins :func:`effective_concentration` weighs."""
    u = (np.arange(LENGTH_BINS) + 0.5) / LENGTH_BINS
    return tuple(float(x) for x in np.clip(np.rint(response_ppf(u)), 1, max_response_tokens))


@lru_cache(maxsize=256)
def effective_concentration(mean_alpha: float, concentration: float | None, lengths: tuple[float, ...],
                            spread: SpreadScope, k: int, decay: float = 1.0) -> float | None:
    """c_eff (module docstring): the Beta concentration whose variance is the token-weighted
    variance of the responses' α_eff under `spread`, over equally likely response `lengths`
    (:func:`length_bins`). `between`, no spread, or every response in one segment:
    `concentration` itself. A fixed-seed quadrature (the same answer on every call): the variance
    ratio is taken against the one-segment α of the same draws, which cancels most of its noise."""
    if concentration is None or spread.kind == "between" or mean_alpha <= 0.0:
        return concentration
    segment_tokens = spread.segment_tokens
    lengths = np.asarray(lengths, dtype=float)
    if np.all(np.ceil(lengths / segment_tokens) <= 1):
        return concentration
    rng = np.random.default_rng(0x5C0E)
    num = den = wsum = 0.0
    for ell in lengths:
        lat = segment_latents(rng, _DRAWS, max(int(np.ceil(ell / segment_tokens)), 1), spread)
        eff = segment_effective_alphas(mean_alpha, concentration, np.full(_DRAWS, ell), spread, k, decay, latents=lat)
        single = segment_effective_alphas(mean_alpha, concentration, np.full(_DRAWS, ell), _ONE_DRAW, k, decay,
                                          latents=lat[:, :1])
        num += ell * float(np.var(eff))
        den += ell * float(np.var(single))
        wsum += ell
    ratio = max(num / den, 1e-9) if den > 0 else 1.0
    return float((concentration + 1.0) / ratio - 1.0)
