"""Fit the 8B workloads' unknowns and the trainer efficiencies to the published AR stage times.

    python calibration/fit_8b.py                 # fit, print, write the fitted fields into the scenarios
    python calibration/fit_8b.py --dry-run       # fit and print only
    python calibration/fit_8b.py --targets F     # another target file with a `fit:` block, e.g.
        calibration/targets/vllm_eagle3_bs1.yaml  (h100_sxm's two SD overheads, with --write-profile)

One command, reproducible (deterministic simulator, fixed seeds, starts from the priors in the
target file's `fit:` block, caches nothing). What is fitted to what, and why: calibration/README.md,
"Calibration discipline". Library code: specsim/calib_workload.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specsim.calib_workload import fit_file  # noqa: E402
from specsim.calib_write import field_comments, write_profile_values, write_scenarios  # noqa: E402
from specsim.errors import SpecError  # noqa: E402
from specsim.scenario import ScenarioError  # noqa: E402

DEFAULT = ROOT / "calibration" / "targets" / "nemo_rl_8b.yaml"


def _command(targets: Path) -> str:
    """The command line written beside each fitted value: names the target file unless it is the default."""
    t = targets.resolve()
    if t == DEFAULT.resolve():
        return "python calibration/fit_8b.py"
    return f"python calibration/fit_8b.py --targets {t.relative_to(ROOT) if t.is_relative_to(ROOT) else targets}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default=str(DEFAULT), help="target file with a `fit:` block")
    ap.add_argument("--dry-run", action="store_true", help="do not write the scenarios")
    ap.add_argument("--write-profile", action="store_true",
                    help="also write fitted hardware.* parameters (the SD overheads) into the scenarios' profile")
    ap.add_argument("--max-nfev", type=int, default=40, help="simulations per stage at most (least_squares)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        res = fit_file(a.targets, max_nfev=a.max_nfev)
    except (SpecError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for s in res.stages:
        print(f"\nstage {s.name}: " + (s.skipped or f"{len(s.params)} parameters, {len(s.rows)} rows, "
                                        f"Jacobian rank {s.rank}, {s.nfev} evaluations"))
        for r in s.summary_rows():
            print(f"  {r['parameter']:24s} prior {r['prior']:<10.4g} fitted {r['fitted']:<10.4g} "
                  f"+- {r['stderr']:<9.3g} {r['status']:8s} {r['unit']}")
        for r in s.rows:
            print(f"  row {r['target']:26s} measured {r['measured']:<8.4g} prior-sim {r['prior_simulated']:<9.4g} "
                  f"fitted-sim {r['fitted_simulated']:<9.4g} residual {r['residual_pct']:+.1f} %")
    command = _command(Path(a.targets))
    if not a.dry_run:
        comment = field_comments(a.targets, res, command)
        for f in write_scenarios(a.targets, res, comment):
            print(f"wrote {f}")
    hw_params = {q.path for s in res.stages for q in s.params if q.path.startswith("hardware.")}
    if hw_params and a.write_profile and not a.dry_run:
        from specsim.hardware import load_hardware
        from specsim.scenario import load_scenario

        profiles = {load_hardware(load_scenario(f).hardware).path for s in res.stages for q in s.params
                    if q.path.startswith("hardware.") for f in q.scenarios}
        for prof in sorted(profiles):
            done = write_profile_values(a.targets, res, prof, f"{command} --write-profile")
            print(f"wrote {prof}: {done}")
    elif hw_params:
        print(f"hardware parameters {sorted(hw_params)} reported only (--write-profile writes them)")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
