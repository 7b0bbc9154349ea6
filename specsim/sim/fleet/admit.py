"""The fleet engine's batch phases, for many engines at once: fitting the running batch into the
KV budget (preemption) and admission. Semantics as sim/engine/loop.py's `_fit_batch` and `_admit`
(sim/common.py): the queue is served in order, a response is admitted while the batch is below
max_batch and its blocks fit under the admission budget with the policy's largest k reserved, a
response whose group has no active member brings the group's prompt blocks, an empty engine
always admits its head; a batch whose k+1 slots per sequence overflow the KV capacity preempts its
newest response until it fits, and a boundary that preempted admits nothing."""

from __future__ import annotations

import numpy as np

from specsim.sim.fleet.state import Engines, FleetState, Prices, flat, leading_true, per_engine, ragged, runs

CHUNK = 32   # candidates looked at per engine and pass (a long admission takes more passes)


def _overflows(en: Engines, pr: Prices, e: np.ndarray, k: np.ndarray) -> np.ndarray:
    n = en.n[e]
    used = en.GB[e] + (en.A[e] + en.B[e] * en.s[e] - en.SP[e] + n * (k + 1)) / pr.blk + n * pr.rbar
    return (n > 1) & (used > pr.cap)


def fit_batch(st: FleetState, e: np.ndarray) -> np.ndarray:
    """Preempt the newest response of every engine in e (distinct engines) whose batch overflows,
    until each fits; returns the mask (over e) of engines that preempted. Invariant: afterwards
    every engine either fits its k+1 slots per sequence or runs a single response. Each pass
    preempts one response of each engine still over and tests those engines again (the others'
    state did not change). Reads prices; writes engines, slots, resp, groups, queues and counters
    (SD tokens), and re-keys (FleetState.set_k)."""
    en, pr = st.engines, st.prices
    k_cur = en.k[e].copy()
    over = _overflows(en, pr, e, k_cur)
    if not over.any():
        return over
    rs, sl, qs, ct = st.resp, st.slots, st.queues, st.counters
    preempted = over.copy()
    sd_before = en.k > 0
    pos = np.flatnonzero(over)
    while len(pos):
        ee = e[pos]
        col = np.argmax(sl.slot_seq[ee, :sl.slots_seen], axis=1)     # the newest active response of each
        j = flat(sl.slot_resp)[ee * sl.max_batch + col]
        st.unkey(j, ee, one_per_engine=True)      # progress counted under the boundary's k
        st.groups.release(rs.groups[j], en.GB, one_per_engine=True)
        sl.push_slot_each(ee, col)
        rs.slot_of[j] = -1
        en.n[ee] -= 1
        en.SP[ee] -= rs.P[j]
        en.SL[ee] -= rs.L[j]
        g0 = rs.g0[j]
        saved = np.floor(g0)
        lost = g0 - saved                         # the fluid fraction of a token is not kept
        rs.emitted[j] -= lost
        sd_lost = np.where(sd_before[ee], lost, 0.0)
        ct.sd_tokens[ee] -= sd_lost
        rs.seq_sd_tokens[j] -= sd_lost
        rs.saved[j] = saved
        rs.g0[j] = saved
        rs.preempt[j] += 1
        qs.put_back(ee, j)
        k_cur[pos] = pr.choose_k(en, ee)
        pos = pos[_overflows(en, pr, ee, k_cur[pos])]
    st.set_k(e[preempted], k_cur[preempted])
    return preempted


def admit(st: FleetState, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Admission at the boundary of every engine in e (the caller excludes gated engines and
    those that preempted): the queue-order prefix of arrived responses that fit. Returns the
    admitted responses and their engines (engine-sorted), joined at rate 0 (not yet keyed);
    their prefill pass is priced (one pass per engine) and added to the engine's time. Reads
    queues, engines, resp, groups and prices; `activate` writes."""
    qs, en, rs, gr, pr = st.queues, st.engines, st.resp, st.groups, st.prices
    e = e[(qs.qhead[e] < qs.qend[e]) & (en.n[e] < pr.max_batch)]
    if not len(e):
        return np.zeros(0, dtype=np.int64), e
    head = qs.queue[e, qs.qhead[e]]
    slots, blk = pr.slots_max, pr.blk
    ok = rs.arrival[head] <= en.t[e]
    used = en.kv_blocks(e, slots, pr)
    g = rs.groups[head]
    need = np.ceil((rs.saved[head] + slots) / blk) + np.where(gr.group_active[g] > 0, 0.0, rs.pblocks[head])
    ok &= (en.n[e] == 0) | (used + need <= pr.budget)
    e, used = e[ok], used[ok]
    if not len(e):
        return np.zeros(0, dtype=np.int64), e
    left = np.minimum(qs.qend[e] - qs.qhead[e], pr.max_batch - en.n[e])
    done = np.zeros(len(e), dtype=np.int64)
    opened = []
    picks = []
    live = np.arange(len(e))
    width = CHUNK
    while len(live):
        w = np.minimum(left[live] - done[live], width)
        seg, pos = ragged(qs.qhead[e[live]] + done[live], w)
        ee = e[live][seg]
        cand = flat(qs.queue)[ee * qs.queue.shape[1] + pos]
        gc = rs.groups[cand]
        vals, first, _ = runs(gc)          # a group's queued members are contiguous, unless preempted
        if qs.requeued and len(vals) > 1 and np.bincount(vals).max() > 1:
            _, first = np.unique(gc, return_index=True)
        opens = np.zeros(len(cand), dtype=bool)
        opens[first] = gr.group_active[gc[first]] == 0
        if opened:
            opens &= ~np.isin(gc, np.concatenate(opened))
        pb = np.where(opens, rs.pblocks[cand], 0.0)
        sv = rs.saved[cand]
        inc = pb + (sv + slots) / blk + pr.rbar
        cs = np.cumsum(inc)
        lens_first = np.cumsum(w) - w
        before = used[live][seg] + (cs - inc) - (cs - inc)[lens_first][seg]
        fits = before + np.ceil((sv + slots) / blk) + pb <= pr.budget
        fits |= (en.n[ee] == 0) & (pos == qs.qhead[ee])
        fits &= rs.arrival[cand] <= en.t[ee]
        count = leading_true(fits, w)
        take = (pos - qs.qhead[ee] - done[live][seg]) < count[seg]
        picks.append((cand[take], ee[take], opens[take], pb[take]))
        used[live] += per_engine(seg[take], inc[take], len(live))
        opened.append(gc[take & opens])
        done[live] += count
        live = live[(count == w) & (done[live] < left[live])]
        width *= 4
    cand, eng, opens, pb = (np.concatenate(x) for x in zip(*picks))
    if len(picks) > 1:        # passes after the first: back to engine order
        order = np.argsort(eng, kind="stable")
        cand, eng, opens, pb = cand[order], eng[order], opens[order], pb[order]
    return activate(st, cand, eng, opens, pb), eng


def activate(st: FleetState, cand: np.ndarray, eng: np.ndarray, opens: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Admit `cand` (engine-sorted, each engine's a queue-order prefix): queue heads, groups, KV,
    slots, aggregates, first-admission records, and one prefill pass per engine over the opened
    prompts and the recomputed tokens of readmitted responses. Writes queues, groups, slots,
    engines, resp and (the prefill) counters."""
    if not len(cand):
        return cand
    qs, rs, en = st.queues, st.resp, st.engines
    E = en.E
    u, _, cnt = runs(eng)
    qs.qhead[u] += cnt
    np.add.at(st.groups.group_active, rs.groups[cand], 1)
    en.GB += per_engine(eng, pb, E)
    rs.slot_of[cand] = st.slots.seat(cand, eng, cnt, u)[0]
    en.n[u] += cnt
    P, sv = rs.P[cand], rs.saved[cand]
    en.SP += per_engine(eng, P, E)
    en.SL += per_engine(eng, rs.L[cand], E)
    rs.g0[cand] = sv
    rs.mu[cand] = 0.0
    rs.s0[cand] = en.s[eng]
    en.A += per_engine(eng, P + sv, E)
    fresh = np.isnan(rs.admit_s[cand])
    if fresh.any():
        f, fe = cand[fresh], eng[fresh]
        rs.admit_s[f] = en.t[fe]
        rs.admit_version[f] = en.policy_version[fe]
    re = ~opens & (sv > 0)
    pf = opens | re
    if pf.any():
        q = np.where(opens, P + sv, sv)[pf]
        c = np.where(opens, 0.0, P)[pf]
        pe = eng[pf]
        ue = runs(pe)[0]
        sums = [per_engine(pe, x, E)[ue] for x in (None, q, q * q, q * c, c)]
        st.prefill(ue, *sums)
    return cand


def policy_for_new(st: FleetState, new: np.ndarray, eng: np.ndarray) -> None:
    """New responses start at the engine's k; an engine whose k changes re-keys everyone. Reads
    prices (the policy); writes engines and, keying, resp and slots."""
    if not len(new):
        return
    en = st.engines
    u = runs(eng)[0]
    k_new = st.prices.choose_k(en, u)
    changed = u[k_new != en.k[u]]
    if len(changed):
        st.set_k(changed, k_new[k_new != en.k[u]])
        keep = ~np.isin(eng, changed)
        new, eng = new[keep], eng[keep]
    # at rate 0 since admission, a response has emitted nothing yet: unkeying it (FleetState.unkey)
    # only takes its P + g0 back out of A, which is all that is done here (the same sums)
    en.A -= per_engine(eng, st.resp.P[new] + st.resp.g0[new], en.E)
    st.key(new, eng)
