"""Per-step engine overheads the kernel tables cannot see, fitted to measured end-to-end TPOT.

Kernel tables time GPU kernels only. A served decode step also pays CPU-side work: scheduler and
sampler per step, and bookkeeping per running sequence (launch gaps between graphs, detokenise,
block tables). With the kernel terms fixed by the kernel fit, a measured TPOT row is the mean engine step of a
closed-loop benchmark (tpot_model.py):

    tpot = dec(n_d) + λ · δ(n_d, k) + step_overhead_s + per_seq_overhead_s · n_d

dec is specsim's decode step (`step_cost` with zero overheads) at n_d decoding sequences of mean
context isl + osl/2, λ the prompts that enter per step (from the concurrency, osl and the row's
measured TTFT), δ the priced marginal of a prompt in the step (one mixed forward pass for vLLM and
TensorRT-LLM, a separate prefill pass for SGLang). The prefill is priced, not fitted: only the two
overheads are (bounded least squares on relative residuals over the *fit* rows only; the held-out
rows are predicted, never fitted) -- and, where the caller can re-price the rows, the in-situ
streaming factor β of the kernel fit (hardware.KernelFit.insitu_stream_factor): dec and δ are
priced with every fitted streaming efficiency times β (capped at peak), and β is the 1-D bounded
minimum of the overhead fit's cost. It is identified by the fit rows' tensor-parallel spread: the
per-GPU bytes a step streams fall as 1/TP, the step and per-sequence overheads do not.

Rows (`silicon_sample.csv` of aiconfigurator-core): aggregated serving (`mode == agg`) of models
in specsim's catalog, on a layout specsim has (attention TP = tp_size; MoE either TP-sharded
(moe_tp == tp) or expert-parallel over the same GPUs (moe_ep == tp); no attention DP; pp = 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specsim import inputs
from specsim.calibrate.kernels import tpot_model as tm
from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import load_model
from specsim.errors import SpecError

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


def _clients(source, batch: float) -> float:
    """The benchmark's concurrency (closed-loop clients): `silicon_concurrency=N` in the row's
    source string; the batch size where the source does not say."""
    m = re.search(r"silicon_concurrency=(\d+)", str(source or ""))
    return float(m.group(1)) if m else batch


def checkpoint_quant(configs_dir: Path | None, model_path: str) -> str | None:
    """The fp8 weight scaling a checkpoint ships, from its `config.json` in the data package's
    `model_configs/` (`<org>--<name>_config.json`): 'fp8_block' when `quantization_config` sets a
    `weight_block_size` (fine-grained block scales), 'fp8' for another fp8 config, None when the
    folder has no config or no quantization config (a bf16 checkpoint).

    Why (#11): the TPOT rows label the quantisation by the engine's method name. vLLM calls every
    fp8 checkpoint `fp8` (its Fp8LinearMethod), yet on a block-scaled checkpoint it runs the
    block-scaled kernels: Qwen/Qwen3-235B-A22B-FP8 (weight_block_size [128, 128]) is labelled
    `fp8` on vLLM 0.12.0 and `fp8_block` on TensorRT-LLM and SGLang. The kernel follows the
    checkpoint, not the label."""
    if configs_dir is None:
        return None
    f = Path(configs_dir) / f"{str(model_path).replace('/', '--')}_config.json"
    if not f.is_file():
        return None
    try:
        q = inputs.read_json(f, "(file)", "model config JSON").get("quantization_config") or {}
    except (SpecError, AttributeError):
        return None
    if str(q.get("quant_method", "")).lower() != "fp8":
        return None
    return "fp8_block" if q.get("weight_block_size") else "fp8"


def supported_rows(silicon: pd.DataFrame, configs_dir: Path | None = None) -> pd.DataFrame:
    """The TPOT rows specsim can price, with model, layout, weight dtype and a `why_not` for others.
    With `configs_dir` (the package's model_configs), an `fp8` row of a block-scaled checkpoint is
    priced with the block-scaled kernels (`checkpoint_quant`); `quant_from` says which rows."""
    out = []
    scaling: dict[str, str | None] = {}  # model_path -> checkpoint_quant, one config read per checkpoint
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
        mq = str(r.get("moe_quant_mode") or "")
        quant_from = "label"
        path = str(r.get("model_path"))
        if q == "fp8" and path not in scaling:
            scaling[path] = checkpoint_quant(configs_dir, path)
        if q == "fp8" and scaling[path] == "fp8_block":
            q, mq, quant_from = "fp8_block", ("fp8_block" if mq == "fp8" else mq), "checkpoint weight_block_size"
        wdt = "fp8" if q.startswith("fp8") else "bf16"
        # NVIDIA ModelOpt FP8 checkpoints also quantise the KV cache to FP8 (their hf_quant_config)
        kv = "fp8" if str(r.get("model_path", "")).startswith("nvidia/") and wdt == "fp8" else "bf16"
        out.append({"id": r.get("id"), "system": r.get("system"), "backend": r.get("backend"), "model": model,
                    "backend_version": str(r.get("backend_version") or ""),
                    "moe_quant": mq, "gemm_quant": q, "quant_from": quant_from,
                    "model_path": r.get("model_path"), "weight_dtype": wdt, "kv_dtype": kv, "isl": _num(r.get("isl")),
                    "osl": _num(r.get("osl")), "batch": b, "tp": tp, "ep": ep,
                    "tpot_s": _num(r.get("silicon_tpot_ms")) * 1e-3, "ttft_s": _num(r.get("silicon_ttft_ms")) * 1e-3,
                    "clients": _clients(r.get("silicon_data_source"), b), "why_not": why})
    df = pd.DataFrame(out)
    return df


def kernel_tpot_s(rows: pd.DataFrame, hw: HardwareSpec, hw_for=None) -> tuple[np.ndarray, tm.RowPricing]:
    """(decode step at each row's batch and mean context without engine overheads, the rows'
    mixed-step pricing); NaN where the layout does not fit the model. `hw_for(gemm_quant,
    moe_quant)`, when given, returns the profile pricing the fp8 kernel variants the row's
    engine ran (SystemFit.for_quant); else `hw` prices every row."""
    pricing = tm.price_rows(rows, hw, hw_for)
    return pricing.dec_s[:, -1].copy(), pricing


@dataclass(frozen=True)
class OverheadFit:
    """Fitted step_overhead_s and per_seq_overhead_s (profile terms), with the split and per-row
    predictions (the prefill enters priced as mixed steps, tpot_model.py, never fitted)."""

    step_overhead_s: float
    per_seq_overhead_s: float
    fit_on: str
    rows: pd.DataFrame  # every priced row: role (fit / held-out), measured, predicted, rel_error
    at_bound: tuple[str, ...] = ()  # parameters the fit left at a bound (not determined by the rows)
    transferred_from: str = ""  # "<system>/<backend>" whose fitted overheads predict these rows
    insitu_stream_factor: float = 1.0  # β the rows were priced with (fitted, transferred, or 1)

    def summary(self) -> pd.DataFrame:
        """Median and 90th-percentile |relative error| per system, backend, model and role."""
        g = self.rows.assign(abs_err=self.rows["rel_error"].abs())
        return (g.groupby(["system", "backend", "model", "role"])
                .agg(rows=("abs_err", "size"), median_abs_err=("abs_err", "median"),
                     p90_abs_err=("abs_err", lambda x: float(np.quantile(x, 0.9))))
                .reset_index())


def _predicted_rows(rows: pd.DataFrame, pricing: tm.RowPricing, s0: float, s1: float, role) -> pd.DataFrame:
    sol = pricing.solve(s0, s1)
    meas = rows["tpot_s"].to_numpy(float)
    out = rows.assign(kernel_s=pricing.dec_s[:, -1], decode_s=sol["decode_s"], prefill_s=sol["prefill_s"],
                      n_decode=sol["n_decode"], prompts_per_step=sol["prompts_per_step"],
                      prefill_alone_s=pricing.prefill_alone_s(),
                      predicted_s=sol["tpot_s"], rel_error=sol["tpot_s"] / meas - 1.0, role=role)
    return out[pricing.ok].reset_index(drop=True)


#: search range of the in-situ streaming factor β (the upper end is also capped where every
#: fitted stream reaches peak bandwidth: KernelFit.max_useful_stream_factor)
STREAM_FACTOR_RANGE = (0.5, 2.0)


def _fit_s(pricing: tm.RowPricing, meas: np.ndarray, fm: np.ndarray) -> tuple[float, float, float]:
    """(s0, s1, cost): bounded least squares (both >= 0) of the relative TPOT residual over the
    rows `fm`; cost is the mean squared relative residual."""
    from scipy import optimize

    sub = tm.RowPricing(*(getattr(pricing, f)[fm] for f in pricing.__dataclass_fields__))
    scale = np.array([1e-3, 1e-5])  # ms and 10 µs: parameters of order one for the solver

    def resid(p):
        return sub.tpot_s(*(p * scale)) / meas[fm] - 1.0

    res = optimize.least_squares(resid, x0=np.array([0.5, 0.5]), bounds=(0.0, np.inf), x_scale=1.0,
                                 xtol=1e-10, ftol=1e-12)
    s0, s1 = (float(v) for v in res.x * scale)
    s0, s1 = (v if v > 1e-6 * sc else 0.0 for v, sc in ((s0, 1e-3), (s1, 1e-5)))
    return s0, s1, float(2.0 * res.cost / fm.sum())


def fit_overheads(rows: pd.DataFrame, pricing: tm.RowPricing, fit_mask: np.ndarray, fit_on: str,
                  reprice=None, factor_max: float | None = None) -> OverheadFit:
    """Bounded least squares (both >= 0) of the relative TPOT residual over the fit rows in the
    two engine overheads, each row's TPOT solved as the closed-loop mixed-step fixed point
    (tpot_model.RowPricing); predict every row. A fit-split row whose priced prefill alone
    exceeds its measured step (`RowPricing.prefill_share` > 1: more prompt tokens per second than
    an uncached prefill allows, so prompts must have hit a prefix cache) cannot be an uncached
    steady state: it is predicted and reported (role 'fit-excluded') but not fitted. Refuses
    fewer fit rows than its two parameters.

    `reprice(β)`, when given, prices the rows with the kernel fit streaming at β times its isolated
    rates (hardware.KernelFit.insitu_stream_factor): β is then fitted too, as the bounded scalar
    minimum (scipy minimize_scalar) over STREAM_FACTOR_RANGE, capped at `factor_max` (every stream
    at peak), of the two-overhead fit's cost at that β; `pricing` is the β = 1 pricing, which
    decides the fit-excluded rows. A β that ends within 1 % of an end of its range is reported in
    `at_bound`."""
    from scipy import optimize

    meas = rows["tpot_s"].to_numpy(float)
    consistent = pricing.prefill_share(meas) <= 1.0
    fm = np.asarray(fit_mask, bool) & pricing.ok & consistent
    if fm.sum() < 2:
        raise SpecError("TPOT fit rows", int(fm.sum()), ">= 2 (one per parameter: step overhead, per-sequence overhead)",
                        fit_on)
    beta, at = 1.0, []
    if reprice is not None:
        lo, hi = STREAM_FACTOR_RANGE
        hi = min(hi, factor_max) if factor_max else hi
        cache: dict[float, tm.RowPricing] = {}

        def cost(b: float) -> float:
            if b not in cache:
                cache[b] = reprice(b)
            return _fit_s(cache[b], meas, fm)[2]

        res = optimize.minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 2e-3})
        beta = float(res.x)
        pricing = cache.get(beta) or reprice(beta)
        if beta > hi * 0.99 or beta < lo * 1.01:
            at.append("insitu_stream_factor")
    s0, s1, _ = _fit_s(pricing, meas, fm)
    role = np.where(fit_mask, np.where(consistent, "fit", "fit-excluded"), "held-out")
    out = _predicted_rows(rows, pricing, s0, s1, role[pricing.ok])
    at = tuple(n for n, v in (("step_overhead_s", s0), ("per_seq_overhead_s", s1)) if v <= 0) + tuple(at)
    return OverheadFit(s0, s1, fit_on, out, at, insitu_stream_factor=beta)


def predict_with(rows: pd.DataFrame, pricing: tm.RowPricing, donor: OverheadFit, donor_name: str,
                 fit_on: str, reprice=None) -> OverheadFit:
    """Every row held out, predicted with another (system, backend)'s fitted overheads -- and its
    in-situ streaming factor, through `reprice(β)` when given: for a system whose rows are all of
    held-out models (nothing of them enters any fit)."""
    beta = donor.insitu_stream_factor
    if reprice is not None and beta != 1.0:
        pricing = reprice(beta)
    else:
        beta = 1.0
    out = _predicted_rows(rows, pricing, donor.step_overhead_s, donor.per_seq_overhead_s, "held-out")
    return OverheadFit(donor.step_overhead_s, donor.per_seq_overhead_s, fit_on, out, donor.at_bound, donor_name, beta)


def model_configs_dir(root: Path) -> Path | None:
    """`model_configs/` of the data package (two levels above `systems/data`), if present."""
    p = Path(root).parent.parent / "model_configs"
    return p if p.is_dir() else None


def read_silicon(root: Path) -> pd.DataFrame:
    """`systems/silicon_sample.csv` next to the kernel data root."""
    p = Path(root).parent / "silicon_sample.csv"
    if not p.is_file():
        raise SpecError("silicon_sample.csv", str(p), "the measured TPOT table of the kernels package")
    return inputs.read_csv_frame(p, "silicon_sample.csv", "measured TPOT table (CSV)")
