"""The length model: :class:`LengthDistribution` (lognormal, mixture of lognormals, empirical).

A continuous positive latent length L in tokens with its cdf, survival function, ppf and
capped mean; sampling, truncation at the cap and fitting live in workload/lengths/sampling.py and
workload/lengths/fit.py and follow the conventions stated in workload/lengths/sampling.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.special import ndtr, ndtri

from specsim.errors import SpecError
from specsim.workload.lengths.checks import (
    cap_field,
    check_cap,
    finite_real,
    positive_array,
    positive_real,
    scalar_out,
    sub_field,
)
from specsim.workload.lengths.parsed_cache import parsed_lengths

__all__ = ["DEFAULT_FIELD", "Z_99", "LengthDistribution"]

#: z_0.99 = Phi^-1(0.99) = 2.3263...: converts (median, p99) to (mu, sigma) of a lognormal.
Z_99 = float(ndtri(0.99))

DEFAULT_FIELD = "lengths"
_KINDS = ("lognormal", "mixture", "empirical")


@dataclass(frozen=True)
class LengthDistribution:
    """A length model in tokens: ``lognormal``, ``mixture`` of lognormals, or ``empirical``.

    * ``lognormal``: ln L ~ Normal(mu, sigma). median = e^mu, p99 = e^(mu + z_0.99 sigma).
    * ``mixture``: L ~ sum_i weights[i] * LogNormal(mus[i], sigmas[i]) -- e.g. short direct answers
      plus long chains of thought; weights >= 0 summing to 1 (tolerance 1e-6, then renormalised).
    * ``empirical``: the observed ``values`` (from a trace), resampled with replacement; its ppf is
      the inverse empirical CDF Q(u) = inf{x : F_n(x) >= u}.

    ``field_path`` is only the dotted prefix used in error messages (``workload.prompt_tokens``
    for prompt lengths); it does not take part in equality.
    """

    kind: str
    mu: float | None = None
    sigma: float | None = None
    weights: tuple[float, ...] = ()
    mus: tuple[float, ...] = ()
    sigmas: tuple[float, ...] = ()
    values: tuple[float, ...] = field(default=(), repr=False)
    field_path: str = field(default=DEFAULT_FIELD, compare=False, repr=False)
    # caches (numpy views of the parameters), set in __post_init__
    _w: np.ndarray = field(init=False, repr=False, compare=False)
    _mu: np.ndarray = field(init=False, repr=False, compare=False)
    _sg: np.ndarray = field(init=False, repr=False, compare=False)
    _sorted: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fp = self.field_path
        put = object.__setattr__
        if self.kind not in _KINDS:
            raise SpecError(sub_field(fp, "kind"), self.kind, "one of 'lognormal', 'mixture', 'empirical'")
        empty = np.empty(0)
        if self.kind == "lognormal":
            mu = finite_real(self.mu, sub_field(fp, "mu"))
            sigma = positive_real(self.sigma, sub_field(fp, "sigma"))
            put(self, "mu", mu)
            put(self, "sigma", sigma)
            put(self, "_w", np.ones(1))
            put(self, "_mu", np.array([mu]))
            put(self, "_sg", np.array([sigma]))
            put(self, "_sorted", empty)
        elif self.kind == "mixture":
            k = len(self.weights)
            if k == 0:
                raise SpecError(sub_field(fp, "components"), self.weights, "a non-empty list of components")
            if len(self.mus) != k or len(self.sigmas) != k:
                raise SpecError(
                    sub_field(fp, "components"),
                    (len(self.mus), len(self.sigmas)),
                    f"one mu and one sigma per weight ({k} weights)",
                )
            comp = sub_field(fp, "components")
            w = np.array([finite_real(x, f"{comp}[{i}].weight") for i, x in enumerate(self.weights)])
            if (w < 0).any():
                raise SpecError(comp, tuple(self.weights), "components with non-negative weights")
            if abs(w.sum() - 1.0) > 1e-6:
                raise SpecError(comp, tuple(self.weights), "components with weights summing to 1 (within 1e-6)")
            w = w / w.sum()
            mus = np.array([finite_real(x, f"{comp}[{i}].mu") for i, x in enumerate(self.mus)])
            sgs = np.array([positive_real(x, f"{comp}[{i}].sigma") for i, x in enumerate(self.sigmas)])
            put(self, "weights", tuple(float(x) for x in w))
            put(self, "mus", tuple(float(x) for x in mus))
            put(self, "sigmas", tuple(float(x) for x in sgs))
            put(self, "_w", w)
            put(self, "_mu", mus)
            put(self, "_sg", sgs)
            put(self, "_sorted", empty)
        else:
            arr = positive_array(self.values, sub_field(fp, "values"))
            put(self, "values", tuple(arr.tolist()))
            put(self, "_w", empty)
            put(self, "_mu", empty)
            put(self, "_sg", empty)
            put(self, "_sorted", np.sort(arr))

    # ------------------------------------------------------------------ constructors

    @classmethod
    def lognormal(cls, mu: float, sigma: float, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """ln L ~ Normal(mu, sigma): mu, sigma of the log of the length in tokens."""
        return cls("lognormal", mu=mu, sigma=sigma, field_path=field_path)

    @staticmethod
    def _mu_sigma_from_median_p99(median_tokens, p99_tokens, fp: str) -> tuple[float, float]:
        med = positive_real(median_tokens, sub_field(fp, "median"))
        p99 = positive_real(p99_tokens, sub_field(fp, "p99"))
        if p99 <= med:
            raise SpecError(sub_field(fp, "p99"), p99_tokens, f"> the median ({med:g} tokens)")
        return math.log(med), math.log(p99 / med) / Z_99

    @classmethod
    def lognormal_from_median_p99(
        cls, median_tokens: float, p99_tokens: float, *, field_path: str = DEFAULT_FIELD
    ) -> LengthDistribution:
        """Lognormal with the given median and 99th percentile (before truncation).

        mu = ln(median); sigma = ln(p99 / median) / z_0.99, z_0.99 = Phi^-1(0.99) = 2.326.
        """
        mu, sigma = cls._mu_sigma_from_median_p99(median_tokens, p99_tokens, field_path)
        return cls("lognormal", mu=mu, sigma=sigma, field_path=field_path)

    @classmethod
    def mixture(
        cls,
        weights,
        medians_tokens=None,
        p99s_tokens=None,
        *,
        mus=None,
        sigmas=None,
        field_path: str = DEFAULT_FIELD,
    ) -> LengthDistribution:
        """Mixture of lognormals, components given by (median, p99) each, or by (mus, sigmas)."""
        fp = field_path
        by_quantiles = medians_tokens is not None or p99s_tokens is not None
        by_params = mus is not None or sigmas is not None
        if by_quantiles == by_params:
            raise SpecError(sub_field(fp, "components"), "medians/p99s and mus/sigmas",
                            "given either as medians_tokens + p99s_tokens or as mus + sigmas")
        weights = tuple(weights)
        if by_quantiles:
            if medians_tokens is None or p99s_tokens is None:
                raise SpecError(sub_field(fp, "components"), p99s_tokens, "p99s given together with medians")
            meds, p99s = tuple(medians_tokens), tuple(p99s_tokens)
            if len(meds) != len(weights) or len(p99s) != len(weights):
                raise SpecError(sub_field(fp, "components"), (len(meds), len(p99s)),
                                f"one median and one p99 per weight ({len(weights)} weights)")
            pairs = [cls._mu_sigma_from_median_p99(m, p, f"{fp}.components[{i}]")
                     for i, (m, p) in enumerate(zip(meds, p99s))]
            mus = tuple(p[0] for p in pairs)
            sigmas = tuple(p[1] for p in pairs)
        else:
            if mus is None or sigmas is None:
                raise SpecError(sub_field(fp, "components"), sigmas, "sigmas given together with mus")
        return cls("mixture", weights=weights, mus=tuple(mus), sigmas=tuple(sigmas), field_path=fp)

    @classmethod
    def empirical(cls, values, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """Observed lengths (tokens, all > 0), resampled with replacement."""
        arr = positive_array(values, sub_field(field_path, "values"))
        return cls("empirical", values=arr, field_path=field_path)

    @classmethod
    def fixed(cls, tokens: float, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """Every length equals ``tokens`` (the scenario's kind=fixed): an empirical distribution of one value."""
        return cls("empirical", values=(positive_real(tokens, sub_field(field_path, "tokens")),), field_path=field_path)

    @classmethod
    def empirical_file(cls, path, *, field_path: str = DEFAULT_FIELD, column: str | None = None) -> LengthDistribution:
        """Observed lengths read from a trace file.

        * ``.jsonl`` / ``.ndjson`` / ``.json``: one JSON value per line, an object with key
          `column` (default: the first of checks.LENGTH_COLUMNS: ``length``, ``response_tokens``,
          ``response_length``, ``response_lengths``, ``generation_lengths``,
          ``generation_length``; a list value is one length per entry), or a bare number.
        * anything else is CSV: the column named `column` (default: the first of
          LENGTH_COLUMNS), or a single column (with or without a header).

        An unreadable or empty file, or a non-numeric or non-positive value, raises SpecError with
        ``where`` = the file.
        """
        return _empirical_file(str(path), field_path, column, *_file_identity(path))

    # ------------------------------------------------------------------ derived

    def scaled(self, growth: float) -> LengthDistribution:
        """The distribution of growth * L (mean length growth over RL training).

        lognormal/mixture: mu += ln(growth); empirical: values *= growth.
        """
        g = positive_real(growth, sub_field(self.field_path, "growth"))
        if g == 1.0:
            return self
        if self.kind == "lognormal":
            return LengthDistribution("lognormal", mu=self.mu + math.log(g), sigma=self.sigma,
                                      field_path=self.field_path)
        if self.kind == "mixture":
            return LengthDistribution("mixture", weights=self.weights, mus=tuple(m + math.log(g) for m in self.mus),
                                      sigmas=self.sigmas, field_path=self.field_path)
        return LengthDistribution("empirical", values=tuple(v * g for v in self.values), field_path=self.field_path)

    def cdf(self, x):
        """P(L <= x), vectorised (untruncated). Empirical: the fraction of values <= x."""
        xa = np.asarray(x, dtype=float)
        if self.kind == "empirical":
            out = np.searchsorted(self._sorted, xa, side="right") / self._sorted.size
            return scalar_out(np.asarray(out, dtype=float), xa.ndim == 0)
        pos = xa > 0
        lx = np.log(np.where(pos, xa, 1.0))
        F = ndtr((lx[..., None] - self._mu) / self._sg) @ self._w
        out = np.where(pos, F, 0.0)
        return scalar_out(out, xa.ndim == 0)

    def _sf(self, x) -> np.ndarray:
        """P(L > x) computed without 1 - cdf cancellation for the parametric kinds."""
        xa = np.asarray(x, dtype=float)
        if self.kind == "empirical":
            n = self._sorted.size
            return (n - np.searchsorted(self._sorted, xa, side="right")) / n
        pos = xa > 0
        lx = np.log(np.where(pos, xa, 1.0))
        S = ndtr((self._mu - lx[..., None]) / self._sg) @ self._w
        return np.where(pos, S, 1.0)

    def ppf(self, u):
        """Quantile function Q(u), vectorised over u in [0, 1].

        lognormal: exp(mu + sigma Phi^-1(u)); mixture: the root of F(x) = u (bisection in ln x,
        bracketed by the component quantiles, to ~1e-13 relative); empirical: the inverse empirical
        CDF x_(ceil(u n)). Q(0) = 0 and Q(1) = inf for the parametric kinds.
        """
        ua = np.asarray(u, dtype=float)
        if ((ua < 0) | (ua > 1) | np.isnan(ua)).any():
            bad = ua[(ua < 0) | (ua > 1) | np.isnan(ua)].ravel()[0]
            raise SpecError("u", float(bad), "a probability in [0, 1]")
        if self.kind == "empirical":
            n = self._sorted.size
            idx = np.clip(np.ceil(ua * n).astype(np.int64) - 1, 0, n - 1)
            return scalar_out(self._sorted[idx], ua.ndim == 0)
        return scalar_out(self._ppf_parametric(ua), ua.ndim == 0)

    def _ppf_parametric(self, ua: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", over="ignore"):
            z = ndtri(ua)  # -inf at 0, +inf at 1
            if self._w.size == 1:
                return np.exp(self._mu[0] + self._sg[0] * z)
            # F(x) is a convex combination of the component CDFs, so the root lies between the
            # smallest and largest component quantile (all F_i <= u at the first, >= u at the last).
            out = np.empty_like(ua)
            out[ua <= 0] = 0.0
            out[ua >= 1] = np.inf
            inner = (ua > 0) & (ua < 1)
            if inner.any():
                zi, ui = z[inner], ua[inner]
                comp = self._mu + self._sg * zi[:, None]
                lo, hi = comp.min(axis=1), comp.max(axis=1)
                for _ in range(200):
                    mid = 0.5 * (lo + hi)
                    below = ndtr((mid[:, None] - self._mu) / self._sg) @ self._w < ui
                    lo = np.where(below, mid, lo)
                    hi = np.where(below, hi, mid)
                    if np.all(hi - lo <= 1e-13 * np.maximum(1.0, np.abs(hi))):
                        break
                out[inner] = np.exp(0.5 * (lo + hi))
            return out

    def _from_normal(self, z: np.ndarray) -> np.ndarray:
        """L = Q(Phi(z)) for standard-normal z (exact in the tails for the lognormal kind)."""
        if self.kind == "lognormal":
            with np.errstate(over="ignore"):
                return np.exp(self.mu + self.sigma * z)
        return np.asarray(self.ppf(ndtr(z)), dtype=float)

    def mean_tokens(self, cap: float | None = None) -> float:
        """E[min(L, cap)]: the mean of the distribution truncated at cap, mass piled at the cap.

        For a lognormal component: E[min(L, c)] = e^(mu + sigma^2/2) Phi((ln c - mu - sigma^2)/sigma)
        + c (1 - Phi((ln c - mu)/sigma)); mixtures sum over components; empirical: mean(min(v, c)).
        cap=None gives the untruncated mean. (The integer rounding of sampled lengths shifts this
        by well under one token.)
        """
        if self.kind == "empirical":
            v = self._sorted
            if cap is None:
                return float(v.mean())
            return float(np.minimum(v, check_cap(cap, cap_field(self.field_path))).mean())
        full = np.exp(self._mu + 0.5 * self._sg**2)
        if cap is None:
            return float(full @ self._w)
        c = check_cap(cap, cap_field(self.field_path))
        lc = math.log(c)
        below = full * ndtr((lc - self._mu - self._sg**2) / self._sg)
        above = c * ndtr((self._mu - lc) / self._sg)
        return float((below + above) @ self._w)

    def tail_mass(self, cap: float) -> float:
        """P(L > cap) before truncation: the share of responses that hit the length limit."""
        c = finite_real(cap, cap_field(self.field_path))
        return float(self._sf(c))


def _file_identity(path) -> tuple[int, int]:
    """(mtime_ns, size) of a file, (0, -1) when it cannot be stat'ed (the reader then says why)."""
    try:
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size
    except (OSError, ValueError):
        return 0, -1


@lru_cache(maxsize=8)
def _empirical_file(path: str, field_path: str, column: str | None, mtime_ns: int, size: int) -> LengthDistribution:
    """A length file's distribution, parsed once per file version in a process (a sweep resolves
    the same file for every point) and once per machine across processes (parsed_cache.py: the
    workers of a pool load the parent's parse). Frozen: shareable."""
    values = parsed_lengths(Path(path), sub_field(field_path, "path"), column, mtime_ns, size)
    return LengthDistribution("empirical", values=values, field_path=field_path)
