"""The plan's best configuration against two it would otherwise be run with: the scenario's own
configuration (as written, at the plan's steps) and the half-and-half split (the best's GPU type,
budget, layout, SD policy, k and lag, with half the budget generating: `candidates.splits` at
share 0.5; sync plans have no split, so only the first).

Each comparison is paired (replicate r of both draws the same responses, `tables.ratio_ci`): the
other's mean step ÷ the best's, and its GPU-hours per step ÷ the best's, with 95 % intervals. Their
runs are plain plan runs (`inverse.Context.steps`: keyed like the search's, stored in runs/,
reused on rerun). ReaL (Mei et al., 2024) reports its searched plans against such heuristics in
the same way; users asking for a trainer:generator ratio ask for exactly this number.
"""

from __future__ import annotations

from typing import Any

from specsim.scenario import apply_overrides
from specsim.study.planner.candidates import splits
from specsim.study.planner.inverse import ProbeFailed
from specsim.study.report.tables import fmt_ci, mean_ci, ratio_ci

__all__ = ["against_baselines"]


def _gpus_of(sc, ov: dict) -> int:

    s = apply_overrides(sc, ov)
    return int(s.rollout.gpus + (s.training.gpus or 0 if s.pipeline.mode == "async" else 0))


def against_baselines(ctx, ans: dict) -> list[dict]:
    """One entry per baseline: its label, its steps' interval, and the paired ratios to the best
    configuration of the plan's objective (best SD when it wins the objective, else best AR)."""

    best = _overall_best(ans)
    if best is None:
        return []
    sc = ctx.sc
    steps = int(best["overrides"]["pipeline.steps"])
    try:
        best_steps = ctx.steps(best["overrides"])
    except ProbeFailed:
        return []
    out: list[dict[str, Any]] = []
    own = {"pipeline.steps": steps}
    t = sc.training
    own_hw = f"{sc.training_hardware}+{sc.rollout_hardware}" if sc.mixed_hardware else sc.hardware
    label_own = (f"{own_hw} {sc.rollout.gpus}" + (f"+{t.gpus}" if sc.pipeline.mode == "async" else " colocated")
                 + f", TP{sc.rollout.tp}·EP{sc.rollout.ep}·PP{sc.rollout.pp}, "
                 + ("AR" if sc.speculation.policy == "off" else f"{sc.speculation.policy} k={sc.speculation.k}")
                 + (f", lag {sc.pipeline.policy_lag}" if sc.pipeline.mode == "async" else ""))
    cases = [("scenario", "the scenario's own configuration", label_own, own)]
    if best["training_gpus"]:
        g = max(best["tp"], best["ep"]) * best["pp"]
        pair = splits(int(best["budget_gpus"]), g, max(t.tp, t.ep) * t.pp, [0.5])
        if pair:
            r, tr = pair[0]
            ov = {**best["overrides"], "rollout.gpus": r, "training.gpus": tr}
            cases.append(("half", "the half-and-half split", f"{r}+{tr} at the best's layout, k and lag", ov))
    for name, what, label, ov in cases:
        entry: dict[str, Any] = {"baseline": name, "what": what, "label": label, "overrides": ov}
        try:
            other = ctx.steps(ov)
        except ProbeFailed as exc:
            entry.update({"error": exc.why, "detail": f"it cannot run ({exc.why})",
                          "text": f"against {what} ({label}): it cannot run ({exc.why})"})
            out.append(entry)
            continue
        n_best, n_other = int(best["total_gpus"]), _gpus_of(sc, ov)
        step_ratio = ratio_ci([o / b for o, b in zip(other, best_steps)])
        gph_ratio = ratio_ci([n_other * o / (n_best * b) for o, b in zip(other, best_steps)])
        entry.update({"step_s": mean_ci(other), "total_gpus": n_other, "step_ratio": step_ratio,
                      "gpu_hours_ratio": gph_ratio, "is_best": other == best_steps})
        entry["detail"] = ("it is the best itself" if entry["is_best"] else
                           f"its step {_f(entry['step_s'], 1)} s is {_f(step_ratio, 3)}× the best's, its GPU-hours "
                           f"per step {_f(gph_ratio, 3)}× (paired over {len(other)} replicates)")
        entry["text"] = f"against {what} ({label}): {entry['detail']}"
        out.append(entry)
    return out


def _overall_best(ans: dict) -> dict | None:
    """The better of best AR and best SD under the plan's objective (SD on a tie)."""
    a, s = ans.get("best_ar"), ans.get("best_sd")
    if a is None or s is None:
        return s or a
    obj = ans.get("objective")
    if obj == "min_gpus":
        key = (lambda e: (e["total_gpus"], e["step_s"]["mean"]))
    elif obj == "min_gpu_hours":
        key = (lambda e: (e["gpu_hours_per_step"]["mean"], e["step_s"]["mean"]))
    elif obj == "min_usd":
        key = (lambda e: ((e.get("usd_per_step") or {}).get("mean", float("inf")), e["step_s"]["mean"]))
    else:
        key = (lambda e: (e["step_s"]["mean"], e["total_gpus"]))
    return s if key(s) <= key(a) else a


def _f(m, d):

    return fmt_ci(m, d)
