"""Inverse answers by bisection on simulations (never a fixed grid), each with its interval.

* `min_gpus_for(target)`: the fewest GPUs at which the best AR (and SD) configuration's mean
  steady step reaches `target`, the configuration's rollout share, layout, k and lag held
  (async: rollout GPUs = the share in whole engines, the rest in whole trainer replicas). The
  answer is the bracket (lo, hi]: lo misses, hi meets; with the step's 95 % interval at hi.
* `break_even_tau`: at the best SD configuration, the drafter τ (at `drafter.tau_at_k`) at which
  SD's mean step equals AR's at the same configuration; with a plan target, also the τ that
  reaches the target. A drifting drafter keeps its relative drift (`tau_after` scaled).
* `stops_paying`: at the best SD configuration, the smallest k above its own at which SD is no
  faster than AR, and the smallest policy lag at which SD's gain falls below 1 % (both by
  bisection, assuming the gain falls monotonically beyond the optimum).

Every probe runs the plan's replicates (paired draws) and is stored in the plan's runs/ like the
search's runs, so a rerun reuses it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from specsim.scenario import ScenarioError, apply_overrides
from specsim.study.executors import run_tasks
from specsim.study.sweep import RunTask

__all__ = ["Context", "bisect_int", "break_even_tau", "min_gpus_for", "stops_paying"]

#: SD "pays" while its gain is above 1 + this
PAYS_MARGIN = 0.01


@dataclass
class Context:
    sc: Any
    runs: dict
    store: Any
    jobs: int
    backend: str
    address: str | None
    engine: str
    replicates: int
    computed: int = 0
    reused: int = 0

    def steps(self, overrides: dict) -> list[float] | None:
        """Steady step times over the replicates of the scenario with `overrides` (None: it cannot run)."""
        try:
            s = apply_overrides(self.sc, overrides)
        except ScenarioError:
            return None
        tasks = [RunTask.of(s, r, "plan", self.engine) for r in range(self.replicates)]
        todo = [t for t in tasks if t.key not in self.runs]
        self.reused += len(tasks) - len(todo)

        def on_result(t, res):
            self.store(t.key, res)
            self.runs[t.key] = json.loads(json.dumps(res, sort_keys=True))
            self.computed += 1

        run_tasks(todo, on_result, jobs=self.jobs, backend=self.backend, address=self.address)
        if any("error" in self.runs[t.key] for t in tasks):
            return None
        return [self.runs[t.key]["steady"]["step_s"] for t in tasks]


def _mean(v: list[float] | None) -> float:
    return sum(v) / len(v) if v else math.inf


def bisect_int(lo: int, hi: int, ok) -> tuple[int, int]:
    """(lo', hi') with ok(hi') true and ok(lo') false (or lo' = lo - 1 when ok(lo)), hi' - lo' = 1,
    for an `ok` that is false below some point and true from it on; assumes ok(hi)."""
    if ok(lo):
        return lo - 1, lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def bisect_float(lo: float, hi: float, ok, tol: float) -> tuple[float, float]:
    """(lo', hi') with ok(hi') true and ok(lo') false, hi' - lo' ≤ tol; assumes ok(hi), not ok(lo)."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def _ci(v):
    from specsim.study.report.tables import mean_ci

    return mean_ci(v or [])


def _scaled(entry: dict, sc, n: int) -> dict:
    """The entry's configuration at n total GPUs, its rollout share held."""
    ov = dict(entry["overrides"])
    tp, ep, pp = ov["rollout.tp"], ov["rollout.ep"], ov["rollout.pp"]
    g = max(tp, ep) * pp
    if "training.gpus" not in ov:
        ov["rollout.gpus"] = max(g, (n // g) * g)
        return ov
    t = sc.training
    rep = max(t.tp, t.ep) * t.pp
    share = ov["rollout.gpus"] / (ov["rollout.gpus"] + ov["training.gpus"])
    r = max(g, int(share * n // g) * g)
    ov["rollout.gpus"] = r
    ov["training.gpus"] = max(rep, int((n - r) // rep) * rep)
    return ov


def min_gpus_for(ctx: Context, ans: dict, target: float) -> list[dict]:
    out = []
    for arm in ("ar", "sd"):
        entry = ans.get(f"best_{arm}")
        if entry is None:
            continue
        ov0 = entry["overrides"]
        g = max(ov0["rollout.tp"], ov0["rollout.ep"]) * ov0["rollout.pp"]
        t = ctx.sc.training
        unit = g if "training.gpus" not in ov0 else math.lcm(g, max(t.tp, t.ep) * t.pp)
        n0 = entry["total_gpus"]
        memo: dict[int, list[float] | None] = {}

        def steps(m: int, memo=memo, entry=entry, unit=unit):
            if m not in memo:
                memo[m] = ctx.steps(_scaled(entry, ctx.sc, m * unit))
            return memo[m]

        def ok(m: int, steps=steps) -> bool:
            return _mean(steps(m)) <= target
        hi = max(1, n0 // unit)
        grow = 0
        while not ok(hi) and grow < 4:
            hi, grow = hi * 2, grow + 1
        if not ok(hi):
            out.append({"query": "min_gpus_for", "arm": arm, "target_step_s": target, "gpus": None,
                        "text": f"{arm.upper()}: no GPU count up to {hi * unit} reaches {target:g} s with "
                                f"{entry['label']}'s share, layout, k and lag"})
            continue
        lo, hi = bisect_int(1, hi, ok)
        ov = _scaled(entry, ctx.sc, hi * unit)
        n_hi = ov["rollout.gpus"] + ov.get("training.gpus", 0)
        m = _ci(steps(hi))
        sure = bool(m.get("ci95") and m["ci95"][1] <= target)
        out.append({"query": "min_gpus_for", "arm": arm, "target_step_s": target, "gpus": n_hi,
                    "bracket_gpus": [lo * unit, hi * unit], "step_s_at_answer": m, "overrides": ov,
                    "meets_with_95pct": sure, "probes": len(memo),
                    "text": f"{arm.upper()}: {n_hi} GPUs reach {target:g} s (bracket ({lo * unit}, {hi * unit}]; "
                            f"step there {_fmt(m)} s{'' if sure else ', the upper 95 % limit above the target'}; "
                            f"{len(memo)} probes) — {entry['label']}'s share, layout, k, lag"})
    return out


def _fmt(m, d=1):
    from specsim.study.report.tables import fmt_ci

    return fmt_ci(m, d)


def _tau_overrides(sc, tau: float) -> dict:
    d = sc.drafter
    ov: dict[str, Any] = {"drafter.tau": tau}
    ref = d.general_tau if d.init == "general" else d.tau
    if d.init == "general":
        ov = {"drafter.general_tau": tau, "drafter.tau": None}
    if d.staleness.tau_after is not None and ref:
        ov["drafter.staleness.tau_after"] = 1.0 + (tau - 1.0) * (d.staleness.tau_after - 1.0) / (ref - 1.0)
    return ov


def break_even_tau(ctx: Context, ans: dict, tol: float = 0.05) -> list[dict]:
    sd = ans.get("best_sd")
    if sd is None or ctx.sc.drafter.tau is None and ctx.sc.drafter.general_tau is None:
        return [{"query": "break_even_tau", "text": "break-even τ: needs a best SD configuration and a drafter "
                                                     "given by drafter.tau"}]
    base = dict(sd["overrides"])
    ar = ctx.steps({**base, "speculation.policy": "off"})
    ar_mean = _mean(ar)
    hi_tau = float(ctx.sc.drafter.tau_at_k + 1)
    out = []
    goals = [("break_even", ar_mean, "AR at the same configuration")]
    if ctx.sc.plan.target_step_s:
        goals.append(("target", ctx.sc.plan.target_step_s, f"the {ctx.sc.plan.target_step_s:g} s target"))
    for name, goal, what in goals:
        memo: dict[float, float] = {}

        def ok(tau: float, memo=memo, goal=goal) -> bool:
            if tau not in memo:
                memo[tau] = _mean(ctx.steps({**base, **_tau_overrides(ctx.sc, tau)}))
            return memo[tau] <= goal

        if not ok(hi_tau):
            out.append({"query": f"{name}_tau", "tau": None,
                        "text": f"{name} τ: even τ = {hi_tau:g} (every draft accepted) does not reach {what}"})
            continue
        if ok(1.0 + 1e-3):
            out.append({"query": f"{name}_tau", "tau": 1.0,
                        "text": f"{name} τ: any τ ≥ 1 reaches {what} ({sd['label']})"})
            continue
        lo, hi = bisect_float(1.0 + 1e-3, hi_tau, ok, tol)
        out.append({"query": f"{name}_tau", "tau": hi, "bracket": [lo, hi], "goal_step_s": goal,
                    "probes": len(memo),
                    "text": f"{name} τ (at k={ctx.sc.drafter.tau_at_k}) for {sd['label']}: {hi:.2f} "
                            f"(bracket ({lo:.2f}, {hi:.2f}]; vs {what}, {goal:.1f} s; {len(memo)} probes)"})
    return out


def stops_paying(ctx: Context, ans: dict, k_max: int = 16, lag_max: int = 16) -> list[dict]:
    sd = ans.get("best_sd")
    if sd is None:
        return []
    base = dict(sd["overrides"])
    out = []
    ar_mean = _mean(ctx.steps({**base, "speculation.policy": "off"}))

    def k_stops(k: int) -> bool:
        return _mean(ctx.steps({**base, "speculation.k": k})) >= ar_mean

    k0 = int(base.get("speculation.k", 1))
    if k_stops(k_max):
        lo, hi = bisect_int(k0 + 1, k_max, k_stops)
        out.append({"query": "k_stops_paying", "k": hi, "bracket": [lo, hi],
                    "text": f"SD stops paying at k = {hi} (k = {lo} still pays) for {sd['label']}"})
    else:
        out.append({"query": "k_stops_paying", "k": None, "text": f"SD still pays at k = {k_max} ({sd['label']})"})
    if "pipeline.policy_lag" in base:
        def gain(lag: int) -> float:
            a = _mean(ctx.steps({**base, "speculation.policy": "off", "pipeline.policy_lag": lag}))
            s = _mean(ctx.steps({**base, "pipeline.policy_lag": lag}))
            return a / s

        def lag_ok(lag: int) -> bool:
            return gain(lag) < 1.0 + PAYS_MARGIN
        l0 = int(base["pipeline.policy_lag"])
        if lag_ok(lag_max):
            lo, hi = bisect_int(l0, lag_max, lag_ok)
            out.append({"query": "lag_stops_paying", "lag": hi, "bracket": [lo, hi],
                        "text": f"SD's gain falls below {1 + PAYS_MARGIN:g}× at policy lag {hi} "
                                f"(lag {lo}: {gain(lo) if lo >= l0 else float('nan'):.3f}×)"})
        else:
            out.append({"query": "lag_stops_paying", "lag": None,
                        "text": f"SD still pays at policy lag {lag_max} ({gain(lag_max):.3f}×)"})
    return out
