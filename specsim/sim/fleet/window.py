"""The window of responses a fleet holds: a long run's finished steps let go, later ones taken in.

A fleet built over every RL step of a run holds all their responses from its start (about 270
bytes each: 5.4 GB for 300 steps of 65,536 trajectories), and arrays that large are page faults
the allocator cannot reuse. A caller that reads only each step's records once it has finished
(sim/stream.py with `window=True`) lets the fleet hold the steps in flight instead: `rewindow`
drops the responses of finished steps it is done with and appends the next steps' responses,
rebuilding every per-response array over the new set.

Invariant: each engine keeps its responses in their order and the new ones come after them, so
every sum over an engine's responses (bincounts, reduceats, cumulative sums, the drain's stable
sort) runs over the same values in the same order as in a fleet that held them all from the
start: the results are bit-identical (tests/sim/test_fleet.py). The counts of responses left
per engine and step (`remaining`) and the group arrays cover the whole run from the start.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from specsim.errors import InvariantError
from specsim.sim.fleet.state import RESPONSE_FIELDS, EventSchedule, FleetState, Queues, Responses, ragged, stable_order

__all__ = ["rewindow"]


def rewindow(fl: FleetState, keep: np.ndarray, new: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Let go of the responses of `fl` outside `keep` (finished ones of RL steps the caller has
    read) and take in `new` ones (eng_of sorted, ids, groups, P, L, z, step_ids: queued, not yet
    released, without laws; `remaining` counts them already). The queues keep their order, the
    running batches their slots, and the switches some engine has still to apply follow their
    responses. Returns each old index's new one (−1: let go) and the new responses' indices.
    Rebuilds resp and queues; renumbers slots and the schedule's payloads; writes groups (the new
    ones), prices (the prefill table's longest prompt) and counters (those let go)."""
    rs, en, pr = fl.resp, fl.engines, fl.prices
    gone = ~keep & np.isnan(rs.finish_s)
    if gone.any():
        raise InvariantError(en.names[int(rs.eng_of[np.flatnonzero(gone)[0]])], 0, "window",
                             "a response that has not finished would be let go")
    kept = np.flatnonzero(keep)
    n_old, n_new = len(kept), len(new["eng_of"])
    order = stable_order(np.concatenate([rs.eng_of[kept], new["eng_of"]]))
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    old_to_new = np.full(rs.N, -1, dtype=np.int64)
    old_to_new[kept] = where[:n_old]
    new_at = where[n_old:]
    new = dict(new, pblocks=np.ceil(np.asarray(new["P"], dtype=float) / pr.blk))
    for name, fill in RESPONSE_FIELDS.items():
        old = getattr(rs, name)
        add = new[name] if fill is None else np.full(n_new, fill, dtype=old.dtype)
        setattr(rs, name, np.concatenate([old[kept], np.asarray(add, dtype=old.dtype)])[order])
    for arrs in rs.laws.values():
        for i, a in enumerate(arrs):
            arrs[i] = np.concatenate([a[kept], np.full(n_new, np.nan)])[order]
    sl = fl.slots
    live = sl.slot_resp >= 0
    sl.slot_resp[live] = old_to_new[sl.slot_resp[live]]
    _requeue(fl.queues, rs, old_to_new, new_at, pr.max_batch)
    g_new = np.asarray(new["groups"], dtype=np.int64)
    fl.groups.group_eng[g_new] = new["eng_of"]
    fl.groups.group_pb[g_new] = new["pblocks"]
    rs.N = len(order)
    rs.off = np.concatenate(([0], np.cumsum(np.bincount(rs.eng_of, minlength=en.E))))
    if n_new and int(np.max(new["P"])) > pr.max_prompt:
        pr.max_prompt, pr.single_prefill = int(np.max(new["P"])), None
    fl.counters.let_go += len(keep) - n_old
    _follow_switches(fl.schedule, rs, old_to_new, en.E)
    return old_to_new, new_at


def _requeue(qs: Queues, rs: Responses, old_to_new: np.ndarray, new_at: np.ndarray, max_batch: int) -> None:
    """Each engine's queue: its queued responses in their order, then its new ones, after
    max_batch free cells (a preemption writes just before the head: at most the batch it had)."""
    E = len(qs.qhead)
    q_eng, q_pos = ragged(qs.qhead, qs.qend - qs.qhead)
    eng = np.concatenate([q_eng, rs.eng_of[new_at]])
    idx = np.concatenate([old_to_new[qs.queue[q_eng, q_pos]], new_at])
    by = stable_order(eng)
    eng, idx = eng[by], idx[by]
    cnt = np.bincount(eng, minlength=E)
    head = max_batch
    qs.queue = np.full((E, head + max(int(cnt.max()) if len(cnt) else 0, 1)), -1, dtype=np.int64)
    qs.queue[eng, head + np.arange(len(eng)) - (np.cumsum(cnt) - cnt)[eng]] = idx
    qs.qhead = np.full(E, head, dtype=np.int64)
    qs.qend = head + cnt


def _follow_switches(sc: EventSchedule, rs: Responses, old_to_new: np.ndarray, E: int) -> None:
    """The switches some engine has still to apply (fleet/events: not yet let go) name their
    responses by index: move them to the new indices (a response let go has finished, and no
    switch concerns it)."""
    for i in range(sc.ev_kept, len(sc.events)):
        t_s, kind, pl, mask = sc.events[i]
        if pl is None:
            continue
        moved = old_to_new[pl.idx]
        stay = moved >= 0
        idx = moved[stay]
        toff = np.concatenate(([0], np.cumsum(np.bincount(rs.eng_of[idx], minlength=E))))
        laws = {k: [a[stay] for a in arrs] for k, arrs in pl.laws.items()}
        sc.events[i] = (t_s, kind, replace(pl, idx=idx, toff=toff, alphas=pl.alphas[stay], laws=laws), mask)
