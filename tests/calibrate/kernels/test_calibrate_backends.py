"""Per-backend TPOT pricing (issue #11): nearest-version tables, the row's fp8 kernel variants,
and the `balanced` MoE routing semantics -- on small synthetic tables in the package's schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels import engine_overhead as eo
from specsim.calibrate.kernels import tables as kt
from specsim.calibrate.kernels.system import fit_system
from specsim.catalog.hardware import load_hardware

HW = load_hardware("h200_sxm")


def _gemm(scale: float, dtypes=("bfloat16", "fp8", "fp8_block")) -> pd.DataFrame:
    m, n, k = (a.ravel() for a in np.meshgrid([1, 16, 256, 4096], [1024, 4096, 8192], [1024, 4096, 8192]))
    parts = []
    for dt in dtypes:
        wb = 2.0 if dt == "bfloat16" else 1.0
        # per-tensor fp8 twice as slow as block fp8 here: the fit must keep them apart
        f = scale * (2.0 if dt == "fp8" else 1.0)
        t = 5e-6 + np.maximum(2 * m * n * k / (HW.flops_per_s("bf16") * 0.7), (k * n * wb + (m * k + m * n) * 2) / (HW.hbm_bw_bytes_per_s * 0.8))
        parts.append(pd.DataFrame({"gemm_dtype": dt, "m": m, "n": n, "k": k, "latency": t * f * 1e3}))
    return pd.concat(parts, ignore_index=True)


def _attn() -> pd.DataFrame:
    b, s = (a.ravel() for a in np.meshgrid([1, 8, 64], [255, 4095]))
    t = 5e-6 + b * s * 2 * 8 * 128 * 2 / (HW.hbm_bw_bytes_per_s * 0.7)
    return pd.DataFrame({"batch_size": b, "isl": 1, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                         "kv_cache_dtype": "bfloat16", "window_size": 0, "step": s, "latency": t * 1e3})


def _moe(scale: float) -> pd.DataFrame:
    t, tp = (a.ravel() for a in np.meshgrid([1, 4, 16, 64, 256, 1024], [1, 2, 4]))
    h, i, topk, e = 4096.0, 1536.0, 8.0, 128.0
    per = 3 * h * i / tp
    hit = np.minimum(e, t * topk)  # balanced routing
    y = 20e-6 + np.maximum(2 * t * topk * per / (HW.flops_per_s("fp8") * 0.5 * (t * topk / e) / (t * topk / e + 4)),
                           hit * per / (HW.hbm_bw_bytes_per_s * 0.7))
    df = pd.DataFrame({"num_tokens": t, "hidden_size": h, "inter_size": i, "topk": topk, "num_experts": e,
                       "moe_tp_size": tp, "moe_ep_size": 1, "distribution": "balanced"})
    return pd.concat([df.assign(moe_dtype=d, latency=y * scale * f * 1e3)
                      for d, f in (("bfloat16", 2.0), ("fp8_block", 1.0), ("fp8", 3.0))], ignore_index=True)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("aicb") / "data"
    for ver, scale in (("0.19.0", 2.0), ("0.24.0", 1.0)):  # 0.19.0's kernels twice as slow
        for fam, table, df in (("gemm", "gemm_perf", _gemm(scale)), ("attention", "generation_attention_perf", _attn()),
                               ("moe", "moe_perf", _moe(scale))):
            d = base / "h200_sxm" / fam / "vllm" / ver
            d.mkdir(parents=True)
            df.to_parquet(d / f"{table}.parquet")
    return base


def test_nearest_version_is_chosen_per_family(root):
    assert kt.table_path(root, "h200_sxm", "moe", "vllm", "moe_perf").parent.name == "0.24.0"
    assert kt.table_path(root, "h200_sxm", "moe", "vllm", "moe_perf", near="0.12.0").parent.name == "0.19.0"
    assert kt.table_path(root, "h200_sxm", "moe", "vllm", "moe_perf", near="0.23.1").parent.name == "0.24.0"
    assert kt._version_distance("1.0.0rc3", "1.3.0rc10") < kt._version_distance("1.0.0rc3", "1.3.0rc20")


def test_version_fit_prices_that_versions_kernels(root):
    new, old = fit_system("h200_sxm", "vllm", root=root), fit_system("h200_sxm", "vllm", root=root, version="0.12.0")
    assert "moe 0.19.0" in old.tables() and "moe 0.24.0" in new.tables()
    assert old.kernel_fit.moe["fp8"].weight_bw_eff == pytest.approx(new.kernel_fit.moe["fp8"].weight_bw_eff / 2, rel=0.1)


def test_balanced_moe_fit_recovers_the_bandwidth(root):
    fit = fit_system("h200_sxm", "vllm", root=root)
    assert fit.kernel_fit.moe["fp8"].weight_bw_eff == pytest.approx(0.7, rel=0.05)


def test_row_quant_mode_selects_the_kernel_variant(root):
    fit = fit_system("h200_sxm", "vllm", root=root)
    assert {"gemm.fp8_block", "moe.fp8_tensor"} <= set(fit.terms)
    assert "fp8_block" not in fit.kernel_fit.gemm and "fp8_tensor" not in fit.kernel_fit.moe  # never in a profile
    rows = eo.supported_rows(pd.DataFrame([
        {"id": i, "system": "h200_sxm", "backend": "vllm", "backend_version": "0.24.0", "mode": "agg",
         "model_path": "Qwen/Qwen3-235B-A22B-FP8", "gemm_quant_mode": g, "moe_quant_mode": m, "isl": 1000, "osl": 500,
         "batch_size": 16, "tp_size": 4, "pp_size": 1, "moe_tp_size": 4, "moe_ep_size": 1, "silicon_tpot_ms": 30.0}
        for i, (g, m) in enumerate((("fp8_block", "fp8_block"), ("fp8", "fp8_block"), ("fp8_block", "fp8")))]))
    assert (rows["why_not"] == "").all()
    ks, _ = eo.kernel_tpot_s(rows, fit.hw, fit.for_quant)
    assert ks[1] > ks[0] and ks[2] > ks[0]  # per-tensor GEMM and per-tensor MoE are the slower kernels here
    same, _ = eo.kernel_tpot_s(rows, fit.hw)
    assert same[1] == pytest.approx(ks[1]) and same[0] == pytest.approx(same[2])
