"""Response- and prompt-length distributions for RL rollouts.

Why this matters: rollout time is set by the long tail. As responses finish the batch shrinks,
decoding turns memory-bound, and that is exactly where speculative decoding pays (docs/design.md,
"Response lengths"). Lengths are long-tailed -- roughly log-normal, often a mixture (short
answers vs. long chains of thought) -- and truncated at the max response length with the
truncated mass piled at the cap (responses that hit the limit). No parametric fit is published
(calibration/published/README.md, "RL workloads"), so everything here can also be fitted to a trace.

The code is split along its seams; every public name is importable from here:

* workload/length_dist.py   -- :class:`LengthDistribution` (the model: cdf, ppf, mean, tail mass)
* workload/lengths.py       -- sampling: :func:`sample_lengths`, :func:`sample_group_lengths`,
  :func:`sample_prompt_lengths`, :func:`growth_factor` (this module)
* workload/length_fit.py    -- :func:`fit` (censored MLE / EM, KS goodness of fit), :func:`length_summary`
* workload/length_checks.py -- input checks and trace-file reading

Conventions (used by every module of the split, so samplers, fits and summaries agree):

* A length model is a continuous positive latent L (tokens). A sampled length is
  ``clip(rint(growth * L), 1, cap)`` as int64, with any ``growth * L > cap`` set to ``cap``.
  Hence P(sample == cap) = P(growth * L >= cap - 0.5) = ``tail_mass(cap - 0.5)`` exactly, which
  differs from ``tail_mass(cap)`` = P(L > cap) by ~0.5 * pdf(cap): negligible for caps of
  thousands of tokens.
* Fits treat integer data the same way: a value == cap is right-censored at cap - 0.5, and the
  goodness of fit is the KS distance to the discretised, truncated model.
* Every random draw goes through the ``numpy.random.Generator`` passed in as ``rng``.
* Bad parameters raise :class:`specsim.errors.SpecError` naming a dotted scenario field; the prefix
  comes from ``LengthDistribution.field_path`` (default ``workload.response_tokens``): e.g.
  ``workload.response_tokens.median``, ``.components[1].p99``, ``.path`` (with ``where`` = the
  file); the cap and group correlation are named as siblings (``workload.max_response_tokens``,
  ``workload.group_correlation``).
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import SpecError
from specsim.workload.length_checks import _cap, _cap_field, _count, _f, _positive, _real, _scalar_out, _sibling
from specsim.workload.length_dist import DEFAULT_FIELD, Z_99, LengthDistribution
from specsim.workload.length_fit import LengthFit, fit, length_summary

__all__ = [
    "DEFAULT_FIELD",
    "Z_99",
    "LengthDistribution",
    "LengthFit",
    "fit",
    "growth_factor",
    "length_summary",
    "sample_group_lengths",
    "sample_lengths",
    "sample_prompt_lengths",
]


# --------------------------------------------------------------------------- sampling


def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _discretise(x: np.ndarray, cap: int) -> np.ndarray:
    """clip(rint(x), 1, cap) as int64; x > cap (including inf) becomes cap."""
    return np.clip(np.rint(np.minimum(x, cap)), 1, cap).astype(np.int64)


def sample_lengths(dist: LengthDistribution, rng: np.random.Generator, n: int, cap_tokens: int,
                   growth: float = 1.0) -> np.ndarray:
    """n independent lengths: clip(rint(growth * L), 1, cap) as int64.

    L = Q(Phi(z)), z ~ N(0, 1) drawn from ``rng`` (n normals). Lengths above the cap are set to the
    cap: the truncated mass is piled at the cap (responses that hit the length limit), so the
    share equal to cap is ~``dist.scaled(growth).tail_mass(cap)``. ``growth`` is the mean-length
    multiplier of the current RL step (see :func:`growth_factor`).
    """
    _check_rng(rng)
    n = _count(n, "n")
    cap = _cap(cap_tokens, _cap_field(dist.field_path))
    g = _positive(growth, _f(dist.field_path, "growth"))
    z = rng.standard_normal(n)
    return _discretise(dist._from_normal(z) * g, cap)


def sample_group_lengths(dist: LengthDistribution, rng: np.random.Generator, n_prompts: int, group_size: int,
                         cap_tokens: int, correlation: float = 0.0, growth: float = 1.0) -> np.ndarray:
    """Lengths of GRPO groups, shape (n_prompts, group_size), int64.

    The responses to one prompt share its difficulty through a Gaussian copula:
    z = sqrt(rho) u_prompt + sqrt(1 - rho) e, u_prompt, e ~ N(0, 1) i.i.d.; U = Phi(z); L = Q(U);
    then growth, rounding and truncation as in :func:`sample_lengths`. z is exactly N(0, 1), so the
    marginal distribution is preserved for every rho in [0, 1]. ``correlation`` rho is the
    correlation of the latent normals (for an untruncated lognormal, that of ln L), not of the
    lengths themselves: corr(L, L') = (e^(rho sigma^2) - 1) / (e^(sigma^2) - 1) <= rho.
    Draw order: n_prompts normals, then n_prompts * group_size normals (row-major).
    """
    _check_rng(rng)
    n_prompts = _count(n_prompts, "n_prompts")
    group_size = _count(group_size, "group_size")
    cap = _cap(cap_tokens, _cap_field(dist.field_path))
    rho = _real(correlation, _sibling(dist.field_path, "group_correlation"), "a number in [0, 1]")
    if not 0.0 <= rho <= 1.0:
        raise SpecError(_sibling(dist.field_path, "group_correlation"), correlation, "a number in [0, 1]")
    g = _positive(growth, _f(dist.field_path, "growth"))
    u_prompt = rng.standard_normal(n_prompts)
    e = rng.standard_normal((n_prompts, group_size))
    z = math.sqrt(rho) * u_prompt[:, None] + math.sqrt(1.0 - rho) * e
    return _discretise(dist._from_normal(z) * g, cap)


def growth_factor(step, per_step_growth: float):
    """Mean-length multiplier at RL step ``step``: (1 + g)^step (step 0 -> 1).

    Models the growth of response length over RL training (e.g. reasoning RL lengthening chains of
    thought) as compound growth g per step; vectorised over ``step``.
    """
    g = _real(per_step_growth, "workload.length_growth_per_step", "a number > -1")
    if g <= -1:
        raise SpecError("workload.length_growth_per_step", per_step_growth, "a number > -1")
    s = np.asarray(step, dtype=float)
    if (~np.isfinite(s) | (s < 0)).any():
        raise SpecError("step", step, "a step number >= 0")
    return _scalar_out(np.power(1.0 + g, s), s.ndim == 0)


def sample_prompt_lengths(dist: LengthDistribution, rng: np.random.Generator, n_prompts: int,
                          cap_tokens: int) -> np.ndarray:
    """n_prompts prompt lengths (int64), truncated at ``cap_tokens`` like :func:`sample_lengths`.

    (Recipes such as DAPO filter out prompts above the max prompt length rather than truncate
    them; piling them at the cap is the conservative choice for KV capacity.)
    """
    return sample_lengths(dist, rng, n_prompts, cap_tokens)
