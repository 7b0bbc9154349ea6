"""`specsim explain`: the ladder of counterfactual runs from the acceptance ceiling to the realised
gain, and its order-independent attribution (library: specsim/explain/ladder.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specsim.cli.common import Format, FormatOpt, SetOpt, console, emit_json, handle_errors
from specsim.explain.ladder import explain as run_explain
from specsim.explain.ladder import explanation_markdown, write_explanation
from specsim.scenario import load_scenario
from specsim.study.report.tables import jsonable
from specsim.study.store import open_results


@handle_errors
def explain(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (see scenarios/).")],
    point: Annotated[str | None, typer.Option("--point", help="The point to explain: name=value pairs, e.g. "
                                              "k=5,lag=2 (k, lag, tau, gpus, policy or dotted fields); default: "
                                              "the scenario's own values (its sweep is dropped).")] = None,
    replicates: Annotated[int | None, typer.Option("--replicates", help="Paired replicates (default: the "
                                                   "sweep's).")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="RL steps per run (default: pipeline.steps).")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Folder for explain.md/json, ladder.csv, shapley.csv "
                                            "and waterfall.png, and its runs/ (default: results/<name>-explain). "
                                            "Rerun to reuse finished runs.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel worker processes.")] = 2,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty --out folder specsim did not "
                                        "write.")] = False,
    sets: SetOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Where the speedup goes: one point run with each mechanism switched off and on (scenario
    what_if:) on the same draws; the ladder, Shapley shares with intervals, a waterfall plot."""
    if out is None:
        out = str(Path("results") / f"{load_scenario(scenario, list(sets or ())).name}-explain")
    # the one output guard, before any work; the runs kept in <out>/runs/: a rerun resumes there
    with open_results(out, force=force) as folder:
        e = run_explain(scenario, list(sets or ()), point=point, replicates=replicates, steps=steps, jobs=jobs,
                        store=folder.store)
        files = write_explanation(folder.path, e)
    if fmt is Format.json:
        emit_json({**jsonable(e.as_dict()), "files": files})
        return
    console().print(explanation_markdown(e), markup=False)
    console().print(f"written: {', '.join(files)} ({e.computed_runs} runs simulated, {e.reused_runs} reused)")
