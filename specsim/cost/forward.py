"""Forward-pass time of a batch under TP/EP/PP: prefill, decode (q=1), verify (q=k+1), draft.

A pass over B sequences, sequence i bringing q_i new tokens on top of c_i cached ones, costs per
layer (per GPU, after TP/EP sharding; see docs/design.md "Forward pass"):

* linear ops: FLOPs 2·T·params, bytes = weights touched (T = Σq_i);
* MoE: the expected distinct experts hit by T routed tokens, E·(1 − (1 − top_k/E)^T), are read;
* attention over the cache: FLOPs 4·n_h·d·Σq_i·c_i, bytes Σc_i·(KV bytes per token per layer);
* attention among the new tokens (causal): FLOPs 4·n_h·d·Σq_i(q_i+1)/2, bytes Σq_i·KV bytes;
* each op is priced by the roofline; TP adds two all-reduces per layer (one per sub-block), EP
  an all-to-all dispatch and combine around the experts; PP runs stages one after another and
  sends activations across each stage boundary;
* the LM head (h × V) is priced for the tokens that need logits;
* multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi-K2; catalog/models.MLASpec) is priced as
  the engines run it (DeepSeek-V2, arXiv 2405.04434 §2.1; vLLM's MLA attention backends and
  FlashMLA, github.com/deepseek-ai/FlashMLA; SGLang's MLA backends): the cache holds the latent
  c_KV and the decoupled RoPE key, (kv_lora_rank + qk_rope_head_dim)·bytes per token per layer,
  shared by all heads, replicated on every TP rank and read once per layer; decode-like passes
  (decode, verify, draft) run the absorbed form -- W_UK folded into the query, W_UV into the
  output -- so attention over one cached token costs 2·(kv_lora_rank + qk_rope) + 2·kv_lora_rank
  FLOPs per query token per head (ModelSpec.attn_head_dim); prefill-like passes (prefill, the
  trainer's logprob and training) run the non-absorbed form, MHA over up-projected keys and
  values, 2·(qk_nope + qk_rope) + 2·v_head FLOPs per query-key pair per head
  (ModelSpec.prefill_attn_head_dim). The projections' weights are the same in both forms
  (kv_b_proj serves as W_UK/W_UV), so the linear ops are 2·T·params either way. Not priced: the
  prefill form's up-projection of a cached prefix (chunked prefill over a cached prefix);
* dense first layers of an MoE model (DeepSeek-V3's first_k_dense_replace) are priced layer
  group by layer group (ModelSpec.layer_groups); sliding-window layers (gpt-oss) attend to a
  fixed window per sequence and add nothing per context token.

Because the attention-over-cache op is linear in Σc for a fixed q, a pass with uniform q is an
affine function of the total context C = Σc_i:  t(C) = fixed_s + per_ctx_token_s · C.  The
engine integrates whole segments of steps in closed form from these two coefficients.
Whole engine steps (draft passes + verify, the sampler, the SD overheads, fixed per-step
overheads) are composed in cost/step.py (`step_cost`, `tree_step_cost`, `step_cost_table`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec, moe_shape_key
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost import comm
from specsim.cost.layout import ParallelLayout
from specsim.cost.roofline import (
    compute_time_s,
    decode_attention_fixed_s,
    gemm_op_s,
    memory_time_s,
    multi_token_attention_per_ctx_s,
)
from specsim.cost.sd_costs import sampler_bytes


@dataclass(frozen=True)
class PassCost:
    """Cost of one forward pass as an affine function of total context C (tokens).

    time_s(C) = fixed_s + per_ctx_token_s · C. `compute_s` / `memory_s` are the summed
    compute-side and memory-side times of the fixed part's ops (whichever is larger per op is
    what counts), `comm_s` the collectives; `bound` reports the larger of compute_s and memory_s.
    All fields broadcast over the batch-size array the cost was built for.
    """

    fixed_s: np.ndarray
    per_ctx_token_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm_s: np.ndarray

    def time_s(self, total_ctx_tokens):
        return self.fixed_s + self.per_ctx_token_s * np.asarray(total_ctx_tokens, dtype=float)

    def bound(self, total_ctx_tokens=0.0):
        """'compute' or 'memory' per batch size, from the op times at context C."""
        c = np.asarray(total_ctx_tokens, dtype=float)
        comp = self.compute_s + self._ctx_compute * c
        mem = self.memory_s + self._ctx_memory * c
        return np.where(comp > mem, "compute", "memory")

    # per-context-token compute/memory sides, kept for `bound`
    _ctx_compute: np.ndarray = 0.0
    _ctx_memory: np.ndarray = 0.0

    def __add__(self, other: PassCost) -> PassCost:
        return PassCost(self.fixed_s + other.fixed_s, self.per_ctx_token_s + other.per_ctx_token_s,
                        self.compute_s + other.compute_s, self.memory_s + other.memory_s,
                        self.comm_s + other.comm_s, self._ctx_compute + other._ctx_compute,
                        self._ctx_memory + other._ctx_memory)

    def scaled(self, factor) -> PassCost:
        f = np.asarray(factor, dtype=float)
        return PassCost(self.fixed_s * f, self.per_ctx_token_s * f, self.compute_s * f, self.memory_s * f,
                        self.comm_s * f, self._ctx_compute * f, self._ctx_memory * f)

    def plus_overhead(self, overhead_s) -> PassCost:
        return PassCost(self.fixed_s + overhead_s, self.per_ctx_token_s, self.compute_s, self.memory_s,
                        self.comm_s, self._ctx_compute, self._ctx_memory)


def math_dtype(weight_dtype: str) -> str:
    """Dtype the GEMMs run in: fp8 weights run fp8 math. int4 weights run W4A16 kernels (bf16
    tensor-core math on weights dequantised in registers): 'int4' keys the profile's weight-only
    GEMM law where one was fitted on measured W4A16 kernels (KernelFit.gemm_for falls back to bf16's
    otherwise) and is priced at the bf16 peak (HardwareSpec.flops_per_s). Other 4-bit weights
    (fp4) keep the bf16 key."""
    return {"fp8": "fp8", "int8": "fp8", "int4": "int4"}.get(weight_dtype, "bf16")


def expected_experts_hit(experts: int, top_k: int, routed_tokens):
    """Expected distinct experts touched by T tokens routing top_k of E uniformly:
    E · (1 − (1 − top_k/E)^T)."""
    if np.ndim(routed_tokens) == 0:
        return experts * (1.0 - (1.0 - top_k / experts) ** float(routed_tokens))
    t = np.asarray(routed_tokens, dtype=float)
    return experts * (1.0 - np.power(1.0 - top_k / experts, t))


def _roofline_op(compute_rate: float, memory_rate: float):
    """An op pricer bound to achieved FLOP/s and bytes/s (the roofline of cost/roofline.py)."""

    def op(flops, nbytes):
        c = flops / compute_rate
        m = nbytes / memory_rate
        return (max(c, m) if isinstance(c, float) and isinstance(m, float) else np.maximum(c, m)), c, m

    return op


@dataclass(frozen=True)
class _LayerStack:
    """Summed over every layer of a pass: time, compute side, memory side and collectives (s)."""

    time_s: object
    compute_s: object
    memory_s: object
    comm_s: object


def _layer_stack(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n, q,
                 weight_dtype: str | None, expert_tokens_per_seq: float | None) -> _LayerStack:
    """Every layer's fixed ops (pass_cost's per-layer terms: projections, FFN or experts, causal
    attention among the new tokens, the attention launch and per-block time, the layer's
    collectives), layer group by layer group, plus the sliding-window layers."""
    wdt = weight_dtype or layout.weight_dtype
    wb = DTYPE_BYTES[wdt]
    # the routed experts' own dtype (a checkpoint quantizing only them), unless the pass overrides the dtype
    edt = (layout.expert_weight_dtype or wdt) if weight_dtype is None else wdt
    mdt = math_dtype(wdt)
    tp, ep, dp = layout.tp, layout.ep, layout.attn_dp
    shards = max(tp, ep)
    tokens_engine = n * q
    tokens_attn = tokens_engine / dp  # tokens each attention group (and each of its GPUs) sees
    mem_rate = hw.hbm_bw_bytes_per_s * hw.efficiency.memory
    op = _roofline_op(hw.flops_per_s(mdt) * hw.efficiency.compute, mem_rate)
    op_bf16 = _roofline_op(hw.flops_per_s("bf16") * hw.efficiency.compute, mem_rate)
    def gop(flops, nbytes, m_tokens, n_kernels, kernel="gemm", shape=None):
        # GEMM at the profile's fitted shape-dependent rates (== `op` for a profile without a kernel fit)
        return gemm_op_s(flops, nbytes, hw, mdt, m_tokens, n_kernels, kernel, shape)

    kv_bytes_tok_layer = model.kv_bytes_per_token_layer(tp, layout.kv_bytes)
    heads_local = model.heads / tp
    d_attn = model.attn_head_dim   # decode form (MLA: absorbed); = head_dim for standard attention
    attn_gemm = gop(2 * tokens_attn * model.attn_params_per_layer / tp, model.attn_params_per_layer * wb / tp,
                    tokens_attn, 2)  # qkv + o projections
    # causal attention among the new tokens, and writing their KV
    causal = op_bf16(4 * heads_local * d_attn * (n / dp) * q * (q + 1) / 2, (n / dp) * q * kv_bytes_tok_layer)
    # fitted launch + per-sequence and per-(sequence, KV head) block attention time
    attn_fixed = decode_attention_fixed_s(hw, n / dp, max(model.kv_heads / tp, 1.0))

    layer_time = layer_comp = layer_mem = layer_comm = 0.0
    act_msg = tokens_attn * model.hidden * layout.act_bytes
    for count, g in model.layer_groups:   # (layers, one layer's spec): MoE layers, dense first layers
        per_layer = [attn_gemm]  # (time, compute, memory) of each fixed op per layer
        extra = g.extra_params_per_layer + g.norm_params_per_layer
        per_layer.append(op(2 * tokens_attn * extra / tp, extra * wb / tp))
        if g.ffn:
            p = g.dense_ffn_params_per_layer
            per_layer.append(gop(2 * tokens_attn * p / tp, p * wb / tp, tokens_attn, 2))  # gate_up + down
        if g.moe:
            moe = g.moe
            routed = tokens_engine * moe.top_k
            hit = expected_experts_hit(moe.experts, moe.top_k, tokens_engine if expert_tokens_per_seq is None
                                       else n * float(expert_tokens_per_seq))
            per_layer.append(gemm_op_s(2 * routed * g.expert_params / shards,
                                       hit * g.expert_params * DTYPE_BYTES[edt] / shards, hw, math_dtype(edt),
                                       routed / moe.experts, 1, "moe",  # grouped GEMM, m = tokens per expert
                                       moe_shape_key(g.hidden, moe.expert_ffn, moe.experts, moe.top_k)))
            router = g.router_params_per_layer
            per_layer.append(gop(2 * tokens_attn * router, router * wb, tokens_attn, 1))
            if g.shared_expert_params_per_layer:
                p = g.shared_expert_params_per_layer
                per_layer.append(gop(2 * tokens_attn * p / tp, p * wb / tp, tokens_attn, 2))
        per_layer.append(causal)
        per_layer.append((attn_fixed, 0.0 * attn_fixed, 0.0 * attn_fixed))  # a latency: neither roofline side

        g_comm = comm.all_reduce_s(act_msg, tp, hw)  # after attention
        if g.ffn:
            g_comm = g_comm + comm.all_reduce_s(act_msg, tp, hw)
        if g.moe:
            if ep > 1:
                dispatch = tokens_attn / tp * g.moe.top_k * g.hidden * layout.act_bytes
                g_comm = g_comm + 2 * comm.all_to_all_s(dispatch, ep, hw)
            else:
                g_comm = g_comm + comm.all_reduce_s(act_msg, tp, hw)
        layer_time = layer_time + count * (sum(t for t, _, _ in per_layer) + g_comm)
        layer_comp = layer_comp + count * sum(c for _, c, _ in per_layer)
        layer_mem = layer_mem + count * sum(m for _, _, m in per_layer)
        layer_comm = layer_comm + count * g_comm
    if model.sliding_layers:
        # sliding-window layers (gpt-oss) attend to the last `sliding_window` tokens only: a fixed
        # window per sequence (the context is taken to exceed it), not a per-context-token cost
        w = float(model.sliding_window)
        t, c, m = op_bf16(4 * heads_local * d_attn * (n / dp) * q * w, (n / dp) * w * kv_bytes_tok_layer)
        layer_time = layer_time + model.sliding_layers * t
        layer_comp = layer_comp + model.sliding_layers * c
        layer_mem = layer_mem + model.sliding_layers * m
    return _LayerStack(layer_time, layer_comp, layer_mem, layer_comm)


def _lm_head(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, head_tokens, logits, hdt: str):
    """(time, compute side, memory side) of the LM head (h × V) over `head_tokens` rows per GPU;
    0 where a pass has no logits (a forward-only timing)."""
    head_t, head_c, head_m = gemm_op_s(2 * head_tokens * model.hidden * model.vocab / layout.tp,
                                       model.hidden * model.vocab * DTYPE_BYTES[hdt] / layout.tp, hw, math_dtype(hdt),
                                       head_tokens, 1)
    if np.any(np.asarray(logits) == 0):   # no logits: the LM head does not run (a forward-only timing)
        runs = np.asarray(logits) > 0
        head_t, head_c, head_m = (np.where(runs, x, 0.0) if np.ndim(x) or np.ndim(runs) else float(x * runs)
                                  for x in (head_t, head_c, head_m))
    return head_t, head_c, head_m


def _cache_attention_per_ctx(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n, q):
    """(compute side, memory side) of the attention over the cache per context token
    (C = Σ c_i over the whole engine), all layers that read the whole cache: FLOPs
    4·heads·d·q per token, its KV bytes streamed, and the multi-token law where q > 1."""
    dp = layout.attn_dp
    heads_local = model.heads / layout.tp
    L = model.kv_layers   # layers whose attention reads the whole cache
    ctx_c = L * compute_time_s(4 * heads_local * model.attn_head_dim * q / dp, hw, "bf16")
    ctx_m = L * memory_time_s(model.kv_bytes_per_token_layer(layout.tp, layout.kv_bytes) / dp, hw, stream="kv")
    # q > 1 on an engine whose attention kernel then runs unsplit, one block per query head
    ctx_c = np.maximum(ctx_c, L * multi_token_attention_per_ctx_s(hw, n / dp, q, heads_local) / dp)
    return ctx_c, ctx_m


def pass_cost(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n_seqs, q_per_seq: float,
              logits_per_seq: float | None = None, weight_dtype: str | None = None,
              head_weight_dtype: str | None = None, expert_tokens_per_seq: float | None = None) -> PassCost:
    """Affine cost of one forward pass of `n_seqs` sequences (array ok), q_per_seq new tokens each.

    `expert_tokens_per_seq` (MoE; default q_per_seq): the tokens per sequence whose routing sets
    how many distinct experts the pass reads -- a counterfactual knob (`what_if.verify_experts_as_decode`
    prices a verify's expert reads as a decode's, 1 per sequence); FLOPs always count every token.

    `logits_per_seq`: tokens per sequence that go through the LM head (decode 1, verify k+1,
    prefill 1, logprob q). `weight_dtype` overrides the layout's (a 4-bit self-drafter);
    `head_weight_dtype` the LM head's (default: the pass's weight dtype; a self-drafter sharing
    the target's head streams it at the target's dtype).
    """
    n = float(n_seqs) if np.ndim(n_seqs) == 0 else np.asarray(n_seqs, dtype=float)
    q = float(q_per_seq) if np.ndim(q_per_seq) == 0 else np.asarray(q_per_seq, dtype=float)
    logits = q if logits_per_seq is None else (
        float(logits_per_seq) if np.ndim(logits_per_seq) == 0 else np.asarray(logits_per_seq, dtype=float))
    layers = _layer_stack(model, hw, layout, n, q, weight_dtype, expert_tokens_per_seq)
    hdt = head_weight_dtype or weight_dtype or layout.weight_dtype
    head_t, head_c, head_m = _lm_head(model, hw, layout, n * logits / layout.attn_dp, logits, hdt)
    act_msg = n * q / layout.attn_dp * model.hidden * layout.act_bytes
    pp_comm = (layout.pp - 1) * comm.p2p_s(act_msg, hw, across_domain=False) if layout.pp > 1 else 0.0

    fixed = layers.time_s + head_t + pp_comm
    ctx_c, ctx_m = _cache_attention_per_ctx(model, hw, layout, n, q)
    scalar = isinstance(n, float) and isinstance(q, float)
    if scalar:
        ctx_c = float(ctx_c)
    ones = 1.0 if scalar else np.ones(np.broadcast(n, q).shape)
    per_ctx = (max(ctx_c, ctx_m) if scalar else np.maximum(ctx_c, ctx_m)) * ones
    comm_total = layers.comm_s + pp_comm
    return PassCost(fixed_s=fixed, per_ctx_token_s=per_ctx, compute_s=layers.compute_s + head_c,
                    memory_s=layers.memory_s + head_m, comm_s=comm_total * ones,
                    _ctx_compute=ctx_c * ones, _ctx_memory=ctx_m * ones)


#: vLLM V1's cascade-attention rule (vllm/v1/attention/backends/flash_attn.py, `use_cascade_attention`):
#: a common prefix of at least this many cached tokens, shared by at least this many requests
CASCADE_MIN_PREFIX_TOKENS = 256
CASCADE_MIN_REQUESTS = 8
#: the q and kv tile sizes of that rule's performance model (its "default tile sizes")
CASCADE_MODEL_TILE = 128


#: tokens per KV-cache block of vLLM on CUDA (its default `block_size`, vllm/config/cache.py; the
#: FlashAttention backend requires a multiple of 16): prefix caching shares whole blocks only
KV_BLOCK_TOKENS = 16


def cached_prefix_tokens(prompt_tokens, block_tokens: int = KV_BLOCK_TOKENS):
    """Tokens of a prompt that vLLM V1's prefix cache serves to a request repeating it, i.e. the
    prefix its requests share: floor((p − 1) / block) · block. `get_computed_blocks`
    (vllm/v1/core/kv_cache_manager.py) caps a hit at num_tokens − 1 ("we must recompute the last
    token to obtain logits") and hits whole blocks only, so the prompt's last block (the whole of
    it when p is a multiple of the block) is recomputed into a block of the request's own. A
    256-token prompt shares 240 tokens: below the cascade rule's 256 (`uses_cascade_attention`).
    Elementwise."""
    p = np.asarray(prompt_tokens, dtype=float)
    out = np.floor(np.maximum(p - 1.0, 0.0) / block_tokens) * block_tokens
    return float(out) if np.ndim(out) == 0 else out


def _cdiv(a, b):
    return np.ceil(np.asarray(a, dtype=float) / b)


def uses_cascade_attention(n_seqs, q_per_seq, prefix_tokens, q_heads: float, kv_heads: float, sms: int):
    """Whether vLLM V1 runs cascade attention for a pass of `n_seqs` requests sharing a cached
    prefix of `prefix_tokens` (elementwise; heads per GPU). Its rule
    (vllm/v1/attention/backends/flash_attn.py, `use_cascade_attention`): never below 256 prefix
    tokens or 8 requests; always when the normal kernel would not run flash decoding (some request
    brings q > 1 tokens, or one query head per KV head); otherwise (a decode) when its performance
    model says cascade is faster:

        cascade_time = ceil(q_heads · ceil(n / 128) / sms) · ceil(P / 128)
        flash_decoding_time = ceil(n · kv_heads · ceil(q_heads / kv_heads / 128) · ceil(P / 128) / sms)

    Cascade attends the shared prefix once for all requests (`shared_prefix_attention_s`)."""
    n = np.asarray(n_seqs, dtype=float)
    q = np.asarray(q_per_seq, dtype=float)
    p = np.asarray(prefix_tokens, dtype=float)
    group = float(q_heads // kv_heads) if kv_heads > 0 else 1.0
    base = (p >= CASCADE_MIN_PREFIX_TOKENS) & (n >= CASCADE_MIN_REQUESTS)
    flash_decoding = (group > 1) & (q <= 1.0)
    tiles = _cdiv(p, CASCADE_MODEL_TILE)
    cascade_t = _cdiv(q_heads * _cdiv(n, CASCADE_MODEL_TILE), sms) * tiles
    fd_t = _cdiv(n * kv_heads * np.ceil(group / CASCADE_MODEL_TILE) * tiles, sms)
    out = base & (~flash_decoding | (cascade_t < fd_t))
    return bool(out) if np.ndim(out) == 0 else out


def shared_prefix_attention_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n_seqs, q_per_seq,
                              prefix_tokens, suffix_tokens, sms: int | None = None, full_graph: bool = True):
    """Time of the attention over the cache (all layers) of one pass of `n_seqs` sequences that
    share a cached prefix of `prefix_tokens` (prefix caching: one copy of its KV blocks) and each
    hold `suffix_tokens` of their own, q_per_seq new tokens each; elementwise. What a sweep that
    repeats one prompt runs (calibrate/kernels/forward_sweep.py); the RL batches the simulator runs hold
    many prompts, whose common prefix is below the cascade threshold, and are priced by
    `pass_cost` over their whole contexts.

    Per layer (L = layers reading the whole cache; s, w: hardware.MultiTokenAttentionFit's
    per-token time and wave factor, its term 0 without that fit; kv_t, fl_t(q): the decode law's
    KV-streaming and math time per cached token and sequence):

    * cascade (`uses_cascade_attention`, with `sms` = the fit's multiprocessors): the prefix is
      attended once, as one sequence whose n·q query rows share it (FA2 over block_table[:1]):
      max(P·s·w(heads · ceil(n·q / tile_rows)), P·kv_t, n·P·fl_t(q)); then each sequence over its
      suffix, max(S·s·w(n · heads · ceil(q / tile_rows)) [q > 1], n·S·kv_t, n·S·fl_t(q)); plus
      the fit's piecewise_attention_s (the step leaves its full CUDA graph; not added when
      `full_graph` is False: a pass that runs piecewise graphs anyway, as EfficientRollout's
      self-drafter does, changes no graph mode);
    * otherwise each sequence over its whole context c = P + S, as `pass_cost` prices it:
      max(c·s·w(n · heads · ceil(q / tile_rows)) [q > 1], n·c·kv_t, n·c·fl_t(q)).
    """
    n = np.asarray(n_seqs, dtype=float) / layout.attn_dp
    q = np.asarray(q_per_seq, dtype=float)
    p = np.asarray(prefix_tokens, dtype=float)
    s = np.asarray(suffix_tokens, dtype=float)
    kf = hw.kernel_fit
    mt = kf.multi_token_attention if kf is not None else None
    heads = model.heads / layout.tp
    kv_heads = max(model.kv_heads / layout.tp, 1.0)
    kv_t = memory_time_s(model.kv_bytes_per_token_layer(layout.tp, layout.kv_bytes), hw, stream="kv")
    fl_t = compute_time_s(4 * heads * model.attn_head_dim * q, hw, "bf16")
    def mtl(seqs, rows, ctx_tokens, on):   # the multi-token law: ctx_tokens per sequence, all sequences
        per = multi_token_attention_per_ctx_s(hw, seqs, rows, heads, on)
        return per * seqs * ctx_tokens
    multi = q > 1.0
    n_sms = int(sms if sms is not None else (mt.sms if mt is not None else 0))
    casc = uses_cascade_attention(n, q, p, heads, kv_heads, n_sms) if n_sms > 0 else False
    # the prefix call brings n·q > 1 query rows as one sequence: never the flash-decoding split
    prefix = np.maximum(np.maximum(mtl(1.0, n * q, p, True), p * kv_t), n * p * fl_t)
    suffix = np.maximum(np.maximum(mtl(n, q, s, multi), n * s * kv_t), n * s * fl_t)
    piecewise = mt.piecewise_attention_s if mt is not None and full_graph else 0.0
    c = p + s
    whole = np.maximum(np.maximum(mtl(n, q, c, multi), n * c * kv_t), n * c * fl_t)
    out = model.kv_layers * np.where(casc, prefix + suffix + piecewise, whole)
    return float(out) if np.ndim(out) == 0 else out


def decode_cost(model, hw, layout, n_seqs) -> PassCost:
    """One decode pass (q=1) of the policy."""
    return pass_cost(model, hw, layout, n_seqs, 1, 1)


def verify_cost(model, hw, layout, n_seqs, k: int) -> PassCost:
    """SD verify: q = k+1 query tokens per sequence, all of them need logits. The KV cache is read
    once per layer (pass_cost's per-context term), GEMMs and MoE see B·(k+1) tokens, and the KV of
    all k+1 slots is written, the ones rejection sampling later discards included."""
    return pass_cost(model, hw, layout, n_seqs, k + 1, k + 1)


def _zero_cost(n_seqs) -> PassCost:
    z = np.zeros_like(np.asarray(n_seqs, dtype=float))
    return PassCost(z, z, z, z, z, z, z)


def draft_cost(drafter: DrafterArch, hw, layout, n_seqs, q_per_seq: float = 1.0, first: bool = True,
               logits_per_seq: float = 1.0) -> PassCost:
    """One draft pass of the drafter over q_per_seq tokens per sequence (`logits_per_seq` rows
    through its LM head); zero for n-gram drafting (no GPU pass; its CPU proposer is priced in
    `step_cost`).

    The first draft pass of a step runs over the tokens the verify just accepted (q = accepted
    + 1 per sequence); later passes over the token(s) drafted before (q = 1 for a chain, the
    previous depth's nodes for a tree). A `head` drafter (EAGLE-3) fuses the target's hidden
    states (fusion_inputs·h → h fc) only in its first pass; later passes feed its own hidden
    state, so that fc is left out of them (its weights still count in memory)."""
    if drafter.model is None:
        return _zero_cost(n_seqs)
    dm = drafter.model
    spec = drafter.spec
    if not first and spec.cost_shape == "head" and spec.fusion_inputs:
        dm = replace(dm, extra_params_per_layer=dm.extra_params_per_layer - spec.fusion_inputs * dm.hidden ** 2)
    head = layout.weight_dtype if spec.shares_target_head else None
    return pass_cost(dm, hw, layout, n_seqs, q_per_seq, logits_per_seq, weight_dtype=drafter.weight_dtype,
                     head_weight_dtype=head)


def sampler_cost(model: ModelSpec, hw, n_seqs, rows_per_seq: float, draft_rows_per_seq: float = 0.0,
                 draft_vocab: int = 0) -> PassCost:
    """The sampler's HBM traffic (cost/sd_costs.sampler_bytes): decode samples n rows; SD's
    rejection sampler n·(k+1) target rows over the full vocabulary plus the draft probabilities."""
    nbytes = sampler_bytes(n_seqs, rows_per_seq, model.vocab, hw.sd_costs, draft_rows_per_seq, draft_vocab)
    t = memory_time_s(nbytes, hw)
    z = np.zeros_like(np.asarray(t, dtype=float))
    return PassCost(t, z, z, t, z, z, z)


def ragged_pass_times_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n_seqs, sum_q, sum_q_sq,
                        sum_qc, sum_c, sum_logits, weight_dtype: str | None = None) -> np.ndarray:
    """Times of many ragged passes at once, each described by its sums over its sequences:
    n, Σq, Σq², Σq·c, Σc and Σ(logit tokens) (arrays of one shape, one entry per pass).

    The linear ops see T = Σq tokens (priced by `pass_cost` at the mean q), the causal attention
    among new tokens uses Σq(q+1)/2 = (Σq² + Σq)/2, and attention over the cache uses Σq·c
    (FLOPs) and Σc (KV bytes). For uniform q this is exactly pass_cost's affine time."""
    n = np.asarray(n_seqs, dtype=float)
    sq = np.asarray(sum_q, dtype=float)
    q_eff = sq / n
    base = pass_cost(model, hw, layout, n, q_eff, np.asarray(sum_logits, dtype=float) / n, weight_dtype)
    dp = layout.attn_dp
    attn_flops = 4 * model.heads / layout.tp * model.attn_head_dim / dp   # decode form (pass_cost's)
    new_flops = 4 * model.heads / layout.tp * model.prefill_attn_head_dim / dp  # prefill form (MLA: non-absorbed)
    kv_local = model.kv_bytes_per_token_layer(layout.tp, layout.kv_bytes) / dp
    L = model.kv_layers
    mem_new = memory_time_s(sq * kv_local, hw)
    uniform_new = compute_time_s(attn_flops * n * q_eff * (q_eff + 1) / 2, hw)
    ragged_new = compute_time_s(new_flops * (np.asarray(sum_q_sq, dtype=float) + sq) / 2, hw)
    new_adj = model.layers * (np.maximum(ragged_new, mem_new) - np.maximum(uniform_new, mem_new))
    ctx_c = L * compute_time_s(attn_flops * np.asarray(sum_qc, dtype=float), hw)
    # some sequence brings > 1 token (Σq² > Σq): an unsplit kernel runs every sequence unsplit
    multi = np.asarray(sum_q_sq, dtype=float) > sq + 1e-9
    ctx_c = np.maximum(ctx_c, L * np.asarray(sum_c, dtype=float) / dp
                       * multi_token_attention_per_ctx_s(hw, n / dp, q_eff, model.heads / layout.tp, multi))
    ctx_m = L * memory_time_s(np.asarray(sum_c, dtype=float) * kv_local, hw, stream="kv")
    return np.asarray(base.fixed_s + new_adj + np.maximum(ctx_c, ctx_m), dtype=float)


def forward_time_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, q_tokens, ctx_tokens,
                   logits_per_seq=None, weight_dtype: str | None = None) -> float:
    """Time of one pass over a ragged batch: sequence i brings q_tokens[i] new tokens on top of
    ctx_tokens[i] cached ones (prefill: ctx = cached prefix, often 0); see ragged_pass_times_s."""
    q = np.asarray(q_tokens, dtype=float)
    c = np.asarray(ctx_tokens, dtype=float)
    if q.size == 0:
        return 0.0
    logits = np.ones_like(q) if logits_per_seq is None else np.broadcast_to(np.asarray(logits_per_seq, float), q.shape)
    return float(ragged_pass_times_s(model, hw, layout, q.size, q.sum(), (q * q).sum(), (q * c).sum(), c.sum(),
                                     logits.sum(), weight_dtype))


def prefill_batches_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n_seqs, sum_q, sum_q_sq,
                      sum_qc, sum_c) -> np.ndarray:
    """Prefill passes (one logit per sequence) described by their sums; vectorized over passes.
    The engines record every prefill of a rollout and price them all in one call."""
    n = np.asarray(n_seqs, dtype=float)
    if n.size == 0:
        return np.zeros(0)
    return ragged_pass_times_s(model, hw, layout, n, sum_q, sum_q_sq, sum_qc, sum_c, n)


def prefill_time_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, prompt_tokens,
                   cached_tokens=None) -> float:
    """Prefill of a set of prompts (one logit each), over an optional cached prefix."""
    q = np.asarray(prompt_tokens, dtype=float)
    c = np.zeros_like(q) if cached_tokens is None else np.asarray(cached_tokens, dtype=float)
    return forward_time_s(model, hw, layout, q, c, logits_per_seq=1.0)
