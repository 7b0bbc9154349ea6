"""Validation: published measurements vs what the simulator predicts for the same setup.

Target files (schema: specsim/validate/targets.py) name a source, a hardware profile and rows of
(scenario, overrides, metric, params, measured, tolerance, role). `validate` runs each row's
scenario as calibrated — one parameter set per profile and workload, nothing per target — and
reports measured, simulated, relative error and pass/fail. Published numbers are only ever read
here, as the `measured` column; the simulator never sees them.

Metrics (what is simulated for each):
  generation_speedup, e2e_speedup, generation_share   steady means of compare(scenario)
  rollout_time_reduction, e2e_time_reduction   1 − SD/AR generation (step) time
  stage_s {stage, run}     steady stage time of the AR baseline or SD variant; prepare = weight sync
  simulated_tau            the SD run's steady mean acceptance length (tokens ÷ verify steps)
  tau {step}               the acceptance model's τ at RL step `step` and the scenario's k
  engine_speedup_at_batch {batch, prompt, tokens}   one engine serving `batch` concurrent
                           sequences (continuous batching, the drafter's whole acceptance
                           population): AR time / SD time with the scenario's SD policy
  engine_tpot_s {batch, prompt, tokens, run}   the same engine run: decode time per output
                           token of a running sequence, (time − prefill passes) · batch / tokens
  exposed_generation_s {run}, effective_step_s {run}   async: generation the trainer waits for,
                           and the steady step period (`effective_step_s` from the pipeline when
                           it reports one, else the steady step_s — the same quantity)
  ordinal {quantity, slower, faster}   passes when `slower` simulates slower than `faster`

Every row simulated from pipeline runs also carries the standard error of its value, from the
spread of the run's steady steps (`_mean_se`; a ratio by the delta method over paired steps,
`_ratio_se`; an ordinal row the margin's): the scenarios' steady steps are the sample a published
mean over a training run is estimated from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from specsim.cost import training as tc
from specsim.errors import SpecError
from specsim.policy import Off, policy_class
from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.sim.cluster import engine_config, sequence_alphas
from specsim.sim.common import EngineWork
from specsim.sim.engine.loop import run_fast
from specsim.study.store import RunFailed, RunStore
from specsim.study.sweep import RunTask
from specsim.validate.targets import (
    METRICS,
    TargetRow,
    check_tolerance,
    load_target_file,
    resolve_scenario_path,
    target_files,
)
from specsim.world.resolve import resolve

__all__ = ["METRICS", "ErrorGroup", "Target", "ValidationRow", "error_summary", "load_targets",
           "simulate_target", "validate"]

STAGE_FIELD = {"data": "data_s", "generation": "generation_s", "logprob": "logprob_s", "training": "train_s",
               "prepare": "weight_sync_s", "step": "step_s"}


@dataclass(frozen=True)
class Target:
    """A target row with where it came from (file, the file's source and hardware)."""

    row: TargetRow
    file: str
    file_source: str
    hardware: str
    scenario_path: str
    tolerance: float
    gpu: str = ""      # the scenario's hardware profile and model, as it names them (error_summary's groups)
    model: str = ""

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def metric(self) -> str:
        return self.row.metric

    @property
    def role(self) -> str:
        return self.row.role

    @property
    def measured(self) -> float | None:
        return self.row.measured


@dataclass(frozen=True)
class ValidationRow:
    target: Target
    simulated: float
    slower_s: float | None = None    # ordinal rows: the two simulated values
    faster_s: float | None = None
    # standard error of the simulated value from the spread of its steady steps, relative to the
    # value (ordinal rows: of the margin, in its units); None where the metric is deterministic
    simulated_se: float | None = None

    @property
    def ordinal(self) -> bool:
        return self.target.metric == "ordinal"

    @property
    def error(self) -> float:
        if self.ordinal:
            return float("nan")
        return (self.simulated - self.target.measured) / self.target.measured

    @property
    def ordinal_margin(self) -> float:
        """How far an ordinal row's claim holds: slower_s / faster_s − 1 (> 0 holds, < 0 fails by
        that share of the `faster` arm's time); NaN for other rows."""
        if not self.ordinal:
            return float("nan")
        return self.slower_s / self.faster_s - 1.0

    @property
    def passed(self) -> bool:
        if self.ordinal:
            return bool(np.isfinite(self.slower_s) and np.isfinite(self.faster_s) and self.slower_s > self.faster_s)
        return bool(np.isfinite(self.simulated)) and abs(self.error) <= self.target.tolerance

    def as_dict(self) -> dict[str, Any]:
        """Full-precision values (JSON/CSV); `params` stays an object."""
        t = self.target
        d: dict[str, Any] = {"target": t.id, "metric": t.metric, "params": dict(t.row.params), "hardware": t.hardware,
                             "role": t.role, "pins": list(t.row.pins), "measured": t.measured}
        if self.ordinal:
            p = t.row.params
            d.update(simulated=f"slower {self.slower_s:.4g} s vs faster {self.faster_s:.4g} s "
                               f"(margin {100 * self.ordinal_margin:+.1f} %)",
                     simulated_slower_s=self.slower_s, simulated_faster_s=self.faster_s,
                     ordinal_margin_pct=100 * self.ordinal_margin,
                     error_pct=None, tolerance_pct=None,
                     measured=f"{p['slower']['run']}{_ov(p['slower'])} > {p['faster']['run']}{_ov(p['faster'])}")
        else:
            d.update(simulated=self.simulated, error_pct=100 * self.error, tolerance_pct=100 * t.tolerance)
        d.update(simulated_se_pct=None if self.simulated_se is None else 100 * self.simulated_se,
                 result="pass" if self.passed else "FAIL", source=t.row.source, file=t.file)
        return d

    def display(self) -> dict[str, str]:
        """The same row rounded for a table."""
        d = self.as_dict()
        out = {k: "–" if v is None else str(v) for k, v in d.items()}
        out["params"] = yaml.safe_dump(d["params"], default_flow_style=True, width=10**6).strip() \
            if d["params"] and not self.ordinal else ""   # an ordinal row's claim is in `measured`
        if not self.ordinal:
            out.update(simulated=f"{self.simulated:.4g}", error_pct=f"{100 * self.error:+.1f}",
                       tolerance_pct=f"{100 * self.target.tolerance:.1f}")
        if self.simulated_se is not None:
            out["simulated_se_pct"] = f"{100 * self.simulated_se:.1f}" if np.isfinite(self.simulated_se) else "n/a"
        return out


def _ov(arm: dict) -> str:
    ov = arm.get("overrides") or {}
    return "(" + ", ".join(f"{k}={v}" for k, v in ov.items()) + ")" if ov else ""


def load_targets(paths: list[str] | None = None, calibration: str | Path | None = None) -> list[Target]:
    """Read target files (default: the calibration folder's targets/*.yaml, targets.target_files);
    ids must be unique."""
    out: list[Target] = []
    seen: dict[str, str] = {}
    for f in target_files(paths, calibration):
        doc = load_target_file(f)
        for i, row in enumerate(doc.targets):
            if row.id in seen:
                raise SpecError(f"targets[{i}].id", row.id, f"unique (also in {seen[row.id]})", str(f))
            seen[row.id] = str(f)
            scen = resolve_scenario_path(row.scenario, f)
            sc = load_scenario(str(scen))
            out.append(Target(row, str(f), doc.source, doc.hardware, str(scen), row.tol, sc.hardware, sc.model))
    return out


# ----------------------------------------------------------------------------- simulation
def _overrides(d: dict) -> list[str]:
    """A target's dotted overrides as `--set` texts, after `sweep={}`: a target simulates the
    scenario itself, never its sweep, and `load_scenario` refuses a `--set` on a swept field."""
    return ["sweep={}"] + [f"{k}={yaml.safe_dump(v, default_flow_style=True, width=10**6).strip().removesuffix(chr(10) + '...')}"
            for k, v in d.items()]


#: sequences the engine-speedup metric serves at any batch size: the batch is refilled as
#: sequences finish (continuous batching) until this many are done, so a small batch still sees the
#: drafter's whole acceptance population
ENGINE_SPEEDUP_SEQUENCES = 256


def fixed_batch_runs(world, batch: int, prompt: int, tokens: int):
    """(AR, SD) EngineResults of one engine serving `batch` concurrent sequences (prompt `prompt`,
    response `tokens`) with continuous batching until max(batch, ENGINE_SPEEDUP_SEQUENCES) are done.
    The sequences' acceptance rates are the scenario's heterogeneity (Beta around the mean α) at
    evenly spaced quantiles, in a fixed shuffled order, so the SD run's ratio-of-sums τ is the
    configured τ (1 / E[1 / τ(α_i)] over equal-length sequences, DrafterAcceptance.tau); one batch
    at the mean α would report the τ of the mean α instead (about 2 % more at τ = 2.8). Both runs
    decode the same sequences (common random numbers)."""
    n = max(int(batch), ENGINE_SPEEDUP_SEQUENCES)
    mean_alpha = float(world.acceptance.alpha_at_version(0))
    u = np.random.default_rng(0).permutation((np.arange(n) + 0.5) / n)
    alphas = sequence_alphas(mean_alpha, world.acceptance.concentration, u)
    work = EngineWork(np.arange(n), np.arange(n), np.full(n, prompt, dtype=np.int64),
                      np.full(n, tokens, dtype=np.int64), alphas)
    ar = run_fast(engine_config(world, "ar", mean_alpha, Off(), record_timeline=False),
                  work, np.random.default_rng(0))
    sd = run_fast(engine_config(world, "sd", mean_alpha, world.policy, record_timeline=False),
                  work, np.random.default_rng(0))
    return ar, sd


def _tpot_s(res, batch: int) -> float:
    """Decode time per output token of a running sequence: (rollout − prefill passes) · batch /
    tokens (each step emits about `batch` sequences' tokens; exact at batch 1)."""
    return (res.rollout_s - res.prefill_s) * batch / res.total_tokens


class Runs:
    """Steady pipeline results of the targets' scenarios, each simulated once (study/store.RunStore,
    in memory, keyed by run key: two rows on the same scenario share its run): the steady means and
    the steady steps' records (for the standard error of each mean). A scenario that cannot run is
    a ScenarioError naming it (validate adds the target)."""

    def __init__(self, store: RunStore | None = None):
        self.store = store if store is not None else RunStore()
        self._tasks: dict[tuple, tuple[RunTask, str]] = {}    # (scenario, overrides, run) -> its task, once loaded

    def _result(self, scenario: str, overrides: list[str], run: str) -> tuple[dict, pd.DataFrame]:
        at = (scenario, tuple(overrides), run)
        if at not in self._tasks:
            sc = load_scenario(scenario, overrides)
            if run == "ar":   # the scenario's own baseline overrides (default: speculation.policy=off)
                sc = apply_overrides(sc, dict(sc.pipeline.baseline))
            self._tasks[at] = (RunTask.of(sc, 0, f"validate_{run}"), sc.name)
        task, name = self._tasks[at]
        try:
            res = self.store.results([task], must_run=True)[task.key]
        except RunFailed as exc:
            raise ScenarioError(scenario, "(scenario)", " ".join(overrides) or name,
                                f"a scenario that can run ({run} run: {exc.error})") from None
        frame = pd.DataFrame(res["steps"])
        return res["steady"], frame[frame["step"] >= res["meta"]["warmup_steps"]].reset_index(drop=True)

    def steady(self, scenario: str, overrides: list[str], run: str) -> dict[str, float]:
        return self._result(scenario, overrides, run)[0]

    def steps(self, scenario: str, overrides: list[str], run: str, column: str) -> np.ndarray:
        """The steady steps' values of one StepRecord column."""
        return self._result(scenario, overrides, run)[1][column].to_numpy(float)


def _mean_se(x: np.ndarray) -> float | None:
    """Relative standard error of the mean of steady per-step values (None with fewer than 2
    steps, NaN when the mean is 0). Sync steps are independent draws; async steps overlap, so
    there it understates the error."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return None
    m = x.mean()
    return float(x.std(ddof=1) / np.sqrt(len(x)) / abs(m)) if m != 0 else float("nan")


def _ratio_se(a: np.ndarray, b: np.ndarray) -> float | None:
    """Relative standard error of mean(a) / mean(b) over paired steps (common random numbers: step
    i of both runs drew the same responses), by the delta method:
    (se/R)² = (s_a² / ā² + s_b² / b̄² − 2 s_ab / (ā b̄)) / n."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n = min(len(a), len(b))
    if n < 2:
        return None
    a, b = a[:n], b[:n]
    ma, mb = a.mean(), b.mean()
    if ma == 0 or mb == 0:
        return float("nan")
    c = np.cov(a, b, ddof=1)
    v = (c[0, 0] / ma**2 + c[1, 1] / mb**2 - 2 * c[0, 1] / (ma * mb)) / n
    return float(np.sqrt(max(v, 0.0)))


def _effective_step(s: dict[str, float]) -> float:
    return s.get("effective_step_s", s["step_s"])


def refuse_what_if(t: Target) -> None:
    """A validation target must simulate a prediction: a scenario (with the row's overrides, each
    ordinal arm's, and the baseline's) that turns on any `what_if:` counterfactual is refused
    with a SpecError naming the target and the field."""
    row, scen = t.row, t.scenario_path
    ov = _overrides(row.overrides)
    arms = [ov]
    if row.metric == "ordinal":
        arms = [ov + _overrides(a.overrides) for a in (row.parsed_params.slower, row.parsed_params.faster)]
    for arm in arms:
        sc = load_scenario(scen, arm)
        for variant in (sc, apply_overrides(sc, dict(sc.pipeline.baseline))):
            if variant.what_ifs:
                raise SpecError(variant.what_ifs[0], True,
                                f"off in a validation target (a what-if is a counterfactual, never compared with a "
                                f"measurement; on: {', '.join(variant.what_ifs)})", t.file)


def simulate_target(t: Target, runs: Runs) -> tuple[float, float | None, float | None, float | None]:
    """(simulated value, slower_s, faster_s, simulated_se) of one target; slower_s and faster_s only
    for ordinal rows (whose se is the margin's); se None where the metric is deterministic.
    Refuses a target whose scenario runs a `what_if:` counterfactual (:func:`refuse_what_if`)."""
    refuse_what_if(t)
    row, scen = t.row, t.scenario_path
    ov = _overrides(row.overrides)
    p = row.parsed_params
    m = row.metric
    if m == "tau":
        sc = load_scenario(scen, ov)
        k = getattr(sc.speculation, policy_class(sc.speculation.policy).k_field)
        return float(resolve(sc).acceptance.tau(k, p.step)), None, None, None
    if m == "refit_s":
        w = resolve(load_scenario(scen, ov))
        return float(tc.refit_s(w.model, w.trainer_hw, w.layout, w.rollout.gpus, w.trainer.layout,
                                colocated=w.pipeline.mode == "sync", rollout_hw=w.hw)), None, None, None
    if m in ("engine_speedup_at_batch", "engine_tpot_s"):
        world = resolve(load_scenario(scen, ov + [f"rollout.max_batch={p.batch}"]))
        ar, sd = fixed_batch_runs(world, p.batch, p.prompt, p.tokens)
        if m == "engine_tpot_s":
            return _tpot_s(ar if p.run == "ar" else sd, p.batch), None, None, None
        return ar.rollout_s / sd.rollout_s, None, None, None
    if m == "ordinal":
        arms = [(ov + _overrides(a.overrides), a.run) for a in (p.slower, p.faster)]
        slow, fast = (runs.steady(scen, o, r)[p.quantity] for o, r in arms)
        se = _ratio_se(*(runs.steps(scen, o, r, p.quantity) for o, r in arms))
        return float("nan"), float(slow), float(fast), None if se is None else se * slow / fast
    b, v = runs.steady(scen, ov, "ar"), runs.steady(scen, ov, "sd")

    def col(run: str, name: str) -> np.ndarray:
        return runs.steps(scen, ov, run, name)

    if m in ("stage_s", "exposed_generation_s", "effective_step_s"):
        s = b if p.run == "ar" else v
        name = STAGE_FIELD[p.stage] if m == "stage_s" else "exposed_generation_s" if m == "exposed_generation_s" \
            else "step_s"
        value = float(s[name]) if m != "effective_step_s" else float(_effective_step(s))
        return value, None, None, _mean_se(col(p.run, name))
    value, (num, den), flip = {
        "generation_speedup": (b["generation_s"] / v["generation_s"], (("ar", "generation_s"), ("sd", "generation_s")), False),
        "e2e_speedup": (_effective_step(b) / _effective_step(v), (("ar", "step_s"), ("sd", "step_s")), False),
        "generation_share": (b["generation_s"] / b["step_s"], (("ar", "generation_s"), ("ar", "step_s")), False),
        "rollout_time_reduction": (1 - v["generation_s"] / b["generation_s"], (("sd", "generation_s"), ("ar", "generation_s")), True),
        "e2e_time_reduction": (1 - _effective_step(v) / _effective_step(b), (("sd", "step_s"), ("ar", "step_s")), True),
        "simulated_tau": (v["tau"], (("sd", "tau"), None), False),
    }[m]
    if den is None:
        return float(value), None, None, _mean_se(col(*num))
    se = _ratio_se(col(*num), col(*den))
    if se is not None and flip:   # 1 − R: the same absolute error, relative to the reduction
        r = 1.0 - value
        se = se * r / abs(value) if value != 0 else float("nan")
    return float(value), None, None, se


def validate(paths: list[str] | None = None, tolerance: float | None = None,
             only: list[str] | None = None, calibration: str | Path | None = None) -> list[ValidationRow]:
    """Simulate every target (or those whose id is in `only`); `tolerance` overrides every row's.
    No `paths`: the targets of the calibration folder (`calibration`, or found from the working directory)."""
    tol = check_tolerance(tolerance)
    targets = load_targets(paths, calibration)
    if only is not None:
        unknown = sorted(set(only) - {t.id for t in targets})
        if unknown:
            raise SpecError("--only", unknown, "ids of loaded targets")
        targets = [t for t in targets if t.id in set(only)]
    runs = Runs()
    rows = []
    for t in targets:
        if tol is not None and t.row.metric != "ordinal":
            t = replace(t, tolerance=tol)
        try:
            sim, slow, fast, se = simulate_target(t, runs)
        except ScenarioError as exc:
            raise ScenarioError(exc.file, exc.field, exc.value, f"{exc.allowed} (target {t.id} in {t.file})") from None
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, f"{exc.allowed} (target {t.id})", exc.where or t.file) from None
        rows.append(ValidationRow(t, sim, slow, fast, se))
    return rows


@dataclass(frozen=True)
class ErrorGroup:
    """The quantitative rows of one target file on one GPU and model (model `all`: the file's rows on
    that GPU; GPU and model `all`: the whole file), in the spirit of aiconfigurator's per-model error
    reports: rows, rows within tolerance, the predictions among them, and the median absolute and
    signed relative errors (fit rows included; `predictions_within` counts predictions alone)."""

    file: str
    gpu: str
    model: str
    rows: int
    within: int
    predictions: int
    predictions_within: int
    median_abs_error: float
    median_signed_error: float

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "gpu": self.gpu, "model": self.model, "rows": self.rows, "within": self.within,
                "predictions": self.predictions, "predictions_within": self.predictions_within,
                "median_abs_error_pct": 100 * self.median_abs_error,
                "median_signed_error_pct": 100 * self.median_signed_error}


def error_summary(rows: list[ValidationRow]) -> list[ErrorGroup]:
    """Per target file: one group per (GPU, model), one per GPU over its models, one for the file;
    ordinal rows (no error) are left out. Groups come in file order, then by GPU and model."""
    out: list[ErrorGroup] = []
    quant = [r for r in rows if not r.ordinal and np.isfinite(r.simulated)]
    files = list(dict.fromkeys(r.target.file for r in quant))
    for f in files:
        mine = [r for r in quant if r.target.file == f]
        keys = sorted({(r.target.gpu, r.target.model) for r in mine})
        gpus = sorted({g for g, _ in keys})
        wanted = [*keys, *((g, "all") for g in gpus if sum(1 for k in keys if k[0] == g) > 1), ("all", "all")]
        for gpu, model in wanted:
            grp = [r for r in mine if gpu in ("all", r.target.gpu) and model in ("all", r.target.model)]
            err = np.array([r.error for r in grp])
            pred = [r for r in grp if r.target.role == "prediction"]
            out.append(ErrorGroup(Path(f).name, gpu, model, len(grp), sum(r.passed for r in grp), len(pred),
                                  sum(r.passed for r in pred), float(np.median(np.abs(err))), float(np.median(err))))
    return out
