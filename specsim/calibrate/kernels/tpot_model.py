"""TPOT of a fixed-concurrency serving benchmark row, priced as the engine's mixed steps.

The TPOT rows of `silicon_sample.csv` are closed-loop benchmarks (aiperf / genai-perf style,
`silicon_concurrency=N` in the row's source): N clients each send a request (isl prompt tokens,
osl output tokens), wait for its last token and send the next one at once. TPOT is a request's
(e2e − TTFT)/(osl − 1): the mean time between its tokens, i.e. the mean engine step while it
decodes. Every client cycles through TTFT + (osl − 1) decode steps, so in steady state, counting
in steps of mean length t (the TPOT):

    S   = (osl − 1) + TTFT / t          steps per client cycle (TTFT is the row's measured value)
    λ   = N / S                         prompts that enter per step
    n_d = min(B, 1 + (N − 1) · (osl − 1) / S)   sequences decoding in a step a request sees while it
                                        decodes: itself and each other client with probability
                                        (osl − 1)/S (B = batch_size, the engine's running batch;
                                        N > B only where requests queue)

and the mean step is priced as the engine runs it (cost.step.mixed_step_time_s): prompts are
admitted whole up to the step token budget, so a share λ / k of the steps carries k = clip(λ,
1, budget / isl) prompts and the rest are decode-only steps:

    t = dec(n_d) + (N − 1)/N · λ · δ(n_d, k) + step_overhead + per_seq_overhead · n_d

δ(n_d, k) = (mixed step with k prompts − decode step) / k: one ragged forward pass of n_d decode
tokens and k·isl prompt tokens for vLLM V1 (chunked prefill) and TensorRT-LLM (in-flight
batching); a separate prefill pass for SGLang (prefill and decode batches alternate by default).
(N − 1)/N, and the 1 + in n_d: TPOT is measured from inside a decoding request. Its own prefill
ends with its first token, inside its TTFT, so the steps between its tokens carry only the other
N − 1 clients' prompts, (N − 1)/S per step, and it is itself always among the decoders (a row at
concurrency 1 is the pure decode step at batch 1). λ itself sets how many prompts share a mixed step.
No share of the prefill is fitted: the prefill enters with its full priced cost, and the measured
TTFT only sets how often prompts arrive (a row whose TTFT is long -- queueing -- brings fewer
prompts per decode step). t appears on both sides (through S); the fixed point is found by
iteration from above (t ↦ RHS is increasing and bounded).

Only step_overhead and per_seq_overhead are fitted (engine_overhead.fit_overheads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.catalog.models import load_model
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import mixed_step_time_s
from specsim.errors import SpecError

#: tokens one engine step admits: vLLM V1 `max_num_batched_tokens` (8192 when serving on a GPU of
#: >= 70 GiB, vllm/engine/arg_utils.py `_set_default_args`), TensorRT-LLM `max_num_tokens` (8192,
#: tensorrt_llm/llmapi/llm_args.py), SGLang `chunked_prefill_size` (8192 on 80-141 GB GPUs,
#: sglang/srt/server_args.py). Every isl of the rows is <= 8192, so a prompt is never chunked; the
#: budget only caps how many whole prompts share a step
STEP_TOKEN_BUDGET = 8192
#: backends whose default scheduler runs prefill batches apart from decode batches (SGLang:
#: `--enable-mixed-chunk` off by default); the others mix prompts into the decode step
SEPARATE_PREFILL = frozenset({"sglang"})
#: decoding share grid n_d / B on which the steps are priced per row (interpolated between)
SHARE_GRID = np.geomspace(1.0 / 64.0, 1.0, 25)
PROMPT_GRID_POINTS = 9
#: fixed-point iterations (t from the TTFT = 0 bound downwards; converges in a few)
ITERATIONS = 40


@dataclass(frozen=True)
class RowPricing:
    """Per-row step prices on a (decoding share, prompts per step) grid, and the benchmark
    setting (batch B, clients N, isl, osl, measured TTFT); `tpot_s(s0, s1)` solves the closed
    loop. Rows whose layout does not fit the model have NaN prices (`ok` False)."""

    batch: np.ndarray
    clients: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    ttft_s: np.ndarray
    dec_s: np.ndarray  # [rows, G]: decode step (no engine overheads) at n_d = B · SHARE_GRID
    per_prompt_s: np.ndarray  # [rows, G, K]: δ, marginal step time per prompt with k prompts per step
    prompts: np.ndarray  # [rows, K]: the k grid (prompts per mixed step)
    separate: np.ndarray  # [rows] bool: prefill as a separate pass

    @property
    def ok(self) -> np.ndarray:
        return np.isfinite(self.dec_s[:, -1])

    def solve(self, s0: float, s1: float) -> dict[str, np.ndarray]:
        """The closed-loop fixed point per row: tpot_s, n_decode, prompts_per_step (λ), decode_s
        (dec(n_d)), prefill_s (λ·δ: the prefill's share of the mean step)."""
        steps_dec = np.maximum(self.osl - 1.0, 1.0)
        ttft = np.where(np.isfinite(self.ttft_s), self.ttft_s, 0.0)
        t = None
        out = {}
        for _ in range(ITERATIONS):
            s = steps_dec + (0.0 if t is None else ttft / t)
            lam = self.clients / s
            nd = self._decoding(steps_dec, s)
            share = np.clip(nd / self.batch, SHARE_GRID[0], 1.0)
            dec, delta = self._at(share, lam)
            seen = lam * self._others()
            out = {"n_decode": nd, "prompts_per_step": lam, "decode_s": dec, "prefill_s": seen * delta}
            t_new = dec + seen * delta + s0 + s1 * nd
            if t is not None and np.nanmax(np.abs(t_new / t - 1.0)) < 1e-9:
                t = t_new
                break
            t = t_new
        out["tpot_s"] = t
        return out

    def prefill_share(self, tpot_s: np.ndarray) -> np.ndarray:
        """Priced prefill time per step over the step, λ·δ / t, at a given (measured) TPOT: above 1
        the row's prompt throughput exceeds what the priced uncached prefill allows -- the steady
        state the row claims cannot hold unless prompts skipped their prefill (prefix-cache hits)."""
        t = np.asarray(tpot_s, dtype=float)
        steps_dec = np.maximum(self.osl - 1.0, 1.0)
        ttft = np.where(np.isfinite(self.ttft_s), self.ttft_s, 0.0)
        s = steps_dec + ttft / t
        lam = self.clients / s
        nd = self._decoding(steps_dec, s)
        _, delta = self._at(np.clip(nd / self.batch, SHARE_GRID[0], 1.0), lam)
        return lam * self._others() * delta / t

    def prefill_alone_s(self) -> np.ndarray:
        """The row's own prompt prefilled as one pass with (almost) no decoders beside it and no
        engine overheads: the mixed step at the smallest decoding share with the smallest prompt
        count (one whole prompt). A request's TTFT contains at least this pass, so a measured TTFT
        below it means the prefill is over-priced (`KernelCalibration.ttft_bound_table`); it is
        never fitted."""
        return self.dec_s[:, 0] + self.per_prompt_s[:, 0, 0] * self.prompts[:, 0]

    def _decoding(self, steps_dec: np.ndarray, s: np.ndarray) -> np.ndarray:
        """n_d: the decoding request itself and each other client that is decoding, capped at B."""
        return np.minimum(self.batch, 1.0 + np.maximum(self.clients - 1.0, 0.0) * steps_dec / s)

    def _others(self) -> np.ndarray:
        """(N − 1)/N: the share of the prompts entering per step that a decoding request waits
        for (the other clients'; its own prefill is in its TTFT)."""
        n = np.maximum(self.clients, 1.0)
        return (n - 1.0) / n

    def tpot_s(self, s0: float, s1: float) -> np.ndarray:
        return self.solve(s0, s1)["tpot_s"]

    def _at(self, share: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dec(n_d) and δ(n_d, k = clip(λ, k_min, k_max)), linear in log share and log k."""
        lg = np.log(SHARE_GRID)
        x = np.clip(np.interp(np.log(share), lg, np.arange(len(lg))), 0, len(lg) - 1)
        i0 = np.minimum(np.floor(x).astype(int), len(lg) - 2)
        w = x - i0
        r = np.arange(len(share))
        dec = self.dec_s[r, i0] * (1 - w) + self.dec_s[r, i0 + 1] * w
        kg = np.log(self.prompts)
        kk = np.log(np.clip(lam, self.prompts[:, 0], self.prompts[:, -1]))
        span = np.where(kg[:, -1] > kg[:, 0], kg[:, -1] - kg[:, 0], 1.0)
        y = (kk - kg[:, 0]) / span * (kg.shape[1] - 1)
        j0 = np.minimum(np.floor(y).astype(int), kg.shape[1] - 2)
        v = y - j0
        d = self.per_prompt_s
        lo = d[r, i0, j0] * (1 - v) + d[r, i0, j0 + 1] * v
        hi = d[r, i0 + 1, j0] * (1 - v) + d[r, i0 + 1, j0 + 1] * v
        return dec, lo * (1 - w) + hi * w


def prompt_grid(isl: float) -> np.ndarray:
    """Prompts per mixed step: from one whole prompt (or the budget's share of one longer than the
    budget) to as many as the step token budget admits."""
    k_max = STEP_TOKEN_BUDGET / isl
    k_min = min(1.0, k_max)
    return np.geomspace(k_min, max(k_max, k_min * (1 + 1e-9)), PROMPT_GRID_POINTS)


def price_rows(rows, hw, hw_for=None) -> RowPricing:
    """Price every row's steps on the grids. `rows`: engine_overhead.supported_rows output (batch,
    clients, isl, osl, ttft_s, model, tp, ep, weight_dtype, kv_dtype, backend, gemm_quant,
    moe_quant); `hw_for(gemm_quant, moe_quant)`, when given, returns the profile pricing the
    kernels the row's engine ran, else `hw` prices every row. Step prices exclude the engine
    overheads (they are the fitted terms)."""
    recs = rows.to_dict("records")
    g = len(SHARE_GRID)
    dec = np.full((len(recs), g), np.nan)
    per = np.full((len(recs), g, PROMPT_GRID_POINTS), np.nan)
    kgrid = np.ones((len(recs), PROMPT_GRID_POINTS))
    cache: dict = {}
    for i, r in enumerate(recs):
        key = (r.get("gemm_quant", ""), r.get("moe_quant", ""))
        if key not in cache:
            h = hw_for(*key) if hw_for is not None else hw
            cache[key] = h.with_efficiency(step_overhead_s=0.0, per_seq_overhead_s=0.0)
        model = load_model(r["model"])
        layout = ParallelLayout(tp=int(r["tp"]), ep=int(r["ep"]), weight_dtype=r["weight_dtype"],
                                kv_dtype=r["kv_dtype"])
        try:
            layout.check_fits_model(model, "layout")
        except SpecError:
            continue
        isl, osl = float(r["isl"]), float(r["osl"])
        kgrid[i] = prompt_grid(isl)
        nd = float(r["batch"]) * SHARE_GRID[:, None]
        sep = str(r.get("backend", "")) in SEPARATE_PREFILL
        both = mixed_step_time_s(model, cache[key], layout, nd, isl + osl / 2.0, kgrid[i][None, :], isl, sep)
        base = mixed_step_time_s(model, cache[key], layout, nd[:, 0], isl + osl / 2.0, 0.0, isl)
        dec[i] = base
        per[i] = (both - base[:, None]) / kgrid[i][None, :]
    b = rows["batch"].to_numpy(float)
    clients = rows["clients"].to_numpy(float) if "clients" in rows else b
    ttft = rows["ttft_s"].to_numpy(float) if "ttft_s" in rows else np.full(len(b), np.nan)
    sep = rows["backend"].astype(str).isin(SEPARATE_PREFILL).to_numpy() if "backend" in rows else np.zeros(len(b), bool)
    return RowPricing(b, np.where(np.isfinite(clients), clients, b), rows["isl"].to_numpy(float),
                      rows["osl"].to_numpy(float), ttft, dec, per, kgrid, sep)
