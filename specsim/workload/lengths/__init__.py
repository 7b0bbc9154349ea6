"""Response- and prompt-length distributions for RL rollouts.

Why this matters: rollout time is set by the long tail. As responses finish the batch shrinks,
decoding turns memory-bound, and that is exactly where speculative decoding pays (docs/design.md,
"Response lengths"). Lengths are long-tailed -- roughly log-normal, often a mixture (short
answers vs. long chains of thought) -- and truncated at the max response length with the
truncated mass piled at the cap (responses that hit the limit). No parametric fit is published
(calibration/published/README.md, "RL workloads"), so everything here can also be fitted to a trace.

The package's modules; every public name is importable from `specsim.workload.lengths`:

* workload/lengths/distribution.py   -- :class:`LengthDistribution` (the model: cdf, ppf, mean, tail mass)
* workload/lengths/sampling.py       -- sampling: :func:`sample_lengths`, :func:`sample_group_lengths`,
  :func:`sample_prompt_lengths`, :func:`growth_factor` 
* workload/lengths/fit.py    -- :func:`fit` (censored MLE / EM, KS goodness of fit), :func:`length_summary`
* workload/lengths/checks.py -- input checks and trace-file reading

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

from specsim.workload.lengths.distribution import DEFAULT_FIELD, Z_99, LengthDistribution
from specsim.workload.lengths.fit import LengthFit, fit, length_summary
from specsim.workload.lengths.sampling import growth_factor, sample_group_lengths, sample_lengths, sample_prompt_lengths

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
