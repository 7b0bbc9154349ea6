"""Trainer-side costs of one RL step: reward, logprob, train (fwd+bwd), weight sync, drafter update.

Pure functions of plain specs (ModelSpec, HardwareSpec, ParallelLayout, TrainingLayout) and of the
step's sequence lengths (prompt + response tokens of every response); nothing here reads a scenario
(specsim/world/trainer.py resolves a scenario's training section into a TrainingLayout). Every function
states its formula; all are per-step scalars. The reward stage is a set constant of the pipeline
(`pipeline.reward_s`), not priced here.

Training layout (`TrainingLayout`). The trainer runs on `gpus` GPUs. One model replica spans
max(tp, ep)·pp GPUs exactly as a rollout replica does (cost/layout.ParallelLayout: tp shards
attention/dense FFN/LM head, ep spreads whole experts with attention data-parallel over ep/tp
groups, pp splits layers). dp = gpus / (max(tp, ep)·pp) replicas. Each replica processes 1/dp of
the step's sequences, packed into micro-batches of `micro_batch_tokens` tokens; packing is taken as
ideal (m = ⌈replica tokens / budget⌉ micro-batches of equal size); one optimizer step per RL step
unless `optimizer_steps` says more.

Sharding over the dp replicas (`sharding`), as the trainers run it:
* "fsdp" -- ZeRO-3 (veRL's FSDP actor, NeMo-RL's DTensor policy): params, grads and optimizer
  state are all sharded; each micro-batch gathers the params for its forward, recomputed forward
  and backward and reduce-scatters its grads.
* "distributed_optimizer" -- Megatron-Core's distributed optimizer (ZeRO-1), NeMo-RL's Megatron
  policy (`use_distributed_optimizer: true`, `grad_reduce_in_fp32: false`, `use_custom_fsdp:
  false` in its GRPO Megatron configs): bf16 params and grads stay whole on every replica and only
  the fp32 optimizer state is sharded; grads accumulate over the micro-batches and are
  reduce-scattered once per optimizer step, and the updated params are all-gathered once.

Model-state bytes per parameter. `training.optimizer_bytes_per_param` (default 16) is read as the
whole mixed-precision Adam state per parameter in ZeRO's accounting: bf16 weight (2) + bf16 grad
(2) + fp32 master weight, momentum and variance (12) = 16 B/param. It is the params+grads+optimizer
total, not an addition to them. Under "distributed_optimizer" the first WEIGHT_GRAD_BYTES (4) of it
are held whole per replica GPU and the rest is sharded over dp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost import comm
from specsim.cost.forward import pass_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import GB, activation_bytes_per_gpu, weight_bytes_per_gpu
from specsim.cost.roofline import compute_time_s, memory_time_s
from specsim.errors import LayoutError, SpecError

TRAIN_DTYPE = "bf16"
#: bf16 weight + bf16 grad per parameter: the part of the model state the distributed optimizer
#: does not shard
WEIGHT_GRAD_BYTES = 4.0
SHARDINGS = ("fsdp", "distributed_optimizer")


# ----------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class TrainingLayout:
    """The trainer's parallel layout on `gpus` GPUs: replicas of `parallel` (tp, pp, ep; bf16),
    `dp` of them; ZeRO-3 sharding over dp. `mfu`: achieved model-FLOPs utilisation of fwd+bwd."""

    gpus: int
    parallel: ParallelLayout
    dp: int
    micro_batch_tokens: int
    mfu: float
    optimizer_bytes_per_param: float = 16.0
    reference_logprob: bool = True
    weight_sync: str = "broadcast"
    optimizer_steps: int = 1
    logprob_efficiency: float | None = None   # GEMM efficiency of the logprob passes (None: the profile's compute)
    sharding: str = "fsdp"                    # fsdp (ZeRO-3) | distributed_optimizer (Megatron, ZeRO-1)
    free: bool = False                        # a counterfactual trainer (what_if.free_trainer): every pass costs 0

    @property
    def tp(self) -> int:
        return self.parallel.tp

    @property
    def pp(self) -> int:
        return self.parallel.pp

    @property
    def ep(self) -> int:
        return self.parallel.ep

    @property
    def replica_gpus(self) -> int:
        """GPUs of one model replica: max(tp, ep)·pp."""
        return self.parallel.gpus

    def __post_init__(self):
        if self.dp < 1 or self.gpus != self.dp * self.parallel.gpus:
            raise SpecError("gpus", self.gpus, f"dp · replica GPUs = {self.dp} · {self.parallel.gpus}")
        if not 0 < self.mfu <= 1:
            raise SpecError("mfu", self.mfu, "in (0, 1]")
        if self.sharding not in SHARDINGS:
            raise SpecError("sharding", self.sharding, " or ".join(SHARDINGS))
        if self.sharding == "distributed_optimizer" and self.optimizer_bytes_per_param < WEIGHT_GRAD_BYTES:
            raise SpecError("optimizer_bytes_per_param", self.optimizer_bytes_per_param,
                            f">= {WEIGHT_GRAD_BYTES:g} (the bf16 weight and grad) with the distributed optimizer")
        if self.micro_batch_tokens < 1 or self.optimizer_steps < 1:
            raise SpecError("micro_batch_tokens/optimizer_steps", (self.micro_batch_tokens, self.optimizer_steps),
                            ">= 1 each")

    def describe(self) -> str:
        return f"{self.parallel.degrees} DP={self.dp} on {self.gpus} GPUs"


def sequence_tokens(prompt_tokens, response_tokens) -> np.ndarray:
    """Prompt + response tokens of every response: prompt_tokens (groups,), response (groups, n)."""
    p = np.asarray(prompt_tokens, dtype=float)
    r = np.asarray(response_tokens, dtype=float)
    return (r + p.reshape(-1, *([1] * (r.ndim - 1)))).reshape(-1)


def micro_batches_per_replica(tl: TrainingLayout, seq_tokens) -> int:
    """m = ⌈(Σ L_i / dp / optimizer_steps) / micro_batch_tokens⌉ micro-batches per replica per optimizer step."""
    total = float(np.sum(seq_tokens))
    return max(1, int(np.ceil(total / tl.dp / tl.optimizer_steps / tl.micro_batch_tokens)))


def pp_bubble_factor(pp: int, m: int) -> float:
    """1F1B pipeline: (m + pp − 1)/m times the bubble-free time; bubble fraction (pp−1)/(m+pp−1)."""
    return (m + pp - 1) / m


def _collective_s(nbytes, n: int, span_gpus: int, hw: HardwareSpec, factor: float) -> float:
    """Ring collective over a group of n GPUs whose members span `span_gpus` GPUs (the link is the
    slowest one the span crosses): lat·⌈log2 n⌉ + factor·bytes/bw. factor = (n−1)/n for
    all-gather / reduce-scatter (cost/comm.py)."""
    if n <= 1:
        return 0.0
    bw, lat = comm.link(hw, span_gpus)
    return float(lat * np.ceil(np.log2(n)) + factor * float(nbytes) / bw)


# ----------------------------------------------------------------------------- logprob
def forward_pass_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> float:
    """One prefill-like forward over every token of the step with logits for every token, on the
    training layout, data-parallel over dp replicas (the step's wall time on the trainer pool).

    Per replica: m micro-batches of T_mb = Σ L_i / (dp·m) packed tokens. A micro-batch is priced
    by cost/forward.pass_cost as T_mb tokens through every linear layer, the (MoE) experts and the
    LM head (logits for all T_mb tokens), plus TP/EP collectives and KV writes; the causal
    attention among each packed sequence's own tokens, 4·n_h/tp·d·L_i(L_i+1)/2 FLOPs per layer, is
    added at the compute roofline (the same term cost/forward.forward_time_s prices for a ragged
    prefill; packed sequences do not attend to each other). pass_cost runs the pp stages one after
    another, so m pipelined micro-batches take (m + pp − 1)·t_mb/pp. Result:
        t = (m + pp − 1)/pp · [pass(T_mb) + attn(Σ L_i(L_i+1)/2 / dp) / m]
    """
    L = np.asarray(seq_tokens, dtype=float)
    if L.size == 0 or L.sum() <= 0:
        return 0.0
    par = tl.parallel
    m = max(1, int(np.ceil(float(L.sum()) / tl.dp / tl.micro_batch_tokens)))
    t_mb_tokens = float(L.sum()) / tl.dp / m
    linear = float(pass_cost(model, hw, par, t_mb_tokens, 1.0, 1.0).fixed_s)
    heads_local = model.heads / par.tp
    pairs = float(np.sum(L * (L + 1) / 2) - L.sum())  # the q=1 pass already counted one pair per token
    attn_total = model.layers * float(compute_time_s(4 * heads_local * model.prefill_attn_head_dim * pairs
                                                     / par.attn_dp, hw))
    per_mb = linear + attn_total / tl.dp / m
    return float((m + par.pp - 1) / par.pp * per_mb)


def logprob_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> float:
    """Policy logprob (and reference-policy logprob when training.reference_logprob) over all
    prompt+response tokens: (1 + reference) · forward_pass_s(...). Priced at the hardware
    profile's kernels (measured-kernel fit where the profile has one), as a forward pass of the
    same kernels, unless the trainer's own `logprob_efficiency` (fitted from measured logprob stage
    times) replaces them: then every op runs at that fraction of peak on the scalar roofline (the
    trainer's framework, not the inference engine's kernels, runs these passes)."""
    if tl.free:
        return 0.0
    passes = 2 if tl.reference_logprob else 1
    if tl.logprob_efficiency is not None:
        hw = replace(hw, kernel_fit=None).with_efficiency(compute=float(tl.logprob_efficiency))
    return passes * forward_pass_s(model, hw, tl, seq_tokens)


# ----------------------------------------------------------------------------- train
def train_flops(model: ModelSpec, seq_tokens) -> float:
    """Model FLOPs of fwd+bwd over the sequences:
        6 · (matmul params per token) · Σ L_i  +  12 · layers · n_h · d · Σ L_i²/2
    (matmuls: 2 fwd + 4 bwd per param per token; causal attention QKᵀ and PV: 4·n_h·d per
    query-key pair per layer forward, ×3 for fwd+bwd, Σ L_i²/2 pairs; MLA: d = (qk_nope + qk_rope +
    v_head)/2, the non-absorbed form training runs, ModelSpec.prefill_attn_head_dim). MFU convention: activation
    recomputation is not counted (it is inside the achieved MFU)."""
    L = np.asarray(seq_tokens, dtype=float)
    linear = 6.0 * model.matmul_params_per_token * float(L.sum())
    attn = 12.0 * model.layers * model.heads * model.prefill_attn_head_dim * float(np.sum(L * L)) / 2.0
    return linear + attn


@dataclass(frozen=True)
class TrainCost:
    """fwd+bwd time of one RL step's policy update and its parts (seconds).

    compute_s: model FLOPs / (mfu · peak bf16 · gpus); bubble_s: PP bubble on top;
    tp_comm_s / ep_comm_s: exposed tensor/expert-parallel collectives; dp_comm_s: the exposed
    part of the ZeRO-3 gathers and gradient reduce-scatter; optimizer_s: the Adam update.
    """

    compute_s: float
    bubble_s: float
    tp_comm_s: float
    ep_comm_s: float
    dp_comm_s: float
    optimizer_s: float
    micro_batches: int
    flops: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.bubble_s + self.tp_comm_s + self.ep_comm_s + self.dp_comm_s + self.optimizer_s


def optimizer_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout) -> float:
    """Adam step, memory-bound: read and write the model state once per optimizer step,
        2 · optimizer_bytes_per_param · (params on one replica GPU) / dp  bytes per GPU
    at the achieved HBM bandwidth (params on a replica GPU from cost/memory.weight_bytes_per_gpu)."""
    params_gpu = weight_bytes_per_gpu(model, tl.parallel, TRAIN_DTYPE) / DTYPE_BYTES[TRAIN_DTYPE] / tl.dp
    return tl.optimizer_steps * float(memory_time_s(2.0 * tl.optimizer_bytes_per_param * params_gpu, hw))


def train_cost(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> TrainCost:
    """fwd+bwd of the policy over every token of the step (one optimizer step by default).

    compute  = train_flops / (mfu · peak_bf16 · gpus)
    bubble   = compute · (pp − 1)/m                          (1F1B: ×(m+pp−1)/m, m micro-batches per replica)
    TP comm  = m · (layers/pp) · 3·a · all_reduce(T_mb/attn_dp · h · 2 B, tp)   a = all-reduces per layer
               forward (1 attention + 1 dense FFN or TP-sharded MoE), ×3: forward, recomputed
               forward (activation checkpointing), backward; exposed (no TP-comm overlap)
    EP comm  = m · (layers/pp) · 3·2 · all_to_all(T_mb/attn_dp/tp · top_k · h · 2 B, ep)
    DP comm  = per optimizer step: reduce-scatter(grads) + all-gather(params) of the bf16 weight
               shard of one replica GPU over dp (exposed tail), plus, with sharding "fsdp" only,
               per micro-batch max(0, 3 · all_gather − compute per micro-batch) (ZeRO-3 gathers for
               forward, recompute and backward plus the gradient reduce-scatter, hidden behind
               compute when they fit); the distributed optimizer gathers nothing per micro-batch;
               the dp group spans all trainer GPUs (link by that span)
    optimizer = optimizer_s(...)
    The bubble and comm terms add to compute (the MFU is the achieved rate of the math alone).
    """
    L = np.asarray(seq_tokens, dtype=float)
    par = tl.parallel
    flops = train_flops(model, L)
    peak = hw.flops_per_s(TRAIN_DTYPE)
    compute = flops / (tl.mfu * peak * tl.gpus)
    m = micro_batches_per_replica(tl, L)
    steps = tl.optimizer_steps
    bubble = compute * (par.pp - 1) / m
    tokens_mb = float(L.sum()) / tl.dp / (m * steps)
    tok_attn = tokens_mb / par.attn_dp
    act = DTYPE_BYTES[TRAIN_DTYPE]
    layers_stage = model.layers / par.pp
    ar_per_layer = 1 + (1 if model.ffn else 0) + (1 if (model.moe and par.ep == 1) else 0)
    tp_one = float(comm.all_reduce_s(tok_attn * model.hidden * act, par.tp, hw))
    tp_comm = steps * m * layers_stage * 3 * ar_per_layer * tp_one
    ep_comm = 0.0
    if model.moe and par.ep > 1:
        a2a = float(comm.all_to_all_s(tok_attn / par.tp * model.moe.top_k * model.hidden * act, par.ep, hw))
        ep_comm = steps * m * layers_stage * 3 * 2 * a2a
    shard = weight_bytes_per_gpu(model, par, TRAIN_DTYPE)
    ag = _collective_s(shard, tl.dp, tl.gpus, hw, (tl.dp - 1) / tl.dp)
    per_mb_compute = compute / (m * steps)
    per_mb_gathers = m * max(0.0, 3 * ag - per_mb_compute) if tl.sharding == "fsdp" else 0.0
    dp_comm = steps * (2 * ag + per_mb_gathers)
    return TrainCost(compute_s=compute, bubble_s=bubble, tp_comm_s=tp_comm, ep_comm_s=ep_comm, dp_comm_s=dp_comm,
                     optimizer_s=optimizer_s(model, hw, tl), micro_batches=m, flops=flops)


def train_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> float:
    """train_cost(...).total_s: fwd+bwd compute + PP bubble + exposed TP/EP/DP comm + optimizer
    (0 for a free trainer, `TrainingLayout.free`)."""
    return 0.0 if tl.free else train_cost(model, hw, tl, seq_tokens).total_s


# ----------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU trainer memory (bytes): model state (ZeRO-3 over dp) and peak activations."""

    hbm_bytes: float
    state_bytes: float
    activation_bytes: float
    resident_budget_bytes: float | None = None  # sync/colocated: HBM left beside the rollout engine

    @property
    def total_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.hbm_bytes

    @property
    def resident_fits(self) -> bool | None:
        """Colocated only: does the model state fit beside the rollout engine's
        gpu_memory_utilization share while generating (else it must be offloaded to CPU)."""
        return None if self.resident_budget_bytes is None else self.state_bytes <= self.resident_budget_bytes


def model_state_bytes(tl: TrainingLayout, params_gpu: float) -> float:
    """Model-state bytes per GPU for `params_gpu` parameters on one replica GPU: all of it sharded
    over dp (fsdp), or the bf16 weight and grad whole and the rest sharded (distributed_optimizer)."""
    if tl.sharding == "distributed_optimizer":
        return (WEIGHT_GRAD_BYTES + (tl.optimizer_bytes_per_param - WEIGHT_GRAD_BYTES) / tl.dp) * params_gpu
    return tl.optimizer_bytes_per_param * params_gpu / tl.dp


def training_memory(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, *,
                    gpu_memory_utilization: float | None = None) -> TrainingMemory:
    """Per GPU:
        state       = optimizer_bytes_per_param · (params on one replica GPU) / dp          (fsdp)
                    = (4 + (optimizer_bytes_per_param − 4) / dp) · (params on one replica GPU)
                                                         (distributed_optimizer: bf16 weight and grad whole)
        activations = checkpoints + working set
          checkpoints = (layers/pp) · T_mb/attn_dp · h · 2 B / tp · pp   (one layer input per layer
                        kept for each of the pp micro-batches 1F1B holds in flight on the first
                        stage; full activation checkpointing, sequence-parallel when tp > 1)
          working set = 2 × cost/memory.activation_bytes_per_gpu(T_mb/attn_dp) (one layer's hidden
                        states, QKV, FFN intermediates and fp32 logits; ×2 for their gradients)
    T_mb = micro_batch_tokens. The trainer may use the whole HBM (in colocated mode the rollout
    engine sleeps and releases its memory during training); `resident_budget_bytes` reports the
    HBM·(1 − gpu_memory_utilization) the state would have beside a running rollout engine.
    """
    par = tl.parallel
    params_gpu = weight_bytes_per_gpu(model, par, TRAIN_DTYPE) / DTYPE_BYTES[TRAIN_DTYPE]
    state = model_state_bytes(tl, params_gpu)
    tok = tl.micro_batch_tokens / par.attn_dp
    layers_stage = int(np.ceil(model.layers / par.pp))
    ckpt = layers_stage * tok * model.hidden * DTYPE_BYTES[TRAIN_DTYPE] / par.tp * par.pp
    work = 2.0 * activation_bytes_per_gpu(model, par, int(np.ceil(tok)))
    resident = None if gpu_memory_utilization is None else hw.hbm_bytes * (1.0 - gpu_memory_utilization)
    return TrainingMemory(hw.hbm_bytes, float(state), float(ckpt + work), resident)


def check_training_fits(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, *,
                        gpu_memory_utilization: float | None = None) -> TrainingMemory:
    """training_memory(...), raising LayoutError when state + activations exceed one GPU's HBM."""
    mem = training_memory(model, hw, tl, gpu_memory_utilization=gpu_memory_utilization)
    if not mem.fits:
        raise LayoutError(
            f"{model.name} training needs {mem.total_bytes / GB:.0f} GB per GPU "
            f"({mem.state_bytes / GB:.0f} GB params+grads+optimizer at {tl.optimizer_bytes_per_param:g} B/param, "
            f"{tl.sharding} over {tl.describe()}, {mem.activation_bytes / GB:.0f} GB activations for micro-batches of "
            f"{tl.micro_batch_tokens} tokens); training.gpus={tl.gpus} gives {mem.hbm_bytes / GB:.0f} GB per GPU "
            f"on {hw.name}: add training GPUs or raise training.tp/pp")
    return mem


# ----------------------------------------------------------------------------- weight sync
def rollout_weight_bytes(model: ModelSpec, rollout: ParallelLayout) -> float:
    """Bytes of the whole policy in the rollout weight dtype (what the engines must receive)."""
    return model.weight_bytes(rollout.weight_bytes)


def weight_sync_s(model: ModelSpec, hw: HardwareSpec, rollout: ParallelLayout, rollout_gpus: int,
                  training_gpus: int, *, method: str = "broadcast", colocated: bool = True) -> float:
    """Trainer → rollout engines, B = the rollout shard of one rollout GPU in the rollout dtype
    (cost/memory.weight_bytes_per_gpu(model, rollout layout)). The link is the slowest one the
    GPUs involved span (colocated: the rollout pool; separate pools: both pools together) —
    NVLink inside one NVLink domain, else the per-GPU scale-out NIC.

    reshard:   each rollout GPU all-gathers its shard from the trainer's ZeRO shards over the
               trainer GPUs: t = lat·⌈log2 n⌉ + (n−1)/n · B / bw,  n = trainer GPUs (colocated:
               1/n of it is already local); separate pools: t = lat·⌈log2 n⌉ + B / bw.
    broadcast: pipelined broadcast from the trainer pool to every engine; every GPU's NIC forwards
               what it receives, so the bottleneck is one GPU's link carrying
               max(B, W/trainer GPUs) bytes (a rollout shard in, or a trainer's share out):
               t = lat·⌈log2(engines + 1)⌉ + max(B, W/n_train) / bw.
    """
    if method == "none":   # a free trainer (what_if.free_trainer): the weights arrive at no cost
        return 0.0
    b = weight_bytes_per_gpu(model, rollout)
    span = rollout_gpus if colocated else rollout_gpus + training_gpus
    bw, lat = comm.link(hw, span)
    if method == "reshard":
        n = training_gpus
        if colocated:  # 1/n of each shard is already on the GPU
            return 0.0 if n <= 1 else float(lat * np.ceil(np.log2(n)) + (n - 1) / n * b / bw)
        return float(lat * np.ceil(np.log2(max(n, 2))) + b / bw)
    if method != "broadcast":
        raise SpecError("weight_sync", method, "broadcast or reshard (or none: a free trainer)")
    engines = max(1, rollout_gpus // rollout.gpus)
    total = rollout_weight_bytes(model, rollout)
    return float(lat * np.ceil(np.log2(engines + 1)) + max(b, total / training_gpus) / bw)


# ----------------------------------------------------------------------------- drafter update
def drafter_update_s(drafter: DrafterArch, hw: HardwareSpec, tl: TrainingLayout, seq_tokens, *,
                     token_fraction: float = 1.0, policy: ModelSpec | None = None,
                     hidden_states_cached: bool = True) -> float:
    """Online drafter training (eagle3 / mtp) on the training pool, one pass over a fraction f of
    the step's sequences (f = drafter.update_token_fraction; sequences are sub-sampled, not cut):
        t = train_flops(drafter model, f of the sequences) / (mfu · peak_bf16 · trainer GPUs)
    i.e. 6·N_draft·f·ΣL + 12·layers_d·n_h·d·f·ΣL²/2 FLOPs. The target hidden states the drafter
    trains on are captured during the policy-logprob pass the step already runs (the same tokens,
    the same weights), so by default no extra policy forward is paid; with
    `hidden_states_cached=False` a policy forward (2·N·f·ΣL + 4·layers·n_h·d·f·ΣL²/2 FLOPs,
    at the same MFU) is added. eagle3's model has its draft vocabulary; mtp's the full LM head.
    Not for self_quant (see requantize_s) or ngram (0)."""
    if drafter.model is None or not drafter.spec.retrainable or tl.free:
        return 0.0
    L = np.asarray(seq_tokens, dtype=float)
    f = float(token_fraction)
    flops = f * train_flops(drafter.model, L)
    if not hidden_states_cached:
        if policy is None:
            raise ValueError("hidden_states_cached=False needs the policy model")
        flops += f * train_flops(policy, L) / 3.0
    return float(flops / (tl.mfu * hw.flops_per_s(TRAIN_DTYPE) * tl.gpus))


def requantize_s(model: ModelSpec, hw: HardwareSpec, rollout: ParallelLayout, drafter: DrafterArch) -> float:
    """self_quant: after each weight sync every rollout GPU re-quantizes its shard of the new
    weights (a memory-bound pass: read the rollout-dtype shard, write the quantized one):
        t = (shard bytes in the rollout dtype + shard bytes in the drafter dtype) / (HBM bw · eff)
    The absmax/scale arithmetic is a few FLOPs per weight, far below the ridge point. A drafter
    sharing the target's embedding and LM head (DrafterKind.shares_target_head) re-quantizes the
    transformer layers only."""
    if not drafter.spec.requantized_at_sync or drafter.model is None:
        return 0.0
    emb = not drafter.spec.shares_target_head
    read = weight_bytes_per_gpu(model, rollout, embeddings=emb)
    write = weight_bytes_per_gpu(model, rollout, drafter.weight_dtype or rollout.weight_dtype, embeddings=emb)
    return float(memory_time_s(read + write, hw))
