"""What `specsim show model|drafter|lengths` report, as data: plain dicts the CLI prints (as rich
tables) or dumps (``--format json``). The CLI parses options and prints; the physics is here.

- :func:`model_report`: sizes, memory plan and the decode-step latency table of a model on a layout
  (roofline costs from :mod:`specsim.cost`, memory plan from :mod:`specsim.cost.memory`).
- :func:`drafter_acceptance` / :func:`drafter_report`: a drafter's acceptance model built from a
  fresh τ (or α), its staleness and update cadence; τ by draft length, α and τ over RL steps, and
  its batch-1 costs.
- :func:`lengths_report`: one RL step's response lengths drawn exactly as the simulator draws them
  (:func:`specsim.sim.cluster.draw_step`) and their tail summary.

Keys and units are part of the ``--format json`` output (tests/cli/test_cli_basic.py); keep them stable.
"""

from __future__ import annotations

import numpy as np

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec, list_hardware, load_hardware
from specsim.catalog.models import DrafterArch, ModelSpec, drafter_arch, list_models, load_model
from specsim.cost.forward import decode_cost, draft_cost, math_dtype, verify_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import drafter_weight_bytes_per_gpu, memory_plan
from specsim.cost.roofline import ridge_point
from specsim.cost.step import step_cost
from specsim.scenario import apply_overrides, source_file
from specsim.sim.cluster import draw_step
from specsim.workload.acceptance.drafter import DrafterAcceptance, Staleness, staleness_from_taus
from specsim.workload.acceptance.shapes import parse_branching, tree_summary
from specsim.workload.lengths import growth_factor, length_summary
from specsim.world.resolve import resolve

GB = 1e9

#: Draft lengths of the "τ by draft length" table.
TABLE_DRAFT_LENGTHS = range(1, 9)


# ============================================================================ model
def model_layout(model: ModelSpec, **kw) -> ParallelLayout:
    """A ParallelLayout (tp, ep, pp, weight_dtype, kv_dtype) that can hold `model`.

    Raises SpecError whose field names the layout argument (``tp``, ``layout.ep``, ...): tp must
    divide the attention heads, ep > 1 needs an MoE model with at least ep experts, pp cannot
    exceed the layers (:meth:`ParallelLayout.check_fits_model`).
    """
    layout = ParallelLayout(**kw)
    layout.check_fits_model(model, "layout")
    return layout


def model_report(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, *, context: int = 1024,
                 gpu_memory_utilization: float = 0.9, max_batched_tokens: int = 8192, max_batch_exp: int = 10,
                 k: int = 3) -> dict:
    """Sizes, the per-GPU memory plan and a decode-step table for batches 1, 2, 4, ..., 2^max_batch_exp.

    Each row: the AR step time at `context` cached tokens per sequence (incl. the per-step
    overhead), tokens/s = batch / step_s, the roofline bound of the decode pass, the ratio of a
    k-token verify pass to a decode pass (≈1 while memory-bound, → k+1 when compute-bound), and
    whether batch·(context+1) tokens fit the replica's KV capacity. Raises LayoutError when the
    weights do not fit.
    """

    plan = memory_plan(model, hw, layout, gpu_memory_utilization=gpu_memory_utilization,
                       max_batched_tokens=max_batched_tokens)
    batches = 2.0 ** np.arange(max_batch_exp + 1)
    total_ctx = batches * context
    step_s = step_cost(model, None, hw, layout, batches, 0).time_s(total_ctx)
    dec = decode_cost(model, hw, layout, batches)
    ver = verify_cost(model, hw, layout, batches, k)
    ratio = ver.time_s(total_ctx) / dec.time_s(total_ctx)
    bound = dec.bound(total_ctx)
    fits = batches * (context + 1) <= plan.kv_capacity_tokens
    return {
        "model": model.name, "source": model.source, "hardware": hw.name, "layout": layout.describe(),
        "gpus_per_replica": layout.gpus, "total_params": model.total_params, "active_params": model.active_params,
        "matmul_params_per_token": model.matmul_params_per_token, "published": published_report(model),
        "architecture": architecture_report(model),
        "weight_gb_per_gpu": float(plan.weight_bytes) / GB,
        "kv_bytes_per_token": model.kv_bytes_per_token(DTYPE_BYTES[layout.kv_dtype]),
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token, "kv_capacity_tokens": plan.kv_capacity_tokens,
        "memory_gb_per_gpu": plan.gb_per_gpu(),
        "ridge_point_flops_per_byte": ridge_point(hw, math_dtype(layout.weight_dtype)),
        "context_tokens_per_seq": context, "k": k,
        "step_overhead_ms": hw.efficiency.step_overhead_s * 1e3,
        "rows": [{"batch": int(b), "step_ms": float(s * 1e3), "tokens_per_s": float(b / s), "bound": str(bd),
                  f"verify_k{k}_over_decode": float(r), "kv_fits": bool(f)}
                 for b, s, bd, r, f in zip(batches, step_s, bound, ratio, fits)],
    }


#: how each published active-parameter convention counts (ModelSpec.published_active_convention)
ACTIVE_CONVENTION_TEXT = {"all": "as published (every parameter a token touches, the embedding row included)",
                          "matmul": "as published (layers + LM head, not the embedding lookup)",
                          "layers": "as published (the transformer layers only)"}


def published_report(model: ModelSpec) -> dict:
    """The derived totals against the published ones (catalog metadata; {} fields when unpublished):
    the relative error of each, in percent, and the convention the active count follows."""
    out: dict = {"source": model.published_source, "total_params_b": model.published_total_params_b,
                 "active_params_b": model.published_active_params_b,
                 "active_convention": model.published_active_convention,
                 "active_convention_text": ACTIVE_CONVENTION_TEXT[model.published_active_convention],
                 "active_params_as_published": model.active_params_as_published}
    if model.published_total_params_b:
        out["total_error_pct"] = 100.0 * (model.total_params / 1e9 / model.published_total_params_b - 1.0)
    if model.published_active_params_b:
        out["active_error_pct"] = 100.0 * (model.active_params_as_published / 1e9 / model.published_active_params_b - 1.0)
    return out


def architecture_report(model: ModelSpec) -> dict:
    """What the config describes, beyond the sizes: attention kind, dense first layers, experts, MTP."""

    parts = [model.model_type or "catalog"]
    attn: dict = {"heads": model.heads}
    if model.mla is not None:
        m = model.mla
        attn.update(kind="mla", kv_lora_rank=m.kv_lora_rank, q_lora_rank=m.q_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim,
                    qk_rope_head_dim=m.qk_rope_head_dim, v_head_dim=m.v_head_dim, kv_values_per_token_per_layer=m.latent_dim,
                    decode_attention_flops_per_cached_token_per_head=4 * model.attn_head_dim)
        parts.append(f"MLA ({model.heads} heads, latent KV {m.kv_lora_rank} + RoPE {m.qk_rope_head_dim} per token per layer)")
    else:
        attn.update(kind="gqa" if model.kv_heads < model.heads else "mha", kv_heads=model.kv_heads, head_dim=model.head_dim)
        parts.append(f"{model.heads} heads / {model.kv_heads} KV heads of {model.head_dim}")
    if model.sliding_layers:
        attn.update(sliding_layers=model.sliding_layers, sliding_window=model.sliding_window)
        parts.append(f"{model.sliding_layers} sliding-window layers ({model.sliding_window} tokens)")
    out: dict = {"model_type": model.model_type, "layers": model.layers, "attention": attn,
                 "dense_layers": model.dense_layers if model.moe else model.layers}
    if model.moe:
        e = model.moe
        out["moe"] = {"experts": e.experts, "top_k": e.top_k, "expert_ffn": e.expert_ffn,
                      "shared_experts": e.shared_experts}
        parts.append(f"{model.layers - model.dense_layers} MoE layers ({e.experts} experts, top {e.top_k}"
                     + (f", {e.shared_experts} shared" if e.shared_experts else "") + ")"
                     + (f" after {model.dense_layers} dense" if model.dense_layers else ""))
    if model.mtp_layers:
        mtp = drafter_arch("mtp", model).model
        out["mtp"] = {"layers": model.mtp_layers, "params": mtp.total_params - mtp.embedding_params,
                      "counted_in_total": False}
        parts.append(f"{model.mtp_layers} MTP layer(s), {mtp.total_params - mtp.embedding_params:,} params "
                     f"not counted in the totals (drafter kind mtp)")
    out["summary"] = "; ".join(parts)
    return out


# ============================================================================ drafter
def drafter_acceptance(kind: str, *, tau: float | None = None, tau_k: int = 3, alpha: float | None = None,
                       decay: float = 1.0, heterogeneity: float | None = None, tau_after: float | None = None,
                       after_versions: int | None = None, rate_per_version: float | None = None,
                       floor_alpha: float = 0.0, update_every: int = 0):
    """A DrafterAcceptance from exactly one of a fresh τ (tokens per verify at draft length `tau_k`)
    or a per-token α, with staleness given either as a τ measured `after_versions` policy versions
    later (`tau_after`, inverted by :func:`staleness_from_taus`) or as an e-folding `rate_per_version`
    of α, floored at `floor_alpha`. The caller checks which options may be combined."""

    stale = Staleness.never()
    if tau_after is not None:
        fresh = tau if tau is not None else DrafterAcceptance(kind, alpha, decay, heterogeneity).tau(tau_k)
        stale = staleness_from_taus(fresh, tau_after, after_versions, tau_k, floor_alpha, decay, heterogeneity)
    elif rate_per_version is not None:
        stale = Staleness(floor_alpha, rate_per_version)
    if alpha is not None:
        return DrafterAcceptance(kind, alpha, decay, heterogeneity, stale, update_every)
    return DrafterAcceptance.from_tau(kind, tau, tau_k, decay=decay, concentration=heterogeneity,
                                      staleness=stale, update_every_steps=update_every)


def drafter_report(acc, arch: DrafterArch, target: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, *,
                   k: int = 3, steps: list[int] = (0, 10, 20, 50, 100), context: int = 1024) -> dict:
    """τ of the fresh drafter for draft lengths 1..8; versions since update, α and τ at draft length
    `k` at each RL step of `steps`; and batch-1 costs at `context` tokens: the draft pass, the
    policy's decode pass, their ratio c, an SD step (k drafts + verify, with overheads) and an AR
    decode step."""

    by_k = [{"k": kk, "tau": acc.tau(kk, 0)} for kk in TABLE_DRAFT_LENGTHS]
    over_steps = [{"step": s, "versions_since_update": int(acc.versions_since_update(s)),
                   "alpha": float(acc.alpha_at_step(s)), "tau": acc.tau(k, s)} for s in steps]
    draft_s = float(draft_cost(arch, hw, layout, 1).time_s(context))
    decode_s = float(decode_cost(target, hw, layout, 1).time_s(context))
    sd_step_s = float(step_cost(target, arch, hw, layout, 1, k).time_s(context))
    ar_step_s = float(step_cost(target, None, hw, layout, 1, 0).time_s(context))
    cost = {
        "hardware": hw.name, "layout": layout.describe(), "context_tokens": context,
        "drafter_params": arch.model.total_params if arch.model else 0,
        "drafter_weight_gb_per_gpu": float(drafter_weight_bytes_per_gpu(arch, layout)) / GB,
        "draft_pass_ms": draft_s * 1e3, "decode_pass_ms": decode_s * 1e3,
        "draft_over_decode": draft_s / decode_s,
        "draft_overhead_ms": (hw.efficiency.draft_overhead_s * 1e3) if arch.model else 0.0,
        f"sd_step_k{k}_ms": sd_step_s * 1e3, "decode_step_ms": ar_step_s * 1e3,
    }
    return {"kind": arch.kind, "model": target.name, "source": arch.source, "alpha0": acc.alpha0, "decay": acc.decay,
            "heterogeneity": acc.concentration, "staleness_rate_per_version": acc.staleness.decay_per_version,
            "floor_alpha": acc.staleness.floor_alpha, "update_every_steps": acc.update_every_steps,
            "tau_by_k": by_k, "k": k, "over_steps": over_steps, "cost_batch1": cost}


def schedule_report(policy, acc, arch: DrafterArch, target: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, *,
                    context: int = 1024, batches: list[int] | None = None) -> list[dict]:
    """The `schedule` policy's expected speedup by batch size (`show drafter --schedule`): at each
    batch n (powers of two to 512 and every range's bounds, unless given), the k the schedule
    picks, τ(k) of the fresh drafter, the engine step at n sequences of `context` tokens each, SD
    at k against decode, and the expected speedup τ(k) · step_s(0) / step_s(k) (tokens per second
    of the engine, the quantity the toggle and adaptive policies compare); beside it the best
    fixed k in 0..8 at that batch, the schedule's ceiling at this acceptance and cost."""

    if batches is None:
        bounds = {b for lo, hi, _ in policy.table for b in (lo, hi) if b <= 4096}
        batches = sorted({2 ** i for i in range(10)} | bounds)
    rows = []
    for n in batches:
        total_ctx = n * context
        ar_s = float(step_cost(target, None, hw, layout, n, 0).time_s(total_ctx))

        def speedup(kk: int) -> tuple[float, float]:
            if kk == 0:
                return 1.0, ar_s
            sd_s = float(step_cost(target, arch, hw, layout, n, kk).time_s(total_ctx))
            return acc.tau(kk, 0) * ar_s / sd_s, sd_s

        k = int(policy.choose(np.array([n]))[0])
        gain, step_s = speedup(k)
        best_k, best_gain = max(((kk, speedup(kk)[0]) for kk in range(0, max(TABLE_DRAFT_LENGTHS) + 1)),
                                key=lambda t: t[1])
        rows.append({"batch": n, "k": k, "tau": acc.tau(k, 0) if k else 1.0, "sd_step_ms": step_s * 1e3,
                     "decode_step_ms": ar_s * 1e3, "expected_speedup": gain, "best_k": best_k,
                     "best_speedup": best_gain})
    return rows


# ============================================================================ lengths
def lengths_report(sc, *, samples: int | None = None, step: int = 0) -> dict:
    """Draw RL step `step`'s response lengths of scenario `sc` as the simulator does and summarise them.

    `samples` (default: one RL step, prompts × group_size) sets how many responses are drawn: the
    step is drawn with enough prompts and the first `samples` lengths are kept. The draw is seeded
    from the scenario, so the report is deterministic.
    """

    file = source_file(sc)
    n = samples if samples is not None else sc.workload.prompts * sc.workload.group_size
    if samples is not None:
        sc = apply_overrides(sc, {"workload.prompts": -(-n // sc.workload.group_size)})
    w = sc.workload
    draw = draw_step(resolve(sc), step)  # the very draw the simulator makes for this RL step
    lengths = draw.response_tokens.ravel()[:n]
    return {"scenario": sc.name, "file": file, "distribution": w.response_tokens.model_dump(exclude_none=True),
            "max_response_tokens": w.max_response_tokens, "group_size": w.group_size,
            "group_correlation": w.group_correlation, "step": step,
            "growth": float(growth_factor(step, w.length_growth_per_step)), "seed": sc.seed,
            "summary": length_summary(lengths, w.max_response_tokens)}


def tree_report(acc, branching: str) -> dict:
    """A draft tree's expected accepted length under `acc` (workload/acceptance/shapes.py), for `show drafter --tree`."""

    return tree_summary(acc, parse_branching(branching))


def hardware_listing() -> list[dict]:
    """`specsim list hardware`: one record per bundled profile, units in the keys (dense peaks)."""

    out = []
    for name in list_hardware():
        hw = load_hardware(name)
        out.append({"name": name, "description": hw.description, "bf16_dense_tflops": hw.flops_per_s("bf16") / 1e12,
                    "hbm_gb": hw.datasheet_hbm_gb, "cuda_memory_gib": hw.hbm_bytes / 2**30, "hbm_tb_per_s": hw.hbm_bw_bytes_per_s / 1e12,
                    "nvlink_gb_per_s_per_direction": hw.nvlink_bw_bytes_per_s / 1e9,
                    "nvlink_domain_gpus": hw.nvlink_domain_gpus})
    return out


def model_listing() -> list[dict]:
    """`specsim list models`: one record per catalog model (parameters as counts, not billions)."""

    out = []
    for name in list_models():
        m = load_model(name)
        out.append({"name": name, "total_params": m.total_params, "active_params": m.active_params,
                    "layers": m.layers, "moe_experts": m.moe.experts if m.moe else 0,
                    "moe_top_k": m.moe.top_k if m.moe else 0, "source": m.source})
    return out
