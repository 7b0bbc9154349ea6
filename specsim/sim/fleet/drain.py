"""The fleet engine's drain (phase 4 of sim/fleet/loop.py's round): the finish-only rounds of many
engines in closed form.

An engine whose draft length is fixed (policy off or always), that admits nothing before its next
event (empty queue, head not yet arrived, or a gated switch) and whose running batch can never
overflow its KV budget only finishes responses until that event: between consecutive finish
boundaries its batch is fixed, so every such segment's time is the affine-step sum
m·fixed + per_ctx·(m·A + B·m·(2s + m − 1)/2), and all of them, for all engines, come out of one
sort by (engine, finish boundary) and a few prefix sums. The tail of an RL step (a few engines
finishing their last responses one at a time) costs one round instead of one per finish."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from specsim.sim.fleet.state import (
    INF,
    Engines,
    FleetState,
    Groups,
    Prices,
    Queues,
    Responses,
    Slots,
    flat,
    per_engine,
    runs,
)

__all__ = ["SegmentBatch", "drain", "drains_before", "group_closes", "head_arrival", "kv_holds", "no_admission",
           "reachable", "segment_prompts", "tail_fits"]

#: finish boundaries below this sort with their engine as one int64 key (engine · SPAN + boundary):
#: one stable argsort, the order of np.lexsort((boundary, engine))
SPAN = 1 << 40


def head_arrival(qs: Queues, rs: Responses, e: np.ndarray) -> np.ndarray:
    """When the queue head of each engine in e arrives (INF for an empty queue)."""
    has = qs.qhead[e] < qs.qend[e]
    out = np.full(len(e), INF)
    out[has] = rs.arrival[qs.queue[e[has], qs.qhead[e[has]]]]
    return out


def no_admission(st: FleetState, e: np.ndarray) -> np.ndarray:
    """Engines e that admit nothing before their next event: an empty queue, a head not yet
    arrived (its release is an event), or a gated switch (admission waits for the drain). Reads
    queues, resp (arrival), engines (t) and the schedule (gate)."""
    return (head_arrival(st.queues, st.resp, e) > st.engines.t[e]) | (st.schedule.gate[e] >= 0)


def drains_before(en: Engines, sl: Slots, pr: Prices, e: np.ndarray, t_cut: np.ndarray) -> np.ndarray:
    """Does each engine in e reach its next finish strictly before `t_cut`? (Else it has no
    finish-only round to drain: phase 5 clips its segment at the cut.)"""
    m = (sl.slot_fin[e, :sl.slots_seen].min(axis=1) - en.s[e]).astype(float)
    c1, c2 = pr.step_coefficients(en, e)
    return en.t[e] + m * c1 + c2 * m * m < t_cut


def tail_fits(en: Engines, pr: Prices, e: np.ndarray) -> np.ndarray:
    """Can the running batch of engines e never overflow the KV capacity? KV in use plus the rest
    of every response plus k+1 slots each (the generated tokens cancel) is the most it can hold."""
    n, k = en.n[e], en.k[e]
    return en.GB[e] + (en.SL[e] + 2 * n * (k + 1)) / pr.blk + n * (pr.rbar + 1) <= pr.cap


def segment_prompts(en: Engines, gr: Groups, g: np.ndarray, first, counts, seg_e, P,
                    before) -> tuple[np.ndarray, np.ndarray]:
    """Per drained segment (sorted by engine and boundary; cells of groups g, prompts P): the
    prompt tokens SP of the batch and the prompt blocks GB of its groups, a group's blocks going
    with its last active member (which the drain finishes at the group's last boundary; a group
    with members beyond the drained cells keeps its blocks)."""
    SP = en.SP[seg_e] - before(np.add.reduceat(P, first))
    seg_of = np.repeat(np.arange(len(first)), counts)
    gu, last, whole, _ = group_closes(gr, g, seg_of)
    GB = en.GB[seg_e] - before(np.bincount(last[whole], weights=gr.group_pb[gu[whole]], minlength=len(first)))
    return SP, GB


def group_closes(gr: Groups, g: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For cells of groups g at positions `at`: the groups (ascending, each once), the last
    position among each one's cells, whether its cells are every active member of the group, and
    each cell's group among them (np.unique's inverse). Few cells against the run's groups: one
    np.unique; else bincounts over the group range, which skip the sort (same answer)."""
    G = len(gr.group_active)
    if 16 * len(g) < G:
        gu, inv, members = np.unique(g, return_inverse=True, return_counts=True)
        inv = inv.reshape(-1)
        last = np.zeros(len(gu), dtype=np.int64)
        np.maximum.at(last, inv, at)
        return gu, last, members == gr.group_active[gu], inv
    members = np.bincount(g, minlength=G)
    gu = np.flatnonzero(members)
    last_g = np.full(G, -1, dtype=np.int64)
    np.maximum.at(last_g, g, at)
    rank = np.zeros(G, dtype=np.int64)
    rank[gu] = np.arange(len(gu))
    return gu, last_g[gu], members[gu] == gr.group_active[gu], rank[g]


@dataclass(frozen=True, eq=False)
class SegmentBatch:
    """The running batch of each segment (or engine) as the KV checks read it: its context
    A + B·s, size n, prompt tokens SP, prompt blocks GB and draft length k."""

    A: np.ndarray
    B: np.ndarray
    n: np.ndarray
    SP: np.ndarray
    GB: np.ndarray
    k: np.ndarray


def kv_holds(pr: Prices, batch: SegmentBatch, starts: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per segment from boundary `starts` to `bounds`: does the batch fit its KV budget over the
    whole segment, as the round-by-round loop checks it? At the segment's first step the
    preemption test (fleet/admit.fit_batch) and over its steps the overflow step (Fleet._segment's
    s_kv). A batch of one is never preempted nor cut."""
    blk, rbar = pr.blk, pr.rbar
    A, B, n, SP, GB, k = batch.A, batch.B, batch.n, batch.SP, batch.GB, batch.k
    over = (n > 1) & (GB + (A + B * starts - SP + n * (k + 1)) / blk + n * rbar > pr.cap)
    x = (pr.cap - GB - n * rbar) * blk - n * (k + 1)
    kvc = (B > 0) & (n > 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s_kv = np.floor((x - (A - SP)) / np.where(kvc, B, 1.0)) + 1
    return ~(over | (kvc & (starts < s_kv) & (s_kv < bounds)))


def reachable(en: Engines, pr: Prices, e: np.ndarray, t_cut: np.ndarray) -> np.ndarray:
    """The last boundary each engine in e could reach strictly before its cut even if every step
    cost its draft length's cheapest step (Prices.min_step_s): a segment ending at a later
    boundary ends at or after the cut, so a drain never keeps it (inf where the cut is inf or the
    table has no cost)."""
    step = pr.min_step_s[pr.krow_of[en.k[e]]]
    with np.errstate(divide="ignore", invalid="ignore"):
        ahead = np.floor((t_cut - en.t[e]) / step * (1 + 1e-9)) + 1
    return np.where((step > 0) & np.isfinite(ahead), en.s[e] + ahead, np.inf)


@dataclass
class _DrainCells:
    """The finishing responses of the drained engines, sorted by (engine, finish boundary): the
    response, its engine, its boundary and slot, and what it held (g0, s0, prompt P, length L)."""

    idx: np.ndarray
    eng: np.ndarray
    b: np.ndarray
    col: np.ndarray
    g0: np.ndarray
    s0: np.ndarray
    P: np.ndarray
    L: np.ndarray


@dataclass
class _DrainSegments:
    """One segment per (engine, finish boundary): its engine, boundary and cells, its steps m, draft
    length k and batch (n, context A + B·s), start, time and end (s), what its finishes drop from A
    and B, and (recorded or checked against the KV budget) its batch's prompt tokens and blocks."""

    seg_e: np.ndarray
    bounds: np.ndarray
    counts: np.ndarray
    m: np.ndarray
    k: np.ndarray
    n_seg: np.ndarray
    a_seg: np.ndarray
    b_seg: np.ndarray
    starts: np.ndarray
    dt: np.ndarray
    ends: np.ndarray
    drop_a: np.ndarray
    drop_b: np.ndarray
    SP: np.ndarray | None = None
    GB: np.ndarray | None = None


def _take(x, mask: np.ndarray):
    """The same cells or segments, those of `mask` only."""
    return type(x)(**{f.name: None if getattr(x, f.name) is None else getattr(x, f.name)[mask] for f in fields(x)})


def drain(st: FleetState, D: np.ndarray, t_cut: np.ndarray | None = None, watch_step: int | None = None) -> np.ndarray:
    """Phase 4: the finish-only rounds of engines D (k fixed, nothing admissible before the
    cut) in closed form (fastlaw.drain for many engines): sorted by (engine, finish boundary),
    the batch is fixed between consecutive boundaries, so every segment's time is the
    affine-step sum, evaluated for all segments of all engines at once.

    With a cut, the cells no engine could reach before it (`reachable`) are left out before the
    sort: they are a suffix of each engine's boundaries, and a segment's sums depend only on the
    segments before it.

    Each engine keeps the prefix of segments the round-by-round loop would run before it stops,
    takes an event or touches its KV budget: an engine whose running batch cannot overflow
    (tail_fits) all of them, another those before the first segment where the loop would preempt
    or cut at the KV overflow step (kv_holds); open rollouts only the segments ending strictly
    before the engine's cut `t_cut` (its next event, the caller's stop time, its queue head's
    arrival; a segment reaching the cut is left to phase 5, which clips it) and, with
    `watch_step`, up to the one that finishes the engine's last response of that step. Returns
    the mask (over D) of engines that advanced. Reads slots, resp, engines, groups, prices and
    counters; _drain_commit writes."""
    sl, rs, en, pr, ct = st.slots, st.resp, st.engines, st.prices, st.counters
    rows = sl.slot_resp[D, :sl.slots_seen]
    fins = sl.slot_fin[D, :sl.slots_seen]
    live = rows >= 0
    if t_cut is not None:
        live &= fins <= reachable(en, pr, D, t_cut[D])[:, None]
    at = np.flatnonzero(live)            # the live cells, row-major
    r, c = np.divmod(at, sl.slots_seen)
    idx, eng, b = flat(rows)[at], D[r], flat(fins)[at]
    order = np.argsort(eng * SPAN + b, kind="stable") if len(b) and b.max() < SPAN else np.lexsort((b, eng))
    idx, eng, b, col = idx[order], eng[order], b[order], c[order]
    new = np.ones(len(idx), dtype=bool)
    new[1:] = (eng[1:] != eng[:-1]) | (b[1:] != b[:-1])
    first = np.flatnonzero(new)
    counts = np.diff(np.append(first, len(idx)))
    seg_e, bounds = eng[first], b[first]
    opens = np.ones(len(first), dtype=bool)      # first segment of its engine
    opens[1:] = seg_e[1:] != seg_e[:-1]
    engine_first = np.flatnonzero(opens)[np.cumsum(opens) - 1]     # each segment's engine's first segment
    g0, mu, s0 = rs.g0[idx], rs.mu[idx], rs.s0[idx]
    P, L = rs.P[idx], rs.L[idx]
    drop_a = np.add.reduceat(P + g0 - mu * s0, first)
    drop_b = np.add.reduceat(mu, first)

    def before(x):   # Σ x over the engine's earlier segments
        c = np.cumsum(x) - x
        return c - c[engine_first]

    a_seg = en.A[seg_e] - before(drop_a)
    b_seg = en.B[seg_e] - before(drop_b)
    n_seg = en.n[seg_e] - before(counts.astype(float))
    starts = np.where(opens, en.s[seg_e], np.concatenate(([0], bounds[:-1])))
    m = (bounds - starts).astype(float)
    k = en.k[seg_e]
    rows = pr.krow_of[k]
    ni = n_seg.astype(np.int64)
    dt = m * pr.fixed[rows, ni] + pr.per_ctx[rows, ni] * (m * a_seg + b_seg * m * (2 * starts + m - 1) / 2)
    ends = en.t[seg_e] + before(dt) + dt
    cl = _DrainCells(idx, eng, b, col, g0, s0, P, L)
    sg = _DrainSegments(seg_e, bounds, counts, m, k, n_seg, a_seg, b_seg, starts, dt, ends, drop_a, drop_b)
    keep = None
    if t_cut is not None:
        keep = ends < t_cut[seg_e]
        if watch_step is not None:
            hit = np.add.reduceat((rs.step_ids[idx] == watch_step).astype(float), first)
            keep &= ct.remaining[seg_e, watch_step] - before(hit) > 0
    fits = tail_fits(en, pr, D)
    if ct.record or not fits.all():
        sg.SP, sg.GB = segment_prompts(en, st.groups, rs.groups[idx], first, counts, seg_e, P, before)
    if not fits.all():
        kv = kv_holds(pr, SegmentBatch(a_seg, b_seg, n_seg, sg.SP, sg.GB, k), starts, bounds)
        fits_e = np.zeros(en.E, dtype=bool)
        fits_e[D] = fits
        kv |= fits_e[seg_e]
        keep = kv if keep is None else keep & kv
    if keep is not None:
        keep &= before((~keep).astype(float)) == 0          # a prefix of each engine's segments
        if not keep.any():
            return np.zeros(len(D), dtype=bool)
        if not keep.all():
            cl, sg = _take(cl, np.repeat(keep, counts)), _take(sg, keep)
    return _drain_commit(st, cl, sg)[D]


def _drain_commit(st: FleetState, cl: _DrainCells, sg: _DrainSegments) -> np.ndarray:
    """Apply the kept segments of drain(): their responses finish at their segment's end, the
    counters and aggregates follow, each engine ends at its last kept boundary. Returns the mask
    (over all engines) of those that advanced. Writes resp, counters, engines, groups and slots."""
    rs, en, ct, pr = st.resp, st.engines, st.counters, st.prices
    E = en.E
    idx, eng = cl.idx, cl.eng
    rs.finish_s[idx] = np.repeat(sg.ends, sg.counts)
    if ct.record:            # KV in use at each segment's start, as Fleet._segment records it
        kv_tokens = (sg.GB + (sg.a_seg + sg.b_seg * sg.starts - sg.SP) / pr.blk + sg.n_seg * pr.rbar) * pr.blk
        ct.tl.append((sg.seg_e, sg.ends - sg.dt, sg.n_seg, sg.b_seg * sg.m / sg.dt, sg.k, kv_tokens))
    ct.count_segments(sg.seg_e, sg.m, sg.n_seg, sg.dt, sg.b_seg, sg.k)
    d = cl.L - cl.g0
    rs.emitted[idx] += d
    rsd = en.k[eng] > 0
    if rsd.any():
        ct.sd_tokens += per_engine(eng, np.where(rsd, d, 0.0), E)
        rs.seq_sd_tokens[idx] += np.where(rsd, d, 0.0)
        rs.seq_sd_steps[idx] += np.where(rsd, cl.b - cl.s0, 0.0)
    ct.count_finished(eng, rs.step_ids[idx])
    u, u_first, u_cnt = runs(eng)
    last = u_first + u_cnt - 1                          # each engine's last finished response
    en.t[u] = rs.finish_s[idx[last]]
    en.s[u] = cl.b[last]
    rs.mu[idx] = 0.0
    st.groups.release(rs.groups[idx], en.GB)
    st.slots.push_slots(eng, cl.col, (u, u_first, u_cnt))
    rs.slot_of[idx] = -1
    en.n[u] -= u_cnt
    en.A -= per_engine(sg.seg_e, sg.drop_a, E)
    en.B -= per_engine(sg.seg_e, sg.drop_b, E)
    en.SP[u] -= np.add.reduceat(cl.P, u_first)
    en.SL[u] -= np.add.reduceat(cl.L, u_first)
    en.zero_empty(u)
    advanced = np.zeros(E, dtype=bool)
    advanced[u] = True
    return advanced
