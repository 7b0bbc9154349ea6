"""Write one specsim scenario per NeMo-RL performance row (calibration/targets/nemo_rl_performance.yaml).

Run from the repository root: `python calibration/targets/nemo_rl_performance/make_scenarios.py`.
It rewrites the `*.yaml` scenarios beside this script from ROWS below; the scenarios are committed,
so nothing else needs it. What each field is and where it comes from:

* Recipe values (GPUs, prompts x generations, max sequence, vLLM TP and gpu_memory_utilization,
  Megatron TP/CP/EP/PP, global batch, micro-batch token budgets, activation checkpointing, mode
  and trajectory age, and whether vLLM runs in-process: `vllm_cfg.async_engine`) come from NVIDIA-NeMo/RL `examples/configs/recipes/llm/performance/` at tag
  v0.6.0 (Qwen3 rows) and v0.5.0 (Llama rows), on `examples/configs/grpo_math_1B.yaml` defaults
  (`train_global_batch_size` 512, sequence packing with `train_mb_tokens` = max sequence x
  `train_micro_batch_size` and `logprob_mb_tokens` = max sequence x `logprob_batch_size`).
* NeMo-RL's code, not the recipe: vLLM's batch limits for the engine NeMo-RL builds (below), and,
  async, the collector's limit on prompt groups in flight, `num_prompts_per_step ×
  max_trajectory_age_steps` (v0.6.0 `algorithms/async_utils.py`, `_inflight_sema`; the same at
  v0.5.0), each group sent whole to one engine, round-robin (`vllm_generation._async_generate_base`).
* Assumed (not published): the length shape. Prompts are OpenMathInstruct-2 problems under
  NeMo-RL's CoT prompt, taken as lognormal median 150, p99 600 tokens (mean 179); responses are
  lognormal with log-sd 0.8, their median solved so that the capped mean prompt + response equals
  the published mean sequence length (G-Average Seq len); the response cap is the max sequence
  minus the largest prompt.
"""

from __future__ import annotations

import math
from pathlib import Path

from scipy import optimize, stats

HERE = Path(__file__).resolve().parent
PROMPT_MEDIAN, PROMPT_P99, MAX_PROMPT = 150, 600, 512
RESPONSE_SIGMA = 0.8

# id: (hardware, model, mode, gen_gpus, train_gpus, prompts, gens, max_seq, mean_seq, gen_tp, mem_util,
#      train {tp, cp, ep, pp}, logprob_batch_size, activation_checkpointing, lag, recipe)
ROWS = {
    "v06_gb200_235b_sync_64": ("gb200", "Qwen3-235B-A22B", "sync", 64, None, 16, 32, 8192, 5709, 8, 0.4,
                               dict(tp=2, cp=2, ep=16, pp=4), 1, True, 0, "grpo-qwen3-235b-16n4g"),
    "v06_gb200_235b_sync_128": ("gb200", "Qwen3-235B-A22B", "sync", 128, None, 16, 32, 8192, 5693, 8, 0.6,
                                dict(tp=2, cp=2, ep=16, pp=4), 1, True, 0, "grpo-qwen3-235b-32n4g"),
    "v06_gb200_235b_1off_128": ("gb200", "Qwen3-235B-A22B", "async", 64, 64, 16, 32, 8192, 5705, 8, 0.8,
                                dict(tp=4, cp=1, ep=16, pp=4), 1, True, 1, "grpo-qwen3-235b-32n4g-async-1off"),
    "v06_h100_235b_sync_128": ("h100_sxm", "Qwen3-235B-A22B", "sync", 128, None, 16, 32, 8192, 5698, 16, 0.6,
                               dict(tp=2, cp=2, ep=16, pp=8), 1, True, 0, "grpo-qwen3-235b-16n8g"),
    "v06_h100_235b_sync_256": ("h100_sxm", "Qwen3-235B-A22B", "sync", 256, None, 16, 32, 8192, 5713, 16, 0.6,
                               dict(tp=2, cp=2, ep=16, pp=8), 1, True, 0, "grpo-qwen3-235b-32n8g"),
    "v06_h100_235b_1off_256": ("h100_sxm", "Qwen3-235B-A22B", "async", 128, 128, 16, 32, 8192, 5721, 8, 0.8,
                               dict(tp=4, cp=1, ep=16, pp=8), 1, True, 1, "grpo-qwen3-235b-32n8g-async-1off"),
    "v06_gb200_30b_sync_16": ("gb200", "Qwen3-30B-A3B", "sync", 16, None, 64, 32, 4096, 3199, 1, 0.6,
                              dict(tp=1, cp=1, ep=16, pp=1), 2, False, 0, "grpo-qwen3-30ba3b-4n4g"),
    "v06_gb200_30b_1off_16": ("gb200", "Qwen3-30B-A3B", "async", 8, 8, 64, 32, 4096, 3197, 1, 0.8,
                              dict(tp=1, cp=1, ep=8, pp=1), 2, False, 1, "grpo-qwen3-30ba3b-4n4g-async-1off"),
    "v06_h100_30b_sync_32": ("h100_sxm", "Qwen3-30B-A3B", "sync", 32, None, 64, 32, 4096, 3203, 2, 0.6,
                             dict(tp=1, cp=1, ep=8, pp=1), 4, False, 0, "grpo-qwen3-30ba3b-4n8g"),
    "v06_h100_30b_1off_32": ("h100_sxm", "Qwen3-30B-A3B", "async", 16, 16, 64, 32, 4096, 3201, 2, 0.8,
                             dict(tp=1, cp=1, ep=8, pp=2), 4, False, 1, "grpo-qwen3-30ba3b-4n8g-async-1off"),
    "v06_h100_30b_8off_192": ("h100_sxm", "Qwen3-30B-A3B", "async", 64, 128, 64, 32, 4096, 3206, 2, 0.8,
                              dict(tp=1, cp=1, ep=8, pp=1), 4, False, 8, "grpo-qwen3-30ba3b-24n8g-async-8off"),
    "v05_h100_llama8b_sync_16": ("h100_sxm", "Llama-3.1-8B", "sync", 16, None, 64, 32, 4096, 1019, 1, 0.6,
                                 dict(tp=1, cp=1, ep=1, pp=2), 2, True, 0, "grpo-llama3.1-8b-instruct-2n8g"),
    "v05_h100_llama8b_1off_16": ("h100_sxm", "Llama-3.1-8B", "async", 8, 8, 64, 32, 4096, 1123, 1, 0.8,
                                 dict(tp=1, cp=1, ep=1, pp=1), 2, True, 1, "grpo-llama3.1-8b-instruct-2n8g-async-1off"),
    "v05_gb200_llama8b_sync_8": ("gb200", "Llama-3.1-8B", "sync", 8, None, 64, 32, 4096, 1066, 1, 0.6,
                                 dict(tp=1, cp=1, ep=1, pp=1), 2, True, 0, "grpo-llama3.1-8b-instruct-2n4g"),
    "v05_gb200_llama8b_1off_8": ("gb200", "Llama-3.1-8B", "async", 4, 4, 64, 32, 4096, 1107, 1, 0.8,
                                 dict(tp=1, cp=1, ep=1, pp=1), 2, True, 1, "grpo-llama3.1-8b-instruct-2n4g-async-1off"),
}


# Rows whose recipe leaves `vllm_cfg.async_engine` at grpo_math_1B.yaml's false: NeMo-RL then drives
# vLLM's in-process `LLM.generate` (its worker sets VLLM_ENABLE_V1_MULTIPROCESSING=0), so the
# frontend's per-sequence work is serial with every step (`rollout.inprocess_engine`). The 235B
# sync recipes (grpo-qwen3-235b-16n8g.yaml and those built on it) and every async recipe set
# `async_engine: true` (vLLM's AsyncLLM, engine core in a process of its own).
INPROCESS = {"v06_gb200_30b_sync_16", "v06_h100_30b_sync_32", "v05_h100_llama8b_sync_16", "v05_gb200_llama8b_sync_8"}

# vLLM's batch limits as NeMo-RL's engines get them (NeMo-RL v0.6.0 pins vllm 0.17.1 and passes
# neither `max_num_seqs` nor `max_num_batched_tokens`; vllm/engine/arg_utils.py
# `_set_default_max_num_seqs_and_batched_tokens_args`): the in-process `vllm.LLM` runs with usage
# context LLM_CLASS, whose defaults on a GPU of >= 70 GiB that is not an A100 are 1,024 sequences and
# 16,384 tokens a step (`get_batch_defaults`); the async engine is built by
# `AsyncLLM.from_engine_args`, whose usage context ENGINE_CONTEXT has no entry in those tables, so
# it falls back to SchedulerConfig's DEFAULT_MAX_NUM_SEQS 128 and DEFAULT_MAX_NUM_BATCHED_TOKENS 2,048.
LLM_CLASS_MAX_SEQS, LLM_CLASS_BATCHED_TOKENS = 1024, 16384
ENGINE_CONTEXT_MAX_SEQS, ENGINE_CONTEXT_BATCHED_TOKENS = 128, 2048


def prompt_mean() -> float:
    s = math.log(PROMPT_P99 / PROMPT_MEDIAN) / stats.norm.ppf(0.99)
    return PROMPT_MEDIAN * math.exp(s * s / 2)


def capped_mean(median: float, cap: float, sigma: float = RESPONSE_SIGMA) -> float:
    """E[min(X, cap)] for X lognormal(ln median, sigma)."""
    mu = math.log(median)
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma * sigma / 2) * stats.norm.cdf(z - sigma) + cap * stats.norm.sf(z)


def response_median(mean_seq: float, cap: float) -> float:
    target = mean_seq - prompt_mean()
    return float(optimize.brentq(lambda m: capped_mean(m, cap) - target, 10.0, 1e6))


def scenario(row_id: str, spec: tuple) -> str:
    (hw, model, mode, gen, train, prompts, gens, max_seq, mean_seq, gen_tp, mem, par, lp_bs, ckpt, lag,
     recipe) = spec
    tag = "v0.5.0" if row_id.startswith("v05") else "v0.6.0"
    cap = max_seq - MAX_PROMPT
    med = response_median(mean_seq, cap)
    p99 = med * math.exp(RESPONSE_SIGMA * stats.norm.ppf(0.99))
    samples = prompts * gens
    lines = [
        f"# NeMo-RL performance row {row_id}: written by make_scenarios.py beside this file (do not edit by hand).",
        f"# Recipe: NVIDIA-NeMo/RL {tag} examples/configs/recipes/llm/performance/{recipe}.yaml on",
        "# examples/configs/grpo_math_1B.yaml; lengths assumed (make_scenarios.py docstring).",
        f"name: {row_id}",
        f"description: NeMo-RL {tag} performance recipe {recipe} ({mode}, AR)",
        "seed: 0",
        f"hardware: {hw}",
        f"model: {model}",
        "rollout:",
        f"  gpus: {gen}",
        f"  tp: {gen_tp}                       # vllm_cfg.tensor_parallel_size",
        f"  gpu_memory_utilization: {mem}   # vllm_cfg.gpu_memory_utilization",
    ]
    if row_id in INPROCESS:
        lines += [f"  max_batched_tokens: {LLM_CLASS_BATCHED_TOKENS}   # vLLM's LLM-class default on a GPU of >= 70 GiB",
                  f"  max_batch: {LLM_CLASS_MAX_SEQS}            # (EngineArgs.get_batch_defaults); NeMo-RL sets neither",
                  "  inprocess_engine: true      # vllm_cfg.async_engine false: in-process LLM.generate"]
    else:
        lines += [f"  max_batched_tokens: {ENGINE_CONTEXT_BATCHED_TOKENS}   # AsyncLLM.from_engine_args: usage context ENGINE_CONTEXT has",
                  f"  max_batch: {ENGINE_CONTEXT_MAX_SEQS}             # no batch default: SchedulerConfig.DEFAULT_MAX_NUM_*"]
    lines += [
        "training:",
    ]
    if train:
        lines.append(f"  gpus: {train}")
    lines += [
        f"  tp: {par['tp']}",
        f"  cp: {par['cp']}",
        f"  ep: {par['ep']}",
        f"  pp: {par['pp']}",
        "  sharding: distributed_optimizer   # megatron_cfg.optimizer.use_distributed_optimizer",
        "  reference_logprob: true           # loss_fn.reference_policy_kl_penalty 0.01",
        f"  global_batch_samples: 512        # policy.train_global_batch_size: {samples // 512} optimizer step(s) per RL step",
        f"  micro_batch_tokens: {max_seq}   # sequence_packing.train_mb_tokens = {max_seq} x train_micro_batch_size 1",
        f"  logprob_micro_batch_tokens: {max_seq * lp_bs}   # logprob_mb_tokens = {max_seq} x logprob_batch_size {lp_bs}",
        f"  activation_checkpointing: {str(ckpt).lower()}",
        "workload:",
        f"  prompts: {prompts}",
        f"  group_size: {gens}",
        f"  max_prompt_tokens: {MAX_PROMPT}",
        f"  max_response_tokens: {cap}",
        f"  prompt_tokens: {{kind: lognormal, median: {PROMPT_MEDIAN}, p99: {PROMPT_P99}}}",
        f"  response_tokens: {{kind: lognormal, median: {med:.0f}, p99: {p99:.0f}}}   # sigma {RESPONSE_SIGMA}; "
        f"capped mean + prompt mean = {mean_seq}",
        "  group_correlation: 0.5",
        "drafter:",
        "  kind: eagle3",
        "  tau: 2.5                 # unused: the row is AR (speculation off)",
        "speculation:",
        "  policy: 'off'",
        "pipeline:",
        f"  mode: {mode}",
    ]
    if mode == "async":
        lines += [f"  policy_lag: {lag}                # grpo.async_grpo.max_trajectory_age_steps",
                  "  partial_rollouts: true       # async_grpo.in_flight_weight_updates",
                  f"  max_groups_in_flight: {prompts * lag}   # _inflight_sema: prompts x max_trajectory_age_steps",
                  f"  steps: {lag + 8}", f"  warmup_steps: {lag + 3}"]
    else:
        lines += ["  steps: 4", "  warmup_steps: 1"]
    lines += ["  reward_s: 0.0"]
    return "\n".join(lines) + "\n"


def main() -> None:
    for row_id, spec in ROWS.items():
        (HERE / f"{row_id}.yaml").write_text(scenario(row_id, spec))


if __name__ == "__main__":
    main()
