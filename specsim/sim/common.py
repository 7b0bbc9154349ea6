"""What an engine simulation takes in and gives back, shared by the fast and reference engines.

Semantics both engines implement (docs/design.md "Engine"):
* the queue is served in order; a response is admitted at a step boundary while the batch is
  below `max_batch` and its KV blocks fit; the n responses of a GRPO group share the prompt's
  KV blocks (prefix caching), which stay allocated while any member is active;
* admission leaves `watermark` of the blocks free (vLLM's watermark);
* admitting a response whose group has no active member prefills the prompt; readmitting a
  preempted response recomputes its prompt (if not cached) and its generated tokens (vLLM's
  recompute preemption); all prefills at one boundary are one pass;
* the SD policy is consulted whenever the batch changes; a step with draft length k reserves
  k+1 token slots per sequence; if the blocks do not fit, the most recently admitted response
  is preempted (repeat until they do);
* a step costs table.fixed_s[k, n] + table.per_ctx_s[k, n] · Σ context; each sequence emits
  1 + accepted tokens (k = 0: exactly 1), never more than it has left;
* proposal rate p (`EngineConfig.proposal_rate`): at a step with k > 0 each sequence carries a
  draft with probability p, independently per request-step (vLLM's n-gram proposer returns no
  draft when it finds no match); one without a draft emits exactly 1 token. So the tokens per
  request-step are 1 + p·(τ − 1), and the mean acceptance length the engines report is vLLM's,
  conditional on a draft: 1 + accepted / (request-steps with a draft) (vLLM
  v1/spec_decode/metrics.py: `mean_acceptance_length = 1 + (num_accepted_tokens / num_drafts)`,
  with `num_drafts` counted by `observe_draft`, which the scheduler calls only
  `if scheduled_spec_token_ids:`). The step is priced at the expected query tokens
  (cost/step.py), so the engines differ from a per-step pricing only by Jensen's gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specsim.cost.step import StepCostTable
from specsim.errors import InvariantError
from specsim.policy import PolicyContext, SDPolicy
from specsim.workload.acceptance.context import ContextAcceptance


@dataclass(frozen=True)
class EngineConfig:
    """One rollout engine: its cost table, SD policy, batch and KV limits, and prefill pricing."""

    name: str
    table: StepCostTable
    policy: SDPolicy
    policy_ctx: PolicyContext
    max_batch: int
    kv_capacity_tokens: int
    block_tokens: int
    prefill_batches_s: Callable[..., np.ndarray]
    position_decay: float = 1.0
    record_timeline: bool = True
    watermark: float = 0.01
    proposal_rate: float = 1.0
    context: ContextAcceptance | None = None   # acceptance falling with the context (workload/acceptance/context.py)

    @property
    def capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_tokens

    @property
    def admission_blocks(self) -> int:
        """Blocks admission may fill: vLLM keeps a watermark (default 1 % of the KV blocks) free
        when it admits, so a just-admitted request is not preempted at its first step."""
        return self.capacity_blocks - int(self.watermark * self.capacity_blocks)


class PrefillLog:
    """The prefill passes of one rollout, recorded as they happen and priced together at the end.

    Prefill durations shift wall time but never the order of engine events (admission, preemption
    and finishing are decided in step counts and KV blocks), so an engine may keep time without
    them and add the cumulative prefill time afterwards: a time recorded after `i` prefill passes
    is shifted by the first `i` durations. One vectorized pricing call replaces one per pass."""

    def __init__(self):
        self.n: list[float] = []
        self.sum_q: list[float] = []
        self.sum_q_sq: list[float] = []
        self.sum_qc: list[float] = []
        self.sum_c: list[float] = []

    def __len__(self) -> int:
        return len(self.n)

    def add(self, q: list[float], c: list[float]) -> None:
        """One prefill pass: sequence i brings q[i] tokens on top of c[i] cached ones."""
        self.n.append(float(len(q)))
        self.sum_q.append(float(sum(q)))
        self.sum_q_sq.append(float(sum(x * x for x in q)))
        self.sum_qc.append(float(sum(x * y for x, y in zip(q, c))))
        self.sum_c.append(float(sum(c)))

    def offsets_s(self, price) -> np.ndarray:
        """Cumulative prefill time before pass 0, 1, ..., len: element i shifts times after i passes."""
        if len(self.n) == 1:  # scalars take the cost model's cheap float path
            dur = np.atleast_1d(price(self.n[0], self.sum_q[0], self.sum_q_sq[0], self.sum_qc[0], self.sum_c[0]))
        else:
            dur = price(np.asarray(self.n), np.asarray(self.sum_q), np.asarray(self.sum_q_sq),
                        np.asarray(self.sum_qc), np.asarray(self.sum_c)) if self.n else np.zeros(0)
        return np.concatenate(([0.0], np.cumsum(dur)))


@dataclass(frozen=True)
class EngineWork:
    """The responses one engine must generate, in queue order (groups contiguous). `step_ids`: the
    RL step each response belongs to (continuous async generation; default all 0)."""

    response_ids: np.ndarray
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    alphas: np.ndarray
    step_ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.response_ids)


@dataclass
class Timeline:
    """Engine timeline rows: a step (reference) or a segment between events (fast engine)."""

    t_s: list = field(default_factory=list)
    active: list = field(default_factory=list)
    tokens_per_s: list = field(default_factory=list)
    k: list = field(default_factory=list)
    kv_tokens: list = field(default_factory=list)

    def add(self, t_s, active, tokens_per_s, k, kv_tokens):
        self.t_s.append(t_s)
        self.active.append(active)
        self.tokens_per_s.append(tokens_per_s)
        self.k.append(k)
        self.kv_tokens.append(kv_tokens)

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"t_s": np.asarray(self.t_s, float), "active": np.asarray(self.active, float),
                "tokens_per_s": np.asarray(self.tokens_per_s, float), "k": np.asarray(self.k, int),
                "kv_tokens": np.asarray(self.kv_tokens, float)}


@dataclass
class EngineResult:
    """What one engine did. Per-response arrays are in the order of EngineWork."""

    name: str
    response_ids: np.ndarray
    admit_s: np.ndarray
    finish_s: np.ndarray
    tokens: np.ndarray
    preemptions: np.ndarray
    rollout_s: float
    steps: float
    sd_steps: float
    seq_steps: float
    sd_seq_steps: float
    sd_tokens: float
    draft_passes: float
    prefill_s: float
    timeline: dict[str, np.ndarray]
    weighted_active: float = 0.0
    admit_version: np.ndarray | None = None   # policy version each response was admitted under
    draft_seq_steps: float | None = None      # request-steps that carried a draft (None: all SD ones)
    seq_sd_tokens: np.ndarray | None = None   # per response: the tokens it emitted under SD
    seq_sd_steps: np.ndarray | None = None    # per response: its request-steps under SD
    token_batch_sum: float = 0.0              # Σ over steps of tokens emitted × the active batch then
    token_sum: float = 0.0                    # Σ over the same steps of tokens emitted

    @property
    def total_tokens(self) -> int:
        return int(self.tokens.sum())

    @property
    def mean_accept_len(self) -> float:
        """τ as vLLM reports it: 1 + accepted tokens / request-steps that carried a draft (nan
        without SD); with every request-step drafting, tokens per sequence per verify step."""
        return conditional_tau(self.sd_tokens, self.sd_seq_steps, self.draft_seq_steps)

    @property
    def tokens_per_seq_step(self) -> float:
        """Effective tokens per request-step under SD, 1 + p·(τ − 1) (nan without SD)."""
        return self.sd_tokens / self.sd_seq_steps if self.sd_seq_steps > 0 else float("nan")

    @property
    def mean_active_batch(self) -> float:
        """Time-weighted mean active batch."""
        return self.weighted_active / self.rollout_s if self.rollout_s > 0 else 0.0

    @property
    def token_weighted_batch(self) -> float:
        """The active batch a generated token saw: Σ tokens × batch ÷ Σ tokens over the engine's
        steps (nan if it emitted nothing)."""
        return self.token_batch_sum / self.token_sum if self.token_sum > 0 else float("nan")


def last_finishers_tau(finish_s: np.ndarray, seq_sd_tokens: np.ndarray | None, seq_sd_steps: np.ndarray | None,
                       proposal_rate: float) -> float:
    """τ (vLLM's, conditional on a draft) of the response(s) that finished last — the one that
    set the rollout's end — pooled over ties: 1 + accepted / (p · their SD request-steps), as
    `conditional_tau` counts a step's trajectories. nan without SD steps or responses."""
    if seq_sd_tokens is None or seq_sd_steps is None or len(finish_s) == 0:
        return float("nan")
    last = finish_s == np.max(finish_s)
    steps = float(seq_sd_steps[last].sum())
    return conditional_tau(float(seq_sd_tokens[last].sum()), steps, proposal_rate * steps)


def conditional_tau(sd_tokens: float, sd_seq_steps: float, draft_seq_steps: float | None) -> float:
    """vLLM's mean acceptance length from SD counters: every SD request-step emits 1 + accepted,
    so accepted = sd_tokens − sd_seq_steps, over the request-steps that carried a draft."""
    if sd_seq_steps <= 0:
        return float("nan")
    if draft_seq_steps is None or draft_seq_steps == sd_seq_steps:
        return sd_tokens / sd_seq_steps
    if draft_seq_steps <= 0:
        return float("nan")
    return 1.0 + (sd_tokens - sd_seq_steps) / draft_seq_steps


def check_result(res: EngineResult, work: EngineWork, cfg: EngineConfig) -> None:
    """Run-time invariants: every response finished exactly once with its drawn length, times
    monotone and within the rollout, timeline KV within budget. Raises InvariantError."""
    n = len(work)
    if len(res.tokens) != n or len(np.unique(res.response_ids)) != n:
        raise InvariantError(cfg.name, int(res.steps), "responses", f"{len(res.tokens)} results for {n} responses")
    if not np.array_equal(res.tokens, work.response_tokens):
        bad = int(np.flatnonzero(res.tokens != work.response_tokens)[0])
        raise InvariantError(cfg.name, int(res.steps), "tokens",
                             f"response {int(work.response_ids[bad])} emitted {int(res.tokens[bad])} "
                             f"of {int(work.response_tokens[bad])} tokens")
    if res.sd_seq_steps > 0:
        tau = res.sd_tokens / res.sd_seq_steps
        k_top = max(cfg.policy.ks)
        if not (1 - 1e-9 <= tau <= k_top + 1 + 1e-9) or res.sd_tokens > res.tokens.sum() + 1e-6:
            raise InvariantError(cfg.name, int(res.steps), "tau",
                                 f"{res.sd_tokens:.1f} SD tokens over {res.sd_seq_steps:.0f} sequence-steps "
                                 f"(τ = {tau:.3f}; must lie in [1, {k_top + 1}] with no more tokens than emitted)")
    if n and (np.any(~np.isfinite(res.finish_s)) or np.any(res.finish_s < res.admit_s - 1e-9)
              or res.finish_s.max() > res.rollout_s + 1e-6):
        raise InvariantError(cfg.name, int(res.steps), "time", "a response finished before admission or after the end")
    t = res.timeline.get("t_s")
    if t is not None and len(t) > 1 and np.any(np.diff(t) < -1e-9):
        raise InvariantError(cfg.name, int(res.steps), "time", "timeline is not monotone")
    kv = res.timeline.get("kv_tokens")
    kv = kv[np.isfinite(kv)] if kv is not None else kv  # the closed-form tail records no KV level
    if kv is not None and len(kv) and kv.max() > cfg.kv_capacity_tokens * (1 + 1e-9) + cfg.block_tokens:
        raise InvariantError(cfg.name, int(res.steps), "kv_tokens",
                             f"{kv.max():.0f} tokens in use over a budget of {cfg.kv_capacity_tokens}")
