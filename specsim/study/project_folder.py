"""`specsim project`'s results folder: the whole run, step by step, with and without SD.

    project_scenario("scenarios/235b_run.yaml", ["workload.prompts=256"], out="results/x", replicates=3)

The folder (default ``<output.dir>/<name>-project/``; `default_project_out`), prepared, locked and
guarded exactly as `specsim run`'s (atomic.output_path, atomic.FolderLock, results_folder.prepare:
a folder holding another scenario's results or files specsim did not write is refused unless
``--force``; ``--fresh`` discards what is there):

    resolved.yaml, inputs.json   the scenario after --set, and its inputs' content hashes
    runs/<key>.json              each of the 2 × replicates pipeline runs, durable: a rerun reuses them
    steps.csv                    every RL step of every run (policy, replicate, the per-step metrics)
    per_step.csv                 per policy (AR, SD) and step: each metric's mean and 95 % interval
    plots/projection_steps.png   the per-step table over the run (+ .csv: what it was drawn from)
    summary.json, summary.md     the totals (project_run's dict), the warnings, a per-step digest
    report.html                  the summary, the plot and the per-step table on one page

The per-step metrics (:data:`STEP_METRICS`) are what a planner asks of a run: the step time, the
generation and trainer time inside it, the mean response length (tokens ÷ responses: lengths
grow over a run), the acceptance length τ, the share of the step the trainer waited for rollouts
(trainer idle: near 0 the trainer binds and a faster rollout saves nothing) and the dollars (or
GPU-hours without a price) of the step. Their intervals respect their domain (times, lengths
and dollars ≥ 0, the idle share in [0, 1]: tables.mean_ci).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from specsim import atomic
from specsim.scenario import Scenario, load_scenario, to_yaml
from specsim.study.executors import check_backend
from specsim.study.plan import refuse_over_bound, scenario_run_tokens
from specsim.study.projection import projection_totals, simulate_runs, variants
from specsim.study.report.progress import Progress
from specsim.study.report.projection_run import project_markdown, projection_steps_plot, write_project_report
from specsim.study.report.tables import few_replicates_warning, mean_ci
from specsim.study.runner import specsim_version
from specsim.study.store import ResultsFolder, open_results
from specsim.study.sweep import inputs_fingerprint
from specsim.world.resolve import check, weight_dtypes_of

__all__ = ["STEP_METRICS", "ProjectResult", "default_project_out", "per_step_table", "project_scenario",
           "step_frame"]

#: per-step metrics: column -> (label with unit, domain floor, domain ceiling)
STEP_METRICS = {
    "step_s": ("step time (s)", 0.0, None),
    "generation_s": ("generation (s)", 0.0, None),
    "trainer_s": ("trainer: reward + logprob + train + sync + drafter (s)", 0.0, None),
    "mean_response_tokens": ("mean response length (tokens)", 0.0, None),
    "tau": ("acceptance length τ", 0.0, None),
    "trainer_idle_share": ("trainer idle (share of the step)", 0.0, 1.0),
    "usd": ("$ per step", 0.0, None),
    "gpu_h": ("GPU-hours per step", 0.0, None),
}
KINDS = ("ar", "sd")


@dataclass(frozen=True)
class ProjectResult:
    """What `project_scenario` did and found: `projection` is project_run's dict (summary.json's
    "projection"), `warnings` what the reader must know (few replicates, reused runs...)."""

    out_dir: Path
    projection: dict
    computed_runs: int
    reused_runs: int
    wall_s: float
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"out_dir": str(self.out_dir), "computed_runs": self.computed_runs, "reused_runs": self.reused_runs,
                "wall_s": self.wall_s, "files": list(self.files), "warnings": list(self.warnings),
                **self.projection}


def default_project_out(sc: Scenario) -> Path:
    """<output.dir>/<name>-project/: beside `specsim run`'s <output.dir>/<name>/, never inside it."""
    return Path(sc.output.dir) / f"{sc.name}-project"


def step_frame(steps: list[dict], kind: str, replicate: int, gpus: int, responses: int,
               price: float | None) -> pd.DataFrame:
    """One run's step records (StepRecord fields) as the per-step metrics of STEP_METRICS."""
    df = pd.DataFrame(steps)
    trainer = df[["reward_s", "logprob_s", "train_s", "weight_sync_s", "drafter_update_s"]].sum(axis=1)
    gpu_h = df["step_s"] * gpus / 3600.0
    out = pd.DataFrame({
        "policy": kind.upper(), "replicate": replicate, "step": df["step"].astype(int),
        "step_s": df["step_s"], "generation_s": df["generation_s"], "trainer_s": trainer,
        "mean_response_tokens": df["tokens"] / responses, "tau": df["tau"],
        "trainer_idle_share": (df["exposed_generation_s"] / df["step_s"]).clip(0.0, 1.0),
        "gpu_h": gpu_h, "usd": gpu_h * price if price is not None else np.nan,
        "step_end_s": df["step_end_s"], "mean_policy_age": df["mean_policy_age"]})
    return out


def per_step_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per policy and step: each metric's mean and its 95 % t-interval over replicates
    (`<metric>`, `<metric>_lo`, `<metric>_hi`; NaN bounds with one replicate), and `replicates`."""
    rows = []
    for (policy, step), g in steps.groupby(["policy", "step"], sort=True):
        row = {"policy": policy, "step": int(step), "replicates": int(g["replicate"].nunique())}
        for col, (_, floor, ceiling) in STEP_METRICS.items():
            m = mean_ci(g[col].astype(float).tolist(), floor=floor, ceiling=ceiling)
            lo, hi = m["ci95"] or (np.nan, np.nan)
            row.update({col: np.nan if m["mean"] is None else m["mean"], f"{col}_lo": lo, f"{col}_hi": hi})
        rows.append(row)
    order = {k.upper(): i for i, k in enumerate(KINDS)}
    return pd.DataFrame(rows).sort_values(["policy", "step"], key=lambda s: s.map(order) if s.name == "policy"
                                          else s).reset_index(drop=True)


def project_scenario(path: str | Path, overrides: Sequence[str] = (), out: str | Path | None = None, *,
                     replicates: int = 2, jobs: int = 1, engine: str = "fast", force: bool = False,
                     fresh: bool = False, progress: bool = False) -> ProjectResult:
    """Project the scenario's whole run into a results folder (see the module doc); resumable.
    `progress`: a display on stderr (study/report/progress.py: paired replicates done, pipeline
    runs, the runs in flight), started once the folder is accepted, so a refused folder is one
    error and nothing else."""
    t0 = time.perf_counter()
    sc = load_scenario(path, list(overrides))
    workers = check_backend("local", jobs, None)
    # the cost bound before the folder: work refused costs nothing, and leaves no folder behind
    check(sc)
    refuse_over_bound(sc, 2 * replicates, scenario_run_tokens(sc), "this projection", "--replicates")
    with open_results(out if out is not None else default_project_out(sc), force=force, fresh=fresh,
                      resolved_text=to_yaml(sc), inputs=inputs_fingerprint(sc), what="projection") as folder:
        return _project_locked(sc, folder, replicates, workers, engine, progress, t0)


def _project_locked(sc: Scenario, folder: ResultsFolder, replicates: int, jobs: int, engine: str, progress: bool,
                    t0: float) -> ProjectResult:
    out_dir, warnings = folder.path, folder.warnings
    # points: paired replicates done; simulation runs: pipeline runs (SD and AR per replicate)
    with Progress(progress, replicates) as prog:
        prog.set_runs(2 * replicates)
        done: list[int] = []

        def on_run(r: int) -> None:
            prog.runs_done()
            done.append(r)
            prog.set_points(sum(done.count(x) == 2 for x in set(done)))   # runs end in any order

        results = simulate_runs(sc, replicates=replicates, engine=engine, jobs=jobs, on_run=on_run,
                                on_progress=prog.run_progress if prog.enabled else None, store=folder.store)
    computed, reused = folder.store.computed, folder.store.reused
    p = projection_totals(sc, results)
    price = p.get("gpu_hour_usd")
    responses = sc.workload.prompts * sc.workload.group_size
    frames = [step_frame(results[kind][r]["steps"], kind, r, variant.total_gpus, responses, price)
              for kind, variant in variants(sc).items() for r in range(replicates)]
    steps = pd.concat(frames, ignore_index=True)
    table = per_step_table(steps)
    files = ["steps.csv", "per_step.csv"]
    atomic.write_csv(out_dir / "steps.csv", steps)
    atomic.write_csv(out_dir / "per_step.csv", table)

    plot = projection_steps_plot(out_dir / "plots" / "projection_steps", sc, table, replicates)
    files += ["plots/projection_steps.png", "plots/projection_steps.csv"]
    few = few_replicates_warning(replicates)
    notes = ([few] if few else []) + warnings

    summary = {"scenario": sc.name, "description": sc.description, "model": sc.model, "hardware": sc.hardware_label,
               "seed": sc.seed, "specsim_version": specsim_version(), "projection": p,
               "rollout_weight_dtype": dataclasses.asdict(weight_dtypes_of(sc)),
               "warnings": notes, "plots": {"projection_steps": Path(plot).name},
               "run": {"wall_s": time.perf_counter() - t0, "computed_runs": computed, "reused_runs": reused,
                       "jobs": jobs, "backend": "local", "out_dir": str(out_dir),
                       "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}}
    atomic.write_json(out_dir / "summary.json", json.loads(json.dumps(summary, default=_plain)))
    atomic.write_text(out_dir / "summary.md", project_markdown(summary, table))
    write_project_report(out_dir)
    files += ["summary.json", "summary.md", "report.html", "resolved.yaml", "inputs.json"]
    return ProjectResult(out_dir, p, computed, reused, summary["run"]["wall_s"], tuple(files), tuple(notes))


def _plain(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    raise TypeError(type(v).__name__)
