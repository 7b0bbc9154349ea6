"""Issue #11, second pass: per-shape MoE kernel fits and the by-model TPOT split (fit on dense
Llama rows, hold out Qwen3-32B / Qwen3-235B-A22B, sibling-GPU transfer) -- on small synthetic
tables in the package's schema (tables built by test_calibrate_backends' helpers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_calibrate_backends import HW, _attn, _gemm

from specsim.calibrate.kernels import engine_overhead as eo
from specsim.calibrate.kernels import report as kr
from specsim.calibrate.kernels.system import catalog_moe_shapes, fit_system
from specsim.catalog.hardware import load_hardware, moe_shape_key
from specsim.catalog.models import load_model
from specsim.cost.forward import decode_cost
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

QWEN235 = moe_shape_key(4096, 1536, 128, 8)
#: (hidden, inter, experts, topk, weight-bandwidth share): the catalog shape streams at 0.4 of
#: HBM, another (non-catalog) shape at 0.9 -- one law across both cannot price either exactly
SHAPES = ((4096, 1536, 128, 8, 0.4), (6144, 2560, 160, 6, 0.9))


def _moe_two_shapes() -> pd.DataFrame:
    parts = []
    for h, i, e, topk, bw in SHAPES:
        t, tp = (a.ravel() for a in np.meshgrid([1, 2, 4, 8, 16, 64, 256, 1024], [1, 2, 4]))
        per = 3 * h * i / tp
        y = 20e-6 + np.maximum(2 * t * topk * per / (HW.flops_per_s("fp8") * 0.5 * (t * topk / e) / (t * topk / e + 4)),
                               np.minimum(e, t * topk) * per / (HW.hbm_bw_bytes_per_s * bw))
        df = pd.DataFrame({"num_tokens": t, "hidden_size": h, "inter_size": i, "topk": topk, "num_experts": e,
                           "moe_tp_size": tp, "moe_ep_size": 1, "distribution": "balanced"})
        parts += [df.assign(moe_dtype=d, latency=y * f * 1e3) for d, f in (("bfloat16", 2.0), ("fp8_block", 1.0))]
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("aic_split") / "data"
    for system in ("h200_sxm", "h100_sxm"):
        for fam, table, df in (("gemm", "gemm_perf", _gemm(1.0)), ("attention", "generation_attention_perf", _attn()),
                               ("moe", "moe_perf", _moe_two_shapes())):
            d = base / system / fam / "vllm" / "0.24.0"
            d.mkdir(parents=True)
            df.to_parquet(d / f"{table}.parquet")
    return base


def test_catalog_moe_shapes_are_the_catalog_models():
    shapes = catalog_moe_shapes()
    assert QWEN235 in shapes and moe_shape_key(2048, 768, 128, 8) in shapes
    assert shapes[QWEN235] == (4096, 1536, 128, 8)


def test_per_shape_fit_recovers_the_shape_and_beats_the_cross_shape_law(root):
    fit = fit_system("h200_sxm", "vllm", root=root)
    own = fit.kernel_fit.moe_shapes[QWEN235]["fp8"]
    assert own.weight_bw_eff == pytest.approx(0.4, rel=0.05)
    assert fit.kernel_fit.moe["fp8"].weight_bw_eff > 0.45  # the law is pulled towards the other shape
    assert moe_shape_key(6144, 2560, 160, 6) not in fit.kernel_fit.moe_shapes  # not a catalog shape
    row = next(r for r in fit.moe_shape_rows() if r["term"] == "moe.fp8" and r["shape"] == QWEN235)
    assert row["per_shape_median"] < 0.02 < row["cross_shape_median"]


def test_moe_for_falls_back_to_the_cross_shape_law(root):
    kf = fit_system("h200_sxm", "vllm", root=root).kernel_fit
    assert kf.moe_for("fp8", QWEN235) is kf.moe_shapes[QWEN235]["fp8"]
    assert kf.moe_for("fp8", "h1_i1_e1_k1") is kf.moe["fp8"]
    assert kf.moe_for("fp8") is kf.moe["fp8"]


def test_the_cost_model_prices_the_model_with_its_shape_fit(root):
    hw = fit_system("h200_sxm", "vllm", root=root).hw
    lay = ParallelLayout(tp=4, weight_dtype="fp8")
    q235, q30 = load_model("Qwen3-235B-A22B"), load_model("Qwen3-30B-A3B")
    shaped = decode_cost(q235, hw, lay, 16).time_s(16 * 2000)
    law = decode_cost(q235, replace(hw, kernel_fit=replace(hw.kernel_fit, moe_shapes={})), lay, 16).time_s(16 * 2000)
    assert shaped > law  # the shape streams its experts at 0.4, slower than the pooled law
    # a model whose shape has no per-shape fit is priced identically either way
    assert decode_cost(q30, hw, lay, 16).time_s(16 * 2000) == pytest.approx(
        decode_cost(q30, replace(hw, kernel_fit=replace(hw.kernel_fit, moe_shapes={})), lay, 16).time_s(16 * 2000))


def test_moe_shapes_round_trip_and_bad_block(root, tmp_path):
    fit = fit_system("h200_sxm", "vllm", root=root)
    cal = kr.KernelCalibration(fits={"h200_sxm": fit})
    path = kr.write_fitted_profile(fit, cal, tmp_path)
    back = load_hardware(str(path)).kernel_fit
    assert back.moe_shapes[QWEN235]["fp8"].weight_bw_eff == pytest.approx(
        fit.kernel_fit.moe_shapes[QWEN235]["fp8"].weight_bw_eff, abs=1e-4)
    bad = path.read_text().replace("moe_shapes:", "moe_shapes: 3\n  old_moe_shapes:", 1)
    (tmp_path / "bad.yaml").write_text(bad)
    with pytest.raises(SpecError, match="moe_shapes"):
        load_hardware(str(tmp_path / "bad.yaml"))


def _silicon(system: str, models: list[tuple[str, str, float]]) -> pd.DataFrame:
    rows = []
    for path, quant, tp in models:
        for b in (4, 16, 64):
            for isl in (1000, 4000):
                rows.append({"id": len(rows), "system": system, "backend": "vllm", "backend_version": "0.24.0",
                             "mode": "agg", "model_path": path, "gemm_quant_mode": quant, "moe_quant_mode": quant,
                             "isl": isl, "osl": 500, "batch_size": b, "tp_size": tp, "pp_size": 1,
                             "silicon_tpot_ms": 1.0})
    return pd.DataFrame(rows)


def test_supported_rows_maps_the_new_models_and_skips_nvfp4():
    rows = eo.supported_rows(_silicon("h200_sxm", [("meta-llama/Llama-3.1-70B", "fp8", 2),
                                                   ("Qwen/Qwen3-32B", np.nan, 2),
                                                   ("nvidia/Qwen3-32B-NVFP4", "nvfp4", 2)]))
    assert set(rows["model"]) == {"Llama-3.1-70B", "Qwen3-32B"}
    nv = rows[rows["model_path"] == "nvidia/Qwen3-32B-NVFP4"]
    assert nv["why_not"].str.contains("nvfp4").all()
    ok = rows[rows["why_not"] == ""]
    assert set(ok.loc[ok["model"] == "Llama-3.1-70B", "weight_dtype"]) == {"fp8"}
    assert set(ok.loc[ok["model"] == "Qwen3-32B", "weight_dtype"]) == {"bf16"}


def test_an_fp8_row_of_a_block_scaled_checkpoint_runs_the_block_kernels(tmp_path):
    """#11: vLLM labels every fp8 checkpoint `fp8`; the kernel follows the checkpoint's config."""
    import json

    cfg = tmp_path / "model_configs"
    cfg.mkdir()
    (cfg / "Qwen--Qwen3-235B-A22B-FP8_config.json").write_text(json.dumps(
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}))
    (cfg / "meta-llama--Llama-3.1-70B_config.json").write_text(json.dumps({"hidden_size": 8192}))
    (cfg / "org--per-tensor_config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fp8"}}))
    (cfg / "org--broken_config.json").write_text("{not json")
    assert eo.checkpoint_quant(cfg, "Qwen/Qwen3-235B-A22B-FP8") == "fp8_block"
    assert eo.checkpoint_quant(cfg, "org/per-tensor") == "fp8"
    assert eo.checkpoint_quant(cfg, "meta-llama/Llama-3.1-70B") is None  # a bf16 checkpoint (online fp8)
    assert eo.checkpoint_quant(cfg, "org/broken") is None and eo.checkpoint_quant(cfg, "org/absent") is None
    assert eo.checkpoint_quant(None, "Qwen/Qwen3-235B-A22B-FP8") is None
    sil = _silicon("h200_sxm", [("Qwen/Qwen3-235B-A22B-FP8", "fp8", 2), ("meta-llama/Llama-3.1-70B", "fp8", 2)])
    sil = sil.assign(moe_tp_size=2, moe_ep_size=1)
    rows = eo.supported_rows(sil, cfg)
    q = rows[rows["model"] == "Qwen3-235B-A22B"]
    assert (q["gemm_quant"] == "fp8_block").all() and (q["moe_quant"] == "fp8_block").all()
    assert (q["quant_from"] == "checkpoint weight_block_size").all()
    lama = rows[rows["model"] == "Llama-3.1-70B"]
    assert (lama["gemm_quant"] == "fp8").all() and (lama["quant_from"] == "label").all()
    assert (eo.supported_rows(sil)["gemm_quant"] == "fp8").all()  # no configs folder: the label stands


def _with_truth(sil: pd.DataFrame, fits: dict, s0: float, s1: float) -> pd.DataFrame:
    """Measured TPOT = the closed-loop mixed-step TPOT (tpot_model) with overheads s0, s1, per system."""
    rows = eo.supported_rows(sil)
    out = []
    for system, sub in rows.groupby("system"):
        sub = sub.reset_index(drop=True)
        _, pricing = eo.kernel_tpot_s(sub, fits[system].hw)
        out.append(sub.assign(tpot_s=pricing.tpot_s(s0, s1)))
    return pd.concat(out, ignore_index=True)


def test_split_fits_llama_holds_out_qwen_and_transfers_to_the_sibling(root):
    fits = {s: fit_system(s, "vllm", root=root) for s in ("h200_sxm", "h100_sxm")}
    sil = pd.concat([_silicon("h200_sxm", [("meta-llama/Llama-3.1-8B-Instruct", np.nan, 1),
                                           ("meta-llama/Llama-3.1-70B", "fp8", 4), ("Qwen/Qwen3-32B", np.nan, 2)]),
                     _silicon("h100_sxm", [("Qwen/Qwen3-32B", np.nan, 2)])], ignore_index=True)
    rows = _with_truth(sil, fits, 2e-3, 10e-6)
    tpot_fits, pending = {}, {}
    ov = {}
    for s in ("h200_sxm", "h100_sxm"):
        ov.update(kr._fit_tpot(s, rows, root, tpot_fits, pending))
    assert set(ov) == {("h200_sxm", "vllm")} and set(pending) == {("h100_sxm", "vllm")}
    h200 = ov[("h200_sxm", "vllm")]
    assert set(h200.rows.loc[h200.rows["role"] == "fit", "model"]) == {"Llama-3.1-8B", "Llama-3.1-70B"}
    assert set(h200.rows.loc[h200.rows["role"] == "held-out", "model"]) == {"Qwen3-32B"}
    assert h200.step_overhead_s == pytest.approx(2e-3, rel=0.05)
    assert h200.rows["rel_error"].abs().max() < 0.02  # held-out Qwen3-32B predicted, never fitted
    ov.update(kr._transfer(pending, ov))
    h100 = ov[("h100_sxm", "vllm")]
    assert h100.transferred_from == "h200_sxm/vllm" and (h100.rows["role"] == "held-out").all()
    assert h100.step_overhead_s == h200.step_overhead_s


def _fake(s0: float, at_bound=(), transferred="") -> eo.OverheadFit:
    rows = pd.DataFrame({"model": ["Llama-3.1-70B"], "role": ["fit"], "rel_error": [0.0]})
    return eo.OverheadFit(s0, 0.0, "test", rows, tuple(at_bound), transferred)


def test_profile_skips_a_donor_whose_step_overhead_is_not_determined():
    cal = kr.KernelCalibration(fits={}, overheads={("b200_sxm", "vllm"): _fake(0.0, ("step_overhead_s",)),
                                                   ("h200_sxm", "vllm"): _fake(1e-3)})
    own, how = kr._overhead_for("b200_sxm", cal)
    assert own.step_overhead_s == 0.0 and how.startswith("fitted")
    donor, how = kr._overhead_for("gb200", cal)
    assert donor.step_overhead_s == 1e-3 and "h200_sxm" in how and "transferred" in how
