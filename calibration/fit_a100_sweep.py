"""Fit a100_sxm's in-situ streaming factor and multi-token attention to EfficientRollout's A100
forward-pass sweeps.

    python calibration/fit_a100_sweep.py                  # fit on Qwen2.5-7B, print every row's residual
                                                          # (Llama-3.1-8B-Instruct and Qwen2.5-14B held out)
    python calibration/fit_a100_sweep.py --write-profile  # also write both into hardware_profiles/a100_sxm.yaml

Two fits, in order: β on the batch-1 decode rows (q = 1: the multi-token term never prices them),
then the cache attention of a pass with q > 1 (hardware.MultiTokenAttentionFit: FlashAttention-2
runs a verify unsplit, one block per sequence and query head) on the verify rows at batch < 8,
priced at that β. The A100 SXM4 has 108 SMs (NVIDIA A100 Tensor Core GPU Architecture
whitepaper, 2020).

Run it after `specsim calibrate --kernels aiconfigurator --system a100_sxm` (which fits the kernel
laws and, with no A100 TPOT rows in the data package, transfers the engine overheads and β from
h200_sxm's vLLM fit; a rerun keeps a β this script wrote). What the rows are, which rows fit and
why: specsim/calibrate/forward_sweep.py and calibration/published/efficientrollout_a100_*.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specsim.calibrate.forward_sweep import (  # noqa: E402
    fit_multi_token_attention,
    fit_stream_factor,
    read_sweeps,
    with_multi_token_attention,
    write_multi_token_attention,
    write_stream_factor,
)
from specsim.errors import SpecError  # noqa: E402
from specsim.hardware import load_hardware  # noqa: E402

PUBLISHED = "calibration/published/"
FIT_SWEEP = PUBLISHED + "efficientrollout_a100_qwen25_7b.csv"
HELD_OUT = (PUBLISHED + "efficientrollout_a100_llama31_8b_instruct.csv",
            PUBLISHED + "efficientrollout_a100_qwen25_14b.csv")
FIT_MODEL = "Qwen2.5-7B"
PROFILE = ROOT / "hardware_profiles" / "a100_sxm.yaml"
COMMAND = "python calibration/fit_a100_sweep.py --write-profile"
A100_SMS = 108


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-profile", action="store_true", help="write β into hardware_profiles/a100_sxm.yaml")
    a = ap.parse_args(argv)
    try:
        df = read_sweeps([ROOT / f for f in (FIT_SWEEP, *HELD_OUT)])
        hw = with_multi_token_attention(load_hardware(str(PROFILE)), None)
        fit = fit_stream_factor(df, hw, fit_model=FIT_MODEL)
        print(f"a100_sxm in-situ streaming factor: {fit.beta:.4f} (before: {fit.beta_before:.4f}; "
              f"{fit.fit_rows} fit rows of {FIT_MODEL}; the other models' rows held out)")
        mt = fit_multi_token_attention(df, hw.with_insitu_stream_factor(fit.beta), A100_SMS, fit_model=FIT_MODEL)
        t = mt.term
        print(f"a100_sxm multi-token attention: {t.s_per_kv_token * 1e9:.2f} ns per cached token per block, "
              f"co-resident speedup {t.coresident_speedup:.3f} ({mt.fit_rows} verify rows of {FIT_MODEL} at "
              f"batch < 8; {t.sms} SMs, {t.tile_rows}-row tiles)\n")
        print("every row at both fits (before: at the fitted beta, verify cache attention priced as a decode's):")
        print(mt.summary().to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
        for model in mt.rows["model"].unique():
            for mode in ("target_decode", "drafter_decode", "target_verify"):
                sel = (mt.rows["mode"] == mode) & (mt.rows["model"] == model)
                tab = mt.rows[sel].pivot_table(index="batch", columns="seq", values="rel_error")
                print(f"\n{model} {mode}: priced / measured - 1 (rows: batch, columns: prompt tokens)")
                print(tab.to_string(float_format=lambda v: f"{v:+.3f}"))
        if a.write_profile:
            write_stream_factor(PROFILE, fit, FIT_SWEEP, COMMAND)
            write_multi_token_attention(PROFILE, mt, FIT_SWEEP, COMMAND)
            print(f"\nwrote {PROFILE.relative_to(ROOT)}")
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
