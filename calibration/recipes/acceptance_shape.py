"""Recipe: the EAGLE-3 acceptance shape of the bundled scenarios, fitted on published acceptance curves.

    python calibration/recipes/acceptance_shape.py                 # fit and print
    python calibration/recipes/acceptance_shape.py --write         # also update the EAGLE-3 scenarios
    python calibration/recipes/acceptance_shape.py --sensitivity   # refit leaving out one source at a time

The method is specsim's (specsim.calibrate.acceptance.shape: one Beta concentration c and position
decay d shared by every curve, each curve with its own mean, variants compared by BIC). This file
is the recipe, which knows one dataset: the curves (calibration/published/acceptance_curves.csv,
sources in calibration/published/README.md), the scenarios that carry the fitted shape, and the
8B taus whose tau(k) the report tabulates. It finds its data beside itself (../published,
../../scenarios), so it runs from any working directory of a checkout; bad input prints one
`error:` line and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specsim.calibrate.acceptance.shape import C_MAX, fit_acceptance_shape
from specsim.errors import SpecError

CALIBRATION = Path(__file__).resolve().parents[1]
CHECKOUT = CALIBRATION.parent
CURVES = CALIBRATION / "published" / "acceptance_curves.csv"
#: EAGLE-3 scenarios whose shape was an assumption, the 235B projections included (their tau 4 at
#: k = 5, the paper's projection point, is reachable under the fitted decay; 235b_acceptance's tau
#: sweep stops at 4.9 for that reason). Not here: 7b_h100_sync.yaml (ReSpec's rows, whose
#: staleness is derived from two published taus under its own shape).
SCENARIOS = ("8b_rl_think_sync.yaml", "8b_rl_zero_sync.yaml", "8b_rl_think_async.yaml",
             "30b_a3b_h100_async.yaml", "235b_async.yaml", "235b_acceptance.yaml", "235b_run.yaml",
             "235b_scale.yaml", "235b_sync.yaml")
#: the configured 8B taus at k = 3 whose tau(k) the report tabulates (before the fit: c = 8, d = 1)
TAU_EXAMPLES = (("Think 2.77", 2.77), ("Zero 3.32", 3.32))
COMMAND = "python calibration/recipes/acceptance_shape.py"
#: the comment written beside each fitted scenario line
SOURCE = (f"fitted by `{COMMAND}` on published EAGLE-3 curves (vLLM #24243 #42764 #26191 #20780, "
          "speculators #563; calibration/published/acceptance_curves.csv), not on any 8B row")


def shown(path: Path) -> str:
    """`path` relative to the checkout when it lies below it."""
    p = Path(path).resolve()
    return str(p.relative_to(CHECKOUT)) if p.is_relative_to(CHECKOUT) else str(path)


def fmt_c(c: float | None) -> str:
    if c is None:
        return "inf"
    return f"{c:.4g}" if c < 0.99 * C_MAX else f">={C_MAX:.0e}"


def fit(write: bool = False, sensitivity: bool = False):
    """The fit of this recipe (written into SCENARIOS with `write`)."""
    return fit_acceptance_shape(CURVES, examples=TAU_EXAMPLES, with_sensitivity=sensitivity,
                                write_to=[CHECKOUT / "scenarios" / n for n in SCENARIOS] if write else (),
                                source=SOURCE)


def report_lines(rep, sensitivity: bool) -> list[str]:
    """The printed report: every variant, the chosen shape, per-curve residuals, tau(k) tables."""
    best = rep.best
    out = [f"{len(rep.curves)} curves, {best.n_points} points ({shown(rep.curves_path)})", "",
           f"{'variant':36s} {'c':>8s} {'d':>7s} {'SSE':>9s} {'RMS':>7s} {'BIC':>8s}"]
    out += [f"{f.variant:36s} {fmt_c(f.c):>8s} {f.d:7.4f} {f.sse:9.5f} {f.rms:7.4f} {f.bic:8.1f}" for f in rep.fits]
    out += ["", f"chosen (lowest BIC among shaped variants): {best.variant}: c = {fmt_c(best.c)}, d = {best.d:.4f}", "",
            "per-curve residuals (model - published), chosen shape:"]
    out += [f"  {cv.name:28s} {cv.metric:13s} m={m:.4f}  " + " ".join(f"{x:+.3f}" for x in r)
            for cv, m, r in zip(rep.curves, best.means, best.residuals)]
    out += ["", "tau(k), k = 1..8, for the configured 8B taus at k = 3 (old: c = 8, d = 1):"]
    out += [f"  {row.label} {row.shape}: " + " ".join(f"{t:.3f}" for t in row.taus)
            + f"   tau5/tau3 {row.tau5_over_tau3:.3f}  tau7/tau3 {row.tau7_over_tau3:.3f}" for row in rep.tau_rows]
    if sensitivity:
        out += ["", "leave one source out (chosen variant):"]
        out += [f"  without {s.url}: c = {fmt_c(s.c)}, d = {s.d:.4f}, Think tau5/tau3 {s.tau5_over_tau3:.3f}"
                for s in rep.sensitivity]
    out += [f"wrote {shown(p)}" for p in rep.written]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit one EAGLE-3 acceptance shape (heterogeneity c, position decay d) "
                                             "to published acceptance curves.")
    ap.add_argument("--write", action="store_true", help="Write the fitted shape into the EAGLE-3 scenarios.")
    ap.add_argument("--sensitivity", action="store_true", help="Refit leaving out one source at a time.")
    args = ap.parse_args(argv)
    try:
        rep = fit(args.write, args.sensitivity)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(rep, args.sensitivity)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
