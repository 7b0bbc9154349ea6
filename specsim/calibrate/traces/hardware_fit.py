"""Hardware fit from kernel and engine traces: :func:`fit_hardware` (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace

import numpy as np
import pandas as pd

from specsim.calibrate.traces.common import LOWER, PARAMS, SCALE, SENS_MIN, UPPER, YAML_NAME, as_list, rms
from specsim.calibrate.traces.groups import Group, engine_groups, kernel_groups
from specsim.catalog.hardware import Efficiency, HardwareSpec
from specsim.errors import SpecError


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
            _, unit = YAML_NAME[param]
            if math.isfinite(se):
                return f"fitted (± {se / SCALE[param]:.3g}{' ' + unit if unit else ''})"
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
                "rms_rel_error": rms(sub["rel_error"]),
                "max_abs_rel_error": float(np.abs(sub["rel_error"]).max()),
            }
        return out

    def to_rows(self) -> list[dict]:
        """parameter (profile YAML name), unit, prior, fitted, status -- values in the YAML's units."""
        rows = []
        for p in (*PARAMS, "train_mfu"):
            name, unit = YAML_NAME[p]
            prior = float(getattr(self.prior, p) / SCALE[p])
            fitted = float(getattr(self.efficiency, p) / SCALE[p]) if p in self.fitted else None
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


@dataclass
class _TraceRows:
    """The rows a hardware fit explains: each trace row's group (its op or engine step, priced by
    the cost model), the concatenated row table and the measured seconds; `predict` prices every
    row with some efficiency parameters changed from `hw`'s."""

    hw: HardwareSpec
    groups: list[Group]
    table: pd.DataFrame
    measured: np.ndarray

    def predict(self, values: dict) -> np.ndarray:
        h = self.hw.with_efficiency(**values) if values else self.hw
        out = np.empty(len(self.measured))
        for g in self.groups:
            out[g.idx] = g.predict(h)
        return out


@dataclass
class _Solution:
    """The least-squares fit of the parameters that stayed free (empty when none did)."""

    free: list[str]
    values: dict[str, float]
    stderr: dict[str, float]
    success: bool = True
    message: str = "nothing to fit"


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

    Three stages: the rows (`_trace_rows`), the parameters they determine (`_identifiable`) and
    their fit (`_solve`), then the report (`_hardware_report`).
    """
    if hw.kernel_fit is not None:
        # trace fits price every op with the scalar efficiencies they fit; a measured-kernel fit
        # (shape-dependent terms) would hide them, so it is set aside here (and in the written profile)
        hw = _replace(hw, kernel_fit=None)
    notes: list[str] = []
    rows = _trace_rows(hw, as_list(kernel_df), as_list(engine_df), model_name, drafter_kind, notes)
    free, not_fitted = _identifiable(rows, notes)
    if free and len(rows.measured) <= len(free):
        raise SpecError("trace rows", len(rows.measured),
                        f"more than the {len(free)} parameters the rows inform ({', '.join(free)}): a fit needs at "
                        "least one row beyond its parameters to have an error at all", ", ".join(sources or []) or None)
    prior_pred = rows.predict({})
    solution = _solve(rows, free, loss, f_scale, not_fitted)
    return _hardware_report(rows, solution, prior_pred, not_fitted, notes, sources)


def _trace_rows(hw: HardwareSpec, kernel_dfs: list[pd.DataFrame], engine_dfs: list[pd.DataFrame],
                model_name: str | None, drafter_kind: str | None, notes: list[str]) -> _TraceRows:
    """Group every kernel and engine trace row for pricing (in that order, rows numbered across
    traces); the grouping's notes (assumed drafters, models) go to `notes`."""
    if not kernel_dfs and not engine_dfs:
        raise SpecError("traces", None, "at least one kernel or engine trace to fit hardware efficiencies")
    models: dict = {}
    drafters: dict = {}
    groups: list[Group] = []
    tables: list[pd.DataFrame] = []
    offset = 0
    for df in kernel_dfs:
        g, t = kernel_groups(df, offset, hw, drafter_kind, models, drafters, notes)
        groups += g
        tables.append(t)
        offset += len(t)
    for df in engine_dfs:
        g, t = engine_groups(df, offset, model_name, drafter_kind, models, drafters, notes)
        groups += g
        tables.append(t)
        offset += len(t)
    table = pd.concat(tables, ignore_index=True)
    return _TraceRows(hw, groups, table, table["measured_s"].to_numpy(dtype=float))


def _unsupported(rows: _TraceRows) -> tuple[list[str], dict[str, str]]:
    """(parameters the kinds of rows present can inform, reason for each of the others): no
    collectives without tp/ep/pp > 1, no scheduler overhead without engine steps, ..."""
    table, groups = rows.table, rows.groups
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
    return candidates, not_fitted


def _identifiable(rows: _TraceRows, notes: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the parameters the rows determine, reason for each one they do not): present in the data
    (`_unsupported`), moving some row by more than SENS_MIN when nudged, and not confounded with
    another (`drop_confounded`)."""
    candidates, not_fitted = _unsupported(rows)
    prior = rows.hw.efficiency
    base = np.log(rows.predict({}))
    free = []
    directions = {}
    for p in candidates:
        v = getattr(prior, p)
        if p in ("compute", "memory", "comm"):
            nv = v * 0.8 if v * 0.8 >= LOWER[p] else min(1.0, v * 1.25)
        else:
            nv = v + {"step_overhead_s": 1e-3, "per_seq_overhead_s": 1e-5, "draft_overhead_s": 1e-3}[p]
        delta = np.log(rows.predict({p: nv})) - base
        moved = np.abs(delta).max()
        if moved > SENS_MIN:
            free.append(p)
            directions[p] = delta / np.linalg.norm(delta)
        else:
            not_fitted[p] = (
                f"data insensitive: a {abs(nv / v - 1) * 100 if v else 100:.0f} % change moves no row by "
                f"more than {SENS_MIN * 100:.1f} %"
                if v
                else "data insensitive"
            )

    free = drop_confounded(free, directions, not_fitted)
    if "step_overhead_s" in free and "same number of draft passes" in not_fitted.get("draft_overhead_s", ""):
        notes.append(
            "step_overhead_s was fitted with draft_overhead_s held at its prior: on these rows only "
            "step_overhead + k * draft_overhead is determined"
        )
    return free, not_fitted


def _solve(rows: _TraceRows, free: list[str], loss: str, f_scale: float, not_fitted: dict[str, str]) -> _Solution:
    """Least squares on the log residuals of the `free` parameters; while one is barely constrained
    by the data (1-sigma error above _MAX_REL_SE of its size) it keeps its prior (reason into
    `not_fitted`) and the rest are fitted again."""
    prior = rows.hw.efficiency
    log_meas = np.log(rows.measured)
    solution = _Solution(free=list(free), values={}, stderr={})
    while solution.free:
        free = solution.free
        best = _least_squares(rows.predict, log_meas, free, prior, loss, f_scale)
        scale = np.array([SCALE[p] for p in free])
        values = dict(zip(free, best.x * scale))
        stderr = standard_errors(best, free, scale)
        solution = _Solution(free, values, stderr, bool(best.success), str(best.message))
        rel_se = {p: stderr[p] / max(abs(values[p]), abs(getattr(prior, p)), 1e-12) for p in free}
        worst = max(free, key=lambda p: rel_se[p] if np.isfinite(rel_se[p]) else np.inf)
        if not (rel_se[worst] > _MAX_REL_SE or not np.isfinite(rel_se[worst])):
            break
        _, unit = YAML_NAME[worst]
        not_fitted[worst] = (
            f"poorly determined by the data (fit gave {values[worst] / SCALE[worst]:.3g}"
            f"{' ' + unit if unit else ''} ± {stderr[worst] / SCALE[worst]:.2g}); kept the prior"
        )
        solution = _Solution([p for p in free if p != worst], {}, {}, solution.success, solution.message)
    return solution


def _hardware_report(rows: _TraceRows, solution: _Solution, prior_pred: np.ndarray, not_fitted: dict[str, str],
                     notes: list[str], sources: Sequence[str] | None) -> HardwareFit:
    """The HardwareFit: fitted efficiencies (priors for the rest), a note per parameter fitted at a
    bound, and every row's prior and fitted prediction with its relative error."""
    prior = rows.hw.efficiency
    free, values = solution.free, solution.values
    for p in free:
        if values[p] <= LOWER[p] + 1e-12 or values[p] >= UPPER[p] - 1e-12:
            name, unit = YAML_NAME[p]
            notes.append(
                f"{name} fitted at its bound ({values[p] / SCALE[p]:.4g}{' ' + unit if unit else ''}): "
                "the data push it to the edge of the physical range"
            )
    eff = Efficiency(**{p: values.get(p, getattr(prior, p)) for p in (*PARAMS, "train_mfu")})
    pred = rows.predict(values)
    table, measured = rows.table, rows.measured
    table["prior_s"] = prior_pred
    table["predicted_s"] = pred
    table["prior_rel_error"] = prior_pred / measured - 1.0
    table["rel_error"] = pred / measured - 1.0
    srcs = tuple(sources) if sources is not None else tuple(dict.fromkeys(table["source"]))
    return HardwareFit(
        hardware=rows.hw.name,
        prior=prior,
        efficiency=eff,
        fitted=tuple(free),
        not_fitted={p: r for p, r in not_fitted.items() if p not in free},
        stderr=solution.stderr,
        residuals=table,
        rms_rel_error=rms(table["rel_error"]),
        prior_rms_rel_error=rms(table["prior_rel_error"]),
        n_rows=len(table),
        sources=srcs,
        notes=tuple(notes),
        success=solution.success,
        message=solution.message,
    )


#: when two parameters are confounded, the one later in this order keeps its prior
_KEEP_ORDER = ("compute", "memory", "step_overhead_s", "per_seq_overhead_s", "comm", "draft_overhead_s")
#: smallest singular value (of the column-normalised sensitivity matrix) for a parameter set to be identifiable
_CONFOUND_SV = 1e-3
#: a fitted parameter whose 1-sigma standard error exceeds this fraction of its size keeps its prior
_MAX_REL_SE = 0.5


def drop_confounded(free: list[str], directions: dict, not_fitted: dict) -> list[str]:
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
    from scipy import optimize

    scale = np.array([SCALE[p] for p in free])
    lb = np.array([LOWER[p] for p in free]) / scale
    ub = np.array([UPPER[p] for p in free]) / scale

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


def standard_errors(res, names, scale) -> dict[str, float]:
    J = np.asarray(res.jac, dtype=float)
    r = np.asarray(res.fun, dtype=float)
    dof = max(len(r) - len(names), 1)
    try:
        cov = np.linalg.pinv(J.T @ J) * float(r @ r) / dof
    except np.linalg.LinAlgError:
        return {p: float("nan") for p in names}
    se = np.sqrt(np.clip(np.diag(cov), 0, None)) * scale
    return {p: float(s) for p, s in zip(names, se)}
