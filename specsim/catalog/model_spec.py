"""The model spec: frozen decoder-transformer dataclasses and their derived sizes.

:class:`ModelSpec` (with :class:`MoESpec` and :class:`MLASpec`) is what the cost model prices; it is
built from a Hugging Face config by :mod:`specsim.catalog.hf_config` and looked up by name in
:mod:`specsim.catalog.models` (which re-exports these classes). Formulas: see the models module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts FFN: `experts` experts of width `expert_ffn`, `top_k` per token, plus
    `shared_experts` always-on experts of width `shared_ffn`. `expert_bias`: each expert's
    gate/up and down projections carry biases (gpt-oss: 2·f_e + h per expert); `router_bias`: the
    router has one per expert."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_ffn: int = 0
    expert_bias: bool = False
    router_bias: bool = False


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434 §2.1; DeepSeek-V3, Kimi-K2).

    Queries: h → q_lora_rank (q_a_proj, + its RMSNorm) → n_h·(qk_nope + qk_rope) (q_b_proj), or
    one h → n_h·(qk_nope + qk_rope) projection when `q_lora_rank` is None. Keys and values:
    h → kv_lora_rank + qk_rope (kv_a_proj_with_mqa: the latent c_KV and the decoupled RoPE key
    k_R, shared by every head), c_KV → n_h·(qk_nope + v_head) (kv_b_proj: W_UK and W_UV);
    output n_h·v_head → h. The cache holds c_KV and k_R per token per layer: `latent_dim` =
    kv_lora_rank + qk_rope_head_dim values (576 for DeepSeek-V3)."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    @property
    def latent_dim(self) -> int:
        """Cached values per token per layer: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class QuantSpec:
    """The weight quantization a checkpoint ships with (config.json `quantization_config`, read by
    hf_config.quantization_from_config). `weight_dtype`: the dtype of the quantized weights;
    `scope`: "all" (every linear layer) or "experts" (only the routed experts: the checkpoint keeps
    attention, router, embeddings and LM head unconverted, as gpt-oss's mxfp4 does); `excluded`:
    the module patterns it leaves in bf16, as the config lists them; `method`: quant_method."""

    weight_dtype: str
    scope: str = "all"
    excluded: tuple[str, ...] = ()
    method: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder transformer. `ffn` is the dense FFN width of every layer (0 for an MoE model);
    `dense_layers` of an MoE model's layers run a dense FFN of `dense_layer_ffn` instead of the
    MoE block. `mla`: multi-head latent attention (then `kv_heads` = `heads` and `head_dim` =
    qk_nope + qk_rope, the prefill form's MHA shape). `sliding_layers` layers attend only to the
    last `sliding_window` tokens (gpt-oss). `mtp_layers`: the config's native multi-token
    prediction layers (num_nextn_predict_layers; the `mtp` drafter), not counted in the totals.
    `published_active_convention`: what the published active count counts -- "all" (every
    parameter a token touches, the embedding row included: Qwen's, Mistral's convention), "matmul"
    (the layers and the LM head, not the embedding lookup: DeepSeek's and OpenAI's) or "layers" (the
    transformer layers only: GLM's)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ffn: int = 0
    moe: MoESpec | None = None
    tied_embeddings: bool = False
    qkv_bias: bool = False
    max_positions: int = 32768
    source: str = ""
    hf_id: str = ""
    published_total_params_b: float | None = None
    published_active_params_b: float | None = None
    extra_params_per_layer: int = 0
    mla: MLASpec | None = None
    dense_layers: int = 0
    dense_layer_ffn: int = 0
    mtp_layers: int = 0
    sliding_layers: int = 0
    sliding_window: int = 0
    model_type: str = ""
    published_source: str = ""
    published_active_convention: str = "all"
    quantization: QuantSpec | None = None

    # --- per-layer parameter counts -------------------------------------------------------
    @cached_property
    def attn_params_per_layer(self) -> int:
        """q, k, v, o projections (+ q/k/v biases); MLA: q_a (+ norm), q_b, kv_a (+ norm), kv_b, o."""
        if self.mla is not None:
            m, h, n = self.mla, self.hidden, self.heads
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * m.qk_head_dim
            else:
                q = h * n * m.qk_head_dim
            kv = h * m.latent_dim + m.kv_lora_rank + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + n * m.v_head_dim * h
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return self.hidden * q + 2 * self.hidden * kv + q * self.hidden + bias

    @cached_property
    def dense_ffn_params_per_layer(self) -> int:
        return 3 * self.hidden * self.ffn

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert (SwiGLU: gate, up, down; + biases when `expert_bias`)."""
        if not self.moe:
            return 0
        bias = (2 * self.moe.expert_ffn + self.hidden) if self.moe.expert_bias else 0
        return 3 * self.hidden * self.moe.expert_ffn + bias

    @cached_property
    def shared_expert_params_per_layer(self) -> int:
        if not self.moe or not self.moe.shared_experts:
            return 0
        return self.moe.shared_experts * 3 * self.hidden * self.moe.shared_ffn

    @cached_property
    def router_params_per_layer(self) -> int:
        if not self.moe:
            return 0
        return self.hidden * self.moe.experts + (self.moe.experts if self.moe.router_bias else 0)

    @cached_property
    def moe_params_per_layer(self) -> int:
        if not self.moe:
            return 0
        return self.moe.experts * self.expert_params + self.router_params_per_layer + self.shared_expert_params_per_layer

    @cached_property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden

    @cached_property
    def layer_params(self) -> int:
        """One layer of the model's main kind (its MoE layers when it has dense first layers)."""
        return (self.attn_params_per_layer + self.dense_ffn_params_per_layer + self.moe_params_per_layer
                + self.norm_params_per_layer + self.extra_params_per_layer)

    @cached_property
    def active_layer_params(self) -> int:
        """Parameters one token multiplies through in one layer (top-k experts only)."""
        moe_active = 0
        if self.moe:
            moe_active = self.moe.top_k * self.expert_params + self.router_params_per_layer + self.shared_expert_params_per_layer
        return (self.attn_params_per_layer + self.dense_ffn_params_per_layer + moe_active
                + self.norm_params_per_layer + self.extra_params_per_layer)

    @cached_property
    def layer_groups(self) -> tuple[tuple[int, ModelSpec], ...]:
        """(count, one layer's spec) for each kind of layer: the model itself for a uniform stack;
        an MoE model with `dense_layers` dense first layers has its MoE layers and its dense ones
        (their spec has the dense FFN of `dense_layer_ffn` and no MoE block)."""
        if not self.dense_layers:
            return ((self.layers, self),)
        moe = replace(self, dense_layers=0, dense_layer_ffn=0)
        dense = replace(self, name=f"{self.name}-dense-layer", moe=None, ffn=self.dense_layer_ffn, dense_layers=0,
                        dense_layer_ffn=0)
        return ((self.layers - self.dense_layers, moe), (self.dense_layers, dense))

    @cached_property
    def stack_params(self) -> int:
        """Parameters of all transformer layers (every kind of layer)."""
        return sum(n * g.layer_params for n, g in self.layer_groups)

    @cached_property
    def stack_active_params(self) -> int:
        return sum(n * g.active_layer_params for n, g in self.layer_groups)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """The LM head's weights (shared with the embedding when tied, but always multiplied)."""
        return self.vocab * self.hidden

    # --- attention shape as the engines run it -------------------------------------------
    @property
    def kv_layers(self) -> int:
        """Layers whose KV cache grows with the context (all but the sliding-window ones)."""
        return self.layers - self.sliding_layers

    @property
    def attn_head_dim(self):
        """d_eff of decode-like passes (decode, verify, draft): attention over one cached token
        costs 4·d_eff FLOPs per query token per head. Standard attention: d (QKᵀ 2·d + PV 2·d).
        MLA runs the absorbed form there (W_UK folded into the query, W_UV into the output; vLLM's
        MLA backends, FlashMLA): QKᵀ over the kv_lora_rank + qk_rope latent, PV over kv_lora_rank:
        4·d_eff = 2·(kv_lora_rank + qk_rope) + 2·kv_lora_rank (2176 for DeepSeek-V3, d_eff = 544)."""
        if self.mla is None:
            return self.head_dim
        m = self.mla
        return (2 * m.latent_dim + 2 * m.kv_lora_rank) / 4

    @property
    def prefill_attn_head_dim(self):
        """d_eff of prefill-like passes (prefill, logprob, training): MLA runs the non-absorbed
        form there (c_KV up-projected to per-head K and V, then MHA): 4·d_eff = 2·(qk_nope +
        qk_rope) + 2·v_head (640 for DeepSeek-V3). Standard attention: d."""
        if self.mla is None:
            return self.head_dim
        m = self.mla
        return (2 * m.qk_head_dim + 2 * m.v_head_dim) / 4

    def kv_bytes_per_token_layer(self, tp: int, kv_dtype_bytes: float) -> float:
        """KV bytes one cached token takes in one layer on one GPU of a tp-way engine:
        2·⌈n_kv/tp⌉·d·bytes (KV heads replicate when n_kv < tp); MLA: (kv_lora_rank + qk_rope)·bytes,
        the latent shared by all heads and replicated on every TP rank (vLLM / SGLang MLA)."""
        if self.mla is not None:
            return float(self.mla.latent_dim) * kv_dtype_bytes
        return 2 * float(-(-self.kv_heads // tp)) * self.head_dim * kv_dtype_bytes

    # --- totals -------------------------------------------------------------------------
    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.stack_params + self.embedding_params + head + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters touched per token, counting the embedding table as published totals do."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.stack_active_params + self.embedding_params + head + self.hidden

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters that take part in matmuls per token: active layers + LM head (not the lookup)."""
        return self.stack_active_params + self.lm_head_params

    @property
    def active_params_as_published(self) -> int:
        """The active count under the publisher's convention (`published_active_convention`)."""
        if self.published_active_convention == "matmul":
            return self.matmul_params_per_token
        if self.published_active_convention == "layers":
            return self.stack_active_params
        return self.active_params

    def weight_bytes(self, dtype_bytes: float) -> float:
        return self.total_params * dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV cache bytes for one token over all layers: layers · 2 · n_kv · d · bytes; MLA:
        layers · (kv_lora_rank + qk_rope) · bytes; sliding-window layers hold only their window."""
        if self.mla is not None:
            return self.kv_layers * self.mla.latent_dim * kv_dtype_bytes
        return self.kv_layers * 2 * self.kv_heads * self.head_dim * kv_dtype_bytes

    def flops_per_token(self, context_tokens: float) -> float:
        """Forward FLOPs for one new token attending to `context_tokens` (decode form):
        2·(matmul params) + 4·layers·n_h·d_eff·context (QK^T and PV; d_eff = `attn_head_dim`)."""
        return 2.0 * self.matmul_params_per_token + 4.0 * self.kv_layers * self.heads * self.attn_head_dim * context_tokens
