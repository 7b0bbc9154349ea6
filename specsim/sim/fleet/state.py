"""The fleet engine's state: a whole pool of fast engines in arrays (the loop is in sim/fleet/loop.py).

The fleet engine is the fast engine of sim/engine/loop.py (same closed forms, same keying, same
accounting) run for every engine of a pool at once. What is one Python object per engine there is
one row of an array here, held in a few parts that each change together (FleetState composes them):

* `Responses` — per response i (all engines' responses, engine-major, each engine's in queue
  order; of every RL step of the run, or of the steps in flight only: sim/fleet/window.py):
  prompt P, length L, group, acceptance and its steps-to-finish laws, the fluid progress g0 at
  the boundary s0 where it was keyed at rate μ, saved tokens, arrival, accounting;
* `Engines` — per engine e: its boundary s, time t, draft length k, active count n, the
  aggregates A = Σ (P + g0 − μ·s0), B = Σ μ, SP = Σ P, SL = Σ L, GB (prompt blocks of groups
  with an active member), its policy version;
* `Slots` — per engine × slot (max_batch slots): the active response and its finish boundary,
  so the next finish of every engine is one row-minimum, over the slots handed out so far
  (`slots_seen`), and the free-slot stacks;
* `Queues` — each engine's queue (a row of `queue` from `qhead` to `qend`);
* `Groups` — per prompt group: active members, engine, prompt blocks;
* `Counters` — what the step records, the results and the timeline read (steps, tokens, SD
  counts, prefill time, responses left per engine × RL step);
* `Prices` — the cost table's rows for this config, the KV geometry, the prefill table and each
  engine's priced acceptance (read-only in the phases but for switches);
* `EventSchedule` — the scheduled events and each engine's pointer into them (sim/fleet/events.py).

Invariants every phase keeps (checked by the fast-vs-reference tests and `Fleet.check`):
* the total context of engine e at its boundary s is A[e] + B[e]·s;
* slot_fin[e, c] is the finish boundary of the response in slot (e, c), BIG when the slot is free;
* every active response has μ > 0 (keyed) except within an admission, before `key`;
* emitted tokens = Σ over stints of progress; a finished response has emitted exactly L.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvariantError
from specsim.sim.common import EngineConfig
from specsim.sim.fastlaw import StepLaw, steps_to_finish
from specsim.workload.acceptance.laws import expected_tokens_per_verify

INF = float("inf")
BIG = np.iinfo(np.int64).max // 4


def ragged(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments (start, len): (segment of each element, start + offset of each element)."""
    lens = np.asarray(lens, dtype=np.int64)
    seg = np.repeat(np.arange(len(lens)), lens)
    shift = np.asarray(starts, dtype=np.int64) - (np.cumsum(lens) - lens)     # start − first position, per segment
    return seg, np.repeat(shift, lens) + np.arange(int(lens.sum()))


def stable_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") of integer keys: the same permutation (a stable sort's is
    unique). Keys in [0, 2^16) are sorted as uint16, which numpy radix-sorts: 4-6× faster than its
    int64 timsort on the 10^5-10^6 responses of a window (engine and RL step indices are such keys)."""
    keys = np.asarray(keys)
    if not len(keys) or (keys.min() >= 0 and keys.max() < 1 << 16):
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def leading_true(mask: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Per consecutive segment of `mask` (lengths `lens`, all >= 1): how many leading entries are True."""
    bad = np.cumsum(~mask)
    first = np.cumsum(lens) - lens
    base = bad[first] - (~mask[first])
    seg = np.repeat(np.arange(len(lens)), lens)
    return np.add.reduceat((bad - base[seg]) == 0, first).astype(np.int64)


def runs(sorted_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, first index, count) of the runs of equal values of a sorted array (np.unique
    without the sort)."""
    n = len(sorted_vals)
    if not n:
        z = np.zeros(0, dtype=np.int64)
        return sorted_vals, z, z
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(sorted_vals[1:], sorted_vals[:-1], out=new[1:])
    first = np.flatnonzero(new)
    cnt = np.empty(len(first), dtype=np.int64)
    cnt[:-1] = first[1:] - first[:-1]
    cnt[-1] = n - first[-1]
    return sorted_vals[first], first, cnt


def cells(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the True cells of a 2-D mask, row-major (np.nonzero, but through
    flatnonzero: numpy's 2-D nonzero is tens of times slower on a sparse engine × slot mask)."""
    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def flat(a: np.ndarray) -> np.ndarray:
    """The C-contiguous array a as one dimension (a view: what is written through it lands in a).
    Cells (r, c) of an engine × slot array are a 1-D index r·width + c: a gather or scatter by it
    is numpy's 1-D fast path, 2-6× faster than its 2-D pair indexing a[r, c] (the same cells)."""
    if not a.flags.c_contiguous:
        raise ValueError("flat: the array is not C-contiguous (reshape would copy)")
    return a.reshape(-1)


def per_engine(eng: np.ndarray, values, n_engines: int) -> np.ndarray:
    """Σ values per engine (np.bincount over the engine index)."""
    return np.bincount(eng, weights=values, minlength=n_engines)


def fleet_supports(cfg: EngineConfig) -> bool:
    """Every policy without a context curve: a policy's choice is a function of the active count
    or priced per engine from its active count and context (Prices.choose_k). Acceptance
    falling with the context keys each sequence's rate by its own context (a rate heap per
    engine): the v1 engine runs it."""
    return cfg.context is None


#: measured crossover (docs/benchmarks.md): the fleet pays from this many engines whatever the KV
FLEET_MIN_ENGINES = 48
#: ... and from this many when every engine's batch fits its KV budget
FLEET_MIN_ENGINES_AMPLE_KV = 16


def fleet_pays(engines: int, max_batch: int, kv_capacity_tokens: float, prompt: np.ndarray,
               lengths: np.ndarray) -> bool:
    """Is the fleet faster than the per-engine loop for this pool? Its rounds are as many as the
    busiest engine's events and each costs ~0.3-1 ms of numpy whatever the pool's size, where the
    v1 engine pays ~20-40 µs per engine and event: a few engines lose. An engine whose concurrent
    batch (min(max_batch, its responses)) of mean-length sequences overflows its KV budget has
    many more events (KV-bound segments, preemptions) and loses up to more engines. Measured on
    the 8B pool (8,192 trajectories): 8 engines 0.4-0.5×, 16 (KV-bound) 0.8×, 32 ample 4×, 32
    tight 0.75×, 48 tight 1.2×, 64 tight 2×."""
    if engines >= FLEET_MIN_ENGINES:
        return True
    if engines < FLEET_MIN_ENGINES_AMPLE_KV or not len(lengths):
        return False
    concurrent = min(max_batch, len(lengths) / engines)
    return kv_capacity_tokens >= concurrent * float(np.mean(prompt + lengths))


def _engine_groups(eng_of: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """A group number per response such that two responses share one exactly when they share
    their group and their engine (the unit whose prompt blocks are cached together). When every
    group lies on one engine (the dispatcher sends a group whole) the groups themselves, shifted
    to start at 0, are such numbers; otherwise the (engine, group) pairs numbered densely."""
    if not len(groups):
        return groups
    g = groups - groups.min()
    span = int(g.max()) + 1
    if span <= 4 * len(g) + 64:
        owner = np.empty(span, dtype=np.int64)
        owner[g] = eng_of                   # some member's engine per group
        if np.array_equal(owner[g], eng_of):
            return g
    return np.unique(eng_of * span + g, return_inverse=True)[1].reshape(-1)


@dataclass(frozen=True, eq=False)
class FleetWork:
    """The responses a fleet runs, engine-major: engine `eng_of` (sorted), `ids`, prompt group,
    prompt and response tokens, noise z, acceptance, RL step (None: all step 0) and `laws`: k ->
    StepLaw (or its five arrays) over all responses, which the fleet takes over (a weight switch
    writes into the float arrays given to it: a long run's laws are not copied)."""

    eng_of: np.ndarray
    ids: np.ndarray
    groups: np.ndarray
    prompt: np.ndarray
    lengths: np.ndarray
    z: np.ndarray
    alphas: np.ndarray
    laws: dict
    step_ids: np.ndarray | None = None


class Responses:
    """Per response i (all engines' responses, engine-major, each engine's in queue order), the
    columns the caller gives — engine `eng_of`, `ids`, `groups` (numbered per engine: a group's
    cached prompt), prompt P, length L, noise z, acceptance `alphas`, RL step `step_ids`, arrival —
    the steps-to-finish `laws` (k -> five arrays), the prompt blocks, and what the run writes: the
    fluid progress g0 at the boundary s0 where it was keyed at rate μ, tokens kept over a
    preemption (`saved`) and emitted, SD tokens and steps, its batch slot, admission and finish
    times, the policy version it was admitted under and its preemptions. `off`: engine e's
    responses are off[e] .. off[e + 1] − 1. sim/fleet/window.py rebuilds every column over a new
    set of responses (RESPONSE_FIELDS)."""

    __slots__ = ("L", "N", "P", "admit_s", "admit_version", "alphas", "arrival", "emitted", "eng_of", "finish_s", "g0",
                 "groups", "ids", "laws", "mu", "off", "pblocks", "preempt", "s0", "saved", "seq_sd_steps",
                 "seq_sd_tokens", "slot_of", "step_ids", "z")

    def __init__(self, cols: dict[str, np.ndarray], laws: dict, blk: int, E: int):
        """`cols`: eng_of (sorted), ids, groups, P, L, z, alphas, step_ids and arrival, typed;
        `laws`: k -> StepLaw or its five arrays (taken over, not copied: a weight switch writes
        into them)."""
        for name in ("eng_of", "ids", "groups", "P", "L", "z", "alphas", "step_ids", "arrival"):
            setattr(self, name, cols[name])
        N = self.N = len(self.eng_of)
        self.laws = {k: [np.asarray(a, dtype=float) for a in
                         ((lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1) if isinstance(lw, StepLaw) else lw)]
                     for k, lw in laws.items() if k > 0}
        self.pblocks = np.ceil(self.P / blk)
        self.g0 = np.zeros(N)
        self.s0 = np.zeros(N)
        self.mu = np.zeros(N)
        self.saved = np.zeros(N)
        self.emitted = np.zeros(N)
        self.seq_sd_tokens = np.zeros(N)
        self.seq_sd_steps = np.zeros(N)
        self.slot_of = np.full(N, -1, dtype=np.int64)
        self.admit_s = np.full(N, np.nan)
        self.finish_s = np.full(N, np.nan)
        self.admit_version = np.full(N, -1, dtype=np.int64)
        self.preempt = np.zeros(N, dtype=np.int64)
        self.off = np.concatenate(([0], np.cumsum(np.bincount(self.eng_of, minlength=E))))

    def rate_and_need(self, idx: np.ndarray, kk: np.ndarray, left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rate μ, drawn steps-to-finish N) of responses idx keyed at draft lengths kk with
        `left` tokens to go: μ = the law's mean tokens per step (1 for AR) and N =
        fastlaw.steps_to_finish (NaN for a response without laws yet: sim/stream.py keys lazily)."""
        def one_k(kv: int, ii: np.ndarray, lf: np.ndarray) -> tuple:
            if kv == 0:
                return 1.0, np.maximum(np.ceil(lf - 1e-9), 1)
            mu_l, inv_mu, off, sd1, skew1 = self.laws[kv]
            return mu_l[ii], steps_to_finish(lf, (inv_mu[ii], off[ii], sd1[ii], skew1[ii]), self.z[ii], kv)

        if kk.min() == kk.max():                      # one draft length: no per-k selection
            m, need = one_k(int(kk[0]), idx, left)
            return np.broadcast_to(np.asarray(m, dtype=float), len(idx)), need
        need = np.empty(len(idx))
        m = np.empty(len(idx))
        for kv in np.unique(kk).tolist():
            sel = kk == kv
            m[sel], need[sel] = one_k(kv, idx[sel], left[sel])
        return m, need

    def tokens(self) -> np.ndarray:
        """Tokens emitted per response, rounded to the integer within 1e-6 (fluid sums)."""
        ints = np.rint(self.emitted)
        return np.where(np.abs(self.emitted - ints) < 1e-6, ints, self.emitted)


#: the per-response arrays a rewindow carries over (beside the law arrays), and a new response's
#: value of each (None: given by the caller)
RESPONSE_FIELDS = {"eng_of": None, "ids": None, "groups": None, "P": None, "L": None, "z": None, "step_ids": None,
                   "alphas": np.nan, "pblocks": None, "g0": 0.0, "s0": 0.0, "mu": 0.0, "saved": 0.0, "emitted": 0.0,
                   "seq_sd_tokens": 0.0, "seq_sd_steps": 0.0, "slot_of": -1, "admit_s": np.nan, "finish_s": np.nan,
                   "admit_version": -1, "preempt": 0, "arrival": INF}


class Engines:
    """Per engine e: its boundary s (steps run), time t, draft length k, active count n, the
    aggregates A = Σ (P + g0 − μ·s0) and B = Σ μ over its running responses (its context at
    boundary s is A + B·s), SP = Σ P, SL = Σ L, GB (prompt blocks of its groups with an active
    member), and the policy version it runs."""

    __slots__ = ("A", "B", "E", "GB", "SL", "SP", "k", "n", "names", "policy_version", "s", "t")

    def __init__(self, names: list[str]):
        E = self.E = len(names)
        self.names = list(names)
        self.s = np.zeros(E, dtype=np.int64)
        self.t = np.zeros(E)
        self.k = np.zeros(E, dtype=np.int64)
        self.n = np.zeros(E, dtype=np.int64)
        self.A, self.B, self.SP, self.SL, self.GB = (np.zeros(E) for _ in range(5))
        self.policy_version = np.zeros(E, dtype=np.int64)

    def kv_blocks(self, e: np.ndarray, slots, pr: Prices) -> np.ndarray:
        """Fluid KV blocks of engines e with `slots` token slots reserved per sequence (0 if empty):
        GB + (A + B·s − SP + n·slots)/block + n·r̄ (r̄: a sequence's mean partly filled block)."""
        n = self.n[e]
        used = self.GB[e] + (self.A[e] + self.B[e] * self.s[e] - self.SP[e] + n * slots) / pr.blk + n * pr.rbar
        return np.where(n > 0, used, 0.0)

    def zero_empty(self, u: np.ndarray) -> None:
        """Engines of u left without a running response restart their aggregates A, B at exactly 0
        (what sums and differences of their responses' terms left is rounding)."""
        empty = u[self.n[u] == 0]
        self.A[empty] = 0.0
        self.B[empty] = 0.0


class Slots:
    """Per engine × batch slot (max_batch of them): the response in it (`slot_resp`, −1 free),
    its finish boundary (`slot_fin`, BIG free) and admission number (`slot_seq`), so the next
    finish of every engine is one row-minimum; the free slots as a stack per engine (`free`,
    `ftop`); the next admission's number; `slots_seen`, the slots ever handed out.

    A stack that starts 0, 1, 2, ... on top hands out slot c only when slots 0 .. c − 1 are all
    in use, so every live slot lies below the busiest engine's peak batch and the phases read
    columns [0, slots_seen) only (the rest is free: BIG, −1): a pool whose KV holds 20 of 256
    slots reads 20 columns."""

    __slots__ = ("adm_seq", "free", "ftop", "max_batch", "slot_fin", "slot_resp", "slot_seq", "slots_seen")

    def __init__(self, E: int, max_batch: int):
        S = self.max_batch = max_batch
        self.slot_resp = np.full((E, S), -1, dtype=np.int64)
        self.slot_fin = np.full((E, S), BIG, dtype=np.int64)
        self.slot_seq = np.full((E, S), -1, dtype=np.int64)
        self.free = np.tile(np.arange(S - 1, -1, -1, dtype=np.int64), (E, 1))   # a stack per engine
        self.ftop = np.full(E, S, dtype=np.int64)
        self.adm_seq = 0
        self.slots_seen = 0

    def active_of(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(responses, their engines) active on engines e."""
        rows = self.slot_resp[e, :self.slots_seen]
        r, c = cells(rows >= 0)
        return rows[r, c], e[r]

    def pop_slots(self, eng: np.ndarray, counts: np.ndarray, e_set: np.ndarray) -> np.ndarray:
        """Free slots for `counts[j]` new responses of engine e_set[j] (eng: the engine of each)."""
        _, pos = ragged(self.ftop[e_set] - counts, counts)
        slots = flat(self.free)[eng * self.max_batch + pos]
        self.ftop[e_set] -= counts
        if len(slots):
            self.slots_seen = max(self.slots_seen, int(slots.max()) + 1)
        return slots

    def seat(self, cand: np.ndarray, eng: np.ndarray, counts: np.ndarray, e_set: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seat responses `cand` (engine-sorted: `counts[j]` of engine e_set[j], eng the engine of
        each) in free slots, numbered in admission order; returns (their slots, their flat cells)."""
        slots = self.pop_slots(eng, counts, e_set)
        at = eng * self.max_batch + slots
        flat(self.slot_resp)[at] = cand
        flat(self.slot_seq)[at] = self.adm_seq + np.arange(len(cand))
        self.adm_seq += len(cand)
        return slots, at

    def push_slots(self, eng: np.ndarray, slots: np.ndarray, eng_runs: tuple | None = None) -> None:
        """Return slots (eng sorted) to their engines' free stacks; `eng_runs`: runs(eng) if the
        caller has it."""
        u, first, cnt = runs(eng) if eng_runs is None else eng_runs
        rank = np.arange(len(eng)) - np.repeat(first, cnt)
        row = eng * self.max_batch
        flat(self.free)[row + self.ftop[eng] + rank] = slots
        self.ftop[u] += cnt
        self._clear(row + slots)

    def push_slot_each(self, eng: np.ndarray, slots: np.ndarray) -> None:
        """push_slots for one slot of each of distinct engines (the runs are the engines)."""
        row = eng * self.max_batch
        flat(self.free)[row + self.ftop[eng]] = slots
        self.ftop[eng] += 1
        self._clear(row + slots)

    def _clear(self, at: np.ndarray) -> None:
        """Cells `at` (flat) hold no response."""
        flat(self.slot_resp)[at] = -1
        flat(self.slot_fin)[at] = BIG
        flat(self.slot_seq)[at] = -1


class Queues:
    """The queue of engine e is row e of `queue` from position `qhead[e]` to `qend[e]`: initially
    its responses in order; a preempted response is written just before the head (the head only
    ever moved past admitted responses, so there is room), which is the v1 engine's `appendleft`.
    `requeued`: can a group's queued members be apart in a queue? Not while every group is one run
    of the initial order, until a preempted response goes back to its queue's front."""

    __slots__ = ("qend", "qhead", "queue", "requeued")

    def __init__(self, off: np.ndarray, groups: np.ndarray):
        counts = np.diff(off)
        E, N = len(counts), len(groups)
        width = int(counts.max()) if E else 0
        cols = np.arange(max(width, 1))         # eng_of sorted: engine e's responses are off[e] .. off[e + 1] − 1
        self.queue = np.where(cols < counts[:, None], off[:-1, None] + cols, -1)
        self.qhead = np.zeros(E, dtype=np.int64)
        self.qend = counts.astype(np.int64)
        self.requeued = bool(N) and (int(np.count_nonzero(np.diff(groups))) + 1
                                     != int(np.count_nonzero(np.bincount(groups))))

    def put_back(self, e: np.ndarray, j: np.ndarray) -> None:
        """Responses j (one per engine of e) go back to the front of their engines' queues."""
        self.qhead[e] -= 1
        self.requeued = True
        self.queue[e, self.qhead[e]] = j


class Groups:
    """Per prompt group (a response's `groups` number; the unit whose prompt blocks are cached
    together): its active members, its engine and its prompt blocks."""

    __slots__ = ("group_active", "group_eng", "group_pb")

    def __init__(self, G: int, groups: np.ndarray, eng_of: np.ndarray, pblocks: np.ndarray):
        self.group_active = np.zeros(G, dtype=np.int64)
        self.group_eng = np.zeros(G, dtype=np.int64)
        self.group_pb = np.zeros(G)
        self.group_eng[groups] = eng_of
        self.group_pb[groups] = pblocks

    def release(self, g: np.ndarray, GB: np.ndarray, one_per_engine: bool = False) -> None:
        """Members of groups g leave the batch: a group's prompt blocks are freed with its last
        member, taken off its engine's GB (per engine, in place). `one_per_engine`: one member of
        each of distinct engines (so of distinct groups: a group lives on one engine), whose
        counts and GB are updated in place."""
        if one_per_engine:
            self.group_active[g] -= 1
            gone = g[self.group_active[g] == 0]
            GB[self.group_eng[gone]] -= self.group_pb[gone]
            return
        np.subtract.at(self.group_active, g, 1)
        gone = g[self.group_active[g] == 0]
        if len(gone) > 1:          # each group once, ascending: np.unique, or a mark per group (no sort)
            G = len(self.group_active)
            if 64 * len(gone) < G:
                gone = np.unique(gone)
            else:
                mark = np.zeros(G, dtype=bool)
                mark[gone] = True
                gone = np.flatnonzero(mark)
        if len(gone):
            GB -= per_engine(self.group_eng[gone], self.group_pb[gone], len(GB))


class Counters:
    """What the step records and the results read, per engine: steps, sequence-steps and the
    time-weighted batch, their SD parts, SD tokens and draft passes, prefill time, fluid tokens
    (Σ and Σ active × them); the responses left per engine × RL step (`remaining`), those let go
    (sim/fleet/window.py), and the timeline rows when the config records them."""

    __slots__ = ("E", "draft_passes", "let_go", "n_steps", "prefill_total", "record", "remaining", "sd_seq_steps",
                 "sd_steps", "sd_tokens", "seq_steps", "steps", "tl", "token_batch_sum", "token_sum", "weighted_active")

    def __init__(self, E: int, remaining: np.ndarray, record: bool):
        self.E = E
        self.steps, self.sd_steps, self.seq_steps, self.sd_seq_steps = (np.zeros(E) for _ in range(4))
        self.sd_tokens, self.draft_passes, self.weighted_active, self.prefill_total = (np.zeros(E) for _ in range(4))
        self.token_sum, self.token_batch_sum = np.zeros(E), np.zeros(E)   # Σ fluid tokens, Σ active × them
        self.remaining = remaining
        self.n_steps = remaining.shape[1]
        self.let_go = 0               # finished responses let go (sim/fleet/window.py)
        self.record = record
        self.tl: list[tuple] = []     # (engines, t, active, tokens/s, k, kv tokens) per round

    def count_segments(self, seg_e: np.ndarray, m: np.ndarray, n: np.ndarray, dt: np.ndarray, b: np.ndarray,
                       k: np.ndarray) -> None:
        """Add closed-form segments to their engines' counters: segment i ran m steps of n
        sequences at draft length k in dt seconds, its sequences gaining b tokens per step in all
        (fleet/drain, fleet/relay). Steps Σm, sequence-steps Σn·m, the time-weighted batch Σn·dt,
        tokens Σb·m and Σn·b·m, and for SD segments (k > 0) Σm, Σn·m and the draft passes Σk·m:
        a bincount per counter over the segments' engines, each engine's terms summed in segment
        order (one bincount over (engine, counter) cells sums the same terms in the same order, but
        building its 8·segments index costs 4-5× the eight bincounts).
        An SD term of a segment with k = 0 is 0, so an AR-only batch adds nothing to those three."""
        tok = b * m
        nm = n * m
        sd = k > 0
        terms = [(self.steps, m), (self.seq_steps, nm), (self.weighted_active, n * dt), (self.token_sum, tok),
                 (self.token_batch_sum, n * tok)]
        if sd.all():
            terms += [(self.sd_steps, m), (self.sd_seq_steps, nm), (self.draft_passes, k * m)]
        elif sd.any():
            terms += [(self.sd_steps, np.where(sd, m, 0.0)), (self.sd_seq_steps, np.where(sd, nm, 0.0)),
                      (self.draft_passes, np.where(sd, k * m, 0.0))]
        for counter, x in terms:
            counter += np.bincount(seg_e, weights=x, minlength=self.E)

    def count_finished(self, eng: np.ndarray, step_of: np.ndarray) -> None:
        """Responses of RL steps `step_of` (on engines eng) finished: one fewer left of their engine
        and step each (one bincount over engine × step cells: np.subtract.at over the 2-D index is
        ~5× slower)."""
        E, J = self.remaining.shape
        self.remaining -= np.bincount(eng * J + step_of, minlength=E * J).reshape(E, J)

    def finished(self, held: int) -> int:
        """Responses finished so far, of the `held` ones and those let go."""
        return self.let_go + held - int(self.remaining.sum())


class Prices:
    """What a step, a prefill pass and a draft length cost on this config, as the phases read it:
    each draft length's row of the cost table (krow, krow_of), the fixed and per-context step
    costs, the cheapest step of each row, the policy's draft lengths with their rows; the KV
    geometry (block tokens, capacity and admission budget in blocks, a sequence's mean partly
    filled block r̄ = (block − 1)/(2·block), the slots reserved per admitted sequence, max_batch);
    the one-prompt prefill table (up to the longest prompt held); and the acceptance each engine's
    policy prices with, with its predicted tokens per step τ̂ at every k of the policy (priced
    policies: toggle, adaptive)."""

    __slots__ = ("alpha_est", "blk", "budget", "cap", "fixed", "krow", "krow_of", "max_batch", "max_prompt",
                 "min_step_s", "per_ctx", "pol_ks", "pol_rows", "policy", "policy_ctx", "prefill_batches_s", "rbar",
                 "single_prefill", "slots_max", "tau_est", "tau_of")

    def __init__(self, cfg: EngineConfig, E: int, max_prompt: int, alpha_estimates: np.ndarray | None):
        self.policy, self.policy_ctx, self.prefill_batches_s = cfg.policy, cfg.policy_ctx, cfg.prefill_batches_s
        self.blk = cfg.block_tokens
        self.cap = cfg.capacity_blocks
        self.budget = cfg.admission_blocks
        self.rbar = (self.blk - 1) / (2 * self.blk)
        self.slots_max = max(cfg.policy.ks) + 1
        self.max_batch = cfg.max_batch
        self.max_prompt = max_prompt
        self.single_prefill: np.ndarray | None = None     # single_prefill_s, built at the first pass
        self.krow = {k: cfg.table.index(k) for k in set(cfg.policy.ks) | {0} if k in cfg.table.ks}
        self.krow_of = np.zeros(max(self.krow) + 1, dtype=np.int64)     # k -> its row of the cost table
        for k, r in self.krow.items():
            self.krow_of[k] = r
        self.fixed = cfg.table.fixed_s
        # the cheapest step of each draft length's row at any batch (per_ctx·context only adds): no
        # engine reaches a boundary m steps ahead in less than m times it (fleet/drain.drain)
        self.min_step_s = self.fixed[:, 1:].min(axis=1) if self.fixed.shape[1] > 1 else np.zeros(len(self.fixed))
        self.per_ctx = cfg.table.per_ctx_s
        self.pol_ks = np.asarray(cfg.policy.ks, dtype=np.int64)
        self.pol_rows = np.array([cfg.table.index(int(k)) for k in cfg.policy.ks if k in cfg.table.ks], dtype=np.int64)
        self.alpha_est = (np.full(E, float(cfg.policy_ctx.alpha_estimate)) if alpha_estimates is None
                          else np.asarray(alpha_estimates, dtype=float).copy())
        self.tau_of: dict[float, np.ndarray] = {}
        self.tau_est = np.zeros((E, len(self.pol_ks)))
        if cfg.policy.priced:
            self.set_alpha_estimate(np.arange(E), self.alpha_est)

    def set_alpha_estimate(self, e: np.ndarray, alpha: np.ndarray) -> None:
        """Engines e price with acceptance `alpha`: τ̂ at every k of the policy, as choose_k
        (chain τ, mapped through the proposal rate)."""
        ctx = self.policy_ctx
        self.alpha_est[e] = alpha
        for a in np.unique(self.alpha_est[e]).tolist():
            row = self.tau_of.get(a)
            if row is None:
                tau = np.asarray(expected_tokens_per_verify(np.full(len(self.pol_ks), a), self.pol_ks,
                                                            ctx.position_decay), dtype=float)
                if ctx.proposal_rate != 1.0:
                    tau = 1.0 + ctx.proposal_rate * (tau - 1.0)
                row = self.tau_of[a] = tau
            self.tau_est[e[self.alpha_est[e] == a]] = row

    def choose_k(self, en: Engines, e: np.ndarray) -> np.ndarray:
        """The policy's k (policy/base.py) for every engine in e at its active count n and context
        A + B·s; a priced policy is given each engine's rate τ̂ ÷ step time at every k of the policy,
        the step priced from the cost table (fixed + per_ctx·context). 0 for an empty engine."""
        pol = self.policy
        n = en.n[e]
        if not pol.priced:
            return pol.choose(n)
        ctx = en.A[e] + en.B[e] * en.s[e]
        step_s = self.fixed[self.pol_rows[:, None], n] + self.per_ctx[self.pol_rows[:, None], n] * ctx   # (K, e)
        return pol.choose(n, self.tau_est[e].T / step_s)

    def step_coefficients(self, en: Engines, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(c1, c2) of engines e at their boundary: m steps with the batch fixed take m·c1 + c2·m²
        (step j costs fixed + per_ctx·(A + B·(s + j)))."""
        rows, n, B = self.krow_of[en.k[e]], en.n[e], en.B[e]
        per_ctx = self.per_ctx[rows, n]
        return self.fixed[rows, n] + per_ctx * (en.A[e] + B * en.s[e] - B / 2), per_ctx * B / 2

    def prefill_s(self, n: np.ndarray, sq, sq2, sqc, sc) -> np.ndarray:
        """Time of prefill passes of n sequences (Σq new tokens, Σq², Σq·c over their cached
        context c, Σc). Most passes of a busy pool are one fresh prompt (n = 1, nothing cached:
        Σq·c = Σc = 0), whose time depends on its length q alone: those are read from a table of
        the same cost function at every q up to the longest prompt (built at the first pass; the
        cost model is elementwise, so a table entry is the very number a call would return)."""
        single = (n == 1) & (sc == 0) & (sq <= self.max_prompt) & (sq == np.floor(sq))
        if single.all():
            return self.single_prefill_s()[sq.astype(np.int64)]
        return np.asarray(self.prefill_batches_s(n.astype(float), sq, sq2, sqc, sc), dtype=float).reshape(-1)

    def single_prefill_s(self) -> np.ndarray:
        """Time of a prefill pass of one fresh prompt of q tokens, at every q in 0 .. max_prompt."""
        if self.single_prefill is None:
            q = np.arange(self.max_prompt + 1, dtype=float)
            one = np.ones_like(q)
            self.single_prefill = np.asarray(self.prefill_batches_s(one, q, q * q, 0.0 * q, 0.0 * q), dtype=float)
        return self.single_prefill


class EventSchedule:
    """The pool's scheduled events (work released, weights switched: sim/fleet/events.py) in the
    order they were scheduled, each (time, kind, payload, mask of the engines it concerns); per
    engine a pointer to the next event that concerns it (`ev_ptr`) and that event's time
    (`next_ev`), so finding the due events of every engine is one comparison; the gated switch an
    engine waits on (`gate`, −1: none); and how many leading events were let go (`ev_kept`)."""

    __slots__ = ("ev_kept", "ev_ptr", "events", "gate", "next_ev")

    def __init__(self, E: int):
        self.events: list[tuple[float, str, object, np.ndarray]] = []
        self.ev_ptr = np.zeros(E, dtype=np.int64)
        self.next_ev = np.full(E, INF)
        self.gate = np.full(E, -1, dtype=np.int64)
        self.ev_kept = 0      # events before this one no engine needs any more: their payloads are let go

    def push(self, t_s: float, kind: str, payload, mask: np.ndarray) -> None:
        """Schedule an event at t_s for the engines of `mask`."""
        i = len(self.events)
        self.events.append((float(t_s), kind, payload, mask))
        at = self.ev_ptr == i
        self.next_ev[at & mask] = float(t_s)
        self.ev_ptr[at & ~mask] = i + 1

    def step_ptr(self, sub: np.ndarray) -> None:
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

    def forget_consumed(self) -> None:
        """Let go of the payloads (a switch's laws for every response in flight) and masks of the
        events every engine has moved past and no gate waits on: a run of hundreds of steps
        would otherwise hold every switch it ever made."""
        gated = self.gate[self.gate >= 0]
        upto = min(int(self.ev_ptr.min()), int(gated.min()) if len(gated) else len(self.events))
        for i in range(self.ev_kept, upto):
            t_s, kind, _, _ = self.events[i]
            self.events[i] = (t_s, kind, None, None)
        self.ev_kept = max(self.ev_kept, upto)


class FleetState:
    """A pool of engines sharing one EngineConfig (names apart), its state in eight parts:
    `resp` (Responses), `engines` (Engines), `slots` (Slots), `queues` (Queues), `groups`
    (Groups), `counters` (Counters), `prices` (Prices) and `schedule` (EventSchedule). A phase takes
    the parts it reads by argument, or the state and names its parts in its first lines; what
    changes several parts at once (keying, prefill) is a method here."""

    def __init__(self, cfg: EngineConfig, names: list[str], work: FleetWork, *, open_: bool = False,
                 alpha_estimates: np.ndarray | None = None, n_steps: int | None = None,
                 group_count: int | None = None, remaining: np.ndarray | None = None):
        """`work`: the responses, engine-major (FleetWork); `alpha_estimates`: the acceptance each
        engine's policy prices with (toggle, adaptive; default the config's estimate); `open_`:
        responses arrive when released (fleet/events.release), else all at 0. A fleet that takes
        later steps in as it goes (sim/fleet/window.py) is told the run's `n_steps`, `group_count`
        (its groups numbered 0 .. group_count − 1 over the whole run, each on one engine) and
        `remaining` (engine × step: the responses of every step of the run, those not yet taken in
        included)."""
        E = len(names)
        eng_of = np.asarray(work.eng_of, dtype=np.int64)
        N = len(eng_of)
        self.cfg = cfg
        steps = np.zeros(N, dtype=np.int64) if work.step_ids is None else np.asarray(work.step_ids, dtype=np.int64)
        groups = np.asarray(work.groups, dtype=np.int64)
        cols = {"eng_of": eng_of, "ids": np.asarray(work.ids), "P": np.asarray(work.prompt, dtype=float),
                "groups": _engine_groups(eng_of, groups) if group_count is None else groups,
                "L": np.asarray(work.lengths, dtype=float), "z": np.asarray(work.z, dtype=float),
                "alphas": np.asarray(work.alphas, dtype=float).copy(), "step_ids": steps,
                "arrival": np.full(N, INF if open_ else 0.0)}
        self.prices = Prices(cfg, E, int(cols["P"].max()) if N else 0, alpha_estimates)
        rs = self.resp = Responses(cols, work.laws, self.prices.blk, E)
        G = group_count if group_count is not None else (int(rs.groups.max()) + 1 if N else 0)
        self.groups = Groups(G, rs.groups, rs.eng_of, rs.pblocks)
        self.engines = Engines(names)
        self.queues = Queues(rs.off, rs.groups)
        self.slots = Slots(E, cfg.max_batch)
        J = n_steps if n_steps is not None else (int(steps.max()) + 1 if N else 1)
        self.counters = Counters(E, np.bincount(eng_of * J + steps, minlength=E * J).reshape(E, J).astype(np.int64)
                                 if remaining is None else np.array(remaining, dtype=np.int64), cfg.record_timeline)
        self.schedule = EventSchedule(E)
        self.open = open_

    # ---------------------------------------------------------------- keying (resp, engines, slots, counters)
    def key(self, idx: np.ndarray, eng: np.ndarray) -> None:
        """Set rate and finish boundary of responses idx (their g0 = progress at their engine's
        boundary s), at their engine's k: N = the drawn steps-to-finish (fastlaw.steps_to_finish).
        Writes resp (μ, s0), engines (A, B), slots (slot_fin)."""
        if not len(idx):
            return
        rs, en = self.resp, self.engines
        s = en.s[eng]
        m, need = rs.rate_and_need(idx, en.k[eng], rs.L[idx] - rs.g0[idx])
        if np.isnan(need).any():      # keyed before any switch gave it laws (sim/stream.py keys lazily)
            bad = int(idx[np.flatnonzero(np.isnan(need))[0]])
            raise InvariantError(en.names[int(rs.eng_of[bad])], int(en.s[rs.eng_of[bad]]), "laws",
                                 f"response {int(rs.ids[bad])} keyed without steps-to-finish laws")
        rs.mu[idx] = m
        rs.s0[idx] = s
        E = en.E
        en.A += per_engine(eng, rs.P[idx] + rs.g0[idx] - m * s, E)
        en.B += per_engine(eng, m, E)
        fin = s + need.astype(np.int64)
        sl = self.slots
        flat(sl.slot_fin)[eng * sl.max_batch + rs.slot_of[idx]] = fin

    def unkey(self, idx: np.ndarray, eng: np.ndarray, one_per_engine: bool = False) -> None:
        """Freeze the progress of idx at their engine's boundary, count it as emitted (under SD if
        the engine's k > 0), take them out of the aggregates. Writes resp (g0, s0, μ, emitted, SD
        tokens and steps), engines (A, B), counters (sd_tokens). `one_per_engine`: eng holds no
        engine twice, so each engine's sums are its one term, subtracted in place (per_engine's
        bincount adds that term to 0.0: the same numbers, without a pass over every engine)."""
        if not len(idx):
            return
        rs, en = self.resp, self.engines
        s = en.s[eng]
        g0, mu, s0 = rs.g0[idx], rs.mu[idx], rs.s0[idx]
        g = np.maximum(np.minimum(g0 + mu * (s - s0), rs.L[idx] - 1), 0.0)
        delta = g - g0
        rs.emitted[idx] += delta
        sd = en.k[eng] > 0
        if sd.any():
            sd_delta = np.where(sd, delta, 0.0)
            if one_per_engine:
                self.counters.sd_tokens[eng] += sd_delta
            else:
                self.counters.sd_tokens += per_engine(eng, sd_delta, en.E)
            rs.seq_sd_tokens[idx] += sd_delta
            rs.seq_sd_steps[idx] += np.where(sd, s - s0, 0.0)
        if one_per_engine:
            en.A[eng] -= rs.P[idx] + g0 - mu * s0
            en.B[eng] -= mu
        else:
            en.A -= per_engine(eng, rs.P[idx] + g0 - mu * s0, en.E)
            en.B -= per_engine(eng, mu, en.E)
        rs.g0[idx] = g
        rs.s0[idx] = s
        rs.mu[idx] = 0.0

    def set_k(self, e: np.ndarray, k_new: np.ndarray) -> None:
        """Engines e run at k_new: those whose k changes re-key every active response (progress so
        far counted under the old k)."""
        en = self.engines
        ch = k_new != en.k[e]
        if not ch.any():
            return
        e, k_new = e[ch], k_new[ch]
        idx, eng = self.slots.active_of(e)
        self.unkey(idx, eng)
        en.k[e] = k_new
        self.key(idx, eng)

    def rekey(self, e: np.ndarray) -> None:
        """Every active response of engines e keyed afresh from its progress so far (new laws)."""
        idx, eng = self.slots.active_of(e)
        self.unkey(idx, eng)
        self.key(idx, eng)

    def prefill(self, e: np.ndarray, n: np.ndarray, sq, sq2, sqc, sc) -> None:
        """One prefill pass per engine in e (n sequences, Σq, Σq², Σq·c, Σc), priced in one call
        (Prices.prefill_s) and added to the engine's time and its prefill counter."""
        dt = self.prices.prefill_s(n, sq, sq2, sqc, sc)
        self.engines.t[e] += dt
        self.counters.prefill_total[e] += dt
