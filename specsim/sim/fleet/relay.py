"""The fleet engine's relay (phase 4 of sim/fleet/loop.py's round): the admit-as-you-finish rounds of
many engines in closed form.

An engine whose draft length is fixed (policy off or always) and whose queue holds arrived
responses admits at every finish boundary: the c responses that finish leave, then the queue's
leading responses that fit come in (the free slots and the KV admission budget decide how many:
as many as finished when the batch is full, none or several when the budget binds), one prefill
pass over the prompts they open and the tokens readmitted ones recompute, keyed at the engine's
k, and the batch runs on to its next finish. That is most of a busy pool's rounds (an async run
whose lag keeps the queues full: ~90 % of its engine-rounds; a pool whose KV budget binds: one
finish, none or one admission, per engine and round).

Invariant of a window: while no response admitted in it finishes before the next boundary of
those running at its start, the window's boundaries are the start's finish boundaries in order.
Then what the start's batch holds at each boundary (its aggregates, KV, count) is a prefix sum of
what left, and the admissions are a scan over the queue in order: candidate q is admitted at the
first boundary, not before candidate q − 1's, where it fits on top of the start's batch and the
q earlier candidates (each grown by μ·(boundary − its admission boundary) tokens since). The scan
runs once per candidate for all engines at once; everything else (the segments' times, the
passes' prefills, every segment's KV check, the accounting) comes out of one partial sort of each
engine's finish boundaries and prefix sums.

Each engine keeps the prefix of its window that the round-by-round loop would run before it
stops, takes an event or meets something the window does not model, and ends with the finish at
its last kept boundary, where the next round's phases take over. Segment j is kept while
* it ends strictly before the engine's cut (its next event, the caller's stop time) and, with a
  watched step, the boundaries before it leave some of that step's responses unfinished;
* its batch fits the KV budget over the whole segment (fleet/drain.kv_holds: no preemption at its
  first step, no KV overflow step within it);
* it ends before the finish boundary of every response admitted earlier in the window;
* it does not close a group (finish its last active member) one of the queue's candidates
  belongs to (the candidate would reopen it: its prompt blocks are priced at the start's state);
* the pass before it was decided by the scan: not cut short by RELAY_QUEUE candidates or by a
  candidate without laws (the round-by-round loop admits it and refuses to key it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.fleet.drain import SegmentBatch, drains_before, group_closes, kv_holds
from specsim.sim.fleet.state import (
    BIG,
    Counters,
    Engines,
    FleetState,
    Groups,
    Prices,
    Queues,
    Responses,
    Slots,
    cells,
    flat,
    per_engine,
)

__all__ = ["RELAY_CELLS", "RELAY_QUEUE", "relay", "relays"]

#: finishes looked at per engine and window (the smallest finish boundaries of its batch). Nearly
#: every window of a busy pool keeps all its cells, yet wider windows cost more: the main job's
#: runs take 1.02× the time at 64 and 1.08× at 128 (a window's work grows with its cells and its
#: candidates, its rounds' fixed cost is small)
RELAY_CELLS = 32
#: queued responses looked at per engine and window
RELAY_QUEUE = 2 * RELAY_CELLS
#: cumulative minima restart per engine: each later engine's values offset below every earlier one's
SPAN = 1 << 40


def relays(st: FleetState, S: np.ndarray, t_cut: np.ndarray) -> np.ndarray:
    """Mask over engines S (active, k fixed) of those whose window would keep a segment: no gated
    switch, a queue head that has arrived and has laws at the engine's k, a next finish strictly
    before the engine's cut `t_cut` (indexed by engine), and a batch whose KV does not overflow
    before that finish (an engine that thrashes its KV budget, preempting every few steps, would
    keep nothing: phase 5 cuts its segment at the overflow step). Reads the schedule (gate),
    queues, resp (arrival, laws), engines, slots and prices."""
    qs, rs, en, sl, pr = st.queues, st.resp, st.engines, st.slots, st.prices
    ok = (st.schedule.gate[S] < 0) & (qs.qhead[S] < qs.qend[S])
    F = S[ok]
    head = qs.queue[F, qs.qhead[F]]
    good = rs.arrival[head] <= en.t[F]
    k = en.k[F]
    for kv in np.unique(k[k > 0]).tolist():
        at = k == kv
        good[at] &= ~np.isnan(rs.laws[kv][0][head[at]])
    ok[ok] = good
    F = S[ok]
    nf = sl.slot_fin[F, :sl.slots_seen].min(axis=1)
    batch = SegmentBatch(en.A[F], en.B[F], en.n[F].astype(float), en.SP[F], en.GB[F], en.k[F])
    ok[ok] = drains_before(en, sl, pr, F, t_cut[F]) & kv_holds(pr, batch, en.s[F], nf)
    return ok


def _smallest_finishes(sl: Slots, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each engine's finish cells in boundary order, up to RELAY_CELLS of them and only whole
    boundaries (a boundary tied with the first cell left out is left out too): (engine row,
    boundary, slot) per cell, engine-major."""
    fin = sl.slot_fin[W, :sl.slots_seen]
    F = min(RELAY_CELLS, sl.slots_seen)
    if F < sl.slots_seen:
        part = np.argpartition(fin, F, axis=1)[:, :F + 1]
        vals = np.take_along_axis(fin, part, axis=1)
        order = np.argsort(vals, axis=1, kind="stable")
        part = np.take_along_axis(part, order, axis=1)
        vals = np.take_along_axis(vals, order, axis=1)
        inwin = (vals[:, :F] < vals[:, F:F + 1]) & (vals[:, :F] < BIG)
        cols, bnds = part[:, :F], vals[:, :F]
    else:
        cols = np.argsort(fin, axis=1, kind="stable")
        bnds = np.take_along_axis(fin, cols, axis=1)
        inwin = bnds < BIG
    r, c = cells(inwin)
    return r, bnds[r, c], cols[r, c]


@dataclass
class _Queue:
    """The candidates of each engine row (W × RELAY_QUEUE, queue order): response, valid (the
    arrived, keyed leading run of the queue), rate, steps to finish, KV increment and need."""

    resp: np.ndarray
    valid: np.ndarray
    cut_short: np.ndarray     # per row: the run ended at RELAY_QUEUE or at a response without laws
    mu: np.ndarray
    need: np.ndarray
    opens: np.ndarray
    inc: np.ndarray
    need_blocks: np.ndarray


def _candidates(qs: Queues, rs: Responses, en: Engines, gr: Groups, pr: Prices, W: np.ndarray) -> _Queue:
    """The queue's leading run of arrived responses with laws, up to RELAY_QUEUE per engine. A
    response not arrived by now arrives with an event (its release), at or after the cut, so the
    run ends there as at the queue's end; a response without laws ends it too, but cut short (the
    loop would admit it and raise)."""
    Q = RELAY_QUEUE
    pos = qs.qhead[W][:, None] + np.arange(Q)
    inq = pos < qs.qend[W][:, None]
    resp = qs.queue[W[:, None], np.where(inq, pos, qs.qhead[W][:, None])]
    arrived = inq & (rs.arrival[resp] <= en.t[W][:, None])
    valid = np.cumprod(arrived, axis=1).astype(bool)
    r, c = cells(valid)
    flat = resp[r, c]
    sv = rs.saved[flat]
    mu, need = rs.rate_and_need(flat, en.k[W[r]], rs.L[flat] - sv)
    mu2 = np.zeros(resp.shape)
    need2 = np.full(resp.shape, np.nan)
    mu2[r, c] = mu
    need2[r, c] = need
    keyed = np.cumprod(valid & ~np.isnan(need2), axis=1).astype(bool)
    cut_short = (valid & ~keyed).any(axis=1) | keyed[:, -1]
    valid = keyed
    g = rs.groups[resp]
    first = np.ones(resp.shape, dtype=bool)
    if qs.requeued:          # a group's queued members may be apart: its first member in queue order opens it
        rr, cc = cells(valid)
        seen = np.zeros(resp.shape, dtype=bool)
        _, at = np.unique(g[rr, cc], return_index=True)
        seen[rr[at], cc[at]] = True
        first = seen
    else:
        first[:, 1:] = g[:, 1:] != g[:, :-1]
    opens = valid & first & (gr.group_active[g] == 0)
    pb = np.where(opens, rs.pblocks[resp], 0.0)
    svq = np.where(valid, rs.saved[resp], 0.0)
    slots, blk = pr.slots_max, pr.blk
    return _Queue(resp, valid, cut_short, mu2, np.where(valid, need2, 0.0), opens,
                  pb + (svq + slots) / blk + pr.rbar, np.ceil((svq + slots) / blk) + pb)


def _scan(pr: Prices, cq: _Queue, base: np.ndarray, bnd: np.ndarray, n_post: np.ndarray,
          seg_valid: np.ndarray) -> np.ndarray:
    """The pass (local boundary index) at which each candidate is admitted, -1 if not within the
    window: candidate q at the first boundary j, not before candidate q − 1's, where the start's
    batch after j's finishes (`base` KV blocks, `n_post` responses) plus the q earlier candidates
    (each inc_i + μ_i·(b_j − b_i)/blk blocks) leave room for its need under the admission budget
    and a free slot; an empty engine admits its head whatever the budget (fleet/admit.admit).
    Arrays are W × boundaries, `seg_valid` masking each row's padding.

    Most rows are bound by slots alone: the free slots after boundary j, max_batch − n_post[j],
    never fall with j, so candidate q's first boundary with a free slot is J_q = #{j : free_j ≤ q},
    non-decreasing in q, for all rows and candidates at once. Where every candidate so placed also
    fits the budget there (its KV on top of the earlier ones', a prefix sum over q), that is the
    scan's answer: each candidate's first boundary with a slot is not before its predecessor's and
    has room. The rows where some candidate does not fit there are scanned candidate by candidate
    (`_scan_rows`)."""
    Wn, Q = cq.resp.shape
    blk, budget = pr.blk, pr.budget
    rows = np.arange(Wn)[:, None]
    # J[r, q] = #{j : free[r, j] <= q}: one search of every row's q in its (non-decreasing) row,
    # rows offset so that they sort one after another; padding sorts past every q
    span = pr.max_batch + Q + 2
    free = np.where(seg_valid, pr.max_batch - n_post, span - 1) + span * np.arange(Wn)[:, None]
    J = (np.searchsorted(free.reshape(-1), (np.arange(Q) + span * np.arange(Wn)[:, None]).reshape(-1), side="right")
         .reshape(Wn, Q) - free.shape[1] * np.arange(Wn)[:, None])
    placed = cq.valid & (J < seg_valid.sum(axis=1)[:, None])
    Jc = np.where(placed, J, 0)
    b_J = bnd[rows, Jc]
    grown = np.where(placed, cq.inc - cq.mu * b_J / blk, 0.0)
    rate = np.where(placed, cq.mu / blk, 0.0)
    C = np.zeros((Wn, Q))                                                # the earlier candidates', at their entry
    C[:, 1:] = np.cumsum(grown[:, :-1], axis=1)
    M = np.zeros((Wn, Q))
    M[:, 1:] = np.cumsum(rate[:, :-1], axis=1)
    fits = (base[rows, Jc] + C + M * b_J + cq.need_blocks <= budget) | (n_post[rows, Jc] + np.arange(Q) == 0)
    passes = np.where(placed, J, -1)
    bound = (placed & ~fits).any(axis=1)
    if bound.any():
        r = np.flatnonzero(bound)
        passes[r] = _scan_rows(pr, cq, r, base[r], bnd[r], n_post[r], seg_valid[r])
    return passes


def _scan_rows(pr: Prices, cq: _Queue, r: np.ndarray, base: np.ndarray, bnd: np.ndarray, n_post: np.ndarray,
               seg_valid: np.ndarray) -> np.ndarray:
    """_scan for rows r whose budget binds: candidate by candidate, each row's running sums C and
    M of the admitted candidates' KV (Σ inc_i − μ_i·b_i/blk and Σ μ_i/blk), so candidate q at
    boundary j needs base_j + C + M·b_j + its blocks within the budget."""
    Wn, Q = len(r), cq.resp.shape[1]
    jidx = np.arange(base.shape[1])
    passes = np.full((Wn, Q), -1, dtype=np.int64)
    p_prev = np.zeros(Wn, dtype=np.int64)
    C = np.zeros(Wn)
    M = np.zeros(Wn)
    valid, need_blocks, inc, mu = cq.valid[r], cq.need_blocks[r], cq.inc[r], cq.mu[r]
    alive = valid[:, 0].copy()
    blk, budget = pr.blk, pr.budget
    for q in range(Q):
        if not alive.any():
            break
        n_before = n_post + q
        fits = (base + C[:, None] + M[:, None] * bnd + need_blocks[:, q, None] <= budget) & (n_before < pr.max_batch)
        fits |= n_before == 0
        fits &= seg_valid & (jidx >= p_prev[:, None]) & alive[:, None]
        got = fits.any(axis=1)
        j = np.argmax(fits, axis=1)
        passes[got, q] = j[got]
        b_j = bnd[np.arange(Wn), j]
        C = np.where(got, C + (inc[:, q] - mu[:, q] * b_j / blk), C)
        M = np.where(got, M + mu[:, q] / blk, M)
        p_prev = np.where(got, j, p_prev)
        alive = got & (valid[:, q + 1] if q + 1 < Q else False)
    return passes


@dataclass
class _Finishes:
    """Each engine's window of finishes (_smallest_finishes): per cell (one finishing response,
    engine-major, in boundary order) the response, its engine and slot, its segment (one per
    boundary) and what it held; per segment its engine and boundary, where its engine's segments
    start, and what the start's batch loses at it (Σ over its cells)."""

    idx: np.ndarray          # per cell: the response
    eng: np.ndarray          # per cell: its engine
    col: np.ndarray          # per cell: its slot
    seg_of: np.ndarray       # per cell: its segment
    g_fin: np.ndarray        # per cell: its group
    closes: np.ndarray       # per cell: the last active member of its group finishes here
    g0: np.ndarray
    mu: np.ndarray
    s0: np.ndarray
    L: np.ndarray
    first: np.ndarray        # per segment: its first cell
    counts: np.ndarray       # per segment: its cells
    seg_r: np.ndarray        # per segment: its engine's row in W
    seg_e: np.ndarray        # per segment: its engine
    bounds: np.ndarray       # per segment: its boundary
    opens: np.ndarray        # per segment: its engine's first
    rank: np.ndarray         # per segment: its engine among those with cells
    engine_first: np.ndarray  # per segment: its engine's first segment
    local: np.ndarray        # per segment: its index among its engine's
    drop_a: np.ndarray       # per segment: Σ over its cells of P + g0 − μ·s0 (the context's A)
    drop_b: np.ndarray       # ... of μ (the context's B)
    drop_p: np.ndarray       # ... of P
    drop_l: np.ndarray       # ... of L
    dgb_fin: np.ndarray      # ... of −(prompt blocks of the groups it closes)
    cnt_f: np.ndarray        # ... of 1

    def before(self, x: np.ndarray) -> np.ndarray:
        """Σ x over each segment's engine's earlier segments."""
        c = np.cumsum(x) - x
        return c - c[self.engine_first]


def _finishes(sl: Slots, rs: Responses, gr: Groups, W: np.ndarray) -> _Finishes | None:
    """The finish cells of engines W grouped into segments (None when there are none)."""
    r, b, col = _smallest_finishes(sl, W)
    if not len(b):
        return None
    nc = len(b)
    eng = W[r]
    idx = flat(sl.slot_resp)[eng * sl.max_batch + col]
    new = np.ones(nc, dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (b[1:] != b[:-1])
    first = np.flatnonzero(new)
    counts = np.diff(np.append(first, nc))
    seg_of = np.cumsum(new) - 1
    seg_r, bounds = r[first], b[first]
    opens = np.ones(len(first), dtype=bool)      # first segment of its engine
    opens[1:] = seg_r[1:] != seg_r[:-1]
    rank = np.cumsum(opens) - 1                   # the segment's engine among those with cells
    engine_first = np.flatnonzero(opens)[rank]
    local = np.arange(len(first)) - engine_first
    # what the start's batch loses at each boundary; the groups whose last active member finishes
    g_fin = rs.groups[idx]
    _, last_of, whole, inv = group_closes(gr, g_fin, np.arange(nc))
    closes = (np.arange(nc) == last_of[inv]) & whole[inv]
    g0, mu, s0 = rs.g0[idx], rs.mu[idx], rs.s0[idx]
    P, L = rs.P[idx], rs.L[idx]
    drop_a, drop_b, drop_p, drop_l, dgb_fin, cnt_f = np.add.reduceat(
        np.stack((P + g0 - mu * s0, mu, P, L, -np.where(closes, gr.group_pb[g_fin], 0.0), np.ones(nc))), first, axis=1)
    return _Finishes(idx, eng, col, seg_of, g_fin, closes, g0, mu, s0, L, first, counts, seg_r, W[seg_r], bounds,
                     opens, rank, engine_first, local, drop_a, drop_b, drop_p, drop_l, dgb_fin, cnt_f)


@dataclass
class _Admitted:
    """The queued candidates of engines W admitted in the window (_scan): per admission the
    response, its row in W, its segment (where it is admitted), rate, finish boundary, start
    boundary and saved tokens; per segment what its admissions add (Σ, as _Finishes drops) and
    their prefill pass's time."""

    cq: _Queue
    passes: np.ndarray       # W × RELAY_QUEUE: the local segment each candidate is admitted at (−1: none)
    S_max: int               # the most segments of one engine
    ar: np.ndarray
    cand: np.ndarray
    a_seg_of: np.ndarray
    mu_c: np.ndarray
    fin_c: np.ndarray
    b_c: np.ndarray
    sv: np.ndarray
    add_a: np.ndarray
    add_b: np.ndarray
    add_p: np.ndarray
    add_l: np.ndarray
    dgb_adm: np.ndarray
    cnt_a: np.ndarray
    pre: np.ndarray          # per segment: the prefill pass of its admissions (s)


def _admissions(st: FleetState, W: np.ndarray, f: _Finishes) -> _Admitted:
    """The admissions at each segment's boundary: a scan over each engine's queued candidates
    against the KV the start's batch leaves free there. Reads engines, prices, resp, and (the
    candidates) queues and groups."""
    en, pr, rs = st.engines, st.prices, st.resp
    Wn = len(W)
    before = f.before
    n_post0 = en.n[f.seg_e] - before(f.counts) - f.counts
    a_post0 = en.A[f.seg_e] - before(f.drop_a) - f.drop_a
    b_post0 = en.B[f.seg_e] - before(f.drop_b) - f.drop_b
    sp_post0 = en.SP[f.seg_e] - before(f.drop_p) - f.drop_p
    gb_post0 = en.GB[f.seg_e] + before(f.dgb_fin) + f.dgb_fin
    slots, blk = pr.slots_max, pr.blk
    base = gb_post0 + (a_post0 + b_post0 * f.bounds - sp_post0 + n_post0 * slots) / blk + n_post0 * pr.rbar

    cq = _candidates(st.queues, rs, en, st.groups, pr, W)
    S_max = int(f.local.max()) + 1
    def pad(x, fill):
        return _pad(x, f.seg_r, f.local, Wn, S_max, fill)

    passes = _scan(pr, cq, pad(base, np.inf), pad(f.bounds, 0), pad(n_post0, 1), pad(np.ones(len(f.first), bool), False))
    ar, aq = cells(passes >= 0)
    cand = cq.resp[ar, aq]
    a_seg_of = engine_first_of_row(f.opens, f.seg_r, Wn)[ar] + passes[ar, aq]     # the admitting segment
    mu_c, need_c = cq.mu[ar, aq], cq.need[ar, aq]
    opens_c = cq.opens[ar, aq]
    b_c = f.bounds[a_seg_of]
    fin_c = b_c + need_c.astype(np.int64)
    sv, Pc, Lc = rs.saved[cand], rs.P[cand], rs.L[cand]
    nseg = len(f.first)
    add = np.zeros((10, nseg))
    if len(cand):
        pf = opens_c | (sv > 0)
        qt = np.where(pf, np.where(opens_c, Pc + sv, sv), 0.0)
        ct = np.where(pf & ~opens_c, Pc, 0.0)
        cols = np.stack((Pc + sv - mu_c * b_c, mu_c, Pc, Lc, np.where(opens_c, rs.pblocks[cand], 0.0), np.ones(len(cand)),
                         pf.astype(float), qt, qt * qt, qt * ct))
        for i in range(10):
            add[i] = np.bincount(a_seg_of, weights=cols[i], minlength=nseg)
        sc = np.bincount(a_seg_of, weights=ct, minlength=nseg)
    else:
        sc = np.zeros(nseg)
    add_a, add_b, add_p, add_l, dgb_adm, cnt_a, n_pf, sq, sq2, sqc = add
    pre = np.zeros(nseg)
    with_pf = n_pf > 0
    if with_pf.any():
        pre[with_pf] = pr.prefill_s(n_pf[with_pf], sq[with_pf], sq2[with_pf], sqc[with_pf], sc[with_pf])
    return _Admitted(cq, passes, S_max, ar, cand, a_seg_of, mu_c, fin_c, b_c, sv, add_a, add_b, add_p, add_l, dgb_adm,
                     cnt_a, pre)


@dataclass
class _Segments:
    """Every segment as the loop would run it: its batch's context (A + B·s), prompt tokens,
    prompt blocks and size, its start and steps, the draft length, its time and its end (s)."""

    a_seg: np.ndarray
    b_seg: np.ndarray
    sp_seg: np.ndarray
    gb_seg: np.ndarray
    n_seg: np.ndarray
    starts: np.ndarray
    m: np.ndarray
    k: np.ndarray
    dt: np.ndarray
    ends: np.ndarray


def _segments(en: Engines, pr: Prices, f: _Finishes, ad: _Admitted) -> _Segments:
    """Each segment's batch (the start's, less the earlier finishes, plus the earlier admissions)
    and its time: m steps of fixed_s + per_ctx_s · (A + B·s), after the prefills before it."""
    before, seg_e, bounds = f.before, f.seg_e, f.bounds
    a_seg = en.A[seg_e] - before(f.drop_a) + before(ad.add_a)
    b_seg = en.B[seg_e] - before(f.drop_b) + before(ad.add_b)
    sp_seg = en.SP[seg_e] - before(f.drop_p) + before(ad.add_p)
    gb_seg = en.GB[seg_e] + before(f.dgb_fin + ad.dgb_adm)
    n_seg = en.n[seg_e] - before(f.counts) + before(ad.cnt_a)
    starts = np.where(f.opens, en.s[seg_e], np.concatenate(([0], bounds[:-1])))
    m = (bounds - starts).astype(float)
    k = en.k[seg_e]
    rows, ni = pr.krow_of[k], n_seg.astype(np.int64)
    dt = m * pr.fixed[rows, ni] + pr.per_ctx[rows, ni] * (m * a_seg + b_seg * m * (2 * starts + m - 1) / 2)
    ends = en.t[seg_e] + before(dt + ad.pre) + dt
    return _Segments(a_seg, b_seg, sp_seg, gb_seg, n_seg, starts, m, k, dt, ends)


def _kept(pr: Prices, rs: Responses, ct: Counters, t_cut: np.ndarray, watch_step: int | None, f: _Finishes,
          ad: _Admitted, sg: _Segments) -> np.ndarray:
    """The segments each engine keeps: the leading run the loop would run before it stops (its
    cut, a KV overflow, an admitted response finishing first, the watched step done, a group
    reopened by a queued member, a candidate scan cut short)."""
    Wn, nseg, opens, rank, bounds, seg_e = len(ad.cq.resp), len(f.first), f.opens, f.rank, f.bounds, f.seg_e
    batch = SegmentBatch(sg.a_seg, sg.b_seg, sg.n_seg.astype(float), sg.sp_seg, sg.gb_seg, sg.k)
    seg_ok = (sg.ends < t_cut[seg_e]) & kv_holds(pr, batch, sg.starts, bounds)
    pass_min = np.full(nseg, SPAN - 1)
    if len(ad.cand):
        np.minimum.at(pass_min, ad.a_seg_of, np.minimum(ad.fin_c, SPAN - 1))
    shifted = pass_min + (rank[-1] - rank) * SPAN
    earlier = np.minimum.accumulate(shifted) - (rank[-1] - rank) * SPAN
    prior = np.full(nseg, BIG)
    prior[~opens] = earlier[np.flatnonzero(~opens) - 1]
    seg_ok &= bounds < prior
    if watch_step is not None:
        hits = np.add.reduceat((rs.step_ids[f.idx] == watch_step).astype(float), f.first)
        seg_ok &= ct.remaining[seg_e, watch_step] - f.before(hits) > 0
    cq = ad.cq
    reopen = f.closes & np.isin(f.g_fin, rs.groups[cq.resp[cq.valid]])
    if reopen.any():
        seg_ok[np.unique(f.seg_of[reopen])] = False
    # a scan cut short decides nothing from its last admission's boundary on
    short_rows = np.flatnonzero(cq.cut_short)
    pass_ok = np.ones(nseg, dtype=bool)
    if len(short_rows):
        last_q = np.where(cq.valid[short_rows], np.arange(cq.valid.shape[1]), -1).max(axis=1)
        from_j = np.where(last_q >= 0, ad.passes[short_rows, np.maximum(last_q, 0)], 0)
        from_j = np.where((last_q >= 0) & (from_j < 0), ad.S_max, from_j)
        lim = np.full(Wn, ad.S_max)
        lim[short_rows] = from_j
        pass_ok &= f.local < lim[f.seg_r]
    prev_ok = np.ones(nseg, dtype=bool)
    prev_ok[1:] = pass_ok[:-1]
    cond = seg_ok & (opens | prev_ok)
    return cond & (f.before((~cond).astype(float)) == 0)


def _commit(st: FleetState, W: np.ndarray, f: _Finishes, ad: _Admitted, sg: _Segments, keep: np.ndarray) -> np.ndarray:
    """Apply the kept segments: their finishers finish, their admissions (all but the last
    kept segment's of each engine) join the batch in queue order, the aggregates and counters
    follow, and each engine ends at its last kept boundary. Returns the engines that advanced.
    Writes resp, counters, groups, slots, queues and engines."""
    rs, en, ct, gr, sl = st.resp, st.engines, st.counters, st.groups, st.slots
    E = en.E
    seg_e, bounds, ends = f.seg_e, f.bounds, sg.ends
    last = keep.copy()
    last[:-1] &= ~keep[1:] | f.opens[1:]           # the last kept segment of its engine
    kept_pass = keep & ~last
    cell_keep = keep[f.seg_of]
    adm_keep = kept_pass[ad.a_seg_of] if len(ad.cand) else np.zeros(0, dtype=bool)

    # the finishers of every kept boundary
    fidx, feng = f.idx[cell_keep], f.eng[cell_keep]
    fseg = f.seg_of[cell_keep]
    rs.finish_s[fidx] = ends[fseg]
    d = f.L[cell_keep] - f.g0[cell_keep]
    rs.emitted[fidx] += d
    rsd = en.k[feng] > 0
    if rsd.any():
        ct.sd_tokens += per_engine(feng, np.where(rsd, d, 0.0), E)
        rs.seq_sd_tokens[fidx] += np.where(rsd, d, 0.0)
        rs.seq_sd_steps[fidx] += np.where(rsd, bounds[fseg] - f.s0[cell_keep], 0.0)
    ct.count_finished(feng, rs.step_ids[fidx])
    rs.mu[fidx] = 0.0
    rs.slot_of[fidx] = -1
    np.subtract.at(gr.group_active, f.g_fin[cell_keep], 1)
    sl.push_slots(feng, f.col[cell_keep])
    # the admitted, in queue order
    ci = ad.cand[adm_keep]
    if len(ci):
        ceng = W[ad.ar[adm_keep]]
        cseg = ad.a_seg_of[adm_keep]
        np.add.at(gr.group_active, rs.groups[ci], 1)
        u = np.flatnonzero(np.bincount(ceng, minlength=E))
        cnt = np.bincount(ceng, minlength=E)[u]
        slot, at = sl.seat(ci, ceng, cnt, u)
        rs.slot_of[ci] = slot
        flat(sl.slot_fin)[at] = ad.fin_c[adm_keep]
        rs.g0[ci] = ad.sv[adm_keep]
        rs.mu[ci] = ad.mu_c[adm_keep]
        rs.s0[ci] = ad.b_c[adm_keep]
        fresh = np.isnan(rs.admit_s[ci])
        if fresh.any():
            rs.admit_s[ci[fresh]] = ends[cseg][fresh]
            rs.admit_version[ci[fresh]] = en.policy_version[ceng[fresh]]
        st.queues.qhead[u] += cnt
    # aggregates and counters
    ke, pe = seg_e[keep], seg_e[kept_pass]
    en.A += per_engine(pe, ad.add_a[kept_pass], E) - per_engine(ke, f.drop_a[keep], E)
    en.B += per_engine(pe, ad.add_b[kept_pass], E) - per_engine(ke, f.drop_b[keep], E)
    en.SP += per_engine(pe, ad.add_p[kept_pass], E) - per_engine(ke, f.drop_p[keep], E)
    en.SL += per_engine(pe, ad.add_l[kept_pass], E) - per_engine(ke, f.drop_l[keep], E)
    en.GB += per_engine(ke, f.dgb_fin[keep], E) + per_engine(pe, ad.dgb_adm[kept_pass], E)
    en.n += (per_engine(pe, ad.cnt_a[kept_pass], E) - per_engine(ke, f.cnt_f[keep], E)).astype(np.int64)
    ct.prefill_total += per_engine(pe, ad.pre[kept_pass], E)
    ct.count_segments(ke, sg.m[keep], sg.n_seg[keep], sg.dt[keep], sg.b_seg[keep], sg.k[keep])
    u = seg_e[last]
    en.t[u] = ends[last]
    en.s[u] = bounds[last]
    en.zero_empty(u)
    advanced = np.zeros(E, dtype=bool)
    advanced[u] = True
    return advanced[W]


def relay(st: FleetState, W: np.ndarray, t_cut: np.ndarray, watch_step: int | None = None) -> np.ndarray:
    """Phase 4: the admit-as-you-finish rounds of engines W (relays(); k fixed) in closed form, up
    to each engine's cut `t_cut` (indexed by engine). Returns the mask (over W) of engines that
    advanced (each ends at the finish of its last kept boundary): the finishes (_finishes), the
    admissions at their boundaries (_admissions), every segment's batch and time (_segments),
    the leading run the loop would run (_kept), applied (_commit). The stages read the parts
    they are given; only _commit writes."""
    f = _finishes(st.slots, st.resp, st.groups, W)
    if f is None:
        return np.zeros(len(W), dtype=bool)
    ad = _admissions(st, W, f)
    sg = _segments(st.engines, st.prices, f, ad)
    keep = _kept(st.prices, st.resp, st.counters, t_cut, watch_step, f, ad, sg)
    if not keep.any():
        return np.zeros(len(W), dtype=bool)
    return _commit(st, W, f, ad, sg, keep)


def engine_first_of_row(opens: np.ndarray, seg_r: np.ndarray, Wn: int) -> np.ndarray:
    """Per engine row of W: the index of its first segment (0 for a row without segments)."""
    out = np.zeros(Wn, dtype=np.int64)
    at = np.flatnonzero(opens)
    out[seg_r[at]] = at
    return out


def _pad(x: np.ndarray, seg_r: np.ndarray, local: np.ndarray, Wn: int, S_max: int, fill) -> np.ndarray:
    """Per-segment values as a W × S_max array (row: the engine, column: the local boundary index)."""
    out = np.full((Wn, S_max), fill, dtype=np.asarray(x).dtype if not isinstance(fill, float) else float)
    out[seg_r, local] = x
    return out
