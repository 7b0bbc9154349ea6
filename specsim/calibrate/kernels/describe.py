"""Library side of `specsim show hardware NAME` and `specsim calibrate kernels`: data, no printing."""

from __future__ import annotations

from specsim.calibrate.kernels.report import calibrate_from_kernels
from specsim.catalog.hardware import load_hardware
from specsim.catalog.sd_costs import SD_COST_KEYS
from specsim.errors import SpecError


def hardware_info(name_or_path: str) -> dict:
    """A profile's peaks, fitted terms (with their fit quality) and which values are still priors.

    Returns {name, description, path, peaks: [{quantity, value, unit, source}], efficiency: [...],
    sd_costs: [{parameter, value, unit, source}] (cost/sd_costs.py; a key the profile lacks is its
    documented default, labelled a prior), kernel_fit: [{term, parameter, value, unit}],
    fit_quality: [{term, rows, median_abs_rel_error, p90_abs_rel_error, at_bound, table}],
    provenance: {...}, priors: [names still priors]}.
    """
    hw = load_hardware(name_or_path)
    src = hw.sources
    peaks = [{"quantity": f"peak dense {dt}", "value": v / 1e12, "unit": "TFLOP/s", "source": src.get(f"peak_dense_tflops.{dt}", "")}
             for dt, v in hw.peak_flops.items()]
    peaks += [
        {"quantity": "HBM", "value": hw.datasheet_hbm_gb, "unit": "GB", "source": src.get("hbm_gb", "")},
        {"quantity": "memory a process gets (CUDA)", "value": hw.hbm_bytes / 2**30, "unit": "GiB",
         "source": "the datasheet's GB read as GiB × 0.991 (calibration/published/gpu_memory_totals.csv)"},
        {"quantity": "HBM bandwidth", "value": hw.hbm_bw_bytes_per_s / 1e12, "unit": "TB/s", "source": src.get("hbm_tbps", "")},
        {"quantity": "NVLink per direction", "value": hw.nvlink_bw_bytes_per_s / 1e9, "unit": "GB/s",
         "source": src.get("nvlink_gbps_per_direction", "")},
        {"quantity": "NVLink latency (ring/tree, per log2 hop)", "value": hw.nvlink_latency_s * 1e6, "unit": "µs",
         "source": src.get("collective_latency_us.nvlink", "")},
        *([{"quantity": "NVLink one-shot all-reduce latency", "value": hw.nvlink_oneshot_latency_s * 1e6,
            "unit": "µs", "source": src.get("collective_latency_us.nvlink_oneshot", "")}]
          if hw.nvlink_oneshot_latency_s is not None else []),
        {"quantity": "scale-out latency", "value": hw.scaleout_latency_s * 1e6, "unit": "µs",
         "source": src.get("collective_latency_us.scaleout", "")},
    ]
    e = hw.efficiency
    eff = [{"parameter": k, "value": v, "unit": u, "source": src.get(f"efficiency.{y}", "")}
           for k, v, u, y in (("compute", e.compute, "", "compute"), ("memory", e.memory, "", "memory"),
                              ("comm", e.comm, "", "comm"), ("step_overhead", e.step_overhead_s * 1e3, "ms", "step_overhead_ms"),
                              ("per_seq_overhead", e.per_seq_overhead_s * 1e6, "µs", "per_seq_overhead_us"),
                              ("draft_overhead", e.draft_overhead_s * 1e3, "ms", "draft_overhead_ms"),
                              ("train_mfu", e.train_mfu, "", "train_mfu"))]
    sd = [{"parameter": key, "value": getattr(hw.sd_costs, attr) / scale,
           "unit": {"ms": "ms", "us": "µs"}.get(key.rsplit("_", 1)[-1], ""),
           "source": hw.sd_costs.sources.get(f"sd_costs.{key}")
           or "prior (the cost/sd_costs.py default; the profile has no value)"}
          for key, (attr, scale) in SD_COST_KEYS.items()]
    terms: list[dict] = []
    quality: list[dict] = []
    prov: dict = {}
    kf = hw.kernel_fit
    if kf is not None:
        shapes = [(f"moe[{k}]", v) for k, v in kf.moe_shapes.items()]
        for label, fits in (("gemm", kf.gemm), ("moe", kf.moe), *shapes):
            for dt, g in fits.items():
                terms += [{"term": f"{label}.{dt}", "parameter": "latency", "value": g.latency_s * 1e6, "unit": "µs"},
                          {"term": f"{label}.{dt}", "parameter": "flops_eff_max", "value": g.flops_eff_max, "unit": ""},
                          {"term": f"{label}.{dt}", "parameter": "m_half", "value": g.m_half_tokens, "unit": "tokens"},
                          {"term": f"{label}.{dt}", "parameter": "weight_bw_eff", "value": g.weight_bw_eff, "unit": ""}]
                if g.token_s:
                    terms.append({"term": f"{label}.{dt}", "parameter": "per_token", "value": g.token_s * 1e9,
                                  "unit": "ns"})
        terms += [{"term": "decode_attention", "parameter": "latency", "value": kf.attn_latency_s * 1e6, "unit": "µs"},
                  {"term": "decode_attention", "parameter": "per_seq", "value": kf.attn_per_seq_s * 1e6, "unit": "µs"},
                  {"term": "decode_attention", "parameter": "kv_bw_eff", "value": kf.attn_kv_bw_eff, "unit": ""},
                  {"term": "in-situ streaming", "parameter": "insitu_stream_factor (x every *_bw_eff, cap 1)",
                   "value": kf.insitu_stream_factor, "unit": ""}]
        mt = kf.multi_token_attention
        if mt is not None:
            terms += [{"term": "multi-token attention", "parameter": "per cached token per block",
                       "value": mt.s_per_kv_token * 1e9, "unit": "ns"},
                      {"term": "multi-token attention", "parameter": "co-resident speedup",
                       "value": mt.coresident_speedup, "unit": ""},
                      {"term": "multi-token attention", "parameter": "SMs / tile rows",
                       "value": f"{mt.sms} / {mt.tile_rows}", "unit": ""}]
        prov = dict(kf.provenance)
        for term, q in (prov.get("terms") or {}).items():
            if isinstance(q, dict):
                row = {k: q.get(k) for k in ("rows", "median_abs_rel_error", "p90_abs_rel_error", "at_bound", "table")}
                row["at_bound"] = ", ".join(row["at_bound"] or []) or "-"
                quality.append({"term": term, **row})
    priors = [r["parameter"] for r in eff if str(r["source"]).startswith("prior")]
    priors += [r["quantity"] for r in peaks if str(r["source"]).startswith("prior")]
    priors += [f"sd_costs.{r['parameter']}" for r in sd if not str(r["source"]).startswith(("fitted", "held", "transferred"))]
    return {"name": hw.name, "description": hw.description, "path": hw.path, "peaks": peaks, "efficiency": eff,
            "sd_costs": sd,
            "kernel_fit": terms, "fit_quality": quality, "provenance": prov, "priors": priors,
            "fitted_from_kernels": kf is not None}


def kernel_calibration_info(source: str, system: str, backend: str, out_dir: str | None) -> dict:
    """Run the measured-kernel calibration (see report.py) on the kernel tables of `source`
    (only "aiconfigurator") and return its tables as records."""

    if source != "aiconfigurator":
        raise SpecError("--source", source, "aiconfigurator (the aiconfigurator-core kernel tables)")
    cal = calibrate_from_kernels(system, backend, out_dir=out_dir)
    return {"residuals": cal.residual_table().to_dict("records"), "tpot": cal.tpot_table().to_dict("records"),
            "moe_shapes": cal.moe_shape_table().to_dict("records"),
            "ttft_bound": cal.ttft_bound_table().to_dict("records"),
            "overheads": cal.overhead_table().to_dict("records"), "written": cal.written,
            "notes": cal.notes + [n for f in cal.fits.values() for n in f.notes]}
