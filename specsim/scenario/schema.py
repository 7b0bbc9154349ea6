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

from specsim.catalog.hardware import list_hardware
from specsim.catalog.models import drafter_kind_names
from specsim.errors import SpecError
from specsim.policy import KINDS
from specsim.policy.schedule import parse_batch_schedule
from specsim.scenario.base import Raw, ScenarioError, Strict, field_error  # noqa: F401 (re-exported)
from specsim.scenario.paths import MAX_SWEEP_ROWS, path_problem, sweep_rows
from specsim.scenario.plan_section import PlanSection, plan_hardware_names

DType = Literal["bf16", "fp16", "fp8", "int8", "fp4", "int4"]


# ----------------------------------------------------------------------------- sections
class LengthSpec(Strict):
    """A length distribution.

    `kind: lognormal`: `median` + `p99` (tokens) or `mu` + `sigma` (log tokens); `kind: mixture`:
    `components` of `{weight, median, p99}`; `kind: empirical`: `path` to a CSV/JSONL of observed
    lengths (relative to the scenario file), read from `column` (default: the first of the known
    length columns of NeMo-RL, veRL and OpenRLHF logs); `kind: fixed`: `tokens`."""

    kind: Literal["lognormal", "mixture", "empirical", "fixed"] = Field(
        default="lognormal", description="distribution family")
    median: float | None = Field(default=None, ge=1, le=1e9, description="lognormal: median tokens (with `p99`)")
    p99: float | None = Field(default=None, ge=1, le=1e9,
                              description="lognormal: 99th percentile tokens, above the median")
    mu: float | None = Field(default=None, ge=-50, le=50,
                             description="lognormal: mean of ln(tokens) (with `sigma`, instead of `median`/`p99`)")
    sigma: float | None = Field(default=None, ge=1e-6, le=20, description="lognormal: standard deviation of ln(tokens)")
    components: list[dict[str, float]] | None = Field(
        default=None, description="mixture: lognormal components `{weight, median, p99}` (p99 above the median), "
                                  "weights summing to 1")
    path: str | None = Field(default=None,
                             description="empirical: CSV/JSONL of observed lengths, relative to the scenario file")
    tokens: int | None = Field(default=None, ge=1, le=10**9, description="fixed: every length")
    column: str | None = Field(default=None, min_length=1, max_length=200, description=(
        "empirical: the CSV column / JSON key holding one response's length (a JSON list is read as one length "
        "per entry); null: the first present of `length`, `response_tokens`, `response_length`, "
        "`response_lengths`, `generation_lengths`, `generation_length` (NeMo-RL, veRL, OpenRLHF; see "
        "`docs/own-setup.md`, \"Length logs\"). Per-step aggregates (`response_length/mean`, ...) are refused"))
    unit: Literal["tokens"] = Field(default="tokens", description=(
        "empirical: the unit of the column, tokens only (a character or word count is not a token count: convert "
        "it first)"))

    @model_validator(mode="after")
    def _complete(self):
        own = {"lognormal": {"median", "p99", "mu", "sigma"}, "mixture": {"components"}, "empirical": {"path"},
               "fixed": {"tokens"}}[self.kind]
        for name in ("median", "p99", "mu", "sigma", "components", "path", "tokens"):
            if name not in own and getattr(self, name) is not None:   # never silently ignored
                raise field_error(name, getattr(self, name), f"only with a kind that uses it (kind {self.kind} uses "
                                  f"{sorted(own)}); remove it or change kind")
        if self.kind == "lognormal":
            by_q = self.median is not None and self.p99 is not None
            by_p = self.mu is not None and self.sigma is not None
            if (self.median is not None or self.p99 is not None) and (self.mu is not None or self.sigma is not None):
                raise field_error("mu", self.mu, "either median and p99 (tokens) or mu and sigma (log tokens), not "
                                  "both: the two sets disagree unless converted, so neither is chosen silently")
            if not (by_q or by_p):
                raise field_error("median", self.median, "lognormal needs median and p99 (tokens) or mu and sigma")
            if by_q and self.p99 <= self.median:
                raise field_error("p99", self.p99, f"must be above median ({self.median})")
        elif self.kind == "mixture":
            if not self.components:
                raise field_error("components", self.components, "mixture needs components: [{weight, median, p99}, ...]")
            for c in self.components:
                if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in c.values()):
                    raise field_error("components", c, "finite numbers for weight, median, p99")
                if set(c) - {"weight", "median", "p99"} or not {"weight", "median", "p99"} <= set(c):
                    raise field_error("components", c, "each mixture component has exactly weight, median, p99")
                if c["weight"] < 0 or c["median"] <= 0 or c["p99"] <= c["median"]:
                    raise field_error("components", c, "component weight >= 0, median > 0, p99 > median")
            if abs(sum(c["weight"] for c in self.components) - 1.0) > 1e-6:
                raise field_error("components", [c["weight"] for c in self.components], "weights must sum to 1")
        elif self.kind == "empirical" and not self.path:
            raise field_error("path", self.path, "empirical needs path: a CSV/JSONL file of observed lengths")
        if self.kind != "empirical" and self.column is not None:
            raise field_error("column", self.column, "only with kind: empirical (the column of a length file)")
        elif self.kind == "fixed" and self.tokens is None:
            raise field_error("tokens", self.tokens, "fixed needs tokens")
        return self


class RolloutSection(Strict):
    """The generation pool.

    `gpus` split into data-parallel engines of max(tp, ep)·pp GPUs each."""

    gpus: int = Field(ge=1, le=10**6,
                      description="GPUs generating; split into data-parallel engines of max(tp, ep)·pp GPUs each")
    tp: int = Field(default=1, ge=1, le=1024,
                    description="tensor-parallel degree of one engine (must divide the attention heads)")
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline stages of one engine")
    ep: int = Field(default=1, ge=1, le=4096,
                    description="expert-parallel degree (MoE only; 1 or a multiple of tp; ep > tp runs attention "
                                "data-parallel)")
    weight_dtype: DType | None = Field(default=None, description="weight dtype (fp8 runs fp8 GEMMs; 4-bit runs W4A16); "
                                                                 "null: what the model's config.json "
                                                                 "quantization_config names, else bf16")
    kv_dtype: DType = Field(default="bf16", description="KV-cache dtype")
    max_batch: int | None = Field(default=None, ge=1, le=65536,
                                  description="most sequences an engine runs at once (vLLM `max_num_seqs`); null: "
                                              "vLLM's own default (`EngineArgs.get_batch_defaults`): 1024 on a GPU "
                                              "with ≥ 70 GiB other than the A100, 256 otherwise, as the `LLM` class and the API "
                                              "server get it; an engine built by `AsyncLLM.from_engine_args` without a "
                                              "usage context (NeMo-RL's `vllm_cfg.async_engine`) runs 128")
    gpu_memory_utilization: float = Field(default=0.9, ge=0.01, le=1,
                                          description="share of HBM the engine may use (colocated sync runs leave "
                                                      "room for the trainer)")
    max_batched_tokens: int = Field(default=8192, ge=1, le=10**7,
                                    description="tokens per forward pass; sizes the activation workspace")
    inprocess_engine: bool = Field(default=False, description=(
        "the engine's core runs in its caller's process, so its frontend work (each running sequence's sampled "
        "token and logprob made into Python objects) runs serially with every step: NeMo-RL sets "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0 and, with `vllm_cfg.async_engine: false`, drives vLLM's in-process "
        "`LLM.generate`; each step then pays the profile's `efficiency.inprocess_seq_overhead_us` per running "
        "sequence. false: vLLM's default (engine core in a process of its own; NeMo-RL's async engine)"))
    kv_block_tokens: int = Field(default=16, ge=1, le=4096,
                                 description="KV-cache block (page) size for admission and preemption")
    kv_capacity_tokens: int | None = Field(default=None, ge=1, le=10**12,
                                           description="override the KV budget per engine that the memory plan derives")
    dispatch: Literal["round_robin", "least_loaded"] = Field(
        default="round_robin", description="how GRPO groups are assigned to engines")
    hardware: str | None = Field(default=None, description=(
        "the generation pool's hardware profile (a name or a path, as the top-level `hardware`); null: the "
        "top-level `hardware`. Another profile than `training.hardware` needs `pipeline.mode: async` (separate "
        "pools; colocated pools are the same GPUs)"))

    @field_validator("hardware")
    @classmethod
    def _hardware_name(cls, v: str | None) -> str | None:
        return None if v is None else hardware_key(v)


class TrainingSection(Strict):
    """The trainer.

    In sync mode it runs on the rollout GPUs (`gpus` must be omitted or equal); in async mode on
    its own pool of `gpus`. One training replica spans max(tp, ep)·pp GPUs; the GPUs must be a
    multiple of it, and data parallel is the rest."""

    gpus: int | None = Field(default=None, ge=1, le=10**6,
                             description="trainer GPUs: omit in sync mode (it runs on the rollout GPUs); required in "
                                         "async mode (its own pool)")
    tp: int = Field(default=1, ge=1, le=1024, description="trainer tensor parallel")
    pp: int = Field(default=1, ge=1, le=1024, description="trainer pipeline parallel")
    ep: int = Field(default=1, ge=1, le=4096,
                    description="trainer expert parallel (MoE only); one replica spans max(tp, ep)·pp GPUs, data "
                                "parallel is the rest")
    cp: int = Field(default=1, ge=1, le=1024, description=(
        "trainer context parallel (Megatron `context_parallel_size`): every sequence split over cp GPUs, attention "
        "over a ring; tp·cp·pp GPUs hold one copy of the dense weights. The longest sequence (max prompt + max "
        "response) must split into 2·cp equal chunks (Megatron's load-balanced causal split)"))
    dtype: Literal["bf16", "fp8"] = Field(default="bf16", description=(
        "the trainer's GEMM dtype (Megatron `fp8_cfg.enabled`: fp8 GEMMs at the profile's fp8 peak, bf16 weights "
        "kept); fp8 needs a GPU with fp8 tensor cores"))
    reference_logprob: bool = Field(default=True, description="also compute reference-policy log-probs (a second "
                                                              "forward, the reference weights swapped in from host "
                                                              "memory; NeMo-RL's `reference_policy_kl_penalty` > 0)")
    global_batch_samples: int | None = Field(default=512, ge=1, le=10**7, description=(
        "samples per optimizer step (NeMo-RL `policy.train_global_batch_size`, default 512): an RL step of n "
        "samples runs ⌈n / this⌉ optimizer steps, each with its own pipeline fill and gradient exchange; null: one "
        "optimizer step per RL step"))
    micro_batch_tokens: int | None = Field(default=None, ge=1, le=10**8, description=(
        "token budget of one packed training micro-batch (NeMo-RL `sequence_packing.train_mb_tokens` = "
        "max_total_sequence_length × train_micro_batch_size); null: max prompt + max response (micro-batch size "
        "1). At least the longest sequence: a sequence is never split across micro-batches"))
    logprob_micro_batch_tokens: int | None = Field(default=None, ge=1, le=10**8, description=(
        "token budget of one packed logprob micro-batch (NeMo-RL `logprob_mb_tokens` = max_total_sequence_length × "
        "logprob_batch_size); null: `micro_batch_tokens`"))
    activation_checkpointing: bool = Field(default=False, description=(
        "full activation recomputation (Megatron `activation_checkpointing`, NeMo-RL default false): one layer "
        "input stored per layer, the forward's collectives and launches paid again in the backward"))
    weight_sync: Literal["nemo_rl", "ipc", "nccl_broadcast", "broadcast", "reshard"] = Field(
        default="nemo_rl", description=(
            "how new weights reach the rollout engines (cost/training.weight_sync_s): `nemo_rl` = NeMo-RL's, `ipc` when "
            "colocated (every trainer GPU gathers the whole model, its engine takes its shard by CUDA IPC) and "
            "`nccl_broadcast` with separate pools (every trainer rank assembles the whole model, trainer rank 0 broadcasts "
            "it to every rollout GPU in packed buckets, export and broadcast overlapped); `broadcast` = a pipelined broadcast in which each rollout GPU receives only its shard; "
            "`reshard` = each rollout GPU all-gathers its shard from the trainer's ZeRO shards"))
    hardware: str | None = Field(default=None, description=(
        "the trainer pool's hardware profile (a name or a path, as the top-level `hardware`); null: the top-level "
        "`hardware`. Another profile than `rollout.hardware` needs `pipeline.mode: async`; new weights then reach "
        "the engines over the slower of the two profiles' scale-out networks"))

    @field_validator("hardware")
    @classmethod
    def _hardware_name(cls, v: str | None) -> str | None:
        return None if v is None else hardware_key(v)

    optimizer_bytes_per_param: float = Field(default=16.0, ge=0.01, le=1024,
                                             description="trainer memory per parameter (weights, grads, Adam states)")
    sharding: Literal["fsdp", "distributed_optimizer"] = Field(
        default="fsdp", description="how the trainer shards over its data-parallel replicas: `fsdp` = ZeRO-3 (veRL's "
                                    "FSDP actor, NeMo-RL's DTensor policy: params gathered for every micro-batch's "
                                    "forward, recompute and backward), `distributed_optimizer` = Megatron-Core's "
                                    "(ZeRO-1: only the fp32 optimizer state sharded; one gradient reduce-scatter and "
                                    "one parameter all-gather per optimizer step; NeMo-RL's Megatron policy). The "
                                    "NeMo-RL scenarios (`8b_*`, `235b_*`) set it (`calibration/published/README.md`, "
                                    "\"Trainer\"), and `30b_a3b_h100_async` as an assumption")
    mfu: float | None = Field(default=None, ge=1e-3, le=1,
                              description="override the hardware profile's `train_mfu` (the share of the math dtype's "
                                          "peak the trainer's GEMM and attention math reaches)")
    layer_overhead_ms: float | None = Field(default=None, ge=0, le=1000, description=(
        "host time of one dense layer pass (ms; kernel launches and framework Python no FLOP or byte term "
        "covers); null: the trainer profile's `trainer.layer_overhead_ms`. A scenario whose `mfu` was fitted to its "
        "own stage times with no host time (the `8b_*` scenarios) sets 0: its fitted efficiency holds that time"))
    logprob_efficiency: float | None = Field(default=None, ge=1e-3, le=1,
                                             description="share of peak the trainer's logprob forwards' math reaches; "
                                                         "null: the trainer's `mfu` (the same framework runs them). "
                                                         "Fitted for the 8B scenarios")


class WorkloadSection(Strict):
    """Prompts, group size, length distributions.

    Each RL step draws `prompts` prompts and `group_size` responses per prompt (a GRPO group).
    Lengths are drawn from the length specs, capped at `max_prompt_tokens` / `max_response_tokens`,
    correlated within a group and scaled by `(1 + length_growth_per_step)^step`."""

    prompts: int = Field(ge=1, le=10**6, description="prompts per RL step")
    group_size: int = Field(default=16, ge=1, le=4096, description="responses per prompt (GRPO n)")
    max_response_tokens: int = Field(ge=1, le=10**7,
                                     description="response cap; longer responses are truncated here")
    prompt_tokens: LengthSpec = Field(default=LengthSpec(kind="fixed", tokens=256),
                                      description="prompt-length distribution")
    max_prompt_tokens: int = Field(default=2048, ge=1, le=10**7, description="prompt cap")
    response_tokens: LengthSpec = Field(description="response-length distribution (before truncation)")
    group_correlation: float = Field(default=0.5, ge=0, le=1,
                                     description="shared difficulty of a group's responses (latent-normal "
                                                 "correlation)")
    length_growth_per_step: float = Field(default=0.0, ge=-0.5, le=1.0,
                                          description="relative growth of response lengths per RL step")
    temperature: float = Field(default=1.0, ge=0, le=2,
                               description="sampling temperature (acceptance is adjusted when τ was measured at "
                                           "another)")


class StalenessSection(Strict):
    """How α decays as the policy moves away from the drafter.

    α(v) = floor + (α₀ − floor)·exp(−rate·v) after v policy versions without a drafter update.
    Give `rate_per_version` directly, or `tau_after` measured `after_versions` versions later (the
    rate is solved from it). The default is no drift. Self-speculative and n-gram drafters never
    go stale and are never retrained: giving them a staleness (a rate > 0, `tau_after`, a floor)
    or `drafter.update_every_steps` is an error."""

    rate_per_version: float | None = Field(default=None, ge=0, le=100,
                                           description="decay rate per policy version (or give `tau_after`)")
    floor_alpha: float = Field(default=0.0, ge=0, lt=1, description="α a drafter keeps however stale")
    tau_after: float | None = Field(default=None, ge=1, le=33,
                                    description="τ measured `after_versions` versions later (the rate is solved "
                                                "from it)")
    after_versions: int | None = Field(default=None, ge=1, le=10**6,
                                       description="versions between the fresh τ and `tau_after`")

    @model_validator(mode="after")
    def _one_way(self):
        if self.tau_after is not None and self.after_versions is None:
            raise field_error("after_versions", self.after_versions, "tau_after needs after_versions")
        if self.tau_after is not None and self.rate_per_version is not None:
            raise field_error("tau_after", self.tau_after, "give rate_per_version or tau_after, not both")
        return self


class DrafterSection(Strict):
    """The drafter and its acceptance.

    Give the fresh drafter's mean acceptance length `tau` (tokens per verify, as vLLM/NeMo-RL
    report it) measured at draft length `tau_at_k`, or the per-token acceptance `alpha` directly.
    `kind` names an entry of the drafter registry, `specsim/catalog/drafters.yaml`."""

    kind: Literal[drafter_kind_names()] = Field(  # the registry, catalog/drafters.yaml
        default="eagle3", description="drafter kind from the registry `specsim/catalog/drafters.yaml`: eagle3 = an "
                                      "EAGLE-3 head, mtp = the model's native MTP layer, self_quant = a 4-bit "
                                      "self-drafter, ngram = n-gram lookup")
    tau: float | None = Field(default=None, ge=1, le=33, description=(
        "fresh mean acceptance length at `tau_at_k` exactly as vLLM reports it: accepted tokens ÷ verify steps + 1, "
        "a ratio of sums over the whole run (see \"What tau means\" in `docs/speculative-decoding.md`); give `tau` "
        "or `alpha`"))
    tau_at_k: int = Field(default=3, ge=1, le=32, description="draft length `tau` was measured at (τ ≤ k + 1)")
    tau_from: str | None = Field(default=None, min_length=1, max_length=4096, description=(
        "instead of `tau`: a vLLM or SGLang spec-decode metrics file (Prometheus text scraped from `/metrics`, a "
        "JSON dump, or the engine's log), relative to the scenario file; `tau` is set to what the engine reports, "
        "1 + accepted / drafts (vLLM's counters vllm:spec_decode_num_accepted_tokens_total and "
        "vllm:spec_decode_num_drafts_total; SGLang's accept length), and `tau_at_k` to vLLM's draft tokens per "
        "draft (SGLang reports no k: give `tau_at_k`). `specsim calibrate acceptance FILE` prints what it reads"))
    alpha: float | None = Field(default=None, ge=0, lt=1, description="per-token acceptance instead of `tau`")
    init: Literal["in_domain", "general"] = Field(
        default="in_domain", description="drafter trained on in-domain data, or a general-domain drafter")
    general_tau: float | None = Field(default=None, ge=1, le=33, description=(
        "fresh τ (at `tau_at_k`) when `init: general`; it replaces `tau` (omit `tau`, or give the same value: a "
        "different `tau` is an error, not ignored)"))
    tau_temperature: float | None = Field(default=None, ge=0, le=2,
                                          description="temperature τ/α was measured at (default: `workload.temperature`)")
    tau_tree_topk: int | None = Field(default=None, ge=1, le=64, description=(
        "`tau` was measured on SGLang's EAGLE beam tree of depth `tau_at_k`, not a chain: its eagle_topk (give "
        "`tau_tree_verify_tokens` too); α is solved on that tree"))
    tau_tree_verify_tokens: int | None = Field(default=None, ge=2, le=4096, description=(
        "with `tau_tree_topk`: that tree's num_draft_tokens (verify tokens per sequence, the root included)"))
    position_decay: float = Field(default=1.0, ge=1e-3, le=1,
                                  description="acceptance of draft position j is α·d^(j−1)")
    heterogeneity: float | None = Field(default=None, ge=1e-2, le=1e6, description=(
        "Beta concentration of per-sequence α (null: every sequence has the mean)"))
    spread_scope: Literal["between", "within", "both"] = Field(default="between", description=(
        "what the per-sequence spread of α (`heterogeneity`) belongs to: `between` = one α per response for its "
        "whole length (a hard prompt stays hard); `within` = α redrawn from the same Beta every "
        "`spread_segment_tokens` tokens along a response (correlated by `spread_segment_correlation`), so long "
        "responses average out and short ones keep their spread; `both` = half the spread's variance each way. "
        "The reported τ is the same under every scope (see \"Spread scope\" in `docs/explain.md`)"))
    spread_segment_tokens: int = Field(default=1024, ge=1, le=10**7, description=(
        "with `spread_scope: within | both`: tokens per segment between two draws of α"))
    spread_segment_correlation: float = Field(default=0.0, ge=0, lt=1, description=(
        "with `spread_scope: within | both`: correlation ρ of neighbouring segments' α (a Gaussian-copula AR(1): "
        "0 = independent segments)"))
    staleness: StalenessSection = Field(default=StalenessSection(), description=(
        "how α decays as the policy moves away from the drafter (default: no drift)"))
    update_every_steps: int = Field(default=0, ge=0, le=10**6,
                                    description="retrain the drafter online every I RL steps (0 = never)")
    update_token_fraction: float = Field(default=1.0, ge=1e-3, le=1,
                                         description="share of the step's sequences an online drafter update trains on")
    draft_vocab: int | None = Field(default=None, ge=1, le=10**7,
                                    description="EAGLE-3 draft vocabulary (default from the registry: 32000)")
    draft_ffn: int | None = Field(default=None, ge=1, le=10**7,
                                  description="EAGLE-3 layer FFN width (default: the target's)")
    proposal_rate: float | None = Field(default=None, ge=1e-3, le=1, description=(
        "share of request-steps that carry a draft (default from the registry: 1 for model drafters, 0.10 for n-gram, "
        "which proposes nothing when no n-gram matches); `tau` stays vLLM's value, conditional on a draft"))
    context_curve: list[list[float]] | None = Field(default=None, max_length=1000, description=(
        "`[[context_tokens, relative_alpha], ...]`: acceptance falling with the context for a drafter trained on "
        "shorter sequences (eagle3, mtp; chains only): the per-token α at context c is α·ρ(c), ρ piecewise linear "
        "through the points, in (0, 1], flat beyond them; with `tau` the run still reports `tau` (see \"Acceptance "
        "falling with the context\" in `docs/speculative-decoding.md`); null: no fall with the context. "
        "`calibration/published/eagle3_context_curve.csv` holds a measured Qwen3-8B curve"))

    @model_validator(mode="after")
    def _acceptance_given(self):
        has_tau = self.tau is not None or (self.init == "general" and self.general_tau is not None)
        if has_tau == (self.alpha is not None):
            raise field_error("tau", self.tau, "give exactly one of tau (with tau_at_k) or alpha (init: general: general_tau)")
        if self.tau is not None and self.tau > self.tau_at_k + 1:
            raise field_error("tau", self.tau, f"must be <= tau_at_k + 1 = {self.tau_at_k + 1} (at most k accepted + 1 bonus token per verify)")
        if self.init == "general" and self.general_tau is None and self.tau is not None:
            raise field_error("general_tau", self.general_tau, "init=general needs general_tau (the general-domain drafter's fresh τ)")
        return self


class SpeculationSection(Strict):
    """SD policy per engine step.

    `off`; `always(k)`; `threshold(k, max_batch)` — speculate only while the active batch is ≤
    `max_batch`; `toggle(k, toggle_margin)` — speculate while the engine's own cost model predicts
    SD at k at least 1 + `toggle_margin` times faster than decoding (EfficientRollout's roofline
    toggle); `adaptive` — choose k in 0..`k_max` each step. A draft may be a chain of k tokens or a
    token tree (`tree_branching`, or SGLang's EAGLE beam tree `tree_topk` + `tree_verify_tokens`)."""

    policy: Literal[KINDS] = Field(default="always", description=(
        "off: plain decoding; always(k); threshold: speculate only while the active batch ≤ `max_batch`; toggle: "
        "speculate at k while the engine's cost model predicts SD at least 1 + `toggle_margin` times faster than "
        "decoding (EfficientRollout's roofline toggle); adaptive: choose k in 0..`k_max` each step from the cost "
        "model and acceptance; schedule: k by the active batch from `k_per_batch_size` (vLLM's Dynamic SD)"))
    k: int = Field(default=3, ge=0, le=32, description=(
        "draft length for always/threshold/toggle; schedule: the largest (vLLM's num_speculative_tokens)"))
    k_per_batch_size: dict[str, int] | list[list[int]] | None = Field(default=None, description=(
        "schedule policy: vLLM's `num_speculative_tokens_per_batch_size`, inclusive batch ranges to a draft length "
        "sorted from batch 1, e.g. {\"1-16\": 3, \"17-128\": 2, \"129-4096\": 0}; a batch in a gap or above the "
        "last range takes the k before it, clamped to `k` (vLLM PR #32374; specsim/policy/schedule.py)"))
    max_batch: int = Field(default=64, ge=1, description="threshold policy: largest batch that still speculates")
    k_max: int = Field(default=7, ge=1, le=32, description="adaptive policy: largest draft length considered")
    toggle_margin: float = Field(default=0.05, ge=0, le=10,
                                 description="toggle policy: the predicted SD speedup must reach 1 + this "
                                             "(EfficientRollout's run scripts use 0.05)")
    acceptance_estimate: Literal["drafter", "measured"] = Field(
        default="drafter", description=(
            "the acceptance toggle / adaptive price with: the drafter's mean α (under a `drafter.context_curve`, at "
            "the batch's mean context), or each engine's acceptance length measured over its SD steps of the "
            "previous RL step (EfficientRollout's engine; sync pipelines only)"))
    @field_validator("k_per_batch_size", mode="before")
    @classmethod
    def _schedule(cls, v):
        """The table in one canonical form (a list of [first, last, k]), so vLLM's dict and the
        list form give the same run; its rules are specsim/policy/schedule.py's."""
        if v is None:
            return None
        try:
            return [list(entry) for entry in parse_batch_schedule(v)]
        except SpecError as exc:
            raise field_error("k_per_batch_size", v, exc.allowed) from None

    @model_validator(mode="after")
    def _schedule_table(self):
        if self.policy == "schedule" and self.k_per_batch_size is None:
            raise field_error("k_per_batch_size", None, "a table with policy schedule, e.g. {\"1-16\": 3, \"17-128\": 2}")
        return self

    tree_branching: list[int] | None = Field(default=None, description=(
        "draft a token tree instead of a chain: children per node at depths 1..k (its length must be `k`); e.g. "
        "`[4, 2, 1]` = 4 + 8 + 8 = 20 draft tokens"))
    tree_sibling_factor: float | None = Field(default=None, ge=0, le=1, description=(
        "how much each further sibling adds (1 = independent candidates, an optimistic bound; 0 = a chain; null: "
        "0.5); a heuristic, see `specsim/workload/acceptance/shapes.py`"))
    tree_topk: int | None = Field(default=None, ge=1, le=64, description=(
        "instead of `tree_branching`: SGLang's EAGLE beam tree of depth `k` (`--speculative-num-steps`) with beam "
        "width K (`--speculative-eagle-topk`); see `specsim/workload/acceptance/shapes.py`"))
    tree_verify_tokens: int | None = Field(default=None, ge=2, le=4096, description=(
        "with `tree_topk`: SGLang's `--speculative-num-draft-tokens` N (verify tokens per sequence, the root "
        "included)"))


class PipelineSection(Strict):
    """The RL step.

    `sync`: generation → reward → logprob → train → weight sync, one after another on the same
    GPUs (colocated); `async`: the trainer has its own pool and generation runs ahead of training by
    up to `policy_lag` policy versions (see `docs/async-rl.md`). The first `warmup_steps` steps are
    left out of the summary; every result is compared with the `baseline` variant."""

    mode: Literal["sync", "async"] = Field(default="sync", description=(
        "sync: generation → reward → logprob → train → weight sync on the same GPUs; async: separate pools, "
        "generation runs ahead"))
    steps: int = Field(default=6, ge=1, le=10000, description="RL steps simulated")
    warmup_steps: int = Field(default=1, ge=0, description=(
        "first steps left out of the summary; below `steps` (async: at least the pipeline's fill, steps 0 … lag + 1; "
        "see `docs/async-rl.md`)"))
    policy_lag: int = Field(default=1, ge=0, le=64, description=(
        "async: step j's groups are admitted once policy version j − lag exists (NeMo-RL `max_trajectory_age_steps`, "
        "AReaL `max_head_offpolicyness`); see `docs/async-rl.md`"))
    partial_rollouts: bool = Field(default=False, description=(
        "async: in-flight weight updates — a new version lands (at the start of its sync) into running sequences, "
        "each engine stopping for the sync's transfer at its next step boundary while it loads the weights "
        "(NeMo-RL `async_grpo.in_flight_weight_updates`); without them each engine stops admitting, drains its "
        "batch, then swaps"))
    max_groups_in_flight: int | None = Field(default=None, ge=1, le=10**7, description=(
        "async: most prompt groups generating at once across the pool; a released group waits for a place and "
        "starts when an earlier group's last response finishes (NeMo-RL's async collector holds "
        "`num_prompts_per_step × max_trajectory_age_steps`: `algorithms/async_utils.py`, `_inflight_sema`); null: no "
        "limit beyond the engines' own batch and KV. A sync step hands the engines all its groups at once: ignored"))
    reward_s: float = Field(default=2.0, ge=0, le=1e7, description="reward computation time per step (s)")
    engine_prepare_s: float = Field(default=0.0, ge=0, le=1e5, description=(
        "sync (colocated) only: waking the sleeping rollout engine and refit bookkeeping per weight update, on top "
        "of the derived weight transfer (s); fitted for the 8B scenarios"))
    data_s: float = Field(default=0.0, ge=0, le=1e5, description=(
        "loading one step's prompt batch (s; NeMo-RL's 'data' stage): sync, before each step's generation; async, "
        "prefetched while the engines work, so only the first batch waits; fitted for the 8B scenarios"))
    baseline: dict[str, Any] = Field(default_factory=lambda: {"speculation.policy": "off"}, description=(
        "dotted overrides that turn this scenario into the baseline every result is compared with (each key a real "
        "field path)"))

    @model_validator(mode="after")
    def _warmup(self):
        if self.warmup_steps >= self.steps:
            raise field_error("warmup_steps", self.warmup_steps, f"must be below steps ({self.steps})")
        return self


class CapacitySection(Strict):
    """The capacity plan.

    The best SD point and its AR counterpart rerun at several rollout pool sizes, each over the
    replicates; sizes × 2 variants × replicates ≤ 10,000 runs (the scenario's own size always
    included), like the sweep's rows."""

    rollout_gpus: list[int] | None = Field(default=None, description=(
        "rollout pool sizes for the capacity plan (null: ×¼, ½, 1, 2 of `rollout.gpus` in whole engines; `[]`: no "
        "capacity plan)"))
    target_step_s: float | None = Field(default=None, ge=1e-3, le=1e9, description=(
        "step-time target the capacity plan marks (null: AR's mean step at the scenario's rollout size)"))
    replicates: int | None = Field(default=None, ge=1, le=1000, description=(
        "replicates per capacity size (null: the sweep's `replicates`; replicate r draws what the sweep's replicate "
        "r draws, so the plan's step times are the points table's means)"))


class WhatIfSection(Strict):
    """Counterfactuals: switch one mechanism off to see what it costs.

    A scenario with any of these on is a labelled counterfactual, not a prediction: every output
    of a run that uses one says so (summary title and `what_if` entry, a points.csv column, a
    caveat at the top of report.html, the printed summary) and validation targets refuse it.
    `specsim explain` turns them on and off on the same random draws (see `docs/explain.md`).
    All default off."""

    verify_as_decode: bool = Field(default=False, description=(
        "price the verify pass (with its rejection sampler and the per-SD-step overhead) as one decode pass with "
        "its sampler: the verify premium removed"))
    verify_experts_as_decode: bool = Field(default=False, description=(
        "MoE only: the verify pass reads only the experts a decode of the same batch hits, E·(1 − (1 − top_k/E)^B) "
        "instead of E·(1 − (1 − top_k/E)^((k+1)·B)): the expert-coverage part of the verify premium removed"))
    free_drafting: bool = Field(default=False, description=(
        "draft passes (and their per-pass overhead) cost nothing"))
    sd_step_decodes_per_k: float | None = Field(default=None, ge=0, le=100, description=(
        "an SD step at draft length k costs (1 + c·k) decode steps at every batch and context (c = this; 0 = an SD "
        "step costs one decode step: the acceptance ceiling); null: off. Replaces the SD step's own cost, so it is "
        "not combined with `verify_as_decode`, `verify_experts_as_decode` or `free_drafting`"))
    no_acceptance_spread: bool = Field(default=False, description=(
        "every response accepts at the mean (`drafter.heterogeneity` ignored; the configured τ still holds)"))
    no_staleness: bool = Field(default=False, description=(
        "the drafter never drifts from the policy (`drafter.staleness` ignored; online updates still cost)"))
    free_trainer: bool = Field(default=False, description=(
        "reward, logprob, training, weight sync, online drafter updates, engine wake-up and prompt loading take no "
        "time: the RL step is its generation (a self-drafter's re-quantization runs on the rollout GPUs and still "
        "costs)"))

    def active(self) -> list[str]:
        """The what-if fields that are on, as `what_if.<field>` paths (empty: a prediction)."""
        return [f"what_if.{name}" for name, fld in type(self).model_fields.items()
                if getattr(self, name) not in (False, None)]


class OutputSection(Strict):
    """Results folder, plots, the capacity plan and the price of a GPU-hour."""

    dir: str = Field(default="results", description=(
        "results folder: `specsim run` writes `<dir>/<name>/` (rerunning resumes there; `--fresh` recomputes)"))
    plots: bool = Field(default=True, description="draw the plots")
    max_simulated_tokens: float = Field(default=1e11, ge=1, le=1e18, description=(
        "the most tokens a run may simulate, summed over its pipeline runs (responses × expected response tokens × "
        "steps; `specsim check` prints the estimate): a bigger run is refused before it starts; raise it with "
        "`--set output.max_simulated_tokens=1e12`"))
    capacity: CapacitySection = Field(default=CapacitySection(), description=(
        "the capacity plan: rollout pool sizes to rerun the best SD point and its AR counterpart at"))
    explain: Literal["facts", "ladder"] = Field(default="facts", description=(
        "what the summary's `explain` block gives for the best point. `facts`: what the run measured anyway, at no "
        "extra simulation (the token-weighted active batch, the per-token SD gain there beside the realised gain, τ "
        "of the responses that set each step beside the mean τ, sync AR's generation share, the trainer cap and "
        "whether the point is trainer-bound) and the `specsim explain` command that gives its ladder. `ladder`: also "
        "that ladder and its Shapley attribution, computed after the sweep into `explain/` of the results folder "
        "(reused on a resumed run). Off by default because it costs 2ⁿ coalitions of the point's n mechanisms plus "
        "the ladder's rungs, each the point and its baseline per replicate: tens of times the point's own runs "
        "(docs/explain.md)"))

    gpu_hour_usd: dict[str, float] = Field(default_factory=dict, description=(
        "optional $ per GPU-hour by hardware profile name (`{gb200: 6.0}`; a profile given by path: that path), one "
        "field for every command that reports GPU-hours: `specsim project` prints the run's GPU-hours in dollars "
        "too, `specsim plan` its $ per step and fronts (so it is an output unit, not a plan field). Each $ figure is "
        "its GPU-hours × the price, intervals included; a price never changes a simulation (run keys and the plan "
        "folder leave it out); a GPU type without a price is shown in GPU-hours only"))

    @field_validator("gpu_hour_usd", mode="before")
    @classmethod
    def _usd_numbers(cls, v):
        """true/false is not a price (pydantic would read it as 1 or 0)."""
        for name, x in (v.items() if isinstance(v, dict) else ()):
            if isinstance(x, bool):
                raise field_error(str(name), x, "a price in $ per GPU-hour (true/false is not a number)")
        return v

    @field_validator("gpu_hour_usd")
    @classmethod
    def _usd(cls, v):
        out = {}
        for name, x in v.items():
            if not math.isfinite(x) or x < 0:
                raise field_error(name, x, "a finite price >= 0 ($ per GPU-hour)")
            out[hardware_key(name)] = float(x)
        return out


def hardware_key(v: str) -> str:
    """A hardware profile's name as the scenario's `hardware` field keeps it: bundled names
    case-insensitive (GB200 = gb200), paths as written."""
    if "/" in v or "\\" in v or v.lower().endswith((".yaml", ".yml")):
        return v
    return v.lower()


class Scenario(Strict):
    """The scenario file.

    Its top-level keys: what hardware and model, one section per part of the RL step, an optional
    sweep and the seed."""

    name: str = Field(default="scenario", description=(
        "label used in results and plot titles; one plain path component (no `/`, `\\`, leading `.`): it names the "
        "results folder inside `output.dir`"))
    description: str = Field(default="", description="free text")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description=(
        "seeds the single `numpy.random.Generator` stream; same scenario + seed → identical results"))
    hardware: str = Field(description=(
        "hardware profile name (`specsim list hardware`, case-insensitive) or a path to a profile YAML"))
    model: str = Field(description=(
        "catalog model name (`specsim list models`, case-insensitive; the bundled catalog plus the user catalog "
        "directories of `--catalog DIR` / `$SPECSIM_CATALOG`), or a path to a Hugging Face `config.json` or a "
        "directory holding one (relative to the scenario file; see `docs/own-setup.md`, \"Your model\")"))
    rollout: RolloutSection = Field(description="the generation pool")
    training: TrainingSection = Field(default=TrainingSection(), description="the trainer")
    workload: WorkloadSection = Field(description="prompts, group size, length distributions")
    drafter: DrafterSection = Field(description="drafter kind and acceptance")
    speculation: SpeculationSection = Field(default=SpeculationSection(), description="SD policy per engine step")
    pipeline: PipelineSection = Field(default=PipelineSection(), description="sync/async RL pipeline")
    sweep: dict[str, Any] = Field(default_factory=dict, description=(
        "grid over dotted field paths: `path: [values]`; `replicates: n`; `zip: [[path, path], ...]` varies listed "
        "paths together. Each value once; at most 10,000 rows (combinations × replicates, counted before anything "
        "runs; `check` and `show scenario` print the count); every swept value must give a valid scenario on its "
        "own (errors name `sweep.<path>`)"))
    output: OutputSection = Field(default=OutputSection(), description="results folder, plots, the capacity plan, prices")
    plan: PlanSection = Field(default=PlanSection(), description="what `specsim plan` searches (ignored by `run`)")
    what_if: WhatIfSection = Field(default=WhatIfSection(), description=(
        "counterfactuals (all off by default): a scenario with any on is labelled a counterfactual everywhere and "
        "refused by validation targets"))
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
        return hardware_key(v)

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
                raise field_error("baseline", key, problem)
        return v

    @model_validator(mode="after")
    def _pools(self):
        if self.pipeline.mode == "sync" and self.training.gpus not in (None, self.rollout.gpus):
            raise field_error("training.gpus", self.training.gpus, "in sync (colocated) mode training runs on the rollout GPUs: omit training.gpus")
        if self.pipeline.mode == "async" and self.training.gpus is None:
            raise field_error("training.gpus", None, "async mode needs training.gpus (its own pool)")
        responses = self.workload.prompts * self.workload.group_size
        if responses > 10**7:
            raise field_error("workload.prompts", self.workload.prompts,
                       f"at most 10,000,000 responses per step (prompts x group_size = {responses:,})")
        cap = self.output.capacity
        if cap.rollout_gpus:
            r = self.rollout
            per_engine = max(r.tp, r.ep) * r.pp
            layout_swept = any(str(k).startswith("rollout.") for k in self.sweep)
            for n in cap.rollout_gpus:
                if n < 1 or n > 10**6:
                    raise field_error("output.capacity.rollout_gpus", n, "rollout pool sizes of 1 to 1,000,000 GPUs")
                if not layout_swept and n % per_engine:
                    raise field_error("output.capacity.rollout_gpus", n, f"multiples of the {per_engine} GPUs of "
                                      f"one engine (rollout.tp/ep/pp)")
        # ×¼, ½, 1, 2 of rollout.gpus by default (capacity.capacity_sizes); the scenario's own size is always run
        listed = set(cap.rollout_gpus) if cap.rollout_gpus is not None else None
        sizes = 4 if listed is None else len(listed | {self.rollout.gpus}) if listed else 0
        reps = cap.replicates or int(self.sweep.get("replicates", 1) or 1)
        if sizes * 2 * reps > MAX_SWEEP_ROWS:   # AR and SD at each size (incl. the scenario's own) per replicate
            raise field_error("output.capacity.replicates", reps,
                       f"at most {MAX_SWEEP_ROWS:,} capacity-plan runs (sizes × 2 variants × replicates = "
                       f"{sizes} × 2 × {reps}"
                       + ("" if cap.replicates else ", the sweep's replicates while unset")
                       + "); set output.capacity.replicates lower or list fewer output.capacity.rollout_gpus")
        return self

    @model_validator(mode="after")
    def _mixed_pools(self):
        """Two profiles need two pools: colocated (sync) pools are the same GPUs."""
        if self.pipeline.mode == "sync" and self.rollout_hardware != self.training_hardware:
            fld = "training.hardware" if self.training.hardware is not None else "rollout.hardware"
            raise field_error(fld, getattr(self.training if fld.startswith("training") else self.rollout, "hardware"),
                              f"the rollout pool's profile ({self.rollout_hardware}) or omitted in sync mode: "
                              f"colocated pools are the same GPUs (use pipeline.mode: async to train on "
                              f"{self.training_hardware} and generate on {self.rollout_hardware})")
        return self

    @model_validator(mode="after")
    def _priced_hardware(self):
        """Every price names a GPU type a command can meet: a bundled profile, the scenario's
        `hardware`, or one of `plan.hardware` (a misspelt name would silently price nothing)."""
        if not self.output.gpu_hour_usd:
            return self

        known = set(list_hardware()) | set(self.hardware_profiles) | {hardware_key(h) for h in
                                                                        plan_hardware_names(self.plan.hardware)}
        for name in self.output.gpu_hour_usd:
            if name not in known:
                raise field_error(f"output.gpu_hour_usd.{name}", name,
                                  f"a hardware profile name ({', '.join(sorted(known))})")
        return self

    @model_validator(mode="after")
    def _what_if_combination(self):
        wi = self.what_if
        if wi.sd_step_decodes_per_k is not None:
            for name in ("verify_as_decode", "verify_experts_as_decode", "free_drafting"):
                if getattr(wi, name):
                    raise field_error(f"what_if.{name}", True,
                                      "false with what_if.sd_step_decodes_per_k (which replaces the whole SD step's cost)")
        return self

    @property
    def what_ifs(self) -> list[str]:
        """The counterfactual fields this scenario turns on (`what_if.<field>`; empty: a prediction)."""
        return self.what_if.active()

    @property
    def rows(self) -> int:
        """Rows this scenario's sweep asks for: combinations × replicates."""
        return sweep_rows(self.sweep, Scenario)

    @property
    def rollout_hardware(self) -> str:
        """The generation pool's profile: `rollout.hardware`, else the top-level `hardware`."""
        return self.rollout.hardware or self.hardware

    @property
    def training_hardware(self) -> str:
        """The trainer pool's profile: `training.hardware`, else the top-level `hardware`."""
        return self.training.hardware or self.hardware

    @property
    def mixed_hardware(self) -> bool:
        """The two pools run on different profiles (async only)."""
        return self.rollout_hardware != self.training_hardware

    def gpu_hour_price(self) -> float | None:
        """$ per GPU-hour of this scenario's GPUs (`output.gpu_hour_usd`), None without a price. Mixed
        pools: (rollout GPUs × the rollout profile's price + training GPUs × the trainer's) / all
        GPUs, so GPU-hours × this is the cluster's dollars; None unless both have a price."""
        usd = self.output.gpu_hour_usd
        if not self.mixed_hardware:
            return usd.get(self.hardware if self.rollout.hardware is None else self.rollout_hardware)
        if self.rollout_hardware not in usd or self.training_hardware not in usd:
            return None
        return (self.rollout.gpus * usd[self.rollout_hardware]
                + self.training_gpus * usd[self.training_hardware]) / self.total_gpus

    @property
    def hardware_label(self) -> str:
        """The profile(s) as reports print them: `gb200`, or `gb200 (training) + h200_sxm (rollout)`."""
        if not self.mixed_hardware:
            return self.rollout_hardware
        return f"{self.training_hardware} (training) + {self.rollout_hardware} (rollout)"

    @property
    def hardware_profiles(self) -> tuple[str, ...]:
        """Every profile the scenario runs on: (trainer, rollout), one entry when they are the same."""
        return tuple(dict.fromkeys((self.training_hardware, self.rollout_hardware)))

    @property
    def training_gpus(self) -> int:
        return self.training.gpus if self.pipeline.mode == "async" else self.rollout.gpus

    @property
    def total_gpus(self) -> int:
        return self.rollout.gpus + (self.training.gpus if self.pipeline.mode == "async" else 0)
