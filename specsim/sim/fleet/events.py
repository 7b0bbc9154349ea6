"""The fleet engine's scheduled events (phase 1 of sim/fleet/loop.py's round): work released and
weights switched, for the whole pool at once.

Events are kept in the order they are scheduled; each engine holds a pointer to the next event
that concerns it (`ev_ptr`) and that event's time (`next_ev`), so finding the due events of every
engine is one comparison. A switch is applied in flight (the running batch re-keys from its
progress so far) or gated (the engine admits nothing until its batch drains, then switches):
semantics as sim/engine/loop.FastEngine.switch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.sim.fleet.state import INF, FleetState, per_engine, ragged

__all__ = ["FleetEvents", "SwitchPayload"]


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


class FleetEvents(FleetState):
    """A pool's state plus its scheduled events (release, switch) and their application."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[tuple[float, str, object, np.ndarray]] = []
        self.ev_ptr = np.zeros(self.E, dtype=np.int64)
        self.next_ev = np.full(self.E, INF)
        self.gate = np.full(self.E, -1, dtype=np.int64)
        self.ev_kept = 0      # events before this one no engine needs any more: their payloads are let go

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
            ptr = self.ev_ptr[due]        # read once: an engine stepped past p must not join p + 1 here
            for p in np.unique(ptr).tolist():
                sub = due[ptr == p]
                _, kind, payload, _ = self.events[p]
                if kind == "switch":
                    if payload.in_flight:
                        self.apply_switch(sub, payload)
                        self.t[sub] += payload.pause_s
                    else:
                        self.gate[sub] = p
                self._step_ptr(sub)
        g = R[(self.gate[R] >= 0) & (self.n[R] == 0)]
        for p in np.unique(self.gate[g]).tolist():
            sub = g[self.gate[g] == p]
            self.apply_switch(sub, self.events[p][2])
            self.gate[sub] = -1
        self.forget_consumed()

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

    def apply_switch(self, sub: np.ndarray, pl: SwitchPayload) -> None:
        """Engines `sub` run policy pl.version; an engine whose responses' acceptance changed takes
        the new acceptance and laws and re-keys its running batch from its progress so far."""
        self.policy_version[sub] = pl.version
        seg, pos = ragged(pl.toff[sub], pl.toff[sub + 1] - pl.toff[sub])
        if not len(pos):
            return
        idx = pl.idx[pos]
        old = self.alphas[idx]
        new = old != pl.alphas[pos]           # a response without laws yet (NaN: sim/stream.py) gets them
        diff = per_engine(seg, new, len(sub)) > 0
        if not diff.any():
            return
        sel = diff[seg]
        ii, pp = idx[sel], pos[sel]
        self.alphas[ii] = pl.alphas[pp]
        for k, arrs in self.laws.items():
            for dst, src in zip(arrs, pl.laws[k]):
                dst[ii] = src[pp]
        if pl.mean_alpha is not None and self.cfg.policy.priced:
            self.set_alpha_estimate(sub[diff], np.full(int(diff.sum()), float(pl.mean_alpha)))
        # re-key only where a response that had laws changed acceptance: laws given for the first
        # time change no running response (they belong to steps not yet admitted)
        changed = per_engine(seg, new & ~np.isnan(old), len(sub)) > 0
        self.rekey(sub[changed])
