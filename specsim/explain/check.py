"""`specsim check` as data: the summary of a resolved scenario and its plausibility warnings.

:func:`check_report` summarises a :class:`specsim.world.resolve.World` (engines, layout, KV capacity,
memory per GPU, workload, drafter, SD policy) as the dict ``specsim check --format json`` prints;
:func:`doctor_warnings` lists the ways a valid scenario leaves the range where the models were built
and checked. Warnings never fail a scenario; bad input fails earlier, in the loader and resolver.
"""

from __future__ import annotations

import numpy as np

from specsim.catalog.models import drafter_kind, drafter_kind_names
from specsim.cost import training as tc
from specsim.sim.cluster import draw_step
from specsim.workload.acceptance.laws import expected_tokens_per_verify
from specsim.world.specs import steady_fill_warning

#: Documented heuristics (not physics, not fitted): warn — never fail — when a scenario leaves the
#: range where the models were built and checked.
#: Draft lengths beyond 8 are rarely useful: acceptance compounds, so τ saturates while the verify
#: pass grows with k+1 (NeMo-RL found k=5 and k=7 already worse than k=3 for RL-Think).
DOCTOR_MAX_DRAFT_LENGTH = 8
#: Async pipelines run 1 (NeMo-RL) to 2–8 (AReaL) versions off-policy; beyond 8 is unusual.
DOCTOR_MAX_POLICY_LAG = 8
#: A KV budget that holds fewer than 8 longest (prompt + response) sequences preempts constantly.
DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV = 8
#: The largest fresh τ (tokens per verify at the scenario's tau_at_k) a drafter of each kind is
#: plausibly seen to reach: EAGLE-3 heads reach ~4–6 on easy chat at low temperature; native MTP
#: (one or two heads) ~2–4; a 4-bit self-drafter accepts most tokens but pays a big draft pass;
#: n-gram / suffix lookup rarely passes ~2–3 outside copy-heavy text.
DOCTOR_MAX_TAU = {name: drafter_kind(name).plausible_max_tau for name in drafter_kind_names()}  # catalog/drafters.yaml


def max_length_sequences_in_kv(world) -> int:
    """How many longest sequences (max prompt + max response tokens) one engine's KV budget holds."""
    w = world.scenario.workload
    return world.kv_capacity_tokens // (w.max_prompt_tokens + w.max_response_tokens)




def trainer_report(world) -> dict:
    """The trainer on one step: step 0's draw (replicate 0) priced by cost/training.train_cost and
    logprob_s -- its layout, sharding and MFU, the training step's parts and the logprob passes.
    What `specsim check` shows so that a trainer dominated by communication is seen before a run."""

    draw = draw_step(world, 0, 0)
    seqs = tc.sequence_tokens(draw.prompt_tokens, draw.response_tokens)
    tl = world.trainer.layout
    c = tc.train_cost(world.model, world.trainer_hw, tl, seqs)
    return {"layout": tl.describe(), "sharding": tl.sharding, "mfu": tl.mfu, "tokens": float(seqs.sum()),
            "train_s": c.total_s, "compute_s": c.compute_s, "dp_comm_s": c.dp_comm_s,
            "bubble_tp_ep_s": c.bubble_s + c.tp_comm_s + c.ep_comm_s + c.cp_comm_s, "optimizer_s": c.optimizer_s,
            "overhead_s": c.overhead_s, "micro_batches": c.micro_batches, "optimizer_steps": c.optimizer_steps,
            "logprob_s": float(tc.logprob_s(world.model, world.trainer_hw, tl, seqs)),
            "hardware": world.trainer_hw.name, "memory_gb_per_gpu": trainer_memory_gb(world)}


def trainer_memory_gb(world) -> dict:
    """The trainer pool's memory per GPU (GB) on its own profile (cost/training.training_memory):
    the model state, the peak of activations and workspace, what the GPU holds and, colocated, the
    share the sleeping engines keep resident."""
    sc = world.scenario
    m = tc.training_memory(world.model, world.trainer_hw, world.trainer.layout,
                           gpu_memory_utilization=sc.rollout.gpu_memory_utilization
                           if sc.pipeline.mode == "sync" else None)
    return {"model_state": m.state_bytes / 1e9, "activations": m.activation_bytes / 1e9,
            "total": m.total_bytes / 1e9, "hbm": m.hbm_bytes / 1e9}


def trainer_warning(report: dict) -> str | None:
    """Warn when the trainer's data-parallel exchange outweighs its math under ZeRO-3 sharding:
    the params are gathered for every micro-batch's three passes (cost/training.py)."""
    if report["sharding"] == "fsdp" and report["dp_comm_s"] > report["compute_s"]:
        return (f"training.sharding = fsdp: the trainer's data-parallel exchange ({report['dp_comm_s']:.1f} s per "
                f"step) exceeds its math ({report['compute_s']:.1f} s): ZeRO-3 gathers the params for every "
                "micro-batch; Megatron's distributed optimizer (training.sharding: distributed_optimizer, as "
                "NeMo-RL's Megatron policy) exchanges them once per step")
    return None


def doctor_warnings(world, trainer: dict | None = None) -> list[str]:
    """Plausibility warnings for a resolved scenario (a `specsim.world.resolve.World`); empty when all is usual.

    Heuristic thresholds are the DOCTOR_* constants above. `trainer`: its trainer_report, when the
    caller has one (else it is computed). Never raises for a valid world.
    """
    sc = world.scenario
    out: list[str] = []
    warn = trainer_warning(trainer if trainer is not None else trainer_report(world))
    if warn:
        out.append(warn)
    if world.policy.k_top > 0:
        k_top = world.policy.k_top
        if k_top > DOCTOR_MAX_DRAFT_LENGTH:
            field = "speculation." + world.policy.k_field
            out.append(f"{field} = {k_top} is above {DOCTOR_MAX_DRAFT_LENGTH}: acceptance compounds, so longer "
                       "drafts rarely pay for the larger verify pass")
    if sc.pipeline.mode == "async" and sc.pipeline.policy_lag > DOCTOR_MAX_POLICY_LAG:
        out.append(f"pipeline.policy_lag = {sc.pipeline.policy_lag} is above {DOCTOR_MAX_POLICY_LAG}: "
                   "far more off-policy than NeMo-RL (1) or AReaL (2-8) run")
    if world.pipeline.steady_includes_fill:
        out.append(steady_fill_warning(world.pipeline))
    w = sc.workload
    fit = max_length_sequences_in_kv(world)
    if fit < DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV:
        out.append(f"the KV budget of {world.kv_capacity_tokens:,} tokens per engine holds only {fit} max-length "
                   f"sequences ({w.max_prompt_tokens} prompt + {w.max_response_tokens} response tokens), fewer than "
                   f"{DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV}: expect heavy preemption (raise tp or gpu_memory_utilization)")
    d = sc.drafter
    limit = DOCTOR_MAX_TAU.get(d.kind)
    if limit is not None:
        taus = [("drafter.tau", d.tau), ("drafter.general_tau", d.general_tau)]
        if d.alpha is not None:
            taus.append(("drafter.alpha (as τ)", float(world.acceptance.tau(d.tau_at_k, 0))))
        for field, value in taus:
            if value is not None and value > limit:
                out.append(f"{field} = {value:g} at k = {d.tau_at_k} is above what {d.kind} drafters are seen to "
                           f"reach (<= {limit:g}, a documented heuristic)")
    return out


def check_report(world, file: str) -> dict:
    """The summary ``specsim check`` prints for a resolved scenario loaded from `file`, with its
    doctor warnings; ``tau_at_k`` is the fresh drafter's τ at the scenario's ``drafter.tau_at_k``."""
    sc = world.scenario
    w, d = sc.workload, sc.drafter
    trainer = trainer_report(world)
    return {
        "ok": True, "scenario": sc.name, "file": file, "model": world.model.name, "hardware": world.hw.name,
        "rollout_hardware": world.hw.name, "training_hardware": world.trainer_hw.name,
        "engines": world.engines, "layout": world.layout.describe(), "gpus_per_engine": world.layout.gpus,
        "rollout_gpus": sc.rollout.gpus, "training_gpus": sc.training_gpus, "pipeline": sc.pipeline.mode,
        "kv_capacity_tokens_per_engine": world.kv_capacity_tokens,
        "max_length_sequences_in_kv": max_length_sequences_in_kv(world),
        "memory_gb_per_gpu": world.memory.gb_per_gpu(),
        "responses_per_step": w.prompts * w.group_size, "max_response_tokens": w.max_response_tokens,
        "drafter": d.kind, "alpha0": world.acceptance.alpha0,
        "tau_at_k": {"k": d.tau_at_k, "tau": float(world.acceptance.tau(d.tau_at_k, 0))},
        "policy": world.policy.label, "warnings": doctor_warnings(world, trainer),
        "tau_over_context": tau_over_context(world), "trainer": trainer,
    }


#: contexts (tokens) at which `specsim check` shows a context curve's effect
CONTEXT_PROBES = (1000, 2000, 4000, 8000, 12000, 16000, 20000)


def tau_over_context(world) -> dict | None:
    """With `drafter.context_curve`: the normalising scale s and τ at `drafter.tau_at_k` of a
    sequence with the mean acceptance at each probe context (null without a curve)."""
    ctx = world.context
    if ctx is None:
        return None
    k, acc = world.scenario.drafter.tau_at_k, world.acceptance
    alphas = ctx.alpha_at(acc.alpha0, np.asarray(CONTEXT_PROBES, dtype=float))
    taus = expected_tokens_per_verify(alphas, k, acc.decay)
    return {"scale": ctx.scale, "k": k, "tau": {int(c): float(t) for c, t in zip(CONTEXT_PROBES, taus)}}
