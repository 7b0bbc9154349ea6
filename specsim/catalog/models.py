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
from pathlib import Path

from specsim import inputs
from specsim.errors import SpecError, short_repr


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


COST_SHAPES = ("head", "mtp", "self", "ngram")


@dataclass(frozen=True)
class DrafterKind:
    """One drafter kind from the registry `catalog/drafters.yaml` (the only place kinds are defined).

    cost_shape: head (small head: one layer + feature fusion + draft-vocab LM head), mtp (native
    MTP layer + full LM head), self (the quantized policy, every layer), ngram (CPU lookup, no GPU
    pass). goes_stale: the policy drifts away from it; retrainable: online updates apply;
    requantized_at_sync: re-derived from the policy at every weight sync. layers / fusion_inputs /
    draft_vocab / weight_bits: architecture defaults (None where they do not apply);
    plausible_max_tau: doctor heuristic (see the YAML's header). proposal_rate: p, the share of
    request-steps that carry a draft (1 for model drafters; the n-gram proposer drafts only when
    it finds a match, otherwise the request decodes one token): the tokens per request-step are
    1 + p·(τ − 1) with τ vLLM's conditional mean acceptance length (see the YAML's header).
    shares_target_kv: the drafter's attention layers read the target's KV cache and keep none of
    their own (no KV bytes per token beyond the target's). shares_target_head: its embedding and
    LM head are the target's modules at the target's weight dtype (not drafter weights; its LM
    head streams the target's bytes).
    """

    name: str
    cost_shape: str
    goes_stale: bool
    retrainable: bool
    requantized_at_sync: bool
    source: str = ""
    layers: int | None = None
    fusion_inputs: int | None = None
    draft_vocab: int | None = None
    weight_bits: int | None = None
    plausible_max_tau: float | None = None
    proposal_rate: float = 1.0
    proposal_rate_source: str = "a model drafter proposes k tokens for every running request every step"
    shares_target_kv: bool = False
    shares_target_head: bool = False
    sharing_source: str = ""

    @property
    def gpu_pass(self) -> bool:
        """Does a draft pass run on the GPU (everything but n-gram lookup)?"""
        return self.cost_shape != "ngram"


def _catalog_file(name: str) -> dict:
    """A bundled catalog YAML, read through the guarded reader (UTF-8, unique keys, bounded)."""
    doc = inputs.read_yaml(Path(str(resources.files("specsim.catalog").joinpath(name))), "(catalog)",
                           "catalog YAML", inputs.MAX_YAML_BYTES)
    if not isinstance(doc, dict):
        raise SpecError("(catalog)", short_repr(doc), "a YAML mapping", f"catalog/{name}")
    return doc


def catalog_entry(doc, cls, prefix: str, where: str) -> dict:
    """A catalog entry checked against the dataclass it builds: a mapping, known keys only (with a
    did-you-mean), numbers finite, whole where the field is an int, > 0 (>= 0 for counts that
    may be zero), text where it is text, true/false where it is a flag."""
    import dataclasses
    import math

    if not isinstance(doc, dict):
        raise SpecError(prefix, short_repr(doc), "a mapping of the entry's fields", where)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "name"}
    for key, v in doc.items():
        fname = f"{prefix}.{key}"
        if key not in fields:
            raise SpecError(fname, v, f"a known field: one of {sorted(fields)}{_suggest(str(key), list(fields))}",
                            where)
        kind = str(fields[key].type)
        if v is None and "None" in kind:
            continue
        if kind.startswith("bool"):
            if not isinstance(v, bool):
                raise SpecError(fname, v, "true or false", where)
        elif kind.startswith(("int", "float")):
            whole = kind.startswith("int")
            zero_ok = key in ("ffn", "shared_experts", "shared_ffn", "extra_params_per_layer")
            ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
                  and (v >= 0 if zero_ok else v > 0) and v <= 1e15 and (not whole or v == int(v)))
            if not ok:
                raise SpecError(fname, v, f"a finite {'whole ' if whole else ''}number "
                                f"{'>= 0' if zero_ok else '> 0'} and <= 1e15", where)
        elif kind.startswith("str") and not isinstance(v, str):
            raise SpecError(fname, v, "a text", where)
    return doc


@lru_cache(maxsize=1)
def _drafter_registry() -> dict[str, DrafterKind]:
    where = "catalog/drafters.yaml"
    top = _catalog_file("drafters.yaml")
    out = {}
    if not isinstance(top.get("drafters"), dict):
        raise SpecError("drafters", top.get("drafters"), "a mapping of drafter kind -> its entry", where)
    for name, doc in top["drafters"].items():
        kind = DrafterKind(name=str(name), **catalog_entry(doc, DrafterKind, f"drafters.{name}", where))
        if kind.cost_shape not in COST_SHAPES:
            raise SpecError(f"drafters.{name}.cost_shape", kind.cost_shape, f"one of {COST_SHAPES}", "catalog/drafters.yaml")
        check_proposal_rate(kind.proposal_rate, f"drafters.{name}.proposal_rate", "catalog/drafters.yaml")
        out[name] = kind
    return out


def check_proposal_rate(p, fld: str = "proposal_rate", where: str | None = None) -> float:
    """A proposal rate p (share of request-steps with a draft) as a float in (0, 1], else SpecError."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < float(p) <= 1.0:
        raise SpecError(fld, p, "a number in (0, 1]: the share of request-steps that carry a draft", where)
    return float(p)


def drafter_kind_names() -> tuple[str, ...]:
    """Every drafter kind the registry defines, in file order."""
    return tuple(_drafter_registry())


def drafter_kind(name: str, fld: str = "drafter_kind") -> DrafterKind:
    """The registry entry of drafter kind `name`; unknown names get a did-you-mean naming `fld`."""
    reg = _drafter_registry()
    if name not in reg:
        names = list(reg)
        raise SpecError(fld, name, f"one of {names}{_suggest(str(name), names)}")
    return reg[name]


@dataclass(frozen=True)
class DrafterArch:
    """What one draft pass costs, as a model spec the forward-cost functions can price.

    kind: a registry name (see :class:`DrafterKind`). `model` is None when the kind has no GPU
    pass (ngram). `weight_dtype` overrides the policy's weight dtype (self: int4).
    """

    kind: str
    model: ModelSpec | None
    weight_dtype: str | None
    source: str

    @property
    def kv_layers(self) -> int:
        """Layers whose KV the drafter keeps itself (0 when it reads the target's cache)."""
        return self.model.layers if self.model and not self.spec.shares_target_kv else 0

    @property
    def spec(self) -> DrafterKind:
        """The registry entry of this drafter's kind."""
        return drafter_kind(self.kind)

    @property
    def catches_up_on_accepted(self) -> bool:
        """Does a step's first draft pass run over the tokens the verify just accepted (q = τ per
        sequence)? A drafter with its own KV cache and hidden-state input (EAGLE-3, MTP) must extend
        both over them first. One that reads the target's cache (`shares_target_kv`) finds their KV
        there, written by the verify, and drafts from the token the verify sampled: every pass has
        one query token (EfficientRollout's QuantizedSelfDrafterProposer.propose: max_query_len = 1,
        input = next_token_ids)."""
        return self.model is not None and not self.spec.shares_target_kv


DRAFTER_KINDS = drafter_kind_names()


@lru_cache(maxsize=1)
def _catalog() -> dict:
    doc = _catalog_file("models.yaml")
    if not isinstance(doc.get("models"), dict):
        raise SpecError("models", doc.get("models"), "a mapping of model name -> its shapes", "catalog/models.yaml")
    return doc


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
    where = "catalog/models.yaml"
    doc = dict(catalog_entry(models[key], ModelSpec, f"models.{key}", where))
    moe = doc.pop("moe", None)
    moe_spec = MoESpec(**catalog_entry(moe, MoESpec, f"models.{key}.moe", where)) if moe else None
    return ModelSpec(name=key, moe=moe_spec, **doc)


def drafter_arch(kind: str, target: ModelSpec, draft_vocab: int | None = None,
                 draft_ffn: int | None = None) -> DrafterArch:
    """The architecture of a drafter for `target`, by the registry's cost shape.

    head (eagle3): one decoder layer (target's attention shape with a 2h input to q/k/v; dense FFN
      of `draft_ffn`, default the target's dense FFN or, for MoE targets, top_k·expert_ffn) + a
      fusion fc (fusion_inputs·h → h) + an LM head over `draft_vocab` tokens (EAGLE-3's reduced
      vocabulary, 32000; the draft-to-target token map is a lookup).
    mtp: one target-shaped layer (MoE if the target is) + an eh_proj (2h→h) + the full LM head.
    self (self_quant): the target itself at weight_bits-bit weights.
    ngram: no GPU pass.
    """
    spec = drafter_kind(kind)
    source = spec.source
    if spec.cost_shape == "ngram":
        return DrafterArch(kind, None, None, source)
    if spec.cost_shape == "self":
        bits = spec.weight_bits or 4
        return DrafterArch(kind, replace(target, name=f"{target.name}-w{bits}"), "int4" if bits == 4 else "int8", source)
    fusion = int(spec.fusion_inputs or 1) * target.hidden * target.hidden
    if spec.cost_shape == "head":
        # EAGLE-3's layer takes [token embedding ; hidden state] (2h) into its q/k/v projections:
        # h·(n_h·d + 2·n_kv·d) weights on top of a standard attention block
        fusion += target.hidden * (target.heads + 2 * target.kv_heads) * target.head_dim
        vocab = int(draft_vocab or spec.draft_vocab or target.vocab)
        ffn = int(draft_ffn or target.ffn or (target.moe.top_k * target.moe.expert_ffn))
        if vocab <= 0 or ffn <= 0:
            raise SpecError("draft_vocab", vocab, "> 0")
        model = replace(target, name=f"{target.name}-{kind}", layers=int(spec.layers or 1), ffn=ffn, moe=None,
                        vocab=vocab, tied_embeddings=True, extra_params_per_layer=fusion)
        return DrafterArch(kind, model, None, source)
    model = replace(target, name=f"{target.name}-{kind}", layers=int(spec.layers or 1), tied_embeddings=True,
                    extra_params_per_layer=fusion)
    return DrafterArch(kind, model, None, source)
