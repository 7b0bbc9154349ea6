"""Forward-pass timings measured inside a serving engine: price them, fit the in-situ streaming
factor on the clean rows, report every row.

A forward-pass sweep (e.g. EfficientRollout's A100 sweep,
calibration/published/efficientrollout_a100_qwen25_7b.csv) times the model forward of one engine
step with CUDA events, CUDA graphs on: no LM head, no sampler, no scheduler. So a row is priced by
`pass_cost` with zero logits (the LM head does not run) and no engine overhead:

    target_decode    pass_cost(target, B, q = 1)             at context B · c
    target_verify    pass_cost(target, B, q = gamma + 1)     at context B · c
    drafter_decode   draft_cost(drafter, B, q = 1, later pass) at context B · c

c = seq + (tokens generated during the timed steps + 1) / 2, the mean context per request.

What such rows can fit: the in-situ streaming factor β of the profile's kernel fit
(hardware.KernelFit.insitu_stream_factor): every fitted streaming efficiency (GEMM weights, decode
KV) is taken times β, capped at 1. The engine's CPU overheads are not in a forward timing, so they
are not fitted here. The fit rows are `target_decode` at batch 1: a batch of one request cannot
share KV with another, while a sweep that repeats one prompt `batch` times (as EfficientRollout's
does) lets the prefix cache share the prompt's KV across the batch, so at larger batch x context the
physical KV read is well below B · c tokens (64 x 4096 tokens: 15 GB of distinct KV would take
7.4 ms at the A100's peak, the measured step grows by 2.2 ms from 256 to 4096 tokens). Those rows,
the verify rows and the drafter rows are predictions: reported, never fitted. With `fit_model`
only that model's batch-1 rows fit, and every row of the sweep's other models is held out (the
same GPU and engine, another model: a test of β and of the kernel laws, not only of one model).

β is the bounded scalar minimum of Σ ln(priced / measured)² over the fit rows (scipy).

The verify rows fit one more A100 term: the cache attention of a pass with more than one query
token per sequence (hardware.MultiTokenAttentionFit). vLLM runs FlashAttention-2 on Ampere, which
splits the cache across blocks and packs a KV head's query heads into one tile only when every
sequence brings a single token; a verify (1 + γ tokens each) runs one block per (sequence, query
head) over the whole cache. At batch 1 the measured verify grows with the prompt 8-20x faster
than the q = 1 decode over the same KV (Qwen2.5-7B: 0.61 against 0.03 ms per 1,000 tokens), in
proportion to the layers across the three models (22-23 us per layer per 1,000 tokens, with 4 or 8
KV heads). `fit_multi_token_attention`
fits its two terms (a block's time per cached token alone on its SM; an SM's throughput with two
blocks over one) on the fit model's verify rows at batch < 8, after β. Rows at batch >= 8 are
never fitted: the sweep repeats one prompt, and with >= 8 requests sharing a >= 256-token prefix
vLLM V1 switches to cascade attention (`use_cascade_attention` in its FlashAttention backend),
which attends to the shared prompt once for all of them -- not what an RL batch of distinct
prompts runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from specsim import inputs
from specsim.atomic import dump_yaml, write_text
from specsim.catalog.hardware import HardwareSpec, MultiTokenAttentionFit, load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost.forward import (
    CASCADE_MIN_REQUESTS,
    cached_prefix_tokens,
    draft_cost,
    pass_cost,
    shared_prefix_attention_s,
    uses_cascade_attention,
)
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError, load_yaml_text

MODES = ("target_decode", "target_verify", "drafter_decode")
#: sweep model name -> catalog model (same architecture)
CATALOG_OF = {"Llama-3.1-8B-Instruct": "Llama-3.1-8B"}
COLUMNS = ("model", "batch", "seq", "gamma", "mode", "median_ms", "n_samples")
#: β search interval: below 0.5 an engine would stream at half its isolated-kernel rate; above 1.6
#: every A100/Hopper stream is at its cap long before
BETA_BOUNDS = (0.5, 1.6)


@dataclass(frozen=True)
class SweepFit:
    """Result of :func:`fit_stream_factor`: β, how many rows fitted it, every row's residual."""

    hardware: str
    beta: float
    beta_before: float
    fit_rows: int
    rows: pd.DataFrame   # mode, batch, seq, gamma, role, measured_ms, priced_ms, rel_error, before_rel_error

    def summary(self) -> pd.DataFrame:
        return residual_summary(self.rows)


def residual_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Median / p90 |relative error| and signed median (after and before a fit) per model, mode
    and role of a fit's priced rows."""
    g = rows.assign(abs_err=rows["rel_error"].abs())
    out = g.groupby(["model", "mode", "role"], sort=False).agg(
        rows=("rel_error", "size"), median_abs=("abs_err", "median"),
        p90_abs=("abs_err", lambda s: float(np.quantile(s, 0.9))), signed_median=("rel_error", "median"),
        before_signed_median=("before_rel_error", "median"))
    return out.reset_index()


def read_sweep(path: str | Path) -> pd.DataFrame:
    """The sweep rows (comment lines `#` skipped); SpecError naming the file, column and value on
    bad input."""
    p = Path(path)
    if not p.is_file():
        raise SpecError("sweep file", str(path), "an existing CSV file")
    df = inputs.read_csv_frame(p, "sweep file", "forward-pass sweep CSV", comment="#")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SpecError("columns", missing, f"a sweep with columns {list(COLUMNS)}", str(p))
    bad = df[~df["mode"].isin(MODES)]
    if len(bad):
        raise SpecError("mode", bad["mode"].iloc[0], f"one of {list(MODES)}", str(p))
    for col in ("batch", "seq", "gamma", "median_ms"):
        v = pd.to_numeric(df[col], errors="coerce")
        lo = 1 if col == "batch" else 0
        wrong = v.isna() | (v < lo) | ((col == "median_ms") & (v <= 0))
        if wrong.any():
            raise SpecError(col, df[col][wrong].iloc[0], f"a number >= {lo}" + (" (> 0 ms)" if col == "median_ms" else ""),
                            str(p))
        df[col] = v
    verify = df["mode"] == "target_verify"
    if (df.loc[verify, "gamma"] < 1).any():
        raise SpecError("gamma", 0, "gamma >= 1 on target_verify rows", str(p))
    return df.reset_index(drop=True)


def read_sweeps(paths) -> pd.DataFrame:
    """Several sweep files (one model each, e.g.) as one frame."""
    return pd.concat([read_sweep(p) for p in paths], ignore_index=True)


def price_rows(df: pd.DataFrame, hw: HardwareSpec, generated_tokens: int = 50,
               drafter_kind: str = "self_quant", shared_prefix: bool = True) -> np.ndarray:
    """Forward time (s) of every row (module docstring), each at its model (TP 1).

    `shared_prefix` (default): as the sweep runs, every request of a row sharing the cached part of
    the same `seq`-token prompt (prefix caching: cost/forward.cached_prefix_tokens, whole blocks of
    seq − 1 tokens; cascade attention where vLLM picks it), each with the rest of the prompt and its
    own (generated + 1) / 2 tokens on top: cost/forward.shared_prefix_attention_s. False: as `batch`
    distinct sequences of seq + (generated + 1) / 2 tokens (what an RL batch of distinct prompts runs)."""
    lay = ParallelLayout(tp=1)
    b = df["batch"].to_numpy(float)
    seq = df["seq"].to_numpy(float)
    suffix = (generated_tokens + 1) / 2.0
    ctx = b * (seq + suffix)
    prefix = cached_prefix_tokens(seq)
    out = np.empty(len(df))
    for name in df["model"].unique():
        try:
            model = load_model(CATALOG_OF.get(str(name), str(name)))
        except SpecError as exc:
            raise SpecError("model", name, exc.allowed) from None
        drafter = drafter_arch(drafter_kind, model)
        for mode in MODES:
            m = ((df["mode"] == mode) & (df["model"] == name)).to_numpy()
            if not m.any():
                continue
            if mode == "drafter_decode":   # runs piecewise CUDA graphs at every batch (the source's proposer)
                q, attn_model = 1.0, drafter.model
                cost = draft_cost(drafter, hw, lay, b[m], 1.0, first=False, logits_per_seq=0.0)
            else:
                q = 1.0 if mode == "target_decode" else df.loc[m, "gamma"].to_numpy(float) + 1.0
                attn_model = model
                cost = pass_cost(model, hw, lay, b[m], q, 0.0)
            if shared_prefix:
                out[m] = cost.fixed_s + shared_prefix_attention_s(attn_model, hw, lay, b[m], q, prefix[m],
                                                                  seq[m] - prefix[m] + suffix,
                                                                  full_graph=mode != "drafter_decode")
            else:
                out[m] = cost.time_s(ctx[m])
    return out


def _fit_one_term(df: pd.DataFrame, hw: HardwareSpec, at, fit: np.ndarray, own: np.ndarray,
                  bounds: tuple[float, float], xatol: float, generated_tokens: int) -> tuple[float, pd.DataFrame]:
    """One profile term fitted on the `fit` rows: the bounded scalar minimum (scipy) of
    Σ ln(priced / measured)² over the value v, `at(v)` being the profile with the term at v; and
    every row priced before (`hw`) and after, with its role (fit; check: the fit model's other
    rows; held-out: other models)."""
    from scipy import optimize

    meas = df["median_ms"].to_numpy(float) * 1e-3

    def cost(v: float) -> float:
        r = np.log(price_rows(df[fit], at(v), generated_tokens) / meas[fit])
        return float(r @ r)

    v = float(optimize.minimize_scalar(cost, bounds=bounds, method="bounded", options={"xatol": xatol}).x)
    before = price_rows(df, hw, generated_tokens)
    after = price_rows(df, at(v), generated_tokens)
    rows = pd.DataFrame({
        "model": df["model"], "mode": df["mode"], "batch": df["batch"].astype(int), "seq": df["seq"].astype(int),
        "gamma": df["gamma"].astype(int), "role": np.where(fit, "fit", np.where(own, "check", "held-out")),
        "measured_ms": meas * 1e3, "priced_ms": after * 1e3,
        "rel_error": after / meas - 1.0, "before_rel_error": before / meas - 1.0})
    return v, rows


def fit_stream_factor(df: pd.DataFrame, hw: HardwareSpec, generated_tokens: int = 50,
                      fit_model: str | None = None) -> SweepFit:
    """Fit β on the batch-1 target_decode rows (of `fit_model` only, when given: the other models'
    rows are then held out); price every row before and after. Roles: fit, check (the fit model's
    other rows), held-out (other models)."""
    if hw.kernel_fit is None:
        raise SpecError("hardware", hw.name, "a profile with a kernel fit (specsim calibrate kernels)")
    own = np.ones(len(df), dtype=bool) if fit_model is None else (df["model"] == fit_model).to_numpy()
    fit = ((df["mode"] == "target_decode") & (df["batch"] == 1)).to_numpy() & own
    if fit.sum() < 2:
        raise SpecError("rows", int(fit.sum()), "at least two target_decode rows at batch 1 to fit on")
    def at(beta: float) -> HardwareSpec:
        return replace(hw, kernel_fit=replace(hw.kernel_fit, insitu_stream_factor=float(beta)))

    beta, rows = _fit_one_term(df, hw, at, fit, own, BETA_BOUNDS, 1e-4, generated_tokens)
    return SweepFit(hw.name, beta, float(hw.kernel_fit.insitu_stream_factor), int(fit.sum()), rows)


#: FlashAttention-2's split-KV kernel (forced for paged KV) tiles 64 query rows per block
#: (flash_fwd_launch_template.h, run_mha_fwd_splitkv_dispatch: kBlockM = 64)
FA2_SPLITKV_TILE_ROWS = 64


@dataclass(frozen=True)
class MultiTokenFit:
    """Result of :func:`fit_multi_token_attention`: the fitted term, its fit rows, every row."""

    hardware: str
    term: MultiTokenAttentionFit
    fit_rows: int
    rows: pd.DataFrame   # as SweepFit.rows; role 'fit', 'check', 'check (cascade)', 'held-out', 'held-out (cascade)'

    def summary(self) -> pd.DataFrame:
        return residual_summary(self.rows)


def with_multi_token_attention(hw: HardwareSpec, term: MultiTokenAttentionFit | None) -> HardwareSpec:
    """`hw` whose kernel fit prices multi-token cache attention with `term` (None: the decode law)."""
    if hw.kernel_fit is None:
        raise SpecError("hardware", hw.name, "a profile with a kernel fit (specsim calibrate kernels)")
    return replace(hw, kernel_fit=replace(hw.kernel_fit, multi_token_attention=term))


def fit_multi_token_attention(df: pd.DataFrame, hw: HardwareSpec, sms: int, generated_tokens: int = 50,
                              fit_model: str | None = None,
                              tile_rows: int = FA2_SPLITKV_TILE_ROWS) -> MultiTokenFit:
    """Fit MultiTokenAttentionFit's s_per_kv_token and coresident_speedup (module docstring) on the
    target_verify rows at batch < CASCADE_MIN_REQUESTS (of `fit_model` only, when given), every
    other term of the pass as `hw` prices it; price every row before (`hw` as given) and after.
    Least squares on ln(priced / measured) (scipy); a fit needs rows with blocks <= sms (they
    fix the per-token time) and rows with more (they fix the speedup)."""
    from scipy import optimize

    own = np.ones(len(df), dtype=bool) if fit_model is None else (df["model"] == fit_model).to_numpy()
    verify = (df["mode"] == "target_verify").to_numpy()
    clean = (df["batch"] < CASCADE_MIN_REQUESTS).to_numpy()
    fit = verify & clean & own
    heads = np.array([load_model(CATALOG_OF.get(str(m), str(m))).heads for m in df["model"]], dtype=float)
    blocks = df["batch"].to_numpy(float) * heads * np.ceil((df["gamma"].to_numpy(float) + 1.0) / tile_rows)
    if (fit & (blocks <= sms)).sum() < 2 or (fit & (blocks > sms)).sum() < 1:
        raise SpecError("rows", int(fit.sum()),
                        f"target_verify rows at batch < {CASCADE_MIN_REQUESTS}: at least two whose blocks fit on "
                        f"the {sms} SMs and one with more")
    meas = df["median_ms"].to_numpy(float) * 1e-3

    def term(x) -> MultiTokenAttentionFit:
        return MultiTokenAttentionFit(sms=int(sms), tile_rows=int(tile_rows), s_per_kv_token=float(np.exp(x[0])) * 1e-9,
                                      coresident_speedup=float(x[1]))

    def resid(x) -> np.ndarray:
        return np.log(price_rows(df[fit], with_multi_token_attention(hw, term(x)), generated_tokens) / meas[fit])

    res = optimize.least_squares(resid, x0=[np.log(20.0), 1.5], bounds=([np.log(0.1), 1.0], [np.log(1000.0), 2.0]))
    got = term(res.x)
    before = price_rows(df, hw, generated_tokens)
    after = price_rows(df, with_multi_token_attention(hw, got), generated_tokens)
    base = np.where(fit, "fit", np.where(own, "check", "held-out"))
    role = np.where(verify & ~clean, np.char.add(base, " (cascade)"), base)
    rows = pd.DataFrame({
        "model": df["model"], "mode": df["mode"], "batch": df["batch"].astype(int), "seq": df["seq"].astype(int),
        "gamma": df["gamma"].astype(int), "role": role, "measured_ms": meas * 1e3, "priced_ms": after * 1e3,
        "rel_error": after / meas - 1.0, "before_rel_error": before / meas - 1.0})
    return MultiTokenFit(hw.name, got, int(fit.sum()), rows)


def write_multi_token_attention(profile: str | Path, fit: MultiTokenFit, source: str, command: str) -> None:
    """Write the fitted term into the profile's `kernel_fit.multi_token_attention`, with its
    provenance (`kernel_fit.provenance.multi_token_attention_fit`), atomically; the written
    profile must load. `specsim calibrate kernels` keeps both on a rerun."""
    def edit(kf: dict) -> None:
        t = fit.term
        kf["multi_token_attention"] = {"sms": t.sms, "tile_rows": t.tile_rows,
                                       "s_per_kv_token_ns": round(t.s_per_kv_token * 1e9, 4),
                                       "coresident_speedup": round(t.coresident_speedup, 4)}
        kf.setdefault("provenance", {})["multi_token_attention_fit"] = {
            "how": (f"fitted by `{command}` to the {fit.fit_rows} target_verify rows at batch < {CASCADE_MIN_REQUESTS} "
                    f"of {source} (forward-pass timings in the engine, CUDA graphs on; rows at larger batch share one "
                    "prompt and run cascade attention, never fitted); sms: the GPU's multiprocessors; tile_rows: "
                    "FlashAttention-2's split-KV kernel, kBlockM = 64"),
            "fit_rows": fit.fit_rows, "residuals": _residuals_yaml(fit.summary())}
        kf["provenance"] = kf.pop("provenance")   # last, where `specsim calibrate kernels` writes it

    _edit_kernel_fit(profile, edit)


def _residuals_yaml(summary: pd.DataFrame) -> dict:
    return {f"{r['model']}.{r['mode']}.{r['role']}": {
        "rows": int(r["rows"]), "median_abs_rel_error": round(float(r["median_abs"]), 4),
        "signed_median": round(float(r["signed_median"]), 4)} for _, r in summary.iterrows()}


def _edit_kernel_fit(profile: str | Path, edit) -> None:
    """Apply `edit` to the profile's `kernel_fit` mapping and write the profile back atomically
    (its header comments kept); the written profile must load."""

    p = Path(profile)
    text = inputs.read_text(p, "hardware", "hardware profile YAML")
    header = "".join(ln for ln in text.splitlines(keepends=True)[:50] if ln.startswith("#"))
    doc = load_yaml_text(text)
    kf = doc.get("kernel_fit")
    if not isinstance(kf, dict):
        raise SpecError("kernel_fit", None, "a kernel_fit block (run specsim calibrate kernels first)", str(p))
    edit(kf)
    write_text(p, header + dump_yaml(doc, sort_keys=False, allow_unicode=True, width=120))
    load_hardware(str(p))


def write_stream_factor(profile: str | Path, fit: SweepFit, source: str, command: str) -> None:
    """Write β into the profile's `kernel_fit.insitu_stream_factor`, with its provenance
    (`kernel_fit.provenance.insitu_stream_fit`: source file, command, rows, residuals), atomically;
    the written profile must load. `specsim calibrate kernels` keeps it on a rerun when the
    profile's engine overheads are transferred (kernel_report.write_fitted_profile)."""
    def edit(kf: dict) -> None:
        kf["insitu_stream_factor"] = round(fit.beta, 4)
        how = (f"fitted by `{command}` to the {fit.fit_rows} batch-1 target_decode rows of {source} (forward-pass "
               f"timings in the engine, CUDA graphs on); transferred value before: {fit.beta_before:.4g}")
        kf.setdefault("provenance", {})["insitu_stream_fit"] = {
            "how": how, "fit_rows": fit.fit_rows, "residuals": _residuals_yaml(fit.summary())}
        eo = kf["provenance"].get("engine_overhead")
        if isinstance(eo, dict):
            eo["insitu_stream_factor"] = how

    _edit_kernel_fit(profile, edit)


def cascade_rows(df: pd.DataFrame, sms: int) -> np.ndarray:
    """Which rows of a sweep that repeats one prompt run cascade attention in vLLM V1
    (cost/forward.uses_cascade_attention at each row's model, batch, q and prompt)."""
    out = np.zeros(len(df), dtype=bool)
    q = np.where(df["mode"] == "target_verify", df["gamma"].to_numpy(float) + 1.0, 1.0)
    for name in df["model"].unique():
        m = (df["model"] == name).to_numpy()
        model = load_model(CATALOG_OF.get(str(name), str(name)))
        out[m] = uses_cascade_attention(df.loc[m, "batch"].to_numpy(float), q[m],
                                        cached_prefix_tokens(df.loc[m, "seq"].to_numpy(float)),
                                        model.heads, model.kv_heads, sms)
    return out


@dataclass(frozen=True)
class PiecewiseFit:
    """Result of :func:`fit_piecewise_attention`: the fitted per-layer time, its fit rows, every row."""

    hardware: str
    piecewise_attention_s: float
    fit_rows: int
    rows: pd.DataFrame   # as SweepFit.rows


#: search interval of the piecewise-graph attention time, s per layer
PIECEWISE_BOUNDS_S = (0.0, 1e-3)
#: search interval of the per-block attention time, s per (sequence, KV head) block per layer
BLOCK_BOUNDS_S = (0.0, 1e-6)


@dataclass(frozen=True)
class BlockFit:
    """Result of :func:`fit_block_attention`: the fitted time per block, its fit rows, every row."""

    hardware: str
    block_s: float
    fit_rows: int
    rows: pd.DataFrame   # as SweepFit.rows


def fit_block_attention(df: pd.DataFrame, hw: HardwareSpec, generated_tokens: int = 50,
                        fit_model: str | None = None) -> BlockFit:
    """Fit MultiTokenAttentionFit.block_s (the in-engine attention time per (sequence, KV head)
    block per layer: FlashAttention-2's decode grid, one block per sequence and KV head once the
    query heads of a KV head are packed into its tile) on the target_decode rows at batch > 1 that
    run without cascade attention (of `fit_model` only, when given), every other term as `hw`
    prices it (β and the multi-token term fitted before, no piecewise term); the bounded scalar
    minimum of Σ ln(priced / measured)² (scipy). The term scales with sequences × KV heads, so a
    model with twice the KV heads per layer (Llama-3.1-8B: 8, Qwen2.5-7B: 4) pays twice per layer."""
    mt = hw.kernel_fit.multi_token_attention if hw.kernel_fit is not None else None
    if mt is None:
        raise SpecError("hardware", hw.name, "a profile with a multi-token attention term (fit it first)")
    own = np.ones(len(df), dtype=bool) if fit_model is None else (df["model"] == fit_model).to_numpy()
    fit = ((df["mode"] == "target_decode").to_numpy() & own & ~cascade_rows(df, mt.sms)
           & (df["batch"] > 1).to_numpy())
    if fit.sum() < 2:
        raise SpecError("rows", int(fit.sum()), "at least two target_decode rows at batch > 1 without cascade "
                        "attention")

    def at(v: float) -> HardwareSpec:
        return with_multi_token_attention(hw, replace(mt, block_s=float(v)))

    v, rows = _fit_one_term(df, hw, at, fit, own, BLOCK_BOUNDS_S, 1e-11, generated_tokens)
    return BlockFit(hw.name, v, int(fit.sum()), rows)


def fit_piecewise_attention(df: pd.DataFrame, hw: HardwareSpec, generated_tokens: int = 50,
                            fit_model: str | None = None) -> PiecewiseFit:
    """Fit MultiTokenAttentionFit.piecewise_attention_s (per layer, the attention op launched
    outside a full CUDA graph) on the target_decode rows that run cascade attention (of
    `fit_model` only, when given), every other term as `hw` prices it (β and the multi-token term
    fitted before); the bounded scalar minimum of Σ ln(priced / measured)² (scipy). Only those rows
    depend on the term, so only they fit it; verify rows stay checks (a verify at batch >= 8 always
    runs cascade: the term is predicted there, not fitted)."""
    mt = hw.kernel_fit.multi_token_attention if hw.kernel_fit is not None else None
    if mt is None:
        raise SpecError("hardware", hw.name, "a profile with a multi-token attention term (fit it first)")
    own = np.ones(len(df), dtype=bool) if fit_model is None else (df["model"] == fit_model).to_numpy()
    fit = (df["mode"] == "target_decode").to_numpy() & own & cascade_rows(df, mt.sms)
    if fit.sum() < 2:
        raise SpecError("rows", int(fit.sum()), "at least two target_decode rows that run cascade attention "
                        f"(>= {CASCADE_MIN_REQUESTS} requests sharing a prompt of >= 256 tokens)")
    def at(v: float) -> HardwareSpec:
        return with_multi_token_attention(hw, replace(mt, piecewise_attention_s=float(v)))

    v, rows = _fit_one_term(df, hw, at, fit, own, PIECEWISE_BOUNDS_S, 1e-8, generated_tokens)
    return PiecewiseFit(hw.name, v, int(fit.sum()), rows)


#: the verify ÷ decode comparison points of issue #49: batch x prompt x gamma (46 where the sweep has rows)
RATIO_BATCHES = (1, 8, 32, 64)
RATIO_SEQS = (1024, 4096)
RATIO_GAMMAS = (3, 7, 15)
#: a ratio counts as reproduced within this relative error
RATIO_TOLERANCE = 0.20


def verify_decode_ratios(rows: pd.DataFrame, batches=RATIO_BATCHES, seqs=RATIO_SEQS,
                         gammas=RATIO_GAMMAS) -> pd.DataFrame:
    """Verify ÷ decode, measured and priced, of every (model, batch, prompt, gamma) point where the
    rows (SweepFit.rows-like: model, mode, batch, seq, gamma, role, measured_ms, priced_ms) hold
    both; role 'fit' where either row fitted some term, else the verify row's role."""
    v = rows[(rows["mode"] == "target_verify") & rows["batch"].isin(batches) & rows["seq"].isin(seqs)
             & rows["gamma"].isin(gammas)]
    d = rows[rows["mode"] == "target_decode"][["model", "batch", "seq", "measured_ms", "priced_ms", "role"]]
    j = v.merge(d, on=["model", "batch", "seq"], suffixes=("", "_decode"))
    measured = j["measured_ms"] / j["measured_ms_decode"]
    priced = j["priced_ms"] / j["priced_ms_decode"]
    fit = (j["role"] == "fit") | (j["role_decode"] == "fit")
    out = pd.DataFrame({"model": j["model"], "batch": j["batch"], "seq": j["seq"], "gamma": j["gamma"],
                        "role": np.where(fit, "fit", j["role"].str.replace(" (cascade)", "", regex=False)),
                        "measured_ratio": measured, "priced_ratio": priced, "rel_error": priced / measured - 1.0})
    out["within"] = out["rel_error"].abs() <= RATIO_TOLERANCE
    return out.sort_values(["model", "gamma", "seq", "batch"]).reset_index(drop=True)


def decode_growth(rows: pd.DataFrame, batch: int = 64) -> pd.DataFrame:
    """Decode time at `batch` ÷ at batch 1, measured and priced, per model and prompt length."""
    d = rows[rows["mode"] == "target_decode"]
    one = d[d["batch"] == 1].set_index(["model", "seq"])
    big = d[d["batch"] == batch].set_index(["model", "seq"])
    out = pd.DataFrame({"measured_growth": big["measured_ms"] / one["measured_ms"],
                        "priced_growth": big["priced_ms"] / one["priced_ms"]}).dropna()
    out["rel_error"] = out["priced_growth"] / out["measured_growth"] - 1.0
    return out.reset_index()


def write_block_attention(profile: str | Path, fit: BlockFit, source: str, command: str) -> None:
    """Write the fitted per-block time into the profile's `kernel_fit.multi_token_attention`
    (`block_ns`), with its provenance inside the multi-token term's
    (`kernel_fit.provenance.multi_token_attention_fit.block`), atomically; the written profile
    must load. Run after write_multi_token_attention."""
    def edit(kf: dict) -> None:
        kf["multi_token_attention"]["block_ns"] = round(fit.block_s * 1e9, 3)
        kf.setdefault("provenance", {}).setdefault("multi_token_attention_fit", {})["block"] = {
            "how": (f"fitted by `{command}` to the {fit.fit_rows} target_decode rows at batch > 1 of {source} that run "
                    "without cascade attention: FlashAttention-2's decode grid runs one block per (sequence, KV head) "
                    "(flash_api.cpp `mha_varlen_fwd`, the seqlen_q = 1 ngroups swap), each with a fixed time beside "
                    "its KV streaming"),
            "fit_rows": fit.fit_rows}
        kf["provenance"] = kf.pop("provenance")

    _edit_kernel_fit(profile, edit)


def write_piecewise_attention(profile: str | Path, fit: PiecewiseFit, source: str, command: str) -> None:
    """Write the fitted per-layer time into the profile's `kernel_fit.multi_token_attention`
    (`piecewise_attention_us`), with its provenance inside the multi-token term's
    (`kernel_fit.provenance.multi_token_attention_fit.piecewise_attention`, which `specsim calibrate
    kernels` keeps with the block), atomically; the written profile must load. Run after
    write_multi_token_attention."""
    def edit(kf: dict) -> None:
        kf["multi_token_attention"]["piecewise_attention_us"] = round(fit.piecewise_attention_s * 1e6, 3)
        kf.setdefault("provenance", {}).setdefault("multi_token_attention_fit", {})["piecewise_attention"] = {
            "how": (f"fitted by `{command}` to the {fit.fit_rows} target_decode rows of {source} that run cascade "
                    "attention (vLLM V1's use_cascade_attention at the row's batch and prompt; the sweep repeats one "
                    "prompt): with cascade attention vLLM's CUDA-graph dispatcher bypasses the full graphs "
                    "(vllm/v1/cudagraph_dispatcher.py) and the attention op runs eagerly between piecewise graphs"),
            "fit_rows": fit.fit_rows}
        kf["provenance"] = kf.pop("provenance")

    _edit_kernel_fit(profile, edit)
