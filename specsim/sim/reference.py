"""The reference engine: one loop iteration per engine step. Slow, obvious, the test oracle.

It implements the semantics in sim/common.py literally: block-granular KV, admission at step
boundaries, recompute preemption of the newest response, per-step sampling of accepted draft
tokens for every sequence; with a proposal rate p < 1, one Bernoulli(p) draw per sequence per
SD step decides whether it carries a draft (else it emits one token), counted as vLLM counts
`num_drafts`.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

import numpy as np

from specsim.policy import choose_k
from specsim.sim.common import EngineConfig, EngineResult, EngineWork, PrefillLog, Timeline, check_result
from specsim.workload.acceptance.checks import alpha_array, decay_array
from specsim.workload.acceptance.laws import check_rng, draw_tokens_per_verify


def _blocks(tokens, block: int):
    return -(-np.asarray(tokens, dtype=np.int64) // block)


class ReferenceEngine:
    """The reference engine's state between `run` calls (continuous generation, sim/stream.py):
    `release` makes queued responses admissible from a time, `switch` changes the policy version
    and per-sequence acceptance at a time (in flight, or after the running batch drains), and
    `run(until_s, watch_step)` stops at the first step boundary at or after `until_s` or when RL
    step `watch_step` has finished on this engine."""

    def __init__(self, cfg: EngineConfig, work: EngineWork, rng: np.random.Generator, *, open_: bool = False,
                 max_steps: int = 50_000_000):
        n = len(work)
        self.cfg, self.work, self.rng, self.max_steps = cfg, work, rng, max_steps
        check_rng(rng)
        self.decay = float(decay_array(cfg.position_decay))    # checked once; every step draws with it
        self.P = work.prompt_tokens.astype(np.int64)
        self.L = work.response_tokens.astype(np.int64)
        self.groups = work.group_ids
        self.alphas = alpha_array(work.alphas).copy()   # checked here and at each switch, not at every step
        self.gen = np.zeros(n, dtype=np.int64)
        self.seq_sd_tokens = np.zeros(n)   # per-response tokens and steps under SD
        self.seq_sd_steps = np.zeros(n)
        self.admit_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.admit_version = np.full(n, -1, dtype=np.int64)
        self.preempt = np.zeros(n, dtype=np.int64)
        self.queue = list(range(n))  # front = next to admit
        self.active: list[int] = []  # in admission order
        self.group_active: dict[int, int] = {}
        self.tl = Timeline()
        self.t = 0.0
        self.steps = self.sd_steps = self.seq_steps = self.sd_seq_steps = self.sd_tokens = self.draft_passes = 0
        self.draft_seq_steps = 0
        self.prefill_total = self.weighted_active = 0.0
        self.token_sum = self.token_batch_sum = 0      # Σ tokens emitted, Σ tokens × active batch over steps
        self.k = 0
        self.batch_changed = True
        self.prompt_blocks = {int(g): int(b) for g, b in zip(self.groups, _blocks(self.P, cfg.block_tokens))}
        self.slots_max = max(cfg.policy.ks) + 1
        steps = work.step_ids if work.step_ids is not None else np.zeros(n, dtype=np.int64)
        self.step_ids = np.asarray(steps, dtype=np.int64)
        u, c = np.unique(self.step_ids, return_counts=True)
        self.remaining = dict(zip(u.tolist(), c.tolist()))
        self.arrival = np.full(n, np.inf if open_ else 0.0)
        self.events: list = []
        self.gate = None
        self.policy_version = 0
        self._seq = 0

    def used_blocks(self, extra_per_seq: int) -> int:
        if not self.active:
            return 0
        idx = np.asarray(self.active)
        gb = sum(self.prompt_blocks[g] for g in self.group_active)
        return gb + int(_blocks(self.gen[idx] + extra_per_seq, self.cfg.block_tokens).sum())

    def ctx_total(self) -> float:
        return float((self.P[self.active] + self.gen[self.active]).sum()) if self.active else 0.0

    def release(self, idx, t_s: float) -> None:
        self.arrival[idx] = t_s
        self._push(t_s, "release", None)

    def switch(self, t_s: float, version: int, alphas, mean_alpha: float, in_flight: bool, laws=None,
               lo: int = 0, pause_s: float = 0.0) -> None:
        self._push(t_s, "switch", (version, alpha_array(alphas), float(mean_alpha), in_flight, lo,
                                   float(pause_s)))

    def _push(self, t_s, kind, payload):
        self._seq += 1
        heapq.heappush(self.events, (float(t_s), self._seq, kind, payload))

    def _apply(self, payload) -> None:
        version, alphas, mean_alpha = payload[:3]
        self.policy_version = version
        self.alphas[payload[4]:] = alphas
        self.cfg = replace(self.cfg, policy_ctx=replace(self.cfg.policy_ctx, alpha_estimate=mean_alpha))
        self.batch_changed = True

    def _events(self) -> None:
        while self.events and self.events[0][0] <= self.t:
            _, _, kind, payload = heapq.heappop(self.events)
            if kind == "switch":
                if payload[3]:
                    self._apply(payload)
                    self.t += payload[5]      # in flight: the engine stops while it loads the weights
                else:
                    self.gate = payload
        if self.gate is not None and not self.active:
            self._apply(self.gate)
            self.gate = None

    def run(self, until_s: float = np.inf, watch_step: int | None = None) -> float:
        cfg, P, gen, groups = self.cfg, self.P, self.gen, self.groups
        blk, cap = cfg.block_tokens, cfg.capacity_blocks
        while True:
            self._events()
            cfg = self.cfg
            if watch_step is not None and self.remaining.get(watch_step, 0) == 0:
                return self.t
            if self.t >= until_s:
                return self.t
            active, queue, group_active = self.active, self.queue, self.group_active
            # 1. the running batch keeps its k+1 slots per sequence: preempt the newest until it fits
            if self.batch_changed and active:
                self.k = choose_k(cfg.policy, cfg.policy_ctx, len(active), self.ctx_total())
                self.batch_changed = False
            preempted = False
            while len(active) > 1 and self.used_blocks(self.k + 1) > cap:
                j = active.pop()
                g = int(groups[j])
                group_active[g] -= 1
                if group_active[g] == 0:
                    del group_active[g]
                self.preempt[j] += 1
                queue.insert(0, j)
                preempted = True
                self.k = choose_k(cfg.policy, cfg.policy_ctx, len(active), self.ctx_total())
            # 2. admission (none at a boundary that preempted), reserving the policy's largest k
            admitted_q, admitted_c = [], []
            while (queue and not preempted and self.gate is None and len(active) < cfg.max_batch
                   and self.arrival[queue[0]] <= self.t):
                i = queue[0]
                g = int(groups[i])
                need = int(_blocks(gen[i] + self.slots_max, blk)) + (0 if g in group_active else self.prompt_blocks[g])
                if active and self.used_blocks(self.slots_max) + need > cfg.admission_blocks:
                    break
                queue.pop(0)
                if g not in group_active:
                    admitted_q.append(P[i] + gen[i])
                    admitted_c.append(0)
                elif gen[i] > 0:
                    admitted_q.append(gen[i])
                    admitted_c.append(P[i])
                group_active[g] = group_active.get(g, 0) + 1
                active.append(i)
                if np.isnan(self.admit_s[i]):
                    self.admit_s[i] = self.t
                    self.admit_version[i] = self.policy_version
                self.batch_changed = True
            if admitted_q:
                one_pass = PrefillLog()
                one_pass.add([float(x) for x in admitted_q], [float(x) for x in admitted_c])
                dt = float(one_pass.offsets_s(cfg.prefill_batches_s)[-1])
                self.t += dt
                self.prefill_total += dt
            if not active:
                t_next = min(self.events[0][0] if self.events else np.inf, until_s)
                if t_next == np.inf:
                    return self.t
                if cfg.record_timeline:
                    self.tl.add(self.t, 0, 0.0, self.k, 0)
                self.t = max(self.t, t_next)
                continue
            self._step()
            if self.steps > self.max_steps:
                raise RuntimeError(f"{cfg.name}: reference engine exceeded {self.max_steps} steps")

    def _step(self) -> None:
        """One engine step of the whole batch: sample every sequence's accepted tokens."""
        cfg, P, L, gen = self.cfg, self.P, self.L, self.gen
        if self.batch_changed:
            self.k = choose_k(cfg.policy, cfg.policy_ctx, len(self.active), self.ctx_total())
            self.batch_changed = False
        k = self.k
        idx = np.asarray(self.active)
        nb = len(idx)
        dt = cfg.table.step_s(k, nb, float((P[idx] + gen[idx]).sum()))
        if k > 0:
            alphas = self.alphas[idx] if cfg.context is None else \
                alpha_array(cfg.context.alpha_at(self.alphas[idx], P[idx] + gen[idx]))
            emitted = draw_tokens_per_verify(self.rng, alphas, k, self.decay, cfg.policy.tree_for(k))
            if cfg.proposal_rate < 1.0:   # a request-step without a draft decodes one token
                proposes = self.rng.random(nb) < cfg.proposal_rate
                emitted = np.where(proposes, emitted, 1)
                self.draft_seq_steps += int(proposes.sum())
            else:
                self.draft_seq_steps += nb
        else:
            emitted = np.ones(nb, dtype=np.int64)
        emitted = np.minimum(emitted, L[idx] - gen[idx])
        gen[idx] += emitted
        if cfg.record_timeline:
            self.tl.add(self.t, nb, float(emitted.sum()) / dt, k, self.used_blocks(0) * cfg.block_tokens)
        self.t += dt
        self.weighted_active += nb * dt
        out = int(emitted.sum())
        self.token_sum += out
        self.token_batch_sum += nb * out
        self.steps += 1
        self.seq_steps += nb
        if k > 0:
            self.sd_steps += 1
            self.sd_seq_steps += nb
            self.sd_tokens += int(emitted.sum())
            self.draft_passes += k
            self.seq_sd_tokens[idx] += emitted
            self.seq_sd_steps[idx] += 1
        done = idx[gen[idx] >= L[idx]]
        if len(done):
            self.finish_s[done] = self.t
            done_set = set(done.tolist())
            self.active = [i for i in self.active if i not in done_set]
            for i in done.tolist():
                g = int(self.groups[i])
                self.group_active[g] -= 1
                if self.group_active[g] == 0:
                    del self.group_active[g]
                self.remaining[int(self.step_ids[i])] -= 1
            self.batch_changed = True

    def result(self) -> EngineResult:
        if self.cfg.record_timeline:
            self.tl.add(self.t, 0, 0.0, self.k, 0)
        return EngineResult(self.cfg.name, self.work.response_ids, self.admit_s, self.finish_s, self.gen.copy(),
                            self.preempt, self.t, self.steps, self.sd_steps, self.seq_steps, self.sd_seq_steps,
                            self.sd_tokens, self.draft_passes, self.prefill_total, self.tl.as_arrays(),
                            self.weighted_active, self.admit_version, float(self.draft_seq_steps),
                            self.seq_sd_tokens.copy(), self.seq_sd_steps.copy(), float(self.token_batch_sum),
                            float(self.token_sum))


def run_reference(cfg: EngineConfig, work: EngineWork, rng: np.random.Generator, max_steps: int = 50_000_000) -> EngineResult:
    """One closed rollout: all of `work` queued at time 0, stepped one engine step at a time."""
    eng = ReferenceEngine(cfg, work, rng, max_steps=max_steps)
    eng.run()
    res = eng.result()
    check_result(res, work, cfg)
    return res
