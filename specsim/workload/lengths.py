"""Response- and prompt-length distributions for RL rollouts.

Why this matters: rollout time is set by the long tail. As responses finish the batch shrinks,
decoding turns memory-bound, and that is exactly where speculative decoding pays (DESIGN.md,
"Response lengths"). Lengths are long-tailed -- roughly log-normal, often a mixture (short
answers vs. long chains of thought) -- and truncated at the max response length with the
truncated mass piled at the cap (responses that hit the limit). No parametric fit is published
(reference/published.md, "RL workloads"), so everything here can also be fitted to a trace.

Conventions (used by every function here, so samplers, fits and summaries agree):

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

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, stats
from scipy.special import log_ndtr, logsumexp, ndtr, ndtri

from specsim.errors import SpecError

__all__ = [
    "LengthDistribution",
    "LengthFit",
    "fit",
    "growth_factor",
    "length_summary",
    "sample_group_lengths",
    "sample_lengths",
    "sample_prompt_lengths",
]

#: z_0.99 = Phi^-1(0.99) = 2.3263...: converts (median, p99) to (mu, sigma) of a lognormal.
Z_99 = float(ndtri(0.99))

DEFAULT_FIELD = "workload.response_tokens"
_KINDS = ("lognormal", "mixture", "empirical")


# --------------------------------------------------------------------------- validation helpers


def _f(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _sibling(prefix: str, name: str) -> str:
    """A field next to the distribution: ('workload.response_tokens', 'x') -> 'workload.x'."""
    head = prefix.rpartition(".")[0]
    return f"{head}.{name}" if head else name


def _cap_field(prefix: str) -> str:
    """The scenario field of the length limit: workload.response_tokens -> workload.max_response_tokens."""
    return _sibling(prefix, "max_" + prefix.rpartition(".")[2])


def _real(value: Any, fld: str, allowed: str = "a finite number") -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if not math.isfinite(out):
        raise SpecError(fld, value, allowed)
    return out


def _positive(value: Any, fld: str) -> float:
    out = _real(value, fld, "a finite number > 0")
    if out <= 0:
        raise SpecError(fld, value, "a finite number > 0")
    return out


def _count(value: Any, fld: str, minimum: int = 0) -> int:
    allowed = f"an integer >= {minimum}"
    if isinstance(value, bool):
        raise SpecError(fld, value, allowed)
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if out != value or out < minimum:
        raise SpecError(fld, value, allowed)
    return out


def _cap(cap_tokens: Any, fld: str) -> int:
    """Max length in tokens: an integer >= 1 (floats with an integral value are accepted)."""
    if isinstance(cap_tokens, bool):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)")
    try:
        c = float(cap_tokens)
    except (TypeError, ValueError):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)") from None
    if not math.isfinite(c) or c < 1 or c != int(c):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)")
    return int(c)


def _positive_array(values: Any, fld: str, where: str | None = None) -> np.ndarray:
    """1-D float array of finite, strictly positive lengths (non-empty)."""
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise SpecError(fld, values, "a sequence of positive lengths in tokens", where) from None
    if arr.size == 0:
        raise SpecError(fld, "<empty>", "a non-empty sequence of positive lengths in tokens", where)
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecError(fld, float(arr[i]), f"positive finite lengths in tokens (entry {i})", where)
    return arr


def _scalar_out(arr: np.ndarray, scalar: bool):
    return float(arr) if scalar else arr


# --------------------------------------------------------------------------- distribution


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
            raise SpecError(_f(fp, "kind"), self.kind, "one of 'lognormal', 'mixture', 'empirical'")
        empty = np.empty(0)
        if self.kind == "lognormal":
            mu = _real(self.mu, _f(fp, "mu"))
            sigma = _positive(self.sigma, _f(fp, "sigma"))
            put(self, "mu", mu)
            put(self, "sigma", sigma)
            put(self, "_w", np.ones(1))
            put(self, "_mu", np.array([mu]))
            put(self, "_sg", np.array([sigma]))
            put(self, "_sorted", empty)
        elif self.kind == "mixture":
            k = len(self.weights)
            if k == 0:
                raise SpecError(_f(fp, "components"), self.weights, "a non-empty list of components")
            if len(self.mus) != k or len(self.sigmas) != k:
                raise SpecError(
                    _f(fp, "components"),
                    (len(self.mus), len(self.sigmas)),
                    f"one mu and one sigma per weight ({k} weights)",
                )
            comp = _f(fp, "components")
            w = np.array([_real(x, f"{comp}[{i}].weight") for i, x in enumerate(self.weights)])
            if (w < 0).any():
                raise SpecError(comp, tuple(self.weights), "components with non-negative weights")
            if abs(w.sum() - 1.0) > 1e-6:
                raise SpecError(comp, tuple(self.weights), "components with weights summing to 1 (within 1e-6)")
            w = w / w.sum()
            mus = np.array([_real(x, f"{comp}[{i}].mu") for i, x in enumerate(self.mus)])
            sgs = np.array([_positive(x, f"{comp}[{i}].sigma") for i, x in enumerate(self.sigmas)])
            put(self, "weights", tuple(float(x) for x in w))
            put(self, "mus", tuple(float(x) for x in mus))
            put(self, "sigmas", tuple(float(x) for x in sgs))
            put(self, "_w", w)
            put(self, "_mu", mus)
            put(self, "_sg", sgs)
            put(self, "_sorted", empty)
        else:
            arr = _positive_array(self.values, _f(fp, "values"))
            put(self, "values", tuple(float(x) for x in arr))
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
        med = _positive(median_tokens, _f(fp, "median"))
        p99 = _positive(p99_tokens, _f(fp, "p99"))
        if p99 <= med:
            raise SpecError(_f(fp, "p99"), p99_tokens, f"> the median ({med:g} tokens)")
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
            raise SpecError(_f(fp, "components"), "medians/p99s and mus/sigmas",
                            "given either as medians_tokens + p99s_tokens or as mus + sigmas")
        weights = tuple(weights)
        if by_quantiles:
            if medians_tokens is None or p99s_tokens is None:
                raise SpecError(_f(fp, "components"), p99s_tokens, "p99s given together with medians")
            meds, p99s = tuple(medians_tokens), tuple(p99s_tokens)
            if len(meds) != len(weights) or len(p99s) != len(weights):
                raise SpecError(_f(fp, "components"), (len(meds), len(p99s)),
                                f"one median and one p99 per weight ({len(weights)} weights)")
            pairs = [cls._mu_sigma_from_median_p99(m, p, f"{fp}.components[{i}]")
                     for i, (m, p) in enumerate(zip(meds, p99s))]
            mus = tuple(p[0] for p in pairs)
            sigmas = tuple(p[1] for p in pairs)
        else:
            if mus is None or sigmas is None:
                raise SpecError(_f(fp, "components"), sigmas, "sigmas given together with mus")
        return cls("mixture", weights=weights, mus=tuple(mus), sigmas=tuple(sigmas), field_path=fp)

    @classmethod
    def empirical(cls, values, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """Observed lengths (tokens, all > 0), resampled with replacement."""
        arr = _positive_array(values, _f(field_path, "values"))
        return cls("empirical", values=tuple(float(x) for x in arr), field_path=field_path)

    @classmethod
    def fixed(cls, tokens: float, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """Every length equals ``tokens`` (the scenario's kind=fixed): an empirical distribution of one value."""
        return cls("empirical", values=(_positive(tokens, _f(field_path, "tokens")),), field_path=field_path)

    @classmethod
    def empirical_file(cls, path, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """Observed lengths read from a trace file.

        * ``.jsonl`` / ``.ndjson`` / ``.json``: one JSON value per line, an object with key
          ``length`` or ``response_tokens`` (or a bare number).
        * anything else is CSV: a column named ``length`` or ``response_tokens``, or a single
          column (with or without a header).

        An unreadable or empty file, or a non-numeric or non-positive value, raises SpecError with
        ``where`` = the file.
        """
        values = _read_lengths_file(Path(path), _f(field_path, "path"))
        return cls("empirical", values=tuple(values), field_path=field_path)

    # ------------------------------------------------------------------ derived

    def scaled(self, growth: float) -> LengthDistribution:
        """The distribution of growth * L (mean length growth over RL training).

        lognormal/mixture: mu += ln(growth); empirical: values *= growth.
        """
        g = _positive(growth, _f(self.field_path, "growth"))
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
            return _scalar_out(np.asarray(out, dtype=float), xa.ndim == 0)
        pos = xa > 0
        lx = np.log(np.where(pos, xa, 1.0))
        F = ndtr((lx[..., None] - self._mu) / self._sg) @ self._w
        out = np.where(pos, F, 0.0)
        return _scalar_out(out, xa.ndim == 0)

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
            return _scalar_out(self._sorted[idx], ua.ndim == 0)
        return _scalar_out(self._ppf_parametric(ua), ua.ndim == 0)

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
            return float(np.minimum(v, _cap(cap, _cap_field(self.field_path))).mean())
        full = np.exp(self._mu + 0.5 * self._sg**2)
        if cap is None:
            return float(full @ self._w)
        c = _cap(cap, _cap_field(self.field_path))
        lc = math.log(c)
        below = full * ndtr((lc - self._mu - self._sg**2) / self._sg)
        above = c * ndtr((self._mu - lc) / self._sg)
        return float((below + above) @ self._w)

    def tail_mass(self, cap: float) -> float:
        """P(L > cap) before truncation: the share of responses that hit the length limit."""
        c = _real(cap, _cap_field(self.field_path))
        return float(self._sf(c))


# --------------------------------------------------------------------------- file reading


_JSON_SUFFIXES = {".jsonl", ".ndjson", ".json"}
_NAMES = ("length", "response_tokens")


def _read_lengths_file(path: Path, fld: str) -> list[float]:
    where = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(fld, where, f"a readable trace file ({e.strerror or e})", where) from None
    raw: list[tuple[int, Any]] = []  # (line number, raw value)
    if path.suffix.lower() in _JSON_SUFFIXES:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(fld, line.strip()[:80], f"one JSON object per line (line {lineno})", where) from None
            if isinstance(obj, dict):
                key = next((k for k in _NAMES if k in obj), None)
                if key is None:
                    raise SpecError(fld, sorted(obj)[:10],
                                    f"an object with key 'length' or 'response_tokens' (line {lineno})", where)
                raw.append((lineno, obj[key]))
            else:
                raw.append((lineno, obj))
    else:
        rows = [(i, r) for i, r in enumerate(csv.reader(text.splitlines()), start=1) if any(c.strip() for c in r)]
        if rows:
            first = rows[0][1]
            try:
                [float(c) for c in first]
                header = None
            except ValueError:
                header = [c.strip().lower() for c in first]
            if header is None:
                if len(first) != 1:
                    raise SpecError(fld, first, "a CSV with a single column, or a header with a 'length' or "
                                    "'response_tokens' column", where)
                col, data = 0, rows
            else:
                col = next((header.index(k) for k in _NAMES if k in header), None)
                if col is None:
                    if len(header) != 1:
                        raise SpecError(fld, first, "a CSV header with a 'length' or 'response_tokens' column", where)
                    col = 0
                data = rows[1:]
            for lineno, r in data:
                if col >= len(r):
                    raise SpecError(fld, r, f"a value in column {col + 1} (line {lineno})", where)
                raw.append((lineno, r[col].strip()))
    if not raw:
        raise SpecError(fld, where, "a non-empty trace of response lengths", where)
    values: list[float] = []
    for lineno, v in raw:
        if isinstance(v, bool):
            x = float("nan")
        else:
            try:
                x = float(v)
            except (TypeError, ValueError):
                x = float("nan")
        if not math.isfinite(x) or x <= 0:
            raise SpecError(fld, v, f"a positive length in tokens (line {lineno})", where)
        values.append(x)
    return values


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


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class LengthFit:
    """A fitted length model with its goodness of fit.

    ``params``: lognormal -> mu, sigma, median_tokens, p99_tokens; mixture -> weights, mus, sigmas
    (tuples, components sorted by mu). ``ks_statistic`` is the KS distance between the data and
    the fitted, discretised, truncated model; ``ks_pvalue`` = kstwo.sf(D, n) is indicative only
    (parameters were estimated from the same data, which makes it optimistic; the point mass at
    the cap and integer data make it conservative).
    """

    kind: str
    params: dict
    ks_statistic: float
    ks_pvalue: float
    n: int
    n_censored: int = 0
    log_likelihood: float = float("nan")

    def distribution(self, *, field_path: str = DEFAULT_FIELD) -> LengthDistribution:
        """The fitted model as a LengthDistribution."""
        if self.kind == "lognormal":
            return LengthDistribution.lognormal(self.params["mu"], self.params["sigma"], field_path=field_path)
        return LengthDistribution.mixture(self.params["weights"], mus=self.params["mus"],
                                          sigmas=self.params["sigmas"], field_path=field_path)


def _lognormal_censored_mle(y: np.ndarray, n_c: int, yc: float) -> tuple[float, float, float]:
    """MLE of (mu, sigma) from uncensored log-lengths y and n_c observations right-censored at ln-point yc.

    -log L(mu, s = ln sigma) = sum_i [z_i^2 / 2 + s] - n_c log Phi(-z_c) + const,
    z_i = (y_i - mu)/sigma, z_c = (yc - mu)/sigma; gradient uses the inverse Mills ratio
    lambda = phi(z_c) / Phi(-z_c).
    """
    mu0, sg0 = float(y.mean()), float(y.std())
    if n_c == 0:
        nll = float(np.sum(0.5 * ((y - mu0) / sg0) ** 2 + math.log(sg0) + 0.5 * math.log(2 * math.pi)))
        return mu0, sg0, -nll

    def nll(p):
        mu, s = p
        sg = math.exp(s)
        z = (y - mu) / sg
        zc = (yc - mu) / sg
        log_surv = float(log_ndtr(-zc))
        lam = math.exp(stats.norm.logpdf(zc) - log_surv)
        f = float(np.sum(0.5 * z * z) + y.size * (s + 0.5 * math.log(2 * math.pi))) - n_c * log_surv
        d_mu = -float(z.sum()) / sg - n_c * lam / sg
        d_s = float(np.sum(1.0 - z * z)) - n_c * lam * zc
        return f, np.array([d_mu, d_s])

    res = optimize.minimize(nll, np.array([mu0, math.log(sg0)]), jac=True, method="L-BFGS-B",
                            options={"ftol": 1e-14, "gtol": 1e-9, "maxiter": 1000})
    if not res.success:  # pragma: no cover - fallback
        res = optimize.minimize(lambda p: nll(p)[0], res.x, method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    return float(res.x[0]), float(math.exp(res.x[1])), -float(res.fun)


def _mixture_em(y: np.ndarray, n_c: int, yc: float | None, k: int, max_iter: int = 2000, tol: float = 1e-10):
    """EM for a k-component Gaussian mixture on log-lengths with right-censoring at yc.

    Censored observations enter the E-step through P(y > yc | component) and the M-step through
    the moments of the component's normal truncated to y > yc: E = mu + sigma lambda,
    Var = sigma^2 (1 + a lambda - lambda^2), a = (yc - mu)/sigma, lambda = phi(a)/Phi(-a).
    Deterministic initialisation: components on equal-count slices of the sorted data.
    """
    n = y.size + n_c
    ys = np.sort(y)
    chunks = np.array_split(ys, k)
    spread = float(ys.std())
    floor = max(1e-3, 1e-3 * spread)
    w = np.array([c.size for c in chunks], dtype=float)
    w /= w.sum()
    mu = np.array([c.mean() for c in chunks])
    sg = np.array([max(float(c.std()), 0.1 * spread / k, floor) for c in chunks])
    ll_prev = -np.inf
    ll = -np.inf
    for _ in range(max_iter):
        logw = np.log(np.maximum(w, 1e-300))
        lp_u = logw + stats.norm.logpdf(y[:, None], mu, sg)
        lse_u = logsumexp(lp_u, axis=1)
        r_u = np.exp(lp_u - lse_u[:, None])
        ll = float(lse_u.sum())
        if n_c:
            a = (yc - mu) / sg
            lp_c = logw + log_ndtr(-a)
            lse_c = float(logsumexp(lp_c))
            r_c = np.exp(lp_c - lse_c)
            ll += n_c * lse_c
            lam = np.exp(stats.norm.logpdf(a) - log_ndtr(-a))
            e_y = mu + sg * lam
            v_y = sg**2 * np.clip(1.0 + a * lam - lam**2, 0.0, None)
        else:
            r_c = np.zeros(k)
            e_y = v_y = np.zeros(k)
        nk = r_u.sum(axis=0) + n_c * r_c
        nk_safe = np.maximum(nk, 1e-12)
        w = nk / n
        mu_new = (r_u.T @ y + n_c * r_c * e_y) / nk_safe
        var = ((r_u * (y[:, None] - mu_new) ** 2).sum(axis=0) + n_c * r_c * (v_y + (e_y - mu_new) ** 2)) / nk_safe
        mu = np.where(nk > 1e-12, mu_new, mu)
        sg = np.where(nk > 1e-12, np.sqrt(np.maximum(var, floor**2)), sg)
        if ll - ll_prev < tol * max(1.0, abs(ll)):
            break
        ll_prev = ll
    order = np.argsort(mu)
    w = w[order] / w.sum()
    return w, mu[order], sg[order], ll


def _ks_distance(x: np.ndarray, dist: LengthDistribution, cap: int | None, half: float) -> float:
    """sup |F_n - F| for the model discretised as in the samplers and truncated at cap.

    With integer data (half = 0.5), P(X <= m) = F(m + 0.5) and P(X < m) = F(m - 0.5) (0 at m = 1);
    the truncated model jumps at the cap from F(cap - 0.5) to 1. Ties are handled exactly.
    """
    n = x.size
    below = x[x < cap] if cap is not None else x
    uniq, counts = np.unique(below, return_counts=True)
    cum = np.cumsum(counts) / n
    left = cum - counts / n
    f_right = np.asarray(dist.cdf(uniq + half))
    smallest = (uniq <= 1) if half else np.zeros(uniq.shape, dtype=bool)  # rounding clips to >= 1
    f_left = np.where(smallest, 0.0, np.asarray(dist.cdf(uniq - half)))
    d = float(np.max(np.maximum(np.abs(cum - f_right), np.abs(left - f_left)), initial=0.0))
    if cap is not None:
        m = below.size / n
        d = max(d, abs(m - float(dist.cdf(cap - half))))
    return d


def fit(lengths, kind: str = "lognormal", n_components: int = 2, cap_tokens: int | None = None, *,
        field_path: str = DEFAULT_FIELD) -> LengthFit:
    """Fit a length model to observed lengths (tokens) by maximum likelihood.

    * ``lognormal``: closed-form MLE on ln L without a cap; with ``cap_tokens``, values == cap are
      right-censored (the response hit the limit; its true length is only known to be >= cap) and
      the censored likelihood is maximised with scipy.optimize (L-BFGS-B, analytic gradient).
      Ignoring the censoring underestimates the tail.
    * ``mixture``: EM for ``n_components`` lognormals, with the same censoring.
    Integer data are treated like the samplers' output: censored at cap - 0.5, KS against the
    rounded model. Goodness of fit: the KS statistic vs the fitted truncated distribution.
    """
    fp = field_path
    if kind not in ("lognormal", "mixture"):
        raise SpecError(_f(fp, "fit.kind"), kind, "'lognormal' or 'mixture'")
    x = _positive_array(lengths, _f(fp, "values"))
    cap = None if cap_tokens is None else _cap(cap_tokens, _cap_field(fp))
    if cap is not None and (x > cap).any():
        raise SpecError(_f(fp, "values"), float(x[x > cap][0]), f"lengths <= cap_tokens ({cap})")
    integer = bool(np.all(x == np.rint(x)))
    half = 0.5 if integer else 0.0
    censored = (x >= cap) if cap is not None else np.zeros(x.size, dtype=bool)
    n_c = int(censored.sum())
    y = np.log(x[~censored])
    yc = None if cap is None else math.log(cap - half)  # cap >= 1, so cap - half >= 0.5
    k = 1 if kind == "lognormal" else _count(n_components, _f(fp, "fit.n_components"), 1)
    if y.size < 2 * k or np.ptp(y) == 0:
        raise SpecError(_f(fp, "values"), f"{y.size} uncensored values",
                        f"at least {2 * k} uncensored lengths with at least two distinct values")
    if kind == "lognormal":
        mu, sg, ll = _lognormal_censored_mle(y, n_c, yc if yc is not None else 0.0)
        dist = LengthDistribution.lognormal(mu, sg, field_path=fp)
        params = {"mu": mu, "sigma": sg, "median_tokens": math.exp(mu), "p99_tokens": math.exp(mu + Z_99 * sg)}
    else:
        w, mus, sgs, ll = _mixture_em(y, n_c, yc, k)
        dist = LengthDistribution.mixture(tuple(w), mus=tuple(mus), sigmas=tuple(sgs), field_path=fp)
        params = {"weights": dist.weights, "mus": dist.mus, "sigmas": dist.sigmas}
    ll -= float(y.sum())  # Jacobian of ln: likelihood of L rather than of ln L
    d = _ks_distance(x, dist, cap, half)
    p = float(stats.kstwo.sf(d, x.size))
    return LengthFit(kind=kind, params=params, ks_statistic=d, ks_pvalue=p, n=int(x.size), n_censored=n_c,
                     log_likelihood=float(ll))


def length_summary(lengths, cap_tokens: int | None) -> dict:
    """Tail summary of observed or sampled lengths (tokens).

    Keys: n, mean_tokens, p50_tokens, p90_tokens, p99_tokens, p999_tokens (99.9th), max_tokens
    (quantiles by linear interpolation), top5pct_token_share (share of all tokens in the longest
    ceil(5 %) of responses -- how much of the work the tail is), truncated_share (share of
    responses == cap, i.e. that hit the length limit; NaN if cap_tokens is None).
    """
    x = _positive_array(lengths, "lengths")
    cap = None if cap_tokens is None else _cap(cap_tokens, "cap_tokens")
    q = np.quantile(x, [0.5, 0.9, 0.99, 0.999])
    top = np.sort(x)[::-1][: max(1, math.ceil(0.05 * x.size))]
    return {
        "n": int(x.size),
        "mean_tokens": float(x.mean()),
        "p50_tokens": float(q[0]),
        "p90_tokens": float(q[1]),
        "p99_tokens": float(q[2]),
        "p999_tokens": float(q[3]),
        "max_tokens": float(x.max()),
        "top5pct_token_share": float(top.sum() / x.sum()),
        "truncated_share": float("nan") if cap is None else float(np.mean(x >= cap)),
    }
