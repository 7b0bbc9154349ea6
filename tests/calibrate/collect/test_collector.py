"""The GPU kernel collector (`specsim calibrate collect`): option checks without torch, and (when
torch is installed) a tiny CPU run whose output read_kernel_trace accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.calibrate.collect import collector as col
from specsim.calibrate.traces.io import read_kernel_trace
from specsim.cli.app import app
from specsim.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]


def test_importing_specsim_and_the_collector_imports_no_torch():
    code = ("import sys; import specsim, specsim.calibrate.traces.io, specsim.calibrate, specsim.cli.app, "
            "specsim.calibrate.collect.collector; sys.exit(1 if 'torch' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


def test_spec_and_plan():
    a = col.collect_spec(out="x.csv", tiny=True, batches="1,8", contexts="0,32", k="3")
    assert a.batches == (1, 8) and a.contexts == (0, 32) and a.k == (3,) and a.repeats == 3
    shapes = col.plan(a)
    ops = [s.op for s in shapes]
    assert ops[0] == "decode" and set(ops) == {"decode", "prefill", "verify", "draft"}
    assert all(s.q == 4 for s in shapes if s.op == "verify")
    assert all(s.q == 1 for s in shapes if s.op in ("decode", "draft"))
    no_sd = col.collect_spec(out="x.csv", k="")
    assert no_sd.k == () and {s.op for s in col.plan(no_sd)} == {"decode", "prefill"}
    for bad, option in (({"batches": "a,b"}, "--batches"), ({"batches": "0"}, "--batches"),
                        ({"budget_s": 0}, "--budget-s"), ({"repeats": 0}, "--repeats"), ({"dtype": "fp8"}, "--dtype"),
                        ({"out": ""}, "--out")):
        with pytest.raises(SpecError) as exc:
            col.collect_spec(**{"out": "x", **bad})
        assert exc.value.field == option


def test_model_config_refuses_moe_and_bad_layers():
    with pytest.raises(SpecError, match="dense model"):
        col.model_config(col.collect_spec(out="x", model="Qwen3-30B-A3B"))
    with pytest.raises(SpecError, match="--layers"):
        col.model_config(col.collect_spec(out="x", model="Qwen3-8B", layers=99))
    with pytest.raises(SpecError, match="did you mean"):
        col.model_config(col.collect_spec(out="x", model="Qwen3-8b-typo"))
    spec, draft = col.model_config(col.collect_spec(out="x", model="Qwen3-8B", layers=2))
    assert spec.layers == 36 and draft.vocab == 32000 and draft.layers == 1


def test_guess_hardware():
    assert col.guess_hardware("NVIDIA H200") == "h200_sxm"
    assert col.guess_hardware("NVIDIA H100 80GB HBM3") == "h100_sxm"
    assert col.guess_hardware("NVIDIA GB200") == "gb200"
    assert col.guess_hardware("NVIDIA A100") == ""


def test_the_command_refuses_bad_options_cleanly():
    res = CliRunner().invoke(app, ["calibrate", "collect", "--out", "x.csv", "--batches", "1,x"])
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exit_code == 2 and "--batches" in text and "Traceback" not in text


def test_tiny_cpu_run_writes_valid_kernel_trace(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "tiny_kernel.csv"
    res = CliRunner().invoke(app, ["calibrate", "collect", "--tiny", "--device", "cpu", "--out", str(out),
                                   "--budget-s", "60"])
    assert res.exit_code == 0, res.output
    df = read_kernel_trace(out)
    assert set(df["op"]) == {"decode", "prefill", "verify", "draft"}
    assert (df["time_s"] > 0).all() and (df["model"] == "tiny").all() and (df["tp"] == 1).all()
    assert df["machine"].str.contains("torch").all()
    assert (df.loc[df["op"] == "verify", "q_per_seq"] >= 2).all()
    meta = df.attrs["meta"]
    assert meta["layers_timed"] == "2 of 2" and meta["stopped_early"] == "no"
    assert "decode" in res.output and "wrote" in res.output


def test_tiny_cpu_layer_scaling_and_budget(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "scaled.jsonl"
    spec = col.collect_spec(out=out, tiny=True, device="cpu", layers=1, k="3", no_draft=True)
    assert col.collect_trace(spec, log=lambda _: None).rows > 0
    df = read_kernel_trace(out)
    assert "1 of 2" in df.attrs["meta"]["layers_timed"] and "draft" not in set(df["op"])
    # a budget too small for even one shape: nothing measured, nothing written
    none = tmp_path / "none.csv"
    result = col.collect_trace(col.collect_spec(out=none, tiny=True, device="cpu", budget_s=1e-9), log=lambda _: None)
    assert result.path is None and result.rows == 0 and not none.exists()


def test_guess_hardware_reads_the_profiles_device_names(tmp_path, monkeypatch):
    """The names live in the profiles (`device_names`), not in code: B200 is b200, GB200 gb200
    (the longer name wins although the device name contains both)."""
    from specsim.catalog.hardware import load_hardware

    assert load_hardware("b200").device_names == ("B200",) and load_hardware("gb200").device_names == ("GB200",)
    assert col.guess_hardware("NVIDIA B200") == "b200" and col.guess_hardware("nvidia gb200") == "gb200"
