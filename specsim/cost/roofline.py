"""Roofline op cost: an op takes the longer of its math and its memory traffic.

    t = max(flops / (peak_flops · eff_compute), bytes / (hbm_bw · eff_memory))

With a profile fitted to measured kernels (`hw.kernel_fit`, see hardware.KernelFit) the rates
depend on the op's shape, and each kernel launch has a floor:

    GEMM    t = n_kernels · (latency_s + m · token_s) + max(2mnk / (peak · flops_eff(m)), W / (hbm_bw · weight_bw_eff))
            flops_eff(m) = flops_eff_max · m / (m + m_half_tokens)          (m = tokens in the GEMM)
            token_s: per-token cost of each launch (fp8: quantising its bf16 input; GemmFit)
    MoE     the same form with the grouped-GEMM terms, m = routed tokens per expert; the terms
            of the model's exact MoE shape where the profile fitted it (kernel_fit.moe_shapes),
            else the cross-shape law
    decode attention over a KV cache of B sequences
            t = attn_latency_s + attn_per_seq_s · B + kv_bytes / (hbm_bw · attn_kv_bw_eff)
    cache attention of a pass with q > 1 tokens per sequence, where the profile's engine runs
            one block per (sequence, query head) without a cache split (hardware.MultiTokenAttentionFit)
            t = max(the decode law, c · s_per_kv_token · wave_factor(blocks))   c = cached tokens per sequence

Every streaming efficiency above (weight_bw_eff, attn_kv_bw_eff) is taken in situ:
min(1, eff · insitu_stream_factor) (hardware.KernelFit.stream_eff, fitted on engine TPOT rows).

Without a kernel fit (or without a shape: `m_tokens=None`, `stream=None`) the scalar efficiencies
of the profile apply, exactly as before. Vectorized: any argument may be a numpy array (the
result broadcasts) or a plain float (the result is a float).
"""

from __future__ import annotations

import numpy as np

from specsim.catalog.hardware import HardwareSpec


def _fit(hw: HardwareSpec, kernel: str, math_dtype: str, shape: str | None = None):
    kf = hw.kernel_fit
    if kf is None:
        return None
    return kf.moe_for(math_dtype, shape) if kernel == "moe" else kf.gemm_for(math_dtype)


def compute_time_s(flops, hw: HardwareSpec, math_dtype: str = "bf16", m_tokens=None, kernel: str = "gemm",
                   shape: str | None = None):
    """Math time. With a kernel fit and `m_tokens`: at the fitted shape-dependent GEMM (kernel
    'gemm') or grouped-GEMM (kernel 'moe', m = tokens per expert; `shape` = moe_shape_key picks
    a per-shape fit where the profile has one) efficiency."""
    g = _fit(hw, kernel, math_dtype, shape) if m_tokens is not None else None
    eff = hw.efficiency.compute if g is None else g.flops_eff(m_tokens)
    return flops / (hw.flops_per_s(math_dtype) * eff)


def memory_time_s(nbytes, hw: HardwareSpec, stream: str | None = None, math_dtype: str = "bf16",
                  shape: str | None = None):
    """HBM time. `stream`: None (scalar efficiency.memory), 'weights' (GEMM weight streaming),
    'moe' (expert weights), 'kv' (decode attention reading the KV cache) -- fitted where the
    profile has a kernel fit, at the in-situ rate (KernelFit.stream_eff)."""
    kf = hw.kernel_fit
    if kf is None or stream is None:
        eff = hw.efficiency.memory
    elif stream == "kv":
        eff = kf.stream_eff(kf.attn_kv_bw_eff)
    else:
        eff = kf.stream_eff(_fit(hw, "moe" if stream == "moe" else "gemm", math_dtype, shape).weight_bw_eff)
    return nbytes / (hw.hbm_bw_bytes_per_s * eff)


def kernel_latency_s(hw: HardwareSpec, kernel: str = "gemm", math_dtype: str = "bf16", n_kernels: float = 1.0,
                     shape: str | None = None) -> float:
    """Fixed time of `n_kernels` launches of a fitted kernel (0 without a kernel fit)."""
    g = _fit(hw, kernel, math_dtype, shape)
    return 0.0 if g is None else float(n_kernels) * g.latency_s


def decode_attention_fixed_s(hw: HardwareSpec, n_seqs, kv_heads_per_gpu: float = 0.0):
    """Per-layer attention time that does not scale with KV bytes:
    attn_latency_s + attn_per_seq_s · n + block_s · n · kv_heads (0 without a kernel fit;
    block_s: hardware.MultiTokenAttentionFit's in-engine time per (sequence, KV head) block, 0
    where not fitted)."""
    kf = hw.kernel_fit
    if kf is None:
        return 0.0 * n_seqs
    mt = kf.multi_token_attention
    block = 0.0 if mt is None else mt.block_s * kv_heads_per_gpu
    return kf.attn_latency_s + (kf.attn_per_seq_s + block) * n_seqs


def gemm_op_s(flops, nbytes, hw: HardwareSpec, math_dtype: str, m_tokens, n_kernels: float = 1.0,
              kernel: str = "gemm", shape: str | None = None):
    """(time, compute side, memory side) of a (possibly fused) GEMM op of `n_kernels` launches,
    each over `m_tokens` tokens (their per-token cost, GemmFit.token_s, adds to the fixed time);
    `shape` (moe_shape_key) selects a per-shape MoE fit where the profile has one."""
    c = compute_time_s(flops, hw, math_dtype, m_tokens, kernel, shape)
    m = memory_time_s(nbytes, hw, "moe" if kernel == "moe" else "weights", math_dtype, shape)
    lat = kernel_latency_s(hw, kernel, math_dtype, n_kernels, shape)
    g = _fit(hw, kernel, math_dtype, shape) if m_tokens is not None and kernel == "gemm" else None
    if g is not None and g.token_s:  # per-token cost of each launch (fp8 input quantisation)
        lat = lat + float(n_kernels) * g.token_s * (m_tokens if np.ndim(m_tokens) == 0
                                                     else np.asarray(m_tokens, dtype=float))
    t = (max(c, m) if isinstance(c, float) and isinstance(m, float) else np.maximum(c, m)) + lat
    return t, c, m


def ridge_point(hw: HardwareSpec, math_dtype: str = "bf16") -> float:
    """Achieved FLOP/s over achieved bytes/s: ops above this intensity are compute-bound."""
    return (hw.flops_per_s(math_dtype) * hw.efficiency.compute) / (hw.hbm_bw_bytes_per_s * hw.efficiency.memory)


def multi_token_attention_per_ctx_s(hw: HardwareSpec, n_seqs, q_per_seq, heads_per_gpu: float, multi=None):
    """Per-layer time, per cached token of the whole batch (C = Σ c_i), of the cache attention of a
    pass whose sequences bring q_per_seq query tokens each, where the profile's engine runs one
    block per (sequence, query head, tile of query rows) over the sequence's whole cache
    (hardware.MultiTokenAttentionFit): c · s · w per layer with c = C / n, so s · w / n per token of
    C. `multi` (default q > 1): where some sequence brings more than one token (the kernel loses
    its cache split for the whole batch). 0 without such a fit."""
    kf = hw.kernel_fit
    mt = kf.multi_token_attention if kf is not None else None
    n = np.asarray(n_seqs, dtype=float)
    q = np.asarray(q_per_seq, dtype=float)
    if mt is None:
        out = 0.0 * n * q
    else:
        on = q > 1.0 if multi is None else np.asarray(multi, dtype=bool)
        blocks = n * heads_per_gpu * np.ceil(np.maximum(q, 1.0) / mt.tile_rows)
        out = np.where(on & (n > 0), mt.s_per_kv_token * mt.wave_factor(blocks) / np.maximum(n, 1e-12), 0.0)
    return float(out) if np.ndim(out) == 0 else out
