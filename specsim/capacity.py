"""The capacity plan's runs: the best SD configuration and its AR counterpart at several rollout
cluster sizes (`output.capacity.rollout_gpus`, or ×¼, ½, 1, 2 of the scenario's, in whole
engines). `report/tables.capacity_table` turns the finished runs into the plan."""

from __future__ import annotations

from typing import Any

from specsim.scenario import Scenario, ScenarioError, apply_overrides, source_file
from specsim.sweep import RunTask, is_ar, k_of

__all__ = ["capacity_plan", "capacity_sizes"]


def capacity_sizes(sc: Scenario, gpus_per_engine: int) -> list[int]:
    """output.capacity.rollout_gpus, or ×0.25, 0.5, 1, 2 of the rollout GPUs in whole engines."""
    if sc.output.capacity.rollout_gpus:
        return sorted({int(n) for n in sc.output.capacity.rollout_gpus})
    base = sc.rollout.gpus
    out = set()
    for m in (0.25, 0.5, 1.0, 2.0):
        n = max(1, round(m * base / gpus_per_engine)) * gpus_per_engine
        out.add(int(n))
    return sorted(out)


def capacity_plan(sc: Scenario, plan, analysis: dict, engine: str) -> dict:
    """Tasks for the capacity plot: the best SD point (best k) and the same with SD off, at each size."""
    best_sd = analysis.get("best_sd")
    ref_index = best_sd["point"] if best_sd else analysis["best"]["point"]
    ref = plan.point_sc[ref_index]
    r = ref.rollout
    per_engine = max(r.tp, r.ep) * r.pp
    sizes = sorted(set(capacity_sizes(sc, per_engine)) | {r.gpus})
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
                from specsim.resolve import resolve

                resolve(s)
            except ScenarioError as exc:
                errors.append({"rollout_gpus": n, "variant": variant, "error": str(exc)})
                continue
            t = RunTask.of(s, 0, "capacity", engine)
            tasks.setdefault(t.key, t)
            entries.append({"rollout_gpus": n, "variant": variant, "key": t.key,
                            "total_gpus": s.total_gpus})
    return {"reference_point": ref_index, "k": k_of(ref), "sd_policy": ref.speculation.policy,
            "has_sd": bool(best_sd), "sizes": sizes, "scenario_rollout_gpus": r.gpus, "gpus_per_engine": per_engine,
            "target_step_s": sc.output.capacity.target_step_s, "entries": entries, "errors": errors, "tasks": tasks,
            "is_ar_reference": is_ar(ref)}
