"""Projection plots and inverse answers of a results folder (drawn from the persisted points).

    speedup_vs_scale   SD's E2E speedup (vs the scenario's baseline) against total cluster GPUs,
                       one line per policy lag, 95 % t-intervals over replicates cut at 0 (tables.mean_ci)
    heatmap_k_tau      generation speedup over draft length k × acceptance length (drafter.tau)

Inverse answers (summary.json "inverse", appended to summary.md):
* the acceptance length needed at each k for a target generation speedup (1.25×, 1.5×, 2×):
  linear interpolation along drafter.tau of the mean speedup, the first crossing;
* the GPUs needed for a target step time with and without SD, per policy lag: linear interpolation
  of step time along total GPUs (SD: step_s; without: the baseline's step_s, which is AR when the
  baseline turns SD off). Target: output.capacity.target_step_s, else the AR step time at the
  scenario's own cluster size.
Each answer needs the sweep to cover its axes; otherwise it is absent (never extrapolated).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from specsim import atomic
from specsim.study.report.tables import mean_ci

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TARGET_SPEEDUPS = (1.25, 1.5, 2.0)
LINES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1))]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def _save(fig: Figure, stem: Path, data: pd.DataFrame) -> str:
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(stem.with_suffix(".csv"), data)
    atomic.save_figure(stem.with_suffix(".png"), fig, dpi=110, bbox_inches="tight")
    return str(stem.with_suffix(".png"))


def _mean_ci(df: pd.DataFrame, by: list[str], col: str) -> pd.DataFrame:
    """Per group of `by`: mean, replicate count and the 95 % t-interval of `col`, the summary's
    interval (tables.mean_ci: cut at 0, where every plotted metric lives, so the bars may be
    asymmetric); ci95_lo/ci95_hi are NaN for a single replicate."""
    rows = []
    for key, g in df.groupby(by):
        m = mean_ci(g[col].tolist())
        lo, hi = m["ci95"] if m["ci95"] else (np.nan, np.nan)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "mean": m["mean"],
                     "count": m["n"], "ci95_lo": lo, "ci95_hi": hi})
    return pd.DataFrame(rows)


def _first_crossing(x: np.ndarray, y: np.ndarray, target: float) -> float | None:
    """Smallest x where y (sampled at increasing x) reaches target, linearly interpolated."""
    for i in range(len(x)):
        if y[i] >= target:
            if i == 0:
                return float(x[0])
            return float(x[i - 1] + (target - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))
    return None


def speedup_vs_scale(stem: Path, sc, frame: pd.DataFrame) -> str | None:
    from matplotlib.figure import Figure

    if "total_gpus" not in frame or frame["total_gpus"].nunique() < 2:
        return None
    lag = "policy_lag"
    data = _mean_ci(frame, [lag, "total_gpus"], "e2e_speedup")
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, (L, d) in enumerate(data.groupby(lag)):
        yerr = np.vstack([(d["mean"] - d["ci95_lo"]).fillna(0), (d["ci95_hi"] - d["mean"]).fillna(0)])
        ax.errorbar(d["total_gpus"], d["mean"], yerr=yerr, ls=LINES[i % 5], marker=MARKERS[i % 6],
                    color="0.15", capsize=3, label=f"policy lag {L}")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xlabel("cluster GPUs (generation + training)")
    ax.set_ylabel("E2E speedup of SD vs baseline")
    ax.legend(fontsize=8)
    fig.suptitle(f"{sc.name}: SD speedup against cluster size, per policy lag\n{sc.model} on {sc.hardware_label}",
                 fontsize=9)
    return _save(fig, stem, data.rename(columns={"mean": "e2e_speedup"}))


def heatmap_k_tau(stem: Path, sc, frame: pd.DataFrame) -> str | None:
    from matplotlib.figure import Figure

    if "drafter.tau" not in frame or "k" not in frame or frame["drafter.tau"].nunique() < 2 or frame["k"].nunique() < 2:
        return None
    data = frame.groupby(["drafter.tau", "k"])["generation_speedup"].mean().reset_index()
    grid = data.pivot(index="drafter.tau", columns="k", values="generation_speedup").sort_index()
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(grid.values, origin="lower", aspect="auto", cmap="cividis")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [f"{v:g}" for v in grid.index])
    for (i, j), v in np.ndenumerate(grid.values):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                color="white" if v < np.nanmean(grid.values) else "black")
    ax.set_xlabel("draft length k")
    ax.set_ylabel(f"acceptance length at k = {sc.drafter.tau_at_k} (drafter.tau)")
    fig.colorbar(im, ax=ax, label="generation speedup vs baseline")
    fig.suptitle(f"{sc.name}: generation speedup over k x acceptance length", fontsize=9)
    return _save(fig, stem, data)


def projection_plots(folder: Path, sc, frame: pd.DataFrame) -> dict[str, str]:
    out = {}
    for name, fn in (("speedup_vs_scale", speedup_vs_scale), ("heatmap_k_tau", heatmap_k_tau)):
        path = fn(folder / name, sc, frame)
        if path:
            out[name] = path
    return out


def inverse_answers(sc, frame: pd.DataFrame) -> dict:
    out: dict = {}
    if "drafter.tau" in frame and "k" in frame and frame["drafter.tau"].nunique() >= 2:
        need = {}
        for k, d in frame.groupby("k"):
            m = d.groupby("drafter.tau")["generation_speedup"].mean().sort_index()
            need[str(k)] = {f"{t:g}x": _first_crossing(m.index.values, m.values, t) for t in TARGET_SPEEDUPS}
        out["acceptance_length_needed"] = {"at_k": need, "tau_at_k": sc.drafter.tau_at_k,
                                           "note": "None: not reached within the simulated acceptance lengths"}
    if "total_gpus" in frame and frame["total_gpus"].nunique() >= 2:
        target = sc.output.capacity.target_step_s
        own = sc.rollout.gpus + ((sc.training.gpus or 0) if sc.pipeline.mode == "async" else 0)
        per_lag = {}
        for lag, d in frame.groupby("policy_lag"):
            sd = d.groupby("total_gpus")["step_s"].mean().sort_index()
            ar = d.groupby("total_gpus")["baseline_step_s"].mean().sort_index()
            t = target if target else float(np.interp(own, ar.index.values, ar.values))
            # step time falls with GPUs: the first size where -step reaches -target
            per_lag[str(lag)] = {"target_step_s": t,
                                 "gpus_with_sd": _first_crossing(sd.index.values, -sd.values, -t),
                                 "gpus_without_sd": _first_crossing(ar.index.values, -ar.values, -t),
                                 "smallest_size": float(sd.index.values[0])}
        out["gpus_needed"] = {"per_policy_lag": per_lag,
                              "note": "total GPUs (generation + training); None: not reached within the simulated sizes"}
    return out


def inverse_markdown(inv: dict | None) -> str:
    if not inv:
        return ""
    lines = ["", "## Inverse answers", ""]
    if "acceptance_length_needed" in inv:
        a = inv["acceptance_length_needed"]
        lines += [f"Acceptance length (at k = {a['tau_at_k']}) needed for a target generation speedup:", "",
                  "| k | " + " | ".join(next(iter(a["at_k"].values()))) + " |",
                  "|---|" + "---|" * len(next(iter(a["at_k"].values())))]
        for k, row in a["at_k"].items():
            lines.append(f"| {k} | " + " | ".join("—" if v is None else f"{v:.2f}" for v in row.values()) + " |")
        lines.append("")
    if "gpus_needed" in inv:
        lines += ["GPUs needed (generation + training) for a target step time:", "",
                  "| policy lag | target step s | with SD | without SD |", "|---|---|---|---|"]
        for lag, r in inv["gpus_needed"]["per_policy_lag"].items():
            lo = r.get("smallest_size")
            with_sd, without_sd = (_gpus_text(r[key], lo) for key in ("gpus_with_sd", "gpus_without_sd"))
            lines.append(f"| {lag} | {r['target_step_s']:.1f} | {with_sd} | {without_sd} |")
        lines.append("")
    return "\n".join(lines)


def _gpus_text(gpus, smallest) -> str:
    """GPUs needed as text: not reached, at most the smallest simulated size, or the count."""
    if gpus is None:
        return "not reached"
    return f"≤ {gpus:,.0f} (smallest simulated)" if gpus == smallest else f"{gpus:,.0f}"
