"""`specsim plan`: find the configuration, not just score one.

    plan_scenario("scenarios/235b_plan.yaml", jobs=2)

reads the scenario's `plan:` section (budget, GPU types, constraints, objective), enumerates every
allowed configuration (`candidates.py`), prunes with analytic bounds on the step time
(`bounds.py`), simulates the survivors with successive halving (`search.py`) and reports the
best AR and SD configurations, SD's gain at each one's own optimum, the best of each GPU type,
the runner-ups, the best against the scenario's own configuration and the half-and-half split
(`baselines.py`) and the Pareto fronts with their intervals (`report.py`). Inverse questions — fewest GPUs for a step time, break-even τ, the k and lag
at which SD stops paying — are answered by bisection on simulations (`inverse.py`).

The results folder (default ``<output.dir>/<name>-plan/``):

    resolved.yaml            the scenario without its plan section (its hash guards reuse: a
                             widened or narrowed plan reuses every run of the same scenario)
    plan.yaml                the plan section as run (after --set / flags)
    inputs.json              the inputs' content hashes (part of every run key)
    runs/<key>.json          every simulated run, atomically; reused on rerun
    candidates.csv/.parquet  every candidate: status, bound, pruning reason, means and intervals
    fronts.csv, fronts.png   the AR and SD Pareto fronts (step time vs GPU-hours per step, intervals)
    summary.json, summary.md the answer, the search's cost, the inverse answers
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specsim import atomic, inputs
from specsim.atomic import dump_yaml
from specsim.scenario import ScenarioError, load_scenario, source_file, to_yaml
from specsim.scenario.plan_section import PlanSection, plan_hardware_names
from specsim.study.executors import check_backend, worker_pool
from specsim.study.plan import refuse_over_bound, scenario_run_tokens
from specsim.study.planner import inverse
from specsim.study.planner.baselines import against_baselines
from specsim.study.planner.bounds import BoundModel
from specsim.study.planner.candidates import enumerate_candidates, plan_hardware
from specsim.study.planner.report import answer, candidate_rows, fronts, plan_markdown, plot_fronts, write_tables
from specsim.study.planner.search import search
from specsim.study.report.html import plots_of, render_page, write_page
from specsim.study.report.progress import Progress
from specsim.study.report.tables import few_replicates_warning, jsonable
from specsim.study.runner import specsim_version
from specsim.study.store import open_results
from specsim.study.sweep import inputs_fingerprint

__all__ = ["PlanResult", "plan_scenario"]


@dataclass
class PlanResult:
    """What `plan_scenario` did and found; `summary` is summary.json's content."""

    out_dir: Path
    summary: dict
    files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def answer(self) -> dict:
        return self.summary["answer"]

    @property
    def search(self) -> dict:
        return self.summary["search"]

    def candidates(self):
        import pandas as pd

        return pd.read_csv(Path(self.out_dir) / "candidates.csv")


def _without_plan(sc):
    """The scenario the results folder is guarded by: without its plan and its prices (neither
    changes a run, so a widened plan or a new price reuses every run)."""

    return sc.model_copy(update={"plan": PlanSection(), "output": sc.output.model_copy(update={"gpu_hour_usd": {}})})


def plan_checks(sc) -> tuple[list, list, dict]:
    """What `plan` refuses before it simulates, for `plan` and for `check`: a rollout split asked
    of a sync scenario, a plan whose candidates cannot be enumerated, and the cost estimate over
    output.max_simulated_tokens. Returns the candidates, the layouts rejected and the estimate."""
    plan = sc.plan
    if sc.pipeline.mode == "sync" and plan.rollout_shares is not None:
        raise ScenarioError(None, "plan.rollout_shares", plan.rollout_shares,
                            "omitted for a sync (colocated) scenario: it has no rollout:training split")
    if plan.objective == "min_usd" or plan.max_usd_per_hour is not None:
        usd = sc.output.gpu_hour_usd

        missing = [h for h in plan_hardware_names(plan_hardware(sc, plan)) if h not in usd]
        if missing:
            what = "plan.objective min_usd" if plan.objective == "min_usd" else "plan.max_usd_per_hour"
            raise ScenarioError(source_file(sc), "output.gpu_hour_usd", dict(usd),
                                f"a price ($ per GPU-hour) for every GPU type of the plan: {what} needs one for "
                                f"{', '.join(missing)} (e.g. --set output.gpu_hour_usd.{missing[0]}=4.0)")
    cands, rejected = enumerate_candidates(sc, plan)
    estimate = refuse_over_bound(sc, len(cands) * plan.search.replicates, scenario_run_tokens(sc),
                                 "this plan, every candidate simulated at full replicates (an upper bound: pruning "
                                 "saves some)", "candidates: GPU budgets, hardware, k, lags or layouts")
    return cands, list(rejected), {**estimate, "candidates": len(cands)}


def plan_scenario(path: str | Path, overrides: Sequence[str] = (), out: str | Path | None = None, jobs: int = 2,
                  backend: str = "local", address: str | None = None, progress: bool = False, force: bool = False,
                  *, engine: str = "fast", min_gpus_for: float | None = None, break_even_tau: bool = False,
                  stops_paying: bool = False) -> PlanResult:
    """Run the plan of a scenario (see the module doc)."""
    t0 = time.perf_counter()
    cpu0 = _cpu_s()
    sc = load_scenario(path, list(overrides))
    workers = check_backend(backend, jobs, address)
    plan = sc.plan

    warnings: list[str] = [w for w in [few_replicates_warning(plan.search.replicates)] if w]
    if min_gpus_for is not None and not (math.isfinite(min_gpus_for) and min_gpus_for > 0):
        raise ScenarioError(None, "--min-gpus-for", min_gpus_for, "a target step time > 0 s")
    cands, rejected, _ = plan_checks(sc)
    out_dir = out if out is not None else Path(sc.output.dir) / f"{sc.name}-plan"
    inputs = inputs_fingerprint(sc)
    # resolved, marked, locked, guarded by the scenario without its plan, inputs stamped (study/store.py)
    with open_results(out_dir, force=force, resolved_text=to_yaml(_without_plan(sc)), inputs=inputs, what="plan",
                      warnings=warnings) as folder:
        out_dir, store = folder.path, folder.store
        atomic.write_text(out_dir / "plan.yaml", dump_yaml(plan.model_dump(mode="json"), sort_keys=False))
        bounds = BoundModel(sc)

        # one worker pool for every wave, round, baseline and probe of the plan (starting one per
        # wave cost 14 % of a 256 x 16 plan's CPU)
        with Progress(progress, 0) as prog, worker_pool(workers, backend, address, reports=prog.enabled) as pool:
            state = search(sc, cands, store, jobs=workers, backend=backend,
                           address=address, engine=engine, progress=prog, bounds=bounds, pool=pool)
            evs = state.evaluated
            reps = plan.search.replicates
            usd = dict(sc.output.gpu_hour_usd)
            ans = answer(evs, plan, reps, usd)
            fr = fronts(evs, usd, reps)
            queries = []

            layouts: dict[str, list] = {}
            for c in cands:
                if c.layout not in layouts.setdefault(c.hardware, []):
                    layouts[c.hardware].append(c.layout)
            ctx = inverse.Context(sc, store, workers, backend, address, engine,
                                  reps, layouts=layouts, bounds=bounds, progress=prog, pool=pool)
            against = against_baselines(ctx, ans)
            if min_gpus_for is not None:
                queries += inverse.min_gpus_for(ctx, ans, min_gpus_for)
            if break_even_tau:
                queries += inverse.break_even_tau(ctx, ans)
            if stops_paying:
                queries += inverse.stops_paying(ctx, ans)
            state.computed_runs += ctx.computed
            state.reused_runs += ctx.reused
            inverse_runs = {"computed": ctx.computed, "reused": ctx.reused}
        wall = time.perf_counter() - t0
        cpu = _cpu_s() - cpu0      # after the pool's workers are waited for: theirs is counted
        search_info = _search_info(evs, rejected, state, inverse_runs, plan.search.replicates,
                                   {"wall_s": wall, "jobs": workers, "backend": backend, "cpu_s": cpu})
        rows = candidate_rows(evs, usd)
        files = write_tables(out_dir, rows)
        plot = plot_fronts(out_dir / "fronts", sc, fr, plan.target_step_s) if sc.output.plots else None
        if plot:
            files += ["fronts.png", "fronts.csv"]

        summary = jsonable({
            "scenario": sc.name, "model": sc.model, "mode": sc.pipeline.mode, "hardware": sorted({c.hardware for c in cands}),
            "budgets": plan.gpu_counts(sc.total_gpus), "max_policy_lag": plan.max_policy_lag,
            "plan": plan.model_dump(mode="json"), "gpu_hour_usd": usd, "answer": ans, "against": against, "fronts": fr, "search": search_info, "queries": queries,
            "version": specsim_version(), "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "out_dir": str(out_dir), "warnings": warnings, "inputs": inputs,
        })
        atomic.write_json(out_dir / "summary.json", summary)
        md = plan_markdown(summary)
        atomic.write_text(out_dir / "summary.md", md)
        _write_page(out_dir, sc, summary, md, warnings)
        files += ["summary.json", "summary.md", "report.html", "resolved.yaml", "plan.yaml", "inputs.json"]
        nothing_runs(evs, rejected, plan, out_dir, source_file(sc))
        mg = [q for q in queries if q["query"] == "min_gpus_for"]
        if mg and all(q["gpus"] is None for q in mg):
            raise ScenarioError(None, "--min-gpus-for", min_gpus_for,
                                "a step time that some GPU count reaches (" + "; ".join(q["text"] for q in mg)
                                + f"; the rest of the plan is in {out_dir})")
        return PlanResult(out_dir, summary, files, warnings)


def _search_info(evs, rejected: list, state, inverse_runs: dict, reps: int, cost: dict) -> dict:
    """summary.json's `search`: what was enumerated, infeasible, pruned (by which bound, target or
    budget, or "stopped": a run ended once it could not win), simulated, dropped at halving (and
    why) and where the CPU went (runs per round, runs stopped, CPU-s per simulated run)."""
    pruned: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for e in evs:
        if e.status == "pruned":
            pruned[e.pruned_by] = pruned.get(e.pruned_by, 0) + 1
        elif e.status == "simulated" and e.dropped:
            dropped[e.dropped] = dropped.get(e.dropped, 0) + 1
    cpu = cost["cpu_s"]
    return {
        "candidates": len(evs) + len(rejected), "enumerated": len(evs),
        "layouts_rejected": [{"hardware": r["hardware"], "layout": list(r["layout"]), "reason": r["reason"]}
                             for r in rejected],
        "infeasible": sum(1 for e in evs if e.status == "infeasible") + len(rejected),
        "pruned_by": pruned, "dropped_at_halving": dropped,
        "simulated_candidates": sum(1 for e in evs if e.status == "simulated"),
        "finalists": sum(1 for e in evs if e.status == "simulated" and len(e.steady) >= reps),
        "computed_runs": state.computed_runs, "reused_runs": state.reused_runs, "stopped_runs": state.stopped_runs,
        "rounds": state.rounds,
        "inverse_computed_runs": inverse_runs["computed"], "inverse_reused_runs": inverse_runs["reused"],
        **cost, "cpu_s_per_computed_run": cpu / state.computed_runs if state.computed_runs else None,
    }


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its waited-for children (the plan's local
    workers; Ray's are not counted)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def nothing_runs(evs, rejected: list, plan, out_dir: Path, file) -> None:
    """Raise the ScenarioError (exit 2) of a plan none of whose candidates ran: the constraint that
    refused the most of them, with its reason as `specsim run` gives it, and how many it refused."""
    if any(e.status == "simulated" for e in evs):
        return
    why: dict[str, list] = {}
    for e in evs:
        if e.status in ("infeasible", "pruned"):
            why.setdefault(e.pruned_by, []).append(e)
    for r in rejected:
        why.setdefault("rollout layout", []).append(r)
    if not why:
        return
    field_, items = max(why.items(), key=lambda kv: len(kv[1]))
    total = len(evs) + len(rejected)
    first = items[0]
    reason = first["reason"] if isinstance(first, dict) else first.reason
    if field_ == "usd_budget":
        raise ScenarioError(file, "plan.max_usd_per_hour", plan.max_usd_per_hour,
                            f"a budget that pays for at least one candidate: all {total} cost more per hour "
                            f"(e.g. {reason}); the rest of the plan is in {out_dir}")
    if field_ == "target":
        raise ScenarioError(file, "plan.target_step_s", plan.target_step_s,
                            f"a target some candidate can reach: all {total} candidates' step-time bounds are above "
                            f"it (e.g. {reason}); the rest of the plan is in {out_dir}")
    what = first["layout"] if isinstance(first, dict) else first.cand.label()
    raise ScenarioError(file, field_ if field_ != "rollout layout" else "plan.layouts", what,
                        f"at least one candidate that `specsim run` accepts: none of the {total} runs ({len(items)} "
                        f"refused by {field_}, e.g. {reason}); widen the plan (GPU budgets, layouts, rollout shares) "
                        f"or change the scenario; the rest of the plan is in {out_dir}")


#: the longest reason shown in the page's table (the full text is in candidates.csv)
REASON_CHARS = 90


def page_table(frame):
    """The candidates as report.html shows them: one short line each (the overrides folded into a
    configuration label, intervals in one cell, reasons cut at REASON_CHARS), so the table stays a
    table at any candidate count."""
    import pandas as pd

    def text(v) -> str:
        return v if isinstance(v, str) else ""

    def cut(v) -> str:
        v = text(v)
        return v if len(v) <= REASON_CHARS else v[:REASON_CHARS - 1] + "…"

    def ci(row) -> str:
        if row.step_s_lo != row.step_s_lo:
            return ""
        return f"[{row.step_s_lo:.4g}, {row.step_s_hi:.4g}]"

    def config(row) -> str:
        split = f"{row.rollout_gpus}+{row.training_gpus}" if row.training_gpus else f"{row.rollout_gpus}"
        lay = f"TP{row.tp}" + (f"·EP{row.ep}" if row.ep > 1 else "") + (f"·PP{row.pp}" if row.pp > 1 else "")
        sd = "AR" if row.arm == "ar" else (f"k{row.k}" if row.sd_policy == "always" else f"{row.sd_policy} k{row.k}")
        lag = f" L{row.policy_lag}" if row.training_gpus else ""
        return f"{split} {lay} {sd}{lag}"

    out = pd.DataFrame({
        "status": frame.status, "left out by": [text(v) for v in frame.pruned_by], "GPU": frame.hardware,
        "GPUs": frame.total_gpus, "configuration": [config(r) for r in frame.itertuples()],
        "n": frame.replicates_run, "step_s": frame.step_s, "step 95 %": [ci(r) for r in frame.itertuples()],
        "GPU-h/step": frame.gpu_hours_per_step, "$/step": frame.usd_per_step, "bound_s": frame.bound_step_s,
        "binding": [text(v) for v in frame.binding_bound], "tau": frame.tau, "reason": [cut(v) for v in frame.reason]})
    if out["$/step"].isna().all():
        out = out.drop(columns=["$/step"])
    return out


def _write_page(out_dir: Path, sc, summary: dict, md: str, warnings: list[str]) -> None:
    """The plan's report.html: the summary, the fronts, every evaluated candidate, the scenario."""

    frame = inputs.read_csv_frame(out_dir / "candidates.csv", "--out", "plan file")
    write_page(out_dir, render_page(
        title=f"{sc.name}: the plan", lede=f"{sc.model}; budgets {summary['budgets']} GPUs; policy lag at most "
        f"{summary['max_policy_lag']}.",
        caveat_list=[("Every candidate is simulated with the scenario's assumed lengths and acceptance; analytic "
                      "bounds only prune, never rank. SD's gain is quoted at each one's own optimum."),
                     *[f"Plan warning: {w}" for w in warnings]],
        summary_md=md, plots=plots_of(out_dir, {"fronts": "fronts.png"},
                                      {"fronts": "Pareto fronts: step time vs GPU-hours per step, AR and SD"}),
        table=page_table(frame), rows_note=f"{len(frame)} evaluated candidates, one line each: the configuration in "
        "short (rollout+training GPUs, layout, AR or k, policy lag L), step and GPU-hours with their 95 % intervals, the bound and why a candidate was left out (its "
        "overrides and every column in candidates.csv).",
        resolved_yaml=inputs.read_text(out_dir / "resolved.yaml", "--out", "plan file"),
        provenance={"specsim": summary.get("version", ""), "created (UTC)": summary.get("created_utc", ""),
                    **{f"input sha256 ({k})": v for k, v in sorted((summary.get("inputs") or {}).items())}}))


