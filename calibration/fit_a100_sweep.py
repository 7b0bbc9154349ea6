"""Fit a100_sxm's in-situ streaming factor to EfficientRollout's A100 forward-pass sweeps.

    python calibration/fit_a100_sweep.py                  # fit on Qwen2.5-7B, print every row's residual
                                                          # (Llama-3.1-8B-Instruct and Qwen2.5-14B held out)
    python calibration/fit_a100_sweep.py --write-profile  # also write β into hardware_profiles/a100_sxm.yaml

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

from specsim.calibrate.forward_sweep import fit_stream_factor, read_sweeps, write_stream_factor  # noqa: E402
from specsim.errors import SpecError  # noqa: E402
from specsim.hardware import load_hardware  # noqa: E402

PUBLISHED = "calibration/published/"
FIT_SWEEP = PUBLISHED + "efficientrollout_a100_qwen25_7b.csv"
HELD_OUT = (PUBLISHED + "efficientrollout_a100_llama31_8b_instruct.csv",
            PUBLISHED + "efficientrollout_a100_qwen25_14b.csv")
FIT_MODEL = "Qwen2.5-7B"
PROFILE = ROOT / "hardware_profiles" / "a100_sxm.yaml"
COMMAND = "python calibration/fit_a100_sweep.py --write-profile"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-profile", action="store_true", help="write β into hardware_profiles/a100_sxm.yaml")
    a = ap.parse_args(argv)
    try:
        df = read_sweeps([ROOT / f for f in (FIT_SWEEP, *HELD_OUT)])
        fit = fit_stream_factor(df, load_hardware(str(PROFILE)), fit_model=FIT_MODEL)
        print(f"a100_sxm in-situ streaming factor: {fit.beta:.4f} (before: {fit.beta_before:.4f}; "
              f"{fit.fit_rows} fit rows of {FIT_MODEL}; the other models' rows held out)\n")
        print(fit.summary().to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
        for model in fit.rows["model"].unique():
            for mode in ("target_decode", "drafter_decode", "target_verify"):
                sel = (fit.rows["mode"] == mode) & (fit.rows["model"] == model)
                t = fit.rows[sel].pivot_table(index="batch", columns="seq", values="rel_error")
                print(f"\n{model} {mode}: priced / measured - 1 (rows: batch, columns: prompt tokens)")
                print(t.to_string(float_format=lambda v: f"{v:+.3f}"))
        if a.write_profile:
            write_stream_factor(PROFILE, fit, FIT_SWEEP, COMMAND)
            print(f"\nwrote {PROFILE.relative_to(ROOT)}")
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
