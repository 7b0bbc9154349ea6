"""Model catalog: frozen decoder-transformer specs and their derived sizes.

Every model is built from a Hugging Face ``config.json`` by :mod:`specsim.catalog.hf_config`
(per ``model_type``): the bundled entries of ``catalog/models.yaml`` are config-shaped, and a user
catalog directory (``--catalog DIR`` / ``SPECSIM_CATALOG``) or a path in a scenario adds more.
Derived quantities follow the standard decoder block:

* attention params per layer = h·(n_h·d) + 2·h·(n_kv·d) + (n_h·d)·h (+ biases); with multi-head
  latent attention (MLA, :class:`MLASpec`) the low-rank q/kv projections instead
* dense SwiGLU FFN per layer = 3·h·f;  MoE per layer = E·3·h·f_e + h·E (router) + shared experts;
  the first `dense_layers` layers of an MoE model (DeepSeek-V3's first_k_dense_replace) run a
  dense FFN of `dense_layer_ffn` instead (:attr:`ModelSpec.layer_groups`)
* embeddings = V·h, plus an LM head V·h unless tied
* KV bytes per token = layers · 2 · n_kv · d · bytes(kv dtype); MLA: layers · (kv_lora_rank +
  qk_rope_head_dim) · bytes (the latent c_KV and the decoupled RoPE key, shared by all heads)
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from specsim import inputs
from specsim.catalog.hf_config import META_KEYS, load_config_model, model_from_config
from specsim.catalog.model_spec import MLASpec, ModelSpec, MoESpec  # noqa: F401 (re-exported: the catalog's face)
from specsim.errors import SpecError, short_repr

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


#: environment variable naming user catalog directories (os.pathsep-separated); `--catalog DIR` sets it
CATALOG_ENV = "SPECSIM_CATALOG"
BUNDLED_CATALOG = "specsim/catalog/models.yaml"


@lru_cache(maxsize=1)
def _catalog() -> dict:
    doc = _catalog_file("models.yaml")
    if not isinstance(doc.get("models"), dict):
        raise SpecError("models", doc.get("models"), "a mapping of model name -> its shapes", "catalog/models.yaml")
    return doc


def catalog_dirs() -> list[Path]:
    """The user catalog directories named by $SPECSIM_CATALOG (os.pathsep-separated), in order."""
    raw = os.environ.get(CATALOG_ENV, "")
    dirs = [Path(p) for p in raw.split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise SpecError(CATALOG_ENV, str(d), "existing directories of config.json files (or of sub-directories "
                                                 "holding one each), separated by " + repr(os.pathsep))
    return dirs


def user_catalog() -> dict[str, Path]:
    """Model name → config file of every user catalog entry: `DIR/NAME.json`, or `DIR/NAME/config.json`
    (an earlier directory wins a name both hold)."""
    out: dict[str, Path] = {}
    for d in catalog_dirs():
        for entry in sorted(d.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_file() and entry.suffix.lower() == ".json":
                out.setdefault(entry.stem, entry)
            elif entry.is_dir() and (entry / "config.json").is_file():
                out.setdefault(entry.name, entry / "config.json")
    return out


def bundled_models() -> list[str]:
    return list(_catalog()["models"])


def list_models() -> list[str]:
    """Every model name: the bundled catalog, then the user catalog's names it does not shadow."""
    bundled = bundled_models()
    lowered = {n.lower() for n in bundled}
    return bundled + [n for n in user_catalog() if n.lower() not in lowered]


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    if not close:
        lowered = {o.lower(): o for o in options}
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
        close = [lowered[c] for c in close]
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_model_path(name: str) -> bool:
    """Does a scenario's `model:` name a file or directory (rather than a catalog entry)?"""
    return "/" in name or "\\" in name or name.lower().endswith(".json")


def model_config_path(name: str, base_dir: Path | None = None) -> Path:
    """The path a path-like `model:` names: relative to `base_dir` (the scenario's directory) when it
    is there, else as given (relative to the working directory)."""
    p = Path(name).expanduser()
    if not p.is_absolute() and base_dir is not None and (base_dir / p).exists():
        return base_dir / p
    return p


@lru_cache(maxsize=64)
def _bundled_spec(key: str) -> ModelSpec:

    entry = _catalog()["models"][key]
    where = f"{BUNDLED_CATALOG}: models.{key}"
    unknown = set(entry) - set(META_KEYS) - {"config"}
    if unknown:
        raise SpecError(f"models.{key}", sorted(unknown), f"only `config:` and {list(META_KEYS)}", BUNDLED_CATALOG)
    return model_from_config(entry.get("config"), name=key, where=f"{where}.config", meta=entry)


#: ModelSpec fields that are metadata, not architecture
_META_FIELDS = {"name": "", "source": "", "hf_id": "", "published_total_params_b": None, "published_active_params_b": None,
                    "published_source": "", "published_active_convention": "all",
                    "quantization": None}   # how a checkpoint is stored, not its architecture


def architecture_key(model: ModelSpec) -> ModelSpec:
    """The model with its metadata blanked: two configs of the same architecture have equal keys."""
    return replace(model, **_META_FIELDS)


def bundled_twin(model: ModelSpec) -> str | None:
    """The bundled entry whose config describes the same architecture as `model`, if any."""
    key = architecture_key(model)
    return next((n for n in bundled_models() if architecture_key(_bundled_spec(n)) == key), None)


def with_bundled_published(model: ModelSpec) -> ModelSpec:
    """A user config without published totals of its own takes those of the bundled entry of the
    same architecture (its source then says so), so `show model ./config.json` compares too."""
    if model.published_total_params_b is not None or model.published_active_params_b is not None:
        return model
    twin = bundled_twin(model)
    if twin is None:
        return model
    b = _bundled_spec(twin)
    return replace(model, hf_id=model.hf_id or b.hf_id, published_total_params_b=b.published_total_params_b,
                   published_active_params_b=b.published_active_params_b,
                   published_active_convention=b.published_active_convention,
                   published_source=f"{b.published_source} (the bundled {twin}: the same architecture)")


def load_model(name: str, base_dir: Path | None = None) -> ModelSpec:
    """A model by catalog name (case-insensitive: the user catalog's entries shadow the bundled
    ones) or by the path of a Hugging Face config.json / a directory holding one (relative to
    `base_dir` when it is there). Unknown names get a did-you-mean."""

    name = str(name)
    if is_model_path(name):
        return with_bundled_published(load_config_model(model_config_path(name, base_dir)))
    user = user_catalog()
    key = next((k for k in user if k.lower() == name.lower()), None)
    if key is not None:
        return with_bundled_published(load_config_model(user[key], name=key))
    models = _catalog()["models"]
    key = next((k for k in models if k.lower() == name.lower()), None)
    if key is None:
        names = list_models()
        raise SpecError("model", name, f"one of {names}, or a path to a Hugging Face config.json (or its directory)"
                                       f"{_suggest(name, names)}")
    return _bundled_spec(key)


def drafter_arch(kind: str, target: ModelSpec, draft_vocab: int | None = None,
                 draft_ffn: int | None = None) -> DrafterArch:
    """The architecture of a drafter for `target`, by the registry's cost shape.

    head (eagle3): one decoder layer (target's attention shape with a 2h input to q/k/v; dense FFN
      of `draft_ffn`, default the target's dense FFN or, for MoE targets, top_k·expert_ffn) + a
      fusion fc (fusion_inputs·h → h) + an LM head over `draft_vocab` tokens (EAGLE-3's reduced
      vocabulary, 32000; the draft-to-target token map is a lookup).
    mtp: one target-shaped layer (MoE if the target is, MLA if the target is) + an eh_proj (2h→h) + the
      target's full LM head and embedding (shared: the registry's shares_target_head).
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
        target = replace(target, mla=None)
        # EAGLE-3's layer takes [token embedding ; hidden state] (2h) into its q/k/v projections:
        # h·(n_h·d + 2·n_kv·d) weights on top of a standard attention block
        fusion += target.hidden * (target.heads + 2 * target.kv_heads) * target.head_dim
        vocab = int(draft_vocab or spec.draft_vocab or target.vocab)
        ffn = int(draft_ffn or target.ffn or (target.moe.top_k * target.moe.expert_ffn))
        if vocab <= 0 or ffn <= 0:
            raise SpecError("draft_vocab", vocab, "> 0")
        model = replace(target, name=f"{target.name}-{kind}", layers=int(spec.layers or 1), ffn=ffn, moe=None,
                        vocab=vocab, tied_embeddings=True, extra_params_per_layer=fusion, **_ONE_LAYER_KIND)
        return DrafterArch(kind, model, None, source)
    # mtp: the target's own layer shape (its attention -- MLA included -- and its MoE block, as
    # DeepSeek-V3's and GLM-4.5's MTP layers are MoE layers) + eh_proj; a config with
    # num_nextn_predict_layers = N > 1 keeps N such layers, and vLLM's MTP proposer runs one of them
    # per draft pass, so one layer is priced per pass (its weights are counted once)
    model = replace(target, name=f"{target.name}-{kind}", layers=int(spec.layers or 1), tied_embeddings=True,
                    extra_params_per_layer=target.extra_params_per_layer + fusion, **_ONE_LAYER_KIND)
    return DrafterArch(kind, model, None, source)


#: what a one-layer drafter does not inherit from its target: dense first layers, sliding-window
#: layers, MTP layers of its own (and, for an EAGLE-3 head, MLA: its layer is a Llama layer)
_ONE_LAYER_KIND = {"dense_layers": 0, "dense_layer_ffn": 0, "sliding_layers": 0, "sliding_window": 0, "mtp_layers": 0,
                       "published_total_params_b": None, "published_active_params_b": None}
