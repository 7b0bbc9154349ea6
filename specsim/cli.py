"""specsim command line: parses arguments, calls the library, prints. No modeling here.

Commands (``specsim --help``):

    specsim list hardware|models
    specsim show model NAME      --hardware H --tp N [--ep N] [--pp N] [--context C] ...
    specsim show drafter         --model M --kind K (--tau T --tau-k K | --alpha A) ...
    specsim show lengths SCENARIO [--set path=value ...] [--samples N]
    specsim show scenario SCENARIO [--set path=value ...]       (cli_run.py)
    specsim check SCENARIO        [--set path=value ...] [--format table|json]
    specsim run SCENARIO          [--set path=value ...] [--out DIR] [--jobs N]   (cli_run.py)
    specsim validate [TARGETS...]  /  specsim calibrate TRACES... --hardware H

What the commands report is computed by library functions that return data: :mod:`specsim.show`
(show model/drafter/lengths), :mod:`specsim.doctor` (check), :mod:`specsim.runner` (run, show
scenario), :mod:`specsim.validate`, :mod:`specsim.calibrate`. Errors, shared options and output
helpers are in :mod:`specsim.cli_common`: bad input prints one ``error: ...`` paragraph to stderr
and exits 2 — never a traceback; a bug prints ``internal error: ...`` and exits 1.

Adding a command: define it on ``app`` (or a sub-typer), decorate it with ``@handle_errors``
below the ``@app.command`` line, take ``--set`` via ``SetOpt`` and ``--format`` via ``FormatOpt``,
and print through ``_console()`` / ``_emit_json()``.
"""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from specsim import __version__, cli_run
from specsim import cli_common as common
from specsim.cli_common import Format, FormatOpt, SetOpt, handle_errors
from specsim.cli_show import show_app

# the command bodies' short names for the shared helpers
_bad_option, _b, _console, _emit_json = common.bad_option, common.billions, common.console, common.emit_json
_load_scenario, _table = common.load_scenario_opts, common.table

app = typer.Typer(
    name="specsim",
    help="Simulate speculative decoding in RL post-training rollouts: how much faster does an RL step get "
         "with SD, on which model, cluster and workload?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(show_app, name="show")   # show model|drafter|lengths (cli_show.py), show scenario (below)


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
def list_cmd(what: Annotated[ListWhat, typer.Argument(help="What to list.")]) -> None:
    """List the bundled hardware profiles or the model catalog."""
    con = _console()
    if what is ListWhat.hardware:
        from specsim.hardware import list_hardware, load_hardware

        t = _table("hardware profiles (per GPU, dense peaks)", "name", "description", "BF16 TF/s", "HBM GB",
                   "HBM TB/s", "NVLink GB/s/dir", "NVLink domain", right_from=2)
        for name in list_hardware():
            hw = load_hardware(name)
            t.add_row(name, hw.description, f"{hw.flops_per_s('bf16') / 1e12:.0f}", f"{hw.hbm_bytes / 1e9:.0f}",
                      f"{hw.hbm_bw_bytes_per_s / 1e12:.2f}", f"{hw.nvlink_bw_bytes_per_s / 1e9:.0f}",
                      str(hw.nvlink_domain_gpus))
        con.print(t)
        return
    from specsim.model import list_models, load_model

    t = _table("model catalog", "name", "params", "active params", "layers", "MoE experts/top-k", "source",
               right_from=1)
    for name in list_models():
        m = load_model(name)
        moe = f"{m.moe.experts}/{m.moe.top_k}" if m.moe else "dense"
        t.add_row(name, _b(m.total_params), _b(m.active_params), str(m.layers), moe, m.source)
    t.columns[-1].justify = "left"
    con.print(t)


# ============================================================================ check
@app.command("check")
@handle_errors
def check(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML.")],
    sets: SetOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Load and resolve a scenario (schema, catalog names, layout fit); print a summary and warnings."""
    from specsim.doctor import check_report
    from specsim.resolve import resolve
    from specsim.runner import check_points

    sc = _load_scenario(scenario, sets)
    world = resolve(sc)
    info = check_report(world, scenario)
    w, d = sc.workload, sc.drafter
    info["sweep_rows"] = sc.rows  # rows the sweep asks for (limit MAX_SWEEP_ROWS)
    info["sweep"] = check_points(sc)  # refuses every point `run` would refuse
    info["warnings"] += info["sweep"].pop("warnings")
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold green]OK[/bold green] {sc.name} ({scenario})")
    t = _table("summary", "item", "value", right_from=2)
    t.add_row("model / hardware", f"{world.model.name} on {world.hw.name}")
    t.add_row("rollout", f"{world.engines} engines × {world.layout.describe()} = {sc.rollout.gpus} GPUs, "
                         f"≤ {world.rollout.max_batch} running sequences each"
                         + ("" if sc.rollout.max_batch else " (vLLM's default max_num_seqs for this GPU)"))
    tr = info["trainer"]
    t.add_row("training", f"{sc.pipeline.mode}: {tr['layout']}, {tr['sharding']}, MFU {tr['mfu']:.3f}")
    t.add_row("trainer, step 0's draw", f"{tr['tokens'] / 1e6:.1f} M tokens: train {tr['train_s']:.1f} s (math "
                                        f"{tr['compute_s']:.1f}, data-parallel exchange {tr['dp_comm_s']:.1f}, "
                                        f"bubble + TP + EP {tr['bubble_tp_ep_s']:.1f}), logprob {tr['logprob_s']:.1f} s")
    t.add_row("KV capacity per engine", f"{world.kv_capacity_tokens:,} tokens "
                                        f"({info['max_length_sequences_in_kv']} max-length sequences)")
    mem = ", ".join(f"{label.replace(' (GB)', '')} {v:.1f}" for label, v in info["memory_gb_per_gpu"].items())
    t.add_row("memory per GPU (GB)", mem)
    t.add_row("workload", f"{w.prompts} prompts × {w.group_size} = {info['responses_per_step']:,} responses/step, "
                          f"max {w.max_response_tokens} tokens")
    t.add_row("drafter", f"{d.kind}, α0 = {info['alpha0']:.3f}, τ = {info['tau_at_k']['tau']:.2f} at k = {d.tau_at_k}")
    if info["tau_over_context"]:
        oc = info["tau_over_context"]
        t.add_row(f"τ at k = {oc['k']} over context", ", ".join(f"{c // 1000}k {v:.2f}" for c, v in oc["tau"].items())
                  + f" (mean α; curve scaled ×{oc['scale']:.3f} so the run reports τ)")
    t.add_row("SD policy", world.policy.label)
    t.add_row("sweep", f"{sc.rows:,} rows (combinations × replicates)")  # rel (#15 row 2)
    con.print(t)
    for msg in info["warnings"]:
        con.print(f"[yellow]warning:[/yellow] {msg}")


@app.command("validate")
@handle_errors
def validate_cmd(
    targets: Annotated[list[str] | None, typer.Argument(help="Target YAML files (default: calibration/targets/*.yaml).")] = None,
    tolerance: Annotated[float | None, typer.Option("--tolerance", help="Override every row's relative tolerance.")] = None,
    out: Annotated[str, typer.Option("--out", help="Folder for validation.csv and validation.md.")] = "results/validation",
    fmt: FormatOpt = Format.table,
) -> None:
    """Run each published target's scenario and print measured vs simulated; exit 1 if any row fails."""
    import pandas as pd

    from specsim.report.atomic import write_csv, write_text
    from specsim.validate import validate

    if tolerance is not None and not tolerance > 0:
        raise _bad_option("--tolerance", tolerance, "a relative tolerance > 0")
    rows = validate(targets, tolerance)
    frame = pd.DataFrame([r.as_dict() for r in rows])
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "validation.csv", frame)
    cols = ["target", "metric", "params", "role", "measured", "simulated", "simulated_se_pct", "error_pct",
            "tolerance_pct", "result"]
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    shown = [r.display() for r in rows]   # rounded for reading; CSV/JSON keep full precision
    md += ["| " + " | ".join(r[c] for c in cols) + " |" for r in shown]
    write_text(folder / "validation.md", "# specsim validate\n\n" + "\n".join(md) + "\n")
    failed = int((frame["result"] != "pass").sum())
    if fmt is Format.json:
        _emit_json({"rows": [r.as_dict() for r in rows], "failed": failed, "out": str(folder)})
    else:
        t = _table("measured vs simulated", *cols, right_from=4)
        for r in shown:
            t.add_row(*(r[c] for c in cols))
        con = _console()
        con.print(t)
        by_role = ", ".join(f"{role} {int((g['result'] == 'pass').sum())} / {len(g)}"
                            for role, g in frame.groupby("role", sort=True))
        con.print(f"{len(frame) - failed} of {len(frame)} rows within tolerance ({by_role}); "
                  f"written to {folder}/validation.csv, .md")
    if failed:
        raise typer.Exit(1)


@app.command("calibrate")
@handle_errors
def calibrate_cmd(
    traces: Annotated[list[str] | None, typer.Argument(help="Trace files (kernel, engine, lengths, stages; CSV or JSONL).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Profile whose efficiency factors are fitted.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model of the traces (default: the traces' column).")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Drafter kind of the SD rows (eagle3, mtp, ...).")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Write the calibrated profile YAML here (--kernels: a folder).")] = None,
    fmt: FormatOpt = Format.table,
    kernels: Annotated[str | None, typer.Option("--kernels", help="Fit to measured kernel tables instead: aiconfigurator.")] = None,
    system: Annotated[str, typer.Option("--system", help="With --kernels: h100_sxm, h200_sxm, b200_sxm, gb200, a100_sxm or all.")] = "all",
    backend: Annotated[str, typer.Option("--backend", help="With --kernels: engine whose kernel tables are fitted.")] = "vllm",
) -> None:
    """Fit a hardware profile's efficiency factors (and acceptance, lengths) to traces."""
    from specsim.calibrate import calibrate

    if kernels is not None:  # measured kernel tables (library: specsim.calibrate.describe)
        from specsim.calibrate.describe import kernel_calibration_info

        info = kernel_calibration_info(kernels, system, backend, out)
        if fmt is Format.json:
            _emit_json(info)
            return
        con = _console()
        for title, key in (("kernel-term fits", "residuals"), ("MoE per-shape fits", "moe_shapes"),
                           ("engine overheads (TPOT)", "overheads"),
                           ("held-out TPOT", "tpot"),
                           ("priced prefill vs measured TTFT (never fitted)", "ttft_bound")):
            recs = info[key]
            if recs:
                t = _table(title, *recs[0].keys())
                for r in recs:
                    t.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()))
                con.print(t)
        for n in info["notes"]:
            con.print(f"note: {n}")
        for sysname, path in info["written"].items():
            con.print(f"{sysname}: wrote {path}")
        return
    if not traces or hardware is None:
        raise _bad_option("--hardware" if traces else "traces", hardware if traces else [],
                          "trace files and --hardware (or --kernels aiconfigurator)")

    report = calibrate(traces, hardware, model=model, out=out, drafter_kind=drafter)
    rows = report.to_rows()
    if fmt is Format.json:
        _emit_json({"rows": rows, "residuals": report.residual_stats(), "out": out})
        return
    t = _table(f"calibration of {hardware}", "parameter", "unit", "prior", "fitted", "status", right_from=2)
    for r in rows:
        t.add_row(*(str(r.get(c, "")) if r.get(c) is not None else "-" for c in ("parameter", "unit", "prior", "fitted", "status")))
    con = _console()
    con.print(report.summary())
    con.print(t)
    if out:
        con.print(f"calibrated profile written to {out}")


# `specsim run` and `specsim show scenario` live in cli_run.py (parsing and printing only)
app.command("run")(cli_run.run)
show_app.command("scenario")(cli_run.show_scenario)


# ============================================================================ entry point
def main() -> None:
    """Console-script entry point (`specsim`, `python -m specsim`)."""
    app()


if __name__ == "__main__":
    main()
