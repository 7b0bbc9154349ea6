"""A study's plan: every sweep point, the stored runs its row is computed from, and the tasks
that produce those runs once each (a baseline shared by many points is simulated once).

`plan_study` checks every point and its baselines before anything runs (world/resolve.check: every
check `resolve` makes), so a point that cannot exist fails at once (exit 2, naming `sweep`) instead
of after hours of simulation. It builds no World: the worker that runs a point resolves it, once
(study/executors.execute); the plan keeps the scenarios, keys and cost estimates its tasks need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from specsim.scenario import Scenario, ScenarioError, source_file
from specsim.study.sweep import RunTask, SweepPoint, baseline_of, expand, point_scenario, sync_ar_of
from specsim.world.resolve import check, length_distribution, pipeline_spec
from specsim.world.specs import steady_fill_warning

__all__ = ["PointRuns", "StudyPlan", "plan_study", "work_problem"]


@dataclass(frozen=True)
class PointRuns:
    """The run keys one sweep point's row is computed from: the point itself, its baseline, and
    sync AR (the same key as the baseline when sync AR is the baseline)."""

    point: str
    baseline: str
    sync_ar: str

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.point, self.baseline, self.sync_ar)

    def as_dict(self) -> dict[str, str]:
        return {"point": self.point, "baseline": self.baseline, "sync_ar": self.sync_ar}


@dataclass
class StudyPlan:
    """What a study will run. `point_scenarios` is keyed by combination index (replicates share
    one), `runs_of` by point id, `tasks` by run key; `notes` are (point values, warning) pairs."""

    scenario: Scenario
    points: list[SweepPoint]
    point_scenarios: dict[int, Scenario]
    runs_of: dict[str, PointRuns]
    tasks: dict[str, RunTask]
    sync_ar_is_baseline: bool
    roles: dict[str, set[str]] = field(default_factory=dict)
    notes: list[tuple[dict, str]] = field(default_factory=list)
    #: expected generated tokens of each run, by run key (responses × E[length] × steps)
    tokens_per_run: dict[int, float] = field(default_factory=dict)

    def work(self) -> dict:
        """The cost estimate before running: pipeline runs the sweep needs and the tokens they
        generate (responses per step × expected response tokens × steps, summed over runs; the
        capacity plan adds its runs later, about `capacity_runs` more of the same size)."""
        tokens = sum(self.tokens_per_run.get(k, 0.0) for k in self.tasks)
        sc = self.scenario
        cap = sc.output.capacity
        sizes = 4 if cap.rollout_gpus is None else len(set(cap.rollout_gpus) | {sc.rollout.gpus}) if cap.rollout_gpus \
            else 0
        cap_runs = sizes * 2 * int(cap.replicates or sc.sweep.get("replicates", 1) or 1)
        biggest = max(self.tokens_per_run.values(), default=0.0)
        return {"runs": len(self.tasks), "tokens": float(tokens), "capacity_runs": cap_runs,
                "capacity_tokens": float(cap_runs * biggest),   # a capacity run generates what a point run does
                "responses_per_step": sc.workload.prompts * sc.workload.group_size,
                "max_tokens": float(sc.output.max_simulated_tokens)}


def work_problem(plan: StudyPlan) -> str | None:
    """Why the plan is over its bound (output.max_simulated_tokens), or None."""
    w = plan.work()
    return bound_problem(w["tokens"] + w["capacity_tokens"], w["max_tokens"], "this sweep",
                         f"{w['runs']} pipeline runs + about {w['capacity_runs']} capacity-plan runs of "
                         f"{w['responses_per_step']:,} responses per step", "swept values")


def bound_problem(total: float, bound: float, what: str, how: str, less: str) -> str | None:
    """The text of a cost estimate over output.max_simulated_tokens (None within it): `what`
    generates about `total` tokens, `how` (its runs), and what to simulate fewer of (`less`)."""
    if total <= bound:
        return None
    return (f"at most {bound:.3g} simulated tokens (output.max_simulated_tokens); {what} generates about "
            f"{total:.3g}: {how}. Lift the bound with --set output.max_simulated_tokens="
            f"{10 ** math.ceil(math.log10(total)):.0e}, or simulate less (fewer prompts, steps or {less})")


def run_tokens(world) -> float:
    """The expected tokens one pipeline run of a resolved world generates (responses per step ×
    expected response tokens × steps): the unit of every cost estimate."""
    w = world.workload
    return float(w.prompts * w.group_size * world.response_dist.mean_tokens(w.max_response_tokens)
                 * world.pipeline.steps)


def scenario_run_tokens(sc: Scenario) -> float:
    """:func:`run_tokens` of a scenario without resolving its world (a plan's base scenario need
    not fit its own layout: the plan searches others)."""
    file = source_file(sc)
    w = sc.workload
    dist = length_distribution(w.response_tokens, "workload.response_tokens", Path(file).parent if file else None)
    return float(w.prompts * w.group_size * dist.mean_tokens(w.max_response_tokens) * sc.pipeline.steps)


def refuse_over_bound(sc: Scenario, runs: int, tokens_per_run: float, what: str, less: str) -> dict:
    """The cost estimate of a command that simulates `runs` runs of about `tokens_per_run` tokens
    each (plan, project, explain); over output.max_simulated_tokens it is a ScenarioError naming
    that field, before anything runs. Returns the estimate."""
    total = float(runs) * tokens_per_run
    problem = bound_problem(total, float(sc.output.max_simulated_tokens), what,
                            f"{runs:,} pipeline runs of about {tokens_per_run:.3g} tokens", less)
    if problem:
        raise ScenarioError(source_file(sc), "output.max_simulated_tokens", sc.output.max_simulated_tokens, problem)
    return {"runs": int(runs), "tokens": total, "max_tokens": float(sc.output.max_simulated_tokens)}


def plan_study(sc: Scenario, engine: str = "fast") -> StudyPlan:
    """Expand the sweep, check each point and its baselines, and list the runs to compute."""
    points = expand(sc)
    point_sc: dict[int, Scenario] = {}
    runs_of: dict[str, PointRuns] = {}
    tasks: dict[str, RunTask] = {}
    roles: dict[str, set[str]] = {}
    per_index: dict[int, tuple[Scenario, Scenario, Scenario | None]] = {}
    all_sync_is_base = True
    notes: list[tuple[dict, str]] = []
    tokens_per_run: dict[str, float] = {}
    tokens_of_index: dict[int, float] = {}
    for p in points:
        if p.index not in per_index:
            try:
                psc = point_scenario(sc, p)
                base = baseline_of(psc)
                sync = sync_ar_of(psc)
                check(psc)      # fail fast (exit 2) on a point that cannot exist
            except ScenarioError as exc:
                if not p.values:   # no sweep: the error names the field the user wrote, not `sweep`
                    raise
                raise ScenarioError(source_file(sc), "sweep", p.label(),
                                    f"points that can run ({exc.field}: {exc.allowed})") from None
            try:
                check(base)
            except ScenarioError as exc:
                field, value = ("sweep", p.label()) if p.values else ("pipeline.baseline",
                                                                      dict(sc.pipeline.baseline) or "{}")
                raise ScenarioError(source_file(sc), field, value, f"a point whose baseline can run "
                                    f"({exc.field}: {exc.allowed})") from None
            same = sync.model_dump() == base.model_dump()
            all_sync_is_base &= same
            per_index[p.index] = (psc, base, None if same else sync)
            tokens_of_index[p.index] = scenario_run_tokens(psc)
            point_sc[p.index] = psc
            pipeline = pipeline_spec(psc)
            if pipeline.steady_includes_fill:
                notes.append((p.values, steady_fill_warning(pipeline)))
        psc, base, sync = per_index[p.index]
        t_run = RunTask.of(psc, p.replicate, "point", engine)
        t_base = RunTask.of(base, p.replicate, "baseline", engine)
        t_sync = RunTask.of(sync, p.replicate, "sync_ar", engine) if sync is not None else None
        for t in (t_run, t_base, t_sync):
            if t is None:
                continue
            roles.setdefault(t.key, set()).add(t.role)
            tokens_per_run[t.key] = tokens_of_index[p.index]
            if t.key not in tasks or (tasks[t.key].role != "point" and t.role == "point"):
                tasks[t.key] = t
        runs_of[p.point_id] = PointRuns(t_run.key, t_base.key, t_sync.key if t_sync else t_base.key)
    return StudyPlan(sc, points, point_sc, runs_of, tasks, all_sync_is_base, roles, notes, tokens_per_run)
