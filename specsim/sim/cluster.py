"""Many rollout engines (data-parallel replicas) and the dispatch of GRPO groups to them.

One generation phase: every response of every prompt of one RL step, dispatched group by group
to `world.engines` engines; the phase ends when the last engine finishes.

Common random numbers. `draw_step` draws everything random about an RL step — prompt lengths,
response lengths (GRPO groups, growth), one uniform per response that fixes its acceptance
quantile, and the engines' noise seeds — from a stream keyed only by (seed, step). AR and every
SD variant of the same step therefore see the same responses, so speedups are paired. Per-sequence
acceptance α_i = Beta⁻¹(u_i; mean α of the drafter at that policy version, concentration), a
monotone coupling: a more predictable response stays more predictable as the drafter drifts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from specsim.policy import PolicyContext, SDPolicy
from specsim.sim.common import EngineConfig, EngineResult, EngineWork, conditional_tau, last_finishers_tau
from specsim.sim.engine.loop import run_fast
from specsim.sim.fastlaw import step_law
from specsim.sim.fleet.loop import run_fleet_closed
from specsim.sim.fleet.state import FleetWork, stable_order
from specsim.sim.progress import Ticker
from specsim.sim.reference import run_reference
from specsim.sim.select import pick_engine
from specsim.workload.acceptance.laws import alpha_from_tau, beta_ppf
from specsim.workload.lengths import growth_factor, sample_group_lengths, sample_prompt_lengths
from specsim.world.specs import World


@dataclass(frozen=True)
class StepDraw:
    """The random inputs of one RL step's generation, shared by every variant."""

    step: int
    prompt_tokens: np.ndarray     # (prompts,)
    response_tokens: np.ndarray   # (prompts, group)
    alpha_quantiles: np.ndarray   # (prompts·group,) uniforms in (0, 1)
    engine_seed: int
    #: what the draw is a function of (draw_step's cache key); None for a draw made elsewhere
    key: tuple | None = field(default=None, compare=False, repr=False)

    @property
    def n_responses(self) -> int:
        return int(self.response_tokens.size)


#: the most responses draw_step keeps drawn in one process, newest kept: about 42 bytes each with
#: what the stream keeps with them (sim/stream.py: noise, grid positions, engine sort), ~130 MB at
#: most; the main job's 3 replicates × 12 RL steps × 65,536 responses fit
DRAW_CACHE_RESPONSES = 3 << 20
_DRAWS: OrderedDict[tuple, tuple[StepDraw, dict]] = OrderedDict()


def draw_step(world: World, step: int, replicate: int = 0) -> StepDraw:
    """Step `step`'s random inputs (module docstring). A function of the workload spec, the two
    length distributions, `step` and `replicate` only, so one process keeps the draws it made
    (`DRAW_CACHE_RESPONSES`): a sweep's points and baselines of one replicate draw each step once
    (its arrays are read-only: every run shares them)."""
    w = world.workload
    key = (w, world.prompt_dist, world.response_dist, int(step), int(replicate))
    hit = _DRAWS.get(key)
    if hit is not None:
        _DRAWS.move_to_end(key)
        return hit[0]
    rng = np.random.default_rng([w.seed, replicate, step, 0x5EED])
    prompts = sample_prompt_lengths(world.prompt_dist, rng, w.prompts, w.max_prompt_tokens)
    growth = float(growth_factor(step, w.length_growth_per_step))
    lengths = sample_group_lengths(world.response_dist, rng, w.prompts, w.group_size, w.max_response_tokens,
                                   w.group_correlation, growth)
    u = rng.random(lengths.size)
    u = np.clip(u, 1e-12, 1 - 1e-12)
    for a in (prompts, lengths, u):
        a.flags.writeable = False
    draw = StepDraw(step, prompts, lengths, u, int(rng.integers(2**62)), key)
    _DRAWS[key] = (draw, {})
    held = sum(d.n_responses for d, _ in _DRAWS.values())
    while held > DRAW_CACHE_RESPONSES and len(_DRAWS) > 1:
        held -= _DRAWS.popitem(last=False)[1][0].n_responses
    return draw


def forget_draws() -> None:
    """Drop every draw draw_step keeps (and what was kept with it): the next runs draw afresh."""
    _DRAWS.clear()


def step_memo(draw: StepDraw) -> dict:
    """A dict kept with a cached draw for what is computed from it alone and the same in every
    run that draws it (the dispatch of its groups, their engine order, the step's noise): a fresh
    empty dict for a draw that is not (or no longer) cached."""
    hit = _DRAWS.get(draw.key) if draw.key is not None else None
    return hit[1] if hit is not None and hit[0] is draw else {}


#: the acceptance-quantile grid (logit-spaced) on which the Beta quantile function and the
#: steps-to-finish laws are tabulated
_GRID_X0, _GRID_H = -28.0, 56.0 / 4096      # GRID_U is uniform in logit(u): x0 + h·i, i = 0 .. 4096
GRID_U = 1.0 / (1.0 + np.exp(-np.linspace(_GRID_X0, -_GRID_X0, 4097)))


def _beta_quantiles(mean_alpha: float, concentration: float) -> np.ndarray:
    a, b = mean_alpha * concentration, (1.0 - mean_alpha) * concentration
    return beta_ppf(GRID_U, a, b)



def sequence_alpha_fn(mean_alpha: float, concentration: float | None):
    """u ↦ α: the Beta(mean α, concentration) quantile function, as a vectorized callable (all
    sequences at mean α when there is no heterogeneity)."""
    if concentration is None or mean_alpha <= 0.0:
        return lambda u: np.full(np.shape(u), float(mean_alpha))
    # the Beta quantile function on a logit-spaced grid of u, interpolated (|error| < 1e-4 in α;
    # scipy's ppf on every response would dominate a 65k-response step)
    grid_a = _beta_quantiles(mean_alpha, concentration)
    return lambda u: np.clip(np.interp(u, GRID_U, grid_a), 0.0, 1.0 - 1e-12)


class QuantileLaws:
    """A response's acceptance α and its steps-to-finish laws (fastlaw.step_law at every draft
    length k > 0 of the policy) as functions of its acceptance quantile u, at one mean acceptance.
    Both are smooth in u, so they are tabulated once on GRID_U (4,097 points) and interpolated
    linearly for every response, one searchsorted shared by all columns — instead of the pmf of
    every response at every weight switch. Invariant: at a grid point the values are step_law's;
    between points the error is second order in the spacing (about 1e-6 relative), far below the
    steps-to-finish noise."""

    def __init__(self, mean_alpha: float, concentration: float | None, ks, decay: float, tree_for,
                 proposal_rate: float):
        self.ks = tuple(k for k in ks if k > 0)
        self.flat = concentration is None or mean_alpha <= 0.0
        grid_a = (np.array([float(mean_alpha)]) if self.flat
                  else np.clip(_beta_quantiles(mean_alpha, concentration), 0.0, 1.0 - 1e-12))
        rows = [grid_a]
        for k in self.ks:
            lw = step_law(grid_a, k, decay, tree_for(k), proposal_rate)
            rows += [lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1]
        self.table = np.vstack(rows)          # (1 + 5 per k, grid)
        self.slope = np.diff(self.table, axis=1) if not self.flat else None   # per grid cell

    def __call__(self, u: np.ndarray, at: GridPosition | None = None) -> tuple[np.ndarray, dict]:
        """(α of each u, {k: (mu, inv_mu, offset, sd1, skew1)} of each u). `at`: grid_position(u),
        when the caller keeps it (a response's u never changes, the table does with the version)."""
        u = np.asarray(u, dtype=float)
        if self.flat:
            vals = np.repeat(self.table, len(u), axis=1)
        else:
            at = grid_position(u) if at is None else at
            i = np.asarray(at.i, dtype=np.intp)     # one conversion: a 1-D gather by an intp index is numpy's fast path
            vals = np.empty((len(self.table), len(u)))
            for r, (row, slope) in enumerate(zip(self.table, self.slope)):     # row by row: 4× the 2-D gather's speed
                np.multiply(slope[i], at.w, out=vals[r])
                vals[r] += row[i]
        laws = {k: tuple(vals[1 + 5 * j:6 + 5 * j]) for j, k in enumerate(self.ks)}
        return vals[0], laws


@dataclass(frozen=True)
class GridPosition:
    """Where acceptance quantiles fall on GRID_U: the cell i (GRID_U[i] <= u <= GRID_U[i + 1])
    and the linear weight w within it."""

    i: np.ndarray
    w: np.ndarray

    def take(self, idx: np.ndarray) -> GridPosition:
        return GridPosition(self.i[idx], self.w[idx])


def grid_position(u: np.ndarray) -> GridPosition:
    """GridPosition of quantiles u: the cell i = searchsorted(GRID_U, u) − 1 (clipped to the
    grid), found without a search. GRID_U is uniform in logit(u), so the cell is
    ⌊(logit u − x₀)/h⌋ up to rounding; one comparison with each neighbouring grid point corrects
    it to exactly the searchsorted cell."""
    u = np.asarray(u, dtype=float)
    n = len(GRID_U)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(u) - np.log1p(-u)
    c = np.floor(np.clip((x - _GRID_X0) / _GRID_H, -1.0, n - 1.0)) + 1.0    # searchsorted's answer, ±1
    c = np.where(np.isnan(c), n, c).astype(np.int64)                       # NaN u sorts last
    c -= (c > 0) & (GRID_U[np.maximum(c - 1, 0)] >= u)
    c += (c < n) & (GRID_U[np.minimum(c, n - 1)] < u)
    i = np.clip(c - 1, 0, n - 2)
    return GridPosition(i, (u - GRID_U[i]) / (GRID_U[i + 1] - GRID_U[i]))


_LAW_TABLES: dict = {}
_LAW_TABLES_MAX = 256


def quantile_laws(mean_alpha: float, concentration: float | None, ks, decay: float, tree_for,
                  proposal_rate: float) -> QuantileLaws:
    """QuantileLaws, cached per (mean acceptance, concentration, draft lengths, decay, trees,
    proposal rate): every version at the same drafter staleness, every replicate and every point
    of a sweep that shares the drafter reuses one table (a table is ~100 KB; the cache keeps the
    most recent 256)."""
    ks = tuple(int(k) for k in ks)
    key = (float(mean_alpha), concentration, ks, float(decay), tuple(tree_for(k) for k in ks), float(proposal_rate))
    try:
        hit = _LAW_TABLES.get(key)
    except TypeError:          # an unhashable tree: no caching
        return QuantileLaws(mean_alpha, concentration, ks, decay, tree_for, proposal_rate)
    if hit is None:
        if len(_LAW_TABLES) >= _LAW_TABLES_MAX:
            _LAW_TABLES.pop(next(iter(_LAW_TABLES)))
        hit = _LAW_TABLES[key] = QuantileLaws(mean_alpha, concentration, ks, decay, tree_for, proposal_rate)
    return hit


def exact_laws(alphas: np.ndarray, ks, decay: float, tree_for, proposal_rate: float) -> dict:
    """{k: (mu, inv_mu, offset, sd1, skew1)}: fastlaw.step_law of every response (as fast_v1 keys)."""
    out = {}
    for k in ks:
        if k > 0:
            lw = step_law(alphas, k, decay, tree_for(k), proposal_rate)
            out[k] = (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)
    return out


def step_noise(draw: StepDraw, order: np.ndarray, eng_sorted: np.ndarray, *, per_engine: bool = False) -> np.ndarray:
    """The fleet engine's noise for one RL step (one standard normal per response; `order`: the
    step's responses sorted by engine, `eng_sorted` their engines), aligned with `order`. One
    stream per step, indexed by response; `per_engine`: one stream per engine, the per-engine fast
    engine's (sim/select.py's "fleet_v1_inputs")."""
    if not per_engine:
        return np.random.default_rng([draw.engine_seed, 0xF1EE7]).standard_normal(draw.n_responses)[order]
    counts = np.bincount(eng_sorted) if len(eng_sorted) else np.zeros(0, dtype=np.int64)
    parts = [np.random.default_rng([draw.engine_seed, e]).standard_normal(int(c))
             for e, c in enumerate(counts.tolist()) if c]
    return np.concatenate(parts) if parts else np.zeros(0)


def sequence_alphas(mean_alpha: float, concentration: float | None, quantiles: np.ndarray) -> np.ndarray:
    return sequence_alpha_fn(mean_alpha, concentration)(quantiles)


def dispatch(world: World, draw: StepDraw) -> np.ndarray:
    """Engine index of each group. round_robin: group g → g mod E. least_loaded: each group goes
    to the engine with the fewest prompt+group tokens assigned so far that the dispatcher can see
    (prompt tokens × group size; it cannot see response lengths in advance)."""
    n_groups = len(draw.prompt_tokens)
    E = world.engines
    if world.rollout.dispatch == "round_robin":
        return np.arange(n_groups) % E
    load = np.zeros(E)
    out = np.empty(n_groups, dtype=np.int64)
    size = draw.response_tokens.shape[1]
    for g in range(n_groups):
        e = int(np.argmin(load))
        out[g] = e
        load[e] += draw.prompt_tokens[g] * size + 1
    return out


@dataclass
class GenerationResult:
    """One generation phase over the whole rollout pool."""

    rollout_s: float
    engines: list[EngineResult]
    gpus: int
    policy_label: str
    mean_alpha: float

    @property
    def total_tokens(self) -> int:
        return int(sum(e.total_tokens for e in self.engines))

    @property
    def verify_steps(self) -> float:
        return float(sum(e.sd_steps for e in self.engines))

    @property
    def steps(self) -> float:
        return float(sum(e.steps for e in self.engines))

    @property
    def mean_accept_len(self) -> float:
        """vLLM's mean acceptance length over all engines (conditional on a draft, sim/common.py)."""
        num = sum(e.sd_tokens for e in self.engines)
        den = sum(e.sd_seq_steps for e in self.engines)
        drafts = [e.draft_seq_steps for e in self.engines]
        return conditional_tau(num, den, None if any(d is None for d in drafts) else sum(drafts))

    @property
    def tokens_per_seq_step(self) -> float:
        """Effective tokens per request-step under SD, 1 + p·(τ − 1), over all engines."""
        den = sum(e.sd_seq_steps for e in self.engines)
        return sum(e.sd_tokens for e in self.engines) / den if den else float("nan")

    @property
    def mean_active_batch(self) -> float:
        return float(np.mean([e.mean_active_batch for e in self.engines])) if self.engines else 0.0

    @property
    def token_weighted_batch(self) -> float:
        """The active batch a generated token saw, over every engine's steps (nan if none emitted)."""
        tok = sum(e.token_sum for e in self.engines)
        return sum(e.token_batch_sum for e in self.engines) / tok if tok > 0 else float("nan")

    def step_setter_tau(self, proposal_rate: float) -> float:
        """τ of the response(s) that finished last over the pool, the one(s) that set the phase's
        end (common.last_finishers_tau; nan without SD)."""
        if not self.engines or any(e.seq_sd_tokens is None for e in self.engines):
            return float("nan")
        cat = lambda name: np.concatenate([getattr(e, name) for e in self.engines])
        return last_finishers_tau(cat("finish_s"), cat("seq_sd_tokens"), cat("seq_sd_steps"), proposal_rate)

    @property
    def gpu_seconds(self) -> float:
        return self.rollout_s * self.gpus

    @property
    def slowest(self) -> EngineResult:
        return max(self.engines, key=lambda e: e.rollout_s)


def engine_config(world: World, name: str, mean_alpha: float, policy: SDPolicy | None = None,
                  record_timeline: bool = True) -> EngineConfig:
    pol = policy or world.policy
    return EngineConfig(
        name=name, table=world.table, policy=pol,
        policy_ctx=PolicyContext(world.table, mean_alpha, world.acceptance.decay, world.acceptance.proposal_rate,
                                 context=world.context),
        max_batch=world.rollout.max_batch, kv_capacity_tokens=world.kv_capacity_tokens,
        block_tokens=world.rollout.kv_block_tokens, prefill_batches_s=world.prefill_fn(),
        position_decay=world.acceptance.decay, record_timeline=record_timeline,
        proposal_rate=world.acceptance.proposal_rate, context=world.context)


def measured_alpha_estimates(world: World, gen: GenerationResult, previous: dict[str, float]) -> dict[str, float]:
    """Each engine's acceptance estimate for the next RL step, `speculation.acceptance_estimate:
    measured`: the α whose τ at the draft length it used (draft passes per SD step) equals the
    acceptance length it reported over this step's SD steps (vLLM's conditional mean,
    EngineResult.mean_accept_len). An engine without SD steps keeps its previous estimate.
    EfficientRollout's engine measures this over a rollout and freezes it at the next wake-up
    (github.com/furiosa-ai/EfficientRollout, vllm/v1/engine/core.py)."""
    out = dict(previous)
    for r in gen.engines:
        tau = r.mean_accept_len
        if r.sd_steps <= 0 or not np.isfinite(tau):
            continue
        k = max(1, round(r.draft_passes / r.sd_steps))
        tau = min(max(tau, 1.0 + 1e-9), k + 1.0 - 1e-9)
        out[r.name] = float(alpha_from_tau(tau, k, world.acceptance.decay))
    return out


def simulate_generation(world: World, draw: StepDraw, versions_since_update: float = 0.0, *,
                        engine: str = "fast", record_timeline: bool = True,
                        alpha_estimates: dict[str, float] | None = None, tick: Ticker | None = None) -> GenerationResult:
    """Run one generation phase. `versions_since_update`: drafter staleness (policy versions
    since the drafter was last trained) — sets the mean acceptance. `alpha_estimates`: engine
    name -> the acceptance its SD policy prices with (default: the mean acceptance). `engine`:
    which engine runs the pool (sim/select.py: "fast", "fleet", "fleet_v1_inputs", "fast_v1",
    "reference"). `tick`: told the responses of this phase finished so far
    (sim/progress.py): each fleet round, or after each engine's rollout."""
    mean_alpha = float(world.acceptance.alpha_at_version(versions_since_update))
    alphas = sequence_alphas(mean_alpha, world.acceptance.concentration, draw.alpha_quantiles)
    groups = draw.response_tokens.shape
    group_of = np.repeat(np.arange(groups[0]), groups[1])
    prompt_of = draw.prompt_tokens[group_of]
    lengths = draw.response_tokens.reshape(-1)
    eng_of_group = dispatch(world, draw)
    eng_of_response = eng_of_group[group_of]
    order = stable_order(eng_of_response)  # responses grouped by engine, queue order kept
    starts = np.searchsorted(eng_of_response[order], np.arange(world.engines + 1))
    base_cfg = engine_config(world, "engine", mean_alpha, record_timeline=record_timeline)
    choice = pick_engine(engine, base_cfg, world.engines, world.rollout.max_batch, world.kv_capacity_tokens,
                         prompt_of, lengths)
    if choice.fleet:                 # the whole pool at once (sim/fleet/loop.py)
        pool = EngineWork(order, group_of[order], prompt_of[order], lengths[order], alphas[order])
        results = _fleet_generation(world, base_cfg, draw, pool, starts, alpha_estimates, tick,
                                    v1_inputs=choice.v1_inputs)
    else:
        runner = run_fast if choice.fast else run_reference
        results = []
        for e in range(world.engines):
            if tick is not None and tick.due():
                tick.responses(int(starts[e]))   # responses sorted by engine: the engines before e are done
            idx = order[starts[e]:starts[e + 1]]
            if len(idx) == 0:
                continue
            work = EngineWork(idx, group_of[idx], prompt_of[idx], lengths[idx], alphas[idx])
            cfg = replace(base_cfg, name=f"engine{e}")
            if alpha_estimates and cfg.name in alpha_estimates:
                cfg = replace(cfg, policy_ctx=replace(cfg.policy_ctx, alpha_estimate=alpha_estimates[cfg.name],
                                                      context=None))   # measured: the curve is in it
            rng = np.random.default_rng([draw.engine_seed, e])
            results.append(runner(cfg, work, rng))
    rollout_s = max((r.rollout_s for r in results), default=0.0)
    return GenerationResult(rollout_s, results, world.rollout.gpus, world.policy.label, mean_alpha)


def _fleet_generation(world: World, cfg: EngineConfig, draw: StepDraw, pool: EngineWork, starts,
                      alpha_estimates: dict[str, float] | None, tick: Ticker | None = None, *,
                      v1_inputs: bool = False) -> list[EngineResult]:
    """simulate_generation's engines as one fleet (sim/fleet/loop.py): the same responses and queue
    order as the per-engine loop; the step's noise (`step_noise`) and tabulated laws
    (`QuantileLaws`; `v1_inputs`: the per-engine fast engine's per-engine noise and exact laws).
    Priced policies (toggle, adaptive) price with each engine's acceptance estimate. `pool`: every
    response in queue order (`response_ids` the order, grouped by engine; engine e's are
    starts[e]:starts[e + 1]); the phase's mean acceptance is `cfg.policy_ctx.alpha_estimate`
    (engine_config's)."""
    order = pool.response_ids
    used = [e for e in range(world.engines) if starts[e + 1] > starts[e]]
    counts = [starts[e + 1] - starts[e] for e in used]
    eng_of = np.repeat(np.arange(len(used)), counts)
    z = step_noise(draw, order, np.repeat(np.asarray(used, dtype=np.int64), counts), per_engine=v1_inputs)
    pol, acc = cfg.policy, world.acceptance
    if v1_inputs:
        a = pool.alphas
        laws = exact_laws(a, pol.ks, cfg.position_decay, pol.tree_for, cfg.proposal_rate)
    else:
        a, laws = quantile_laws(cfg.policy_ctx.alpha_estimate, acc.concentration, pol.ks, cfg.position_decay, pol.tree_for,
                                cfg.proposal_rate)(draw.alpha_quantiles[order])
    names = [f"engine{e}" for e in used]
    est = None
    if alpha_estimates:
        est = np.array([alpha_estimates.get(nm, cfg.policy_ctx.alpha_estimate) for nm in names], dtype=float)
    work = FleetWork(eng_of, order, pool.group_ids, pool.prompt_tokens, pool.response_tokens, z, a, laws)
    return run_fleet_closed(cfg, names, work, est, tick)
