"""The one way specsim runs simulations and keeps them: a run store, and the results folder it lives in.

    with open_results(out, force=force, resolved_text=to_yaml(sc), inputs=inputs_fingerprint(sc)) as rf:
        runs = rf.store.results(tasks, jobs=2)        # {run key: result}

`RunStore(folder)` keeps pipeline runs by run key (study/sweep.run_key: the scenario with what
cannot change the simulation normalised away, the replicate, the engine, the inputs' contents).
`results(tasks)` gives every task's result: a run already in the store is reused, the rest run on
the local or Ray executor (study/executors.run_tasks), and each is written, as it finishes,
atomically to ``<folder>/runs/<key>.json`` -- the format `specsim run` has always written, so a
folder written by any earlier version is read back as it is (results_folder.load_runs: every file
checked against the run schema; an invalid one is warned about and recomputed). ``folder=None``:
a store in memory only (a library call without a results folder).

Counting. `computed` is the runs simulated by this store, `reused` the distinct runs asked for
that it held from an earlier command (on disk when it was opened); a run computed here and asked
for again is neither.

Stopped runs. A task with `stop_above_s` (the planner's run of a candidate that may not win) can
end as {"key", "stopped": {step, floor_step_s, stop_above_s}}: no result, only the proof that its
steady mean step is at least floor_step_s. It is kept in runs/ under its key like any run, but is
never one of `runs`: `results` reuses it only for a task whose own `stop_above_s` is below its
floor (that task would stop too); any other task with its key runs it in full (and replaces it).

One error policy. A run that cannot run (executors.execute returns {"key", "error"}: a scenario
that does not fit, a bad layout: deterministic for its key) is recorded like any result -- written
to runs/ and returned -- so a rerun never simulates it again; a task the caller says must run
(`must_run`) raises :class:`RunFailed` at its first failure (stored or computed), which stops the
remaining tasks; the caller turns it into its own user error (naming the sweep point, the
variant, the probe). Callers that tolerate failures (the planner's infeasible candidates) read
the error from the result.

`open_results` is the one results-folder context of run, plan, project and explain: the
output-path rule, the marker and the folder's lock (atomic.output_folder, via
results_folder.locked), `prepare` (the scenario guard: another scenario's results are refused
unless --force; --fresh discards), the inputs stamp (inputs.json: a changed input is a warning)
and the folder's run store. Everything a command writes into the folder it writes inside it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specsim import atomic
from specsim.study import results_folder as results_dir
from specsim.study.executors import run_tasks
from specsim.study.sweep import RunTask

__all__ = ["ResultsFolder", "RunFailed", "RunStore", "open_results"]

#: the folder of stored runs inside a results folder
RUNS_DIR = "runs"


class RunFailed(Exception):
    """A run its caller needs could not run: `task` and the executor's `error` message."""

    def __init__(self, task: RunTask, error: str):
        super().__init__(task.key, error)
        self.task, self.error = task, error


class RunStore:
    """Pipeline runs by run key, in a results folder's runs/ (or in memory: `folder=None`)."""

    def __init__(self, folder: str | Path | None = None, warnings: list[str] | None = None):
        self.folder = Path(folder) if folder is not None else None
        self.warnings = warnings if warnings is not None else []
        self._runs: dict[str, dict] = {}
        if self.folder is not None:
            self._runs = results_dir.load_runs(self.folder / RUNS_DIR, self.warnings)
        self._stopped = {k: v for k, v in self._runs.items() if "stopped" in v}   # see the module doc
        self._runs = {k: v for k, v in self._runs.items() if "stopped" not in v}
        self._earlier = set(self._runs) | set(self._stopped)     # what an earlier command stored
        self._reused: set[str] = set()
        self.computed = 0

    @property
    def reused(self) -> int:
        return len(self._reused)

    @property
    def runs(self) -> dict[str, dict]:
        """Every run the store holds, by key (read it; add to it only through `results`)."""
        return self._runs

    def __contains__(self, key: str) -> bool:
        return key in self._runs

    def __getitem__(self, key: str) -> dict:
        return self._runs[key]

    def get(self, key: str) -> dict | None:
        return self._runs.get(key)

    def answer(self, task: RunTask) -> dict | None:
        """The stored result that answers `task`: its run, or a stopped run of its key whose floor
        is above the task's own `stop_above_s` (the task would stop too); else None."""
        if task.key in self._runs:
            return self._runs[task.key]
        stop = self._stopped.get(task.key)
        if stop is not None and task.stop_above_s is not None \
                and stop["stopped"]["floor_step_s"] > task.stop_above_s:
            return stop
        return None

    def _keep(self, task: RunTask, result: dict) -> dict:
        if self.folder is not None:
            atomic.write_json(self.folder / RUNS_DIR / f"{task.key}.json", result)
        kept = json.loads(json.dumps(result, sort_keys=True))   # what a resumed command reads back
        if "stopped" in kept:
            self._stopped[task.key] = kept
        else:
            self._runs[task.key] = kept
            self._stopped.pop(task.key, None)
        self.computed += 1
        return kept

    def results(self, tasks: Iterable[RunTask], *, jobs: int = 1, backend: str = "local", address: str | None = None,
                pool=None, progress=None, must_run: Callable[[RunTask], bool] | bool = False,
                on_result: Callable[[RunTask, dict], None] | None = None,
                on_progress=None, follow_up: Callable[[RunTask, dict], Iterable[RunTask]] | None = None
                ) -> dict[str, dict]:
        """Every task's result by key: reused from the store, the rest run (executors.run_tasks on
        `jobs` workers, `backend`/`address`, on `pool` when given) and kept as each finishes.
        `must_run`: the tasks whose failure raises RunFailed (True: all). `on_result(task, result)`:
        called in this thread for each run computed here, after it is kept. `follow_up(task,
        result)`: called after it, the tasks it returns are answered the same way (reused, or
        queued behind the tasks not yet started, a key already queued only once) and are in the
        returned dict. `progress`: a study/report/progress.Progress (its run count grows by the
        runs to compute; its third row shows them in flight), or `on_progress`
        (executors.OnProgress) directly."""
        need = must_run if callable(must_run) else (lambda t, all_=bool(must_run): all_)
        todo: dict[str, RunTask] = {}
        asked: dict[str, dict | None] = {}

        def ask(batch: Iterable[RunTask]) -> list[RunTask]:
            """The tasks of `batch` to run (the others answered from the store); raises RunFailed
            for a stored failure that must not fail."""
            new: dict[str, RunTask] = {}
            for t in batch:
                res = asked[t.key] = self.answer(t)
                if res is not None:
                    if t.key in self._earlier:
                        self._reused.add(t.key)
                    if "error" in res and need(t):
                        raise RunFailed(t, str(res["error"]))
                elif t.key in new:
                    if _stops_later(t, new[t.key]):
                        new[t.key] = t   # of two tasks of one key, the one that stops later answers both
                elif t.key not in todo:
                    new[t.key] = t
            todo.update(new)
            if progress is not None and new:
                progress.add_runs(len(new))
            return list(new.values())

        first = ask(tasks)
        inside = on_progress
        if inside is None and progress is not None and progress.enabled:
            inside = progress.task_progress

        def deliver(task: RunTask, result: dict) -> None:
            kept = self._keep(task, result)
            if progress is not None:
                progress.runs_done()
            if "error" in kept and need(task):
                raise RunFailed(task, str(kept["error"]))
            if on_result is not None:
                on_result(task, kept)

        def more(task: RunTask, result: dict) -> list[RunTask]:
            return ask(follow_up(task, self._runs.get(task.key, self._stopped.get(task.key))))

        run_tasks(first, deliver, jobs=jobs, backend=backend, address=address, on_progress=inside,
                  pool=pool, follow_up=None if follow_up is None else more)
        return {k: v if v is not None else self._runs.get(k, self._stopped.get(k)) for k, v in asked.items()}


def _stops_later(a: RunTask, b: RunTask) -> bool:
    """Whether task `a` stops its run later than `b` (a higher `stop_above_s`; None: never)."""
    return b.stop_above_s is not None and (a.stop_above_s is None or a.stop_above_s > b.stop_above_s)


@dataclass
class ResultsFolder:
    """A results folder opened by `open_results`, held locked: its resolved path, its run store,
    the inputs' fingerprint it was stamped with, and the warnings about it (a changed input, an
    invalid stored run)."""

    path: Path
    store: RunStore
    inputs: dict | None = None
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def open_results(out: str | Path, *, force: bool = False, fresh: bool = False, resolved_text: str | None = None,
                 inputs: dict | None = None, what: str = "run",
                 warnings: list[str] | None = None) -> Iterator[ResultsFolder]:
    """The results folder `out`, locked while the block runs (module doc). `resolved_text`: the
    scenario the folder holds results of (results_folder.prepare; None: the folder is not bound to
    one scenario -- its runs are keyed by content -- and only the output rule and the lock apply);
    `inputs`: the fingerprint to stamp (inputs.json; a change since the last `what` into the folder
    is a warning); `warnings`: the list to add the folder's warnings to."""
    warnings = warnings if warnings is not None else []
    with results_dir.locked(out, force) as path:
        if resolved_text is not None:
            results_dir.prepare(path, resolved_text, force, fresh)
        else:
            atomic.remove_stale_temporaries(path)
        if inputs is not None:
            changed = results_dir.inputs_changes(path, inputs)
            if changed:
                warnings.append(f"inputs changed since the last {what} into this folder ({', '.join(changed)}): the "
                                "runs that depend on them are recomputed, none is reused")
        yield ResultsFolder(path, RunStore(path, warnings), inputs, warnings)
