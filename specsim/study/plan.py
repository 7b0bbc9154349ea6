"""A study's plan: every sweep point, the stored runs its row is computed from, and the tasks
that produce those runs once each (a baseline shared by many points is simulated once).

`plan_study` resolves every point and its baselines before anything runs, so a point that cannot
exist fails at once (exit 2, naming `sweep`) instead of after hours of simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.scenario import Scenario, ScenarioError, source_file
from specsim.study.sweep import RunTask, SweepPoint, baseline_of, expand, point_scenario, sync_ar_of
from specsim.world.specs import steady_fill_warning

__all__ = ["PointRuns", "StudyPlan", "plan_study"]


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


def plan_study(sc: Scenario, engine: str = "fast") -> StudyPlan:
    """Expand the sweep, resolve each point and its baselines, and list the runs to compute."""
    from specsim.world.resolve import resolve

    points = expand(sc)
    point_sc: dict[int, Scenario] = {}
    runs_of: dict[str, PointRuns] = {}
    tasks: dict[str, RunTask] = {}
    roles: dict[str, set[str]] = {}
    per_index: dict[int, tuple[Scenario, Scenario, Scenario | None]] = {}
    all_sync_is_base = True
    notes: list[tuple[dict, str]] = []
    for p in points:
        if p.index not in per_index:
            try:
                psc = point_scenario(sc, p)
                base = baseline_of(psc)
                sync = sync_ar_of(psc)
                world = resolve(psc)      # fail fast (exit 2) on a point that cannot exist
                resolve(base)
            except ScenarioError as exc:
                raise ScenarioError(source_file(sc), "sweep", p.label(),
                                    f"points that can run ({exc.field}: {exc.allowed})") from None
            same = sync.model_dump() == base.model_dump()
            all_sync_is_base &= same
            per_index[p.index] = (psc, base, None if same else sync)
            point_sc[p.index] = psc
            if world.pipeline.steady_includes_fill:
                notes.append((p.values, steady_fill_warning(world.pipeline)))
        psc, base, sync = per_index[p.index]
        t_run = RunTask.of(psc, p.replicate, "point", engine)
        t_base = RunTask.of(base, p.replicate, "baseline", engine)
        t_sync = RunTask.of(sync, p.replicate, "sync_ar", engine) if sync is not None else None
        for t in (t_run, t_base, t_sync):
            if t is None:
                continue
            roles.setdefault(t.key, set()).add(t.role)
            if t.key not in tasks or (tasks[t.key].role != "point" and t.role == "point"):
                tasks[t.key] = t
        runs_of[p.point_id] = PointRuns(t_run.key, t_base.key, t_sync.key if t_sync else t_base.key)
    return StudyPlan(sc, points, point_sc, runs_of, tasks, all_sync_is_base, roles, notes)
