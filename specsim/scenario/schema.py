"""The scenario schema: one pydantic section class per scenario section, and the errors they raise.

A scenario says what to simulate: hardware and model, the rollout and training layouts, the
workload (prompts, GRPO group size, length distributions), the drafter and its acceptance, the SD
policy, the RL pipeline, an optional sweep, output options and the seed. Every section forbids
unknown keys (with a did-you-mean), refuses true/false for numbers (YAML `k: true` is not k = 1)
and NaN/inf for any number. Every error is a `ScenarioError` naming the file, the dotted field
path, the value (a bounded repr) and what is allowed; the CLI prints it and exits 2.

The sweep is checked here too: swept paths name real fields, no value twice, and at most
`MAX_SWEEP_ROWS` rows (combinations × replicates), counted without expanding anything.
Shared parts: :mod:`.base` (the error, the Strict base), :mod:`.paths` (dotted paths, sweep
counting); loading (YAML, `--set` overrides): :mod:`.loading`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from specsim.model import drafter_kind_names
from specsim.scenario.base import ScenarioError, Strict, _bad, _Raw  # noqa: F401 (re-exported)
from specsim.scenario.paths import MAX_SWEEP_ROWS, path_problem, sweep_rows

DType = Literal["bf16", "fp16", "fp8", "int8", "fp4", "int4"]


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
    max_batch: int | None = Field(default=None, ge=1, le=65536,
                                  description="vLLM max_num_seqs per engine (default: vLLM's own, 1024 on a GPU with >= 70 GiB, 256 below)")
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
    sharding: Literal["fsdp", "distributed_optimizer"] = Field(
        default="fsdp", description="fsdp: ZeRO-3 (veRL FSDP, NeMo-RL DTensor); distributed_optimizer: Megatron-Core's "
                                    "(ZeRO-1: only the optimizer state sharded; NeMo-RL's Megatron backend)")
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

    kind: Literal[drafter_kind_names()] = "eagle3"  # the registry, catalog/drafters.yaml
    tau: float | None = Field(default=None, ge=1, le=33)
    tau_at_k: int = Field(default=3, ge=1, le=32)
    alpha: float | None = Field(default=None, ge=0, lt=1)
    init: Literal["in_domain", "general"] = "in_domain"
    general_tau: float | None = Field(default=None, ge=1, le=33, description="fresh τ (at tau_at_k) when init=general")
    tau_temperature: float | None = Field(default=None, ge=0, le=2,
                                          description="temperature τ/α was measured at (default: workload.temperature)")
    tau_tree_topk: int | None = Field(default=None, ge=1, le=64,
                                      description="τ was measured on SGLang's EAGLE beam tree: eagle_topk (depth tau_at_k)")
    tau_tree_verify_tokens: int | None = Field(default=None, ge=2, le=4096,
                                               description="... and its num_draft_tokens (root included)")
    position_decay: float = Field(default=1.0, gt=0, le=1)
    heterogeneity: float | None = Field(default=None, gt=0, le=1e6, description="Beta concentration of per-sequence α")
    staleness: StalenessSection = StalenessSection()
    update_every_steps: int = Field(default=0, ge=0, le=10**6, description="online drafter training every I steps (0 = never)")
    update_token_fraction: float = Field(default=1.0, gt=0, le=1)
    draft_vocab: int | None = Field(default=None, ge=1, le=10**7)
    draft_ffn: int | None = Field(default=None, ge=1, le=10**7)
    proposal_rate: float | None = Field(default=None, gt=0, le=1, description=(
        "share of request-steps that carry a draft (default: the kind's, catalog/drafters.yaml; "
        "tau is conditional on a draft, as vLLM reports it)"))
    context_curve: list[list[float]] | None = Field(default=None, max_length=1000, description=(
        "[[context_tokens, relative_alpha], ...]: per-token acceptance relative to short contexts, for a "
        "drafter trained on shorter sequences (workload/context_acceptance.py; none = no fall with context)"))

    @model_validator(mode="after")
    def _acceptance_given(self):
        has_tau = self.tau is not None or (self.init == "general" and self.general_tau is not None)
        if has_tau == (self.alpha is not None):
            raise _bad("tau", self.tau, "give exactly one of tau (with tau_at_k) or alpha (init: general: general_tau)")
        if self.tau is not None and self.tau > self.tau_at_k + 1:
            raise _bad("tau", self.tau, f"must be <= tau_at_k + 1 = {self.tau_at_k + 1} (at most k accepted + 1 bonus token per verify)")
        if self.init == "general" and self.general_tau is None and self.tau is not None:
            raise _bad("general_tau", self.general_tau, "init=general needs general_tau (the general-domain drafter's fresh τ)")
        return self


class SpeculationSection(Strict):
    """SD policy per engine step: off; always(k); threshold(k, max_batch) — speculate only while
    the active batch is <= max_batch; toggle(k, toggle_margin) — speculate while the engine's own
    cost model predicts SD at k at least 1 + toggle_margin times faster than decoding
    (EfficientRollout's roofline toggle); adaptive — choose k in 0..k_max each step."""

    policy: Literal["off", "always", "threshold", "toggle", "adaptive"] = "always"
    k: int = Field(default=3, ge=0, le=32)
    max_batch: int = Field(default=64, ge=1)
    k_max: int = Field(default=7, ge=1, le=32)
    toggle_margin: float = Field(default=0.05, ge=0, le=10,
                                 description="toggle: the predicted SD speedup must reach 1 + toggle_margin")
    acceptance_estimate: Literal["drafter", "measured"] = Field(
        default="drafter", description=(
            "the acceptance the toggle / adaptive policies price with: the drafter's mean (drafter), or each "
            "engine's acceptance length measured over its SD steps of the previous RL step (measured; "
            "EfficientRollout's toggle; sync pipelines)"))
    tree_branching: list[int] | None = Field(default=None, description="draft tree: children per node at depths 1..k")
    tree_sibling_factor: float | None = Field(default=None, ge=0, le=1, description="tree sibling factor rho (default 0.5)")
    tree_topk: int | None = Field(default=None, ge=1, le=64, description="SGLang EAGLE beam tree: eagle_topk K (depth = k)")
    tree_verify_tokens: int | None = Field(default=None, ge=2, le=4096,
                                           description="SGLang EAGLE beam tree: num_draft_tokens N (root included)")


class PipelineSection(Strict):
    mode: Literal["sync", "async"] = "sync"
    steps: int = Field(default=6, ge=1, le=10000)
    warmup_steps: int = Field(default=1, ge=0)
    policy_lag: int = Field(default=1, ge=0, le=64)
    partial_rollouts: bool = False
    reward_s: float = Field(default=2.0, ge=0, le=1e7)
    engine_prepare_s: float = Field(default=0.0, ge=0, le=1e5,
                                    description="colocated sync: rollout-engine wake-up and refit bookkeeping per step")
    data_s: float = Field(default=0.0, ge=0, le=1e5,
                          description="loading one step's prompt batch (NeMo-RL's 'data' stage): sync, before "
                                      "generation; async, prefetched while the engines work (only the first batch waits)")
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
    replicates: int | None = Field(default=None, ge=1, le=1000)


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
        sweep_rows(v, Scenario)
        return v

    @field_validator("pipeline", mode="after")
    @classmethod
    def _baseline_paths(cls, v):
        for key in v.baseline:
            problem = path_problem(str(key), Scenario)
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
        cap = self.output.capacity
        # ×¼, ½, 1, 2 of rollout.gpus by default (capacity.capacity_sizes); the scenario's own size is always run
        listed = set(cap.rollout_gpus) if cap.rollout_gpus is not None else None
        sizes = 4 if listed is None else len(listed | {self.rollout.gpus}) if listed else 0
        reps = cap.replicates or int(self.sweep.get("replicates", 1) or 1)
        if sizes * 2 * reps > MAX_SWEEP_ROWS:   # AR and SD at each size (incl. the scenario's own) per replicate
            raise _bad("output.capacity.replicates", reps,
                       f"at most {MAX_SWEEP_ROWS:,} capacity-plan runs (sizes × 2 variants × replicates = "
                       f"{sizes} × 2 × {reps}"
                       + ("" if cap.replicates else ", the sweep's replicates while unset")
                       + "); set output.capacity.replicates lower or list fewer output.capacity.rollout_gpus")
        return self

    @property
    def rows(self) -> int:
        """Rows this scenario's sweep asks for: combinations × replicates."""
        return sweep_rows(self.sweep, Scenario)

    @property
    def training_gpus(self) -> int:
        return self.training.gpus if self.pipeline.mode == "async" else self.rollout.gpus

    @property
    def total_gpus(self) -> int:
        return self.rollout.gpus + (self.training.gpus if self.pipeline.mode == "async" else 0)
