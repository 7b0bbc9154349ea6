"""The plan's search: enumerate, bound, prune, simulate the survivors with successive halving.

    1. enumerate every candidate the `plan:` section allows (`candidates.py`); a candidate is
       infeasible exactly when `specsim run` would refuse it (`BoundModel.world` resolves its
       overrides as the run does), with the run's reason;
    2. bound each candidate's steady step from the cost model (`bounds.py`); a candidate whose
       GPUs cost more per hour than `plan.max_usd_per_hour` is left out ("usd_budget"); with a
       target step time (objectives min_gpus / min_gpu_hours, min_usd with a target) a candidate
       whose bound × slack exceeds the target is pruned ("target");
    3. round 1 of successive halving runs replicate 0 of the candidates in waves, lowest bound
       first: after each wave a candidate is pruned only when a simulated candidate of its GPU type
       and arm (its upper 95 % limit where it has one) dominates every point the candidate could
       reach (`dominates`: no slower than its bound × slack, no more GPU-hours per step, for
       min_gpus no more GPUs) — it can then be neither the best of its GPU type nor on its arm's
       Pareto front ("trainer", "throughput" or "latency": whichever bound binds); from the second
       wave on each run carries the step above which it cannot win (`stop_thresholds`) and ends
       as soon as its steps and its trainer's floor for the rest prove it over (sim/pipeline.py
       `stop_above_s`; pruned "stopped");
    4. each later round keeps, of every arm, its best `keep_fraction` by the objective that could
       still win (`could_still_win`, for min_step_time: behind the arm's best by no more than the
       paired per-step difference's one-sided 99.9 % Student t limit, or `keep_within`; the others
       are "dropped: cannot win" rather than run to full replicates) and every candidate that could
       be on its arm's front (`dominated_beyond_noise`: not dominated by more than the paired
       difference's 95 % interval), and runs more replicates; the last round runs `replicates`, so
       the front is drawn from equal replicates.

Every simulated run is a plain pipeline run keyed like `specsim run`'s (`study/sweep.run_key`:
the candidate's scenario and replicate, the inputs' contents), stored atomically in
`<out>/runs/<key>.json` and reused on rerun (a stopped run too, for a threshold below its
floor: study/store.py); so a candidate rerun with `specsim run --set ...`
(its `overrides`) at the same replicates gives the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from specsim.scenario import ScenarioError
from specsim.study.planner.bounds import Bound, BoundModel
from specsim.study.planner.candidates import Candidate, candidate_scenario
from specsim.study.report.tables import mean_ci, t_quantile
from specsim.study.store import RunStore
from specsim.study.sweep import RunTask

__all__ = ["Evaluated", "SearchState", "replicate_schedule", "search"]

#: round-1 waves: the share of the remaining candidates each wave runs (the last runs the rest)
WAVES = (0.05, 0.25, 1.0)
#: `pruned_by` of a candidate whose run was stopped because it could not win (`stop_thresholds`)
STOPPED = "stopped"


@dataclass
class Evaluated:
    """A candidate, its bound, what became of it, and its simulated steady figures per replicate."""

    cand: Candidate
    bound: Bound | None = None
    status: str = "pending"          # pending | simulated | pruned | infeasible
    pruned_by: str = ""
    reason: str = ""
    round: int = 0                   # last halving round it ran in (1-based; 0: never simulated)
    keys: dict[int, str] = field(default_factory=dict)     # replicate -> run key
    steady: dict[int, dict] = field(default_factory=dict)  # replicate -> steady figures
    series: dict[int, dict[int, float]] = field(default_factory=dict)  # replicate -> {step: step_s}, steady steps
    meta: dict = field(default_factory=dict)
    dropped: str = ""                # why halving did not run its next replicates ("cannot win", "halving")
    usd_per_hour: float | None = None  # its GPUs' price per hour (Candidate.usd_per_hour); None: unpriced
    cost_key: tuple = (False, 0.0)   # how costly its run is to simulate (BoundModel.run_cost_key): the submission order

    @property
    def pair_usd_per_hour(self) -> float | None:
        """Its $ per hour where $ is not GPU-hours times one price: a mixed pair whose two pools are
        priced (within one GPU type $ per step is GPU-hours per step × one price, so GPU-hours
        decide alone; a pair's blend moves with its split). None otherwise."""
        return self.usd_per_hour if self.cand.mixed else None

    @property
    def group(self) -> tuple:
        c = self.cand
        return (c.hardware, c.budget, c.arm)

    @property
    def front_group(self) -> tuple:
        """Candidates compared for the Pareto front and the best per GPU type: GPU type and arm
        (every budget)."""
        c = self.cand
        return (c.hardware, c.arm)

    def steps(self) -> list[float]:
        return [self.steady[r]["step_s"] for r in sorted(self.steady)]

    def mean_step(self) -> float:
        s = self.steps()
        return sum(s) / len(s) if s else math.inf

    def upper_step(self) -> float:

        m = mean_ci(self.steps())
        if m["ci95"]:
            return float(m["ci95"][1])
        return float(m["mean"]) if m["mean"] is not None else math.inf


@dataclass
class SearchState:
    evaluated: list[Evaluated]
    computed_runs: int = 0
    reused_runs: int = 0
    stopped_runs: int = 0      # runs (computed or reused) stopped because they could not win
    rounds: list[dict] = field(default_factory=list)


def replicate_schedule(replicates: int, rounds: int) -> list[int]:
    """Replicates per halving round: 1 … `replicates`, growing geometrically."""
    if rounds <= 1:
        return [replicates]
    out = [max(1, round(replicates ** (i / (rounds - 1)))) for i in range(rounds)]
    out[-1] = replicates
    return [max(a, b) for a, b in zip(out, [1] + out[:-1])]


def search(sc, cands: list[Candidate], store: RunStore, *, jobs: int, backend: str,
           address: str | None, engine: str, progress=None, target_s: float | None = None,
           bounds: BoundModel | None = None, pool=None) -> SearchState:
    """Run the search (see the module doc). `store`: the plan's runs (study/store.RunStore: reused
    when stored, the rest run and kept there). `target_s`: prune on this target step time (default:
    the plan's target under the min_gpus / min_gpu_hours objectives); `bounds`: a BoundModel of
    `sc` to reuse (its engine worlds are cached)."""
    plan = sc.plan
    s = plan.search
    if target_s is None and plan.objective != "min_step_time":
        target_s = plan.target_step_s
    usd = dict(sc.output.gpu_hour_usd)
    evs = [Evaluated(c, usd_per_hour=c.usd_per_hour(usd)) for c in cands]
    st = SearchState(evs)
    _bound_all(evs, bounds if bounds is not None else BoundModel(sc))
    _prefilter(evs, plan, usd, target_s)
    runner = _Runner(sc, store, st, jobs, backend, address, engine, progress, pool)
    schedule = replicate_schedule(s.replicates, s.halving_rounds)
    _first_round(evs, runner, jobs, s.bound_slack, plan.objective, s.keep_within)
    alive = [e for e in evs if e.status == "simulated"]
    for rnd, reps in enumerate(schedule[1:], start=2):
        t0, runs0 = time.perf_counter(), st.computed_runs
        alive = _keep(alive, s.keep_fraction, s.keep_within, plan.objective, target_s)
        runner.batch([(e, r) for e in alive for r in range(reps)], rnd)
        alive = [e for e in alive if e.status == "simulated"]
        st.rounds.append({"round": rnd, "replicates": reps, "candidates": len(alive),
                          "runs": st.computed_runs - runs0, "wall_s": time.perf_counter() - t0})
    if len(schedule) == 1:   # one round: every simulated candidate at full replicates
        runner.batch([(e, r) for e in alive for r in range(1, schedule[0])], 1)
    return st


def _bound_all(evs: list[Evaluated], bm: BoundModel) -> None:
    """Every candidate's bound; a candidate the run refuses is infeasible with the run's reason
    (`BoundModel.world` resolves it as `specsim run` does)."""
    for e in evs:
        try:
            e.bound = bm.bound(e.cand)
            e.cost_key = bm.run_cost_key(e.cand)
        except ScenarioError as exc:
            e.status, e.pruned_by, e.reason = "infeasible", exc.field, f"{exc.field}: {exc.allowed}"


def _prefilter(evs: list[Evaluated], plan, usd: dict, target_s: float | None) -> None:
    """Leave out, before any run, a candidate over the $/hour budget ("usd_budget": the cluster's
    price) and, with a target, one whose bound × slack misses it ("target")."""
    slack = plan.search.bound_slack
    if plan.max_usd_per_hour is not None:
        for e in evs:
            per_gpu = e.cand.usd_per_gpu_hour(usd)   # a mixed pair's: its pools' prices blended by their GPUs
            rate = math.inf if per_gpu is None else e.cand.total_gpus * per_gpu
            if e.status == "pending" and rate > plan.max_usd_per_hour:
                e.status, e.pruned_by = "pruned", "usd_budget"
                e.reason = (f"{e.cand.total_gpus} GPUs × ${math.nan if per_gpu is None else per_gpu:g}/GPU-h = "
                            f"${rate:,.0f}/h > plan.max_usd_per_hour ${plan.max_usd_per_hour:,.0f}")
    if target_s is not None:
        for e in evs:
            if e.status == "pending" and e.bound.step_s * slack > target_s:
                e.status, e.pruned_by = "pruned", "target"
                e.reason = f"bound {e.bound.step_s:.1f} s × {slack:g} > target {target_s:g} s"


@dataclass
class _Runner:
    """Runs (or reuses from the store) the candidates' replicates and absorbs their results."""

    sc: object
    store: RunStore
    st: SearchState
    jobs: int
    backend: str
    address: str | None
    engine: str
    progress: object
    pool: object
    scenarios: dict = field(default_factory=dict)

    def task(self, e: Evaluated, rep: int, stop_above_s: float | None = None) -> RunTask:
        if e.cand.cid not in self.scenarios:
            self.scenarios[e.cand.cid] = candidate_scenario(self.sc, e.cand)
        t = RunTask.of(self.scenarios[e.cand.cid], rep, "plan", self.engine)
        if stop_above_s is not None:
            t = dataclasses.replace(t, stop_above_s=float(stop_above_s))
        e.keys[rep] = t.key
        return t

    def absorb(self, e: Evaluated, rep: int, res: dict) -> None:
        if "error" in res:
            e.status, e.pruned_by, e.reason = "infeasible", "run", res["error"]
            return
        if "stopped" in res:
            stop = res["stopped"]
            e.status, e.pruned_by = "pruned", STOPPED
            steps = self.scenarios[e.cand.cid].pipeline.steps
            e.reason = (f"stopped: cannot win — after step {stop['step']} of {steps} its steady "
                        f"mean step is at least {stop['floor_step_s']:.1f} s (the steps run + the trainer's time "
                        f"of the rest) > {stop['stop_above_s']:.1f} s, where a simulated candidate of its arm "
                        "dominates it")
            self.st.stopped_runs += 1
            return
        e.steady[rep] = res["steady"]
        w = int(res["meta"].get("warmup_steps", 0))
        e.series[rep] = {int(r["step"]): float(r["step_s"]) for r in res.get("steps", ()) if r["step"] >= w}
        e.meta = res["meta"]
        e.status = "simulated"

    def batch(self, items: list[tuple[Evaluated, int]], rnd: int, stops: dict[int, float] | None = None) -> None:
        """Run (or reuse) replicate `rep` of each (candidate, rep); `stops`: by id(candidate), the step
        above which its run stops (`stop_thresholds`). The runs go to the workers costliest first
        (`Evaluated.cost_key`, stable: otherwise in the items' order), so the batch does not end on
        one long run while the other workers idle; every result is absorbed as it comes, so the
        order changes no figure."""
        todo: dict[str, RunTask] = {}
        owner: dict[str, list[tuple[Evaluated, int]]] = {}
        for e, rep in items:
            t = self.task(e, rep, (stops or {}).get(id(e)))
            e.round = rnd
            owner.setdefault(t.key, []).append((e, rep))
            stored = self.store.answer(t)
            if stored is not None:
                self.st.reused_runs += 1
                self.absorb(e, rep, stored)
            elif t.key not in todo or todo[t.key].stop_above_s is not None and (
                    t.stop_above_s is None or t.stop_above_s > todo[t.key].stop_above_s):
                todo[t.key] = t     # one run answers every owner: the one that stops latest

        def on_result(t: RunTask, res: dict) -> None:
            self.st.computed_runs += 1
            for e, rep in owner[t.key]:
                self.absorb(e, rep, res)

        costliest_first = sorted(todo.values(), key=lambda t: owner[t.key][0][0].cost_key, reverse=True)
        self.store.results(costliest_first, jobs=self.jobs, backend=self.backend, address=self.address,
                           pool=self.pool, progress=self.progress, on_result=on_result)


def _first_round(evs: list[Evaluated], runner: _Runner, jobs: int, slack: float, objective: str,
                 within: float) -> None:
    """Round 1 of successive halving: replicate 0 of the candidates in waves (WAVES), lowest bound
    first, each wave seeding every arm with its lowest-bound candidates, each run stopped once it
    cannot win (`stop_thresholds`); after each wave `prune_by_bound`."""
    t0, runs0 = time.perf_counter(), runner.st.computed_runs
    for share in WAVES:
        pending = sorted((e for e in evs if e.status == "pending"), key=lambda e: e.bound.step_s)
        if not pending:
            break
        if share < 1.0:   # seed every arm: its lowest-bound candidates first
            n = max(2 * jobs, math.ceil(share * len(pending)))
            per_group: dict[tuple, int] = {}
            wave = []
            for e in pending:
                if per_group.get(e.group, 0) < max(1, n // max(1, len({p.group for p in pending}))):
                    wave.append(e)
                    per_group[e.group] = per_group.get(e.group, 0) + 1
        else:
            wave = pending
        runner.batch([(e, 0) for e in wave], 1, stops=stop_thresholds(evs, wave, objective, within))
        prune_by_bound(evs, slack, objective)
    runner.st.rounds.append({"round": 1, "replicates": 1, "candidates": sum(1 for e in evs if e.round == 1),
                             "runs": runner.st.computed_runs - runs0, "wall_s": time.perf_counter() - t0})


def prune_by_bound(evs: list[Evaluated], slack: float, objective: str) -> int:
    """Prune a pending candidate only when a simulated one of its GPU type and arm dominates
    every point it could reach (`dominates`, at its bound × slack, the simulated one at its upper
    95 % limit): it can then be neither the best of its GPU type under the objective nor on its
    arm's Pareto front. Returns how many it pruned."""
    sims: dict[tuple, list[tuple[float, int, float | None]]] = {}
    for e in evs:
        if e.status == "simulated":
            sims.setdefault(e.front_group, []).append((e.upper_step(), e.cand.total_gpus, e.pair_usd_per_hour))
    n = 0
    for e in evs:
        if e.status != "pending":
            continue
        lb = e.bound.step_s * slack
        hit = next((h for h in sorted(sims.get(e.front_group, ()), key=lambda h: h[:2])
                    if dominates(h[0], h[1], lb, e.cand.total_gpus, objective, d_usd_h=h[2],
                                 c_usd_h=e.pair_usd_per_hour)), None)
        if hit is not None:
            e.status, e.pruned_by = "pruned", e.bound.binding
            e.reason = (f"{e.bound.binding} bound {e.bound.step_s:.1f} s × {slack:g}: dominated by a simulated "
                        f"{hit[0]:.1f} s on {hit[1]} GPUs")
            n += 1
    return n


def dominates(d_step: float, d_gpus: int, c_step: float, c_gpus: int, objective: str, margin: float = 0.0, *,
              d_usd_h: float | None = None, c_usd_h: float | None = None) -> bool:
    """Whether a point (d_step s on d_gpus GPUs) is better than (c_step, c_gpus) by `margin` in
    every figure the plan ranks on: the step time and the GPU-hours per step (GPUs × step; $ per
    step is that times one price within a GPU type), for a mixed pair whose pools are priced also
    the $ per step (`d_usd_h`, `c_usd_h`: $ per hour, `Evaluated.pair_usd_per_hour`; two splits of
    a pair blend its prices differently), and for the min_gpus objective the GPU count."""
    f = 1.0 + margin
    if d_step * f > c_step:
        return False
    if objective == "min_gpus" and d_gpus > c_gpus:
        return False
    if d_usd_h is not None and c_usd_h is not None and d_usd_h * d_step * f > c_usd_h * c_step:
        return False
    return d_gpus * d_step * f <= c_gpus * c_step


def _score(e: Evaluated, objective: str, target_s: float | None) -> tuple:
    """The objective's ranking key of a candidate's mean (lower is better); one above the target
    ranks after every one that meets it."""
    m = e.mean_step()
    miss = target_s is not None and objective != "min_step_time" and m > target_s
    if objective == "min_gpus":
        return (miss, e.cand.total_gpus, m)
    if objective == "min_usd" and e.pair_usd_per_hour is not None:
        return (miss, e.pair_usd_per_hour * m, m)
    if objective in ("min_gpu_hours", "min_usd"):
        return (miss, e.cand.total_gpus * m, m)
    return (miss, m, e.cand.total_gpus)


#: one-sided confidence with which a candidate must trail its arm's best before halving stops
#: running it (`could_still_win`), or a run be stopped (`stop_thresholds`)
WIN_CONFIDENCE = 0.999
#: one-sided confidence with which another candidate must dominate one before halving leaves it
#: off its arm's front (`dominated_beyond_noise`): the upper end of the paired difference's 95 %
#: interval, so a candidate goes on when that interval overlaps the point that dominates it
FRONT_CONFIDENCE = 0.975


def paired_margin(e: Evaluated, d: Evaluated, confidence: float = WIN_CONFIDENCE) -> float:
    """How far `e`'s mean step may trail `d`'s by noise alone: the one-sided Student t limit at
    `confidence` of the mean paired per-step difference (step j of replicate r of every candidate
    draws the same responses, so the difference of two candidates' step j leaves out what the
    draws share; its spread over the steady steps both ran is the noise more replicates average),
    t · sd / √n over the n shared steady steps. Fewer than three: infinite (nothing can be told)."""
    diffs = [s[j] - d.series[r][j] for r, s in e.series.items() if r in d.series
             for j in s if j in d.series[r]]
    n = len(diffs)
    if n < 3:
        return math.inf
    mean = sum(diffs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    return t_quantile(confidence, n - 1) * sd / math.sqrt(n)


def could_still_win(e: Evaluated, best: Evaluated, within: float, confidence: float = WIN_CONFIDENCE) -> bool:
    """Whether more replicates could still make `e` the best of its arm: its steady mean trails
    `best`'s by at most `within` of it, or by no more than `paired_margin` (the paired per-step
    difference's one-sided t limit at `confidence`). Fewer than three shared steady steps: it could."""
    gap = e.mean_step() - best.mean_step()
    return gap <= within * best.mean_step() or gap <= paired_margin(e, best, confidence)


def dominated_beyond_noise(e: Evaluated, d: Evaluated, objective: str, within: float = 0.0) -> bool:
    """Whether `d` dominates `e` by more than the noise: `d`'s mean step plus the margin m (the larger
    of `paired_margin` at FRONT_CONFIDENCE and `within` × its mean) is no slower than `e`'s, its GPU-hours per step at
    that step no more than `e`'s (and its $ per step, for a priced mixed pair), for min_gpus its GPUs no
    more — and one of those strictly (an exact tie dominates neither way)."""
    if objective == "min_gpus" and d.cand.total_gpus > e.cand.total_gpus:
        return False
    ds, es = d.mean_step(), e.mean_step()
    ds += max(paired_margin(e, d, FRONT_CONFIDENCE), within * ds)
    dg, eg = d.cand.total_gpus * ds, e.cand.total_gpus * es
    du, eu = d.pair_usd_per_hour, e.pair_usd_per_hour
    if du is not None and eu is not None and du * ds > eu * es:
        return False
    return ds <= es and dg <= eg and (ds < es or dg < eg)


def step_noise_s(d: Evaluated, confidence: float = WIN_CONFIDENCE) -> float:
    """A stand-in for `paired_margin` against `d` before the other run exists: t · √2 · sd / √n of
    `d`'s own steady steps (the margin of an unpaired difference of two such runs; pairing only
    removes what their steps share, so it is no smaller in practice). Fewer than three: infinite."""
    steps = [x for s in d.series.values() for x in s.values()]
    n = len(steps)
    if n < 3:
        return math.inf
    mean = sum(steps) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in steps) / (n - 1))
    return t_quantile(confidence, n - 1) * math.sqrt(2.0) * sd / math.sqrt(n)


def stop_thresholds(evs: list[Evaluated], wave: list[Evaluated], objective: str, within: float) -> dict[int, float]:
    """By id, the steady mean step above which a candidate of `wave` cannot win, for its run to stop
    there (sim/pipeline.run_pipeline `stop_above_s`): the least, over the simulated candidates d of
    its GPU type and arm (for min_gpus, on no more GPUs), of (d's mean + m) × max(1, d's GPUs ÷ its
    GPUs, and for a priced mixed pair d's $ per hour ÷ its), m the larger of `step_noise_s`(d) and
    `within` × d's mean — a run above it is dominated beyond the noise in step time, in GPU-hours
    per step and in $ per step, so it can be neither the best of its GPU type under any objective
    nor on its arm's front; halving would drop it. No such d: no stop."""
    refs: dict[tuple, list[tuple[float, int, float | None]]] = {}
    for d in evs:
        if d.status == "simulated":
            m = max(step_noise_s(d), within * d.mean_step())
            if math.isfinite(m):
                refs.setdefault(d.front_group, []).append((d.mean_step() + m, d.cand.total_gpus, d.pair_usd_per_hour))
    out: dict[int, float] = {}
    for e in wave:
        g, eu = e.cand.total_gpus, e.pair_usd_per_hour
        limits = [ref * max(1.0, dg / g, du / eu if du is not None and eu else 1.0)
                  for ref, dg, du in refs.get(e.front_group, ())
                  if objective != "min_gpus" or dg <= g]
        if limits:
            out[id(e)] = min(limits)
    return out


def _keep(alive: list[Evaluated], fraction: float, within: float, objective: str = "min_step_time",
          target_s: float | None = None) -> list[Evaluated]:
    """Who runs the next round's replicates: of each arm (GPU type, budget, arm; by the objective)
    its best `fraction` that could still win (`could_still_win`), every one within `within` of its
    best step (exact ties at least), and every one that could be on its arm's Pareto front: not
    dominated beyond the paired noise (`dominated_beyond_noise`) by another of its GPU type and arm
    — so the front is drawn from equal replicates. The others are marked `dropped` ("cannot win":
    in the best `fraction` but too far behind)."""
    groups: dict[tuple, list[Evaluated]] = {}
    for e in alive:
        groups.setdefault(e.group, []).append(e)
    keep: set[int] = set()
    for members in groups.values():
        members.sort(key=lambda e: _score(e, objective, target_s))
        n = max(1, math.ceil(fraction * len(members)))
        best = min(members, key=Evaluated.mean_step)
        for i, e in enumerate(members):
            if e.mean_step() <= best.mean_step() * (1 + within):
                keep.add(id(e))
            elif i < n:
                if objective != "min_step_time" or could_still_win(e, best, within):
                    keep.add(id(e))
                else:
                    e.dropped = "cannot win"
    fronts: dict[tuple, list[Evaluated]] = {}
    for e in alive:
        fronts.setdefault(e.front_group, []).append(e)
    for members in fronts.values():
        for e in members:
            if not any(dominated_beyond_noise(e, d, objective, within) for d in members if d is not e):
                keep.add(id(e))
                e.dropped = ""
    for e in alive:
        if id(e) not in keep and not e.dropped:
            e.dropped = "halving"
    return [e for e in alive if id(e) in keep]
