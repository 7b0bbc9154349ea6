"""Models from Hugging Face ``config.json`` files: one parser per ``model_type``, one code path for
the bundled catalog and for the user's own configs.

A config is read as the engines read it (vLLM / SGLang / transformers model classes of that
``model_type``); only the fields that change a cost are used, and a field the parser needs but
cannot find, or a value it cannot price, is a :class:`SpecError` naming the file, the field, the
value and what is allowed (the CLI prints one paragraph and exits 2). Supported types:

============== ==========================================================================
model_type     architecture
============== ==========================================================================
llama          Llama 2/3/3.1/3.3: GQA, SwiGLU, optional attention/MLP biases
qwen2          Qwen2 / Qwen2.5 dense: GQA with q/k/v biases
qwen3          Qwen3 dense: GQA (q/k RMSNorm, not counted: 2·d per layer)
qwen2_moe      Qwen1.5/Qwen2-MoE: routed experts + one gated shared expert, q/k/v biases
qwen3_moe      Qwen3 MoE: routed experts (decoder_sparse_step / mlp_only_layers → dense layers)
mixtral        Mixtral: 8 routed SwiGLU experts of `intermediate_size`, top-2
deepseek_v3    DeepSeek-V3/R1 (and deepseek_v2, kimi_k2 -- Kimi-K2 ships the DeepseekV3 classes):
               MLA, routed + shared experts, `first_k_dense_replace` dense first layers,
               `num_nextn_predict_layers` native MTP layers
glm4_moe       GLM-4.5 / GLM-4.5-Air: GQA with q/k/v biases, routed + shared experts,
               dense first layers, native MTP layers
gpt_oss        gpt-oss: GQA with biases and attention sinks, biased experts and router,
               alternating sliding-window (128) / full attention layers
============== ==========================================================================

Specsim's own metadata (its source, the published totals) sits beside the config, never in it:
in ``catalog/models.yaml`` next to each entry's ``config:``; in a user's config.json as an
optional ``_specsim`` object (``source``, ``hf_id``, ``published_total_params_b``,
``published_active_params_b``, ``published_active_convention``, ``published_source``), which
Hugging Face ignores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsim import inputs
from specsim.catalog.model_spec import MLASpec, ModelSpec, MoESpec, QuantSpec
from specsim.errors import SpecError

#: model_type → the family whose parser reads it
MODEL_TYPES = {
    "llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe",
    "mixtral": "mixtral", "deepseek_v3": "deepseek", "deepseek_v2": "deepseek", "kimi_k2": "deepseek",
    "glm4_moe": "glm4_moe", "gpt_oss": "gpt_oss",
}
#: keys of the optional `_specsim` metadata object (and of a bundled entry beside its `config:`)
META_KEYS = ("source", "hf_id", "published_total_params_b", "published_active_params_b",
             "published_active_convention", "published_source")
CONFIG_NAME = "config.json"
#: The largest value each count of a config may take. Each bound sits well above the largest
#: published model (figures from their config.json files) and far below where a count stops
#: being a model and starts hanging the pricing: hidden_size 16,384 (Llama-3.1-405B), 126 layers
#: (Llama-3.1-405B), 128 attention heads, head_dim 256 (Gemma), vocabularies of 262,144 (Gemma 3),
#: FFN widths of 53,248 (Llama-3.1-405B), 384 routed experts (Kimi-K2), 10M positions (Llama 4
#: Scout), 512-wide MLA latents (DeepSeek-V3). A count without an entry is at most 2**31.
COUNT_MAX = {
    "hidden_size": 65_536, "num_hidden_layers": 1_024, "num_attention_heads": 1_024, "num_key_value_heads": 1_024,
    "head_dim": 1_024, "vocab_size": 4_194_304, "max_position_embeddings": 2**27, "intermediate_size": 1_048_576,
    "moe_intermediate_size": 1_048_576, "shared_expert_intermediate_size": 1_048_576, "num_experts": 65_536,
    "n_routed_experts": 65_536, "num_local_experts": 65_536, "num_experts_per_tok": 65_536,
    "experts_per_token": 65_536, "n_shared_experts": 64, "num_nextn_predict_layers": 64, "qk_nope_head_dim": 1_024,
    "qk_rope_head_dim": 1_024, "v_head_dim": 1_024, "kv_lora_rank": 65_536, "q_lora_rank": 65_536,
    "decoder_sparse_step": 1_024, "first_k_dense_replace": 1_024, "sliding_window": 2**27,
}
COUNT_DEFAULT_MAX = 2**31
ACTIVE_CONVENTIONS = ("all", "matmul", "layers")


class _Fields:
    """Typed access to one config's fields, every error naming the file and the field."""

    def __init__(self, doc: dict, where: str):
        self.doc, self.where = doc, where

    def _bad(self, key: str, value: Any, allowed: str) -> SpecError:
        return SpecError(key, value, allowed, self.where)

    def integer(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        if key not in self.doc or self.doc[key] is None:
            if default is ...:
                raise self._bad(key, "<missing>", f"an integer >= {minimum} (a required config.json field)")
            return default
        v = self.doc[key]
        top = COUNT_MAX.get(key, COUNT_DEFAULT_MAX)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -top <= v <= top or v != int(v) \
                or v < minimum:
            raise self._bad(key, v, f"an integer >= {minimum} and <= {top:,}")
        return int(v)

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.doc.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(key, v, "true or false")
        return v

    def int_list(self, key: str) -> list[int]:
        v = self.doc.get(key) or []
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise self._bad(key, v, "a list of layer indices (integers >= 0)")
        return v

    def refuse(self, key: str, allowed_values: tuple, why: str) -> None:
        """A field whose other values specsim cannot price (absent counts as the first allowed)."""
        v = self.doc.get(key, allowed_values[0])
        if v not in allowed_values:
            raise self._bad(key, v, f"{' or '.join(repr(a) for a in allowed_values)} ({why})")


def _head_dim(f: _Fields, hidden: int, heads: int) -> int:
    if f.doc.get("head_dim") is not None:
        return f.integer("head_dim")
    if hidden % heads:
        raise f._bad("head_dim", "<missing>", f"given, since hidden_size {hidden} is not a multiple of "
                                              f"num_attention_heads {heads}")
    return hidden // heads


def _dense_count(f: _Fields, layers: int) -> int:
    """Qwen MoE: layer i is dense when it is in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
    (counted in closed form: floor(layers / step) sparse layers, less those mlp_only_layers names).
    A layer index past the last layer, or a step longer than the stack, is an error: the engines
    would ignore it, and the model priced would not be the one the file seems to describe."""
    step = f.integer("decoder_sparse_step", 1)
    if step > layers:
        raise f._bad("decoder_sparse_step", step, f"at most num_hidden_layers ({layers}): a longer step leaves no "
                                                  "MoE layer")
    only = set(f.int_list("mlp_only_layers"))
    past = sorted(i for i in only if i >= layers)
    if past:
        raise f._bad("mlp_only_layers", past[:5], f"layer indices below num_hidden_layers ({layers})")
    sparse = layers // step - sum(1 for i in only if (i + 1) % step == 0)
    return layers - sparse


def model_from_config(doc: Any, *, name: str, where: str, meta: dict | None = None) -> ModelSpec:
    """The ModelSpec a Hugging Face config describes. `where` names the file (or catalog entry)
    in every error; `meta` carries specsim's metadata (source, published totals)."""
    if not isinstance(doc, dict):
        raise SpecError("(config)", type(doc).__name__, "a JSON object (a Hugging Face config.json)", where)
    f = _Fields(doc, where)
    mtype = doc.get("model_type")
    if mtype is None and isinstance(doc.get("text_config"), dict):
        raise SpecError("model_type", "<missing>", "a text model's config (a multimodal config's `text_config` "
                        "is not read: give the language model's own config.json)", where)
    family = MODEL_TYPES.get(mtype)
    if family is None:
        raise SpecError("model_type", mtype, f"one of {sorted(MODEL_TYPES)} (the architectures specsim prices)", where)
    hidden = f.integer("hidden_size")
    layers = f.integer("num_hidden_layers")
    heads = f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f._bad("num_key_value_heads", kv_heads, f"a divisor of num_attention_heads ({heads})")
    vocab = f.integer("vocab_size")
    kw: dict[str, Any] = {
        "name": name, "hidden": hidden, "layers": layers, "heads": heads, "kv_heads": kv_heads, "vocab": vocab,
        "tied_embeddings": f.flag("tie_word_embeddings", False), "max_positions": f.integer("max_position_embeddings"),
        "model_type": mtype}
    extra = 0
    if family in ("llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "glm4_moe", "gpt_oss"):
        kw["head_dim"] = _head_dim(f, hidden, heads)
    if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mixtral"):
        f.refuse("use_sliding_window", (False,), "sliding-window attention is priced for gpt_oss only")
    if family == "llama":
        bias = f.flag("attention_bias")
        kw["qkv_bias"] = bias
        extra += hidden if bias else 0   # o_proj bias
        f.refuse("mlp_bias", (False,), "MLP biases are not priced")
        kw["ffn"] = f.integer("intermediate_size")
    elif family in ("qwen2", "qwen3"):
        kw["qkv_bias"] = True if family == "qwen2" else f.flag("attention_bias")
        if family == "qwen3" and kw["qkv_bias"]:
            extra += hidden              # Qwen3's attention_bias also biases o_proj
        kw["ffn"] = f.integer("intermediate_size")
    elif family in ("qwen2_moe", "qwen3_moe"):
        kw["qkv_bias"] = True if family == "qwen2_moe" else f.flag("attention_bias")
        shared_ffn = f.integer("shared_expert_intermediate_size", 0, minimum=0) if family == "qwen2_moe" else 0
        kw["moe"] = MoESpec(experts=f.integer("num_experts"), top_k=f.integer("num_experts_per_tok"),
                            expert_ffn=f.integer("moe_intermediate_size"), shared_experts=1 if shared_ffn else 0,
                            shared_ffn=shared_ffn)
        if shared_ffn:
            extra += hidden              # the shared expert's sigmoid gate (h → 1)
        dense = _dense_count(f, layers)
        if dense:
            kw["dense_layers"], kw["dense_layer_ffn"] = dense, f.integer("intermediate_size")
    elif family == "mixtral":
        kw["moe"] = MoESpec(experts=f.integer("num_local_experts"), top_k=f.integer("num_experts_per_tok"),
                            expert_ffn=f.integer("intermediate_size"))
    elif family == "deepseek":
        nope, rope, v = f.integer("qk_nope_head_dim"), f.integer("qk_rope_head_dim"), f.integer("v_head_dim")
        kw["mla"] = MLASpec(kv_lora_rank=f.integer("kv_lora_rank"), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                            v_head_dim=v, q_lora_rank=f.integer("q_lora_rank", None))
        kw["head_dim"], kw["kv_heads"] = nope + rope, heads
        f.refuse("attention_bias", (False,), "MLA projections without biases")
        _routed_and_shared(f, kw, layers)
    elif family == "glm4_moe":
        kw["qkv_bias"] = f.flag("attention_bias")
        _routed_and_shared(f, kw, layers)
    elif family == "gpt_oss":
        bias = f.flag("attention_bias", True)
        kw["qkv_bias"] = bias
        extra += (hidden if bias else 0) + heads   # o_proj bias; one attention sink per head
        experts = f.integer("num_local_experts")
        top_k = f.integer("num_experts_per_tok", None) or f.integer("experts_per_token")
        kw["moe"] = MoESpec(experts=experts, top_k=top_k, expert_ffn=f.integer("intermediate_size"), expert_bias=True,
                            router_bias=True)
        types = doc.get("layer_types")
        window = f.integer("sliding_window", 0, minimum=0)
        if types is not None:
            if not isinstance(types, list) or len(types) != layers or not set(types) <= {"sliding_attention",
                                                                                            "full_attention"}:
                raise f._bad("layer_types", types, f"a list of {layers} entries, each 'sliding_attention' or "
                                                   "'full_attention'")
            sliding = types.count("sliding_attention")
        else:
            sliding = layers // 2 if window else 0   # gpt-oss alternates, starting with a sliding layer
        if sliding and not window:
            raise f._bad("sliding_window", window, "an integer >= 1 (layer_types has sliding_attention layers)")
        kw["sliding_layers"], kw["sliding_window"] = sliding, window if sliding else 0
    if kw["heads"] % kw["kv_heads"]:
        raise f._bad("num_key_value_heads", kw["kv_heads"], f"a divisor of num_attention_heads ({heads})")
    kw["extra_params_per_layer"] = extra
    kw["quantization"] = quantization_from_config(doc, where, moe="moe" in kw)
    kw.update(_meta(meta or {}, where))
    check_relations(f, kw)
    return ModelSpec(**kw)


def check_relations(f: _Fields, kw: dict) -> None:
    """The relations between a config's fields that its counts alone do not guarantee, each an
    error naming the file, the field and its value: experts chosen per token no more than there
    are, dense first layers and MTP layers fewer than the stack, a sliding window no longer than
    the context, key-value heads no more than query heads."""
    moe: MoESpec | None = kw.get("moe")
    if moe is not None and moe.top_k > moe.experts:
        key = next((k for k in ("num_experts_per_tok", "experts_per_token") if k in f.doc), "num_experts_per_tok")
        raise f._bad(key, moe.top_k, f"at most the number of routed experts ({moe.experts}): a token cannot be "
                                     "routed to more experts than the layer has")
    if kw["kv_heads"] > kw["heads"]:
        raise f._bad("num_key_value_heads", kw["kv_heads"], f"at most num_attention_heads ({kw['heads']})")
    if kw.get("mtp_layers", 0) > kw["layers"]:
        raise f._bad("num_nextn_predict_layers", kw["mtp_layers"], f"at most num_hidden_layers ({kw['layers']})")
    if kw.get("sliding_window", 0) > kw["max_positions"]:
        raise f._bad("sliding_window", kw["sliding_window"], f"at most max_position_embeddings ({kw['max_positions']})")


# ============================================================================ quantization_config
#: quant_method → how its weight dtype is read (quant_dtype)
QUANT_METHODS = ("fp8", "mxfp4", "compressed-tensors", "awq", "gptq", "bitsandbytes")
#: keys under which quantization configs list the modules they leave unconverted
EXCLUDE_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers")
#: a module pattern naming attention: excluded, the quantization covers the experts (or MLPs) only
_ATTENTION = ("self_attn", "attn", "attention")


def quantization_from_config(doc: dict, where: str, moe: bool = False) -> QuantSpec | None:
    """The checkpoint's weight quantization from config.json's `quantization_config` (None when
    it has none): the dtype its weights are stored and run in (quant_dtype) and the modules it
    leaves in bf16. On an MoE model whose exclusions name attention the quantized dtype covers
    the routed experts only (scope "experts": gpt-oss's mxfp4 keeps attention, router, embeddings
    and LM head in bf16); otherwise every linear layer. Any other shape is an error naming the field."""
    q = doc.get("quantization_config")
    if q is None:
        return None
    field = "quantization_config"
    if not isinstance(q, dict):
        raise SpecError(field, type(q).__name__, "a JSON object (Hugging Face's quantization_config)", where)
    method = q.get("quant_method")
    if method not in QUANT_METHODS:
        raise SpecError(f"{field}.quant_method", method, f"one of {list(QUANT_METHODS)} (the methods whose weight "
                        "dtype specsim prices; or set rollout.weight_dtype / --weight-dtype and drop the field)", where)
    excluded: list[str] = []
    for key in EXCLUDE_KEYS:
        v = q.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SpecError(f"{field}.{key}", v, "a list of module names or patterns", where)
        excluded += v
    scope = "experts" if moe and any(a in x for x in excluded for a in _ATTENTION) else "all"
    return QuantSpec(quant_dtype(q, method, where), scope, tuple(excluded), method)


def quant_dtype(q: dict, method: str, where: str) -> str:
    """The weight dtype (a DTYPE_BYTES name) of one quantization_config of `method`."""
    field = "quantization_config"
    if method == "fp8":
        return "fp8"
    if method == "mxfp4":
        return "fp4"
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return "int4"
        if q.get("load_in_8bit"):
            return "int8"
        raise SpecError(f"{field}.load_in_4bit", q.get("load_in_4bit"), "true (or load_in_8bit: true)", where)
    if method in ("awq", "gptq"):
        bits = q.get("bits", q.get("w_bit"))
        if bits not in (4, 8):
            raise SpecError(f"{field}.bits", bits, "4 or 8", where)
        return "int4" if bits == 4 else "int8"
    groups = q.get("config_groups")   # compressed-tensors: the weights of its first group
    weights = next(iter(groups.values()), {}).get("weights") if isinstance(groups, dict) and groups else None
    if not isinstance(weights, dict) or weights.get("num_bits") not in (4, 8):
        raise SpecError(f"{field}.config_groups", groups, "groups whose weights have num_bits 4 or 8", where)
    if weights["num_bits"] == 8:
        return "fp8" if weights.get("type") == "float" else "int8"
    return "fp4" if weights.get("type") == "float" else "int4"


def _routed_and_shared(f: _Fields, kw: dict, layers: int) -> None:
    """DeepSeek-V3 / GLM-4.5 FFNs: n_routed_experts of moe_intermediate_size (top num_experts_per_tok),
    n_shared_experts always-on experts of the same width, the first first_k_dense_replace layers dense
    of intermediate_size, every layer after them MoE (moe_layer_freq 1), num_nextn_predict_layers MTP
    layers."""
    f.refuse("moe_layer_freq", (1,), "every layer after the dense first ones is an MoE layer")
    width = f.integer("moe_intermediate_size")
    shared = f.integer("n_shared_experts", 0, minimum=0)
    kw["moe"] = MoESpec(experts=f.integer("n_routed_experts"), top_k=f.integer("num_experts_per_tok"), expert_ffn=width,
                        shared_experts=shared, shared_ffn=width if shared else 0)
    dense = f.integer("first_k_dense_replace", 0, minimum=0)
    if dense >= layers:
        raise f._bad("first_k_dense_replace", dense, f"below num_hidden_layers ({layers})")
    if dense:
        kw["dense_layers"], kw["dense_layer_ffn"] = dense, f.integer("intermediate_size")
    kw["mtp_layers"] = f.integer("num_nextn_predict_layers", 0, minimum=0)


def _meta(meta: dict, where: str) -> dict:
    out = {}
    for key in META_KEYS:
        if meta.get(key) is None:
            continue
        v = meta[key]
        if key.startswith("published_") and key.endswith("_b"):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise SpecError(f"_specsim.{key}", v, "a number of billions > 0", where)
            v = float(v)
        elif key == "published_active_convention":
            if v not in ACTIVE_CONVENTIONS:
                raise SpecError(f"_specsim.{key}", v, "'all' (the embedding row counted), 'matmul' (layers + LM "
                                                      "head, not the embedding lookup) or 'layers' (the transformer "
                                                      "layers only)", where)
        else:
            v = str(v)
        out[key] = v
    return out


# ============================================================================ files
def config_file(path: Path) -> Path:
    """The config.json a path names: the file itself, or `config.json` inside a directory."""
    if path.is_dir():
        inner = path / CONFIG_NAME
        if not inner.is_file():
            raise SpecError("model", str(path), f"a directory holding a {CONFIG_NAME}, or a config.json file")
        return inner
    if not path.is_file():
        raise SpecError("model", str(path), "an existing Hugging Face config.json (or a directory holding one)")
    return path


def model_name_for(path: Path) -> str:
    """A config's catalog name: its directory's name for `DIR/config.json`, else the file's stem."""
    return path.parent.name if path.name == CONFIG_NAME and path.parent.name else path.stem


def read_config(path: Path) -> dict:
    """The JSON object of a config file, through the guarded reader (specsim.inputs: regular files
    only, bounded, UTF-8 with a BOM dropped); unreadable or malformed files are a SpecError naming it."""
    where = str(path)
    doc = inputs.read_json(path, "(file)", "Hugging Face config.json", inputs.MAX_YAML_BYTES)
    if not isinstance(doc, dict):
        raise SpecError("(file)", type(doc).__name__, "a JSON object (a Hugging Face config.json)", where)
    return doc


def load_config_model(path: str | Path, name: str | None = None) -> ModelSpec:
    """The model of a config.json (or a directory holding one), named `name` or after the file."""
    file = config_file(Path(path))
    doc = read_config(file)
    meta = doc.get("_specsim") or {}
    if not isinstance(meta, dict):
        raise SpecError("_specsim", meta, "an object of specsim metadata (source, published totals)", str(file))
    meta = {"source": str(file), **meta}
    return model_from_config(doc, name=name or model_name_for(file), where=str(file), meta=meta)
