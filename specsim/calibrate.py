"""Calibration: fit hardware efficiencies, drafter acceptance and response lengths to traces.

Nothing here knows any published number. A hardware profile's efficiency factors are *fitted*
to measured traces (calibration/README.md, "Fit procedure"); published results are validation
targets (calibration/targets/) that a fitted profile must reproduce, never inputs.

Hardware (:func:`fit_hardware`). Unknowns, with bounds:
    compute, memory, comm in [0.05, 1]          achieved fraction of peak (roofline, collectives)
    step_overhead_s, per_seq_overhead_s,         fixed engine-step time, per running sequence,
    draft_overhead_s >= 0                        per draft pass
Each kernel-trace row (one measured forward pass) is predicted by the cost model,
`pass_cost(model, hw', layout, batch, q, logits)` at total context batch*ctx_per_seq -- decode and
verify with logits for every new token, prefill with one logit per sequence (for uniform prompts
this equals `prefill_time_s` exactly), draft rows by `draft_cost` of the drafter -- and carries no
scheduler overhead. Each engine-trace row (one engine step) is predicted by
`step_cost(model, drafter, hw', layout, active_batch, k).time_s(total_context_tokens)`, which adds
the three overheads. The residual of a row is ln(predicted / measured); scipy's bounded
`least_squares` (trust-region reflective, soft-L1 loss with a 10 % scale so a few outlier steps do
not drag the fit) minimises them jointly over every row. A parameter the data cannot determine
keeps its prior and is reported "not fitted", with the reason:
    comm               no row with tp, ep or pp > 1, or collectives too small to matter
    step_overhead_s    no engine rows (kernel rows have no scheduler overhead)
    per_seq_overhead_s engine rows at fewer than two batch sizes
    draft_overhead_s   no engine rows with k > 0 (or only n-gram drafting)
    compute / memory   no row's time depends on it (e.g. every op memory-bound)
    train_mfu          never (kernel and engine traces do not time training)
Standard errors come from the Jacobian at the optimum; relative residuals are pred/meas - 1.

Acceptance (:func:`fit_acceptance`): per speculative step tau = tokens_emitted / active_batch;
tau(alpha, k, decay) = 1 + sum_j alpha^j decay^(j(j-1)/2) (workload.acceptance) is fitted by
weighted least squares (weight = active_batch) across all k; the position decay is fitted only
when at least two k values are present. With an `rl_step` column spanning >= 3 steps, staleness
alpha(v) = floor + (alpha0 - floor) exp(-rate v) (v = rl_step) is fitted jointly.

Lengths (:func:`fit_lengths`): a thin wrapper over :func:`specsim.workload.lengths.fit`.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import optimize

from specsim.cost.forward import draft_cost, pass_cost, step_cost
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError
from specsim.hardware import Efficiency, HardwareSpec, efficiency_to_yaml_dict, load_hardware
from specsim.model import ModelSpec, drafter_arch, load_model
from specsim.traces import atomic_write_text, read_trace, validate_trace

__all__ = [
    "PARAMS",
    "AcceptanceFit",
    "CalibrationReport",
    "HardwareFit",
    "calibrate",
    "fit_acceptance",
    "fit_hardware",
    "fit_lengths",
    "write_calibrated_profile",
]

#: Efficiency factors fit_hardware can fit, in Efficiency's (SI) units.
PARAMS = ("compute", "memory", "comm", "step_overhead_s", "per_seq_overhead_s", "draft_overhead_s")
#: optimiser variable = SI value / scale (keeps every variable O(1): ms, µs, ms)
_SCALE = {
    "compute": 1.0,
    "memory": 1.0,
    "comm": 1.0,
    "step_overhead_s": 1e-3,
    "per_seq_overhead_s": 1e-6,
    "draft_overhead_s": 1e-3,
    "train_mfu": 1.0,
}
#: how the profile YAML names each factor, and the display unit
_YAML_NAME = {
    "compute": ("compute", ""),
    "memory": ("memory", ""),
    "comm": ("comm", ""),
    "step_overhead_s": ("step_overhead_ms", "ms"),
    "per_seq_overhead_s": ("per_seq_overhead_us", "µs"),
    "draft_overhead_s": ("draft_overhead_ms", "ms"),
    "train_mfu": ("train_mfu", ""),
}
_LOWER = {
    "compute": 0.05,
    "memory": 0.05,
    "comm": 0.05,
    "step_overhead_s": 0.0,
    "per_seq_overhead_s": 0.0,
    "draft_overhead_s": 0.0,
}
_UPPER = {
    "compute": 1.0,
    "memory": 1.0,
    "comm": 1.0,
    "step_overhead_s": np.inf,
    "per_seq_overhead_s": np.inf,
    "draft_overhead_s": np.inf,
}
#: a parameter is identifiable when moving it this much moves some prediction by > _SENS_MIN (log)
_SENS_MIN = 2e-3
_DEFAULT_DRAFTER = "eagle3"


# =========================================================================== hardware


@dataclass
class _Group:
    """Rows that share a model, layout and pass shape: priced by one vectorised cost call."""

    kind: str  # kernel | engine
    op: str
    model: ModelSpec
    layout: ParallelLayout
    q: int  # q_per_seq (kernel) or k (engine)
    drafter: Any
    idx: np.ndarray
    n: np.ndarray
    ctx_total: np.ndarray

    def predict(self, hw: HardwareSpec) -> np.ndarray:
        if self.kind == "engine":
            cost = step_cost(self.model, self.drafter, hw, self.layout, self.n, self.q)
        elif self.op == "draft":
            cost = draft_cost(self.drafter, hw, self.layout, self.n)
        elif self.op == "prefill":
            cost = pass_cost(self.model, hw, self.layout, self.n, self.q, 1)
        else:  # decode (q=1) and verify (q=k+1): every new token needs logits
            cost = pass_cost(self.model, hw, self.layout, self.n, self.q, self.q)
        return np.asarray(cost.time_s(self.ctx_total), dtype=float) * np.ones(len(self.idx))


def _where(df: pd.DataFrame, default: str) -> str:
    return str(df.attrs.get("path") or default)


def _model_cached(cache: dict, name: str, where: str) -> ModelSpec:
    if name not in cache:
        try:
            cache[name] = load_model(name)
        except SpecError as exc:
            raise SpecError("model", name, exc.allowed, where) from None
    return cache[name]


def _drafter_cached(cache: dict, kind: str, model: ModelSpec, where: str):
    key = (kind, model.name)
    if key not in cache:
        try:
            cache[key] = drafter_arch(kind, model)
        except SpecError as exc:
            raise SpecError("drafter", kind, exc.allowed, where) from None
    return cache[key]


def _opt_col(df: pd.DataFrame, col: str, default):
    if col not in df.columns:
        return np.full(len(df), default, dtype=object)
    return np.array(
        [default if (v is None or (not isinstance(v, str) and pd.isna(v))) else v for v in df[col]], dtype=object
    )


def _kernel_groups(
    df: pd.DataFrame,
    offset: int,
    hw: HardwareSpec,
    drafter_kind: str | None,
    models: dict,
    drafters: dict,
    notes: list[str],
) -> tuple[list[_Group], pd.DataFrame]:
    where = _where(df, "<kernel trace>")
    df = validate_trace(df, "kernel", where) if df.attrs.get("kind") != "kernel" else df
    hwcol = _opt_col(df, "hardware", "")
    for v in hwcol:
        if v and str(v).lower() != hw.name.lower():
            raise SpecError("hardware", v, f"'{hw.name}' (the profile being calibrated) or empty", where)
    wdt = _opt_col(df, "weight_dtype", "bf16")
    kvdt = _opt_col(df, "kv_dtype", "bf16")
    dk = _opt_col(df, "drafter", drafter_kind or _DEFAULT_DRAFTER)
    if (df["op"] == "draft").any() and drafter_kind is None and "drafter" not in df.columns:
        notes.append(f"{where}: op=draft rows priced as an {_DEFAULT_DRAFTER} drafter (no drafter column)")
    keys = list(
        zip(
            df["model"],
            df["tp"],
            df["ep"],
            df["pp"],
            wdt,
            kvdt,
            df["op"],
            df["q_per_seq"],
            np.where(df["op"] == "draft", dk, ""),
        )
    )
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = []
    for (mname, tp, ep, pp, w, kv, op, q, dkind), rows in groups.items():
        rows = np.asarray(rows)
        try:
            layout = ParallelLayout(tp=int(tp), ep=int(ep), pp=int(pp), weight_dtype=str(w), kv_dtype=str(kv))
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, exc.allowed, where) from None
        model = _model_cached(models, str(mname), where)
        drafter = None
        if op == "draft":
            drafter = _drafter_cached(drafters, str(dkind), model, where)
            if drafter.model is None:
                raise SpecError("drafter", dkind, "a drafter with a GPU pass for op=draft rows (not ngram)", where)
        n = df["batch"].to_numpy(dtype=float)[rows]
        ctx = df["ctx_per_seq"].to_numpy(dtype=float)[rows] * n
        out.append(_Group("kernel", str(op), model, layout, int(q), drafter, rows + offset, n, ctx))
    table = pd.DataFrame(
        {
            "source": where,
            "kind": "kernel",
            "row": np.arange(len(df)),
            "op": df["op"].to_numpy(),
            "model": df["model"].to_numpy(),
            "tp": df["tp"].to_numpy(),
            "batch": df["batch"].to_numpy(),
            "q_per_seq": df["q_per_seq"].to_numpy(),
            "k": np.nan,
            "ctx_per_seq": df["ctx_per_seq"].to_numpy(dtype=float),
            "measured_s": df["time_s"].to_numpy(dtype=float),
        }
    )
    return out, table


def _engine_groups(
    df: pd.DataFrame,
    offset: int,
    model_name: str | None,
    drafter_kind: str | None,
    models: dict,
    drafters: dict,
    notes: list[str],
) -> tuple[list[_Group], pd.DataFrame]:
    where = _where(df, "<engine trace>")
    df = validate_trace(df, "engine", where) if df.attrs.get("kind") != "engine" else df
    mcol = _opt_col(df, "model", model_name)
    if any(m is None for m in mcol):
        raise SpecError(
            "model",
            None,
            "a catalog model name: the engine trace has no model column, pass model_name (--model)",
            where,
        )
    tpcol = _opt_col(df, "tp", 1)
    dk = _opt_col(df, "drafter", drafter_kind)
    if (df["k"] > 0).any() and drafter_kind is None and any(d is None for d, k in zip(dk, df["k"]) if k > 0):
        notes.append(
            f"{where}: speculative steps priced with an {_DEFAULT_DRAFTER} drafter (no drafter column or --drafter)"
        )
    dk = np.array([d if d is not None else _DEFAULT_DRAFTER for d in dk], dtype=object)
    keys = list(zip(mcol, tpcol, df["k"], np.where(df["k"] > 0, dk, "")))
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = []
    for (mname, tp, k, dkind), rows in groups.items():
        rows = np.asarray(rows)
        try:
            layout = ParallelLayout(tp=int(tp))
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, exc.allowed, where) from None
        model = _model_cached(models, str(mname), where)
        drafter = _drafter_cached(drafters, str(dkind), model, where) if k > 0 else None
        n = df["active_batch"].to_numpy(dtype=float)[rows]
        ctx = df["total_context_tokens"].to_numpy(dtype=float)[rows]
        out.append(_Group("engine", "step", model, layout, int(k), drafter, rows + offset, n, ctx))
    n = df["active_batch"].to_numpy(dtype=float)
    table = pd.DataFrame(
        {
            "source": where,
            "kind": "engine",
            "row": np.arange(len(df)),
            "op": "step",
            "model": mcol.astype(str),
            "tp": np.asarray(tpcol, dtype=int),
            "batch": df["active_batch"].to_numpy(),
            "q_per_seq": np.where(df["k"] > 0, df["k"] + 1, 1),
            "k": df["k"].to_numpy(dtype=float),
            "ctx_per_seq": df["total_context_tokens"].to_numpy(dtype=float) / n,
            "measured_s": df["step_s"].to_numpy(dtype=float),
        }
    )
    return out, table


@dataclass
class HardwareFit:
    """Result of :func:`fit_hardware`.

    efficiency: the fitted Efficiency (priors kept for parameters not fitted).
    fitted: names (Efficiency attributes) that were fitted; not_fitted: name -> reason.
    stderr: 1-sigma standard error of each fitted parameter (SI units) from the Jacobian.
    residuals: one row per trace row: source, kind, row, op, model, tp, batch, q_per_seq, k,
      ctx_per_seq, measured_s, prior_s, predicted_s, prior_rel_error, rel_error (predicted/measured - 1).
    """

    hardware: str
    prior: Efficiency
    efficiency: Efficiency
    fitted: tuple[str, ...]
    not_fitted: dict[str, str]
    stderr: dict[str, float]
    residuals: pd.DataFrame
    rms_rel_error: float
    prior_rms_rel_error: float
    n_rows: int
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    success: bool = True
    message: str = ""

    def status(self, param: str) -> str:
        if param in self.fitted:
            se = self.stderr.get(param, float("nan"))
            _, unit = _YAML_NAME[param]
            if math.isfinite(se):
                return f"fitted (± {se / _SCALE[param]:.3g}{' ' + unit if unit else ''})"
            return "fitted"
        return f"not fitted ({self.not_fitted.get(param, 'no data')})"

    def residual_summary(self) -> dict:
        """rows, RMS / max |relative error| (fitted and prior), overall and per trace kind."""
        r = self.residuals
        out = {
            "rows": len(r),
            "rms_rel_error": self.rms_rel_error,
            "prior_rms_rel_error": self.prior_rms_rel_error,
            "max_abs_rel_error": float(np.abs(r["rel_error"]).max()) if len(r) else float("nan"),
        }
        for kind, sub in r.groupby("kind"):
            out[kind] = {
                "rows": len(sub),
                "rms_rel_error": _rms(sub["rel_error"]),
                "max_abs_rel_error": float(np.abs(sub["rel_error"]).max()),
            }
        return out

    def to_rows(self) -> list[dict]:
        """parameter (profile YAML name), unit, prior, fitted, status -- values in the YAML's units."""
        rows = []
        for p in (*PARAMS, "train_mfu"):
            name, unit = _YAML_NAME[p]
            prior = float(getattr(self.prior, p) / _SCALE[p])
            fitted = float(getattr(self.efficiency, p) / _SCALE[p]) if p in self.fitted else None
            rows.append(
                {
                    "parameter": f"efficiency.{name}",
                    "unit": unit,
                    "prior": prior,
                    "fitted": fitted,
                    "status": self.status(p),
                }
            )
        return rows


def _rms(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.sqrt(np.mean(x**2))) if x.size else float("nan")


def fit_hardware(
    hw: HardwareSpec,
    kernel_df: pd.DataFrame | Sequence[pd.DataFrame] | None = None,
    engine_df: pd.DataFrame | Sequence[pd.DataFrame] | None = None,
    model_name: str | None = None,
    drafter_kind: str | None = None,
    *,
    loss: str = "soft_l1",
    f_scale: float = 0.1,
    sources: Sequence[str] | None = None,
) -> HardwareFit:
    """Fit hw's efficiency factors to kernel and/or engine traces (see the module docstring).

    kernel_df / engine_df: a trace DataFrame (as the readers return) or a list of them.
    model_name: the catalog model for engine rows without a `model` column.
    drafter_kind: drafter of speculative engine steps / op=draft kernel rows without a `drafter`
    column (default eagle3, with a note). loss / f_scale: scipy least_squares robust loss on the
    log residuals ("linear" for plain least squares).
    """
    kernel_dfs = _as_list(kernel_df)
    engine_dfs = _as_list(engine_df)
    if not kernel_dfs and not engine_dfs:
        raise SpecError("traces", None, "at least one kernel or engine trace to fit hardware efficiencies")
    models: dict = {}
    drafters: dict = {}
    notes: list[str] = []
    groups: list[_Group] = []
    tables: list[pd.DataFrame] = []
    offset = 0
    for df in kernel_dfs:
        g, t = _kernel_groups(df, offset, hw, drafter_kind, models, drafters, notes)
        groups += g
        tables.append(t)
        offset += len(t)
    for df in engine_dfs:
        g, t = _engine_groups(df, offset, model_name, drafter_kind, models, drafters, notes)
        groups += g
        tables.append(t)
        offset += len(t)
    table = pd.concat(tables, ignore_index=True)
    measured = table["measured_s"].to_numpy(dtype=float)
    log_meas = np.log(measured)
    prior = hw.efficiency

    def predict(values: dict) -> np.ndarray:
        h = hw.with_efficiency(**values) if values else hw
        out = np.empty(len(measured))
        for g in groups:
            out[g.idx] = g.predict(h)
        return out

    # ---- which parameters the data can determine
    is_engine = (table["kind"] == "engine").to_numpy()
    multi_gpu = any(g.layout.tp > 1 or g.layout.ep > 1 or g.layout.pp > 1 for g in groups)
    spec_gpu = any(
        g.kind == "engine" and g.q > 0 and g.drafter is not None and g.drafter.model is not None for g in groups
    )
    # numbers of GPU draft passes per engine step seen (k for a GPU drafter, 0 for plain decode / n-gram)
    draft_passes = {
        (g.q if g.drafter is not None and g.drafter.model is not None else 0) for g in groups if g.kind == "engine"
    }
    not_fitted: dict[str, str] = {"train_mfu": "kernel and engine traces do not time training"}
    candidates = []
    for p in PARAMS:
        reason = None
        if p == "comm" and not multi_gpu:
            reason = "no data: every row has tp = ep = pp = 1, so no collectives"
        elif p == "step_overhead_s" and not is_engine.any():
            reason = "no data: no engine-step rows (kernel rows carry no scheduler overhead)"
        elif p == "per_seq_overhead_s" and table.loc[is_engine, "batch"].nunique() < 2:
            reason = (
                "no data: no engine-step rows"
                if not is_engine.any()
                else "no data: engine rows at a single batch size cannot separate it from the step overhead"
            )
        elif p == "draft_overhead_s" and not spec_gpu:
            reason = "no data: no speculative engine steps (k > 0) with a GPU drafter"
        elif p == "draft_overhead_s" and len(draft_passes) < 2:
            reason = (
                f"no data: every engine step runs the same number of draft passes (k = {next(iter(draft_passes))}), "
                "so the per-pass overhead cannot be told from the step overhead"
            )
        if reason:
            not_fitted[p] = reason
        else:
            candidates.append(p)
    base = np.log(predict({}))
    free = []
    directions = {}
    for p in candidates:
        v = getattr(prior, p)
        if p in ("compute", "memory", "comm"):
            nv = v * 0.8 if v * 0.8 >= _LOWER[p] else min(1.0, v * 1.25)
        else:
            nv = v + {"step_overhead_s": 1e-3, "per_seq_overhead_s": 1e-5, "draft_overhead_s": 1e-3}[p]
        delta = np.log(predict({p: nv})) - base
        moved = np.abs(delta).max()
        if moved > _SENS_MIN:
            free.append(p)
            directions[p] = delta / np.linalg.norm(delta)
        else:
            not_fitted[p] = (
                f"data insensitive: a {abs(nv / v - 1) * 100 if v else 100:.0f} % change moves no row by "
                f"more than {_SENS_MIN * 100:.1f} %"
                if v
                else "data insensitive"
            )

    free = _drop_confounded(free, directions, not_fitted)
    if "step_overhead_s" in free and "same number of draft passes" in not_fitted.get("draft_overhead_s", ""):
        notes.append(
            "step_overhead_s was fitted with draft_overhead_s held at its prior: on these rows only "
            "step_overhead + k * draft_overhead is determined"
        )

    prior_pred = predict({})
    values, stderr, success, message = {}, {}, True, "nothing to fit"
    while free:
        best = _least_squares(predict, log_meas, free, prior, loss, f_scale)
        scale = np.array([_SCALE[p] for p in free])
        values = dict(zip(free, best.x * scale))
        stderr = _stderr(best, free, scale)
        success, message = bool(best.success), str(best.message)
        # a parameter the data barely constrain (1-sigma error above half its size) keeps its prior
        rel_se = {p: stderr[p] / max(abs(values[p]), abs(getattr(prior, p)), 1e-12) for p in free}
        worst = max(free, key=lambda p: rel_se[p] if np.isfinite(rel_se[p]) else np.inf)
        if not (rel_se[worst] > _MAX_REL_SE or not np.isfinite(rel_se[worst])):
            break
        name, unit = _YAML_NAME[worst]
        not_fitted[worst] = (
            f"poorly determined by the data (fit gave {values[worst] / _SCALE[worst]:.3g}"
            f"{' ' + unit if unit else ''} ± {stderr[worst] / _SCALE[worst]:.2g}); kept the prior"
        )
        free = [p for p in free if p != worst]
        values, stderr = {}, {}
    for p in free:
        if values[p] <= _LOWER[p] + 1e-12 or values[p] >= _UPPER[p] - 1e-12:
            name, unit = _YAML_NAME[p]
            notes.append(
                f"{name} fitted at its bound ({values[p] / _SCALE[p]:.4g}{' ' + unit if unit else ''}): "
                "the data push it to the edge of the physical range"
            )
    eff = Efficiency(**{p: values.get(p, getattr(prior, p)) for p in (*PARAMS, "train_mfu")})
    pred = predict(values)
    table["prior_s"] = prior_pred
    table["predicted_s"] = pred
    table["prior_rel_error"] = prior_pred / measured - 1.0
    table["rel_error"] = pred / measured - 1.0
    srcs = tuple(sources) if sources is not None else tuple(dict.fromkeys(table["source"]))
    return HardwareFit(
        hardware=hw.name,
        prior=prior,
        efficiency=eff,
        fitted=tuple(free),
        not_fitted={p: r for p, r in not_fitted.items() if p not in free},
        stderr=stderr,
        residuals=table,
        rms_rel_error=_rms(table["rel_error"]),
        prior_rms_rel_error=_rms(table["prior_rel_error"]),
        n_rows=len(table),
        sources=srcs,
        notes=tuple(notes),
        success=success,
        message=message,
    )


#: when two parameters are confounded, the one later in this order keeps its prior
_KEEP_ORDER = ("compute", "memory", "step_overhead_s", "per_seq_overhead_s", "comm", "draft_overhead_s")
#: smallest singular value (of the column-normalised sensitivity matrix) for a parameter set to be identifiable
_CONFOUND_SV = 1e-3
#: a fitted parameter whose 1-sigma standard error exceeds this fraction of its size keeps its prior
_MAX_REL_SE = 0.5


def _drop_confounded(free: list[str], directions: dict, not_fitted: dict) -> list[str]:
    """Drop parameters whose effects on the rows are (nearly) linear combinations of others'.

    `directions[p]` is the unit vector of log-prediction changes when p moves. While the matrix of
    these has a singular value below _CONFOUND_SV, the parameter with a large share in the
    corresponding singular vector that comes last in _KEEP_ORDER keeps its prior.
    """
    free = list(free)
    while len(free) >= 2:
        D = np.column_stack([directions[p] for p in free])
        _, sv, vt = np.linalg.svd(D, full_matrices=False)
        if sv[-1] >= _CONFOUND_SV:
            break
        weights = np.abs(vt[-1])
        involved = [p for p, w in zip(free, weights) if w > 0.2]
        drop = max(involved, key=_KEEP_ORDER.index)
        others = [p for p in involved if p != drop]
        not_fitted[drop] = (
            f"confounded with {', '.join(others)}: the data determine only a combination of them; kept the prior"
        )
        free.remove(drop)
    return free


def _least_squares(predict, log_meas, free, prior, loss, f_scale):
    """Bounded least squares on log residuals from two starting points; the better result."""
    scale = np.array([_SCALE[p] for p in free])
    lb = np.array([_LOWER[p] for p in free]) / scale
    ub = np.array([_UPPER[p] for p in free]) / scale

    def resid(x):
        return np.log(predict(dict(zip(free, x * scale)))) - log_meas

    x_prior = np.clip(np.array([getattr(prior, p) for p in free]) / scale, lb, ub)
    starts = [x_prior, np.clip(np.where(np.isfinite(ub), 0.5 * (lb + ub), x_prior * 0.5), lb, ub)]
    best = None
    for x0 in starts:
        res = optimize.least_squares(
            resid,
            x0,
            bounds=(lb, ub),
            method="trf",
            loss=loss,
            f_scale=f_scale,
            x_scale="jac",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
            max_nfev=2000,
        )
        if best is None or res.cost < best.cost - 1e-15:
            best = res
    return best


def _stderr(res, names, scale) -> dict[str, float]:
    J = np.asarray(res.jac, dtype=float)
    r = np.asarray(res.fun, dtype=float)
    dof = max(len(r) - len(names), 1)
    try:
        cov = np.linalg.pinv(J.T @ J) * float(r @ r) / dof
    except np.linalg.LinAlgError:
        return {p: float("nan") for p in names}
    se = np.sqrt(np.clip(np.diag(cov), 0, None)) * scale
    return {p: float(s) for p, s in zip(names, se)}


def _as_list(x) -> list[pd.DataFrame]:
    if x is None:
        return []
    if isinstance(x, pd.DataFrame):
        return [x]
    return [d for d in x if d is not None]


def write_calibrated_profile(
    hw: HardwareSpec,
    fit: HardwareFit,
    src_profile_path=None,
    out_path=None,
    traces: Sequence[str] | None = None,
    date: str | None = None,
) -> Path:
    """Write a profile YAML: the source profile with its efficiency block replaced by `fit`.

    Fitted values get `source: "fitted by specsim calibrate from <traces> on <date>; RMS rel. error
    x %"`; values not fitted keep the prior and say why. A `calibration:` block records the
    residual summary, the traces and each fitted parameter's standard error. Atomic write.
    """
    if out_path is None:
        raise SpecError("out", None, "a path for the calibrated profile YAML")
    src = Path(src_profile_path or hw.path or "")
    if not src.is_file():
        raise SpecError("hardware", str(src), "the source profile YAML the calibrated copy starts from")
    try:
        doc = yaml.safe_load(src.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError("hardware", str(src), f"a valid YAML profile ({exc.__class__.__name__})") from None
    date = date or _dt.date.today().isoformat()
    traces = [str(t) for t in (traces if traces is not None else fit.sources)]
    trace_text = ", ".join(traces) if traces else "(in-memory traces)"
    rms_pct = fit.rms_rel_error * 100
    old = doc.get("efficiency") or {}
    block = efficiency_to_yaml_dict(fit.efficiency, "")
    for p in (*PARAMS, "train_mfu"):
        key, _ = _YAML_NAME[p]
        if p in fit.fitted:
            block[key]["source"] = (
                f"fitted by specsim calibrate from {trace_text} on {date}; "
                f"RMS rel. error {rms_pct:.2f} % over {fit.n_rows} rows"
            )
        else:
            prev = old.get(key, {})
            prev_src = prev.get("source", "") if isinstance(prev, dict) else ""
            if isinstance(prev, dict) and "value" in prev:
                block[key]["value"] = prev["value"]
            reason = fit.not_fitted.get(p, "no data")
            block[key]["source"] = (
                f"{prev_src} [kept as prior by specsim calibrate on {date}: not fitted ({reason})]".strip()
            )
    doc["efficiency"] = block
    summary = fit.residual_summary()
    doc["calibration"] = {
        "tool": "specsim calibrate",
        "date": date,
        "source_profile": str(src),
        "traces": traces,
        "rows": fit.n_rows,
        "rms_rel_error": round(float(fit.rms_rel_error), 6),
        "prior_rms_rel_error": round(float(fit.prior_rms_rel_error), 6),
        "max_abs_rel_error": round(float(summary["max_abs_rel_error"]), 6),
        "by_kind": {
            k: {kk: (round(float(vv), 6) if isinstance(vv, float) else vv) for kk, vv in v.items()}
            for k, v in summary.items()
            if isinstance(v, dict)
        },
        "fitted": [_YAML_NAME[p][0] for p in fit.fitted],
        "stderr": {_YAML_NAME[p][0]: float(f"{fit.stderr[p] / _SCALE[p]:.4g}") for p in fit.fitted if p in fit.stderr},
        "not_fitted": {_YAML_NAME[p][0]: r for p, r in fit.not_fitted.items()},
        "notes": list(fit.notes),
    }
    header = (
        f"# Calibrated copy of {src} written by specsim calibrate on {date}.\n"
        f"# Efficiency factors fitted to: {trace_text}\n"
    )
    text = header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)
    out = atomic_write_text(out_path, text)
    load_hardware(str(out))  # the written profile must load
    return out


# =========================================================================== acceptance


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
        from specsim.workload.acceptance import expected_tokens_per_verify

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
    from specsim.workload.acceptance import Staleness, expected_tokens_per_verify

    dfs = _as_list(engine_df)
    if not dfs:
        raise SpecError("traces", None, "an engine trace with speculative steps (k > 0)")
    frames = []
    for d in dfs:
        where = _where(d, "<engine trace>")
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
    sources = tuple(dict.fromkeys(data["source"])) or tuple(_where(d, "<engine trace>") for d in dfs)
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
    from specsim.workload.acceptance import alpha_from_tau

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
    se = _stderr(res, names, np.ones(len(names)))
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
    from specsim.workload import lengths as _lengths

    where = _where(length_df, "<lengths trace>")
    df = validate_trace(length_df, "lengths", where) if length_df.attrs.get("kind") != "lengths" else length_df
    try:
        return _lengths.fit(
            df["length"].to_numpy(dtype=float), kind=kind, n_components=n_components, cap_tokens=cap_tokens
        )
    except SpecError as exc:
        raise SpecError(exc.field, exc.value, exc.allowed, exc.where or where) from None


def _detect_cap(x: np.ndarray) -> int | None:
    """A length cap is evident when the maximum repeats (>= 2 rows and >= 0.5 % of rows)."""
    m = x.max()
    hits = int((x == m).sum())
    return int(m) if hits >= 2 and hits >= 0.005 * x.size else None


# =========================================================================== orchestration


@dataclass
class CalibrationReport:
    """What `specsim calibrate` did: per-kind fits, the traces used, and where it wrote the profile.

    hardware_fit: one joint fit over every kernel and engine trace. acceptance and lengths: one
    fit per trace file (each is one run / drafter / workload), keyed by file name.
    """

    hardware: str
    traces: list[dict]
    hardware_fit: HardwareFit | None = None
    hardware_status: str = ""
    acceptance: dict = field(default_factory=dict)
    acceptance_status: str = ""
    lengths: dict = field(default_factory=dict)
    stages: pd.DataFrame | None = None
    out: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_rows(self) -> list[dict]:
        """One row per parameter: parameter, unit, prior, fitted (None when not fitted), status."""
        rows: list[dict] = []
        if self.hardware_fit is not None:
            rows += self.hardware_fit.to_rows()
        else:
            rows.append(
                {
                    "parameter": "efficiency.*",
                    "unit": "",
                    "prior": None,
                    "fitted": None,
                    "status": f"not fitted ({self.hardware_status or 'no kernel or engine traces'})",
                }
            )
        for label, fit in self.acceptance.items():
            rows += fit.to_rows(f"acceptance[{label}]")
        if not self.acceptance and self.acceptance_status:
            rows.append(
                {
                    "parameter": "acceptance.alpha",
                    "unit": "",
                    "prior": None,
                    "fitted": None,
                    "status": f"not fitted ({self.acceptance_status})",
                }
            )
        for label, fit in self.lengths.items():
            for key, value in fit.params.items():
                if isinstance(value, (tuple, list)):
                    for i, v in enumerate(value):
                        rows.append(
                            {
                                "parameter": f"lengths[{label}].{key}[{i}]",
                                "unit": "",
                                "prior": None,
                                "fitted": float(v),
                                "status": f"fitted ({fit.kind}, n={fit.n}, KS={fit.ks_statistic:.3f})",
                            }
                        )
                else:
                    rows.append(
                        {
                            "parameter": f"lengths[{label}].{key}",
                            "unit": "tokens" if key.endswith("tokens") else "",
                            "prior": None,
                            "fitted": float(value),
                            "status": f"fitted ({fit.kind}, n={fit.n}, censored={fit.n_censored}, "
                            f"KS={fit.ks_statistic:.3f})",
                        }
                    )
        if self.stages is not None:
            for r in self.stages.itertuples(index=False):
                rows.append(
                    {
                        "parameter": f"stage[{r.mode}].{r.quantity}",
                        "unit": r.unit,
                        "prior": None,
                        "fitted": float(r.value),
                        "status": "measured (validation data, not a fit parameter)",
                    }
                )
        return rows

    def residual_stats(self) -> dict:
        out: dict = {}
        if self.hardware_fit is not None:
            out["hardware"] = self.hardware_fit.residual_summary()
        for label, fit in self.acceptance.items():
            out[f"acceptance[{label}]"] = {"rows": fit.n_rows, "rms_rel_tau_error": fit.rms_rel_tau_error}
        for label, fit in self.lengths.items():
            out[f"lengths[{label}]"] = {"n": fit.n, "ks_statistic": fit.ks_statistic, "ks_pvalue": fit.ks_pvalue}
        return out

    def summary(self) -> str:
        lines = [f"calibration of {self.hardware} from {len(self.traces)} trace(s):"]
        for t in self.traces:
            lines.append(f"  {t['kind']:7s} {t['rows']:6d} rows  {t['path']}")
        rows = self.to_rows()
        width = max([len(r["parameter"]) for r in rows] + [9])
        unit_w = max([len(r["unit"]) for r in rows] + [4])
        lines.append(f"  {'parameter':{width}s} {'prior':>10s} {'fitted':>10s} {'unit':{unit_w}s}  status")
        for r in rows:
            prior = "" if r["prior"] is None else f"{r['prior']:.6g}"
            fitted = "" if r["fitted"] is None else f"{r['fitted']:.6g}"
            lines.append(f"  {r['parameter']:{width}s} {prior:>10s} {fitted:>10s} {r['unit']:{unit_w}s}  {r['status']}")
        if self.hardware_fit is not None:
            s = self.hardware_fit.residual_summary()
            lines.append(
                f"  hardware fit: {s['rows']} rows, RMS rel. error {s['rms_rel_error'] * 100:.2f} % "
                f"(prior {s['prior_rms_rel_error'] * 100:.2f} %), max |rel. error| {s['max_abs_rel_error'] * 100:.2f} %"
            )
        for n in (
            self.notes
            + list(self.hardware_fit.notes if self.hardware_fit else [])
            + [n for fit in self.acceptance.values() for n in fit.notes]
        ):
            lines.append(f"  note: {n}")
        if self.out:
            lines.append(f"  wrote {self.out}")
        return "\n".join(lines)


def _stage_summary(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    df = pd.concat(dfs, ignore_index=True)
    parts = ["generation_s", "reward_s", "logprob_s", "train_s", "weight_sync_s"]
    step = df["step_s"].astype(float) if "step_s" in df.columns else pd.Series(np.nan, index=df.index)
    step = step.where(step.notna(), df[parts].sum(axis=1))
    sd = (
        df["sd"].astype("boolean").fillna(False).to_numpy(dtype=bool) if "sd" in df.columns else np.zeros(len(df), bool)
    )
    rows = []
    for mode, m in (("ar", ~sd), ("sd", sd)):
        if not m.any():
            continue
        gen, st = df.loc[m, "generation_s"].astype(float), step[m]
        rows += [
            {"mode": mode, "quantity": "generation_s", "unit": "s", "value": float(gen.mean())},
            {"mode": mode, "quantity": "step_s", "unit": "s", "value": float(st.mean())},
            {"mode": mode, "quantity": "generation_share", "unit": "", "value": float((gen / st).mean())},
        ]
        if "tau" in df.columns and df.loc[m, "tau"].notna().any():
            rows.append(
                {
                    "mode": mode,
                    "quantity": "tau",
                    "unit": "tokens/verify",
                    "value": float(df.loc[m, "tau"].astype(float).mean()),
                }
            )
    return pd.DataFrame(rows)


def calibrate(
    paths: Sequence[str | Path],
    hardware: str | HardwareSpec,
    model: str | None = None,
    out: str | Path | None = None,
    *,
    drafter_kind: str | None = None,
    cap_tokens: int | None = None,
    date: str | None = None,
) -> CalibrationReport:
    """Read traces (kind sniffed per file), fit what each kind informs, optionally write a profile.

    kernel + engine traces -> hardware efficiencies (fit_hardware); engine traces with k > 0 ->
    acceptance (fit_acceptance); lengths traces -> a lognormal fit per file (cap: `cap_tokens`, or
    detected when the maximum length repeats); stage traces -> a measured summary (validation
    data, nothing fitted). `out`: write the calibrated profile there (needs kernel/engine traces).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise SpecError("traces", [], "at least one trace file")
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(str(hardware))
    by_kind: dict[str, list[pd.DataFrame]] = {"kernel": [], "engine": [], "lengths": [], "stage": []}
    traces = []
    for p in paths:
        df = read_trace(p)
        by_kind[df.attrs["kind"]].append(df)
        traces.append({"path": str(p), "kind": df.attrs["kind"], "rows": len(df)})
    report = CalibrationReport(hardware=hw.name, traces=traces)
    hw_paths = [t["path"] for t in traces if t["kind"] in ("kernel", "engine")]
    if by_kind["kernel"] or by_kind["engine"]:
        engine_for_hw = by_kind["engine"]
        if engine_for_hw and model is None:
            missing = [d for d in engine_for_hw if "model" not in d.columns or d["model"].isna().any()]
            if missing:
                report.notes.append(
                    "engine traces without a model column are not used for the hardware fit "
                    "(pass --model): " + ", ".join(_where(d, "?") for d in missing)
                )
                engine_for_hw = [d for d in engine_for_hw if not any(d is m for m in missing)]
                hw_paths = [t for t in hw_paths if t not in {_where(d, "?") for d in missing}]
        if by_kind["kernel"] or engine_for_hw:
            report.hardware_fit = fit_hardware(
                hw, by_kind["kernel"], engine_for_hw, model_name=model, drafter_kind=drafter_kind, sources=hw_paths
            )
        else:
            report.hardware_status = "engine traces need a model (--model) to be priced"
    else:
        report.hardware_status = "no kernel or engine traces"
    for d in by_kind["engine"]:
        if (d["k"] > 0).any():
            report.acceptance[Path(_where(d, "engine")).name] = fit_acceptance(d)
    if by_kind["engine"] and not report.acceptance:
        report.acceptance_status = "engine traces have no speculative steps (k > 0)"
    for d in by_kind["lengths"]:
        x = d["length"].to_numpy(dtype=float)
        cap = cap_tokens
        if cap is None:
            cap = _detect_cap(x)
            if cap is not None:
                report.notes.append(
                    f"{_where(d, '?')}: {int((x == cap).sum())} responses at the maximum {cap} "
                    f"tokens: treated as truncated at cap_tokens={cap}"
                )
        report.lengths[Path(_where(d, "lengths")).name] = fit_lengths(d, cap_tokens=cap)
    if by_kind["stage"]:
        report.stages = _stage_summary(by_kind["stage"])
    if out is not None:
        if report.hardware_fit is None:
            raise SpecError(
                "out", str(out), f"given only with kernel or engine traces (nothing to write: {report.hardware_status})"
            )
        src = hw.path
        report.out = str(write_calibrated_profile(hw, report.hardware_fit, src, out, hw_paths, date=date))
    return report
