"""Measured-kernel calibration on small synthetic tables in aiconfigurator-core's schema (no download).

Tables are generated from KNOWN parameters with the fit's own forms (+1 % noise); the fits must
recover them, flag what the data cannot determine, refuse under-determined fits, and the TPOT
overhead fit must recover the engine overheads from its fit split only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.calibrate.kernels import engine_overhead as eo
from specsim.calibrate.kernels import tables as kt
from specsim.calibrate.kernels import terms as kf
from specsim.calibrate.kernels.describe import hardware_info
from specsim.calibrate.kernels.report import calibrate_from_kernels
from specsim.catalog.hardware import load_hardware
from specsim.errors import SpecError

pytest.importorskip("pyarrow")

HW = load_hardware("h200_sxm")
TRUE_GEMM = {"latency_us": 4.0, "flops_eff_max": 0.75, "m_half_tokens": 60.0, "weight_bw_eff": 0.8}
TRUE_ATTN = {"latency_us": 9.0, "per_seq_us": 0.05, "kv_bw_eff": 0.85}
TRUE_MOE = {"latency_us": 30.0, "flops_eff_max": 0.3, "m_half_tokens": 2.0, "weight_bw_eff": 0.7}
TRUE_AR = {"oneshot_latency_us": 3.5, "latency_us": 6.0, "bw_eff": 0.6}


def _noise(rng, n):
    return np.exp(rng.normal(0, 0.01, n))


def gemm_table(rng, p=TRUE_GEMM, dtype="bfloat16", wb=2.0, peak=None):
    m, n, k = (a.ravel() for a in np.meshgrid([1, 4, 16, 64, 256, 1024, 4096], [1024, 4096, 14336], [1024, 4096]))
    peak = peak or HW.flops_per_s("bf16")
    eff = p["flops_eff_max"] * m / (m + p["m_half_tokens"])
    t = p["latency_us"] * 1e-6 + np.maximum(2 * m * n * k / (peak * eff),
                                           (k * n * wb + (m * k + m * n) * 2.0) / (HW.hbm_bw_bytes_per_s * p["weight_bw_eff"]))
    return pd.DataFrame({"gemm_dtype": dtype, "m": m, "n": n, "k": k, "latency": t * 1e3 * _noise(rng, m.size)})


def attention_table(rng):
    b, s, kvh = (a.ravel() for a in np.meshgrid([1, 8, 64, 256], [15, 255, 4095, 32767], [1, 8]))
    kv = b * s * 2 * kvh * 128 * 2.0
    t = (TRUE_ATTN["latency_us"] + TRUE_ATTN["per_seq_us"] * b) * 1e-6 + kv / (HW.hbm_bw_bytes_per_s * TRUE_ATTN["kv_bw_eff"])
    df = pd.DataFrame({"batch_size": b, "isl": 1, "num_heads": 32, "num_key_value_heads": kvh, "head_dim": 128,
                       "kv_cache_dtype": "bfloat16", "window_size": 0, "step": s, "latency": t * 1e3 * _noise(rng, b.size)})
    # rows the reader must drop: an fp8 cache and a sliding window
    return pd.concat([df, df.assign(kv_cache_dtype="fp8", latency=1.0), df.assign(window_size=128, latency=1.0)])


def moe_table(rng):
    t, tp = (a.ravel() for a in np.meshgrid([1, 4, 16, 64, 256, 1024, 4096], [1, 2, 4]))
    h, i, topk, e, ep = 4096.0, 1536.0, 8.0, 128.0, 1.0
    per = 3 * h * i / tp
    flops = 2 * t * topk / ep * per
    hit = np.minimum(e, t * topk) / ep  # `balanced`: T·topk tokens spread evenly over the experts
    tpe = t * topk / e
    eff = TRUE_MOE["flops_eff_max"] * tpe / (tpe + TRUE_MOE["m_half_tokens"])
    y = TRUE_MOE["latency_us"] * 1e-6 + np.maximum(flops / (HW.flops_per_s("bf16") * eff),
                                                   hit * per * 2.0 / (HW.hbm_bw_bytes_per_s * TRUE_MOE["weight_bw_eff"]))
    df = pd.DataFrame({"moe_dtype": "bfloat16", "num_tokens": t, "hidden_size": h, "inter_size": i, "topk": topk,
                       "num_experts": e, "moe_tp_size": tp, "moe_ep_size": ep, "distribution": "balanced",
                       "latency": y * 1e3 * _noise(rng, t.size)})
    return pd.concat([df, df.assign(distribution="power_law_1.2", latency=df["latency"] * 5)])


def nccl_table(rng):
    n, elems = (a.ravel() for a in np.meshgrid([2, 4, 8], 2.0 ** np.arange(10, 28, 2)))
    nbytes = elems * 2  # half: message_size counts elements
    bw = HW.nvlink_bw_bytes_per_s * TRUE_AR["bw_eff"]
    ring = TRUE_AR["latency_us"] * 1e-6 * np.ceil(np.log2(n)) + 2 * (n - 1) / n * nbytes / bw
    oneshot = TRUE_AR["oneshot_latency_us"] * 1e-6 + (n - 1) * nbytes / bw  # the engine takes the faster
    t = np.minimum(ring, oneshot)
    return pd.DataFrame({"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": n, "message_size": elems,
                         "latency": t * 1e3 * _noise(rng, n.size)})


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    rng = np.random.default_rng(0)
    base = tmp_path_factory.mktemp("aic") / "data"
    sysdir = base / "h200_sxm"
    for fam, be, ver, table, df in (("gemm", "vllm", "0.24.0", "gemm_perf", gemm_table(rng)),
                                    ("attention", "vllm", "0.24.0", "generation_attention_perf", attention_table(rng)),
                                    ("moe", "vllm", "0.24.0", "moe_perf", moe_table(rng)),
                                    ("comm", "nccl", "2.29.2", "nccl_perf", nccl_table(rng))):
        d = sysdir / fam / be / ver
        d.mkdir(parents=True)
        df.to_parquet(d / f"{table}.parquet")
    return base


def test_readers_apply_the_schema_gotchas(root):
    att, _ = kt.read_table(root, "h200_sxm", "attention", "vllm", "generation_attention_perf")
    rows = kt.decode_attention_rows(att)
    assert len(rows) == len(att) // 3 and (rows["kv_tokens"] == rows["step"]).all()
    moe, _ = kt.read_table(root, "h200_sxm", "moe", "vllm", "moe_perf")
    assert (kt.moe_rows(moe, "bf16")["distribution"] == "balanced").all()
    nccl, _ = kt.read_table(root, "h200_sxm", "comm", "nccl", "nccl_perf")
    ar = kt.allreduce_rows(pd.DataFrame(), nccl)
    assert np.allclose(sorted(ar["nbytes"].unique()), sorted(2 * nccl["message_size"].unique()))  # elements -> bytes
    assert np.allclose(att["time_s"], att["latency"] * 1e-3)  # ms -> s


def test_fits_recover_known_parameters(root):
    from specsim.calibrate.kernels.system import fit_system

    fit = fit_system("h200_sxm", "vllm", root=root)
    for term, true in (("gemm.bf16", TRUE_GEMM), ("decode_attention", TRUE_ATTN), ("moe.bf16", TRUE_MOE),
                       ("all_reduce", TRUE_AR)):
        got = fit.terms[term].params
        for name, v in true.items():
            # MoE m_half only shows where the grouped GEMM is compute-bound (few rows here): factor 2
            rel = 1.0 if (term, name) == ("moe.bf16", "m_half_tokens") else 0.1
            assert got[name] == pytest.approx(v, rel=rel), (term, name, got[name], v)
        assert fit.terms[term].median_abs_rel_error < 0.02
    assert fit.hw.efficiency.compute == pytest.approx(TRUE_GEMM["flops_eff_max"], rel=0.1)
    assert fit.hw.nvlink_latency_s == pytest.approx(TRUE_AR["latency_us"] * 1e-6, rel=0.1)
    assert fit.hw.nvlink_oneshot_latency_s == pytest.approx(TRUE_AR["oneshot_latency_us"] * 1e-6, rel=0.1)


def test_allreduce_fit_finds_the_one_shot_branch_and_beats_the_ring_law():
    """#11: small all-reduces take the same time on 2, 4 and 8 GPUs (one-shot kernel); the fit must
    find that branch (the min() has a second optimum without it) and describe the rows far better
    than the ring law alone."""
    from specsim.calibrate.kernels import terms as kf

    rng = np.random.default_rng(3)
    rows = kt.allreduce_rows(pd.DataFrame(), nccl_table(rng).assign(time_s=lambda d: d["latency"] * 1e-3))
    got = kf.fit_allreduce(rows, HW)
    assert got.params["oneshot_latency_us"] == pytest.approx(TRUE_AR["oneshot_latency_us"], rel=0.1)
    assert got.median_abs_rel_error < 0.02
    n, b = rows["num_gpus"].to_numpy(float), rows["nbytes"].to_numpy(float)
    hops = np.ceil(np.log2(n))
    a = np.column_stack([hops * 1e-6, 2 * (n - 1) / n * b])  # ring law: linear in (latency, 1 / bandwidth)
    coef = np.linalg.lstsq(a / rows["time_s"].to_numpy()[:, None], np.ones(len(n)), rcond=None)[0]
    ring_err = np.median(np.abs(a @ coef / rows["time_s"].to_numpy() - 1.0))
    assert ring_err > 5 * got.median_abs_rel_error


def test_under_determined_fit_is_refused():
    rng = np.random.default_rng(1)
    one = gemm_table(rng).iloc[:1].assign(time_s=lambda d: d["latency"] * 1e-3)
    with pytest.raises(SpecError, match="one per fitted parameter"):
        kf.fit_gemm(one, HW, "bf16", "gemm_perf")


def test_bound_hitting_parameter_is_flagged():
    rng = np.random.default_rng(2)
    rows = gemm_table(rng, {**TRUE_GEMM, "latency_us": 0.0}).assign(time_s=lambda d: d["latency"] * 1e-3)
    fit = kf.fit_gemm(rows, HW, "bf16", "gemm_perf")
    assert "latency_us" in fit.at_bound


def _silicon(hw_fit, rng, s0=3e-3, s1=10e-6):
    rows = []
    for model, path, tps in (("Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", (1, 2, 4)),
                             ("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-FP8", (4, 8))):
        for tp in tps:
            for b in (8, 32, 128):
                for isl, osl in ((1000, 1000), (4000, 2000)):
                    q = "fp8_block" if "235B" in model else ""
                    rows.append({"id": f"{model}{tp}{b}{isl}", "backend": "vllm", "model_path": path, "system": "h200_sxm",
                                 "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": q, "batch_size": b,
                                 "tp_size": tp, "pp_size": 1, "moe_tp_size": tp, "moe_ep_size": 1})
    df = eo.supported_rows(pd.DataFrame(rows).assign(silicon_ttft_ms=100.0))
    _, pricing = eo.kernel_tpot_s(df, hw_fit)
    tpot = pricing.tpot_s(s0, s1) * _noise(rng, len(df))
    return pd.DataFrame(rows).assign(silicon_tpot_ms=tpot * 1e3, silicon_ttft_ms=100.0)


def test_tpot_overheads_recovered_from_the_fit_split_and_profiles_written(root, tmp_path):
    from specsim.calibrate.kernels.system import fit_system

    fit = fit_system("h200_sxm", "vllm", root=root)
    _silicon(fit.hw, np.random.default_rng(3)).to_csv(root.parent / "silicon_sample.csv", index=False)
    cal = calibrate_from_kernels("h200_sxm", "vllm", root=root, out_dir=tmp_path, date="2026-01-01")
    ov = cal.overheads[("h200_sxm", "vllm")]
    assert ov.step_overhead_s == pytest.approx(3e-3, rel=0.15)
    assert ov.per_seq_overhead_s == pytest.approx(10e-6, rel=0.3)
    assert ov.insitu_stream_factor == pytest.approx(1.0, abs=0.05)  # the rows stream as the tables
    assert set(ov.rows.loc[ov.rows["role"] == "fit", "model"]) == {"Llama-3.1-8B"}  # the split
    tab = cal.tpot_table()
    held = tab[tab["role"] == "held-out"]
    assert list(held["model"]) == ["Qwen3-235B-A22B"] and float(held["median_abs_err"].iloc[0]) < 0.05
    info = hardware_info(cal.written["h200_sxm"])
    assert info["fitted_from_kernels"] and {q["term"] for q in info["fit_quality"]} >= {"gemm.bf16", "all_reduce"}
    assert "train_mfu" in info["priors"] and "step_overhead" not in info["priors"]
    doc = yaml.safe_load(Path(cal.written["h200_sxm"]).read_text())
    assert doc["kernel_fit"]["provenance"]["engine_overhead"]["fit_rows"] == 18
    # the TTFT check counts the rows whose priced prefill exceeds the measured TTFT (100 ms here)
    bound = cal.ttft_bound_table().set_index("model")
    for model, g in ov.rows.groupby("model"):
        assert bound.loc[model, "rows"] == len(g)
        assert bound.loc[model, "ttft_below_prefill"] == int((g["prefill_alone_s"] > 0.1).sum())
        assert bound.loc[model, "min_ratio"] == pytest.approx(float((0.1 / g["prefill_alone_s"]).min()))
    assert bound.loc["Llama-3.1-8B", "ttft_below_prefill"] == 0
    assert bound.loc["Qwen3-235B-A22B", "ttft_below_prefill"] > 0  # 4000-token prompts take > 100 ms there


def test_insitu_stream_factor_recovered_from_rows_across_tp_and_written_to_the_profile(root, tmp_path):
    """TPOT rows generated with every stream 1.25x faster than the tables (and overheads 3 ms,
    10 µs): the overhead fit finds the factor from the rows' TP spread, and the written profile
    carries it, so the simulator prices streaming at the in-situ rate."""
    from specsim.calibrate.kernels.system import fit_system

    fit = fit_system("h200_sxm", "vllm", root=root)
    truth = fit.hw.with_insitu_stream_factor(1.25)
    _silicon(truth, np.random.default_rng(5)).to_csv(root.parent / "silicon_sample.csv", index=False)
    cal = calibrate_from_kernels("h200_sxm", "vllm", root=root, out_dir=tmp_path, date="2026-01-01")
    ov = cal.overheads[("h200_sxm", "vllm")]
    assert ov.insitu_stream_factor == pytest.approx(1.25, rel=0.06)
    assert ov.step_overhead_s == pytest.approx(3e-3, rel=0.2)
    assert "insitu_stream_factor" not in ov.at_bound
    hw = load_hardware(cal.written["h200_sxm"])
    assert hw.kernel_fit.insitu_stream_factor == pytest.approx(ov.insitu_stream_factor, abs=1e-4)
    assert hw.kernel_fit.stream_eff(0.9) == 1.0 and hw.kernel_fit.stream_eff(0.5) == pytest.approx(
        0.5 * ov.insitu_stream_factor, abs=1e-4)
    assert cal.overhead_table()["insitu_stream_factor"].iloc[0] == pytest.approx(ov.insitu_stream_factor)


def test_unsupported_layouts_are_named():
    df = eo.supported_rows(pd.DataFrame([
        {"model_path": "Qwen/Qwen3-235B-A22B-FP8", "mode": "agg", "tp_size": 1, "moe_tp_size": 2, "moe_ep_size": 1,
         "batch_size": 8, "silicon_tpot_ms": 50},
        {"model_path": "some/OtherModel", "mode": "agg", "tp_size": 1, "batch_size": 8, "silicon_tpot_ms": 5},
        {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "mode": "disagg", "tp_size": 1, "batch_size": 8,
         "silicon_tpot_ms": 5}]))
    assert df["why_not"].str.contains("MoE split").iloc[0]
    assert df["why_not"].iloc[1] == "model not in specsim's catalog"
    assert df["why_not"].iloc[2] == "disaggregated serving"


def test_cli_show_hardware_and_calibrate_option_errors():
    from typer.testing import CliRunner

    from specsim.cli.app import app

    r = CliRunner().invoke(app, ["show", "hardware", "gb200"])
    assert r.exit_code == 0, r.output
    assert "fit quality" in r.output and "still priors" in r.output and "aiconfigurator-core" in r.output
    r = CliRunner().invoke(app, ["show", "hardware", "gb200", "--format", "json"])
    assert r.exit_code == 0 and '"fitted_from_kernels": true' in r.output
    for args, needle in ((["calibrate", "kernels", "--source", "bogus"], "--source: must be aiconfigurator"),
                         (["calibrate", "kernels", "--system", "bogus"], "--system: must be one of"),
                         (["calibrate", "traces"], "traces: must be")):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        err = r.stderr.strip()
        assert err.startswith("error: command line: ") and "\n" not in err and needle in err, (args, err)
        assert "Traceback" not in r.output


def test_w4a16_law_is_fitted_from_another_backends_table_when_the_engines_has_none(root, tmp_path):
    """A W4A16 (`int4_wo`) GEMM law comes from the vLLM table when it has such rows, else from another
    backend's table of the same system (A100: TensorRT-LLM), labelled; it recovers the known terms."""
    import shutil

    from specsim.calibrate.kernels.system import fit_system

    data = tmp_path / "data"
    shutil.copytree(root, data)
    true = {"latency_us": 15.0, "flops_eff_max": 0.7, "m_half_tokens": 30.0, "weight_bw_eff": 0.9}
    d = data / "h200_sxm" / "gemm" / "trtllm" / "1.0.0"
    d.mkdir(parents=True)
    gemm_table(np.random.default_rng(3), true, dtype="int4_wo", wb=0.5).to_parquet(d / "gemm_perf.parquet")
    fit = fit_system("h200_sxm", "vllm", root=data)
    got = fit.terms["gemm.int4"]
    assert got.table.startswith("h200_sxm/gemm/trtllm/")
    for name, v in true.items():
        assert got.params[name] == pytest.approx(v, rel=0.1), name
    assert any("gemm.int4" in n and "trtllm" in n for n in fit.notes)
    assert fit.kernel_fit.gemm_for("int4").latency_s == pytest.approx(15e-6, rel=0.1)
    assert "int4" not in fit_system("h200_sxm", "vllm", root=root).kernel_fit.gemm   # no such rows anywhere


def test_bundled_profiles_carry_kernel_fits_with_provenance():
    a100 = load_hardware("a100_sxm").kernel_fit
    assert {"gemm.bf16", "gemm.int4", "decode_attention", "all_reduce"} <= set(a100.provenance["terms"])
    assert a100.provenance["insitu_stream_fit"]["fit_rows"] == 5   # its own engine timings, not transferred
    for name in ("h100_sxm", "h200_sxm", "b200", "gb200"):
        hw = load_hardware(name)
        assert hw.kernel_fit is not None, name
        prov = hw.kernel_fit.provenance
        assert prov["package"].startswith("aiconfigurator-core==0.12.0")
        assert {"gemm.bf16", "decode_attention", "moe.bf16", "all_reduce"} <= set(prov["terms"])
        assert all(t["rows"] >= 4 for t in prov["terms"].values())
        assert "held_out_rows" in prov["engine_overhead"]


def test_prior_label_is_not_stacked_by_a_refit():
    from specsim.calibrate.kernels.report import _label_prior

    entry = {"source": "prior: vLLM overhead, order of magnitude"}
    for _ in range(3):
        _label_prior(entry, "prior (no tables): ")
    assert entry["source"] == "prior (no tables): vLLM overhead, order of magnitude"


def test_recalibration_keeps_a_beta_fitted_on_the_gpus_own_sweep_and_replaces_a_transferred_one(root, tmp_path):
    """A100's β (and its multi-token attention term) are fitted on its own engine timings
    (`specsim calibrate a100-sweep`) while its overheads are transferred: a `calibrate kernels` rerun must
    keep them and their provenance, not overwrite β with the donor's. A profile whose overheads are fitted on its own TPOT rows takes
    the β fitted with them."""
    import shutil

    from specsim.calibrate.kernels.system import fit_system

    data = tmp_path / "data"
    shutil.copytree(root, data)
    shutil.copytree(data / "h200_sxm", data / "a100_sxm")   # A100 tables: the synthetic h200 schema
    fit = fit_system("h200_sxm", "vllm", root=root)
    _silicon(fit.hw.with_insitu_stream_factor(1.25), np.random.default_rng(5)).to_csv(
        data.parent / "silicon_sample.csv", index=False)
    bundled = load_hardware("a100_sxm").kernel_fit
    assert "insitu_stream_fit" in bundled.provenance
    cal = calibrate_from_kernels(["h200_sxm", "a100_sxm"], "vllm", root=data, out_dir=tmp_path / "out",
                                 date="2026-01-01")
    donor = cal.overheads[("h200_sxm", "vllm")].insitu_stream_factor
    assert donor == pytest.approx(1.25, rel=0.06)
    a100 = load_hardware(cal.written["a100_sxm"]).kernel_fit
    assert a100.insitu_stream_factor == pytest.approx(bundled.insitu_stream_factor, abs=1e-4)
    assert a100.insitu_stream_factor != pytest.approx(donor, abs=0.05)
    assert a100.provenance["insitu_stream_fit"] == bundled.provenance["insitu_stream_fit"]
    assert "transferred from the h200_sxm" in a100.provenance["engine_overhead"]["how"]
    # the multi-token attention term, fitted on the same engine timings, is kept too
    assert a100.multi_token_attention == bundled.multi_token_attention is not None
    assert a100.provenance["multi_token_attention_fit"] == bundled.provenance["multi_token_attention_fit"]
    own = load_hardware(cal.written["h200_sxm"]).kernel_fit
    assert own.insitu_stream_factor == pytest.approx(donor, abs=1e-4)
    assert "insitu_stream_fit" not in own.provenance
