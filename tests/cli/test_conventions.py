"""CLI conventions that hold for every command: JSON with stable snake_case keys (units in the
names), no silent override of a swept field, shell completion."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
THINK = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
SWEPT = str(ROOT / "scenarios" / "235b_async.yaml")
KEY = re.compile(r"[a-z0-9][a-z0-9_.]*")   # identifiers: no spaces, capitals or unit labels


def _json(*args) -> object:
    res = CliRunner().invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _bad_keys(obj, path="") -> list[str]:
    if isinstance(obj, dict):
        return [f"{path}.{k}" for k in obj if not KEY.fullmatch(str(k))] + \
            [b for k, v in obj.items() for b in _bad_keys(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [b for v in obj for b in _bad_keys(v, f"{path}[]")]
    return []


@pytest.mark.parametrize("args", [
    ("list", "hardware"), ("list", "models"),
    ("show", "model", "Qwen3-8B", "--hardware", "h100_sxm"),
    ("show", "drafter", "--tau", "3.0"),
    ("show", "hardware", "h100_sxm"),
    ("show", "lengths", THINK),
    ("check", THINK),
], ids=lambda a: " ".join(a[:2]))
def test_json_keys_are_snake_case(args):
    assert _bad_keys(_json(*args)) == []


def test_listings_carry_units_in_their_keys():
    hw = _json("list", "hardware")["hardware"]
    assert {"hbm_gb", "hbm_tb_per_s", "bf16_dense_tflops", "nvlink_gb_per_s_per_direction"} <= set(hw[0])
    models = _json("list", "models")["models"]
    assert all(m["total_params"] >= m["active_params"] > 0 for m in models)


def test_a_set_on_a_swept_field_is_refused_and_the_sweep_can_be_changed():
    res = CliRunner().invoke(app, ["check", SWEPT, "--set", "speculation.k=9"])
    assert res.exit_code == 2
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "--set speculation.k" in text and "sweep.speculation.k" in text and "Traceback" not in text
    info = _json("check", SWEPT, "--set", "sweep.speculation.k=[0, 9]")
    assert info["sweep_rows"] == 2 * 5 * 3          # k x policy lag x replicates
    assert _json("check", SWEPT, "--set", "sweep={}", "--set", "speculation.k=4")["sweep_rows"] == 1


def test_shell_completion_script():
    """The bash completion script. Typer detects the user's shell from the process's ancestors
    (a shell above it in a terminal; a CI runner may have none, and `--show-completion` then
    takes no value); with detection off (typer's own switch for tests) the shell is the
    option's value, whatever runs the suite."""
    env = {"PATH": "/usr/bin:/bin", "SHELL": "/bin/bash", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    out = subprocess.run([sys.executable, "-m", "specsim", "--show-completion", "bash"], capture_output=True,
                         text=True, timeout=60, check=False, env=env)
    assert out.returncode == 0 and "complete" in out.stdout and "specsim" in out.stdout


def test_the_main_job_passes_check():
    """README command 1 runs scenarios/235b_async.yaml on its defaults: every bound (the cost
    estimate's included) lets it through."""
    res = CliRunner().invoke(app, ["check", SWEPT, "--format", "json"])
    assert res.exit_code == 0, res.output
