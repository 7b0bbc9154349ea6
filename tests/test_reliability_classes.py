"""Reliability of the front door (issue #35): one test (at least) per defect class, each failing on 586b98a.

1 one guarded reader for every input file     6 errors say what happened (errno, field path)
2 strict hardware profiles and catalogs;      7 no silent coercion (duplicate keys, equal sweep
  exceptions out of simpy processes intact      values, conflicting sets, ignored fields)
3 outputs never clobber (marker, lock, ...)   8 Ray edges (non-Ray listener, ray://, paths, --jobs)
4/9 a cost estimate with a bound, progress    10 streams and locale
    inside a run
5 values that pass check and crash run
"""

from __future__ import annotations

import copy
import errno
import itertools
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import typer.testing
import yaml
from small_sweep import TINY_SYNC

from specsim import atomic, inputs
from specsim.cli.app import app
from specsim.cli.common import error_message
from specsim.errors import InvariantError, SpecError, load_yaml_text, os_reason
from specsim.scenario import ScenarioError, load_scenario
from specsim.study.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "specsim" / "catalog" / "hardware_profiles" / "h100_sxm.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args: str):
    res = typer.testing.CliRunner().invoke(app, list(args))
    return res, res.output + (res.stderr if res.stderr_bytes is not None else "")


def scenario(tmp_path: Path, **changes) -> str:
    doc = copy.deepcopy(TINY_SYNC)
    for dotted, v in changes.items():
        cur = doc
        parts = dotted.split("__")
        for part in parts[:-1]:
            cur = cur.setdefault(part, {})
        cur[parts[-1]] = v
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(p)


def clean_error(res, text: str, *words: str) -> None:
    assert res.exit_code == 2, text
    assert "Traceback" not in text and "internal error" not in text, text
    for w in words:
        assert w in text, (w, text)


# ============================================================================ 1 guarded reader
def test_reader_refuses_fifos_devices_folders_without_hanging(tmp_path):
    fifo = tmp_path / "lengths.csv"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "folder")):
        t0 = time.monotonic()
        with pytest.raises(SpecError, match=kind):
            inputs.read_bytes(path, "f")
        assert time.monotonic() - t0 < 2
    path = scenario(tmp_path, workload__response_tokens={"kind": "empirical", "path": str(fifo)})
    res, text = cli("check", path)
    clean_error(res, text, "workload.response_tokens.path", "FIFO")


def test_reader_size_bound(tmp_path):
    p = tmp_path / "big.csv"
    p.write_bytes(b"1\n" * 100)
    with pytest.raises(SpecError, match="at most 100 bytes"):
        inputs.read_bytes(p, "f", max_bytes=100)


@pytest.mark.parametrize("body, line", [
    (b"\xef\xbb\xbf100\n200\n300\n", None),             # a BOM is not part of the first row
    (b'100\n"200\n300\n400\n', 2),                       # a stray quote names its line
    (b"100\n200.5\n300\n", 2),                           # fractional lengths are an error, not rounded
    (b"length,x\n100,1\n200\n", 3),                      # a short row
])
def test_length_file_strict_parsing(tmp_path, body, line):
    from specsim.workload.lengths.checks import read_lengths_file

    p = tmp_path / "l.csv"
    p.write_bytes(body)
    if line is None:
        assert read_lengths_file(p, "f").tolist() == [100.0, 200.0, 300.0]
    else:
        with pytest.raises(SpecError, match=f"line {line}"):
            read_lengths_file(p, "f")


def test_ten_million_row_length_file_reads_in_seconds(tmp_path):
    from specsim.workload.lengths.checks import read_lengths_file

    p = tmp_path / "l.csv"
    p.write_bytes(b"\n".join(str(100 + i % 3000).encode() for i in range(10**7)) + b"\n")
    t0 = time.perf_counter()
    arr = read_lengths_file(p, "f")
    assert arr.size == 10**7 and time.perf_counter() - t0 < 20


def test_stored_result_fifo_does_not_hang_a_resume(tmp_path):
    path = scenario(tmp_path)
    out = tmp_path / "r"
    run_scenario(path, out=out, jobs=1, progress=False)
    victim = next((out / "runs").glob("*.json"))
    victim.unlink()
    os.mkfifo(victim)
    done = []
    t = threading.Thread(target=lambda: done.append(run_scenario(path, out=out, jobs=1, progress=False)), daemon=True)
    t.start()
    t.join(120)
    assert done and any("not a valid run" in w for w in done[0].warnings)


# ============================================================================ 2 strict profiles
@pytest.mark.parametrize("edit, field", [
    (lambda d: d["hbm_tbps"].update(value=float("inf")), "hbm_tbps"),
    (lambda d: d["peak_dense_tflops"]["bf16"].update(value=float("inf")), "peak_dense_tflops.bf16"),
    (lambda d: d["hbm_gb"].update(value=float("inf")), "hbm_gb"),
    (lambda d: d["efficiency"]["step_overhead_ms"].update(value=float("nan")), "efficiency.step_overhead_ms"),
    (lambda d: d.update(hbm_tbs=3), "hbm_tbs"),                 # unknown key, with a did-you-mean
    (lambda d: d["efficiency"].update(compute=5e-324), "efficiency.compute"),
])
def test_hardware_profile_schema(tmp_path, edit, field):
    doc = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    edit(doc)
    prof = tmp_path / "hw.yaml"
    prof.write_text(yaml.safe_dump(doc), encoding="utf-8")
    res, text = cli("check", scenario(tmp_path, hardware=str(prof)))
    clean_error(res, text, field, str(prof))


def test_exceptions_survive_simpy_reraise():
    for exc in (InvariantError("engine0", 3, "tokens", "lost one"), SpecError("a.b", 1, "> 2", "f.yaml"),
                ScenarioError("f.yaml", "a.b", 1, "must be > 2")):
        again = type(exc)(*exc.args)   # what simpy does with a process's exception
        assert str(again) == str(exc) and type(again) is type(exc)


def test_exception_inside_a_simpy_process_reaches_the_user_as_itself():
    import simpy

    def proc(env):
        yield env.timeout(1)
        raise InvariantError("e", 1, "q", "d")

    env = simpy.Environment()
    env.process(proc(env))
    with pytest.raises(InvariantError, match="internal invariant violated in e at step 1: q: d"):
        env.run()


def test_catalog_entries_are_checked():
    from specsim.catalog.models import ModelSpec, catalog_entry

    with pytest.raises(SpecError, match="did you mean 'layers'"):
        catalog_entry({"layer": 3}, ModelSpec, "models.x", "catalog/models.yaml")
    with pytest.raises(SpecError, match="hidden"):
        catalog_entry({"hidden": float("inf")}, ModelSpec, "models.x", "catalog/models.yaml")


# ============================================================================ 3 outputs
def test_out_refuses_special_files_bundled_files_empty_and_foreign_folders(tmp_path):
    path = scenario(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("my notes", encoding="utf-8")
    for args, words in ((["--out", "/dev/full"], ["character device"]), (["--out", ""], ["empty path"]),
                        (["--out", str(mine)], ["--force", "summary.md"]),
                        (["--out", str(ROOT / "specsim" / "catalog")], ["package"])):
        res, text = cli("run", path, "--no-progress", *args)
        clean_error(res, text, "--out", *words)
    assert (mine / "summary.md").read_text(encoding="utf-8") == "my notes"
    for cmd in (["calibrate", "traces", "x.csv", "--hardware", "h200_sxm", "--out", "/dev/full"],
                ["calibrate", "traces", "x.csv", "--hardware", "h200_sxm", "--out", str(PROFILE), "--force"],
                ["validate", "--out", "/dev/full"]):
        res, text = cli(*cmd)
        clean_error(res, text, "--out")
    assert Path("/dev/full").is_char_device()


def test_atomic_write_never_replaces_a_special_file(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="FIFO"):
        atomic.write_text(fifo, "x")
    assert fifo.is_fifo()


def test_second_writer_into_one_folder_fails_naming_the_pid(tmp_path):
    out = tmp_path / "r"
    atomic.output_path(out, folder=True)
    with atomic.FolderLock(out):
        assert (out / atomic.LOCK).read_text().strip() == str(os.getpid())
        with pytest.raises(ScenarioError, match=f"process {os.getpid()} holds its lock"):
            run_scenario(scenario(tmp_path), out=out, jobs=1, progress=False, force=True)
    run_scenario(scenario(tmp_path), out=out, jobs=1, progress=False)   # released


def _hold_lock(folder: str, ready, stop) -> None:
    with atomic.FolderLock(folder):
        ready.set()
        stop.wait(60)


def test_lock_held_by_another_process(tmp_path):
    out = tmp_path / "r"
    atomic.output_path(out, folder=True)
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_lock, args=(str(out), ready, stop))
    p.start()
    try:
        assert ready.wait(60)
        res, text = cli("run", scenario(tmp_path), "--out", str(out), "--no-progress", "--force")
        clean_error(res, text, f"process {p.pid}")
    finally:
        stop.set()
        p.join(30)


def test_default_folder_per_scenario_resumes_and_fresh_recomputes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = scenario(tmp_path)
    a = run_scenario(path, jobs=1, progress=False)
    assert Path(a.out_dir) == Path("results") / "tiny" and (Path(a.out_dir) / atomic.MARKER).is_file()
    b = run_scenario(path, jobs=1, progress=False)
    assert b.out_dir == a.out_dir and b.computed_runs == 0 and b.reused_runs > 0
    c = run_scenario(path, jobs=1, progress=False, fresh=True)
    assert c.computed_runs > 0 and c.reused_runs == 0
    with pytest.raises(ScenarioError, match="--fresh"):
        run_scenario(path, ["seed=5"], jobs=1, progress=False)


# ============================================================================ 4/9 cost estimate
def test_check_prints_the_cost_estimate_and_run_refuses_above_the_bound(tmp_path):
    path = scenario(tmp_path)
    res, text = cli("check", path)
    assert res.exit_code == 0 and "cost estimate" in text and "simulated tokens" in text
    big = ["--set", "workload.prompts=1000000", "--set", "workload.max_response_tokens=4096", "--set", "pipeline.steps=50",
           "--set", "workload.response_tokens={kind: lognormal, median: 600, p99: 3000}"]
    for cmd in ("check", "run"):
        res, text = cli(cmd, path, *big)
        clean_error(res, text, "output.max_simulated_tokens", "--set output.max_simulated_tokens=")
    res, text = cli("check", path, *big, "--set", "output.max_simulated_tokens=1e12")
    assert res.exit_code == 0, text


def _tiny_tasks(n: int):
    from specsim.scenario import validate_doc
    from specsim.study.sweep import RunTask

    return [RunTask.of(validate_doc({**copy.deepcopy(TINY_SYNC), "seed": s}, None), 0, "point") for s in range(n)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_progress_inside_each_run_reaches_the_caller_in_order(jobs):
    """Class 9: a run shows a sign of life while it runs, in this process (jobs 1) and from the
    workers of a local pool (jobs 2): per run, monotone reports from 0 to its totals, then its
    result, then the end (None); the results are those of a run without a hook."""
    from specsim.sim.progress import RunProgress
    from specsim.study.executors import execute, run_tasks

    tasks = _tiny_tasks(3)
    events: list[tuple[str, object]] = []
    results: dict[str, dict] = {}

    def on_result(t, r):
        results[t.key] = r
        events.append((t.key, "result"))

    run_tasks(tasks, on_result, jobs=jobs, on_progress=lambda t, p: events.append((t.key, p)), progress_every_s=0.0)
    steps = TINY_SYNC["pipeline"]["steps"]
    total = steps * TINY_SYNC["workload"]["prompts"] * TINY_SYNC["workload"]["group_size"]
    for t in tasks:
        mine = [p for k, p in events if k == t.key]
        reports, tail = mine[:-2], mine[-2:]
        assert tail == ["result", None]
        assert reports[0] == RunProgress(0, steps, 0, total) and reports[-1] == RunProgress(steps, steps, total, total)
        assert all(a.responses_done <= b.responses_done and a.steps_done <= b.steps_done
                   for a, b in itertools.pairwise(reports))
        assert json.dumps(results[t.key], sort_keys=True) == json.dumps(execute(t), sort_keys=True)


def _pid(_task):
    import os

    return {"pid": os.getpid()}


def test_one_worker_pool_serves_several_calls_and_keeps_their_reports_apart():
    """`worker_pool` keeps one local pool for a command's phases (a sweep, then its capacity plan):
    its workers start with it, before any task (they import the simulation while the caller
    plans), the second call runs on the same worker processes (no second start-up), each call
    gets exactly its own tasks' reports and results, and those equal runs without a pool."""
    from specsim.study.executors import execute, run_tasks, worker_pool

    first, second = _tiny_tasks(2), _tiny_tasks(4)[2:]
    seen: dict[int, list] = {1: [], 2: []}
    with worker_pool(2, reports=True) as pool:
        assert pool is not None
        assert len(getattr(pool.executor, "_processes", None) or {}) == 2
        for call, tasks in ((1, first), (2, second)):
            results = {}
            run_tasks(tasks, lambda t, r, out=results: out.__setitem__(t.key, r), jobs=2, pool=pool, progress_every_s=0.0,
                      on_progress=lambda t, p, c=call: seen[c].append(t.key))
            assert set(results) == {t.key for t in tasks}
            for t in tasks:
                assert json.dumps(results[t.key], sort_keys=True) == json.dumps(execute(t), sort_keys=True)
        assert set(seen[1]) == {t.key for t in first} and set(seen[2]) == {t.key for t in second}
        futs = [pool.executor.submit(_pid, None) for _ in range(8)]
        pids = {f.result()["pid"] for f in futs}
        started = set((getattr(pool.executor, "_processes", None) or {}).keys())
        assert pids <= started and len(started) == 2
    with worker_pool(1) as none:
        assert none is None          # one worker runs in this process


def test_follow_ups_run_on_the_pool_and_their_reports_reach_the_caller():
    """run_tasks' follow_up: the tasks returned after a result join the pool's queue; every result
    (given or followed up) is delivered once, equal to a run in this process, and the reports of
    a follow-up task are handed over as that task's (its index in the grown task list)."""
    from specsim.study.executors import execute, run_tasks, worker_pool

    tasks = _tiny_tasks(4)
    given, later = tasks[:2], tasks[2:]
    results: dict[str, dict] = {}
    reported: set[str] = set()
    queued: list[str] = []

    def follow_up(task, result):
        if queued:
            return []
        queued.append(task.key)
        return later

    with worker_pool(2, reports=True) as pool:
        run_tasks(given, lambda t, r: results.__setitem__(t.key, r), jobs=2, pool=pool, progress_every_s=0.0,
                  on_progress=lambda t, p: reported.add(t.key), follow_up=follow_up)
    assert set(results) == {t.key for t in tasks} and len(queued) == 1
    assert reported == {t.key for t in tasks}
    for t in tasks:
        assert json.dumps(results[t.key], sort_keys=True) == json.dumps(execute(t), sort_keys=True)


def test_progress_off_adds_nothing(tmp_path, monkeypatch):
    """Without a display (--no-progress, --format json) no run gets a hook and no queue is made."""
    from specsim.study import executors

    calls = []
    real = executors.execute

    def spy(task, *args, **kwargs):
        calls.append((args, kwargs))
        return real(task)

    monkeypatch.setattr(executors, "execute", spy)
    monkeypatch.setattr(executors.multiprocessing, "get_context", lambda *a: pytest.fail("a pool was started"))
    run_scenario(scenario(tmp_path), out=tmp_path / "o", jobs=1, progress=False)
    assert calls and all(c == ((), {}) for c in calls)
    calls.clear()
    run_scenario(scenario(tmp_path), out=tmp_path / "p", jobs=1, progress=True)
    assert calls and all(callable(kw.get("progress")) for _, kw in calls)


def test_project_reports_progress_inside_each_run(tmp_path):
    from specsim.study.projection import project_run

    got = []
    project_run(load_scenario(scenario(tmp_path)), replicates=1, on_progress=lambda run, p: got.append((run, p)))
    assert {run for run, _ in got} == {("sd", 0), ("ar", 0)}
    for run in (("sd", 0), ("ar", 0)):
        mine = [p for r, p in got if r == run]
        assert mine[-1] is None and None not in mine[:-1]            # each run ends once, last
        assert mine[0].responses_done == 0 and mine[-2].fraction == 1.0


def test_the_progress_row_names_the_runs_in_flight():
    from specsim.sim.progress import RunProgress
    from specsim.study.report.progress import inflight_label

    assert inflight_label([RunProgress(3, 6, 41, 100)]) == "  step 3/6"
    assert inflight_label([RunProgress(3, 6, 41, 100), RunProgress(1, 6, 10, 100)]) == "  2 runs, step 4/12"


# ============================================================================ 5 check passes, run crashes
@pytest.mark.parametrize("override, field", [
    ("training.mfu=5e-324", "training.mfu"), ("drafter.heterogeneity=1e-308", "drafter.heterogeneity"),
    ("output.capacity.rollout_gpus=[0]", "output.capacity.rollout_gpus"),
    ("speculation.tree_branching=[1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]",
     "speculation.tree_branching"),
])
def test_values_that_used_to_pass_check(tmp_path, override, field):
    res, text = cli("check", scenario(tmp_path), "--set", override)
    clean_error(res, text, field)


def test_kv_fit_counts_tree_tokens(tmp_path):
    # the chain's k=2 fits a 32K model at max_prompt 2048 + response 30600; a 63-token tree does not
    base = ["--set", "workload.max_response_tokens=30600", "--set", "rollout.kv_capacity_tokens=32700",
            "--set", "pipeline.mode=async", "--set", "training.gpus=8", "--set", "training.tp=2"]
    res, text = cli("check", scenario(tmp_path), *base)
    assert res.exit_code == 0, text
    res, text = cli("check", scenario(tmp_path), *base, "--set", "speculation.k=2",
                    "--set", "speculation.tree_branching=[7, 8]")
    clean_error(res, text, "rollout.kv_capacity_tokens", "32712")


# ============================================================================ 6 errors say what happened
def test_os_errors_say_what_the_os_said():
    for code, words in ((errno.ENOSPC, "no space left"), (errno.EFBIG, "file too large"),
                        (errno.ECONNREFUSED, "connection refused")):
        exc = OSError(code, os.strerror(code), "/some/file")
        assert words in os_reason(exc) and words in error_message(exc)
        assert "an existing, readable file" not in error_message(exc)


def test_validate_out_on_a_full_disk_says_disk_full(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x"))

    path = scenario(tmp_path)
    monkeypatch.setattr(atomic, "write_text", full)
    with pytest.raises(ScenarioError, match="disk full"):
        run_scenario(path, out=tmp_path / "r", jobs=1, progress=False)


def test_no_sweep_errors_never_say_sweep_and_bounds_are_sane(tmp_path):
    res, text = cli("check", scenario(tmp_path), "--set", "rollout.tp=3")
    clean_error(res, text, "rollout.tp")
    assert "s.yaml: sweep" not in text
    res, text = cli("check", scenario(tmp_path), "--set", "workload.max_prompt_tokens=10000000")
    clean_error(res, text, "workload.max_prompt_tokens")
    assert "<= -" not in text


# ============================================================================ 7 silent coercion
def test_duplicate_yaml_keys_are_an_error(tmp_path):
    with pytest.raises(yaml.YAMLError, match="duplicate key 'k'"):
        load_yaml_text("speculation:\n  k: 2\n  k: 5\n")
    p = Path(scenario(tmp_path))
    p.write_text(p.read_text(encoding="utf-8") + "seed: 3\n", encoding="utf-8")
    res, text = cli("check", str(p))
    clean_error(res, text, "duplicate key 'seed'")


def test_sweep_values_equal_after_coercion_and_conflicting_sets(tmp_path):
    path = scenario(tmp_path)
    res, text = cli("check", path, "--set", 'sweep.speculation.k=[3, 3.0, "3"]')
    clean_error(res, text, "sweep.speculation.k", "once")
    res, text = cli("check", path, "--set",
                    "workload.response_tokens={kind: lognormal, median: 40, p99: 120, mu: 3, sigma: 1}")
    clean_error(res, text, "workload.response_tokens")
    res, text = cli("check", path, "--set", "workload.response_tokens={kind: fixed, tokens: 40, median: 9}")
    clean_error(res, text, "workload.response_tokens.median")


def test_ignored_fields_are_warned(tmp_path):
    res, text = cli("check", scenario(tmp_path), "--set", "pipeline.policy_lag=3")
    assert res.exit_code == 0 and "pipeline.policy_lag is ignored" in text
    res, text = cli("check", scenario(tmp_path), "--set", "drafter.general_tau=2.5")
    assert res.exit_code == 0 and "drafter.general_tau is ignored" in text


# ============================================================================ 8 Ray edges
def test_ray_address_where_a_non_ray_service_listens_fails_in_seconds(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            time.sleep(0.2)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        t0 = time.monotonic()
        res, text = cli("run", scenario(tmp_path), "--backend", "ray", "--address", f"127.0.0.1:{port}")
        clean_error(res, text, "--address", "not a Ray cluster")
        assert time.monotonic() - t0 < 15
        res, text = cli("run", scenario(tmp_path), "--backend", "ray", "--address", f"ray://127.0.0.1:{port}")
        clean_error(res, text, "--address", "ray://")
    finally:
        srv.close()


def test_ray_tasks_ship_absolute_paths_and_jobs_caps_them(tmp_path, monkeypatch):
    from specsim.study import executors
    from specsim.study.plan import plan_study

    (tmp_path / "l.csv").write_text("50\n60\n70\n", encoding="utf-8")
    path = scenario(tmp_path, workload__response_tokens={"kind": "empirical", "path": "l.csv"})
    monkeypatch.chdir("/")
    sc = load_scenario(path)
    task = next(iter(plan_study(sc).tasks.values()))
    from dataclasses import asdict

    shipped = executors.shippable(asdict(task))
    assert shipped["doc"]["workload"]["response_tokens"]["path"] == str(tmp_path / "l.csv")
    assert Path(shipped["file"]).is_absolute()
    assert executors.check_backend("ray", 10**6, None) <= executors.available_cpus()


# ============================================================================ 10 streams and locale
def _specsim(*args: str, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "specsim", *args], env=env or ENV, capture_output=True, timeout=300, check=False,
                          **kw)


def test_head_one_and_closed_stdout_exit_quietly(tmp_path):
    path = scenario(tmp_path)
    cmd = f"{sys.executable} -m specsim show scenario {path} | head -1; exit ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", cmd], env=ENV, capture_output=True, timeout=300, check=False)
    assert res.returncode == 0 and b"Traceback" not in res.stderr and b"error" not in res.stderr
    res = subprocess.run(["bash", "-c", f"{sys.executable} -m specsim check {path} >&-"], env=ENV, check=False,
                         capture_output=True, timeout=300)
    assert res.returncode == 0 and b"internal error" not in res.stderr, res.stderr


def test_c_locale_without_utf8_mode(tmp_path):
    env = {**ENV, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    res = _specsim("check", scenario(tmp_path), env=env)
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    res = _specsim("list", "models", env=env)
    assert res.returncode == 0, res.stderr


# ============================================================================ issue 46, round four
# (the high-severity classes have their own files: tests/study/test_report_security.py,
# tests/cli/test_output_guard.py, tests/catalog/test_hf_config_validation.py,
# tests/catalog/test_hardware_bounds.py, tests/workload/test_engine_metrics_strict.py,
# tests/study/test_plain_outputs.py; the medium and low classes are here)
HUGE = "9" * 400


def test_the_cost_bound_holds_in_plan_project_and_explain(tmp_path):
    path = scenario(tmp_path)
    low = ["--set", "output.max_simulated_tokens=10"]
    for args in (["plan", path, "--no-progress", "--out", str(tmp_path / "p")],
                 ["project", path, "--no-progress", "--out", str(tmp_path / "pr")],
                 ["explain", path, "--out", str(tmp_path / "e")]):
        res, text = cli(*args, *low)
        clean_error(res, text, "output.max_simulated_tokens", "--set output.max_simulated_tokens=")
    res, text = cli("project", path, "--replicates", "100000", "--no-progress", "--out", str(tmp_path / "pr"))
    clean_error(res, text, "--replicates", "1,000")
    res, text = cli("project", path, "--replicates", "1000", "--no-progress", "--out", str(tmp_path / "pr"), "--set",
                    "output.max_simulated_tokens=1e5")
    clean_error(res, text, "output.max_simulated_tokens", "2,000 pipeline runs")


def test_plan_budgets_and_empty_lists_are_refused_where_they_are_written(tmp_path):
    path = scenario(tmp_path)
    t0 = time.perf_counter()
    res, text = cli("plan", path, "--gpus", "8:100000:8", "--no-progress", "--out", str(tmp_path / "p"))
    clean_error(res, text, "plan.total_gpus", "256")
    assert time.perf_counter() - t0 < 30
    for field in ("plan.layouts", "plan.hardware"):
        res, text = cli("plan", path, "--set", f"{field}=[]", "--no-progress", "--out", str(tmp_path / "p"))
        clean_error(res, text, field, "non-empty")
        assert "max_engine_gpus" not in text


def test_check_refuses_what_plan_refuses(tmp_path):
    path = scenario(tmp_path)
    res, text = cli("check", path, "--set", "plan.rollout_shares=[0.5]")
    clean_error(res, text, "plan.rollout_shares", "sync")
    res, text = cli("check", path, "--set", "plan.k=[0, 3]", "--set", "output.max_simulated_tokens=10")
    clean_error(res, text, "output.max_simulated_tokens")


@pytest.mark.parametrize("where", ["scenario", "set", "profile", "lengths_jsonl", "lengths_csv", "metrics_json",
                                   "metrics_prom", "config"])
def test_integers_of_400_digits_are_a_clean_error_in_every_reader(tmp_path, where):
    path = scenario(tmp_path)
    args = ["check", path]
    if where == "scenario":
        text = Path(path).read_text(encoding="utf-8")
        assert "seed: 0" in text
        Path(path).write_text(text.replace("seed: 0", f"seed: {HUGE}"), encoding="utf-8")
    elif where == "set":
        args += ["--set", f"workload.prompts={HUGE}"]
    elif where == "profile":
        prof = tmp_path / "hw.yaml"
        doc = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
        doc["nvlink_domain_gpus"] = 8
        prof.write_text(yaml.safe_dump(doc).replace("nvlink_domain_gpus: 8", f"nvlink_domain_gpus: {HUGE}"),
                        encoding="utf-8")
        args += ["--set", f"hardware={prof}"]
    elif where.startswith("lengths"):
        f = tmp_path / ("l.jsonl" if where == "lengths_jsonl" else "l.csv")
        f.write_text(f'{{"length": {HUGE}}}\n' if where == "lengths_jsonl" else f"length\n5\n{HUGE}\n", encoding="utf-8")
        args += ["--set", f"workload.response_tokens={{kind: empirical, path: {f}}}"]
    elif where.startswith("metrics"):
        f = tmp_path / "m.prom"
        f.write_text(f'{{"spec_decode_num_drafts": {HUGE}}}' if where == "metrics_json" else
                     f'vllm:spec_decode_num_drafts_total{{engine="0"}} {HUGE}\n', encoding="utf-8")
        args += ["--set", f"drafter={{kind: eagle3, tau_from: {f}, tau_at_k: 3}}"]
    else:
        d = tmp_path / "m"
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + HUGE + "}", encoding="utf-8")
        args += ["--set", f"model={d}"]
    res, text = cli(*args)
    clean_error(res, text)
    assert "error:" in text


def test_point_names_each_field_once_and_reads_yaml_12(tmp_path):
    from specsim.explain.ladder import parse_point

    with pytest.raises(SpecError, match="named twice"):
        parse_point("k=3,k=5")
    with pytest.raises(SpecError, match="named twice"):
        parse_point("k=3,speculation.k=5")
    assert parse_point("k=3,policy=off") == {"speculation.k": 3, "speculation.policy": "off"}


@pytest.mark.parametrize("word", ["1", "yes", "on", "0", "no"])
def test_booleans_take_only_true_or_false(tmp_path, word):
    res, text = cli("check", scenario(tmp_path), "--set", f"output.plots={word}")
    clean_error(res, text, "output.plots", "true or false")


def test_length_files_keep_their_rows(tmp_path):
    from specsim.workload.lengths.checks import read_lengths_file

    f = tmp_path / "l.csv"
    f.write_text("12x\n5\n6\n", encoding="utf-8")
    with pytest.raises(SpecError, match="line 1"):
        read_lengths_file(f, "x")
    f.write_text("5\n6\f7\n8\n", encoding="utf-8")
    with pytest.raises(SpecError, match="line 2"):
        read_lengths_file(f, "x")
    f.write_text("length\n5\n6\n", encoding="utf-8")
    assert list(read_lengths_file(f, "x")) == [5.0, 6.0]


def test_a_headed_ten_million_row_length_file_takes_the_fast_path(tmp_path):
    from specsim.workload.lengths.checks import read_lengths_file

    f = tmp_path / "l.csv"
    f.write_text("response_length\n" + "123\n" * 10_000_000, encoding="utf-8")
    t0 = time.perf_counter()
    assert read_lengths_file(f, "x").size == 10_000_000
    assert time.perf_counter() - t0 < 20


def test_errors_blame_the_field_that_is_wrong(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4}),
        encoding="utf-8")
    res, text = cli("check", scenario(tmp_path), "--set", f"model={d}")
    clean_error(res, text, "speculation.k")
    assert "<= -" not in text
    metrics = tmp_path / "s.log"
    metrics.write_text("[2025] Decode batch. accept len: 2.5, gen throughput: 9\n", encoding="utf-8")
    res, text = cli("check", scenario(tmp_path), "--set", f"drafter={{kind: eagle3, tau_from: {metrics}}}")
    clean_error(res, text, "drafter.tau_at_k", "not given")
    assert "got None" not in text


def test_a_bogus_mplbackend_does_not_reach_the_plots(tmp_path):
    env = {**ENV, "MPLBACKEND": "bogus"}
    path = scenario(tmp_path, output__plots=True)
    res = _specsim("run", path, "--no-progress", "--out", str(tmp_path / "r"), env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "r" / "report.html").is_file()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_shuts_the_pool_down_without_leaked_semaphores(tmp_path, sigint):
    """SIGTERM mid-sweep: exit 143 with one line, the pool shut down (no leaked semaphores). Also
    where SIGINT is ignored, as a non-interactive shell starts a background job (`specsim run ... &`
    in a script): SIGTERM is still handled there (a background job is what `kill` ends)."""
    path = scenario(tmp_path, sweep={"speculation.k": [0, 1, 2, 3, 4, 5, 6, 7], "replicates": 20})
    cmd = [sys.executable, "-m", "specsim", "run", path, "--out", str(tmp_path / "out"), "--jobs", "2", "--no-progress"]
    if sigint == "ignored":   # as sh starts `cmd &`: SIGINT ignored, kept across exec (the pid stays the command's)
        cmd = ["bash", "-c", 'trap "" INT; exec "$@"', "bash", *cmd]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while len(children.read_text().split()) < 2 if children.exists() else True:
        assert proc.poll() is None and time.monotonic() < deadline, "the pool never started"
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(15)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert b"leaked semaphore" not in err and b"Traceback" not in err and b"terminated" in err, err
