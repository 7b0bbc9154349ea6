"""The capacity-planning plots of a results folder. Each is a PNG plus the CSV it was drawn from
(same stem), both written atomically.

    heatmap_e2e_speedup    (a) E2E speedup vs sync AR over k × policy lag, annotated cells; the best boxed,
                           cells tied with it dashed, both in a legend
    speedup_vs_k           (b) at the best SD point's lag: speedup over AR (k = 0) and over sync AR vs k,
                           τ in its own panel (every panel one y-axis)
    sd_gain_by_lag         (f) SD's gain over the best AR configuration at each policy lag, with intervals
    rollout_timeline       (c) active batch and tokens/s over one step's generation, slowest engine, AR vs SD
                           (from timeline.csv, which the run persisted: plots never simulate)
    step_breakdown         (d) stacked stage times, sync AR vs best AR vs best SD, exposed generation marked
    capacity_plan          (e) step time and GPU-hours per 1,000 steps vs rollout GPUs, with/without SD

Grayscale-readable: series differ by line style, marker and hatch, never by colour alone; the
heatmap uses cividis (monotone lightness) and prints every value. Figures are built with
`matplotlib.figure.Figure` (Agg canvas), so importing this module never changes the pyplot
backend of a notebook.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specsim import atomic
from specsim.study.report.tables import capacity_answer, mean_ci, ratio_ci

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STYLE = {"font.size": 10}
HATCH = {"data": "--", "exposed": "////", "reward": "..", "logprob": "\\\\", "train": "", "sync": "xx", "gen_total": "oo"}
#: a generation total longer than this many steps is not drawn as a bar (it would dwarf the step)
GEN_TOTAL_MAX = 1.5
GRAYS = {"data": "1.0", "exposed": "0.25", "reward": "0.95", "logprob": "0.75", "train": "0.55", "sync": "0.88"}


def _title(sc, what: str) -> str:
    tr = f" + {sc.training.gpus} train" if sc.pipeline.mode == "async" else " (colocated)"
    return f"{sc.name}: {what}\n{sc.model} on {sc.rollout.gpus}{tr} {sc.hardware_label} GPUs, {sc.pipeline.mode}"


def _save(fig: Figure, stem: Path, data: pd.DataFrame, *, beyond_figure: bool = False) -> str:
    """The figure's PNG and its data's CSV. Figures are laid out by matplotlib's constrained layout,
    which keeps the axes, their labels and legends inside the figure, so the PNG is the figure as laid
    out; one that puts text below its axes (`beyond_figure`: the step breakdown's notes, the
    capacity plan's answer box) is saved with a tight bounding box, which draws the figure twice
    (once to measure it)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(stem.with_suffix(".csv"), data)
    atomic.save_figure(stem.with_suffix(".png"), fig, dpi=110, **({"bbox_inches": "tight"} if beyond_figure else {}))
    return str(stem.with_suffix(".png"))


def _fig(w: float, h: float, **kw) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(**kw)
    return fig, axes


# ============================================================================ (a) heatmap
def heatmap_e2e_speedup(stem: Path, sc, frame: pd.DataFrame, analysis: dict) -> str | None:
    from matplotlib.patches import Patch, Rectangle

    swept = analysis["swept"]
    if "speculation.k" in swept and "pipeline.policy_lag" in swept:
        xp, yp = "speculation.k", "pipeline.policy_lag"
    elif len(swept) == 2:
        xp, yp = swept
    else:
        return None
    metric = analysis["rank_by"]
    best = analysis["best"]
    sub = frame
    fixed = {p: best["values"][p] for p in swept if p not in (xp, yp)}
    for p, v in fixed.items():
        sub = sub[sub[p] == v]
    data = (sub.groupby([yp, xp], sort=True)[metric].agg(["mean", "count"]).reset_index()
            .rename(columns={"mean": f"{metric}_mean", "count": "replicates"}))
    xs = sorted(data[xp].unique(), key=_sort_key)
    ys = sorted(data[yp].unique(), key=_sort_key)
    grid = np.full((len(ys), len(xs)), np.nan)
    for _, r in data.iterrows():
        grid[ys.index(r[yp]), xs.index(r[xp])] = r[f"{metric}_mean"]
    fig, ax = _fig(max(6.0, 1.2 + 1.0 * len(xs)), 2.2 + 0.7 * len(ys))
    im = ax.imshow(grid, cmap="cividis", origin="lower", aspect="auto")
    lo, hi = np.nanmin(grid), np.nanmax(grid)
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = grid[i, j]
            if not np.isfinite(v):
                continue
            light = (v - lo) / (hi - lo) if hi > lo else 0.5
            ax.text(j, i, f"{v:.3f}×", ha="center", va="center", fontsize=9,
                    color="black" if light > 0.55 else "white")
    bi, bj = ys.index(best["values"].get(yp, ys[0])), xs.index(best["values"].get(xp, xs[0]))
    # one marking for the best: a black box with a white inner line (visible on any cell colour)
    ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, lw=3, ec="black", ls="-"))
    ax.add_patch(Rectangle((bj - 0.43, bi - 0.43), 0.86, 0.86, fill=False, lw=1.2, ec="white", ls="-"))
    tied = tied_with_best(sub, metric, [yp, xp], best["values"].get(yp), best["values"].get(xp))
    data["tied_with_best"] = [bool(tied.get((r[yp], r[xp]), False)) for _, r in data.iterrows()]
    data["best"] = [bool(r[yp] == ys[bi] and r[xp] == xs[bj]) for _, r in data.iterrows()]
    any_tied = False
    for (yv, xv), is_tied in tied.items():
        if is_tied and (yv, xv) != (ys[bi], xs[bj]):
            any_tied = True
            i, j = ys.index(yv), xs.index(xv)
            ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, lw=1.6, ec="black", ls=(0, (2, 2))))
            ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, lw=1.6, ec="white", ls=(2, (2, 2))))
    handles = [Patch(facecolor="white", edgecolor="black", lw=3, label=f"best (ranked by {metric})")]
    if any_tied:
        handles.append(Patch(facecolor="white", edgecolor="black", lw=1.6, ls=(0, (2, 2)),
                             label="tied with the best (the paired 95 %\ninterval of cell ÷ best contains 1)"))
    fig.legend(handles=handles, loc="outside lower center", fontsize=8, frameon=False)
    edge = [n for n, vals, v in ((_axis_label(xp), xs, xs[bj]), (_axis_label(yp), ys, ys[bi]))
            if len(vals) > 1 and v in (vals[0], vals[-1]) and not (n.startswith("draft length") and v == 0)]
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xlabel(_axis_label(xp))
    ax.set_ylabel(_axis_label(yp))
    ref = "sync AR on the same GPUs" if metric == "e2e_speedup_vs_sync_ar" else "each point's baseline"
    extra = ("; " + ", ".join(f"{k}={v}" for k, v in fixed.items())) if fixed else ""
    reps = int(data["replicates"].max()) if len(data) else 1
    mean = f"mean of {reps} replicates; " if reps > 1 else ""
    edge_note = f"\nbest on the grid's edge ({', '.join(edge)}): the optimum may lie beyond it" if edge else ""
    ax.set_title(_title(sc, f"steady E2E speedup vs {ref} (×){extra}\n{mean.rstrip('; ')}{edge_note}"),
                 fontsize=9)
    fig.colorbar(im, ax=ax, label="E2E speedup (×)")
    return _save(fig, stem, data)


def tied_with_best(frame: pd.DataFrame, metric: str, keys: list[str], by, bx) -> dict:
    """Per cell (its `keys` values): is it statistically tied with the best cell (by, bx) — the
    95 % t-interval of cell ÷ best, paired over replicates, contains 1? Needs ≥ 2 common replicates."""
    best = frame[(frame[keys[0]] == by) & (frame[keys[1]] == bx)].set_index("replicate")[metric]
    out = {}
    for cell, g in frame.groupby(keys, sort=True):
        x = g.set_index("replicate")[metric]
        common = sorted(set(x.index) & set(best.index))
        m = ratio_ci([float(x[r]) / float(best[r]) for r in common])
        out[tuple(cell)] = bool(m["ci95"] is not None and m["ci95"][0] <= 1.0 <= m["ci95"][1])
    return out


def _sort_key(v):
    return (0, float(v)) if isinstance(v, (int, float, np.integer, np.floating)) else (1, str(v))


def _axis_label(path: str) -> str:
    return {"speculation.k": "draft length k (0 = AR)", "pipeline.policy_lag": "policy lag (versions)",
            "rollout.gpus": "rollout GPUs", "speculation.max_batch": "SD batch threshold (sequences)"}.get(path, path)


# ============================================================================ (b) speedup vs k
def _interval_stats(df: pd.DataFrame, col: str) -> pd.DataFrame:
    """Per k: mean and the 95 % interval over replicates (NaN with one replicate): log-scale for a
    speedup (tables.ratio_ci), cut at 0 for τ."""
    rows = []
    for k, g in df.groupby("k", sort=True):
        m = mean_ci(g[col].astype(float)) if col == "tau" else ratio_ci(g[col].astype(float).tolist())
        lo, hi = (m["ci95"] or [np.nan, np.nan])
        rows.append({"k": k, f"{col}": m["mean"], f"{col}_lo": lo, f"{col}_hi": hi, f"{col}_n": m["n"]})
    return pd.DataFrame(rows)


def speedup_vs_k(stem: Path, sc, frame: pd.DataFrame, analysis: dict) -> str | None:
    """Three panels at the best SD point's other swept values (its policy lag), each on one y-axis:
    generation and E2E speedup over AR (k = 0) in the same configuration; E2E speedup over sync AR
    on the same GPUs; τ. Error bars: 95 % intervals over paired replicates (log-scale for the
    speedups, tables.ratio_ci; none with one replicate)."""
    if "speculation.k" not in analysis["swept"]:
        return None
    best = analysis["best_sd"] or analysis["best"]
    others = {p: best["values"][p] for p in analysis["swept"] if p != "speculation.k"}
    vs = analysis.get("vs_k0")
    if vs is not None:
        left, gen_col, e2e_col, ref = vs, "generation_speedup_vs_k0", "e2e_speedup_vs_k0", "AR (k = 0), same config"
    else:
        left, gen_col, e2e_col, ref = frame, "generation_speedup", "e2e_speedup", "the baseline"
    sub, fr = left, frame
    for p, v in others.items():
        sub = sub[sub[p] == v]
        fr = fr[fr[p] == v]
    if sub.empty:
        return None
    data = _interval_stats(sub, gen_col).merge(_interval_stats(sub, e2e_col), on="k") \
        .merge(_interval_stats(fr, "e2e_speedup_vs_sync_ar"), on="k", how="left") \
        .merge(_interval_stats(fr, "tau"), on="k", how="left")
    fig, (ax, axr, axt) = _fig(13.5, 4.6, ncols=3)

    def line(a, col, **kw):
        y = data[col].to_numpy(float)
        err = np.vstack([y - data[f"{col}_lo"].to_numpy(float), data[f"{col}_hi"].to_numpy(float) - y])
        a.errorbar(data["k"], y, yerr=None if np.all(np.isnan(err)) else err, capsize=3, **kw)

    line(ax, gen_col, ls="-", marker="o", ms=8, mfc="white", color="black", label="generation speedup")
    line(ax, e2e_col, ls="--", marker="s", ms=4, color="0.3", label="E2E speedup")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_ylabel(f"speedup over {ref} (×)")
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    ax.set_title(f"baseline: {ref}", fontsize=9)
    if data["e2e_speedup_vs_sync_ar"].notna().any():
        line(axr, "e2e_speedup_vs_sync_ar", ls=":", marker="^", color="black", label="E2E speedup vs sync AR")
        axr.axhline(1.0, color="0.6", lw=0.8)
        axr.set_ylabel("E2E speedup over sync AR, same GPUs (×)")
        axr.set_title("baseline: sync AR on the same GPUs", fontsize=9)
    else:
        axr.set_axis_off()
    tau = data[data["k"] > 0]
    yt = tau["tau"].to_numpy(float)
    et = np.vstack([yt - tau["tau_lo"].to_numpy(float), tau["tau_hi"].to_numpy(float) - yt])
    axt.errorbar(tau["k"], yt, yerr=None if np.all(np.isnan(et)) else et, capsize=3, ls="-.", marker="D",
                 mfc="white", color="0.3")
    axt.plot(tau["k"], tau["k"] + 1, ls=":", color="0.6", lw=0.8, label="k + 1: every draft accepted")
    axt.set_ylim(bottom=1.0)
    axt.set_ylabel("τ, mean tokens per verify step")
    axt.set_title("acceptance length τ (SD points)", fontsize=9)
    axt.legend(fontsize=8, loc="upper left", framealpha=0.9)
    for a in (ax, axr, axt):
        a.set_xticks(list(data["k"]))
        a.set_xlabel("draft length k (0 = AR)")
    fixed = ", ".join(f"{k}={v}" for k, v in others.items())
    reps = int(data[f"{gen_col}_n"].max()) if len(data) else 1
    bars = "; bars: 95 % intervals over paired replicates" if reps > 1 else "; one replicate: no intervals"
    fig.suptitle(_title(sc, "speedup vs draft length" + (f" ({fixed})" if fixed else "") + bars), fontsize=9)
    return _save(fig, stem, data)


# ============================================================================ (c) rollout timeline
def rollout_timeline(stem: Path, sc, data: pd.DataFrame) -> str | None:
    """From timeline.csv (specsim/study/timeline.py): AR and SD on the same draws, one engine."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if data is None or data.empty:
        return None
    info: dict[str, Any] = {"engine": data["engine"].iloc[0], "step": int(data["step"].iloc[0])}
    for label in ("AR", "SD"):
        d = data[data["variant"] == label]
        info[f"{label}_policy"] = d["policy"].iloc[0] if len(d) else label
        info[f"{label}_rollout_s"] = float(d["rollout_s"].iloc[0]) if len(d) else float("nan")
    fig = Figure(figsize=(7.6, 6.4), layout="constrained")
    a1, a2, a3 = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [1.0, 1.0, 0.45]})
    styles = {"AR": {"ls": "--", "color": "black", "lw": 1.3}, "SD": {"ls": "-", "color": "0.35", "lw": 1.6}}
    sd = data[data["variant"] == "SD"]
    # intervals of the SD run with k > 0 (shaded in every panel)
    t, k = sd["t_s"].to_numpy(), sd["k"].to_numpy()
    ks = sorted({int(x) for x in k if x > 0})
    spans = []
    for i in range(len(t) - 1):
        if k[i] > 0:
            if spans and abs(spans[-1][1] - t[i]) < 1e-12:
                spans[-1][1] = t[i + 1]
            else:
                spans.append([t[i], t[i + 1]])
    for ax in (a1, a2, a3):
        for s0, s1 in spans:
            ax.axvspan(s0, s1, facecolor="0.92", edgecolor="none", lw=0, zorder=0)
    for label in ("AR", "SD"):
        d = data[data["variant"] == label]
        name = f"{label}: {info[f'{label}_policy']} ({info[f'{label}_rollout_s']:.0f} s)"
        a1.step(d["t_s"], d["active"], where="post", label=name, **styles[label])
        a2.step(d["t_s"], d["tokens_per_s"], where="post", label=name, **styles[label])
    a3.fill_between(sd["t_s"], sd["k"], step="post", facecolor="0.6", edgecolor="black", hatch="///", lw=0.8)
    a3.set_ylabel("SD draft\nlength k")
    a3.set_ylim(0, max(ks + [1]) + 0.5)
    a3.set_yticks(sorted(set([0] + ks)))
    a1.set_ylabel("active sequences (batch)")
    a2.set_ylabel("tokens/s (engine)")
    a3.set_xlabel("time since generation start (s)")
    a1.set_ylim(bottom=0)
    a2.set_ylim(bottom=0)
    handles, labels = a1.get_legend_handles_labels()
    if spans:
        handles.append(Patch(facecolor="0.92", edgecolor="0.7", label=f"SD run speculating (k = {', '.join(map(str, ks))})"))
        labels.append(handles[-1].get_label())
    a1.legend(handles, labels, fontsize=8, loc="upper right", framealpha=0.9)
    a1.set_title(_title(sc, f"rollout timeline of {info['engine']} (slowest under AR), RL step {info['step']}"),
                 fontsize=9)
    return _save(fig, stem, data)


# ============================================================================ (d) step breakdown
def step_breakdown(stem: Path, sc, bars: list[dict]) -> str | None:
    if not bars:
        return None
    data = pd.DataFrame(bars)
    fig, ax = _fig(1.6 + 2.0 * len(bars), 4.8)
    x = np.arange(len(bars))
    parts = [("data_s", "data loading", "data"), ("exposed_generation_s", "exposed generation", "exposed"),
             ("reward_s", "reward", "reward"),
             ("logprob_s", "logprob", "logprob"), ("train_s", "train (fwd+bwd)", "train"),
             ("sync_s", "weight sync + drafter update", "sync")]
    bottom = np.zeros(len(bars))
    for col, label, key in parts:
        h = data[col].to_numpy(float)
        ax.bar(x, h, 0.5, bottom=bottom, color=GRAYS[key], hatch=HATCH[key], edgecolor="black", lw=0.8, label=label)
        bottom += h
    # generation latency beyond the step (async: it overlaps the steps in flight) is not drawn as a bar that
    # dwarfs the step; such bars get a note instead
    gen = data["generation_s"].to_numpy(float)
    shown = gen <= GEN_TOTAL_MAX * data["step_s"].to_numpy(float)
    if shown.any():
        ax.bar(x[shown] - 0.33, gen[shown], 0.1, color="white", edgecolor="black", hatch=HATCH["gen_total"], lw=0.8,
               label="generation, total (part may be hidden behind training)")
    data["generation_total_drawn"] = shown
    marks = "*†‡§"
    notes = []
    for i, b in enumerate(bars):
        mark = ""
        if not shown[i]:
            mark = marks[len(notes) % len(marks)]
            notes.append(f"{mark} {b['label'].splitlines()[0]}: generation latency {b['generation_s']:.0f} s, "
                         "longer than the step: it overlaps the steps in flight (async)")
        ax.text(x[i], bottom[i] * 1.01, f"step {b['step_s']:.0f} s{mark}", ha="center", va="bottom", fontsize=8)
        if b["exposed_generation_s"] >= 0.5:   # a trainer that never waits has nothing to label
            ax.text(x[i] + 0.27, b["data_s"] + b["exposed_generation_s"] / 2,
                    f"{b['exposed_generation_s']:.0f} s\nexposed", ha="left", va="center", fontsize=7)
    ax.set_xticks(x, [b["label"] for b in bars], fontsize=8)
    ax.set_xlim(-0.7, len(bars) - 0.2)
    ax.set_ylabel("steady-state time per RL step (s)")
    ax.set_ylim(0, max(bottom.max(), float(np.max(gen[shown], initial=0.0))) * 1.45)
    ax.legend(fontsize=7, loc="upper center", ncol=2, framealpha=0.9)
    if notes:
        fig.text(0.01, 0.0, "\n".join(notes), ha="left", va="top", fontsize=7.5)
    ax.set_title(_title(sc, "RL step time breakdown"), fontsize=9)
    return _save(fig, stem, data, beyond_figure=bool(notes))


def breakdown_bars(plan, analysis: dict, frame: pd.DataFrame, runs: dict) -> list[dict]:
    """sync AR (the reference), the best AR point and the best SD point, means over replicates."""
    bars = []
    best_sd, best_ar = analysis["best_sd"], analysis["best_ar"]
    ref = best_sd or analysis["best"]

    def from_steady(items: list[dict], label: str) -> dict:
        df = pd.DataFrame(items)
        m = df.mean(numeric_only=True)
        return {"label": label, "generation_s": m["generation_s"], "exposed_generation_s": m["exposed_generation_s"],
                "data_s": m["data_s"],
                "reward_s": m["reward_s"], "logprob_s": m["logprob_s"], "train_s": m["train_s"],
                "sync_s": m["weight_sync_s"] + m["drafter_update_s"], "weight_sync_s": m["weight_sync_s"],
                "drafter_update_s": m["drafter_update_s"], "step_s": m["step_s"]}

    if ref is not None:
        sync_keys = {plan.runs_of[pid].sync_ar for pid in ref["point_ids"]}
        steadies = [runs[k]["steady"] for k in sorted(sync_keys) if "steady" in runs.get(k, {})]
        if steadies:
            bars.append(from_steady(steadies, f"sync AR\n{_gpus_of(runs, min(sync_keys))}"))
    for e, what in ((best_ar, "best AR"), (best_sd, "best SD")):
        if e is None:
            continue
        rows = frame[frame["point"] == e["point"]].to_dict(orient="records")
        if bars and what == "best AR" and all(r["mode"] == "sync" for r in rows) and \
                all(plan.runs_of[r["point_id"]].point == plan.runs_of[r["point_id"]].sync_ar for r in rows):
            continue   # the best AR point is sync AR itself
        vals = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in e["values"].items())
        bars.append(from_steady(rows, f"{what}\n{e['sd_policy']}\n{vals}"))
    return bars


def _gpus_of(runs: dict, key: str) -> str:
    m = runs.get(key, {}).get("meta", {})
    return f"{m.get('total_gpus', '?')} GPUs, {m.get('mode', '')}"


# ============================================================================ (e) capacity plan
def capacity_plan(stem: Path, sc, capacity: dict) -> str | None:
    from matplotlib.ticker import FuncFormatter

    rows = [r for r in capacity["rows"] if r["step_s"] is not None]
    if not rows:
        return None
    ci = lambda r, i: r["step_s_ci95"][i] if r.get("step_s_ci95") else None
    data = pd.DataFrame([{**{k: v for k, v in r.items() if k not in ("step_s_ci95", "step_s_by_replicate")},
                          "step_s_ci95_lo": ci(r, 0), "step_s_ci95_hi": ci(r, 1)} for r in capacity["rows"]])
    fig, (a1, a2) = _fig(10.5, 4.4, ncols=2)
    styles = {"ar": {"ls": "--", "marker": "s", "color": "black", "mfc": "white", "label": "without SD (AR)"},
              "sd": {"ls": "-", "marker": "o", "color": "0.35", "label": f"with SD (k = {capacity['k']})"}}
    for v in ("ar", "sd"):
        d = sorted([r for r in rows if r["variant"] == v], key=lambda r: r["rollout_gpus"])
        if not d:
            continue
        n = [r["rollout_gpus"] for r in d]
        a1.plot(n, [r["step_s"] for r in d], **styles[v])
        if any(r.get("step_s_ci95") for r in d):   # the replicates' 95 % interval of the mean step
            lo = [r["step_s"] - (ci(r, 0) if ci(r, 0) is not None else r["step_s"]) for r in d]
            hi = [(ci(r, 1) if ci(r, 1) is not None else r["step_s"]) - r["step_s"] for r in d]
            a1.errorbar(n, [r["step_s"] for r in d], yerr=[lo, hi], fmt="none", ecolor=styles[v]["color"],
                        elinewidth=0.8, capsize=3)
        a2.plot(n, [r["gpu_hours_per_1000_steps"] for r in d], **styles[v])
    target = capacity.get("target_step_s")
    sizes = capacity["sizes"]
    lines = []
    if target:
        src = " (AR at this size)" if capacity.get("target_source", "").startswith("AR step") else ""
        a1.axhline(target, ls=":", color="0.4", lw=1.2, label=f"target {target:.0f} s{src}")

        ranged = False
        for v in ("ar", "sd"):
            m = capacity["minimum"].get(v)
            if m and m.get("simulated"):
                a1.axvline(m["simulated"], ls=(0, (1, 3)) if v == "sd" else (0, (5, 5)), color="0.5", lw=1)
            if m is not None:
                short = capacity_answer(m, sizes, reason=False)
                ranged |= short != capacity_answer(m, sizes)
                lines.append(f"{'with SD' if v == 'sd' else 'without SD'}: {short}" + (" *" if short != capacity_answer(m, sizes) else ""))
        if ranged:
            lines.append("* a range, not a count: the 95 % step-time\n  intervals straddle the target")
    if lines:   # below the axes: a box inside them would sit on the curves
        a1.text(0.0, -0.2, "min rollout GPUs for the target\n" + "\n".join(lines), transform=a1.transAxes,
                ha="left", va="top", fontsize=8, bbox={"boxstyle": "round", "fc": "white", "ec": "0.5"})
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel(f"rollout GPUs ({sc.rollout_hardware}; engines of {capacity['gpus_per_engine']})")
        ax.grid(True, ls=":", color="0.8")
    a1.set_ylabel("steady step time (s)")
    a2.set_ylabel("GPU-hours per 1,000 RL steps (all GPUs)")
    a1.legend(fontsize=8, loc="lower left", framealpha=0.9)
    a2.legend(fontsize=8, loc="best", framealpha=0.9)
    a1.set_ylim(0, a1.get_ylim()[1] * 1.05)
    a2.set_ylim(bottom=0)
    a2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    fig.suptitle(_title(sc, "capacity plan: rollout cluster size"), fontsize=9)
    return _save(fig, stem, data, beyond_figure=bool(lines))


# ============================================================================ (f) SD's gain by lag
def sd_gain_by_lag(stem: Path, sc, frame: pd.DataFrame, analysis: dict) -> str | None:
    """What a planner asks first: at each policy lag, how much faster is the best SD configuration
    at that lag than the best AR configuration of the whole sweep (and than AR at the same lag)?
    The gain is the AR step ÷ the SD step, paired per replicate, with its log-scale 95 % interval
    (tables.ratio_ci). Needs a swept policy lag and both AR and SD points."""
    lag = "pipeline.policy_lag"
    best_ar, rank = analysis.get("best_ar"), analysis["rank_by"]
    if lag not in analysis["swept"] or best_ar is None or "sd_policy" not in frame:
        return None
    is_ar = frame["k"] == 0
    ar_best = frame[frame["point"] == best_ar["point"]].set_index("replicate")["step_s"]
    rows = []
    for L, g in frame.groupby(lag, sort=True):
        sd, ar = g[~is_ar.loc[g.index]], g[is_ar.loc[g.index]]
        if sd.empty:
            continue
        # the best SD point at this lag by the run's ranking metric (mean over replicates)
        pt = sd.groupby("point")[rank].mean().idxmax()
        sd_step = sd[sd["point"] == pt].set_index("replicate")["step_s"]
        row = {"policy_lag": L, "sd_point": int(pt), "best_ar_point": int(best_ar["point"])}
        for name, ref in (("vs_best_ar", ar_best), ("vs_ar_same_lag",
                                                    ar[ar["point"] == ar.groupby("point")[rank].mean().idxmax()]
                                                    .set_index("replicate")["step_s"] if not ar.empty else None)):
            if ref is None:
                row.update({name: np.nan, f"{name}_lo": np.nan, f"{name}_hi": np.nan})
                continue
            common = sorted(set(ref.index) & set(sd_step.index))
            m = ratio_ci([float(ref[r]) / float(sd_step[r]) for r in common])
            lo, hi = m["ci95"] or (np.nan, np.nan)
            row.update({name: m["mean"], f"{name}_lo": lo, f"{name}_hi": hi, "replicates": m["n"]})
        rows.append(row)
    if not rows:
        return None
    data = pd.DataFrame(rows)
    fig, ax = _fig(6.8, 4.4)
    for col, dx, kw in (("vs_best_ar", -0.04, {"ls": "-", "marker": "o", "ms": 7, "color": "black",
                                    "label": f"vs the best AR configuration (point #{best_ar['point']})"}),
                        ("vs_ar_same_lag", 0.04, {"ls": "--", "marker": "s", "ms": 5, "mfc": "white", "color": "0.4",
                                                  "label": "vs AR at the same lag"})):
        y = data[col].to_numpy(float)
        if np.all(np.isnan(y)):
            continue
        err = np.vstack([y - data[f"{col}_lo"].to_numpy(float), data[f"{col}_hi"].to_numpy(float) - y])
        ax.errorbar(data["policy_lag"] + dx, y, yerr=None if np.all(np.isnan(err)) else err, capsize=3, **kw)
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.text(0.0, 1.0, " no gain", transform=ax.get_yaxis_transform(), ha="left", va="top", fontsize=7, color="0.45")
    ax.set_xticks(list(data["policy_lag"]))
    ax.set_xlabel("policy lag (versions)")
    ax.set_ylabel("SD gain: AR step ÷ SD step (×)")
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    reps = int(data["replicates"].max()) if "replicates" in data else 1
    bars = f"bars: 95 % intervals (log scale) over {reps} paired replicates" if reps > 1 else "one replicate: no intervals"
    ax.set_title(_title(sc, f"SD's gain over the best AR at each policy lag (the best SD point per lag)\n{bars}"),
                 fontsize=9)
    return _save(fig, stem, data)


# ============================================================================ all
def sweep_plots(folder: Path, sc, plan, analysis: dict, frame: pd.DataFrame, runs: dict,
                timeline: pd.DataFrame | None) -> dict[str, str]:
    """Every plot drawn from the sweep alone (all but the capacity plan's), from the run's persisted
    data (points, stored runs, timeline.csv); simulates nothing. Returns {name: png path}."""
    out: dict[str, str] = {}

    def add(name, path):
        if path:
            out[name] = path

    add("heatmap_e2e_speedup", heatmap_e2e_speedup(folder / "heatmap_e2e_speedup", sc, frame, analysis))
    add("speedup_vs_k", speedup_vs_k(folder / "speedup_vs_k", sc, frame, analysis))
    add("sd_gain_by_lag", sd_gain_by_lag(folder / "sd_gain_by_lag", sc, frame, analysis))
    add("rollout_timeline", rollout_timeline(folder / "rollout_timeline", sc, timeline))
    add("step_breakdown", step_breakdown(folder / "step_breakdown", sc, breakdown_bars(plan, analysis, frame, runs)))
    return out
