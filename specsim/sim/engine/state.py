"""The fast engine's state and bookkeeping (the event loop is in sim/engine/loop.py).

Aggregates over the active sequences keep every event O(1) apart from re-keying: with g0_i the
fluid progress of sequence i at the boundary s0_i where it was keyed at rate μ_i, the total
context at boundary s is A + B·s with A = Σ (P_i + g0_i − μ_i·s0_i) and B = Σ μ_i.

Scheduled events (continuous generation): `release(idx, t)` makes queued responses admissible
from time t; `switch(...)` changes the policy version and the per-sequence acceptance at time t,
either in flight (running sequences are re-keyed on the new acceptance) or gated (admission stops
until the running batch drains, then the weights change — an engine without in-flight updates).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import replace

import numpy as np

from specsim.sim.common import EngineConfig, EngineWork, PrefillLog, Timeline
from specsim.sim.fastlaw import ScalarOps, StepLaw, step_law, steps_to_finish
from specsim.workload.acceptance.context import invert_tau, segment_steps

INF = float("inf")


class FastState:
    """Per-engine state (attributes in __slots__: the event loop reads them on every event)."""

    __slots__ = ("A", "B", "GB", "L", "L_l", "P", "P_l", "SL", "SP", "_seq", "admit_pf", "admit_s",
                 "admit_version", "all_arrived", "alphas", "arrival", "batch_dependent", "blk", "cap", "cfg",
                 "closed", "ctx_rows", "draft_passes", "drainable", "emitted", "events", "fin_d", "fin_i",
                 "fin_pf", "fin_t", "finish_b", "finish_pf", "finish_s", "fixed_rows", "g0", "gate",
                 "group_active", "groups", "groups_l", "heap", "is_active", "k", "laws", "mu", "n_act",
                 "open", "order", "pblocks_l", "policy_version", "preempt", "prefill_total", "prefills",
                 "prompt_blocks", "queue", "rate_heap", "rbar", "remaining", "s", "s0", "saved", "scalar_laws",
                 "sd_seq_steps", "sd_steps", "sd_tokens", "seq_sd_steps", "seq_sd_tokens", "seq_steps",
                 "slots_max", "step_ids", "step_l", "steps", "t", "tl", "tl_pf", "token_batch_sum",
                 "token_sum", "version", "weighted_active", "work", "z")

    def __init__(self, cfg: EngineConfig, work: EngineWork, z: np.ndarray, *, open_: bool = False):
        n = len(work)
        self.cfg, self.work, self.z = cfg, work, np.asarray(z, dtype=float)
        self.P = work.prompt_tokens.astype(float)
        self.L = work.response_tokens.astype(float)
        self.groups = work.group_ids.astype(np.int64)
        self.alphas = work.alphas.astype(float).copy()
        self.blk = cfg.block_tokens
        self.cap = cfg.capacity_blocks
        self.rbar = (self.blk - 1) / (2 * self.blk)
        self.prompt_blocks = np.ceil(self.P / self.blk)
        self.P_l, self.L_l = self.P.tolist(), self.L.tolist()
        self.groups_l, self.pblocks_l = self.groups.tolist(), self.prompt_blocks.tolist()
        self.g0 = np.zeros(n)          # fluid generated tokens at boundary s0
        self.s0 = np.zeros(n)
        self.mu = np.zeros(n)
        self.saved = np.zeros(n)       # generated tokens kept across a preemption
        self.emitted = np.zeros(n)     # tokens counted as emitted (see sim/engine/loop.py "Accounting")
        self.fin_i: list[int] = []     # single finishes not yet flushed: index, tokens, time, prefills
        self.fin_d: list[float] = []
        self.fin_t: list[float] = []
        self.fin_pf: list[int] = []
        self.seq_sd_tokens = np.zeros(n)   # per-response tokens and request-steps under SD
        self.seq_sd_steps = np.zeros(n)
        self.version = np.zeros(n, dtype=np.int64)
        self.finish_b = np.zeros(n, dtype=np.int64)
        self.is_active = np.zeros(n, dtype=bool)
        self.admit_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.admit_pf = np.zeros(n, dtype=np.int64)   # prefill passes before each admission / finish
        self.finish_pf = np.zeros(n, dtype=np.int64)
        self.admit_version = np.full(n, -1, dtype=np.int64)
        self.prefills = PrefillLog()
        self.tl_pf: list[int] = []
        self.preempt = np.zeros(n, dtype=np.int64)
        self.queue = deque(range(n))
        self.order: list[int] = []     # admission order (lazy deletion)
        self.heap: list[tuple[int, int, int]] = []
        self.rate_heap: list[tuple[int, int, int, float]] = []   # (boundary, i, version, new rate): cfg.context
        self.group_active: dict[int, int] = {}
        self.A = self.B = self.SP = self.SL = self.GB = 0.0
        self.n_act = self.s = self.k = 0
        self.t = 0.0
        self.tl = Timeline()
        self.steps = self.sd_steps = self.seq_steps = self.sd_seq_steps = self.sd_tokens = 0.0
        self.draft_passes = self.weighted_active = self.prefill_total = 0.0
        self.token_sum = self.token_batch_sum = 0.0   # Σ fluid tokens, Σ active × fluid tokens over segments
        self.laws: dict[int, StepLaw] = {}
        self.scalar_laws: dict[int, tuple[list, ...]] = {}
        self.slots_max = max(cfg.policy.ks) + 1
        self.fixed_rows = {kk: cfg.table.fixed_s[cfg.table.index(kk)].tolist() for kk in cfg.policy.ks}
        self.ctx_rows = {kk: cfg.table.per_ctx_s[cfg.table.index(kk)].tolist() for kk in cfg.policy.ks}
        self.batch_dependent = cfg.policy.batch_dependent
        steps = work.step_ids if work.step_ids is not None else np.zeros(n, dtype=np.int64)
        self.step_ids = np.asarray(steps, dtype=np.int64)
        if open_:   # responses left per RL step (a closed rollout never watches a step)
            self.step_l = self.step_ids.tolist()
            u, c = np.unique(self.step_ids, return_counts=True)
            self.remaining = dict(zip(u.tolist(), c.tolist()))
        else:
            self.step_l, self.remaining = [], {0: n}
        # open: work arrives and weights change at scheduled times; prefills are priced as they happen
        self.open = open_
        self.closed = not open_
        self.drainable = self.closed and not cfg.policy.batch_dependent and cfg.context is None
        self.all_arrived = not open_
        self.arrival = np.full(n, INF if open_ else 0.0)
        self.events: list[tuple[float, int, str, object]] = []
        self.gate = None
        self.policy_version = 0
        self._seq = 0

    # ---------------------------------------------------------------- steps-to-finish laws
    def law(self, kk: int) -> StepLaw:
        if kk not in self.laws:
            self.laws[kk] = step_law(self.alphas, kk, self.cfg.position_decay, self.cfg.policy.tree_for(kk),
                                     self.cfg.proposal_rate)
        return self.laws[kk]

    def context_law(self, idx: np.ndarray, kk: int) -> tuple[StepLaw, np.ndarray, np.ndarray]:
        """Acceptance falling with the context (cfg.context): the laws of `idx` over the tokens each
        has left, keyed at the constant acceptance that conserves their expected verify steps
        over the contexts P + g0 .. P + L (so a response re-keyed late in its life, at a
        readmission or a new k, runs at its late acceptance), with the tokens and expected steps
        of each segment between the curve's points (for :meth:`rate_profile`)."""
        ctx, d = self.cfg.context, self.cfg.position_decay
        left = self.L[idx] - self.g0[idx]
        tokens, steps = segment_steps(ctx, self.alphas[idx], self.P[idx] + self.g0[idx], left, kk, d)
        alphas = invert_tau(left / steps.sum(axis=1), kk, d)   # effective_alphas, keeping the segments
        return step_law(alphas, kk, d, self.cfg.policy.tree_for(kk), self.cfg.proposal_rate), tokens, steps

    def scalar_law(self, kk: int) -> tuple[list, ...]:
        if kk not in self.scalar_laws:
            lw = self.law(kk)
            self.scalar_laws[kk] = tuple(a.tolist() for a in (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1))
        return self.scalar_laws[kk]

    def key(self, idx: np.ndarray, kk: int) -> None:
        """Set rate and finish boundary for `idx` (their g0 = progress at boundary s)."""
        s, heap = self.s, self.heap
        by_context = self.cfg.context is not None and kk > 0
        if len(idx) == 1 and not by_context:  # the common single readmission: the same law on Python floats
            i = int(idx[0])
            m, *consts = (a[i] for a in self.scalar_law(kk))
            need = int(steps_to_finish(float(self.L[i] - self.g0[i]), consts, float(self.z[i]), kk, ScalarOps))
            self.mu[i] = m
            self.s0[i] = s
            self.A += float(self.P[i] + self.g0[i] - m * s)
            self.B += m
            self.version[i] += 1
            self.finish_b[i] = s + need
            heapq.heappush(heap, (s + need, i, int(self.version[i])))
            return
        if by_context:
            lw, seg_tokens, seg_steps = self.context_law(idx, kk)
            m, consts = lw.mu, (lw.inv_mu, lw.offset, lw.sd1, lw.skew1)
        else:
            lw = self.law(kk)
            m, consts = lw.mu[idx], (lw.inv_mu[idx], lw.offset[idx], lw.sd1[idx], lw.skew1[idx])
        need = steps_to_finish(self.L[idx] - self.g0[idx], consts, self.z[idx], kk)
        if by_context:
            m = self.rate_profile(idx, need, m, seg_tokens, seg_steps)
        self.mu[idx] = m
        self.s0[idx] = s
        self.A += float((self.P[idx] + self.g0[idx] - m * s).sum())
        self.B += float(m.sum())
        self.version[idx] += 1
        bounds = (s + need).astype(np.int64)
        self.finish_b[idx] = bounds
        entries = list(zip(bounds.tolist(), idx.tolist(), self.version[idx].tolist()))
        if len(entries) > len(heap):
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)

    def rate_profile(self, idx: np.ndarray, need: np.ndarray, mu: np.ndarray, seg_tokens: np.ndarray,
                     seg_steps: np.ndarray) -> np.ndarray:
        """Progress along the acceptance profile (cfg.context): each keyed response's remaining
        tokens are cut at the curve's points (:meth:`context_law`); segment j of r_j tokens takes
        its expected steps, stretched so the segments end at the drawn finish boundary (`need`
        steps from now) and rounded to whole steps (a segment left with no step joins the next).
        Returns the first segment's rate and queues the later rates as events (`rate_heap`), so
        the batch's context grows fast while acceptance is high and slowly where it has fallen,
        as in the reference engine; the finish boundaries (and their law) are unchanged. A
        response whose remaining tokens cross no point keeps its law's rate `mu`. Vectorised."""
        first = np.array(mu, dtype=float, copy=True)
        steps = np.asarray(need, dtype=float)
        rows = np.flatnonzero(((seg_tokens > 0).sum(axis=1) > 1) & (steps >= 2))
        if not len(rows):
            return first
        tokens, steps = seg_tokens[rows], steps[rows]
        r = tokens.sum(axis=1)
        expected = np.cumsum(seg_steps[rows], axis=1)
        ends = np.minimum(np.rint(expected * (steps / expected[:, -1])[:, None]), steps[:, None])
        ends[:, -1] = steps
        done = np.where(ends >= steps[:, None], r[:, None], np.cumsum(tokens, axis=1))
        # knots (step, tokens done) from (0, 0); of knots at the same step the first is kept (the
        # segments after it join the next span), at the finish step the tokens done are all r
        knot_s = np.concatenate((np.zeros((len(rows), 1)), ends), axis=1)
        knot_t = np.concatenate((np.zeros((len(rows), 1)), done), axis=1)
        keep = np.concatenate((np.ones((len(rows), 1), dtype=bool), knot_s[:, 1:] > knot_s[:, :-1]), axis=1)
        row_of = np.broadcast_to(np.arange(len(rows))[:, None], keep.shape)[keep]
        ks, kt = knot_s[keep], knot_t[keep]
        pair = row_of[1:] == row_of[:-1]                 # consecutive kept knots of one response
        span_row, span_start = row_of[:-1][pair], ks[:-1][pair]
        rate = (kt[1:] - kt[:-1])[pair] / (ks[1:] - ks[:-1])[pair]
        opening = span_start == 0
        first[rows[span_row[opening]]] = rate[opening]
        later = ~opening
        who = idx[rows[span_row[later]]]
        entries = list(zip((self.s + span_start[later]).astype(np.int64).tolist(), who.tolist(),
                           (self.version[who] + 1).tolist(), rate[later].tolist()))   # key() bumps the version
        if len(entries) > len(self.rate_heap):
            self.rate_heap.extend(entries)
            heapq.heapify(self.rate_heap)
        else:
            for entry in entries:
                heapq.heappush(self.rate_heap, entry)
        return first

    def apply_rates(self) -> None:
        """Rate changes due at boundary s (see rate_profile): progress so far is counted at the
        old rate (as unkey does), then the response runs on at the new one, its finish unchanged."""
        heap, s = self.rate_heap, self.s
        due, rates = [], []
        while heap and heap[0][0] <= s:
            b, i, ver, rate = heapq.heappop(heap)
            if self.is_active[i] and ver == self.version[i] and b == s:
                due.append(i)
                rates.append(rate)
        if not due:
            return
        idx = np.asarray(due, dtype=np.int64)
        m = np.asarray(rates)
        self.unkey(idx)
        self.mu[idx] = m
        self.s0[idx] = s
        self.A += float((self.P[idx] + self.g0[idx] - m * s).sum())
        self.B += float(m.sum())

    def next_rate_s(self) -> int | None:
        """The next valid rate-change boundary (stale entries dropped), None if there is none."""
        heap = self.rate_heap
        while heap and (not self.is_active[heap[0][1]] or heap[0][2] != self.version[heap[0][1]]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def unkey(self, idx: np.ndarray) -> None:
        """Freeze progress of `idx` at boundary s, count it as emitted, take them out of the aggregates."""
        s = self.s
        if len(idx) == 1:
            i = int(idx[0])
            g0, mu = float(self.g0[i]), float(self.mu[i])
            g = max(min(g0 + mu * (s - self.s0[i]), self.L_l[i] - 1), 0.0)
            self.emitted[i] += g - g0
            if self.k > 0:
                self.sd_tokens += g - g0
                self.seq_sd_tokens[i] += g - g0
                self.seq_sd_steps[i] += s - self.s0[i]
            self.A -= self.P_l[i] + g0 - mu * float(self.s0[i])
            self.B -= mu
            self.g0[i] = g
            self.s0[i] = s
            self.mu[i] = 0.0
            return
        g = np.maximum(np.minimum(self.g0[idx] + self.mu[idx] * (s - self.s0[idx]), self.L[idx] - 1), 0.0)
        delta = g - self.g0[idx]
        self.emitted[idx] += delta
        if self.k > 0:
            self.sd_tokens += float(delta.sum())
            self.seq_sd_tokens[idx] += delta
            self.seq_sd_steps[idx] += s - self.s0[idx]
        self.A -= float((self.P[idx] + self.g0[idx] - self.mu[idx] * self.s0[idx]).sum())
        self.B -= float(self.mu[idx].sum())
        self.g0[idx] = g
        self.s0[idx] = s
        self.mu[idx] = 0.0

    def active_idx(self) -> np.ndarray:
        return np.fromiter((i for i in self.order if self.is_active[i]), dtype=np.int64)

    def rekey_all(self, kk: int) -> None:
        idx = self.active_idx()
        if len(idx):
            self.unkey(idx)
            self.key(idx, kk)

    def set_k(self, k_new: int) -> None:
        """Every active sequence runs at the engine's k: a change re-keys them all (their progress
        so far is counted under the old k)."""
        if k_new != self.k:
            idx = self.active_idx()
            if len(idx):
                self.unkey(idx)
            self.k = k_new
            if len(idx):
                self.key(idx, k_new)

    def generated_total(self) -> float:
        return self.A + self.B * self.s - self.SP

    def kv_blocks(self, slots: int) -> float:
        n = self.n_act
        return self.GB + (self.generated_total() + n * slots) / self.blk + n * self.rbar if n else 0.0

    # ---------------------------------------------------------------- batch changes
    def preempt_newest(self) -> None:
        order = self.order
        while not self.is_active[order[-1]]:
            order.pop()
        j = order.pop()
        self.unkey(np.asarray([j]))
        self.is_active[j] = False
        self.version[j] += 1
        self.n_act -= 1
        self.SP -= self.P[j]
        self.SL -= self.L[j]
        g = self.groups_l[j]
        self.group_active[g] -= 1
        if self.group_active[g] == 0:
            del self.group_active[g]
            self.GB -= self.prompt_blocks[j]
        self.saved[j] = math.floor(self.g0[j])
        lost = self.g0[j] - self.saved[j]   # the fluid fraction of a token is not kept
        self.emitted[j] -= lost
        if self.k > 0:
            self.sd_tokens -= lost
            self.seq_sd_tokens[j] -= lost
        self.g0[j] = self.saved[j]
        self.preempt[j] += 1
        self.queue.appendleft(j)

    def activate(self, new_idx: np.ndarray, opens: np.ndarray, pblocks: np.ndarray) -> list:
        """Admit `new_idx` (queue-order prefix): groups, KV, prefill of opened prompts and recomputed
        tokens; they join the aggregates at rate 0 until keyed."""
        for _ in range(len(new_idx)):
            self.queue.popleft()
        for g in self.groups[new_idx].tolist():
            self.group_active[g] = self.group_active.get(g, 0) + 1
        P, sv = self.P[new_idx], self.saved[new_idx]
        re = ~opens & (sv > 0)
        self.GB += float(pblocks.sum())
        self.is_active[new_idx] = True
        self.order.extend(new_idx.tolist())
        self.n_act += len(new_idx)
        self.SP += float(P.sum())
        self.SL += float(self.L[new_idx].sum())
        self.g0[new_idx] = sv
        self.mu[new_idx] = 0.0
        self.s0[new_idx] = self.s
        self.A += float((P + sv).sum())
        fresh = new_idx[np.isnan(self.admit_s[new_idx])]
        self.admit_pf[fresh] = len(self.prefills)
        self.admit_version[fresh] = self.policy_version
        self.admit_s[fresh] = self.t
        pq = (P + sv)[opens].tolist() + sv[re].tolist()
        if pq:
            self.prefill(pq, [0.0] * int(opens.sum()) + P[re].tolist())
        return new_idx.tolist()

    def prefill(self, q: list, c: list) -> None:
        if not self.open:
            self.prefills.add(q, c)
            return
        one = PrefillLog()
        one.add(q, c)
        dt = float(one.offsets_s(self.cfg.prefill_batches_s)[-1])
        self.t += dt
        self.prefill_total += dt

    # ---------------------------------------------------------------- counters
    def count_steps(self, m: float, seq_m: float, n_dt: float, tokens: float, n_tokens: float) -> None:
        self.steps += m
        self.seq_steps += seq_m
        self.weighted_active += n_dt
        self.token_sum += tokens
        self.token_batch_sum += n_tokens
        if self.k > 0:
            self.sd_steps += m
            self.sd_seq_steps += seq_m
            self.draft_passes += self.k * m

    def count_finished_one(self, i: int, g0_i: float) -> None:
        """One response finishes at boundary s: the rest of its length is emitted in this stint
        (recorded in lists, written to the arrays by `flush`)."""
        d = self.L_l[i] - g0_i
        self.fin_i.append(i)
        self.fin_d.append(d)
        self.fin_t.append(self.t)
        self.fin_pf.append(len(self.prefills))
        if self.k > 0:
            self.sd_tokens += d
            self.seq_sd_tokens[i] += d
            self.seq_sd_steps[i] += self.s - self.s0[i]
        if self.open:
            self.remaining[self.step_l[i]] -= 1
        else:
            self.remaining[0] -= 1

    def flush(self) -> None:
        """Write the single finishes recorded since the last flush into the per-response arrays."""
        if self.fin_i:
            idx = np.asarray(self.fin_i, dtype=np.int64)
            self.finish_s[idx] = self.fin_t
            self.finish_pf[idx] = self.fin_pf
            self.emitted[idx] += np.asarray(self.fin_d)
            self.fin_i, self.fin_d, self.fin_t, self.fin_pf = [], [], [], []

    def count_finished(self, idx: np.ndarray, delta: np.ndarray) -> None:
        self.emitted[idx] += delta
        if self.k > 0:
            self.sd_tokens += float(delta.sum())
            self.seq_sd_tokens[idx] += delta
            self.seq_sd_steps[idx] += self.finish_b[idx] - self.s0[idx]
        if not self.open:
            self.remaining[0] -= len(idx)
        else:
            u, c = np.unique(self.step_ids[idx], return_counts=True)
            for st, cnt in zip(u.tolist(), c.tolist()):
                self.remaining[st] -= cnt

    # ---------------------------------------------------------------- scheduled events
    def release(self, idx: np.ndarray, t_s: float) -> None:
        """Responses `idx` (already queued, in order) become admissible at time t_s."""
        self.arrival[idx] = t_s
        self._push(t_s, "release", None)

    def switch(self, t_s: float, version: int, alphas: np.ndarray, mean_alpha: float, in_flight: bool,
               laws: dict | None = None, lo: int = 0, pause_s: float = 0.0) -> None:
        """From time t_s the engine runs policy `version`; responses lo: get acceptance `alphas`
        (`laws`: their steps-to-finish laws per draft length, when the caller computed them;
        responses before lo have finished). In flight, the engine stops `pause_s` at its first
        step boundary from t_s on (it loads the weights)."""
        self._push(t_s, "switch", (version, np.asarray(alphas, dtype=float), float(mean_alpha), in_flight,
                                   laws, lo, float(pause_s)))

    def _push(self, t_s, kind, payload):
        self._seq += 1
        heapq.heappush(self.events, (float(t_s), self._seq, kind, payload))

    def next_event_s(self) -> float:
        return self.events[0][0] if self.events else INF

    def apply_events(self) -> None:
        ev = self.events
        while ev and ev[0][0] <= self.t:
            _, _, kind, payload = heapq.heappop(ev)
            if kind == "switch":
                if payload[3]:
                    self._apply_switch(payload)
                    if payload[6] > 0.0:
                        self.idle_until(self.t + payload[6])
                else:
                    self.gate = payload
        if self.gate is not None and self.n_act == 0:
            self._apply_switch(self.gate)
            self.gate = None

    def _apply_switch(self, payload) -> None:
        version, alphas, mean_alpha, _, laws, lo, _ = payload
        self.policy_version = version
        if np.array_equal(alphas, self.alphas[lo:]):
            return
        self.alphas[lo:] = alphas
        if laws is None:
            self.laws.clear()
        for k, lw in (laws or {}).items():
            cur = self.laws.get(k)
            if cur is None:
                n = len(self.alphas)
                cur = self.laws[k] = StepLaw(*(np.zeros(n) for _ in range(5)))
            for dst, src in zip((cur.mu, cur.inv_mu, cur.offset, cur.sd1, cur.skew1),
                                (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)):
                dst[lo:] = src
        self.scalar_laws.clear()
        self.cfg = replace(self.cfg, policy_ctx=replace(self.cfg.policy_ctx, alpha_estimate=mean_alpha))
        self.rekey_all(self.k)

    def idle_until(self, t_s: float) -> None:
        if self.cfg.record_timeline:
            self.tl.add(self.t, 0, 0.0, self.k, 0.0)
            self.tl_pf.append(len(self.prefills))
        self.t = max(self.t, t_s)
