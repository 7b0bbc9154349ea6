"""Acceptance and length fits from engine and lengths traces."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

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

    Stages: the rows (`_speculative_rows`), the model they support (`_acceptance_model`), its
    least-squares fit (`_AcceptanceModel.solve`) and the report (`_acceptance_report`).
    """
    rows = _speculative_rows(as_list(engine_df))
    notes: list[str] = []
    gap = abs(rows.tau.mean() - rows.tau_accepted.mean()) / rows.tau_accepted.mean()
    if gap > 0.02:
        notes.append(
            f"tokens_emitted/active_batch differs from accepted_tokens/active_batch + 1 by {gap * 100:.1f} % "
            "(sequences finishing mid-step or a different counting); tau uses tokens_emitted"
        )
    model = _acceptance_model(rows, fit_decay, fit_staleness, floor_alpha, notes)
    if rows.tau.max() > int(rows.ks.max()) + 1 + 1e-9:
        raise SpecError("tokens_emitted", float(rows.tau.max()), "<= (k+1) per sequence", ", ".join(rows.sources))
    res = model.solve(rows)
    return _acceptance_report(rows, model, res, notes)


@dataclass
class _SpeculativeRows:
    """The speculative engine steps (k > 0) of the traces, one entry per row: k, sequences n
    (active_batch), tau = tokens_emitted / n, tau_accepted = accepted_tokens / n + 1, the rl_step
    (nan without the column) and the least-squares weight sqrt(n)."""

    k: np.ndarray
    n: np.ndarray
    tau: np.ndarray
    tau_accepted: np.ndarray
    steps: np.ndarray
    sources: tuple[str, ...]

    @property
    def w(self) -> np.ndarray:
        return np.sqrt(self.n)

    @property
    def ks(self) -> np.ndarray:
        return np.unique(self.k)

    @property
    def has_steps(self) -> bool:
        """Every row carries its rl_step."""
        return bool(np.isfinite(self.steps).all())


def _speculative_rows(dfs: list[pd.DataFrame]) -> _SpeculativeRows:
    """Validate each engine trace and keep its speculative rows; SpecError when none has k > 0."""
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
    return _SpeculativeRows(
        k=data["k"].to_numpy(), n=data["n"].to_numpy(),
        tau=data["emitted"].to_numpy() / data["n"].to_numpy(),
        tau_accepted=data["accepted"].to_numpy() / data["n"].to_numpy() + 1.0,
        steps=data["rl_step"].to_numpy(), sources=sources)


@dataclass(frozen=True)
class _AcceptanceModel:
    """tau per row = expected_tokens_per_verify(alpha, k, decay), with alpha = floor + (alpha0 −
    floor)·exp(−rate·rl_step) when staleness is fitted (else alpha0); its parameters `names`
    (alpha, then decay and rate when fitted) and their bounds."""

    floor: float
    fit_decay: bool
    fit_staleness: bool

    @property
    def names(self) -> list[str]:
        return ["alpha"] + (["decay"] if self.fit_decay else []) + (["rate"] if self.fit_staleness else [])

    @property
    def lower(self) -> dict[str, float]:
        return {"alpha": max(self.floor, 0.0) + 1e-9 if self.fit_staleness else 0.0, "decay": 0.05, "rate": 0.0}

    @property
    def upper(self) -> dict[str, float]:
        return {"alpha": 0.999999, "decay": 1.0, "rate": 10.0}

    def unpack(self, x) -> tuple[float, float, float]:
        """(alpha0, decay, rate) of a parameter vector; decay 1 and rate 0 when not fitted."""
        v = dict(zip(self.names, x))
        return v["alpha"], v.get("decay", 1.0), v.get("rate", 0.0)

    def alphas(self, a0: float, rate: float, st: np.ndarray) -> np.ndarray:
        """Per-row alpha at rl_step `st`, clipped to [0, 1]."""
        floor = self.floor
        a = floor + (a0 - floor) * np.exp(-rate * st) if self.fit_staleness else np.full(len(st), a0)
        return np.clip(a, 0.0, 1.0)

    def solve(self, rows: _SpeculativeRows):
        """Weighted least squares on tau, started from the pooled tau at the most common k."""
        from scipy import optimize

        names, lb, ub = self.names, self.lower, self.upper
        k, tau, w, steps = rows.k, rows.tau, rows.w, np.nan_to_num(rows.steps)

        def resid(x):
            a0, d, rate = self.unpack(x)
            return w * (expected_tokens_per_verify(self.alphas(a0, rate, steps), k, d) - tau)

        k0 = int(pd.Series(k).mode().iloc[0])
        m0 = k == k0
        t0 = float(np.clip(np.average(tau[m0], weights=rows.n[m0]), 1.0 + 1e-6, k0 + 1 - 1e-6))
        a_start = min(max(alpha_from_tau(t0, k0), lb["alpha"] + 1e-3), 0.99)
        x0 = [a_start] + ([0.95] if self.fit_decay else []) + ([0.01] if self.fit_staleness else [])
        return optimize.least_squares(
            resid,
            np.array(x0),
            bounds=([lb[n] for n in names], [ub[n] for n in names]),
            method="trf",
            x_scale="jac",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
        )


def _acceptance_model(rows: _SpeculativeRows, fit_decay: bool | str, fit_staleness: bool | str,
                      floor_alpha: float, notes: list[str]) -> _AcceptanceModel:
    """Which terms the rows support: position decay with >= 2 distinct k, staleness with a
    complete rl_step column of >= 3 distinct steps ("auto"), or as asked."""
    do_decay = (len(rows.ks) >= 2) if fit_decay == "auto" else bool(fit_decay)
    has_steps = rows.has_steps and len(np.unique(rows.steps)) >= 3
    do_stale = has_steps if fit_staleness == "auto" else bool(fit_staleness) and rows.has_steps
    if fit_staleness is True and not do_stale:
        notes.append("staleness not fitted: no complete rl_step column")
    return _AcceptanceModel(float(floor_alpha), do_decay, do_stale)


def _acceptance_report(rows: _SpeculativeRows, model: _AcceptanceModel, res, notes: list[str]) -> AcceptanceFit:
    """The AcceptanceFit: the fitted parameters, measured vs fitted tau per k, and (with rl_step)
    the alpha each RL step's rows alone give at the fitted decay."""
    a0, d, rate = model.unpack(res.x)
    se = standard_errors(res, model.names, np.ones(len(model.names)))
    k, n, tau = rows.k, rows.n, rows.tau
    tau_fit = expected_tokens_per_verify(model.alphas(a0, rate, np.nan_to_num(rows.steps)), k, d)
    by_k = []
    for kk in rows.ks:
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
    rel = (tau_fit - tau) / tau
    return AcceptanceFit(
        alpha=float(a0),
        decay=float(d),
        decay_fitted=model.fit_decay,
        staleness=Staleness(model.floor, float(rate)) if model.fit_staleness else None,
        tau_by_k=pd.DataFrame(by_k),
        by_step=_alpha_by_step(rows, a0, d) if rows.has_steps else None,
        rms_rel_tau_error=float(np.sqrt(np.average(rel**2, weights=n))),
        n_rows=len(k),
        alpha_stderr=se.get("alpha", float("nan")),
        sources=rows.sources,
        notes=tuple(notes),
    )


def _alpha_by_step(rows: _SpeculativeRows, a0: float, d: float) -> pd.DataFrame:
    """Per RL step: its rows, measured tau and the alpha its rows alone fit (decay held at `d`)."""
    from scipy import optimize

    k, n, tau, w, steps = rows.k, rows.n, rows.tau, rows.w, rows.steps
    out = []
    for st in np.unique(steps):
        m = steps == st

        def r1(x, m=m):
            return w[m] * (expected_tokens_per_verify(np.full(m.sum(), x[0]), k[m], d) - tau[m])

        r = optimize.least_squares(r1, [min(max(a0, 0.01), 0.99)], bounds=([0.0], [0.999999]), method="trf")
        out.append(
            {
                "rl_step": int(st),
                "rows": int(m.sum()),
                "tau_measured": float(np.average(tau[m], weights=n[m])),
                "alpha": float(r.x[0]),
            }
        )
    return pd.DataFrame(out)


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
