"""`specsim run` and `specsim show scenario`: typer command functions that only parse options, call
:mod:`specsim.study.runner` and print (rich tables, or JSON with ``--format json``).

:mod:`specsim.cli.app` registers them on its app::

    app.command("run")(cli_run.run)
    show_app.command("scenario")(cli_run.show_scenario)

This module imports :mod:`specsim.cli.common` (the error wrapper and shared options), never
:mod:`specsim.cli.app`, so there is no import cycle. Bad input prints one ``error: ...`` paragraph and
exits 2.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specsim.atomic import dump_yaml
from specsim.cli.common import (
    CatalogOpt,
    ForceOpt,
    Format,
    FormatOpt,
    FreshOpt,
    SetOpt,
    console,
    emit_json,
    handle_errors,
    use_catalog,
)
from specsim.explain.in_run import run_and_explain
from specsim.study import runner
from specsim.study.report.summary import (
    bottleneck_text,
    counterfactual_note,
    explain_lines,
    ranked_points,
    runner_up_text,
    values_of,
    yaml_value,
)
from specsim.study.report.tables import capacity_answer, fmt_ci

__all__ = ["Backend", "run", "show_scenario"]


class Backend(str, Enum):
    local = "local"
    ray = "ray"


ScenarioArg = Annotated[str, typer.Argument(help="Scenario YAML (see scenarios/).")]


def _short_values(values: dict) -> str:
    """'k=2, policy_lag=1' for {'speculation.k': 2, 'pipeline.policy_lag': 1} (last path part,
    unless two paths share it)."""
    last = [k.split(".")[-1] for k in values]
    names = last if len(set(last)) == len(last) else list(values)

    return ", ".join(f"{n}={yaml_value(v)}" for n, v in zip(names, values.values())) or "-"


def _ci(m: dict | None, digits: int = 3) -> str:
    return fmt_ci(m, digits)


# ============================================================================ specsim run
@handle_errors
def run(
    scenario: ScenarioArg,
    sets: SetOpt = None,
    out: Annotated[str | None, typer.Option("--out", "-o", help="Results folder (default: <output.dir>/<scenario "
                                               "name>/). Rerunning the same command resumes there; a non-empty "
                                               "folder that specsim did not write is refused unless --force.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel worker processes (local) or Ray CPUs.")] = 2,
    backend: Annotated[Backend, typer.Option("--backend", help="local processes, or a Ray cluster.")] = Backend.local,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (ray.init(address=...)); "
                                                   "default: a local Ray instance.")] = None,
    force: ForceOpt = False,
    fresh: FreshOpt = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")] = False,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Run a scenario's sweep (every point, its baselines, the capacity plan) into a results folder:
    points.csv, steps.csv, summary.md/json and plots; the summary's explain block gives what the
    run measured at the best point and the `specsim explain` command for its ladder (computed too
    with `output.explain: ladder`). Resumable."""
    with use_catalog(catalog):
        res = run_and_explain(scenario, list(sets or ()), out=out, jobs=jobs, backend=backend.value, address=address,
                              progress=not no_progress and fmt is Format.table, force=force, fresh=fresh)
    if fmt is Format.json:
        emit_json({**res.to_dict(), "summary": res.summary})
        return
    _print_run(res)


def _print_run(res) -> None:
    s = res.summary
    con = console()
    if s.get("what_if"):
        con.print(f"[bold red]{counterfactual_note(s['what_if'])}[/bold red]", markup=True)
    con.print(f"[bold]{s['scenario']}[/bold]: {s['model']} on {s['hardware']} — {res.rows} rows "
              f"({res.combinations} points × {res.replicates} replicates); {res.computed_runs} runs simulated, "
              f"{res.reused_runs} reused; {res.wall_s:.1f} s")
    con.print(f"results: {res.out_dir}")
    same = s["sync_ar"]["is_baseline"]
    t = Table(title=f"points (means; 95 % CI over replicates where n ≥ 2) — ranked by {s['rank_by']}"
                    + ("; the baseline is sync AR" if same else ""), title_justify="left", header_style="bold")
    cols = ["#", "point", "policy", "E2E vs sync AR"] + ([] if same else ["E2E vs baseline"]) + \
        ["gen vs baseline", "step s", "τ"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("point", "policy") else "right", no_wrap=c != "point")
    best = (s.get("best") or {}).get("point")
    for e in ranked_points(s):
        vals = _short_values(e["values"])
        mark = " *" if e["point"] == best else ""
        cells = [f"{e['point']}{mark}", vals, e["sd_policy"], _ci(e["e2e_speedup_vs_sync_ar"])]
        cells += [] if same else [_ci(e["e2e_speedup"])]
        cells += [_ci(e["generation_speedup"]), _ci(e["step_s"], 1), _ci(e["tau"], 2)]
        t.add_row(*cells)
    con.print(t)
    b = s.get("best")
    if b:
        vals = _short_values(b["values"]) if b["values"] else "(no sweep)"
        lag = f"policy lag={b['policy_lag']}" if b["mode"] == "async" else "sync"
        con.print(f"[bold]best[/bold] (*): {vals} — {b['sd_policy']}, k={b['k']}, {lag}: "
                  f"E2E {_ci(b['e2e_speedup_vs_sync_ar'])}× vs sync AR, {_ci(b['e2e_speedup'])}× vs baseline, "
                  f"generation {_ci(b['generation_speedup'])}×")
    margin = s.get("best_vs_runner_up")
    if margin:
        con.print(runner_up_text(margin, s["rank_by"], _short_values(values_of(s, margin["runner_up"]))))
    idle = (b or {}).get("trainer_idle_share") or {}
    if idle.get("mean") is not None:
        con.print(f"bottleneck of the best point: {bottleneck_text(idle['mean'])} "
                  f"(trainer idle {100 * idle['mean']:.1f} % of the step)")
    if s.get("sd_gain_over_best_ar"):
        con.print(f"SD gain over the best AR configuration: {_ci(s['sd_gain_over_best_ar'])}×")
    for line in explain_lines(s.get("explain")):
        con.print(line, markup=False, highlight=False)
    if s["replicates"] < 2:
        con.print(f"note: {s['ci']}")
    cap = s.get("capacity") or {}
    for v, label in (("ar", "without SD"), ("sd", "with SD")):
        m = (cap.get("minimum") or {}).get(v)
        if m and m.get("simulated") and cap.get("target_step_s"):
            con.print(f"capacity: {label}, minimum rollout GPUs for the {cap['target_step_s']:.1f} s target "
                      f"({cap['target_source']}): {capacity_answer(m, cap['sizes'])}")
        elif m and cap.get("target_step_s"):
            con.print(f"capacity: {label}, no simulated rollout size reaches the {cap['target_step_s']:.1f} s target")
    for note in cap.get("notes", []) + list(s.get("warnings") or []) + list(res.warnings):   # rel (#15 rows 1, 5, 7, 18): notes and warnings
        con.print(f"[yellow]note:[/yellow] {note}")
    con.print(f"summary: {Path(res.out_dir) / 'summary.md'}")


# ============================================================================ specsim show scenario
@handle_errors
def show_scenario(
    scenario: ScenarioArg,
    sets: SetOpt = None,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """The resolved scenario (after --set) and the points its sweep will run. Simulates nothing."""
    with use_catalog(catalog):
        info = runner.show_scenario(scenario, list(sets or ()))
    if fmt is Format.json:
        emit_json(info)
        return
    con = console()
    con.print(f"[bold]{info['scenario']}[/bold] ({info['file']}): {info['model']} on {info['hardware']}; "
              f"resolved sha256 {info['resolved_sha256'][:12]}")
    con.print(dump_yaml(info["resolved"], sort_keys=False).rstrip(), markup=False)
    b = info["baseline"]
    con.print(f"baseline: {b['overrides']} ({b['mode']}); sync AR is the baseline: {b['sync_ar_is_baseline']}")
    t = Table(title=f"{info['rows']} points ({info['combinations']} combinations × {info['replicates']} replicates), "
                    f"{info['runs']} distinct pipeline runs", title_justify="left", header_style="bold")
    for c in ("#", "point_id", "replicate", "values", "k", "mode"):
        t.add_column(c, justify="left" if c in ("point_id", "values", "mode") else "right")
    for p in info["points"]:
        vals = ", ".join(f"{k}={v}" for k, v in p["values"].items()) or "-"
        t.add_row(str(p["point"]), p["point_id"], str(p["replicate"]), vals, str(p["k"]), p["mode"])
    con.print(t)
