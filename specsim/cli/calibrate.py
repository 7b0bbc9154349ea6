"""`specsim calibrate traces|kernels|workload|a100-sweep|acceptance|collect`: typer commands that parse
options, call the calibration library (which computes and returns data) and print.

    specsim calibrate traces TRACES... --hardware H [--model M] [--drafter K] [--out FILE]
        a profile's efficiency factors (and acceptance, lengths) fitted to traces
        (:func:`specsim.calibrate.traces.calibrate`)
    specsim calibrate kernels [--source aiconfigurator] [--system S] [--backend B] [--out DIR]
        the profiles' kernel laws and engine overheads fitted to measured kernel tables
        (:func:`specsim.calibrate.kernels.describe.kernel_calibration_info`)
    specsim calibrate workload [--targets F] [--calibration DIR] [--dry-run] [--write-profile] [--max-nfev N]
        a target file's `fit:` block (default: the calibration folder's 8B workloads and trainer
        efficiencies) fitted to the published stage times (:func:`specsim.calibrate.workload.run.run_workload_fit`)
    specsim calibrate a100-sweep [--calibration DIR] [--write-profile]
        a100_sxm's in-situ streaming factor and multi-token attention fitted to EfficientRollout's
        forward-pass sweeps (:func:`specsim.calibrate.kernels.a100_sweep.fit_a100_sweep`)
    specsim calibrate acceptance METRICS [--format json]
        τ and k from a vLLM / SGLang spec-decode metrics file (Prometheus, JSON, log)
        (:func:`specsim.workload.acceptance.engine_metrics.read_acceptance_metrics`)
    specsim calibrate collect --out TRACE [--model M] [--device cuda] [--batches ...] [--tiny] ...
        a kernel trace measured on this machine's GPU (torch; :func:`specsim.calibrate.collect.collector.collect_trace`)

:mod:`specsim.cli.app` adds :data:`calibrate_app` to its app as ``specsim calibrate``. Errors and
shared options come from :mod:`specsim.cli.common`: bad input prints one ``error: ...`` paragraph
and exits 2. The data files a command reads by default are found in the calibration folder of the
working directory or a folder above it (--calibration names another;
:func:`specsim.validate.targets.find_calibration_dir`). The EAGLE-3 acceptance-shape fit is a recipe
beside its data: ``python calibration/recipes/acceptance_shape.py`` (docs/calibration.md).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import typer

from specsim.atomic import output_folder, output_path
from specsim.calibrate.collect.collector import collect_spec, collect_trace
from specsim.calibrate.kernels.a100_sweep import fit_a100_sweep
from specsim.calibrate.kernels.describe import kernel_calibration_info
from specsim.calibrate.traces import calibrate
from specsim.calibrate.workload.run import DEFAULT_TARGETS, run_workload_fit
from specsim.cli import common
from specsim.cli.common import CalibrationOpt, Format, FormatOpt, handle_errors
from specsim.errors import SpecError
from specsim.validate.targets import find_calibration_dir
from specsim.workload.acceptance.engine_metrics import read_acceptance_metrics

# the command bodies' short names for the shared helpers
_bad_option, _console, _emit_json, _table = common.bad_option, common.console, common.emit_json, common.table

__all__ = ["calibrate_app"]

calibrate_app = typer.Typer(
    help="Fit the hardware profiles and workloads to measurements (traces, kernel tables, published stage "
         "times, forward-pass sweeps).",
    no_args_is_help=True, rich_markup_mode=None)


def _say(text: str = "") -> None:
    """Print plain text (no rich markup: the reports hold brackets)."""
    _console().print(text, markup=False, highlight=False, soft_wrap=True)


def _shown(path: str | Path) -> str:
    """`path` relative to the working directory when it lies below it (calibration/..., specsim/...)."""
    p, here = Path(path).resolve(), Path.cwd().resolve()
    return str(p.relative_to(here)) if p.is_relative_to(here) else str(path)


def _found_calibration() -> Path | None:
    """The calibration folder found from the working directory, or None (it is optional there)."""
    try:
        return find_calibration_dir()
    except SpecError:
        return None


# ============================================================================ calibrate traces
@calibrate_app.command("traces")
@handle_errors
def traces_cmd(
    traces: Annotated[list[str] | None, typer.Argument(help="Trace files (kernel, engine, lengths, stages; CSV or JSONL).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Profile whose efficiency factors are fitted.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model of the traces (default: the traces' column).")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Drafter kind of the SD rows (eagle3, mtp, ...).")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Write the calibrated profile YAML here (a new file; "
                                                         "an existing one only with --force).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Fit a hardware profile's efficiency factors (and acceptance, lengths) to traces."""

    if not traces:
        raise _bad_option("traces", [], "one or more trace files (CSV or JSONL)")
    if hardware is None:
        raise _bad_option("--hardware", None, "the profile whose efficiency factors are fitted (specsim list hardware)")
    if out is not None:
        out = str(output_path(out, "--out", folder=False, force=force))   # the one output-path rule
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


# ============================================================================ calibrate kernels
@calibrate_app.command("kernels")
@handle_errors
def kernels_cmd(
    source: Annotated[str, typer.Option("--source", help="Kernel tables fitted: aiconfigurator (aiconfigurator-core).")] = "aiconfigurator",
    system: Annotated[str, typer.Option("--system", help="A profile's kernel-table system (its `kernel_tables.system`, "
                                                      "e.g. h200_sxm) or all.")] = "all",
    backend: Annotated[str, typer.Option("--backend", help="Engine whose kernel tables are fitted.")] = "vllm",
    out: Annotated[str | None, typer.Option("--out", help="Write the fitted profiles into this folder (new, empty "
                                                         "or written by specsim; others only with --force).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty --out folder specsim did not write.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Fit the profiles' kernel laws and engine overheads to measured kernel tables."""

    with contextlib.ExitStack() as stack:
        if out is not None:   # the one output guard (resolved, marked, locked), before any work
            out = str(stack.enter_context(output_folder(out, "--out", force=force)))
        info = kernel_calibration_info(source, system, backend, out)
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


# ============================================================================ calibrate workload
@calibrate_app.command("workload")
@handle_errors
def workload_cmd(
    targets: Annotated[str | None, typer.Option(
        "--targets", help="Target file with a `fit:` block (default: the calibration folder's "
                          "targets/nemo_rl_8b.yaml).")] = None,
    calibration: CalibrationOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Fit and print only; write no scenario.")] = False,
    write_profile: Annotated[bool, typer.Option(
        "--write-profile", help="Also write fitted hardware.* parameters (the SD overheads) into the scenarios' profile.")] = False,
    max_nfev: Annotated[int, typer.Option("--max-nfev", help="Simulations per stage at most (least_squares).")] = 40,
) -> None:
    """Fit a workload's unknowns and trainer efficiencies to published stage times; write them back."""

    if max_nfev < 1:
        raise _bad_option("--max-nfev", max_nfev, ">= 1 simulation per stage")
    # the folder of the defaults: needed without --targets, used to shorten the written command with it
    cal = find_calibration_dir(calibration) if targets is None or calibration is not None else _found_calibration()
    t0 = time.perf_counter()
    run = run_workload_fit(targets or cal / DEFAULT_TARGETS, calibration=cal, dry_run=dry_run,
                           write_profile=write_profile, max_nfev=max_nfev)
    for s in run.result.stages:
        _say(f"\nstage {s.name}: " + (s.skipped or f"{len(s.params)} parameters, {len(s.rows)} rows, "
                                      f"Jacobian rank {s.rank}, {s.nfev} evaluations"))
        for r in s.summary_rows():
            _say(f"  {r['parameter']:24s} prior {r['prior']:<10.4g} fitted {r['fitted']:<10.4g} "
                 f"+- {r['stderr']:<9.3g} {r['status']:8s} {r['unit']}")
        for r in s.rows:
            _say(f"  row {r['target']:26s} measured {r['measured']:<8.4g} prior-sim {r['prior_simulated']:<9.4g} "
                 f"fitted-sim {r['fitted_simulated']:<9.4g} residual {r['residual_pct']:+.1f} %")
    for f in run.written_scenarios:
        _say(f"wrote {f}")
    for prof, done in run.written_profiles.items():
        _say(f"wrote {prof}: {done}")
    if run.hardware_params and not run.written_profiles:
        _say(f"hardware parameters {run.hardware_params} reported only (--write-profile writes them)")
    _say(f"\n{time.perf_counter() - t0:.0f} s")


# ============================================================================ calibrate a100-sweep
@calibrate_app.command("a100-sweep")
@handle_errors
def a100_sweep_cmd(
    write_profile: Annotated[bool, typer.Option(
        "--write-profile", help="Write β, the multi-token, per-block and piecewise-graph attention terms into the a100_sxm profile.")] = False,
    calibration: CalibrationOpt = None,
) -> None:
    """Fit a100_sxm's in-situ streaming factor and multi-token attention to EfficientRollout's A100 sweeps
    (the calibration folder's published/efficientrollout_a100_*.csv)."""

    root = find_calibration_dir(calibration).parent   # the sweeps are read as <root>/calibration/published/...
    fit = fit_a100_sweep(write_profile=write_profile, root=root)
    st, mt = fit.stream, fit.multi_token
    _say(f"a100_sxm in-situ streaming factor: {st.beta:.4f} (before: {st.beta_before:.4f}; "
         f"{st.fit_rows} fit rows of {fit.fit_model}; the other models' rows held out)")
    t = mt.term
    _say(f"a100_sxm multi-token attention: {t.s_per_kv_token * 1e9:.2f} ns per cached token per block, "
         f"co-resident speedup {t.coresident_speedup:.3f} ({mt.fit_rows} verify rows of {fit.fit_model} at "
         f"batch < 8; {t.sms} SMs, {t.tile_rows}-row tiles)")
    _say(f"a100_sxm attention per (sequence, KV head) block: {fit.block.block_s * 1e9:.1f} ns per layer "
         f"({fit.block.fit_rows} decode rows of {fit.fit_model} at batch > 1 without cascade attention)")
    _say(f"a100_sxm piecewise-graph attention: {fit.piecewise.piecewise_attention_s * 1e6:.1f} us per layer "
         f"({fit.piecewise.fit_rows} decode rows of {fit.fit_model} that run cascade attention)\n")
    _say("every row at the four fits (before: without the piecewise term):")
    _say(fit.summary.to_string(index=False, float_format=lambda v: f"{v:+.3f}"))
    for g in fit.grids:
        _say(f"\n{g.model} {g.mode}: priced / measured - 1 (rows: batch, columns: prompt tokens)")
        _say(g.table.to_string(float_format=lambda v: f"{v:+.3f}"))
    _say(f"\nverify / decode, measured and priced: {fit.ratios_within()} of {len(fit.ratios)} within 20 %")
    _say(fit.ratios.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    _say("\ndecode at batch 64 / batch 1, measured and priced:")
    _say(fit.growth.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if fit.written is not None:
        _say(f"\nwrote {_shown(fit.written)}")


# ============================================================================ calibrate collect
@calibrate_app.command("collect")
@handle_errors
def collect_cmd(
    out: Annotated[str, typer.Option("--out", help="Kernel trace to write (.csv or .jsonl).")],
    model: Annotated[str, typer.Option("--model", help="Catalog model (dense models only).")] = "Qwen3-8B",
    device: Annotated[str | None, typer.Option("--device", help="cuda (default when available) or cpu.")] = None,
    batches: Annotated[str | None, typer.Option("--batches", help="Decode/verify/draft batch sizes, e.g. 1,2,4.")] = None,
    contexts: Annotated[str | None, typer.Option("--contexts", help="Cached tokens per sequence.")] = None,
    k: Annotated[str | None, typer.Option("--k", help="Draft lengths k (verify q = k + 1); '' for none.")] = None,
    prompts: Annotated[str | None, typer.Option("--prompts", help="Prefill prompt lengths.")] = None,
    prompt_batches: Annotated[str | None, typer.Option("--prompt-batches", help="Prefill batch sizes.")] = None,
    layers: Annotated[int | None, typer.Option("--layers", help="Time only N layers and scale to the model's L.")] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Timed passes per shape (median).")] = None,
    warmup: Annotated[int | None, typer.Option("--warmup", help="Untimed passes per shape.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Weight/activation/KV dtype: bf16 or fp16.")] = "bf16",
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Skip the EAGLE-3-like draft passes.")] = False,
    no_cuda_graphs: Annotated[bool, typer.Option("--no-cuda-graphs", help="Time eager passes on CUDA.")] = False,
    budget_s: Annotated[float, typer.Option("--budget-s", help="Stop after about this many seconds.")] = 600.0,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Profile name for the trace (default: from the GPU).")] = None,
    tiny: Annotated[bool, typer.Option("--tiny", help="A 2-layer hidden-64 model with small shapes (tests, CPU).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Time a catalog model's forward passes (random weights, torch) into a kernel trace (needs the collect extra)."""

    spec = collect_spec(out=out, model=model, tiny=tiny, device=device, batches=batches, contexts=contexts, k=k,
                        prompts=prompts, prompt_batches=prompt_batches, layers=layers, repeats=repeats, warmup=warmup,
                        dtype=dtype, no_draft=no_draft, no_cuda_graphs=no_cuda_graphs, budget_s=budget_s,
                        hardware=hardware, seed=seed, force=force)
    result = collect_trace(spec, log=_say)
    if result.path is None:
        _say("collect: nothing was measured (all shapes skipped or budget too small); no trace written")
        raise typer.Exit(1)
    _say(f"collect: wrote {result.rows} rows to {result.path}")


# ============================================================================ calibrate acceptance
@calibrate_app.command("acceptance")
@handle_errors
def acceptance_cmd(
    metrics: Annotated[Path, typer.Argument(help="A vLLM or SGLang spec-decode metrics file: a Prometheus scrape of "
                                                 "/metrics, a JSON dump, or the engine's log.")],
    fmt: FormatOpt = Format.table,
) -> None:
    """τ as the engine reports it (1 + accepted / drafts) and its draft length k, for drafter.tau / drafter.tau_at_k
    (or name the file as drafter.tau_from)."""

    m = read_acceptance_metrics(metrics, "METRICS")
    info = {"file": str(metrics), **m.as_dict()}
    if fmt is Format.json:
        _emit_json(info)
        return
    counts = (f" = 1 + {m.accepted_tokens:,.0f} accepted / {m.drafts:,.0f} drafts ({m.draft_tokens:,.0f} draft tokens)"
              if m.drafts else " (the mean of the engine's accept-length values)")
    _say(f"{metrics}: {m.engine} {m.form}: tau = {m.tau:.4f}{counts}")
    _say(f"k = {m.k}" if m.k is not None else "k: not in these metrics (give drafter.tau_at_k yourself)")
    if m.per_position:
        _say("per-position acceptance rate: " + ", ".join(f"{r:.3f}" for r in m.per_position))
    _say(f"scenario: drafter: {{tau_from: {metrics}}}   (or tau: {m.tau:.4f}"
         + (f", tau_at_k: {m.k})" if m.k is not None else ")"))
