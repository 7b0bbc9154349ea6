"""The report of `specsim project`'s results folder (study/project_folder.py): the plot of the run
step by step, summary.md and report.html.

    projection_steps   six panels over the RL steps, AR and SD each a line with its 95 % band:
                       step time; generation and trainer time; mean response length; τ (SD);
                       trainer idle share; $ (or GPU-hours) per step

summary.md leads with the totals (AR, SD, what SD saves, each with its interval), says in words
how SD's edge moves over the run (the step-time ratio in the first and last tenth, and the first
step from which SD's trainer binds: idle under tables.TRAINER_BOUND_IDLE), lists the warnings and
a digest of the per-step table (about ten rows; per_step.csv has every step).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from specsim import atomic, inputs
from specsim.study.report import html
from specsim.study.report.tables import TRAINER_BOUND_IDLE

__all__ = ["edge_over_run", "project_markdown", "projection_steps_plot", "write_project_report"]

COLORS = {"AR": "0.35", "SD": "#1f5fa8"}
STYLES = {"AR": "--", "SD": "-"}
CAPTION = ("The whole run step by step, AR (dashed) and SD (solid); shaded: the 95 % interval over replicates. "
           "The last step is short: nothing overlaps it.")


def _band(ax, d: pd.DataFrame, col: str, policy: str, label: str | None = None, color=None, style=None) -> None:
    ax.plot(d["step"], d[col], STYLES[policy] if style is None else style, color=color or COLORS[policy], lw=1.4,
            label=label or policy)
    lo, hi = d[f"{col}_lo"].to_numpy(float), d[f"{col}_hi"].to_numpy(float)
    if np.isfinite(lo).any():
        ax.fill_between(d["step"], lo, hi, color=color or COLORS[policy], alpha=0.18, lw=0)


def projection_steps_plot(stem: Path, sc, table: pd.DataFrame, replicates: int) -> str:
    """The per-step table over the run (see the module doc); written as stem.png and stem.csv."""
    from matplotlib.figure import Figure

    money = "usd" if table["usd"].notna().any() else "gpu_h"
    fig = Figure(figsize=(11, 9.5), layout="constrained")
    axes = fig.subplots(3, 2, sharex=True)
    by = {p: d for p, d in table.groupby("policy")}
    ax = axes[0, 0]
    for p in ("AR", "SD"):
        _band(ax, by[p], "step_s", p)
    ax.set_ylabel("step time (s)")
    ax.set_title("step time", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax = axes[0, 1]
    for p in ("AR", "SD"):
        _band(ax, by[p], "generation_s", p, f"{p} generation", color="#c2571a" if p == "SD" else "#e8a87c")
        _band(ax, by[p], "trainer_s", p, f"{p} trainer", color="#2a7d4f" if p == "SD" else "#8fc9a3")
    ax.set_ylabel("seconds in the step")
    ax.set_title("generation and trainer time (async: they overlap)", fontsize=10)
    ax.legend(fontsize=8, loc="best", ncol=2)
    ax = axes[1, 0]
    _band(ax, by["SD"], "mean_response_tokens", "SD", "mean response length (same draws for AR)")
    ax.set_ylabel("tokens")
    ax.set_title("mean response length", fontsize=10)
    ax = axes[1, 1]
    _band(ax, by["SD"], "tau", "SD", "SD")
    ax.set_ylabel("acceptance length τ")
    ax.set_title("acceptance length τ (SD)", fontsize=10)
    ax = axes[2, 0]
    for p in ("AR", "SD"):
        _band(ax, by[p], "trainer_idle_share", p)
    ax.axhline(TRAINER_BOUND_IDLE, color="0.6", lw=0.8, ls=":")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of the step")
    ax.set_title(f"trainer idle, waiting for rollouts (under the dotted {TRAINER_BOUND_IDLE:.0%}: the trainer binds)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax = axes[2, 1]
    for p in ("AR", "SD"):
        _band(ax, by[p], money, p)
    ax.set_ylabel("$ per step" if money == "usd" else "GPU-hours per step")
    ax.set_title("cost per step" + (f" at ${sc.gpu_hour_price():,.2f} per GPU-hour"
                                    if money == "usd" else " (no output.gpu_hour_usd price)"), fontsize=10)
    ax.legend(fontsize=8, loc="best")
    for a in axes[2]:
        a.set_xlabel("RL step")
    for a in axes.flat:
        a.grid(alpha=0.25)
    shade = (f"shaded: 95 % interval over {replicates} replicates" if replicates >= 2
             else "one replicate: no interval")
    fig.suptitle(f"{sc.name}: the whole run with and without SD — {sc.model} on {sc.hardware_label}; {shade}",
                 fontsize=11)
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(stem.with_suffix(".csv"), table)
    atomic.save_figure(stem.with_suffix(".png"), fig, dpi=100)
    return str(stem.with_suffix(".png"))


def edge_over_run(table: pd.DataFrame) -> dict:
    """How SD's edge moves over the run: AR step ÷ SD step averaged over the first and the last
    tenth of the steps (the final step excluded: nothing overlaps it), and the first step from
    which SD's trainer binds for good (idle share under TRAINER_BOUND_IDLE to the end; None if never)."""
    ar = table[table["policy"] == "AR"].set_index("step")
    sd = table[table["policy"] == "SD"].set_index("step")
    steps = sorted(set(ar.index) & set(sd.index))
    body = steps[:-1] if len(steps) > 1 else steps
    tenth = max(len(body) // 10, 1)
    ratio = ar.loc[body, "step_s"] / sd.loc[body, "step_s"]
    idle = sd.loc[steps, "trainer_idle_share"].to_numpy(float)
    bound = None
    for i in range(len(body)):
        if np.all(idle[i:len(body)] < TRAINER_BOUND_IDLE):
            bound = int(steps[i])
            break
    return {"first_tenth_step_ratio": float(ratio.iloc[:tenth].mean()),
            "last_tenth_step_ratio": float(ratio.iloc[-tenth:].mean()), "sd_trainer_bound_from_step": bound}


def _ci(t, d: int = 1) -> str:
    """'m [lo, hi]' to d decimals (small values of a whole-number column get 2), '—' for none."""
    m, lo, hi = t
    if m is None or (isinstance(m, float) and not math.isfinite(m)):
        return "—"
    d = 2 if d == 0 and abs(m) < 100 else d
    return f"{m:,.{d}f}" + ("" if lo is None else f" [{lo:,.{d}f}, {hi:,.{d}f}]")


def project_markdown(summary: dict, table: pd.DataFrame) -> str:
    """summary.md of a projection folder (see the module doc)."""
    p = summary["projection"]
    priced = "gpu_hour_usd" in p
    reps = p["replicates"]
    edge = edge_over_run(table)
    lines = [f"# {p['scenario']}: the whole run with and without SD", "",
             f"{summary['model']} on {summary['hardware']}: {p['steps']} RL steps on {p['gpus']} GPUs, "
             f"{reps} paired replicate{'s' if reps != 1 else ''} (SD and AR on the same draws). "
             + ("Mean [95 % interval]." if reps >= 2 else "One replicate: means, no interval."), ""]
    if summary.get("rollout_weight_dtype"):
        lines += [f"Rollout weights: {summary['rollout_weight_dtype']['source']}.", ""]
    if summary.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in summary["warnings"]] + [""]
    lines += ["## Totals", "", "| | AR | SD | SD saves |", "|---|---|---|---|",
              f"| wall-clock (h) | {_ci(p['ar_wall_h'], 2)} | {_ci(p['sd_wall_h'], 2)} | {_ci(p['saved_wall_h'], 2)} |",
              f"| GPU-hours | {_ci(p['ar_gpu_h'], 0)} | {_ci(p['sd_gpu_h'], 0)} | {_ci(p['saved_gpu_h'], 0)} |"]
    if priced:
        lines.append(f"| $ at ${p['gpu_hour_usd']:,.2f} per GPU-hour | {_ci(p['ar_usd'], 0)} | {_ci(p['sd_usd'], 0)} "
                     f"| {_ci(p['saved_usd'], 0)} |")
    lines += [f"| step, first tenth (s) | {_ci(p['ar_first_step_s'])} | {_ci(p['sd_first_step_s'])} | |",
              f"| step, last tenth (s) | {_ci(p['ar_last_step_s'])} | {_ci(p['sd_last_step_s'])} | |",
              f"| mean τ | | {_ci(p['sd_mean_tau'], 2)} | |", "",
              f"Run speedup (AR wall-clock ÷ SD's, per replicate; a log-scale interval): {_ci(p['run_speedup'], 3)}×.",
              "", "## Over the run", ""]
    bound = edge["sd_trainer_bound_from_step"]
    lines.append(f"SD's step is {edge['first_tenth_step_ratio']:.3f}× faster than AR's over the first tenth of the "
                 f"run and {edge['last_tenth_step_ratio']:.3f}× over the last tenth. "
                 + (f"From step {bound} on, SD's trainer waits less than 10 % of the step for rollouts: the trainer "
                    "binds, and a faster rollout saves almost nothing." if bound is not None
                    else "SD's trainer keeps waiting for rollouts to the end: generation sets the pace throughout."))
    lines += ["", "## Per step (a digest; per_step.csv has every step)", ""]
    money, unit = ("usd", "$") if priced else ("gpu_h", "GPU-h")
    cols = [("step_s", "step s", 1), ("generation_s", "generation s", 1), ("trainer_s", "trainer s", 1),
            ("mean_response_tokens", "length (tokens)", 0), ("tau", "τ", 2), ("trainer_idle_share", "trainer idle", 2),
            (money, unit, 0 if priced else 1)]
    lines += ["| step | policy | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 2) + "|"]
    steps = sorted(table["step"].unique())
    every = max(len(steps) // 10, 1)
    shown = sorted(set(steps[::every]) | {steps[-1]})
    for step in shown:
        for policy in ("AR", "SD"):
            r = table[(table["step"] == step) & (table["policy"] == policy)].iloc[0]
            cells = [_ci((r[c], None if np.isnan(r[f"{c}_lo"]) else r[f"{c}_lo"], r[f"{c}_hi"]), d) for c, _, d in cols]
            lines.append(f"| {step} | {policy} | " + " | ".join(cells) + " |")
    lines += ["", "## Files", "",
              "steps.csv (every step of every run), per_step.csv (per policy and step: mean and 95 % interval), "
              "plots/projection_steps.png (+ .csv), runs/ (each run, reused by a rerun), report.html.", ""]
    return "\n".join(lines)


def write_project_report(out_dir: Path) -> Path:
    """report.html of a projection folder, from the files in it (nothing is recomputed)."""
    out_dir = Path(out_dir)
    summary = inputs.read_json(out_dir / "summary.json", "--out", "results file")
    resolved_text = inputs.read_text(out_dir / "resolved.yaml", "--out", "results file")
    resolved = yaml.safe_load(resolved_text) or {}
    table = inputs.read_csv_frame(out_dir / "per_step.csv", "--out", "results file")
    hashes = inputs.read_json(out_dir / "inputs.json", "--out", "results file")
    run = summary.get("run") or {}
    caveats = list(summary.get("warnings") or [])
    caveats += [c for c in html.caveats(resolved, {}) if not c.startswith("Every speedup")]
    caveats.append("AR and SD see the same drawn lengths and acceptance per replicate (paired); intervals are 95 % "
                   "t-intervals over replicates, cut at 0 for times, lengths and dollars, on the log scale for the "
                   "run speedup (one replicate: none).")
    provenance = {"specsim": summary.get("specsim_version", ""), "created (UTC)": run.get("created_utc", ""),
                  "wall time": f"{float(run.get('wall_s', 0.0)):.1f} s ({run.get('computed_runs', 0)} runs computed, "
                               f"{run.get('reused_runs', 0)} reused; jobs {run.get('jobs', '')})",
                  "seed": summary.get("seed", ""), **{f"input sha256 ({k})": v for k, v in sorted(hashes.items())}}
    page = html.render_page(
        title=f"{summary.get('scenario', '')}: the whole RL run with and without SD",
        lede=f"{summary.get('model', '')} on {summary.get('hardware', '')}. {summary.get('description', '')}",
        caveat_list=caveats, summary_md=inputs.read_text(out_dir / "summary.md", "--out", "results file"),
        plots=html.plots_of(out_dir, summary.get("plots") or {}, {"projection_steps": CAPTION}),
        table=table, rows_note=f"{len(table)} rows of per_step.csv (per policy and RL step).",
        resolved_yaml=resolved_text, provenance=provenance)
    return html.write_page(out_dir, page)
