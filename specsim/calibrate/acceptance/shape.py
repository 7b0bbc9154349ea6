"""Fit ONE acceptance shape for a drafter family on published acceptance curves (this module
computes; calibration/recipes/acceptance_shape.py runs it for the EAGLE-3 scenarios and prints).

The acceptance model (specsim/workload/acceptance/laws.py, population.py): sequence i accepts
draft position j with probability alpha_i d^(j-1), alpha_i ~ Beta(m c, (1 - m) c). The shape is
the Beta concentration c (``drafter.heterogeneity``) and the position decay d
(``drafter.position_decay``); the mean m is what a configured tau pins. A tau at one draft length
says nothing about the shape, but the *curve* over positions does: heterogeneity makes the
conditional acceptance r_(j+1) / r_j rise with depth (survivors are the easy sequences), decay
makes it fall. So the shape is fitted on published curves and never on any 8B row
(calibration/README.md, "fit/predict split"):

* ``position_rate`` curves: vLLM's per-position acceptance rates (accepted at position j / drafts,
  unconditional) at one draft length k, predicted by
  :func:`specsim.workload.acceptance.population.reported_position_rates`;
* ``tau_by_k`` curves: mean acceptance length measured at k = k_first, k_first + 1, ... (one run
  per k), compared as increments tau(k) - tau(k - 1) (tau(k_first - 1) := 1, so the first
  increment spans positions 1..k_first) against :func:`specsim.workload.acceptance.population.reported_tau`.

Each curve gets its own mean m (a nuisance parameter: drafters, models and datasets differ), the
shape is shared. Least squares over every point, in acceptance-rate units. Three variants are
compared by BIC (n ln(SSE / n) + p ln n, p counting the per-curve means): c with d = 1, d with
homogeneous sequences, and c and d together; the lowest BIC is the fitted shape.

    python calibration/recipes/acceptance_shape.py                 # fit and print
    python calibration/recipes/acceptance_shape.py --write         # also update the EAGLE-3 scenarios
    python calibration/recipes/acceptance_shape.py --sensitivity   # refit leaving out one source at a time

Data: a curve table such as calibration/published/acceptance_curves.csv (sources in
calibration/published/README.md), given by the caller with the scenarios to write. Deterministic (bounded scalar searches and a fixed-start
Nelder-Mead); a few seconds. Entry point: :func:`fit_acceptance_shape` (returns a
:class:`ShapeReport`); :func:`write_scenarios` writes a fitted shape into the scenarios.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specsim import inputs
from specsim.atomic import write_text
from specsim.errors import SpecError
from specsim.workload.acceptance.population import (
    mean_alpha_from_tau,
    reported_position_rates,
    reported_tau,
    reported_taus,
)

METRICS = ("position_rate", "tau_by_k")
LOG_C_BOUNDS = (math.log(0.5), math.log(1e4))
#: the largest concentration the fit searches; a fitted c at (99 % of) it means "no heterogeneity found"
C_MAX = math.exp(LOG_C_BOUNDS[1])
D_BOUNDS = (0.5, 1.0)
#: a shape with no heterogeneity fitted and no decay: c = 8 (mild), d = 1, what a report compares to
OLD_SHAPE = (8.0, 1.0)


@dataclass(frozen=True)
class Curve:
    """One published curve: values at positions / draft lengths k_first, k_first + 1, ..."""

    name: str
    metric: str
    k_first: int
    values: tuple[float, ...]
    url: str
    model: str = ""
    temperature: str = ""

    def observed(self) -> np.ndarray:
        """Per-position rates, or tau increments tau(k) - tau(k - 1) with tau(k_first - 1) := 1."""
        v = np.asarray(self.values, dtype=float)
        return v if self.metric == "position_rate" else np.diff(np.concatenate([[1.0], v]))

    def predicted(self, m: float, c: float | None, d: float) -> np.ndarray:
        """The same quantities from the simulator's acceptance model at mean alpha m."""
        n = len(self.values)
        if self.metric == "position_rate":
            return reported_position_rates(m, n, d, c)
        taus = reported_taus(m, range(self.k_first, self.k_first + n), d, c)
        return np.diff(np.concatenate([[1.0], taus]))


@dataclass(frozen=True)
class Fit:
    """A fitted shape: c (None = homogeneous), d, per-curve means and residuals."""

    variant: str
    c: float | None
    d: float
    means: tuple[float, ...]
    residuals: tuple[np.ndarray, ...]
    n_shape_params: int

    @property
    def sse(self) -> float:
        return float(sum(np.sum(r**2) for r in self.residuals))

    @property
    def n_points(self) -> int:
        return sum(r.size for r in self.residuals)

    @property
    def rms(self) -> float:
        return math.sqrt(self.sse / self.n_points)

    @property
    def bic(self) -> float:
        n, p = self.n_points, self.n_shape_params + len(self.means)
        return n * math.log(self.sse / n) + p * math.log(n)


@dataclass(frozen=True)
class TauRow:
    """tau(k), k = 1..8, of a drafter whose reported tau at k = 3 is `tau`, under one shape."""

    label: str
    shape: str            # "old" (c = 8, d = 1) or "new" (the fitted shape)
    c: float | None
    d: float
    taus: tuple[float, ...]

    @property
    def tau5_over_tau3(self) -> float:
        return self.taus[4] / self.taus[2]

    @property
    def tau7_over_tau3(self) -> float:
        return self.taus[6] / self.taus[2]


@dataclass(frozen=True)
class LeaveOneOut:
    """The chosen variant refitted without one source (URL); tau(5) / tau(3) under it, for the
    first example tau of the report (fit_acceptance_shape's `examples`)."""

    url: str
    c: float | None
    d: float
    tau5_over_tau3: float


@dataclass
class ShapeReport:
    """What a fit reports: every variant, the chosen one, the tau(k) tables at the example taus,
    and (on request) the leave-one-source-out refits."""

    curves_path: Path
    curves: list[Curve]
    fits: list[Fit]
    best: Fit
    tau_rows: list[TauRow]
    sensitivity: list[LeaveOneOut] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


def load_curves(path: str | Path) -> list[Curve]:
    """Read the curve table; a bad row raises SpecError naming file and row (`where`), field and value."""
    out = []
    path = Path(path)
    text = inputs.read_text(path, "(file)", "acceptance curve table (CSV)")
    if True:
        for i, row in enumerate(csv.DictReader(text.splitlines()), start=2):
            where = f"{path}:{i}"
            if row["metric"] not in METRICS:
                raise SpecError("metric", row["metric"], f"one of {list(METRICS)}", where)
            try:
                vals = tuple(float(x) for x in row["values"].split())
                k_first = int(row["k_first"])
            except ValueError as err:
                raise SpecError("values/k_first", f"{row['values']} / {row['k_first']}", f"numbers ({err})", where) from None
            if not vals or k_first < 1 or any(not 0.0 <= v <= 33.0 for v in vals):
                raise SpecError("values/k_first", f"{row['values']} / {k_first}",
                                ">= 1 value in [0, 33] and k_first >= 1", where)
            out.append(Curve(row["curve"], row["metric"], k_first, vals, row["url"], row["model"], row["temperature"]))
    return out


def fit_mean(curve: Curve, c: float | None, d: float) -> tuple[float, np.ndarray]:
    """The curve's own mean alpha (least squares, bounded Brent) and its residuals at that mean."""
    from scipy import optimize

    obs = curve.observed()

    def sse(m: float) -> float:
        return float(np.sum((curve.predicted(m, c, d) - obs) ** 2))

    res = optimize.minimize_scalar(sse, bounds=(1e-3, 0.999), method="bounded", options={"xatol": 1e-6})
    m = float(res.x)
    return m, curve.predicted(m, c, d) - obs


def evaluate(curves: list[Curve], c: float | None, d: float, variant: str = "", n_shape: int = 0) -> Fit:
    """Fit every curve's mean for the shape (c, d)."""
    pairs = [fit_mean(cv, c, d) for cv in curves]
    return Fit(variant, c, d, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), n_shape)


def _sse(curves: list[Curve], c: float | None, d: float) -> float:
    return evaluate(curves, c, d).sse


def fit_shape(curves: list[Curve], free_c: bool, free_d: bool) -> Fit:
    """Least-squares shape with c and/or d free (c fixed: homogeneous; d fixed: 1)."""
    from scipy import optimize

    if free_c and free_d:
        grid = [(lc, d) for lc in np.log([2.0, 8.0, 32.0, 256.0]) for d in (0.85, 0.95, 1.0)]
        start = min(grid, key=lambda p: _sse(curves, math.exp(p[0]), p[1]))
        res = optimize.minimize(lambda p: _sse(curves, math.exp(p[0]), p[1]), np.array(start),
                                method="Nelder-Mead", bounds=[LOG_C_BOUNDS, D_BOUNDS],
                                options={"xatol": 1e-3, "fatol": 1e-8, "maxiter": 200})
        return evaluate(curves, math.exp(res.x[0]), float(res.x[1]), "c and d free", 2)
    if free_c:
        res = optimize.minimize_scalar(lambda lc: _sse(curves, math.exp(lc), 1.0), bounds=LOG_C_BOUNDS,
                                       method="bounded", options={"xatol": 1e-4})
        return evaluate(curves, math.exp(res.x), 1.0, "c free, d = 1", 1)
    if free_d:
        res = optimize.minimize_scalar(lambda d: _sse(curves, None, d), bounds=D_BOUNDS,
                                       method="bounded", options={"xatol": 1e-6})
        return evaluate(curves, None, float(res.x), "d free, homogeneous (c = inf)", 1)
    return evaluate(curves, None, 1.0, "homogeneous, d = 1 (no shape)", 0)


def fit_all(curves: list[Curve]) -> tuple[list[Fit], Fit]:
    """Every variant, and the one with the lowest BIC among the shaped ones."""
    fits = [fit_shape(curves, False, False), fit_shape(curves, True, False),
            fit_shape(curves, False, True), fit_shape(curves, True, True)]
    return fits, min(fits[1:], key=lambda f: f.bic)


def tau_table(tau: float, c: float | None, d: float, ks=range(1, 9), tau_k: int = 3) -> list[float]:
    """tau(k) for a drafter whose reported tau at tau_k is ``tau`` (the simulator's back-solve)."""
    m = mean_alpha_from_tau(tau, tau_k, d, c)
    return [reported_tau(m, k, d, c) for k in ks]


def tau_rows(best: Fit, examples, old_shape: tuple[float | None, float] = OLD_SHAPE) -> list[TauRow]:
    """tau(k), k = 1..8, for each (label, tau at k = 3) of `examples`, under `old_shape` and the fitted shape."""
    rows = []
    for label, tau in examples:
        for name, c, d in (("old", *old_shape), ("new", best.c, best.d)):
            rows.append(TauRow(label, name, c, d, tuple(tau_table(tau, c, d))))
    return rows


def sensitivity(curves: list[Curve], best: Fit, tau: float) -> list[LeaveOneOut]:
    """Refit the chosen variant leaving out one source (URL) at a time; tau(5)/tau(3) at `tau` (k = 3)."""
    free_c, free_d = best.c is not None, best.n_shape_params == 2 or best.c is None
    out = []
    for url in sorted({cv.url for cv in curves}):
        f = fit_shape([cv for cv in curves if cv.url != url], free_c, free_d)
        row = tau_table(tau, f.c, f.d)
        out.append(LeaveOneOut(url, f.c, f.d, row[4] / row[2]))
    return out


def write_scenarios(best: Fit, paths, source: str) -> list[Path]:
    """Set drafter.heterogeneity / drafter.position_decay in each EAGLE-3 scenario file of `paths`
    (line edits, every other line kept), each followed by a comment `# <what>: <source>`."""

    c_txt = "null" if best.c is None else f"{best.c:.3g}"
    het = f"  heterogeneity: {c_txt}  # Beta concentration c: {source}"
    dec = f"  position_decay: {best.d:.3f}  # position decay d: {source}"
    changed = []
    for path in map(Path, paths):
        lines = inputs.read_text(path, "(file)", "scenario YAML file").splitlines()
        start = lines.index("drafter:")
        end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))), len(lines))
        body = [ln for ln in lines[start + 1:end] if not re.match(r"\s+position_decay:", ln)]
        kind = next((ln for ln in body if re.match(r"\s+kind:", ln)), "")
        if "eagle3" not in kind:
            raise SpecError("drafter.kind", kind.strip(), "eagle3 (the scenarios whose shape this fit sets)", str(path))
        i_het = next(i for i, ln in enumerate(body) if re.match(r"\s+heterogeneity:", ln))
        body[i_het:i_het + 1] = [het, dec]
        new = lines[:start + 1] + body + lines[end:]
        write_text(path, "\n".join(new) + "\n")
        changed.append(path)
    return changed


def fit_acceptance_shape(curves_path: str | Path, *, examples=(), old_shape: tuple[float | None, float] = OLD_SHAPE,
                         with_sensitivity: bool = False, write_to=(), source: str = "") -> ShapeReport:
    """Fit every variant on the curves of `curves_path`, pick the lowest-BIC shaped one, tabulate
    tau(k) under it and `old_shape` for each (label, tau at k = 3) of `examples`; with
    `with_sensitivity` refit leaving out one source at a time (needs an example); write the chosen
    shape into each scenario file of `write_to`, commented with `source` (write_scenarios)."""
    path = Path(curves_path)
    curves = load_curves(path)
    fits, best = fit_all(curves)
    report = ShapeReport(path, curves, fits, best, tau_rows(best, examples, old_shape))
    if with_sensitivity:
        if not examples:
            raise SpecError("examples", examples, "at least one (label, tau) pair for the sensitivity refits")
        report.sensitivity = sensitivity(curves, best, examples[0][1])
    if write_to:
        report.written = write_scenarios(best, write_to, source)
    return report


__all__ = [
    "C_MAX",
    "D_BOUNDS",
    "LOG_C_BOUNDS",
    "METRICS",
    "OLD_SHAPE",
    "Curve",
    "Fit",
    "LeaveOneOut",
    "ShapeReport",
    "TauRow",
    "evaluate",
    "fit_acceptance_shape",
    "fit_all",
    "fit_mean",
    "fit_shape",
    "load_curves",
    "sensitivity",
    "tau_rows",
    "tau_table",
    "write_scenarios",
]
