"""A sign of life from inside one pipeline run: how far it is, while it runs.

`run_pipeline(world, progress=hook, progress_every_s=0.5)` calls `hook(RunProgress(...))` as the
run goes: once when it starts (nothing done yet, the totals known), then at most once per
`progress_every_s` seconds of wall clock while responses finish and RL steps complete, and once
at the end (everything done). What it reports is monotone:

* responses_done / responses_total: trajectories whose generation finished, out of the run's
  RL steps × trajectories per step;
* steps_done / steps_total: RL steps whose training side (incl. weight sync) completed.

Where the count is taken: the fleet engine (sim/fleet/loop.py) every round of its loop, so a single
long generation phase moves; the per-engine loops (fast_v1, reference) after each engine's
rollout in a sync phase and after each advance of the async stream; the pipeline after every
step. The throttle is one clock read per check (`Ticker.due`), and nothing in the simulation
reads the ticker back: a run with a hook gives the same results as one without. `every_s = 0`
reports at every check (what the tests use).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PROGRESS_EVERY_S", "ProgressHook", "RunProgress", "Ticker"]

#: Default seconds of wall clock between two reports.
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class RunProgress:
    """How far one pipeline run is."""

    steps_done: int
    steps_total: int
    responses_done: int
    responses_total: int

    @property
    def fraction(self) -> float:
        """Responses finished over the run's responses (1 for an empty run)."""
        return self.responses_done / self.responses_total if self.responses_total else 1.0


ProgressHook = Callable[[RunProgress], None]


class Ticker:
    """The throttled reporter the simulation loops share for one run.

    A loop checks `due()` (one clock read) and, when it is, hands over what it can count cheaply:
    `responses(n)` with the responses finished in its own scope, which the ticker offsets by
    `base` (a sync run's generation phases each count from zero; the pipeline sets `base` to the
    responses of the steps before); `finished(n)` records a count without reporting it. `source`,
    where set (an async run: the stream's count), is asked for the count whenever a step's end
    is reported, so a report never pairs fresh steps with a stale count. Reports are monotone (a
    count never goes back) and a report equal to the previous one is not repeated."""

    __slots__ = ("_last", "_next_s", "base", "every_s", "hook", "responses_done", "responses_total", "source",
                 "steps_done", "steps_total")

    def __init__(self, hook: ProgressHook, *, steps_total: int, responses_total: int,
                 every_s: float = PROGRESS_EVERY_S):
        self.hook = hook
        self.every_s = float(every_s)
        self.steps_total, self.responses_total = int(steps_total), int(responses_total)
        self.steps_done = self.responses_done = self.base = 0
        self.source: Callable[[], int] | None = None
        self._last: RunProgress | None = None
        self._next_s = 0.0
        self.report()

    def due(self) -> bool:
        """Has `every_s` passed since the last report?"""
        return time.perf_counter() >= self._next_s

    def finished(self, finished_in_scope: int) -> None:
        """`base + finished_in_scope` responses have finished (recorded, not reported)."""
        self.responses_done = min(max(self.responses_done, self.base + int(finished_in_scope)), self.responses_total)

    def responses(self, finished_in_scope: int) -> None:
        """Report `base + finished_in_scope` responses finished (call when `due()`)."""
        self.finished(finished_in_scope)
        self.report()

    def step_done(self) -> None:
        """One more RL step completed; reported when due."""
        self.steps_done = min(self.steps_done + 1, self.steps_total)
        if self.due():
            if self.source is not None:
                self.finished(self.source())
            self.report()

    def finish(self) -> None:
        """The run is over: everything done, reported at once."""
        self.steps_done, self.responses_done = self.steps_total, self.responses_total
        self.report()

    def report(self) -> None:
        p = RunProgress(self.steps_done, self.steps_total, self.responses_done, self.responses_total)
        self._next_s = time.perf_counter() + self.every_s
        if p != self._last:
            self._last = p
            self.hook(p)
