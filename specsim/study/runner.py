"""Run a scenario's sweep end to end into a results folder (the library behind `specsim run`).

    run_scenario("scenarios/235b_async.yaml", ["speculation.k=[0,3]"], out="results/x", jobs=2)

The folder (default ``<output.dir>/<name>/``, so rerunning the same command resumes; `default_out`):

    resolved.yaml          the scenario after --set overrides (its hash guards resumes)
    inputs.json            content hashes of the inputs outside the scenario text (profile, catalog,
                           length files, specsim version): part of every run key
    runs/<key>.json        every pipeline run (points, baselines, sync AR, capacity sizes), durable
    points/<point_id>.json one finished point: its tidy row, its per-step records, the runs it used
    points.csv             one row per point × replicate, sorted by point order; stable columns
    points.parquet         the same, when pyarrow is importable
    steps.csv              every RL step of every point, with point_id
    runs.csv               the baseline / sync-AR / capacity runs the points were compared with
    timeline.csv           the rollout timeline the plots draw (see study/timeline.py)
    summary.json, summary.md   best k and lag, speedups with 95 % CIs, capacity plan, resolved scenario
    report.html            the summary, tables and plots on one page
    plots/*.png + *.csv    each plot next to the table it was drawn from

Parallelism: jobs > 1 runs a spawn-context process pool (capped at the CPUs; see study/executors.py),
so a *script* that calls run_scenario must guard its entry point (``if __name__ == "__main__":``),
as for any multiprocessing code; `python -c`, the CLI and notebooks need nothing. The pool starts
as soon as the scenario has loaded, so its workers import the simulation while this process plans
the study; this module therefore imports the report layer's plots, projection and page (matplotlib)
and, through the plan, the world layer (scipy) only where they are used, not when it is imported
(its tables need only pandas).
backend="ray" runs the same tasks on Ray (a private local instance, or `address=` a cluster whose
workers can import specsim).

Every file is written atomically (atomic.py). Resume: rerunning into the same folder
reuses every run already in runs/ (and every finished point) whose key — scenario and input
contents — still matches and whose file passes its schema (study/results_folder.py); anything else is
recomputed, with a warning in `RunSummary.warnings`. A different resolved scenario in an existing
folder is refused (ResultsConflict, exit 2) unless force=True, which discards the old runs
(only files specsim wrote).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd

import specsim
from specsim import atomic
from specsim.inputs import read_csv_frame
from specsim.scenario import (
    MAX_SWEEP_ROWS,
    Scenario,
    ScenarioError,
    ignored_fields,
    load_scenario,
    source_file,
    to_yaml,
)
from specsim.study import results_folder as results_dir
from specsim.study.capacity import capacity_plan, capacity_sizes
from specsim.study.executors import WorkerPool, check_backend, worker_pool
from specsim.study.plan import StudyPlan, plan_study, work_problem
from specsim.study.report import html, plots, projection, tables
from specsim.study.report.progress import Progress
from specsim.study.report.summary import summary_dict, summary_markdown, yaml_value
from specsim.study.results_folder import ResultsConflict, sha
from specsim.study.store import ResultsFolder, RunFailed, open_results
from specsim.study.sweep import (
    RunTask,
    SweepPoint,
    baseline_of,
    inputs_fingerprint,
    k_of,
    point_row,
    replicates,
    row_columns,
    step_rows,
    swept_paths,
)
from specsim.study.timeline import write_timeline

__all__ = ["ResultsConflict", "RunSummary", "capacity_sizes", "check_points", "run_scenario", "show_scenario",
           "specsim_version", "write_summary"]


@dataclass
class RunSummary:
    """What `run_scenario` did and found. `summary` is summary.json's content."""

    out_dir: Path
    scenario: str
    rows: int
    combinations: int
    replicates: int
    computed_runs: int
    reused_runs: int
    wall_s: float
    best: dict
    summary: dict
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def points(self):
        """points.csv as a pandas DataFrame."""
        return read_csv_frame(Path(self.out_dir) / "points.csv", "points.csv", "points table")

    def steps(self):
        """steps.csv as a pandas DataFrame."""
        return read_csv_frame(Path(self.out_dir) / "steps.csv", "steps.csv", "steps table")

    def to_dict(self) -> dict:
        return {"out_dir": str(self.out_dir), "scenario": self.scenario, "rows": self.rows,
                "combinations": self.combinations, "replicates": self.replicates,
                "computed_runs": self.computed_runs, "reused_runs": self.reused_runs, "wall_s": self.wall_s,
                "best": self.best, "files": self.files, "warnings": self.warnings}


def write_summary(out_dir: str | Path, summary: dict) -> None:
    """summary.json, summary.md (with the inverse answers) and report.html of a results folder
    from its summary dict; called again when a higher layer adds to the summary (the explain
    layer's ladder, specsim/explain/in_run.py)."""

    out_dir = Path(out_dir)
    atomic.write_json(out_dir / "summary.json", summary)
    atomic.write_text(out_dir / "summary.md", summary_markdown(summary)
                      + projection.inverse_markdown(summary.get("inverse") or {}))
    html.write_report(out_dir)


def specsim_version() -> str:
    v = getattr(specsim, "__version__", None)
    if v:
        return str(v)
    try:
        return version("specsim")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def check_points(sc: Scenario) -> dict:
    """What `run` checks before simulating, for `specsim check`: every sweep point and its baseline
    resolves (fits its GPUs). Raises ScenarioError naming `sweep`; returns the counts."""
    plan = plan_study(sc)
    _refuse_too_much(sc, plan)
    return {"rows": len(plan.points), "combinations": len({p.index for p in plan.points}), "runs": len(plan.tasks),
            "max_rows": MAX_SWEEP_ROWS, "work": plan.work(),
            "warnings": [f"{_where(values)}: {text}" for values, text in plan.notes if values] + ignored_fields(sc)}


def _refuse_too_much(sc: Scenario, plan) -> None:
    """The cost estimate's bound (output.max_simulated_tokens), before anything runs."""
    problem = work_problem(plan)
    if problem:
        raise ScenarioError(source_file(sc), "output.max_simulated_tokens", sc.output.max_simulated_tokens, problem)


def _where(values: dict) -> str:
    """A sweep point named by its swept values (the scenario itself when nothing is swept)."""

    return ", ".join(f"{k}={yaml_value(v)}" for k, v in values.items()) or "the scenario"


def show_scenario(path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """The resolved scenario and the points its sweep will run (nothing is simulated)."""
    sc = load_scenario(path, list(overrides))
    plan = plan_study(sc)
    base = baseline_of(sc)
    return {
        "scenario": sc.name, "file": str(path), "model": sc.model, "hardware": sc.hardware_label,
        "resolved": sc.model_dump(mode="json"), "resolved_sha256": sha(to_yaml(sc)),
        "swept": {p: sc.sweep[p] for p in swept_paths(sc)}, "zip": sc.sweep.get("zip", []),
        "replicates": replicates(sc), "combinations": len({p.index for p in plan.points}),
        "rows": len(plan.points), "max_rows": MAX_SWEEP_ROWS,
        "baseline": {"overrides": dict(sc.pipeline.baseline), "mode": base.pipeline.mode,
                     "sync_ar_is_baseline": plan.sync_ar_is_baseline},
        "runs": len(plan.tasks),
        "points": [{**p.as_dict(), "k": k_of(plan.point_scenarios[p.index]),
                    "mode": plan.point_scenarios[p.index].pipeline.mode} for p in plan.points],
    }


def default_out(sc: Scenario) -> Path:
    """<output.dir>/<name>/: one folder per scenario, so rerunning the same command resumes (and
    finds every finished run); the name is one plain path component (the schema says so), so the
    folder is always inside output.dir. `--fresh` recomputes it from scratch."""
    return Path(sc.output.dir) / sc.name


# ============================================================================ the run
def run_scenario(path: str | Path, overrides: Sequence[str] = (), out: str | Path | None = None, jobs: int = 2,
                 backend: str = "local", address: str | None = None, progress: bool = True, force: bool = False,
                 *, engine: str = "fast", plots: bool | None = None, fresh: bool = False,
                 then: Callable[[ResultsFolder, dict], None] | None = None) -> RunSummary:
    """Load, expand the sweep, run every point (and its baselines, once), write the results folder.
    `then(folder, summary)`: more work under the folder's lock before the summary is written once
    (store.ResultsFolder; explain/in_run.py adds the best point's ladder)."""

    t0 = time.perf_counter()
    sc = load_scenario(path, list(overrides))
    workers = check_backend(backend, jobs, address)   # clear errors before anything is written
    warnings: list[str] = []
    if workers < jobs and backend == "local":
        warnings.append(f"--jobs {jobs} capped at {workers}: this process may use {workers} CPU(s)")
    out_dir = out if out is not None else default_out(sc)
    results_dir.check_out(out_dir, force)   # a refused --out before the pool starts
    # one pool for the sweep and the capacity plan, started now: its workers import the simulation
    # while this process plans the study (executors.WorkerPool)
    with worker_pool(workers, backend, address, reports=progress) as pool:
        plan = plan_study(sc, engine)
        _refuse_too_much(sc, plan)
        warnings += [f"{_where(values)}: {text}" for values, text in plan.notes] + ignored_fields(sc)
        resolved_text = to_yaml(sc)
        with open_results(out_dir, force=force, fresh=fresh,
                          resolved_text=resolved_text, inputs=inputs_fingerprint(sc), warnings=warnings) as folder:
            return _run_locked(RunContext(sc, plan, folder, resolved_text, RunOptions(workers, backend, address, engine),
                                          t0, progress=progress, plots=plots, overrides=tuple(overrides), pool=pool,
                                          then=then))


@dataclass(frozen=True)
class RunOptions:
    """Where and how the runs execute: workers, backend ("local" | "ray"), Ray address, engine."""

    workers: int
    backend: str = "local"
    address: str | None = None
    engine: str = "fast"


@dataclass(frozen=True)
class RunContext:
    """One `specsim run` inside its locked results folder (store.open_results): the scenario, its
    study plan and resolved text, how the runs execute (`opts`, `pool`: the workers, let go once the
    runs are done), whether to show progress and draw plots (None: the scenario's output.plots),
    the --set overrides (for the summary's explain command), when the command started (`t0`,
    perf_counter: the summary's wall_s) and `then(folder, summary)`, called still under the lock
    before the summary is written (it may add to it: explain/in_run.py's ladder)."""

    sc: Scenario
    plan: StudyPlan
    folder: ResultsFolder
    resolved_text: str
    opts: RunOptions
    t0: float
    progress: bool = True
    plots: bool | None = None
    overrides: tuple[str, ...] = ()
    pool: WorkerPool | None = None
    then: Callable[[ResultsFolder, dict], None] | None = None


class _FinishedPoints:
    """The sweep points finished so far, by point id: each one's record (tidy row, per-step rows,
    the runs it used) as points/<id>.json holds it. It starts from the records on disk whose runs
    are all still valid (a point stands only on runs that are on disk: one whose run is recomputed
    is too) and grows as runs finish (`finalize`)."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.dir = ctx.folder.path / "points"
        self.cols = row_columns(swept_paths(ctx.sc))
        runs = ctx.folder.store.runs
        loaded = results_dir.load_points(self.dir, ctx.plan.runs_of, self.cols, ctx.folder.warnings)
        self.done = {pid: rec for pid, rec in loaded.items() if all(k in runs for k in ctx.plan.runs_of[pid].keys)}
        self._order = {p.point_id: i for i, p in enumerate(ctx.plan.points)}

    def finalize(self, p: SweepPoint) -> bool:
        """Write point p's record once its run, baseline and sync-AR run are in (and neither of the
        first two failed); True when it was written now."""
        if p.point_id in self.done:
            return False
        plan, runs = self.ctx.plan, self.ctx.folder.store.runs
        pr = plan.runs_of[p.point_id]
        k_run, k_base, k_sync = pr.point, pr.baseline, pr.sync_ar
        if not all(k in runs for k in pr.keys) or "error" in runs[k_run] or "error" in runs[k_base]:
            return False
        sync = runs[k_sync] if "steady" in runs[k_sync] else None
        rec = {"point": p.as_dict(), "row": point_row(p, plan.point_scenarios[p.index], runs[k_run], runs[k_base], sync),
               "steps": step_rows(p, runs[k_run]), "runs": pr.as_dict()}
        atomic.write_json(self.dir / f"{p.point_id}.json", rec)
        self.done[p.point_id] = json.loads(json.dumps(rec, sort_keys=True))   # what a resume reads back
        return True

    def write_csv(self) -> None:
        """points.csv: the finished points' rows in sweep order."""
        tables.write_points_csv(self.ctx.folder.path / "points.csv",
                                [self.done[pid]["row"] for pid in sorted(self.done, key=self._order.__getitem__)],
                                self.cols)

    def rows(self) -> list[dict]:
        return [self.done[p.point_id]["row"] for p in self.ctx.plan.points]

    def steps(self) -> list[dict]:
        return [s for p in self.ctx.plan.points for s in self.done[p.point_id]["steps"]]


def _run_locked(ctx: RunContext) -> RunSummary:
    """The run, holding the results folder's lock: every point's runs (`_execute`), then the
    tables, plots and summary (with the inverse answers and how the run went) written from what
    the run persisted. The plots that need only the sweep are drawn on a second thread of this
    process while the capacity plan's runs execute (`_SweepFigures`); the block waits for it
    before it leaves, so nothing is written into the folder after its lock is released."""
    sc, plan, store, opts, out_dir = ctx.sc, ctx.plan, ctx.folder.store, ctx.opts, ctx.folder.path
    points = _FinishedPoints(ctx)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specsim-plots") as drawer:
        figures = _SweepFigures(ctx, drawer)
        analysis, cap_plan, files, frame = _execute(ctx, points, figures)
        if ctx.pool is not None:
            ctx.pool.release()
        computed, reused = store.computed, store.reused
        capacity = tables.capacity_table(cap_plan, store.runs)
        tables.write_runs_csv(out_dir / "runs.csv", plan, cap_plan, store.runs)
        files.append("runs.csv")
        plot_files = figures.finish(capacity, files)

    wall = time.perf_counter() - ctx.t0
    summary = summary_dict(sc, plan, analysis, capacity, resolved_text=ctx.resolved_text,
                           version=specsim_version(), plots=plot_files, overrides=ctx.overrides)
    summary["inverse"] = projection.inverse_answers(sc, frame)
    summary["run"] = {"wall_s": wall, "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                      "computed_runs": computed, "reused_runs": reused, "jobs": opts.workers, "backend": opts.backend,
                      "out_dir": str(out_dir), "warnings": ctx.folder.warnings, "inputs": ctx.folder.inputs}
    if ctx.then is not None:
        ctx.then(ctx.folder, summary)
    write_summary(out_dir, summary)
    files += ["summary.json", "summary.md", html.REPORT_FILE, "resolved.yaml", "inputs.json"]
    return RunSummary(out_dir, sc.name, len(points.rows()), len({p.index for p in plan.points}), replicates(sc),
                      computed, reused, wall, summary.get("best", {}), summary, files, ctx.folder.warnings)


def _execute(ctx: RunContext, points: _FinishedPoints,
             figures: _SweepFigures) -> tuple[dict, dict, list[str], pd.DataFrame]:
    """Run (or reuse) every task under one progress display: the baselines first (every point
    waits for its baseline), then the SD points, then the AR points, each point written as soon
    as its runs are in; the capacity plan's runs at several rollout sizes queued behind them as
    soon as its reference is known (`_CapacityPlan`); once every point is in, the point tables
    (`_write_point_tables`) and the sweep's figures started (`figures`) while the capacity runs
    still execute. Returns (analysis, capacity plan, files written, the points frame)."""
    sc, plan, store, opts = ctx.sc, ctx.plan, ctx.folder.store, ctx.opts
    prog = Progress(ctx.progress, len(plan.points))
    run_on = {"jobs": opts.workers, "backend": opts.backend, "address": opts.address, "pool": ctx.pool,
              "progress": prog}
    sweep = _SweepEnd(ctx, points, figures)
    capacity = _CapacityPlan(ctx, points)
    with prog:
        for w in ctx.folder.warnings:
            prog.warn(w)
        prog.points.advance(0)
        for p in plan.points:
            points.finalize(p)
        if points.done:
            points.write_csv()
        prog.set_points(len(points.done))
        sweep.if_done()                 # a resumed run whose points are all in
        tasks = sorted(plan.tasks.values(), key=_sweep_order(plan, capacity.sd_points))
        tasks += capacity.ready()       # a resumed run whose reference is already known

        def on_result(task: RunTask, result: dict) -> None:
            changed = False
            for p in plan.points:
                if task.key in plan.runs_of[p.point_id].keys:
                    changed |= points.finalize(p)
            if changed:
                points.write_csv()
                prog.set_points(len(points.done))
                sweep.if_done()

        try:
            store.results(tasks, must_run=lambda t: t.role in ("point", "baseline"), on_result=on_result,
                          follow_up=lambda task, result: capacity.ready(), **run_on)
        except RunFailed as exc:
            raise _failed(sc, plan, exc) from None
        missing = [p.label() for p in plan.points if p.point_id not in points.done]
        if missing:  # pragma: no cover - every task either finished or raised
            raise RuntimeError(f"points not finished: {missing}")
        analysis, files, frame = sweep.if_done()
        # the plan from the whole sweep: the same runs as those queued early unless the ranking
        # changed with the AR points (then the right ones run now)
        cap_plan = capacity_plan(sc, plan, analysis, opts.engine)
        store.results(_longest_first(cap_plan["tasks"].values()), **run_on)
    return analysis, cap_plan, files, frame


def _sweep_order(plan: StudyPlan, sd_points: list[SweepPoint]) -> Callable[[RunTask], int]:
    """A sweep task's place in the queue: 0 for the runs other points wait for (baselines and
    sync-AR runs: an AR point can be an SD point's baseline), 1 for the other SD points, 2 for
    the other AR points; sorted stably, so sweep order within each."""
    waited_for = {k for pr in plan.runs_of.values() for k in (pr.baseline, pr.sync_ar)}
    sd_runs = {plan.runs_of[p.point_id].point for p in sd_points}

    def place(task: RunTask) -> int:
        if task.role != "point" or task.key in waited_for:
            return 0
        return 1 if task.key in sd_runs else 2

    return place


def _longest_first(tasks) -> list[RunTask]:
    """Capacity runs, the smallest pools first: fewer engines, more events each, the longest runs
    (none ends last alone)."""
    return sorted(tasks, key=lambda t: (t.doc["rollout"].get("gpus") or 0))


class _SweepEnd:
    """What follows the sweep's last point, once: the analysis, the point tables and the sweep's
    figures started (on their thread, while the capacity runs execute)."""

    def __init__(self, ctx: RunContext, points: _FinishedPoints, figures: _SweepFigures):
        self.ctx, self.points, self.figures = ctx, points, figures
        self.result: tuple[dict, list[str], pd.DataFrame] | None = None

    def if_done(self) -> tuple[dict, list[str], pd.DataFrame] | None:
        """(analysis, files written, points frame) once every point is in; None before."""
        if self.result is None and len(self.points.done) == len(self.ctx.plan.points):
            analysis = tables.analyse(self.ctx.sc, self.points.rows(), self.points.cols)
            files, frame = _write_point_tables(self.ctx, self.points)
            self.figures.start(analysis, frame)
            self.result = (analysis, files, frame)
        return self.result


class _CapacityPlan:
    """The capacity plan's runs, queued as soon as their reference point is known: the best SD
    point (`capacity.capacity_plan`) is the best of the SD points alone, so once every SD point is
    in (the sweep runs them before its AR points) the plan's runs join the queue behind the AR
    points, and no worker waits at the end of the sweep for the last point. Without SD points the
    reference is the best point, known at the sweep's end. The ranking metric depends on every
    row (tables.analyse falls back to e2e_speedup when any row lacks the sync-AR ratio), so the
    plan is made again from the whole sweep afterwards (`_execute`): runs of a plan that turned
    out different are kept in runs/ and not used."""

    def __init__(self, ctx: RunContext, points: _FinishedPoints):
        self.ctx, self.points = ctx, points
        plan = ctx.plan
        self.sd_points = [p for p in plan.points if k_of(plan.point_scenarios[p.index]) > 0]
        self.queued = False

    def ready(self) -> list[RunTask]:
        """The plan's runs, longest first, the first time their reference is known; [] otherwise."""
        done = self.points.done
        reference = self.sd_points or self.ctx.plan.points
        if self.queued or not all(p.point_id in done for p in reference):
            return []
        self.queued = True
        rows = [done[p.point_id]["row"] for p in reference]
        analysis = tables.analyse(self.ctx.sc, rows, self.points.cols)
        if analysis["best"] is None:    # nothing ranks: the plan from the whole sweep says what it can
            return []
        return _longest_first(capacity_plan(self.ctx.sc, self.ctx.plan, analysis, self.ctx.opts.engine)["tasks"]
                              .values())


def _failed(sc: Scenario, plan: StudyPlan, exc: RunFailed) -> ScenarioError:
    """A point (or its baseline) that cannot run, named by its swept values."""
    task = exc.task
    bad = next(p for p in plan.points if task.key in (plan.runs_of[p.point_id].point, plan.runs_of[p.point_id].baseline))
    what = "a point that can run" if task.role == "point" else f"a point whose {task.role} can run"
    field, value = ("sweep", bad.label()) if bad.values else ("(scenario)", sc.name)
    return ScenarioError(source_file(sc), field, value, f"{what}: {exc.error}")


def _write_point_tables(ctx: RunContext, points: _FinishedPoints) -> tuple[list[str], pd.DataFrame]:
    """points.csv (+ points.parquet with pyarrow) and steps.csv, final once the sweep's runs are in;
    (files written, the points frame)."""
    out_dir = ctx.folder.path
    files: list[str] = []
    points.write_csv()
    files.append("points.csv")
    frame = tables.points_frame(points.rows(), points.cols)
    if atomic.write_parquet(out_dir / "points.parquet", frame) is not None:
        files.append("points.parquet")
    tables.write_steps_csv(out_dir / "steps.csv", points.steps())
    files.append("steps.csv")
    return files, frame


class _SweepFigures:
    """timeline.csv and every plot but the capacity plan's (plots.sweep_plots, projection's plots),
    drawn from what the sweep persisted on `drawer`'s thread while the capacity plan's runs execute
    in the workers; `finish` adds the capacity plan's plot once its runs are in. Drawing them after
    the runs kept one core busy alone for about 2.5 s at the end of the main job (6 figures) while
    this process otherwise only waits for results during the capacity runs. Nothing happens when
    plots are off (the scenario's output.plots, or --no-plots)."""

    def __init__(self, ctx: RunContext, drawer: ThreadPoolExecutor):
        self.ctx, self.drawer = ctx, drawer
        self.on = bool(ctx.sc.output.plots if ctx.plots is None else ctx.plots)
        self.folder = ctx.folder.path / "plots"
        self._drawn: Future | None = None

    def start(self, analysis: dict, frame: pd.DataFrame) -> None:
        if self.on:
            runs = dict(self.ctx.folder.store.runs)   # the sweep's runs: the store grows while this draws
            self._drawn = self.drawer.submit(self._draw, analysis, frame, runs)

    def _draw(self, analysis: dict, frame: pd.DataFrame, runs: dict) -> tuple[dict, dict, bool]:
        ctx = self.ctx
        timeline = write_timeline(ctx.folder.path, ctx.plan, analysis, runs, ctx.opts.engine)
        swept = plots.sweep_plots(self.folder, ctx.sc, ctx.plan, analysis, frame, runs, timeline)
        return swept, projection.projection_plots(self.folder, ctx.sc, frame), timeline is not None

    def finish(self, capacity: dict, files: list[str]) -> dict[str, str]:
        """Every plot's file by name (sweep plots, capacity plan, projection plots; {} when plots are
        off), once the sweep's figures are drawn; their files are added to `files`."""
        if self._drawn is None:
            return {}
        swept, projected, has_timeline = self._drawn.result()
        if has_timeline:
            files.append("timeline.csv")
        plot_files = dict(swept)
        path = plots.capacity_plan(self.folder / "capacity_plan", self.ctx.sc, capacity)
        if path:
            plot_files["capacity_plan"] = path
        plot_files.update(projected)  # scale / k x tau
        files += [f"plots/{Path(v).name}" for v in plot_files.values()]
        files += [f"plots/{Path(v).with_suffix('.csv').name}" for v in plot_files.values()]
        return plot_files
