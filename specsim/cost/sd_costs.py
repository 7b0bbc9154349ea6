"""SD costs the serving engine pays besides the draft and verify passes (vLLM V1 semantics).

The passes themselves are priced by cost/forward.py (`step_cost`): k sequential draft passes (the
first over the tokens just accepted, q = accepted + 1 per sequence, with EAGLE-3's feature
fusion; the rest q = 1 without it), one verify pass over k + 1 query tokens per sequence (KV read
once, GEMMs and MoE over B·(k+1) tokens, KV written for all k + 1 slots, rejected ones included).
This module holds the rest, each term derived from the work it does:

* rejection sampling (:func:`rejection_sampling_bytes`): vLLM's rejection sampler turns the
  target logits of all B·(k+1) positions into probabilities and compares them with the draft's:
  about ``sampler_passes`` streaming passes over B·(k+1)·V fp32 values (softmax read/write, the
  accept/resample read), plus the draft probabilities (B·k·V_draft fp32, one pass). Plain
  decoding pays the same for B rows (its sampler), so the two are priced alike.
* the n-gram proposer (:func:`ngram_cpu_s`): in vLLM 0.10-0.11 (the versions NeMo-RL ran)
  gpu_model_runner's ``propose_ngram_draft_token_ids`` loops over the running requests in
  Python ("# TODO(woosuk): Optimize."), skips requests with no sampled token or at the model
  length, and calls ``NgramProposer.propose`` on each request's token ids; that is a numba KMP
  pass over the reversed history (``while i < total_token``) which returns an empty array when
  no n-gram of length in [min_n, max_n] matches, and the request then gets ``[]`` (no draft).
  So every decoding request pays the search, found or not: a fixed per-request cost (the Python
  iteration, slicing, the jitted call, ``tolist``) plus a per-context-token scan. It runs on the
  CPU after sampling (it needs the sampled ids on the host) and before the next verify can
  launch: sequential with the GPU, t = n · ngram_request_overhead_s + Σ context / rate, affine
  in C like every other step term. Measured scale (vLLM PR #13365,
  https://github.com/vllm-project/vllm/pull/13365): numba brought the cumulative proposer time
  of a 5K-request ShareGPT run from 54.3 s to 1.9 s (~2.5 % of the run); no per-request
  figure was published, so both coefficients below are labelled priors.
* CUDA graphs (:func:`eager_overhead_s`): vLLM captures graphs for batches up to
  ``cuda_graph_max_tokens`` tokens (default capture sizes up to 512). A pass with more tokens
  runs eagerly and pays a launch overhead per layer that is not hidden; a verify pass of
  256 sequences at k = 3 (1024 tokens) is such a pass, a decode step of 256 sequences is not.
* Piecewise graphs for non-uniform batches (:func:`piecewise_overhead_s`): under vLLM's
  FULL_AND_PIECEWISE CUDA-graph mode (vLLM PR #20059,
  https://github.com/vllm-project/vllm/pull/20059) a *uniform* decode batch -- every request
  with the same query length, 1 for plain decoding and 1 + k for a verify where every request
  drafted k tokens -- replays one full graph, attention included; any other batch runs piecewise
  graphs with each layer's attention launched outside the graph (the PR reports decode ITL 38 %
  lower with full graphs for small models). A drafter that may propose nothing (n-gram: a share
  p of the requests per step) makes the verify batch non-uniform unless all n requests drafted
  or none did: probability 1 − pⁿ − (1 − p)ⁿ, and such a step pays layers ·
  piecewise_layer_overhead_s. Model drafters (p = 1) keep the batch uniform and never pay it.

Two SD-overhead parameters are FITTABLE (calibration may fit them, on the two EAGLE-3 k = 3
rows only); everything else here is derived or a documented prior that no fit touches:

1. ``sd_step_overhead_s`` (this block): fixed CPU time of one SD step beyond a decode step's
   (proposer input preparation, spec-decode metadata, accepted-token bookkeeping).
2. ``efficiency.draft_overhead_s`` (the profile's efficiency block, already there): fixed time
   of one draft pass (its launches and the proposal bookkeeping).

Profiles carry an optional ``sd_costs:`` block (units in the key names, each value with its
source); absent keys take the priors below.
"""

from __future__ import annotations

import numpy as np

from specsim.catalog.sd_costs import SDCosts

#: fp32 probabilities in the sampler
PROB_BYTES = 4.0


def sampler_bytes(n_seqs, rows_per_seq: float, vocab: int, sd: SDCosts, draft_rows_per_seq: float = 0.0,
                  draft_vocab: int = 0):
    """HBM bytes the sampler streams for n sequences: target rows n·rows·V·4·passes (+ draft
    probabilities n·draft_rows·V_draft·4, one pass). Decode: rows = 1; SD verify: rows = k + 1."""
    n = np.asarray(n_seqs, dtype=float)
    return n * (rows_per_seq * vocab * PROB_BYTES * sd.sampler_passes + draft_rows_per_seq * draft_vocab * PROB_BYTES)


def ngram_cpu_s_per_ctx_token(sd: SDCosts) -> float:
    """CPU seconds per context token per step of the n-gram proposer (it scans every running
    sequence's whole history each step): 1 / ngram_cpu_tokens_per_s."""
    return 1.0 / sd.ngram_cpu_tokens_per_s


def ngram_cpu_s(n_seqs, sd: SDCosts):
    """The n-gram proposer's fixed CPU seconds per step for n running requests (every request is
    searched, whether a match is found or not): n · ngram_request_overhead_s. The per-context
    term is :func:`ngram_cpu_s_per_ctx_token`."""
    return np.asarray(n_seqs, dtype=float) * sd.ngram_request_overhead_s


def eager_overhead_s(pass_tokens, layers: int, sd: SDCosts):
    """Launch overhead of a pass of `pass_tokens` tokens: layers·eager_layer_overhead_s when it
    exceeds the largest captured CUDA graph, else 0 (vectorised over pass_tokens)."""
    t = np.asarray(pass_tokens, dtype=float)
    return np.where(t > sd.cuda_graph_max_tokens, layers * sd.eager_layer_overhead_s, 0.0)


def piecewise_overhead_s(n_seqs, proposal_rate: float, pass_tokens, layers: int, sd: SDCosts):
    """Expected overhead of a verify batch that is not uniform (see the module docstring): with n
    requests each drafting with probability p, P(non-uniform) = 1 − pⁿ − (1 − p)ⁿ, times
    layers·piecewise_layer_overhead_s; 0 for p = 1, for n ≤ 1, and for a pass already past the
    captured sizes (it runs eagerly and pays :func:`eager_overhead_s` instead)."""
    n = np.asarray(n_seqs, dtype=float)
    p = float(proposal_rate)
    if p >= 1.0:
        return np.zeros_like(n)
    mixed = np.where(n > 1.0, 1.0 - p ** n - (1.0 - p) ** n, 0.0)
    graphed = np.asarray(pass_tokens, dtype=float) <= sd.cuda_graph_max_tokens
    return np.where(graphed, mixed * layers * sd.piecewise_layer_overhead_s, 0.0)
