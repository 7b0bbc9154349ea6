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
  b·(1 + p·(τ_k − 1)) tokens (τ_k the drafter's mean acceptance length at k, p its proposal rate).
* **latency** — the step's slowest response decodes one engine step at a time, each at least the
  batch-1 step cost: max_i L_i / t_i engine steps (L_i its length, t_i its expected tokens per
  step at its own acceptance α_i of the fresh drafter), the value this maximum exceeds with
  probability 99 % over the workload's own draws (group correlation included, fixed seed); async,
  step j's groups are admitted once version j − L exists (the trainer finished step j − L − 1)
  and step j trains after they finish, so L + 1 steps hold the tail plus one trainer step:
  (tail + trainer) / (L + 1).

The bounds use expected lengths and the mean acceptance, so they are estimates of a floor rather
than certain floors; the search multiplies them by `plan.search.bound_slack` (< 1) before it
prunes, and `tests/study/test_planner.py` checks them against simulated step times and the
search against brute force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.scenario import Scenario, apply_overrides

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


class BoundModel:
    """Bounds for the candidates of one scenario (worlds, engine terms and trainer costs cached).

    Feasibility is the run's own: a candidate is resolved exactly as `specsim run --set <its
    overrides>` resolves it (`world/resolve.py`: the memory plans of both pools, the layout rules,
    the trainer layout), so `bound` raises the ScenarioError the run would raise, and nothing else.
    The engine terms are per engine (one engine's batch, KV cache and step costs) and are read from
    the candidate's own world, so a trainer that needs more than one replica's GPUs never makes a
    rollout layout look infeasible."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self._worlds: dict = {}   # candidate key (lag and steps left out: neither changes a resolve) -> world | error
        self._engine: dict = {}
        self._trainer: dict = {}
        self._tails: dict = {}   # k -> the tail's engine steps (the same workload for every layout)

    @staticmethod
    def _key(c) -> tuple:
        return (c.hardware, c.rollout_gpus, c.training_gpus, c.layout, c.policy, c.k)

    def world(self, c):
        """The candidate's resolved world, as `specsim run` resolves it (raises its ScenarioError)."""
        from specsim.scenario import ScenarioError
        from specsim.world.resolve import resolve

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

    def engine_terms(self, c) -> tuple[float, float, float]:
        """(tokens per step, best tokens/s of one engine, latency of the longest response at batch 1)."""
        key = (c.hardware, c.layout, c.policy, c.k)
        w = self.world(c)      # feasibility first: the run's refusal, whatever the engine terms
        if key not in self._engine:
            self._engine[key] = _engine_terms(w, c.k if c.policy != "off" else 0, self._tails)
        return self._engine[key]

    def trainer_s(self, c) -> float:
        key = (c.hardware, c.rollout_gpus, c.training_gpus, c.layout)
        if key not in self._trainer:
            from specsim.cost import training as tc

            w = self.world(c)
            seqs = tc.sequence_tokens(*_expected_lengths(w))
            tl = w.trainer.layout
            colocated = w.pipeline.mode == "sync"
            sync = tc.refit_s(w.model, w.trainer_hw, w.layout, w.rollout.gpus, tl, colocated=colocated,
                              rollout_hw=w.hw) + (w.pipeline.engine_prepare_s if colocated else 0.0)
            self._trainer[key] = float(w.pipeline.reward_s + tc.logprob_s(w.model, w.trainer_hw, tl, seqs)
                                       + tc.train_s(w.model, w.trainer_hw, tl, seqs) + sync)
        return self._trainer[key]

    def bound(self, c) -> Bound:
        tokens, per_engine, latency = self.engine_terms(c)
        engines = c.rollout_gpus // (max(c.layout[0], c.layout[1]) * c.layout[2])
        thr = tokens / (engines * per_engine)
        trainer = self.trainer_s(c)
        if c.training_gpus is None:          # sync: generation, then the trainer's stages
            return Bound(trainer + max(thr, latency), trainer + thr, trainer + latency)
        # step j's groups start once version j - L exists (after the trainer's step j - L - 1) and
        # its training follows their finish: (L + 1) steps hold the tail and one trainer step
        return Bound(trainer, thr, (latency + trainer) / (c.lag + 1))


def _expected_lengths(w) -> tuple[np.ndarray, np.ndarray]:
    """A step's prompt and response lengths at quantile midpoints, one per response."""
    wl = w.workload
    n = wl.prompts * wl.group_size
    u = (np.arange(n) + 0.5) / n
    resp = np.clip(np.rint(w.response_dist.ppf(u)), 1, wl.max_response_tokens)
    prompt = np.clip(np.rint(w.prompt_dist.ppf(u)), 1, wl.max_prompt_tokens)
    return prompt, resp


def _engine_terms(w, k: int, tails: dict) -> tuple[float, float, float]:
    wl = w.workload
    u = (np.arange(QUANTILES) + 0.5) / QUANTILES
    resp = np.clip(np.rint(w.response_dist.ppf(u)), 1, wl.max_response_tokens)
    prompt_mean = float(np.mean(np.clip(np.rint(w.prompt_dist.ppf(u)), 1, wl.max_prompt_tokens)))
    n_resp = wl.prompts * wl.group_size
    tokens = float(resp.mean()) * n_resp
    acc = w.acceptance
    tpv = 1.0 if k == 0 else 1.0 + acc.proposal_rate * (acc.tau(k) - 1.0)
    table = w.table
    i = table.index(k)
    bmax = int(w.rollout.max_batch)
    mean_ctx = prompt_mean + float(resp.mean())
    fit = max(1, min(bmax, int(w.kv_capacity_tokens // max(mean_ctx, 1.0))))
    b = np.arange(1, fit + 1)
    per_engine = float(np.max(b * tpv / table.fixed_s[i, 1:fit + 1]))
    if k not in tails:
        tails[k] = _tail_verify_steps(w, k)
    latency = tails[k] * float(table.fixed_s[i, 1])
    return tokens, per_engine, latency


def _tail_verify_steps(w, k: int) -> float:
    """Engine steps the step's slowest response needs, at least: a value max_i L_i / t_i reaches
    with probability TAIL_CONFIDENCE over the workload's draws (L_i its length, t_i the tokens it
    emits per step at its own acceptance α_i drawn from the fresh drafter -- staleness only lowers
    α). Sampled with the workload's own laws (GRPO group correlation included), fixed seed."""
    from specsim.workload.acceptance.laws import expected_tokens_per_verify
    from specsim.workload.lengths.sampling import sample_group_lengths

    wl = w.workload
    rng = np.random.default_rng(12345)
    acc = w.acceptance
    out = []
    for _ in range(TAIL_DRAWS):
        L = sample_group_lengths(w.response_dist, rng, wl.prompts, wl.group_size, wl.max_response_tokens,
                                 wl.group_correlation).ravel().astype(float)
        if k == 0:
            out.append(float(L.max()))
            continue
        a = acc.sample_alphas(rng, L.size, 0)
        t = 1.0 + acc.proposal_rate * (np.asarray(expected_tokens_per_verify(a, k, acc.decay), float) - 1.0)
        out.append(float(np.max(L / t)))
    return float(np.quantile(out, 1.0 - TAIL_CONFIDENCE))
