"""Per-step engine overheads the kernel tables cannot see, fitted to measured end-to-end TPOT.

Kernel tables time GPU kernels only. A served decode step also pays CPU-side work: scheduler and
sampler per step, and bookkeeping per running sequence (launch gaps between graphs, detokenise,
block tables). With the kernel terms fixed by the kernel fit, a measured TPOT row is

    tpot = kernel_step(B, C) + f_prefill · B · prefill(isl) / osl + step_overhead_s + per_seq_overhead_s · B

where kernel_step is specsim's decode step (`step_cost` with zero overheads) at the row's batch B
(benchmark concurrency) and total context C = B · (isl + osl/2) (the mean over the decode), and
the middle term is the other requests' prefills that land inside a request's decode window
(aggregated serving: B requests each bring isl prompt tokens per osl decoded tokens; f_prefill is
the exposed share, a property of the benchmark, not of the GPU, so it is not written into the
profile -- specsim's engines simulate prefills explicitly). All three enter linearly: a
non-negative least squares on relative residuals (each row weighted by 1/tpot) over the *fit*
rows only; the held-out rows are predicted, never fitted.

Rows (`silicon_sample.csv` of aiconfigurator-core): aggregated serving (`mode == agg`) of models
in specsim's catalog, on a layout specsim has (attention TP = tp_size; MoE either TP-sharded
(moe_tp == tp) or expert-parallel over the same GPUs (moe_ep == tp); no attention DP; pp = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from specsim.cost.forward import prefill_time_s
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost
from specsim.errors import SpecError
from specsim.hardware import HardwareSpec
from specsim.model import load_model

#: silicon_sample model_path -> catalog model
CATALOG_OF = {
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B",
    "Qwen/Qwen3-8B": "Qwen3-8B",
    "Qwen/Qwen3-30B-A3B": "Qwen3-30B-A3B",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B",
    "Qwen/Qwen3-32B": "Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen3-32B",
}

#: weight quantisations specsim prices (gemm_quant_mode; empty = bf16). NVFP4 is not: specsim
#: runs 4-bit weights as W4A16 at the bf16 rate, not Blackwell's FP4 tensor-core path, and no
#: nvfp4 GEMM term is fitted
PRICED_QUANT = ("", "fp8", "fp8_block")


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def supported_rows(silicon: pd.DataFrame) -> pd.DataFrame:
    """The TPOT rows specsim can price, with model, layout, weight dtype and a `why_not` for others."""
    out = []
    for r in silicon.to_dict("records"):
        model = CATALOG_OF.get(str(r.get("model_path")))
        tp, pp, b = _num(r.get("tp_size")), _num(r.get("pp_size")), _num(r.get("batch_size"))
        mtp, mep, dp = _num(r.get("moe_tp_size")), _num(r.get("moe_ep_size")), _num(r.get("attention_dp_size"))
        why = ""
        if model is None:
            why = "model not in specsim's catalog"
        elif r.get("mode") != "agg":
            why = "disaggregated serving"
        elif not (np.isfinite(tp) and np.isfinite(b) and b >= 1):
            why = "no tp/batch"
        elif np.isfinite(pp) and pp != 1:
            why = "pipeline parallel"
        elif np.isfinite(dp) and dp > 1:
            why = "attention DP"
        ep = 1
        if not why and load_model(model).moe is not None:
            if np.isfinite(mep) and mep == tp and (not np.isfinite(mtp) or mtp == 1) and tp > 1:
                ep = int(tp)
            elif not (np.isfinite(mtp) and mtp == tp and (not np.isfinite(mep) or mep == 1)):
                why = f"MoE split moe_tp={mtp:g} moe_ep={mep:g} with tp={tp:g}"
        q = str(r.get("gemm_quant_mode") if isinstance(r.get("gemm_quant_mode"), str) else "")
        if not why and q not in PRICED_QUANT:
            why = f"weight quantisation {q} (specsim prices bf16, fp8, fp8_block)"
        wdt = "fp8" if q.startswith("fp8") else "bf16"
        # NVIDIA ModelOpt FP8 checkpoints also quantise the KV cache to FP8 (their hf_quant_config)
        kv = "fp8" if str(r.get("model_path", "")).startswith("nvidia/") and wdt == "fp8" else "bf16"
        out.append({"id": r.get("id"), "system": r.get("system"), "backend": r.get("backend"), "model": model,
                    "backend_version": str(r.get("backend_version") or ""),
                    "moe_quant": str(r.get("moe_quant_mode") or ""), "gemm_quant": q,
                    "model_path": r.get("model_path"), "weight_dtype": wdt, "kv_dtype": kv, "isl": _num(r.get("isl")),
                    "osl": _num(r.get("osl")), "batch": b, "tp": tp, "ep": ep,
                    "tpot_s": _num(r.get("silicon_tpot_ms")) * 1e-3, "why_not": why})
    df = pd.DataFrame(out)
    return df


def kernel_tpot_s(rows: pd.DataFrame, hw: HardwareSpec, hw_for=None) -> tuple[np.ndarray, np.ndarray]:
    """(decode step at each row's batch and mean context without engine overheads, prefill
    interference B · prefill(isl) / osl); NaN where the layout does not fit the model.
    `hw_for(gemm_quant, moe_quant)`, when given, returns the profile pricing the fp8 kernel
    variants the row's engine ran (SystemFit.for_quant); else `hw` prices every row."""
    out = np.full(len(rows), np.nan)
    pre = np.full(len(rows), np.nan)
    cache: dict = {}
    for i, r in enumerate(rows.to_dict("records")):
        key = (r.get("gemm_quant", ""), r.get("moe_quant", ""))
        if key not in cache:
            h = hw_for(*key) if hw_for is not None else hw
            cache[key] = h.with_efficiency(step_overhead_s=0.0, per_seq_overhead_s=0.0)
        hw_r = cache[key]
        model = load_model(r["model"])
        layout = ParallelLayout(tp=int(r["tp"]), ep=int(r["ep"]), weight_dtype=r["weight_dtype"], kv_dtype=r["kv_dtype"])
        try:
            layout.check_fits_model(model, "layout")
        except SpecError:
            continue
        n = float(r["batch"])
        ctx = n * (r["isl"] + r["osl"] / 2.0)
        out[i] = float(step_cost(model, None, hw_r, layout, n, 0).time_s(ctx))
        pre[i] = n * prefill_time_s(model, hw_r, layout, [r["isl"]]) / r["osl"]
    return out, pre


@dataclass(frozen=True)
class OverheadFit:
    """Fitted step_overhead_s, per_seq_overhead_s (profile terms) and the benchmark's exposed
    prefill share f_prefill, with the split and per-row predictions."""

    step_overhead_s: float
    per_seq_overhead_s: float
    f_prefill: float
    fit_on: str
    rows: pd.DataFrame  # every priced row: role (fit / held-out), measured, predicted, rel_error
    at_bound: tuple[str, ...] = ()  # parameters the non-negative fit left at 0 (not determined > 0)
    transferred_from: str = ""  # "<system>/<backend>" whose fitted overheads predict these rows

    def summary(self) -> pd.DataFrame:
        """Median and 90th-percentile |relative error| per system, backend, model and role."""
        g = self.rows.assign(abs_err=self.rows["rel_error"].abs())
        return (g.groupby(["system", "backend", "model", "role"])
                .agg(rows=("abs_err", "size"), median_abs_err=("abs_err", "median"),
                     p90_abs_err=("abs_err", lambda x: float(np.quantile(x, 0.9))))
                .reset_index())


def fit_overheads(rows: pd.DataFrame, kernel_s: np.ndarray, prefill_s: np.ndarray, fit_mask: np.ndarray,
                  fit_on: str) -> OverheadFit:
    """NNLS of (tpot - kernel_step) = f · prefill + s0 + s1 · B on the fit rows (relative
    weights); predict every row. Refuses fewer fit rows than its three parameters."""
    ok = np.isfinite(kernel_s)
    fm = fit_mask & ok
    if fm.sum() < 3:
        raise SpecError("TPOT fit rows", int(fm.sum()),
                        ">= 3 (one per parameter: step overhead, per-sequence overhead, exposed prefill share)", fit_on)
    meas = rows["tpot_s"].to_numpy(float)
    b = rows["batch"].to_numpy(float)
    w = 1.0 / meas[fm]
    a = np.column_stack([np.ones(fm.sum()), b[fm], prefill_s[fm]]) * w[:, None]
    y = (meas[fm] - kernel_s[fm]) * w
    (s0, s1, f), _ = optimize.nnls(a, y)
    pred = kernel_s + s0 + s1 * b + f * prefill_s
    out = rows.assign(kernel_s=kernel_s, prefill_s=prefill_s, predicted_s=pred, rel_error=pred / meas - 1.0,
                      role=np.where(fit_mask, "fit", "held-out"))[ok]
    at = tuple(n for n, v in (("step_overhead_s", s0), ("per_seq_overhead_s", s1), ("f_prefill", f)) if v <= 0)
    return OverheadFit(float(s0), float(s1), float(f), fit_on, out.reset_index(drop=True), at)


def predict_with(rows: pd.DataFrame, kernel_s: np.ndarray, prefill_s: np.ndarray, donor: OverheadFit,
                 donor_name: str, fit_on: str) -> OverheadFit:
    """Every row held out, predicted with another (system, backend)'s fitted overheads: for a
    system whose rows are all of held-out models (nothing of them enters any fit)."""
    ok = np.isfinite(kernel_s)
    meas = rows["tpot_s"].to_numpy(float)
    b = rows["batch"].to_numpy(float)
    pred = kernel_s + donor.step_overhead_s + donor.per_seq_overhead_s * b + donor.f_prefill * prefill_s
    out = rows.assign(kernel_s=kernel_s, prefill_s=prefill_s, predicted_s=pred, rel_error=pred / meas - 1.0,
                      role="held-out")[ok]
    return OverheadFit(donor.step_overhead_s, donor.per_seq_overhead_s, donor.f_prefill, fit_on,
                       out.reset_index(drop=True), donor.at_bound, donor_name)


def read_silicon(root: Path) -> pd.DataFrame:
    """`systems/silicon_sample.csv` next to the kernel data root."""
    p = Path(root).parent / "silicon_sample.csv"
    if not p.is_file():
        raise SpecError("silicon_sample.csv", str(p), "the measured TPOT table of the kernels package")
    return pd.read_csv(p)
