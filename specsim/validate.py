"""Validation: published measurements vs what the simulator predicts for the same setup.

Each target file in calibration/targets/ names a source, a hardware profile and rows of
(scenario, overrides, metric, params, measured, tolerance, role). `validate` runs each row's
scenario with the hardware profile as calibrated — one parameter set per profile, nothing per
target — and reports measured, simulated, relative error and pass/fail. Published numbers are
only ever read here, as the `measured` column; the simulator never sees them.

Metrics (what is simulated for each):
  generation_speedup, e2e_speedup, generation_share  steady-state means of `compare(scenario)`
  ar_generation_s, sd_generation_s, ar_step_s, sd_step_s   baseline / variant steady means
  rollout_time_reduction, e2e_time_reduction   1 − SD/AR generation (step) time
  tau                     the drafter's mean acceptance length at RL step `params.step` and the
                          scenario's draft length (acceptance model, as engines measure it)
  engine_speedup_at_batch a fixed batch of `params.batch` sequences (prompt `params.prompt`,
                          default 128, response `params.tokens`, default 512) decoding to the
                          end on one engine: AR time / SD time with the scenario's SD policy
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specsim.errors import SpecError
from specsim.resolve import resolve
from specsim.scenario import ScenarioError, load_scenario
from specsim.sim.cluster import engine_config
from specsim.sim.common import EngineWork
from specsim.sim.engine import run_fast
from specsim.comparison import compare
from specsim.speculation import SDPolicy

METRICS = ("generation_speedup", "e2e_speedup", "generation_share", "ar_generation_s", "sd_generation_s",
           "ar_step_s", "sd_step_s", "tau", "engine_speedup_at_batch", "rollout_time_reduction",
           "e2e_time_reduction")
DEFAULT_TARGET_DIR = Path("calibration/targets")


@dataclass(frozen=True)
class Target:
    id: str
    file: str
    source: str
    hardware: str
    scenario: str
    overrides: dict
    metric: str
    params: dict
    measured: float
    tolerance: float
    role: str


@dataclass(frozen=True)
class ValidationRow:
    target: Target
    simulated: float

    @property
    def error(self) -> float:
        return (self.simulated - self.target.measured) / self.target.measured

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.simulated)) and abs(self.error) <= self.target.tolerance

    def as_dict(self) -> dict[str, Any]:
        t = self.target
        return {"target": t.id, "metric": t.metric, "params": yaml.safe_dump(t.params, default_flow_style=True).strip()
                if t.params else "", "hardware": t.hardware, "role": t.role, "measured": t.measured,
                "simulated": round(self.simulated, 4), "error_pct": round(100 * self.error, 2),
                "tolerance_pct": round(100 * t.tolerance, 1), "result": "pass" if self.passed else "FAIL",
                "source": t.source, "file": t.file}


def load_targets(paths: list[str] | None = None) -> list[Target]:
    """Read target files (default: every calibration/targets/*.yaml)."""
    files = [Path(p) for p in paths] if paths else sorted(DEFAULT_TARGET_DIR.glob("*.yaml"))
    if not files:
        raise SpecError("targets", str(DEFAULT_TARGET_DIR), "a folder or list of target YAML files")
    out: list[Target] = []
    for f in files:
        if not f.is_file():
            raise SpecError("targets", str(f), "an existing target YAML file")
        try:
            doc = yaml.safe_load(f.read_text())
        except yaml.YAMLError:
            raise SpecError("(file)", str(f), "valid YAML", str(f)) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
            raise SpecError("targets", type(doc).__name__, "a mapping with a `targets:` list", str(f))
        for i, row in enumerate(doc["targets"]):
            where = f"targets[{i}]"
            if not isinstance(row, dict):
                raise SpecError(where, row, "a mapping", str(f))
            metric = row.get("metric")
            if metric not in METRICS:
                raise SpecError(f"{where}.metric", metric, f"one of {list(METRICS)}", str(f))
            measured = row.get("measured")
            if isinstance(measured, bool) or not isinstance(measured, (int, float)) or measured == 0:
                raise SpecError(f"{where}.measured", measured, "a non-zero number", str(f))
            tol = row.get("tolerance", 0.10)
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol <= 0:
                raise SpecError(f"{where}.tolerance", tol, "a relative tolerance > 0", str(f))
            out.append(Target(str(row.get("id", f"{f.stem}[{i}]")), str(f), str(row.get("source", doc.get("source", ""))),
                              str(doc.get("hardware", "")), str(row.get("scenario", "")), dict(row.get("overrides") or {}),
                              metric, dict(row.get("params") or {}), float(measured), float(tol),
                              str(row.get("role", "held_out"))))
    return out


def _engine_speedup_at_batch(world, batch: int, prompt: int, tokens: int) -> float:
    """AR time / SD time for a fixed batch decoding to the end on one engine (CRN: same work)."""
    alpha = float(world.acceptance.alpha_at_version(0))
    n = int(batch)
    work = EngineWork(np.arange(n), np.arange(n), np.full(n, prompt, dtype=np.int64),
                      np.full(n, tokens, dtype=np.int64), np.full(n, alpha))
    sd_pol = world.policy
    ar = run_fast(engine_config(world, "ar", alpha, SDPolicy("off"), record_timeline=False),
                  work, np.random.default_rng(0)).rollout_s
    sd = run_fast(engine_config(world, "sd", alpha, sd_pol, record_timeline=False),
                  work, np.random.default_rng(0)).rollout_s
    return ar / sd


def simulate_target(t: Target, cache: dict) -> float:
    overrides = [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in t.overrides.items()]
    key = (t.scenario, tuple(overrides))
    if t.metric == "tau":
        sc = load_scenario(t.scenario, overrides)
        world = resolve(sc)
        step = int(t.params.get("step", 0))
        k = sc.speculation.k if sc.speculation.policy != "adaptive" else sc.speculation.k_max
        return float(world.acceptance.tau(k, step))
    if t.metric == "engine_speedup_at_batch":
        sc = load_scenario(t.scenario, overrides + [f"rollout.max_batch={int(t.params['batch'])}"])
        return _engine_speedup_at_batch(resolve(sc), int(t.params["batch"]), int(t.params.get("prompt", 128)),
                                        int(t.params.get("tokens", 512)))
    if key not in cache:
        cache[key] = compare(load_scenario(t.scenario, overrides))
    cmp = cache[key]
    b, v = cmp.baseline.steady(), cmp.variant.steady()
    return float({
        "generation_speedup": cmp.generation_speedup, "e2e_speedup": cmp.e2e_speedup,
        "generation_share": cmp.generation_share, "ar_generation_s": b["generation_s"],
        "sd_generation_s": v["generation_s"], "ar_step_s": b["step_s"], "sd_step_s": v["step_s"],
        "rollout_time_reduction": 1 - v["generation_s"] / b["generation_s"],
        "e2e_time_reduction": 1 - v["step_s"] / b["step_s"],
    }[t.metric])


def validate(paths: list[str] | None = None, tolerance: float | None = None) -> list[ValidationRow]:
    targets = load_targets(paths)
    cache: dict = {}
    rows = []
    for t in targets:
        if tolerance is not None:
            t = Target(**{**t.__dict__, "tolerance": tolerance})
        try:
            sim = simulate_target(t, cache)
        except ScenarioError as exc:
            raise ScenarioError(exc.file, exc.field, exc.value, f"{exc.allowed} (target {t.id} in {t.file})") from None
        rows.append(ValidationRow(t, sim))
    return rows
