"""The trainer's layout, resolved from a scenario (above cost/, which takes only plain specs).

The trainer runs on `Scenario.training_gpus` GPUs: the rollout GPUs in sync (colocated) mode,
`training.gpus` in async mode. One model replica spans max(tp, ep)·pp GPUs exactly as a rollout
replica does (cost/layout.ParallelLayout), dp = gpus / (max(tp, ep)·pp) replicas. Micro-batches
hold `micro_batch_tokens` tokens, by default max(max prompt + max response, rollout.max_batched_tokens)
so that one micro-batch holds at least one full-length sequence. The achieved fwd+bwd MFU is
`training.mfu`, else the hardware profile's `efficiency.train_mfu`. What a TrainingLayout costs is
in :mod:`specsim.cost.training`.
"""

from __future__ import annotations

from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import ModelSpec
from specsim.cost.layout import ParallelLayout
from specsim.cost.training import TRAIN_DTYPE, TrainingLayout
from specsim.errors import SpecError

__all__ = ["default_micro_batch_tokens", "training_layout"]


def default_micro_batch_tokens(sc) -> int:
    """max(max prompt + max response tokens, rollout.max_batched_tokens): a micro-batch holds at
    least one full-length sequence."""
    w = sc.workload
    return int(max(w.max_prompt_tokens + w.max_response_tokens, sc.rollout.max_batched_tokens))


def training_layout(sc, model: ModelSpec, hw: HardwareSpec, *, micro_batch_tokens: int | None = None,
                    optimizer_steps: int = 1) -> TrainingLayout:
    """The TrainingLayout of scenario `sc` (its `training` section, GPUs = `sc.training_gpus`).

    Raises SpecError naming the scenario field when the layout cannot exist: ep on a dense model,
    tp not dividing the heads, pp above the layers, replicas not dividing the GPUs."""
    t = sc.training
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
    return TrainingLayout(gpus=gpus, parallel=par, dp=gpus // par.gpus,
                          micro_batch_tokens=int(micro_batch_tokens or default_micro_batch_tokens(sc)),
                          mfu=float(t.mfu if t.mfu is not None else hw.efficiency.train_mfu),
                          optimizer_bytes_per_param=float(t.optimizer_bytes_per_param), sharding=t.sharding,
                          reference_logprob=bool(t.reference_logprob), weight_sync=t.weight_sync,
                          optimizer_steps=int(optimizer_steps), logprob_efficiency=t.logprob_efficiency)
