"""RL steps on a simpy clock: sync (colocated) or async with a policy lag.

An RL step is generation → reward → logprob → train → weight sync (→ drafter update when due).
simpy owns the stage clock: generation and training are processes, stage ends are timeouts and
cross-pool dependencies are events. The token-level work stays in the engines — sync:
`simulate_generation` supplies each phase's duration; async: the stream cluster advances its
engines up to the next simpy event (`env.peek()`), never one simpy event per token.

sync (colocated). One pool runs every stage of step i in sequence; step_s = the sum of the stage
times; the policy version that generates step i is i.

async (separate pools, policy lag L): continuous generation, as NeMo-RL's async GRPO, AReaL and
verl's fully-async mode run it (sim/stream.py). The rollout pool never stops at a step boundary:
* step j's groups are released to the engines (admitted at their next step boundary as batch and
  KV allow) when policy version j − L lands; steps 0..L at time 0. L = 0: a barrier per step.
* the trainer takes step j when the last of its groups has finished (F_j) and step j−1's training
  (incl. its weight sync and drafter update) is done; its weight sync publishes version j+1.
* Landing: with `partial_rollouts` (in-flight weight updates) a version lands when its sync begins
  and running sequences continue on it at once (their acceptance switches too); without, it lands
  when the sync ends and each engine stops admitting, drains its running batch, then swaps. In
  flight, each engine stops for the weight sync's time at its first step boundary from the landing
  on (it receives the new weights: StreamCluster.switch_all); a drained swap's load is neglected.
* every trajectory records the version it started under: policy_version (the oldest), and
  mean/max policy age (j − version) per step; exposed_generation_s is the trainer's wait for F_j.
* Reward runs on the training side (after the rollouts reach the trainer).

Drafter staleness. versions_since_update = (policy version a trajectory is generated with) −
(policy version the drafter was last trained for); async: per engine, following the version it
runs (a retrained drafter lands in flight with partial rollouts, else with the next version).
eagle3/mtp with drafter.update_every_steps I>0: after the weight sync that publishes version v with v mod I = 0 the drafter is retrained on that
step's data (cost drafter_update_s, on the training pool: in sequence in sync mode) and published
as trained for version v; a generation uses the newest published drafter. I = 0: the drafter stays
at version 0. self_quant: re-quantized at each weight sync (cost in drafter_update_s, priced by
cost/training.requantize_s, run right after the sync), never stale; ngram: never stale. When the
SD policy is off (an AR baseline) no drafter costs are paid.

Common random numbers: `draw_step(world, i, replicate)` once per step index; a baseline run of the
same scenario family sees the same draws, so speedups are paired.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np
import simpy

from specsim.cost import training as tc
from specsim.errors import SpecError
from specsim.sim.cluster import GenerationResult, draw_step, forget_draws, measured_alpha_estimates, simulate_generation
from specsim.sim.progress import PROGRESS_EVERY_S, ProgressHook, Ticker
from specsim.sim.stream import StreamCluster
from specsim.world.specs import World

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class StepRecord:
    """One RL step. Times in seconds on the pipeline clock (0 = the run starts: the first prompt
    batch is loaded, then generated)."""

    step: int
    policy_version: int           # the policy version that generated this step's rollouts
    gen_start_s: float
    gen_end_s: float
    generation_s: float
    reward_s: float
    logprob_s: float
    train_s: float
    weight_sync_s: float
    drafter_update_s: float
    train_start_s: float          # the training side of the step begins (reward starts)
    train_end_s: float            # fwd+bwd done (before the weight sync)
    step_end_s: float             # this step's training incl. weight sync and drafter update completes
    step_s: float                 # step_end_s − previous step_end_s (first: step_end_s)
    exposed_generation_s: float   # the time the trainer waited for this step's rollouts (sync: all of generation)
    tau: float                    # measured mean acceptance length as vLLM reports it (conditional on a draft; nan without SD)
    mean_alpha: float
    versions_since_update: float
    tokens: int
    verify_steps: float
    mean_active_batch: float
    rollout_gpu_s: float
    gen_window_s: float = 0.0     # pool time on this step: sync generation_s; async max(F_≤j) − max(F_<j) (finishes)
    mean_policy_age: float = 0.0  # mean over the step's trajectories of (step − version that started it)
    max_policy_age: float = 0.0
    tokens_per_step: float = float("nan")  # effective tokens per request-step under SD, 1 + p·(τ − 1)
    data_s: float = 0.0           # loading the prompt batch, on the critical path (sync: every step; async: step 0)
    step_setter_tau: float = float("nan")       # τ of the response that finished last (set the generation's end)
    token_weighted_batch: float = float("nan")  # the active batch a generated token saw (Σ tokens × batch ÷ Σ tokens)


def _column_mean(values: list) -> float:
    """pandas' Series.mean of a column built from `values` (ints: an int64 column, else float64):
    the sum of the non-NaN values (NaNs as 0, in place) over their count; NaN for none."""
    arr = np.array(values)
    if not len(arr):
        return float("nan")
    if arr.dtype.kind in "iu":
        return float(arr.sum(dtype=np.float64) / np.float64(len(arr)))
    arr = arr.astype(np.float64)
    nan = np.isnan(arr)
    count = np.float64(len(arr) - int(nan.sum()))
    if nan.any():
        arr[nan] = 0.0
    return float(arr.sum() / count) if count > 0 else float("nan")


@dataclass
class PipelineResult:
    scenario_name: str
    mode: str
    records: list[StepRecord]
    warmup_steps: int
    generations: list = field(default_factory=list)  # GenerationResult per step (for timelines)
    wall_s: float = 0.0                               # host seconds the simulation took
    engines: list = field(default_factory=list)       # async: EngineResult per engine over the whole run

    def steps_frame(self) -> pd.DataFrame:
        """One row per step, every StepRecord field (pandas imported here: a simulation process, a
        pool worker, never needs it)."""
        import pandas as pd

        cols = [f.name for f in fields(StepRecord)]
        return pd.DataFrame([asdict(r) for r in self.records], columns=cols)

    def steady(self) -> dict[str, float]:
        """Means over steps >= warmup_steps of every numeric field, plus throughput_steps_per_h.
        Each mean is pandas' `Series.mean` of the field's column (nanops.nanmean: NaNs left out
        — filled with 0 in the sum and not counted —, integers summed as float64, one numpy sum
        over the column's array then ÷ the count) computed on the same arrays without pandas,
        which a pool worker then never imports (~1 CPU-s a process)."""
        kept = [r for r in self.records if r.step >= self.warmup_steps]
        out = {f.name: _column_mean([getattr(r, f.name) for r in kept]) for f in fields(StepRecord)}
        out["throughput_steps_per_h"] = 3600.0 / out["step_s"] if out["step_s"] > 0 else float("nan")
        out["effective_step_s"] = self.effective_step_s
        return out

    @property
    def effective_step_s(self) -> float:
        """Steady-state seconds per step: (end of the last step − end of the last warm-up step) over
        the steady steps — the step time an async run settles at (equals the mean step_s)."""
        w = self.warmup_steps
        if not self.records or len(self.records) <= w:
            return float("nan")
        start = self.records[w - 1].step_end_s if w > 0 else 0.0
        return (self.records[-1].step_end_s - start) / (len(self.records) - w)

    @property
    def total_s(self) -> float:
        return self.records[-1].step_end_s if self.records else 0.0


# ----------------------------------------------------------------------------- step costs
#: (draw key, trainer key) -> ((logprob_s, train_s, drafter update s), the trainer's profile): the
#: trainer-side costs of the steps one process has priced, oldest dropped past STEP_COSTS_MAX
_STEP_COSTS: dict[tuple, tuple[tuple[float, float, float], object]] = {}
STEP_COSTS_MAX = 4096


def forget_reuse() -> None:
    """Drop what the runs of this process keep for later runs (the step draws and what was kept
    with them, cluster.draw_step; the trainer's step costs): the next run computes everything
    afresh, to the same numbers."""
    forget_draws()
    _STEP_COSTS.clear()


class _Costs:
    """Trainer-side stage times of each step, from cost/training.py (pure, cached per step)."""

    def __init__(self, world: World):
        self.world = world
        self.tl = world.trainer.layout   # world/resolve.py checked that it fits
        colocated = world.pipeline.mode == "sync"
        self.reward = world.pipeline.reward_s
        # the "prepare" stage: the weight transfer (colocated: with the trainer state's offload and
        # onload) plus, colocated, waking the engine
        self.sync = tc.refit_s(world.model, world.trainer_hw, world.layout, world.rollout.gpus, self.tl,
                               colocated=colocated, rollout_hw=world.hw) \
            + (world.pipeline.engine_prepare_s if colocated else 0.0)
        self.uses_drafter = world.policy.kind != "off" and world.drafter.model is not None
        self.requant = tc.requantize_s(world.model, world.hw, world.layout, world.drafter) if self.uses_drafter else 0.0
        self.online = (self.uses_drafter and world.drafter.spec.retrainable
                       and world.acceptance.update_every_steps > 0)
        self._cache: dict[int, tuple[float, float, float]] = {}
        # what step() is a function of besides the draw; the profile by identity (kept alive in
        # the cache's entries, so its id is not reused): resolve hands every world the same object
        w = world
        self._key = (w.model, id(w.trainer_hw), self.tl, self.online and (w.drafter, w.trainer.update_token_fraction))

    def step(self, draw) -> tuple[float, float, float]:
        """(logprob_s, train_s, drafter training s if it were due) of one step's sequences; one
        process prices a cached draw (cluster.draw_step) once per trainer (`_STEP_COSTS`): the
        points of a sweep that differ in k or lag only share their trainer's costs."""
        if draw.step not in self._cache:
            key = None if draw.key is None else (draw.key, self._key)
            hit = _STEP_COSTS.get(key) if key is not None else None
            if hit is None:
                hit = (self._price(draw), self.world.trainer_hw)
                if key is not None:
                    if len(_STEP_COSTS) >= STEP_COSTS_MAX:
                        _STEP_COSTS.pop(next(iter(_STEP_COSTS)))
                    _STEP_COSTS[key] = hit
            self._cache[draw.step] = hit[0]
        return self._cache[draw.step]

    def _price(self, draw) -> tuple[float, float, float]:
        w = self.world
        seqs = tc.sequence_tokens(draw.prompt_tokens, draw.response_tokens)
        thw = w.trainer_hw   # the trainer pool's profile (training.hardware); the engines run on w.hw
        du = tc.drafter_update_s(w.drafter, thw, self.tl, seqs,
                                 token_fraction=w.trainer.update_token_fraction) if self.online else 0.0
        return tc.logprob_s(w.model, thw, self.tl, seqs), tc.train_s(w.model, thw, self.tl, seqs), du

    def drafter_due(self, new_version: int) -> bool:
        """Is the drafter retrained after the sync that publishes `new_version`?"""
        return self.online and new_version % self.world.acceptance.update_every_steps == 0


def _never_stale(world: World) -> bool:
    return not world.drafter.spec.goes_stale


class RunStopped(Exception):
    """A run ended by `run_pipeline(stop_above_s=...)`: after `step` (-1: before the first) its
    steady mean step is at least `floor_step_s` > `stop_above_s`, so it cannot come in under it."""

    def __init__(self, step: int, floor_step_s: float, stop_above_s: float):
        super().__init__(step, floor_step_s, stop_above_s)   # simpy re-raises a copy made from args
        self.step, self.floor_step_s, self.stop_above_s = int(step), float(floor_step_s), float(stop_above_s)


# ----------------------------------------------------------------------------- the run
class _RLRun:
    """One run's RL steps on a simpy clock: the state its phases share and the phases themselves.

    State: the newest policy version generation may use, the policy version the newest published
    drafter was trained for, and each step's record as its phases fill it in. Phases: generate (per
    mode, in the subclasses `_ColocatedRun` and `_AsyncRun`), `train` (a step's training side, which
    publishes the next version), `publish` (a version lands) and `records` (the StepRecords once the
    clock has run out). The subclasses' hooks `_version_landed` and `_drafter_landed` carry a new
    version or drafter to the engines; in sync mode there is nothing to carry (the next generation
    reads the version when it starts)."""

    #: a version lands when its weight sync begins (in-flight updates), not when it ends
    lands_in_flight = False
    #: end the run (RunStopped) once its steady mean step is provably above this (run_pipeline)
    stop_above_s: float | None = None
    warmup = 0

    def __init__(self, world: World, draws: list, *, engine: str, tick: Ticker | None):
        self.world = world
        self.draws = draws
        self.n_steps = len(draws)
        self.engine = engine
        self.tick = tick
        self.costs = _Costs(world)
        self.env = simpy.Environment()
        self.rows: list[dict] = [{"step": i} for i in range(self.n_steps)]
        self.gens: list[GenerationResult | None] = [None] * self.n_steps
        self.version = 0           # the newest policy version usable by generation
        self.drafter_version = 0   # the policy version the newest published drafter was trained for

    def versions_since_update(self, version: int) -> float:
        """Drafter staleness of a generation with policy `version` (0 for drafters that never go stale)."""
        return 0.0 if _never_stale(self.world) else float(max(version - self.drafter_version, 0))

    def publish(self, version: int) -> None:
        """Policy `version` lands (idempotent: the in-flight landing and the sync's end both call it)."""
        if version <= self.version:
            return
        self.version = version
        self._version_landed(version)

    def _version_landed(self, version: int) -> None:
        """Hook: the engines take `version`."""

    def _drafter_landed(self) -> None:
        """Hook: the engines take the drafter retrained for `drafter_version`."""

    def start(self) -> None:
        """Register the mode's simpy processes on `env`."""
        raise NotImplementedError

    def train(self, i: int):
        """simpy process: step i's reward → logprob → train → weight sync (→ drafter update); it
        publishes version i+1 and completes step i's record."""
        costs, env, row = self.costs, self.env, self.rows[i]
        lp, tr, du_due = costs.step(self.draws[i])
        new_v = i + 1
        row["train_start_s"] = env.now
        yield env.timeout(costs.reward)
        yield env.timeout(lp)
        yield env.timeout(tr)
        row["train_end_s"] = env.now
        if self.lands_in_flight:
            self.publish(new_v)
        yield env.timeout(costs.sync)
        du = 0.0
        if costs.requant:
            du += costs.requant
            yield env.timeout(costs.requant)          # the quantized drafter of version i+1
        self.publish(new_v)
        if costs.drafter_due(new_v):
            yield env.timeout(du_due)
            du += du_due
            self.drafter_version = new_v
            self._drafter_landed()
        row.update(reward_s=costs.reward, logprob_s=lp, train_s=tr, weight_sync_s=costs.sync,
                   drafter_update_s=du, step_end_s=env.now)
        if self.tick is not None:
            self.tick.step_done()
        self.stop_if_above(i)

    def step_floor_s(self, j: int) -> float:
        """A floor on step j's step_s: its trainer-side stages, which run one after another once
        step j-1 has ended (reward, logprob, train, weight sync, requantization, the drafter's
        update when due; sync mode adds the data load). Exact for a trainer-bound step."""
        c = self.costs
        lp, tr, du = c.step(self.draws[j])
        data = self.world.pipeline.data_s if self.world.pipeline.mode == "sync" else 0.0
        return data + c.reward + lp + tr + c.sync + c.requant + (du if c.drafter_due(j + 1) else 0.0)

    def stop_if_above(self, i: int) -> None:
        """Raise RunStopped when, after step i (-1: before the first), the steady mean step is
        provably above `stop_above_s`: (the steady steps ended so far + `step_floor_s` of every
        later steady step) / the steady steps."""
        if self.stop_above_s is None:
            return
        w, n = self.warmup, self.n_steps
        done = 0.0
        if i >= w:
            done = self.rows[i]["step_end_s"] - (self.rows[w - 1]["step_end_s"] if w > 0 else 0.0)
        floor = (done + sum(self.step_floor_s(j) for j in range(max(i + 1, w), n))) / (n - w)
        if floor > self.stop_above_s:
            raise RunStopped(i, floor, self.stop_above_s)

    def records(self) -> list[StepRecord]:
        """The finished rows as StepRecords; step_s is the gap between consecutive step ends."""
        records = []
        prev_end = 0.0
        for r in self.rows:
            step_s = r["step_end_s"] - prev_end
            records.append(StepRecord(step_s=step_s, exposed_generation_s=r.pop("trainer_wait_s"), **r))
            prev_end = r["step_end_s"]
        return records


class _ColocatedRun(_RLRun):
    """sync: one pool loads, generates and trains each step in sequence (simulate_generation times
    each generation phase); with a `measured` policy estimate, each engine's α̂ is the one it
    measured on the previous step (the first step: the drafter's)."""

    def start(self) -> None:
        self.env.process(self.generate_and_train())

    def generate_and_train(self):
        """simpy process: every step's data load, generation and training side, in sequence."""
        world, env, tick, draws = self.world, self.env, self.tick, self.draws
        ps = world.pipeline
        measured = world.policy.estimate == "measured"
        estimates: dict[str, float] = {}
        for i in range(self.n_steps):
            row = self.rows[i]
            row["data_s"] = ps.data_s
            yield env.timeout(ps.data_s)
            row["gen_start_s"] = env.now
            version = self.version
            if tick is not None:
                tick.base = sum(d.n_responses for d in draws[:i])
            g = simulate_generation(world, draws[i], self.versions_since_update(version), engine=self.engine,
                                    alpha_estimates=estimates if measured else None, tick=tick)
            self.gens[i] = g
            if tick is not None:
                tick.finished(draws[i].n_responses)
            if measured:
                estimates = measured_alpha_estimates(world, g, estimates)
            row.update(policy_version=version, versions_since_update=self.versions_since_update(version),
                       generation_s=g.rollout_s, tau=g.mean_accept_len, mean_alpha=g.mean_alpha,
                       tokens_per_step=g.tokens_per_seq_step,
                       tokens=g.total_tokens, verify_steps=g.verify_steps,
                       mean_active_batch=g.mean_active_batch, rollout_gpu_s=g.gpu_seconds,
                       step_setter_tau=g.step_setter_tau(world.acceptance.proposal_rate),
                       token_weighted_batch=g.token_weighted_batch,
                       gen_window_s=g.rollout_s, mean_policy_age=0.0, max_policy_age=0.0)
            yield env.timeout(g.rollout_s)
            row["gen_end_s"] = env.now
            row["trainer_wait_s"] = g.rollout_s
            yield env.process(self.train(i))


class _AsyncRun(_RLRun):
    """async: the stream cluster generates continuously; step j's groups are released when version
    j − L lands (steps 0..L at the start), the trainer takes step j once its groups have finished and
    step j−1's training is done. A landed version (and, in flight, a retrained drafter) switches
    every engine with the acceptance of its staleness."""

    def __init__(self, world: World, draws: list, *, engine: str, tick: Ticker | None, engine_results: bool):
        super().__init__(world, draws, engine=engine, tick=tick)
        ps = world.pipeline
        self.lag = ps.policy_lag
        self.lands_in_flight = ps.partial_rollouts
        self.stream = StreamCluster(world, draws, float(world.acceptance.alpha_at_version(0)), engine=engine,
                                    window=not engine_results)
        if tick is not None:
            tick.source = self.stream.finished_responses
        self.released: dict[int, float] = {}             # step -> when its groups were released
        self.version_vsu: dict[int, float] = {0: 0.0}    # version -> staleness when the engines took it
        self.generated = [self.env.event() for _ in range(self.n_steps)]

    def start(self) -> None:
        self.env.process(self.generate())
        self.env.process(self.train_in_order())

    def release(self, j: int) -> None:
        """Hand step j's groups to the engines (once)."""
        if j < self.n_steps and j not in self.released:
            self.released[j] = self.env.now
            self.stream.release_step(j, self.env.now)

    def _switch_engines(self, in_flight: bool, pause_s: float = 0.0) -> None:
        """Switch every engine to the newest version; `pause_s`: each engine stops that long at its
        next step boundary to load the weights (an in-flight update, StreamCluster.switch_all)."""
        v = self.version
        self.version_vsu[v] = self.versions_since_update(v)
        self.stream.switch_all(self.env.now, v, float(self.world.acceptance.alpha_at_version(self.version_vsu[v])),
                               in_flight=in_flight, pause_s=pause_s)

    def _version_landed(self, version: int) -> None:
        """The engines run `version` from now; step version + L may start."""
        self._switch_engines(in_flight=self.lands_in_flight,
                             pause_s=self.costs.sync if self.lands_in_flight else 0.0)
        self.release(version + self.lag)

    def _drafter_landed(self) -> None:
        """In flight, the engines take the new drafter now; else with the next version."""
        if self.lands_in_flight:
            self._switch_engines(in_flight=True)

    def generate(self):
        """simpy process: advance the engines event to event and record each step when its last group
        finishes. The data loader prefetches later batches while the engines work: only the first load
        waits."""
        env, stream, tick = self.env, self.stream, self.tick
        self.rows[0]["data_s"] = self.world.pipeline.data_s
        yield env.timeout(self.world.pipeline.data_s)
        for j in range(min(self.lag + 1, self.n_steps)):
            self.release(j)
        before = stream.counters()
        prev_f = env.now
        for j in range(self.n_steps):
            while (f := stream.advance(j, env.peek(), tick)) is None:
                yield env.timeout(max(0.0, env.peek() - env.now))
            yield env.timeout(max(0.0, f - env.now))
            now = stream.counters()
            self._record_generation(j, f, window=max(f - prev_f, 0.0),   # steps may finish out of order: the running max
                                    delta={k: now[k] - before[k] for k in now})
            before, prev_f = now, max(prev_f, f)
            self.generated[j].succeed()

    def _record_generation(self, j: int, f: float, *, window: float, delta: dict[str, float]) -> None:
        """Step j's generation fields: finished at `f`, `window` s of pool time since the previous
        finish, `delta` the stream counters accumulated over that window."""
        world, stream = self.world, self.stream
        ver = stream.step_versions(j)
        lut = np.array([self.version_vsu.get(v, np.nan) for v in range(int(ver.max()) + 1)])
        vsu = lut[ver]
        released = self.released[j]
        self.rows[j].update(
            gen_start_s=released, gen_end_s=f, generation_s=f - released, gen_window_s=window,
            policy_version=int(ver.min()), versions_since_update=float(vsu.mean()),
            mean_policy_age=float(np.mean(j - ver)), max_policy_age=float(np.max(j - ver)),
            tau=stream.step_tau(j), tokens_per_step=stream.step_tokens_per_seq_step(j),
            mean_alpha=float(np.mean(world.acceptance.alpha_at_version(vsu))),
            tokens=int(self.draws[j].response_tokens.sum()), verify_steps=delta["sd_steps"],
            mean_active_batch=delta["weighted_active"] / (window * world.engines) if window > 0 else 0.0,
            step_setter_tau=stream.step_setter_tau(j),
            token_weighted_batch=(delta["token_batch_sum"] / delta["token_sum"] if delta["token_sum"] > 0
                                  else float("nan")),
            rollout_gpu_s=window * world.rollout.gpus)

    def train_in_order(self):
        """simpy process: the trainer takes each step once its rollouts are in, in order."""
        for i in range(self.n_steps):
            free = self.env.now
            yield self.generated[i]
            self.rows[i]["trainer_wait_s"] = self.env.now - free
            yield self.env.process(self.train(i))


def run_pipeline(world: World, *, engine: str = "fast", replicate: int = 0, steps: int | None = None,
                 progress: ProgressHook | None = None, progress_every_s: float = PROGRESS_EVERY_S,
                 engine_results: bool = True, stop_above_s: float | None = None) -> PipelineResult:
    """Simulate `steps` RL steps (default pipeline.steps) of a resolved scenario on a simpy clock.
    `progress`: called with a RunProgress at the start, at most every `progress_every_s` seconds
    of wall clock while the run goes, and at the end (sim/progress.py); it changes no result.
    `engine_results`: async runs keep every engine's per-response result (`PipelineResult.engines`);
    False leaves it empty (a caller that reads only the step records: a few hundred steps of
    65,536 trajectories hold gigabytes of them).
    `stop_above_s`: raise RunStopped (no result) as soon as the steady mean step is provably above
    it — checked before the first step and after each: (steady steps ended + Σ floors of the steady
    steps to come) / steady steps > stop_above_s, the floor of a step being its trainer-side stages
    (`_RLRun.step_floor_s`; a step ends no earlier than its training after the previous one's end).
    A run that is not stopped is the same run as without it (a planner's "cannot win")."""
    t_wall = time.perf_counter()
    ps = world.pipeline
    n_steps = int(steps if steps is not None else ps.steps)
    if n_steps < 1:
        raise SpecError("steps", n_steps, ">= 1")
    warmup = min(max(ps.warmup_steps, ps.fill_steps), n_steps - 1)
    draws = [draw_step(world, i, replicate) for i in range(n_steps)]
    tick = None if progress is None else Ticker(progress, steps_total=n_steps, every_s=progress_every_s,
                                                responses_total=sum(d.n_responses for d in draws))
    run = (_AsyncRun(world, draws, engine=engine, tick=tick, engine_results=engine_results)
           if ps.mode == "async" else _ColocatedRun(world, draws, engine=engine, tick=tick))
    run.stop_above_s, run.warmup = stop_above_s, warmup
    run.stop_if_above(-1)
    run.start()
    run.env.run()
    if tick is not None:
        tick.finish()
    res = PipelineResult(ps.name, ps.mode, run.records(), warmup, run.gens, time.perf_counter() - t_wall)
    if isinstance(run, _AsyncRun) and engine_results:
        res.engines = run.stream.results()
    return res
