"""specsim command line: parses arguments, calls the library, prints. No modeling here.

Commands (``specsim --help``, ``specsim COMMAND --help``):

    specsim list hardware|models
    specsim show model NAME      --hardware H --tp N [--ep N] [--pp N] [--context C] ...
    specsim show drafter         --model M --kind K (--tau T --tau-k K | --alpha A) ...
    specsim show lengths SCENARIO [--set path=value ...] [--samples N]
    specsim show hardware NAME    [--format table|json]                               (cli/show.py)
    specsim show scenario SCENARIO [--set path=value ...]                             (cli/run.py)
    specsim check SCENARIO        [--set path=value ...] [--format table|json]
    specsim run SCENARIO          [--set path=value ...] [--out DIR] [--jobs N]        (cli/run.py)
    specsim project SCENARIO      [--set path=value ...] [--replicates N] [--format table|json]
                                                                                      (cli/project.py)
    specsim validate [TARGETS...] [--calibration DIR] [--tolerance T] [--out DIR] [--format table|json]
    specsim calibrate traces TRACES... --hardware H [--model M] [--drafter K] [--out FILE]
    specsim calibrate kernels     [--source aiconfigurator] [--system S] [--backend B] [--out DIR]
    specsim calibrate workload    [--targets F] [--calibration DIR] [--dry-run] [--write-profile] [--max-nfev N]
    specsim calibrate a100-sweep  [--calibration DIR] [--write-profile]
    specsim calibrate acceptance METRICS [--format json]

What the commands report is computed by library functions that return data: :mod:`specsim.explain.show`
(show model/drafter/lengths), :mod:`specsim.explain.check` (check), :mod:`specsim.study.runner` (run, show
scenario), :mod:`specsim.study.projection` (project), :mod:`specsim.validate.run` (validate),
:mod:`specsim.calibrate` (calibrate traces; kernels: :mod:`specsim.calibrate.kernels.describe`; workload:
:mod:`specsim.calibrate.workload.run`; a100-sweep: :mod:`specsim.calibrate.kernels.a100_sweep`). Errors, shared options and output
helpers are in :mod:`specsim.cli.common`: bad input prints one ``error: ...`` paragraph to stderr
and exits 2 — never a traceback; a bug prints ``internal error: ...`` and exits 1.

Adding a command: define it on ``app`` (or a sub-typer, in its own module under specsim/cli/ that
imports :mod:`specsim.cli.common` and never this module), decorate it with ``@handle_errors``
below the ``@app.command`` line, take ``--set`` via ``SetOpt`` and ``--format`` via ``FormatOpt``,
and print through ``console()`` / ``emit_json()``.
"""

import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from specsim import __version__
from specsim.atomic import output_folder, write_csv, write_text
from specsim.calibrate.kernels.a100_sweep import sweep_comparison
from specsim.cli import common
from specsim.cli import explain as cli_explain
from specsim.cli import plan as cli_plan
from specsim.cli import project as cli_project
from specsim.cli import run as cli_run
from specsim.cli.calibrate import calibrate_app
from specsim.cli.common import CalibrationOpt, CatalogOpt, Format, FormatOpt, SetOpt, handle_errors, use_catalog
from specsim.cli.show import show_app
from specsim.explain.check import check_report
from specsim.explain.show import hardware_listing, model_listing
from specsim.scenario.plan_section import PlanSection
from specsim.study.planner import plan_checks
from specsim.study.runner import check_points
from specsim.validate.run import error_summary, validate
from specsim.validate.targets import calibration_dir_if_any, find_calibration_dir, target_files
from specsim.world.resolve import resolve

# the command bodies' short names for the shared helpers
_bad_option, _b, _console, _emit_json = common.bad_option, common.billions, common.console, common.emit_json
_load_scenario, _table = common.load_scenario_opts, common.table

app = typer.Typer(
    name="specsim",
    help="Simulate speculative decoding in RL post-training rollouts: how much faster does an RL step get "
         "with SD, on which model, cluster and workload?",
    no_args_is_help=True,
    add_completion=True,   # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(show_app, name="show")   # show model|drafter|lengths (cli/show.py), show scenario (below)


# ============================================================================ root
def _version(value: bool) -> None:
    if value:
        typer.echo(f"specsim {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """specsim: calibrated simulation of speculative decoding in RL rollouts."""


# ============================================================================ list
class ListWhat(str, Enum):
    hardware = "hardware"
    models = "models"


@app.command("list")
@handle_errors
def list_cmd(what: Annotated[ListWhat, typer.Argument(help="What to list.")], catalog: CatalogOpt = None,
             fmt: FormatOpt = Format.table) -> None:
    """List the bundled hardware profiles or the model catalog (bundled and user: --catalog, $SPECSIM_CATALOG)."""
    with use_catalog(catalog):
        rows = hardware_listing() if what is ListWhat.hardware else model_listing()
    if fmt is Format.json:
        _emit_json({what.value: rows})
        return
    if what is ListWhat.hardware:
        t = _table("hardware profiles (per GPU, dense peaks)", "name", "description", "BF16 TF/s", "HBM GB",
                   "HBM TB/s", "NVLink GB/s/dir", "NVLink domain", right_from=2)
        for r in rows:
            t.add_row(r["name"], r["description"], f"{r['bf16_dense_tflops']:.0f}", f"{r['hbm_gb']:.0f}",
                      f"{r['hbm_tb_per_s']:.2f}", f"{r['nvlink_gb_per_s_per_direction']:.0f}", str(r["nvlink_domain_gpus"]))
    else:
        t = _table("model catalog", "name", "params", "active params", "layers", "MoE experts/top-k", "source",
                   right_from=1)
        for r in rows:
            moe = f"{r['moe_experts']}/{r['moe_top_k']}" if r["moe_experts"] else "dense"
            t.add_row(r["name"], _b(r["total_params"]), _b(r["active_params"]), str(r["layers"]), moe, r["source"])
        t.columns[-1].justify = "left"
    _console().print(t)


# ============================================================================ check
@app.command("check")
@handle_errors
def check(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML.")],
    sets: SetOpt = None,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Load and resolve a scenario (schema, catalog names, layout fit); print a summary and warnings."""
    with use_catalog(catalog):
        sc = _load_scenario(scenario, sets)
        world = resolve(sc)
        info = check_report(world, scenario)
        info["sweep_rows"] = sc.rows  # rows the sweep asks for (limit MAX_SWEEP_ROWS)
        info["sweep"] = check_points(sc)  # refuses every point `run` would refuse
        if sc.plan != PlanSection():    # a plan section: what `plan` refuses before simulating
            info["plan"] = plan_checks(sc)[2]
    w, d = sc.workload, sc.drafter
    info["warnings"] += info["sweep"].pop("warnings")
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold green]OK[/bold green] {sc.name} ({scenario})")
    t = _table("summary", "item", "value", right_from=2)
    t.add_row("model / hardware", f"{world.model.name} on {world.hw.name}" if not world.mixed_hardware else
              f"{world.model.name}: trained on {world.trainer_hw.name}, generated on {world.hw.name}")
    t.add_row("rollout", f"{world.engines} engines × {world.layout.describe()} = {sc.rollout.gpus} GPUs, "
                         f"≤ {world.rollout.max_batch} running sequences each"
                         + ("" if sc.rollout.max_batch else " (vLLM's default max_num_seqs for this GPU)"))
    tr = info["trainer"]
    t.add_row("training", f"{sc.pipeline.mode}: {tr['layout']}, {tr['sharding']}, MFU {tr['mfu']:.3f}")
    if world.pipeline.mode == "async":
        limit = world.pipeline.max_groups_in_flight
        t.add_row("pipeline", f"async, policy lag {world.pipeline.policy_lag}, "
                              + ("in-flight weight updates" if world.pipeline.partial_rollouts else "drain-then-swap updates")
                              + (f", ≤ {limit:,} prompt groups in flight ({limit * w.group_size:,} sequences)"
                                 if limit else ", no limit on groups in flight"))
    t.add_row("trainer, step 0's draw", f"{tr['tokens'] / 1e6:.1f} M tokens in {tr['optimizer_steps']} optimizer "
                                        f"step(s), {tr['micro_batches']} micro-batches per data-parallel rank: train "
                                        f"{tr['train_s']:.1f} s (math {tr['compute_s']:.1f}, data-parallel exchange "
                                        f"{tr['dp_comm_s']:.1f}, pipeline bubble + TP + EP + CP "
                                        f"{tr['bubble_tp_ep_s']:.1f}, host time per layer pass {tr['overhead_s']:.1f}), "
                                        f"logprob {tr['logprob_s']:.1f} s")
    t.add_row("KV capacity per engine", f"{world.kv_capacity_tokens:,} tokens "
                                        f"({info['max_length_sequences_in_kv']} max-length sequences)")
    mem = ", ".join(f"{common.gb_label(key)} {v:.1f}" for key, v in info["memory_gb_per_gpu"].items())
    t.add_row(f"rollout memory per GPU (GB, {world.hw.name})", mem)
    tm = tr["memory_gb_per_gpu"]
    t.add_row(f"trainer memory per GPU (GB, {world.trainer_hw.name})",
              f"model state {tm['model_state']:.1f}, activations {tm['activations']:.1f}, total {tm['total']:.1f} "
              f"of {tm['hbm']:.1f}")
    t.add_row("workload", f"{w.prompts} prompts × {w.group_size} = {info['responses_per_step']:,} responses/step, "
                          f"max {w.max_response_tokens} tokens")
    t.add_row("drafter", f"{d.kind}, α0 = {info['alpha0']:.3f}, τ = {info['tau_at_k']['tau']:.2f} at k = {d.tau_at_k}")
    if info["tau_over_context"]:
        oc = info["tau_over_context"]
        t.add_row(f"τ at k = {oc['k']} over context", ", ".join(f"{c // 1000}k {v:.2f}" for c, v in oc["tau"].items())
                  + f" (mean α; curve scaled ×{oc['scale']:.3f} so the run reports τ)")
    t.add_row("SD policy", world.policy.label)
    t.add_row("sweep", f"{sc.rows:,} rows (combinations × replicates)")  # rel (#15 row 2)
    wk = info["sweep"]["work"]
    t.add_row("cost estimate", f"{wk['runs']:,} pipeline runs + ≈{wk['capacity_runs']:,} capacity runs, "
                               f"≈{wk['tokens'] + wk['capacity_tokens']:.3g} simulated tokens "
                               f"(bound {wk['max_tokens']:.3g}: output.max_simulated_tokens)")
    con.print(t)
    for msg in info["warnings"]:
        con.print(f"[yellow]warning:[/yellow] {msg}")


@app.command("validate")
@handle_errors
def validate_cmd(
    targets: Annotated[list[str] | None, typer.Argument(help="Target YAML files or folders (default: the targets/*.yaml "
                                                             "of the calibration folder).")] = None,
    tolerance: Annotated[float | None, typer.Option("--tolerance", help="Override every row's relative tolerance.")] = None,
    calibration: CalibrationOpt = None,
    out: Annotated[str, typer.Option("--out", help="Folder for validation.csv and validation.md (new, empty or "
                                                   "written by specsim; others only with --force).")] = "results/validation",
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty --out folder specsim did not write.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Run each published target's scenario and print measured vs simulated; exit 1 if any row fails."""
    if tolerance is not None and not tolerance > 0:
        raise _bad_option("--tolerance", tolerance, "a relative tolerance > 0")
    files = [str(f) for f in target_files(targets, calibration)]   # the default found before any folder is written
    # the A100 forward sweep (a kernel-level section) needs the calibration folder's published sweeps: skipped
    # when the user's own target files are validated outside a checkout
    cal_dir = find_calibration_dir(calibration) if not targets or calibration else calibration_dir_if_any()
    with output_folder(out, "--out", force=force) as folder:   # the one output guard, before any work
        rows = validate(files, tolerance)
        frame = pd.DataFrame([r.as_dict() for r in rows])
        groups = error_summary(rows)
        sweep = None if cal_dir is None else sweep_comparison(root=cal_dir.parent)
        _write_validation(folder, frame, rows, groups, sweep)
    failed = int((frame["result"] != "pass").sum())
    _print_validation(frame, rows, failed, folder, fmt, groups, sweep)
    if failed:
        raise typer.Exit(1)


_VALIDATION_COLS = ["target", "metric", "params", "role", "measured", "simulated", "simulated_se_pct", "error_pct",
                    "tolerance_pct", "result"]


_GROUP_COLS = ["file", "gpu", "model", "rows", "within", "predictions", "predictions_within", "median_abs_error_pct",
               "median_signed_error_pct"]


def _group_cells(g) -> list[str]:
    d = g.as_dict()
    return [str(d[c]) if not c.endswith("_pct") else f"{d[c]:+.1f}" if "signed" in c else f"{d[c]:.1f}"
            for c in _GROUP_COLS]


def _sweep_line(sweep) -> str:
    ratios, growth = sweep
    within = int(ratios["within"].sum())
    fit = ratios["role"] == "fit"
    g = growth["rel_error"].abs()
    return (f"A100 forward sweep (EfficientRollout, Qwen2.5-7B and Llama-3.1-8B): verify / decode within 20 % at "
            f"{within} of {len(ratios)} points ({int(ratios.loc[fit, 'within'].sum())} / {int(fit.sum())} with a fit "
            f"row, {int(ratios.loc[~fit, 'within'].sum())} / {int((~fit).sum())} predictions); decode growth from "
            f"batch 1 to 64 within 10 % at {int((g <= 0.10).sum())} of {len(growth)} (model, prompt) pairs")


def _sweep_md(sweep) -> list[str]:
    ratios, growth = sweep
    md = ["", "## A100 forward sweep: verify ÷ decode and decode growth", "", _sweep_line(sweep) + ".",
          "Priced as the sweep runs (one prompt shared by the batch: specsim/calibrate/kernels/forward_sweep.py); "
          "role `fit`: a row of the pair fitted an a100_sxm term (`specsim calibrate a100-sweep`).", "",
          "| model | batch | prompt | gamma | role | measured | specsim | error % |", "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r.model} | {r.batch} | {r.seq} | {r.gamma} | {r.role} | {r.measured_ratio:.3f} | "
           f"{r.priced_ratio:.3f} | {100 * r.rel_error:+.1f} |" for r in ratios.itertuples()]
    md += ["", "| model | prompt | decode(64) ÷ decode(1) measured | specsim | error % |", "|---|---|---|---|---|"]
    md += [f"| {r.model} | {r.seq} | {r.measured_growth:.3f} | {r.priced_growth:.3f} | {100 * r.rel_error:+.1f} |"
           for r in growth.itertuples()]
    return md


def _write_validation(folder: Path, frame, rows, groups, sweep) -> None:
    write_csv(folder / "validation.csv", frame)
    if sweep is not None:
        write_csv(folder / "validation_sweep.csv", sweep[0])
    write_csv(folder / "validation_groups.csv", pd.DataFrame([g.as_dict() for g in groups], columns=_GROUP_COLS))
    cols = _VALIDATION_COLS
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    shown = [r.display() for r in rows]   # rounded for reading; CSV/JSON keep full precision
    md += ["| " + " | ".join(r[c] for c in cols) + " |" for r in shown]
    md += ["", "## Error by GPU and model", "", "| " + " | ".join(_GROUP_COLS) + " |", "|" + "---|" * len(_GROUP_COLS)]
    md += ["| " + " | ".join(_group_cells(g)) + " |" for g in groups]
    md += _sweep_md(sweep) if sweep is not None else []
    write_text(folder / "validation.md", "# specsim validate\n\n" + "\n".join(md) + "\n")


def _print_validation(frame, rows, failed: int, folder: Path, fmt, groups, sweep) -> None:
    cols = _VALIDATION_COLS
    shown = [r.display() for r in rows]
    if fmt is Format.json:
        _emit_json({"rows": [r.as_dict() for r in rows], "groups": [g.as_dict() for g in groups], "failed": failed,
                    "out": str(folder), "sweep": None if sweep is None else {
                        "ratios": sweep[0].to_dict(orient="records"),
                        "decode_growth": sweep[1].to_dict(orient="records")}})
    else:
        t = _table("measured vs simulated", *cols, right_from=4)
        for r in shown:
            t.add_row(*(r[c] for c in cols))
        con = _console()
        con.print(t)
        gt = _table("error by GPU and model (median |error| and signed error, %)", *_GROUP_COLS, right_from=3)
        for g in groups:
            gt.add_row(*_group_cells(g))
        con.print(gt)
        by_role = ", ".join(f"{role} {int((g['result'] == 'pass').sum())} / {len(g)}"
                            for role, g in frame.groupby("role", sort=True))
        if sweep is not None:
            con.print(_sweep_line(sweep) + " (every point: validation.md, validation_sweep.csv)")
        con.print(f"{len(frame) - failed} of {len(frame)} rows within tolerance ({by_role}); "
                  f"written to {folder}/validation.csv, validation_groups.csv, validation_sweep.csv, .md")


# `specsim run` and `specsim show scenario` live in cli/run.py, `specsim project` in cli/project.py,
# `specsim calibrate ...` in cli/calibrate.py (parsing and printing only)
app.command("run")(cli_run.run)
show_app.command("scenario")(cli_run.show_scenario)
app.command("project")(cli_project.project)
app.command("plan")(cli_plan.plan)
app.command("explain")(cli_explain.explain)
app.add_typer(calibrate_app, name="calibrate")


# ============================================================================ entry point
def main() -> None:
    """Console-script entry point (`specsim`, `python -m specsim`): streams made safe first (a
    closed stdout, a C locale), matplotlib's backend set to Agg (specsim only writes image files,
    so an inherited MPLBACKEND, valid or not, must not reach it), and a reader that goes away
    (`| head -1`) ends the command quietly."""
    common.safe_streams()
    os.environ["MPLBACKEND"] = "agg"   # specsim only draws into files (Agg); a bogus inherited value broke the plots
    try:
        app()
    except BrokenPipeError:
        common.quiet_closed_stdout()
        raise SystemExit(0) from None


if __name__ == "__main__":
    main()
