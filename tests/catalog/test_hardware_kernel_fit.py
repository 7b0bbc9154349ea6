"""A hardware profile's `kernel_fit:` subtree is as strict as the rest of the profile
(specsim/catalog/hardware.py): known keys only, every number finite and inside its physical range,
errors naming the file, the field path, the value and what is allowed."""

import copy
import math

import pytest
import typer.testing
import yaml

from specsim.catalog.hardware import PROFILE_DIR, list_hardware, load_hardware
from specsim.cli.app import app
from specsim.errors import SpecError

A100 = yaml.safe_load((PROFILE_DIR / "a100_sxm.yaml").read_text(encoding="utf-8"))   # has every block
H100 = yaml.safe_load((PROFILE_DIR / "h100_sxm.yaml").read_text(encoding="utf-8"))   # fp8, moe, moe_shapes
SHAPE = next(iter(H100["kernel_fit"]["moe_shapes"]))


def _set(doc: dict, path: str, value) -> dict:
    doc = copy.deepcopy(doc)
    cur = doc
    *parents, leaf = path.split(".")
    for part in parents:
        cur = cur[part]
    cur[leaf] = value
    return doc


HOSTILE = [
    # (profile, field path, hostile value, words of what is allowed)
    (A100, "kernel_fit.gemm.bf16.latency_us", float("inf"), "[0, 10000] µs"),
    (A100, "kernel_fit.gemm.bf16.latency_us", -1.0, "[0, 10000] µs"),
    (A100, "kernel_fit.gemm.bf16.latency_us", 1e7, "[0, 10000] µs"),             # a 10-second launch
    (A100, "kernel_fit.gemm.bf16.flops_eff_max", 0.0, "(0, 1]"),
    (A100, "kernel_fit.gemm.bf16.flops_eff_max", 2.0, "(0, 1]"),
    (A100, "kernel_fit.gemm.bf16.m_half_tokens", float("nan"), "[0, 1e+07] tokens"),
    (A100, "kernel_fit.gemm.bf16.weight_bw_eff", 0, "(0, 1]"),
    (A100, "kernel_fit.gemm.bf16.weight_bw_eff", "fast", "(0, 1]"),
    (H100, "kernel_fit.gemm.fp8.per_token_ns", 1e9, "[0, 10000] ns"),
    (A100, "kernel_fit.gemm.bf16.latncy_us", 3.0, "unknown field 'latncy_us'"),  # a typo: did-you-mean
    (A100, "kernel_fit.decode_attention.latency_us", True, "[0, 10000] µs"),
    (A100, "kernel_fit.decode_attention.per_seq_us", 1e6, "[0, 1000] µs"),
    (A100, "kernel_fit.decode_attention.kv_bw_eff", 1.5, "(0, 1]"),
    (A100, "kernel_fit.decode_attention.kv_bw", 0.5, "unknown field 'kv_bw'"),
    (A100, "kernel_fit.insitu_stream_factor", 0.0, "(0, 10]"),
    (A100, "kernel_fit.insitu_stream_factor", float("inf"), "(0, 10]"),
    (A100, "kernel_fit.multi_token_attention.sms", 108.5, "a whole number in [1, 100000]"),
    (A100, "kernel_fit.multi_token_attention.tile_rows", 0, "a whole number in [1, 4096]"),
    (A100, "kernel_fit.multi_token_attention.s_per_kv_token_ns", 0.0, "(0, 1e+06]"),
    (A100, "kernel_fit.multi_token_attention.coresident_speedup", 3.0, "[1, 2]"),
    (A100, "kernel_fit.multi_token_attention.waves", 2, "unknown field 'waves'"),
    (H100, "kernel_fit.moe.bf16.m_half_tokens", -3.0, "[0, 1e+07] tokens"),
    (H100, f"kernel_fit.moe_shapes.{SHAPE}.fp8.weight_bw_eff", 1.01, "(0, 1]"),
    (H100, "kernel_fit.moe_shapes.qwen3", {"bf16": H100["kernel_fit"]["moe"]["bf16"]}, "h<hidden>_i<ffn>"),
    (A100, "kernel_fit.gemm_fit", {}, "unknown field 'gemm_fit'"),
]


@pytest.mark.parametrize("doc, path, value, allowed", HOSTILE, ids=[f"{p}={v!r}" for _, p, v, _ in HOSTILE])
def test_a_hostile_kernel_fit_value_is_refused_naming_file_field_value_and_range(tmp_path, doc, path, value,
                                                                                  allowed):
    prof = tmp_path / "hw.yaml"
    prof.write_text(yaml.safe_dump(_set(doc, path, value)), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_hardware(str(prof))
    e = exc.value
    assert e.where == str(prof)
    unknown = "unknown field" in allowed or "h<hidden>" in allowed
    # the field is the one edited (an unknown key or a bad shape key: named in the message)
    assert e.field == path or (unknown and path.rsplit(".", 1)[0] in e.field)
    text = str(e)
    assert allowed in text and str(prof) in text
    if not unknown and not (isinstance(value, float) and math.isnan(value)):
        assert repr(value) in text or str(value) in text


def test_the_cli_refuses_a_hostile_kernel_fit_in_one_paragraph(tmp_path):
    prof = tmp_path / "hw.yaml"
    prof.write_text(yaml.safe_dump(_set(A100, "kernel_fit.gemm.bf16.flops_eff_max", 7.0)), encoding="utf-8")
    res = typer.testing.CliRunner().invoke(app, ["show", "hardware", str(prof)])
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exit_code == 2, text
    assert "kernel_fit.gemm.bf16.flops_eff_max" in text and "(0, 1]" in text and "7.0" in text
    assert "Traceback" not in text


@pytest.mark.parametrize("name", list_hardware())
def test_every_bundled_profile_loads_with_its_kernel_fit(name):
    hw = load_hardware(name)
    kf = hw.kernel_fit
    assert kf is not None and "bf16" in kf.gemm and 0 < kf.attn_kv_bw_eff <= 1
    assert all(0 < g.flops_eff_max <= 1 and 0 < g.weight_bw_eff <= 1
               for g in [*kf.gemm.values(), *kf.moe.values(), *(x for v in kf.moe_shapes.values() for x in v.values())])


def test_a_profile_without_optional_kernel_fit_blocks_loads(tmp_path):
    kf = {k: v for k, v in A100["kernel_fit"].items() if k in ("gemm", "decode_attention")}
    prof = tmp_path / "hw.yaml"
    prof.write_text(yaml.safe_dump({**A100, "kernel_fit": kf}), encoding="utf-8")
    fit = load_hardware(str(prof)).kernel_fit
    assert fit.insitu_stream_factor == 1.0 and fit.multi_token_attention is None and fit.moe == {}
