"""`specsim plan`: parses options, calls :func:`specsim.study.planner.plan_scenario`, prints.

Registered in :mod:`specsim.cli.app` as ``app.command("plan")(cli_plan.plan)``. Every flag that
names a plan constraint is a `--set plan.…` override (so resolved plan.yaml records it).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from specsim.cli.common import Format, FormatOpt, SetOpt, console, emit_json, handle_errors
from specsim.cli.run import Backend, ScenarioArg
from specsim.errors import SpecError
from specsim.study.planner import plan_scenario
from specsim.study.planner.report import plan_markdown

__all__ = ["plan"]


def _gpus(text: str) -> list[int] | int:
    """'2048', '512,1024,2048' or '512:2048:512' (start:stop:step, inclusive)."""
    try:
        if ":" in text:
            a, b, c = (int(x) for x in text.split(":"))
            if c < 1 or b < a:
                raise ValueError
            return list(range(a, b + 1, c))
        vals = [int(x) for x in text.split(",") if x.strip()]
        return vals[0] if len(vals) == 1 else vals
    except ValueError:
        raise SpecError("--gpus", text, "a GPU count, a list 512,1024 or a range 512:2048:512",
                        where="command line") from None


@handle_errors
def plan(
    scenario: ScenarioArg,
    sets: SetOpt = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="Total GPUs: N, a list N1,N2 or a range A:B:STEP "
                                                            "(plan.total_gpus).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="GPU types, comma-separated (plan.hardware); TRAINING+ROLLOUT is a mixed pair (gb200+h200_sxm: GB200 trains, H200 generates; async).")] = None,
    max_lag: Annotated[int | None, typer.Option("--max-lag", help="Largest policy lag tolerated "
                                                                  "(plan.max_policy_lag).")] = None,
    k: Annotated[str | None, typer.Option("--k", help="Draft lengths, comma-separated; 0 = AR (plan.k).")] = None,
    target: Annotated[float | None, typer.Option("--target", help="Target step time in s (plan.target_step_s).")] = None,
    objective: Annotated[str | None, typer.Option("--objective", help="min_step_time | min_gpus | min_gpu_hours | "
                                                                      "min_usd (plan.objective).")] = None,
    max_usd_per_hour: Annotated[float | None, typer.Option("--max-usd-per-hour", help="A $/hour budget for the "
                                                           "cluster (plan.max_usd_per_hour; prices: "
                                                           "output.gpu_hour_usd).")] = None,
    run_steps: Annotated[int | None, typer.Option("--run-steps", help="RL steps of the whole run: also quote $ and "
                                                  "GPU-hours per run (plan.run_steps).")] = None,
    replicates: Annotated[int | None, typer.Option("--replicates", help="Replicates of the finalists "
                                                                        "(plan.search.replicates).")] = None,
    min_gpus_for: Annotated[float | None, typer.Option("--min-gpus-for", help="Also: the fewest GPUs whose best AR / "
                                                       "SD configuration reaches this step time (s), by bisection; "
                                                       "each probe searches the allowed layouts and splits at its "
                                                       "count (k and lag held).")] = None,
    break_even_tau: Annotated[bool, typer.Option("--break-even-tau", help="Also: the drafter τ at which SD breaks "
                                                 "even (and reaches the target), by bisection.")] = False,
    stops_paying: Annotated[bool, typer.Option("--stops-paying", help="Also: the k and policy lag at which SD "
                                               "stops paying, by bisection.")] = False,
    out: Annotated[str | None, typer.Option("--out", "-o", help="Results folder (default: "
                                             "<output.dir>/<scenario>-plan/). Rerun to reuse finished runs.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel worker processes (local) or Ray CPUs.")] = 2,
    backend: Annotated[Backend, typer.Option("--backend", help="local processes, or a Ray cluster.")] = Backend.local,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite results of a different scenario in --out.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Search the configurations a scenario's `plan:` allows: best AR and SD configuration, SD's gain at
    each one's own optimum, Pareto fronts, and inverse answers. Resumable."""
    ov = list(sets or ())
    if gpus is not None:
        ov.append(f"plan.total_gpus={json.dumps(_gpus(gpus))}")
    if hardware is not None:
        ov.append(f"plan.hardware={json.dumps([h.strip() for h in hardware.split(',') if h.strip()])}")
    if max_lag is not None:
        ov.append(f"plan.max_policy_lag={max_lag}")
    if k is not None:
        ov.append(f"plan.k=[{k}]")
    if target is not None:
        ov.append(f"plan.target_step_s={target}")
    if objective is not None:
        ov.append(f"plan.objective={objective}")
    if max_usd_per_hour is not None:
        ov.append(f"plan.max_usd_per_hour={max_usd_per_hour}")
    if run_steps is not None:
        ov.append(f"plan.run_steps={run_steps}")
    if replicates is not None:
        ov.append(f"plan.search.replicates={replicates}")
    res = plan_scenario(scenario, ov, out=out, jobs=jobs, backend=backend.value, address=address, force=force,
                        progress=not no_progress and fmt is Format.table, min_gpus_for=min_gpus_for,
                        break_even_tau=break_even_tau, stops_paying=stops_paying)
    if fmt is Format.json:
        emit_json(res.summary)
        return

    con = console()
    con.print(plan_markdown(res.summary), markup=False)
    for w in res.warnings:
        con.print(f"note: {w}", markup=False)
    con.print(f"results: {res.out_dir}", markup=False)
