"""The fast engine's closed forms: the steps-to-finish law of a sequence under SD (renewal
theory, see sim/engine/loop.py), the queue-order admission prefix, and the closed-form drain of the
tail. Pure functions over numpy arrays (or Python floats via `ScalarOps`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim.workload.acceptance.drafter import tokens_per_verify_pmf


@dataclass(frozen=True)
class StepLaw:
    """Per-sequence constants of the steps-to-finish law at one draft length k (arrays over the
    engine's sequences): with r tokens left, N ≈ r·inv_mu + offset ± sqrt(r)·sd1, skewness
    skew1/sqrt(r) (renewal theory, see the module docstring); mu is the fluid rate."""

    mu: np.ndarray
    inv_mu: np.ndarray
    offset: np.ndarray
    sd1: np.ndarray
    skew1: np.ndarray


def step_law(alphas: np.ndarray, k: int, decay: float, tree=None, proposal_rate: float = 1.0) -> StepLaw:
    """The law of the tokens X a sequence emits per step at draft length k. With proposal rate
    p < 1 a request-step carries a draft with probability p (else X = 1): the pmf is the mixture
    p·pmf_draft + (1 − p)·δ_1, so E[X] = 1 + p·(τ − 1) (τ the per-sequence conditional mean)."""
    if k == 0:
        one = np.ones_like(alphas, dtype=float)
        zero = np.zeros_like(one)
        return StepLaw(one, one, zero, zero, zero)
    pmf = tokens_per_verify_pmf(alphas, k, decay, tree=tree)
    if proposal_rate != 1.0:
        pmf = proposal_rate * pmf
        pmf[..., 0] += 1.0 - proposal_rate
    x = np.arange(1, k + 2, dtype=float)
    mu = pmf @ x
    dev = x[None, :] - mu[:, None]
    var = (pmf * dev**2).sum(axis=1)
    m3 = (pmf * dev**3).sum(axis=1)
    exx = var + mu * mu + mu  # E[X(X+1)]
    sd1 = np.sqrt(var / mu**3)
    k3 = 3 * var**2 / mu**5 - m3 / mu**4
    skew1 = np.divide(k3, sd1**3, out=np.zeros_like(sd1), where=sd1 > 1e-12)
    return StepLaw(mu, 1 / mu, (exx / (2 * mu) - 1) / mu, sd1, skew1)


class ScalarOps:
    """The few numpy functions `steps_to_finish` uses, on Python floats (10x cheaper than numpy
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


def steps_to_finish(r, law_idx: tuple, z, k: int, xp=np):
    """Verify steps a sequence with r tokens left needs (numpy arrays, or floats with xp=ScalarOps):
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


def admissible_scalar(queue, limit, groups_l, pblocks_l, saved, group_active, used_blocks, empty, slots, blk,
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


@dataclass(frozen=True)
class DrainCounts:
    """What a closed-form drain ran: engine steps, request-steps (Σ active × steps), fluid tokens
    (Σ B·m), Σ active × time and Σ active × fluid tokens (the token-weighted batch's numerator)."""

    steps: float
    seq_steps: float
    tokens: float
    weighted_active: float
    token_batch: float


def drain(cfg, idx, finish_b, P, g0, mu, s0, A, B, s, t, k, finish_s, tl) -> tuple[float, DrainCounts]:
    """Finish every active response in closed form (no admissions or preemptions can follow and
    k is fixed): sort by finish boundary; between consecutive boundaries the batch is fixed, so
    each segment's time is the affine-step sum, evaluated for all segments at once. Returns the
    engine's time at the end and the counts of what ran."""
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
    tokens = b_seg * m
    return float(ends[-1]), DrainCounts(float(m.sum()), float((n_seg * m).sum()), float(tokens.sum()),
                                        float((n_seg * dt).sum()), float((n_seg * tokens).sum()))
