"""Crash safety: a sweep killed with SIGKILL mid-run and rerun into the same folder ends with every
point exactly once and the same values as an uninterrupted run (a real subprocess, a real kill)."""

from __future__ import annotations

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


def _run(scenario: Path, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specsim", "run", str(scenario), "--out", str(out), "--jobs", "1",
           "--no-progress", "--format", "json"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _finished_points(out: Path) -> int:
    return len(list((out / "points").glob("*.json"))) if (out / "points").is_dir() else 0


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
def test_sigkill_mid_sweep_then_resume(tmp_path):
    scenario = tmp_path / "killme.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    total = 16

    clean = tmp_path / "clean"
    proc = _run(scenario, clean)
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()

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
    leftovers = [p for p in killed.rglob("*") if p.name.startswith(".") or p.suffix in (".tmp", ".part")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


@pytest.mark.skipif(os.name != "posix", reason="SIGINT delivery as on a terminal is POSIX")
def test_ctrl_c_mid_sweep_exits_130_cleanly_and_resumes(tmp_path):
    """Ctrl-C (SIGINT): exit 130 with one line saying how to resume, no traceback; the rerun
    completes the same table as an uninterrupted run."""
    scenario = tmp_path / "killme.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    clean = tmp_path / "clean"
    assert _run(scenario, clean).wait(timeout=300) == 0

    out = tmp_path / "interrupted"
    proc = _run(scenario, out)
    deadline = time.monotonic() + 240
    while _finished_points(out) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 130
    assert "interrupted" in err and "resume" in err and "Traceback" not in err
    assert _run(scenario, out).wait(timeout=300) == 0
    assert (clean / "points.csv").read_bytes() == (out / "points.csv").read_bytes()
