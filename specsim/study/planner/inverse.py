"""Inverse answers by bisection on simulations (never a fixed grid), each with its interval.

* `min_gpus_for(target)`: the fewest GPUs at which the best AR (and SD) configuration's mean
  steady step reaches `target`. Each probe (a GPU count n) is a search of its own
  (`search.search`, the plan's bounds, waves and halving, pruned on the target): every rollout
  layout the plan allows on the arm's GPU type × every allowed rollout:training split of n GPUs
  (async; sync: the whole count in whole engines), so a probe answers with the best
  configuration at n, not with the budget's optimum scaled down. Held at the arm's optimum: the
  GPU type, the SD policy, k and the policy lag — the drafter and algorithm choices, which act
  mostly on the step's slowest responses (what more GPUs do not shorten), and whose re-search
  would multiply each probe's cost by |k| × |lags| (at 235B: from 35 to 420 candidates). Holding
  them can only make a count's best step slower, so the answer is an upper bound on the fewest
  GPUs over every allowed k and lag (given monotonicity). At the answer's count one more search
  frees them, so the configuration reported is the best at that count. Counts are whole units of
  lcm(smallest engine, trainer replica) GPUs. Assumed, not checked by the bisection: the best
  step is non-increasing in the GPU count (more GPUs never make the best configuration slower);
  the answer flags probes that contradict it by more than 2 %. The answer is the bracket
  (lo, hi]: lo misses, hi meets, with the step's 95 % interval and the configuration at hi.
* `break_even_tau`: at the best SD configuration, the drafter τ (at `drafter.tau_at_k`) at which
  SD's mean step equals AR's at the same configuration; with a plan target, also the τ that
  reaches the target. A drifting drafter keeps its relative drift (`tau_after` scaled). Only τ the
  run accepts are probed (`tau_bracket`: the valid range found by resolving, from the plan's own
  τ outwards); a failed probe (`ProbeFailed`) ends the query with its reason, never an answer.
* `stops_paying`: at the best SD configuration, the smallest k above its own at which SD is no
  faster than AR, and the smallest policy lag at which SD's gain falls below 1 % (both by
  bisection, assuming the gain falls monotonically beyond the optimum).

Every probe runs the plan's replicates (paired draws) and is stored in the plan's runs/ like the
search's runs (the same keys: a probe's candidate that the search ran is reused), so a rerun
reuses it.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from specsim.scenario import ScenarioError, apply_overrides
from specsim.study.planner.candidates import configurations
from specsim.study.planner.report import candidate_entry
from specsim.study.planner.search import search
from specsim.study.report.tables import fmt_ci, mean_ci
from specsim.study.store import RunStore
from specsim.study.sweep import RunTask
from specsim.workload.acceptance.laws import tau_scalar
from specsim.world.resolve import resolve

__all__ = ["Context", "bisect_int", "break_even_tau", "min_gpus_for", "stops_paying", "tau_overrides"]

#: SD "pays" while its gain is above 1 + this
PAYS_MARGIN = 0.01
#: break-even τ: the valid range's ends are found to within this (and kept this inside it)
TAU_EDGE = 1e-3


@dataclass
class Context:
    """What the inverse answers share: the scenario (with its plan), the plan's run store
    (study/store.RunStore), the executor, the replicates per probe; `layouts`: the plan's feasible rollout
    layouts per GPU type; `bounds`: the search's BoundModel. `computed` / `reused` count runs."""

    sc: Any
    store: RunStore
    jobs: int
    backend: str
    address: str | None
    engine: str
    replicates: int
    layouts: dict = field(default_factory=dict)
    bounds: Any = None
    progress: Any = None      # study/report/progress.Progress, or None
    computed: int = 0
    reused: int = 0
    pool: Any = None          # executors.WorkerPool shared by every run of the plan, or None
    _valid: dict = field(default_factory=dict)

    def valid(self, overrides: dict) -> str | None:
        """Why `specsim run` would refuse the scenario with `overrides` (None: it accepts it). No
        simulation: the scenario is loaded and resolved exactly as the run resolves it."""

        key = json.dumps(overrides, sort_keys=True, default=str)
        if key not in self._valid:
            try:
                resolve(apply_overrides(self.sc, overrides))
                self._valid[key] = None
            except ScenarioError as exc:
                self._valid[key] = f"{exc.field}: {exc.allowed}"
        return self._valid[key]

    def steps(self, overrides: dict) -> list[float]:
        """Steady step times over the replicates of the scenario with `overrides`. Raises ProbeFailed
        when the run refuses it or a replicate fails (a failed probe is never an answer)."""
        why = self.valid(overrides)
        if why is not None:
            raise ProbeFailed(overrides, why)
        s = apply_overrides(self.sc, overrides)
        tasks = [RunTask.of(s, r, "plan", self.engine) for r in range(self.replicates)]
        before = self.store.computed
        self.reused += sum(1 for t in tasks if t.key in self.store)
        runs = self.store.results(tasks, jobs=self.jobs, backend=self.backend, address=self.address, pool=self.pool,
                                  progress=self.progress)
        self.computed += self.store.computed - before
        for t in tasks:
            if "error" in runs[t.key]:
                raise ProbeFailed(overrides, str(runs[t.key]["error"]))
        return [runs[t.key]["steady"]["step_s"] for t in tasks]


class ProbeFailed(Exception):
    """A probe the run refused or that failed: `overrides`, `why`. Reported, never taken as an answer."""

    def __init__(self, overrides: dict, why: str):
        super().__init__(overrides, why)
        self.overrides, self.why = overrides, why

    def text(self) -> str:
        what = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.overrides.items()
                         if k.startswith(("drafter.", "speculation.k", "pipeline.policy_lag")))
        return f"a probe failed ({what}: {self.why})"


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

    return mean_ci(v or [])


def _unit(sc, layouts) -> int:
    """GPUs per bisection unit: lcm(the smallest engine, the trainer replica)."""
    t = sc.training
    engine = min(max(tp, ep) * pp for tp, ep, pp in layouts)
    return math.lcm(engine, max(t.tp, t.ep) * t.pp)


@dataclass
class _Probe:
    """The best configuration of one arm at one GPU count (None: nothing fits or reaches)."""

    gpus: int
    best: Any = None              # search.Evaluated
    candidates: int = 0
    simulated: int = 0

    @property
    def mean_s(self) -> float:
        return self.best.mean_step() if self.best is not None else math.inf


def _probe(ctx: Context, entry: dict, n: int, target: float, free: bool = False) -> _Probe:
    """Search every allowed layout × split of n GPUs at the entry's GPU type, SD policy, k, lag
    (`free`: also every SD policy × k and lag the plan allows for the entry's arm)."""

    sc = ctx.sc
    arm = [(entry["sd_policy"], int(entry["k"]))]
    lags = [int(entry["policy_lag"])]
    if free:
        plan = sc.plan
        arm = [("off", 0)] if entry["arm"] == "ar" else [(p, k) for p in plan.sd_policies for k in plan.k if k > 0]
        lags = list(range(plan.max_policy_lag + 1)) if sc.pipeline.mode == "async" else [0]
    cands = configurations(sc, sc.plan, entry["hardware"], ctx.layouts.get(entry["hardware"], []), n, arm, lags)
    out = _Probe(n, candidates=len(cands))
    if not cands:
        return out
    st = search(sc, cands, ctx.store, jobs=ctx.jobs, backend=ctx.backend, address=ctx.address,
                engine=ctx.engine, progress=ctx.progress, target_s=target, bounds=ctx.bounds, pool=ctx.pool)
    ctx.computed += st.computed_runs
    ctx.reused += st.reused_runs
    final = [e for e in st.evaluated if e.status == "simulated" and len(e.steady) >= ctx.replicates]
    out.simulated = sum(1 for e in st.evaluated if e.status == "simulated")
    if final:
        out.best = min(final, key=lambda e: (e.mean_step(), e.cand.total_gpus))
    return out


def min_gpus_for(ctx: Context, ans: dict, target: float, grow_max: int = 4) -> list[dict]:
    """The fewest GPUs whose best AR (SD) configuration reaches `target` (see the module doc):
    from the plan's budget, doubled up to `grow_max` times until it is met, then bisected."""

    out = []
    for arm in ("ar", "sd"):
        entry = ans.get(f"best_{arm}")
        if entry is None or not ctx.layouts.get(entry["hardware"]):
            continue
        unit = _unit(ctx.sc, ctx.layouts[entry["hardware"]])
        memo: dict[int, _Probe] = {}

        def probe(m: int, memo=memo, entry=entry, unit=unit) -> _Probe:
            if m not in memo:
                memo[m] = _probe(ctx, entry, m * unit, target)
            return memo[m]

        def ok(m: int, probe=probe) -> bool:
            return probe(m).mean_s <= target

        hi = max(1, int(entry["budget_gpus"]) // unit)
        grow = 0
        while not ok(hi) and grow < grow_max:
            hi, grow = hi * 2, grow + 1
        held = f"{entry['hardware']}, {'AR' if arm == 'ar' else entry['sd_policy'] + ' k=' + str(entry['k'])}, " \
               f"lag {entry['policy_lag']}"
        if not ok(hi):
            best = min(memo.values(), key=lambda p: p.mean_s)
            seen = f"; the fastest probe: {best.mean_s:.1f} s at {best.gpus} GPUs" if best.best is not None else ""
            out.append({"query": "min_gpus_for", "arm": arm, "target_step_s": target, "gpus": None,
                        "largest_gpus_tried": hi * unit, "probes": len(memo),
                        "text": f"{arm.upper()}: no GPU count up to {hi * unit} reaches {target:g} s "
                                f"(best split and layout at each count; {held} held{seen})"})
            continue
        lo, hi = bisect_int(hi // 2 if grow else 1, hi, ok)
        # the answer's configuration: the best at that count over every layout, split, k and lag
        # the plan allows (the bisection held k and lag; freeing them can only be as fast or faster)
        full = _probe(ctx, entry, hi * unit, target, free=True)
        p = full if full.best is not None and full.mean_s <= probe(hi).mean_s else probe(hi)
        e = candidate_entry(p.best, {})
        m = e["step_s"]
        sure = bool(m.get("ci95") and m["ci95"][1] <= target)
        tried = sorted((q.gpus, q.mean_s) for q in memo.values())
        against = [(a, b) for (a, sa), (b, sb) in itertools.pairwise(tried) if sa < math.inf > sb > sa * 1.02]
        note = (f"; not monotone: {against[0][1]} GPUs slower than {against[0][0]}" if against else "")
        out.append({"query": "min_gpus_for", "arm": arm, "target_step_s": target, "gpus": e["total_gpus"],
                    "bracket_gpus": [lo * unit, hi * unit], "unit_gpus": unit, "step_s_at_answer": m,
                    "label": e["label"], "overrides": e["overrides"], "candidate": e["candidate"],
                    "meets_with_95pct": sure, "probes": len(memo),
                    "probe_best_step_s": {str(g): (s if s < math.inf else None) for g, s in tried},
                    "held": held, "monotone": not against,
                    "text": f"{arm.upper()}: {e['total_gpus']} GPUs reach {target:g} s with {e['label']} "
                            f"(bracket ({lo * unit}, {hi * unit}] GPUs; step there {_fmt(m)} s"
                            f"{'' if sure else ', the upper 95 % limit above the target'}; {len(memo)} probes, "
                            f"each the best split and layout at its count, {held} held; the configuration at the "
                            f"answer searched over every allowed k and lag too{note})"})
    return out


def _fmt(m, d=1):

    return fmt_ci(m, d)


def tau_overrides(sc, tau: float) -> dict:
    """The overrides that give the scenario's drafter mean acceptance length `tau` at `tau_at_k`
    (a drifting drafter keeps its relative drift)."""
    d = sc.drafter
    ov: dict[str, Any] = {"drafter.tau": tau}
    ref = d.general_tau if d.init == "general" else d.tau
    if d.init == "general":
        ov = {"drafter.general_tau": tau, "drafter.tau": None}
    if d.staleness.tau_after is not None and ref:
        ov["drafter.staleness.tau_after"] = 1.0 + (tau - 1.0) * (d.staleness.tau_after - 1.0) / (ref - 1.0)
    return ov


def valid_edge(valid, inside: float, outside: float, tol: float) -> float:
    """The point nearest `outside` that `valid` accepts, to within `tol`, on the segment from
    `inside` (accepted) to `outside` (returned as is when accepted): a bisection on validity alone
    (no simulation), for a validity that holds on one interval about `inside`."""
    if valid(outside):
        return outside
    good, bad = inside, outside
    while abs(bad - good) > tol:
        mid = 0.5 * (good + bad)
        if valid(mid):
            good = mid
        else:
            bad = mid
    return good


def tau_bracket(ctx: Context, base: dict) -> tuple[float, float, float]:
    """(lowest, own, highest) τ at `tau_at_k` the drafter accepts for the configuration `base`:
    the run's own checks decide (τ ≤ the most a k-draft with the drafter's position decay gives,
    a staleness whose `tau_after` stays valid), each edge found by bisection on validity from the
    scenario's own τ, TAU_EDGE inside the valid range."""

    d = ctx.sc.drafter
    own = float(d.general_tau if d.init == "general" else d.tau)
    k = int(d.tau_at_k)
    top = tau_scalar(1.0, k, float(d.position_decay or 1.0)) - TAU_EDGE

    def valid(tau: float) -> bool:
        return ctx.valid({**base, **tau_overrides(ctx.sc, tau)}) is None

    hi = valid_edge(valid, own, top, TAU_EDGE)
    lo = valid_edge(valid, own, 1.0 + TAU_EDGE, TAU_EDGE)
    return lo, own, hi


def break_even_tau(ctx: Context, ans: dict, tol: float = 0.05) -> list[dict]:
    """The drafter τ at which the best SD configuration's mean step equals AR's at the same
    configuration (and, with a plan target, reaches the target). Bisection between the τ the
    drafter accepts (`tau_bracket`), starting from the plan's own τ (its runs are reused); a probe
    that fails ends the query with that failure named, never with an answer."""
    sd = ans.get("best_sd")
    if sd is None or ctx.sc.drafter.tau is None and ctx.sc.drafter.general_tau is None:
        return [{"query": "break_even_tau", "text": "break-even τ: needs a best SD configuration and a drafter "
                                                     "given by drafter.tau"}]
    base = dict(sd["overrides"])
    k_at = ctx.sc.drafter.tau_at_k
    try:
        ar_mean = _mean(ctx.steps({**base, "speculation.policy": "off"}))
        own_mean = _mean(ctx.steps(base))
    except ProbeFailed as exc:
        return [{"query": "break_even_tau", "tau": None, "text": f"break-even τ: {exc.text()}"}]
    lo_tau, own, hi_tau = tau_bracket(ctx, base)
    out = []
    goals = [("break_even", ar_mean, "AR at the same configuration")]
    if ctx.sc.plan.target_step_s:
        goals.append(("target", ctx.sc.plan.target_step_s, f"the {ctx.sc.plan.target_step_s:g} s target"))
    for name, goal, what in goals:
        memo: dict[float, float] = {own: own_mean}

        def ok(tau: float, memo=memo, goal=goal) -> bool:
            if tau not in memo:
                memo[tau] = _mean(ctx.steps({**base, **tau_overrides(ctx.sc, tau)}))
            return memo[tau] <= goal

        try:
            if ok(own):          # the answer lies at or below the plan's own τ
                if ok(lo_tau):
                    out.append({"query": f"{name}_tau", "tau": lo_tau, "bracket": [1.0, lo_tau], "goal_step_s": goal,
                                "probes": len(memo),
                                "text": f"{name} τ: even τ = {lo_tau:.3f} (the lowest the drafter takes at k={k_at}) "
                                        f"reaches {what}, {goal:.1f} s ({sd['label']})"})
                    continue
                lo, hi = bisect_float(lo_tau, own, ok, tol)
            else:
                if not ok(hi_tau):
                    out.append({"query": f"{name}_tau", "tau": None, "highest_valid_tau": hi_tau, "probes": len(memo),
                                "text": f"{name} τ: even τ = {hi_tau:.3f} (the most the drafter takes at k={k_at}) "
                                        f"does not reach {what}, {goal:.1f} s ({sd['label']})"})
                    continue
                lo, hi = bisect_float(own, hi_tau, ok, tol)
        except ProbeFailed as exc:
            out.append({"query": f"{name}_tau", "tau": None, "probes": len(memo),
                        "text": f"{name} τ: no answer, {exc.text()}"})
            continue
        out.append({"query": f"{name}_tau", "tau": hi, "bracket": [lo, hi], "goal_step_s": goal,
                    "probes": len(memo), "valid_tau": [lo_tau, hi_tau],
                    "text": f"{name} τ (at k={k_at}) for {sd['label']}: {hi:.2f} "
                            f"(bracket ({lo:.2f}, {hi:.2f}]; vs {what}, {goal:.1f} s; {len(memo)} probes within the "
                            f"τ the drafter takes, [{lo_tau:.3f}, {hi_tau:.3f}])"})
    return out


def stops_paying(ctx: Context, ans: dict, k_max: int = 16, lag_max: int = 16) -> list[dict]:
    """At the best SD configuration: the smallest k above its own at which SD is no faster than AR,
    and the smallest policy lag at which SD's gain falls below 1 + PAYS_MARGIN; each probed only
    where the run accepts the configuration (k up to the largest the drafter takes, ≤ `k_max`); a
    failed probe ends its query with the failure named."""
    sd = ans.get("best_sd")
    if sd is None:
        return []
    base = dict(sd["overrides"])
    out = []
    k0 = int(base.get("speculation.k", 1))
    try:
        ar_mean = _mean(ctx.steps({**base, "speculation.policy": "off"}))
    except ProbeFailed as exc:
        return [{"query": "k_stops_paying", "k": None, "text": f"k where SD stops paying: {exc.text()}"}]

    def k_stops(k: int) -> bool:
        return _mean(ctx.steps({**base, "speculation.k": k})) >= ar_mean

    k_top = k0
    while k_top < k_max and ctx.valid({**base, "speculation.k": k_top + 1}) is None:
        k_top += 1
    try:
        if k_top > k0 and k_stops(k_top):
            lo, hi = bisect_int(k0 + 1, k_top, k_stops)
            out.append({"query": "k_stops_paying", "k": hi, "bracket": [lo, hi],
                        "text": f"SD stops paying at k = {hi} (k = {lo} still pays) for {sd['label']}"})
        else:
            out.append({"query": "k_stops_paying", "k": None,
                        "text": f"SD still pays at k = {k_top}, the largest the run takes up to {k_max} ({sd['label']})"})
    except ProbeFailed as exc:
        out.append({"query": "k_stops_paying", "k": None, "text": f"k where SD stops paying: no answer, {exc.text()}"})
    if "pipeline.policy_lag" in base:
        def gain(lag: int) -> float:
            a = _mean(ctx.steps({**base, "speculation.policy": "off", "pipeline.policy_lag": lag}))
            s = _mean(ctx.steps({**base, "pipeline.policy_lag": lag}))
            return a / s

        def lag_ok(lag: int) -> bool:
            return gain(lag) < 1.0 + PAYS_MARGIN
        l0 = int(base["pipeline.policy_lag"])
        try:
            if lag_ok(lag_max):
                lo, hi = bisect_int(l0, lag_max, lag_ok)
                out.append({"query": "lag_stops_paying", "lag": hi, "bracket": [lo, hi],
                            "text": f"SD's gain falls below {1 + PAYS_MARGIN:g}× at policy lag {hi} "
                                    f"(lag {lo}: {gain(lo) if lo >= l0 else float('nan'):.3f}×)"})
            else:
                out.append({"query": "lag_stops_paying", "lag": None,
                            "text": f"SD still pays at policy lag {lag_max} ({gain(lag_max):.3f}×)"})
        except ProbeFailed as exc:
            out.append({"query": "lag_stops_paying", "lag": None,
                        "text": f"policy lag where SD stops paying: no answer, {exc.text()}"})
    return out
