"""The fast engine: the reference engine's semantics, integrated event to event.

Between two events (a response finishes, responses are admitted, the KV budget runs out, the
policy changes k) the batch is fixed, so every step costs fixed_s + per_ctx_s · C(s) with the
total context C(s) = A + B·s growing linearly in the step index s (B = Σ μ_i, the expected tokens
per step of the active sequences). A segment of m steps from boundary s therefore costs

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

Cost: O(responses · log responses) per engine — a heap of finish boundaries, plus O(batch) work
each time k changes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from specsim.sim.common import EngineConfig, EngineResult, EngineWork, PrefillLog, Timeline, check_result
from specsim.speculation import choose_k
from specsim.workload.acceptance import tokens_per_verify_pmf


@dataclass(frozen=True)
class _StepLaw:
    """Per-sequence constants of the steps-to-finish law at one draft length k (arrays over the
    engine's sequences): with r tokens left, N ≈ r·inv_mu + offset ± sqrt(r)·sd1, skewness
    skew1/sqrt(r) (renewal theory, see the module docstring); mu is the fluid rate."""

    mu: np.ndarray
    inv_mu: np.ndarray
    offset: np.ndarray
    sd1: np.ndarray
    skew1: np.ndarray


def _step_law(alphas: np.ndarray, k: int, decay: float, tree=None) -> _StepLaw:
    if k == 0:
        one = np.ones_like(alphas, dtype=float)
        zero = np.zeros_like(one)
        return _StepLaw(one, one, zero, zero, zero)
    pmf = tokens_per_verify_pmf(alphas, k, decay, tree=tree)
    x = np.arange(1, k + 2, dtype=float)
    mu = pmf @ x
    dev = x[None, :] - mu[:, None]
    var = (pmf * dev**2).sum(axis=1)
    m3 = (pmf * dev**3).sum(axis=1)
    exx = var + mu * mu + mu  # E[X(X+1)]
    sd1 = np.sqrt(var / mu**3)
    k3 = 3 * var**2 / mu**5 - m3 / mu**4
    skew1 = np.divide(k3, sd1**3, out=np.zeros_like(sd1), where=sd1 > 1e-12)
    return _StepLaw(mu, 1 / mu, (exx / (2 * mu) - 1) / mu, sd1, skew1)


class _ScalarOps:
    """The few numpy functions `_steps_to_finish` uses, on Python floats (10x cheaper than numpy
    scalars; the engine keys single readmitted sequences this way)."""

    sqrt = staticmethod(math.sqrt)
    floor = staticmethod(math.floor)
    ceil = staticmethod(math.ceil)
    maximum = staticmethod(max)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def clip(x, lo, hi):
        return min(max(x, lo), hi)


def _steps_to_finish(r, law_idx: tuple, z, k: int, xp=np):
    """Verify steps a sequence with r tokens left needs (numpy arrays, or floats with xp=_ScalarOps):
    round(E[N] + z'·sd[N]) with z' the Cornish–Fisher-skewed normal, clamped to [⌈r/(k+1)⌉, ⌈r⌉]."""
    inv_mu, offset, sd1, skew1 = law_idx
    if k == 0:
        return xp.maximum(xp.ceil(r - 1e-9), 1)
    root = xp.sqrt(xp.maximum(r, 0.0))
    skew = xp.where(root > 0, skew1 / xp.maximum(root, 1e-12), 0.0)
    zs = z + skew / 6 * (z * z - 1)
    steps = xp.floor(r * inv_mu + offset + zs * sd1 * root + 0.5)
    return xp.maximum(xp.clip(steps, xp.ceil(r / (k + 1) - 1e-9), xp.ceil(r - 1e-9)), 1)


SCALAR_ADMIT = 16  # up to this many admission candidates, decide admission with plain Python


def _admissible_scalar(queue, limit, groups_l, pblocks_l, saved, group_active, used_blocks, empty, slots, blk,
                       rbar, budget_blocks):
    """The queue-order prefix of at most `limit` responses whose KV blocks fit (the vectorized
    branch in run_fast decides the same for long queues): (indices, opens-a-group flags, prompt
    blocks charged). A response whose group has no active member brings the group's prompt blocks."""
    chosen, opens, pblocks = [], [], []
    opened = set()
    for j in range(limit):
        i = queue[j]
        g = groups_l[i]
        op = g not in group_active and g not in opened
        pb = pblocks_l[i] if op else 0.0
        sv = float(saved[i])
        if not (empty and j == 0) and used_blocks + math.ceil((sv + slots) / blk) + pb > budget_blocks:
            break
        chosen.append(i)
        opens.append(op)
        pblocks.append(pb)
        used_blocks += pb + (sv + slots) / blk + rbar
        if op:
            opened.add(g)
    return (np.asarray(chosen, dtype=np.int64), np.asarray(opens, dtype=bool), np.asarray(pblocks, dtype=float))


def _drain(cfg, idx, finish_b, P, g0, mu, s0, A, B, s, t, k, finish_s, tl):
    """Finish every active response in closed form (no admissions or preemptions can follow and
    k is fixed): sort by finish boundary; between consecutive boundaries the batch is fixed, so
    each segment's time is the affine-step sum, evaluated for all segments at once."""
    b = finish_b[idx]
    order = np.argsort(b, kind="stable")
    idx, b = idx[order], b[order]
    bounds, first, counts = np.unique(b, return_index=True, return_counts=True)
    contrib_a = P[idx] + g0[idx] - mu[idx] * s0[idx]
    drop_a = np.add.reduceat(contrib_a, first)
    drop_b = np.add.reduceat(mu[idx], first)
    before = lambda x: np.concatenate(([0.0], np.cumsum(x)[:-1]))
    a_seg = A - before(drop_a)
    b_seg = B - before(drop_b)
    n_seg = len(idx) - before(counts).astype(np.int64)
    starts = np.concatenate(([s], bounds[:-1]))
    m = (bounds - starts).astype(float)
    row = cfg.table.index(k)
    fixed = cfg.table.fixed_s[row, n_seg]
    per_ctx = cfg.table.per_ctx_s[row, n_seg]
    dt = m * fixed + per_ctx * (m * a_seg + b_seg * m * (2 * starts + m - 1) / 2)
    ends = t + np.cumsum(dt)
    finish_s[idx] = np.repeat(ends, counts)
    if cfg.record_timeline:
        t0 = np.concatenate(([t], ends[:-1]))
        tl.t_s.extend(t0.tolist())
        tl.active.extend(n_seg.tolist())
        tl.tokens_per_s.extend((b_seg * m / dt).tolist())
        tl.k.extend([k] * len(dt))
        tl.kv_tokens.extend([float("nan")] * len(dt))
    stats = (float(m.sum()), float((n_seg * m).sum()), float((b_seg * m).sum()), float((n_seg * dt).sum()))
    return float(ends[-1]), stats


def run_fast(cfg: EngineConfig, work: EngineWork, rng: np.random.Generator) -> EngineResult:
    n = len(work)
    P = work.prompt_tokens.astype(float)
    L = work.response_tokens.astype(float)
    groups = work.group_ids.astype(np.int64)
    blk = cfg.block_tokens
    cap = cfg.capacity_blocks
    rbar = (blk - 1) / (2 * blk)
    prompt_blocks = np.ceil(P / blk)
    P_l, L_l, groups_l, pblocks_l = P.tolist(), L.tolist(), groups.tolist(), prompt_blocks.tolist()
    heappop = heapq.heappop
    z = rng.standard_normal(n)

    g0 = np.zeros(n)          # fluid generated tokens at boundary s0
    s0 = np.zeros(n)
    mu = np.zeros(n)
    saved = np.zeros(n)       # generated tokens kept across a preemption
    version = np.zeros(n, dtype=np.int64)
    finish_b = np.zeros(n, dtype=np.int64)  # finish boundary of each keyed response
    is_active = np.zeros(n, dtype=bool)
    admit_s = np.full(n, np.nan)
    finish_s = np.full(n, np.nan)
    admit_pf = np.zeros(n, dtype=np.int64)   # prefill passes before each admission / finish
    finish_pf = np.zeros(n, dtype=np.int64)
    prefills = PrefillLog()
    tl_pf: list[int] = []
    preempt = np.zeros(n, dtype=np.int64)
    queue = deque(range(n))
    order: list[int] = []     # admission order (lazy deletion)
    heap: list[tuple[int, int, int]] = []
    group_active: dict[int, int] = {}

    A = 0.0    # Σ (P + g0 − μ·s0): total context at boundary s is A + B·s
    B = 0.0    # Σ μ
    SP = 0.0   # Σ P over active
    SL = 0.0   # Σ L over active
    GB = 0.0   # shared prompt blocks of active groups
    n_act = 0
    s = 0
    t = 0.0
    k = 0
    tl = Timeline()
    steps = sd_steps = seq_steps = sd_seq_steps = sd_tokens = draft_passes = 0.0
    weighted_active = 0.0
    laws: dict[int, _StepLaw] = {}
    scalar_laws: dict[int, tuple[list, ...]] = {}

    def law(kk: int) -> _StepLaw:
        if kk not in laws:
            laws[kk] = _step_law(work.alphas.astype(float), kk, cfg.position_decay, cfg.policy.tree_for(kk))
        return laws[kk]

    def scalar_law(kk: int) -> tuple[list, ...]:
        if kk not in scalar_laws:
            lw = law(kk)
            scalar_laws[kk] = tuple(a.tolist() for a in (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1))
        return scalar_laws[kk]

    def key(idx: np.ndarray, kk: int) -> None:
        """Set rate and finish boundary for `idx` (their g0 = progress at boundary s)."""
        nonlocal A, B
        if len(idx) == 1:  # the common single readmission: the same law on Python floats
            i = int(idx[0])
            m, *consts = (a[i] for a in scalar_law(kk))
            steps_needed = int(_steps_to_finish(float(L[i] - g0[i]), consts, float(z[i]), kk, _ScalarOps))
            mu[i] = m
            s0[i] = s
            A += float(P[i] + g0[i] - m * s)
            B += m
            version[i] += 1
            finish_b[i] = s + steps_needed
            heapq.heappush(heap, (s + steps_needed, i, int(version[i])))
            return
        lw = law(kk)
        m = lw.mu[idx]
        steps_needed = _steps_to_finish(L[idx] - g0[idx], (lw.inv_mu[idx], lw.offset[idx], lw.sd1[idx],
                                                           lw.skew1[idx]), z[idx], kk)
        mu[idx] = m
        s0[idx] = s
        A += float((P[idx] + g0[idx] - m * s).sum())
        B += float(m.sum())
        version[idx] += 1
        bounds = (s + steps_needed).astype(np.int64)
        finish_b[idx] = bounds
        entries = list(zip(bounds.tolist(), idx.tolist(), version[idx].tolist()))
        if len(entries) > len(heap):
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)

    def unkey(idx: np.ndarray) -> None:
        """Freeze progress of `idx` at boundary s and take them out of the aggregates."""
        nonlocal A, B
        if len(idx) == 1:
            i = int(idx[0])
            g = max(min(g0[i] + mu[i] * (s - s0[i]), L[i] - 1), 0.0)
            A -= float(P[i] + g0[i] - mu[i] * s0[i])
            B -= float(mu[i])
            g0[i] = g
            s0[i] = s
            mu[i] = 0.0
            return
        g = np.minimum(g0[idx] + mu[idx] * (s - s0[idx]), L[idx] - 1)
        g = np.maximum(g, 0.0)
        A -= float((P[idx] + g0[idx] - mu[idx] * s0[idx]).sum())
        B -= float(mu[idx].sum())
        g0[idx] = g
        s0[idx] = s
        mu[idx] = 0.0

    def generated_total() -> float:
        return A + B * s - SP

    def kv_blocks(slots: int) -> float:
        return GB + (generated_total() + n_act * slots) / blk + n_act * rbar if n_act else 0.0

    def active_idx() -> np.ndarray:
        return np.fromiter((i for i in order if is_active[i]), dtype=np.int64)

    def rekey_all(kk: int) -> None:
        idx = active_idx()
        if len(idx):
            unkey(idx)
            key(idx, kk)

    slots_max = max(cfg.policy.ks) + 1
    fixed_rows = {kk: cfg.table.fixed_s[cfg.table.index(kk)].tolist() for kk in cfg.policy.ks}
    ctx_rows = {kk: cfg.table.per_ctx_s[cfg.table.index(kk)].tolist() for kk in cfg.policy.ks}
    batch_dependent = cfg.policy.kind in ("threshold", "adaptive")  # off/always ignore the batch

    def preempt_newest() -> None:
        nonlocal n_act, SP, SL, GB
        while not is_active[order[-1]]:
            order.pop()
        j = order.pop()
        unkey(np.asarray([j]))
        is_active[j] = False
        version[j] += 1
        n_act -= 1
        SP -= P[j]
        SL -= L[j]
        g = int(groups[j])
        group_active[g] -= 1
        if group_active[g] == 0:
            del group_active[g]
            GB -= prompt_blocks[j]
        saved[j] = math.floor(g0[j])
        preempt[j] += 1
        queue.appendleft(j)

    while queue or n_act:
        # ---- 1. the running batch keeps its k+1 slots per sequence: preempt the newest until it fits
        preempted = False
        while n_act > 1 and GB + (A + B * s - SP + n_act * (k + 1)) / blk + n_act * rbar > cap:
            preempt_newest()
            preempted = True
            k_new = choose_k(cfg.policy, cfg.policy_ctx, n_act, A + B * s)
            if k_new != k:
                k = k_new
                rekey_all(k)
        # ---- 2. admission (none at a boundary that preempted), reserving the policy's largest k
        new, pq, pc = [], [], []
        head = queue[0] if queue else -1
        if head >= 0 and not preempted and n_act < cfg.max_batch and (
                n_act == 0 or kv_blocks(slots_max) + math.ceil((saved[head] + slots_max) / blk)
                + (0 if int(groups[head]) in group_active else prompt_blocks[head]) <= cfg.admission_blocks):
            limit = min(len(queue), cfg.max_batch - n_act)
            cand, opens, pblocks = _admissible_scalar(
                queue, min(limit, SCALAR_ADMIT), groups_l, pblocks_l, saved, group_active, kv_blocks(slots_max),
                n_act == 0, slots_max, blk, rbar, cfg.admission_blocks)
            count = len(cand)
            if count == SCALAR_ADMIT < limit:  # a long admission (start of a rollout): vectorized
                cand = np.fromiter((queue[j] for j in range(limit)), dtype=np.int64)
                gc = groups[cand]
                # prompt blocks for the first candidate of each group that has no active member
                _, first_pos = np.unique(gc, return_index=True)
                opens = np.zeros(len(cand), dtype=bool)
                opens[first_pos] = [int(g) not in group_active for g in gc[first_pos]]
                pblocks = np.where(opens, prompt_blocks[cand], 0.0)
                need = np.ceil((saved[cand] + slots_max) / blk) + pblocks
                inc = pblocks + (saved[cand] + slots_max) / blk + rbar
                before = kv_blocks(slots_max) + np.concatenate(([0.0], np.cumsum(inc)[:-1]))
                fits = before + need <= cfg.admission_blocks
                if n_act == 0:
                    fits[0] = True
                count = len(cand) if fits.all() else int(np.argmin(fits))
            gc = groups[cand]
            if count:
                new_idx = cand[:count]
                for _ in range(count):
                    queue.popleft()
                for g in gc[:count].tolist():
                    group_active[g] = group_active.get(g, 0) + 1
                op = opens[:count]
                sv = saved[new_idx]
                pq = (P[new_idx] + sv)[op].tolist() + sv[~op & (sv > 0)].tolist()
                pc = [0.0] * int(op.sum()) + P[new_idx][~op & (sv > 0)].tolist()
                GB += float(pblocks[:count].sum())
                is_active[new_idx] = True
                order.extend(new_idx.tolist())
                n_act += count
                SP += float(P[new_idx].sum())
                SL += float(L[new_idx].sum())
                g0[new_idx] = sv
                mu[new_idx] = 0.0
                s0[new_idx] = s
                A += float((P[new_idx] + sv).sum())  # in the aggregates at rate 0 until keyed below
                fresh = new_idx[np.isnan(admit_s[new_idx])]
                admit_s[fresh] = t
                admit_pf[fresh] = len(prefills)
                new = new_idx.tolist()
        if pq:
            prefills.add(pq, pc)
        if not n_act:
            break
        # ---- 3. policy: new responses start with the current k; a changed k re-keys everyone
        if new:
            new_idx = np.asarray(new, dtype=np.int64)
            k_new = choose_k(cfg.policy, cfg.policy_ctx, n_act, A + B * s)
            if k_new != k:
                k = k_new
                rekey_all(k)
            else:
                unkey(new_idx)
                key(new_idx, k)
        # ---- the tail: nothing left to admit, k fixed, KV cannot overflow → finish in closed form
        if not queue and cfg.policy.kind in ("off", "always"):
            remaining = max(SL - generated_total(), 0.0) + n_act * (k + 1)
            if kv_blocks(k + 1) + remaining / blk + n_act <= cap:
                idx = active_idx()
                t, stats = _drain(cfg, idx, finish_b, P, g0, mu, s0, A, B, s, t, k, finish_s, tl)
                finish_pf[idx] = len(prefills)
                tl_pf.extend([len(prefills)] * (len(tl.t_s) - len(tl_pf)))
                steps += stats[0]
                seq_steps += stats[1]
                weighted_active += stats[3]
                if k > 0:
                    sd_steps += stats[0]
                    sd_seq_steps += stats[1]
                    sd_tokens += stats[2]
                    draft_passes += k * stats[0]
                is_active[idx] = False
                n_act = 0
                break
        # ---- next event: a finish, or the step at which KV would overflow
        while heap and (not is_active[heap[0][1]] or heap[0][2] != version[heap[0][1]]):
            heapq.heappop(heap)
        b = heap[0][0]
        if B > 0 and n_act > 1:
            x = (cap - GB - n_act * rbar) * blk - n_act * (k + 1)
            s_kv = math.floor((x - (A - SP)) / B) + 1
            if s < s_kv < b:
                b = s_kv
        m = b - s
        fixed = fixed_rows[k][n_act]
        per_ctx = ctx_rows[k][n_act]
        dt = m * fixed + per_ctx * (m * A + B * m * (2 * s + m - 1) / 2)
        if cfg.record_timeline:
            tl.add(t, n_act, B * m / dt, k, kv_blocks(0) * blk)
            tl_pf.append(len(prefills))
        steps += m
        seq_steps += n_act * m
        if k > 0:
            sd_steps += m
            sd_seq_steps += n_act * m
            sd_tokens += B * m
            draft_passes += k * m
        weighted_active += n_act * dt
        t += dt
        s = b
        # ---- finishes at boundary s
        finished = False
        n_pf = len(prefills)
        while heap and heap[0][0] == s:
            _, i, ver = heappop(heap)
            if not is_active[i] or ver != version[i]:
                continue
            m_i = mu[i]
            A -= P_l[i] + g0[i] - m_i * s0[i]
            B -= m_i
            SP -= P_l[i]
            SL -= L_l[i]
            mu[i] = 0.0
            is_active[i] = False
            n_act -= 1
            finish_s[i] = t
            finish_pf[i] = n_pf
            g = groups_l[i]
            group_active[g] -= 1
            if group_active[g] == 0:
                del group_active[g]
                GB -= pblocks_l[i]
            finished = True
        if finished and n_act and batch_dependent:
            k_new = choose_k(cfg.policy, cfg.policy_ctx, n_act, A + B * s)
            if k_new != k:
                k = k_new
                rekey_all(k)
        if not n_act:
            A = B = 0.0  # drop accumulated rounding
    if cfg.record_timeline:
        tl.add(t, 0, 0.0, k, 0.0)
        tl_pf.append(len(prefills))
    offsets = prefills.offsets_s(cfg.prefill_batches_s)
    admit_s += offsets[admit_pf]
    finish_s += offsets[finish_pf]
    prefill_total = float(offsets[-1])
    t += prefill_total
    tl.t_s = (np.asarray(tl.t_s, dtype=float) + offsets[np.asarray(tl_pf, dtype=np.int64)]).tolist()
    res = EngineResult(cfg.name, work.response_ids, admit_s, finish_s, work.response_tokens.astype(np.int64).copy(),
                       preempt, t, steps, sd_steps, seq_steps, sd_seq_steps, sd_tokens, draft_passes, prefill_total,
                       tl.as_arrays(), weighted_active)
    check_result(res, work, cfg)
    return res
