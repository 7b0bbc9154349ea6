"""Fit a100_sxm's in-situ streaming factor and multi-token attention to EfficientRollout's A100
forward-pass sweeps (`specsim calibrate a100-sweep`; this module computes, the command prints).

    specsim calibrate a100-sweep                  # fit on Qwen2.5-7B, print every row's residual
                                                  # (Llama-3.1-8B-Instruct and Qwen2.5-14B held out)
    specsim calibrate a100-sweep --write-profile  # also write both into the a100_sxm profile
                                                  # (specsim/catalog/hardware_profiles/a100_sxm.yaml)

Four fits, in order: β on the batch-1 decode rows (q = 1: the multi-token term never prices them),
then the cache attention of a pass with q > 1 (hardware.MultiTokenAttentionFit: FlashAttention-2
runs a verify unsplit, one block per sequence and query head) on the verify rows at batch < 8,
priced at that β, then the in-engine attention time per (sequence, KV head) block
(MultiTokenAttentionFit.block_s) on the decode rows at batch > 1 without cascade attention, then
the per-layer time of attention run outside a full CUDA graph
(MultiTokenAttentionFit.piecewise_attention_s) on the decode rows that run cascade attention. Every
row is priced as the sweep runs it: the cached part of one prompt shared by the batch (prefix
caching, whole blocks of prompt − 1 tokens: cost/forward.cached_prefix_tokens; cascade attention
where vLLM V1 picks it: cost/forward.shared_prefix_attention_s). Then the comparison
issue #49 set: verify ÷ decode at batch 1/8/32/64 × prompt 1024/4096 × γ 3/7/15 (46 points with
rows; `ratios`) and decode's growth from batch 1 to 64 (`growth`), fit rows marked. The A100
SXM4 has 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020).

Run it after `specsim calibrate kernels --system a100_sxm` (which fits the kernel laws and, with
no A100 TPOT rows in the data package, transfers the engine overheads and β from h200_sxm's vLLM
fit; a rerun keeps a β this command wrote). What the rows are, which rows fit and why:
specsim/calibrate/kernels/forward_sweep.py and calibration/published/efficientrollout_a100_*.csv (read
below `root`, the folder that holds the calibration folder: the CLI finds it from the working
directory, validate/targets.find_calibration_dir).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from specsim.calibrate.kernels.forward_sweep import (
    CASCADE_MIN_REQUESTS,
    BlockFit,
    MultiTokenFit,
    PiecewiseFit,
    SweepFit,
    decode_growth,
    fit_block_attention,
    fit_multi_token_attention,
    fit_piecewise_attention,
    fit_stream_factor,
    price_rows,
    read_sweeps,
    residual_summary,
    verify_decode_ratios,
    with_multi_token_attention,
    write_block_attention,
    write_multi_token_attention,
    write_piecewise_attention,
    write_stream_factor,
)
from specsim.catalog.hardware import PROFILE_DIR, load_hardware

PUBLISHED = "calibration/published/"
FIT_SWEEP = PUBLISHED + "efficientrollout_a100_qwen25_7b.csv"
HELD_OUT = (PUBLISHED + "efficientrollout_a100_llama31_8b_instruct.csv",
            PUBLISHED + "efficientrollout_a100_qwen25_14b.csv")
FIT_MODEL = "Qwen2.5-7B"
#: the two models of issue #49's verify ÷ decode comparison (the Qwen2.5-14B file holds gamma 7 only)
RATIO_MODELS = (FIT_MODEL, "Llama-3.1-8B-Instruct")
PROFILE = PROFILE_DIR / "a100_sxm.yaml"
COMMAND = "specsim calibrate a100-sweep --write-profile"
A100_SMS = 108
#: the per-model residual grids reported after the fit, in this order
GRID_MODES = ("target_decode", "drafter_decode", "target_verify")


@dataclass(frozen=True)
class ResidualGrid:
    """priced / measured - 1 of one model's rows of one mode: rows batch, columns prompt tokens."""

    model: str
    mode: str
    table: pd.DataFrame


@dataclass(frozen=True)
class A100SweepFit:
    """Both fits, every row's residual summary and grid, and the profile written (None: not written)."""

    stream: SweepFit            # β: stream.beta, stream.beta_before, stream.fit_rows
    multi_token: MultiTokenFit  # multi_token.term (s_per_kv_token, coresident_speedup, sms, tile_rows)
    block: BlockFit             # block.block_s (per (sequence, KV head) block per layer), block.fit_rows
    piecewise: PiecewiseFit     # piecewise.piecewise_attention_s (per layer), piecewise.fit_rows
    fit_model: str
    rows: pd.DataFrame          # every row at the four fits; role 'fit' where the row fitted any of them
    summary: pd.DataFrame       # residual_summary(rows)
    grids: tuple[ResidualGrid, ...]
    ratios: pd.DataFrame        # verify_decode_ratios(rows): the 46 verify ÷ decode points
    growth: pd.DataFrame        # decode_growth(rows): decode at batch 64 ÷ batch 1 per model and prompt
    written: Path | None = None

    def ratios_within(self) -> int:
        """How many verify ÷ decode points are within forward_sweep.RATIO_TOLERANCE."""
        return int(self.ratios["within"].sum())


def residual_grids(rows: pd.DataFrame) -> tuple[ResidualGrid, ...]:
    """Per model and mode (GRID_MODES), the relative error of every row as a batch x prompt table."""
    out = []
    for model in rows["model"].unique():
        for mode in GRID_MODES:
            sel = (rows["mode"] == mode) & (rows["model"] == model)
            out.append(ResidualGrid(str(model), mode,
                                    rows[sel].pivot_table(index="batch", columns="seq", values="rel_error")))
    return tuple(out)


def fit_a100_sweep(*, write_profile: bool = False, profile: str | Path = PROFILE, root: Path) -> A100SweepFit:
    """Fit β on FIT_MODEL's batch-1 decode rows, then the multi-token attention term on its verify
    rows at batch < 8 at that β, then the per-block time on its decode rows at batch > 1 without
    cascade, then the piecewise term on its decode rows with cascade (the other models' rows held
    out); with `write_profile` write all four, with their provenance, into `profile`."""
    df = read_sweeps([root / f for f in (FIT_SWEEP, *HELD_OUT)])
    hw = with_multi_token_attention(load_hardware(str(profile)), None)
    stream = fit_stream_factor(df, hw, fit_model=FIT_MODEL)
    at_beta = hw.with_insitu_stream_factor(stream.beta)
    mt = fit_multi_token_attention(df, at_beta, A100_SMS, fit_model=FIT_MODEL)
    blk = fit_block_attention(df, with_multi_token_attention(at_beta, mt.term), fit_model=FIT_MODEL)
    pw = fit_piecewise_attention(df, with_multi_token_attention(at_beta, replace(mt.term, block_s=blk.block_s)),
                                 fit_model=FIT_MODEL)
    fitted = ((stream.rows["role"] == "fit") | (mt.rows["role"] == "fit") | (blk.rows["role"] == "fit")
              | (pw.rows["role"] == "fit"))
    rows = pw.rows.assign(role=pw.rows["role"].where(~fitted, "fit"))
    written = None
    if write_profile:
        write_stream_factor(profile, stream, FIT_SWEEP, COMMAND)
        write_multi_token_attention(profile, mt, FIT_SWEEP, COMMAND)
        write_block_attention(profile, blk, FIT_SWEEP, COMMAND)
        write_piecewise_attention(profile, pw, FIT_SWEEP, COMMAND)
        written = Path(profile)
    pair = rows[rows["model"].isin(RATIO_MODELS)]
    return A100SweepFit(stream, mt, blk, pw, FIT_MODEL, rows, residual_summary(rows), residual_grids(rows),
                        verify_decode_ratios(pair), decode_growth(pair), written)


def sweep_comparison(root: Path, profile: str | Path = PROFILE) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verify ÷ decode points, decode growth) of the Qwen2.5-7B and Llama-3.1-8B sweeps priced
    with `profile` as it stands (no fitting): what `specsim validate` reports and the test checks.
    Role 'fit' marks the rows the profile's terms were fitted on (FIT_MODEL's decode rows: batch 1
    for β, batch > 1 without cascade for the per-block time, with cascade for the piecewise term;
    its verify rows at batch < 8), 'held-out' every row of the other model."""

    df = read_sweeps([root / f for f in (FIT_SWEEP, HELD_OUT[0])])
    hw = load_hardware(str(profile))
    priced = price_rows(df, hw)
    own = (df["model"] == FIT_MODEL).to_numpy()
    dec, ver = (df["mode"] == "target_decode").to_numpy(), (df["mode"] == "target_verify").to_numpy()
    fit = own & (dec | (ver & (df["batch"] < CASCADE_MIN_REQUESTS).to_numpy()))   # decode: β, block, piecewise
    meas = df["median_ms"].to_numpy(float)
    rows = pd.DataFrame({"model": df["model"], "mode": df["mode"], "batch": df["batch"].astype(int),
                         "seq": df["seq"].astype(int), "gamma": df["gamma"].astype(int),
                         "role": pd.Series(fit).map({True: "fit", False: "check"}).where(own | fit, "held-out"),
                         "measured_ms": meas, "priced_ms": priced * 1e3, "rel_error": priced * 1e3 / meas - 1.0})
    return verify_decode_ratios(rows), decode_growth(rows)


__all__ = ["A100_SMS", "COMMAND", "FIT_MODEL", "FIT_SWEEP", "GRID_MODES", "HELD_OUT", "PROFILE", "RATIO_MODELS",
                  "A100SweepFit", "ResidualGrid", "fit_a100_sweep", "residual_grids", "sweep_comparison"]
