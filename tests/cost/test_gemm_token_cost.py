"""The GEMM law's per-token cost (#11): fp8 kernels time the quantisation of their bf16 input, a
cost linear in m and independent of n and k. Synthetic tables generated from KNOWN parameters
(+1 % noise): the fit must recover the per-token cost, and the cost model must price it per launch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.calibrate.kernels import terms as kf
from specsim.catalog.hardware import GemmFit, load_hardware
from specsim.cost.roofline import gemm_op_s
from specsim.errors import SpecError

HW = load_hardware("h200_sxm")
TRUE_FP8 = {"latency_us": 6.0, "flops_eff_max": 0.6, "m_half_tokens": 150.0, "weight_bw_eff": 0.75, "per_token_ns": 7.5}


def fp8_table(seed: int = 0, p=TRUE_FP8) -> pd.DataFrame:
    m, n, k = (a.ravel() for a in np.meshgrid(2 ** np.arange(0, 16, 1.0), [256, 1024, 4096, 14336], [256, 1024, 4096]))
    peak = HW.flops_per_s("fp8")
    eff = p["flops_eff_max"] * m / (m + p["m_half_tokens"])
    t = (p["latency_us"] * 1e-6 + p["per_token_ns"] * 1e-9 * m
         + np.maximum(2 * m * n * k / (peak * eff), (k * n + (m * k + m * n) * 2.0) / (HW.hbm_bw_bytes_per_s * p["weight_bw_eff"])))
    noise = np.exp(np.random.default_rng(seed).normal(0, 0.01, m.size))
    return pd.DataFrame({"m": m, "n": n, "k": k, "time_s": t * noise})


def test_fp8_fit_recovers_the_per_token_cost_and_the_plateau():
    fit = kf.fit_gemm(fp8_table(), HW, "fp8", "gemm_perf")
    for name, v in TRUE_FP8.items():
        assert fit.params[name] == pytest.approx(v, rel=0.1), (name, fit.params[name], v)
    assert fit.median_abs_rel_error < 0.02 and not fit.at_bound
    # small n·k, large m: the rows the saturating law alone cannot price (per-token cost dominates)
    r = fit.residuals
    assert r.loc[(r["n"] * r["k"] <= 2**20) & (r["m"] >= 4096), "rel_error"].abs().max() < 0.05


def test_without_the_per_token_cost_the_law_misprices_small_gemms_and_drags_the_plateau():
    """The same table under the saturating law alone: the failure #11 diagnosed on the real fp8 tables."""
    t = fp8_table()
    m, n, k = (t[c].to_numpy(float) for c in "mnk")
    predict = kf._saturating_roofline(2 * m * n * k, k * n + (m * k + m * n) * 2.0, m, HW.flops_per_s("fp8"),
                                      HW.hbm_bw_bytes_per_s)
    old = kf._fit("gemm.fp8", "t", ("latency_us", "flops_eff_max", "log10_m_half", "weight_bw_eff"),
                  (5.0, 0.7, 2.0, 0.8), (0.0, 0.05, 0.0, 0.05), (1000.0, 1.0, 5.0, 1.0), predict, t["time_s"], t)
    new = kf.fit_gemm(t, HW, "fp8", "gemm_perf")
    assert old.median_abs_rel_error > 3 * new.median_abs_rel_error
    assert old.params["flops_eff_max"] < 0.9 * TRUE_FP8["flops_eff_max"]


def test_bf16_fit_has_no_per_token_term():
    t = fp8_table(p={**TRUE_FP8, "per_token_ns": 0.0})
    fit = kf.fit_gemm(t, HW, "bf16", "gemm_perf")
    assert "per_token_ns" not in fit.params and "per_token_ns" not in fit.at_bound


def test_cost_model_prices_the_per_token_cost_per_launch():
    g = GemmFit(latency_s=6e-6, flops_eff_max=0.6, m_half_tokens=150.0, weight_bw_eff=0.75, token_s=7.5e-9)
    kfit = replace(HW.kernel_fit, gemm={**HW.kernel_fit.gemm, "fp8": g})
    with_tok = replace(HW, kernel_fit=kfit)
    without = replace(HW, kernel_fit=replace(kfit, gemm={**kfit.gemm, "fp8": replace(g, token_s=0.0)}))
    m = np.array([1.0, 64.0, 8192.0])
    a, _, _ = gemm_op_s(2 * m * 4096 * 4096, 4096 * 4096.0, with_tok, "fp8", m, n_kernels=2)
    b, _, _ = gemm_op_s(2 * m * 4096 * 4096, 4096 * 4096.0, without, "fp8", m, n_kernels=2)
    assert np.allclose(a - b, 2 * m * 7.5e-9)
    s, _, _ = gemm_op_s(2 * 64 * 4096 * 4096.0, 4096 * 4096.0, with_tok, "fp8", 64.0, n_kernels=2)
    assert isinstance(s, float) and s == pytest.approx(a[1])
    # MoE grouped GEMMs (m = tokens per expert) carry no per-token term
    c, _, _ = gemm_op_s(1e9, 1e8, with_tok, "fp8", 64.0, 1, "moe")
    d, _, _ = gemm_op_s(1e9, 1e8, without, "fp8", 64.0, 1, "moe")
    assert c == d


def _profile_with(tmp_path, value):
    doc = yaml.safe_load(Path(HW.path).read_text())
    if value is None:
        doc["kernel_fit"]["gemm"]["fp8"].pop("per_token_ns", None)
    else:
        doc["kernel_fit"]["gemm"]["fp8"]["per_token_ns"] = value
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_profile_field_parsed_defaulted_and_checked(tmp_path):
    assert HW.kernel_fit.gemm["fp8"].token_s > 0 and HW.kernel_fit.gemm["bf16"].token_s == 0.0
    assert load_hardware(_profile_with(tmp_path, 3.0)).kernel_fit.gemm["fp8"].token_s == pytest.approx(3e-9)
    assert load_hardware(_profile_with(tmp_path, None)).kernel_fit.gemm["fp8"].token_s == 0.0
    with pytest.raises(SpecError, match="per_token_ns"):
        load_hardware(_profile_with(tmp_path, -1.0))
