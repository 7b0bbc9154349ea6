"""Fit a workload's unknowns and its trainer efficiencies to measured stage times.

The discipline (calibration/README.md): a target file's `fit:` block lists stages of free
parameters; each stage is fitted to the target rows whose role is `fit` and whose `pins` name one
of the stage's parameters, and to nothing else. Stages run in order, each starting from the
values the previous ones fitted (the 8B file: stage `workload_and_trainer` on the AR stage rows,
then stage `sd` — at most two SD-overhead parameters — on the EAGLE-3 k=3 SD generation rows).

A parameter is {name, path, scenarios, prior, bounds, log, fixed_sigma?}:
* `path` a scenario field (dotted). With `fixed_sigma` the field is a lognormal's `median` and the
  sibling `p99` moves with it, p99 = median·exp(z99·σ) (σ fixed, z99 = 2.3263).
* `path` `hardware.efficiency.<key>`: the value goes into a copy of the scenario's hardware
  profile, written to a temporary folder for the duration of the fit (reported, never written
  back: the profile belongs to the hardware calibration).
* `scenarios`: every scenario file the parameter applies to (one parameter shared by several
  scenarios is one unknown).

Residuals are ln(simulated / measured) per row (scale-free: a 5 % miss weighs the same on a
2 s and a 130 s stage). `scipy.optimize.least_squares` (trust-region reflective, bounded) from the
priors, forward differences with a relative step of 2 % (the simulator is deterministic under a
fixed seed but piecewise in the token counts, so tiny steps see noise). Reported per parameter:
fitted value, standard error from the Jacobian (s²·(JᵀJ)⁻¹, s the residual scale floored at a
1 % measurement noise), whether it sits at a bound; per
row: simulated, residual. A stage with more parameters than rows, or whose Jacobian has rank below
its parameter count (a direction no row constrains), is refused with the reason.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specsim import inputs
from specsim.atomic import dump_yaml
from specsim.catalog.hardware import load_hardware
from specsim.errors import SpecError, load_yaml_text
from specsim.scenario import load_scenario
from specsim.validate.run import Runs, Target, load_targets, simulate_target
from specsim.validate.targets import load_target_file, resolve_scenario_path

Z99 = 2.3263478740408408   # standard normal 99th percentile
MEASUREMENT_REL_NOISE = 0.01   # floor of the residual scale used for standard errors (see _fit_stage)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FitParameter(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    path: str = Field(min_length=1)
    scenarios: list[str] = Field(min_length=1)
    prior: float
    bounds: tuple[float, float]
    log: bool = False
    fixed_sigma: float | None = Field(default=None, gt=0, le=5)
    unit: str = ""

    @model_validator(mode="after")
    def _ok(self):
        lo, hi = self.bounds
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and lo <= self.prior <= hi):
            raise ValueError(f"bounds must be finite, lo < hi, and hold the prior {self.prior}")
        if self.log and lo <= 0:
            raise ValueError("log parameters need bounds > 0")
        if self.fixed_sigma is not None and not self.path.endswith(".median"):
            raise ValueError("fixed_sigma applies to a lognormal's `...median` field")
        if self.path.endswith(".sigma") and self.fixed_sigma is not None:
            raise ValueError("a sigma parameter takes no fixed_sigma")
        return self


class FitStage(_Strict):
    name: str
    parameters: list[FitParameter] = Field(default_factory=list)


class FitBlock(_Strict):
    stages: list[FitStage] = Field(min_length=1)


@dataclass
class StageResult:
    name: str
    params: list[FitParameter]
    values: dict[str, float]
    stderr: dict[str, float]
    at_bound: dict[str, bool]
    rows: list[dict[str, Any]]          # id, measured, prior simulated, fitted simulated, residuals
    rank: int
    nfev: int
    skipped: str = ""

    def summary_rows(self) -> list[dict[str, Any]]:
        out = []
        for p in self.params:
            v = self.values[p.name]
            out.append({"stage": self.name, "parameter": p.name, "path": p.path, "prior": p.prior, "fitted": v,
                        "stderr": self.stderr.get(p.name, float("nan")), "unit": p.unit,
                        "status": "AT BOUND" if self.at_bound.get(p.name) else "fitted"})
        return out


@dataclass
class FitResult:
    file: str
    stages: list[StageResult] = field(default_factory=list)

    def values(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.stages:
            out.update(s.values)
        return out


# ----------------------------------------------------------------------------- applying values
class Applier:
    """Turns parameter values into per-scenario overrides (and temporary hardware profiles)."""

    def __init__(self, params: list[FitParameter], target_file: Path, tmp: Path):
        self.params = params
        self.target_file = target_file
        self.tmp = tmp
        self._n = 0

    def _scen(self, s: str) -> str:
        return str(resolve_scenario_path(s, self.target_file))

    def overrides(self, values: dict[str, float]) -> dict[str, list[str]]:
        """scenario path -> override strings for the given parameter values."""
        out: dict[str, list[str]] = {}
        hw_changes: dict[str, dict[str, float]] = {}
        lognormal: dict[tuple[str, str], dict[str, float]] = {}   # (scenario, spec path) -> median, sigma
        for p in self.params:
            if p.name not in values:
                continue
            v = float(values[p.name])
            for s in map(self._scen, p.scenarios):
                if p.path.startswith("hardware."):
                    hw_changes.setdefault(s, {})[p.path.removeprefix("hardware.")] = v
                elif p.path.endswith((".median", ".sigma")):
                    spec = lognormal.setdefault((s, p.path.rsplit(".", 1)[0]), {})
                    spec[p.path.rsplit(".", 1)[1]] = v
                    if p.fixed_sigma is not None:
                        spec.setdefault("sigma", p.fixed_sigma)
                else:
                    out.setdefault(s, []).append(f"{p.path}={v!r}")
        for (s, spec_path), spec in lognormal.items():
            if set(spec) != {"median", "sigma"}:
                raise SpecError(f"fit parameter {spec_path}", sorted(spec),
                                "a lognormal fitted by its median with a sigma (a parameter or fixed_sigma)")
            med = spec["median"]
            out.setdefault(s, []).extend([f"{spec_path}.median={med!r}",
                                          f"{spec_path}.p99={med * math.exp(Z99 * spec['sigma'])!r}"])
        for s, changes in hw_changes.items():
            out.setdefault(s, []).append(f"hardware={self._profile_copy(s, changes)}")
        return out

    def _profile_copy(self, scenario: str, changes: dict[str, float]) -> str:
        """A copy of the scenario's hardware profile with `block.key` values replaced
        (`efficiency.<key>` must exist; an `sd_costs` or `trainer` key may be new: its prior is then
        replaced)."""

        hw = load_hardware(load_scenario(scenario).hardware)
        doc = load_yaml_text(inputs.read_text(hw.path, "hardware", "hardware profile YAML"))
        for dotted, v in changes.items():
            block, _, key = dotted.partition(".")
            if block not in ("efficiency", "sd_costs", "trainer") or not key:
                raise SpecError(f"fit parameter hardware.{dotted}", dotted,
                                "hardware.efficiency.<key>, hardware.sd_costs.<key> or hardware.trainer.<key>")
            section = doc.setdefault(block, {}) or {}
            doc[block] = section
            if block == "efficiency" and key not in section:
                raise SpecError(f"fit parameter hardware.{dotted}", key, f"an efficiency key of {hw.path} ({sorted(section)})")
            section[key] = {"value": v, "source": "specsim.calibrate.workload.fit fit in progress"}
        self._n += 1
        out = self.tmp / f"{hw.name}_fit{self._n}.yaml"
        out.write_text(dump_yaml(doc, sort_keys=False))
        load_hardware(str(out))   # a key the profile loader does not know fails here, naming it
        return str(out)


def _with_overrides(t: Target, extra: list[str]) -> Target:
    """The target with extra `path=value` overrides (later ones win)."""
    ov = dict(t.row.overrides)
    for text in extra:
        k, v = text.split("=", 1)
        ov[k] = yaml.safe_load(v)
    return Target(t.row.model_copy(update={"overrides": ov}), t.file, t.file_source, t.hardware,
                  t.scenario_path, t.tolerance)


def simulate_rows(targets: list[Target], overrides: dict[str, list[str]]) -> np.ndarray:
    runs = Runs()
    return np.array([simulate_target(_with_overrides(t, overrides.get(t.scenario_path, [])), runs)[0]
                     for t in targets])


# ----------------------------------------------------------------------------- the fit
def load_fit_block(path: Path) -> FitBlock:
    doc = load_target_file(path)
    if doc.fit is None:
        raise SpecError("fit", None, "a `fit:` block with stages of parameters", str(path))
    try:
        return FitBlock.model_validate(doc.fit)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = "fit." + ".".join(str(p) for p in e["loc"])
        raise SpecError(loc, e.get("input"), e["msg"].removeprefix("Value error, "), str(path)) from None


def _fit_stage(stage: FitStage, targets: list[Target], applier: Applier, fixed: dict[str, float],
               max_nfev: int) -> StageResult:
    from scipy.optimize import least_squares

    names = {p.name for p in stage.parameters}
    rows = [t for t in targets if t.role == "fit" and names & set(t.row.pins)]
    if not stage.parameters:
        return StageResult(stage.name, [], {}, {}, {}, [], 0, 0, skipped="no parameters in this stage")
    unpinned = sorted(names - {n for t in rows for n in t.row.pins})
    if unpinned:
        raise SpecError(f"fit.stages[{stage.name}]", unpinned, "parameters each pinned by at least one fit row")
    if len(rows) < len(stage.parameters):
        raise SpecError(f"fit.stages[{stage.name}]", f"{len(stage.parameters)} parameters, {len(rows)} rows",
                        "at least as many fit rows as parameters (an under-determined fit is refused)")
    ps = stage.parameters
    measured = np.array([t.measured for t in rows])

    def to_x(vals):
        return np.array([math.log(v) if p.log else v for p, v in zip(ps, vals)])

    def from_x(x):
        return {p.name: (math.exp(xi) if p.log else float(xi)) for p, xi in zip(ps, x)}

    lo = to_x([p.bounds[0] for p in ps])
    hi = to_x([p.bounds[1] for p in ps])
    x0 = to_x([p.prior for p in ps])

    def residuals(x):
        sim = simulate_rows(rows, applier.overrides({**fixed, **from_x(x)}))
        return np.log(np.maximum(sim, 1e-12) / measured)

    r0 = residuals(x0)
    sol = least_squares(residuals, x0, bounds=(lo, hi), method="trf", diff_step=0.02, max_nfev=max_nfev,
                        x_scale="jac")
    J = sol.jac
    rank = int(np.linalg.matrix_rank(J, tol=1e-6 * max(1.0, float(np.abs(J).max()))))
    dof = max(1, len(rows) - len(ps))
    # residual variance, floored at (1 %)²: published stage times are rounded to 0.1 s and vary
    # run to run; an exact fit (as many independent rows as parameters) would otherwise claim ±0
    s2 = max(float(sol.fun @ sol.fun) / dof, MEASUREMENT_REL_NOISE ** 2)
    try:
        cov = np.linalg.inv(J.T @ J) * s2
        se_x = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:
        se_x = np.full(len(ps), np.inf)
    values = from_x(sol.x)
    stderr = {p.name: float(values[p.name] * se if p.log else se) for p, se in zip(ps, se_x)}
    span = hi - lo
    at_bound = {p.name: bool(min(sol.x[i] - lo[i], hi[i] - sol.x[i]) < 1e-3 * span[i]) for i, p in enumerate(ps)}
    sim_fit = measured * np.exp(sol.fun)
    table = [{"target": t.id, "pins": ",".join(t.row.pins), "measured": t.measured,
              "prior_simulated": float(measured[i] * math.exp(r0[i])), "fitted_simulated": float(sim_fit[i]),
              "residual_pct": float(100 * (math.exp(sol.fun[i]) - 1))} for i, t in enumerate(rows)]
    res = StageResult(stage.name, ps, values, stderr, at_bound, table, rank, int(sol.nfev))
    if rank < len(ps):
        raise SpecError(f"fit.stages[{stage.name}]", f"Jacobian rank {rank} < {len(ps)} parameters",
                        "a parameterization every direction of which some fit row constrains "
                        "(fix a parameter at a documented prior)")
    return res


def fit_file(path: str | Path, *, max_nfev: int = 40) -> FitResult:
    """Run every stage of the target file's `fit:` block; returns the fitted values and reports."""
    p = Path(path)
    block = load_fit_block(p)
    targets = load_targets([str(p)])
    result = FitResult(str(p))
    fixed: dict[str, float] = {}
    all_params = [q for s in block.stages for q in s.parameters]
    with tempfile.TemporaryDirectory(prefix="specsim_fit_") as tmp:
        applier = Applier(all_params, p, Path(tmp))
        for stage in block.stages:
            r = _fit_stage(stage, targets, applier, fixed, max_nfev)
            fixed.update(r.values)
            result.stages.append(r)
    return result


__all__ = [
    "Z99",
    "FitBlock",
    "FitParameter",
    "FitResult",
    "FitStage",
    "StageResult",
    "fit_file",
    "load_fit_block",
]
