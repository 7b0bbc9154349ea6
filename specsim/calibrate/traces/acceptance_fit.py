"""Acceptance and length fits from engine and lengths traces."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.calibrate.traces.common import as_list, where_of
from specsim.calibrate.traces.hardware_fit import standard_errors
from specsim.calibrate.traces.io import validate_trace
from specsim.errors import SpecError
from specsim.workload import lengths as _lengths
from specsim.workload.acceptance.drafter import Staleness, alpha_from_tau, expected_tokens_per_verify


@dataclass
class AcceptanceFit:
    """Result of :func:`fit_acceptance`.

    alpha: per-token acceptance at rl_step 0 (alpha0) when staleness was fitted, else the constant
    alpha (homogeneous: every sequence the same alpha). decay: position decay d (1 = none).
    staleness: fitted Staleness (floor fixed, rate fitted) or None. tau_by_k: k, rows, sequences,
    tau_measured, tau_fitted. by_step: rl_step, rows, tau_measured, alpha (fitted per step, decay
    fixed) -- None without an rl_step column.
    """

    alpha: float
    decay: float
    decay_fitted: bool
    staleness: Any
    tau_by_k: pd.DataFrame
    by_step: pd.DataFrame | None
    rms_rel_tau_error: float
    n_rows: int
    alpha_stderr: float = float("nan")
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def tau(self, k: int, step: float = 0.0) -> float:
        """Fitted mean tokens per verify at draft length k (and rl_step when staleness was fitted)."""

        a = self.alpha if self.staleness is None else float(self.staleness.alpha(self.alpha, step))
        return float(expected_tokens_per_verify(a, int(k), self.decay))

    def scenario_overrides(self) -> dict:
        """Dotted scenario overrides that use this fit (drafter.alpha, position_decay, staleness)."""
        out = {
            "drafter.alpha": round(self.alpha, 6),
            "drafter.tau": None,
            "drafter.position_decay": round(self.decay, 6),
        }
        if self.staleness is not None:
            out["drafter.staleness.rate_per_version"] = round(self.staleness.decay_per_version, 6)
            out["drafter.staleness.floor_alpha"] = round(self.staleness.floor_alpha, 6)
        return out

    def to_rows(self, prefix: str = "acceptance") -> list[dict]:
        rows = [
            {
                "parameter": f"{prefix}.alpha" + ("0" if self.staleness is not None else ""),
                "unit": "",
                "prior": None,
                "fitted": self.alpha,
                "status": f"fitted (± {self.alpha_stderr:.2g})" if math.isfinite(self.alpha_stderr) else "fitted",
            },
            {
                "parameter": f"{prefix}.position_decay",
                "unit": "",
                "prior": 1.0,
                "fitted": self.decay if self.decay_fitted else None,
                "status": "fitted" if self.decay_fitted else "not fitted (one draft length k only: kept 1)",
            },
        ]
        if self.staleness is not None:
            rows.append(
                {
                    "parameter": f"{prefix}.staleness.rate_per_version",
                    "unit": "1/version",
                    "prior": 0.0,
                    "fitted": self.staleness.decay_per_version,
                    "status": f"fitted (floor_alpha fixed at {self.staleness.floor_alpha:g})",
                }
            )
        else:
            rows.append(
                {
                    "parameter": f"{prefix}.staleness.rate_per_version",
                    "unit": "1/version",
                    "prior": 0.0,
                    "fitted": None,
                    "status": "not fitted (no rl_step column spanning >= 3 RL steps)",
                }
            )
        for r in self.tau_by_k.itertuples(index=False):
            rows.append(
                {
                    "parameter": f"{prefix}.tau(k={int(r.k)})",
                    "unit": "tokens/verify",
                    "prior": None,
                    "fitted": float(r.tau_fitted),
                    "status": f"measured {r.tau_measured:.3f} over {int(r.rows)} steps",
                }
            )
        return rows


def fit_acceptance(
    engine_df: pd.DataFrame | Sequence[pd.DataFrame],
    *,
    fit_decay: bool | str = "auto",
    fit_staleness: bool | str = "auto",
    floor_alpha: float = 0.0,
) -> AcceptanceFit:
    """Fit per-token acceptance (and position decay, staleness) to speculative engine steps.

    Uses rows with k > 0; tau_row = tokens_emitted / active_batch, weighted by active_batch.
    fit_decay "auto": only with >= 2 distinct k. fit_staleness "auto": only with an rl_step column
    spanning >= 3 distinct steps; v = rl_step (policy versions since the drafter was trained).
    """

    dfs = as_list(engine_df)
    if not dfs:
        raise SpecError("traces", None, "an engine trace with speculative steps (k > 0)")
    frames = []
    for d in dfs:
        where = where_of(d, "<engine trace>")
        d = validate_trace(d, "engine", where) if d.attrs.get("kind") != "engine" else d
        sub = d[d["k"] > 0]
        f = pd.DataFrame(
            {
                "k": sub["k"].to_numpy(dtype=int),
                "n": sub["active_batch"].to_numpy(dtype=float),
                "emitted": sub["tokens_emitted"].to_numpy(dtype=float),
                "accepted": sub["accepted_tokens"].to_numpy(dtype=float),
                "source": where,
            }
        )
        f["rl_step"] = sub["rl_step"].astype("float64").to_numpy() if "rl_step" in sub.columns else np.nan
        frames.append(f)
    data = pd.concat(frames, ignore_index=True)
    sources = tuple(dict.fromkeys(data["source"])) or tuple(where_of(d, "<engine trace>") for d in dfs)
    if data.empty:
        raise SpecError(
            "k", 0, "> 0 in some rows: acceptance is fitted from speculative steps only", ", ".join(sources)
        )
    notes: list[str] = []
    tau = data["emitted"].to_numpy() / data["n"].to_numpy()
    tau_acc = data["accepted"].to_numpy() / data["n"].to_numpy() + 1.0
    gap = abs(tau.mean() - tau_acc.mean()) / tau_acc.mean()
    if gap > 0.02:
        notes.append(
            f"tokens_emitted/active_batch differs from accepted_tokens/active_batch + 1 by {gap * 100:.1f} % "
            "(sequences finishing mid-step or a different counting); tau uses tokens_emitted"
        )
    k = data["k"].to_numpy()
    w = np.sqrt(data["n"].to_numpy())
    ks = np.unique(k)
    do_decay = (len(ks) >= 2) if fit_decay == "auto" else bool(fit_decay)
    steps = data["rl_step"].to_numpy()
    has_steps = np.isfinite(steps).all() and len(np.unique(steps)) >= 3
    do_stale = has_steps if fit_staleness == "auto" else bool(fit_staleness) and np.isfinite(steps).all()
    if fit_staleness is True and not do_stale:
        notes.append("staleness not fitted: no complete rl_step column")
    floor = float(floor_alpha)
    kmax = int(ks.max())
    if tau.max() > kmax + 1 + 1e-9:
        raise SpecError("tokens_emitted", float(tau.max()), "<= (k+1) per sequence", ", ".join(sources))

    names = ["alpha"] + (["decay"] if do_decay else []) + (["rate"] if do_stale else [])
    lb = {"alpha": max(floor, 0.0) + 1e-9 if do_stale else 0.0, "decay": 0.05, "rate": 0.0}
    ub = {"alpha": 0.999999, "decay": 1.0, "rate": 10.0}

    def unpack(x):
        v = dict(zip(names, x))
        return v["alpha"], v.get("decay", 1.0), v.get("rate", 0.0)

    def alphas(a0, rate, st):
        return floor + (a0 - floor) * np.exp(-rate * st) if do_stale else np.full(len(st), a0)

    def resid(x):
        a0, d, rate = unpack(x)
        a = np.clip(alphas(a0, rate, np.nan_to_num(steps)), 0.0, 1.0)
        return w * (expected_tokens_per_verify(a, k, d) - tau)

    # start from the pooled tau at the most common k

    k0 = int(pd.Series(k).mode().iloc[0])
    m0 = k == k0
    t0 = float(np.clip(np.average(tau[m0], weights=data["n"].to_numpy()[m0]), 1.0 + 1e-6, k0 + 1 - 1e-6))
    a_start = min(max(alpha_from_tau(t0, k0), lb["alpha"] + 1e-3), 0.99)
    x0 = [a_start] + ([0.95] if do_decay else []) + ([0.01] if do_stale else [])
    res = optimize.least_squares(
        resid,
        np.array(x0),
        bounds=([lb[n] for n in names], [ub[n] for n in names]),
        method="trf",
        x_scale="jac",
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
    )
    a0, d, rate = unpack(res.x)
    se = standard_errors(res, names, np.ones(len(names)))
    staleness = Staleness(floor, float(rate)) if do_stale else None
    a_rows = np.clip(alphas(a0, rate, np.nan_to_num(steps)), 0.0, 1.0)
    tau_fit = expected_tokens_per_verify(a_rows, k, d)
    n = data["n"].to_numpy()
    by_k = []
    for kk in ks:
        m = k == kk
        by_k.append(
            {
                "k": int(kk),
                "rows": int(m.sum()),
                "sequences": int(n[m].sum()),
                "tau_measured": float(np.average(tau[m], weights=n[m])),
                "tau_fitted": float(np.average(tau_fit[m], weights=n[m])),
            }
        )
    by_step = None
    if np.isfinite(steps).all():
        rows = []
        for st in np.unique(steps):
            m = steps == st

            def r1(x, m=m):
                return w[m] * (expected_tokens_per_verify(np.full(m.sum(), x[0]), k[m], d) - tau[m])

            r = optimize.least_squares(r1, [min(max(a0, 0.01), 0.99)], bounds=([0.0], [0.999999]), method="trf")
            rows.append(
                {
                    "rl_step": int(st),
                    "rows": int(m.sum()),
                    "tau_measured": float(np.average(tau[m], weights=n[m])),
                    "alpha": float(r.x[0]),
                }
            )
        by_step = pd.DataFrame(rows)
    rel = (tau_fit - tau) / tau
    return AcceptanceFit(
        alpha=float(a0),
        decay=float(d),
        decay_fitted=do_decay,
        staleness=staleness,
        tau_by_k=pd.DataFrame(by_k),
        by_step=by_step,
        rms_rel_tau_error=float(np.sqrt(np.average(rel**2, weights=n))),
        n_rows=len(data),
        alpha_stderr=se.get("alpha", float("nan")),
        sources=sources,
        notes=tuple(notes),
    )


# =========================================================================== lengths


def fit_lengths(length_df: pd.DataFrame, cap_tokens: int | None = None, kind: str = "lognormal", n_components: int = 2):
    """Fit a response-length model to a lengths trace (wrapper over workload.lengths.fit)."""

    where = where_of(length_df, "<lengths trace>")
    df = validate_trace(length_df, "lengths", where) if length_df.attrs.get("kind") != "lengths" else length_df
    try:
        return _lengths.fit(
            df["length"].to_numpy(dtype=float), kind=kind, n_components=n_components, cap_tokens=cap_tokens
        )
    except SpecError as exc:
        raise SpecError(exc.field, exc.value, exc.allowed, exc.where or where) from None


def detect_cap(x: np.ndarray) -> int | None:
    """A length cap is evident when the maximum repeats (>= 2 rows and >= 0.5 % of rows)."""
    m = x.max()
    hits = int((x == m).sum())
    return int(m) if hits >= 2 and hits >= 0.005 * x.size else None
