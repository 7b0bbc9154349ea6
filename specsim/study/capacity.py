"""The capacity plan's runs: the best SD configuration and its AR counterpart at several rollout
cluster sizes (`output.capacity.rollout_gpus`, or ×¼, ½, 1, 2 of the scenario's, in whole
engines; an empty list: no plan), each over the sweep's replicates (`output.capacity.replicates`
overrides the count). Replicate r uses the same draws as the sweep's replicate r, so the plan's
run at the scenario's own size is the sweep point's run, and the plan's step times are the means
the points table shows (one replicate of a tail-bound async run can differ from the mean by 15 %:
a plan on one replicate used to call a larger pool slower). `report/tables.capacity_table` turns
the finished runs into the plan."""

from __future__ import annotations

from typing import Any

from specsim.scenario import Scenario, ScenarioError, apply_overrides, source_file
from specsim.study.sweep import RunTask, is_ar, k_of, replicates
from specsim.world.resolve import check

__all__ = ["capacity_plan", "capacity_replicates", "capacity_sizes"]


def capacity_sizes(sc: Scenario, gpus_per_engine: int) -> list[int]:
    """output.capacity.rollout_gpus, or ×0.25, 0.5, 1, 2 of the rollout GPUs in whole engines;
    [] when the list is empty (no capacity plan)."""
    if sc.output.capacity.rollout_gpus is not None:
        return sorted({int(n) for n in sc.output.capacity.rollout_gpus})
    base = sc.rollout.gpus
    out = set()
    for m in (0.25, 0.5, 1.0, 2.0):
        n = max(1, round(m * base / gpus_per_engine)) * gpus_per_engine
        out.add(int(n))
    return sorted(out)


def capacity_replicates(sc: Scenario) -> int:
    """Replicates per capacity size: output.capacity.replicates, else the sweep's."""
    return int(sc.output.capacity.replicates or replicates(sc))


def capacity_plan(sc: Scenario, plan, analysis: dict, engine: str) -> dict:
    """Tasks for the capacity plot: the best SD point (best k) and the same with SD off, at each
    size, for replicates 0..R-1 (paired with the sweep's)."""
    best_sd = analysis.get("best_sd")
    ref_index = best_sd["point"] if best_sd else analysis["best"]["point"]
    ref = plan.point_scenarios[ref_index]
    r = ref.rollout
    per_engine = max(r.tp, r.ep) * r.pp
    wanted = capacity_sizes(sc, per_engine)
    sizes = sorted(set(wanted) | {r.gpus}) if wanted else []
    n_rep = capacity_replicates(sc)
    tasks: dict[str, RunTask] = {}
    entries = []
    errors = []
    for n in sizes:
        for variant in (("sd", "ar") if best_sd else ("ar",)):
            changes: dict[str, Any] = {"rollout.gpus": n}
            if variant == "ar":
                changes["speculation.policy"] = "off"
            try:
                s = apply_overrides(ref, changes)
                if n % per_engine:
                    raise ScenarioError(source_file(sc), "output.capacity.rollout_gpus", n,
                                        f"multiples of the {per_engine} GPUs of one engine")

                check(s)
            except ScenarioError as exc:
                errors.append({"rollout_gpus": n, "variant": variant, "error": str(exc)})
                continue
            for rep in range(n_rep):
                t = RunTask.of(s, rep, "capacity", engine)
                tasks.setdefault(t.key, t)
                entries.append({"rollout_gpus": n, "variant": variant, "replicate": rep, "key": t.key,
                                "total_gpus": s.total_gpus})
    return {"reference_point": ref_index, "k": k_of(ref), "sd_policy": ref.speculation.policy,
            "has_sd": bool(best_sd), "sizes": sizes, "replicates": n_rep,
            "scenario_rollout_gpus": r.gpus, "gpus_per_engine": per_engine,
            "target_step_s": sc.output.capacity.target_step_s, "entries": entries, "errors": errors, "tasks": tasks,
            "is_ar_reference": is_ar(ref)}
