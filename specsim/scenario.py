"""The scenario file: pydantic schema, YAML loading, dotted overrides, and errors with file/field.

A scenario says what to simulate: hardware and model, the rollout and training layouts, the
workload (prompts, GRPO group size, length distributions), the drafter and its acceptance, the SD
policy, the RL pipeline, an optional sweep, output options and the seed. Every section forbids
unknown keys (with a did-you-mean). Every error is a `ScenarioError` naming the file, the dotted
field path, the value and what is allowed; the CLI prints it and exits 2.
"""

from __future__ import annotations

import copy
import difflib
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from specsim.errors import SpecError, load_yaml_text

DType = Literal["bf16", "fp16", "fp8", "int8", "fp4", "int4"]


class ScenarioError(ValueError):
    """A bad scenario: `file`, dotted `field`, offending `value`, and what is `allowed`."""

    def __init__(self, file: str | None, field: str, value: Any, allowed: str):
        self.file, self.field, self.value, self.allowed = file, field, value, allowed
        super().__init__(self.message())

    def message(self) -> str:
        where = f"{self.file}: " if self.file else ""
        v = repr(self.value)
        if len(v) > 120:
            v = v[:117] + "..."
        return f"{where}{self.field}: {self.allowed}, got {v}"


_SEP = "\x1f"


def _bad(field: str, value: Any, allowed: str) -> ValueError:
    """A cross-field validation failure that still names one field and its value."""
    return ValueError(f"{_SEP}{field}{_SEP}{value!r}{_SEP}{allowed}")


class _Raw(str):
    """A value already rendered with repr()."""

    def __repr__(self) -> str:
        return str(self)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# ----------------------------------------------------------------------------- sections
class LengthSpec(Strict):
    """A length distribution. kind=lognormal: `median`+`p99` (tokens) or `mu`+`sigma` (log
    tokens); kind=mixture: `components` of {weight, median, p99}; kind=empirical: `path` to a
    CSV/JSONL of observed lengths (relative to the scenario file); kind=fixed: `tokens`."""

    kind: Literal["lognormal", "mixture", "empirical", "fixed"] = "lognormal"
    median: float | None = Field(default=None, gt=0, le=1e9)
    p99: float | None = Field(default=None, gt=0, le=1e9)
    mu: float | None = Field(default=None, ge=-50, le=50)
    sigma: float | None = Field(default=None, gt=0, le=20)
    components: list[dict[str, float]] | None = None
    path: str | None = None
    tokens: int | None = Field(default=None, ge=1, le=10**9)

    @model_validator(mode="after")
    def _complete(self):
        if self.kind == "lognormal":
            by_q = self.median is not None and self.p99 is not None
            by_p = self.mu is not None and self.sigma is not None
            if not (by_q or by_p):
                raise _bad("median", self.median, "lognormal needs median and p99 (tokens) or mu and sigma")
            if by_q and self.p99 <= self.median:
                raise _bad("p99", self.p99, f"must be above median ({self.median})")
        elif self.kind == "mixture":
            if not self.components:
                raise _bad("components", self.components, "mixture needs components: [{weight, median, p99}, ...]")
            for c in self.components:
                if set(c) - {"weight", "median", "p99"} or not {"weight", "median", "p99"} <= set(c):
                    raise _bad("components", c, "each mixture component has exactly weight, median, p99")
                if c["weight"] < 0 or c["median"] <= 0 or c["p99"] <= c["median"]:
                    raise _bad("components", c, "component weight >= 0, median > 0, p99 > median")
            if abs(sum(c["weight"] for c in self.components) - 1.0) > 1e-6:
                raise _bad("components", [c["weight"] for c in self.components], "weights must sum to 1")
        elif self.kind == "empirical" and not self.path:
            raise _bad("path", self.path, "empirical needs path: a CSV/JSONL file of observed lengths")
        elif self.kind == "fixed" and self.tokens is None:
            raise _bad("tokens", self.tokens, "fixed needs tokens")
        return self


class RolloutSection(Strict):
    """The generation pool: `gpus` split into data-parallel engines of tp·pp (·ep) GPUs each."""

    gpus: int = Field(ge=1, le=10**6)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=4096)
    weight_dtype: DType = "bf16"
    kv_dtype: DType = "bf16"
    max_batch: int = Field(default=256, ge=1, le=65536, description="vLLM max_num_seqs per engine")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_batched_tokens: int = Field(default=8192, ge=1, le=10**7)
    kv_block_tokens: int = Field(default=16, ge=1, le=4096)
    kv_capacity_tokens: int | None = Field(default=None, ge=1, le=10**12, description="override the derived KV budget per engine")
    dispatch: Literal["round_robin", "least_loaded"] = "round_robin"


class TrainingSection(Strict):
    """The trainer. In sync mode it runs on the rollout GPUs (`gpus` must be omitted or equal);
    in async mode on its own pool of `gpus`. tp·pp·ep must divide the GPUs; dp is the rest."""

    gpus: int | None = Field(default=None, ge=1, le=10**6)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=4096)
    reference_logprob: bool = True
    weight_sync: Literal["broadcast", "reshard"] = "broadcast"
    optimizer_bytes_per_param: float = Field(default=16.0, gt=0, le=1024)
    mfu: float | None = Field(default=None, gt=0, le=1, description="override the profile's train_mfu")
    logprob_efficiency: float | None = Field(default=None, gt=0, le=1,
                                             description="GEMM efficiency of the logprob passes (default: the profile's compute)")


class WorkloadSection(Strict):
    prompts: int = Field(ge=1, le=10**6, description="prompts per RL step")
    group_size: int = Field(default=16, ge=1, le=4096, description="responses per prompt (GRPO n)")
    max_response_tokens: int = Field(ge=1, le=10**7)
    prompt_tokens: LengthSpec = LengthSpec(kind="fixed", tokens=256)
    max_prompt_tokens: int = Field(default=2048, ge=1, le=10**7)
    response_tokens: LengthSpec
    group_correlation: float = Field(default=0.5, ge=0, le=1)
    length_growth_per_step: float = Field(default=0.0, ge=-0.5, le=1.0)
    temperature: float = Field(default=1.0, ge=0, le=2)


class StalenessSection(Strict):
    """α(v) = floor + (α0 − floor)·exp(−rate·v) after v policy versions. Give `rate_per_version`
    directly, or `tau_after` measured `after_versions` versions later (solved for the rate)."""

    rate_per_version: float | None = Field(default=None, ge=0, le=100)
    floor_alpha: float = Field(default=0.0, ge=0, lt=1)
    tau_after: float | None = Field(default=None, ge=1, le=33)
    after_versions: int | None = Field(default=None, ge=1, le=10**6)

    @model_validator(mode="after")
    def _one_way(self):
        if self.tau_after is not None and self.after_versions is None:
            raise _bad("after_versions", self.after_versions, "tau_after needs after_versions")
        if self.tau_after is not None and self.rate_per_version is not None:
            raise _bad("tau_after", self.tau_after, "give rate_per_version or tau_after, not both")
        return self


class DrafterSection(Strict):
    """The drafter and its acceptance. Give the fresh drafter's mean acceptance length `tau`
    (tokens per verify, as vLLM/NeMo-RL report it) measured at draft length `tau_at_k`, or the
    per-token acceptance `alpha` directly."""

    kind: Literal["eagle3", "mtp", "self_quant", "ngram"] = "eagle3"
    tau: float | None = Field(default=None, ge=1, le=33)
    tau_at_k: int = Field(default=3, ge=1, le=32)
    alpha: float | None = Field(default=None, ge=0, lt=1)
    init: Literal["in_domain", "general"] = "in_domain"
    general_tau: float | None = Field(default=None, ge=1, le=33, description="fresh τ (at tau_at_k) when init=general")
    tau_temperature: float | None = Field(default=None, ge=0, le=2,
                                          description="temperature τ/α was measured at (default: workload.temperature)")
    position_decay: float = Field(default=1.0, gt=0, le=1)
    heterogeneity: float | None = Field(default=None, gt=0, le=1e6, description="Beta concentration of per-sequence α")
    staleness: StalenessSection = StalenessSection()
    update_every_steps: int = Field(default=0, ge=0, le=10**6, description="online drafter training every I steps (0 = never)")
    update_token_fraction: float = Field(default=1.0, gt=0, le=1)
    draft_vocab: int | None = Field(default=None, ge=1, le=10**7)
    draft_ffn: int | None = Field(default=None, ge=1, le=10**7)

    @model_validator(mode="after")
    def _acceptance_given(self):
        if (self.tau is None) == (self.alpha is None):
            raise _bad("tau", self.tau, "give exactly one of tau (with tau_at_k) or alpha")
        if self.tau is not None and self.tau > self.tau_at_k + 1:
            raise _bad("tau", self.tau, f"must be <= tau_at_k + 1 = {self.tau_at_k + 1} (at most k accepted + 1 bonus token per verify)")
        if self.init == "general" and self.general_tau is None and self.tau is not None:
            raise _bad("general_tau", self.general_tau, "init=general needs general_tau (the general-domain drafter's fresh τ)")
        return self


class SpeculationSection(Strict):
    """SD policy per engine step: off; always(k); threshold(k, max_batch) — speculate only while
    the active batch is <= max_batch; adaptive — choose k in 0..k_max each step."""

    policy: Literal["off", "always", "threshold", "adaptive"] = "always"
    k: int = Field(default=3, ge=0, le=32)
    max_batch: int = Field(default=64, ge=1)
    k_max: int = Field(default=7, ge=1, le=32)

    @field_validator("policy", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        """YAML 1.1 reads a bare `off` as false; the user meant the policy name."""
        return "off" if v is False else v


class PipelineSection(Strict):
    mode: Literal["sync", "async"] = "sync"
    steps: int = Field(default=6, ge=1, le=10000)
    warmup_steps: int = Field(default=1, ge=0)
    policy_lag: int = Field(default=1, ge=0, le=64)
    partial_rollouts: bool = False
    reward_s: float = Field(default=2.0, ge=0, le=1e7)
    baseline: dict[str, Any] = Field(default_factory=lambda: {"speculation.policy": "off"},
                                     description="dotted overrides that turn this scenario into its baseline")

    @model_validator(mode="after")
    def _warmup(self):
        if self.warmup_steps >= self.steps:
            raise _bad("warmup_steps", self.warmup_steps, f"must be below steps ({self.steps})")
        return self


class CapacitySection(Strict):
    rollout_gpus: list[int] | None = None
    target_step_s: float | None = Field(default=None, gt=0)


class OutputSection(Strict):
    dir: str = "results"
    plots: bool = True
    capacity: CapacitySection = CapacitySection()


class Scenario(Strict):
    name: str = "scenario"
    description: str = ""
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    hardware: str
    model: str
    rollout: RolloutSection
    training: TrainingSection = TrainingSection()
    workload: WorkloadSection
    drafter: DrafterSection
    speculation: SpeculationSection = SpeculationSection()
    pipeline: PipelineSection = PipelineSection()
    sweep: dict[str, Any] = Field(default_factory=dict)
    output: OutputSection = OutputSection()
    _source_file: str | None = PrivateAttr(default=None)

    @field_validator("sweep")
    @classmethod
    def _sweep_shape(cls, v):
        for key, values in v.items():
            if key == "replicates":
                if isinstance(values, bool) or not isinstance(values, int) or values < 1:
                    raise ValueError("replicates must be a whole number >= 1")
            elif key == "zip":
                if not isinstance(values, list) or not all(isinstance(g, list) and len(g) >= 2 for g in values):
                    raise ValueError("zip must be a list of groups of >= 2 swept field paths")
            elif not isinstance(values, list) or not values:
                raise ValueError(f"sweep.{key} must be a non-empty list of values")
        return v

    @model_validator(mode="after")
    def _pools(self):
        if self.pipeline.mode == "sync" and self.training.gpus not in (None, self.rollout.gpus):
            raise _bad("training.gpus", self.training.gpus, "in sync (colocated) mode training runs on the rollout GPUs: omit training.gpus")
        if self.pipeline.mode == "async" and self.training.gpus is None:
            raise _bad("training.gpus", None, "async mode needs training.gpus (its own pool)")
        responses = self.workload.prompts * self.workload.group_size
        if responses > 10**7:
            raise _bad("workload.prompts", self.workload.prompts,
                       f"at most 10,000,000 responses per step (prompts x group_size = {responses:,})")
        return self

    @property
    def training_gpus(self) -> int:
        return self.training.gpus if self.pipeline.mode == "async" else self.rollout.gpus

    @property
    def total_gpus(self) -> int:
        return self.rollout.gpus + (self.training.gpus if self.pipeline.mode == "async" else 0)


# ----------------------------------------------------------------------------- loading
def parse_override(text: str) -> tuple[str, Any]:
    """`path=value` → (path, YAML-parsed value)."""
    if "=" not in text:
        raise ScenarioError(None, "--set", text, "expected path=value, e.g. speculation.k=3")
    path, raw = text.split("=", 1)
    path = path.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


def _model_for_path(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Scenario
    for part in path:
        if model is None:
            return None
        fld = model.model_fields.get(part)
        if fld is None:
            return None
        ann = fld.annotation
        nxt = None
        for cand in getattr(ann, "__args__", ()) + (ann,):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
        model = nxt
    return model


def set_dotted(doc: dict, path: str, value: Any, file: str | None = None) -> dict:
    """Set `a.b.c` in a nested dict (copying), checking every part names a real field."""
    parts = path.split(".")
    if not all(parts):
        raise ScenarioError(file, path, path, "a dotted field path like speculation.k")
    out = copy.deepcopy(doc)
    cur = out
    for i, part in enumerate(parts):
        model = _model_for_path(parts[:i])
        if model is not None and part not in model.model_fields:
            options = list(model.model_fields)
            close = difflib.get_close_matches(part, options, n=1)
            hint = f" (did you mean {'.'.join(parts[:i] + [close[0]])!r}?)" if close else ""
            raise ScenarioError(file, path, value, f"unknown field {part!r}; allowed here: {options}{hint}")
        if i == len(parts) - 1:
            cur[part] = value
        else:
            nxt = cur.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                cur[part] = nxt
            cur = nxt
    return out


def _allowed_from_error(err: dict) -> str:
    typ = err.get("type", "")
    ctx = err.get("ctx") or {}
    if typ == "extra_forbidden":
        loc = [str(p) for p in err["loc"][:-1]]
        model = _model_for_path(loc)
        options = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(err["loc"][-1]), options, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field; allowed here: {options}{hint}"
    if typ == "missing":
        return "required field is missing"
    if typ == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if typ in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        sym = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[typ]
        bound = next(iter(ctx.values()), "")
        return f"must be {sym} {bound}"
    if typ.startswith(("int_", "float_", "bool_", "string_", "dict_", "list_", "model_")):
        return err.get("msg", "wrong type").replace("Input should be", "must be")
    msg = str(err.get("msg", ""))
    return msg.removeprefix("Value error, ")


def _format_validation(exc: ValidationError, file: str | None) -> ScenarioError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-after", "function-before"))]
    field = ".".join(loc) or "(scenario)"
    value = err.get("input")
    if isinstance(value, dict) and err.get("type") != "extra_forbidden":
        value = "{...}" if len(repr(value)) > 80 else value
    more = len(exc.errors()) - 1
    allowed = _allowed_from_error(err)
    if _SEP in allowed:
        _, sub, val, allowed = allowed.split(_SEP, 3)
        field = ".".join(loc + [sub]) if not sub.startswith("training.") else sub
        value = _Raw(val)
    if more:
        allowed += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ScenarioError(file, field, value, allowed)


def read_yaml(path: str | Path) -> dict:
    p = Path(path)
    file = str(path)
    if not p.is_file():
        raise ScenarioError(file, "(file)", file, "an existing scenario YAML file")
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8")
        doc = load_yaml_text(text)
    except UnicodeDecodeError:
        raise ScenarioError(file, "(file)", "<binary>", "a UTF-8 YAML text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise ScenarioError(file, "(file)", "<unparseable>", f"valid YAML ({problem}{where})") from None
    except (OSError, RecursionError) as exc:
        raise ScenarioError(file, "(file)", file, f"a readable YAML file ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict):
        raise ScenarioError(file, "(scenario)", doc, "a YAML mapping with sections hardware, model, rollout, workload, drafter, ...")
    return doc


def validate_doc(doc: dict, file: str | None = None) -> Scenario:
    try:
        sc = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise _format_validation(exc, file) from None
    except (RecursionError, OverflowError, TypeError) as exc:
        raise ScenarioError(file, "(scenario)", "<value>", f"plain YAML values ({exc.__class__.__name__})") from None
    _check_numbers(sc, file)
    return sc


def _check_numbers(sc: Scenario, file: str | None) -> None:
    def walk(obj, prefix):
        if isinstance(obj, BaseModel):
            for name in type(obj).model_fields:
                walk(getattr(obj, name), f"{prefix}.{name}" if prefix else name)
        elif isinstance(obj, float) and not math.isfinite(obj):
            raise ScenarioError(file, prefix, obj, "must be a finite number")
    walk(sc, "")


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, apply `--set path=value` overrides, validate. Raises ScenarioError."""
    file = str(path)
    doc = read_yaml(path)
    for text in overrides:
        key, value = parse_override(text)
        doc = set_dotted(doc, key, value, file)
    sc = validate_doc(doc, file)
    sc._source_file = file
    return sc


def source_file(sc: Scenario) -> str | None:
    """The file a scenario was loaded from (for error messages and relative paths)."""
    return sc._source_file


def apply_overrides(sc: Scenario, changes: dict[str, Any]) -> Scenario:
    """A new scenario with dotted-path changes applied and re-validated."""
    file = source_file(sc)
    doc = sc.model_dump(mode="python")
    for key, value in changes.items():
        doc = set_dotted(doc, key, value, file)
    new = validate_doc(doc, file)
    new._source_file = file
    return new


def to_yaml(sc: Scenario) -> str:
    return yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)


def spec_error_to_scenario(exc: SpecError, file: str | None) -> ScenarioError:
    return ScenarioError(file or exc.where, exc.field, exc.value, f"must be {exc.allowed}")
