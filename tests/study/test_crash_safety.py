"""Crash safety: a sweep killed with SIGKILL mid-run and rerun into the same folder ends with every
point exactly once and the same values as an uninterrupted run (a real subprocess, a real kill)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

SCENARIO = {
    "name": "killme", "seed": 7, "hardware": "gb200", "model": "Qwen3-8B",
    "rollout": {"gpus": 2, "tp": 1, "max_batch": 32},
    "workload": {"prompts": 24, "group_size": 4, "max_response_tokens": 2048,
                 "prompt_tokens": {"kind": "fixed", "tokens": 64},
                 "response_tokens": {"kind": "lognormal", "median": 300, "p99": 1800}},
    "drafter": {"kind": "eagle3", "tau": 2.4, "tau_at_k": 3},
    "speculation": {"policy": "always", "k": 3},
    "pipeline": {"mode": "sync", "steps": 3, "warmup_steps": 1},
    "sweep": {"speculation.k": [0, 1, 2, 3, 4, 5, 6, 7], "replicates": 2},
    "output": {"plots": False},
}


@pytest.fixture
def sigint_deliverable():
    """Python's Ctrl-C handler for the test, also when the test run itself was started with SIGINT
    ignored (a background job: `cmd &` in a non-interactive shell, nohup), which a child process
    would inherit and Python would keep: then no Ctrl-C could reach it, by design. With a handler
    here, a child starts with the default disposition and installs its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _run(scenario: Path, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specsim", "run", str(scenario), "--out", str(out), "--jobs", "1",
           "--no-progress", "--format", "json"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """The uninterrupted sweep (one `specsim run` process), the table both interrupted runs must end with."""
    scenario = tmp_path_factory.mktemp("clean") / "killme.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = scenario.parent / "clean"
    proc = _run(scenario, out)
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    return out


def _finished_points(out: Path) -> int:
    return len(list((out / "points").glob("*.json"))) if (out / "points").is_dir() else 0


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
def test_sigkill_mid_sweep_then_resume(tmp_path, clean):
    scenario = tmp_path / "killme.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    total = 16

    killed = tmp_path / "killed"
    proc = _run(scenario, killed)
    deadline = time.monotonic() + 240
    while _finished_points(killed) < 3:
        assert proc.poll() is None, "the sweep finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done_at_kill = _finished_points(killed)
    assert proc.returncode == -signal.SIGKILL
    assert 3 <= done_at_kill < total

    proc = _run(scenario, killed)
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()

    a = pd.read_csv(clean / "points.csv")
    b = pd.read_csv(killed / "points.csv")
    assert len(b) == total
    assert not b.duplicated(subset=["speculation.k", "replicate"]).any(), "a point appears twice"
    assert (clean / "points.csv").read_bytes() == (killed / "points.csv").read_bytes()
    assert a.equals(b)
    kept = (".specsim", ".specsim.lock")   # the folder's marker and lock file stay, by design (docs/results.md)
    leftovers = [p for p in killed.rglob("*")
                 if (p.name.startswith(".") and p.name not in kept) or p.suffix in (".tmp", ".part")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


@pytest.mark.skipif(os.name != "posix", reason="SIGINT delivery as on a terminal is POSIX")
def test_ctrl_c_mid_sweep_exits_130_cleanly_and_resumes(tmp_path, sigint_deliverable, clean):
    """Ctrl-C (SIGINT): exit 130 with one line saying how to resume, no traceback; the rerun
    completes the same table as an uninterrupted run."""
    scenario = tmp_path / "killme.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))

    out = tmp_path / "interrupted"
    proc = _run(scenario, out)
    deadline = time.monotonic() + 240
    while _finished_points(out) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err and "Traceback" not in err
    assert _run(scenario, out).wait(timeout=300) == 0
    assert (clean / "points.csv").read_bytes() == (out / "points.csv").read_bytes()


class SigintInFinalizer:
    """Sends this process SIGINT from its finalizer, where Python drops the KeyboardInterrupt."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)   # the Python-level handler runs here; its KeyboardInterrupt is dropped


@pytest.mark.skipif(os.name != "posix", reason="SIGINT is POSIX")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")   # the dropped interrupt itself
def test_ctrl_c_swallowed_by_a_finalizer_still_stops_the_sweep(monkeypatch, sigint_deliverable):
    """Python drops an exception raised inside a finalizer ("Exception ignored in ..."): a Ctrl-C
    whose handler runs while a collected object is being finalized would be lost and the sweep
    would run to its end (seen once in 40 Ctrl-Cs at random times under load: "Exception ignored",
    exit 0). The task loop latches the signal and stops right after the result in hand is
    delivered (and saved)."""
    from specsim.study import executors
    from specsim.study.sweep import RunTask

    def fake_execute(task):
        if task.key == "k1":
            obj = SigintInFinalizer()
            del obj
        return {"key": task.key}

    monkeypatch.setattr(executors, "execute", fake_execute)
    delivered = []
    tasks = [RunTask(f"k{i}", {}, None, 0) for i in range(1, 5)]
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        executors.run_tasks(tasks, lambda t, r: delivered.append(r["key"]), jobs=1)
    assert delivered == ["k1"]                      # the result in hand is kept, then the loop stops
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back


@pytest.mark.skipif(os.name != "posix", reason="SIGINT is POSIX")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_command_whose_ctrl_c_was_dropped_ends_as_interrupted(capsys, sigint_deliverable):
    """Outside a task loop (planning, reports) a dropped Ctrl-C cannot stop the work at once, but the
    command must not then report success: it ends with the interrupt line and exit 130."""
    import typer

    from specsim.cli.common import EXIT_INTERRUPTED, user_errors

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(typer.Exit) as exc, user_errors():
        obj = SigintInFinalizer()
        del obj
    assert exc.value.exit_code == EXIT_INTERRUPTED == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before


# ============================================================================ workers die with their parent
def _children(pid: int) -> dict[int, str]:
    """Live child processes of `pid`: {pid: command line}."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_parent_leaves_no_orphaned_workers(tmp_path, sig):
    """#15 row 10: SIGKILL or SIGTERM of `specsim run --jobs 2`: every worker (and multiprocessing's
    resource tracker) is gone within a few seconds."""
    from specsim.study.executors import available_cpus

    if available_cpus() < 2:
        pytest.skip("a pool needs 2 CPUs")
    scenario = tmp_path / "killme.yaml"
    big = {**SCENARIO, "sweep": {"speculation.k": [0, 1, 2, 3, 4, 5, 6, 7], "replicates": 20}}
    scenario.write_text(yaml.safe_dump(big))
    cmd = [sys.executable, "-m", "specsim", "run", str(scenario), "--out", str(tmp_path / "out"), "--jobs", "2",
           "--no-progress", "--format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: dict[int, str] = {}
    while len([c for c in workers.values() if "spawn_main" in c]) < 2:
        assert proc.poll() is None, "the run ended before its workers started"
        assert time.monotonic() < deadline, "workers never started"
        time.sleep(0.05)
        workers = _children(proc.pid)
    time.sleep(0.3)
    workers = _children(proc.pid)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {p: c for p, c in workers.items() if _alive(p)}
    for p in left:   # do not leave them behind if the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"orphaned after {sig.name}: {left}"


def test_ctrl_c_while_the_command_line_is_still_importing_exits_130_without_a_traceback(monkeypatch, capsys):
    """The console script imports pandas/scipy/matplotlib before any command handler exists: a
    Ctrl-C there must end like one inside a command (exit 130, one line), not with a traceback."""
    import builtins

    from specsim.cli import launch as _launch
    from specsim.cli.common import EXIT_INTERRUPTED

    real_import = builtins.__import__

    def interrupted_import(name, *args, **kwargs):
        if name == "specsim.cli.app":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted_import)
    with pytest.raises(SystemExit) as exc:
        _launch.main()
    assert exc.value.code == EXIT_INTERRUPTED == _launch.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err == "interrupted\n"


@pytest.mark.skipif(os.name != "posix", reason="SIGINT is POSIX")
def test_a_signal_while_the_pool_starts_waits_until_every_worker_has_its_start_up_data(monkeypatch,
                                                                                        sigint_deliverable):
    """A spawned worker reads its start-up data from a pipe its parent writes after starting it; a
    Ctrl-C raised in between would leave it half written, and the worker would print
    multiprocessing's "EOFError: Ran out of input" traceback after the command's last line. The
    pool's start defers the signal: it arrives once both workers are started, and the pool is then
    shut down."""
    from concurrent.futures import ProcessPoolExecutor

    from specsim.study import executors

    submits = []
    real_submit = ProcessPoolExecutor.submit

    def submit(self, fn, *args, **kwargs):
        submits.append(fn)
        if len(submits) == 1:
            signal.raise_signal(signal.SIGINT)      # lands while the first worker is being started
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", submit)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), executors.worker_pool(2) as pool:
        pytest.fail(f"the Ctrl-C must arrive as the pool's start ends, not after ({pool})")
    assert len(submits) == 2                        # both workers started before it arrived
    assert signal.getsignal(signal.SIGINT) is before
    assert not multiprocessing.active_children()    # and the pool was shut down


@pytest.mark.skipif(os.name != "posix", reason="signals are POSIX")
def test_deferred_signals_arrive_at_the_end_and_an_ignored_one_stays_ignored(sigint_deliverable):
    from specsim.study.executors import stop_signals_deferred

    with pytest.raises(KeyboardInterrupt), stop_signals_deferred():
        signal.raise_signal(signal.SIGINT)
        reached = True                             # nothing raised inside the block
    assert reached
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_signals_deferred():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
