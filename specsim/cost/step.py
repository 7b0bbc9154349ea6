"""One engine step's cost: decode, SD (chain or tree) and the step-cost table the engines read.

A step composes the passes of cost/forward.py with the SD terms of cost/sd_costs.py (rejection
sampling, the n-gram CPU proposer, eager launches past the captured CUDA graphs, the two fittable
SD overheads) and the efficiency block's fixed per-step and per-sequence overheads. Every step
is affine in the batch's total context C, so the engines integrate segments of steps in closed
form from the table's two coefficients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import DrafterArch, ModelSpec
from specsim.cost.forward import PassCost, decode_cost, draft_cost, pass_cost, ragged_pass_times_s, sampler_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.sd_costs import eager_overhead_s, ngram_cpu_s, ngram_cpu_s_per_ctx_token, piecewise_overhead_s

__all__ = ["DraftPasses", "StepCostTable", "StepWhatIf", "mixed_step_time_s", "step_cost", "step_cost_table",
           "tree_step_cost"]


@dataclass(frozen=True)
class StepWhatIf:
    """Counterfactual pricing of an SD step (the scenario's `what_if:` section; all off = the real step).

    * `verify_as_decode`: the verify pass, its rejection sampler and the per-SD-step overhead are
      priced as one decode pass with its sampler (the draft passes stay);
    * `verify_experts_as_decode`: the verify reads only the experts a decode of the same batch
      hits (MoE; forward.pass_cost `expert_tokens_per_seq`): the expert-coverage premium removed;
    * `free_drafting`: the draft passes and their per-pass overhead cost nothing;
    * `decodes_per_k` c: the whole SD step at k costs (1 + c·k) decode steps (both affine
      coefficients scaled), at every batch; c = 0 is the acceptance ceiling (SD step = decode step).
    With `verify_as_decode` and `free_drafting` together an SD step costs exactly a decode step."""

    verify_as_decode: bool = False
    verify_experts_as_decode: bool = False
    free_drafting: bool = False
    decodes_per_k: float | None = None

    @property
    def active(self) -> bool:
        return self.verify_as_decode or self.verify_experts_as_decode or self.free_drafting \
            or self.decodes_per_k is not None


_REAL = StepWhatIf()


def _sd_step(model: ModelSpec, drafter: DrafterArch, hw: HardwareSpec, layout: ParallelLayout, n: np.ndarray,
             passes: list[tuple[float, float]], draft_tokens: float, proposal_rate: float = 1.0,
             what_if: StepWhatIf = _REAL) -> PassCost:
    """Draft passes (q, logits per sequence; the first is the fused one) for the n·p proposing
    sequences, one verify over the actual query tokens n·(1 + p·draft_tokens) (a request without
    a draft is verified with q = 1), rejection sampling over those rows, eager launches, the SD
    overheads; an n-gram proposer searches all n requests (found or not), and a batch mixing
    drafting and non-drafting requests runs piecewise CUDA graphs (`piecewise_overhead_s`)."""
    eff, sd = hw.efficiency, hw.sd_costs
    dp = layout.attn_dp
    p = float(proposal_rate)
    drafted = p * draft_tokens   # expected draft tokens per sequence
    q_verify = drafted + 1.0
    if what_if.verify_as_decode:   # the verify (+ its sampler, + the SD step overhead) priced as a decode
        cost = decode_cost(model, hw, layout, n) + sampler_cost(model, hw, n, 1.0)
        cost = cost.plus_overhead(eager_overhead_s(n / dp, model.layers, sd))
    else:
        cost = pass_cost(model, hw, layout, n, q_verify, q_verify,
                         expert_tokens_per_seq=1.0 if what_if.verify_experts_as_decode else None)
        cost = cost.plus_overhead(eager_overhead_s(n * q_verify / dp, model.layers, sd))
        cost = cost.plus_overhead(piecewise_overhead_s(n / dp, p, n * q_verify / dp, model.layers, sd))
    dm = drafter.model
    if dm is not None:
        n_prop = n * p
        if not what_if.free_drafting:
            for i, (q, logits) in enumerate(passes):
                one = draft_cost(drafter, hw, layout, n_prop, q, first=(i == 0), logits_per_seq=logits)
                cost = cost + one.plus_overhead(eager_overhead_s(n_prop * q / dp, dm.layers, sd))
        if not what_if.verify_as_decode:
            cost = cost + sampler_cost(model, hw, n, q_verify, drafted, dm.vocab)
        if not what_if.free_drafting:   # (in this order: the real step's sums bit for bit as before)
            cost = cost.plus_overhead(len(passes) * eff.draft_overhead_s)
    elif what_if.verify_as_decode:
        cost = cost.plus_overhead(0.0 if what_if.free_drafting else ngram_cpu_s(n, sd))
        if not what_if.free_drafting:
            cpu = ngram_cpu_s_per_ctx_token(sd)
            cost = PassCost(cost.fixed_s, cost.per_ctx_token_s + cpu, cost.compute_s, cost.memory_s, cost.comm_s,
                            cost._ctx_compute, cost._ctx_memory)
    else:
        cost = cost + sampler_cost(model, hw, n, q_verify)
        if not what_if.free_drafting:
            cpu = ngram_cpu_s_per_ctx_token(sd)
            cost = PassCost(cost.fixed_s, cost.per_ctx_token_s + cpu, cost.compute_s, cost.memory_s, cost.comm_s,
                            cost._ctx_compute, cost._ctx_memory).plus_overhead(ngram_cpu_s(n, sd))
    sd_overhead = 0.0 if what_if.verify_as_decode else sd.sd_step_overhead_s
    return cost.plus_overhead(sd_overhead + eff.step_overhead_s + eff.per_seq_overhead_s * n)


def _first_q(first_pass_q, most: float) -> float:
    q1 = 1.0 if first_pass_q is None else float(first_pass_q)
    if not 1.0 <= q1 <= most:
        raise ValueError(f"first_pass_q must be in [1, {most:g}], got {q1}")
    return q1


def step_cost(model: ModelSpec, drafter: DrafterArch | None, hw: HardwareSpec, layout: ParallelLayout,
              n_seqs, k: int, first_pass_q: float | None = None, proposal_rate: float = 1.0,
              what_if: StepWhatIf = _REAL) -> PassCost:
    """One engine step for a batch of n sequences, as vLLM runs it, plus the fixed step overhead
    and a per-sequence overhead (efficiency block).

    k = 0: one decode pass + its sampler (+ eager launches past the captured CUDA-graph sizes).
    k > 0: k sequential draft passes (the first over `first_pass_q` tokens per sequence: the
    expected tokens emitted per step, τ at k, which resolve passes for a drafter that catches up
    on the accepted tokens, `DrafterArch.catches_up_on_accepted`; default 1) + one verify pass
    over k+1 tokens + rejection sampling over n·(k+1) full-vocabulary rows + eager launches for
    any pass over more tokens than the largest captured graph + the two fittable SD overheads
    (k·draft_overhead_s, sd_step_overhead_s) + for an n-gram drafter its CPU proposer,
    n·ngram_request_overhead_s + Σ context / ngram_cpu_tokens_per_s. `proposal_rate` p: only a
    share p of the sequences carries a draft (n-gram: a match was found); the verify is priced
    on its expected query tokens n·(1 + p·k), the draft passes on n·p sequences (the step time
    at the expected proposing count; both engines use it). Draft passes are priced at the verify's context (the
    +j·n tokens drafted so far are a second-order term). Sources: cost/sd_costs.py.
    """
    n = np.asarray(n_seqs, dtype=float)
    eff, sd = hw.efficiency, hw.sd_costs
    if k == 0 or drafter is None:
        cost = decode_cost(model, hw, layout, n) + sampler_cost(model, hw, n, 1.0)
        cost = cost.plus_overhead(eager_overhead_s(n / layout.attn_dp, model.layers, sd))
        return cost.plus_overhead(eff.step_overhead_s + eff.per_seq_overhead_s * n)
    q1 = _first_q(first_pass_q, k + 1.0)
    return _sd_step(model, drafter, hw, layout, n, [(q1, 1.0)] + [(1.0, 1.0)] * (k - 1), float(k), proposal_rate,
                    what_if)


def mixed_step_time_s(model: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, n_decode, ctx_per_seq,
                      n_prompts, prompt_tokens, separate: bool = False):
    """One engine step of n_decode (> 0) decoding sequences of mean context ctx_per_seq that also
    prefills n_prompts prompts of prompt_tokens tokens each (arrays broadcast; n_prompts may be
    fractional: an expected count). The decode step (`step_cost`, k = 0, with its overheads) plus
    the prefill's marginal cost:

    * mixed (`separate=False`; chunked prefill / in-flight batching: vLLM V1, TensorRT-LLM): the
      prompts ride in the same forward pass -- one ragged pass over n_decode single tokens and
      the prompt tokens (GEMMs and MoE over all n_decode + n_prompts·prompt_tokens tokens at the
      fitted GEMM law, decode attention over the cache, causal attention among the prompt
      tokens), minus the decode-only pass. With no prompt it is the decode step exactly; when
      the prompt tokens dominate, the GEMMs turn compute-bound and the marginal tends to the
      prompts' FLOPs at the plateau rate (the weights are read once for both);
    * separate (`separate=True`; SGLang's default: prefill and decode batches alternate, mixed
      chunks off): a prefill pass of its own over the prompts (its own weight read) is added.
    """
    n = np.asarray(n_decode, dtype=float)
    k = np.asarray(n_prompts, dtype=float)
    q = np.asarray(prompt_tokens, dtype=float)
    c = np.asarray(ctx_per_seq, dtype=float)
    n, k, q, c = np.broadcast_arrays(n, k, q, c)
    dec = np.asarray(step_cost(model, None, hw, layout, n, 0).time_s(n * c), dtype=float)
    has = k > 0
    ks = np.where(has, k, 1.0)
    if separate:
        extra = ragged_pass_times_s(model, hw, layout, ks, ks * q, ks * q * q, 0.0 * q, 0.0 * q, ks)
    else:
        mixed = ragged_pass_times_s(model, hw, layout, n + ks, n + ks * q, n + ks * q * q, n * c, n * c, n + ks)
        alone = ragged_pass_times_s(model, hw, layout, n, n, n, n * c, n * c, n)
        extra = mixed - alone
    out = dec + np.where(has, extra, 0.0)
    return float(out) if out.ndim == 0 else out


class DraftPasses(Protocol):
    """What pricing a drafted tree needs of its shape (workload/acceptance/shapes.DraftShape has it):
    `depth` D sequential draft passes, `tokens` T draft tokens verified per sequence, and
    `draft_passes()`, the (tokens, logit rows) per sequence of draft passes 2..D."""

    @property
    def depth(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    def draft_passes(self) -> list[tuple[float, float]]: ...


def tree_step_cost(model: ModelSpec, drafter: DrafterArch, hw: HardwareSpec, layout: ParallelLayout,
                   n_seqs, tree: DraftPasses, first_pass_q: float | None = None,
                   what_if: StepWhatIf = _REAL) -> PassCost:
    """One tree-drafting step of `tree` (a full tree or SGLang's beam tree, workload/acceptance/shapes.py).

    Draft passes: the first over the accepted tokens (one logit row per sequence, whose top
    children are the first depth), then D - 1 passes -- a full tree's pass j over the
    N_{j-1} = b_1...b_{j-1} nodes of the previous depth, SGLang's over its K beam nodes (B·K
    tokens, K logit rows per sequence). Verify: one pass over the T + 1 tree tokens per sequence
    with a tree attention mask -- KV of the context read once per sequence, GEMMs over B·(T + 1)
    tokens (forward.pass_cost; attention among the new tokens priced as causal, a slight
    over-estimate) -- then rejection sampling over T + 1 rows, eager launches and the SD overheads
    as in `step_cost`. A chain (all b = 1, or K = 1 with T = D) costs exactly `step_cost` at k = D."""
    if drafter.model is None:
        raise ValueError("tree drafting needs a drafter with a GPU pass (not n-gram)")
    depth, later, tokens = int(tree.depth), list(tree.draft_passes()), float(tree.tokens)
    q1 = _first_q(first_pass_q, depth + 1.0)
    return _sd_step(model, drafter, hw, layout, np.asarray(n_seqs, dtype=float), [(q1, 1.0)] + later, tokens,
                    what_if=what_if)


@dataclass(frozen=True)
class StepCostTable:
    """Affine step-cost coefficients for every batch size 0..max_batch and draft length in `ks`.

    step time for n sequences at draft length k and total context C:
        fixed_s[i, n] + per_ctx_s[i, n] · C,  i = ks.index(k)
    Row n=0 is zero. Built once per engine configuration; the engines and the adaptive SD policy
    read it instead of re-pricing passes.
    """

    ks: tuple[int, ...]
    fixed_s: np.ndarray
    per_ctx_s: np.ndarray

    def index(self, k: int) -> int:
        return self.ks.index(k)

    def step_s(self, k: int, n: int, total_ctx_tokens: float) -> float:
        i = self.ks.index(k)
        return float(self.fixed_s[i, n] + self.per_ctx_s[i, n] * total_ctx_tokens)

    def sd_over_decode(self, k: int, batch: float, ctx_per_seq: float) -> float:
        """SD step at k ÷ decode step at a (fractional: linear between the integer rows) batch of
        `batch` sequences of `ctx_per_seq` context tokens each; τ ÷ this is the per-token SD gain there."""
        top = self.fixed_s.shape[1] - 1
        b = min(max(float(batch), 1.0), float(top))
        lo = math.floor(b)
        hi = min(lo + 1, top)
        w = b - lo if hi > lo else 0.0

        def at(kk: int) -> float:
            return (1 - w) * self.step_s(kk, lo, lo * ctx_per_seq) + w * self.step_s(kk, hi, hi * ctx_per_seq)
        return at(k) / at(0)


def step_cost_table(model: ModelSpec, drafter: DrafterArch | None, hw: HardwareSpec, layout: ParallelLayout,
                    max_batch: int, ks, first_pass_q: dict[int, float] | None = None,
                    tree: DraftPasses | None = None, proposal_rate: float = 1.0,
                    what_if: StepWhatIf = _REAL) -> StepCostTable:
    """The table for every k in `ks` (and 0). `first_pass_q[k]`: tokens per sequence of the first
    draft pass at draft length k (the expected tokens emitted per step, τ at k; default 1).
    `tree` (see `tree_step_cost`): the row k = D prices that tree instead of a chain. `proposal_rate`: the share of request-steps with a draft (`step_cost`).
    `what_if`: counterfactual SD-step pricing (:class:`StepWhatIf`); the k = 0 row is always the real decode step."""
    ks = tuple(sorted({int(k) for k in ks} | {0}))
    q1 = first_pass_q or {}
    depth = None if tree is None else tree.depth
    n = np.arange(max_batch + 1, dtype=float)
    fixed = np.zeros((len(ks), max_batch + 1))
    per_ctx = np.zeros((len(ks), max_batch + 1))
    for i, k in enumerate(ks):
        if tree is not None and k == depth and drafter is not None:
            c = tree_step_cost(model, drafter, hw, layout, n[1:], tree, q1.get(k), what_if=what_if)
        else:
            c = step_cost(model, drafter, hw, layout, n[1:], k, q1.get(k), proposal_rate, what_if=what_if)
        fixed[i, 1:] = c.fixed_s
        per_ctx[i, 1:] = c.per_ctx_token_s
    if what_if.decodes_per_k is not None:   # SD step at k = (1 + c·k) decode steps, both coefficients
        i0 = ks.index(0)
        for i, k in enumerate(ks):
            if k:
                fixed[i] = (1.0 + what_if.decodes_per_k * k) * fixed[i0]
                per_ctx[i] = (1.0 + what_if.decodes_per_k * k) * per_ctx[i0]
    return StepCostTable(ks, fixed, per_ctx)
