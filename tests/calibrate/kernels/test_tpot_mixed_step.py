"""Issue #11, third pass: the TPOT rows priced as a closed-loop benchmark's mixed steps
(cost.step.mixed_step_time_s, calibrate/kernels/tpot_model.py) -- closed-form checks on catalog models
and the bundled profiles, and the overhead fit on synthetic rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels import engine_overhead as eo
from specsim.calibrate.kernels import tpot_model as tm
from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import load_model
from specsim.cost.forward import prefill_time_s
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import mixed_step_time_s, step_cost

M = load_model("Llama-3.1-8B")
LAY = ParallelLayout(tp=1, weight_dtype="fp8")
HW = load_hardware("h200_sxm")
RAW = replace(HW, kernel_fit=None)  # the plain roofline (scalar efficiencies)


@pytest.mark.parametrize("hw", [HW, RAW])
def test_no_prompt_is_the_decode_step(hw):
    n = np.array([1.0, 8.0, 64.0])
    got = mixed_step_time_s(M, hw, LAY, n, 3000.0, 0.0, 2000.0)
    assert got == pytest.approx(step_cost(M, None, hw, LAY, n, 0).time_s(n * 3000.0), rel=1e-12)


def test_separate_prefill_adds_exactly_the_prefill_pass():
    for k in (1, 3):
        dec = mixed_step_time_s(M, HW, LAY, 32.0, 1500.0, 0.0, 1000.0)
        sep = mixed_step_time_s(M, HW, LAY, 32.0, 1500.0, float(k), 1000.0, separate=True)
        assert sep - dec == pytest.approx(prefill_time_s(M, HW, LAY, [1000.0] * k), rel=1e-9)


@pytest.mark.parametrize("hw", [HW, RAW])
def test_mixed_marginal_shares_the_weight_read_and_tends_to_the_prefill_when_compute_bound(hw):
    def marginal(q):
        return (mixed_step_time_s(M, hw, LAY, 8.0, 1000.0, 1.0, q) - mixed_step_time_s(M, hw, LAY, 8.0, 1000.0, 0.0, q))

    # a short prompt rides a memory-bound step almost for free: far below a pass of its own
    assert marginal(16.0) < 0.5 * prefill_time_s(M, hw, LAY, [16.0])
    # a long one makes the step compute-bound: the marginal is the prompt's own (compute-bound) pass
    assert marginal(32768.0) == pytest.approx(prefill_time_s(M, hw, LAY, [32768.0]), rel=0.02)
    assert marginal(32768.0) < prefill_time_s(M, hw, LAY, [32768.0])


def _rows(batch, isl, osl, ttft_s=np.nan, clients=None, backend="vllm") -> pd.DataFrame:
    return pd.DataFrame({"model": "Llama-3.1-8B", "tp": 1, "ep": 1, "weight_dtype": "fp8", "kv_dtype": "bf16",
                         "backend": backend, "gemm_quant": "fp8", "moe_quant": "", "batch": float(batch),
                         "clients": float(clients or batch), "isl": float(isl), "osl": float(osl),
                         "ttft_s": ttft_s, "tpot_s": 0.02}, index=[0])


def test_fixed_point_is_the_mixed_step_in_closed_form():
    b, isl, osl, s0, s1 = 8.0, 1000.0, 64.0, 1e-3, 20e-6
    sol = tm.price_rows(_rows(b, isl, osl), HW).solve(s0, s1)
    lam = b / (osl - 1.0)  # < 1 prompt per step: a share lam of the steps carries one whole prompt
    ctx = isl + osl / 2
    hw0 = HW.with_efficiency(step_overhead_s=0.0, per_seq_overhead_s=0.0)  # the overheads are s0, s1
    dec = mixed_step_time_s(M, hw0, LAY, b, ctx, 0.0, isl)
    one = mixed_step_time_s(M, hw0, LAY, b, ctx, 1.0, isl)
    assert sol["prompts_per_step"][0] == pytest.approx(lam)
    # a request waits for the other b - 1 clients' prompts only: its own prefill is in its TTFT
    seen = lam * (b - 1) / b
    assert sol["tpot_s"][0] == pytest.approx(dec + seen * (one - dec) + s0 + s1 * b, rel=1e-9)
    assert sol["prefill_s"][0] == pytest.approx(seen * (one - dec), rel=1e-9)


def test_one_client_is_pure_decode():
    """At concurrency 1 no other prompt ever enters while the request decodes: TPOT is the decode
    step plus the overheads, whatever the prompt length."""
    s0, s1 = 1e-3, 20e-6
    sol = tm.price_rows(pd.concat([_rows(1, isl, 64, ttft_s=0.05, backend=be) for isl in (100, 8000)
                                   for be in ("vllm", "sglang")], ignore_index=True), HW).solve(s0, s1)
    hw0 = HW.with_efficiency(step_overhead_s=0.0, per_seq_overhead_s=0.0)
    dec = mixed_step_time_s(M, hw0, LAY, 1.0, np.array([100 + 32.0, 100 + 32.0, 8000 + 32.0, 8000 + 32.0]), 0.0, 100.0)
    assert np.all(sol["prefill_s"] == 0.0)
    assert sol["tpot_s"] == pytest.approx(dec + s0 + s1, rel=1e-6)


def test_measured_ttft_lowers_the_prompt_rate_and_queued_clients_do_not_decode():
    p = tm.price_rows(pd.concat([_rows(64, 2000, 128), _rows(64, 2000, 128, ttft_s=2.0),
                                 _rows(64, 2000, 128, ttft_s=20.0, clients=128)], ignore_index=True), HW)
    sol = p.solve(0.0, 0.0)
    t = sol["tpot_s"]
    assert t[1] < t[0] and sol["prompts_per_step"][1] < sol["prompts_per_step"][0]
    assert sol["n_decode"][0] == pytest.approx(64.0) and sol["n_decode"][1] < 64.0
    assert sol["n_decode"][2] <= 64.0  # 128 clients, 64 running: the rest wait in the queue
    # the fixed point: S = osl - 1 + TTFT / t
    s = 127.0 + 2.0 / t[1]
    assert sol["prompts_per_step"][1] == pytest.approx(64.0 / s, rel=1e-6)


def test_prompt_grid_is_capped_by_the_step_token_budget():
    g = tm.prompt_grid(1000.0)
    assert g[0] == 1.0 and g[-1] == pytest.approx(tm.STEP_TOKEN_BUDGET / 1000.0)
    long = tm.prompt_grid(2.0 * tm.STEP_TOKEN_BUDGET)
    assert long[0] == pytest.approx(0.5)  # a prompt longer than the budget is split over steps


def test_fit_recovers_the_overheads_and_reports_rows_the_prefill_cannot_explain():
    rows = pd.concat([_rows(b, isl, osl, ttft_s=0.1, backend=be) for b in (8, 32, 128) for isl in (1000, 4000)
                      for osl in (128, 1000) for be in ("vllm", "sglang")], ignore_index=True)
    pricing = tm.price_rows(rows, HW)
    rows["tpot_s"] = pricing.tpot_s(2e-3, 15e-6)
    fit = eo.fit_overheads(rows, pricing, np.ones(len(rows), bool), "synthetic")
    assert fit.step_overhead_s == pytest.approx(2e-3, rel=1e-3)
    assert fit.per_seq_overhead_s == pytest.approx(15e-6, rel=1e-3)
    assert fit.rows["rel_error"].abs().max() < 1e-4 and (fit.rows["role"] == "fit").all()
    # a row measured faster than its priced prefill alone allows is predicted but not fitted
    # (a batch-128 row: with a measured TTFT the prompt rate at t -> 0 tends to clients / TTFT, so a
    # batch-8 row sits at the boundary λ·δ/t ≈ 1 and is no test of the rule)
    fast = rows.copy()
    i = int(np.flatnonzero(rows["batch"] == 128)[0])
    fast.loc[i, "tpot_s"] = 0.2 * pricing.solve(0.0, 0.0)["prefill_s"][i]
    fit = eo.fit_overheads(fast, pricing, np.ones(len(rows), bool), "synthetic")
    assert fit.rows.loc[i, "role"] == "fit-excluded" and (fit.rows["role"] == "fit").sum() == len(rows) - 1
    assert fit.step_overhead_s == pytest.approx(2e-3, rel=1e-3)


def test_clients_read_from_the_source_string():
    assert eo._clients("x; silicon_concurrency=288; measured=2026", 144.0) == 288.0
    assert eo._clients(None, 16.0) == 16.0


def test_prefill_alone_is_the_prompt_pass_with_the_fewest_decoders():
    """RowPricing.prefill_alone_s: one whole prompt mixed into the step at the grid's smallest
    decoding share, no engine overheads; it grows with the prompt and, for a long prompt, is close
    to the prompt's own prefill pass (a TTFT lower bound, tpot_model docstring)."""
    p = tm.price_rows(pd.concat([_rows(8, isl, 128) for isl in (500, 2000, 8000)], ignore_index=True), HW)
    hw0 = HW.with_efficiency(step_overhead_s=0.0, per_seq_overhead_s=0.0)
    n0 = 8.0 * tm.SHARE_GRID[0]
    want = [mixed_step_time_s(M, hw0, LAY, n0, isl + 64.0, 1.0, isl) for isl in (500.0, 2000.0, 8000.0)]
    got = p.prefill_alone_s()
    assert got == pytest.approx(want, rel=1e-9)
    assert got[0] < got[1] < got[2]
    assert got[2] == pytest.approx(prefill_time_s(M, hw0, LAY, [8000.0]), rel=0.1)
