"""`specsim explain`: where the speedup goes, mechanism by mechanism.

One point of a scenario (its sweep dropped, `--point` values applied) is run with its mechanisms
switched off and on through the scenario's `what_if:` counterfactuals (scenario/schema.py), every
run on the same draws (common random numbers: replicate r of every variant sees the same
responses), so each ratio below is paired.

The gain of a variant is the point's SD gain as `specsim run` reports it: its baseline's steady
step ÷ its own (the summary's `e2e_speedup`), the baseline run under the same counterfactuals
(only `free_trainer` and the pipeline mode change an AR run).

Factors (a mechanism each; switched off ↦ the what-if):

=============  =========================================================================
draft          draft passes cost something            (off: what_if.free_drafting)
verify         the verify costs more than a decode      (off: what_if.verify_as_decode)
spread         acceptance differs between responses    (off: what_if.no_acceptance_spread)
staleness      the drafter drifts from the policy      (off: what_if.no_staleness)
async          the pipeline overlaps generation and    (off: the point run sync on its
               training (lag, drain)                        total GPUs)
trainer        training, logprob, sync take time       (off: what_if.free_trainer)
=============  =========================================================================

With every factor off an SD step costs one decode step, every response accepts at τ and the RL
step is its generation: the gain is the acceptance ceiling, ≈ τ. With every factor on it is the
plain run's gain, exactly (the same runs).

The ladder adds the factors one at a time in the order above, and splits two of them further
with SD steps of a *flat* cost -- (1 + c·k) decode steps at every batch, `what_if.sd_step_decodes_per_k`,
c read off the cost table at the point's mean active batch B* -- so that what the cost costs at
B* and what the batch's changing size does to it (the long tail at small batch, the full batch
early) show apart: ceiling → draft cost (flat) → verify premium without MoE expert coverage
(flat) → MoE expert coverage (flat; MoE only) → acceptance spread → staleness → batch/tail
dynamics (the real cost table instead of the flat one) → async overlap and drain → trainer bound.
Each rung's factor is its gain ÷ the previous rung's, per replicate, with a 95 % t-interval.

The ladder depends on the order; the Shapley values do not: φᵢ = Σ over coalitions S ∌ i of
|S|!(n − |S| − 1)!/n! · [v(S ∪ {i}) − v(S)], v(S) = log gain with the factors of S on. Exact over
all 2ⁿ coalitions for n ≤ 6 factors, else averaged over `SHAPLEY_PERMUTATIONS` random orders
(fixed seed). They sum to log(realised gain) − log(ceiling) exactly (efficiency), per replicate,
so each exp(φᵢ) is a multiplicative share of the way from the ceiling to the realised gain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from specsim import atomic
from specsim.catalog.models import drafter_kind
from specsim.cost.forward import expected_experts_hit
from specsim.errors import SpecError, load_yaml_text
from specsim.scenario import Scenario, apply_overrides, load_scenario, source_file
from specsim.study.plan import refuse_over_bound, run_tokens
from specsim.study.report.html import plots_of, render_page, write_page
from specsim.study.report.tables import few_replicates_warning, fmt_ci, jsonable, md_text, mean_ci, ratio_ci
from specsim.study.runner import specsim_version
from specsim.study.store import RunFailed, RunStore
from specsim.study.sweep import POINT_ALIASES, RunTask, baseline_of, colocated_hardware, k_of
from specsim.world.resolve import resolve

__all__ = ["FACTORS", "POINT_ALIASES", "Explanation", "Factor", "expert_coverage", "explain", "parse_point", "shapley"]

#: permutations sampled when there are more than SHAPLEY_EXACT_MAX factors
SHAPLEY_PERMUTATIONS = 200
SHAPLEY_EXACT_MAX = 6


@dataclass(frozen=True)
class Factor:
    name: str
    label: str


FACTORS = (
    Factor("draft", "draft cost"),
    Factor("verify", "verify premium"),
    Factor("spread", "acceptance spread"),
    Factor("staleness", "staleness"),
    Factor("async", "async overlap and drain"),
    Factor("trainer", "trainer bound"),
)


def parse_point(text: str | None) -> dict:
    """`k=5,lag=2` (or dotted paths: `speculation.k=5`) as {dotted path: YAML value}, each value
    read by the one YAML loader (YAML 1.2 booleans, bounded integers); a field named twice
    (`k=3,k=5`, or `k=3,speculation.k=5`) is an error, not the last one silently."""


    if not text:
        return {}
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise SpecError("--point", text, "comma-separated name=value pairs, e.g. k=5,lag=2")
        key, value = (s.strip() for s in part.split("=", 1))
        if not key:
            raise SpecError("--point", text, "comma-separated name=value pairs, e.g. k=5,lag=2")
        path = POINT_ALIASES.get(key, key)
        if path in out:
            raise SpecError("--point", text, f"each field once ({path} is named twice)")
        try:
            out[path] = load_yaml_text(value) if value else None
        except (yaml.YAMLError, ValueError) as exc:
            raise SpecError("--point", part, f"name=value with a plain YAML value ({exc.__class__.__name__})") from None
    return out


def applicable_factors(sc: Scenario) -> list[Factor]:
    """The factors this point has: spread needs a heterogeneity, staleness a drafter that drifts,
    async an async pipeline; draft, verify and the trainer are always there."""

    d = sc.drafter
    stale = drafter_kind(d.kind).goes_stale and (d.staleness.tau_after is not None or bool(d.staleness.rate_per_version))
    has = {"draft": True, "verify": True, "spread": d.heterogeneity is not None, "staleness": stale,
           "async": sc.pipeline.mode == "async", "trainer": True}
    return [f for f in FACTORS if has[f.name]]


def _sync_changes(sc: Scenario) -> dict:
    r = sc.rollout
    engine = max(r.tp, r.ep) * r.pp

    return {"pipeline.mode": "sync", "training.gpus": None,
            "rollout.gpus": max(engine, (sc.total_gpus // engine) * engine), **colocated_hardware(sc)}


def variant_overrides(sc: Scenario, on: frozenset[str], *, flat_c: float | None = None,
                      coverage_off: bool = False) -> dict:
    """The dotted overrides of the variant with the factors in `on` present (the rest off).
    `flat_c`: the SD step at a flat (1 + c·k) decode steps instead of the draft/verify factors;
    `coverage_off`: the verify reads the experts a decode hits (what_if.verify_experts_as_decode)."""
    ov: dict = {}
    has = {f.name for f in applicable_factors(sc)}   # a factor the point lacks is never switched off
    if flat_c is not None:
        ov["what_if.sd_step_decodes_per_k"] = float(flat_c)
    else:
        if "draft" not in on:
            ov["what_if.free_drafting"] = True
        if "verify" not in on:
            ov["what_if.verify_as_decode"] = True
        elif coverage_off:
            ov["what_if.verify_experts_as_decode"] = True
    if "spread" not in on and "spread" in has:
        ov["what_if.no_acceptance_spread"] = True
    if "staleness" not in on and "staleness" in has:
        ov["what_if.no_staleness"] = True
    if "trainer" not in on:
        ov["what_if.free_trainer"] = True
    if "async" not in on and "async" in has:
        ov.update(_sync_changes(sc))
    return ov


def _baseline_overrides(sc: Scenario, ov: dict) -> dict:
    """What of a variant's overrides reaches its AR baseline: the trainer and the pipeline mode."""
    keep = ("what_if.free_trainer", "pipeline.mode", "training.gpus", "rollout.gpus", "hardware", "rollout.hardware",
            "training.hardware")   # a mixed point made colocated: on one profile (sweep.colocated_hardware)
    return {k: v for k, v in ov.items() if k in keep}


# ============================================================================ Shapley
def shapley(names: Sequence[str], value: Callable[[frozenset], np.ndarray], *,
            permutations: int = SHAPLEY_PERMUTATIONS, seed: int = 0) -> dict[str, np.ndarray]:
    """Shapley values of `names` for the coalition value `value(S)` (an array: one value per
    replicate, all of one shape). Exact over every subset for ≤ SHAPLEY_EXACT_MAX names, else
    averaged over `permutations` random orders (fixed seed). Efficiency holds exactly either way:
    Σᵢ φᵢ = v(all) − v(∅)."""
    names = list(names)
    n = len(names)
    cache: dict[frozenset, np.ndarray] = {}

    def v(s: frozenset) -> np.ndarray:
        if s not in cache:
            cache[s] = np.asarray(value(s), dtype=float)
        return cache[s]

    phi = {i: 0.0 for i in names}
    if n <= SHAPLEY_EXACT_MAX:
        for i in names:
            rest = [j for j in names if j != i]
            for size in range(n):
                w = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                for sub in itertools.combinations(rest, size):
                    s = frozenset(sub)
                    phi[i] = phi[i] + w * (v(s | {i}) - v(s))
        return phi
    rng = np.random.default_rng(seed)
    for _ in range(permutations):
        order = list(rng.permutation(names))
        s: frozenset = frozenset()
        for i in order:
            phi[i] = phi[i] + (v(s | {i}) - v(s)) / permutations
            s = s | {i}
    return phi


# ============================================================================ costs at the batch
def expert_coverage(experts: int, top_k: int, tokens) -> np.ndarray:
    """Expected distinct experts E·(1 − (1 − top_k/E)^T) that T routed tokens touch (cost/forward.py)."""

    return np.asarray(expected_experts_hit(experts, top_k, np.asarray(tokens, dtype=float)), dtype=float)


def _table_ratio(table, k: int, batch: float, ctx_per_seq: float) -> float:
    """SD step ÷ decode step at batch B and context B·ctx_per_seq (StepCostTable.sd_over_decode)."""
    return table.sd_over_decode(k, batch, ctx_per_seq)


# ============================================================================ runs
@dataclass
class Explanation:
    """What `explain` found: the point, its ladder and Shapley attribution with intervals, the
    costs at the point's batch, and every variant's per-replicate gains."""

    scenario: str
    point: dict
    k: int
    tau: float
    replicates: int
    steps: int
    batch: float
    ladder: list[dict]
    shapley: list[dict]
    at_batch: dict
    realised: dict
    ceiling: dict
    variants: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    runs: int = 0                 # pipeline runs the ladder and the attribution took
    computed_runs: int = 0        # of them, simulated by this call (the rest reused from its store)
    reused_runs: int = 0

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "point": self.point, "k": self.k, "tau": self.tau,
                "replicates": self.replicates, "steps": self.steps, "mean_active_batch": self.batch,
                "ladder": self.ladder, "shapley": self.shapley, "at_batch": self.at_batch,
                "realised": self.realised, "ceiling": self.ceiling, "notes": self.notes, "pipeline_runs": self.runs,
                "computed_runs": self.computed_runs, "reused_runs": self.reused_runs,
                "what_if": "every variant but the last rung is a counterfactual (scenario what_if:)"}


class _Runner:
    """Runs variants (SD point + its AR baseline per replicate) once each, in parallel, through a
    run store (study/store.RunStore: kept in the output folder's runs/ and reused from there, so
    an interrupted `explain` resumes and a rerun simulates nothing)."""

    def __init__(self, sc: Scenario, replicates: int, jobs: int, store: RunStore | None = None):
        self.sc, self.replicates, self.jobs = sc, replicates, jobs
        self.store = store if store is not None else RunStore()
        self.keys: set[str] = set()      # the runs this ladder uses
        self._counts0 = (self.store.computed, self.store.reused)   # a shared store counts other runs too

    @property
    def computed(self) -> int:
        return self.store.computed - self._counts0[0]

    @property
    def reused(self) -> int:
        return self.store.reused - self._counts0[1]

    def _tasks(self, ov: dict) -> tuple[list[RunTask], list[RunTask]]:

        sd = apply_overrides(self.sc, ov) if ov else self.sc
        ar = baseline_of(apply_overrides(self.sc, _baseline_overrides(self.sc, ov)) if ov else self.sc)
        for x in (sd, ar):
            x._source_file = source_file(self.sc)
        return ([RunTask.of(sd, r, "point") for r in range(self.replicates)],
                [RunTask.of(ar, r, "baseline") for r in range(self.replicates)])

    def has(self, ov: dict) -> bool:
        return all(t.key in self.store for t in itertools.chain(*self._tasks(ov)))

    def run_all(self, variants: list[dict]) -> None:
        tasks = [t for ov in variants for t in itertools.chain(*self._tasks(ov))]
        self.keys.update(t.key for t in tasks)
        try:
            self.store.results(tasks, jobs=self.jobs, must_run=True)
        except RunFailed as exc:
            raise SpecError("explain", exc.task.doc.get("name"), f"a variant that can run: {exc.error}") from None

    def gains(self, ov: dict) -> np.ndarray:
        sd, ar = self._tasks(ov)
        runs = self.store.runs
        return np.array([runs[b.key]["steady"]["step_s"] / runs[s.key]["steady"]["step_s"] for s, b in zip(sd, ar)])

    def steady(self, ov: dict, key: str) -> np.ndarray:
        sd, _ = self._tasks(ov)
        return np.array([self.store.runs[s.key]["steady"][key] for s in sd])


def _ci(values) -> dict:
    """The interval of a gain or a ratio of gains: on the log scale (tables.ratio_ci), positive."""

    return ratio_ci(list(np.asarray(values, float)))


def _log_ci(values) -> dict:
    """The interval of a log gain (either sign): the plain t-interval."""

    return mean_ci(list(np.atleast_1d(np.asarray(values, float))), floor=None)


def explain(path: str | Path, overrides: Sequence[str] = (), *, point: str | None = None,
            replicates: int | None = None, steps: int | None = None, jobs: int = 2,
            store: RunStore | None = None) -> Explanation:
    """The ladder and Shapley attribution of one point of a scenario (module docstring). `store`:
    where its runs are kept and reused (study/store.RunStore: `specsim explain`'s output folder,
    or the results folder of the run that asks for the ladder; None: in memory).

    Phase 1 runs the plain point and every coalition of factors (the plain run's batch B* sets the
    flat costs of the first rungs); phase 2 the rungs; the Shapley attribution reuses phase 1's runs."""

    sc, reps, k = _explained_scenario(path, overrides, point, replicates, steps)
    world = resolve(sc)
    _refuse_fill_steps(world, steps)
    tau = float(world.acceptance.tau(k))
    factors = applicable_factors(sc)
    names = [f.name for f in factors]
    run = _Runner(sc, reps, jobs, store)

    # ---- phase 1: the plain run (its batch sets the flat costs) and every coalition
    coalitions = [frozenset(s) for size in range(len(names) + 1) for s in itertools.combinations(names, size)] \
        if len(names) <= SHAPLEY_EXACT_MAX else [frozenset(), frozenset(names)]
    refuse_over_bound(sc, 2 * reps * (len(coalitions) + len(names) + 4), run_tokens(world),
                      "this explanation (an SD and an AR run per variant and replicate)", "--replicates or --steps")
    run.run_all([variant_overrides(sc, s) for s in coalitions])
    batch = float(np.mean(run.steady({}, "mean_active_batch")))
    w = sc.workload
    ctx = float(world.prompt_dist.mean_tokens(w.max_prompt_tokens) + 0.5 * world.response_dist.mean_tokens(
        w.max_response_tokens))

    def flat_c(table) -> float:
        return max(0.0, (_table_ratio(table, k, batch, ctx) - 1.0) / k)

    def what_if_table(field: str):
        return resolve(apply_overrides(sc, {field: True})).table

    moe = world.model.moe is not None
    flat = _FlatCosts(draft=flat_c(what_if_table("what_if.verify_as_decode")),
                      rest=flat_c(what_if_table("what_if.verify_experts_as_decode")) if moe else None,
                      full=flat_c(world.table))

    # ---- phase 2: the rungs
    rungs = _rungs(sc, names, flat)
    run.run_all([ov for _, _, ov in rungs])
    ladder = _ladder(run, rungs)
    realised = run.gains({})
    ceiling = run.gains(variant_overrides(sc, frozenset()))

    # ---- Shapley over the factors, per replicate (log gains)
    def value(s: frozenset) -> np.ndarray:
        ov = variant_overrides(sc, s)
        if ov and not run.has(ov):
            run.run_all([ov])
        return np.log(run.gains(ov))

    phi = shapley(names, value)
    total = np.log(realised) - np.log(ceiling)
    shap = [{"factor": f.name, "label": f.label, "log_share": _log_ci(phi[f.name]),
             "factor_ratio": _ci(np.exp(phi[f.name])),
             "values": [float(x) for x in np.atleast_1d(phi[f.name])]} for f in factors]
    at = _costs_at_batch(world, k, tau, batch, ctx, flat)
    return Explanation(sc.name, {**parse_point(point)}, k, tau, reps, sc.pipeline.steps, batch, ladder, shap, at,
                       _ci(realised), _ci(ceiling), {"total_log_gain": [float(x) for x in total]},
                       _notes(sc, reps, names), len(run.keys), run.computed, run.reused)


@dataclass(frozen=True)
class _FlatCosts:
    """The flat SD step costs of the first rungs, in decodes per drafted token at the plain run's
    batch B*: the draft alone (verify priced as a decode), the verify without MoE expert coverage
    (None for a dense model) and the full step."""

    draft: float
    rest: float | None
    full: float


def _explained_scenario(path: str | Path, overrides: Sequence[str], point: str | None, replicates: int | None,
                        steps: int | None) -> tuple[Scenario, int, int]:
    """(the point's scenario, replicates, its k): the scenario at `point` with its sweep off and
    `steps` applied; SpecError for bad options, a what-if already on, or a point that does not
    speculate."""
    if replicates is not None and not 1 <= int(replicates) <= 100:
        raise SpecError("--replicates", replicates, "in [1, 100]")
    if steps is not None and not 2 <= int(steps) <= 10000:
        raise SpecError("--steps", steps, "in [2, 10000]")
    sc0 = load_scenario(path, list(overrides))
    reps = int(replicates or sc0.sweep.get("replicates", 1) or 1)
    sets = {"sweep": {}, **parse_point(point)}
    if steps is not None:
        sets["pipeline.steps"] = int(steps)
        sets["pipeline.warmup_steps"] = min(sc0.pipeline.warmup_steps, int(steps) - 1)
    sc = apply_overrides(sc0, sets)
    if sc.what_ifs:
        raise SpecError(sc.what_ifs[0], True, "off in the scenario `explain` explains (it turns the what-ifs on itself)")
    k = k_of(sc)
    if k == 0:
        raise SpecError("--point", point, "a point that speculates (k > 0; AR has nothing to explain)")
    return sc, reps, k


def _refuse_fill_steps(world, steps: int | None) -> None:
    """A fill step's time can be 0 in an idealised rung (no gain to divide by): the ladder needs a
    steady step beyond the async pipeline's fill."""
    ps = world.pipeline
    if ps.steady_includes_fill:
        raise SpecError("--steps" if steps is not None else "pipeline.steps", ps.steps,
                        f"at least {ps.fill_steps + 1} for `explain` at policy_lag {ps.policy_lag}: its ladder "
                        f"compares steady steps, and steps 0-{ps.fill_steps - 1} are the async pipeline's fill")


def _rungs(sc: Scenario, names: list[str], flat: _FlatCosts) -> list[tuple[str, str, dict]]:
    """The ladder's rungs, (name, label, overrides) from the acceptance ceiling to the plain run:
    draft and verify cost (flat at B*; MoE: the verify's expert coverage apart), spread and
    staleness (those that apply), the batch/tail dynamics, async overlap (async points), trainer."""
    everything = frozenset(names)
    before_batch = everything - {"async", "trainer"}
    base_off = frozenset()
    rungs: list[tuple[str, str, dict]] = [("ceiling", ("acceptance ceiling (SD step = 1 decode, no spread, no "
                                                      "staleness, free trainer, sync)"), variant_overrides(sc, base_off))]
    rungs.append(("draft", "draft cost (flat at B*)", variant_overrides(sc, base_off, flat_c=flat.draft)))
    if flat.rest is not None:
        rungs.append(("verify_rest", "verify premium without MoE expert coverage (flat at B*)",
                      variant_overrides(sc, base_off, flat_c=flat.rest)))
        rungs.append(("coverage", "MoE expert coverage of the verify (flat at B*)",
                      variant_overrides(sc, base_off, flat_c=flat.full)))
    else:
        rungs.append(("verify", "verify premium (flat at B*)", variant_overrides(sc, base_off, flat_c=flat.full)))
    have = set()
    for name, label in (("spread", "acceptance spread"), ("staleness", "staleness")):
        if name in names:
            have.add(name)
            rungs.append((name, label + " (flat cost at B*)", variant_overrides(sc, frozenset(have), flat_c=flat.full)))
    rungs.append(("batch_tail", "batch/tail dynamics (the real cost table at every batch)",
                  variant_overrides(sc, before_batch)))
    if "async" in names:
        rungs.append(("async", "async overlap and drain", variant_overrides(sc, before_batch | {"async"})))
    rungs.append(("trainer", "trainer bound (= the plain run)", variant_overrides(sc, everything)))
    return rungs


def _ladder(run: _Runner, rungs: list[tuple[str, str, dict]]) -> list[dict]:
    """Each rung's gain and its factor over the rung below (per replicate, with intervals)."""
    ladder = []
    prev = None
    for name, label, ov in rungs:
        g = run.gains(ov)
        ladder.append({"rung": name, "label": label, "gain": _ci(g), "factor": None if prev is None else _ci(g / prev),
                       "gains": [float(x) for x in g],
                       "what_if": ";".join(f"{k}={v}" for k, v in ov.items())})
        prev = g
    return ladder


def _costs_at_batch(world, k: int, tau: float, batch: float, ctx: float, flat: _FlatCosts) -> dict:
    """The SD step's cost at the point's batch and context: SD step ÷ decode step, the per-token
    gain τ ÷ that ratio, the flat costs, and (MoE) the experts a decode and a verify touch."""
    table = world.table
    b_int = max(1, round(batch))
    at = {"mean_active_batch": batch, "context_per_seq_tokens": ctx,
          "sd_over_decode_step": _table_ratio(table, k, batch, ctx),
          "per_token_sd_gain": tau / _table_ratio(table, k, batch, ctx),
          "flat_decodes_per_k": {"draft": flat.draft, "verify_without_coverage": flat.rest, "full": flat.full}}
    if world.model.moe is not None:
        m = world.model.moe
        at["experts"] = {"experts": m.experts, "top_k": m.top_k,
                         "decode": {str(b): float(expert_coverage(m.experts, m.top_k, b)) for b in (1, 4, 8, b_int)},
                         "verify": {str(b): float(expert_coverage(m.experts, m.top_k, (k + 1) * b)) for b in (1, 4, 8, b_int)}}
    return at


def _notes(sc: Scenario, reps: int, names: list[str]) -> list[str]:
    """What the reader should know: too few replicates for intervals, what `async off` means."""
    notes = []
    if reps < 2:
        notes.append("one replicate: no intervals (--replicates N, N >= 3)")

    few = few_replicates_warning(reps)
    if few:
        notes.append(few)
    if "async" in names:
        notes.append("async off = the point run synchronously (colocated) on its total GPUs"
                     + (f", all on the rollout profile ({sc.rollout_hardware})" if sc.mixed_hardware else ""))
    return notes


# ============================================================================ outputs
def _fmt(m: dict | None, digits: int = 2) -> str:
    """A mean with its interval, as the run's summary prints it (study/report/tables.fmt_ci)."""

    return fmt_ci(m, digits)


def ladder_rows(e: Explanation) -> list[dict]:
    """ladder.csv: one row per rung (gain and rung factor, mean and 95 % interval)."""
    out = []
    for r in e.ladder:
        g, f = r["gain"], r["factor"] or {}
        out.append({"rung": r["rung"], "label": r["label"], "gain": g["mean"],
                    "gain_lo": (g.get("ci95") or [None, None])[0], "gain_hi": (g.get("ci95") or [None, None])[1],
                    "factor": f.get("mean"), "factor_lo": (f.get("ci95") or [None, None])[0],
                    "factor_hi": (f.get("ci95") or [None, None])[1], "replicates": g["n"], "what_if": r["what_if"]})
    return out


def shapley_rows(e: Explanation) -> list[dict]:
    out = []
    for s in e.shapley:
        f = s["factor_ratio"]
        out.append({"factor": s["factor"], "label": s["label"], "log_share": s["log_share"]["mean"],
                    "factor_ratio": f["mean"], "lo": (f.get("ci95") or [None, None])[0],
                    "hi": (f.get("ci95") or [None, None])[1]})
    return out


def explanation_markdown(e: Explanation) -> str:
    """The ladder and the attribution as Markdown (explain.md)."""

    pt = md_text(", ".join(f"{k}={v}" for k, v in e.point.items())) or "the scenario as given"
    L = [f"# {md_text(e.scenario)}: where the speedup goes ({pt})", "",
         (f"k = {e.k}, τ = {e.tau:.2f}; {e.replicates} paired replicate(s) × {e.steps} steps; mean active batch "
         f"B* = {e.batch:.2f} sequences per engine. Every rung but the last is a counterfactual "
         "(scenario `what_if:`); intervals are 95 % t-intervals over paired replicates."), "",
         "| rung | SD gain (×) | rung factor (×) |", "|---|---|---|"]
    for r in e.ladder:
        L.append(f"| {r['label']} | {_fmt(r['gain'])} | {_fmt(r['factor'], 3) if r['factor'] else '—'} |")
    L += ["", ("Order-independent attribution (Shapley values over the factors; their product is realised ÷ ceiling "
          f"= {math.exp(np.mean(e.variants['total_log_gain'])):.3f}):"), "", "| factor | share (×) |", "|---|---|"]
    for s in e.shapley:
        L.append(f"| {s['label']} | {_fmt(s['factor_ratio'], 3)} |")
    a = e.at_batch
    L += ["", (f"At B* = {a['mean_active_batch']:.2f}: an SD step costs {a['sd_over_decode_step']:.2f} decode steps, "
          f"so the per-token SD gain there is τ ÷ that = {a['per_token_sd_gain']:.2f}× (realised: "
          f"{_fmt(e.realised)}×).")]
    if "experts" in a:
        x = a["experts"]
        dec = " / ".join(f"{v:.0f}" for v in x["decode"].values())
        ver = " / ".join(f"{v:.0f}" for v in x["verify"].values())
        L.append(f"MoE expert coverage ({x['experts']} experts, top-{x['top_k']}): a decode of B = "
                 f"{' / '.join(x['decode'])} tokens touches {dec} experts, a verify of (k + 1)·B tokens {ver}.")
    L += [""] + [f"- note: {n}" for n in e.notes]
    return "\n".join(L) + "\n"


#: each rung as a reader names it on the waterfall's axis (ladder.csv keeps the code name in `rung`)
RUNG_NAMES = {"ceiling": "acceptance ceiling\n(τ tokens per step)", "draft": "+ drafting cost",
              "verify": "+ verifying cost", "verify_rest": "+ verifying cost\n(dense part)",
              "coverage": "+ experts the\nverify wakes (MoE)", "spread": "+ acceptance varies\nby sequence",
              "staleness": "+ drafter goes\nstale", "batch_tail": "+ real batch sizes\nand the long tail",
              "async": "+ async overlap\nand drain", "trainer": "+ trainer bound\n= realised gain"}
#: the gains the waterfall's log axis labels (those inside its range)
GAIN_TICKS = (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)


def waterfall(stem: Path, e: Explanation) -> str:
    """The ladder as a waterfall on a log axis: the ceiling, one floating bar per rung (dark where it
    lowers the gain, hatched where it raises it), the realised gain; whiskers: the rung gains' 95 %
    intervals; each gain is written past its whisker (below a rung that lowers the gain, above one
    that raises it), so no label sits on a bar or a whisker."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter


    data = pd.DataFrame(ladder_rows(e))
    fig = Figure(figsize=(1.6 + 1.05 * len(data), 4.8), layout="constrained")
    ax = fig.subplots()
    prev = None
    for i, r in data.iterrows():
        g = float(r["gain"])
        if prev is None:
            ax.bar(i, g, color="0.85", edgecolor="black", label="ceiling")
        else:
            lo, hi = sorted((prev, g))
            ax.bar(i, hi - lo, bottom=lo, color="0.35" if g < prev else "0.9", edgecolor="black",
                   hatch="" if g < prev else "//")
            ax.plot([i - 1.4, i + 0.4], [prev, prev], color="0.5", lw=0.7, ls=":")
        lo_w = hi_w = g
        if r["gain_lo"] is not None and np.isfinite(r["gain_lo"]):
            ax.errorbar(i, g, yerr=[[g - r["gain_lo"]], [r["gain_hi"] - g]], color="black", capsize=3, lw=1)
            lo_w, hi_w = float(r["gain_lo"]), float(r["gain_hi"])
        if prev is not None and g < prev:     # past the whisker, but never more than ×1.5 from the gain
            ax.text(i, max(lo_w, g / 1.5) / 1.03, f"{g:.2f}×", ha="center", va="top", fontsize=8)
        else:
            ax.text(i, min(hi_w, g * 1.5) * 1.03, f"{g:.2f}×", ha="center", va="bottom", fontsize=8)
        prev = g
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_yscale("log")
    lo_y, hi_y = ax.get_ylim()
    ax.set_yticks([t for t in GAIN_TICKS if lo_y <= t <= hi_y])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    ax.set_xticks(range(len(data)), [RUNG_NAMES.get(str(x), str(x)) for x in data["rung"]], rotation=30, ha="right",
                  fontsize=8)
    ax.set_ylabel("SD gain: baseline step ÷ SD step (×, log)")
    pt = ", ".join(f"{k}={v}" for k, v in e.point.items())
    ax.set_title(f"{e.scenario}{' (' + pt + ')' if pt else ''}: from the acceptance ceiling to the realised gain\n"
                 f"k = {e.k}, τ = {e.tau:.2f}, {e.replicates} replicate(s)"
                 + ("; few replicates: wide intervals" if few_replicates_warning(e.replicates) else "")
                 + "; dark: a rung that costs gain", fontsize=9)
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(stem.with_suffix(".csv"), data)
    atomic.save_figure(stem.with_suffix(".png"), fig, dpi=110, bbox_inches="tight")
    return str(stem.with_suffix(".png"))


def write_explanation(out_dir: Path, e: Explanation) -> list[str]:
    """explain.md, explain.json, ladder.csv, shapley.csv and waterfall.png (+ its CSV) in out_dir."""


    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(out_dir / "ladder.csv", pd.DataFrame(ladder_rows(e)))
    atomic.write_csv(out_dir / "shapley.csv", pd.DataFrame(shapley_rows(e)))
    atomic.write_json(out_dir / "explain.json", jsonable(e.as_dict()))
    md = explanation_markdown(e)
    atomic.write_text(out_dir / "explain.md", md)
    png = waterfall(out_dir / "waterfall", e)
    html = write_page(out_dir, render_page(
        title=f"{e.scenario}: where the SD gain goes", lede=f"Point {e.point or 'the scenario'}, k = {e.k}, "
        f"{e.replicates} paired replicate(s) of {e.steps} steps, on common random draws.",
        caveat_list=[("Every rung but the last is a counterfactual (a what-if: an idealised cost or a switched-off "
                     "mechanism), not a prediction; only the last rung is the simulated gain of the scenario."),
                     *e.notes],
        summary_md=md, plots=plots_of(out_dir, {"waterfall": "waterfall.png"},
                                      {"waterfall": "The ladder from the acceptance ceiling to the realised gain"}),
        table=pd.DataFrame(ladder_rows(e)), rows_note="The ladder (ladder.csv).", resolved_yaml="",
        provenance={"specsim": specsim_version(), "scenario": e.scenario}))
    return [str(out_dir / n) for n in ("explain.md", "explain.json", "ladder.csv", "shapley.csv")] + [png, str(html)]
