"""Progress of `specsim run` on stderr (rich): points done/total with ETA, and simulation runs.
Also where warnings about a results folder are shown while a run is in progress."""

from __future__ import annotations


class Progress:
    """A rich progress display on stderr: points done/total with ETA, and simulation runs."""

    def __init__(self, enabled: bool, n_points: int):
        self.enabled = enabled
        self._p = None
        self.points = NullTask()
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                               console=Console(stderr=True), transient=False)
            self._points = self._p.add_task("points", total=n_points)
            self._runs = self._p.add_task("simulation runs", total=0)

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

    def warn(self, message: str) -> None:
        """One warning line on stderr (only when the progress display is on)."""
        if self._p is not None:
            self._p.console.print(f"[yellow]warning:[/yellow] {message}", markup=True, highlight=False)


class NullTask:
    def advance(self, n: int) -> None:
        pass

