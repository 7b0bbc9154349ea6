"""`rollout.inprocess_engine`: an engine whose core runs in its caller's process (NeMo-RL's
`LLM.generate` with VLLM_ENABLE_V1_MULTIPROCESSING=0) pays the profile's
`efficiency.inprocess_seq_overhead_us` per running sequence on every step, on top of the
profile's own per-sequence overhead; a separate engine process (the default) does not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog.hardware import PROFILE_DIR, load_hardware
from specsim.scenario import load_scenario
from specsim.world.resolve import engine_host_hardware


@settings(max_examples=30, deadline=None)
@given(extra_us=st.floats(min_value=0.0, max_value=1e3), per_seq_us=st.floats(min_value=0.0, max_value=100.0))
def test_inprocess_adds_its_host_time_per_sequence_and_nothing_else(extra_us, per_seq_us):
    hw = load_hardware("h100_sxm")
    hw = hw.with_efficiency(inprocess_seq_overhead_s=extra_us * 1e-6, per_seq_overhead_s=per_seq_us * 1e-6)
    separate = engine_host_hardware(hw, False)
    inproc = engine_host_hardware(hw, True)
    assert separate is hw
    assert abs(inproc.efficiency.per_seq_overhead_s - (per_seq_us + extra_us) * 1e-6) <= 1e-15
    others = {f.name for f in dataclasses.fields(hw.efficiency)} - {"per_seq_overhead_s"}
    assert all(getattr(inproc.efficiency, f) == getattr(hw.efficiency, f) for f in others)
    assert inproc.name == hw.name and inproc.peak_flops == hw.peak_flops


def test_a_profile_without_the_key_prices_no_inprocess_time(tmp_path):
    doc = yaml.safe_load((PROFILE_DIR / "a100_sxm.yaml").read_text(encoding="utf-8"))
    del doc["efficiency"]["inprocess_seq_overhead_us"]
    path = tmp_path / "a100_without.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    hw = load_hardware(str(path))
    assert hw.efficiency.inprocess_seq_overhead_s == 0.0
    assert engine_host_hardware(hw, True) is hw


def test_the_nemo_rl_sync_rows_that_run_vllm_in_process_say_so():
    """The recipes that leave `vllm_cfg.async_engine` false (Llama and 30B sync) run in-process;
    the 235B sync recipes and every async recipe set it true."""
    folder = Path(__file__).resolve().parents[2] / "calibration" / "targets" / "nemo_rl_performance"
    inproc = {p.stem for p in folder.glob("*.yaml") if load_scenario(str(p)).rollout.inprocess_engine}
    assert inproc == {"v06_gb200_30b_sync_16", "v06_h100_30b_sync_32", "v05_h100_llama8b_sync_16",
                      "v05_gb200_llama8b_sync_8"}
