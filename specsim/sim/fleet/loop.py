"""The fleet engine: every engine of a rollout pool advanced together, one vectorized round at a time.

sim/engine/loop.py's fast engine jumps one engine from event to event; a pool of hundreds of engines
paid its Python per engine per event (a 65,536-trajectory 235B step: ~60,000 events, each tens of
microseconds). The fleet engine keeps the whole pool in arrays (sim/fleet/state.py) and runs the
fast engine's loop for all engines in lock step: one *round* is one iteration of that loop on
every engine that has something to do, each phase a handful of numpy operations over the engines
(or their active responses):

1. events due at each engine's time (work released, weights switched; a gated switch waits for the
   engine's batch to drain; sim/fleet/events.py), then the stop conditions (`until_s`, the
   watched RL step);
2. fit the batch into the KV budget, preempting the newest (sim/fleet/admit.fit_batch);
3. admission, one prefill pass per engine priced in one call (sim/fleet/admit.admit);
4. idle engines jump to their next event; new responses are keyed at the engine's k; an engine
   that can only finish responses until its next event (k fixed, nothing admissible) runs those
   finish-only rounds in one closed-form drain (sim/fleet/drain.py), up to the first where its KV
   budget would preempt or cut a segment: the long tail of a step, where a few engines finish
   their last responses one at a time, costs one round; an engine that admits from its queue as
   it finishes (k fixed, the queue's head arrived) runs those rounds in one closed-form window
   (sim/fleet/relay.py), up to the first boundary the window does not model;
5. the next event of every engine at once — its next finish (a row-minimum over its slots), the
   step at which its KV would overflow, the first step boundary at or after its next scheduled
   event or the caller's stop time — and the segment up to it, priced in closed form; an engine
   whose segment ends at its KV overflow step runs the next rounds' preemption and segment here
   while they end at its next overflow step (Fleet._kv_chain, up to KV_CHAIN_BOUNDARIES);
6. finishes at the new boundary.

Each engine goes through exactly the states of the v1 fast engine (same closed forms, same keying
of the steps-to-finish law, same accounting); only the order of floating-point sums differs.
The rounds are as many as the busiest engine's events that are neither drained nor relayed, each costing
O(engines + changed responses) numpy work, so a pool costs about one engine's Python plus array
work linear in its responses. Policies whose draft length changes with the batch (threshold,
toggle, adaptive) are never drained nor relayed, nor is a pool that records timelines (the relay
writes no timeline rows); acceptance falling with the context runs on the v1 engine
(sim/fleet/state.fleet_supports).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvariantError
from specsim.sim.common import EngineConfig, EngineResult
from specsim.sim.fleet.admit import admit, fit_batch, policy_for_new
from specsim.sim.fleet.drain import drain, drains_before, head_arrival, no_admission
from specsim.sim.fleet.events import SwitchPayload, apply_events, release, switch
from specsim.sim.fleet.relay import relay, relays
from specsim.sim.fleet.state import INF, FleetState, FleetWork, cells, flat, per_engine, runs
from specsim.sim.progress import Ticker

__all__ = ["Fleet", "SegmentPlan", "SwitchPayload", "run_fleet_closed"]

#: responses a relay call must finish per engine it was given, else the relay pauses (Fleet._relay)
RELAY_MIN_YIELD = 4
#: rounds the relay pauses for
RELAY_PAUSE_ROUNDS = 16
#: preempting boundaries the KV chain runs per engine and round (Fleet._kv_chain; measured there)
KV_CHAIN_BOUNDARIES = 3


@dataclass(frozen=True, eq=False)
class SegmentPlan:
    """Phase 5's next event of some engines (Fleet._plan), aligned with them: the next finish
    boundary `nf`, the segment's steps `m` and time `dt`, and `kv_step`: the segment ends at the
    step where the batch's KV overflows, strictly before the engine's cut (its next event, the
    caller's stop time), so the next round's first phase preempts there."""

    nf: np.ndarray
    m: np.ndarray
    dt: np.ndarray
    kv_step: np.ndarray

    def take(self, mask: np.ndarray) -> SegmentPlan:
        """The plan of the engines of `mask` only."""
        return SegmentPlan(self.nf[mask], self.m[mask], self.dt[mask], self.kv_step[mask])


def steps_to_reach(D: np.ndarray, c1: np.ndarray, c2: np.ndarray, m: np.ndarray) -> np.ndarray:
    """engine._steps_to_reach for many engines: the smallest m' in [1, m] with m'·c1 + c2·m'² >= D."""
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(c2 > 0, (-c1 + np.sqrt(c1 * c1 + 4 * c2 * D)) / (2 * np.where(c2 > 0, c2, 1.0)),
                        D / c1)
    mc = np.minimum(np.maximum(np.ceil(root), 1), m).astype(np.int64)
    while True:
        f = mc - 1
        dec = (mc > 1) & (f * c1 + c2 * f * f >= D)
        if not dec.any():
            break
        mc -= dec
    while True:
        inc = (mc < m) & (mc * c1 + c2 * mc * mc < D)
        if not inc.any():
            break
        mc += inc
    return mc


class Fleet(FleetState):
    """The pool's event loop (phases in the module docstring) over its state's parts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_dependent = self.prices.policy.batch_dependent
        self.drainable = not self.open and not self.batch_dependent
        self.open_drainable = self.open and not self.batch_dependent and not self.counters.record
        self.relayable = not self.batch_dependent and not self.counters.record
        self.relay_paused = 0          # rounds left without the relay (Fleet._relay)
        self.kv_chainable = True
        self.kv_chain_boundaries = 0   # preempting boundaries run by the KV chain (Fleet._kv_chain)

    def release(self, idx: np.ndarray, t_s: float, engines: np.ndarray) -> None:
        """Responses idx (queued) become admissible at t_s (fleet/events.release)."""
        release(self, idx, t_s, engines)

    def switch(self, t_s: float, payload: SwitchPayload) -> None:
        """A weight switch for every engine at t_s (fleet/events.switch)."""
        switch(self, t_s, payload)

    # ---------------------------------------------------------------- the loop
    def run(self, until_s: float = INF, watch_step: int | None = None, tick: Ticker | None = None) -> None:
        """Every engine processes events until the first step boundary at or after `until_s`, until
        every response of RL step `watch_step` has finished on it, or until nothing is left that
        can happen (sim/engine/loop.FastEngine.run, per engine). `tick`: told the responses finished
        so far whenever it is due (sim/progress.py), once per round at most. The round reads
        engines, queues, counters and the schedule to pick the engines of each phase (and resp,
        slots and prices for the open drain's cut); the phases it calls say what they write."""
        en, qs, ct, sc = self.engines, self.queues, self.counters, self.schedule
        R = np.arange(en.E)
        has_events = bool(sc.events)
        while len(R):
            if tick is not None and tick.due():
                tick.responses(self.finished_responses())
            if has_events:
                apply_events(self, R)
            stop = en.t[R] >= until_s
            if watch_step is not None:
                stop |= ct.remaining[R, watch_step] == 0
            if stop.any():
                R = R[~stop]
                if not len(R):
                    break
            preempted = fit_batch(self, R)
            can = R[~preempted & (sc.gate[R] < 0)] if has_events or preempted.any() else R
            new, neng = admit(self, can)
            idle = en.n[R] == 0
            if idle.any():
                I = R[idle]
                t_next = np.minimum(sc.next_ev[I], until_s)
                done = t_next == INF
                wait = I[~done]
                if len(wait):
                    if ct.record:
                        self._row(wait, np.zeros(len(wait)), np.zeros(len(wait)), np.zeros(len(wait)))
                    en.t[wait] = np.maximum(en.t[wait], t_next[~done])
                R = R[~idle] if done.all() else R[~np.isin(R, I[done])]
            policy_for_new(self, new, neng)
            S = R[en.n[R] > 0]
            if self.drainable and len(S):
                D = S[qs.qhead[S] >= qs.qend[S]]
                if len(D):
                    advanced = drain(self, D)
                    if advanced.any():
                        S = S[~np.isin(S, D[advanced], assume_unique=True)]
            elif self.open_drainable and len(S):
                D = S[no_admission(self, S)]
                cut = np.minimum(sc.next_ev[D], until_s)
                waiting = sc.gate[D] < 0          # a gated engine admits nothing until its batch drains
                cut[waiting] = np.minimum(cut[waiting], head_arrival(qs, self.resp, D[waiting]))
                ok = drains_before(en, self.slots, self.prices, D, cut)
                D = D[ok]
                if len(D):
                    t_cut = np.full(en.E, INF)
                    t_cut[D] = cut[ok]
                    advanced = drain(self, D, t_cut, watch_step)
                    if advanced.any():
                        S = S[~np.isin(S, D[advanced], assume_unique=True)]
            if self.relay_paused:
                self.relay_paused -= 1
            elif self.relayable and len(S):
                S = self._relay(S, until_s, watch_step)
            if len(S):
                plan = self._plan(S, until_s)
                if self.kv_chainable and plan.kv_step.any():
                    S, plan = self._kv_chain(S, plan, until_s)
                nf = self._segment(S, until_s, plan)
                self._finish(S[en.s[S] == nf])

    def _relay(self, S: np.ndarray, until_s: float, watch_step: int | None) -> np.ndarray:
        """Phase 4's relay (sim/fleet/relay.py) for the engines of S that can take it, when they
        are most of S; returns S less the engines it advanced. A call costs ~100 numpy operations
        whatever it keeps, so where windows keep little (a pool that thrashes its KV budget, every
        window cut after a few finishes: fewer than RELAY_MIN_YIELD per engine) the relay pauses
        for RELAY_PAUSE_ROUNDS rounds: on the 235B pool at 768 GPUs and 55 % memory it made
        the runs 1.8× slower, where it makes the main job's 1.4× faster. Results do not depend on
        it (the relay equals the round-by-round loop)."""
        t_cut = np.minimum(self.schedule.next_ev, until_s)
        can_relay = relays(self, S, t_cut)
        if 2 * can_relay.sum() < len(S):
            return S
        W = S[can_relay]
        done = self.finished_responses()
        advanced = relay(self, W, t_cut, watch_step)
        if self.finished_responses() - done < RELAY_MIN_YIELD * len(W):
            self.relay_paused = RELAY_PAUSE_ROUNDS
        return S[~np.isin(S, W[advanced], assume_unique=True)] if advanced.any() else S

    def _kv_chain(self, S: np.ndarray, plan: SegmentPlan, until_s: float) -> tuple[np.ndarray, SegmentPlan]:
        """Phase 5's KV chain: the engines of S whose segment ends at their KV overflow step
        (`plan.kv_step`) run the rounds that follow while each only preempts and runs on to the
        next overflow step, here, with the round's own phases on them alone, up to
        KV_CHAIN_BOUNDARIES boundaries. Returns S and its plan as phase 5 takes them on: an
        engine that preempted at its last chain boundary with the plan from there (a finish, a
        clip at its cut, or one more overflow step); an engine whose overflow step preempted
        nothing (the KV test at the boundary is phase 2's, in floating point) leaves S, and the
        next round takes it up there (it may admit).

        Invariant: every engine's KV chain is the round-by-round loop's sequence of rounds, bit
        for bit. At a boundary strictly before its cut (its next event, the caller's stop time)
        with no finish (the overflow step comes first), the round's phases do for an engine what
        they do here: no event is due and no stop applies (its watched step lost no response
        since the round began; a gated switch waits for an empty batch), fit_batch preempts the
        newest responses until the batch fits, nothing is admitted (a boundary that preempted
        admits nothing), no drain advances it (its queue's head, the response just preempted, is
        admissible; a gated engine's drain keeps no segment whose KV overflows) and phase 5 runs
        its next segment. Each engine's state is its own (the groups, slots and queue row of one
        engine), so running its rounds ahead of the other engines' changes none of its numbers;
        what the chain leaves out for an engine is the relay at its chain boundaries, which equals
        the loop (relay.py). In a pool that thrashes its KV budget most preemptions follow the
        engine's previous one with no finish between (the 235B plan's TP2·EP2 layout at 340
        rollout GPUs: 85 %, and one finish boundary in 31 comes after 20 or more). The cap: a
        chain boundary costs about what a round costs (fit_batch and phase 5 over the chain's
        engines), and a round that ran every engine's chain to its end would run the chains of
        different engines one after the other where rounds run them side by side (that run: 1.7×
        the CPU uncapped, 0.85× at 3). Counts the preempting boundaries it ran in
        `kv_chain_boundaries`. Writes what phases 5 and 2 write."""
        pos = np.flatnonzero(plan.kv_step)
        nf, m, dt = plan.nf.copy(), plan.m.copy(), plan.dt.copy()
        kv_step = plan.kv_step.copy()
        keep = np.ones(len(S), dtype=bool)
        C, cp = S[pos], plan.take(pos)
        for _ in range(KV_CHAIN_BOUNDARIES):
            if not len(C):
                break
            self._segment(C, until_s, cp)
            preempted = fit_batch(self, C)
            self.kv_chain_boundaries += int(preempted.sum())
            keep[pos[~preempted]] = False
            C, pos = C[preempted], pos[preempted]
            if not len(C):
                break
            cp = self._plan(C, until_s)
            nf[pos], m[pos], dt[pos], kv_step[pos] = cp.nf, cp.m, cp.dt, cp.kv_step
            go = cp.kv_step
            C, pos, cp = C[go], pos[go], cp.take(go)
        if keep.all():
            return S, SegmentPlan(nf, m, dt, kv_step)
        return S[keep], SegmentPlan(nf[keep], m[keep], dt[keep], kv_step[keep])

    def run_closed(self) -> None:
        self.run()

    def finished_responses(self) -> int:
        """Responses of the fleet that have finished (of every RL step it holds or let go)."""
        return self.counters.finished(self.resp.N)

    def _row(self, e, active, tokens_per_s, kv_tokens) -> None:
        en = self.engines
        self.counters.tl.append((e, en.t[e].copy(), active, tokens_per_s, en.k[e].copy(), kv_tokens))

    def _plan(self, e: np.ndarray, until_s: float) -> SegmentPlan:
        """Phase 5's next event of every engine in e: its next finish boundary (a row-minimum over
        its slots), the step at which its KV would overflow if that comes first, the first step
        boundary at or after its next scheduled event or `until_s` if the segment reaches it (the
        clip), and the segment's steps and time. Invariant: the batch of each engine is fixed over
        the segment's m >= 1 steps, so its time is m·c1 + c2·m² with c1 = fixed + per_ctx·(A +
        B·s − B/2) and c2 = per_ctx·B/2 (step j costs fixed + per_ctx·(A + B·(s + j))). Reads
        engines, slots, prices and the schedule."""
        en, sl, pr = self.engines, self.slots, self.prices
        s, A, B, n, k = en.s[e], en.A[e], en.B[e], en.n[e], en.k[e]
        nf = sl.slot_fin[e, :sl.slots_seen].min(axis=1)
        b = nf.copy()
        at_kv = np.zeros(len(e), dtype=bool)
        kvc = (B > 0) & (n > 1)
        if kvc.any():
            x = (pr.cap - en.GB[e] - n * pr.rbar) * pr.blk - n * (k + 1)
            with np.errstate(divide="ignore", invalid="ignore"):
                s_kv = np.floor((x - (A - en.SP[e])) / np.where(kvc, B, 1.0)) + 1
            at_kv = kvc & (s < s_kv) & (s_kv < b)
            if at_kv.any():
                b[at_kv] = s_kv[at_kv].astype(np.int64)
        m = b - s
        c1, c2 = pr.step_coefficients(en, e)
        mf = m.astype(float)
        dt = mf * c1 + c2 * mf * mf
        t = en.t[e]
        t_cut = np.minimum(self.schedule.next_ev[e], until_s)
        clip = (m > 1) & (t + dt > t_cut)
        if clip.any():
            m[clip] = steps_to_reach(t_cut[clip] - t[clip], c1[clip], c2[clip], m[clip])
            mf = m.astype(float)
            dt = mf * c1 + c2 * mf * mf
        return SegmentPlan(nf, m, dt, at_kv & ~clip & (t + dt < t_cut))

    def _segment(self, e: np.ndarray, until_s: float, plan: SegmentPlan | None = None) -> np.ndarray:
        """Phase 5: the segment of every engine in e up to its next event (`plan`, else _plan's);
        returns each engine's next finish boundary. Reads prices; writes engines (t, s) and
        counters."""
        en, pr, ct = self.engines, self.prices, self.counters
        if plan is None:
            plan = self._plan(e, until_s)
        s, B, n, k = en.s[e], en.B[e], en.n[e], en.k[e]
        m, dt = plan.m, plan.dt
        mf = m.astype(float)
        t = en.t[e]
        if ct.record:
            self._row(e, n.astype(float), B * mf / dt, en.kv_blocks(e, 0, pr) * pr.blk)
        ct.steps[e] += mf
        ct.seq_steps[e] += n * mf
        ct.weighted_active[e] += n * dt
        tok = B * mf
        ct.token_sum[e] += tok
        ct.token_batch_sum[e] += n * tok
        sd = k > 0
        if sd.any():
            es = e[sd]
            ct.sd_steps[es] += mf[sd]
            ct.sd_seq_steps[es] += (n * mf)[sd]
            ct.draft_passes[es] += (k * mf)[sd]
        en.t[e] = t + dt
        en.s[e] = s + m
        return plan.nf

    def _finish(self, F: np.ndarray) -> None:
        """Phase 6: every response of engines F whose finish boundary is the engine's boundary
        finishes: the rest of its length is emitted in this stint, it leaves the aggregates, its
        slot and (last of its group) its prompt blocks are freed. The finished cells come out
        row-major, so each engine's are one run and its five sums (A, B, SP, SL, SD tokens) are
        one `reduceat` over the runs. Writes engines, resp, counters, groups and slots (and, a
        batch-dependent policy, re-keys)."""
        if not len(F):
            return
        en, rs, sl, ct = self.engines, self.resp, self.slots, self.counters
        s_F = en.s[F]
        r, c = cells(sl.slot_fin[F, :sl.slots_seen] == s_F[:, None])
        rows, first, cnt = runs(r)
        u = F[rows]
        eng = F[r]
        idx = flat(sl.slot_resp)[eng * sl.max_batch + c]
        g0, mu, s0 = rs.g0[idx], rs.mu[idx], rs.s0[idx]
        P, L = rs.P[idx], rs.L[idx]
        d = L - g0
        sums = np.add.reduceat(np.stack((P + g0 - mu * s0, mu, P, L, d)), first, axis=1)
        en.A[u] -= sums[0]
        en.B[u] -= sums[1]
        en.SP[u] -= sums[2]
        en.SL[u] -= sums[3]
        rs.emitted[idx] += d
        sd_u = en.k[u] > 0
        if sd_u.any():
            ct.sd_tokens[u[sd_u]] += sums[4][sd_u]
            sd = np.repeat(sd_u, cnt)
            rs.seq_sd_tokens[idx] += np.where(sd, d, 0.0)
            rs.seq_sd_steps[idx] += np.where(sd, s_F[r] - s0, 0.0)
        rs.mu[idx] = 0.0
        rs.finish_s[idx] = en.t[eng]
        self.groups.release(rs.groups[idx], en.GB)
        sl.push_slots(eng, c, (u, first, cnt))
        rs.slot_of[idx] = -1
        en.n[u] -= cnt
        ct.count_finished(eng, rs.step_ids[idx])
        if self.batch_dependent:
            live = u[en.n[u] > 0]
            self.set_k(live, self.prices.choose_k(en, live))
        en.zero_empty(u)

    # ---------------------------------------------------------------- results
    def timelines(self) -> list[dict]:
        """Per engine, the timeline rows (one per segment or idle wait, then the end)."""
        en, ct = self.engines, self.counters
        E = en.E
        end = (np.arange(E), en.t.copy(), np.zeros(E), np.zeros(E), en.k.copy(), np.zeros(E))
        parts = ct.tl + [end] if ct.record else [end]
        cols = [np.concatenate([p[i] for p in parts]) for i in range(6)]
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
        bounds = np.searchsorted(cols[0], np.arange(E + 1))
        out = []
        for e in range(E):
            a, b = bounds[e], bounds[e + 1]
            out.append({"t_s": cols[1][a:b].astype(float), "active": cols[2][a:b].astype(float),
                        "tokens_per_s": cols[3][a:b].astype(float), "k": cols[4][a:b].astype(int),
                        "kv_tokens": cols[5][a:b].astype(float)})
        return out

    def results(self) -> list[EngineResult]:
        """One EngineResult per engine, its per-response arrays in its queue order (a fleet that
        let responses go has no results: InvariantError)."""
        en, rs, ct = self.engines, self.resp, self.counters
        if ct.let_go:
            raise InvariantError(en.names[0], 0, "results", f"{ct.let_go} finished responses were let go "
                                 "(a windowed run keeps step records only)")
        tokens = rs.tokens()
        as_int = np.array_equal(tokens, np.rint(tokens))
        if as_int:
            tokens = tokens.astype(np.int64)
        tls = self.timelines()
        out = []
        p = self.cfg.proposal_rate
        for e in range(en.E):
            a, b = rs.off[e], rs.off[e + 1]
            out.append(EngineResult(en.names[e], rs.ids[a:b], rs.admit_s[a:b], rs.finish_s[a:b], tokens[a:b],
                                    rs.preempt[a:b], float(en.t[e]), float(ct.steps[e]), float(ct.sd_steps[e]),
                                    float(ct.seq_steps[e]), float(ct.sd_seq_steps[e]), float(ct.sd_tokens[e]),
                                    float(ct.draft_passes[e]), float(ct.prefill_total[e]), tls[e],
                                    float(ct.weighted_active[e]), rs.admit_version[a:b],
                                    p * float(ct.sd_seq_steps[e]), rs.seq_sd_tokens[a:b].copy(),
                                    rs.seq_sd_steps[a:b].copy(), float(ct.token_batch_sum[e]),
                                    float(ct.token_sum[e])))
        return out

    def check(self) -> None:
        """sim/common.check_result for every engine at once: each response emitted exactly its
        length, τ within [1, k_max + 1], no slot in use past the high-water mark the rounds read
        (Slots.slots_seen), finish after admission and within its engine's rollout, timelines
        monotone and KV within budget. Raises InvariantError naming the engine."""
        en, rs, ct, sl = self.engines, self.resp, self.counters, self.slots

        def fail(e, quantity, detail):
            raise InvariantError(en.names[int(e)], int(ct.steps[int(e)]), quantity, detail)

        tok = rs.tokens()
        bad = np.flatnonzero(tok != rs.L)
        if len(bad):
            i = int(bad[0])
            fail(rs.eng_of[i], "tokens", f"response {int(rs.ids[i])} emitted {tok[i]:g} of {int(rs.L[i])} tokens")
        k_top = max(self.cfg.policy.ks)
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = ct.sd_tokens / ct.sd_seq_steps
        emitted = per_engine(rs.eng_of, tok, en.E)
        wrong = (ct.sd_seq_steps > 0) & (~((tau >= 1 - 1e-9) & (tau <= k_top + 1 + 1e-9))
                                          | (ct.sd_tokens > emitted + 1e-6))
        if wrong.any():
            e = int(np.flatnonzero(wrong)[0])
            fail(e, "tau", f"{ct.sd_tokens[e]:.1f} SD tokens over {ct.sd_seq_steps[e]:.0f} sequence-steps "
                           f"(τ = {tau[e]:.3f}; must lie in [1, {k_top + 1}] with no more tokens than emitted)")
        above = (sl.slot_resp[:, sl.slots_seen:] >= 0).any(axis=1)
        if above.any():
            fail(np.flatnonzero(above)[0], "slots", f"a response holds a slot at or past {sl.slots_seen}, the most handed out")
        late = (~np.isfinite(rs.finish_s)) | (rs.finish_s < rs.admit_s - 1e-9) \
            | (rs.finish_s > en.t[rs.eng_of] + 1e-6)
        if late.any():
            fail(rs.eng_of[np.flatnonzero(late)[0]], "time", "a response finished before admission or after the end")
        if ct.record and ct.tl:
            e = np.concatenate([p[0] for p in ct.tl])
            t = np.concatenate([p[1] for p in ct.tl])
            kv = np.concatenate([p[5] for p in ct.tl])
            order = np.argsort(e, kind="stable")
            e, t, kv = e[order], t[order], kv[order]
            back = (np.diff(t) < -1e-9) & (e[1:] == e[:-1])
            if back.any():
                fail(e[1:][back][0], "time", "timeline is not monotone")
            over = kv > self.cfg.kv_capacity_tokens * (1 + 1e-9) + self.cfg.block_tokens
            if over.any():
                fail(e[over][0], "kv_tokens", f"{kv[over][0]:.0f} tokens in use over a budget of "
                                              f"{self.cfg.kv_capacity_tokens}")


def run_fleet_closed(cfg: EngineConfig, names: list[str], work: FleetWork, alpha_estimates=None,
                     tick: Ticker | None = None) -> list[EngineResult]:
    """Closed rollouts on a pool (everything queued at 0, nothing scheduled): one EngineResult per
    engine, checked (Fleet.check). `tick`: progress (Fleet.run)."""
    fl = Fleet(cfg, names, work, alpha_estimates=alpha_estimates)
    fl.run(tick=tick)
    fl.check()
    return fl.results()
