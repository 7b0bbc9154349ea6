"""GPU memory: weights per GPU, activation workspace, KV bytes per token, KV capacity.

Per GPU of a replica (layout in cost/layout.py):
    weights  = layers/pp · (dense params/tp + expert params/max(tp, ep)) + (embedding + LM head)/tp
    KV/token = layers/pp · 2 · ⌈n_kv/tp⌉ · d · bytes(kv)      (KV heads replicate when n_kv < tp)
               MLA: layers/pp · (kv_lora_rank + qk_rope_head_dim) · bytes(kv), whatever tp (the
               latent is shared by the heads and every TP rank holds it); sliding-window layers
               (gpt-oss) are left out: each holds a fixed window per sequence, not per token
    usable   = HBM · gpu_memory_utilization − weights − activation workspace
    KV capacity (tokens per replica) = usable / KV-per-token · attn_dp   (DP-attention groups
               each hold their own sequences' KV)
The workspace is a peak estimate for `max_batched_tokens` tokens in flight through one layer
(hidden states, QKV, FFN intermediates) plus fp32 logits, the way vLLM's profiling run sizes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost.layout import ParallelLayout
from specsim.errors import LayoutError

GB = 1e9


def weight_bytes_per_gpu(model: ModelSpec, layout: ParallelLayout, weight_dtype: str | None = None,
                         embeddings: bool = True) -> float:
    """Weight bytes on one GPU; `embeddings=False` leaves out the embedding and LM head. The routed
    experts are stored in the layout's `expert_weight_dtype` where it has one (and `weight_dtype`
    does not override the layout's), everything else in the weight dtype."""
    wb = DTYPE_BYTES[weight_dtype or layout.weight_dtype]
    own = layout.expert_weight_dtype if weight_dtype in (None, layout.weight_dtype) else None
    eb = DTYPE_BYTES[own] if own else wb
    if len(model.layer_groups) == 1:
        moe_routed = model.moe.experts * model.expert_params if model.moe else 0
        dense = model.layer_params - moe_routed
        per_layer = wb * dense / layout.tp + eb * moe_routed / max(layout.tp, layout.ep)
    else:   # dense first layers: the mean layer (the stage holding them holds fewer experts)
        per_layer = 0.0
        for count, g in model.layer_groups:
            routed = g.moe.experts * g.expert_params if g.moe else 0
            per_layer += count * (wb * (g.layer_params - routed) / layout.tp + eb * routed / max(layout.tp, layout.ep))
        per_layer /= model.layers
    head = 0 if model.tied_embeddings else model.lm_head_params
    layers_local = int(np.ceil(model.layers / layout.pp))
    return layers_local * per_layer + wb * (model.embedding_params + head) / layout.tp * embeddings


def drafter_weight_bytes_per_gpu(drafter: DrafterArch | None, layout: ParallelLayout) -> float:
    """The drafter's own weights on one GPU (not its embedding and LM head when it shares the
    target's: DrafterKind.shares_target_head)."""
    if drafter is None or drafter.model is None:
        return 0.0
    lay = ParallelLayout(tp=layout.tp, pp=1, ep=1, weight_dtype=drafter.weight_dtype or layout.weight_dtype,
                         kv_dtype=layout.kv_dtype, act_dtype=layout.act_dtype)
    return weight_bytes_per_gpu(drafter.model, lay, embeddings=not drafter.spec.shares_target_head) / layout.pp


def kv_bytes_per_token_per_gpu(model: ModelSpec, layout: ParallelLayout, drafter: DrafterArch | None = None) -> float:
    """KV bytes one cached token occupies on one GPU (policy + the drafter's own layers)."""
    if model.mla is not None:   # the latent c_KV + RoPE key, replicated on every TP rank
        per_layer = model.kv_bytes_per_token_layer(layout.tp, layout.kv_bytes)
    else:
        per_layer = 2 * np.ceil(model.kv_heads / layout.tp) * model.head_dim * layout.kv_bytes
    layers = int(np.ceil(model.kv_layers / layout.pp))
    if drafter is not None and drafter.model is not None:
        layers += int(np.ceil(drafter.kv_layers / layout.pp))
    return float(per_layer * layers)


def activation_bytes_per_gpu(model: ModelSpec, layout: ParallelLayout, max_batched_tokens: int) -> float:
    ffn_local = (model.ffn or (model.moe.top_k * model.moe.expert_ffn if model.moe else 0)) / layout.tp
    q_local = (model.heads + 2 * model.kv_heads) * model.head_dim / layout.tp
    per_token = (4 * model.hidden + q_local + 3 * ffn_local) * layout.act_bytes
    logits = max_batched_tokens * model.vocab / layout.tp * 4.0
    return float(max_batched_tokens * per_token + logits)


@dataclass(frozen=True)
class MemoryPlan:
    """Where one GPU's memory goes, and the KV capacity that leaves for the replica."""

    hbm_bytes: float
    usable_bytes: float
    weight_bytes: float
    drafter_weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int

    def gb_per_gpu(self) -> dict[str, float]:
        """The plan per GPU in GB (1e9 bytes), keys with their unit: hbm_gb = usable_gb + the
        reserve; usable_gb = weights + drafter weights + activations + KV cache."""
        return {"hbm_gb": self.hbm_bytes / GB, "usable_gb": self.usable_bytes / GB, "weights_gb": self.weight_bytes / GB,
                "drafter_weights_gb": self.drafter_weight_bytes / GB, "activations_gb": self.activation_bytes / GB,
                "kv_cache_gb": self.kv_bytes / GB}


def memory_plan(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, *, gpu_memory_utilization: float = 0.9,
                max_batched_tokens: int = 8192, drafter: DrafterArch | None = None,
                min_kv_tokens: int = 1) -> MemoryPlan:
    """Memory of one GPU of a replica; raises LayoutError when the weights or the minimum KV do not fit."""
    usable = hw.hbm_bytes * gpu_memory_utilization
    w = weight_bytes_per_gpu(model, layout)
    dw = drafter_weight_bytes_per_gpu(drafter, layout)
    act = activation_bytes_per_gpu(model, layout, max_batched_tokens)
    if w + dw > usable:
        total = model.weight_bytes(layout.weight_bytes) + (0.0 if drafter is None or drafter.model is None
                                                            else dw * layout.tp * layout.pp)
        raise LayoutError(
            f"{model.name} {layout.weight_dtype} needs {total / GB:.0f} GB of weights"
            f"{' (with the drafter)' if dw else ''}; {layout.describe()} on {hw.name} gives "
            f"{usable * layout.gpus / GB:.0f} GB ({usable / GB:.0f} GB usable per GPU at "
            f"gpu_memory_utilization={gpu_memory_utilization}, {(w + dw) / GB:.1f} GB needed per GPU): "
            f"raise tp/ep/pp or use a smaller weight dtype")
    kv_free = usable - w - dw - act
    per_tok = kv_bytes_per_token_per_gpu(model, layout, drafter)
    cap = int(max(kv_free, 0.0) // per_tok) * layout.attn_dp
    if cap < min_kv_tokens:
        raise LayoutError(
            f"{model.name} on {hw.name} with {layout.describe()}: after {w / GB:.1f} GB weights, "
            f"{dw / GB:.1f} GB drafter and {act / GB:.1f} GB activations per GPU, {max(kv_free, 0) / GB:.2f} GB "
            f"is left for KV cache = {cap} tokens, but one response needs up to {min_kv_tokens} tokens: "
            f"raise tp/pp, lower max_batched_tokens or raise gpu_memory_utilization")
    return MemoryPlan(hw.hbm_bytes, usable, w, dw, act, kv_free, per_tok, cap)
