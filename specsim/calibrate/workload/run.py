"""Fit the 8B workloads' unknowns and the trainer efficiencies to the published AR stage times, and
write the fitted values back (`specsim calibrate workload`; this module computes, the command prints).

    specsim calibrate workload                  # fit, print, write the fitted fields into the scenarios
    specsim calibrate workload --dry-run        # fit and print only
    specsim calibrate workload --targets F      # another target file with a `fit:` block, e.g.
        calibration/targets/vllm_eagle3_bs1.yaml  (h100_sxm's two SD overheads, with --write-profile)

One command, reproducible (deterministic simulator, fixed seeds, starts from the priors in the
target file's `fit:` block, caches nothing). What is fitted to what, and why: calibration/README.md,
"Calibration discipline". The fit itself is :mod:`specsim.calibrate.workload.fit`, the write-back
:mod:`specsim.calibrate.workload.write_back`; this module runs one after the other (:func:`run_workload_fit`).
Fitted `hardware.*` parameters (the SD overheads) are written into the scenarios' hardware profile
only with `write_profile`, and never on a dry run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specsim.calibrate.workload.fit import FitResult, fit_file
from specsim.calibrate.workload.write_back import field_comments, write_profile_values, write_scenarios
from specsim.catalog.hardware import load_hardware
from specsim.scenario import load_scenario
from specsim.validate.targets import resolve_scenario_path

#: the command's default target file, relative to the calibration folder it runs with
#: (specsim.validate.targets.find_calibration_dir): the 8B workloads and trainer efficiencies
DEFAULT_TARGETS = Path("targets") / "nemo_rl_8b.yaml"
COMMAND = "specsim calibrate workload"


@dataclass
class WorkloadFitRun:
    """A workload fit and what it wrote: the scenario files, and per profile the `block.key` values."""

    targets: str
    command: str                    # the command line written beside each fitted value
    result: FitResult
    hardware_params: list[str]      # fitted `hardware.*` paths (reported; written only with write_profile)
    written_scenarios: list[str] = field(default_factory=list)
    written_profiles: dict[str, dict[str, float]] = field(default_factory=dict)


def fit_command(targets: str | Path, calibration: str | Path | None = None) -> str:
    """The command line written beside each fitted value: names the target file unless it is the
    default of the `calibration` folder (DEFAULT_TARGETS), relative to the folder that holds
    `calibration` (the checkout) when it lies below it."""
    t = Path(targets).resolve()
    if calibration is None:
        return f"{COMMAND} --targets {targets}"
    cal = Path(calibration).resolve()
    if t == cal / DEFAULT_TARGETS:
        return COMMAND
    return f"{COMMAND} --targets {t.relative_to(cal.parent) if t.is_relative_to(cal.parent) else targets}"


def run_workload_fit(targets: str | Path, *, calibration: str | Path | None = None, dry_run: bool = False,
                     write_profile: bool = False, max_nfev: int = 40) -> WorkloadFitRun:
    """Fit every stage of `targets`' `fit:` block (at most `max_nfev` simulations per stage); unless
    `dry_run`, write the fitted scenario fields (each annotated with the command and its rows), and
    with `write_profile` the fitted `hardware.*` parameters into each affected scenario's profile.
    `calibration`: the folder the command's defaults came from (it shortens the command written)."""

    res = fit_file(targets, max_nfev=max_nfev)
    command = fit_command(targets, calibration)
    hw_params = sorted({q.path for s in res.stages for q in s.params if q.path.startswith("hardware.")})
    run = WorkloadFitRun(str(targets), command, res, hw_params)
    if dry_run:
        return run
    run.written_scenarios = write_scenarios(targets, res, field_comments(targets, res, command))
    if hw_params and write_profile:
        names_of: dict[str, set[str]] = {}   # profile -> the parameters whose scenarios run on it
        for s in res.stages:
            for q in s.params:
                if q.path.startswith("hardware."):
                    for f in q.scenarios:
                        prof = load_hardware(load_scenario(resolve_scenario_path(f, Path(targets))).hardware).path
                        names_of.setdefault(prof, set()).add(q.name)
        for prof in sorted(names_of):
            run.written_profiles[prof] = write_profile_values(targets, res, prof, f"{command} --write-profile",
                                                              names=names_of[prof])
    return run


__all__ = ["COMMAND", "DEFAULT_TARGETS", "WorkloadFitRun", "fit_command", "run_workload_fit"]
