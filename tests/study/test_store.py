"""The one run store (specsim/study/store.py): a run computed once is kept in runs/ in the format
`specsim run` writes, reused by a later store on the folder (computed 0), counted computed and
reused; a failed run is recorded like any result and raises RunFailed only where the caller needs
it; `open_results` is the output rule, the lock, the scenario guard and the inputs stamp."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from specsim import atomic
from specsim.scenario import validate_doc
from specsim.study import results_folder
from specsim.study.executors import execute
from specsim.study.store import RunFailed, RunStore, open_results
from specsim.study.sweep import RunTask
from tests.small_sweep import TINY_SYNC


def _task(rep: int = 0, **rollout) -> RunTask:
    d = copy.deepcopy(TINY_SYNC)
    d["rollout"].update(rollout)
    return RunTask.of(validate_doc(d), rep, "point")


def test_runs_are_kept_in_runs_and_a_second_store_reuses_them(tmp_path):
    tasks = [_task(0), _task(1)]
    first = RunStore(tmp_path)
    got = first.results(tasks + tasks[:1])          # a task asked twice runs once
    assert first.computed == 2 and first.reused == 0
    for t in tasks:
        doc = json.loads((tmp_path / "runs" / f"{t.key}.json").read_text(encoding="utf-8"))
        assert results_folder.run_problem(doc, t.key) is None and doc["steady"] == got[t.key]["steady"]
    again = RunStore(tmp_path)
    assert again.results(tasks) == got
    assert again.computed == 0 and again.reused == 2


def test_a_run_written_as_the_runner_always_wrote_it_is_reused(tmp_path):
    t = _task(0)
    atomic.write_json(tmp_path / "runs" / f"{t.key}.json", execute(t))   # runner.py's format, written directly
    store = RunStore(tmp_path)
    store.results([t])
    assert store.computed == 0 and store.reused == 1


def test_an_invalid_stored_run_is_warned_about_and_recomputed(tmp_path):
    t = _task(0)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / f"{t.key}.json").write_text("{not json", encoding="utf-8")
    warnings: list[str] = []
    store = RunStore(tmp_path, warnings)
    store.results([t])
    assert store.computed == 1 and any(t.key in w for w in warnings)


def test_one_error_policy_a_failed_run_is_recorded_and_raises_only_where_needed(tmp_path):
    bad = _task(0, gpus=3, tp=3)      # 3 does not divide the model's heads: it cannot run
    store = RunStore(tmp_path)
    got = store.results([bad])        # tolerated: recorded and returned
    assert "error" in got[bad.key] and (tmp_path / "runs" / f"{bad.key}.json").is_file()
    with pytest.raises(RunFailed) as exc:
        RunStore(tmp_path).results([bad], must_run=True)   # needed: raises, from the stored failure
    assert exc.value.task.key == bad.key and exc.value.error == got[bad.key]["error"]
    with pytest.raises(RunFailed):
        RunStore(None).results([bad], must_run=lambda t: t.role == "point")


def test_open_results_guards_locks_and_stamps(tmp_path):
    out = tmp_path / "r"
    with open_results(out, resolved_text="a: 1\n", inputs={"x": "1"}) as rf:
        assert (rf.path / atomic.MARKER).is_file() and (rf.path / "resolved.yaml").read_text() == "a: 1\n"
        with pytest.raises(results_folder.ResultsConflict, match="holds its lock"), \
                open_results(out, resolved_text="a: 1\n"):     # a second writer is refused
            pass
    warnings: list[str] = []
    with open_results(out, resolved_text="a: 1\n", inputs={"x": "2"}, what="plan", warnings=warnings):
        pass
    assert any("inputs changed since the last plan" in w for w in warnings)
    with pytest.raises(results_folder.ResultsConflict, match="another one"), \
            open_results(out, resolved_text="a: 2\n"):       # another scenario's folder
        pass


def test_a_stopped_run_is_kept_apart_and_reused_only_by_a_task_that_would_stop_too(tmp_path):
    """A task with stop_above_s below its run's steady mean ends as {"key", "stopped"} (no result):
    written to runs/ (a valid stored run), never one of `runs`; a later task of its key is answered
    by it only when its own stop_above_s is below the stopped run's floor; a task without one (or
    above the floor) runs in full and replaces it."""
    full = execute(_task(0))
    mean = full["steady"]["step_s"]
    low = dataclasses.replace(_task(0), stop_above_s=0.5 * mean)
    store = RunStore(tmp_path)
    got = store.results([low])[low.key]
    stop = got["stopped"]
    assert set(got) == {"key", "stopped"} and 0.5 * mean < stop["floor_step_s"] <= mean * (1 + 1e-12)
    assert low.key not in store and store.computed == 1
    doc = json.loads((tmp_path / "runs" / f"{low.key}.json").read_text(encoding="utf-8"))
    assert results_folder.run_problem(doc, low.key) is None
    again = RunStore(tmp_path)
    lower = dataclasses.replace(low, stop_above_s=0.4 * mean)
    assert again.answer(lower) == got and again.results([lower])[low.key] == got and again.computed == 0
    higher = dataclasses.replace(low, stop_above_s=stop["floor_step_s"] * 1.01)
    assert again.answer(higher) is None and again.answer(_task(0)) is None
    res = again.results([low, _task(0)])      # one key: the task that stops later (never) answers both
    assert again.computed == 1 and res[low.key]["steady"] == full["steady"] and low.key in again
    assert again.answer(low)["steady"] == full["steady"]


def test_follow_ups_are_answered_like_the_tasks_given(tmp_path):
    """`follow_up(task, result)`: the tasks it returns after a result are reused from the store
    when there (not rerun), run once however often they are named (also when already queued),
    and answered in the returned dict; the call ends when they are done."""
    a, b, c = _task(0), _task(1), _task(2)
    store = RunStore(tmp_path)
    store.results([c])
    ran: list[str] = []
    got = store.results([a], on_result=lambda t, r: ran.append(t.key),
                        follow_up=lambda t, r: [b, c, b, a] if t.key == a.key else [])
    assert ran == [a.key, b.key]
    assert set(got) == {a.key, b.key, c.key}
    assert got[b.key]["steady"] == execute(b)["steady"]
    assert store.computed == 3 and store.reused == 0   # c was computed by this store: not reused
