"""Fitting a length model to observed lengths, and summarising a sample's tail.

:func:`fit` is maximum likelihood on ln L with right-censoring at the cap (lognormal: L-BFGS-B
with an analytic gradient; mixture: EM), judged by the KS distance to the discretised, truncated
model; :func:`length_summary` gives the quantiles and tail shares a report prints. Integer data are
treated as the samplers in workload/lengths/sampling.py produce them (conventions stated there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, logsumexp

from specsim.errors import SpecError
from specsim.workload.lengths.checks import cap_field, check_cap, positive_array, sub_field, whole_count
from specsim.workload.lengths.distribution import DEFAULT_FIELD, Z_99, LengthDistribution

__all__ = ["LengthFit", "fit", "length_summary"]


def _stats():
    """scipy.stats, imported by the first fit rather than with the length models: every
    simulation process imports these, and scipy.stats costs each ~0.5 s of start-up."""
    from scipy import stats
    return stats


def _optimize():
    """scipy.optimize, imported by the first fit for the same reason (~0.35 s of start-up)."""
    from scipy import optimize
    return optimize


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
        lam = math.exp(_stats().norm.logpdf(zc) - log_surv)
        f = float(np.sum(0.5 * z * z) + y.size * (s + 0.5 * math.log(2 * math.pi))) - n_c * log_surv
        d_mu = -float(z.sum()) / sg - n_c * lam / sg
        d_s = float(np.sum(1.0 - z * z)) - n_c * lam * zc
        return f, np.array([d_mu, d_s])

    optimize = _optimize()
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
        lp_u = logw + _stats().norm.logpdf(y[:, None], mu, sg)
        lse_u = logsumexp(lp_u, axis=1)
        r_u = np.exp(lp_u - lse_u[:, None])
        ll = float(lse_u.sum())
        if n_c:
            a = (yc - mu) / sg
            lp_c = logw + log_ndtr(-a)
            lse_c = float(logsumexp(lp_c))
            r_c = np.exp(lp_c - lse_c)
            ll += n_c * lse_c
            lam = np.exp(_stats().norm.logpdf(a) - log_ndtr(-a))
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
        raise SpecError(sub_field(fp, "fit.kind"), kind, "'lognormal' or 'mixture'")
    x = positive_array(lengths, sub_field(fp, "values"))
    cap = None if cap_tokens is None else check_cap(cap_tokens, cap_field(fp))
    if cap is not None and (x > cap).any():
        raise SpecError(sub_field(fp, "values"), float(x[x > cap][0]), f"lengths <= cap_tokens ({cap})")
    integer = bool(np.all(x == np.rint(x)))
    half = 0.5 if integer else 0.0
    censored = (x >= cap) if cap is not None else np.zeros(x.size, dtype=bool)
    n_c = int(censored.sum())
    y = np.log(x[~censored])
    yc = None if cap is None else math.log(cap - half)  # cap >= 1, so cap - half >= 0.5
    k = 1 if kind == "lognormal" else whole_count(n_components, sub_field(fp, "fit.n_components"), 1)
    if y.size < 2 * k or np.ptp(y) == 0:
        raise SpecError(sub_field(fp, "values"), f"{y.size} uncensored values",
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
    p = float(_stats().kstwo.sf(d, x.size))
    return LengthFit(kind=kind, params=params, ks_statistic=d, ks_pvalue=p, n=int(x.size), n_censored=n_c,
                     log_likelihood=float(ll))


def length_summary(lengths, cap_tokens: int | None) -> dict:
    """Tail summary of observed or sampled lengths (tokens).

    Keys: n, mean_tokens, p50_tokens, p90_tokens, p99_tokens, p999_tokens (99.9th), max_tokens
    (quantiles by linear interpolation), top5pct_token_share (share of all tokens in the longest
    ceil(5 %) of responses -- how much of the work the tail is), truncated_share (share of
    responses == cap, i.e. that hit the length limit; NaN if cap_tokens is None).
    """
    x = positive_array(lengths, "lengths")
    cap = None if cap_tokens is None else check_cap(cap_tokens, "cap_tokens")
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
