"""`specsim project SCENARIO`: the whole-run projection, parsing and printing only.

The projection itself (the scenario's `pipeline.steps` RL steps end to end, with SD and its AR
twin, paired replicates, 95 % intervals) is :func:`specsim.study.projection.project_run`; the text
it prints is :func:`specsim.study.projection.format_projection`. :mod:`specsim.cli.app` registers
:func:`project` as ``specsim project``. Errors and shared options come from :mod:`specsim.cli.common`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specsim.cli.common import (
    CatalogOpt,
    Format,
    FormatOpt,
    SetOpt,
    bad_option,
    console,
    emit_json,
    handle_errors,
    load_scenario_opts,
    use_catalog,
)

__all__ = ["project"]


@handle_errors
def project(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (e.g. scenarios/235b_run.yaml).")],
    sets: SetOpt = None,
    replicates: Annotated[int, typer.Option("--replicates", "-r",
                                            help="Paired replicates (SD and AR on the same draws) per run.")] = 2,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel worker processes (the 2 × replicates "
                                                                  "runs spread over them).")] = 2,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
) -> None:
    """Project a whole RL run: wall-clock and GPU-hours with and without SD, with 95 % intervals."""
    from specsim.study.projection import format_projection, project_run
    from specsim.study.report.progress import Progress

    if not 1 <= replicates <= 1000:   # as sweep.replicates; the cost bound then weighs the runs
        raise bad_option("--replicates", replicates, ">= 1 and <= 1,000 paired replicates")
    with use_catalog(catalog):
        sc = load_scenario_opts(scenario, sets)
    # points: paired replicates done; simulation runs: pipeline runs (SD and AR per replicate)
    with Progress(not no_progress and fmt is Format.table, replicates) as prog:
        prog.set_runs(2 * replicates)
        done = []

        def on_run(r: int) -> None:
            prog.runs_done()
            done.append(r)
            prog.set_points(sum(done.count(x) == 2 for x in set(done)))   # runs end in any order

        with use_catalog(catalog):
            p = project_run(sc, replicates=replicates, jobs=jobs, on_run=on_run,
                            on_progress=prog.run_progress if prog.enabled else None)
    if fmt is Format.json:
        emit_json(p)
        return
    console().print(format_projection(p), markup=False, highlight=False, soft_wrap=True)
