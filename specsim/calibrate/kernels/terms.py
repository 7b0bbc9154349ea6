"""Fit the roofline's shape-dependent terms to measured kernel tables (one function per term).

Each fit is a bounded robust least squares (scipy `least_squares`, soft-L1 loss, 10 % scale) on
the log residual ln(predicted / measured) of every row; forms (hardware.GemmFit, KernelFit):

    GEMM        t = lat + m·tok + max(2mnk / (P · e_max · m/(m + m_half)), (kn·wb + (mk + mn)·ab) / (B · bw))
                tok: per-token cost independent of n, k (fp8: quantising the bf16 input; #11)
    decode attn t = lat + per_seq · batch + batch · kv_tokens · 2 · kv_heads · head_dim · kvb / (B · bw)
    MoE (rank)  t = lat + max(2 · T·topk/ep · 3·h·i/tp / (P · e(T·topk/E)), hit · 3·h·i/tp · wb / (B · bw))
                hit = min(E, T·topk)/ep   (local experts the table's `balanced` routing touches: it
                spreads the T·topk routed tokens evenly, so every expert is busy from T = E/topk on;
                the cost model prices served traffic with uniform random routing instead,
                E·(1 − (1 − topk/E)^T), cost/forward.expected_experts_hit)
    all-reduce  t = min(lat₁ + (n−1) · bytes / (nvlink_bw · bw), lat · ⌈log2 n⌉ + 2(n−1)/n · bytes / (nvlink_bw · bw))
                (one-shot custom kernel vs ring/tree, the faster; cost/comm.py)

P: the profile's peak dense FLOP/s of the math dtype, B: its HBM bandwidth. Guards (#15 row 12):
a fit with fewer rows than parameters is refused; a parameter that ends at a bound is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec
from specsim.cost.comm import ONESHOT_MAX_GPUS
from specsim.errors import SpecError

#: term dtype -> (the math dtype whose peak prices it, weight bytes per element); int4 = W4A16
#: weight-only GEMMs, bf16 math (HardwareSpec.flops_per_s maps int4 to the bf16 peak)
_DT = {"bf16": ("bf16", 2.0), "fp8": ("fp8", 1.0), "fp8_tensor": ("fp8", 1.0), "fp8_block": ("fp8", 1.0),
       "int4": ("int4", 0.5)}


@dataclass(frozen=True)
class TermFit:
    """One fitted term: parameter values (in the YAML's units), fit quality and flags."""

    term: str
    params: dict[str, float]
    rows: int
    table: str
    median_abs_rel_error: float
    p90_abs_rel_error: float
    at_bound: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    residuals: pd.DataFrame = field(default=None, repr=False, compare=False)

    def quality(self) -> dict:
        return {"rows": self.rows, "table": self.table, "median_abs_rel_error": round(self.median_abs_rel_error, 4),
                "p90_abs_rel_error": round(self.p90_abs_rel_error, 4), "at_bound": list(self.at_bound)}


def _fit(term: str, table: str, names, x0, lo, hi, predict, meas, frame: pd.DataFrame) -> TermFit:
    """Robust bounded fit of log(predict(x)/meas); refuses under-determined fits, flags bounds."""
    from scipy import optimize

    meas = np.asarray(meas, dtype=float)
    if len(meas) < len(names):
        raise SpecError(f"{term} rows", len(meas), f">= {len(names)} (one per fitted parameter: {', '.join(names)})",
                        table or "<kernel table>")
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x0 = np.clip(np.asarray(x0, float), lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    res = optimize.least_squares(lambda x: np.log(predict(x) / meas), x0, bounds=(lo, hi), loss="soft_l1",
                                 f_scale=0.1, x_scale="jac", max_nfev=400)
    pred = predict(res.x)
    rel = pred / meas - 1.0
    span = hi - lo
    at = tuple(n for n, v, a, b, s in zip(names, res.x, lo, hi, span)
               if np.isfinite(s) and (v - a < 1e-3 * s or b - v < 1e-3 * s))
    resid = frame.assign(measured_s=meas, predicted_s=pred, rel_error=rel)
    return TermFit(term, {n: float(v) for n, v in zip(names, res.x)}, len(meas), table,
                   float(np.median(np.abs(rel))), float(np.quantile(np.abs(rel), 0.9)), at, (), resid)


def fit_gemm(rows: pd.DataFrame, hw: HardwareSpec, dtype: str, table: str = "gemm_perf") -> TermFit:
    """Achieved GEMM FLOP/s vs m (saturating), weight-streaming bandwidth, a launch floor and a
    per-token cost.

    Why the per-token term (#11): per-tensor fp8 rows grow linearly in m at ~7.5 ns/token whatever
    n and k (h200 vLLM 0.24, n = k = 256: 4.6 µs at m = 1, 245 µs at m = 32768; n = k = 1024:
    289 µs), the dynamic quantisation of the bf16 input the fp8 kernel timing includes (fitted for fp8
    math only). Without it
    the saturating law priced small-n·k large-m fp8 GEMMs 60-80 % fast and, to compensate, pulled
    the plateau down to 0.37-0.45 of peak (large catalog-shape fp8 GEMMs over-priced 20-45 %).
    The floor may reach 1 ms: gb200's block-scaled fp8 kernel has a ~300 µs floor."""
    mdt, wb = _DT[dtype]
    m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
    flops = 2 * m * n * k
    nbytes = k * n * wb + (m * k + m * n) * 2.0
    peak, bw = hw.flops_per_s(mdt), hw.hbm_bw_bytes_per_s

    predict = _saturating_roofline(flops, nbytes, m, peak, bw)

    names, x0, lo, hi = (("latency_us", "flops_eff_max", "log10_m_half", "weight_bw_eff", "per_token_ns"),
                         (5.0, 0.7, 2.0, 0.8, 1.0), (0.0, 0.05, 0.0, 0.05, 0.0), (1000.0, 1.0, 5.0, 1.0, 100.0))
    q = 5 if mdt == "fp8" else 4  # only fp8 math quantises its input: no per-token term for bf16 / W4A16
    f = _fit(f"gemm.{dtype}", table, names[:q], x0[:q], lo[:q], hi[:q], predict, rows["time_s"],
             rows[["m", "n", "k"]])
    return _with_m_half_tokens(f)


def _saturating_roofline(flops, nbytes, size, peak: float, bw: float):
    """The law both GEMM terms are fitted with, as a function of x = (latency_us, flops_eff_max,
    log10 m_half, weight_bw_eff[, per_token_ns]): t = latency + s · per_token + max(FLOPs / (peak ·
    e_max · s/(s + m_half)), bytes / (bw · weight_bw_eff)), s the tokens (GEMM m, or MoE tokens per
    expert; the MoE fit has no per-token term)."""
    def predict(x):
        lat_us, e_max, log_half, w = x[:4]
        tok = x[4] * 1e-9 * size if len(x) > 4 else 0.0
        eff = e_max * size / (size + 10**log_half)
        return lat_us * 1e-6 + tok + np.maximum(flops / (peak * eff), nbytes / (bw * w))
    return predict


def _with_m_half_tokens(f: TermFit) -> TermFit:
    """The fit reports m_half (fitted on a log10 scale) as `m_half_tokens`."""
    p = dict(f.params)
    p["m_half_tokens"] = 10 ** p.pop("log10_m_half")
    return TermFit(f.term, p, f.rows, f.table, f.median_abs_rel_error, f.p90_abs_rel_error,
                   tuple(a.replace("log10_m_half", "m_half_tokens") for a in f.at_bound), f.notes, f.residuals)


def fit_decode_attention(rows: pd.DataFrame, hw: HardwareSpec, table: str = "generation_attention_perf") -> TermFit:
    """Achieved HBM bandwidth of decode attention vs KV length and batch, plus fixed costs."""
    b = rows["batch_size"].to_numpy(float)
    kv_bytes = b * rows["kv_tokens"].to_numpy(float) * 2 * rows["num_key_value_heads"].to_numpy(float) \
        * rows["head_dim"].to_numpy(float) * 2.0
    bw = hw.hbm_bw_bytes_per_s

    def predict(x):
        lat_us, seq_us, e = x
        return lat_us * 1e-6 + seq_us * 1e-6 * b + kv_bytes / (bw * e)

    return _fit("decode_attention", table, ("latency_us", "per_seq_us", "kv_bw_eff"), (5.0, 0.01, 0.7),
                (0.0, 0.0, 0.05), (100.0, 10.0, 1.0), predict, rows["time_s"],
                rows[["batch_size", "kv_tokens", "num_heads", "num_key_value_heads", "head_dim"]])


def fit_moe(rows: pd.DataFrame, hw: HardwareSpec, dtype: str, table: str = "moe_perf") -> TermFit:
    """Grouped-GEMM efficiency vs routed tokens per expert, expert-weight bandwidth, launch floor."""
    mdt, wb = _DT[dtype]
    t, h, i, topk, e, tp, ep = (rows[c].to_numpy(float) for c in
                                ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                                 "moe_ep_size"))
    per_expert = 3 * h * i / tp
    flops = 2 * t * topk / ep * per_expert
    hit = np.minimum(e, t * topk) / ep  # balanced routing: distinct experts busy (module docstring)
    nbytes = hit * per_expert * wb
    tpe = t * topk / e
    peak, bw = hw.flops_per_s(mdt), hw.hbm_bw_bytes_per_s

    predict = _saturating_roofline(flops, nbytes, tpe, peak, bw)

    f = _fit(f"moe.{dtype}", table, ("latency_us", "flops_eff_max", "log10_m_half", "weight_bw_eff"),
             (20.0, 0.5, 1.5, 0.6), (0.0, 0.02, -1.0, 0.02), (300.0, 1.0, 5.0, 1.0), predict, rows["time_s"],
             rows[["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]])
    return _with_m_half_tokens(f)


def fit_allreduce(rows: pd.DataFrame, hw: HardwareSpec, table: str = "custom_allreduce_perf+nccl_perf") -> TermFit:
    """NVLink all-reduce as the engine runs it (the faster of its custom one-shot kernel and
    NCCL's ring/tree, cost/comm.all_reduce_s): one-shot latency per call, ring/tree latency per
    log2 hop, one achieved share of the per-direction link bandwidth.

        t = min(lat₁ + (n−1) · bytes / (nvlink_bw · bw),  lat · ⌈log2 n⌉ + 2(n−1)/n · bytes / (nvlink_bw · bw))

    Why not the ring law alone (#11): the tables' small messages take the same time on 2, 4 and
    8 GPUs (H100 TensorRT-LLM, 8 KB: 3.5 / 3.6 / 3.9 µs), which lat · ⌈log2 n⌉ prices 2.6 / 5.1 /
    7.6 µs; the single law's median error over all rows was 22-33 %. The min() has a second
    local optimum (one-shot branch never chosen), so the fit starts from several points and keeps
    the best. Groups above comm.ONESHOT_MAX_GPUS GPUs have no one-shot kernel."""

    n = rows["num_gpus"].to_numpy(float)
    nbytes = rows["nbytes"].to_numpy(float)
    hops = np.ceil(np.log2(np.maximum(n, 2)))
    bw = hw.nvlink_bw_bytes_per_s
    has_oneshot = n <= ONESHOT_MAX_GPUS

    def predict(x):
        one_us, lat_us, e = x
        ring = lat_us * 1e-6 * hops + 2 * (n - 1) / n * nbytes / (bw * e)
        oneshot = np.where(has_oneshot, one_us * 1e-6 + (n - 1) * nbytes / (bw * e), np.inf)
        return np.minimum(ring, oneshot)

    names, lo, hi = ("oneshot_latency_us", "latency_us", "bw_eff"), (0.1, 0.1, 0.02), (200.0, 200.0, 1.0)
    fits = [_fit("all_reduce", table, names, x0, lo, hi, predict, rows["time_s"], rows[["num_gpus", "nbytes"]])
            for x0 in ((3.0, 3.0, 0.5), (5.0, 1.0, 0.5), (2.0, 8.0, 0.7), (10.0, 5.0, 0.3))]
    return min(fits, key=_soft_l1_cost)


def _soft_l1_cost(f: TermFit) -> float:
    """The robust loss `_fit` minimises (soft-L1 of the log residual, scale 0.1), to pick among starts."""
    z = (np.log1p(f.residuals["rel_error"].to_numpy(float)) / 0.1) ** 2
    return float(np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def dtype_bytes(name: str) -> float:
    return DTYPE_BYTES[name]
