"""The trainer's layout, resolved from a scenario (above cost/, which takes only plain specs).

The trainer runs on `Scenario.training_gpus` GPUs: the rollout GPUs in sync (colocated) mode,
`training.gpus` in async mode. Megatron's layout: tp·cp·pp GPUs hold one copy of the dense weights,
experts spread over ep of the tp·cp·dp ranks (cost/training.py). Micro-batches are packed to
`training.micro_batch_tokens` (null: max prompt + max response, NeMo-RL's micro-batch size 1),
logprob micro-batches to `training.logprob_micro_batch_tokens` (null: the same); an RL step runs
⌈samples / training.global_batch_samples⌉ optimizer steps. The math runs at `training.mfu`, else the
trainer pool's hardware profile's `efficiency.train_mfu` (`training.hardware`, else `hardware`); the
host side of a layer pass (`training.layer_overhead_ms` overrides the dense part) and the GPU's host
link come from that profile (`trainer:`, `host_link_gbps_per_direction`). `weight_sync: nemo_rl` is NeMo-RL's:
`ipc` when colocated, `nccl_broadcast` with separate pools. What a TrainingLayout costs is in
:mod:`specsim.cost.training`.
"""

from __future__ import annotations

from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import ModelSpec
from specsim.cost.layout import ParallelLayout
from specsim.cost.training import TRAIN_DTYPE, TrainingLayout
from specsim.errors import SpecError

__all__ = ["default_micro_batch_tokens", "training_layout"]


def default_micro_batch_tokens(sc) -> int:
    """max prompt + max response tokens: NeMo-RL's `train_mb_tokens` = max_total_sequence_length ×
    train_micro_batch_size 1 (its performance recipes' setting)."""
    w = sc.workload
    return int(w.max_prompt_tokens + w.max_response_tokens)


def weight_sync_method(sc) -> str:
    """The scenario's `training.weight_sync`, `nemo_rl` mapped to ipc (sync) / nccl_broadcast (async)."""
    ws = sc.training.weight_sync
    if ws == "nemo_rl":
        return "ipc" if sc.pipeline.mode == "sync" else "nccl_broadcast"
    return ws


def training_layout(sc, model: ModelSpec, hw: HardwareSpec) -> TrainingLayout:
    """The TrainingLayout of scenario `sc` (its `training` section, GPUs = `sc.training_gpus`).

    Raises SpecError naming the scenario field when the layout cannot exist: ep on a dense model,
    tp not dividing the heads, pp above the layers, tp·cp·pp or a replica not dividing the GPUs,
    ep not dividing the ranks it spreads over, a micro-batch budget below the longest sequence,
    a longest sequence that 2·cp chunks do not split, fp8 on a GPU without fp8."""
    t = sc.training
    w = sc.workload
    gpus = int(sc.training_gpus)
    gpu_field = "training.gpus" if sc.pipeline.mode == "async" else "rollout.gpus"
    try:
        par = ParallelLayout(tp=t.tp, pp=t.pp, ep=t.ep, weight_dtype=TRAIN_DTYPE, kv_dtype=TRAIN_DTYPE)
    except SpecError as exc:
        raise SpecError(f"training.{exc.field}", exc.value, exc.allowed) from None
    par.check_fits_model(model, "training")
    if gpus % par.gpus:
        raise SpecError(gpu_field, gpus, f"a multiple of the {par.gpus} GPUs of one training replica "
                                         f"(training.tp={t.tp}, pp={t.pp}, ep={t.ep})")
    if gpus % (t.tp * t.cp * t.pp):
        raise SpecError("training.cp", t.cp, f"a context-parallel degree with tp·cp·pp = {t.tp}·cp·{t.pp} dividing "
                                             f"the {gpus} trainer GPUs ({gpu_field})")
    longest = w.max_prompt_tokens + w.max_response_tokens
    if longest % (2 * t.cp) and t.cp > 1:
        raise SpecError("training.cp", t.cp, f"a degree whose 2·cp chunks split the longest sequence (max prompt + "
                                             f"max response = {longest} tokens; Megatron's load-balanced causal "
                                             f"split needs it divisible by 2·cp = {2 * t.cp})")
    if t.dtype != "bf16" and t.dtype not in hw.peak_flops:
        raise SpecError("training.dtype", t.dtype, f"bf16 on {hw.name} (no {t.dtype} peak in its profile: no "
                                                   f"{t.dtype} tensor cores)")
    mb = int(t.micro_batch_tokens or default_micro_batch_tokens(sc))
    for name, budget in (("training.micro_batch_tokens", mb),
                         ("training.logprob_micro_batch_tokens", int(t.logprob_micro_batch_tokens or mb))):
        if budget < longest:
            raise SpecError(name, budget, f">= the longest sequence, max prompt + max response = {longest} tokens "
                                          "(a sequence is never split across micro-batches)")
    try:
        return TrainingLayout(gpus=gpus, parallel=par, dp=gpus // par.gpus, micro_batch_tokens=mb,
                              mfu=float(t.mfu if t.mfu is not None else hw.efficiency.train_mfu),
                              optimizer_bytes_per_param=float(t.optimizer_bytes_per_param), sharding=t.sharding,
                              reference_logprob=bool(t.reference_logprob), weight_sync=weight_sync_method(sc),
                              logprob_efficiency=t.logprob_efficiency, cp=int(t.cp),
                              global_batch_samples=t.global_batch_samples,
                              logprob_micro_batch_tokens=t.logprob_micro_batch_tokens,
                              activation_checkpointing=bool(t.activation_checkpointing), math_dtype=t.dtype,
                              layer_overhead_s=(hw.train_layer_overhead_s if t.layer_overhead_ms is None
                                                else float(t.layer_overhead_ms) * 1e-3),
                              moe_layer_overhead_s=hw.train_moe_layer_overhead_s,
                              host_bw_bytes_per_s=hw.host_bw_bytes_per_s)
    except SpecError as exc:
        raise SpecError(f"training.{exc.field}", exc.value, exc.allowed) from None
