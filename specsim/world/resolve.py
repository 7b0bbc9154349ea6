"""Turn a validated Scenario into the frozen specs the simulator runs on (a `World`).

Everything a simulation needs is derived here once: hardware and model specs, the drafter's
architecture and acceptance model, the rollout layout and its memory plan (KV capacity), the
step-cost table and the SD policy. Spec-level errors are re-raised as ScenarioError naming the
scenario file, so the CLI can print them and exit 2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from specsim.catalog.hardware import HardwareSpec, load_hardware
from specsim.catalog.models import DrafterArch, ModelSpec, drafter_arch, drafter_kind, load_model
from specsim.cost.forward import math_dtype
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import MemoryPlan, memory_plan
from specsim.cost.step import StepWhatIf, step_cost_table
from specsim.cost.training import TrainingLayout, check_training_fits
from specsim.errors import LayoutError, SpecError
from specsim.policy import SDPolicy, from_section
from specsim.scenario import Scenario, ScenarioError, source_file
from specsim.workload.acceptance.context import ContextAcceptance, ContextCurve, normalising_scale
from specsim.workload.acceptance.drafter import DrafterAcceptance, Staleness, staleness_from_taus, temperature_alpha
from specsim.workload.acceptance.shapes import DEFAULT_SIBLING_FACTOR, TopKTree
from specsim.workload.acceptance.spread import SpreadScope, effective_concentration, length_bins
from specsim.workload.lengths import LengthDistribution
from specsim.world.fields import scenario_field
from specsim.world.specs import PipelineSpec, RolloutSpec, TrainerSpec, WorkloadSpec, World
from specsim.world.trainer import training_layout

__all__ = ["World", "acceptance_model", "check", "length_distribution", "pipeline_spec", "resolve", "spread_concentration",
           "step_what_if", "vllm_default_max_num_seqs"]


def length_distribution(spec, field_path: str, base_dir: Path | None) -> LengthDistribution:
    if spec.kind == "fixed":
        return LengthDistribution.fixed(spec.tokens, field_path=field_path)
    if spec.kind == "lognormal":
        if spec.median is not None:
            return LengthDistribution.lognormal_from_median_p99(spec.median, spec.p99, field_path=field_path)
        return LengthDistribution.lognormal(spec.mu, spec.sigma, field_path=field_path)
    if spec.kind == "mixture":
        comps = spec.components
        return LengthDistribution.mixture(tuple(c["weight"] for c in comps), tuple(c["median"] for c in comps),
                                          tuple(c["p99"] for c in comps), field_path=field_path)
    path = Path(spec.path)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return LengthDistribution.empirical_file(path, field_path=field_path, column=spec.column)


def _tau_tree(sc: Scenario):
    """The SGLang beam tree `drafter.tau` was measured on (drafter.tau_tree_*), or None (a chain)."""
    d = sc.drafter
    topk, n = d.tau_tree_topk, d.tau_tree_verify_tokens
    if topk is None and n is None:
        return None
    if topk is None or n is None:
        raise SpecError("drafter.tau_tree_topk" if topk is None else "drafter.tau_tree_verify_tokens", None,
                        "given together (SGLang's eagle_topk and num_draft_tokens of the tree τ was measured on)")
    if d.tau is None:
        raise SpecError("drafter.tau_tree_topk", topk, "used together with drafter.tau")
    rho = sc.speculation.tree_sibling_factor
    try:
        return TopKTree(d.tau_at_k, topk, n, DEFAULT_SIBLING_FACTOR if rho is None else rho)
    except SpecError as exc:
        raise SpecError(scenario_field(exc.field, _TAU_TREE_FIELDS), exc.value, exc.allowed) from None


#: the parameters of the tree `drafter.tau` was measured on, as the drafter section names them
_TAU_TREE_FIELDS = {"tree.depth": "drafter.tau_at_k", "tree.topk": "drafter.tau_tree_topk",
                    "tree.verify_tokens": "drafter.tau_tree_verify_tokens"}


_SCENARIO_CONCENTRATION = object()   # acceptance_model: the concentration the scenario gives


def acceptance_model(sc: Scenario, concentration=_SCENARIO_CONCENTRATION) -> DrafterAcceptance:
    """The drafter's acceptance model, every configured τ meaning what an engine reports.

    Nothing configured is dropped silently: staleness or online updates given for a kind the
    registry says never goes stale / is never retrained are errors (the same rule `show drafter`
    applies). `init: general` means the fresh drafter is the general-domain one: its τ is
    `general_tau`, and `tau` (the in-domain τ) is then not used by anything, so giving a `tau`
    that differs from `general_tau`, or `alpha`, is an error rather than ignored. A τ measured at
    another temperature (`tau_temperature`) is moved to the workload's temperature through
    :func:`temperature_alpha` (the configured τ holds at `tau_temperature`).

    Counterfactuals: `what_if.no_acceptance_spread` drops the per-sequence spread (every sequence
    at the mean; the configured τ still holds), `what_if.no_staleness` the drift. `concentration`
    replaces `drafter.heterogeneity` (the spread scope's effective concentration, :func:`resolve`).
    """
    d = sc.drafter
    conc = d.heterogeneity if concentration is _SCENARIO_CONCENTRATION else concentration
    if sc.what_if.no_acceptance_spread:
        conc = None
    spec = drafter_kind(d.kind)
    st = d.staleness
    if not spec.goes_stale:
        for fld, val in (("rate_per_version", st.rate_per_version or None), ("tau_after", st.tau_after)):
            if val is not None:  # a rate of 0 changes nothing and is allowed
                raise SpecError(f"drafter.staleness.{fld}", val,
                                f"omitted for a {d.kind} drafter (it never goes stale; see catalog/drafters.yaml)")
        if st.floor_alpha:
            raise SpecError("drafter.staleness.floor_alpha", st.floor_alpha,
                            f"0 (omitted) for a {d.kind} drafter (it never goes stale)")
    if not spec.retrainable and d.update_every_steps:
        raise SpecError("drafter.update_every_steps", d.update_every_steps,
                        f"0 (omitted) for a {d.kind} drafter (it is never retrained online)")
    if d.init == "general":
        if d.alpha is not None:
            raise SpecError("drafter.alpha", d.alpha, "omitted with init: general (the fresh τ is general_tau)")
        if d.tau is not None and d.general_tau is not None and d.tau != d.general_tau:
            raise SpecError("drafter.tau", d.tau,
                            f"equal to general_tau ({d.general_tau:g}) or omitted with init: general: the fresh "
                            "drafter's τ is general_tau and nothing else would use tau")
    tau_fresh = d.general_tau if d.init == "general" else d.tau
    if not spec.goes_stale or sc.what_if.no_staleness:
        stale = Staleness.never()
    elif st.tau_after is not None:
        if tau_fresh is None:
            raise SpecError("drafter.staleness.tau_after", st.tau_after, "used together with drafter.tau")
        stale = staleness_from_taus(tau_fresh, st.tau_after, st.after_versions, d.tau_at_k,
                                    st.floor_alpha, d.position_decay, conc, tree=_tau_tree(sc))
    else:
        stale = Staleness(st.floor_alpha, st.rate_per_version or 0.0)
    if d.alpha is not None:
        acc = DrafterAcceptance(d.kind, d.alpha, d.position_decay, conc, stale, d.update_every_steps, d.proposal_rate)
    else:
        acc = DrafterAcceptance.from_tau(d.kind, tau_fresh, d.tau_at_k, decay=d.position_decay, concentration=conc,
                                         staleness=stale, update_every_steps=d.update_every_steps,
                                         tree=_tau_tree(sc), proposal_rate=d.proposal_rate)
    t_meas = d.tau_temperature if d.tau_temperature is not None else sc.workload.temperature
    if t_meas != sc.workload.temperature:
        a0 = float(temperature_alpha(acc.alpha0, sc.workload.temperature, t_meas))
        acc = DrafterAcceptance(acc.kind, a0, acc.decay, acc.concentration, acc.staleness, acc.update_every_steps,
                                acc.proposal_rate)
    return acc


#: quantile bins of the response-length distribution over which the context curve's normalising
#: scale is solved (midpoints; the top bins carry the capped tail)
CONTEXT_LENGTH_BINS = 400


def context_model(sc: Scenario, acc: DrafterAcceptance, resp: LengthDistribution,
                  prompt: LengthDistribution) -> ContextAcceptance | None:
    """The drafter's acceptance over the context (`drafter.context_curve`), or None.

    Only a drafter trained offline (a kind that goes stale: EAGLE-3, MTP) has a training length to
    fall beyond; a self-drafter is the policy itself and an n-gram proposer has no training. A
    chain drafted at every step only: the tree laws have no per-token form here, and the
    normalisation counts every step as a draft. With `drafter.tau` the curve is
    normalised so that the run reports the configured τ (its scale is solved over the workload's
    response lengths at the fresh drafter, the mean prompt as the context's start, lengths at
    step 0: `length_growth_per_step` is not in it); with `drafter.alpha` that α is the
    short-context acceptance (scale 1)."""
    d = sc.drafter
    if d.context_curve is None:
        return None
    if not drafter_kind(d.kind).goes_stale:
        raise SpecError("drafter.context_curve", d.context_curve,
                        f"omitted for a {d.kind} drafter (no offline training length to fall beyond; eagle3 or mtp)")
    sp = sc.speculation
    if sp.tree_branching is not None or sp.tree_topk is not None or d.tau_tree_topk is not None:
        raise SpecError("drafter.context_curve", d.context_curve, "omitted with a token tree (chains only)")
    if acc.proposal_rate != 1.0:
        raise SpecError("drafter.context_curve", d.context_curve,
                        f"omitted with drafter.proposal_rate {acc.proposal_rate:g} (a curve needs a drafter that "
                        "drafts at every step)")
    curve = ContextCurve.from_points(d.context_curve)
    if d.alpha is not None:
        return ContextAcceptance(curve, 1.0)
    w = sc.workload
    u = (np.arange(CONTEXT_LENGTH_BINS) + 0.5) / CONTEXT_LENGTH_BINS
    lengths = np.clip(np.rint(resp.ppf(u)), 1, w.max_response_tokens)
    weights = np.full(CONTEXT_LENGTH_BINS, 1.0 / CONTEXT_LENGTH_BINS)
    scale = normalising_scale(curve, acc.tau(d.tau_at_k), acc.alpha0, acc.concentration, d.tau_at_k, acc.decay,
                              prompt.mean_tokens(w.max_prompt_tokens), lengths, weights)
    return ContextAcceptance(curve, scale)


GIB_BYTES = 2**30


def vllm_default_max_num_seqs(hw: HardwareSpec) -> int:
    """vLLM's default `max_num_seqs` for one engine on this GPU: 1024 on a GPU with at least 70 GiB
    of memory whose name does not contain "a100", 256 otherwise (vLLM `EngineArgs.get_batch_defaults`,
    the same for the offline `LLM` class and the API server; the A100 80 GB keeps 256)."""
    return 1024 if hw.hbm_bytes >= 70 * GIB_BYTES and "a100" not in hw.name.lower() else 256


@dataclasses.dataclass(frozen=True)
class WeightDtypes:
    """The rollout's weight dtypes and which input set them (`source`: the words a summary prints)."""

    weight_dtype: str
    expert_weight_dtype: str | None
    source: str


def rollout_weight_dtypes(chosen: str | None, model) -> WeightDtypes:
    """Which weight dtype the rollout engines run: `rollout.weight_dtype` (`--set` or the scenario)
    when set, overriding the checkpoint's; else the model's config.json `quantization_config`
    (hf_config.quantization_from_config: fp8 for DeepSeek-V3 and Kimi-K2, mxfp4 experts with bf16
    attention, router, embeddings and LM head for gpt-oss); else bf16."""
    q = model.quantization
    if chosen is not None:
        over = f", overriding the config's {q.method} ({q.weight_dtype})" if q and q.weight_dtype != chosen else ""
        return WeightDtypes(chosen, None, f"{chosen} from rollout.weight_dtype{over}")
    if q is None:
        return WeightDtypes("bf16", None, "bf16: rollout.weight_dtype unset and the model's config has no "
                                          "quantization_config")
    if q.scope == "experts":
        return WeightDtypes("bf16", q.weight_dtype, f"{q.weight_dtype} routed experts, bf16 elsewhere, from the "
                                                    f"config's quantization_config ({q.method}; left in bf16: "
                                                    f"{', '.join(q.excluded)})")
    kept = f"; listed as left in bf16, priced {q.weight_dtype}: {', '.join(q.excluded)}" if q.excluded else ""
    return WeightDtypes(q.weight_dtype, None, f"{q.weight_dtype} from the config's quantization_config "
                                              f"({q.method}{kept})")


def weight_dtypes_of(sc: Scenario) -> WeightDtypes:
    """rollout_weight_dtypes of a scenario's rollout and model (what its summary reports)."""
    file = source_file(sc)
    model = load_model(sc.model, Path(file).parent if file else None)
    return rollout_weight_dtypes(sc.rollout.weight_dtype, model)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """What `resolve` derives from a scenario before its step-cost table: every spec whose
    construction checks the scenario (hardware, model, layout and memory plan, the SD policy,
    acceptance and length models, the trainer's layout and memory fit)."""

    hw: HardwareSpec
    train_hw: HardwareSpec
    model: ModelSpec
    arch: DrafterArch
    layout: ParallelLayout
    mem: MemoryPlan
    kv_cap: int
    policy: SDPolicy
    acc: DrafterAcceptance
    resp: LengthDistribution
    prompt: LengthDistribution
    context: ContextAcceptance | None
    max_batch: int
    trainer: TrainingLayout


def check(sc: Scenario) -> None:
    """Raise the ScenarioError `resolve(sc)` would raise, without building its World: the step-cost
    table is not priced (the one check its pricing makes, a peak at the GEMMs' math dtype on this
    GPU, is made here). A study's parent checks every point this way before anything runs, so a
    point that cannot exist fails at once; the worker that runs the point resolves it, once."""
    _checked(sc)


def resolve(sc: Scenario) -> World:
    """Resolve a scenario; raises ScenarioError (with the file) for anything that cannot run."""
    c = _checked(sc)
    try:
        table = step_cost_table(c.model, c.arch if c.policy.kind != "off" else None, c.hw, c.layout, c.max_batch,
                                c.policy.ks, first_pass_q={k: c.acc.tau(k, tree=c.policy.tree_for(k))
                                                           if c.arch.catches_up_on_accepted else 1.0
                                                           for k in c.policy.ks if k},
                                tree=c.policy.tree, proposal_rate=c.acc.proposal_rate, what_if=step_what_if(sc))
    except SpecError as exc:   # `_checked` makes the table's own checks; this keeps any it missed an exit 2
        raise ScenarioError(exc.where or source_file(sc), scenario_field(exc.field), exc.value,
                            f"must be {exc.allowed}") from None
    w, r, free = sc.workload, sc.rollout, sc.what_if.free_trainer
    return World(sc, c.hw, c.model, c.arch, c.layout, c.mem, c.kv_cap, r.gpus // c.layout.gpus, c.policy, c.acc,
                 c.resp, c.prompt, table,
                 WorkloadSpec(int(sc.seed), w.prompts, w.group_size, w.max_prompt_tokens, w.max_response_tokens,
                              float(w.group_correlation), float(w.length_growth_per_step)),
                 RolloutSpec(r.gpus, c.max_batch, r.kv_block_tokens, r.dispatch),
                 pipeline_spec(sc),
                 TrainerSpec(c.trainer, "none" if free else c.trainer.weight_sync,
                             float(sc.drafter.update_token_fraction)), c.context,
                 train_hw=c.train_hw if c.train_hw is not c.hw else None)


def pipeline_spec(sc: Scenario) -> PipelineSpec:
    """The scenario's pipeline as the simulator runs it (`what_if.free_trainer` zeroes the reward,
    engine-prepare and data times)."""
    p, free = sc.pipeline, sc.what_if.free_trainer
    return PipelineSpec(sc.name, p.mode, p.steps, p.warmup_steps, p.policy_lag, p.partial_rollouts,
                        0.0 if free else float(p.reward_s), 0.0 if free else float(p.engine_prepare_s),
                        0.0 if free else float(p.data_s), p.max_groups_in_flight if p.mode == "async" else None)


def _checked(sc: Scenario) -> _Checked:
    """Every spec `resolve` builds before the step-cost table, each built once and checked as it is;
    a SpecError or LayoutError becomes a ScenarioError naming the scenario file and field."""
    file = source_file(sc)
    base_dir = Path(file).parent if file else None
    try:
        hw = _load_pool_hardware(sc, "rollout")
        train_hw = hw if not sc.mixed_hardware else _load_pool_hardware(sc, "training")
        hw = engine_host_hardware(hw, sc.rollout.inprocess_engine)
        model = load_model(sc.model, base_dir)
        r = sc.rollout
        dtypes = rollout_weight_dtypes(r.weight_dtype, model)
        layout = ParallelLayout(tp=r.tp, pp=r.pp, ep=r.ep, weight_dtype=dtypes.weight_dtype,
                                expert_weight_dtype=dtypes.expert_weight_dtype, kv_dtype=r.kv_dtype)
        layout.check_fits_model(model, "rollout")
        if r.gpus % layout.gpus:
            raise SpecError("rollout.gpus", r.gpus, f"a multiple of the {layout.gpus} GPUs of one engine ({layout.describe()})")
        arch = drafter_arch(sc.drafter.kind, model, sc.drafter.draft_vocab, sc.drafter.draft_ffn)
        policy = from_section(sc.speculation)
        if policy.estimate == "measured" and sc.pipeline.mode != "sync":
            raise SpecError("speculation.acceptance_estimate", "measured",
                            "drafter with pipeline.mode async (the measured estimate is per sync rollout)")
        uses_drafter = policy.kind != "off"
        w = sc.workload
        # draft slots a sequence needs in the KV cache: k for a chain, the tree's draft tokens for a tree
        slots = max([*policy.ks, *(t.tokens for t in (policy.tree,) if t is not None)])
        need_tokens = w.max_prompt_tokens + w.max_response_tokens + slots + 1
        if slots + 3 > model.max_positions:   # not even a 1-token prompt fits: the prompt cap is not the cause
            raise SpecError("speculation.k" if slots else "model", slots if slots else model.name,
                            f"a draft length whose {slots} draft slots, a prompt token and a response token fit "
                            f"{model.name}'s context of {model.max_positions} positions")
        if w.max_prompt_tokens + slots + 2 > model.max_positions:
            raise SpecError("workload.max_prompt_tokens", w.max_prompt_tokens,
                            f"<= {model.max_positions - slots - 2} ({model.name} has {model.max_positions} "
                            f"positions; a prompt, {slots} draft slots and at least one response token must fit)")
        if need_tokens > model.max_positions:
            raise SpecError("workload.max_response_tokens", w.max_response_tokens,
                            f"<= {model.max_positions - w.max_prompt_tokens - slots - 1} "
                            f"({model.name} has {model.max_positions} positions, prompts up to {w.max_prompt_tokens})")
        mem = memory_plan(model, hw, layout, gpu_memory_utilization=r.gpu_memory_utilization,
                          max_batched_tokens=r.max_batched_tokens, drafter=arch if uses_drafter else None,
                          min_kv_tokens=need_tokens)
        kv_cap = r.kv_capacity_tokens or mem.kv_capacity_tokens
        if kv_cap < need_tokens:
            raise SpecError("rollout.kv_capacity_tokens", kv_cap,
                            f">= {need_tokens} (the longest prompt + response + draft slots must fit one engine)")
        acc = acceptance_model(sc)
        resp = length_distribution(w.response_tokens, "workload.response_tokens", base_dir)
        c_eff = spread_concentration(sc, acc, resp)
        if c_eff != acc.concentration:
            acc = acceptance_model(sc, c_eff)
        prompt = length_distribution(w.prompt_tokens, "workload.prompt_tokens", base_dir)
        context = context_model(sc, acc, resp, prompt)
        max_batch = r.max_batch or vllm_default_max_num_seqs(hw)
        for wdt in [layout.weight_dtype, *([arch.weight_dtype] if uses_drafter and arch.weight_dtype else [])]:
            hw.flops_per_s(math_dtype(wdt))   # the step-cost table's GEMMs need a peak at their math dtype
        trainer = training_layout(sc, model, train_hw)
        if sc.what_if.free_trainer:
            trainer = dataclasses.replace(trainer, free=True)
    except SpecError as exc:
        raise ScenarioError(exc.where or file, scenario_field(exc.field), exc.value, f"must be {exc.allowed}") from None
    except LayoutError as exc:
        raise ScenarioError(file, "rollout", f"{layout.describe()}", str(exc)) from None
    try:
        colocated = sc.pipeline.mode == "sync"
        check_training_fits(model, train_hw, trainer,
                            gpu_memory_utilization=sc.rollout.gpu_memory_utilization if colocated else None)
    except LayoutError as exc:
        raise ScenarioError(file, "training", trainer.describe(), str(exc)) from None
    return _Checked(hw, train_hw, model, arch, layout, mem, int(kv_cap), policy, acc, resp, prompt, context,
                    max_batch, trainer)


def engine_host_hardware(hw: HardwareSpec, inprocess: bool) -> HardwareSpec:
    """The rollout profile as the engine's host runs it: an in-process engine
    (`rollout.inprocess_engine`) pays `efficiency.inprocess_seq_overhead_s` per running sequence on
    every step beside the profile's own `per_seq_overhead_s` (a separate engine process overlaps
    that frontend work with the next step)."""
    eff = hw.efficiency
    if not inprocess or eff.inprocess_seq_overhead_s == 0.0:
        return hw
    return hw.with_efficiency(per_seq_overhead_s=eff.per_seq_overhead_s + eff.inprocess_seq_overhead_s)


def _load_pool_hardware(sc: Scenario, pool: str) -> HardwareSpec:
    """One pool's profile (`rollout` / `training`): its own `<pool>.hardware` when set, else the
    top-level `hardware`; a SpecError naming the field that chose it when the profile cannot load."""
    own = getattr(sc, pool).hardware
    try:
        return load_hardware(own if own is not None else sc.hardware)
    except SpecError as exc:
        if own is None or exc.field != "hardware":
            raise   # the top-level field, or a field inside the profile file (exc.where names it)
        raise SpecError(f"{pool}.hardware", exc.value, exc.allowed, exc.where) from None


def step_what_if(sc: Scenario) -> StepWhatIf:
    """The SD-step counterfactuals of the scenario's `what_if:` section (cost/step.py)."""
    wi = sc.what_if
    return StepWhatIf(wi.verify_as_decode, wi.verify_experts_as_decode, wi.free_drafting, wi.sd_step_decodes_per_k)


def spread_concentration(sc: Scenario, acc: DrafterAcceptance, resp: LengthDistribution) -> float | None:
    """The Beta concentration the engines run at under `drafter.spread_scope`
    (workload/acceptance/spread.py): `between` the scenario's own; `within` / `both` the
    effective one of the responses' segment-combined acceptance, weighted by their tokens over
    the response-length distribution, at the fresh drafter's mean α and `tau_at_k`. The
    acceptance model is then rebuilt at it, so the configured τ still holds."""
    d = sc.drafter
    if d.spread_scope == "between" or acc.concentration is None:
        return acc.concentration
    lengths = length_bins(resp.ppf, sc.workload.max_response_tokens)
    spread = SpreadScope(d.spread_scope, int(d.spread_segment_tokens), float(d.spread_segment_correlation))
    return effective_concentration(float(acc.alpha0), float(acc.concentration), lengths, spread, int(d.tau_at_k),
                                   float(acc.decay))
