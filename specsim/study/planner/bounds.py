"""Analytic lower bounds on a candidate's steady step time, from the cost model alone (no simulation).

Three bounds, each a floor under the mean steady step (seconds), all read from the same step-cost
table the engines use (`cost/step.py`, via `world/resolve.py`) and the trainer's costs
(`cost/training.py`):

* **trainer** — async: the trainer pool runs reward → logprob → train → weight sync for every step
  one after another, so a steady step is at least their sum; sync: they add to generation. Priced
  on the step's expected sequences (prompt + response lengths at the distributions' quantile
  midpoints, truncated at the caps).
* **throughput** — the pool must emit a step's tokens every step: tokens per step ÷ (engines ×
  the best tokens/s one engine reaches at any batch b ≤ max_batch that fits its KV cache), an
  engine step costing at least its context-free part `fixed_s[k, b]` and emitting at most
  b·(1 + p·(τ_k − 1)) tokens (τ_k the drafter's mean acceptance length at k, p its proposal rate);
  plus the attention over the context the step's sequences hold (`per_ctx_s` × Σ_j n_j (P_j +
  (L_j − t_j)/2) token-steps ÷ engines: each of its n_j steps reads a context that grows from the
  prompt P_j) — the KV a KV-bound engine keeps full is read every step.
* **latency** — the step's slowest GRPO group: a group goes whole to one engine, and every engine
  step while its members decode carries at least those still running, so with n_1 ≥ … ≥ n_g its
  members' engine steps (L_j / t_j: L_j the length, t_j the expected tokens per step at the
  member's own acceptance α_j of the fresh drafter) the group takes at least
  Σ_r (n_r − n_{r+1}) · f(r) + c · Σ_j n_j (L_j − t_j) / 2 — f(r) the context-free cost of a step
  of r sequences, c the cost per context token held (the long tail priced at the batch it decodes
  in, and at the context it has grown, instead of one sequence at an empty context); the value the
  slowest group's time exceeds with probability 99 % over the workload's own draws (group
  correlation included, fixed seed). Async, step j's groups are admitted once version j − L exists
  (the trainer finished step j − L − 1) and step j trains after they finish, so L + 1 steps hold
  the tail plus one trainer step: (tail + trainer) / (L + 1).

The same terms give `BoundModel.run_cost_key`, not a bound: how costly a candidate's run is to
simulate (KV-bound or not, the batches a step fills), which orders the runs a wave hands to the
workers (search.py).

The bounds use expected lengths and the mean acceptance, so they are estimates of a floor rather
than certain floors; the search multiplies them by `plan.search.bound_slack` (< 1) before it
prunes, and `tests/study/test_planner.py` checks them against simulated step times and the
search against brute force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.cost import training as tc
from specsim.scenario import Scenario, ScenarioError, apply_overrides
from specsim.workload.acceptance.laws import expected_tokens_per_verify
from specsim.workload.lengths.sampling import sample_group_lengths, sample_prompt_lengths
from specsim.world.resolve import resolve

__all__ = ["Bound", "BoundModel"]

#: quantile midpoints the expected-sequence terms are priced on
QUANTILES = 512
#: probability that the step's longest response reaches the latency bound's length
TAIL_CONFIDENCE = 0.99
#: sampled steps the tail bound's quantile is taken over
TAIL_DRAWS = 50


@dataclass(frozen=True)
class Bound:
    trainer_s: float
    throughput_s: float
    latency_s: float

    @property
    def step_s(self) -> float:
        return max(self.trainer_s, self.throughput_s, self.latency_s)

    @property
    def binding(self) -> str:
        vals = {"trainer": self.trainer_s, "throughput": self.throughput_s, "latency": self.latency_s}
        return max(vals, key=vals.get)


@dataclass(frozen=True)
class EngineTerms:
    """What one engine layout's step costs give the bounds, per sampled step (arrays over the
    draws): `work_s`, the engine-seconds the step's generation needs at least (its tokens at one
    engine's best tokens/s, plus the context its sequences read; the throughput bound is this over
    the engines), and `tail_s`, the slowest GRPO group's seconds on its engine."""

    work_s: np.ndarray
    tail_s: np.ndarray


@dataclass(frozen=True)
class Draws:
    """TAIL_DRAWS steps of the workload drawn with its own laws (GRPO group correlation included,
    fixed seed), shared by every candidate: response lengths (prompts × group size) and each
    group's prompt length."""

    lengths: tuple[np.ndarray, ...]
    prompts: tuple[np.ndarray, ...]


class BoundModel:
    """Bounds for the candidates of one scenario (worlds, engine terms and trainer costs cached).

    Feasibility is the run's own: a candidate is resolved exactly as `specsim run --set <its
    overrides>` resolves it (`world/resolve.py`: the memory plans of both pools, the layout rules,
    the trainer layout), so `bound` raises the ScenarioError the run would raise, and nothing else.
    The engine terms are per engine (one engine's batch, KV cache and step costs) and are read from
    the candidate's own world, so a trainer that needs more than one replica's GPUs never makes a
    rollout layout look infeasible. Every term is priced on the same sampled steps (`Draws`), and a
    bound is the value its sampled steps exceed with probability TAIL_CONFIDENCE."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self._worlds: dict = {}   # candidate key (lag and steps left out: neither changes a resolve) -> world | error
        self._engine: dict = {}
        self._trainer: dict = {}
        self._stages: dict = {}   # (hardware, training GPUs) -> logprob + train per sampled step
        self._tails: dict = {}   # k -> TailGroups (the same workload for every layout)
        self._draws: Draws | None = None
        self._mean_ctx: float | None = None

    @staticmethod
    def _key(c) -> tuple:
        return (c.hardware, c.rollout_gpus, c.training_gpus, c.layout, c.policy, c.k)

    def world(self, c):
        """The candidate's resolved world, as `specsim run` resolves it (raises its ScenarioError)."""

        key = self._key(c)
        if key not in self._worlds:
            try:
                self._worlds[key] = resolve(apply_overrides(self.sc, dict(c.overrides)))
            except ScenarioError as exc:
                self._worlds[key] = exc
        w = self._worlds[key]
        if isinstance(w, Exception):
            raise w
        return w

    def draws(self, w) -> Draws:
        if self._draws is None:
            self._draws = _workload_draws(w)
        return self._draws

    def engine_terms(self, c) -> EngineTerms:
        """The candidate's engine-side terms (its layout's step costs, the sampled steps)."""
        key = (c.hardware, c.layout, c.policy, c.k)
        w = self.world(c)      # feasibility first: the run's refusal, whatever the engine terms
        if key not in self._engine:
            k = c.k if c.policy != "off" else 0
            if k not in self._tails:
                self._tails[k] = _tail_groups(w, k, self.draws(w))
            self._engine[key] = _engine_terms(w, k, self._tails[k], self.mean_context_tokens(w))
        return self._engine[key]

    def mean_context_tokens(self, w) -> float:
        """`_mean_context_tokens` of the workload, once: the same for every candidate."""
        if self._mean_ctx is None:
            self._mean_ctx = _mean_context_tokens(w)
        return self._mean_ctx

    def trainer_s(self, c) -> np.ndarray:
        """The trainer's seconds per sampled step: reward + logprob + train + weight sync
        (+ the engines' prepare, colocated), one after another on the trainer pool."""
        key = (c.hardware, c.rollout_gpus, c.training_gpus, c.layout)
        if key not in self._trainer:

            w = self.world(c)
            tl = w.trainer.layout
            colocated = w.pipeline.mode == "sync"
            sync = tc.refit_s(w.model, w.trainer_hw, w.layout, w.rollout.gpus, tl, colocated=colocated,
                              rollout_hw=w.hw) + (w.pipeline.engine_prepare_s if colocated else 0.0)
            stages_key = (c.hardware, c.training_gpus, c.rollout_gpus if colocated else None)
            if stages_key not in self._stages:     # logprob + train: the trainer's layout and the draws only
                d = self.draws(w)
                self._stages[stages_key] = np.asarray(
                    [tc.logprob_s(w.model, w.trainer_hw, tl, seqs) + tc.train_s(w.model, w.trainer_hw, tl, seqs)
                     for seqs in (tc.sequence_tokens(np.repeat(P, L.shape[1]), L.ravel())
                                  for L, P in zip(d.lengths, d.prompts))], float)
            self._trainer[key] = w.pipeline.reward_s + self._stages[stages_key] + sync
        return self._trainer[key]

    def run_cost_key(self, c) -> tuple[bool, float]:
        """How costly the candidate's run is to simulate, for the order in which a wave submits its
        runs (costliest first, so a long run does not end a wave alone on one worker; no result
        depends on the order): first whether its engines are KV-bound (their KV cache holds fewer
        sequences of the mean context than max_batch: the pool preempts and readmits all step
        long — on the 235B plan its TP2·EP2 runs take 33–42 CPU-s where its batch-bound layouts take
        2–5, docs/benchmarks.md), then the batches a step's responses fill (responses per engine ÷
        the batch one engine runs)."""
        w = self.world(c)
        fit = _batch_fit(w, self.mean_context_tokens(w))
        per_engine = w.workload.prompts * w.workload.group_size / max(w.engines, 1)
        return fit < int(w.rollout.max_batch), per_engine / fit

    def bound(self, c) -> Bound:
        terms = self.engine_terms(c)
        engines = c.rollout_gpus // (max(c.layout[0], c.layout[1]) * c.layout[2])
        thr, tail = terms.work_s / engines, terms.tail_s
        tr = self.trainer_s(c)
        if c.training_gpus is None:          # sync: generation, then the trainer's stages
            return Bound(_low(tr + np.maximum(thr, tail)), _low(tr + thr), _low(tr + tail))
        # step j's groups start once version j - L exists (after the trainer's step j - L - 1) and
        # its training follows their finish: (L + 1) steps hold the tail and one trainer step
        return Bound(_low(tr), _low(thr), _low(tail + tr) / (c.lag + 1))


def _low(x: np.ndarray) -> float:
    """The value the sampled steps' figure exceeds with probability TAIL_CONFIDENCE."""
    return float(np.quantile(x, 1.0 - TAIL_CONFIDENCE))


def _workload_draws(w) -> Draws:

    wl = w.workload
    rng = np.random.default_rng(12345)
    lengths, prompts = [], []
    for _ in range(TAIL_DRAWS):
        lengths.append(sample_group_lengths(w.response_dist, rng, wl.prompts, wl.group_size, wl.max_response_tokens,
                                            wl.group_correlation).astype(float))
        prompts.append(sample_prompt_lengths(w.prompt_dist, rng, wl.prompts, wl.max_prompt_tokens).astype(float))
    return Draws(tuple(lengths), tuple(prompts))


def _mean_context_tokens(w) -> float:
    """A sequence's mean context at its finish: the mean prompt plus the mean response, each at
    the distributions' quantile midpoints, truncated at the caps."""
    wl = w.workload
    u = (np.arange(QUANTILES) + 0.5) / QUANTILES
    resp = np.clip(np.rint(w.response_dist.ppf(u)), 1, wl.max_response_tokens)
    prompt_mean = float(np.mean(np.clip(np.rint(w.prompt_dist.ppf(u)), 1, wl.max_prompt_tokens)))
    return prompt_mean + float(resp.mean())


def _batch_fit(w, mean_ctx: float) -> int:
    """The batch one engine runs at most: max_batch, or the sequences of the mean context its KV
    cache holds if fewer (at least 1)."""
    return max(1, min(int(w.rollout.max_batch), int(w.kv_capacity_tokens // max(mean_ctx, 1.0))))


def _engine_terms(w, k: int, g: TailGroups, mean_ctx: float) -> EngineTerms:
    acc = w.acceptance
    tpv = 1.0 if k == 0 else 1.0 + acc.proposal_rate * (acc.tau(k) - 1.0)
    table = w.table
    i = table.index(k)
    fit = _batch_fit(w, mean_ctx)
    b = np.arange(1, fit + 1)
    per_engine = float(np.max(b * tpv / table.fixed_s[i, 1:fit + 1]))
    per_ctx = float(np.min(table.per_ctx_s[i, 1:]))
    work = np.array([t / per_engine + per_ctx * a.sum() for t, a in zip(g.tokens, g.ctx_area)])
    return EngineTerms(work, _tail_s(g, table.fixed_s[i], per_ctx))


@dataclass(frozen=True)
class TailGroups:
    """The sampled steps' GRPO groups at one draft length, as the latency and throughput bounds
    price them: per draw, each group's members' engine steps sorted longest first (`steps`, groups
    × group size, L_j / t_j), each group's context area (`ctx_area`: Σ_j steps_j · (P + (L_j −
    t_j) / 2) token-steps, the context its members attend over summed over their steps; P the
    group's prompt) and the step's tokens."""

    steps: tuple[np.ndarray, ...]
    ctx_area: tuple[np.ndarray, ...]
    tokens: tuple[float, ...]


def _tail_groups(w, k: int, d: Draws) -> TailGroups:
    """Each sampled response's engine steps L_j / t_j (t_j the tokens it emits per step at its own
    acceptance α_j drawn from the fresh drafter, its own fixed seed; staleness only lowers α)."""

    rng = np.random.default_rng(54321)
    acc = w.acceptance
    steps, area, tokens = [], [], []
    for L, P in zip(d.lengths, d.prompts):
        if k == 0:
            t = np.ones_like(L)
        else:
            a = acc.sample_alphas(rng, L.size, 0)
            t = 1.0 + acc.proposal_rate * (np.asarray(expected_tokens_per_verify(a, k, acc.decay), float) - 1.0)
            t = t.reshape(L.shape)
        n = L / t
        steps.append(-np.sort(-n, axis=1))
        area.append(np.sum(n * (P[:, None] + np.maximum(L - t, 0.0) / 2.0), axis=1))
        tokens.append(float(L.sum()))
    return TailGroups(tuple(steps), tuple(area), tuple(tokens))


def _tail_s(groups: TailGroups, fixed_s: np.ndarray, per_ctx_s: float) -> np.ndarray:
    """Seconds each sampled step's slowest GRPO group needs on its engine, at least (the latency
    bound's tail).

    A group goes whole to one engine (`sim/stream.py`), so every engine step while its members run
    carries at least those still running: with n_1 ≥ … ≥ n_g the members' engine steps, the group
    costs at least Σ_r (n_r − n_{r+1}) · f(r) + c · area, f(r) the context-free cost of a step of r
    sequences (`fixed_s`, made non-decreasing from above: more sequences never cost less) and c the
    least cost per context token (`per_ctx_s`). Members that start apart (queued, preempted) only
    spread the same steps over more engine steps: for f concave on 0, 1, … with f(0) = 0
    (subadditive) that costs no less (Karamata), so the aligned start is the least; where f is not
    concave there, only the longest member's steps at f(1) are counted."""
    top = len(fixed_s) - 1
    f = np.minimum.accumulate(fixed_s[::-1])[::-1]
    size = groups.steps[0].shape[1]
    r = np.minimum(np.arange(1, size + 1), top)
    fr = f[r]
    inc = np.diff(np.concatenate([[0.0], fr]))
    concave = bool(np.all(np.diff(inc) <= 1e-12 * max(fr[-1], 1e-30)))
    out = []
    for n, area in zip(groups.steps, groups.ctx_area):
        if concave:
            gaps = n - np.concatenate([n[:, 1:], np.zeros((n.shape[0], 1))], axis=1)
            t = gaps @ fr + per_ctx_s * area
        else:
            t = n[:, 0] * fr[0]
        out.append(float(np.max(t)))
    return np.asarray(out)
