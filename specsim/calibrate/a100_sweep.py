"""Fit a100_sxm's in-situ streaming factor and multi-token attention to EfficientRollout's A100
forward-pass sweeps (`specsim calibrate a100-sweep`; this module computes, the command prints).

    specsim calibrate a100-sweep                  # fit on Qwen2.5-7B, print every row's residual
                                                  # (Llama-3.1-8B-Instruct and Qwen2.5-14B held out)
    specsim calibrate a100-sweep --write-profile  # also write both into the a100_sxm profile
                                                  # (specsim/catalog/hardware_profiles/a100_sxm.yaml)

Two fits, in order: β on the batch-1 decode rows (q = 1: the multi-token term never prices them),
then the cache attention of a pass with q > 1 (hardware.MultiTokenAttentionFit: FlashAttention-2
runs a verify unsplit, one block per sequence and query head) on the verify rows at batch < 8,
priced at that β. The A100 SXM4 has 108 SMs (NVIDIA A100 Tensor Core GPU Architecture
whitepaper, 2020).

Run it after `specsim calibrate kernels --system a100_sxm` (which fits the kernel laws and, with
no A100 TPOT rows in the data package, transfers the engine overheads and β from h200_sxm's vLLM
fit; a rerun keeps a β this command wrote). What the rows are, which rows fit and why:
specsim/calibrate/forward_sweep.py and calibration/published/efficientrollout_a100_*.csv (read
from the repository root).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specsim.calibrate.forward_sweep import (
    MultiTokenFit,
    SweepFit,
    fit_multi_token_attention,
    fit_stream_factor,
    read_sweeps,
    with_multi_token_attention,
    write_multi_token_attention,
    write_stream_factor,
)
from specsim.catalog.hardware import PROFILE_DIR, load_hardware
from specsim.validate.targets import REPO_ROOT

#: the repository root (specsim/calibrate/a100_sweep.py -> ../..): the published sweeps live there
ROOT = REPO_ROOT   # a source checkout: calibration/ and scenarios/ beside the package
PUBLISHED = "calibration/published/"
FIT_SWEEP = PUBLISHED + "efficientrollout_a100_qwen25_7b.csv"
HELD_OUT = (PUBLISHED + "efficientrollout_a100_llama31_8b_instruct.csv",
            PUBLISHED + "efficientrollout_a100_qwen25_14b.csv")
FIT_MODEL = "Qwen2.5-7B"
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
    fit_model: str
    summary: pd.DataFrame       # every row at both fits (before: verify cache attention priced as a decode's)
    grids: tuple[ResidualGrid, ...]
    written: Path | None = None


def residual_grids(rows: pd.DataFrame) -> tuple[ResidualGrid, ...]:
    """Per model and mode (GRID_MODES), the relative error of every row as a batch x prompt table."""
    out = []
    for model in rows["model"].unique():
        for mode in GRID_MODES:
            sel = (rows["mode"] == mode) & (rows["model"] == model)
            out.append(ResidualGrid(str(model), mode,
                                    rows[sel].pivot_table(index="batch", columns="seq", values="rel_error")))
    return tuple(out)


def fit_a100_sweep(*, write_profile: bool = False, profile: str | Path = PROFILE, root: Path = ROOT) -> A100SweepFit:
    """Fit β on FIT_MODEL's batch-1 decode rows, then the multi-token attention term on its verify
    rows at batch < 8 at that β (the other models' rows held out); with `write_profile` write both,
    with their provenance, into `profile`."""
    df = read_sweeps([root / f for f in (FIT_SWEEP, *HELD_OUT)])
    hw = with_multi_token_attention(load_hardware(str(profile)), None)
    stream = fit_stream_factor(df, hw, fit_model=FIT_MODEL)
    mt = fit_multi_token_attention(df, hw.with_insitu_stream_factor(stream.beta), A100_SMS, fit_model=FIT_MODEL)
    written = None
    if write_profile:
        write_stream_factor(profile, stream, FIT_SWEEP, COMMAND)
        write_multi_token_attention(profile, mt, FIT_SWEEP, COMMAND)
        written = Path(profile)
    return A100SweepFit(stream, mt, FIT_MODEL, mt.summary(), residual_grids(mt.rows), written)


__all__ = ["A100_SMS", "COMMAND", "FIT_MODEL", "FIT_SWEEP", "GRID_MODES", "HELD_OUT", "PROFILE", "ROOT",
           "A100SweepFit", "ResidualGrid", "fit_a100_sweep", "residual_grids"]
