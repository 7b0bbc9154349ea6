"""The fleet engine: every engine of a rollout pool advanced together, one vectorized round at a time.

sim/engine.py's fast engine jumps one engine from event to event; a pool of hundreds of engines
paid its Python per engine per event (a 65,536-trajectory 235B step: ~60,000 events, each tens of
microseconds). The fleet engine keeps the whole pool in arrays (sim/fleet_state.py) and runs the
fast engine's loop for all engines in lock step: one *round* is one iteration of that loop on
every engine that has something to do, each phase a handful of numpy operations over the engines
(or their active responses):

1. events due at each engine's time (work released, weights switched; a gated switch waits for the
   engine's batch to drain), then the stop conditions (`until_s`, the watched RL step);
2. fit the batch into the KV budget, preempting the newest (sim/fleet_admit.fit_batch);
3. admission, one prefill pass per engine priced in one call (sim/fleet_admit.admit);
4. idle engines jump to their next event; new responses are keyed at the engine's k;
5. the next event of every engine at once — its next finish (a row-minimum over its slots), the
   step at which its KV would overflow, the first step boundary at or after its next scheduled
   event or the caller's stop time — and the segment up to it, priced in closed form;
6. finishes at the new boundary.

Each engine goes through exactly the states of the v1 fast engine (same closed forms, same keying
of the steps-to-finish law, same accounting); only the order of floating-point sums differs.
The rounds are as many as the busiest engine's events, each costing O(engines + changed
responses) numpy work, so a pool costs about one engine's Python plus array work linear in its
responses. Policies whose draft length depends on the batch's cost (toggle, adaptive) and
acceptance falling with the context run on the v1 engine (`fleet_supports`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvariantError
from specsim.sim.common import EngineConfig, EngineResult
from specsim.sim.fleet_admit import admit, fit_batch, policy_for_new
from specsim.sim.fleet_state import INF, FleetState, cells, per_engine, ragged, runs

__all__ = ["Fleet", "SwitchPayload", "run_fleet_closed"]


@dataclass
class SwitchPayload:
    """A weight switch for the whole pool: responses `idx` (engine-sorted; engine e's are
    idx[toff[e]:toff[e+1]]) get acceptance `alphas` and steps-to-finish laws `laws` (k -> the
    StepLaw's five arrays, aligned with idx); `mean_alpha`: the acceptance the engines' policies
    price with from then on (toggle, adaptive)."""

    version: int
    idx: np.ndarray
    toff: np.ndarray
    alphas: np.ndarray
    laws: dict
    in_flight: bool
    mean_alpha: float | None = None


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
    """The pool's event loop (phases in the module docstring) and scheduled events."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[tuple[float, str, object, np.ndarray]] = []
        self.ev_ptr = np.zeros(self.E, dtype=np.int64)
        self.next_ev = np.full(self.E, INF)
        self.gate = np.full(self.E, -1, dtype=np.int64)
        self.batch_dependent = self.cfg.policy.kind in ("threshold", "toggle", "adaptive")
        self.drainable = not self.open and self.cfg.policy.kind in ("off", "always")
        ks = [k for k in self.krow]
        self.krow_of = np.zeros(max(ks) + 1, dtype=np.int64)
        for k, r in self.krow.items():
            self.krow_of[k] = r

    # ---------------------------------------------------------------- scheduled events
    def _push(self, t_s: float, kind: str, payload, mask: np.ndarray) -> None:
        i = len(self.events)
        self.events.append((float(t_s), kind, payload, mask))
        at = self.ev_ptr == i
        self.next_ev[at & mask] = float(t_s)
        self.ev_ptr[at & ~mask] = i + 1

    def release(self, idx: np.ndarray, t_s: float, engines: np.ndarray) -> None:
        """Responses idx (queued) become admissible at t_s; `engines`: those that hold any of them."""
        self.arrival[idx] = t_s
        mask = np.zeros(self.E, dtype=bool)
        mask[engines] = True
        self._push(t_s, "release", None, mask)

    def switch(self, t_s: float, payload: SwitchPayload) -> None:
        self._push(t_s, "switch", payload, np.ones(self.E, dtype=bool))

    def _step_ptr(self, sub: np.ndarray) -> None:
        """Engines `sub` consumed their next event: move to their next relevant one."""
        p = self.ev_ptr[sub] + 1
        nev = len(self.events)
        while True:
            pending = p < nev
            skip = np.zeros(len(sub), dtype=bool)
            for q in np.unique(p[pending]).tolist():
                at = p == q
                skip[at] = ~self.events[q][3][sub[at]]
            if not skip.any():
                break
            p += skip
        self.ev_ptr[sub] = p
        self.next_ev[sub] = [self.events[q][0] if q < nev else INF for q in p.tolist()]

    def apply_events(self, R: np.ndarray) -> None:
        """Events due at each engine's time, in order; then gated switches of drained engines."""
        while True:
            due = R[self.next_ev[R] <= self.t[R]]
            if not len(due):
                break
            for p in np.unique(self.ev_ptr[due]).tolist():
                sub = due[self.ev_ptr[due] == p]
                _, kind, payload, _ = self.events[p]
                if kind == "switch":
                    if payload.in_flight:
                        self.apply_switch(sub, payload)
                    else:
                        self.gate[sub] = p
                self._step_ptr(sub)
        g = R[(self.gate[R] >= 0) & (self.n[R] == 0)]
        for p in np.unique(self.gate[g]).tolist():
            sub = g[self.gate[g] == p]
            self.apply_switch(sub, self.events[p][2])
            self.gate[sub] = -1

    def apply_switch(self, sub: np.ndarray, pl: SwitchPayload) -> None:
        """Engines `sub` run policy pl.version; an engine whose responses' acceptance changed takes
        the new acceptance and laws and re-keys its running batch from its progress so far."""
        self.policy_version[sub] = pl.version
        seg, pos = ragged(pl.toff[sub], pl.toff[sub + 1] - pl.toff[sub])
        if not len(pos):
            return
        idx = pl.idx[pos]
        diff = per_engine(seg, self.alphas[idx] != pl.alphas[pos], len(sub)) > 0
        if not diff.any():
            return
        sel = diff[seg]
        ii, pp = idx[sel], pos[sel]
        self.alphas[ii] = pl.alphas[pp]
        for k, arrs in self.laws.items():
            for dst, src in zip(arrs, pl.laws[k]):
                dst[ii] = src[pp]
        if pl.mean_alpha is not None and self.cfg.policy.kind in ("toggle", "adaptive"):
            self.set_alpha_estimate(sub[diff], np.full(int(diff.sum()), float(pl.mean_alpha)))
        self.rekey(sub[diff])

    # ---------------------------------------------------------------- the loop
    def run(self, until_s: float = INF, watch_step: int | None = None) -> None:
        """Every engine processes events until the first step boundary at or after `until_s`, until
        every response of RL step `watch_step` has finished on it, or until nothing is left that
        can happen (sim/engine.FastEngine.run, per engine)."""
        R = np.arange(self.E)
        has_events = bool(self.events)
        while len(R):
            if has_events:
                self.apply_events(R)
            stop = self.t[R] >= until_s
            if watch_step is not None:
                stop |= self.remaining[R, watch_step] == 0
            if stop.any():
                R = R[~stop]
                if not len(R):
                    break
            preempted = fit_batch(self, R)
            can = R[~preempted & (self.gate[R] < 0)] if has_events or preempted.any() else R
            new, neng = admit(self, can)
            idle = self.n[R] == 0
            if idle.any():
                I = R[idle]
                t_next = np.minimum(self.next_ev[I], until_s)
                done = t_next == INF
                wait = I[~done]
                if len(wait):
                    if self.record:
                        self._row(wait, np.zeros(len(wait)), np.zeros(len(wait)), np.zeros(len(wait)))
                    self.t[wait] = np.maximum(self.t[wait], t_next[~done])
                R = R[~idle] if done.all() else R[~np.isin(R, I[done])]
            policy_for_new(self, new, neng)
            S = R[self.n[R] > 0]
            if self.drainable and len(S):
                D = S[(self.qhead[S] >= self.qend[S]) & self._tail_fits(S)]
                if len(D):
                    self._drain(D)
                    S = S[self.n[S] > 0]
            if len(S):
                nf = self._segment(S, until_s)
                self._finish(S[self.s[S] == nf])

    def run_closed(self) -> None:
        self.run()

    def _row(self, e, active, tokens_per_s, kv_tokens) -> None:
        self.tl.append((e, self.t[e].copy(), active, tokens_per_s, self.k[e].copy(), kv_tokens))

    def _segment(self, e: np.ndarray, until_s: float) -> np.ndarray:
        """Phase 5: the next event of every engine in e and the segment up to it; returns each
        engine's next finish boundary. Invariant: the batch of each engine is fixed over the
        segment's m >= 1 steps, so its time is m·c1 + c2·m² with c1 = fixed + per_ctx·(A + B·s − B/2)
        and c2 = per_ctx·B/2 (step j costs fixed + per_ctx·(A + B·(s + j)))."""
        s, A, B, n, k = self.s[e], self.A[e], self.B[e], self.n[e], self.k[e]
        nf = self.slot_fin[e].min(axis=1)
        b = nf.copy()
        kvc = (B > 0) & (n > 1)
        if kvc.any():
            x = (self.cap - self.GB[e] - n * self.rbar) * self.blk - n * (k + 1)
            with np.errstate(divide="ignore", invalid="ignore"):
                s_kv = np.floor((x - (A - self.SP[e])) / np.where(kvc, B, 1.0)) + 1
            use = kvc & (s < s_kv) & (s_kv < b)
            if use.any():
                b[use] = s_kv[use].astype(np.int64)
        m = b - s
        rows = self.krow_of[k]
        per_ctx = self.per_ctx[rows, n]
        c1 = self.fixed[rows, n] + per_ctx * (A + B * s - B / 2)
        c2 = per_ctx * B / 2
        mf = m.astype(float)
        dt = mf * c1 + c2 * mf * mf
        t = self.t[e]
        t_cut = np.minimum(self.next_ev[e], until_s)
        clip = (m > 1) & (t + dt > t_cut)
        if clip.any():
            m[clip] = steps_to_reach(t_cut[clip] - t[clip], c1[clip], c2[clip], m[clip])
            mf = m.astype(float)
            dt = mf * c1 + c2 * mf * mf
        if self.record:
            self._row(e, n.astype(float), B * mf / dt, self.kv_blocks(e, 0) * self.blk)
        self.steps[e] += mf
        self.seq_steps[e] += n * mf
        self.weighted_active[e] += n * dt
        tok = B * mf
        self.token_sum[e] += tok
        self.token_batch_sum[e] += n * tok
        sd = k > 0
        if sd.any():
            es = e[sd]
            self.sd_steps[es] += mf[sd]
            self.sd_seq_steps[es] += (n * mf)[sd]
            self.draft_passes[es] += (k * mf)[sd]
        self.t[e] = t + dt
        self.s[e] = s + m
        return nf

    def _tail_fits(self, e: np.ndarray) -> np.ndarray:
        """Can the running batch of engines e never overflow the KV capacity? KV in use plus the rest
        of every response plus k+1 slots each (the generated tokens cancel) is the most it can hold."""
        n, k = self.n[e], self.k[e]
        return self.GB[e] + (self.SL[e] + 2 * n * (k + 1)) / self.blk + n * (self.rbar + 1) <= self.cap

    def _drain(self, D: np.ndarray) -> None:
        """Phase 4 (closed rollouts, k fixed, nothing left to admit, KV cannot overflow): every active
        response of engines D finishes in closed form (fastlaw.drain for many engines): sorted by
        (engine, finish boundary), the batch is fixed between consecutive boundaries, so every
        segment's time is the affine-step sum, evaluated for all segments of all engines at once."""
        idx, eng = self.active_of(D)
        b = self.slot_fin[eng, self.slot_of[idx]]
        order = np.lexsort((b, eng))
        idx, eng, b = idx[order], eng[order], b[order]
        new = np.ones(len(idx), dtype=bool)
        new[1:] = (eng[1:] != eng[:-1]) | (b[1:] != b[:-1])
        first = np.flatnonzero(new)
        counts = np.diff(np.append(first, len(idx)))
        seg_e, bounds = eng[first], b[first]
        opens = np.ones(len(first), dtype=bool)      # first segment of its engine
        opens[1:] = seg_e[1:] != seg_e[:-1]
        g0, mu, s0 = self.g0[idx], self.mu[idx], self.s0[idx]
        drop_a = np.add.reduceat(self.P[idx] + g0 - mu * s0, first)
        drop_b = np.add.reduceat(mu, first)

        def before(x):   # Σ x over the engine's earlier segments
            c = np.cumsum(x) - x
            return c - c[np.flatnonzero(opens)][np.cumsum(opens) - 1]

        a_seg = self.A[seg_e] - before(drop_a)
        b_seg = self.B[seg_e] - before(drop_b)
        n_seg = self.n[seg_e] - before(counts.astype(float))
        starts = np.where(opens, self.s[seg_e], np.concatenate(([0], bounds[:-1])))
        m = (bounds - starts).astype(float)
        k = self.k[seg_e]
        rows = self.krow_of[k]
        ni = n_seg.astype(np.int64)
        dt = m * self.fixed[rows, ni] + self.per_ctx[rows, ni] * (m * a_seg + b_seg * m * (2 * starts + m - 1) / 2)
        ends = self.t[seg_e] + before(dt) + dt
        self.finish_s[idx] = np.repeat(ends, counts)
        if self.record:
            t0 = ends - dt
            self.tl.append((seg_e, t0, n_seg, b_seg * m / dt, k, np.full(len(dt), np.nan)))
        E = self.E
        self.steps += per_engine(seg_e, m, E)
        self.seq_steps += per_engine(seg_e, n_seg * m, E)
        self.weighted_active += per_engine(seg_e, n_seg * dt, E)
        tok = b_seg * m
        self.token_sum += per_engine(seg_e, tok, E)
        self.token_batch_sum += per_engine(seg_e, n_seg * tok, E)
        sd = k > 0
        if sd.any():
            self.sd_steps += per_engine(seg_e, np.where(sd, m, 0.0), E)
            self.sd_seq_steps += per_engine(seg_e, np.where(sd, n_seg * m, 0.0), E)
            self.draft_passes += per_engine(seg_e, np.where(sd, k * m, 0.0), E)
        d = self.L[idx] - g0
        self.emitted[idx] += d
        rsd = self.k[eng] > 0
        if rsd.any():
            self.sd_tokens += per_engine(eng, np.where(rsd, d, 0.0), E)
            self.seq_sd_tokens[idx] += np.where(rsd, d, 0.0)
            self.seq_sd_steps[idx] += np.where(rsd, b - s0, 0.0)
        np.subtract.at(self.remaining, (eng, self.step_ids[idx]), 1)
        last = np.append(first[1:], len(idx)) - 1          # each engine's last response
        last = last[np.append(seg_e[1:] != seg_e[:-1], True)]
        self.t[D] = self.finish_s[idx[last]]
        self.s[D] = b[last]
        self.mu[idx] = 0.0
        self.release_groups(idx, eng)
        self.push_slots(eng, self.slot_of[idx])
        self.slot_of[idx] = -1
        self.n[D] = 0
        self.A[D] = 0.0
        self.B[D] = 0.0

    def _finish(self, F: np.ndarray) -> None:
        """Phase 6: every response of engines F whose finish boundary is the engine's boundary
        finishes: the rest of its length is emitted in this stint, it leaves the aggregates, its
        slot and (last of its group) its prompt blocks are freed."""
        if not len(F):
            return
        r, c = cells(self.slot_fin[F] == self.s[F][:, None])
        eng = F[r]
        idx = self.slot_resp[eng, c]
        E = self.E
        g0, mu, s0 = self.g0[idx], self.mu[idx], self.s0[idx]
        P, L = self.P[idx], self.L[idx]
        self.A -= per_engine(eng, P + g0 - mu * s0, E)
        self.B -= per_engine(eng, mu, E)
        self.SP -= per_engine(eng, P, E)
        self.SL -= per_engine(eng, L, E)
        d = L - g0
        self.emitted[idx] += d
        sd = self.k[eng] > 0
        if sd.any():
            self.sd_tokens += per_engine(eng, np.where(sd, d, 0.0), E)
            self.seq_sd_tokens[idx] += np.where(sd, d, 0.0)
            self.seq_sd_steps[idx] += np.where(sd, self.s[eng] - s0, 0.0)
        self.mu[idx] = 0.0
        self.finish_s[idx] = self.t[eng]
        self.release_groups(idx, eng)
        self.push_slots(eng, c)
        self.slot_of[idx] = -1
        u, _, cnt = runs(eng)
        self.n[u] -= cnt
        np.subtract.at(self.remaining, (eng, self.step_ids[idx]), 1)
        if self.batch_dependent:
            live = u[self.n[u] > 0]
            self.set_k(live, self.choose_k(live))
        empty = u[self.n[u] == 0]
        self.A[empty] = 0.0    # drop accumulated rounding
        self.B[empty] = 0.0

    # ---------------------------------------------------------------- results
    def tokens(self) -> np.ndarray:
        ints = np.rint(self.emitted)
        return np.where(np.abs(self.emitted - ints) < 1e-6, ints, self.emitted)

    def timelines(self) -> list[dict]:
        """Per engine, the timeline rows (one per segment or idle wait, then the end)."""
        E = self.E
        end = (np.arange(E), self.t.copy(), np.zeros(E), np.zeros(E), self.k.copy(), np.zeros(E))
        parts = self.tl + [end] if self.record else [end]
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
        """One EngineResult per engine, its per-response arrays in its queue order."""
        tokens = self.tokens()
        as_int = np.array_equal(tokens, np.rint(tokens))
        if as_int:
            tokens = tokens.astype(np.int64)
        tls = self.timelines()
        out = []
        p = self.cfg.proposal_rate
        for e in range(self.E):
            a, b = self.off[e], self.off[e + 1]
            out.append(EngineResult(self.names[e], self.ids[a:b], self.admit_s[a:b], self.finish_s[a:b], tokens[a:b],
                                    self.preempt[a:b], float(self.t[e]), float(self.steps[e]), float(self.sd_steps[e]),
                                    float(self.seq_steps[e]), float(self.sd_seq_steps[e]), float(self.sd_tokens[e]),
                                    float(self.draft_passes[e]), float(self.prefill_total[e]), tls[e],
                                    float(self.weighted_active[e]), self.admit_version[a:b],
                                    p * float(self.sd_seq_steps[e]), self.seq_sd_tokens[a:b].copy(),
                                    self.seq_sd_steps[a:b].copy(), float(self.token_batch_sum[e]),
                                    float(self.token_sum[e])))
        return out

    def check(self) -> None:
        """sim/common.check_result for every engine at once: each response emitted exactly its
        length, τ within [1, k_max + 1], finish after admission and within its engine's rollout,
        timelines monotone and KV within budget. Raises InvariantError naming the engine."""
        def fail(e, quantity, detail):
            raise InvariantError(self.names[int(e)], int(self.steps[int(e)]), quantity, detail)

        tok = self.tokens()
        bad = np.flatnonzero(tok != self.L)
        if len(bad):
            i = int(bad[0])
            fail(self.eng_of[i], "tokens", f"response {int(self.ids[i])} emitted {tok[i]:g} of {int(self.L[i])} tokens")
        k_top = max(self.cfg.policy.ks)
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = self.sd_tokens / self.sd_seq_steps
        emitted = per_engine(self.eng_of, tok, self.E)
        wrong = (self.sd_seq_steps > 0) & (~((tau >= 1 - 1e-9) & (tau <= k_top + 1 + 1e-9))
                                            | (self.sd_tokens > emitted + 1e-6))
        if wrong.any():
            e = int(np.flatnonzero(wrong)[0])
            fail(e, "tau", f"{self.sd_tokens[e]:.1f} SD tokens over {self.sd_seq_steps[e]:.0f} sequence-steps "
                           f"(τ = {tau[e]:.3f}; must lie in [1, {k_top + 1}] with no more tokens than emitted)")
        late = (~np.isfinite(self.finish_s)) | (self.finish_s < self.admit_s - 1e-9) \
            | (self.finish_s > self.t[self.eng_of] + 1e-6)
        if late.any():
            fail(self.eng_of[np.flatnonzero(late)[0]], "time", "a response finished before admission or after the end")
        if self.record and self.tl:
            e = np.concatenate([p[0] for p in self.tl])
            t = np.concatenate([p[1] for p in self.tl])
            kv = np.concatenate([p[5] for p in self.tl])
            order = np.argsort(e, kind="stable")
            e, t, kv = e[order], t[order], kv[order]
            back = (np.diff(t) < -1e-9) & (e[1:] == e[:-1])
            if back.any():
                fail(e[1:][back][0], "time", "timeline is not monotone")
            over = kv > self.cfg.kv_capacity_tokens * (1 + 1e-9) + self.cfg.block_tokens
            if over.any():
                fail(e[over][0], "kv_tokens", f"{kv[over][0]:.0f} tokens in use over a budget of "
                                              f"{self.cfg.kv_capacity_tokens}")


def run_fleet_closed(cfg: EngineConfig, names: list[str], eng_of, response_ids, groups, prompt, lengths, z, laws,
                     alphas, alpha_estimates=None) -> list[EngineResult]:
    """Closed rollouts on a pool (everything queued at 0, nothing scheduled): one EngineResult per
    engine, checked (Fleet.check)."""
    fl = Fleet(cfg, names, eng_of, response_ids, groups, prompt, lengths, z, laws, alphas,
               alpha_estimates=alpha_estimates)
    fl.run()
    fl.check()
    return fl.results()
