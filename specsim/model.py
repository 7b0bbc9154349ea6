"""Model catalog: frozen decoder-transformer specs and their derived sizes.

Architecture numbers come from each model's HF config.json (catalog/models.yaml names the
source). Derived quantities follow the standard decoder block:

* attention params per layer = h·(n_h·d) + 2·h·(n_kv·d) + (n_h·d)·h (+ biases)
* dense SwiGLU FFN per layer = 3·h·f;  MoE per layer = E·3·h·f_e + h·E (router)
* embeddings = V·h, plus an LM head V·h unless tied
* KV bytes per token = layers · 2 · n_kv · d · bytes(kv dtype)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from importlib import resources

from specsim.errors import SpecError, load_yaml_text


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts FFN: `experts` experts of width `expert_ffn`, `top_k` per token."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_ffn: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """A decoder transformer. `ffn` is the dense FFN width (0 for an all-MoE model)."""

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

    # --- per-layer parameter counts -------------------------------------------------------
    @cached_property
    def attn_params_per_layer(self) -> int:
        """q, k, v, o projections (+ q/k/v biases)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return self.hidden * q + 2 * self.hidden * kv + q * self.hidden + bias

    @cached_property
    def dense_ffn_params_per_layer(self) -> int:
        return 3 * self.hidden * self.ffn

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert (SwiGLU: gate, up, down)."""
        return 3 * self.hidden * self.moe.expert_ffn if self.moe else 0

    @cached_property
    def shared_expert_params_per_layer(self) -> int:
        if not self.moe or not self.moe.shared_experts:
            return 0
        return self.moe.shared_experts * 3 * self.hidden * self.moe.shared_ffn

    @cached_property
    def router_params_per_layer(self) -> int:
        return self.hidden * self.moe.experts if self.moe else 0

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

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """The LM head's weights (shared with the embedding when tied, but always multiplied)."""
        return self.vocab * self.hidden

    # --- totals -------------------------------------------------------------------------
    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.layers * self.layer_params + self.embedding_params + head + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters touched per token, counting the embedding table as published totals do."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.layers * self.active_layer_params + self.embedding_params + head + self.hidden

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters that take part in matmuls per token: active layers + LM head (not the lookup)."""
        return self.layers * self.active_layer_params + self.lm_head_params

    def weight_bytes(self, dtype_bytes: float) -> float:
        return self.total_params * dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV cache bytes for one token over all layers: layers · 2 · n_kv · d · bytes."""
        return self.layers * 2 * self.kv_heads * self.head_dim * kv_dtype_bytes

    def flops_per_token(self, context_tokens: float) -> float:
        """Forward FLOPs for one new token attending to `context_tokens`:
        2·(matmul params) + 4·layers·n_h·d·context (QK^T and PV)."""
        return 2.0 * self.matmul_params_per_token + 4.0 * self.layers * self.heads * self.head_dim * context_tokens


@dataclass(frozen=True)
class DrafterArch:
    """What one draft pass costs, as a model spec the forward-cost functions can price.

    kind: eagle3 | mtp | self_quant | ngram. `model` is None for ngram (no GPU pass).
    `weight_dtype` overrides the policy's weight dtype (self_quant: int4).
    `shares_target_kv`: the drafter reads the target's KV (self_quant keeps its own full KV).
    """

    kind: str
    model: ModelSpec | None
    weight_dtype: str | None
    source: str

    @property
    def kv_layers(self) -> int:
        return self.model.layers if self.model else 0


DRAFTER_KINDS = ("eagle3", "mtp", "self_quant", "ngram")


@lru_cache(maxsize=1)
def _catalog() -> dict:
    text = resources.files("specsim.catalog").joinpath("models.yaml").read_text()
    return load_yaml_text(text)


def list_models() -> list[str]:
    return list(_catalog()["models"])


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    if not close:
        lowered = {o.lower(): o for o in options}
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
        close = [lowered[c] for c in close]
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_model(name: str) -> ModelSpec:
    """Catalog lookup by name (case-insensitive); unknown names get a did-you-mean."""
    models = _catalog()["models"]
    key = next((k for k in models if k.lower() == str(name).lower()), None)
    if key is None:
        raise SpecError("model", name, f"one of {list(models)}{_suggest(str(name), list(models))}")
    doc = dict(models[key])
    moe = doc.pop("moe", None)
    return ModelSpec(name=key, moe=MoESpec(**moe) if moe else None, **doc)


def drafter_arch(kind: str, target: ModelSpec, draft_vocab: int | None = None,
                 draft_ffn: int | None = None) -> DrafterArch:
    """The architecture of a drafter for `target`.

    eagle3: one decoder layer (target's attention shape; dense FFN of `draft_ffn`, default the
      target's dense FFN or, for MoE targets, top_k·expert_ffn) + a fusion fc (3h→h) + an LM head
      over `draft_vocab` tokens (EAGLE-3's reduced draft vocabulary).
    mtp: one target-shaped layer (MoE if the target is) + an eh_proj (2h→h) + the full LM head.
    self_quant: the target itself at 4-bit weights.
    ngram: no GPU pass.
    """
    spec = _catalog()["drafters"].get(kind)
    if spec is None:
        raise SpecError("drafter.kind", kind, f"one of {list(DRAFTER_KINDS)}{_suggest(kind, list(DRAFTER_KINDS))}")
    source = spec.get("source", "")
    if kind == "ngram":
        return DrafterArch(kind, None, None, source)
    if kind == "self_quant":
        bits = spec.get("weight_bits", 4)
        return DrafterArch(kind, replace(target, name=f"{target.name}-w{bits}"), "int4" if bits == 4 else "int8", source)
    if kind == "eagle3":
        vocab = int(draft_vocab or spec["draft_vocab"])
        ffn = int(draft_ffn or target.ffn or (target.moe.top_k * target.moe.expert_ffn))
        if vocab <= 0 or ffn <= 0:
            raise SpecError("drafter.draft_vocab", vocab, "> 0")
        model = replace(target, name=f"{target.name}-eagle3", layers=int(spec["layers"]), ffn=ffn, moe=None,
                        vocab=vocab, tied_embeddings=True, extra_params_per_layer=3 * target.hidden * target.hidden)
        return DrafterArch(kind, model, None, source)
    model = replace(target, name=f"{target.name}-mtp", layers=int(spec["layers"]), tied_embeddings=True,
                    extra_params_per_layer=2 * target.hidden * target.hidden)
    return DrafterArch(kind, model, None, source)
