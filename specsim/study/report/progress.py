"""Progress of `specsim run` and `specsim project` on stderr (rich): points done/total with ETA,
simulation runs done, and -- while runs are in flight -- how far they are inside: RL steps done and
responses finished (sim/progress.py, delivered by study/executors.run_tasks). Also where warnings
about a results folder are shown while a run is in progress.

    points               ━━━━━━━━━━━━━━━━━━━━━━━━                       1/1 0:00:05 eta 0:00:00
    simulation runs      ━━━━━━━╺━━━━━━━━━━━━━━━━                       2/7 0:00:26 eta -:--:--
      step 8/12          ━━━━━━━━━━━━━━━━━━╺━━━━━ 583,075/786,432 responses 0:00:19 eta 0:00:07

The third row sums the runs in flight: one run (jobs 1) reads "step 7/12" and its responses;
several read "2 runs, step 9/24" and their responses together; it is hidden while nothing runs.
Its clock and ETA restart whenever a run starts or ends.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.table import Column
from rich.text import Text

from specsim.sim.progress import RunProgress

#: redraws of the display per second. It shares the CPUs with the workers it reports on: rich's
#: default 10 took ~8 % of the main job's CPU on 2 cores (parent 13.4 s against 8.6 s with
#: --no-progress, 54 s per worker); 2 a second is plenty for rows that move every few seconds
REFRESH_PER_S = 2


class Progress:
    """A rich progress display on stderr: points done/total with ETA, simulation runs, and the
    runs in flight (`run_progress`)."""

    def __init__(self, enabled: bool, n_points: int):
        self.enabled = enabled
        self._p = None
        self.points = NullTask()
        self._inflight: dict[object, RunProgress] = {}
        if enabled:
            self._p = RichProgress(TextColumn("{task.description:<20}"), BarColumn(), _count_column(),
                                   TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                   console=Console(stderr=True), transient=False, refresh_per_second=REFRESH_PER_S)
            self._points = self._p.add_task("points", total=n_points, visible=n_points > 0)
            self._runs = self._p.add_task("simulation runs", total=0)
            self._inside = self._p.add_task("", total=0, visible=False, unit=" responses")

    def __enter__(self):
        if self._p is not None:
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def set_points(self, n: int) -> None:
        if self._p is not None:
            self._p.update(self._points, completed=n)

    def set_runs(self, total: int) -> None:
        if self._p is not None:
            self._p.update(self._runs, total=total, completed=0)

    def add_runs(self, n: int) -> None:
        if self._p is not None:
            t = self._p.tasks[self._runs]
            self._p.update(self._runs, total=(t.total or 0) + n)

    def runs_done(self) -> None:
        if self._p is not None:
            self._p.advance(self._runs)

    def run_progress(self, key, p: RunProgress | None) -> None:
        """Run `key` is this far (`p`), or has ended (None): the third row shows the runs in flight."""
        if self._p is None:
            return
        before = set(self._inflight)
        if p is None:
            self._inflight.pop(key, None)
        else:
            self._inflight[key] = p
        runs = list(self._inflight.values())
        if not runs:
            self._p.update(self._inside, visible=False)
            return
        done, total = sum(r.responses_done for r in runs), sum(r.responses_total for r in runs)
        label = inflight_label(runs)
        if set(self._inflight) != before:    # a run started or ended: the rate and clock start over
            self._p.reset(self._inside, total=total, completed=done, description=label, visible=True)
        else:
            self._p.update(self._inside, total=total, completed=done, description=label, visible=True)

    def task_progress(self, task, p: RunProgress | None) -> None:
        """`run_progress` keyed by a task's run key (study/executors.run_tasks' on_progress)."""
        self.run_progress(task.key, p)

    def warn(self, message: str) -> None:
        """One warning line on stderr (only when the progress display is on)."""
        if self._p is not None:
            self._p.console.print(f"[yellow]warning:[/yellow] {message}", markup=True, highlight=False)


def inflight_label(runs: list[RunProgress]) -> str:
    """The third row's description: "step 3/6" for one run in flight, "2 runs, step 4/12" (summed)
    for several."""
    steps, steps_total = sum(r.steps_done for r in runs), sum(r.steps_total for r in runs)
    what = f"step {steps}/{steps_total}"
    return f"  {what}" if len(runs) == 1 else f"  {len(runs)} runs, {what}"


def _count_column():
    """done/total, right-aligned, with thousands separators and the row's unit (if any)."""
    class Count(ProgressColumn):
        def render(self, task):
            return Text(f"{int(task.completed):,}/{int(task.total or 0):,}{task.fields.get('unit', '')}",
                        style="progress.download")

    return Count(table_column=Column(justify="right", no_wrap=True))


class NullTask:
    def advance(self, n: int) -> None:
        pass

