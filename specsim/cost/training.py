"""Trainer-side costs of one RL step as Megatron-based RL frameworks run it: logprob, train
(fwd+bwd), the colocated offload/onload, the refit of the rollout engines, drafter update.

Pure functions of plain specs (ModelSpec, HardwareSpec, ParallelLayout, TrainingLayout) and of the
step's sequence lengths (prompt + response tokens of every response); nothing here reads a scenario
(specsim/world/trainer.py resolves a scenario's training section into a TrainingLayout). Every
function states its formula; all are per-step scalars. The reward stage is a set constant of the
pipeline (`pipeline.reward_s`), not priced here. Sources of each mechanism: NVIDIA-NeMo/RL v0.6.0
(`examples/configs/grpo_math_1B.yaml`, `nemo_rl/models/policy/workers/megatron_policy_worker.py`,
`nemo_rl/data/packing/`) and Megatron-Core (1F1B schedule, distributed optimizer, context
parallelism, the alltoall MoE token dispatcher); docs/calibration.md, "Trainer", lists them.

Layout (`TrainingLayout`), Megatron's: tp · cp · pp GPUs hold one copy of the dense weights, and
`data_parallel` = gpus / (tp·cp·pp) such copies each take their own micro-batches; experts are
spread over `ep` GPUs of the tp·cp·dp ranks (expert tensor parallel 1, NeMo-RL's default), their
expert data parallel is tp·cp·dp / ep. The weight-sharding view used for the per-GPU weight bytes
is cost/layout.ParallelLayout(tp, pp, ep) (a replica spans max(tp, ep)·pp GPUs).

The RL step on the trainer (NeMo-RL GRPO, Megatron policy):
1. logprob: the previous-policy logprobs, and with a reference KL the reference policy's (its
   weights swapped in from host memory and back: `use_reference_model`), each a forward over
   every sequence, packed into micro-batches of `logprob_micro_batch_tokens` (NeMo-RL
   `logprob_mb_tokens`) and pipelined over pp stages;
2. train: the samples split into optimizer steps of `global_batch_samples` (NeMo-RL
   `train_global_batch_size`, 512 by default: 2,048 samples are 4 optimizer steps), each step's
   samples dealt to the dp ranks and packed into micro-batches of `micro_batch_tokens` (NeMo-RL
   `train_mb_tokens`, modified first-fit-decreasing, each sequence padded to 64 tokens and to a
   multiple of 2·cp·tp); each optimizer step runs 1F1B over its micro-batches (pp − 1 slots of
   pipeline fill and drain per optimizer step), then the distributed optimizer's exposed
   gradient reduce-scatter / parameter all-gather and the Adam update;
3. colocated only (sync): before generation the trainer's grads and optimizer state and then its
   weights go to host memory, and come back before the logprob and training (`offload_before_refit`,
   `offload_after_refit`, `prepare_for_training`), over the GPU's host link; the refit streams the
   whole model to every rank (Megatron-Bridge's HF export all-gathers each tensor over tp/ep and
   broadcasts it over pp) and into the colocated engine by CUDA IPC. Separate pools: every trainer
   rank assembles the whole model the same way and trainer rank 0 broadcasts it to every rollout
   GPU in packed buckets, export and broadcast overlapped (`packed_broadcast_producer`, PR #1379):
   :func:`packed_broadcast_s`.

Per micro-batch of T packed tokens, on one pipeline stage, per GPU (T_g = T / (tp·cp)):
    compute   = [2·P·T_g + 4·n_h·d·Σ_j ℓ_j²/2 / (tp·cp)] · (layers/pp)/layers / (eff · peak_dtype)
                (P: matmul params per token incl. the LM head; ℓ_j the packed sequences; train: ×3)
    TP comm   = (layers/pp) · a · all_reduce(T/cp · h · 2 B, tp)      (a: 1 attention + 1 dense FFN;
                sequence parallel's all-gather + reduce-scatter move an all-reduce's bytes)
    EP comm   = (MoE layers/pp) · 2 · all_to_all(T_g · top_k · h · 2 B, ep)      (dispatch + combine)
    CP comm   = (layers/pp) · max(0, (cp − 1) · p2p(K,V of T/cp tokens) − attention compute)   (ring)
    overhead  = (layers/pp) · layer_overhead + (MoE layers/pp) · moe_layer_overhead
Passes: a forward pays each once; a training micro-batch pays compute ×3, comm ×(2 + ckpt)
(forward, backward, the recomputed forward under activation checkpointing) and the overheads
×(3 + ckpt) (a backward launches about twice a forward's kernels). `layer_overhead` and
`moe_layer_overhead` are the host side of a layer pass that no FLOP or byte term covers (kernel
launches, the alltoall dispatcher's device-to-host sync of the token counts per expert); they are
per GPU type (`trainer:` block of the hardware profile), fitted on one dense and one MoE row per GPU
type (calibration/targets/nemo_rl_performance.yaml).

Sharding of the model state (`sharding`):
* "distributed_optimizer" -- Megatron-Core's (ZeRO-1), NeMo-RL's Megatron policy: bf16 weights and
  grads whole on every GPU of a model copy, the rest of the state sharded over the data-parallel
  ranks (dense weights over dp, experts over their expert-data-parallel ranks); one gradient
  reduce-scatter and one parameter all-gather per optimizer step, overlapped with the backward of
  the step's last micro-batch and the forward of the next step's first;
* "fsdp" -- ZeRO-3 (veRL's FSDP actor, NeMo-RL's DTensor policy): everything sharded; each
  micro-batch gathers the params for its forward, recomputed forward and backward.

Model-state bytes per parameter. `optimizer_bytes_per_param` (default 16) is the whole
mixed-precision Adam state per parameter in ZeRO's accounting: bf16 weight (2) + bf16 grad (2) +
fp32 master weight, momentum and variance (12) = 16 B/param.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.catalog.hardware import DTYPE_BYTES, HardwareSpec
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost import comm
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import GB, activation_bytes_per_gpu, weight_bytes_per_gpu
from specsim.cost.roofline import memory_time_s
from specsim.errors import LayoutError, SpecError

TRAIN_DTYPE = "bf16"
#: math dtypes the trainer's GEMMs can run in (Megatron's `fp8_cfg`: fp8 GEMMs, bf16 weights kept)
TRAIN_MATH_DTYPES = ("bf16", "fp8")
#: bf16 weight + bf16 grad per parameter: the part of the model state the distributed optimizer
#: does not shard
WEIGHT_GRAD_BYTES = 4.0
SHARDINGS = ("fsdp", "distributed_optimizer")
#: NeMo-RL `sequence_packing.sequence_length_round`: every packed sequence is padded to a multiple of it
SEQUENCE_ROUND_TOKENS = 64
#: weight-sync methods (world/trainer.py maps the scenario's `nemo_rl` to ipc / nccl_broadcast)
WEIGHT_SYNCS = ("broadcast", "reshard", "ipc", "nccl_broadcast", "none")


# ----------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class TrainingLayout:
    """The trainer's layout on `gpus` GPUs (module docstring). `parallel` is the weight-sharding
    view (tp, pp, ep; bf16 weights), `dp` its replicas (gpus / (max(tp, ep)·pp)); `cp` splits every
    sequence over cp GPUs; `data_parallel` (gpus / (tp·cp·pp)) is Megatron's data parallel.
    `mfu`: the fraction of the math dtype's peak the trainer's GEMM and attention math reaches."""

    gpus: int
    parallel: ParallelLayout
    dp: int
    micro_batch_tokens: int
    mfu: float
    optimizer_bytes_per_param: float = 16.0
    reference_logprob: bool = True
    weight_sync: str = "broadcast"
    logprob_efficiency: float | None = None   # share of peak of the logprob passes (None: mfu)
    sharding: str = "fsdp"                    # fsdp (ZeRO-3) | distributed_optimizer (Megatron, ZeRO-1)
    free: bool = False                        # a counterfactual trainer (what_if.free_trainer): every pass costs 0
    cp: int = 1
    global_batch_samples: int | None = None   # samples per optimizer step (None: one optimizer step per RL step)
    logprob_micro_batch_tokens: int | None = None   # None: micro_batch_tokens
    activation_checkpointing: bool = True
    math_dtype: str = TRAIN_DTYPE
    layer_overhead_s: float = 0.0             # host time of one layer pass (the profile's trainer block)
    moe_layer_overhead_s: float = 0.0         # extra host time of one MoE layer pass
    host_bw_bytes_per_s: float | None = None  # GPU <-> host link, one direction (None: no host transfers priced)

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
        """GPUs of one weight-sharding replica: max(tp, ep)·pp."""
        return self.parallel.gpus

    @property
    def data_parallel(self) -> int:
        """Megatron's data parallel: gpus / (tp·cp·pp) ranks, each running its own micro-batches."""
        return self.gpus // (self.tp * self.cp * self.pp)

    @property
    def expert_data_parallel(self) -> int:
        """Ranks holding the same experts: tp·cp·dp / ep (expert tensor parallel 1)."""
        return max(1, self.tp * self.cp * self.data_parallel // self.ep)

    @property
    def logprob_tokens(self) -> int:
        return int(self.logprob_micro_batch_tokens or self.micro_batch_tokens)

    @property
    def sequence_pad_tokens(self) -> int:
        """Every packed sequence is padded to a multiple of lcm(64, 2·cp·tp) (cp > 1: Megatron's
        load-balanced causal split cuts each sequence into 2·cp chunks, each sequence-parallel over
        tp) or of lcm(64, tp)."""
        unit = 2 * self.cp * self.tp if self.cp > 1 else self.tp
        return int(np.lcm(SEQUENCE_ROUND_TOKENS, unit))

    def __post_init__(self):
        if self.dp < 1 or self.gpus != self.dp * self.parallel.gpus:
            raise SpecError("gpus", self.gpus, f"dp · replica GPUs = {self.dp} · {self.parallel.gpus}")
        if self.cp < 1 or self.gpus % (self.tp * self.cp * self.pp):
            raise SpecError("cp", self.cp, f"a context-parallel degree with tp·cp·pp dividing the {self.gpus} GPUs")
        if self.ep > 1 and (self.tp * self.cp * self.data_parallel) % self.ep:
            raise SpecError("ep", self.ep, f"a divisor of tp·cp·dp = {self.tp * self.cp * self.data_parallel} "
                                           "(the ranks the experts are spread over)")
        if not 0 < self.mfu <= 1:
            raise SpecError("mfu", self.mfu, "in (0, 1]")
        if self.sharding not in SHARDINGS:
            raise SpecError("sharding", self.sharding, " or ".join(SHARDINGS))
        if self.weight_sync not in WEIGHT_SYNCS:
            raise SpecError("weight_sync", self.weight_sync, " or ".join(WEIGHT_SYNCS))
        if self.math_dtype not in TRAIN_MATH_DTYPES:
            raise SpecError("dtype", self.math_dtype, " or ".join(TRAIN_MATH_DTYPES))
        if self.sharding == "distributed_optimizer" and self.optimizer_bytes_per_param < WEIGHT_GRAD_BYTES:
            raise SpecError("optimizer_bytes_per_param", self.optimizer_bytes_per_param,
                            f">= {WEIGHT_GRAD_BYTES:g} (the bf16 weight and grad) with the distributed optimizer")
        if self.micro_batch_tokens < 1 or self.logprob_tokens < 1:
            raise SpecError("micro_batch_tokens", (self.micro_batch_tokens, self.logprob_tokens), ">= 1 each")
        if self.global_batch_samples is not None and self.global_batch_samples < 1:
            raise SpecError("global_batch_samples", self.global_batch_samples, ">= 1 (or null)")
        if self.layer_overhead_s < 0 or self.moe_layer_overhead_s < 0:
            raise SpecError("layer_overhead_s", (self.layer_overhead_s, self.moe_layer_overhead_s), ">= 0 each")

    def describe(self) -> str:
        cp = f" CP={self.cp}" if self.cp > 1 else ""
        return f"{self.parallel.degrees}{cp} DP={self.data_parallel} on {self.gpus} GPUs"


def sequence_tokens(prompt_tokens, response_tokens) -> np.ndarray:
    """Prompt + response tokens of every response: prompt_tokens (groups,), response (groups, n)."""
    p = np.asarray(prompt_tokens, dtype=float)
    r = np.asarray(response_tokens, dtype=float)
    return (r + p.reshape(-1, *([1] * (r.ndim - 1)))).reshape(-1)


def optimizer_steps(tl: TrainingLayout, n_sequences: int) -> int:
    """S = ⌈sequences / global_batch_samples⌉ optimizer steps per RL step (1 without a global batch)."""
    if tl.global_batch_samples is None or n_sequences <= 0:
        return 1
    return max(1, -(-int(n_sequences) // int(tl.global_batch_samples)))


def padded_tokens(tl: TrainingLayout, seq_tokens) -> np.ndarray:
    """Each sequence rounded up to a multiple of `sequence_pad_tokens`."""
    pad = tl.sequence_pad_tokens
    return np.ceil(np.asarray(seq_tokens, dtype=float) / pad) * pad


def packed_bins(lengths, budget: int) -> int:
    """Micro-batches first-fit-decreasing packing (NeMo-RL's `modified_first_fit_decreasing`) needs
    for `lengths` in bins of `budget` tokens B, by FFD's structure: every sequence longer than B/2
    opens its own bin; sequences in (B/3, B/2] go, smallest first, into the smallest such gap that
    holds them, and the rest pair up two to a bin; the sequences up to B/3 fill the free space left
    and open new bins only for what does not fit:
        m = max(⌈Σℓ / B⌉, n_big + ⌈n_medium_left / 2⌉ + ⌈max(0, Σℓ_small − free) / B⌉)
    A sequence longer than B is one micro-batch of its own. It never exceeds exact FFD; on lognormal
    RL batches (log-sd 0.6-1.2, 2,048 sequences) it is exact to 0.3 % except where most sequences
    lie between B/3 and B/2 and the short ones cannot fill the pairs' gaps: up to 6 % fewer
    (tests/cost/test_training_cost.py). Exact FFD is a Python loop per sequence per step."""
    L = np.minimum(np.asarray(lengths, dtype=float), float(budget))
    if L.size == 0:
        return 0
    big = L[L > budget / 2]
    gaps = np.sort(budget - big)
    medium = np.sort(L[(L > budget / 3) & (L <= budget / 2)])
    small = float(L[L <= budget / 3].sum())
    # each medium, smallest first, into the smallest big-bin gap that holds it: the gap it takes is
    # j_i = max(j_{i-1} + 1, first gap ≥ x_i) = i + cummax(first_i − i) (gaps sorted, media ascending,
    # and every gap before j_{i-1} is already below x_i); the first j_i past the gaps stops the filling
    first = np.searchsorted(gaps, medium, side="left")
    taken = np.arange(len(medium)) + np.maximum.accumulate(first - np.arange(len(medium))) if len(medium) else first
    placed = int(np.searchsorted(taken, len(gaps), side="left"))
    gaps[taken[:placed]] -= medium[:placed]
    j = int(taken[placed - 1]) + 1 if placed else 0
    if placed < len(medium):
        j = len(gaps)
    medium = medium[placed:]
    pair_bins = -(-len(medium) // 2)
    free = float(gaps[j:].sum() + gaps[:j].sum()) + pair_bins * budget - float(medium.sum())
    new_bins = int(np.ceil(max(0.0, small - free) / budget))
    return max(int(np.ceil(L.sum() / budget)), len(big) + pair_bins + new_bins)


@dataclass(frozen=True)
class Packing:
    """How one pass's sequences reach the pipeline: `per_rank` micro-batches per data-parallel rank
    per optimizer step, `steps` optimizer steps, `tokens` the padded tokens of the whole step."""

    per_rank: int
    steps: int
    tokens: float
    sq_tokens: float   # Σ ℓ² of the padded sequences (causal attention)


def packing(tl: TrainingLayout, seq_tokens, budget: int, steps: int) -> Packing:
    """The step's padded sequences split into `steps` optimizer steps over `data_parallel` ranks and
    packed into micro-batches of `budget` tokens; per rank the ⌈total / (dp · steps)⌉ bins of the
    whole batch's packing (the ranks receive equal shares of a shuffled batch)."""
    L = padded_tokens(tl, seq_tokens)
    bins = packed_bins(L, budget)
    per_rank = max(1, -(-bins // (tl.data_parallel * steps)))
    return Packing(per_rank, steps, float(L.sum()), float(np.sum(L * L)))


# ----------------------------------------------------------------------------- one pass
@dataclass(frozen=True)
class PassCost:
    """One pass kind (a forward, or a training fwd+bwd) over the step on one data-parallel rank's
    pipeline: `compute_s` the math over all its micro-batches (summed over the stages, divided by
    pp: one stage's share), per micro-batch stage the exposed `tp_comm_s`, `ep_comm_s`, `cp_comm_s`
    and host `overhead_s`; the 1F1B schedule runs (m + pp − 1) stage slots per optimizer step."""

    compute_s: float
    tp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    overhead_s: float
    packing: Packing
    pp: int

    @property
    def per_micro_batch_s(self) -> float:
        """One micro-batch on one stage: its share of the math plus its comm and overhead."""
        m_total = self.packing.per_rank * self.packing.steps
        return self.compute_s / m_total + self.tp_comm_s + self.ep_comm_s + self.cp_comm_s + self.overhead_s

    @property
    def bubble_s(self) -> float:
        """(pp − 1) stage slots of fill and drain per optimizer step."""
        return self.packing.steps * (self.pp - 1) * self.per_micro_batch_s

    @property
    def total_s(self) -> float:
        m_total = self.packing.per_rank * self.packing.steps
        return m_total * self.per_micro_batch_s + self.bubble_s


def _pass_cost(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens, budget: int, steps: int, *,
               efficiency: float, flops_factor: float, comm_passes: float, overhead_passes: float) -> PassCost:
    """A pass over the step's sequences (module docstring's per-micro-batch terms). flops_factor:
    1 forward, 3 fwd+bwd; comm_passes / overhead_passes: how many times a micro-batch pays its
    collectives and host overheads."""
    pk = packing(tl, seq_tokens, budget, steps)
    tp, cp, pp = tl.tp, tl.cp, tl.pp
    dp = tl.data_parallel
    stage = 1.0 / pp
    peak = hw.flops_per_s(tl.math_dtype)
    linear = 2.0 * model.matmul_params_per_token * pk.tokens / dp / (tp * cp)
    attn = 4.0 * model.layers * model.heads * model.prefill_attn_head_dim * pk.sq_tokens / 2.0 / dp / (tp * cp)
    compute = flops_factor * (linear + attn) * stage / (efficiency * peak)
    m_total = pk.per_rank * steps
    tokens_mb = pk.tokens / dp / m_total
    act = DTYPE_BYTES[TRAIN_DTYPE]
    layers_stage = model.layers * stage
    moe_layers = sum(n for n, g in model.layer_groups if g.moe) if model.moe else 0
    moe_stage = moe_layers * stage
    ar_per_layer = 1 + (1 if model.ffn else 0) + (1 if (model.moe and tl.ep == 1) else 0)
    tp_one = float(comm.all_reduce_s(tokens_mb / cp * model.hidden * act, tp, hw)) if tp > 1 else 0.0
    tp_comm = layers_stage * ar_per_layer * tp_one
    ep_comm = 0.0
    if model.moe and tl.ep > 1:
        ep_comm = moe_stage * 2 * float(comm.all_to_all_s(tokens_mb / (tp * cp) * model.moe.top_k * model.hidden * act,
                                                          tl.ep, hw))
    cp_comm = 0.0
    if cp > 1:
        kv = tokens_mb / cp * 2 * max(1.0, model.kv_heads / tp) * model.head_dim * act
        ring = (cp - 1) * float(comm.p2p_s(kv, hw, across_domain=tp * cp > hw.nvlink_domain_gpus))
        attn_mb_layer = attn / model.layers / m_total / (efficiency * peak)   # one layer's forward attention
        cp_comm = layers_stage * max(0.0, ring - attn_mb_layer)
    overhead = layers_stage * tl.layer_overhead_s + moe_stage * tl.moe_layer_overhead_s
    return PassCost(compute, comm_passes * tp_comm, comm_passes * ep_comm, comm_passes * cp_comm,
                    overhead_passes * overhead, pk, pp)


# ----------------------------------------------------------------------------- logprob
def params_bytes_per_gpu(model: ModelSpec, tl: TrainingLayout, dtype: str = TRAIN_DTYPE) -> float:
    """Weight bytes on the trainer's fullest GPU (_params_per_gpu's dense + expert parameters)."""
    return float(sum(_params_per_gpu(model, tl)) * DTYPE_BYTES[dtype])


def reference_swap_s(model: ModelSpec, tl: TrainingLayout) -> float:
    """Swapping the reference weights in and the policy's back (`use_reference_model`: the policy's
    state dict copied to host, the reference's loaded from host, the policy's restored): 3 × the
    GPU's weight bytes over the host link; 0 without a host link in the profile."""
    if tl.host_bw_bytes_per_s is None:
        return 0.0
    return 3.0 * params_bytes_per_gpu(model, tl) / tl.host_bw_bytes_per_s


def logprob_cost(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> PassCost:
    """One logprob forward over every sequence, packed by `logprob_micro_batch_tokens`, pipelined."""
    eff = float(tl.logprob_efficiency if tl.logprob_efficiency is not None else tl.mfu)
    return _pass_cost(model, hw, tl, seq_tokens, tl.logprob_tokens, 1, efficiency=eff, flops_factor=1.0,
                      comm_passes=1.0, overhead_passes=1.0)


def logprob_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> float:
    """Previous-policy logprob (and the reference policy's with `reference_logprob`):
    (1 + reference) · logprob_cost(...).total_s + reference_swap_s(...); the math at
    `logprob_efficiency` (None: the trainer's mfu) of the trainer's math dtype's peak."""
    L = np.asarray(seq_tokens, dtype=float)
    if tl.free or L.size == 0 or L.sum() <= 0:
        return 0.0
    passes = 2 if tl.reference_logprob else 1
    swap = reference_swap_s(model, tl) if tl.reference_logprob else 0.0
    return float(passes * logprob_cost(model, hw, tl, L).total_s + swap)


# ----------------------------------------------------------------------------- train
def train_flops(model: ModelSpec, seq_tokens) -> float:
    """Model FLOPs of fwd+bwd over the sequences:
        6 · (matmul params per token) · Σ L_i  +  12 · layers · n_h · d · Σ L_i²/2
    (matmuls: 2 fwd + 4 bwd per param per token; causal attention QKᵀ and PV: 4·n_h·d per
    query-key pair per layer forward, ×3 for fwd+bwd, Σ L_i²/2 pairs; MLA: d = (qk_nope + qk_rope +
    v_head)/2, the non-absorbed form training runs, ModelSpec.prefill_attn_head_dim)."""
    L = np.asarray(seq_tokens, dtype=float)
    linear = 6.0 * model.matmul_params_per_token * float(L.sum())
    attn = 12.0 * model.layers * model.heads * model.prefill_attn_head_dim * float(np.sum(L * L)) / 2.0
    return linear + attn


@dataclass(frozen=True)
class TrainCost:
    """fwd+bwd of one RL step's policy update and its parts (seconds).

    compute_s: the math over every micro-batch (one stage's share, at mfu); bubble_s: the pipeline
    fill and drain of every optimizer step; tp/ep/cp_comm_s: exposed collectives over every
    micro-batch; overhead_s: the host side of every layer pass; dp_comm_s: the exposed part of the
    data-parallel exchange; optimizer_s: the Adam updates. micro_batches: per data-parallel rank
    over the whole RL step; optimizer_steps: S.
    """

    compute_s: float
    bubble_s: float
    tp_comm_s: float
    ep_comm_s: float
    dp_comm_s: float
    optimizer_s: float
    micro_batches: int
    flops: float
    cp_comm_s: float = 0.0
    overhead_s: float = 0.0
    optimizer_steps: int = 1

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.bubble_s + self.tp_comm_s + self.ep_comm_s + self.cp_comm_s + self.overhead_s
                + self.dp_comm_s + self.optimizer_s)


def optimizer_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, steps: int = 1) -> float:
    """Adam steps, memory-bound: read and write each GPU's sharded model state once per optimizer step,
        steps · 2 · state bytes per GPU (training_memory's) at the achieved HBM bandwidth."""
    return steps * float(memory_time_s(2.0 * model_state_bytes(model, tl), hw))


def _collective_s(nbytes, n: int, span_gpus: int, hw: HardwareSpec, factor: float) -> float:
    """Ring collective over a group of n GPUs whose members span `span_gpus` GPUs (the link is the
    slowest one the span crosses): lat·⌈log2 n⌉ + factor·bytes/bw. factor = (n−1)/n for
    all-gather / reduce-scatter (cost/comm.py)."""
    if n <= 1:
        return 0.0
    bw, lat = comm.link(hw, span_gpus)
    return float(lat * np.ceil(np.log2(n)) + factor * float(nbytes) / bw)


def train_cost(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> TrainCost:
    """fwd+bwd of the policy over every sequence of the step (module docstring).

    Per optimizer step s = 1..S, per data-parallel rank: m micro-batches through 1F1B,
        (m + pp − 1) · t_mb,   t_mb = 3·compute_mb + (2 + ckpt)·(TP + EP + CP comm) + (3 + ckpt)·overhead
    then the data-parallel exchange of the GPU's bf16 weight shard over dp (ag = its all-gather, the
    reduce-scatter costs the same):
        distributed_optimizer: max(0, ag − ⅔·compute_mb) + max(0, ag − ⅓·compute_mb) per optimizer
            step (NeMo-RL's `overlap_grad_reduce` / `overlap_param_gather`: the reduce-scatter runs
            under the last micro-batch's backward, the all-gather under the next step's first forward)
        fsdp: 2 · ag per optimizer step + m · max(0, 3 · ag − compute_mb)   (params gathered for every
            micro-batch's forward, recompute and backward)
    and the Adam update (optimizer_s). The dp group spans all trainer GPUs (link by that span).
    """
    L = np.asarray(seq_tokens, dtype=float)
    flops = train_flops(model, L)
    if L.size == 0 or L.sum() <= 0:
        return TrainCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, flops)
    steps = optimizer_steps(tl, L.size)
    ckpt = 1.0 if tl.activation_checkpointing else 0.0
    pc = _pass_cost(model, hw, tl, L, tl.micro_batch_tokens, steps, efficiency=tl.mfu, flops_factor=3.0,
                    comm_passes=2.0 + ckpt, overhead_passes=3.0 + ckpt)
    m_total = pc.packing.per_rank * steps
    shard = weight_bytes_per_gpu(model, tl.parallel, TRAIN_DTYPE)
    dp = tl.data_parallel
    ag = _collective_s(shard, dp, tl.gpus, hw, (dp - 1) / dp)
    mb_compute = pc.compute_s / m_total
    if tl.sharding == "fsdp":
        dp_comm = steps * 2 * ag + m_total * max(0.0, 3 * ag - mb_compute)
    else:   # overlap_grad_reduce / overlap_param_gather: hidden behind the last backward / first forward
        dp_comm = steps * (max(0.0, ag - mb_compute * 2 / 3) + max(0.0, ag - mb_compute / 3))
    return TrainCost(compute_s=pc.compute_s, bubble_s=pc.bubble_s, tp_comm_s=m_total * pc.tp_comm_s,
                     ep_comm_s=m_total * pc.ep_comm_s, dp_comm_s=dp_comm, optimizer_s=optimizer_s(model, hw, tl, steps),
                     micro_batches=m_total, flops=flops, cp_comm_s=m_total * pc.cp_comm_s,
                     overhead_s=m_total * pc.overhead_s, optimizer_steps=steps)


def train_s(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, seq_tokens) -> float:
    """train_cost(...).total_s (0 for a free trainer, `TrainingLayout.free`)."""
    return 0.0 if tl.free else train_cost(model, hw, tl, seq_tokens).total_s


# ----------------------------------------------------------------------------- memory
def _params_per_gpu(model: ModelSpec, tl: TrainingLayout) -> tuple[float, float]:
    """(dense, expert) parameters on the trainer's fullest GPU: its stage's layers (dense parts over
    tp, routed experts over ep), the embedding (first stage) or LM head (last stage) over tp."""
    par = tl.parallel
    layers_local = int(np.ceil(model.layers / par.pp))
    dense = routed = 0.0
    for count, g in model.layer_groups:
        r = g.moe.experts * g.expert_params if g.moe else 0
        dense += count * (g.layer_params - r) / par.tp
        routed += count * r / max(par.tp, par.ep)
    dense *= layers_local / model.layers
    routed *= layers_local / model.layers
    emb = model.embedding_params / par.tp
    head = 0.0 if model.tied_embeddings else model.lm_head_params / par.tp
    dense += emb + head if par.pp == 1 else max(emb, head)
    return float(dense), float(routed)


def model_state_bytes(model: ModelSpec, tl: TrainingLayout) -> float:
    """Model-state bytes on the fullest trainer GPU:
        fsdp: optimizer_bytes_per_param · params / dp
        distributed_optimizer: 4 · params + (optimizer_bytes_per_param − 4) · (dense / dp + expert / edp)
    dp = Megatron's data parallel, edp = the experts' data parallel (tp·cp·dp / ep): Megatron-Core's
    distributed optimizer shards each parameter's optimizer state over the ranks holding that
    parameter."""
    dense, expert = _params_per_gpu(model, tl)
    dp, edp = tl.data_parallel, tl.expert_data_parallel
    if tl.sharding == "distributed_optimizer":
        rest = tl.optimizer_bytes_per_param - WEIGHT_GRAD_BYTES
        return float(WEIGHT_GRAD_BYTES * (dense + expert) + rest * (dense / dp + expert / edp))
    return float(tl.optimizer_bytes_per_param * (dense / dp + expert / edp))


#: bytes per token per layer of a transformer layer's stored activations under sequence
#: parallelism, divided by tp (Korthikanti et al. 2022, "Reducing Activation Recomputation in
#: Large Transformer Models", Table 2: 34·s·b·h/t with flash attention's softmax not stored)
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 34.0


@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU trainer memory (bytes): model state and peak activations."""

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


def training_memory(model: ModelSpec, hw: HardwareSpec, tl: TrainingLayout, *,
                    gpu_memory_utilization: float | None = None) -> TrainingMemory:
    """Per GPU: state = model_state_bytes(...) and activations for micro-batches of T_mb tokens,
    t = T_mb / (tp·cp) tokens per GPU (sequence and context parallel):
        stored  = (layers/pp) · t · h · 2 B · pp        with activation checkpointing (one layer
                  input per layer for each of the pp micro-batches 1F1B holds on the first stage)
                = (layers/pp) · t · 34 · h · pp          without (Korthikanti et al. 2022, SP)
        working = 2 × cost/memory.activation_bytes_per_gpu(t)   (one layer's working set and its grads)
    The trainer may use the whole HBM (colocated: the engine sleeps and frees its memory during
    training); `resident_budget_bytes` reports HBM·(1 − gpu_memory_utilization)."""
    par = tl.parallel
    state = model_state_bytes(model, tl)
    tok = tl.micro_batch_tokens / (par.tp * tl.cp)
    layers_stage = int(np.ceil(model.layers / par.pp))
    per_token_layer = (model.hidden * DTYPE_BYTES[TRAIN_DTYPE] if tl.activation_checkpointing
                       else ACTIVATION_BYTES_PER_TOKEN_HIDDEN * model.hidden)
    stored = layers_stage * tok * per_token_layer * par.pp
    one_group = ParallelLayout(tp=par.tp, pp=par.pp, ep=min(par.ep, par.tp) if par.ep > 1 else 1,
                               weight_dtype=par.weight_dtype, kv_dtype=par.kv_dtype)
    work = 2.0 * activation_bytes_per_gpu(model, one_group, int(np.ceil(tok)))
    resident = None if gpu_memory_utilization is None else hw.hbm_bytes * (1.0 - gpu_memory_utilization)
    return TrainingMemory(hw.hbm_bytes, float(state), float(stored + work), resident)


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
            f"(what CUDA gives a process on {hw.name}): add training GPUs, raise training.tp/cp/pp or lower training.micro_batch_tokens")
    return mem


# ----------------------------------------------------------------------------- weight sync
def rollout_weight_bytes(model: ModelSpec, rollout: ParallelLayout) -> float:
    """Bytes of the whole policy in the rollout weight dtype (what the engines must receive)."""
    return model.weight_bytes(rollout.weight_bytes)


def weight_sync_s(model: ModelSpec, hw: HardwareSpec, rollout: ParallelLayout, rollout_gpus: int,
                  training_gpus: int, *, method: str = "broadcast", colocated: bool = True,
                  trainer: TrainingLayout | None = None, rollout_hw: HardwareSpec | None = None) -> float:
    """Trainer → rollout engines. B = the rollout shard of one rollout GPU, W = the whole policy,
    both in the rollout dtype. The link is the slowest one the GPUs involved span (colocated: the
    rollout pool; separate pools: both pools together) — NVLink inside one NVLink domain, else the
    per-GPU scale-out NIC.

    reshard:   each rollout GPU all-gathers its shard from the trainer's ZeRO shards over the
               trainer GPUs: t = lat·⌈log2 n⌉ + (n−1)/n · B / bw,  n = trainer GPUs (colocated:
               1/n of it is already local); separate pools: t = lat·⌈log2 n⌉ + B / bw.
    broadcast: pipelined broadcast from the trainer pool to every engine, each GPU receiving its
               shard: t = lat·⌈log2(engines + 1)⌉ + max(B, W/n_train) / bw.
    ipc:       NeMo-RL's colocated refit: every trainer GPU receives the whole model (Megatron-
               Bridge's HF export gathers each tensor over tp/ep and broadcasts it over pp, within
               one trainer model copy of max(tp·cp, ep)·pp GPUs) and hands its engine its shard by
               CUDA IPC: t = all_gather(W, copy) .
    nccl_broadcast: NeMo-RL's separate pools, packed and overlapped (:func:`packed_broadcast_s`).
    none:      a free trainer (what_if.free_trainer): the weights arrive at no cost.

    `hw` is the trainer's profile (the gather within one trainer model copy runs on it);
    `rollout_hw` the engines' when the pools differ (`training.hardware`, separate pools only): the
    transfer between the pools then moves over the slower of the two scale-out networks
    (:func:`specsim.cost.comm.pool_link`), e.g. broadcast(W, n) = lat · ⌈log2 n⌉ + W / bw at that
    link's bw and lat.
    """
    if method == "none":
        return 0.0
    b = weight_bytes_per_gpu(model, rollout)
    total = rollout_weight_bytes(model, rollout)
    span = rollout_gpus if colocated else rollout_gpus + training_gpus
    if colocated and rollout_hw is not None and rollout_hw.name != hw.name:
        raise SpecError("weight_sync", method, f"separate pools with two profiles ({hw.name} trains, "
                                               f"{rollout_hw.name} generates): colocated pools are the same GPUs")
    bw, lat = comm.pool_link(hw, rollout_hw or hw, span)
    if method == "nccl_broadcast":
        return packed_broadcast_s(total, hw, _copy_gpus(training_gpus, trainer), span, rollout_hw=rollout_hw).total_s
    if method == "ipc":
        return float(comm.all_gather_s(total, _copy_gpus(training_gpus, trainer), hw))
    if method == "reshard":
        n = training_gpus
        if colocated:  # 1/n of each shard is already on the GPU
            return 0.0 if n <= 1 else float(lat * np.ceil(np.log2(n)) + (n - 1) / n * b / bw)
        return float(lat * np.ceil(np.log2(max(n, 2))) + b / bw)
    if method != "broadcast":
        raise SpecError("weight_sync", method, " or ".join(WEIGHT_SYNCS))
    engines = max(1, rollout_gpus // rollout.gpus)
    return float(lat * np.ceil(np.log2(engines + 1)) + max(b, total / training_gpus) / bw)


def _copy_gpus(training_gpus: int, trainer: TrainingLayout | None) -> int:
    """GPUs of one trainer model copy, over which the HF export gathers each tensor:
    max(tp·cp, ep)·pp (the whole pool without a layout)."""
    if trainer is None:
        return training_gpus
    return min(trainer.gpus, max(trainer.tp * trainer.cp, trainer.ep) * trainer.pp)


#: NeMo-RL's refit bucket: NRL_REFIT_BUFFER_MEMORY_RATIO (default 0.02) of the GPU's memory, at most
#: 5 GiB (`nemo_rl/utils/packed_tensor.py` `get_target_packed_tensor_size`, v0.4.0 on, PR #1379)
REFIT_BUCKET_MEMORY_RATIO = 0.02
REFIT_BUCKET_MAX_BYTES = 5 * 1024**3


@dataclass(frozen=True)
class PackedBroadcast:
    """NeMo-RL's separate-pool refit of one policy version (:func:`packed_broadcast_s`): the HF
    export on the trainer, the broadcast from trainer rank 0, the number of packed buckets."""

    export_s: float
    broadcast_s: float
    buckets: int

    @property
    def total_s(self) -> float:
        """Two buffers on two CUDA streams overlap the export of bucket k+1 with the broadcast of
        bucket k: the slower side, plus one bucket of the faster one (pipeline fill and drain)."""
        fast, slow = sorted((self.export_s, self.broadcast_s))
        return slow + fast / self.buckets


def packed_broadcast_s(weight_bytes: float, hw: HardwareSpec, copy_gpus: int, span_gpus: int, *,
                       rollout_hw: HardwareSpec | None = None) -> PackedBroadcast:
    """NeMo-RL's refit between separate pools (`weight_sync: nemo_rl`, async), as v0.4.0 on runs it
    (`megatron_policy_worker.broadcast_weights_for_collective` → `utils/packed_tensor.py`
    `packed_broadcast_producer`; the vLLM side `packed_broadcast_consumer`):

    * one NCCL communicator holds every trainer and every rollout GPU (PR #1264); every trainer
      rank runs Megatron-Bridge's HF export (`export_hf_weights`: each tensor broadcast from its
      pipeline stage to all pp ranks, gathered over tp and over ep), so each ends with the whole
      policy W, and trainer rank 0 broadcasts it (src=0) to the group;
    * the tensors are packed into buckets of b = min(0.02 · GPU memory, 5 GiB) (PR #1379), two
      buffers on two streams: the export of the next bucket overlaps the broadcast of this one
      (:attr:`PackedBroadcast.total_s`).

    Export, over one model copy of c = `copy_gpus` GPUs: inside one NVLink domain an all-gather
    of W (:func:`specsim.cost.comm.all_gather_s`); across hosts each host lacks W · (1 − g/c) of
    the copy (g = its GPUs) and receives it over all its NICs (every GPU fetches its own tp/ep
    position's shard over its own NIC): t = hop_lat(c) + node_scaleout(W · (1 − g/c)).
    Broadcast, ring over the `span_gpus` GPUs of both pools: per bucket the ring's latency, and W
    crosses each host boundary once over the host's NICs: t = n_b · hop_lat(span) +
    node_scaleout(W) (NVLink bandwidth when both pools fit one NVLink domain of one profile).
    Not priced: the export's per-tensor host work (format conversion, the copy into the bucket).
    """
    bucket = min(REFIT_BUCKET_MEMORY_RATIO * hw.hbm_bytes, REFIT_BUCKET_MAX_BYTES)
    buckets = max(1, int(np.ceil(weight_bytes / bucket)))
    g = comm.node_gpus(hw)
    if copy_gpus <= hw.nvlink_domain_gpus:
        export = float(comm.all_gather_s(weight_bytes, copy_gpus, hw))
    else:
        export = comm.hop_latency_s(hw, copy_gpus) + float(comm.node_scaleout_s(weight_bytes * (1 - g / copy_gpus), hw))
    if span_gpus <= 1:
        return PackedBroadcast(export, 0.0, buckets)
    one_domain = (rollout_hw is None or rollout_hw.name == hw.name) and span_gpus <= hw.nvlink_domain_gpus
    if one_domain:
        bw, _ = comm.link(hw, span_gpus)
        wire = weight_bytes / bw
    else:
        wire = float(comm.node_scaleout_s(weight_bytes, hw, rollout_hw))
    lat = max(comm.hop_latency_s(h, span_gpus) for h in (hw, rollout_hw or hw))
    return PackedBroadcast(export, buckets * lat + wire, buckets)


def offload_onload_s(model: ModelSpec, tl: TrainingLayout) -> float:
    """Colocated only: the trainer's model state leaves the GPU before generation and returns
    before the logprob and training (NeMo-RL `offload_before_refit` + `offload_after_refit`, then
    `prepare_for_lp_inference` / `prepare_for_training`): 2 · model_state_bytes / host link
    bandwidth; 0 without a host link in the profile or for a free trainer."""
    if tl.host_bw_bytes_per_s is None or tl.free:
        return 0.0
    return 2.0 * model_state_bytes(model, tl) / tl.host_bw_bytes_per_s


def refit_s(model: ModelSpec, hw: HardwareSpec, rollout: ParallelLayout, rollout_gpus: int, tl: TrainingLayout, *,
            colocated: bool, rollout_hw: HardwareSpec | None = None) -> float:
    """The "prepare" side of a step that new weights cost: weight_sync_s(method = the trainer's
    `weight_sync`) plus, colocated, offload_onload_s. `hw`: the trainer's profile; `rollout_hw`:
    the engines' when it differs (weight_sync_s)."""
    t = weight_sync_s(model, hw, rollout, rollout_gpus, tl.gpus, method="none" if tl.free else tl.weight_sync,
                      colocated=colocated, trainer=tl, rollout_hw=rollout_hw)
    return float(t + (offload_onload_s(model, tl) if colocated else 0.0))


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
