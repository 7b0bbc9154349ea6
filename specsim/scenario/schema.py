"""The scenario schema: one pydantic section class per scenario section, and the errors they raise.

A scenario says what to simulate: hardware and model, the rollout and training layouts, the
workload (prompts, GRPO group size, length distributions), the drafter and its acceptance, the SD
policy, the RL pipeline, an optional sweep, output options and the seed. Every section forbids
unknown keys (with a did-you-mean), refuses true/false for numbers (YAML `k: true` is not k = 1)
and NaN/inf for any number. Every error is a `ScenarioError` naming the file, the dotted field
path, the value (a bounded repr) and what is allowed; the CLI prints it and exits 2.

The sweep is checked here too: swept paths name real fields, no value twice, and at most
`MAX_SWEEP_ROWS` rows (combinations × replicates), counted without expanding anything.
Loading (YAML, `--set` overrides) lives in :mod:`specsim.scenario.loading`.
"""

from __future__ import annotations

import difflib
import math
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from specsim.errors import short_repr

#: The most rows (swept combinations × replicates) one scenario may ask for. Each row is at least
#: one pipeline simulation (plus its baselines), seconds to minutes each: 10,000 rows is already
#: hours on a workstation. `specsim check` and `specsim show scenario` report the count.
MAX_SWEEP_ROWS = 10_000

DType = Literal["bf16", "fp16", "fp8", "int8", "fp4", "int4"]


class ScenarioError(ValueError):
    """A bad scenario: `file`, dotted `field`, offending `value`, and what is `allowed`."""

    def __init__(self, file: str | None, field: str, value: Any, allowed: str):
        self.file, self.field, self.value, self.allowed = file, field, value, allowed
        super().__init__(self.message())

    def message(self) -> str:
        where = f"{self.file}: " if self.file else ""
        v = short_repr(self.value)
        return f"{where}{self.field}: {self.allowed}, got {v}"


_SEP = "\x1f"


def _bad(field: str, value: Any, allowed: str) -> ValueError:
    """A cross-field validation failure that still names one field and its value."""
    return ValueError(f"{_SEP}{field}{_SEP}{short_repr(value)}{_SEP}{allowed}")


class _Raw(str):
    """A value already rendered with repr()."""

    def __repr__(self) -> str:
        return str(self)


def _number_kind(annotation: Any) -> str | None:
    """'int' / 'float' when a field's annotation is int / float (optionally `| None`), else None."""
    args = set(typing.get_args(annotation)) or {annotation}
    args.discard(type(None))
    if args == {int}:
        return "int"
    if args == {float} or args == {int, float}:
        return "float"
    return None


class Strict(BaseModel):
    """Base of every section: unknown keys refused; numbers strict about bools and NaN."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: Any) -> Any:
        """true/false is not a number (pydantic would read `k: true` as 1), and NaN/inf are refused
        before any bound is checked (NaN fails every bound with a misleading message)."""
        if not isinstance(data, dict):
            return data
        for name, fld in cls.model_fields.items():
            if name not in data:
                continue
            kind = _number_kind(fld.annotation)
            v = data[name]
            if kind is None or v is None:
                continue
            if isinstance(v, bool):
                raise _bad(name, v, f"a {'whole ' if kind == 'int' else ''}number (true/false is not a number)")
            if isinstance(v, (float, str)):
                try:
                    f = float(v)
                except (TypeError, ValueError, OverflowError):
                    continue
                if not math.isfinite(f):
                    raise _bad(name, v, "a finite number (not NaN or infinity)")
        return data


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
                if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in c.values()):
                    raise _bad("components", c, "finite numbers for weight, median, p99")
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

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        """The name becomes a folder under output.dir: one plain path component."""
        if (not v or len(v) > 200 or "/" in v or "\\" in v or "\x00" in v or v.startswith(".")
                or any(ord(ch) < 32 for ch in v)):
            raise ValueError("a plain name of 1-200 characters without /, \\, control characters "
                             "or a leading '.' (it names the results folder inside output.dir)")
        return v

    @field_validator("hardware")
    @classmethod
    def _hardware_name(cls, v: str) -> str:
        """Bundled profile names are case-insensitive (GB200 = gb200); paths are kept as written."""
        if "/" in v or "\\" in v or v.lower().endswith((".yaml", ".yml")):
            return v
        return v.lower()

    @field_validator("sweep")
    @classmethod
    def _sweep_shape(cls, v):
        sweep_rows(v)
        return v

    @field_validator("pipeline", mode="after")
    @classmethod
    def _baseline_paths(cls, v):
        for key in v.baseline:
            problem = path_problem(str(key))
            if problem:
                raise _bad("baseline", key, problem)
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
    def rows(self) -> int:
        """Rows this scenario's sweep asks for: combinations × replicates."""
        return sweep_rows(self.sweep)

    @property
    def training_gpus(self) -> int:
        return self.training.gpus if self.pipeline.mode == "async" else self.rollout.gpus

    @property
    def total_gpus(self) -> int:
        return self.rollout.gpus + (self.training.gpus if self.pipeline.mode == "async" else 0)




# ----------------------------------------------------------------------------- paths and the sweep
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


def path_problem(path: str) -> str | None:
    """Why a dotted path does not name a scenario field (None when it does)."""
    parts = path.split(".")
    if not all(parts):
        return "a dotted field path like speculation.k"
    for i, part in enumerate(parts):
        model = _model_for_path(parts[:i])
        if model is None:
            return None if i else "a dotted field path like speculation.k"
        if part not in model.model_fields:
            options = list(model.model_fields)
            close = difflib.get_close_matches(part, options, n=1)
            hint = f" (did you mean {'.'.join(parts[:i] + [close[0]])!r}?)" if close else ""
            return f"a dotted field path; {part!r} is not a field here: allowed {options}{hint}"
    if parts[0] in ("sweep", "name", "description", "output"):
        return f"a field that changes the simulation (not {parts[0]})"
    return None


def _value_key(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True, default=str)


def sweep_rows(sweep: dict) -> int:
    """Check a `sweep:` section's shape and count its rows (combinations × replicates) without
    expanding it. Raises ValueError (shown as a `sweep.<path>` error) on a malformed sweep, a
    value given twice, or more than MAX_SWEEP_ROWS rows."""
    if not isinstance(sweep, dict):
        raise _bad("", sweep, "a mapping of swept field paths to lists of values")
    reps = sweep.get("replicates", 1)
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= MAX_SWEEP_ROWS:
        raise _bad("replicates", reps, f"a whole number from 1 to {MAX_SWEEP_ROWS:,}")
    zips = sweep.get("zip", []) or []
    if not isinstance(zips, list) or not all(isinstance(g, list) and len(g) >= 2 for g in zips):
        raise _bad("zip", zips, "a list of groups of >= 2 swept field paths")
    paths = [k for k in sweep if k not in ("replicates", "zip")]
    for key in paths:
        values = sweep[key]
        problem = path_problem(str(key))
        if problem:
            raise _bad(str(key), key, f"a swept field: {problem}")
        if not isinstance(values, list) or not values:
            raise _bad(str(key), values, "a non-empty list of values")
    zipped: dict[str, int] = {}
    sizes: list[int] = []
    axes: list[tuple[list[str], list]] = []
    for gi, group in enumerate(zips):
        lengths = set()
        for p in group:
            if not isinstance(p, str) or p not in paths:
                raise _bad("zip", group, f"zip groups name swept paths (one of {paths}); {p!r} is not swept")
            if p in zipped:
                raise _bad("zip", zips, f"each swept path in at most one zip group ({p!r} twice)")
            zipped[p] = gi
            lengths.add(len(sweep[p]))
        if len(lengths) != 1:
            raise _bad("zip", group, f"zipped paths with lists of one length (these have {sorted(lengths)} values)")
        sizes.append(lengths.pop())
        axes.append((list(group), [list(t) for t in zip(*(sweep[p] for p in group))]))
    for p in paths:
        if p not in zipped:
            sizes.append(len(sweep[p]))
            axes.append(([p], sweep[p]))
    for group, values in axes:   # a value (a zip group: a tuple of values) swept twice is a duplicate row
        seen: dict[str, int] = {}
        for i, x in enumerate(values):
            k = _value_key(x)
            if k in seen:
                where = group[0] if len(group) == 1 else "zip"
                raise _bad(where, sweep[group[0]] if len(group) == 1 else group,
                           f"each swept value once ({short_repr(x)} is given twice, at positions {seen[k]} and {i}"
                           f"{'' if len(group) == 1 else ' of the zipped ' + ', '.join(group)})")
            seen[k] = i
    rows = reps
    for n in sizes:
        rows *= n
        if rows > MAX_SWEEP_ROWS:
            break
    if rows > MAX_SWEEP_ROWS:
        total = reps
        for n in sizes:
            total *= n
        raise _bad("", f"{total:,} rows", f"at most {MAX_SWEEP_ROWS:,} rows (combinations × replicates = "
                                          f"{' × '.join(map(str, sizes + [reps]))}); split the sweep or sweep fewer values")
    return rows
