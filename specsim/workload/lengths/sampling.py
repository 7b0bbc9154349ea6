"""Sampling response and prompt lengths: per response, per GRPO group (correlated within a group),
per prompt, and the per-step length growth of a policy that learns to think longer."""


from __future__ import annotations

import math

import numpy as np

from specsim.errors import SpecError
from specsim.workload.lengths.checks import (
    cap_field,
    check_cap,
    finite_real,
    positive_real,
    scalar_out,
    sibling_field,
    sub_field,
    whole_count,
)
from specsim.workload.lengths.distribution import LengthDistribution

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
    n = whole_count(n, "n")
    cap = check_cap(cap_tokens, cap_field(dist.field_path))
    g = positive_real(growth, sub_field(dist.field_path, "growth"))
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
    n_prompts = whole_count(n_prompts, "n_prompts")
    group_size = whole_count(group_size, "group_size")
    cap = check_cap(cap_tokens, cap_field(dist.field_path))
    rho = finite_real(correlation, sibling_field(dist.field_path, "group_correlation"), "a number in [0, 1]")
    if not 0.0 <= rho <= 1.0:
        raise SpecError(sibling_field(dist.field_path, "group_correlation"), correlation, "a number in [0, 1]")
    g = positive_real(growth, sub_field(dist.field_path, "growth"))
    u_prompt = rng.standard_normal(n_prompts)
    e = rng.standard_normal((n_prompts, group_size))
    z = math.sqrt(rho) * u_prompt[:, None] + math.sqrt(1.0 - rho) * e
    return _discretise(dist._from_normal(z) * g, cap)


def growth_factor(step, per_step_growth: float):
    """Mean-length multiplier at RL step ``step``: (1 + g)^step (step 0 -> 1).

    Models the growth of response length over RL training (e.g. reasoning RL lengthening chains of
    thought) as compound growth g per step; vectorised over ``step``.
    """
    g = finite_real(per_step_growth, "per_step_growth", "a number > -1")
    if g <= -1:
        raise SpecError("per_step_growth", per_step_growth, "a number > -1")
    s = np.asarray(step, dtype=float)
    if (~np.isfinite(s) | (s < 0)).any():
        raise SpecError("step", step, "a step number >= 0")
    return scalar_out(np.power(1.0 + g, s), s.ndim == 0)


def sample_prompt_lengths(dist: LengthDistribution, rng: np.random.Generator, n_prompts: int,
                          cap_tokens: int) -> np.ndarray:
    """n_prompts prompt lengths (int64), truncated at ``cap_tokens`` like :func:`sample_lengths`.

    (Recipes such as DAPO filter out prompts above the max prompt length rather than truncate
    them; piling them at the cap is the conservative choice for KV capacity.)
    """
    return sample_lengths(dist, rng, n_prompts, cap_tokens)
