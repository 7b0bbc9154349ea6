"""The fleet engine's scheduled events (phase 1 of sim/fleet/loop.py's round): work released and
weights switched, for the whole pool at once.

Events are kept in the order they are scheduled (the state's EventSchedule part); each engine holds a
pointer to the next event that concerns it (`ev_ptr`) and that event's time (`next_ev`), so
finding the due events of every engine is one comparison. A switch is applied in flight (the
running batch re-keys from its progress so far) or gated (the engine admits nothing until its
batch drains, then switches): semantics as sim/engine/loop.FastEngine.switch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.fleet.state import FleetState, per_engine, ragged

__all__ = ["SwitchPayload", "apply_events", "apply_switch", "release", "switch"]


@dataclass
class SwitchPayload:
    """A weight switch for the whole pool: responses `idx` (engine-sorted; engine e's are
    idx[toff[e]:toff[e+1]]) get acceptance `alphas` and steps-to-finish laws `laws` (k -> the
    StepLaw's five arrays, aligned with idx); `mean_alpha`: the acceptance the engines' policies
    price with from then on (toggle, adaptive); `pause_s`: an in-flight switch stops each engine
    for this long at its first step boundary from the switch on (the engine loads the new weights:
    sim/stream.StreamCluster.switch_all)."""

    version: int
    idx: np.ndarray
    toff: np.ndarray
    alphas: np.ndarray
    laws: dict
    in_flight: bool
    mean_alpha: float | None = None
    pause_s: float = 0.0


def release(st: FleetState, idx: np.ndarray, t_s: float, engines: np.ndarray) -> None:
    """Responses idx (queued) become admissible at t_s; `engines`: those that hold any of them.
    Writes resp (arrival) and the schedule."""
    st.resp.arrival[idx] = t_s
    mask = np.zeros(st.engines.E, dtype=bool)
    mask[engines] = True
    st.schedule.push(t_s, "release", None, mask)


def switch(st: FleetState, t_s: float, payload: SwitchPayload) -> None:
    """Schedule a weight switch for every engine at t_s."""
    st.schedule.push(t_s, "switch", payload, np.ones(st.engines.E, dtype=bool))


def apply_events(st: FleetState, R: np.ndarray) -> None:
    """Phase 1 for engines R: events due at each engine's time, in order; then gated switches of
    drained engines. Reads and writes the schedule; writes engines (t: a switch's pause) and,
    through apply_switch, what a switch changes."""
    sc, en = st.schedule, st.engines
    while True:
        due = R[sc.next_ev[R] <= en.t[R]]
        if not len(due):
            break
        ptr = sc.ev_ptr[due]        # read once: an engine stepped past p must not join p + 1 here
        for p in np.unique(ptr).tolist():
            sub = due[ptr == p]
            _, kind, payload, _ = sc.events[p]
            if kind == "switch":
                if payload.in_flight:
                    apply_switch(st, sub, payload)
                    en.t[sub] += payload.pause_s
                else:
                    sc.gate[sub] = p
            sc.step_ptr(sub)
    g = R[(sc.gate[R] >= 0) & (en.n[R] == 0)]
    for p in np.unique(sc.gate[g]).tolist():
        sub = g[sc.gate[g] == p]
        apply_switch(st, sub, sc.events[p][2])
        sc.gate[sub] = -1
    sc.forget_consumed()


def apply_switch(st: FleetState, sub: np.ndarray, pl: SwitchPayload) -> None:
    """Engines `sub` run policy pl.version; an engine whose responses' acceptance changed takes
    the new acceptance and laws and re-keys its running batch from its progress so far. Writes
    engines (policy version), resp (alphas, laws), prices (the acceptance priced with) and,
    re-keying, what FleetState.rekey writes."""
    rs = st.resp
    st.engines.policy_version[sub] = pl.version
    seg, pos = ragged(pl.toff[sub], pl.toff[sub + 1] - pl.toff[sub])
    if not len(pos):
        return
    idx = pl.idx[pos]
    old = rs.alphas[idx]
    new = old != pl.alphas[pos]           # a response without laws yet (NaN: sim/stream.py) gets them
    diff = per_engine(seg, new, len(sub)) > 0
    if not diff.any():
        return
    sel = diff[seg]
    ii, pp = idx[sel], pos[sel]
    rs.alphas[ii] = pl.alphas[pp]
    for k, arrs in rs.laws.items():
        for dst, src in zip(arrs, pl.laws[k]):
            dst[ii] = src[pp]
    if pl.mean_alpha is not None and st.prices.policy.priced:
        st.prices.set_alpha_estimate(sub[diff], np.full(int(diff.sum()), float(pl.mean_alpha)))
    # re-key only where a response that had laws changed acceptance: laws given for the first
    # time change no running response (they belong to steps not yet admitted)
    changed = per_engine(seg, new & ~np.isnan(old), len(sub)) > 0
    st.rekey(sub[changed])
