"""`specsim project SCENARIO`: the whole-run projection, parsing and printing only.

The projection itself (the scenario's `pipeline.steps` RL steps end to end, with SD and its AR
twin, paired replicates, 95 % intervals) and its results folder (per-step table, plot, summary,
report; resumable) are :func:`specsim.study.project_folder.project_scenario`; the text it prints is
:func:`specsim.study.projection.format_projection`. :mod:`specsim.cli.app` registers
:func:`project` as ``specsim project``. Errors and shared options come from :mod:`specsim.cli.common`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specsim.cli.common import (
    CatalogOpt,
    ForceOpt,
    Format,
    FormatOpt,
    FreshOpt,
    SetOpt,
    bad_option,
    console,
    emit_json,
    handle_errors,
    load_scenario_opts,
    use_catalog,
)
from specsim.study.project_folder import project_scenario
from specsim.study.projection import format_projection

__all__ = ["project"]


@handle_errors
def project(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (e.g. scenarios/235b_run.yaml).")],
    sets: SetOpt = None,
    replicates: Annotated[int, typer.Option("--replicates", "-r",
                                            help="Paired replicates (SD and AR on the same draws) per run.")] = 2,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel worker processes (the 2 × replicates "
                                                                  "runs spread over them).")] = 2,
    out: Annotated[str | None, typer.Option("--out", "-o", help="Results folder (default: <output.dir>/<scenario "
                                               "name>-project/). Rerunning the same command resumes there; a "
                                               "non-empty folder specsim did not write is refused unless --force.")] = None,
    force: ForceOpt = False,
    fresh: FreshOpt = False,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
) -> None:
    """Project a whole RL run: wall-clock and GPU-hours with and without SD, with 95 % intervals, and
    a results folder with the run step by step (per_step.csv, a plot, summary.md, report.html)."""
    if not 1 <= replicates <= 1000:   # as sweep.replicates; the cost bound then weighs the runs
        raise bad_option("--replicates", replicates, ">= 1 and <= 1,000 paired replicates")
    with use_catalog(catalog):
        load_scenario_opts(scenario, sets)
        res = project_scenario(scenario, list(sets or ()), out, replicates=replicates, jobs=jobs, force=force,
                               fresh=fresh, progress=not no_progress and fmt is Format.table)
    if fmt is Format.json:
        emit_json(res.to_dict())
        return
    con = console()
    con.print(format_projection(res.projection), markup=False, highlight=False, soft_wrap=True)
    for note in res.warnings:
        con.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    con.print(f"results: {res.out_dir} ({res.computed_runs} runs simulated, {res.reused_runs} reused); "
              f"summary: {res.out_dir / 'summary.md'}", markup=False, highlight=False, soft_wrap=True)
