"""Continuous generation across RL steps: the rollout pool as asynchronous RL systems run it.

NeMo-RL's async GRPO, AReaL and verl's fully-async mode never stop the engines at a step
boundary: the groups of step j are admitted as soon as policy version j − L exists (L = policy
lag: `max_trajectory_age_steps`, `max_head_offpolicyness`), so the next steps' work fills the
engines while the long tail of the current step drains. `StreamCluster` holds one resumable
engine per data-parallel replica (sim/engine/loop.FastEngine or sim/reference.ReferenceEngine) with
every step's responses queued in step order, each step's dispatched to engines exactly as a
barrier phase would (`cluster.dispatch`, the same common random numbers).

* `release_step(j, t)`: step j's groups become admissible at t (the pipeline calls it when version
  j − L lands).
* `switch_all(t, version, mean_alpha, in_flight)`: the engines run `version` from t. The drafter's
  acceptance follows the version each engine runs (its staleness is the gap to the drafter's
  training version). In flight (partial rollouts): running sequences continue on the new weights
  and acceptance at once. Otherwise an engine stops admitting, drains its running batch, then
  swaps (verl fully-async without partial rollouts, NeMo-RL's refit after pending generations).
* `advance(j, horizon)`: run the engines until step j has finished everywhere (its finish time
  F_j) without passing `horizon`, the next time the pipeline's clock may schedule a release or a
  switch; returns F_j, or None when the horizon came first.

A limit on prompt groups in flight (`pipeline.max_groups_in_flight`, NeMo-RL's async collector:
`num_prompts_per_step × max_trajectory_age_steps` groups, `algorithms/async_utils.py`
`_inflight_sema`) turns a release into a queue: `release_step` hands step j's groups, in order, to a
FIFO of waiting groups, and a waiting group starts (becomes admissible on its engine) when a place
is free — at the moment the last response of an earlier group finishes. The engines then run in
slices (`GROUP_SLICE_SHARE` of a group's mean time) while groups wait: a group is released at the
exact finish that freed its place, and admitted at its engine's first step boundary from then on,
or, where its engine had already run past that finish within the slice (busy, or idle and moved on
to the slice's end), at the engine's time: late by less than one slice (the slice length's effect
is measured in docs/async-rl.md).

With L = 0 every step's work is released only after the previous step finished and the trainer
published, the engines are empty at each release, and the run equals a barrier-per-step pipeline
(tested). Each step's engine noise (fast engine: one normal per response) is drawn from the same
per-step stream as a barrier phase.

A caller that reads only the step records (`window=True`: run_pipeline(engine_results=False), as
`specsim run`, `plan` and `project` do) gets a fleet that holds the steps in flight and
`WINDOW_STEPS` more, not the whole run: a 300-step run at 65,536 trajectories per step holds
about 0.8 GB instead of 5 GB, and its step records are bit-identical (tested).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from specsim.sim import cluster
from specsim.sim.cluster import StepDraw, dispatch, engine_config, sequence_alpha_fn
from specsim.sim.common import EngineResult, EngineWork, conditional_tau, last_finishers_tau
from specsim.sim.engine.loop import FastEngine
from specsim.sim.fastlaw import StepLaw, step_law
from specsim.sim.fleet.loop import Fleet, SwitchPayload
from specsim.sim.fleet.state import FleetWork, ragged, stable_order
from specsim.sim.fleet.window import rewindow
from specsim.sim.progress import Ticker
from specsim.sim.reference import ReferenceEngine
from specsim.sim.select import pick_engine
from specsim.world.specs import World

INF = float("inf")

#: how far the engines run between two looks at which groups finished while groups wait for a
#: place (`pipeline.max_groups_in_flight`), as a share of the mean time a group has taken from its
#: start to its last finish (before any group finished: of the time the oldest group in flight has
#: run, at least GROUP_SLICE_MIN_S): a waiting group starts at the finish that frees its place, on
#: an engine that may have stepped up to one slice past it. Measured on the NeMo-RL rows
#: (docs/async-rl.md, "Groups in flight"): shares of 0.25-1 % move their steps by at most 0.3 %
GROUP_SLICE_SHARE = 0.005
GROUP_SLICE_MIN_S = 0.01


class StreamCluster:
    def __init__(self, world: World, draws: list[StepDraw], mean_alpha0: float, *, engine: str = "fast",
                 record_timeline: bool = False, window: bool = False):
        """`window`: a fleet may let finished steps go (`_build_fleet`); then `results` has
        nothing to give (the caller reads the step records only)."""
        self.world, self.draws = world, draws
        E = world.engines
        self.step_offset = np.cumsum([0] + [d.n_responses for d in draws])
        base = engine_config(world, "engine", mean_alpha0, record_timeline=record_timeline)
        alpha_of = sequence_alpha_fn(mean_alpha0, world.acceptance.concentration)
        self.finish_of_step: dict[int, float] = {}
        self.current_step = 0     # steps before it have finished everywhere
        self.max_released = -1
        self.fleet = None
        self.mean_alpha0 = mean_alpha0
        self.group_engine = [self._memo(d, "dispatch", lambda d=d: (dispatch(world, d),))[0]
                             for d in draws]                 # per step: each group's engine
        self.group_limit = world.pipeline.max_groups_in_flight
        self.waiting: deque[tuple[int, int, float]] = deque()   # (step, group, released at) without a place
        self.flying: list[tuple[int, int, float]] = []          # (step, group, started at), not seen finished
        self.group_time_s = [0.0, 0]                            # Σ start-to-finish of finished groups, their count
        self.clock = 0.0                                        # the engines have run up to here
        self.engine_row: dict[int, int] = {}                    # world engine -> self.engines index
        d0 = draws[0]
        choice = pick_engine(engine, base, E, world.rollout.max_batch, world.kv_capacity_tokens,
                             np.repeat(d0.prompt_tokens, d0.response_tokens.shape[1]), d0.response_tokens.reshape(-1))
        self.fast, self.v1_inputs = choice.fast, choice.v1_inputs
        if choice.fleet:
            self._build_fleet(base, window)
            return
        per_engine: list[list[dict]] = [[] for _ in range(E)]
        for j, d in enumerate(draws):
            order, eng_sorted, group_of = self._step_order(j)
            starts = np.searchsorted(eng_sorted, np.arange(E + 1))
            lengths = d.response_tokens.reshape(-1)
            for e in range(E):
                idx = order[starts[e]:starts[e + 1]]
                if len(idx):
                    z = np.random.default_rng([d.engine_seed, e]).standard_normal(len(idx))
                    per_engine[e].append({"ids": self.step_offset[j] + idx, "groups": j * len(d.prompt_tokens)
                                          + group_of[idx], "prompt": d.prompt_tokens[group_of[idx]],
                                          "lengths": lengths[idx], "u": d.alpha_quantiles[idx],
                                          "step": np.full(len(idx), j), "z": z})
        self.engines, self.u, self.ranges = [], [], []
        for e in range(E):
            parts = per_engine[e]
            if not parts:
                continue
            cat = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
            work = EngineWork(cat["ids"], cat["groups"], cat["prompt"], cat["lengths"], alpha_of(cat["u"]),
                              cat["step"])
            cfg = replace(base, name=f"engine{e}")
            if self.fast:
                eng = FastEngine(cfg, work, cat["z"], open_=True)
            else:
                eng = ReferenceEngine(cfg, work, np.random.default_rng([draws[0].engine_seed, e, 0xA5]), open_=True)
            bounds = np.searchsorted(cat["step"], np.arange(len(draws) + 1))
            self.engine_row[e] = len(self.engines)
            self.engines.append(eng)
            self.u.append(cat["u"])
            self.ranges.append(bounds)

    def _memo(self, draw: StepDraw, what: str, make) -> tuple[np.ndarray, ...]:
        """`make()`'s arrays, a function of the draw and of how the world dispatches it (its
        engine count and dispatch rule) only: kept with a cached draw (cluster.step_memo), so the
        runs of one process that share a draw and a pool compute them once; read-only."""
        memo = cluster.step_memo(draw)
        key = (what, self.world.engines, self.world.rollout.dispatch)
        out = memo.get(key)
        if out is None:
            out = memo[key] = make()
            for a in out:
                a.flags.writeable = False
        return out

    def _step_order(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step j's responses sorted by engine, queue order kept (order), their engines, and the
        group of every response. The sort is kept with the draw (`_memo`: every run of the process
        on the same pool sorts the step once), order as int32 and the engines as uint16 where they
        fit (6 bytes a response): the same values as the sort's int64."""
        d = self.draws[j]
        G = d.response_tokens.shape[1]
        group_of = np.repeat(np.arange(d.response_tokens.shape[0]), G)

        def make():
            eng_of = self.group_engine[j][group_of]
            order = stable_order(eng_of)
            small = np.uint16 if self.world.engines <= 1 << 16 else np.int64
            return (order.astype(np.int32) if len(order) < 1 << 31 else order), eng_of[order].astype(small)

        order, eng_sorted = self._memo(d, "order", make)
        return order, eng_sorted, group_of

    def _step_noise(self, j: int, order: np.ndarray, es: np.ndarray) -> np.ndarray:
        """cluster.step_noise of step j (kept with its draw, `_memo`)."""
        d = self.draws[j]
        what = "noise_v1" if self.v1_inputs else "noise"
        return self._memo(d, what, lambda: (cluster.step_noise(d, order, es, per_engine=self.v1_inputs),))[0]

    def _build_fleet(self, base, window: bool) -> None:
        """The pool as one Fleet (sim/fleet/loop.py): the same per-engine queues (each engine's responses
        in step order) as the per-engine engines, engine-major in the fleet's arrays; each step's
        noise from the step's stream and the laws tabulated per mean acceptance (cluster.step_noise,
        cluster.QuantileLaws; engine "fleet_v1_inputs": fast_v1's per-engine noise and exact laws).
        `window`: the fleet holds the steps from the one being waited for up to WINDOW_STEPS past
        the newest released, taking later ones in and letting finished ones go as the run goes
        (`_ensure_window`): a run of hundreds of steps holds a few steps' responses."""
        # the engines with work (the fleet's rows) and each step's: a group goes whole to one engine
        self.used = np.unique(np.concatenate(self.group_engine))
        self.step_engines = [np.searchsorted(self.used, np.unique(ge)) for ge in self.group_engine]
        n_steps = len(self.draws)
        lag = self.world.pipeline.policy_lag
        hi = min(n_steps, lag + 1 + self.WINDOW_STEPS) if window else n_steps
        self.windowed = window and hi < n_steps
        cols = self._columns(list(range(hi)))
        self.u_all, self.gi_all, self.gw_all = cols.pop("u"), cols.pop("gi"), cols.pop("gw")
        # laws at version 0 only for the steps released under it (0 .. L): every later step is
        # released after a switch, which gives its responses their laws (_switch_fleet); the
        # rest stay NaN, and keying one raises (FleetState.key)
        at_v0 = cols["step_ids"] <= lag
        alphas0, laws0 = self._laws(self.mean_alpha0, at_v0)
        alphas = np.full(len(at_v0), np.nan)
        alphas[at_v0] = alphas0
        laws = {}
        for k, arrs in laws0.items():
            laws[k] = []
            for a in arrs:
                full = np.full(len(at_v0), np.nan)
                full[at_v0] = a
                laws[k].append(full)
        groups = max(j * len(d.prompt_tokens) + len(d.prompt_tokens) for j, d in enumerate(self.draws))
        E = len(self.used)
        remaining = np.zeros((E, n_steps), dtype=np.int64)       # every step's responses per engine
        for j, (d, ge) in enumerate(zip(self.draws, self.group_engine)):
            remaining[:, j] = np.bincount(np.searchsorted(self.used, ge), minlength=E) * d.response_tokens.shape[1]
        work = FleetWork(cols["eng_of"], cols["ids"], cols["groups"], cols["P"], cols["L"], cols["z"], alphas, laws,
                         cols["step_ids"])
        self.fleet = Fleet(base, [f"engine{e}" for e in self.used.tolist()], work, open_=True, n_steps=n_steps,
                           group_count=groups, remaining=remaining)
        self.window = (0, hi)
        self._index_window()

    #: RL steps a windowed fleet takes in at a time past the newest it must hold: each take-in
    #: rebuilds the fleet's arrays over the steps it holds (sim/fleet/window.py), so fewer
    #: take-ins and smaller arrays pull against each other; 8 keeps a 65,536-trajectory step's
    #: window under 32 MB per array, where the allocator reuses freed memory
    WINDOW_STEPS = 8

    def _columns(self, js: list[int]) -> dict[str, np.ndarray]:
        """The per-response columns of consecutive steps js, engine-major (each engine's in step
        order): built column by column, so a long run holds one temporary column at a time. A
        column is its steps' arrays in draw order, concatenated and read at `src` (each
        engine-major position's index in that concatenation: the steps' engine sorts composed
        with the engine-major order), one gather per column; the noise, kept aligned with each
        step's sort, is read at the engine-major order itself; the engines, the response ids
        (src offset by the first step's) and the step indices (each engine's in step order) need
        no gather."""
        draws = self.draws
        steps = [self._step_order(j) for j in js]
        es = np.concatenate([st[1] for st in steps])
        used = self.used
        eng_cat = (es.astype(np.int64) if len(used) and int(used[-1]) == len(used) - 1    # every engine has work
                   else np.searchsorted(used, es))
        by_engine = stable_order(eng_cat)        # engine-major, step order kept
        sizes = [draws[j].n_responses for j in js]
        lo = np.cumsum([0] + sizes)
        # intp: an index of another integer type is converted on every gather
        src = np.concatenate([st[0].astype(np.intp) + lo[i] for i, st in enumerate(steps)])[by_engine]
        rows, J = len(used), len(js)
        per_row_step = np.bincount(eng_cat * J + np.repeat(np.arange(J), sizes), minlength=rows * J)

        def column(natural) -> np.ndarray:
            return np.concatenate([natural(j, draws[j]) for j in js])[src]

        def reps(d):
            return d.response_tokens.shape[1]

        return {"eng_of": np.repeat(np.arange(rows), per_row_step.reshape(rows, J).sum(axis=1)),
                "ids": src + self.step_offset[js[0]],
                "groups": column(lambda j, d: j * len(d.prompt_tokens) + np.repeat(np.arange(len(d.prompt_tokens)),
                                                                                   reps(d))),
                "P": column(lambda j, d: np.repeat(d.prompt_tokens, reps(d))),
                "L": column(lambda j, d: d.response_tokens.reshape(-1)),
                "step_ids": np.repeat(np.tile(np.asarray(js, dtype=np.int64), rows), per_row_step),
                "z": np.concatenate([self._step_noise(j, *steps[i][:2]) for i, j in enumerate(js)])[by_engine],
                "u": column(lambda j, d: d.alpha_quantiles),
                "gi": column(lambda j, d: self._grid(j)[0]),
                "gw": column(lambda j, d: self._grid(j)[1])}

    def _grid(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Where step j's acceptance quantiles fall on the laws' grid (cluster.grid_position: cell,
        weight), kept with its draw (`_memo`): a response's quantile never changes, so every
        weight switch of every run that draws the step reads its laws at the same positions."""
        d = self.draws[j]

        def make():       # a cell index fits in int32 (4,096 cells): 4 bytes a response less to keep
            at = cluster.grid_position(d.alpha_quantiles)
            return at.i.astype(np.int32), at.w

        return self._memo(d, "grid", make)

    def _index_window(self) -> None:
        """Each held step's fleet indices, and per engine the start of its responses of each held
        step: engine e's responses of steps j .. are fleet indices [tail_lo[j − lo, e], off[e + 1])
        (the last row: the ends)."""
        lo, hi = self.window
        step = self.fleet.resp.step_ids - lo
        W = hi - lo
        E = len(self.used)
        per_step = np.bincount(self.fleet.resp.eng_of * (W + 1) + step + 1, minlength=E * (W + 1)).reshape(E, W + 1)
        self.tail_lo = (self.fleet.resp.off[:-1][:, None] + np.cumsum(per_step, axis=1)).T
        # each engine's responses are in step order, so a step's fleet indices (ascending) are one
        # range per engine: no sort by step
        self.step_idx = {lo + i: ragged(self.tail_lo[i], self.tail_lo[i + 1] - self.tail_lo[i])[1] for i in range(W)}

    def _ensure_window(self, upto: int) -> None:
        """A windowed fleet holds steps up to `upto` (exclusive): if not, it lets go the steps
        before the one being waited for (finished, read) and takes in the next ones."""
        if not self.windowed or self.window[1] >= upto:
            return
        n_steps = len(self.draws)
        lo, hi = self.current_step, min(n_steps, upto + self.WINDOW_STEPS)
        cols = self._columns(list(range(self.window[1], hi)))
        new_cols = [cols.pop(c) for c in ("u", "gi", "gw")]
        fl = self.fleet
        keep = fl.resp.step_ids >= lo
        old_to_new, new_at = rewindow(fl, keep, cols)
        held = []
        for have, add in zip((self.u_all, self.gi_all, self.gw_all), new_cols):
            col = np.empty(fl.resp.N, dtype=have.dtype)
            col[old_to_new[keep]] = have[keep]
            col[new_at] = add
            held.append(col)
        self.u_all, self.gi_all, self.gw_all = held
        self.window = (lo, hi)
        self.windowed = hi < n_steps
        self._index_window()

    def _laws(self, mean_alpha: float, sel: np.ndarray) -> tuple[np.ndarray, dict]:
        """α and {k: the five law arrays} of the held responses `sel` (an index or mask) at
        `mean_alpha`: from the mean acceptance's table (cluster.quantile_laws, cached) at their
        grid positions (`_grid`), or exact (engine "fleet_v1_inputs": cluster.exact_laws)."""
        pol, acc = self.world.policy, self.world.acceptance
        u = self.u_all[sel]
        if self.v1_inputs:
            alphas = sequence_alpha_fn(mean_alpha, acc.concentration)(u)
            return alphas, cluster.exact_laws(alphas, pol.ks, acc.decay, pol.tree_for, acc.proposal_rate)
        table = cluster.quantile_laws(mean_alpha, acc.concentration, pol.ks, acc.decay, pol.tree_for, acc.proposal_rate)
        return table(u, cluster.GridPosition(self.gi_all[sel], self.gw_all[sel]))

    def release_step(self, j: int, t_s: float) -> None:
        """Step j's groups become admissible at t_s; with a limit on groups in flight they join the
        waiting groups, and as many start now as there are places (the module docstring)."""
        self.max_released = max(self.max_released, j)
        if self.group_limit is not None:
            self._collect_finished()
            if self.fleet is not None:
                self._ensure_window(j + 1)
            self.waiting.extend((j, g, t_s) for g in range(len(self.draws[j].prompt_tokens)))
            self._start_waiting([t_s] * (self.group_limit - len(self.flying)))
            return
        if self.fleet is not None:
            self._ensure_window(j + 1)
            self.fleet.release(self.step_idx[j], t_s, self.step_engines[j])
            return
        for eng, r in zip(self.engines, self.ranges):
            if r[j + 1] > r[j]:
                eng.release(np.arange(r[j], r[j + 1]), t_s)

    # ------------------------------------------------------------ groups in flight (a limit)
    def _group_spans(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Where each group of step j lies in the step's engine-major order (`_step_order`: a group
        goes whole to one engine and keeps its queue order, so it is one run): [lo[g], hi[g])."""
        d = self.draws[j]

        def make():
            order = self._step_order(j)[0]
            g_at = order // d.response_tokens.shape[1]
            first = np.flatnonzero(np.concatenate(([True], g_at[1:] != g_at[:-1])))
            lo = np.empty(len(d.prompt_tokens), dtype=np.int64)
            hi = np.empty(len(d.prompt_tokens), dtype=np.int64)
            lo[g_at[first]] = first
            hi[g_at[first]] = np.concatenate((first[1:], [len(g_at)]))
            return lo, hi

        return self._memo(d, "group_spans", make)

    def _members(self, j: int, g: int) -> tuple[int, np.ndarray]:
        """Group g of step j: (the row of its engine, its members' indices there) — fleet indices on
        the fleet, the engine's own positions on a per-engine pool."""
        lo, hi = (int(x[g]) for x in self._group_spans(j))
        e = int(self.group_engine[j][g])
        if self.fleet is not None:
            return int(np.searchsorted(self.used, e)), self.step_idx[j][lo:hi]
        first = int(np.searchsorted(self._step_order(j)[1], e))
        row = self.engine_row[e]
        at = int(self.ranges[row][j]) + lo - first
        return row, np.arange(at, at + hi - lo)

    def _start_waiting(self, free_at: list[float]) -> None:
        """The waiting groups take the free places, first come first served; `free_at`: when each
        place freed (ascending; a release passes its own time for every free place). A group starts
        at the later of its place's time and its release."""
        by_time: dict[float, list[tuple[int, np.ndarray]]] = {}
        for t in free_at[:self.group_limit - len(self.flying)]:
            if not self.waiting:
                break
            j, g, released = self.waiting.popleft()
            start = max(t, released)
            self.flying.append((j, g, start))
            by_time.setdefault(start, []).append(self._members(j, g))
        for t, groups in by_time.items():
            if self.fleet is not None:
                self.fleet.release(np.concatenate([m for _, m in groups]), t,
                                   np.unique(np.array([row for row, _ in groups])))
            else:
                for row, m in groups:
                    self.engines[row].release(m, t)

    def _collect_finished(self) -> list[float]:
        """Drop the groups in flight whose last response has finished; their finish times,
        ascending (a fleet's steps let go by its window finished long before: they free a place
        at no particular time and are dropped without one)."""
        if not self.flying:
            return []
        if self.fleet is None and self.fast:
            for row in {self.engine_row[int(self.group_engine[j][g])] for j, g, _ in self.flying}:
                self.engines[row].flush()
        fin = np.full(len(self.flying), np.nan)
        gone = np.zeros(len(self.flying), dtype=bool)
        by_step: dict[int, list[int]] = {}
        for i, (j, _, _) in enumerate(self.flying):
            by_step.setdefault(j, []).append(i)
        for j, at in by_step.items():
            if self.fleet is not None and j < self.window[0]:
                gone[at] = True
                continue
            fin[at] = self._group_finish_s(j, np.array([self.flying[i][1] for i in at]))
        done = ~np.isnan(fin)
        for i in np.flatnonzero(done).tolist():
            self.group_time_s[0] += fin[i] - self.flying[i][2]
            self.group_time_s[1] += 1
        self.flying = [x for x, d, g in zip(self.flying, done.tolist(), gone.tolist()) if not (d or g)]
        return np.sort(fin[done]).tolist()

    def _group_finish_s(self, j: int, groups: np.ndarray) -> np.ndarray:
        """The time the last response of each of step j's `groups` finished; NaN while one runs."""
        if self.fleet is not None:
            lo, _ = self._group_spans(j)
            run_of = np.argsort(lo)                      # the groups as their runs lie in the step's order
            per_run = np.maximum.reduceat(self.fleet.resp.finish_s[self.step_idx[j]], lo[run_of])   # NaN-propagating
            out = np.empty(len(lo))
            out[run_of] = per_run
            return out[groups]
        out = np.empty(len(groups))
        for n, g in enumerate(groups.tolist()):
            row, m = self._members(j, g)
            out[n] = np.max(self.engines[row].finish_s[m])
        return out

    def _slice_s(self) -> float:
        """The next slice's length while groups wait (GROUP_SLICE_SHARE)."""
        total, n = self.group_time_s
        if n:
            return max(GROUP_SLICE_SHARE * total / n, GROUP_SLICE_MIN_S)
        oldest = min((start for _, _, start in self.flying), default=self.clock)
        return max(GROUP_SLICE_SHARE * (self.clock - oldest), GROUP_SLICE_MIN_S)

    def switch_all(self, t_s: float, version: int, mean_alpha: float, in_flight: bool, pause_s: float = 0.0) -> None:
        """Every engine runs `version` at acceptance `mean_alpha` from t_s. In flight, each engine
        then stops `pause_s` at its first step boundary from t_s on: NeMo-RL's in-flight weight
        update (`async_grpo.in_flight_weight_updates`) reaches vLLM as a `collective_rpc` that the
        engine core runs between two steps, receiving the new weights over the refit broadcast
        while it steps no sequence (running sequences keep their KV cache and resume after it;
        NeMo-RL `algorithms/async_utils.py`, `prepare_for_refit` / `resume_after_refit`), so the
        pause is the refit's transfer time (the pipeline passes its weight sync). The per-sequence
        acceptance and (fast engine) the steps-to-finish laws of every draft length the policy
        uses are computed once for the pool's unfinished steps and handed to each engine as
        slices (finished steps are left alone: a whole-run projection stays linear in its steps)."""
        j = self.current_step
        if self.fleet is not None:
            self._switch_fleet(j, t_s, version, mean_alpha, in_flight, pause_s)
            return
        los = [int(r[j]) for r in self.ranges]
        tails = [u[lo:] for u, lo in zip(self.u, los)]
        alphas = sequence_alpha_fn(mean_alpha, self.world.acceptance.concentration)(np.concatenate(tails))
        laws = None if self.world.context is not None else {}   # None: each engine keys its own (FastState.context_law)
        if self.fast and laws is not None:
            pol = self.world.policy
            laws = {k: step_law(alphas, k, self.world.acceptance.decay, pol.tree_for(k),
                                self.world.acceptance.proposal_rate) for k in pol.ks}
        offsets = np.cumsum([0] + [len(x) for x in tails])
        for eng, lo, a, b in zip(self.engines, los, offsets[:-1], offsets[1:]):
            part = None if laws is None else {k: StepLaw(*(x[a:b] for x in (lw.mu, lw.inv_mu, lw.offset, lw.sd1, lw.skew1)))
                                              for k, lw in laws.items()}
            eng.switch(t_s, version, alphas[a:b], mean_alpha, in_flight, part, lo, pause_s)

    def _switch_fleet(self, j: int, t_s: float, version: int, mean_alpha: float, in_flight: bool,
                      pause_s: float = 0.0) -> None:
        """switch_all on the fleet, for the unfinished responses that can be keyed before the next
        switch: those of the unfinished steps up to the one released with this version (a later
        step is released only after a later switch, which lands on an engine before it admits: a
        gated switch stops admission until it is applied). A finished response is never keyed
        again, so it is left out. So a whole-run projection stays linear in steps."""
        last = min(self.max_released + 2, len(self.draws))
        self._ensure_window(last)
        fl = self.fleet
        w0 = self.window[0]
        lo, hi = self.tail_lo[j - w0], self.tail_lo[last - w0]
        seg, idx = ragged(lo, hi - lo)
        live = np.isnan(fl.resp.finish_s[idx])
        seg, idx = seg[live], idx[live]
        alphas, laws = self._laws(mean_alpha, idx)
        toff = np.concatenate(([0], np.cumsum(np.bincount(seg, minlength=len(lo)))))
        fl.switch(t_s, SwitchPayload(version, idx, toff, alphas, laws, in_flight, mean_alpha, pause_s))

    def _done(self, j: int) -> bool:
        if self.fleet is not None:
            return not self.fleet.counters.remaining[:, j].any()
        return all(e.remaining.get(j, 0) == 0 for e in self.engines)

    def _step_finish_s(self, j: int) -> float:
        if self.fleet is not None:
            ix = self.step_idx[j]
            return float(np.max(self.fleet.resp.finish_s[ix])) if len(ix) else 0.0
        out = 0.0
        for eng, r in zip(self.engines, self.ranges):
            if self.fast:
                eng.flush()
            if r[j + 1] > r[j]:
                out = max(out, float(np.max(eng.finish_s[r[j]:r[j + 1]])))
        return out

    def advance(self, j: int, horizon: float, tick: Ticker | None = None) -> float | None:
        self.current_step = j
        while self.waiting:       # groups wait for a place: slices, starting them as places free
            until = min(horizon, self.clock + self._slice_s())
            f = self._run_to(j, until, tick)
            self.clock = until if f is None else f
            freed = self._collect_finished()
            if freed:
                self._start_waiting(freed)
            if f is not None:
                self.finish_of_step[j] = f
                return f
            if until >= horizon:
                return None
        f = self._run_to(j, horizon, tick)
        if f is None and horizon == INF:
            raise RuntimeError(f"step {j} cannot finish: its work was never released")
        self.clock = horizon if f is None else f
        if f is not None:
            self.finish_of_step[j] = f
        return f

    def _run_to(self, j: int, until: float, tick: Ticker | None) -> float | None:
        """Run the engines until step j has finished everywhere (its finish F_j, where they then
        stand) or until `until` (they stand at its step boundary; None)."""
        if self.fleet is not None:
            fl = self.fleet
            fl.run(until_s=until, watch_step=j, tick=tick)
            if self._done(j):
                f = self._step_finish_s(j)
                if f <= until:
                    fl.run(until_s=f)
                    return f
            if until < INF:
                fl.run(until_s=until)
            return None
        for e in self.engines:
            e.run(until_s=until, watch_step=j)
            if tick is not None and tick.due():
                tick.responses(self.finished_responses())
        if self._done(j):
            f = self._step_finish_s(j)
            if f <= until:
                for e in self.engines:
                    e.run(until_s=f)
                return f
        if until < INF:
            for e in self.engines:
                e.run(until_s=until)
        return None

    def finished_responses(self) -> int:
        """Responses of every step that have finished so far (a progress count: sim/progress.py)."""
        if self.fleet is not None:
            return self.fleet.finished_responses()
        return int(sum(len(e.finish_s) - sum(e.remaining.values()) for e in self.engines))

    def counters(self) -> dict[str, float]:
        """Cumulative engine counters (sums over engines), for per-step windows."""
        keys = ("sd_tokens", "sd_seq_steps", "sd_steps", "steps", "weighted_active", "token_sum", "token_batch_sum")
        if self.fleet is not None:
            return {k: float(getattr(self.fleet.counters, k).sum()) for k in keys}
        return {k: float(sum(getattr(e, k) for e in self.engines)) for k in keys}

    def step_versions(self, j: int) -> np.ndarray:
        """Policy version each response of step j was admitted under."""
        if self.fleet is not None:
            return self.fleet.resp.admit_version[self.step_idx[j]]
        return np.concatenate([e.admit_version[r[j]:r[j + 1]] for e, r in zip(self.engines, self.ranges)])

    def _sd_counts(self, j: int) -> tuple[float, float]:
        """Step j's trajectories: tokens they emitted under SD and their SD request-steps."""
        if self.fleet is not None:
            ix = self.step_idx[j]
            return float(self.fleet.resp.seq_sd_tokens[ix].sum()), float(self.fleet.resp.seq_sd_steps[ix].sum())
        tok = sum(float(e.seq_sd_tokens[r[j]:r[j + 1]].sum()) for e, r in zip(self.engines, self.ranges))
        steps = sum(float(e.seq_sd_steps[r[j]:r[j + 1]].sum()) for e, r in zip(self.engines, self.ranges))
        return tok, steps

    def step_tau(self, j: int) -> float:
        """τ of step j's trajectories as vLLM reports it: 1 + accepted / request-steps with a draft,
        the latter p · their verify steps (sim/common.py; p = 1: tokens over verify steps)."""
        tok, steps = self._sd_counts(j)
        return conditional_tau(tok, steps, self.world.acceptance.proposal_rate * steps)

    def step_setter_tau(self, j: int) -> float:
        """τ of the response(s) of step j that finished last (at F_j: the ones that set the step's
        generation end), as `step_tau` counts it (common.last_finishers_tau)."""
        p = self.world.acceptance.proposal_rate
        if self.fleet is not None:
            ix = self.step_idx[j]
            rs = self.fleet.resp
            return last_finishers_tau(rs.finish_s[ix], rs.seq_sd_tokens[ix], rs.seq_sd_steps[ix], p)
        if self.fast:
            for e in self.engines:
                e.flush()
        parts = [(e.finish_s[r[j]:r[j + 1]], e.seq_sd_tokens[r[j]:r[j + 1]], e.seq_sd_steps[r[j]:r[j + 1]])
                 for e, r in zip(self.engines, self.ranges)]
        return last_finishers_tau(*(np.concatenate(c) for c in zip(*parts)), p)

    def step_tokens_per_seq_step(self, j: int) -> float:
        """Effective tokens per request-step of step j's trajectories under SD, 1 + p·(τ − 1)."""
        tok, steps = self._sd_counts(j)
        return tok / steps if steps > 0 else float("nan")

    def results(self) -> list[EngineResult]:
        """Per-engine results of the whole run (engines must have finished all work)."""
        if self.fleet is not None:
            return self.fleet.results()
        return [e.result() for e in self.engines]
