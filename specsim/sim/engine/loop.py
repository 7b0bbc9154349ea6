"""The fast engine: the reference engine's semantics, integrated event to event.

Between two events (a response finishes, responses are admitted, the KV budget runs out, the
policy changes k, work arrives, weights change) the batch is fixed, so every step costs
fixed_s + per_ctx_s · C(s) with the total context C(s) = A + B·s growing linearly in the step
index s (B = Σ μ_i, the expected tokens per step of the active sequences). A segment of m steps
from boundary s therefore costs

    m · fixed_s + per_ctx_s · (m·A + B·m·(2s + m − 1)/2)          (closed form)

SD progress per response. With draft length k and per-token acceptance α_i the tokens a
sequence emits per step X are i.i.d. with mean μ and variance σ² (workload.acceptance). The
number of steps N to emit its remaining r tokens is a renewal first-passage time; renewal theory
gives E[N] = (r − 1 + E[X(X+1)]/(2μ)) / μ (the bracket is the level r−1 plus the mean residual
jump), Var[N] ≈ r·σ²/μ³ and third cumulant κ₃[N] ≈ r·(3σ⁴/μ⁵ − μ₃/μ⁴). The engine draws one
standard normal z_i per response, skews it by Cornish–Fisher (z + γ(z² − 1)/6, γ = κ₃/sd³ — the
rollout ends at the *maximum* over responses, so the right tail matters) and finishes it at
round(E[N] + z_i·sd[N]) steps, clamped to [⌈r/(k+1)⌉, r]. With k = 0, N = r exactly. Within a
segment progress is fluid (μ_i per step); when k changes every active response is re-keyed from
its fluid progress. KV blocks are fluid too: Σ⌈x/b⌉ ≈ Σx/b + n(b−1)/(2b). The tests bound the
error against the reference engine (rollout time within 1 %, identical tokens).

Acceptance falling with the context (cfg.context, workload/acceptance/context.py). A response is
keyed by the constant acceptance that conserves its expected verify steps over the tokens it has
left, and its fluid progress follows its acceptance profile. The profile is cut at the curve's
points; each piece runs at its own rate, the rates stretched so the last piece ends at the drawn
finish boundary. The rate changes are events like finishes (`rate_heap`, FastState.apply_rates),
so the context the steps pay for grows as it does in the reference engine. The closed-form tail
drain is off then (its rates are constant).

Accounting. Tokens are counted, not copied: each response's emitted tokens are the sum of its
progress over every stint (fluid progress when it is re-keyed or preempted, the rest of its
length at its drawn finishing step, minus the fraction a preemption discards), and the tokens per
request-step are those tokens over the verify steps the engine actually ran (Σ active · steps
under SD). With a proposal rate p < 1 (sim/common.py) the law of X is the mixture
p·(draft law) + (1 − p)·δ₁ (fastlaw.step_law) and the request-steps with a draft are p · the SD
request-steps in expectation, which gives the conditional τ vLLM reports. `check_result`
then compares emitted with drawn lengths, so a lost or double-counted stint fails the run.

Continuous generation (sim/stream.py). `FastEngine` keeps its state between `run` calls: work
is released at a time (`release`), weights change at a time (`switch`, immediately for in-flight
updates or after the running batch drains), and `run(until_s, watch_step)` stops at the first
step boundary at or after `until_s`, or when the watched RL step's responses have all finished.

Cost: O(responses · log responses) per engine — a heap of finish boundaries, plus O(batch) work
each time k changes.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from specsim.policy import choose_k
from specsim.sim.common import EngineConfig, EngineResult, EngineWork, check_result
from specsim.sim.engine.state import FastState
from specsim.sim.fastlaw import SCALAR_ADMIT, admissible_scalar, drain

INF = float("inf")


def _steps_to_reach(D: float, c1: float, c2: float, m: int) -> int:
    """The smallest m' in [1, m] with m'·c1 + c2·m'² >= D (the first step boundary at or after a
    time D ahead, for steps costing c1 + c2·(2j − 1) each)."""
    mc = math.ceil((-c1 + math.sqrt(c1 * c1 + 4 * c2 * D)) / (2 * c2)) if c2 > 0 else math.ceil(D / c1)
    mc = min(max(mc, 1), m)
    while mc > 1 and (mc - 1) * c1 + c2 * (mc - 1) ** 2 >= D:
        mc -= 1
    while mc < m and mc * c1 + c2 * mc * mc < D:
        mc += 1
    return mc


class FastEngine(FastState):
    """One engine's event loop; its numbered phases are the methods `_fit_batch` (1), `_admit` (2),
    `_policy_for_new` (3), `_drain_tail` (4), `_segment` (5: next event, 6: the segment) and
    `_finish` (7). State and keying live in FastState (sim/engine/state.py)."""

    __slots__ = ()

    # ---- 1. the running batch keeps its k+1 slots per sequence: preempt the newest until it fits
    def _fit_batch(self) -> bool:
        preempted = False
        blk, cap, n = self.blk, self.cap, self.n_act
        if n <= 1 or self.GB + (self.A + self.B * self.s - self.SP + n * (self.k + 1)) / blk + n * self.rbar <= cap:
            return False
        while self.n_act > 1 and self.GB + (self.A + self.B * self.s - self.SP + self.n_act * (self.k + 1)) / blk \
                + self.n_act * self.rbar > cap:
            self.preempt_newest()
            preempted = True
            self.set_k(choose_k(self.cfg.policy, self.cfg.policy_ctx, self.n_act, self.A + self.B * self.s))
        return preempted

    def _arrived(self, limit: int) -> int:
        """How many of the first `limit` queued responses have arrived by now."""
        if self.all_arrived:
            return limit
        arr, q, t = self.arrival, self.queue, self.t
        n = 0
        while n < limit and arr[q[n]] <= t:
            n += 1
        return n

    # ---- 2. admission (none at a boundary that preempted), reserving the policy's largest k
    def _admit(self) -> list:
        cfg, queue = self.cfg, self.queue
        if self.gate is not None or not queue or self.n_act >= cfg.max_batch:
            return []
        head = queue[0]
        if not self.all_arrived and self.arrival[head] > self.t:
            return []
        slots, blk = self.slots_max, self.blk
        if self.n_act and self.kv_blocks(slots) + math.ceil((self.saved[head] + slots) / blk) + (
                0 if self.groups_l[head] in self.group_active else self.pblocks_l[head]) > cfg.admission_blocks:
            return []
        limit = self._arrived(min(len(queue), cfg.max_batch - self.n_act))
        cand, opens, pblocks = admissible_scalar(
            queue, min(limit, SCALAR_ADMIT), self.groups_l, self.pblocks_l, self.saved, self.group_active,
            self.kv_blocks(slots), self.n_act == 0, slots, blk, self.rbar, cfg.admission_blocks)
        count = len(cand)
        if count == SCALAR_ADMIT < limit:  # a long admission (start of a rollout): vectorized
            cand = np.fromiter((queue[j] for j in range(limit)), dtype=np.int64)
            gc = self.groups[cand]
            # prompt blocks for the first candidate of each group that has no active member
            _, first_pos = np.unique(gc, return_index=True)
            opens = np.zeros(len(cand), dtype=bool)
            opens[first_pos] = [int(g) not in self.group_active for g in gc[first_pos]]
            pblocks = np.where(opens, self.prompt_blocks[cand], 0.0)
            sv = self.saved[cand]
            need = np.ceil((sv + slots) / blk) + pblocks
            inc = pblocks + (sv + slots) / blk + self.rbar
            before = self.kv_blocks(slots) + np.concatenate(([0.0], np.cumsum(inc)[:-1]))
            fits = before + need <= cfg.admission_blocks
            if self.n_act == 0:
                fits[0] = True
            count = len(cand) if fits.all() else int(np.argmin(fits))
        if not count:
            return []
        return self.activate(cand[:count], opens[:count], pblocks[:count])

    # ---- 3. policy: new responses start with the current k; a changed k re-keys everyone
    def _policy_for_new(self, new: list) -> None:
        k_new = choose_k(self.cfg.policy, self.cfg.policy_ctx, self.n_act, self.A + self.B * self.s)
        if k_new != self.k:
            self.set_k(k_new)
        else:
            idx = np.asarray(new, dtype=np.int64)
            self.unkey(idx)
            self.key(idx, self.k)

    # ---- 4. the tail: nothing left to admit or to happen, k fixed, KV cannot overflow → closed form
    def _drain_tail(self) -> bool:
        if self.queue or not self.drainable:
            return False
        k, n = self.k, self.n_act
        # KV in use plus the rest of every response plus k+1 slots each — the generated tokens
        # cancel: GB + (Σ L + 2n(k+1))/blk + n(rbar + 1) blocks, the most the tail can ever hold
        if self.GB + (self.SL + 2 * n * (k + 1)) / self.blk + n * (self.rbar + 1) > self.cap:
            return False
        idx = self.active_idx()
        self.t, ran = drain(self.cfg, idx, self.finish_b, self.P, self.g0, self.mu, self.s0, self.A, self.B,
                            self.s, self.t, k, self.finish_s, self.tl)
        self.finish_pf[idx] = len(self.prefills)
        self.tl_pf.extend([len(self.prefills)] * (len(self.tl.t_s) - len(self.tl_pf)))
        self.count_steps(ran.steps, ran.seq_steps, ran.weighted_active, ran.tokens, ran.token_batch)
        self.count_finished(idx, self.L[idx] - self.g0[idx])
        self.is_active[idx] = False
        self.n_act = 0
        self.A = self.B = 0.0
        return True

    # ---- 5. next event: a finish, the step at which KV would overflow, or the first step boundary
    #         at or after an arrival, a weight change or the caller's stop time; the batch is fixed
    #         until then, so the segment's m steps are priced in closed form and counted
    def _segment(self, until_s: float) -> None:
        heap, is_active, version = self.heap, self.is_active, self.version
        while heap and (not is_active[heap[0][1]] or heap[0][2] != version[heap[0][1]]):
            heapq.heappop(heap)
        s, A, B, n, k = self.s, self.A, self.B, self.n_act, self.k
        b = heap[0][0]
        if self.rate_heap:
            b_rate = self.next_rate_s()
            if b_rate is not None and b_rate < b:
                b = b_rate
        if B > 0 and n > 1:
            x = (self.cap - self.GB - n * self.rbar) * self.blk - n * (k + 1)
            s_kv = math.floor((x - (A - self.SP)) / B) + 1
            if s < s_kv < b:
                b = s_kv
        m = b - s
        per_ctx = self.ctx_rows[k][n]
        c1 = self.fixed_rows[k][n] + per_ctx * (A + B * s - B / 2)
        c2 = per_ctx * B / 2
        dt = m * c1 + c2 * m * m
        ev = self.events
        t_cut = min(until_s, ev[0][0]) if ev else until_s
        if m > 1 and self.t + dt > t_cut:
            m = _steps_to_reach(t_cut - self.t, c1, c2, m)
            dt = m * c1 + c2 * m * m
        # ---- 6. the segment: a fixed batch for m steps
        if self.cfg.record_timeline:
            self.tl.add(self.t, n, B * m / dt, k, self.kv_blocks(0) * self.blk)
            self.tl_pf.append(len(self.prefills))
        self.steps += m
        self.seq_steps += n * m
        self.weighted_active += n * dt
        self.token_sum += B * m
        self.token_batch_sum += n * B * m
        if k > 0:
            self.sd_steps += m
            self.sd_seq_steps += n * m
            self.draft_passes += k * m
        self.t += dt
        self.s = s + m

    # ---- 7. finishes at boundary s
    def _finish(self) -> None:
        heap, s, heappop = self.heap, self.s, heapq.heappop
        is_active, version, mu, g0, s0 = self.is_active, self.version, self.mu, self.g0, self.s0
        P_l, L_l, groups_l, group_active = self.P_l, self.L_l, self.groups_l, self.group_active
        A, B, SP, SL, GB = self.A, self.B, self.SP, self.SL, self.GB
        done = []
        while heap and heap[0][0] == s:
            _, i, ver = heappop(heap)
            if not is_active[i] or ver != version[i]:
                continue
            m_i = mu[i]
            g_i = g0[i]
            A -= P_l[i] + g_i - m_i * s0[i]
            B -= m_i
            SP -= P_l[i]
            SL -= L_l[i]
            mu[i] = 0.0
            is_active[i] = False
            done.append(i)
            last_g = g_i
            g = groups_l[i]
            group_active[g] -= 1
            if group_active[g] == 0:
                del group_active[g]
                GB -= self.pblocks_l[i]
        self.n_act -= len(done)
        self.A, self.B, self.SP, self.SL, self.GB = A, B, SP, SL, GB
        if len(done) == 1:  # the common single finish, on Python floats
            self.count_finished_one(done[0], float(last_g))
        elif done:
            idx = np.asarray(done, dtype=np.int64)
            self.finish_s[idx] = self.t
            self.finish_pf[idx] = len(self.prefills)
            self.count_finished(idx, self.L[idx] - g0[idx])
        else:
            return
        if self.n_act and self.batch_dependent:
            self.set_k(choose_k(self.cfg.policy, self.cfg.policy_ctx, self.n_act, A + B * s))
        if not self.n_act:
            self.A = self.B = 0.0  # drop accumulated rounding

    def result(self) -> EngineResult:
        self.flush()
        cfg = self.cfg
        if cfg.record_timeline:
            self.tl.add(self.t, 0, 0.0, self.k, 0.0)
            self.tl_pf.append(len(self.prefills))
        offsets = self.prefills.offsets_s(cfg.prefill_batches_s)
        admit_s = self.admit_s + offsets[self.admit_pf]
        finish_s = self.finish_s + offsets[self.finish_pf]
        self.prefill_total += float(offsets[-1])
        t = float(self.t) + float(offsets[-1])
        tl = self.tl
        tl.t_s = (np.asarray(tl.t_s, dtype=float) + offsets[np.asarray(self.tl_pf, dtype=np.int64)]).tolist()
        ints = np.rint(self.emitted)
        tokens = np.where(np.abs(self.emitted - ints) < 1e-6, ints, self.emitted)
        tokens = tokens.astype(np.int64) if np.array_equal(tokens, ints) else tokens
        return EngineResult(cfg.name, self.work.response_ids, admit_s, finish_s, tokens, self.preempt, t,
                            self.steps, self.sd_steps, self.seq_steps, self.sd_seq_steps, self.sd_tokens,
                            self.draft_passes, self.prefill_total, tl.as_arrays(), self.weighted_active,
                            self.admit_version, cfg.proposal_rate * self.sd_seq_steps, self.seq_sd_tokens.copy(),
                            self.seq_sd_steps.copy(), self.token_batch_sum, self.token_sum)

    def run_closed(self) -> float:
        """`run` for a closed rollout (everything queued at 0, no scheduled events): the same
        phases without the checks for arrivals, weight switches and stop conditions."""
        fit, admit, policy, drain_tail, segment, finish = (self._fit_batch, self._admit, self._policy_for_new,
                                                           self._drain_tail, self._segment, self._finish)
        queue, heap = self.queue, self.heap
        while True:
            new = admit() if not fit() and queue else None
            if not self.n_act:
                return self.t
            if new:
                policy(new)
            if not queue and drain_tail():
                continue
            segment(INF)
            if self.rate_heap:
                self.apply_rates()
            if heap and heap[0][0] == self.s:
                finish()

    def run(self, until_s: float = INF, watch_step: int | None = None) -> float:
        """Process events until the first step boundary at or after `until_s`, until every response
        of RL step `watch_step` has finished, or until nothing is left that can happen; returns
        the engine's time."""
        while True:
            if self.events or self.gate is not None:
                self.apply_events()
            if watch_step is not None and self.remaining.get(watch_step, 0) == 0:
                return self.t
            if self.t >= until_s:
                return self.t
            preempted = self._fit_batch()
            new = self._admit() if self.queue and not preempted and self.gate is None else []
            if not self.n_act:
                t_next = min(self.next_event_s(), until_s)
                if t_next == INF:
                    return self.t
                self.idle_until(t_next)
                continue
            if new:
                self._policy_for_new(new)
            if not self.queue and self.drainable and self._drain_tail():
                continue
            self._segment(until_s)
            if self.rate_heap:
                self.apply_rates()
            if self.heap and self.heap[0][0] == self.s:
                self._finish()


def run_fast(cfg: EngineConfig, work: EngineWork, rng: np.random.Generator) -> EngineResult:
    """One closed rollout: all of `work` queued at time 0, nothing else happens, run to the end."""
    eng = FastEngine(cfg, work, rng.standard_normal(len(work)))
    eng.run_closed()
    res = eng.result()
    check_result(res, work, cfg)
    return res
