"""RL steps on a simpy clock: sync (colocated) or async with a policy lag.

An RL step is generation → reward → logprob → train → weight sync (→ drafter update when due).
simpy owns the stage clock: generation and training are processes on pool resources, stage ends
are timeouts and cross-pool dependencies are events. The token-level work stays in the engine —
`simulate_generation` supplies each generation's duration; it is never one simpy event per token.

sync (colocated). One pool runs every stage of step i in sequence; step_s = the sum of the stage
times; the policy version that generates step i is i.

async (separate pools, policy lag L). The generation pool runs one step's generation at a time, in
order; the training pool runs, per step, reward → logprob → train → weight sync (→ drafter update).
* Training of step i starts when step i's rollouts are generated and step i−1's training
  (incl. its weight sync and drafter update) is done. Its weight sync publishes version i+1.
* Generation of step i may start when the generation pool is free and version ≥ i − L is
  available; it uses the newest available version. L = 0: generation waits for the previous
  step's sync — sync on split pools, no overlap.
* Available means landed (the sync finished). With `partial_rollouts` (in-flight weight updates)
  a version counts as available once its sync has begun: the generation starts on the old weights
  and the new ones land in flight. Simplification: such a generation is recorded (and its drafter
  staleness counted) as the new version, and the engines' pause to swap weights is neglected.
  Without partial rollouts, engines receive a version that lands mid-generation into a staging
  buffer and switch at their next generation (the staging memory is not modeled).
* Reward runs on the training side (after the rollouts reach the trainer).

Drafter staleness. versions_since_update of step i = (policy version used for generation i) −
(policy version the drafter was last trained for). eagle3/mtp with drafter.update_every_steps I>0:
after the weight sync that publishes version v with v mod I = 0 the drafter is retrained on that
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

import pandas as pd
import simpy

from specsim.cost import training as tc
from specsim.errors import SpecError
from specsim.resolve import World, resolve
from specsim.scenario import Scenario, apply_overrides, source_file, spec_error_to_scenario
from specsim.sim.cluster import GenerationResult, draw_step, simulate_generation
from specsim.trainer import training_layout  # house: until World carries the trainer layout (async)


@dataclass
class StepRecord:
    """One RL step. Times in seconds on the pipeline clock (0 = first generation starts)."""

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
    exposed_generation_s: float   # step_s − training-side stage time: generation the training did not hide
    tau: float                    # measured tokens per sequence per verify step (nan without SD)
    mean_alpha: float
    versions_since_update: float
    tokens: int
    verify_steps: float
    mean_active_batch: float
    rollout_gpu_s: float

    @property
    def training_side_s(self) -> float:
        return self.reward_s + self.logprob_s + self.train_s + self.weight_sync_s + self.drafter_update_s


@dataclass
class PipelineResult:
    scenario_name: str
    mode: str
    records: list[StepRecord]
    warmup_steps: int
    generations: list = field(default_factory=list)  # GenerationResult per step (for timelines)
    wall_s: float = 0.0                               # host seconds the simulation took

    def steps_frame(self) -> pd.DataFrame:
        """One row per step, every StepRecord field."""
        cols = [f.name for f in fields(StepRecord)]
        return pd.DataFrame([asdict(r) for r in self.records], columns=cols)

    def steady(self) -> dict[str, float]:
        """Means over steps >= warmup_steps of every numeric field, plus throughput_steps_per_h."""
        df = self.steps_frame()
        df = df[df["step"] >= self.warmup_steps]
        out = {c: float(df[c].mean()) for c in df.columns}
        out["throughput_steps_per_h"] = 3600.0 / out["step_s"] if out["step_s"] > 0 else float("nan")
        return out

    @property
    def total_s(self) -> float:
        return self.records[-1].step_end_s if self.records else 0.0


@dataclass
class Comparison:
    """A scenario (variant) against its baseline (by default the same scenario with SD off)."""

    variant: PipelineResult
    baseline: PipelineResult

    @property
    def generation_speedup(self) -> float:
        return self.baseline.steady()["generation_s"] / self.variant.steady()["generation_s"]

    @property
    def e2e_speedup(self) -> float:
        return self.baseline.steady()["step_s"] / self.variant.steady()["step_s"]

    @property
    def generation_share(self) -> float:
        """The baseline's steady generation time over its steady step time."""
        b = self.baseline.steady()
        return b["generation_s"] / b["step_s"]

    @property
    def exposed_generation_saving_s(self) -> float:
        return self.baseline.steady()["exposed_generation_s"] - self.variant.steady()["exposed_generation_s"]

    def summary(self) -> dict[str, float]:
        return {"generation_share": self.generation_share, "generation_speedup": self.generation_speedup,
                "e2e_speedup": self.e2e_speedup, "exposed_generation_saving_s": self.exposed_generation_saving_s}


# ----------------------------------------------------------------------------- step costs
@dataclass(frozen=True)
class _TrainingSide:
    reward_s: float
    logprob_s: float
    train_s: float
    weight_sync_s: float
    drafter_update_s: float   # eagle3/mtp: when an update is due; self_quant: every step (requantize)


class _Costs:
    """Trainer-side stage times of each step, from cost/training.py (pure, cached per step)."""

    def __init__(self, world: World):
        sc = world.scenario
        self.world = world
        self.tl = training_layout(sc, world.model, world.hw)
        colocated = sc.pipeline.mode == "sync"
        tc.check_training_fits(world.model, world.hw, self.tl,
                               gpu_memory_utilization=sc.rollout.gpu_memory_utilization if colocated else None)
        self.reward = float(sc.pipeline.reward_s)
        self.sync = tc.weight_sync_s(world.model, world.hw, world.layout, sc.rollout.gpus, self.tl.gpus,
                                     method=sc.training.weight_sync, colocated=colocated)
        self.uses_drafter = world.policy.kind != "off" and world.drafter.model is not None
        self.requant = tc.requantize_s(world.model, world.hw, world.layout, world.drafter) if self.uses_drafter else 0.0
        self.online = (self.uses_drafter and world.drafter.kind in ("eagle3", "mtp")
                       and world.acceptance.update_every_steps > 0)
        self._cache: dict[int, tuple[float, float, float]] = {}

    def step(self, draw) -> tuple[float, float, float]:
        """(logprob_s, train_s, drafter training s if it were due) of one step's sequences."""
        if draw.step not in self._cache:
            w = self.world
            seqs = tc.sequence_tokens(draw.prompt_tokens, draw.response_tokens)
            du = tc.drafter_update_s(w.drafter, w.hw, self.tl, seqs,
                                     token_fraction=w.scenario.drafter.update_token_fraction) if self.online else 0.0
            self._cache[draw.step] = (tc.logprob_s(w.model, w.hw, self.tl, seqs),
                                      tc.train_s(w.model, w.hw, self.tl, seqs), du)
        return self._cache[draw.step]

    def drafter_due(self, new_version: int) -> bool:
        """Is the drafter retrained after the sync that publishes `new_version`?"""
        return self.online and new_version % self.world.acceptance.update_every_steps == 0


def _never_stale(world: World) -> bool:
    return world.drafter.kind in ("self_quant", "ngram")


# ----------------------------------------------------------------------------- the run
def run_pipeline(world: World, *, engine: str = "fast", replicate: int = 0, steps: int | None = None) -> PipelineResult:
    """Simulate `steps` RL steps (default pipeline.steps) of a resolved scenario on a simpy clock."""
    t_wall = time.perf_counter()
    sc = world.scenario
    n_steps = int(steps if steps is not None else sc.pipeline.steps)
    if n_steps < 1:
        raise SpecError("pipeline.steps", n_steps, ">= 1")
    warmup = min(sc.pipeline.warmup_steps, n_steps - 1)
    try:
        costs = _Costs(world)
    except SpecError as exc:
        raise spec_error_to_scenario(exc, source_file(sc)) from None
    draws = [draw_step(world, i, replicate) for i in range(n_steps)]
    env = simpy.Environment()
    mode = sc.pipeline.mode
    lag = sc.pipeline.policy_lag
    partial = sc.pipeline.partial_rollouts
    rows: list[dict] = [{} for _ in range(n_steps)]
    gens: list[GenerationResult | None] = [None] * n_steps

    # published state: the newest policy version available to generation, and the drafter's
    state = {"version": 0, "drafter": 0}
    avail = {0: env.event().succeed()}           # version -> event, succeeded when generation may use it

    def version_event(v: int):
        if v not in avail:
            avail[v] = env.event()
        return avail[v]

    def publish(v: int):
        state["version"] = max(state["version"], v)
        ev = version_event(v)
        if not ev.triggered:
            ev.succeed()

    def generate(i: int, version: int):
        """Run generation i with `version`; returns its duration (the engine supplies it)."""
        drafter_v = version if _never_stale(world) else state["drafter"]
        vsu = float(max(version - drafter_v, 0))
        g = simulate_generation(world, draws[i], vsu, engine=engine)
        gens[i] = g
        rows[i].update(step=i, policy_version=version, versions_since_update=vsu, generation_s=g.rollout_s,
                       tau=g.mean_accept_len, mean_alpha=g.mean_alpha, tokens=g.total_tokens,
                       verify_steps=g.verify_steps, mean_active_batch=g.mean_active_batch, rollout_gpu_s=g.gpu_seconds)
        return g.rollout_s

    def training_side(i: int):
        """reward → logprob → train → weight sync (→ drafter update); publishes version i+1."""
        lp, tr, du_due = costs.step(draws[i])
        new_v = i + 1
        rows[i]["train_start_s"] = env.now
        yield env.timeout(costs.reward)
        yield env.timeout(lp)
        yield env.timeout(tr)
        rows[i]["train_end_s"] = env.now
        if partial and mode == "async":
            publish(new_v)                            # lands in flight
        yield env.timeout(costs.sync)
        du = 0.0
        if costs.requant:
            du += costs.requant
            yield env.timeout(costs.requant)          # the quantized drafter of version i+1
        publish(new_v)
        if costs.drafter_due(new_v):
            yield env.timeout(du_due)
            du += du_due
            state["drafter"] = new_v
        rows[i].update(reward_s=costs.reward, logprob_s=lp, train_s=tr, weight_sync_s=costs.sync,
                       drafter_update_s=du, step_end_s=env.now)

    if mode == "sync":
        pool = simpy.Resource(env, capacity=1)

        def colocated():
            for i in range(n_steps):
                with pool.request() as req:
                    yield req
                    rows[i]["gen_start_s"] = env.now
                    yield env.timeout(generate(i, state["version"]))
                    rows[i]["gen_end_s"] = env.now
                    yield env.process(training_side(i))

        env.process(colocated())
    else:
        gen_pool = simpy.Resource(env, capacity=1)
        train_pool = simpy.Resource(env, capacity=1)
        generated = [env.event() for _ in range(n_steps)]

        def generator():
            for i in range(n_steps):
                yield version_event(max(0, i - lag))
                with gen_pool.request() as req:
                    yield req
                    rows[i]["gen_start_s"] = env.now
                    yield env.timeout(generate(i, state["version"]))
                    rows[i]["gen_end_s"] = env.now
                generated[i].succeed()

        def trainer():
            for i in range(n_steps):
                yield generated[i]
                with train_pool.request() as req:
                    yield req
                    yield env.process(training_side(i))

        env.process(generator())
        env.process(trainer())

    env.run()
    records = []
    prev_end = 0.0
    for i, r in enumerate(rows):
        step_s = r["step_end_s"] - prev_end
        side = r["reward_s"] + r["logprob_s"] + r["train_s"] + r["weight_sync_s"] + r["drafter_update_s"]
        exposed = r["generation_s"] if mode == "sync" else max(0.0, step_s - side)
        records.append(StepRecord(step_s=step_s, exposed_generation_s=exposed, **r))
        prev_end = r["step_end_s"]
    return PipelineResult(sc.name, mode, records, warmup, gens, time.perf_counter() - t_wall)


# ----------------------------------------------------------------------------- baseline and compare
def baseline_scenario(sc: Scenario) -> Scenario:
    """The scenario with `pipeline.baseline` overrides applied (default: speculation.policy=off)."""
    return apply_overrides(sc, dict(sc.pipeline.baseline))


def compare(sc: Scenario, *, engine: str = "fast", replicate: int = 0) -> Comparison:
    """Run the scenario and its baseline on the same draws (common random numbers)."""
    variant = run_pipeline(resolve(sc), engine=engine, replicate=replicate)
    baseline = run_pipeline(resolve(baseline_scenario(sc)), engine=engine, replicate=replicate)
    return Comparison(variant, baseline)
