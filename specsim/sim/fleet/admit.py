"""The fleet engine's batch phases, for many engines at once: fitting the running batch into the
KV budget (preemption) and admission. Semantics as sim/engine/loop.py's `_fit_batch` and `_admit`
(sim/common.py): the queue is served in order, a response is admitted while the batch is below
max_batch and its blocks fit under the admission budget with the policy's largest k reserved, a
response whose group has no active member brings the group's prompt blocks, an empty engine
always admits its head; a batch whose k+1 slots per sequence overflow the KV capacity preempts its
newest response until it fits, and a boundary that preempted admits nothing."""

from __future__ import annotations

import numpy as np

from specsim.sim.fleet.state import FleetState, flat, leading_true, per_engine, ragged, runs

CHUNK = 32   # candidates looked at per engine and pass (a long admission takes more passes)


def _overflows(st: FleetState, e: np.ndarray, k: np.ndarray) -> np.ndarray:
    n = st.n[e]
    used = st.GB[e] + (st.A[e] + st.B[e] * st.s[e] - st.SP[e] + n * (k + 1)) / st.blk + n * st.rbar
    return (n > 1) & (used > st.cap)


def fit_batch(st: FleetState, e: np.ndarray) -> np.ndarray:
    """Preempt the newest response of every engine in e whose batch overflows, until each fits;
    returns the mask (over e) of engines that preempted. Invariant: afterwards every engine either
    fits its k+1 slots per sequence or runs a single response."""
    k_cur = st.k[e].copy()
    over = _overflows(st, e, k_cur)
    if not over.any():
        return over
    preempted = over.copy()
    k_old = st.k.copy()
    while over.any():
        ee = e[over]
        rows = st.slot_seq[ee, :st.slots_seen]
        col = np.argmax(rows, axis=1)             # the newest active response of each
        j = st.slot_resp[ee, col]
        st.unkey(j, ee)                           # progress counted under the boundary's k
        st.release_groups(j, ee)
        st.push_slots(ee, col)
        st.slot_of[j] = -1
        st.n[ee] -= 1
        st.SP[ee] -= st.P[j]
        st.SL[ee] -= st.L[j]
        saved = np.floor(st.g0[j])
        lost = st.g0[j] - saved                   # the fluid fraction of a token is not kept
        st.emitted[j] -= lost
        sd = k_old[ee] > 0
        st.sd_tokens[ee] -= np.where(sd, lost, 0.0)
        st.seq_sd_tokens[j] -= np.where(sd, lost, 0.0)
        st.saved[j] = saved
        st.g0[j] = saved
        st.preempt[j] += 1
        st.qhead[ee] -= 1                         # back to the front of the queue
        st.requeued = True
        st.queue[ee, st.qhead[ee]] = j
        k_cur[over] = st.choose_k(ee)
        over = _overflows(st, e, k_cur)
    st.set_k(e[preempted], k_cur[preempted])
    return preempted


def admit(st: FleetState, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Admission at the boundary of every engine in e (the caller excludes gated engines and
    those that preempted): the queue-order prefix of arrived responses that fit. Returns the
    admitted responses and their engines (engine-sorted), joined at rate 0 (not yet keyed);
    their prefill pass is priced (one pass per engine) and added to the engine's time."""
    e = e[(st.qhead[e] < st.qend[e]) & (st.n[e] < st.max_batch)]
    if not len(e):
        return np.zeros(0, dtype=np.int64), e
    head = st.queue[e, st.qhead[e]]
    slots, blk = st.slots_max, st.blk
    ok = st.arrival[head] <= st.t[e]
    used = st.kv_blocks(e, slots)
    g = st.groups[head]
    need = np.ceil((st.saved[head] + slots) / blk) + np.where(st.group_active[g] > 0, 0.0, st.pblocks[head])
    ok &= (st.n[e] == 0) | (used + need <= st.budget)
    e, used = e[ok], used[ok]
    if not len(e):
        return np.zeros(0, dtype=np.int64), e
    left = np.minimum(st.qend[e] - st.qhead[e], st.max_batch - st.n[e])
    done = np.zeros(len(e), dtype=np.int64)
    opened = []
    picks = []
    live = np.arange(len(e))
    width = CHUNK
    while len(live):
        w = np.minimum(left[live] - done[live], width)
        seg, pos = ragged(st.qhead[e[live]] + done[live], w)
        ee = e[live][seg]
        cand = flat(st.queue)[ee * st.queue.shape[1] + pos]
        gc = st.groups[cand]
        vals, first, _ = runs(gc)          # a group's queued members are contiguous, unless preempted
        if st.requeued and len(vals) > 1 and np.bincount(vals).max() > 1:
            _, first = np.unique(gc, return_index=True)
        opens = np.zeros(len(cand), dtype=bool)
        opens[first] = st.group_active[gc[first]] == 0
        if opened:
            opens &= ~np.isin(gc, np.concatenate(opened))
        pb = np.where(opens, st.pblocks[cand], 0.0)
        sv = st.saved[cand]
        inc = pb + (sv + slots) / blk + st.rbar
        cs = np.cumsum(inc)
        lens_first = np.cumsum(w) - w
        before = used[live][seg] + (cs - inc) - (cs - inc)[lens_first][seg]
        fits = before + np.ceil((sv + slots) / blk) + pb <= st.budget
        fits |= (st.n[ee] == 0) & (pos == st.qhead[ee])
        fits &= st.arrival[cand] <= st.t[ee]
        count = leading_true(fits, w)
        take = (pos - st.qhead[ee] - done[live][seg]) < count[seg]
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
    prompts and the recomputed tokens of readmitted responses."""
    if not len(cand):
        return cand
    E = st.E
    u, _, cnt = runs(eng)
    st.qhead[u] += cnt
    np.add.at(st.group_active, st.groups[cand], 1)
    st.GB += per_engine(eng, pb, E)
    slots = st.pop_slots(eng, cnt, u)
    st.slot_of[cand] = slots
    at = eng * st.max_batch + slots
    flat(st.slot_resp)[at] = cand
    flat(st.slot_seq)[at] = st.adm_seq + np.arange(len(cand))
    st.adm_seq += len(cand)
    st.n[u] += cnt
    P, sv = st.P[cand], st.saved[cand]
    st.SP += per_engine(eng, P, E)
    st.SL += per_engine(eng, st.L[cand], E)
    st.g0[cand] = sv
    st.mu[cand] = 0.0
    st.s0[cand] = st.s[eng]
    st.A += per_engine(eng, P + sv, E)
    fresh = np.isnan(st.admit_s[cand])
    if fresh.any():
        f, fe = cand[fresh], eng[fresh]
        st.admit_s[f] = st.t[fe]
        st.admit_version[f] = st.policy_version[fe]
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
    """New responses start at the engine's k; an engine whose k changes re-keys everyone."""
    if not len(new):
        return
    u = runs(eng)[0]
    k_new = st.choose_k(u)
    changed = u[k_new != st.k[u]]
    if len(changed):
        st.set_k(changed, k_new[k_new != st.k[u]])
        keep = ~np.isin(eng, changed)
        new, eng = new[keep], eng[keep]
    # at rate 0 since admission, a response has emitted nothing yet: unkeying it (FleetState.unkey)
    # only takes its P + g0 back out of A, which is all that is done here (the same sums)
    st.A -= per_engine(eng, st.P[new] + st.g0[new], st.E)
    st.key(new, eng)

